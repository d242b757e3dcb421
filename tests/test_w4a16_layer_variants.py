"""benchmarks/w4a16_layer.py's variants on the bucket tiles they cannot run (the H200 run of 2026-12-06 logged them as
failures): ``swap_ab`` takes the portable decode and MMA tiles of ``BLOCK_M`` <= 32 only, ``portable`` no Gluon GEMV
bucket; such points are skipped with the reason."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import w4a16_layer as W  # noqa: E402

from moe_select.backends import triton_moe_kernels as K  # noqa: E402


def _core():
    table = {"1": {"BLOCK_M": 1, "gemm1": {"GEMV": True, "GLUON": True}, "gemm2": {"GEMV": True, "GLUON": True}},
             "32": {"BLOCK_M": 16, "gemm1": {"BLOCK_N": 64}, "gemm2": {"BLOCK_N": 64}},
             "256": {"BLOCK_M": 64, "gemm1": {"BLOCK_N": 128}, "gemm2": {"BLOCK_N": 128}}}
    core = SimpleNamespace(_table=json.loads(json.dumps(table)), fp4_asm=True, spec=None)
    core.config_for = lambda t: core._table[K.token_bucket(t, tuple(sorted(core._table)))]
    return core


def test_swap_ab_only_on_small_mma_tiles_with_the_portable_decode():
    core, saved = _core(), {}
    W.set_variant(core, "swap_ab", saved)
    assert core.fp4_asm is False
    assert core._table[32]["gemm1"].get("SWAP_AB") and core._table[32]["gemm2"].get("SWAP_AB")
    assert "SWAP_AB" not in core._table[1]["gemm1"] and "SWAP_AB" not in core._table[256]["gemm1"]
    assert W.not_applicable(core, "swap_ab", 32) is None
    assert "GEMV" in W.not_applicable(core, "swap_ab", 1)
    assert "BLOCK_M above 32" in W.not_applicable(core, "swap_ab", 256)
    W.set_variant(core, "default", saved)     # restored
    assert core.fp4_asm is True and "SWAP_AB" not in core._table[32]["gemm1"]


def test_portable_skips_the_gluon_gemv_bucket_only():
    core, saved = _core(), {}
    W.set_variant(core, "portable", saved)
    assert core.fp4_asm is False
    assert "Gluon GEMV" in W.not_applicable(core, "portable", 1)
    assert W.not_applicable(core, "portable", 32) is None and W.not_applicable(core, "portable", 256) is None
    assert W.not_applicable(core, "default", 1) is None


def test_prefetch_sets_the_mma_tiles_only():
    core, saved = _core(), {}
    core._table["8"] = {"BLOCK_M": 1, "DIRECT": True, "gemm1": {"GEMV": True}, "gemm2": {"GEMV": True}}
    saved.clear()
    W.set_variant(core, "prefetch", saved)
    assert core._table[32]["gemm1"]["PREFETCH"] and core._table[256]["gemm2"]["PREFETCH"]
    assert "PREFETCH" not in core._table[1]["gemm1"] and "PREFETCH" not in core._table[8]["gemm2"]
    assert W.not_applicable(core, "prefetch", 32) is None and W.not_applicable(core, "prefetch", 256) is None
    assert "GEMV tiles" in W.not_applicable(core, "prefetch", 1)
    W.set_variant(core, "default", saved)
    assert "PREFETCH" not in core._table[32]["gemm1"]
