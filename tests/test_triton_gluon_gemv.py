"""The Gluon GEMV of the ``triton`` runner's packed-FP4 layers (issue 24, 1 token): backends/triton_moe_gluon.py, run
by a GEMV config with ``"GLUON": true`` at ``BLOCK_M`` 1 (its float32 sums into the split-K workspace, then
``_moe_gemm_kernel``'s reduction launch runs the epilogue).

How the tests run: Gluon has no CPU interpreter, so on the CPU the kernel is compiled for sm90 (Triton and its
ptxas, no GPU) at the four issue-24 checkpoints' real shapes, and the tile-file key and the refusals are checked; on
a GPU (``-m gpu``) the four layers run with it at 1, 2 and 8 tokens against the float64 reference (the one tolerance
table's bf16 value, ``formats.tolerance``), against the ``tl`` GEMV (the same products, another float32 summation
order: relative difference at most 1e-3 of the output's norm), on an expert-parallel rank, and a CUDA graph's replay
(fresh inputs copied in) equal to eager; fresh random inputs with the seed in every message.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_triton_moe as tbase  # noqa: E402  (its ptxas probe)
import test_triton_w4a16 as base  # noqa: E402  (the FP4 test helpers: layers, routing, reference check)


ROOT = Path(__file__).resolve().parents[1]
_K, _tm = base._K, base._tm


def _gluon():
    if not base.HAS_TRITON:
        pytest.skip("triton not installed")
    pytest.importorskip("triton.experimental.gluon")
    from moe_select.backends import triton_moe_gluon

    return triton_moe_gluon


def _cfg(n_w: int = 4, rows: int = 2, **over) -> dict:
    return {"BLOCK_N": n_w * rows, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": n_w, "num_stages": 1, "GEMV": True,
            "GLUON": True, **over}


# --- CPU: the sm90 compile --------------------------------------------------------------------------------------

@pytest.mark.parametrize("model", list(base.REAL))
def test_gluon_gemv_compiles_for_sm90_without_barriers_or_spills(model):
    """Both GEMMs of each checkpoint's layer (the first gathering its A rows): no CTA barrier, no spill, 16-byte weight
    loads (two rows x each unrolled K step), at most 168 registers (DeepSeek-V3 first GEMM: 7 steps unrolled, 160)."""
    if not tbase._ptxas_runs():
        pytest.skip("needs triton's bundled ptxas (and triton imported without TRITON_INTERPRET)")
    G = _gluon()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from sass_loop import compile_sm90

    e, k, h, i, _ = base.REAL[model]
    fmt = base.REAL_FORMATS[model]
    meta = torch.device("meta")
    w_mode, (g, cb) = (6, (1, 16)) if fmt == "mxfp4" else (7, (2, 8))
    group = 32 if fmt == "mxfp4" else 16
    for n, kk, gather in ((2 * i, h, True), (h, i, False)):
        kb = kk // 2
        rows = 64
        args = (torch.empty(e, n, kb, dtype=torch.uint8, device=meta), torch.empty(e, n, kk // group, dtype=torch.uint8,
                                                                               device=meta),
                torch.empty(rows, kb, dtype=torch.int32, device=meta), torch.empty(rows, dtype=torch.int32, device=meta),
                torch.empty(rows, dtype=torch.int32, device=meta), torch.empty(1, dtype=torch.int32, device=meta),
                torch.empty(1, rows, n, dtype=torch.float32, device=meta), rows, k, n, kb, n * kb, kb, n * (kk // group),
                kk // group, kb, n)
        kw = dict(A_GATHER=gather, R=2, NW=4, G=g, CB=cb, K_STEPS=-(-kb // G.STEP_BYTES), W_MODE=w_mode, num_warps=4)
        c = compile_sm90(G._fp4_gemv_ws, args, kw)
        ptx = c["ptx"]
        what = (model, n, kk, c["regs"], c["spill"])
        assert ptx.count("bar.sync") + ptx.count("barrier.sync") == 0, what
        assert c["spill"] == 0 and c["regs"] <= 168, what
        assert ptx.count("ld.global.v4") >= 2 * kw["K_STEPS"], what


# --- CPU: the tile-file key and the refusals ---------------------------------------------------------------------

def test_gluon_key_in_tile_files(tmp_path):
    """GLUON is read at BLOCK_M 1 in a GEMV config; refused with SPLIT_K, PREFETCH, outside GEMV, in DIRECT buckets,
    at another BLOCK_M, with a BLOCK_N that is not 1, 2 or 4 rows per thread, or not a boolean: each naming the
    file and the field."""
    if not base.HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()

    def load(bucket: dict, name: str = "f.json") -> dict:
        p = tmp_path / name
        p.write_text(json.dumps({"format_version": 1, "key": {"format": "mxfp4"}, "configs": {"1": bucket}}))
        K.load_config_file.cache_clear()
        return K.load_config_file(str(p))

    ok = load({"BLOCK_M": 1, "gemm1": _cfg(), "gemm2": _cfg(2, 4)})
    assert ok[1]["gemm1"]["GLUON"] is True and ok[1]["gemm2"]["BLOCK_N"] == 8
    assert "GLUON" not in load({"BLOCK_M": 1, "gemm1": _cfg(GLUON=False, BLOCK_N=64), "gemm2": _cfg()}, "g.json")[1]["gemm1"]
    bad = [({"BLOCK_M": 1, "gemm1": _cfg(SPLIT_K=2), "gemm2": _cfg()}, r"gemm1: GLUON .* without SPLIT_K or PREFETCH"),
           ({"BLOCK_M": 1, "gemm1": _cfg(PREFETCH=True), "gemm2": _cfg()}, r"gemm1: GLUON .* without SPLIT_K"),
           ({"BLOCK_M": 1, "gemm1": _cfg(GEMV=False), "gemm2": _cfg()}, r"gemm1: GLUON .*sorted GEMV mode"),
           ({"BLOCK_M": 1, "DIRECT": True, "gemm1": _cfg(), "gemm2": _cfg()}, r"not of DIRECT buckets"),
           ({"BLOCK_M": 2, "gemm1": _cfg(), "gemm2": _cfg()}, r"gemm1: GLUON \(the Gluon GEMV\) needs BLOCK_M 1, got 2"),
           ({"BLOCK_M": 1, "gemm1": _cfg(4, 8), "gemm2": _cfg()}, r"gemm1: GLUON needs BLOCK_N = num_warps x 1, 2 or 4"),
           ({"BLOCK_M": 1, "gemm1": _cfg(), "gemm2": _cfg(GLUON=1)}, r"gemm2: GLUON must be true or false")]
    for n, (bucket, msg) in enumerate(bad):
        with pytest.raises(ValueError, match=msg) as info:
            load(bucket, f"bad{n}.json")
        assert f"bad{n}.json: configs['1']" in str(info.value)


def test_gluon_buckets_under_the_portable_decode_and_bad_operands(tmp_path):
    """A core with the portable decode runs a GLUON bucket's GEMMs on the tl GEMV's own tiles (gemv_config) and its
    config source says which tokens and why (a GPU test found fp4_decode='portable' refused for gpt-oss on the H200
    once its tuned file had a GLUON bucket); the launcher refuses operands it cannot read (K / 2 bytes not a multiple
    of 16, a BLOCK_M above 1, fp16 A)."""
    G = _gluon()
    K = _K()
    spec = base.spec_of("mxfp4", "silu", h=1024, i=384)
    name = K.config_file_name(spec.num_local_experts, spec.w13_rows, spec.hidden_size, "mxfp4", "meta")
    (tmp_path / name).write_text(json.dumps({"format_version": 1, "key": {"format": "mxfp4"},
                                             "configs": {"1": {"BLOCK_M": 1, "gemm1": _cfg(), "gemm2": _cfg()}}}))
    K.load_config_file.cache_clear()
    port = _tm().TritonMoeCore(spec, "meta", config_dir=str(tmp_path), fp4_decode="portable")
    assert port.config_source.startswith(f"{name} (tokens [1]: GLUON buckets run the tl GEMV of gemv_config: the "
                                         "portable decode"), port.config_source
    want = K.gemv_config(spec.num_local_experts, spec.w13_rows, spec.hidden_size, "mxfp4", 1, spec.top_k, spec.gated)
    assert port.config_for(1) == {"BLOCK_M": 1, "gemm1": want["gemm1"], "gemm2": want["gemm2"]}
    if not K.interpreting():
        core = _tm().TritonMoeCore(spec, "meta", config_dir=str(tmp_path))
        assert core.config_for(1)["gemm1"]["GLUON"] is True
    with pytest.raises(ValueError, match="K / 2 = 40 bytes per row is not a multiple of 16"):
        G.check_config(80, 6, _cfg())
    with pytest.raises(ValueError, match="not weight mode 3"):
        G.check_config(128, 3, _cfg())
    meta = torch.device("meta")
    align = K.Alignment(*(torch.empty(8, dtype=torch.int32, device=meta) for _ in range(3)), 8, 4, 2, 8)
    b = torch.empty(2, 16, 64, dtype=torch.uint8, device=meta)
    s = torch.empty(2, 16, 4, dtype=torch.uint8, device=meta)
    ws = torch.empty(1, 8, 16, dtype=torch.float32, device=meta)
    with pytest.raises(ValueError, match="GLUON runs at BLOCK_M 1"):
        G.fp4_gemv_partials(torch.empty(4, 128, dtype=torch.bfloat16, device=meta), b, s, ws, align, top_k=2, n_rows=16,
                            gather=True, w_mode=6, config=_cfg())
    align1 = K.Alignment(*(torch.empty(8, dtype=torch.int32, device=meta) for _ in range(3)), 8, 8, 1, 8)
    with pytest.raises(ValueError, match="GLUON reads A as bf16 pairs"):
        G.fp4_gemv_partials(torch.empty(4, 128, dtype=torch.float16, device=meta), b, s, ws, align1, top_k=2,
                            n_rows=16, gather=True, w_mode=6, config=_cfg())


# --- GPU ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model", list(base.REAL))
@base.gpu_test
def test_gpu_gluon_gemv_real_layers(model):
    """Each checkpoint's layer at its real shape with GLUON in both GEMMs (2 rows x 4 warps, and 1 row x 8 warps for
    the second): within tolerance of the float64 reference at 1, 2 and 8 tokens, within 1e-3 of the ``tl`` GEMV,
    and a CUDA graph's replay with fresh inputs equal to eager."""
    _gluon()
    K = _K()
    e, k, h, i, act = base.REAL[model]
    spec, layer, seed = base.gpu_layer(base.REAL_FORMATS[model], act, e=e, k=k, h=h, i=i)
    core, pw = base.core_for(spec, layer, "cuda", warmup=False)
    ref_core, rpw = base.core_for(spec, layer, "cuda", warmup=False)
    table = {b: {"BLOCK_M": 1, "gemm1": _cfg(), "gemm2": _cfg(8, 1)} for b in K.TOKEN_BUCKETS}
    core._table = table
    tl_gemv = {**K.gemv_config(e, spec.w13_rows, h, spec.quant, 1, k, spec.gated), "BLOCK_M": 1}
    ref_core._table = {b: tl_gemv for b in K.TOKEN_BUCKETS}     # the tl GEMV at BLOCK_M 1 (its own tiles)
    for t in (1, 2, 8):
        what = f"{model}, {t} tokens, {core.config_for(t)}"
        x, ids, w = base.routing(spec, t, seed + t, "cuda", minus_one=False)
        out = core.forward(x, ids, w, pw)
        base.check(spec, layer, x, ids, w, out, what, seed)
        tl_out = ref_core.forward(x, ids, w, rpw).float()
        diff = ((out.float() - tl_out).norm() / tl_out.norm()).item()
        assert diff <= 1e-3, f"{what}: {diff:.2e} from the tl GEMV (seed {seed})"
        base.graph_replays_equal_eager(spec, layer, core, pw, t, seed + 10 * t, what)


@pytest.mark.parametrize("quant", base.FP4)
@base.gpu_test
def test_gpu_gluon_gemv_expert_parallel_rank(quant):
    """An EP rank (2 of 4, slots of other ranks' experts and -1 ids in the routing) with GLUON: within tolerance of
    the reference over this rank's experts."""
    _gluon()
    K = _K()
    spec, layer, seed = base.gpu_layer(quant, "silu", e=32, k=4, h=1024, i=384, ep=4, rank=2)
    core, pw = base.core_for(spec, layer, "cuda", warmup=False)
    core._table = {b: {"BLOCK_M": 1, "gemm1": _cfg(), "gemm2": _cfg()} for b in K.TOKEN_BUCKETS}
    for t in (1, 5):
        x, ids, w = base.routing(spec, t, seed + t, "cuda", minus_one=True)
        out = core.forward(x, ids, w, pw)
        base.check(spec, layer, x, ids, w, out, f"{quant} ep rank 2 of 4, {t} tokens", seed)
