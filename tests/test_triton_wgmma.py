"""The Gluon wgmma second GEMM of the ``triton`` runner (issue 26): backends/triton_moe_wgmma.py, run by a second-GEMM
config with ``"WGMMA": true`` on sm90 for bf16 / fp16 / fp8_tensor / fp8_channel layers.

How the tests run: Gluon has no CPU interpreter, so on the CPU the kernel is compiled for sm90 (Triton and its
ptxas, no GPU) at real layer shapes, and the tile-file option, the core's checks and its fallback are tested; on a
GPU (``-m gpu``) a layer runs its second GEMM through it against the float64 reference (the tests' ``check``), against
the ``tl`` tiles (the same products in another float32 order: at most 1e-2 of the output's largest value apart),
with expert biases (gpt-oss's SwiGLU), the routing weight on the input, an expert-parallel rank, and a CUDA graph's
replay equal to eager; fresh random inputs, the seed in every message.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_triton_moe as base  # noqa: E402  (its helpers: layers, routing, the reference check, ptxas probe)


_K, _tm = base._K, base._tm
SMEM_SM90 = 232448


def _wgmma():
    if not base.HAS_TRITON:
        pytest.skip("triton not installed")
    pytest.importorskip("triton.experimental.gluon")
    from moe_select.backends import triton_moe_wgmma

    return triton_moe_wgmma


def _g2(fmt: str, bn: int = 256, stages: int = 4, warps: int = 8, **over) -> dict:
    fp8 = fmt.startswith("fp8")
    return {"BLOCK_N": bn, "BLOCK_K": 128 if fp8 else 64, "GROUP_M": 1, "num_warps": warps, "num_stages": stages,
            "WGMMA": True, **({"PREQUANT": True} if fp8 else {}), **over}


# --- CPU: the sm90 compile --------------------------------------------------------------------------------------

def _compile(fmt: str, n: int, k: int, cfg: dict, *, e: int = 128, bias: bool = True) -> dict:
    """One launch compiled for sm90 at meta tensors: registers, spills, PTX counts, shared bytes."""
    W, K = _wgmma(), _K()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gluon_gemm_probe import _metadata
    from sass_loop import compile_sm90

    meta = torch.device("meta")
    dt = torch.float8_e4m3fn if fmt.startswith("fp8") else {"bf16": torch.bfloat16, "fp16": torch.float16}[fmt]
    w_mode = K.W_MODES[fmt]
    rows, s = 65536 + 128 * 127, 65536
    align = K.Alignment(torch.empty(rows, dtype=torch.int32, device=meta),
                        torch.empty(rows // 128, dtype=torch.int32, device=meta),
                        torch.empty(1, dtype=torch.int32, device=meta), rows, rows // 128, 128, s)
    f32 = dict(dtype=torch.float32, device=meta)
    K.wgmma_check(cfg, block_m=128, fmt=fmt, n_out=n, k=k)
    args, kw = W.launch_args(torch.empty(rows, k, dtype=dt, device=meta), torch.empty(e, n, k, dtype=dt, device=meta),
                             torch.empty(s, n, dtype=torch.bfloat16, device=meta), align, n_out=n, by_slot=True,
                             w_mode=w_mode, a_amax=torch.empty(rows, **f32) if w_mode else None,
                             a_scale_mode=1 if w_mode else 0,
                             b_scale=(torch.empty(e, n, **f32) if w_mode == 2 else torch.empty(e, **f32)) if w_mode else None,
                             bias=torch.empty(e, n, **f32) if bias else None, weight=torch.empty(s, **f32), config=cfg,
                             programs=132)
    r = compile_sm90(W.kernel(cfg), args, kw)
    ptx = r["ptx"]
    return {"regs": r["regs"], "spill": r["spill"], "wgmma": ptx.count("wgmma.mma_async"),
            "tma_load": ptx.count("cp.async.bulk.tensor"), "st_v4": ptx.count("st.global.v4"),
            "setmaxnreg": ptx.count("setmaxnreg"), "shared": _metadata(W.kernel(cfg), args, kw).shared}


@pytest.mark.parametrize("fmt, n, k, cfgs", [
    ("bf16", 2048, 768, [(256, 4, 8), (256, 3, 8), (128, 4, 4), (128, 6, 4, "pp")]),  # Qwen3-30B-A3B's second GEMM
    ("fp8_channel", 2048, 768, [(256, 4, 8), (128, 4, 8), (128, 5, 4, "pp")]),
    ("fp8_tensor", 7168, 2048, [(256, 4, 8)]),                                # DeepSeek-V3's
    ("fp16", 4096, 1536, [(128, 4, 8)])])                                     # Qwen3-235B-A22B's
def test_wgmma_compiles_for_sm90_to_a_tma_wgmma_loop_without_spills(fmt, n, k, cfgs):
    """The configs a tile file may give compile for sm90 at real second-GEMM shapes: wgmma in the loop, the A and
    weight tiles by TMA, 16-byte scatter stores of the rows, no spill, shared memory within an sm90 CTA's."""
    if not base._ptxas_runs():
        pytest.skip("needs triton's bundled ptxas (and triton imported without TRITON_INTERPRET)")
    for bn, st, nw, *pp in cfgs:
        r = _compile(fmt, n, k, _g2(fmt, bn, st, nw, **({"PINGPONG": True} if pp else {})))
        what = (fmt, n, k, bn, st, nw, pp, r)
        assert r["spill"] == 0 and r["regs"] <= 255, what
        assert r["wgmma"] > 0 and r["tma_load"] >= 2 and r["st_v4"] > 0, what
        # PINGPONG: the three partitions set their register counts (the producer down, the consumers up)
        assert (r["setmaxnreg"] > 0) == bool(pp), what
        ring = st * (128 + bn) * 128                      # BLOCK_K elements of 128 bytes, A and weight tiles
        assert ring <= r["shared"] <= SMEM_SM90, what


def test_wgmma_in_tile_files(tmp_path):
    """WGMMA is read on the second GEMM of bf16 / fp16 / fp8_tensor / fp8_channel files (FP8 with PREQUANT), with
    BLOCK_K of 128 bytes, BLOCK_N 64-256, BLOCK_M 64 (4 warps) or 128 (4 or 8) and 2-6 stages; refused elsewhere,
    each naming the file and the field."""
    if not base.HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()
    g1 = {"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3}

    def load(bucket: dict, fmt: str = "bf16", name: str = "f.json") -> dict:
        p = tmp_path / name
        p.write_text(json.dumps({"format_version": 1, "key": {"format": fmt}, "configs": {"2048": bucket}}))
        K.load_config_file.cache_clear()
        return K.load_config_file(str(p))

    assert load({"BLOCK_M": 128, "gemm1": g1, "gemm2": _g2("bf16")})[2048]["gemm2"]["WGMMA"] is True
    assert load({"BLOCK_M": 128, "gemm1": g1, "gemm2": _g2("fp8_channel")}, "fp8_channel", "c.json")[2048]["gemm2"]["WGMMA"]
    assert load({"BLOCK_M": 64, "gemm1": g1, "gemm2": _g2("fp16", 128, 3, 4)}, "fp16", "h.json")[2048]["gemm2"]["WGMMA"]
    pp = load({"BLOCK_M": 64, "gemm1": g1, "gemm2": _g2("bf16", 256, 5, 4, PINGPONG=True)}, "bf16", "p.json")[2048]
    assert pp["gemm2"]["PINGPONG"] is True and pp["gemm2"]["WGMMA"] is True
    bad = [({"BLOCK_M": 128, "gemm1": {**g1, "WGMMA": True}, "gemm2": _g2("bf16")}, "bf16", r"gemm1: WGMMA is a second-GEMM"),
           ({"BLOCK_M": 128, "gemm1": g1, "gemm2": _g2("bf16")}, "fp8_block", r"gemm2: WGMMA runs the second GEMM of"),
           ({"BLOCK_M": 128, "gemm1": g1, "gemm2": _g2("bf16")}, "mxfp4", r"gemm2: WGMMA runs the second GEMM of"),
           ({"BLOCK_M": 128, "gemm1": g1, "gemm2": {**_g2("fp8_channel"), "PREQUANT": False}}, "fp8_channel",
            r"gemm2: WGMMA reads FP8 A as e4m3 in memory: .* needs PREQUANT"),
           ({"BLOCK_M": 128, "gemm1": g1, "gemm2": _g2("bf16", TMA=True)}, "bf16", r"gemm2: .* has no TMA"),
           ({"BLOCK_M": 128, "gemm1": g1, "gemm2": _g2("bf16", MIN_M=64)}, "bf16", r"gemm2: .* has no MIN_M"),
           ({"BLOCK_M": 128, "gemm1": g1, "gemm2": _g2("bf16", BLOCK_K=128)}, "bf16", r"gemm2: WGMMA: BLOCK_K must be 64"),
           ({"BLOCK_M": 128, "gemm1": g1, "gemm2": _g2("bf16", 512)}, "bf16", r"gemm2: WGMMA: BLOCK_N must be 64, 128 or 256"),
           ({"BLOCK_M": 64, "gemm1": g1, "gemm2": _g2("bf16")}, "bf16", r"gemm2: WGMMA: BLOCK_M 64 with num_warps 4"),
           ({"BLOCK_M": 128, "gemm1": g1, "gemm2": _g2("bf16", stages=1)}, "bf16", r"gemm2: WGMMA: num_stages must be 2 to 6"),
           ({"BLOCK_M": 128, "gemm1": g1, "gemm2": _g2("bf16", WGMMA=1)}, "bf16", r"gemm2: WGMMA must be true or false"),
           ({"BLOCK_M": 128, "gemm1": g1, "gemm2": _g2("bf16", 128, 4, 8, PINGPONG=True)}, "bf16",
            r"gemm2: WGMMA PINGPONG: num_warps 4 .* got num_warps 8"),
           ({"BLOCK_M": 128, "gemm1": g1, "gemm2": _g2("bf16", 256, 3, 4, PINGPONG=True)}, "bf16",
            r"gemm2: WGMMA PINGPONG: .*BLOCK_M \* BLOCK_N <= 16384.*BLOCK_N 256"),
           ({"BLOCK_M": 128, "gemm1": g1, "gemm2": {**_g2("bf16", 128, 4, 4), "WGMMA": False, "PINGPONG": True}}, "bf16",
            r"gemm2: PINGPONG is a form of the WGMMA kernel")]
    for n, (bucket, fmt, msg) in enumerate(bad):
        with pytest.raises(ValueError, match=msg) as info:
            load(bucket, fmt, f"bad{n}.json")
        assert f"bad{n}.json: configs['2048']" in str(info.value)


def test_moe_gemm_refuses_wgmma_off_sm90_and_outside_the_second_gemm():
    """K.moe_gemm with a WGMMA config: the first GEMM's operations (gather, activation, gate) and a device other
    than an sm90 GPU are ValueErrors, not a kernel launched on what it cannot run."""
    _wgmma()
    K = _K()
    meta = torch.device("meta")
    rows = 256
    align = K.Alignment(torch.empty(rows, dtype=torch.int32, device=meta), torch.empty(2, dtype=torch.int32, device=meta),
                        torch.empty(1, dtype=torch.int32, device=meta), rows, 2, 128, 200)
    a = torch.empty(rows, 128, dtype=torch.bfloat16, device=meta)
    b = torch.empty(4, 256, 128, dtype=torch.bfloat16, device=meta)
    c = torch.empty(200, 256, dtype=torch.bfloat16, device=meta)
    cfg = _g2("bf16")
    with pytest.raises(ValueError, match="WGMMA is the second GEMM's option"):
        K.moe_gemm(a, b, c, align, top_k=2, n_out=256, gather=True, by_slot=False, w_mode=0, config=cfg)
    with pytest.raises(ValueError, match="sm90 GPUs only"):
        K.moe_gemm(a, b, c, align, top_k=2, n_out=256, gather=False, by_slot=True, w_mode=0, config=cfg)


# --- GPU ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("form", [{}, {"BLOCK_N": 128, "num_warps": 4, "num_stages": 5, "PINGPONG": True}],
                         ids=["one_partition", "pingpong"])
@pytest.mark.parametrize("quant, act, tokens, ep, on_input", [
    ("bf16", "silu", 2048, 1, False), ("fp8_channel", "silu", 2048, 1, False), ("fp8_tensor", "silu", 300, 1, False),
    ("bf16", "swiglu_oai", 2048, 1, False), ("fp8_channel", "silu", 2048, 2, False), ("bf16", "silu", 64, 1, True),
    ("fp16", "silu", 1024, 1, False)])
@base.gpu_test
def test_gpu_wgmma_second_gemm(quant, act, tokens, ep, on_input, form):
    """The layer with its second GEMM through WGMMA (BLOCK_M 128, BLOCK_N 256, 4 stages; the first GEMM on fixed
    64 x 64 tiles): within tolerance of float64, within 1e-2 of the output's largest value of the tl tiles (the
    same products summed in another order), expert biases (swiglu_oai) and an EP rank's blocks of no local expert
    handled, the routing weight on the input, and a CUDA graph's replay equal to eager."""
    _wgmma()
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("WGMMA is sm90's")
    spec, layer, seed = base.gpu_layer(quant, act, k=1 if on_input else 8, e=64, h=1024, i=512, ep=ep, rank=ep - 1)
    core, pw = base.core_for(spec, layer, "cuda", warmup=False, apply_router_weight_on_input=on_input)
    # the first GEMM (not under test) on tiles that fit BLOCK_M 128 at any top_k
    base_cfg = {"BLOCK_M": 128, "gemm1": {"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3}}
    tl2 = {k: v for k, v in _g2(quant).items() if k != "WGMMA"}
    x, ids, w = base.routing(spec, tokens, seed, "cuda", minus_one=not on_input)
    outs = {}
    for on in (False, True):
        core.config_for = lambda t, on=on: {**base_cfg, "gemm2": {**_g2(quant), **form} if on else tl2}
        outs[on] = core.forward(x, ids, w, pw)
    base.check(spec, layer, x, ids, w, outs[True], f"WGMMA {form}, {quant} {act} ep {ep}, {tokens} tokens", seed,
               on_input=on_input)
    scale = outs[False].float().abs().max().item()
    diff = (outs[True].float() - outs[False].float()).abs().max().item()
    assert diff <= 1e-2 * scale, f"WGMMA vs the tl tiles: {diff} of {scale} (seed {seed})"
    assert torch.equal(base._replayed(core, pw, x, ids, w), outs[True]), f"graph replay differs from eager (seed {seed})"
