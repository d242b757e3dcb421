"""benchmarks/gluon_gemm_probe.py (a Gluon Hopper grouped GEMM over the MoE sort's blocks, issue 26) without a GPU.

Every config its ``--gpu`` mode runs is compiled for sm90 (Triton and its bundled ptxas, ``sass_loop.compile_sm90``) at
the real GEMM shapes of Qwen3-30B-A3B and Qwen3-235B-A22B, bf16 and fp8_channel: it compiles, the main loop is wgmma
(``wgmma.mma_async`` in the PTX, HGMMA / QGMMA in the SASS), A and B come in by TMA (``cp.async.bulk.tensor`` loads,
UTMALDG) and C leaves by TMA (UTMASTG), nothing spills, the shared memory fits an sm90 CTA, and the ``WS`` configs are
warp-specialized (``setmaxnreg`` between the partitions; 4 more warps). The GPU mode's correctness check (the float64
reference on sampled blocks of the sort) is exercised here on a torch emulation of the kernel's output.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_triton_moe as base  # noqa: E402  (its ptxas probe: triton imported without the interpreter)


def _probe():
    if not base.HAS_TRITON:
        pytest.skip("triton not installed")
    pytest.importorskip("triton.experimental.gluon")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gluon_gemm_probe as probe

    return probe


@pytest.mark.parametrize("fmt", ["bf16", "fp8_channel"])
@pytest.mark.parametrize("model", ["Qwen3-30B-A3B", "Qwen3-235B-A22B"])
def test_every_gpu_config_compiles_for_sm90_to_a_tma_wgmma_loop_without_spills(model, fmt):
    if not base._ptxas_runs():
        pytest.skip("needs triton's bundled ptxas (and triton imported without TRITON_INTERPRET)")
    probe = _probe()
    for gemm, n, k in probe.shapes(model):
        for c in probe.CONFIGS:
            cfg = probe.config(c[0])
            r = probe.compile_point(cfg, fmt, n, k)
            what = (model, fmt, gemm, r)
            assert r["spill"] == 0 and r["regs"] <= 255, what
            assert r["wgmma"] > 0 and r["hgmma_sass"] > 0, what
            assert r["tma_load"] >= 2 and r["utmaldg_sass"] >= 2, what        # the A and the B tile
            assert r["tma_store"] >= cfg["EPI_SPLIT"] and r["utmastg_sass"] >= cfg["EPI_SPLIT"], what
            assert r["shared"] <= probe.SMEM_LIMIT, what
            ring = cfg["STAGES"] * (probe.BLOCK_M + cfg["BLOCK_N"]) * probe.block_k(fmt) * (1 if fmt != "bf16" else 2)
            assert r["shared"] >= ring + probe.BLOCK_M * cfg["BLOCK_N"] * 2 // cfg["EPI_SPLIT"], what
            if cfg["WS"]:      # a producer partition: registers moved between the warpgroups, one more warpgroup
                assert r["setmaxnreg"] > 0 and r["num_warps"] == cfg["num_warps"] + 4, what
            else:
                assert r["setmaxnreg"] == 0 and r["num_warps"] == cfg["num_warps"], what


def test_configs_cover_the_asked_grid_and_refuse_what_tma_cannot_read():
    """BLOCK_N 128 / 256 x STAGES 3 / 4 x WS off / on are all in CONFIGS; the launcher refuses K off the BLOCK_K grid,
    N off the BLOCK_N grid, mixed dtypes and an M_pad off the 128-row blocks."""
    probe = _probe()
    grid = {(c[1], c[2], c[3]) for c in probe.CONFIGS}
    assert {(bn, st, ws) for bn in (128, 256) for st in (3, 4) for ws in (False, True)} <= grid
    meta = torch.device("meta")
    cfg = probe.config("n256_s3")

    def refused(a, b, c):
        with pytest.raises(ValueError):
            probe.check_operands(a, b, c, cfg)
    bf = torch.bfloat16
    refused(torch.empty(256, 96, dtype=bf, device=meta), torch.empty(2, 256, 96, dtype=bf, device=meta),
            torch.empty(256, 256, dtype=bf, device=meta))
    refused(torch.empty(256, 128, dtype=bf, device=meta), torch.empty(2, 384, 128, dtype=bf, device=meta),
            torch.empty(256, 384, dtype=bf, device=meta))
    refused(torch.empty(256, 128, dtype=bf, device=meta),
            torch.empty(2, 256, 128, dtype=torch.float8_e4m3fn, device=meta), torch.empty(256, 256, dtype=bf, device=meta))
    refused(torch.empty(200, 128, dtype=bf, device=meta), torch.empty(2, 256, 128, dtype=bf, device=meta),
            torch.empty(200, 256, dtype=bf, device=meta))
    probe.check_operands(torch.empty(256, 128, dtype=bf, device=meta), torch.empty(2, 256, 128, dtype=bf, device=meta),
                         torch.empty(256, 256, dtype=bf, device=meta), cfg)


def _sort(ids: torch.Tensor, e: int, block_m: int):
    """The sort's buffers as ``moe_align`` lays them out (slots grouped by expert in blocks of ``block_m`` rows, padding
    rows hold the sentinel ``S``, ``block_expert`` -1 past the end), written here in Python."""
    s = ids.numel()
    flat = ids.flatten()
    rows, blocks = [], []
    for x in range(e):
        sl = (flat == x).nonzero().flatten().tolist()
        if sl:
            nb = -(-len(sl) // block_m)
            rows += sl + [s] * (nb * block_m - len(sl))
            blocks += [x] * nb
    m_pad = (len(blocks) + 3) * block_m
    slots = torch.full((m_pad,), s, dtype=torch.int32)
    slots[:len(rows)] = torch.tensor(rows, dtype=torch.int32)
    be = torch.full((m_pad // block_m,), -1, dtype=torch.int32)
    be[:len(blocks)] = torch.tensor(blocks, dtype=torch.int32)
    return slots, be, len(rows)


@pytest.mark.parametrize("fp8", [False, True])
def test_reference_check_passes_the_kernels_definition_and_catches_a_wrong_tile(fp8):
    """The GPU mode's check on a torch emulation of what the kernel stores (per valid block: A_sorted x W[e]^T, scaled,
    bf16): below the tolerance, and each sorted row equals its token's product with its expert's weights; one block
    computed with another expert's weights, or a tile left unwritten (NaN), fails it."""
    probe = _probe()
    g = torch.Generator().manual_seed(0)
    e, top_k, t, h, n = 8, 2, 300, 256, 128
    ids = torch.stack([torch.randperm(e, generator=g)[:top_k] for _ in range(t)]).int()
    s = t * top_k
    slots, be, num_rows = _sort(ids, e, probe.BLOCK_M)
    x = torch.randn(t, h, generator=g).to(torch.bfloat16)
    xq, xs = probe.quant_rows(x) if fp8 else (x, None)
    idx = torch.div(slots.clamp(max=s - 1), top_k, rounding_mode="floor")
    a = xq[idx]
    a_s = xs[idx] if fp8 else None
    w = torch.randn(e, n, h, generator=g).to(torch.float8_e4m3fn if fp8 else torch.bfloat16)
    w_s = torch.rand(e, n, generator=g) + 0.5 if fp8 else None
    nb = num_rows // probe.BLOCK_M

    def emulate(wrong_block: int = -1) -> torch.Tensor:
        c = torch.full((slots.numel(), n), float("nan"), dtype=torch.bfloat16)
        for blk in range(nb):
            ex = int(be[blk]) if blk != wrong_block else (int(be[blk]) + 1) % e
            r = slice(blk * probe.BLOCK_M, (blk + 1) * probe.BLOCK_M)
            acc = a[r].float() @ w[ex].float().t()
            if fp8:
                acc = acc * a_s[r][:, None] * w_s[ex][None, :]
            c[r] = acc.to(torch.bfloat16)
        return c

    c = emulate()
    chk = probe.reference_check(c, a, w, a_s, w_s, slots, be, num_rows, s, nb, torch.Generator().manual_seed(1))
    assert chk["rel_err"] < probe.TOL["fp8_channel" if fp8 else "bf16"] and chk["nan_rows"] == 0, chk
    for r in range(num_rows):
        slot = int(slots[r])
        if slot < s:
            tok, ex = slot // top_k, int(ids.flatten()[slot])
            ref = xq[tok].double() * (xs[tok].double() if fp8 else 1) @ (
                w[ex].double() * (w_s[ex].double()[:, None] if fp8 else 1)).t()
            assert float((c[r].double() - ref).abs().max() / ref.abs().max()) < 1e-2, r
    bad = probe.reference_check(emulate(1), a, w, a_s, w_s, slots, be, num_rows, s, nb, torch.Generator().manual_seed(1))
    assert bad["rel_err"] > 0.1, bad
    c[probe.BLOCK_M:probe.BLOCK_M + 3, 64:] = float("nan")
    holed = probe.reference_check(c, a, w, a_s, w_s, slots, be, num_rows, s, 0, torch.Generator().manual_seed(1))
    assert holed["nan_rows"] == 3, holed
