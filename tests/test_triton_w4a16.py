"""MXFP4 and NVFP4 expert weights in the ``triton`` runner as W4A16 (issue 24): packed e2m1 weights kept packed,
dequantized to bf16 in the GEMMs' main loop (backends/triton_moe_kernels.py ``_fp4_tile``), bf16 activations; the
checkpoint-layout converters (moe_select/checkpoint_layouts.py).

How the tests run (as tests/test_triton_moe.py, whose interpreter worker and sm90 compile helper this file reuses
the design of): the Triton kernels run through Triton's CPU interpreter (``TRITON_INTERPRET=1``) in one worker
subprocess started by this file (:class:`_Worker`), at tiny shapes; the GPU tests (marked ``gpu``) run the
compiled kernels at real layer shapes, the PTX decode (``fp4_decode="asm"``, of the shuffled layout) included, which the interpreter
cannot run (the interpreter runs the portable decode, which gives the same bf16 weights: a GPU test compares the
two bit for bit); the sm90 compile test compiles the kernels for Hopper with Triton and ptxas without a GPU.

Inputs are fresh random draws each run, the seed in every assertion message (``MOE_SELECT_TEST_SEED=<seed>``
replays it). Weights are random *packed codes* (every byte value equally likely, so all 16 e2m1 codes, -0 included,
in both nibbles) with random scales (e8m0 exponents spread over a range of 2^8 around 1/(3 sqrt(K)); e4m3 scales
over 0.25..4 and a global scale per expert), not quantized values, so the decode sees every code and a wide scale
range. The float64 reference (moe_select.reference.reference_moe) gets them dequantized by
moe_select.reference.reference_dequantize (the reference's own definition of the formats, written apart from the
kernels and from moe_select.ops). Tolerance: the one table's, ``formats.tolerance("bf16", <output dtype>)`` (the
triton runner's W4A16 activation precision is bf16, backends/triton.yaml): 1.56e-2 for bf16 output. Each e2m1
value times its block scale is exact in bf16, so only the bf16 activations and float32 accumulation count; measured
here (interpreter, E 8, K 2, H 64, I 64, 13 tokens, 2026-12): at most 6e-3.
"""
from __future__ import annotations

from collections.abc import Callable

import functools
import importlib.util
import json
import math
import os
import random
import select
import subprocess
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import pytest
import torch

from moe_select import checkpoint_layouts as cl
from moe_select.errors import RunnerInputError
from moe_select.formats import tolerance
from moe_select.layer import LayerSpec
from moe_select.reference import QuantizedExperts, reference_dequantize, reference_moe, rel_error

HAS_TRITON = importlib.util.find_spec("triton") is not None and importlib.util.find_spec("numpy") is not None
INTERP = os.environ.get("TRITON_INTERPRET") == "1"
ROOT = Path(__file__).resolve().parent.parent
FP4 = ("mxfp4", "nvfp4")
GROUP = {"mxfp4": 32, "nvfp4": 16}
ACTIVATIONS = ("silu", "gelu", "relu2", "swiglu_oai")
CALL_TIMEOUT_S = 300
CONFIG_DIR = ROOT / "backends" / "triton_configs"
#: The committed tuned tile files of the packed-FP4 formats (backends/triton_configs/README.md). Each is checked by
#: test_fp4_tuned_files_are_read_for_their_keys (CPU), test_fp4_tuned_tiles_run_in_the_interpreter and, on the GPU
#: it was tuned for, test_gpu_fp4_tuned_config_files_load_and_match_the_reference (which
#: tests/test_triton_moe.py::test_every_tuned_file_is_of_a_format_the_gpu_test_checks requires for these formats).
FP4_TUNED_FILES = sorted(p.name for p in CONFIG_DIR.glob("*.json")
                         if (json.loads(p.read_text()).get("key") or {}).get("format") in FP4)


def tol(out_dtype: torch.dtype = torch.bfloat16) -> float:
    """The one table's tolerance for this runner's W4A16 path (bf16 activations) and the output dtype."""
    return tolerance("bf16", str(out_dtype).removeprefix("torch."))


def fresh_seed() -> int:
    env = os.environ.get("MOE_SELECT_TEST_SEED")
    return int(env) if env else random.SystemRandom().randrange(2 ** 31)


# --- the interpreter worker (the design of tests/test_triton_moe.py) ------------------------------------------

class _Worker:
    """One subprocess with ``TRITON_INTERPRET=1`` running this file's test bodies (``{"name", "kwargs"}`` JSON
    lines in, ``{"ok", "error"}`` out on its own channel; prints go to a log file)."""

    proc: subprocess.Popen | None = None
    log: Path | None = None
    #: the test file the worker runs (a subclass in another test file names its own)
    script: Path = Path(__file__).resolve()

    @classmethod
    def call(cls, name: str, kwargs: dict) -> dict:
        if cls.proc is None or cls.proc.poll() is not None:
            cls.log = Path(tempfile.mkstemp(prefix="triton_w4a16_worker_", suffix=".log")[1])
            env = {**os.environ, "TRITON_INTERPRET": "1"}
            cls.proc = subprocess.Popen([sys.executable, str(cls.script), "--worker"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=cls.log.open("w"), text=True, env=env, cwd=str(ROOT))
        assert cls.proc.stdin is not None and cls.proc.stdout is not None
        cls.proc.stdin.write(json.dumps({"name": name, "kwargs": kwargs}) + "\n")
        cls.proc.stdin.flush()
        ready, _, _ = select.select([cls.proc.stdout], [], [], CALL_TIMEOUT_S)
        line = cls.proc.stdout.readline() if ready else ""
        if not line:
            cls.stop()
            tail = cls.log.read_text()[-4000:] if cls.log else ""
            raise AssertionError(f"the interpreter worker did not answer {name} within {CALL_TIMEOUT_S} s; its log:\n{tail}")
        return json.loads(line)

    @classmethod
    def stop(cls) -> None:
        if cls.proc is not None:
            if cls.proc.poll() is None:
                assert cls.proc.stdin is not None
                cls.proc.stdin.close()
                try:
                    cls.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    cls.proc.kill()
                    cls.proc.wait()
            cls.proc = None


@pytest.fixture(scope="module", autouse=True)
def _stop_worker():
    yield
    _Worker.stop()


def interp(fn, worker: type[_Worker] | None = None):
    """Run the body under Triton's interpreter: here when it is on, else in the worker (``worker``: another test
    file's :class:`_Worker` subclass; default this file's)."""
    if INTERP:
        return fn

    @functools.wraps(fn)
    def wrapper(**kwargs):
        if not HAS_TRITON:
            pytest.skip("triton (and numpy) not installed: pip install -e '.[test]'")
        res = (worker or _Worker).call(fn.__name__, kwargs)
        if not res["ok"]:
            raise AssertionError("in the interpreter worker:\n" + res["error"])

    return wrapper


def worker_for(path: str) -> tuple[type[_Worker], Callable]:
    """Another test file's interpreter worker (a :class:`_Worker` subclass running ``path``) and its ``interp``
    decorator; that file stops the worker in its own module fixture and ends with ``base._serve()`` under
    ``--worker``."""
    cls = type("_Worker", (_Worker,), {"proc": None, "log": None, "script": Path(path).resolve()})
    return cls, functools.partial(interp, worker=cls)


def _serve() -> None:
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    mod = sys.modules["__main__"]
    for line in sys.stdin:
        req = json.loads(line)
        try:
            getattr(mod, req["name"])(**req["kwargs"])
            res = {"ok": True, "error": ""}
        except BaseException:  # noqa: BLE001 - reported to the parent
            res = {"ok": False, "error": traceback.format_exc()}
        channel.write(json.dumps(res) + "\n")
        channel.flush()


def _tm():
    from moe_select.backends import triton_moe

    return triton_moe


def _K():
    from moe_select.backends import triton_moe_kernels

    return triton_moe_kernels


# --- random packed FP4 layers -----------------------------------------------------------------------------

def random_fp4(quant: str, e: int, n: int, k: int, g: torch.Generator, device="cpu") -> tuple[torch.Tensor, dict]:
    """Random packed weights ``[e, n, k/2]`` uint8 (every byte value equally likely) and their scales as
    prepare_weights takes them (``scale``, and ``global_scale`` for nvfp4), sized so that ``w @ x`` stays O(1)
    for ``x ~ N(0, 1)`` (an e2m1 code has RMS about 2.9)."""
    q = torch.randint(0, 256, (e, n, k // 2), generator=g, device=device, dtype=torch.int32).to(torch.uint8)
    target = 1.0 / (2.9 * k ** 0.5)
    if quant == "mxfp4":
        base = 127 + round(torch.log2(torch.tensor(target)).item())
        s = torch.randint(base - 4, base + 4, (e, n, k // 32), generator=g, device=device, dtype=torch.int32)
        return q, {"scale": s.to(torch.uint8)}
    s = (torch.rand(e, n, k // 16, generator=g, device=device) * 3.75 + 0.25).to(torch.float8_e4m3fn)
    glob = (torch.rand(e, generator=g, device=device) + 0.5) * target / 1.5
    return q, {"scale": s, "global_scale": glob.float()}


class DeviceExperts(QuantizedExperts):
    """:class:`~moe_select.reference.QuantizedExperts` dequantized in float64 on the weights' own device (a GPU
    dequantizes a DeepSeek-V3 expert in milliseconds where the host takes most of a second)."""

    def __getitem__(self, e: int) -> torch.Tensor:
        return reference_dequantize(self.q[e:e + 1], {k: v[e:e + 1] for k, v in self.scales.items()}, self.quant,
                                    device=self.q.device)[0]


class Fp4Layer:
    """A random FP4 layer of ``spec``: ``kwargs`` for prepare_weights (weights, scales, gpt-oss biases for
    swiglu_oai) and ``d13``/``d2``, the reference's float64 experts (QuantizedExperts: dequantized by
    reference_dequantize one expert at a time)."""

    def __init__(self, spec: LayerSpec, seed: int, device="cpu"):
        g = torch.Generator(device=device).manual_seed(seed)
        e, h, i, q = spec.num_local_experts, spec.hidden_size, spec.intermediate_size, spec.quant
        q13, s13 = random_fp4(q, e, spec.w13_rows, h, g, device)
        q2, s2 = random_fp4(q, e, h, i, g, device)
        self.kwargs = {"w13": q13, "w2": q2, **{f"w13_{k}": v for k, v in s13.items()}, **{f"w2_{k}": v for k, v in s2.items()}}
        self.d13 = DeviceExperts(q13, s13, q)
        self.d2 = DeviceExperts(q2, s2, q)
        self.b13 = self.b2 = None
        if spec.activation == "swiglu_oai":
            self.b13 = torch.randn(e, spec.w13_rows, generator=g, device=device) * 0.2
            self.b2 = torch.randn(e, h, generator=g, device=device) * 0.2
            self.kwargs.update(w13_bias=self.b13, w2_bias=self.b2)


def spec_of(quant="mxfp4", act="silu", *, e=8, k=2, h=64, i=64, ep=1, rank=0, limit=None, tp=None):
    return LayerSpec(num_experts=e, top_k=k, hidden_size=h, intermediate_size=i, activation=act, quant=quant,
                     ep=ep, ep_rank=rank, tp=tp or ep, swiglu_limit=limit)


def routing(spec: LayerSpec, t: int, seed: int, device="cpu", *, minus_one=True, dtype=torch.bfloat16):
    """``t`` tokens, K distinct global experts each, one slot -1; weights uniform in [0.1, 1.1)."""
    g = torch.Generator(device=device).manual_seed(seed + 1)
    ids = torch.rand(t, spec.num_experts, generator=g, device=device).argsort(1)[:, :spec.top_k].to(torch.int32)
    if minus_one and t > 1:
        ids[t // 2, 0] = -1
    w = torch.rand(t, spec.top_k, generator=g, device=device) + 0.1
    x = torch.randn(t, spec.hidden_size, generator=g, device=device).to(dtype)
    return x, ids, w.float()


def check(spec, layer, x, ids, w, out, what="", seed=None, on_input=False) -> float:
    """``out`` against the float64 reference (this rank's experts), within :func:`tol`. Returns rel_error."""
    assert out.shape == x.shape and out.dtype == x.dtype, (out.shape, out.dtype, what)
    assert torch.isfinite(out).all(), f"non-finite output ({what}, seed {seed})"
    if on_input:
        ref = torch.zeros(x.shape, dtype=torch.float64)
        for kk in range(ids.shape[1]):
            ref += reference_moe(x.double() * w[:, kk:kk + 1].double(), ids[:, kk:kk + 1], torch.ones_like(w[:, kk:kk + 1]),
                                 layer.d13, layer.d2, spec.activation, expert_offset=spec.expert_offset,
                                 swiglu_limit=spec.swiglu_limit, device=x.device, w13_bias=layer.b13, w2_bias=layer.b2)
    else:
        ref = reference_moe(x, ids, w, layer.d13, layer.d2, spec.activation, expert_offset=spec.expert_offset,
                            swiglu_limit=spec.swiglu_limit, device=x.device, w13_bias=layer.b13, w2_bias=layer.b2)
    if ref.abs().max() == 0:
        assert (out == 0).all(), f"{what}: expected zeros (seed {seed})"
        return 0.0
    err = rel_error(out, ref)
    assert err <= tol(out.dtype), f"{spec.quant} {spec.activation} {what}: rel_error {err:.3g} > {tol(out.dtype):.3g} (seed {seed})"
    return err


def core_for(spec, layer, device="cpu", **kw):
    core = _tm().TritonMoeCore(spec, device, **kw)
    return core, core.prepare_weights(**layer.kwargs)


def _set_configs(core, **over):
    """Override every bucket's GEMM configs (both GEMMs) of a core (tests of config options). SWAP_AB is an option
    of the MMA tiles: buckets whose default is the GEMV mode get the MMA default first (``default_config(...,
    gemv=False)``)."""
    s = core.spec
    for b, c in core._table.items():
        if ("SWAP_AB" in over or "PREFETCH" in over) and c["gemm1"].get("GEMV"):
            c.clear()
            c.update(_K().default_config(s.num_local_experts, s.w13_rows, s.hidden_size, s.quant, b, s.top_k,
                                         gated=s.gated, gemv=False))
        c["gemm1"].update(over)
        c["gemm2"].update(over)


# --- interpreter: the kernels against the float64 reference --------------------------------------------------

@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("quant", FP4)
@interp
def test_fp4_every_activation(quant, act):
    """Every activation (swiglu_oai with gpt-oss's biases and a clamping limit) in both formats."""
    seed = fresh_seed()
    spec = spec_of(quant, act, limit=2.5 if act == "swiglu_oai" else None)
    layer = Fp4Layer(spec, seed)
    core, pw = core_for(spec, layer)
    assert core.fp4_asm is False                         # the interpreter runs the portable decode
    x, ids, w = routing(spec, 13, seed)
    check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), "13 tokens", seed)


@pytest.mark.parametrize("quant", FP4)
@interp
def test_fp4_expert_parallel_ranks_sum_to_the_layer(quant):
    """4 EP ranks: each skips the other ranks' ids, and their outputs sum to the whole layer."""
    seed = fresh_seed()
    full = spec_of(quant, k=3)
    layer = Fp4Layer(full, seed)
    x, ids, w = routing(full, 11, seed)
    total = torch.zeros(x.shape, dtype=torch.float64)
    for rank in range(4):
        spec = spec_of(quant, k=3, ep=4, rank=rank)
        sl = slice(spec.expert_offset, spec.expert_offset + spec.num_local_experts)
        part = Fp4Layer.__new__(Fp4Layer)
        part.kwargs = {k: v[sl] for k, v in layer.kwargs.items()}
        part.d13 = QuantizedExperts(layer.d13.q[sl], {k: v[sl] for k, v in layer.d13.scales.items()}, quant)
        part.d2 = QuantizedExperts(layer.d2.q[sl], {k: v[sl] for k, v in layer.d2.scales.items()}, quant)
        part.b13 = part.b2 = None
        core, pw = core_for(spec, part)
        out = core.forward(x, ids, w, pw)
        check(spec, part, x, ids, w, out, f"rank {rank}", seed)
        total += out.double()
    err = rel_error(total, reference_moe(x, ids, w, layer.d13, layer.d2))
    assert err <= tol(), f"{quant}: the ranks' sum, rel_error {err:.3g} (seed {seed})"


@pytest.mark.parametrize("case", ["swap_ab", "masked_k", "weight_on_input", "fp16_input", "float32_input", "one_token",
                                  "all_minus_one"])
@interp
def test_fp4_options_and_edges(case):
    """SWAP_AB tiles; K not a multiple of BLOCK_K (masked loads: H 96 = 3 mxfp4 groups, nvfp4 I 48); llama4's
    weight on the input; fp16 and float32 inputs (computed in bf16, returned in the input dtype); 1 token;
    every id -1 (zeros)."""
    seed = fresh_seed()
    quant = FP4[seed % 2]
    h, i = (96, 64) if case == "masked_k" else (64, 64)
    if case == "masked_k" and quant == "nvfp4":
        h, i = 64, 48
    spec = spec_of(quant, "silu", h=h, i=i, k=1 if case == "weight_on_input" else 2)
    layer = Fp4Layer(spec, seed)
    core, pw = core_for(spec, layer, apply_router_weight_on_input=case == "weight_on_input")
    if case == "swap_ab":
        _set_configs(core, SWAP_AB=True)
    if case == "masked_k":
        _set_configs(core, BLOCK_K=64)
    dtype = {"fp16_input": torch.float16, "float32_input": torch.float32}.get(case, torch.bfloat16)
    x, ids, w = routing(spec, 1 if case == "one_token" else 9, seed, dtype=dtype)
    if case == "all_minus_one":
        ids[:] = -1
    out = core.forward(x, ids, w, pw)
    check(spec, layer, x, ids, w, out, f"{case} ({quant})", seed, on_input=case == "weight_on_input")


@pytest.mark.parametrize("quant", FP4)
@pytest.mark.parametrize("shape", ["even_k", "masked_k", "swap_ab"])
@interp
def test_fp4_prefetch_mma_tiles_give_the_same_bits(shape, quant):
    """PREFETCH on the MMA tiles (the next K tile's block scales loaded one iteration ahead): the same products in the
    same order, so the same output bits as without it, and within the float64 reference's tolerance; several K tiles
    (K 192 = 3 tiles of 64; masked: H 96 and I 80 with BLOCK_K 64, a partial last tile in both GEMMs), SWAP_AB too."""
    seed = fresh_seed()
    h, i = (192, 128) if shape != "masked_k" else ((96, 64) if quant == "mxfp4" else (96, 80))
    spec = spec_of(quant, "silu", h=h, i=i, k=2)
    layer = Fp4Layer(spec, seed)
    core, pw = core_for(spec, layer)
    over = {"BLOCK_K": 64, **({"SWAP_AB": True} if shape == "swap_ab" else {})}
    _set_configs(core, **over)
    x, ids, w = routing(spec, 9, seed)
    plain = core.forward(x, ids, w, pw)
    _set_configs(core, PREFETCH=True)
    ahead = core.forward(x, ids, w, pw)
    assert torch.equal(plain, ahead), (shape, quant, seed, (plain.float() - ahead.float()).abs().max())
    check(spec, layer, x, ids, w, ahead, f"prefetch {shape} ({quant})", seed)


@interp
def test_fp4_torch_dtypes_are_taken_as_their_bytes():
    """torch's own float4_e2m1fn_x2 weights and float8_e8m0fnu scales (where this torch has them) are the same
    bytes as the uint8 layout: the same output bit for bit."""
    names = [n for n in ("float4_e2m1fn_x2", "float8_e8m0fnu") if hasattr(torch, n)]
    if not names:
        pytest.skip("this torch has neither float4_e2m1fn_x2 nor float8_e8m0fnu")
    seed = fresh_seed()
    spec = spec_of("mxfp4")
    layer = Fp4Layer(spec, seed)
    core, pw = core_for(spec, layer)
    kw = dict(layer.kwargs)
    if hasattr(torch, "float4_e2m1fn_x2"):
        kw["w13"], kw["w2"] = kw["w13"].view(torch.float4_e2m1fn_x2), kw["w2"].view(torch.float4_e2m1fn_x2)
    if hasattr(torch, "float8_e8m0fnu"):
        kw["w13_scale"], kw["w2_scale"] = kw["w13_scale"].view(torch.float8_e8m0fnu), kw["w2_scale"].view(torch.float8_e8m0fnu)
    pw2 = core.prepare_weights(**kw)
    x, ids, w = routing(spec, 5, seed)
    assert torch.equal(core.forward(x, ids, w, pw), core.forward(x, ids, w, pw2)), f"{names} (seed {seed})"


@interp
def test_fp4_prepare_weights_errors_name_the_tensor():
    seed = fresh_seed()
    for quant in FP4:
        spec = spec_of(quant)
        layer = Fp4Layer(spec, seed)
        core = _tm().TritonMoeCore(spec, "cpu")
        kw = layer.kwargs
        bad = [({"w13": kw["w13"].float()}, "w13: .* packed e2m1 uint8"),
               ({"w2": kw["w2"][:, :, :-1]}, r"w2: .*\[8, 64, 32\]"),
               ({"w13_scale": None}, "w13_scale is required"),
               ({"w2_scale": kw["w2_scale"][:, :, :1]}, "w2_scale: .* scales must be"),
               ({"w13_zeros": kw["w2_scale"]}, "no zero points")]
        if quant == "nvfp4":
            bad += [({"w13_global_scale": None}, "w13_global_scale .* required"),
                    ({"w2_global_scale": torch.full((8,), float("inf"))}, "non-finite"),
                    ({"w2_global_scale": torch.ones(4)}, r"\[E\] = \[8\]"),
                    ({"w13_scale": kw["w13_scale"].view(torch.uint8)}, "float8_e4m3fn")]
        else:
            bad += [({"w13_global_scale": torch.ones(8)}, "mxfp4 takes no global scale"),
                    ({"w13_scale": kw["w13_scale"].float()}, "e8m0")]
        for change, match in bad:
            with pytest.raises(RunnerInputError, match=match):
                core.prepare_weights(**{**kw, **change})
    with pytest.raises(RunnerInputError, match="multiples of 32"):
        _tm().TritonMoeCore(spec_of("mxfp4", h=48), "cpu")
    with pytest.raises(RunnerInputError, match="multiples of 16"):
        _tm().TritonMoeCore(spec_of("nvfp4", i=40), "cpu")
    with pytest.raises(RunnerInputError, match="cannot run under Triton's interpreter"):
        _tm().TritonMoeCore(spec_of("mxfp4"), "cpu", fp4_decode="asm")
    with pytest.raises(RunnerInputError, match="applies to mxfp4 and nvfp4"):
        _tm().TritonMoeCore(spec_of("bf16"), "cpu", fp4_decode="portable")
    with pytest.raises(RunnerInputError, match="take no global scale"):
        _tm().TritonMoeCore(spec_of("bf16"), "cpu").prepare_weights(torch.zeros(8, 128, 64, dtype=torch.bfloat16),
                                                                      torch.zeros(8, 64, 64, dtype=torch.bfloat16),
                                                                      w13_global_scale=torch.ones(8))


@interp
def test_fp4_through_moe_runner_and_the_harness_weights():
    """moe-select run's seeded weights (moe_select.harness.weights, formats.yaml ``generated``) through MoeRunner
    (a2a none) into the triton core, against the harness's own float64 reference (reference_output), for both
    formats, gpt-oss's biases included."""
    from moe_select.backends.a2a.dispatch_none import NoDispatch
    from moe_select.harness.weights import layer_weights, reference_output, routed_tokens
    from moe_select.runner import MoeRunner

    class Plan:
        runner, a2a = "triton", "none"

    seed = fresh_seed()
    for quant, act in (("mxfp4", "swiglu_oai"), ("nvfp4", "silu")):
        model = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 64, "activation": act,
                 "routing": "renormalize", "swiglu_limit": 7.0 if act == "swiglu_oai" else None}
        spec = spec_of(quant, act, limit=model["swiglu_limit"])
        r = MoeRunner(Plan(), spec, _tm().TritonMoeCore(spec, "cpu"), NoDispatch(spec), torch.device("cpu"))
        weights = layer_weights(spec, model, seed)
        pw = r.prepare_weights(weights.pop("w13"), weights.pop("w2"), **weights)
        x, ids, w = routed_tokens(model, 6, seed)
        out = r.run(x, ids, w, pw)
        ref, _ = reference_output(model, quant, 1, seed, x, ids, w)
        err = rel_error(out, ref)
        assert err <= tol(), f"{quant} {act} through MoeRunner: rel_error {err:.3g} (seed {seed})"


def _run_ptx(asm: str, regs: dict[str, int]) -> dict[str, int]:
    """A model of the few PTX instructions of the GPU decode (and, or, shr, mov, prmt (default mode),
    shf.r.wrap (funnel shift right, shift amount mod 32), fma.rn.bf16x2), written from the PTX ISA's definitions,
    executing ``asm`` on 32-bit ``regs`` ($n operands and named registers); returns the registers."""
    import re

    def val(tok: str) -> int:
        tok = tok.strip()
        return regs[tok] if tok in regs else int(tok, 0) & 0xFFFFFFFF

    def bf16(bits: int) -> float:
        return torch.tensor([bits], dtype=torch.int32).to(torch.int16).view(torch.bfloat16).item()

    def to_bf16(x: float) -> int:
        return torch.tensor([x], dtype=torch.float64).to(torch.bfloat16).view(torch.int16).item() & 0xFFFF

    for line in asm.splitlines():
        line = line.strip().rstrip(";")
        if not line or line[0] in "{}." or line.startswith(".reg"):
            continue
        op, args = line.split(None, 1)
        d, *src = [a.strip() for a in args.split(",")]
        s = [val(a) for a in src]
        if op == "and.b32":
            r = s[0] & s[1]
        elif op == "or.b32":
            r = s[0] | s[1]
        elif op == "shr.u32":
            r = s[0] >> s[1]
        elif op == "mov.b32":
            r = s[0]
        elif op == "shf.r.wrap.b32":                # d = low 32 bits of (b:a) >> (c mod 32)
            r = (((s[1] << 32) | s[0]) >> (s[2] & 31)) & 0xFFFFFFFF
        elif op == "prmt.b32":
            pool = (s[1] << 32) | s[0]
            r = 0
            for i in range(4):
                sel = (s[2] >> (4 * i)) & 0xF
                byte = (pool >> (8 * (sel & 7))) & 0xFF
                if sel & 8:
                    byte = 0xFF if byte & 0x80 else 0
                r |= byte << (8 * i)
        elif op == "fma.rn.bf16x2":
            r = 0
            for half in range(2):
                a, b, c = ((x >> (16 * half)) & 0xFFFF for x in s)
                r |= to_bf16(bf16(a) * bf16(b) + bf16(c)) << (16 * half)
        else:
            raise AssertionError(f"the PTX model has no {op}")
        assert re.fullmatch(r"\$\d+|[a-z]\d*", d), d
        regs[d] = r & 0xFFFFFFFF
    return regs


def test_fp4_ptx_decode_gives_every_code_times_its_scale():
    """The GPU decode (triton_moe_kernels.FP4_DECODE_ASM), run through a model of its PTX instructions on words that
    fp4_shuffle made from canonical bytes: every byte value in every position of the word, random bf16 scales.
    Output register ``j`` holds canonical byte ``j``'s low-nibble value (bits 0-15) and high-nibble value (bits
    16-31), each the e2m1 value (the OCP MX spec's table) times its scale times 2^-FP4_EPI_LOG2: the decode yields
    ``value * 2^-126`` and the kernel passes ``scale * 2^(126 - FP4_EPI_LOG2)`` (the epilogue multiplies by
    2^FP4_EPI_LOG2)."""
    if not HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()
    asm = str(K.FP4_DECODE_ASM.value)
    seed = fresh_seed()
    rng = random.Random(seed)
    table = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    for start in range(0, 256, 4):
        word = [(start + j * 67) % 256 for j in range(4)]                    # every byte value, in every position
        shuffled = K.fp4_shuffle(torch.tensor(word, dtype=torch.uint8))
        assert torch.equal(K.fp4_unshuffle(shuffled), torch.tensor(word, dtype=torch.uint8))
        scales = [2.0 ** rng.randint(-40, 10) * rng.choice([1.0, 1.125, 1.5, 1.875]) for _ in range(4)]
        shift = 126 - K.FP4_EPI_LOG2                                        # the kernel's scale operand
        sbits = [torch.tensor([s * 2.0 ** shift]).to(torch.bfloat16).view(torch.int16).item() & 0xFFFF for s in scales]
        regs = {"$4": sum(int(b) << (8 * j) for j, b in enumerate(shuffled.tolist())),
                **{f"${5 + j}": sbits[j] * 0x10001 for j in range(4)}}
        regs = _run_ptx(asm, regs)
        for j, b in enumerate(word):
            got = regs[f"${j}"]
            for half, nib in ((0, b & 0xF), (1, b >> 4)):
                bits = (got >> (16 * half)) & 0xFFFF
                value = torch.tensor([bits], dtype=torch.int32).to(torch.int16).view(torch.bfloat16).item()
                want = table[nib] * scales[j] * 2.0 ** -K.FP4_EPI_LOG2
                assert value == want and math.copysign(1, value) == math.copysign(1, want), \
                    (f"byte {b:#04x} in position {j}, nibble {half}: {value} != {want} (seed {seed})")


def test_fp4_kernel_layout_of_prepare_weights():
    """The PTX decode's layout as prepare_weights builds it (TritonMoeCore._fp4_kernel_layout, run here on CPU
    tensors): words shuffled, kernel scale bytes, an nvfp4 block with a zero scale gets zero codes and the rest
    keep theirs; a negative or NaN e4m3 byte and an e8m0 byte above FP4_MAX_E8M0 are refused naming tensor (and
    index)."""
    if not HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()
    lay = _tm().TritonMoeCore._fp4_kernel_layout
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(1, 256, (2, 3, 32), generator=g, dtype=torch.int32).to(torch.uint8)      # K = 64
    s4 = (torch.rand(2, 3, 4, generator=g) * 3 + 0.5).to(torch.float8_e4m3fn).view(torch.uint8)
    s4[1, 2, 3] = 0
    w, sc = lay("w13", q, s4.clone(), True, 16)
    want = q.clone()
    want[1, 2, 24:32] = 0                                         # block 3 of row (1, 2): bytes 24..31
    assert torch.equal(K.fp4_unshuffle(w), want) and torch.equal(sc, K.fp4_kernel_e4m3(s4)), f"seed {seed}"
    for bad in (0x7F, 0x80 | 0x38):
        s_bad = s4.clone()
        s_bad[0, 1, 2] = bad
        with pytest.raises(RunnerInputError, match=r"w2_scale\[0, 1, 2\]: e4m3 byte .* negative or NaN"):
            lay("w2", q, s_bad, True, 16)
    s8 = torch.randint(110, 130, (2, 3, 2), generator=g, dtype=torch.int32).to(torch.uint8)
    w, sc = lay("w2", q, s8, False, 32)
    assert torch.equal(K.fp4_unshuffle(w), q) and torch.equal(sc, K.fp4_kernel_e8m0(s8)), f"seed {seed}"
    s8[1, 0, 1] = K.FP4_MAX_E8M0 + 1
    with pytest.raises(RunnerInputError, match=rf"w2_scale\[1, 0, 1\]: an e8m0 scale byte of {K.FP4_MAX_E8M0 + 1}"):
        lay("w2", q, s8, False, 32)


def test_fp4_shuffle_moves_every_bit_once_and_round_trips():
    """fp4_shuffle is a permutation of each 32-bit word's bits (FP4_BIT_POS covers 0..31 once), keeps the shape,
    inverts with fp4_unshuffle on random multi-dimensional tensors, and refuses other dtypes and a last dimension
    that is not whole words; fp4_kernel_e8m0's byte is the bf16 exponent field of the shifted scale (0 stays 0),
    fp4_kernel_e4m3's byte gives every non-negative finite e4m3 scale times 2^(126 - FP4_EPI_LOG2) exactly as
    ``(k << 4) + FP4_E4M3_BASE`` (and none for NaN and negative ones); both invert."""
    if not HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()
    assert sorted(p for w in K.FP4_BIT_POS for p in w) == list(range(32))
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 256, (3, 5, 24), generator=g, dtype=torch.int32).to(torch.uint8)
    sh = K.fp4_shuffle(q)
    assert sh.shape == q.shape and sh.dtype == torch.uint8 and not torch.equal(sh, q), f"seed {seed}"
    assert torch.equal(K.fp4_unshuffle(sh), q), f"seed {seed}"
    # a single set bit lands where FP4_BIT_POS says
    for w, b in ((0, 0), (3, 2), (7, 3), (6, 1)):
        one = torch.tensor([(1 << (4 * w + b)) >> (8 * j) & 0xFF for j in range(4)], dtype=torch.uint8)
        word = sum(int(x) << (8 * j) for j, x in enumerate(K.fp4_shuffle(one).tolist()))
        assert word == 1 << K.FP4_BIT_POS[w][b]
    e8 = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    ke = K.fp4_kernel_e8m0(e8[:K.FP4_MAX_E8M0 + 1])
    assert ke[0] == 0 and torch.equal(K.fp4_kernel_e8m0(ke, inverse=True), e8[:K.FP4_MAX_E8M0 + 1])
    e4 = torch.arange(127, dtype=torch.int32).to(torch.uint8)                 # every non-negative finite e4m3 byte
    k4 = K.fp4_kernel_e4m3(e4)
    assert k4[0] == 0 and len(set(k4.tolist())) == 127 and torch.equal(K.fp4_kernel_e4m3(k4, inverse=True), e4)
    bits = ((k4.to(torch.int32) << 4) + K.FP4_E4M3_BASE).to(torch.int16).view(torch.bfloat16).double()
    want = e4.view(torch.float8_e4m3fn).double() * 2.0 ** (126 - K.FP4_EPI_LOG2)
    assert torch.equal(bits[1:], want[1:])
    assert K.fp4_kernel_e4m3(torch.tensor([0x7F, 0x80, 0xC1], dtype=torch.uint8)).tolist() == [255, 255, 255]
    for sb in (1, 100, 127, K.FP4_MAX_E8M0):          # the byte is the bf16 exponent field of 2^(s-127) * 2^(126 - 32)
        val = torch.tensor([int(K.fp4_kernel_e8m0(torch.tensor([sb], dtype=torch.uint8))) << 7], dtype=torch.int32)
        assert val.to(torch.int16).view(torch.bfloat16).item() == 2.0 ** (sb - 127 + 126 - K.FP4_EPI_LOG2)
    with pytest.raises(ValueError, match="multiple of 4"):
        K.fp4_shuffle(q[..., :6])
    with pytest.raises(ValueError, match="uint8"):
        K.fp4_shuffle(q.to(torch.int16))


# --- checkpoint layouts (pure torch) -------------------------------------------------------------------------

def _e2m1_lut_dequant_gpt_oss(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """gpt-oss blocks [E, N, G, 16] + e8m0 scales [E, N, G] -> float64 [E, N, G*32], as transformers'
    convert_moe_packed_tensors defines it (a 16-entry value table, low nibble first, ldexp by s - 127),
    written here from that definition."""
    lut = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                       dtype=torch.float64)
    b = blocks.long()
    vals = torch.stack([lut[b & 0xF], lut[b >> 4]], dim=-1).reshape(*blocks.shape[:-1], 32)
    vals = torch.ldexp(vals, (scales.long() - 127)[..., None])
    return vals.reshape(blocks.shape[0], blocks.shape[1], -1)


def gpt_oss_checkpoint(e: int, h: int, i: int, g: torch.Generator):
    """A random gpt-oss MXFP4 expert layer in its checkpoint layout (transformers' Mxfp4GptOssExperts names and
    shapes: interleaved gate/up rows)."""
    q13, s13 = random_fp4("mxfp4", e, 2 * i, h, g)
    q2, s2 = random_fp4("mxfp4", e, h, i, g)
    return {"gate_up_proj_blocks": q13.reshape(e, 2 * i, h // 32, 16), "gate_up_proj_scales": s13["scale"],
            "down_proj_blocks": q2.reshape(e, h, i // 32, 16), "down_proj_scales": s2["scale"],
            "gate_up_proj_bias": torch.randn(e, 2 * i, generator=g) * 0.2, "down_proj_bias": torch.randn(e, h, generator=g) * 0.2}


def test_gpt_oss_layout_converts_to_the_canonical_one():
    """from_gpt_oss: the canonical tensors dequantize (reference.reference_dequantize) to exactly the checkpoint's
    weights as transformers dequantizes them, rows de-interleaved (gate = even rows); biases likewise; TP slices
    are the matching slices of the whole; w2_bias on rank 0 only."""
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    e, h, i = 3, 64, 128
    ck = gpt_oss_checkpoint(e, h, i, g)
    out = cl.from_gpt_oss(**ck)
    gu = _e2m1_lut_dequant_gpt_oss(ck["gate_up_proj_blocks"], ck["gate_up_proj_scales"])       # [E, 2I, H] interleaved
    dn = _e2m1_lut_dequant_gpt_oss(ck["down_proj_blocks"], ck["down_proj_scales"])
    w13 = reference_dequantize(out["w13"], {"scale": out["w13_scale"]}, "mxfp4")
    w2 = reference_dequantize(out["w2"], {"scale": out["w2_scale"]}, "mxfp4")
    assert torch.equal(w13[:, :i], gu[:, 0::2]) and torch.equal(w13[:, i:], gu[:, 1::2]), f"seed {seed}"
    assert torch.equal(w2, dn), f"seed {seed}"
    b = ck["gate_up_proj_bias"]
    assert torch.equal(out["w13_bias"], torch.cat([b[:, 0::2], b[:, 1::2]], 1)) and out["w13_bias"].dtype == torch.float32
    for rank in range(2):
        part = cl.from_gpt_oss(**ck, tp_rank=rank, tp_size=2)
        pw13 = reference_dequantize(part["w13"], {"scale": part["w13_scale"]}, "mxfp4")
        pw2 = reference_dequantize(part["w2"], {"scale": part["w2_scale"]}, "mxfp4")
        sl = slice(rank * i // 2, (rank + 1) * i // 2)
        assert torch.equal(pw13, torch.cat([w13[:, :i][:, sl], w13[:, i:][:, sl]], 1)), f"rank {rank} (seed {seed})"
        assert torch.equal(pw2, w2[:, :, sl]), f"rank {rank} (seed {seed})"
        assert torch.equal(part["w2_bias"], out["w2_bias"] if rank == 0 else torch.zeros_like(out["w2_bias"]))
    assert cl.from_gpt_oss(**ck, tp_rank=3, tp_size=4)["w2_scale"].shape == (e, h, 1)     # 128 / 4: one group each
    with pytest.raises(ValueError, match="whole number of scale groups"):
        cl.from_gpt_oss(**ck, tp_rank=0, tp_size=8)                                       # 16: half a group
    with pytest.raises(ValueError, match="down_proj_blocks must be"):
        cl.from_gpt_oss(**{**ck, "down_proj_blocks": ck["down_proj_blocks"][:, :-1]})
    with pytest.raises(ValueError, match="gate_up_proj_blocks must be uint8"):
        cl.from_gpt_oss(**{**ck, "gate_up_proj_blocks": ck["gate_up_proj_blocks"].reshape(e, 2 * i, -1)})


def _swizzle_like_vllm(scale: torch.Tensor) -> torch.Tensor:
    """vLLM's swizzle_blockscale (nvfp4_utils.py at the commit moe_select/checkpoint_layouts.py cites), written
    here from its definition: pad to 128 x 4, view [E, M/128, 4, 32, K/4, 4], permute (0, 1, 4, 3, 2, 5)."""
    e, m, k = scale.shape
    mp, kp = -(-m // 128) * 128, -(-k // 4) * 4
    pad = torch.zeros(e, mp, kp, dtype=scale.dtype)
    pad[:, :m, :k] = scale
    return pad.reshape(e, mp // 128, 4, 32, kp // 4, 4).permute(0, 1, 4, 3, 2, 5).contiguous().reshape(e, mp, kp)


def modelopt_checkpoint(e: int, h: int, i: int, g: torch.Generator, prefix="model.layers.3.mlp.experts", same=True):
    """Random per-expert ModelOpt NVFP4 tensors under their checkpoint names (gate_proj, up_proj, down_proj:
    weight, weight_scale, weight_scale_2)."""
    out = {}
    for x in range(e):
        for proj, (n, k) in (("gate_proj", (i, h)), ("up_proj", (i, h)), ("down_proj", (h, i))):
            q, s = random_fp4("nvfp4", 1, n, k, g)
            p = f"{prefix}.{x}.{proj}"
            glob = s["global_scale"][0]
            if proj == "up_proj" and same:
                glob = out[f"{prefix}.{x}.gate_proj.weight_scale_2"]
            out.update({f"{p}.weight": q[0], f"{p}.weight_scale": s["scale"][0], f"{p}.weight_scale_2": glob.reshape(()),
                        f"{p}.input_scale": torch.ones(())})
    return out


def _modelopt_reference(ck: dict, prefix: str, e: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 w13 (gate then up) and w2 of every expert, each projection dequantized on its own."""
    def deq(p):
        return reference_dequantize(ck[f"{p}.weight"][None], {"scale": ck[f"{p}.weight_scale"][None],
                                                              "global_scale": ck[f"{p}.weight_scale_2"].reshape(1)}, "nvfp4")[0]
    w13 = torch.stack([torch.cat([deq(f"{prefix}.{x}.gate_proj"), deq(f"{prefix}.{x}.up_proj")]) for x in range(e)])
    return w13, torch.stack([deq(f"{prefix}.{x}.down_proj") for x in range(e)])


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_modelopt_nvfp4_layout_converts_to_the_canonical_one(layout):
    """stack_modelopt_experts + from_modelopt_nvfp4 (linear scales, or swizzled as vLLM writes them): the canonical
    tensors dequantize to exactly each projection's own weights; a TP slice to the matching slice."""
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    e, h, i, prefix = 3, 64, 96, "model.layers.3.mlp.experts"      # 2*I = 192 rows: a partial 128-row tile
    ck = modelopt_checkpoint(e, h, i, g, prefix)
    st = cl.stack_modelopt_experts(ck, prefix, e)
    if layout == "swizzled":
        st["w13_weight_scale"] = _swizzle_like_vllm(st["w13_weight_scale"])
        st["w2_weight_scale"] = _swizzle_like_vllm(st["w2_weight_scale"])
        assert st["w13_weight_scale"].shape == (e, 256, 4) and st["w2_weight_scale"].shape == (e, 128, 8)
    out = cl.from_modelopt_nvfp4(**st, scale_layout=layout)
    ref13, ref2 = _modelopt_reference(ck, prefix, e)
    w13 = reference_dequantize(out["w13"], {"scale": out["w13_scale"], "global_scale": out["w13_global_scale"]}, "nvfp4")
    w2 = reference_dequantize(out["w2"], {"scale": out["w2_scale"], "global_scale": out["w2_global_scale"]}, "nvfp4")
    assert torch.equal(w13, ref13) and torch.equal(w2, ref2), f"{layout} (seed {seed})"
    part = cl.from_modelopt_nvfp4(**st, scale_layout=layout, tp_rank=1, tp_size=2)
    p13 = reference_dequantize(part["w13"], {"scale": part["w13_scale"], "global_scale": part["w13_global_scale"]}, "nvfp4")
    p2 = reference_dequantize(part["w2"], {"scale": part["w2_scale"], "global_scale": part["w2_global_scale"]}, "nvfp4")
    assert torch.equal(p13, torch.cat([ref13[:, 48:96], ref13[:, 144:]], 1)) and torch.equal(p2, ref2[:, :, 48:]), f"seed {seed}"


def test_modelopt_mismatched_gate_up_global_scales_are_reconciled_with_a_warning():
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    e, h, i, prefix = 2, 64, 32, "layers.0.experts"
    ck = modelopt_checkpoint(e, h, i, g, prefix, same=False)
    st = cl.stack_modelopt_experts(ck, prefix, e)
    with pytest.warns(cl.Fp4LayoutWarning, match="reconciled"):
        out = cl.from_modelopt_nvfp4(**st)
    ref13, _ = _modelopt_reference(ck, prefix, e)
    w13 = reference_dequantize(out["w13"], {"scale": out["w13_scale"], "global_scale": out["w13_global_scale"]}, "nvfp4")
    assert torch.equal(out["w13_global_scale"], st["w13_weight_scale_2"].max(1).values)
    # block scales re-rounded to e4m3 (3 mantissa bits): each weight within 2^-4 relative of its own value
    assert ((w13 - ref13).abs() <= ref13.abs() * 2.0 ** -4 + 1e-30).all(), f"seed {seed}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        st["w13_weight_scale_2"][:, 1] = st["w13_weight_scale_2"][:, 0]
        cl.from_modelopt_nvfp4(**st)                                          # equal: exact, no warning


def test_checkpoint_layout_errors():
    g = torch.Generator().manual_seed(1)
    st = cl.stack_modelopt_experts(modelopt_checkpoint(2, 64, 32, g, "p"), "p", 2)
    with pytest.raises(ValueError, match="scale_layout must be"):
        cl.from_modelopt_nvfp4(**st, scale_layout="blocked")
    with pytest.raises(ValueError, match=r"swizzled NVFP4 scales for 64 x 4 must be \[E, 128, 4\]"):
        cl.from_modelopt_nvfp4(**st, scale_layout="swizzled")
    with pytest.raises(ValueError, match="w13_weight_scale must be float8_e4m3fn"):
        cl.from_modelopt_nvfp4(**{**st, "w13_weight_scale": st["w13_weight_scale"].float()})
    with pytest.raises(ValueError, match="w2_weight_scale_2 must be finite and positive"):
        cl.from_modelopt_nvfp4(**{**st, "w2_weight_scale_2": -st["w2_weight_scale_2"]})
    with pytest.raises(ValueError, match="checkpoint tensor 'p.0.gate_proj.weight' not found"):
        cl.stack_modelopt_experts({}, "p", 2)
    with pytest.raises(ValueError, match="tp_rank 2 must be in"):
        cl.from_modelopt_nvfp4(**st, tp_rank=2, tp_size=2)


@interp
def test_checkpoint_layouts_through_the_kernels():
    """A gpt-oss checkpoint layer (from_gpt_oss) and a ModelOpt one with swizzled scales (from_modelopt_nvfp4)
    through the triton core, against float64 references built from the checkpoints' own tensors: gpt-oss's expert
    in its own (interleaved) form, ``(clamp(up) + 1) * g * sigmoid(1.702 g)`` with ``g, up = h[::2], h[1::2]``
    (transformers GptOssExperts), written here."""
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    e, h, i, k, t = 4, 64, 64, 2, 7
    ck = gpt_oss_checkpoint(e, h, i, g)
    spec = spec_of("mxfp4", "swiglu_oai", e=e, k=k, h=h, i=i, limit=7.0)
    core = _tm().TritonMoeCore(spec, "cpu")
    pw = core.prepare_weights(**cl.from_gpt_oss(**ck))
    x, ids, w = routing(spec, t, seed, minus_one=False)
    out = core.forward(x, ids, w, pw)
    gu = _e2m1_lut_dequant_gpt_oss(ck["gate_up_proj_blocks"], ck["gate_up_proj_scales"])
    dn = _e2m1_lut_dequant_gpt_oss(ck["down_proj_blocks"], ck["down_proj_scales"])
    ref = torch.zeros(t, h, dtype=torch.float64)
    for tt in range(t):
        for kk in range(k):
            ex = int(ids[tt, kk])
            hh = gu[ex] @ x[tt].double() + ck["gate_up_proj_bias"][ex].double()
            gate, up = hh[0::2].clamp(max=7.0), hh[1::2].clamp(-7.0, 7.0)
            act = (up + 1) * gate * torch.sigmoid(1.702 * gate)
            ref[tt] += float(w[tt, kk]) * (dn[ex] @ act + ck["down_proj_bias"][ex].double())
    err = rel_error(out, ref)
    assert err <= tol(), f"gpt-oss layout through the kernels: rel_error {err:.3g} (seed {seed})"

    prefix = "model.layers.1.mlp.experts"
    mo = modelopt_checkpoint(e, h, i, g, prefix)
    st = cl.stack_modelopt_experts(mo, prefix, e)
    st["w13_weight_scale"] = _swizzle_like_vllm(st["w13_weight_scale"])
    st["w2_weight_scale"] = _swizzle_like_vllm(st["w2_weight_scale"])
    spec = spec_of("nvfp4", "silu", e=e, k=k, h=h, i=i)
    core = _tm().TritonMoeCore(spec, "cpu")
    pw = core.prepare_weights(**cl.from_modelopt_nvfp4(**st, scale_layout="swizzled"))
    ref13, ref2 = _modelopt_reference(mo, prefix, e)
    out = core.forward(x, ids, w, pw)
    err = rel_error(out, reference_moe(x, ids, w, ref13, ref2, "silu"))
    assert err <= tol(), f"ModelOpt layout (swizzled scales) through the kernels: rel_error {err:.3g} (seed {seed})"


# --- moe-select run: the layer kinds ------------------------------------------------------------------------

def _small_deepseek_nvfp4(tmp_path: Path) -> Path:
    """NVIDIA's DeepSeek-V3.1-NVFP4 config (examples/model_configs) shrunk to 16 experts, hidden 256, expert width
    64 (its NVFP4 layers and its bf16 MTP layer kept), for CPU runs."""
    src = ROOT / "examples" / "model_configs" / "nvidia__DeepSeek-V3.1-NVFP4"
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(hidden_size=256, moe_intermediate_size=64, intermediate_size=512, n_routed_experts=16, n_group=4, topk_group=2)
    dst = tmp_path / "dsv31-nvfp4-small"
    dst.mkdir()
    (dst / "config.json").write_text(json.dumps(cfg))
    (dst / "hf_quant_config.json").write_text((src / "hf_quant_config.json").read_text())
    return dst


def test_run_builds_the_layer_kind_asked_for(tmp_path, capsys):
    """``moe-select run --layer mtp`` builds DeepSeek-V3.1-NVFP4's bf16 MTP layer (its plan of its own), the
    default the NVFP4 layers; an unknown kind names the checkpoint's kinds (exit 2)."""
    from moe_select.cli import main

    cfg = _small_deepseek_nvfp4(tmp_path)
    assert main(["run", "--model-config", str(cfg), "--device", "cpu", "--tokens", "3", "--layer", "mtp"]) == 0
    out = capsys.readouterr().out
    assert "layer kind mtp: torch_native (bf16)" in out and " bf16; expert weights" in out, out
    assert main(["run", "--model-config", str(cfg), "--device", "cpu", "--tokens", "3"]) == 0
    out = capsys.readouterr().out
    assert "layer kind" not in out and " nvfp4; expert weights" in out, out
    assert main(["run", "--model-config", str(cfg), "--device", "cpu", "--tokens", "3", "--layer", "dense"]) == 2
    assert "MoE layer kinds are main, mtp" in capsys.readouterr().err


# --- configurations and the sm90 compile check ---------------------------------------------------------------

def test_fp4_default_configs_and_swap_ab_files(tmp_path):
    """Default tiles of the FP4 formats take whole scale groups per K tile; a tuned file may set SWAP_AB for an
    FP4 format only, and only a core with the portable decode reads such a file."""
    if not HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()
    for quant in FP4:
        for t in K.TOKEN_BUCKETS:
            for shape in ((128, 1536, 2048), (32, 5760, 2880), (256, 4096, 7168)):
                c = K.default_config(*shape, quant, t, 8)
                for gemm in ("gemm1", "gemm2"):
                    assert c[gemm]["BLOCK_K"] % GROUP[quant] == 0 and c[gemm]["BLOCK_K"] >= 32, (quant, t, shape, c)
    cfg = {"BLOCK_M": 16, "gemm1": {"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 4,
                                    "SWAP_AB": True},
           "gemm2": {"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 4}}
    for fmt, ok in (("mxfp4", True), ("bf16", False)):
        p = tmp_path / f"{fmt}.json"
        p.write_text(json.dumps({"format_version": 1, "key": {"format": fmt}, "configs": {"1": cfg}}))
        if ok:
            assert K.load_config_file(str(p))[1]["gemm1"]["SWAP_AB"] is True
        else:
            with pytest.raises(ValueError, match="SWAP_AB is an option of packed-FP4 files"):
                K.load_config_file(str(p))
    # a core with the PTX decode (any device but the interpreter's; here meta) refuses such a file by name
    spec = spec_of("mxfp4", "silu", h=1024, i=384)
    name = K.config_file_name(spec.num_local_experts, spec.w13_rows, spec.hidden_size, "mxfp4", "meta")
    (tmp_path / name).write_text(json.dumps({"format_version": 1, "key": {"format": "mxfp4"}, "configs": {"1": cfg}}))
    if not K.interpreting():
        with pytest.raises(RunnerInputError, match=r"tokens \[1\] set SWAP_AB: .*portable"):
            _tm().TritonMoeCore(spec, "meta", config_dir=str(tmp_path))
    assert _tm().TritonMoeCore(spec, "meta", config_dir=str(tmp_path), fp4_decode="portable").config_for(1)["gemm1"]["SWAP_AB"]


@interp
def test_fp4_tuner_dry_run_writes_configs_the_core_reads():
    """benchmarks/tune_triton_moe.py --dry-run --formats mxfp4 nvfp4 (interpreter, tiny shapes): one config file
    per format (no SWAP_AB candidate: triton_moe_kernels.SWAP_AB_ASM_ERROR; GEMV and DIRECT searched at 1 token),
    which a core reading that folder uses, still within tolerance of the reference."""
    spec_ = importlib.util.spec_from_file_location("tune_triton_moe", ROOT / "benchmarks" / "tune_triton_moe.py")
    assert spec_ is not None and spec_.loader is not None
    tune = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(tune)
    with tempfile.TemporaryDirectory() as out:
        assert tune.main(["--dry-run", "--out", out, "--budget-s", "120", "--formats", *FP4]) == 0
        log = json.loads((Path(out) / "tune_log.json").read_text())
        assert not log["errors"], log["errors"]
        timed = [c for fmt in FP4 for pt in log["results"]["dry"][fmt].values() for bm in pt["per_block_m"].values()
                 for c in bm["gemm1"]]
        assert timed and not any(c.get("SWAP_AB") for c in timed), timed     # the runner's GPU decode cannot read it
        # 1 token on 4 experts (0.5 rows per expert): the GEMV mode (opt-in in the default heuristic) is timed next to
        # the default MMA tile, its split-K too; the faster one is kept
        one = [log["results"]["dry"][fmt]["1"] for fmt in FP4]
        for r in one:
            gemv_bms = [bm for bm in r["per_block_m"] if int(bm) < 16]
            assert gemv_bms and "16" in r["per_block_m"], r
            timed_gemv = r["per_block_m"][gemv_bms[0]]["gemm1"]
            assert all(c.get("GEMV") for c in timed_gemv) and any(c.get("SPLIT_K", 1) > 1 for c in timed_gemv), r
            assert bool(r["gemm1"].get("GEMV")) == (r["BLOCK_M"] < 16), r
            # the DIRECT buckets searched too, compared with the sorted path's whole forward: the faster one is kept
            d = r["direct"]
            assert d["timings"] and d["sorted_us"] > 0 and any(x["gemm2"].get("SPLIT_SLOTS") for x in d["timings"]), d
            assert bool(r.get("DIRECT")) == (d["us"] < d["sorted_us"]), r
        m = tune.DRY_MODEL
        for quant in FP4:
            spec = spec_of(quant, e=m[0], k=m[1], h=m[2], i=m[3])
            seed = fresh_seed()
            layer = Fp4Layer(spec, seed)
            core, pw = core_for(spec, layer, config_dir=out + "/triton_configs")
            assert core.config_source.startswith(f"E={m[0]},N={2 * m[3]},K={m[2]},format={quant}"), core.config_source
            for t in tune.DRY_TOKENS:
                x, ids, w = routing(spec, t, seed + t)
                check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), f"tuned config, {t} tokens", seed)


def _tuned_layer(name: str) -> tuple[dict, LayerSpec]:
    """A committed FP4 tuned file's JSON and the layer of its key: E local experts, hidden K, intermediate N/2 (N for
    relu2), with the top_k and activation the file says it was tuned with (gpt-oss's SwiGLU limit 7.0 for
    swiglu_oai, as :func:`gpu_layer`)."""
    data = json.loads((CONFIG_DIR / name).read_text())
    key, tuned = data["key"], data["tuned"]
    act, top_k = tuned.get("activation"), tuned.get("top_k")
    assert act in ACTIVATIONS and isinstance(top_k, int) and top_k >= 1, f"{name}: tuned.activation {act!r}, tuned.top_k {top_k!r}"
    i = key["N"] if act == "relu2" else key["N"] // 2
    spec = LayerSpec(num_experts=key["E"], top_k=top_k, hidden_size=key["K"], intermediate_size=i, activation=act,
                     quant=key["format"], swiglu_limit=7.0 if act == "swiglu_oai" else None)
    return data, spec


def test_fp4_tuned_files_are_read_for_their_keys():
    """The H200 tune of the issue's four layers is committed (benchmarks/results/fp4tune_h200_2026-12-01; an H100 tune
    too, benchmarks/results/h100_tune_2026-12-05), and each
    FP4 tuned file is named for its own key, loads, and is what a core of that key on that GPU reads: the lookup
    gives every token count its nearest bucket in log scale (boundaries at the geometric means, ties to the smaller:
    5|6, 90|91, 724|725, 4096|4097 for the tuner's 1, 32, 256, 2048, 8192; the files may hold more buckets, e.g. 8
    and 128, 2|3 and 22|23 then around 8); on another GPU the default."""
    if not HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()
    h200 = {n for n in FP4_TUNED_FILES if n.endswith(",device=NVIDIA_H200.json")}
    want = {K.config_file_name(e, (i if act == "relu2" else 2 * i), h, REAL_FORMATS[m], "NVIDIA H200")
            for m, (e, _, h, i, act) in REAL.items()}
    assert want <= h200, sorted(want - h200)
    for name in FP4_TUNED_FILES:
        data, spec = _tuned_layer(name)
        key = data["key"]
        assert key.get("block_shape") is None, name
        assert name == K.config_file_name(key["E"], key["N"], key["K"], key["format"], key["device"]), name
        table = K.load_config_file(str(CONFIG_DIR / name))
        buckets = sorted(table)
        assert {1, 32, 256, 2048, 8192} <= set(buckets), (name, buckets)
        expect = {1: 1, 100000: buckets[-1]}
        for lo, hi in zip(buckets, buckets[1:]):         # the last token count of lo's range: floor(sqrt(lo * hi))
            edge = math.isqrt(lo * hi)
            expect |= {edge: lo, edge + 1: hi}
        if {1, 32} <= set(buckets) and 8 not in buckets:
            assert expect[5] == 1 and expect[6] == 32
        core = _tm().TritonMoeCore(spec, "meta")
        assert core.config_source == "default"           # on a device not named in any file
        core.device_name = key["device"]                 # the core's own lookup, as on that GPU
        got, src = core._load_configs()
        assert src == name and got == table, (name, src)
        for t, bucket in expect.items():
            cfg, src = K.get_config(key["E"], key["N"], key["K"], key["format"], t, spec.top_k, device_name=key["device"])
            assert src == name and cfg == table[bucket], (name, t, bucket)
        assert K.get_config(key["E"], key["N"], key["K"], key["format"], 32, spec.top_k,
                            device_name="NVIDIA A100-SXM4-80GB")[1] == "default"      # no file names this GPU


@pytest.mark.parametrize("name", FP4_TUNED_FILES)
@interp
def test_fp4_tuned_tiles_run_in_the_interpreter(name):
    """Every distinct tile configuration of a committed FP4 tuned file (BLOCK_M, both GEMMs' tiles, GROUP_M, and
    SWAP_AB where the file sets it), read by a core from a file of a small layer's key (the file's format and
    activation; E 8, K 2, H 256, I 128, so a BLOCK_K of 256 spans the hidden size and overhangs I), 37 tokens
    through the interpreter, against the float64 reference. (The interpreter ignores num_warps and num_stages;
    the GPU test runs the files at their own shapes.) A bucket with the Gluon GEMV (``GLUON``) cannot run here (Gluon
    has no interpreter): the interpreter's core runs those GEMMs on the ``tl`` GEMV's own tiles (``gemv_config``) and
    says so in its config source, which is checked."""
    K = _K()
    data, real = _tuned_layer(name)
    configs: list[dict] = []
    for c in K.load_config_file(str(CONFIG_DIR / name)).values():
        if c not in configs:
            configs.append(c)
    seed = fresh_seed()
    spec = spec_of(real.quant, real.activation, e=8, k=2, h=256, i=128, limit=real.swiglu_limit)
    layer = Fp4Layer(spec, seed)
    small = K.config_file_name(8, spec.w13_rows, 256, real.quant, "cpu")
    with tempfile.TemporaryDirectory() as d:
        for n, cfg in enumerate(configs):
            folder = Path(d) / str(n)
            folder.mkdir()
            (folder / small).write_text(json.dumps({"format_version": 1, "key": {"format": real.quant},
                                                    "configs": {"1": cfg}}))
            core, pw = core_for(spec, layer, config_dir=str(folder))
            if cfg["gemm1"].get("GLUON") or cfg["gemm2"].get("GLUON"):
                assert core.config_source.startswith(small + " (tokens [1]: GLUON buckets run the tl GEMV"), core.config_source
                got = core.config_for(37)
                assert got["BLOCK_M"] == 1 and not got["gemm1"].get("GLUON") and not got["gemm2"].get("GLUON"), got
            else:
                assert core.config_source == small and core.config_for(37) == cfg, (core.config_source, cfg)
            x, ids, w = routing(spec, 37, seed + n)
            check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), f"{name} tile {cfg}", seed)


def _sm90():
    """tests/test_triton_moe.py's sm90 compile helper (Triton's own binder and compiler for sm90, then ptxas -v),
    reused."""
    spec = importlib.util.spec_from_file_location("_test_triton_moe_helpers", ROOT / "tests" / "test_triton_moe.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("quant, model, tokens, swap, prefetch", [
    ("mxfp4", "gpt-oss-20b", 1, False, False), ("mxfp4", "gpt-oss-20b", 2048, False, False),
    ("mxfp4", "gpt-oss-120b", 32, True, False), ("nvfp4", "Qwen3-30B-A3B", 1, False, False),
    ("nvfp4", "Qwen3-30B-A3B", 256, True, False), ("nvfp4", "DeepSeek-V3", 8192, False, False),
    ("mxfp4", "gpt-oss-20b", 256, False, True), ("nvfp4", "Qwen3-30B-A3B", 32, False, True)])
def test_fp4_kernels_compile_for_sm90(monkeypatch, quant, model, tokens, swap, prefetch):
    """Every kernel of a forward, with the default configuration, compiled for sm90 with the PTX decode (SWAP_AB
    tiles: with the portable decode, the only one they take): it compiles (ptxas accepts the inline PTX), fits an sm90
    CTA's shared memory, uses tensor cores (the MMA tiles: the default; the opt-in GEMV mode, which uses none, is
    compiled by test_triton_w4a16_gemv), runs the decode's funnel shifts (none without it) and spills no register;
    also with PREFETCH on the MMA tiles."""
    helpers = _sm90()
    if not helpers._ptxas_runs():
        pytest.skip("needs triton's bundled ptxas (and triton imported without TRITON_INTERPRET)")
    K = _K()
    done = []
    monkeypatch.setattr(K._Kernel, "launch", lambda self, grid, device, *a, warmup=False, **kw:
                        done.append({**helpers._sm90_compile(self, a, kw), "asm": kw.get("FP4_ASM"),
                                     "swap": kw.get("SWAP_AB")}))
    e, k, h, i, act = REAL[model]
    spec = LayerSpec(num_experts=e, top_k=k, hidden_size=h, intermediate_size=i, activation=act, quant=quant)
    meta = torch.device("meta")
    grp, n13 = GROUP[quant], spec.w13_rows
    sdt = torch.float8_e4m3fn if quant == "nvfp4" else torch.uint8
    kw = {"w13_scale": torch.empty(e, n13, h // grp, dtype=sdt, device=meta),
          "w2_scale": torch.empty(e, h, i // grp, dtype=sdt, device=meta)}
    if quant == "nvfp4":
        kw.update(w13_global_scale=torch.empty(e, device=meta), w2_global_scale=torch.empty(e, device=meta))
    core = _tm().TritonMoeCore(spec, meta, fp4_decode="portable" if swap else "auto")
    if swap:
        _set_configs(core, SWAP_AB=True)
    if prefetch:    # the MMA tiles' register double buffer of packed codes and scales
        _set_configs(core, PREFETCH=True)
    pw = core.prepare_weights(torch.empty(e, n13, h // 2, dtype=torch.uint8, device=meta),
                              torch.empty(e, h, i // 2, dtype=torch.uint8, device=meta), **kw)
    x = torch.empty(tokens, h, dtype=torch.bfloat16, device=meta)
    core.forward(x, torch.empty(tokens, k, dtype=torch.int32, device=meta), torch.empty(tokens, k, device=meta), pw)
    gemms = [d for d in done if d["kernel"] == "_moe_gemm_kernel"]
    split = sum(core.config_for(tokens)[g].get("SPLIT_K", 1) > 1 for g in ("gemm1", "gemm2"))   # + the reductions
    assert len(gemms) == 2 + split, [d["kernel"] for d in done]
    for d in done:
        assert d["shared"] <= helpers.SMEM_SM90, d
        assert d["spill"] == 0, (d, core.config_for(tokens))
    gemv = bool(core.config_for(tokens)["gemm1"].get("GEMV"))
    assert not gemv, core.config_for(tokens)   # GEMV is opt-in until measured (tests/test_triton_w4a16_gemv.py compiles it)
    for d in gemms:
        assert d["asm"] is (not swap) and bool(d["swap"]) == swap, d
        assert (d["funnel_shifts"] > 0) == (not swap), d
        assert (d["mma"] == 0) if gemv else (d["mma"] > 0), d
        if not gemv:        # GEMV programs store at most 4 x BLOCK_N elements (1 x 32 at 1 token: one per thread)
            assert d["scalar_stores"] == 0, d


REAL = {"gpt-oss-20b": (32, 4, 2880, 2880, "swiglu_oai"), "gpt-oss-120b": (128, 4, 2880, 2880, "swiglu_oai"),
        "Qwen3-30B-A3B": (128, 8, 2048, 768, "silu"), "DeepSeek-V3": (256, 8, 7168, 2048, "silu")}
#: The layers of the issue's four checkpoints and their formats (examples/model_configs).
REAL_FORMATS = {"gpt-oss-20b": "mxfp4", "gpt-oss-120b": "mxfp4", "Qwen3-30B-A3B": "nvfp4", "DeepSeek-V3": "nvfp4"}


# --- GPU -----------------------------------------------------------------------------------------------------

def gpu_test(fn):
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")(fn))


def gpu_layer(quant, act="silu", *, e=32, k=4, h=1024, i=384, ep=1, rank=0, seed=None):
    spec = LayerSpec(num_experts=e, top_k=k, hidden_size=h, intermediate_size=i, activation=act, quant=quant, ep=ep,
                     ep_rank=rank, tp=ep, swiglu_limit=7.0 if act == "swiglu_oai" else None)
    seed = fresh_seed() if seed is None else seed
    return spec, Fp4Layer(spec, seed, "cuda"), seed


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("quant", FP4)
@gpu_test
def test_gpu_fp4_every_activation(quant, act):
    spec, layer, seed = gpu_layer(quant, act)
    core, pw = core_for(spec, layer, "cuda", warmup=False)
    assert core.fp4_asm
    for t in (1, 37, 300):
        x, ids, w = routing(spec, t, seed + t, "cuda")
        check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), f"{t} tokens", seed)


@pytest.mark.parametrize("model", list(REAL))
@gpu_test
def test_gpu_fp4_real_layer_shapes(model):
    """The four checkpoints' layers at their real shapes (the whole layer on one GPU), 1, 32 and 256 tokens."""
    e, k, h, i, act = REAL[model]
    spec, layer, seed = gpu_layer(REAL_FORMATS[model], act, e=e, k=k, h=h, i=i)
    core, pw = core_for(spec, layer, "cuda", warmup=False)
    for t in (1, 32, 256):
        x, ids, w = routing(spec, t, seed + t, "cuda")
        check(spec, layer, x[:8], ids[:8], w[:8], core.forward(x, ids, w, pw)[:8], f"{model}, {t} tokens (first 8 checked)", seed)


@pytest.mark.parametrize("quant", FP4)
@gpu_test
def test_gpu_fp4_ptx_decode_equals_the_portable_one(quant):
    """The PTX decode (of the shuffled layout, its scale and epilogue offsets) and the portable decode (of the
    canonical layout) give the same output bit for bit, at decode and prefill tile shapes; prepare_weights stored the
    shuffled layout for the PTX decode only. SWAP_AB tiles run with the portable decode and are refused with the PTX
    one (its A-operand registers do not hold whole words: SWAP_AB_ASM_ERROR)."""
    spec, layer, seed = gpu_layer(quant, "swiglu_oai", k=8, e=64)
    zero = torch.zeros((), dtype=layer.kwargs["w13_scale"].dtype, device="cuda")
    layer.kwargs["w13_scale"][:, :5, 1] = zero  # a zero scale reads as 0 in both decodes (nvfp4: codes zeroed)
    a, pa = core_for(spec, layer, "cuda", warmup=False, fp4_decode="asm")
    b, pb = core_for(spec, layer, "cuda", warmup=False, fp4_decode="portable")
    assert pa.fp4_shuffled and not pb.fp4_shuffled
    assert torch.equal(pb.w2, _K().fp4_unshuffle(pa.w2)) and torch.equal(pa.w2, _K().fp4_shuffle(pb.w2))
    w13 = pb.w13.clone()
    if quant == "nvfp4":                       # the zero-scale blocks' codes are zeroed
        w13.view(*w13.shape[:-1], -1, 8)[:, :5, 1] = 0
    assert torch.equal(_K().fp4_unshuffle(pa.w13), w13)
    kb = _K().fp4_kernel_e8m0 if quant == "mxfp4" else _K().fp4_kernel_e4m3
    assert torch.equal(pa.s13, kb(pb.s13)) and torch.equal(kb(pa.s2, inverse=True), pb.s2)
    for t in (3, 700):
        x, ids, w = routing(spec, t, seed + t, "cuda")
        assert torch.equal(a.forward(x, ids, w, pa), b.forward(x, ids, w, pb)), f"{quant}, {t} tokens (seed {seed})"
    _set_configs(b, SWAP_AB=True)
    x, ids, w = routing(spec, 5, seed, "cuda")
    check(spec, layer, x, ids, w, b.forward(x, ids, w, pb), "SWAP_AB (portable decode)", seed)
    _set_configs(a, SWAP_AB=True)
    with pytest.raises(ValueError, match="SWAP_AB .* portable FP4 decode only"):
        a.forward(x, ids, w, pa)


@gpu_test
def test_gpu_mxfp4_scale_above_the_ptx_decode_range_is_refused_not_overflowed():
    """An e8m0 scale byte above FP4_MAX_E8M0 (2^33) would overflow the PTX decode's shifted bf16 scale:
    prepare_weights refuses it for the PTX decode (RunnerInputError naming the tensor and the byte) and the portable
    decode still runs it; one byte at the limit is accepted."""
    spec, layer, seed = gpu_layer("mxfp4")
    K = _K()
    kw = dict(layer.kwargs)
    kw["w2_scale"] = kw["w2_scale"].clone()
    kw["w2_scale"][1, 2, 0] = K.FP4_MAX_E8M0 + 1
    with pytest.raises(RunnerInputError, match=rf"w2_scale\[1, 2, 0\]: an e8m0 scale byte of {K.FP4_MAX_E8M0 + 1}"):
        _tm().TritonMoeCore(spec, "cuda", warmup=False, fp4_decode="asm").prepare_weights(**kw)
    _tm().TritonMoeCore(spec, "cuda", warmup=False, fp4_decode="portable").prepare_weights(**kw)
    kw["w2_scale"][1, 2, 0] = K.FP4_MAX_E8M0
    _tm().TritonMoeCore(spec, "cuda", warmup=False, fp4_decode="asm").prepare_weights(**kw)


@gpu_test
def test_gpu_nvfp4_negative_or_nan_block_scale_is_refused_by_the_ptx_decode():
    """The PTX decode's scale bytes cover positive finite e4m3 scales: a negative or NaN one is refused by name for
    it (RunnerInputError), and the portable decode runs it."""
    spec, layer, seed = gpu_layer("nvfp4")
    for bad in (-1.5, float("nan")):
        kw = dict(layer.kwargs)
        kw["w13_scale"] = kw["w13_scale"].clone()
        kw["w13_scale"][2, 3, 1] = bad
        with pytest.raises(RunnerInputError, match=r"w13_scale\[2, 3, 1\]: e4m3 byte .* negative or NaN"):
            _tm().TritonMoeCore(spec, "cuda", warmup=False, fp4_decode="asm").prepare_weights(**kw)
        _tm().TritonMoeCore(spec, "cuda", warmup=False, fp4_decode="portable").prepare_weights(**kw)


@pytest.mark.parametrize("quant", FP4)
@gpu_test
def test_gpu_fp4_expert_parallel_ranks(quant):
    full, layer, seed = gpu_layer(quant, k=6)
    x, ids, w = routing(full, 50, seed, "cuda")
    total = torch.zeros(x.shape, dtype=torch.float64)
    for rank in range(4):
        spec = LayerSpec(num_experts=32, top_k=6, hidden_size=1024, intermediate_size=384, quant=quant, ep=4, ep_rank=rank, tp=4)
        sl = slice(spec.expert_offset, spec.expert_offset + spec.num_local_experts)
        part = Fp4Layer.__new__(Fp4Layer)
        part.kwargs = {kk: v[sl] for kk, v in layer.kwargs.items()}
        part.d13 = DeviceExperts(layer.d13.q[sl], {kk: v[sl] for kk, v in layer.d13.scales.items()}, quant)
        part.d2 = DeviceExperts(layer.d2.q[sl], {kk: v[sl] for kk, v in layer.d2.scales.items()}, quant)
        part.b13 = part.b2 = None
        core, pw = core_for(spec, part, "cuda", warmup=False)
        out = core.forward(x, ids, w, pw)
        check(spec, part, x, ids, w, out, f"rank {rank}", seed)
        total += out.double().cpu()
    err = rel_error(total, reference_moe(x, ids, w, layer.d13, layer.d2, device="cuda"))
    assert err <= tol(), f"{quant}: ranks' sum rel_error {err:.3g} (seed {seed})"


def graph_replays_equal_eager(spec, layer, core, pw, tokens: int, seed: int, what: str, replays: int = 3) -> None:
    """Capture ``core.forward`` at ``tokens`` in a CUDA graph, then ``replays`` times: fresh routing copied into the
    static inputs, one replay, equal to an eager forward of the same inputs bit for bit and within tolerance of the
    float64 reference."""
    x, ids, w = routing(spec, tokens, seed, "cuda")
    sx, sids, sw = x.clone(), ids.clone(), w.clone()
    core.forward(sx, sids, sw, pw)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        sout = core.forward(sx, sids, sw, pw)
    for s in range(replays):
        x2, ids2, w2 = routing(spec, tokens, seed + 100 + s, "cuda")
        sx.copy_(x2)
        sids.copy_(ids2)
        sw.copy_(w2)
        g.replay()
        eager = core.forward(x2, ids2, w2, pw)
        torch.cuda.synchronize()
        assert torch.equal(sout, eager), f"{what}: graph replay {s} differs from eager (seed {seed})"
        check(spec, layer, x2, ids2, w2, sout, f"{what}: graph replay {s}", seed)


@pytest.mark.parametrize("quant", FP4)
@pytest.mark.parametrize("tokens", [1, 100, 700])
@gpu_test
def test_gpu_fp4_cuda_graph_replay_equals_eager(quant, tokens):
    spec, layer, seed = gpu_layer(quant, "swiglu_oai", k=8, e=64)
    core, pw = core_for(spec, layer, "cuda", warmup=False)
    graph_replays_equal_eager(spec, layer, core, pw, tokens, seed, f"{quant}, {tokens} tokens")


@pytest.mark.parametrize("quant", FP4)
@gpu_test
def test_gpu_fp4_no_recompile_across_token_counts(quant):
    K = _K()
    spec, layer, seed = gpu_layer(quant, k=8, e=64, h=512, i=256)
    core, pw = core_for(spec, layer, "cuda")
    assert core.compile_s is not None
    before = K.compiled_variants()
    x, ids, w = routing(spec, 2100, seed, "cuda")
    for t in range(1, 2101, 7):
        core.forward(x[:t], ids[:t], w[:t], pw)
    torch.cuda.synchronize()
    assert K.compiled_variants() == before, f"{K.compiled_variants() - before} compiles after prepare_weights"


@pytest.mark.parametrize("name", FP4_TUNED_FILES)
@gpu_test
def test_gpu_fp4_tuned_config_files_load_and_match_the_reference(name):
    """Every committed FP4 tuned file (one test each; the 16-bit and FP8 files have tests/test_triton_moe.py's): on
    the GPU it was tuned for, a core of its key (its top_k and activation, gpt-oss's biases and limit for swiglu_oai)
    reads it, and at each of its buckets' token counts up to 256 uses that bucket's tiles and matches the float64
    reference on every token, within the tolerance table's bf16 tolerance."""
    K = _K()
    dev = torch.cuda.get_device_name().replace(" ", "_")
    if not name.endswith(f"device={dev}.json"):
        pytest.skip(f"{name} is not for {dev}")
    _, real = _tuned_layer(name)
    spec, layer, seed = gpu_layer(real.quant, real.activation, e=real.num_experts, k=real.top_k, h=real.hidden_size,
                                  i=real.intermediate_size)
    core, pw = core_for(spec, layer, "cuda", warmup=False)
    assert core.config_source == name, core.config_source
    table = K.load_config_file(str(K.CONFIG_DIR / name))
    checked = [t for t in sorted(table) if t <= 256]
    assert checked, sorted(table)
    for t in checked:
        assert core.config_for(t) == table[t], (t, core.config_for(t))
        x, ids, w = routing(spec, t, seed + t, "cuda")
        check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), f"{name}, {t} tokens", seed)


@gpu_test
def test_gpu_run_plans_triton_and_replays_a_cuda_graph(tmp_path, capsys):
    """``moe-select run --device cuda`` on the shrunken DeepSeek-V3.1-NVFP4 config: the plan is triton (nvfp4, bf16
    activations), the forward is captured in a CUDA graph whose replay equals eager, within tolerance; the MTP
    layer kind (bf16) too."""
    from moe_select.cli import main

    cfg = _small_deepseek_nvfp4(tmp_path)
    for layer in ("main", "mtp"):
        rc = main(["run", "--model-config", str(cfg), "--device", "cuda", "--tokens", "40", "--layer", layer])
        out = capsys.readouterr().out
        assert rc == 0, out
        assert "runner: MoeRunner(triton" in out and "replay equals eager" in out, out


@gpu_test
def test_gpu_checkpoint_layouts_through_the_kernels():
    """gpt-oss-20b-shaped checkpoint tensors (interleaved rows) converted by from_gpt_oss, through the compiled
    kernels, against the float64 reference of the converted (canonical) weights."""
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    e, h, i = 32, 2880, 2880
    ck = {k: v.cuda() for k, v in gpt_oss_checkpoint(e, h, i, g).items()}
    spec = LayerSpec(num_experts=e, top_k=4, hidden_size=h, intermediate_size=i, activation="swiglu_oai", quant="mxfp4",
                     swiglu_limit=7.0)
    kw = cl.from_gpt_oss(**ck)
    core = _tm().TritonMoeCore(spec, "cuda", warmup=False)
    pw = core.prepare_weights(**kw)
    layer = Fp4Layer.__new__(Fp4Layer)
    layer.d13 = DeviceExperts(kw["w13"], {"scale": kw["w13_scale"]}, "mxfp4")
    layer.d2 = DeviceExperts(kw["w2"], {"scale": kw["w2_scale"]}, "mxfp4")
    layer.b13, layer.b2 = kw["w13_bias"], kw["w2_bias"]
    x, ids, w = routing(spec, 16, seed, "cuda")
    check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), "gpt-oss checkpoint layout", seed)


if __name__ == "__main__" and "--worker" in sys.argv:
    _serve()
