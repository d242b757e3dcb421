"""The GEMV mode of the ``triton`` runner's packed-FP4 (W4A16) GEMMs (issue 24, the 1-token target):
backends/triton_moe_kernels.py ``_moe_gemm_kernel`` with ``GEMV`` (no ``tl.dot``: each K tile's weights decoded by
``_fp4_tile`` in registers, ``sum_k w[n, k] * a[m, k]`` in float32 for each real row of a block of 1-16 rows), its
split-K (``SPLIT_K`` programs per output tile writing float32 partials, then a reduction launch that runs the
epilogue), ``default_config``'s choice of it, and the config-file key.

How the tests run: as tests/test_triton_w4a16.py (whose helpers, reference and interpreter worker this file
reuses): Triton's CPU interpreter at tiny shapes (the portable decode), the float64 reference
(moe_select.reference.reference_moe on reference_dequantize's weights), the one tolerance table's bf16 value
(``formats.tolerance("bf16", "bfloat16")``: 1.56e-2), fresh random inputs with the seed in every message
(``MOE_SELECT_TEST_SEED`` replays it); an sm90 compile (Triton and its ptxas, no GPU) of the GEMV kernels at the
four checkpoints' real shapes; GPU tests (``-m gpu``) at real shapes with the PTX decode and CUDA-graph replay.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_triton_w4a16 as base  # noqa: E402  (the FP4 test helpers: layers, routing, reference check, worker)

from moe_select.layer import LayerSpec  # noqa: E402

FP4 = base.FP4
_K, _tm = base._K, base._tm
spec_of, routing, check, core_for, Fp4Layer, fresh_seed = (base.spec_of, base.routing, base.check, base.core_for,
                                                           base.Fp4Layer, base.fresh_seed)


class _Worker(base._Worker):
    """This file's interpreter worker (tests/test_triton_w4a16.py's design, running this file)."""

    proc = None
    log = None
    script = Path(__file__).resolve()


def interp(fn):
    return base.interp(fn, _Worker)


@pytest.fixture(scope="module", autouse=True)
def _stop_worker():
    yield
    _Worker.stop()


def _gemv_table(core, block_m: int, **over) -> dict:
    """Every bucket of ``core`` set to the GEMV mode at ``block_m`` rows per block (gemv_config's GEMM configs, with
    ``over`` applied to both GEMMs). Returns the config."""
    s = core.spec
    c = _K().gemv_config(s.num_local_experts, s.w13_rows, s.hidden_size, s.quant, 1, s.top_k, s.gated)
    c = {"BLOCK_M": block_m, "gemm1": {**c["gemm1"], **over}, "gemm2": {**c["gemm2"], **over}}
    for g in ("gemm1", "gemm2"):
        if c[g].get("SPLIT_K", 1) == 1:
            c[g].pop("SPLIT_K", None)
    core._table = {b: json.loads(json.dumps(c)) for b in core._table}
    return c


# --- interpreter: the GEMV mode against the float64 reference ----------------------------------------------------

@pytest.mark.parametrize("act", ["silu", "relu2", "swiglu_oai"])
@pytest.mark.parametrize("quant", FP4)
@interp
def test_gemv_matches_the_reference(quant, act):
    """1, 2 and 3 tokens (``BLOCK_M`` 1, 2 and 4: the default's ``min(4, pow2(T))``, so padding rows at 3 tokens),
    split-K off and on (2 splits of 32-deep K tiles; 4 splits over 2 K tiles at 3 tokens: two splits get no tile and
    write zeros), gated (silu; swiglu_oai with a clamping limit of 2.5 and gpt-oss's expert biases) and not
    (relu2), one slot -1 at 3 tokens; against the float64 reference."""
    seed = fresh_seed()
    spec = spec_of(quant, act, limit=2.5 if act == "swiglu_oai" else None)
    layer = Fp4Layer(spec, seed)
    core, pw = core_for(spec, layer)
    for t, bm, split in ((1, 1, 1), (2, 2, 2), (3, 4, 4), (3, 4, 1)):
        cfg = _gemv_table(core, bm, BLOCK_K=32, SPLIT_K=split)
        assert core.config_for(t) == cfg
        x, ids, w = routing(spec, t, seed + t)
        check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), f"GEMV, {t} tokens, BLOCK_M {bm}, SPLIT_K {split}",
              seed)


@pytest.mark.parametrize("case", ["ep_rank", "weight_on_input", "masked_k", "block_m_16", "fp16_input"])
@interp
def test_gemv_options_and_edges(case):
    """EP (rank 1 of 2: an expert offset, the other rank's ids skipped); llama4's routing weight on the input (the
    first GEMM's epilogue); K not a multiple of BLOCK_K (masked loads: H 96 with BLOCK_K 64, split in two); GEMV
    at ``BLOCK_M`` 16 (most rows padding, skipped); an fp16 input (computed in bf16, returned in fp16)."""
    seed = fresh_seed()
    quant = FP4[seed % 2]
    kw = {"ep": 2, "rank": 1} if case == "ep_rank" else {}
    h = 96 if case == "masked_k" and quant == "mxfp4" else 64
    i = 48 if case == "masked_k" and quant == "nvfp4" else 64
    spec = spec_of(quant, "silu", h=h, i=i, k=1 if case == "weight_on_input" else 2, **kw)
    layer = Fp4Layer(spec, seed)
    core, pw = core_for(spec, layer, apply_router_weight_on_input=case == "weight_on_input")
    over = {"BLOCK_K": 64, "SPLIT_K": 2} if case == "masked_k" else {"SPLIT_K": 2} if case == "ep_rank" else {}
    _gemv_table(core, 16 if case == "block_m_16" else 4, **over)
    dtype = torch.float16 if case == "fp16_input" else torch.bfloat16
    x, ids, w = routing(spec, 3, seed, dtype=dtype)
    if case == "ep_rank":                        # one token on an expert of each rank
        assert spec.expert_offset == 4 and spec.num_local_experts == 4
        ids[0] = torch.tensor([1, 6], dtype=ids.dtype)
    out = core.forward(x, ids, w, pw)
    check(spec, layer, x, ids, w, out, f"GEMV {case} ({quant})", seed, on_input=case == "weight_on_input")


@interp
def test_default_is_mma_at_one_token_and_a_gemv_file_runs():
    """A core's default at 1 token is the MMA tile (GEMV is opt-in until measured on a GPU); a config file with GEMV
    tiles (a split first GEMM) is read by a core and run, within tolerance of the reference."""
    seed = fresh_seed()
    spec = spec_of("mxfp4", "swiglu_oai", limit=7.0)
    layer = Fp4Layer(spec, seed)
    core, pw = core_for(spec, layer)
    cfg = core.config_for(1)
    assert cfg["BLOCK_M"] >= 16 and not cfg["gemm1"].get("GEMV") and not cfg["gemm2"].get("GEMV"), cfg
    x, ids, w = routing(spec, 1, seed)
    check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), "default at 1 token", seed)
    g = {"BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 2, "num_stages": 2, "GEMV": True}
    table = {"1": {"BLOCK_M": 2, "gemm1": {**g, "SPLIT_K": 2}, "gemm2": g},
             "64": {"BLOCK_M": 16, "gemm1": {**g, "GEMV": False, "BLOCK_N": 32}, "gemm2": {**g, "GEMV": False, "BLOCK_N": 32}}}
    name = _K().config_file_name(8, spec.w13_rows, 64, "mxfp4", "cpu")
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / name).write_text(json.dumps({"format_version": 1, "key": {"format": "mxfp4"}, "configs": table}))
        core, pw = core_for(spec, layer, config_dir=d)
        assert core.config_source == name and core.config_for(2)["gemm1"] == {**g, "SPLIT_K": 2}, core.config_for(2)
        for t in (2, 40):
            x, ids, w = routing(spec, t, seed + t)
            check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), f"GEMV file, {t} tokens", seed)


# --- configurations (no kernels) ----------------------------------------------------------------------------------

def test_default_config_chooses_gemv_at_few_rows_per_expert():
    """With gemv=True (opt-in until measured on a GPU), FP4 at up to 2 mean rows per expert: GEMV with BLOCK_M
    min(4, pow2(T)); above, or for other formats, the MMA tiles; the default (gemv=False) is the MMA tiles everywhere;
    split-K where the programs are few (gpt-oss-20b at 1 token: 90 column tiles x 4 experts, split 2), each split
    keeping K tiles; K tiles dividing K where a power of two >= 32 does."""
    if not base.HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()
    for (e, n13, h, fmt, k) in ((32, 5760, 2880, "mxfp4", 4), (128, 5760, 2880, "mxfp4", 4), (128, 1536, 2048, "nvfp4", 8),
                                (256, 4096, 7168, "nvfp4", 8), (128, 1536, 2048, "bf16", 8)):
        for t in K.TOKEN_BUCKETS:
            c = K.default_config(e, n13, h, fmt, t, k, gemv=True)
            assert K.default_config(e, n13, h, fmt, t, k)["BLOCK_M"] >= 16
            gemv = fmt in FP4 and t * k / e <= K.GEMV_MAX_ROWS_PER_EXPERT
            assert bool(c["gemm1"].get("GEMV")) == gemv and bool(c["gemm2"].get("GEMV")) == gemv, (fmt, e, t, c)
            if gemv:
                assert c["BLOCK_M"] == min(4, t), c
                for g, kk in (("gemm1", h), ("gemm2", n13 // 2)):
                    assert kk % c[g]["BLOCK_K"] == 0 and c[g]["BLOCK_K"] % base.GROUP[fmt] == 0, (g, c)
                    assert c[g].get("SPLIT_K", 1) * 2 <= kk // c[g]["BLOCK_K"], (g, c)
                assert K.default_config(e, n13, h, fmt, t, k, gemv=False)["BLOCK_M"] >= 16
            else:
                assert c["BLOCK_M"] >= 16
    c = K.default_config(32, 5760, 2880, "mxfp4", 1, 4, gemv=True)
    assert c["gemm1"]["BLOCK_K"] == 64 and c["gemm1"]["SPLIT_K"] == 2 and c["gemm2"]["SPLIT_K"] == 2, c
    with pytest.raises(ValueError, match="packed-FP4"):
        K.gemv_config(128, 1536, 2048, "bf16", 1, 8)


def _file(tmp_path: Path, fmt: str, cfg: dict) -> str:
    p = tmp_path / f"f{len(list(tmp_path.iterdir()))}.json"
    p.write_text(json.dumps({"format_version": 1, "key": {"format": fmt}, "configs": {"1": cfg}}))
    return str(p)


def test_config_files_take_gemv_for_fp4_only(tmp_path):
    """load_config_file accepts GEMV (and SPLIT_K) in mxfp4 / nvfp4 files, with BLOCK_M 1-8 when both GEMMs set it,
    and refuses it elsewhere, naming the file and the field."""
    if not base.HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()
    g = {"BLOCK_N": 32, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 3, "GEMV": True}
    mma = {k: v for k, v in g.items() if k != "GEMV"}
    good = {"BLOCK_M": 4, "gemm1": {**g, "SPLIT_K": 4, "us": 3.0}, "gemm2": g}
    for fmt in FP4:
        got = K.load_config_file(_file(tmp_path, fmt, good))[1]
        assert got == {"BLOCK_M": 4, "gemm1": {**g, "SPLIT_K": 4}, "gemm2": g}, got
        assert K.load_config_file(_file(tmp_path, fmt, {**good, "BLOCK_M": 16, "gemm2": mma}))[1]["gemm2"] == mma
        assert K.load_config_file(_file(tmp_path, fmt, {**good, "gemm1": {**g, "SPLIT_K": 1}}))[1]["gemm1"] == g
    bad = [("bf16", good, "GEMV is an option of packed-FP4 files .* key.format bf16"),
           ("mxfp4", {**good, "gemm2": mma}, "BLOCK_M 4 is below the MMA tile's 16 rows: both GEMMs must set GEMV"),
           ("nvfp4", {"BLOCK_M": 2, "gemm1": mma, "gemm2": mma}, "both GEMMs must set GEMV"),
           ("mxfp4", {**good, "BLOCK_M": 32}, "GEMV runs blocks of at most 16 rows, got BLOCK_M 32"),
           ("mxfp4", {**good, "BLOCK_M": 3}, "BLOCK_M must be one of"),
           ("mxfp4", {**good, "gemm1": {**mma, "SPLIT_K": 2}}, r"configs\['1'\].gemm1: SPLIT_K is an option of the GEMV mode"),
           ("mxfp4", {**good, "gemm1": {**g, "SPLIT_K": 0}}, "SPLIT_K must be an integer from 1 to 64, got 0"),
           ("mxfp4", {**good, "gemm1": {**g, "SPLIT_K": True}}, "SPLIT_K must be an integer"),
           ("mxfp4", {**good, "gemm1": {**g, "GEMV": 1}}, "GEMV must be true or false"),
           ("mxfp4", {**good, "gemm2": {**g, "SWAP_AB": True}}, "gemm2: GEMV excludes SWAP_AB")]
    for fmt, cfg, msg in bad:
        path = _file(tmp_path, fmt, cfg)
        with pytest.raises(ValueError, match=msg) as exc:
            K.load_config_file(path)
        assert str(exc.value).startswith(path), exc.value


@pytest.mark.parametrize("quant", FP4)
@interp
def test_gemv_prefetch_is_the_loop_as_written_bit_for_bit(quant):
    """PREFETCH (BLOCK_M 1: the next K tile loaded before this tile's FMAs) gives the layer's output bit for bit as the
    loop as written (the same products summed in the same order), gated (swiglu_oai with biases) and not (relu2), with
    split-K off, on, and with more splits than K tiles (splits with no tile: the prefetch's loads stay in range), and K
    not a multiple of BLOCK_K (H 96); within the tolerance of the float64 reference."""
    seed = fresh_seed()
    for act in ("swiglu_oai", "relu2"):
        spec = spec_of(quant, act, h=96, limit=2.5 if act == "swiglu_oai" else None)
        layer = Fp4Layer(spec, seed)
        core, pw = core_for(spec, layer)
        x, ids, w = routing(spec, 1, seed + 1)
        for over in ({"BLOCK_K": 32}, {"BLOCK_K": 32, "SPLIT_K": 2}, {"BLOCK_K": 64, "SPLIT_K": 4}):
            _gemv_table(core, 1, **over)
            want = core.forward(x, ids, w, pw)
            cfg = _gemv_table(core, 1, **over, PREFETCH=True)
            assert cfg["gemm1"]["PREFETCH"] and cfg["gemm2"]["PREFETCH"]
            got = core.forward(x, ids, w, pw)
            what = f"GEMV PREFETCH {quant} {act} {over} (seed {seed})"
            assert torch.equal(got, want), what
            check(spec, layer, x, ids, w, got, what, seed)


def test_moe_gemm_refuses_gemv_misuse():
    """moe_gemm's own checks (before any launch): GEMV on a non-FP4 weight mode, GEMV with SWAP_AB, SPLIT_K without
    GEMV, BLOCK_M below 16 without GEMV, GEMV above 16 rows, PREFETCH outside the GEMV mode at BLOCK_M 1."""
    if not base.HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()
    z = torch.zeros(1, dtype=torch.int32)

    def align(bm):
        return K.Alignment(z, z, z, bm, 1, bm, 1)

    a, b, c = torch.zeros(1, 64, dtype=torch.bfloat16), torch.zeros(1, 64, 32, dtype=torch.uint8), torch.zeros(1, 64)
    g = {"BLOCK_N": 32, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3, "GEMV": True}
    mma = {k: v for k, v in g.items() if k != "GEMV"}
    for w_mode, bm, cfg, msg in ((0, 4, g, "GEMV is an option of packed-FP4 weights"), (6, 4, {**g, "SWAP_AB": True}, "exclude"),
                                 (6, 16, {**mma, "SPLIT_K": 2}, "GEMV mode only"), (6, 4, mma, "below the MMA tile's 16 rows"),
                                 (6, 32, g, "at most 16"), (6, 4, {**g, "SPLIT_K": 0}, "positive split"),
                                 (6, 4, {**g, "PREFETCH": True}, "GEMV mode at BLOCK_M 1 and of the packed-FP4 MMA tiles, not of GEMV at BLOCK_M 4"),
                                 (0, 16, {**mma, "PREFETCH": True}, "not of weight mode 0")):
        with pytest.raises(ValueError, match=msg):
            K.moe_gemm(a, b, c, align(bm), top_k=1, n_out=64, gather=False, by_slot=False, w_mode=w_mode, group_k=32,
                       config=cfg)


# --- compiled for sm90 without a GPU -------------------------------------------------------------------------------

@pytest.mark.parametrize("model", list(base.REAL))
def test_gemv_kernels_compile_for_sm90(monkeypatch, model):
    """The GEMV kernels of a forward at 1 and 8 tokens (the GEMV config forced: BLOCK_M 1 with split-K where the
    default splits, BLOCK_M 4), the four checkpoints' real shapes, compiled for sm90 with the PTX decode: no
    MMA instruction, no register spill, and no shared-memory tile (at most 1 KB: the reductions' scratch; the MMA
    path converts each decoded weight tile through shared memory)."""
    helpers = base._sm90()
    if not helpers._ptxas_runs():
        pytest.skip("needs triton's bundled ptxas (and triton imported without TRITON_INTERPRET)")
    K = _K()
    done: list[dict] = []
    monkeypatch.setattr(K._Kernel, "launch", lambda self, grid, device, *a, warmup=False, **kw:
                        done.append({**helpers._sm90_compile(self, a, kw), "gemv": kw.get("GEMV"),
                                     "asm": kw.get("FP4_ASM"), "mode": kw.get("SPLIT_MODE")}))
    e, k, h, i, act = base.REAL[model]
    quant = base.REAL_FORMATS[model]
    spec = LayerSpec(num_experts=e, top_k=k, hidden_size=h, intermediate_size=i, activation=act, quant=quant)
    meta = torch.device("meta")
    grp, n13 = base.GROUP[quant], spec.w13_rows
    sdt = torch.float8_e4m3fn if quant == "nvfp4" else torch.uint8
    kw = {"w13_scale": torch.empty(e, n13, h // grp, dtype=sdt, device=meta),
          "w2_scale": torch.empty(e, h, i // grp, dtype=sdt, device=meta)}
    if quant == "nvfp4":
        kw.update(w13_global_scale=torch.empty(e, device=meta), w2_global_scale=torch.empty(e, device=meta))
    core = _tm().TritonMoeCore(spec, meta)
    core._table = {b: K.gemv_config(e, n13, h, quant, b, k, spec.gated) for b in K.TOKEN_BUCKETS}
    pw = core.prepare_weights(torch.empty(e, n13, h // 2, dtype=torch.uint8, device=meta),
                              torch.empty(e, h, i // 2, dtype=torch.uint8, device=meta), **kw)
    modes = set()
    for t in (1, 8):
        done.clear()
        core.forward(torch.empty(t, h, dtype=torch.bfloat16, device=meta), torch.empty(t, k, dtype=torch.int32, device=meta),
                     torch.empty(t, k, device=meta), pw)
        gemms = [d for d in done if d["kernel"] == "_moe_gemm_kernel"]
        cfg = core.config_for(t)
        assert len(gemms) == 2 + sum(cfg[g].get("SPLIT_K", 1) > 1 for g in ("gemm1", "gemm2")), (cfg, gemms)
        for d in gemms:
            modes.add(d["mode"])
            assert d["gemv"] is True and d["asm"] is True and d["mma"] == 0, d
            assert d["spill"] == 0 and d["shared"] <= 1024, (d, cfg)
    assert 0 in modes, modes
    if model == "gpt-oss-20b":
        assert {1, 2} <= modes, modes            # split-K at 1 token (gemv_gemm_config)


# --- GPU -------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model", list(base.REAL))
@base.gpu_test
def test_gpu_gemv_real_layers_graph_replay_equals_eager(model):
    """The four checkpoints' layers at their real shapes with the GEMV mode forced (PTX decode), 1, 2 and 8 tokens,
    split-K as the default config sets it and forced off: within tolerance of the float64 reference on every token,
    the portable decode bit-equal to the PTX one, and a CUDA graph's replay (fresh inputs copied in) equal to eager."""
    K = _K()
    e, k, h, i, act = base.REAL[model]
    spec, layer, seed = base.gpu_layer(base.REAL_FORMATS[model], act, e=e, k=k, h=h, i=i)
    core, pw = core_for(spec, layer, "cuda", warmup=False)
    port, ppw = core_for(spec, layer, "cuda", warmup=False, fp4_decode="portable")
    assert core.fp4_asm and not port.fp4_asm
    for split in (True, False):
        table = {b: K.gemv_config(e, spec.w13_rows, h, spec.quant, b, k, spec.gated) for b in K.TOKEN_BUCKETS}
        if not split:
            for c in table.values():
                c["gemm1"].pop("SPLIT_K", None)
                c["gemm2"].pop("SPLIT_K", None)
        core._table = table
        port._table = {b: json.loads(json.dumps(c)) for b, c in table.items()}
        for t in (1, 2, 8):
            what = f"{model}, {t} tokens, split {split}, {core.config_for(t)}"
            x, ids, w = routing(spec, t, seed + t, "cuda", minus_one=False)
            out = core.forward(x, ids, w, pw)
            check(spec, layer, x, ids, w, out, what, seed)
            assert torch.equal(out, port.forward(x, ids, w, ppw)), f"{what}: portable decode differs (seed {seed})"
            sx, sids, sw = x.clone(), ids.clone(), w.clone()
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                sout = core.forward(sx, sids, sw, pw)
            x2, ids2, w2 = routing(spec, t, seed + 100 + t, "cuda", minus_one=False)
            sx.copy_(x2)
            sids.copy_(ids2)
            sw.copy_(w2)
            g.replay()
            eager = core.forward(x2, ids2, w2, pw)
            torch.cuda.synchronize()
            assert torch.equal(sout, eager), f"{what}: graph replay differs from eager (seed {seed})"


if __name__ == "__main__" and "--worker" in sys.argv:
    base._serve()
