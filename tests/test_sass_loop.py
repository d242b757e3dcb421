"""benchmarks/sass_loop.py: the main loop of the triton runner's GEMMs read from their sm90 SASS, without a GPU."""
from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("sass_loop", ROOT / "benchmarks" / "sass_loop.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tools_run() -> bool:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return False
    try:
        import triton
    except ImportError:
        return False
    b = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    try:
        return all(subprocess.run([str(b / t), "--version"], capture_output=True).returncode == 0
                   for t in ("ptxas", "nvdisasm"))
    except OSError:
        return False


def test_the_loop_is_the_k_loop_of_each_gemm():
    """At 32 tokens on Qwen3-30B-A3B (bf16, BLOCK_M 16: mma.sync) each GEMM's loop holds its tensor-core instructions:
    one HMMA m16n8k16 per 16 x 8 x 16 step of the tile a warp computes, so BLOCK_N x BLOCK_K / (8 x 16 x warps) of
    them; an 8-bit weight format (fp8_channel) counts weights per thread the same way, with the budget halved."""
    if not _tools_run():
        pytest.skip("needs triton's bundled ptxas and nvdisasm (and triton imported without TRITON_INTERPRET)")
    m = _module()
    rows = m.profile("Qwen3-30B-A3B", "bf16", 32)
    assert [r["gemm"] for r in rows] == [1, 2]
    for r in rows:
        c = r["config"]
        warps = c["num_warps"]
        gated = 2 if r["gemm"] == 1 else 1
        assert r["opcodes"].get("HMMA") == gated * c["BLOCK_N"] * c["BLOCK_K"] // (8 * 16 * warps), r
        assert r["weights_per_thread"] == gated * c["BLOCK_N"] * c["BLOCK_K"] / (32 * warps)
        assert 0 < r["per_weight"] < r["budget_per_weight"] == 16.0
    fp8 = m.profile("Qwen3-30B-A3B", "fp8_channel", 32)
    assert all(r["budget_per_weight"] == 8.0 and r["loop_instructions"] > 0 for r in fp8)


def test_split_k_gemv_tiles_give_two_gemms_not_their_reduction():
    """A GEMV tile with SPLIT_K launches a reduction after each split GEMM (SPLIT_MODE 2: no weights, no main loop of
    weights): the profile lists the two GEMMs only, each with the config of its own GEMM (this raised KeyError
    'gemm3' before), and their loops are the PTX decode's (funnel shifts: SHF) without tensor-core instructions."""
    if not _tools_run():
        pytest.skip("needs triton's bundled ptxas and nvdisasm (and triton imported without TRITON_INTERPRET)")
    m = _module()
    g1 = {"BLOCK_N": 16, "BLOCK_K": 256, "GROUP_M": 1, "num_warps": 4, "num_stages": 3, "GEMV": True, "SPLIT_K": 2}
    g2 = {"BLOCK_N": 32, "BLOCK_K": 256, "GROUP_M": 1, "num_warps": 4, "num_stages": 3, "GEMV": True}
    rows = m.profile("gpt-oss-20b", "mxfp4", 1, {"BLOCK_M": 1, "gemm1": g1, "gemm2": g2})
    assert [r["gemm"] for r in rows] == [1, 2]
    assert rows[0]["config"] == g1 and rows[1]["config"] == g2
    for r in rows:
        assert r["opcodes"].get("SHF", 0) > 0 and not r["opcodes"].get("HMMA"), r["opcodes"]
        assert r["budget_per_weight"] == 4.0


def test_an_fp8_block_tile_within_one_weight_block_scales_with_one_ffma_per_element():
    """fp8_block's first GEMM at DeepSeek-V3's shape (8192 tokens, split: one accumulator over gate and up rows),
    BLOCK_M 128 x BLOCK_N 128 on 8 warps: the tile lies in one 128-row weight block, so each K step adds its scaled
    partial sum with one FFMA per accumulator element (64 per thread), the per-row factor ``sa * sb`` taking one
    FMUL per row a thread holds, and no shared-memory round trip for the row scales. At BLOCK_N 256 (two weight
    blocks per tile) the per-column scales cost one FMUL more per element and the row scales go through shared
    memory (STS, then LDS) every K step."""
    if not _tools_run():
        pytest.skip("needs triton's bundled ptxas and nvdisasm (and triton imported without TRITON_INTERPRET)")
    m = _module()
    g = {"BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    one = m.profile("DeepSeek-V3", "fp8_block", 8192, {"BLOCK_M": 128, "gemm1": {**g, "BLOCK_N": 128, "SPLIT": True},
                                                       "gemm2": {**g, "BLOCK_N": 128}})[0]
    ops = one["opcodes"]
    assert one["spill"] == 0 and ops.get("QGMMA") == 4 * 128 * 128 // (64 * 128 * 2), ops   # 64x128x32 per warpgroup
    assert ops.get("FFMA") == 128 * 128 // 256 and ops.get("FMUL", 0) <= 2, ops
    assert not ops.get("STS"), ops           # (ptxas pads with predicated-off ``@!PT LDS RZ, [RZ]``: LDS not counted)
    two = m.profile("DeepSeek-V3", "fp8_block", 8192, {"BLOCK_M": 64, "gemm1": {**g, "BLOCK_N": 256, "SPLIT": True},
                                                       "gemm2": {**g, "BLOCK_N": 256}})[0]["opcodes"]
    assert two.get("FMUL", 0) >= 64 and two.get("STS", 0) > 0, two
