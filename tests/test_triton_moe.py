"""The ``triton`` runner (backends/triton_moe.py, backends/triton_moe_kernels.py) and the int-format
helpers (moe_select/quant_int.py).

CPU tests run the Triton kernels through Triton's interpreter at tiny shapes. The interpreter must be
switched on before triton is imported (``TRITON_INTERPRET=1``), which would change every other test of
the session, so these tests run in one worker subprocess started with that variable (``_Worker``: the
test bodies below execute there; the parent reports each as its own test, with the worker's traceback
on failure). Run with ``TRITON_INTERPRET=1`` yourself and they run in-process. Without a GPU the kernels
are also compiled for sm90 by Triton and ptxas (``test_default_configs_compile_for_sm90``: shared memory,
tensor cores, register spills). GPU tests (marked ``gpu``) run the compiled kernels at real layer
shapes, in this process: every format and activation, expert-parallel ranks, CUDA-graph replay equal
to eager, no compiles across token counts 1..4099, options and checkpoint layouts, tuned config files.

Inputs are fresh random draws each run (``x ~ N(0, 1)``, ``w13 ~ N(0, 1/H)``, ``w2 ~ N(0, 1/I)``,
routing weights uniform in [0.1, 1.1)); every assertion message carries the seed
(``MOE_SELECT_TEST_SEED=<seed>`` replays it). The integer formats' reference weights are dequantized here from
the kernel-layout tensors the runner is given, by a few lines of plain torch written from the layout's
definition (:func:`dequant_int_kernel_layout`), not by :mod:`moe_select.quant_int`. Tolerances on ``rel_error =
max|out - ref| / max|ref|`` against the float64 reference on the dequantized weights (so weight quantization
error is not counted) are the one table's, :func:`moe_select.formats.tolerance` for the format's activation
precision and output dtype (``TOL``); measured here (interpreter, E 8, K 2, H 64, I 32, 13 tokens, 80 draws
per format over the four activations, 2026-12; the GPU tests on an H200 stay further inside: bf16 4.9e-3,
fp16 5.5e-4, int4 6.3e-3, int8 5.9e-3, FP8 6.6e-2 at most):

- bf16 1.56e-2 (4 bf16 roundings): measured at most 6.4e-3 (median 3.9e-3);
- fp16 1.95e-3 (4 fp16 roundings): at most 8.9e-4 (median 4.6e-4);
- int4_w4a16 / int8_w8a16 1.56e-2 (bf16 activations, the triton runner's): at most 1.0e-2 / 9.9e-3 over 240
  / 203 draws (medians 4.9e-3 / 4.7e-3; the kernel also rounds each dequantized weight to bf16);
- fp8_tensor / fp8_channel / fp8_block 0.14 (2 e4m3 quantizations of the activations, 4 bf16 roundings of
  the output), two checks:
  * against the reference: measured at most 7.5e-2 (median 3.9e-2);
  * against :func:`emulate_fp8`, the same quantization emulated in float64 (``TOL_EMULATION``; the split
    first GEMM, which rounds h to bf16, with the roundings float32 leaves open, :func:`closest_emulation`). The kernels
    divide with ``div_rn`` (IEEE), so the emulation's e4m3 values are the kernels' and the output is
    bit-equal (236 of 240 draws) except where float32 accumulation order moves a value across a rounding
    boundary: at most 3.2e-3 measured. ``TOL_EMULATION`` is one bf16 step of the largest output, 2^-7
    (7.8e-3): it catches a wrong scale, group or rounding mode of a per cent or less that the first check
    lets through (3e-2 before: bf16's whole error budget on a path that is bit-exact; a planted 0.45 %
    error in the activations' dequantization scale failed 8 of 8 draws at 2^-7, 2 of 8 at 3e-2). On a GPU the
    kernels are not bit-exact against the emulation (Hopper's FP8 tensor cores accumulate with limited
    precision, DeepSeek-V3's report section 3.3.2, and the tuned tiles order the sums differently): measured on
    an H200 (2026-12, the GPU tests' 90 FP8 checks run 4 times, 360 checks) exact on 100, median 1.3e-3, at most 6.9e-3 up to
    64 tokens and 2.2e-2 at 256-2048 tokens (fp8_channel with the tuned files, graph replay at 700 tokens,
    fp8_block at 2048), so the GPU tests take ``TOL_EMULATION_GPU`` = 2^-5 (3.1e-2).
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import re
import select
import subprocess
import sys
import tempfile
import traceback
import types
from pathlib import Path

import pytest
import torch

from moe_select import quant_int as qi
from moe_select.errors import RunnerInputError
from moe_select.layer import LayerSpec
from moe_select.reference import reference_moe, rel_error

HAS_TRITON = importlib.util.find_spec("triton") is not None and importlib.util.find_spec("numpy") is not None
INTERP = os.environ.get("TRITON_INTERPRET") == "1"
IN_WORKER = os.environ.get("MOE_SELECT_TRITON_WORKER") == "1"
ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("bf16", "fp16", "int4_w4a16", "int8_w8a16", "fp8_tensor", "fp8_channel", "fp8_block")


def _tolerance(quant: str) -> float:
    """The one table's tolerance (:func:`moe_select.formats.tolerance`) for ``quant`` on this runner: the
    format's activation precision (a weight-only int format leaves it to the runner: bf16 here, as
    backends/triton.yaml says), output in the activation dtype (fp16 for fp16, else bf16)."""
    from moe_select import formats

    row = formats.lookup(quant)
    return formats.tolerance((row.activation if row else None) or "bf16", "fp16" if quant == "fp16" else "bf16")


TOL = {q: _tolerance(q) for q in FORMATS}
#: FP8 output against its float64 emulation: one bf16 step of the largest output (module doc).
TOL_EMULATION = 2.0 ** -7
#: The same check on a GPU (module doc: not bit-exact there), 2^-5: 1.4x the largest difference measured on an H200.
TOL_EMULATION_GPU = 2.0 ** -5
#: fp8_block's split first GEMM against the fused one (test_fp8_block_split_first_gemm): e4m3's unit roundoff.
SPLIT_VS_FUSED = 2.0 ** -4
ACTIVATIONS = ("silu", "gelu", "relu2", "swiglu_oai")
CALL_TIMEOUT_S = 300


def fresh_seed() -> int:
    """A new seed per call (or ``MOE_SELECT_TEST_SEED``), quoted by every assertion that uses it."""
    env = os.environ.get("MOE_SELECT_TEST_SEED")
    seed = int(env) if env else random.SystemRandom().randrange(2 ** 31)
    print(f"random inputs: seed {seed} (MOE_SELECT_TEST_SEED={seed} replays them)")  # shown by pytest -rA in-process
    return seed


# --- running test bodies in the interpreter worker ---------------------------------------------------

class _Worker:
    """One Python subprocess with ``TRITON_INTERPRET=1`` that imports this file and runs test bodies
    sent as JSON lines (``{"name", "kwargs"}``); it answers ``{"ok", "error"}`` on its own channel
    (its stdout; everything it prints goes to a log file)."""

    proc: subprocess.Popen | None = None
    log: Path | None = None

    @classmethod
    def call(cls, name: str, kwargs: dict) -> dict:
        if cls.proc is None or cls.proc.poll() is not None:
            cls.log = Path(tempfile.mkstemp(prefix="triton_interp_worker_", suffix=".log")[1])
            env = {**os.environ, "TRITON_INTERPRET": "1", "MOE_SELECT_TRITON_WORKER": "1"}
            cls.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=cls.log.open("w"), text=True, env=env, cwd=str(ROOT))
        cls.proc.stdin.write(json.dumps({"name": name, "kwargs": kwargs}) + "\n")
        cls.proc.stdin.flush()
        ready, _, _ = select.select([cls.proc.stdout], [], [], CALL_TIMEOUT_S)
        line = cls.proc.stdout.readline() if ready else ""
        if not line:
            cls.stop()
            tail = cls.log.read_text()[-4000:] if cls.log else ""
            raise AssertionError(f"the interpreter worker did not answer {name} within {CALL_TIMEOUT_S} s "
                                 f"(or died); its log:\n{tail}")
        return json.loads(line)

    @classmethod
    def stop(cls) -> None:
        if cls.proc is not None:
            if cls.proc.poll() is None:
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


def interp(fn):
    """Run the test body in Triton's interpreter: in this process when it is on (``TRITON_INTERPRET=1``),
    else in the worker."""
    if INTERP:
        return fn

    @functools.wraps(fn)
    def wrapper(**kwargs):
        if not HAS_TRITON:
            pytest.skip("triton (and numpy) not installed: pip install -e '.[test]'")
        res = _Worker.call(fn.__name__, kwargs)
        if not res["ok"]:
            raise AssertionError("in the interpreter worker:\n" + res["error"])

    return wrapper


def _serve() -> None:
    """Worker main loop (``python tests/test_triton_moe.py --worker``)."""
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)                          # prints of the tests go to the log, not the channel
    mod = sys.modules["__main__"]
    for line in sys.stdin:
        req = json.loads(line)
        try:
            getattr(mod, req["name"])(**req["kwargs"])
            res = {"ok": True, "error": ""}
        except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test
            res = {"ok": False, "error": traceback.format_exc()}
        channel.write(json.dumps(res) + "\n")
        channel.flush()


# --- helpers (both processes) -----------------------------------------------------------------------

def _tm():
    from moe_select.backends import triton_moe

    return triton_moe


def _K():
    from moe_select.backends import triton_moe_kernels

    return triton_moe_kernels


def quantize_fp8_block(w: torch.Tensor, bn: int, bk: int):
    """``w [E, N, K]`` -> (e4m3, scale ``[E, ceil(N/bn), ceil(K/bk)]``): one amax scale per block."""
    e, n, k = w.shape
    nb, kb = -(-n // bn), -(-k // bk)
    pad = torch.zeros(e, nb * bn, kb * bk, dtype=torch.float32, device=w.device)
    pad[:, :n, :k] = w.float()
    blocks = pad.view(e, nb, bn, kb, bk)
    scale = (blocks.abs().amax(dim=(2, 4)) / 448.0).clamp(min=1e-12)
    q = (blocks / scale[:, :, None, :, None]).clamp(-448, 448).view(e, nb * bn, kb * bk)[:, :n, :k]
    return q.to(torch.float8_e4m3fn).contiguous(), scale


def dequant_fp8_block(q, scale, bn, bk):
    n, k = q.shape[1:]
    full = scale.repeat_interleave(bn, 1)[:, :n].repeat_interleave(bk, 2)[:, :, :k]
    return q.float() * full


def dequant_int_kernel_layout(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, bits: int) -> torch.Tensor:
    """One expert's integer weight in the ``triton`` runner's layout, dequantized to float64 from the layout's
    definition alone (moe_select/quant_int.py's module doc, the triton runner's prepare_weights), without
    quant_int: element ``[n, k]`` has the unsigned code ``q[n, k]`` (int8) or nibble ``k % 2`` of byte
    ``q[n, k // 2]`` (int4: even ``k`` in the low nibble), the group ``g = k // (K / G)``, and the value
    ``(code - zero[n, g]) * scale[n, g]``, the zero point ``2**(bits - 1)`` when ``zeros`` is None."""
    n = q.shape[0]
    k_all = q.shape[1] * (2 if bits == 4 else 1)
    k = torch.arange(k_all, device=q.device)
    byte = q.to(torch.int64)[:, k // 2] if bits == 4 else q.to(torch.int64)
    code = (byte >> (4 * (k % 2))) & 0xF if bits == 4 else byte
    g = k // (k_all // scales.shape[1])
    zero = torch.full((n, scales.shape[1]), 2 ** (bits - 1), dtype=torch.int64, device=q.device) if zeros is None else zeros.to(torch.int64)
    return (code - zero[:, g]).double() * scales.double()[:, g]


class LazyExperts:
    """``[E, N, K]`` expert weights dequantized one expert at a time on indexing (``reference_moe`` reads
    ``shape[0]`` and ``w[e]``): large layers never hold a float32 copy of every expert."""

    def __init__(self, shape, one):
        self.shape, self._one = tuple(shape), one

    def __getitem__(self, e):
        if isinstance(e, slice):
            return torch.stack([self._one(i) for i in range(*e.indices(self.shape[0]))])
        return self._one(int(e))


class Layer:
    """A random layer of ``spec`` on ``device``: ``args``/``kwargs`` for ``prepare_weights`` and the
    dequantized local-expert weights ``d13``/``d2`` for the reference. Layers of more than 2^26 weights
    per tensor are drawn and quantized a few experts at a time, and dequantized lazily
    (:class:`LazyExperts`)."""

    def __init__(self, spec: LayerSpec, seed: int, device="cpu", *, block=(32, 32), groups=(32, 16),
                 sym=True, scale_dtype=torch.float16):
        g = torch.Generator(device=device).manual_seed(seed)
        e, h, i = spec.num_local_experts, spec.hidden_size, spec.intermediate_size
        q = spec.quant
        self.block = block if q == "fp8_block" else None
        self.kwargs = {}
        bits = {"int4_w4a16": 4, "int8_w8a16": 8}.get(q)
        parts = {}
        for name, (n, k), gs in (("w13", (spec.w13_rows, h), groups[0]), ("w2", (h, i), groups[1])):
            chunk = max(1, min(e, (1 << 26) // (n * k)))
            qs, ss, zs, ints = [], [], [], []
            for e0 in range(0, e, chunk):
                w = torch.randn(min(chunk, e - e0), n, k, generator=g, device=device) / k ** 0.5
                if q in ("bf16", "fp16"):
                    qs.append(w.to(torch.bfloat16 if q == "bf16" else torch.float16))
                elif q == "fp8_block":
                    qq, sc = quantize_fp8_block(w, *block)
                    qs.append(qq)
                    ss.append(sc)
                elif q.startswith("fp8"):
                    from moe_select.ops import quantize

                    qq, sc = quantize(w, q)
                    qs.append(qq)
                    ss.append(sc)
                else:
                    iw = qi.quantize_int(w, bits, gs, sym=sym, scale_dtype=scale_dtype)
                    ints.append(iw)
                    qq, sc, z = qi.to_kernel(iw)
                    qs.append(qq)
                    ss.append(sc)
                    zs.append(z)
                del w
            parts[name] = (torch.cat(qs), torch.cat(ss) if ss else None,
                           torch.cat(zs) if zs and zs[0] is not None else None, ints, (e, n, k))
        (q13, s13, z13, i13, sh13), (q2, s2, z2, i2, sh2) = parts["w13"], parts["w2"]
        self.args = (q13, q2)
        if s13 is not None:
            self.kwargs = {"w13_scale": s13, "w2_scale": s2}
        if bits:
            self.kwargs.update(w13_zeros=z13, w2_zeros=z2)
            if len(i13) == 1 and len(i2) == 1:         # whole-layer IntWeights (AWQ/GPTQ conversion tests)
                self.i13, self.i2 = i13[0], i2[0]
        self.d13 = self._dequant(q13, s13, z13, sh13, bits)
        self.d2 = self._dequant(q2, s2, z2, sh2, bits)
        self.b13 = self.b2 = None
        if spec.activation == "swiglu_oai":             # gpt-oss: expert biases
            self.b13 = torch.randn(e, spec.w13_rows, generator=g, device=device) * 0.2
            self.b2 = torch.randn(e, h, generator=g, device=device) * 0.2
            self.kwargs.update(w13_bias=self.b13, w2_bias=self.b2)

    def _dequant(self, qw, sc, z, shape, bits):
        if sc is None:                                  # 16-bit: the weights themselves
            return qw

        def one(e):
            if self.block:
                return dequant_fp8_block(qw[e:e + 1], sc[e:e + 1], *self.block)[0]
            if bits:
                return dequant_int_kernel_layout(qw[e], sc[e], None if z is None else z[e], bits)
            from moe_select.ops import dequantize

            fmt = "fp8_tensor" if sc.dim() == 1 else "fp8_channel"
            return dequantize(qw[e:e + 1], sc[e:e + 1], fmt)[0]

        if shape[0] * shape[1] * shape[2] > 1 << 26:
            return LazyExperts(shape, one)
        return torch.stack([one(e) for e in range(shape[0])])


def routing(spec: LayerSpec, t: int, seed: int, device="cpu", *, minus_one=True, pool=None, dtype=None):
    """``t`` tokens with K distinct global experts each from ``pool`` (default: all experts of every
    rank), one slot set to -1 (``minus_one``); weights uniform in [0.1, 1.1)."""
    g = torch.Generator(device=device).manual_seed(seed + 1)
    pool = torch.arange(spec.num_experts, device=device) if pool is None else torch.as_tensor(pool, device=device)
    pick = torch.rand(t, len(pool), generator=g, device=device).argsort(1)[:, :spec.top_k]
    ids = pool[pick].to(torch.int32)
    if minus_one and t > 1:
        ids[t // 2, 0] = -1
    w = torch.rand(t, spec.top_k, generator=g, device=device) + 0.1
    dt = dtype or (torch.float16 if spec.quant == "fp16" else torch.bfloat16)
    x = torch.randn(t, spec.hidden_size, generator=g, device=device).to(dt)
    return x, ids, w.float()


def check(spec, layer, x, ids, w, out, what="", seed=None, on_input=False, act_quant="token", h16=False):
    """``out`` against the float64 reference (rank's experts only, TOL); FP8 formats also against the
    float64 emulation of the kernels' activation quantization (TOL_EMULATION in the interpreter,
    TOL_EMULATION_GPU on a GPU). Prints both errors (pytest -rA). Returns rel_error."""
    assert out.shape == x.shape and out.dtype == x.dtype, (out.shape, out.dtype, what)
    assert torch.isfinite(out).all(), f"non-finite output ({what}, seed {seed})"
    bias = {"w13_bias": getattr(layer, "b13", None), "w2_bias": getattr(layer, "b2", None)}
    if on_input:
        ref = reference_on_input(x, ids, w, layer.d13, layer.d2, spec, **bias)
    else:
        ref = reference_moe(x, ids, w, layer.d13, layer.d2, spec.activation, expert_offset=spec.expert_offset,
                            swiglu_limit=spec.swiglu_limit, device=x.device, **bias)  # float64 on the layer's device
    if ref.abs().max() == 0:
        assert (out == 0).all(), f"{what}: expected zeros (seed {seed})"
        return 0.0
    err = rel_error(out, ref)
    assert err <= TOL[spec.quant], f"{spec.quant} {spec.activation} {what}: rel_error {err:.3g} > {TOL[spec.quant]} (seed {seed})"
    if spec.quant.startswith("fp8"):
        emu_tol = TOL_EMULATION if out.device.type == "cpu" else TOL_EMULATION_GPU
        emu, n_amb = closest_emulation(spec, layer, x, ids, w, out, emu_tol, on_input=on_input, act_quant=act_quant,
                                       h16=h16)
        if n_amb is not None:
            what = f"{what}; {n_amb} roundings open to float32 order"
        e2 = rel_error(out, emu)
        print(f"{spec.quant} {spec.activation} {what}: rel_error {err:.3g} (reference), {e2:.3g} (emulation)")
        assert e2 <= emu_tol, (f"{spec.quant} {spec.activation} {what}: rel_error {e2:.3g} against the emulated "
                               f"FP8 quantization > {emu_tol} (seed {seed})")
    else:
        print(f"{spec.quant} {spec.activation} {what}: rel_error {err:.3g} (reference)")
    return err


def _e4m3(v32: torch.Tensor) -> torch.Tensor:
    """float32 -> the nearest e4m3 value (clamped to +-448, as the kernels do), as float64."""
    return v32.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).double()


def _quant_rows(v32: torch.Tensor, amax32: torch.Tensor) -> torch.Tensor:
    """The kernels' dynamic quantization of float32 rows with float32 ``amax`` (broadcast): multiplier
    ``448 / amax`` in float32, e4m3 rounding, dequantized with ``amax / 448`` (float64 result)."""
    amax32 = torch.as_tensor(amax32).clamp(min=1e-12)
    c448 = torch.full_like(amax32, 448.0)
    mult = c448 / amax32                                    # correctly rounded, as the kernels' div_rn
    return _e4m3(v32 * mult) * (amax32 / c448).double()     # (torch's ``448.0 / t`` is not)


def emulate_fp8(spec, layer, x, ids, w, *, on_input=False, act_quant="token", h16=False, flip=frozenset(),
                ambiguous=None):
    """float64 emulation of the FP8 path (module doc of backends/triton_moe_kernels.py): the hidden
    states and the activation quantized to e4m3 exactly as the kernels do (per token, per tensor, or
    per token and group of ``bk`` for fp8_block; the activation of fp8_tensor/fp8_channel rounded to the
    activation dtype before its quantization, its amax taken before that rounding), dot products in
    float64 on the dequantized weights, the per-slot rows rounded to the activation dtype. ``h16``: the first
    GEMM's output rounded to bf16 before the activation (fp8_block's split first GEMM).

    Two roundings are open to the kernels' float32 order of evaluation, each element with two possible values:
    with ``h16``, the bf16 rounding of h (an element whose float64 value lies within ``h16_accum_bound`` of a
    bf16 midpoint; key ``("h", slot position, column of h)``); and the e4m3 rounding of the quantized activation
    (key ``("a", slot position, column)``), where the activation's float32 value can lie on either side of an
    e4m3 midpoint: the kernels' h differs from the float64 one by ``h16_accum_bound`` (none with ``h16``: both
    read the same bf16 h), and their float32 activation function from the correctly rounded one by
    ``ACT_EVAL_BOUND`` (case: seed 999216934, fp8_block with SPLIT, an activation of 3.4197 scaled by 448 / amax
    to 336.00003, the midpoint of e4m3's 320 and 352; the interpreter's float32 SiLU gave 320). The group's amax
    is taken as the float64 one's. ``ambiguous`` (a list) receives ``(token, key)`` for each open element;
    ``flip`` (a set of keys) takes the other value for those elements."""
    from moe_select.ops import gated_act

    dev = x.device                                          # float64 on the layer's device (a GPU for real shapes)
    x32, ids, w = x.detach().float(), ids.detach().cpu().long(), w.detach().to(dev).double()
    act_dt = x.dtype if x.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
    x32 = x32.to(act_dt).float()
    t, k = ids.shape
    block = spec.quant == "fp8_block"
    if block:
        bk = layer.block[1]
        groups = [slice(g, g + bk) for g in range(0, spec.hidden_size, bk)]
        xq = torch.cat([_quant_rows(x32[:, g], x32[:, g].abs().amax(1, keepdim=True)) for g in groups], 1)
    elif act_quant == "token":
        xq = _quant_rows(x32, x32.abs().amax(1, keepdim=True))
    else:
        xq = _quant_rows(x32, x32.abs().amax())
    local = ids - spec.expert_offset
    slots = [(ti, kk, int(local[ti, kk])) for ti in range(t) for kk in range(k)
             if 0 <= int(local[ti, kk]) < spec.num_local_experts]
    out = torch.zeros(t, spec.hidden_size, dtype=torch.float32, device=dev)
    if not slots:
        return out.double().cpu()
    by_expert: dict[int, list[int]] = {}                    # expert -> its slots' positions, one expert in float64 at a time
    for n, (_, _, e) in enumerate(slots):
        by_expert.setdefault(e, []).append(n)
    rows = {e: (torch.tensor([slots[n][0] for n in ns], device=dev), torch.tensor([slots[n][1] for n in ns], device=dev),
                torch.tensor(ns, device=dev)) for e, ns in by_expert.items()}
    a32 = bounds = None
    open_ = ambiguous is not None or bool(flip)
    for e, (ti, kk, pos) in rows.items():
        d13 = layer.d13[e].detach().to(dev).double()      # one dequantization per expert (LazyExperts)
        h = xq[ti] @ d13.T
        if on_input:
            h = h * w[ti, kk][:, None]
        if getattr(layer, "b13", None) is not None:
            h = h + layer.b13[e].to(dev).double()
        if open_:                                           # sum |a_k w_k| (+ |bias|): h's float32 error bound
            mag = xq[ti].abs() @ d13.abs().T
            if on_input:
                mag = mag * w[ti, kk][:, None].abs()
            if getattr(layer, "b13", None) is not None:
                mag = mag + layer.b13[e].to(dev).double().abs()
        if h16:                                             # fp8_block's split first GEMM stores h in bf16
            h64, h = h, h.float().to(torch.bfloat16)
            if open_:
                other = torch.where(h.double() > h64, torch.nextafter(h, torch.full_like(h, -float("inf"))),
                                    torch.nextafter(h, torch.full_like(h, float("inf"))))
                near = (h64 - (h.double() + other.double()) / 2).abs() <= h16_accum_bound(spec.hidden_size) * mag
                for r, c in near.nonzero().tolist():
                    key = ("h", int(pos[r]), c)
                    if ambiguous is not None:
                        ambiguous.append((int(ti[r]), key))
                    if key in flip:
                        h[r, c] = other[r, c]
            h = h.double()
        act = gated_act(h, spec.activation, spec.swiglu_limit).float()  # float32, as the epilogue
        if a32 is None:
            a32 = torch.empty(len(slots), act.shape[1], dtype=torch.float32, device=dev)
            bounds = (a32.clone(), a32.clone()) if open_ else None
        a32[pos] = act
        if bounds is not None:                              # the activation's float32 values the kernels can reach
            dh = torch.zeros_like(h) if h16 else h16_accum_bound(spec.hidden_size) * mag
            half = dh.shape[1] // 2
            signs = [(-1.0, -1.0), (-1.0, 1.0), (1.0, -1.0), (1.0, 1.0)] if act.shape[1] != h.shape[1] else [(-1.0, -1.0), (1.0, 1.0)]
            corners = torch.stack([gated_act(h + dh * torch.cat([torch.full_like(dh[:, :half], sg),
                                                                  torch.full_like(dh[:, half:], su)], 1),
                                             spec.activation, spec.swiglu_limit) for sg, su in signs])
            lo, hi = corners.amin(0), corners.amax(0)
            bounds[0][pos] = (lo - ACT_EVAL_BOUND * lo.abs()).float()
            bounds[1][pos] = (hi + ACT_EVAL_BOUND * hi.abs()).float()
    assert a32 is not None
    if block:
        bk = layer.block[1]
        gi = [slice(g, g + bk) for g in range(0, spec.intermediate_size, bk)]
        gmax = [a32[:, g].abs().amax(1, keepdim=True) for g in gi]

        def quant(a):
            return torch.cat([_quant_rows(a[:, g], m) for g, m in zip(gi, gmax)], 1)
    else:
        amax = a32.abs().amax(1, keepdim=True) if act_quant == "token" else a32.abs().amax()

        def quant(a):
            return _quant_rows(a.to(act_dt).float(), amax)
    aq = quant(a32)
    if bounds is not None:                                  # e4m3 values that differ across the reachable range
        q_lo, q_hi = quant(bounds[0]), quant(bounds[1])
        for r, c in (q_lo != q_hi).nonzero().tolist():
            key = ("a", r, c)
            if ambiguous is not None:
                ambiguous.append((slots[r][0], key))
            if key in flip:
                aq[r, c] = q_hi[r, c] if aq[r, c] == q_lo[r, c] else q_lo[r, c]
    for e, (ti, kk, pos) in rows.items():
        y = aq[pos] @ layer.d2[e].detach().to(dev).double().T
        if getattr(layer, "b2", None) is not None:
            y = y + layer.b2[e].to(dev).double()
        if not on_input:
            y = y * w[ti, kk][:, None]
        out.index_add_(0, ti, y.float().to(act_dt).float())  # each slot's row rounded to the activation dtype
    return out.to(x.dtype).double().cpu()


def h16_accum_bound(k: int) -> float:
    """Bound on the difference between the kernels' float32 first GEMM and the float64 one, as a fraction of
    ``sum |a_k w_k|`` (plus ``|bias|``): float32 rounding errors of a ``k``-term sum (the block dot products,
    their scale products and the accumulation) grow as a random walk, ``sqrt(k) * 2^-24``; taken 4 times
    (the case that made this needed, seed 338464608: 6e-9 of the value, 2^-27)."""
    return 4.0 * k ** 0.5 * 2.0 ** -24


#: Bound on the kernels' float32 activation function (SiLU, GELU, ...: exp, a division, products) against the
#: correctly rounded float64 one, relative: 16 float32 units in the last place. Only where it moves a value
#: across an e4m3 midpoint does it matter (:func:`emulate_fp8`'s open roundings).
ACT_EVAL_BOUND = 16 * 2.0 ** -24


def closest_emulation(spec, layer, x, ids, w, out, tol, *, h16=False, **kw):
    """The emulation (``h16`` as :func:`emulate_fp8`'s); where ``out`` is farther than ``tol`` from it, each token
    whose row is farther takes, one at a time and kept where its row gets nearer to ``out``'s, the other value of
    the roundings the kernels' float32 order leaves open (``emulate_fp8``'s ``ambiguous``: bf16 roundings of h,
    e4m3 roundings of the activation; at most 64 emulations). Returns ``(emulation, number of open roundings)``,
    the number None where the plain emulation was within ``tol``: a wrong kernel gains only the choice of
    neighbour on elements within float32 error of a rounding midpoint, in the tokens it misses."""
    emu = emulate_fp8(spec, layer, x, ids, w, h16=h16, **kw)
    if rel_error(out, emu) <= tol:
        return emu, None
    amb: list = []
    emu = emulate_fp8(spec, layer, x, ids, w, h16=h16, ambiguous=amb, **kw)
    o = out.detach().to("cpu", torch.float64)
    limit = tol * max(emu.abs().max().item(), 1e-30)
    best = emu.clone()
    budget = 64
    for t in sorted({t for t, _ in amb}):
        flips: frozenset = frozenset()
        for tt, key in amb:
            if tt != t or budget == 0 or (o[t] - best[t]).abs().max() <= limit:
                continue
            budget -= 1
            cand = emulate_fp8(spec, layer, x, ids, w, h16=h16, flip=flips | {key}, **kw)
            if (o[t] - cand[t]).abs().max() < (o[t] - best[t]).abs().max():
                best[t], flips = cand[t], flips | {key}
    return best, len(amb)


def reference_on_input(x, ids, w, d13, d2, spec, w13_bias=None, w2_bias=None):
    """float64 reference with the routing weight applied to the input (llama4-style)."""
    ones = torch.ones_like(w)
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64)
    for k in range(ids.shape[1]):
        xs = x.double().cpu() * w[:, k:k + 1].double().cpu()
        out += reference_moe(xs, ids[:, k:k + 1], ones[:, k:k + 1], d13, d2, spec.activation,
                             expert_offset=spec.expert_offset, swiglu_limit=spec.swiglu_limit,
                             w13_bias=w13_bias, w2_bias=w2_bias)
    return out


def spec_of(quant="bf16", act="silu", *, e=8, k=2, h=64, i=32, ep=1, rank=0, limit=None):
    return LayerSpec(num_experts=e, top_k=k, hidden_size=h, intermediate_size=i, activation=act, quant=quant,
                     ep=ep, ep_rank=rank, swiglu_limit=limit)


def core_for(spec, layer, device="cpu", **kw):
    kw.setdefault("block_shape", layer.block)
    if spec.quant != "fp8_block":
        kw.pop("block_shape")
    core = _tm().TritonMoeCore(spec, device, **kw)
    return core, core.prepare_weights(*layer.args, **layer.kwargs)


# --- interpreter tests: the kernels against the float64 reference -------------------------------------

@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("quant", FORMATS)
@interp
def test_every_format_and_activation(quant, act):
    seed = fresh_seed()
    spec = spec_of(quant, act, limit=2.5 if act == "swiglu_oai" else None)   # a limit that clamps some values
    layer = Layer(spec, seed, sym=act != "gelu")                             # int: asymmetric with gelu
    core, pw = core_for(spec, layer)
    x, ids, w = routing(spec, 13, seed)
    check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), "13 tokens", seed)


@pytest.mark.parametrize("quant", ["bf16", "fp8_channel", "fp8_block", "int4_w4a16"])
@interp
def test_expert_parallel_ranks_skip_foreign_ids_and_sum_to_the_layer(quant):
    seed = fresh_seed()
    full = spec_of(quant, k=3)
    layer = Layer(full, seed)
    x, ids, w = routing(full, 11, seed)
    total = torch.zeros(x.shape, dtype=torch.float64)
    for rank in range(4):
        spec = spec_of(quant, k=3, ep=4, rank=rank)
        sl = slice(spec.expert_offset, spec.expert_offset + spec.num_local_experts)
        part = Layer.__new__(Layer)
        part.block = layer.block
        part.args = tuple(a[sl] for a in layer.args)
        part.kwargs = {k: (v[sl] if v is not None else None) for k, v in layer.kwargs.items()}
        part.d13, part.d2 = layer.d13[sl], layer.d2[sl]
        core, pw = core_for(spec, part)
        out = core.forward(x, ids, w, pw)
        check(spec, part, x, ids, w, out, f"rank {rank}", seed)           # the rank's partial sum alone
        total += out.double()
    ref = reference_moe(x, ids, w, layer.d13, layer.d2)
    err = rel_error(total, ref)
    assert err <= TOL[quant], f"{quant}: ranks' sum rel_error {err:.3g} (seed {seed})"


@interp
def test_rank_with_no_local_tokens_and_minus_one_everywhere():
    seed = fresh_seed()
    spec = spec_of("bf16", k=2, ep=2, rank=1)                               # experts 4..7
    layer = Layer(spec, seed)
    core, pw = core_for(spec, layer)
    x, ids, w = routing(spec, 9, seed, pool=[0, 1, 2, 3])                    # no token routed to this rank
    out = core.forward(x, ids, w, pw)
    assert (out == 0).all(), f"a rank without tokens returns zeros (seed {seed})"
    out = core.forward(x, torch.full_like(ids, -1), w, pw)
    assert (out == 0).all()


@pytest.mark.parametrize("case", ["zero_tokens", "one_token", "one_expert_busy", "multi_cta_sort", "block_m_64"])
@interp
def test_token_count_edge_cases(case):
    seed = fresh_seed()
    K = _K()
    spec = spec_of("bf16", k=2)
    layer = Layer(spec, seed)
    core, pw = core_for(spec, layer)
    if case == "zero_tokens":
        x, ids, w = routing(spec, 0, seed)
        out = core.forward(x, ids, w, pw)
        assert out.shape == (0, spec.hidden_size) and out.dtype == x.dtype
        return
    if case == "one_token":
        x, ids, w = routing(spec, 1, seed)
    elif case == "one_expert_busy":                     # every token on experts 5 and 2; six experts empty
        x, _, w = routing(spec, 20, seed)
        ids = torch.stack([torch.full((20,), 5), torch.full((20,), 2)], 1).int()
    elif case == "multi_cta_sort":                      # the three-kernel sort path (S > the single-CTA limit)
        x, ids, w = routing(spec, 40, seed)
        old = K.SINGLE_CTA_MAX_SLOTS
        K.SINGLE_CTA_MAX_SLOTS = 16                     # the limit single_cta_limit gives
        try:
            out = core.forward(x, ids, w, pw)
        finally:
            K.SINGLE_CTA_MAX_SLOTS = old
        check(spec, layer, x, ids, w, out, case, seed)
        return
    else:                                               # a token count whose bucket uses BLOCK_M = 64
        t = next(t for t in (256, 512, 1024) if core.config_for(t)["BLOCK_M"] == 64)
        x, ids, w = routing(spec, t, seed)
    check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), case, seed)


@pytest.mark.parametrize("case", [(5, 2, 8, 0, 1, 16), (7, 3, 8, 1, 2, 16), (40, 2, 8, 0, 1, 32), (1, 1, 4, 0, 1, 16),
                                  (64, 4, 16, 3, 4, 16)])
@pytest.mark.parametrize("single", [True, False])
@interp
def test_sort_blocks_every_local_slot_once(case, single):
    """The sort: every local slot once, in a block of its expert; padding rows hold the sentinel S; the
    row count is the sum of the padded counts; blocks past it have expert -1."""
    t, k, e, rank, ep, bm = case
    K = _K()
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(-1, e, (t, k), generator=g, dtype=torch.int32)
    nl = e // ep
    off = rank * nl
    amax = torch.full((50,), 3.0)
    al = K.moe_align(ids, nl, off, bm, amax=amax, single_cta_max_slots=10 ** 6 if single else 4)
    flat = ids.reshape(-1).long() - off
    local = ((flat >= 0) & (flat < nl)).nonzero().squeeze(1).tolist()
    rows = int(al.num_rows)
    assert rows == sum(-(-int((flat == x).sum()) // bm) * bm for x in range(nl)), f"seed {seed}"
    assert al.rows >= rows and al.rows % bm == 0
    seen = []
    for b in range(al.max_blocks):
        blk = al.sorted_slots[b * bm:(b + 1) * bm].tolist()
        if b * bm >= rows:
            assert int(al.block_expert[b]) == -1 and all(s == t * k for s in blk), f"seed {seed}"
            continue
        ex = int(al.block_expert[b])
        for s in blk:
            if s != t * k:
                assert flat[s] == ex, f"slot {s} of expert {int(flat[s])} in a block of expert {ex} (seed {seed})"
                seen.append(s)
    assert sorted(seen) == local, f"seed {seed}"
    assert (amax == 0).all(), "the sort zeroes the amax buffer"


@pytest.mark.parametrize("quant", ["bf16", "fp8_channel"])
@interp
def test_router_weight_on_input(quant):
    seed = fresh_seed()
    spec = spec_of(quant, k=1)
    layer = Layer(spec, seed)
    core, pw = core_for(spec, layer, apply_router_weight_on_input=True)
    x, ids, w = routing(spec, 9, seed, minus_one=False)
    check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), "weight on input", seed, on_input=True)
    # differs from weighting the output (the activation is not linear): the flag does something
    out_w = reference_moe(x, ids, w, layer.d13, layer.d2)
    assert rel_error(core.forward(x, ids, w, pw), out_w) > 0.05


@pytest.mark.parametrize("quant, on_input", [("bf16", False), ("fp8_block", False), ("int4_w4a16", False),
                                             ("bf16", True)])
@interp
def test_expert_biases(quant, on_input):
    """gpt-oss's expert biases (swiglu_oai layers): ``w13_bias`` before the activation, ``w2_bias`` before the
    routing weight (after the weighted input with weight-on-input routing), against float64; leaving them
    out of the reference fails (they matter at this scale)."""
    seed = fresh_seed()
    spec = spec_of(quant, "swiglu_oai", k=1 if on_input else 2, limit=2.5)
    layer = Layer(spec, seed)
    assert layer.b13 is not None and "w2_bias" in layer.kwargs
    core, pw = core_for(spec, layer, apply_router_weight_on_input=on_input)
    x, ids, w = routing(spec, 12, seed, minus_one=not on_input)
    out = core.forward(x, ids, w, pw)
    check(spec, layer, x, ids, w, out, "expert biases", seed, on_input=on_input)
    layer.b13 = layer.b2 = None
    with pytest.raises(AssertionError, match="rel_error"):
        check(spec, layer, x, ids, w, out, "expert biases left out of the reference", seed, on_input=on_input)


@pytest.mark.parametrize("quant", ["fp8_tensor", "fp8_channel"])
@interp
def test_per_tensor_activation_quantization(quant):
    seed = fresh_seed()
    spec = spec_of(quant)
    layer = Layer(spec, seed)
    core, pw = core_for(spec, layer, act_quant="tensor")
    x, ids, w = routing(spec, 12, seed)
    check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), "per-tensor activations", seed, act_quant="tensor")


@pytest.mark.parametrize("block", [(128, 128), (24, 32), (64, 16)])
@interp
def test_fp8_block_shapes(block):
    """The checkpoint's block shape: the default 128x128 (H = 256, I = 128), and blocks whose N size does
    not divide N (gate and up rows share a block) or is not a power of two."""
    seed = fresh_seed()
    block = tuple(block)                                    # a list when it came through the worker's JSON
    h, i = (256, 128) if block == (128, 128) else (64, 40)
    spec = spec_of("fp8_block", h=h, i=i)
    layer = Layer(spec, seed, block=block)
    core, pw = core_for(spec, layer, block_shape=None if block == (128, 128) else block)
    assert core.block_shape == block
    x, ids, w = routing(spec, 10, seed)
    check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), f"block {block}", seed)


@pytest.mark.parametrize("quant", ["bf16", "fp16", "fp8_channel", "fp8_block"])
@interp
def test_unmasked_and_masked_main_loops(quant):
    """The GEMM's main loop loads without masks when ``K % BLOCK_K == 0`` (``EVEN_K``; padding rows read
    row 0, clamped columns column 0, never stored) and with masks otherwise: both against the float64
    reference, each GEMM of the forward taking the path its K asks for (H = 96 and I = 40 leave a partial
    K tile at BLOCK_K 64 / 32; fp8_block's 32x32 blocks divide H but not I)."""
    K = _K()
    seen = []
    launch = K._Kernel.launch

    def record(self, grid, device, *a, **kw):
        if "EVEN_K" in kw:
            seen.append(kw["EVEN_K"])
        return launch(self, grid, device, *a, **kw)
    seed = fresh_seed()
    spec = spec_of(quant, h=96, i=40)
    layer = Layer(spec, seed, block=(32, 32))
    core, pw = core_for(spec, layer, block_shape=(32, 32))
    x, ids, w = routing(spec, 11, seed)
    K._Kernel.launch = record                                  # the test runs in its own worker process
    try:
        out = core.forward(x, ids, w, pw)
    finally:
        K._Kernel.launch = launch
    check(spec, layer, x, ids, w, out, "H 96, I 40", seed)
    assert len(seen) == 2 and not seen[1], seen                # I = 40: a partial K tile in the second GEMM
    cfg = core.config_for(11)
    assert seen[0] == (96 % cfg["gemm1"]["BLOCK_K"] == 0), (seen, cfg)


@pytest.mark.parametrize("act, on_input, block", [("silu", False, (32, 32)), ("relu2", False, (32, 32)),
                                                  ("swiglu_oai", False, (32, 32)), ("silu", True, (32, 32)),
                                                  ("silu", False, (24, 32)), ("gelu", False, (64, 16))])
@interp
def test_fp8_block_split_first_gemm(act, on_input, block):
    """fp8_block's split first GEMM (``SPLIT``: one accumulator over the gate and up rows, 16-bit out, then
    act_quant) against the float64 reference and the emulated quantization, and close to the fused tile
    (the split rounds the first GEMM's output to bf16 before the activation: one more rounding)."""
    K = _K()
    seed = fresh_seed()
    block = tuple(block)                                    # a list when it came through the worker's JSON
    i = 40 if block == (24, 32) else 64                     # 40: gate and up rows share a 24-row block
    spec = spec_of("fp8_block", act, k=1 if on_input else 2, h=64, i=i, limit=2.5 if act == "swiglu_oai" else None)
    layer = Layer(spec, seed, block=block)
    core, pw = core_for(spec, layer, block_shape=block, apply_router_weight_on_input=on_input)
    x, ids, w = routing(spec, 40, seed, minus_one=not on_input)
    fused = core.forward(x, ids, w, pw)
    base = core.config_for(40)
    split = {**base, "gemm1": {**base["gemm1"], "BLOCK_N": 32, "SPLIT": True}}
    core.config_for = lambda t: split
    launched = []
    launch = K._Kernel.launch

    def record(self, grid, device, *a, **kw):
        launched.append(self.__name__)
        return launch(self, grid, device, *a, **kw)
    K._Kernel.launch = record
    try:
        out = core.forward(x, ids, w, pw)
    finally:
        K._Kernel.launch = launch
    assert "_act_quant_kernel" in launched and launched.count("_moe_gemm_kernel") == 2, launched
    check(spec, layer, x, ids, w, out, f"split first GEMM ({act})", seed, on_input=on_input, h16=True)
    # the two differ where the bf16 rounding of h moves an activation across an e4m3 rounding boundary: one
    # e4m3 unit roundoff, 2^-4 (measured at most 5.0e-2 over 92 draws of these six cases, median 1.7e-2)
    diff = rel_error(out, fused.double())
    assert diff <= SPLIT_VS_FUSED, f"split vs fused first GEMM ({act}): rel_error {diff:.3g} > {SPLIT_VS_FUSED} (seed {seed})"


@pytest.mark.parametrize("split", [False, True])
@interp
def test_fp8_block_one_weight_scale_per_k_step(split):
    """A tile that lies in one block of ``group_n`` weight rows (``BLOCK_N`` divides it, and the up rows start on a
    block: ``SB_TILE``) from ``BLOCK_M`` 32 (``SB_TILE_MIN_BLOCK_M``) scales each K step's partial sum by one per-row
    factor ``sa * sb`` instead of the per-column product ``sa[:, None] * sb[None, :]``: against the float64 reference,
    and close to the per-column tiles (float32 rounding of the scale product, which can move the first GEMM's e4m3
    output by one e4m3 unit). The launch flag is on for 32 x 32 tiles of 32x32 blocks (gate and up rows on block
    boundaries), off for 64-column tiles and for 16-row tiles (the mma.sync tiles, measured slower with it)."""
    K = _K()
    assert K.SB_TILE_MIN_BLOCK_M == 32
    seed = fresh_seed()
    spec = spec_of("fp8_block", e=4, k=2, h=96, i=64)
    layer = Layer(spec, seed, block=(32, 32))
    core, pw = core_for(spec, layer, block_shape=(32, 32))
    x, ids, w = routing(spec, 50, seed)
    g = {"BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}
    launch = K._Kernel.launch
    outs, flags = {}, {}
    for bm, bn in ((32, 32), (32, 64), (16, 32)):
        seen = []

        def record(self, grid, device, *a, seen=seen, **kw):
            if "SB_TILE" in kw:
                seen.append(kw["SB_TILE"])
            return launch(self, grid, device, *a, **kw)
        cfg = {"BLOCK_M": bm, "gemm1": {**g, "BLOCK_N": bn, **({"SPLIT": True} if split else {})},
               "gemm2": {**g, "BLOCK_N": bn}}
        core.config_for = lambda t, cfg=cfg: cfg
        K._Kernel.launch = record
        try:
            outs[bm, bn] = core.forward(x, ids, w, pw)
        finally:
            K._Kernel.launch = launch
        flags[bm, bn] = seen
        check(spec, layer, x, ids, w, outs[bm, bn], f"fp8_block BLOCK_M {bm} BLOCK_N {bn}", seed, h16=split)
    assert flags == {(32, 32): [True, True], (32, 64): [False, False], (16, 32): [False, False]}, flags
    for other in ((32, 64), (16, 32)):
        diff = rel_error(outs[32, 32], outs[other].double())
        assert diff <= SPLIT_VS_FUSED, f"one scale per K step vs {other}: rel_error {diff:.3g} (seed {seed})"


def test_h16_emulation_takes_only_the_roundings_float32_leaves_open():
    """closest_emulation: an output that differs from the float64 emulation only in the bf16 rounding of
    elements within float32 error of a midpoint matches exactly; a wrong activation scale of 1 % does not
    (pure torch, no kernel: the emulation alone, on the layer of seed 338464608, where the interpreter's
    float32 sum rounded one such element up: 2.0546873674 -> 2.0625, the float64 value rounds down)."""
    seed = 338464608
    spec = spec_of("fp8_block", "relu2", k=2, h=64, i=64)
    layer = Layer(spec, seed, block=(32, 32))
    x, ids, w = routing(spec, 40, seed)
    amb: list = []
    plain = emulate_fp8(spec, layer, x, ids, w, h16=True, ambiguous=amb)
    assert amb and all(0 <= t < 40 for t, _ in amb), amb
    opened = [key for _, key in amb if key[0] == "h"]
    flipped = (emulate_fp8(spec, layer, x, ids, w, h16=True, flip=frozenset({key})) for key in opened)
    kernel_like = next((f.to(x.dtype) for f in flipped if rel_error(f.to(x.dtype), plain) > TOL_EMULATION), None)
    assert kernel_like is not None, "no open rounding of h moves the output: the case this resolves is gone"
    emu, n_amb = closest_emulation(spec, layer, x, ids, w, kernel_like, TOL_EMULATION, h16=True)
    assert n_amb == len(amb) and rel_error(kernel_like, emu) <= TOL_EMULATION
    wrong = (kernel_like.double() * 1.01).to(x.dtype)          # a 1 % scale error: no choice of roundings hides it
    emu, _ = closest_emulation(spec, layer, x, ids, w, wrong, TOL_EMULATION, h16=True)
    assert rel_error(wrong, emu) > TOL_EMULATION


def test_emulation_takes_the_e4m3_roundings_float32_leaves_open():
    """closest_emulation: the e4m3 rounding of an activation whose float32 value lies within the kernels' float32
    error of an e4m3 midpoint is open (pure torch, no kernel: the layer of seed 999216934, fp8_block with SPLIT at
    300 tokens, where the interpreter's float32 SiLU gave token 51's slot 1 column 29 an activation that scaled to
    just under 336, the midpoint of e4m3's 320 and 352, and the float64 one just over: the output moved by 1.6e-2
    of its largest value, twice TOL_EMULATION). That rounding is open, and an output that takes it matches; one
    that also has a 1 % scale error does not; the open e4m3 roundings are few (fewer than 1 in 1000 elements)."""
    seed = 999216934
    spec = spec_of("fp8_block", e=4, k=2, h=80, i=48)
    layer = Layer(spec, seed)
    x, ids, w = routing(spec, 300, seed)
    amb: list = []
    plain = emulate_fp8(spec, layer, x, ids, w, h16=True, ambiguous=amb)
    act_keys = [key for _, key in amb if key[0] == "a"]
    assert (51, ("a", 51 * 2 + 1, 29)) in amb, act_keys
    assert len(act_keys) < 300 * 2 * 48 / 1000, len(act_keys)
    kernel_like = emulate_fp8(spec, layer, x, ids, w, h16=True, flip=frozenset({("a", 103, 29)})).to(x.dtype)
    assert rel_error(kernel_like, plain) > TOL_EMULATION     # the case: one e4m3 step moves the output past the bound
    emu, n_amb = closest_emulation(spec, layer, x, ids, w, kernel_like, TOL_EMULATION, h16=True)
    assert n_amb == len(amb) and rel_error(kernel_like, emu) <= TOL_EMULATION
    wrong = (kernel_like.double() * 1.01).to(x.dtype)
    emu, _ = closest_emulation(spec, layer, x, ids, w, wrong, TOL_EMULATION, h16=True)
    assert rel_error(wrong, emu) > TOL_EMULATION


def test_split_is_an_fp8_block_first_gemm_option(tmp_path):
    K = _K()
    good = {"BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    for fmt, g1, g2, ok in (("fp8_block", {**good, "SPLIT": True}, good, True), ("bf16", {**good, "SPLIT": True}, good, False),
                            ("fp8_block", good, {**good, "SPLIT": True}, False), ("fp8_block", {**good, "SPLIT": 1}, good, False)):
        f = tmp_path / f"{fmt}-{len(str(g1))}-{len(str(g2))}-{ok}.json"
        f.write_text(json.dumps({"format_version": 1, "key": {"format": fmt}, "configs": {"8192": {
            "BLOCK_M": 128, "gemm1": g1, "gemm2": g2}}}))
        if ok:
            assert K.load_config_file(str(f))[8192]["gemm1"]["SPLIT"] is True
        else:
            with pytest.raises(ValueError, match="SPLIT"):
                K.load_config_file(str(f))
    # a file looked up for a bf16 layer whose own key claims fp8_block: refused by the lookup, naming the file (its key
    # says another layer than its name: the key check speaks first)
    bad = tmp_path / K.config_file_name(128, 1536, 2048, "bf16", "Fake GPU")
    bad.write_text(json.dumps({"format_version": 1, "key": {"format": "fp8_block"}, "configs": {"8192": {
        "BLOCK_M": 128, "gemm1": {**good, "SPLIT": True}, "gemm2": good}}}))
    with pytest.raises(ValueError, match=r"key\.format is 'fp8_block', but the file's name looks it up for a layer with "
                                         r"format 'bf16'"):
        K.get_config(128, 1536, 2048, "bf16", 8192, 8, device_name="Fake GPU", config_dir=tmp_path)
    nokey = tmp_path / "nokey.json"
    nokey.write_text(json.dumps({"format_version": 1, "configs": {"8192": {"BLOCK_M": 64, "gemm1": {**good, "SPLIT": True},
                                                                          "gemm2": good}}}))
    with pytest.raises(ValueError, match=r"this file: no key.format"):
        K.load_config_file(str(nokey))
    # the default for fp8_block above 192 rows per expert; never for other formats
    d = K.default_config(128, 1536, 2048, "fp8_block", 8192, 8, (128, 128))
    assert d["BLOCK_M"] == 64 and d["gemm1"].get("SPLIT") is True and "SPLIT" not in d["gemm2"]
    assert "SPLIT" not in K.default_config(128, 1536, 2048, "bf16", 8192, 8)["gemm1"]
    assert "SPLIT" not in K.default_config(128, 1536, 2048, "fp8_block", 256, 8, (128, 128))["gemm1"]


def _with_flag(cfg: dict, flag: str, on: bool) -> dict:
    """``cfg`` with the boolean GEMM option ``flag`` set (``on``) or removed in both GEMM configs."""
    def g(c: dict) -> dict:
        c = {k: v for k, v in c.items() if k != flag}
        return {**c, flag: True} if on else c
    return {**cfg, "gemm1": g(cfg["gemm1"]), "gemm2": g(cfg["gemm2"])}


@pytest.mark.parametrize("quant, act_quant, tokens", [("fp8_channel", "token", 40), ("fp8_channel", "token", 3),
                                                      ("fp8_tensor", "tensor", 40), ("fp8_channel", "tensor", 17)])
@interp
def test_prequant_is_the_in_loop_quantization_bit_for_bit(quant, act_quant, tokens):
    """``PREQUANT`` (fp8_tensor/fp8_channel: each GEMM's A quantized to e4m3 by ``row_quant`` before the GEMM)
    gives the layer's output bit for bit as the in-loop quantization, and both are within the FP8 tolerance of
    the float64 reference and the emulation; the forward with it launches ``row_quant`` once per GEMM."""
    K = _K()
    seed = fresh_seed()
    spec = spec_of(quant, k=2, h=64, i=48)                  # I = 48: the second GEMM's K is not a power of two
    layer = Layer(spec, seed)
    core, pw = core_for(spec, layer, act_quant=act_quant)
    x, ids, w = routing(spec, tokens, seed)
    base = core.config_for(tokens)
    launched: list[str] = []
    launch = K._Kernel.launch

    def record(self, grid, device, *a, **kw):
        launched.append(self.__name__)
        return launch(self, grid, device, *a, **kw)

    outs = {}
    for on in (False, True):
        core.config_for = lambda t, on=on: _with_flag(base, "PREQUANT", on)
        launched.clear()
        K._Kernel.launch = record
        try:
            outs[on] = core.forward(x, ids, w, pw)
        finally:
            K._Kernel.launch = launch
        # a per-token scale: the first GEMM's pass is fused with the amax (token_quant); a tensor scale: row_quant
        fused = on and act_quant == "token"
        assert launched.count("_row_quant_kernel") == (0 if not on else 1 if fused else 2), launched
        assert launched.count("_token_quant_kernel") == (1 if fused else 0), launched
        assert launched.count("_moe_gemm_kernel") == 2, launched
    assert torch.equal(outs[True], outs[False]), f"PREQUANT changed the output (seed {seed})"
    check(spec, layer, x, ids, w, outs[True], f"PREQUANT {quant} {act_quant}", seed, act_quant=act_quant)


@pytest.mark.parametrize("quant, tokens, block_m, extra", [
    ("bf16", 40, 16, {}), ("bf16", 300, 64, {}), ("fp8_channel", 40, 16, {"PREQUANT": True}),
    ("fp8_channel", 300, 64, {}), ("fp8_block", 40, 16, {}), ("fp8_block", 300, 64, {"SPLIT": True})])
@interp
def test_tma_weights_are_the_pointer_loads_bit_for_bit(quant, tokens, block_m, extra):
    """``TMA`` (the weight tiles through a TMA tensor descriptor) gives the layer's output bit for bit as the
    per-thread pointer loads, with weight rows past an expert's N (the next expert's rows, or the descriptor's zero
    fill past the last) and K tiles past K (zero fill: I = 48 and H = 80 are not multiples of BLOCK_K 32) never
    reaching the output; within the tolerance of the float64 reference."""
    seed = fresh_seed()
    spec = spec_of(quant, e=4, k=2, h=80, i=48)
    layer = Layer(spec, seed)
    core, pw = core_for(spec, layer)                         # fp8_block: the test layer's 32x32 blocks
    x, ids, w = routing(spec, tokens, seed)
    g = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}
    base = {"BLOCK_M": block_m, "gemm1": {**g, **extra}, "gemm2": {**g, **{k: v for k, v in extra.items() if k != "SPLIT"}}}
    outs = {}
    for on in (False, True):
        core.config_for = lambda t, on=on: _with_flag(base, "TMA", on)
        outs[on] = core.forward(x, ids, w, pw)
    assert torch.equal(outs[True], outs[False]), f"TMA changed the output (seed {seed})"
    check(spec, layer, x, ids, w, outs[True], f"TMA {quant}", seed, h16=bool(extra.get("SPLIT")))


@pytest.mark.parametrize("quant, act, tokens, block_m, extra", [
    ("bf16", "silu", 40, 16, {}), ("bf16", "silu", 300, 64, {"MIN_M": 16}), ("fp16", "gelu", 300, 64, {}),
    ("fp8_channel", "silu", 40, 16, {"PREQUANT": True}), ("fp8_channel", "silu", 300, 64, {}),
    ("fp8_tensor", "swiglu_oai", 300, 64, {}), ("bf16", "swiglu_oai", 300, 64, {})])
@interp
def test_gu_dot_is_the_two_accumulators(quant, act, tokens, block_m, extra):
    """``GU_DOT`` (the gated first GEMM's gate and up tiles as one TMA box and one MMA of ``2 * BLOCK_N`` columns, split
    after the loop): the layer's output within float32 rounding of the same tiles with two accumulators (TMA), with
    gate/up rows past an expert's I (the descriptor's zero fill: I = 48 is not a multiple of BLOCK_N 32) never reaching
    the output, biases (swiglu_oai) and the short tiles (MIN_M) included; within the tolerance of the float64 reference.
    (The interpreter's dot is numpy's matmul, whose blocking may differ with the width: the GPU test checks bits.)"""
    seed = fresh_seed()
    spec = spec_of(quant, e=4, k=2, h=80, i=48, act=act)
    layer = Layer(spec, seed)
    core, pw = core_for(spec, layer)
    x, ids, w = routing(spec, tokens, seed)
    g = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2, "TMA": True}
    g1 = {**g, **extra}
    g2 = {**g, **{k: v for k, v in extra.items() if k != "MIN_M"}}
    outs = {}
    for on in (False, True):
        cfg = {"BLOCK_M": block_m, "gemm1": {**g1, "GU_DOT": True} if on else g1, "gemm2": g2}
        core.config_for = lambda t, cfg=cfg: cfg
        outs[on] = core.forward(x, ids, w, pw)
    torch.testing.assert_close(outs[True].float(), outs[False].float(), rtol=1e-2, atol=1e-3 * float(outs[False].abs().max()),
                               msg=lambda m: f"GU_DOT moved the output beyond rounding (seed {seed}): {m}")
    check(spec, layer, x, ids, w, outs[True], f"GU_DOT {quant} {act}", seed)


def test_gu_dot_refusals(tmp_path):
    """GU_DOT is a first-GEMM option of 16-bit / fp8_tensor / fp8_channel files with TMA (the tile-file check), and of
    gated layers (the core, before any weight); moe_gemm refuses it without TMA or for a non-gated GEMM."""
    K = _K()
    good = {"BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3, "TMA": True}
    assert _file_with_gemm2(K, tmp_path / "a.json", "bf16", 128, {**good, "GU_DOT": True}, good, True, "")["gemm1"]["GU_DOT"]
    _file_with_gemm2(K, tmp_path / "b.json", "bf16", 128, {**{k: v for k, v in good.items() if k != "TMA"}, "GU_DOT": True},
                     good, False, "GU_DOT .* needs TMA")
    _file_with_gemm2(K, tmp_path / "c.json", "fp8_block", 128, {**good, "BLOCK_K": 128, "GU_DOT": True},
                     {**good, "BLOCK_K": 128}, False, "GU_DOT .* needs TMA, in bf16")
    _file_with_gemm2(K, tmp_path / "d.json", "bf16", 128, good, {**good, "GU_DOT": True}, False, "first-GEMM option")
    _defaults_never_set(K, "GU_DOT")
    spec = spec_of("bf16", e=4, k=2, h=80, i=48, act="relu2")
    cfgdir = tmp_path / "cfg"
    cfgdir.mkdir()
    name = K.config_file_name(spec.num_local_experts, spec.w13_rows, spec.hidden_size, "bf16", "meta")
    (cfgdir / name).write_text(json.dumps({"format_version": 1, "key": {
        "E": spec.num_local_experts, "N": spec.w13_rows, "K": spec.hidden_size, "format": "bf16", "device": "meta"},
        "configs": {"64": {"BLOCK_M": 16, "gemm1": {**good, "BLOCK_N": 32, "BLOCK_K": 32, "GU_DOT": True},
                           "gemm2": {**good, "BLOCK_N": 32, "BLOCK_K": 32}}}}))
    with pytest.raises(RunnerInputError, match="GU_DOT .* gated layers"):
        _tm().TritonMoeCore(spec, torch.device("meta"), config_dir=str(cfgdir))   # (meta: no interpreter needed)


def _file_with_gemm2(K, path, fmt: str, block_m: int, gemm1: dict, gemm2: dict, ok: bool, option: str):
    """Write a one-bucket (8192 tokens) tile file of format ``fmt`` with these GEMM configs and load it: the bucket
    where ``ok``, else the ValueError naming ``option`` is asserted (None returned)."""
    path.write_text(json.dumps({"format_version": 1, "key": {"format": fmt}, "configs": {"8192": {
        "BLOCK_M": block_m, "gemm1": gemm1, "gemm2": gemm2}}}))
    if ok:
        return K.load_config_file(str(path))[8192]
    with pytest.raises(ValueError, match=option):
        K.load_config_file(str(path))
    return None


def _defaults_never_set(K, option: str) -> None:
    """The default tiles (Qwen3-30B-A3B's shape, bf16 / fp8_channel / fp8_block, 1 / 256 / 8192 tokens) never set
    ``option``: a measured option is chosen by measurement, in the tile files."""
    for fmt in ("bf16", "fp8_channel", "fp8_block"):
        for t in (1, 256, 8192):
            d = K.default_config(128, 1536, 2048, fmt, t, 8, (128, 128) if fmt == "fp8_block" else None)
            assert option not in d["gemm1"] and option not in d["gemm2"], (fmt, t, d)


def test_tma_is_an_option_of_16_bit_and_fp8_weights(tmp_path):
    """Config files accept ``TMA`` (a boolean) in 16-bit and FP8 files only; the default tiles never set it (it is
    chosen by measurement: benchmarks/tune_triton_moe.py --tma)."""
    K = _K()
    good = {"BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    for fmt, g2, ok in (("bf16", {**good, "TMA": True}, True), ("fp8_block", {**good, "TMA": True}, True),
                        ("fp8_channel", {**good, "TMA": True, "PREQUANT": True}, True),
                        ("nvfp4", {**good, "TMA": True}, False), ("int4_w4a16", {**good, "TMA": True}, False),
                        ("bf16", {**good, "TMA": "yes"}, False)):
        got = _file_with_gemm2(K, tmp_path / f"{fmt}-{ok}-{g2['TMA']!r}.json", fmt, 128, good, g2, ok, "TMA")
        if ok:
            assert got["gemm2"]["TMA"] is True and "TMA" not in got["gemm1"]
    _defaults_never_set(K, "TMA")


@interp
def test_tma_is_refused_where_it_cannot_load_the_weights():
    """``moe_gemm`` refuses ``TMA`` for integer (and packed) weights and for weight rows whose bytes are not a multiple
    of 16 (TMA's stride rule), with a ValueError naming it, before any launch."""
    K = _K()
    good = {"BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    spec = spec_of("int8_w8a16", e=2, k=1, h=64, i=32)
    layer = Layer(spec, 1)
    core, pw = core_for(spec, layer)
    x, ids, w = routing(spec, 3, 1)
    core.config_for = lambda t: _with_flag(core.__class__.config_for(core, t), "TMA", True)
    with pytest.raises(ValueError, match="TMA"):
        core.forward(x, ids, w, pw)
    a = torch.zeros(4, 40, dtype=torch.bfloat16)
    b = torch.zeros(2, 32, 36, dtype=torch.bfloat16)               # 72-byte rows: not a multiple of 16
    align = K.moe_align(torch.zeros(4, 1, dtype=torch.int32), 2, 0, 16)
    with pytest.raises(ValueError, match="16-byte"):
        K.moe_gemm(a[:, :36], b, torch.empty(4, 32, dtype=torch.bfloat16), align, top_k=1, n_out=32, gather=True,
                   by_slot=True, w_mode=0, config={**good, "BLOCK_N": 32, "BLOCK_K": 32, "TMA": True})


@pytest.mark.parametrize("quant, tokens, block_m, min_m, extra", [
    ("bf16", 40, 32, 16, {}), ("bf16", 300, 64, 16, {}), ("bf16", 300, 128, 32, {}),
    ("fp8_channel", 300, 128, 64, {"PREQUANT": True}), ("fp8_tensor", 300, 128, 64, {}),
    ("fp8_block", 300, 128, 64, {}), ("fp8_block", 300, 128, 64, {"SPLIT": True}), ("int4_w4a16", 300, 64, 16, {})])
@interp
def test_min_m_tiles_are_the_full_tiles(quant, tokens, block_m, min_m, extra):
    """``MIN_M`` (a block whose rows from MIN_M on are padding runs as a MIN_M-row tile) gives the layer's output as
    the full ``BLOCK_M`` tiles do, with blocks of both kinds in one launch (300 tokens x top-3 over 8 experts: about
    112 rows per expert, so full blocks and a nearly empty last block per expert), a slot of -1 and an expert with no
    rows; within the tolerance of the float64 reference."""
    seed = fresh_seed()
    spec = spec_of(quant, e=8, k=3, h=96 if quant.startswith("int") else 80, i=64 if quant.startswith("int") else 48)
    layer = Layer(spec, seed)
    core, pw = core_for(spec, layer)
    x, ids, w = routing(spec, tokens, seed, pool=[0, 1, 2, 3, 4, 5, 6])   # expert 7: no rows
    g = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}
    base = {"BLOCK_M": block_m, "gemm1": {**g, **extra}, "gemm2": {**g, **{k: v for k, v in extra.items() if k != "SPLIT"}}}
    outs = {}
    real_empty = torch.empty

    def nan_empty(*a, **kw):        # every new float buffer NaN: a row the tiles leave unwritten shows in the output
        t = real_empty(*a, **kw)
        if t.is_floating_point() and t.element_size() > 1:
            t.fill_(float("nan"))
        return t

    for m in (0, min_m):
        core.config_for = lambda t, m=m: {**base, "gemm1": {**base["gemm1"], "MIN_M": m},
                                          "gemm2": {**base["gemm2"], "MIN_M": m}}
        torch.empty = nan_empty
        try:
            outs[m] = core.forward(x, ids, w, pw)
        finally:
            torch.empty = real_empty
    diff = (outs[min_m].float() - outs[0].float()).abs().max().item()
    scale = outs[0].float().abs().max().item()
    assert diff <= 2.0 ** -7 * scale, f"MIN_M {min_m} moved the output by {diff:.3g} of {scale:.3g} (seed {seed})"
    check(spec, layer, x, ids, w, outs[min_m], f"MIN_M {quant}", seed, h16=bool(extra.get("SPLIT")))


def test_min_m_is_checked_in_config_files(tmp_path):
    """Config files accept ``MIN_M`` (0, or a power of two from 16 below the bucket's BLOCK_M; at least 64 in FP8
    files) in the GEMM configs of the MMA tiles; the default tiles never set it (it is chosen by measurement)."""
    K = _K()
    good = {"BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    for n, (fmt, bm, g2, ok) in enumerate((("bf16", 128, {**good, "MIN_M": 32}, True),
                                           ("fp8_block", 128, {**good, "MIN_M": 64}, True),
                                           ("fp8_channel", 128, {**good, "MIN_M": 32}, False),
                                           ("int8_w8a16", 64, {**good, "MIN_M": 16}, True),
                                           ("bf16", 128, {**good, "MIN_M": 0}, True),
                                           ("bf16", 64, {**good, "MIN_M": 64}, False),
                                           ("bf16", 128, {**good, "MIN_M": 24}, False),
                                           ("bf16", 128, {**good, "MIN_M": 8}, False),
                                           ("bf16", 128, {**good, "MIN_M": True}, False))):
        got = _file_with_gemm2(K, tmp_path / f"{n}.json", fmt, bm, good, g2, ok, "MIN_M")
        if ok:
            assert got["gemm2"].get("MIN_M", 0) == g2["MIN_M"] and "MIN_M" not in got["gemm1"]
    _defaults_never_set(K, "MIN_M")


@interp
def test_min_m_is_refused_outside_the_mma_tiles():
    """``moe_gemm`` refuses a ``MIN_M`` that is not a power of two from 16 below BLOCK_M, or below 64 with FP8
    weights (a shorter FP8 tile sums in other last bits), before any launch."""
    K = _K()
    g = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}
    align = K.moe_align(torch.zeros(4, 1, dtype=torch.int32), 2, 0, 32)
    a, b = torch.zeros(4, 32, dtype=torch.bfloat16), torch.zeros(2, 32, 32, dtype=torch.bfloat16)
    for m in (32, 8, 24):
        with pytest.raises(ValueError, match="MIN_M"):
            K.moe_gemm(a, b, torch.empty(64, 32, dtype=torch.bfloat16), align, top_k=1, n_out=32, gather=True,
                       by_slot=True, w_mode=0, config={**g, "MIN_M": m})
    align = K.moe_align(torch.zeros(4, 1, dtype=torch.int32), 2, 0, 128)
    with pytest.raises(ValueError, match="FP8 tiles need MIN_M >= 64"):
        K.moe_gemm(a, b.to(torch.float8_e4m3fn), torch.empty(256, 32, dtype=torch.bfloat16), align, top_k=1, n_out=32,
                   gather=True, by_slot=True, w_mode=1, a_amax=torch.ones(1), a_scale_mode=2, b_scale=torch.ones(2),
                   config={**g, "MIN_M": 32})

@pytest.mark.parametrize("per_row", [True, False])
@interp
def test_row_quant_is_the_hand_quantization(per_row):
    """``row_quant``: ``q = e4m3(clamp(x * fl32(448 / max(amax, 1e-12)), -448, 448))`` (IEEE float32 division,
    round to nearest even), per row or per tensor, for the leading ``num_rows`` rows only (the rest of ``q``
    untouched); an all-zero row quantizes to zeros (amax clamped to 1e-12)."""
    K = _K()
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    r, k, n = 37, 100, 29                                   # K not a power of two; 29 of 37 rows live
    x = (torch.randn(r, k, generator=g) * torch.rand(r, 1, generator=g) * 5).to(torch.bfloat16)
    x[3] = 0
    amax = x.float().abs().amax(1) if per_row else x.float().abs().amax().reshape(1)
    if per_row:
        amax[5] = amax[5] * 0.5                             # an amax below the row's: values clamp at +-448
    q = torch.full((r, k), 7.0).to(torch.float8_e4m3fn)     # sentinel: rows past num_rows must keep it
    K.row_quant(x, amax, q, per_row=per_row, num_rows=torch.tensor([n], dtype=torch.int32))
    a = amax.clamp(min=1e-12)
    mult = torch.full_like(a, 448.0) / a                    # float32, correctly rounded
    want = (x.float() * (mult[:, None] if per_row else mult)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    assert torch.equal(q[:n].view(torch.uint8), want[:n].view(torch.uint8)), f"seed {seed}"
    assert torch.equal(q[n:].float(), torch.full((r - n, k), 7.0)), "rows past num_rows were written"
    assert torch.equal(q[3].float(), torch.zeros(k))
    if per_row:
        assert q[5].float().abs().max() == 448.0
    q2 = torch.empty(r, k, dtype=torch.float8_e4m3fn)      # without num_rows: every row
    K.row_quant(x, amax, q2, per_row=per_row)
    assert torch.equal(q2.view(torch.uint8), want.view(torch.uint8))


@interp
def test_token_quant_is_the_norm_then_row_quant():
    """``token_quant`` (one launch) gives the amax ``torch.linalg.vector_norm(x, inf, dim=1)`` gives, NaN row
    included, and the e4m3 bits ``row_quant`` gives from that amax; an all-zero row quantizes to zeros."""
    K = _K()
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    r, k = 13, 1100                                         # K above one column block and not a power of two
    x = (torch.randn(r, k, generator=g) * torch.rand(r, 1, generator=g) * 5).to(torch.bfloat16)
    x[3] = 0
    x[7, 1099] = float("nan")
    x[9, 1050] = -30.0                                      # the row's amax in the second column block
    amax = torch.full((r,), -1.0)
    q = torch.empty(r, k, dtype=torch.float8_e4m3fn)
    K.token_quant(x, amax, q)
    want_amax = torch.linalg.vector_norm(x, float("inf"), dim=1, dtype=torch.float32)
    assert torch.equal(amax.isnan(), want_amax.isnan()) and bool(amax[7].isnan()), f"seed {seed}"
    ok = ~want_amax.isnan()
    assert torch.equal(amax[ok], want_amax[ok]) and float(amax[9]) == 30.0, f"seed {seed}"
    want = torch.empty(r, k, dtype=torch.float8_e4m3fn)
    K.row_quant(x, want_amax, want, per_row=True)
    assert torch.equal(q[ok].view(torch.uint8), want[ok].view(torch.uint8)), f"seed {seed}"
    assert torch.equal(q[3].float(), torch.zeros(k))


def test_prequant_is_an_fp8_tensor_and_fp8_channel_option(tmp_path):
    """Config files accept ``PREQUANT`` (a boolean) only in fp8_tensor/fp8_channel files; the default tiles set it
    for the first GEMM always and for the second from ``BLOCK_M`` 32 (never for other formats); with it the shared-memory estimate counts a
    one-byte, unstaged A; an e4m3 A without its amax is refused by ``moe_gemm``."""
    K = _K()
    good = {"BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    for fmt, g2, ok in (("fp8_channel", {**good, "PREQUANT": True}, True), ("fp8_tensor", {**good, "PREQUANT": True}, True),
                        ("bf16", {**good, "PREQUANT": True}, False), ("fp8_block", {**good, "PREQUANT": True}, False),
                        ("fp8_channel", {**good, "PREQUANT": 1}, False)):
        f = tmp_path / f"{fmt}-{ok}-{g2['PREQUANT']!r}.json"
        f.write_text(json.dumps({"format_version": 1, "key": {"format": fmt}, "configs": {"8192": {
            "BLOCK_M": 128, "gemm1": good, "gemm2": g2}}}))
        if ok:
            got = K.load_config_file(str(f))[8192]
            assert got["gemm2"]["PREQUANT"] is True and "PREQUANT" not in got["gemm1"]
        else:
            with pytest.raises(ValueError, match="PREQUANT"):
                K.load_config_file(str(f))
    for fmt in ("fp8_channel", "fp8_tensor"):
        big = K.default_config(128, 1536, 2048, fmt, 8192, 8)
        assert big["BLOCK_M"] >= 64 and big["gemm1"].get("PREQUANT") is True and big["gemm2"].get("PREQUANT") is True
        small = K.default_config(128, 1536, 2048, fmt, 1, 8)              # BLOCK_M 16: the first GEMM only
        assert small["BLOCK_M"] == 16 and small["gemm1"].get("PREQUANT") is True and "PREQUANT" not in small["gemm2"]
        mid = K.default_config(128, 1536, 2048, fmt, 512, 8)              # BLOCK_M 32: both
        assert mid["BLOCK_M"] == 32 and mid["gemm2"].get("PREQUANT") is True
    for fmt in ("bf16", "fp8_block", "int4_w4a16"):
        d = K.default_config(128, 1536, 2048, fmt, 8192, 8, (128, 128) if fmt == "fp8_block" else None)
        assert "PREQUANT" not in d["gemm1"] and "PREQUANT" not in d["gemm2"]
    # 128 x 128 A tile, 3 stages: 2 bytes + one staged copy without; 1 byte, none staged with it
    assert K.smem_estimate(128, good, "fp8_channel", False) - K.smem_estimate(128, {**good, "PREQUANT": True},
                                                                               "fp8_channel", False) == 3 * 128 * 128 + 128 * 128
    a = torch.zeros(16, 64, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="amax"):              # refused before any launch (only BLOCK_M is read)
        K.moe_gemm(a, torch.zeros(1, 64, 64, dtype=torch.float8_e4m3fn), torch.empty(16, 64),
                   types.SimpleNamespace(block_m=16), top_k=1, n_out=64, gather=True, by_slot=False, w_mode=2,
                   a_scale_mode=0, config=good)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@interp
def test_input_dtypes(dtype):
    """Hidden states in any float dtype; the output has the input's dtype."""
    dtype = getattr(torch, dtype)
    seed = fresh_seed()
    spec = spec_of("bf16")
    layer = Layer(spec, seed)
    core, pw = core_for(spec, layer)
    x, ids, w = routing(spec, 6, seed, dtype=dtype)
    check(spec, layer, x, ids, w, core.forward(x, ids.long(), w, pw), str(dtype), seed)


@pytest.mark.parametrize("layout", ["awq", "gptq_sym", "gptq_sym_no_qzeros", "gptq_asym", "gptq8_asym"])
@interp
def test_awq_and_gptq_checkpoint_layouts(layout):
    """prepare_weights converts the layouts published AWQ/GPTQ checkpoints store (stacked per expert) and
    gives exactly the output of the kernel layout; a desc_act g_idx is refused. (GPTQ v1 asymmetric
    packing is checked bit for bit in test_gptq_packing_follows_autogptq.)"""
    seed = fresh_seed()
    quant = "int8_w8a16" if layout == "gptq8_asym" else "int4_w4a16"
    sym = layout in ("gptq_sym", "gptq_sym_no_qzeros")
    spec = spec_of(quant)
    layer = Layer(spec, seed, sym=sym)
    core, pw = core_for(spec, layer)
    x, ids, w = routing(spec, 8, seed)
    want = core.forward(x, ids, w, pw)
    kw = {}
    if layout == "awq":
        (a13, z13, s13), (a2, z2, s2) = qi.to_awq(layer.i13), qi.to_awq(layer.i2)
        args = (a13, a2)
        kw = {"w13_scale": s13, "w2_scale": s2, "w13_zeros": z13, "w2_zeros": z2}
    else:
        # GPTQ's v1 format stores zero - 1 and cannot hold a zero point of 0, which asymmetric random groups
        # sometimes get: asymmetric layers are written in the gptq_v2 format (zeros as they are)
        v1 = sym
        (a13, z13, s13, g13), (a2, z2, s2, g2) = (qi.to_gptq(layer.i13, zeros_minus_one=v1),
                                                  qi.to_gptq(layer.i2, zeros_minus_one=v1))
        args = (a13, a2)
        kw = {"w13_scale": s13, "w2_scale": s2, "w13_g_idx": g13, "w2_g_idx": g2[0]}
        if layout != "gptq_sym_no_qzeros":
            kw.update(w13_zeros=z13, w2_zeros=z2)
    core2 = _tm().TritonMoeCore(spec, "cpu", gptq_zeros_minus_one=layout == "awq" or sym)
    got = core2.forward(x, ids, w, core2.prepare_weights(*args, **kw))
    assert torch.equal(got, want), f"{layout}: output differs from the kernel layout's (seed {seed})"
    check(spec, layer, x, ids, w, got, layout, seed)
    if layout.startswith("gptq"):
        perm = kw["w13_g_idx"].clone()
        perm[:, :2] = perm[:, :2].flip(1) + 1               # act-order: rows of different groups interleaved
        with pytest.raises(RunnerInputError, match="desc_act"):
            core2.prepare_weights(*args, **{**kw, "w13_g_idx": perm})


@interp
def test_prepare_weights_and_forward_errors_name_the_tensor():
    spec = spec_of("fp8_channel")
    layer = Layer(spec, 1)
    tm = _tm()
    core = tm.TritonMoeCore(spec, "cpu")
    q13, q2 = layer.args
    s13, s2 = layer.kwargs["w13_scale"], layer.kwargs["w2_scale"]
    with pytest.raises(RunnerInputError, match=r"w13: fp8_channel weights must be torch.float8_e4m3fn"):
        core.prepare_weights(q13.float(), q2, w13_scale=s13, w2_scale=s2)
    with pytest.raises(RunnerInputError, match=r"w2 must be \[8, 64, 32\]"):
        core.prepare_weights(q13, q2[:, :, :16], w13_scale=s13, w2_scale=s2)
    with pytest.raises(RunnerInputError, match="w2_scale is required"):
        core.prepare_weights(q13, q2, w13_scale=s13)
    with pytest.raises(RunnerInputError, match=r"w13_scale: fp8_channel scale must be \[E, N\] = \[8, 64\]"):
        core.prepare_weights(q13, q2, w13_scale=s13[:, :5], w2_scale=s2)
    with pytest.raises(RunnerInputError, match=r"w13_bias must be a float tensor of shape \[8, 64\] \(\[E_local, N13\]\), "
                                               r"got torch.float32 \[8, 32\]"):
        core.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2, w13_bias=torch.zeros(8, 32))
    with pytest.raises(RunnerInputError, match=r"w2_bias must be a float tensor of shape \[8, 64\].*torch.int32"):
        core.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2, w2_bias=torch.zeros(8, 64, dtype=torch.int32))
    pw = core.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2)
    x, ids, w = routing(spec, 4, 1)
    with pytest.raises(RunnerInputError, match=r"hidden_states must be \[T, H=64\]"):
        core.forward(x[:, :10], ids, w, pw)
    with pytest.raises(RunnerInputError, match="topk_ids must be int32 or int64"):
        core.forward(x, ids.float(), w, pw)
    with pytest.raises(RunnerInputError, match=r"topk_ids and topk_weights must be \[T=4, K=2\]"):
        core.forward(x, ids[:, :1], w, pw)
    bspec = spec_of("fp8_block")
    with pytest.raises(RunnerInputError, match="K size of a block must be a power of two"):
        tm.TritonMoeCore(bspec, "cpu", block_shape=(128, 96))
    blayer = Layer(bspec, 1)
    with pytest.raises(RunnerInputError, match=r"ceil\(N/128\), ceil\(K/128\)\] = \[8, 1, 1\]"):
        tm.TritonMoeCore(bspec, "cpu").prepare_weights(*blayer.args, **blayer.kwargs)   # 32x32 scales, 128x128 declared
    ispec = spec_of("int4_w4a16")
    ilayer = Layer(ispec, 1)
    with pytest.raises(RunnerInputError, match="cannot tell the int4 layout"):
        tm.TritonMoeCore(ispec, "cpu").prepare_weights(ilayer.args[0].int(), ilayer.args[1], **ilayer.kwargs)
    with pytest.raises(RunnerInputError, match="w13_scale is required"):
        tm.TritonMoeCore(ispec, "cpu").prepare_weights(*ilayer.args)
    with pytest.raises(RunnerInputError, match="does not implement int8_w8a8"):  # mxfp4/nvfp4 are implemented (issue 24)
        tm.TritonMoeCore(spec_of("int8_w8a8"), "cpu")


@interp
def test_through_moe_runner():
    """The core behind MoeRunner (a2a none), as resolve builds it."""
    from moe_select.backends.a2a.dispatch_none import NoDispatch
    from moe_select.runner import MoeRunner

    class Plan:
        runner, a2a = "triton", "none"

    seed = fresh_seed()
    spec = spec_of("bf16", "gelu")
    layer = Layer(spec, seed)
    r = MoeRunner(Plan(), spec, _tm().TritonMoeCore(spec, "cpu"), NoDispatch(spec), torch.device("cpu"))
    x, ids, w = routing(spec, 7, seed)
    check(spec, layer, x, ids, w, r.run(x, ids, w, r.prepare_weights(*layer.args)), "MoeRunner", seed)


@interp
def test_tuner_dry_run_writes_configs_the_core_reads():
    """benchmarks/tune_triton_moe.py --dry-run (tiny shapes, interpreter): it writes one config file per
    (shape, format) in the documented format and a log; a core reading that folder uses them and still
    matches the reference."""
    spec_ = importlib.util.spec_from_file_location("tune_triton_moe", ROOT / "benchmarks" / "tune_triton_moe.py")
    tune = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(tune)
    K = _K()
    with tempfile.TemporaryDirectory() as out:
        rc = tune.main(["--dry-run", "--out", out, "--budget-s", "120"])
        assert rc == 0
        log = json.loads((Path(out) / "tune_log.json").read_text())
        assert log["dry_run"] and log["results"], log
        files = sorted((Path(out) / "triton_configs").glob("*.json"))
        assert {f.name.split(",format=")[1].split(",")[0] for f in files} == set(tune.DRY_FORMATS)
        # fp8_channel's GEMMs were timed with and without PREQUANT; no other format's with it
        for model, fmts in log["results"].items():
            for fmt, per_t in fmts.items():
                seen = {bool(c.get("PREQUANT")) for r in per_t.values() for row in r["per_block_m"].values()
                        for g in ("gemm1", "gemm2") for c in row[g]}
                assert seen == ({False, True} if fmt == "fp8_channel" else {False}), (model, fmt, seen)
        for f in files:
            table = K.load_config_file(str(f))
            assert set(table) == set(tune.DRY_TOKENS), (f.name, table)
        m = tune.DRY_MODEL
        for quant in tune.DRY_FORMATS:
            spec = spec_of(quant, e=m[0], k=m[1], h=m[2], i=m[3])
            seed = fresh_seed()
            layer = Layer(spec, seed, block=tune.DRY_BLOCK)
            core, pw = core_for(spec, layer, config_dir=out + "/triton_configs")
            assert core.config_source.startswith(f"E={m[0]},N={2 * m[3]},K={m[2]},format={quant}"), core.config_source
            for t in tune.DRY_TOKENS:
                x, ids, w = routing(spec, t, seed + t)
                check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), f"tuned config, {t} tokens", seed)


def test_tuner_files_from_log_rewrites_the_measured_tables(tmp_path):
    """``tune_triton_moe.py --files-from-log``: the config files of a run written again from its log (when the
    files could not be copied back), stamped with the run's finish time and versions, read by the core's loader
    with the logged configs; a dry run's log is refused."""
    spec_ = importlib.util.spec_from_file_location("tune_triton_moe", ROOT / "benchmarks" / "tune_triton_moe.py")
    tune = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(tune)
    K = _K()
    g1 = {"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 3, "PREQUANT": True, "us": 176.1}
    g2 = {"BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 3, "us": 119.2}
    log = {"argv": ["--out", "/x"], "device": "NVIDIA H200", "torch": "2.11.0+cu130", "triton": "3.6.0",
           "finished": "2026-12-02T09:38:32Z",
           "results": {"Qwen3-30B-A3B": {"fp8_channel": {"2048": {"BLOCK_M": 128, "gemm1": g1, "gemm2": g2, "us": 307.4,
                                                                  "phase": "full"}}}}}
    lp = tmp_path / "tune_log.json"
    lp.write_text(json.dumps(log))
    assert tune.main(["--out", str(tmp_path / "o"), "--files-from-log", str(lp)]) == 0
    f = tmp_path / "o" / "triton_configs" / "E=128,N=1536,K=2048,format=fp8_channel,device=NVIDIA_H200.json"
    body = json.loads(f.read_text())
    assert body["tuned"]["date"] == "2026-12-02T09:38:32Z" and body["tuned"]["torch"] == "2.11.0+cu130"
    assert body["tuned"]["phase"] == {"2048": "full"} and body["tuned"]["top_k"] == 8
    t = K.load_config_file(str(f))
    assert t == {2048: {"BLOCK_M": 128, "gemm1": {k: v for k, v in g1.items() if k != "us"},
                        "gemm2": {k: v for k, v in g2.items() if k != "us"}}}
    lp.write_text(json.dumps({**log, "argv": ["--dry-run"]}))
    with pytest.raises(ValueError, match="dry run"):
        tune.files_from_log(lp, tmp_path / "o2")



def test_tuner_keys_and_writes_every_option_the_tile_files_take():
    """Every boolean option a tile file takes (``GEMM_CONFIG_FLAGS``) is part of the tuner's candidate key (so a
    candidate with it is timed on its own: candidates of an option missing from the key once shared their twins'
    timings, and were written without the option, a tile that spilled without it) and is kept when the tuner writes a
    file."""
    spec_ = importlib.util.spec_from_file_location("tune_triton_moe", ROOT / "benchmarks" / "tune_triton_moe.py")
    tune = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(tune)
    K = _K()
    base = {"BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
    assert {"PREQUANT", "TMA", "SPLIT", "GEMV"} <= set(K.GEMM_CONFIG_FLAGS)
    for flag in K.GEMM_CONFIG_FLAGS:
        on = {**base, flag: True}
        assert tune.cfg_key(on) != tune.cfg_key(base), flag
        assert tune._strip({**on, "us": 1.0})[flag] is True, flag
    assert K._check_gemm_cfg({**base, "TMA": True, "us": 1.0}, "f.json") == {**base, "TMA": True}
    short = {**base, "MIN_M": 32}                 # the integer option MIN_M: keyed and kept the same way
    assert tune.cfg_key(short) != tune.cfg_key(base) and tune._strip({**short, "us": 1.0})["MIN_M"] == 32

# --- in-process tests (no kernels run) ---------------------------------------------------------------

def test_cpu_without_the_interpreter_is_refused():
    if INTERP or not HAS_TRITON:
        pytest.skip("needs triton imported without TRITON_INTERPRET")
    with pytest.raises(RunnerInputError, match="TRITON_INTERPRET=1"):
        _tm().TritonMoeCore(spec_of("bf16"), "cpu")


def test_register_core_for_standard_dispatch():
    if not HAS_TRITON:
        pytest.skip("triton not installed")
    from moe_select.registry import Registry

    reg = Registry()
    _tm().register(reg)
    assert reg.pairs() == {("triton", "standard")} and reg.core("triton", "standard") is _tm().TritonMoeCore


def test_token_buckets_and_default_configs():
    if not HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()
    assert [K.token_bucket(t) for t in (1, 2, 3, 5, 6, 100, 8192, 10 ** 6)] == [1, 2, 4, 4, 8, 128, 8192, 8192]
    assert K.token_bucket(181, (128, 256)) == 128 and K.token_bucket(182, (128, 256)) == 256   # sqrt(128*256) = 181.02
    prev = 0
    for t in K.TOKEN_BUCKETS:                                   # BLOCK_M grows with the rows per expert
        c = K.default_config(128, 1536, 2048, "bf16", t, 8)
        assert c["BLOCK_M"] >= prev and set(c) == {"BLOCK_M", "gemm1", "gemm2"}
        prev = c["BLOCK_M"]
    assert K.default_config(128, 1536, 2048, "bf16", 1, 8)["BLOCK_M"] == 16
    assert K.default_config(128, 1536, 2048, "bf16", 8192, 8)["BLOCK_M"] == 128
    blk = K.default_config(256, 4096, 7168, "fp8_block", 8192, 8, (128, 128))
    assert blk["gemm1"]["BLOCK_K"] == blk["gemm2"]["BLOCK_K"] == 128
    small = K.default_config(4, 32, 16, "bf16", 1, 2)         # tiles never much wider than the layer
    assert small["gemm1"]["BLOCK_N"] == 16 and small["gemm1"]["BLOCK_K"] == 16


def test_config_files_are_checked_and_looked_up(tmp_path):
    if not HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()
    g = {"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 3}
    name = K.config_file_name(128, 1536, 2048, "fp8_block", "NVIDIA H200", (128, 128))
    assert name == "E=128,N=1536,K=2048,format=fp8_block,block=128x128,device=NVIDIA_H200.json"
    body = {"format_version": 1, "key": {}, "tuned": {},
            "configs": {"1": {"BLOCK_M": 16, "gemm1": g, "gemm2": {**g, "us": 3.0}},
                        "256": {"BLOCK_M": 64, "gemm1": {**g, "BLOCK_K": 64}, "gemm2": g}}}
    (tmp_path / name).write_text(json.dumps(body))
    cfg, src = K.get_config(128, 1536, 2048, "fp8_block", 300, 8, device_name="NVIDIA H200", block_shape=(128, 128),
                            config_dir=tmp_path)
    assert src == name and cfg["BLOCK_M"] == 64 and cfg["gemm1"]["BLOCK_K"] == 128     # block K wins
    cfg, src = K.get_config(128, 1536, 2048, "fp8_block", 300, 8, device_name="NVIDIA H100", block_shape=(128, 128),
                            config_dir=tmp_path)
    assert src == "default"
    for bad, msg in [({**body, "format_version": 2}, "format_version"),
                     ({**body, "configs": {"x": body["configs"]["1"]}}, "positive token counts"),
                     ({**body, "configs": {"1": {**body["configs"]["1"], "BLOCK_M": 48}}}, "BLOCK_M must be"),
                     ({**body, "configs": {"1": {**body["configs"]["1"], "gemm1": {**g, "BLOCK_N": 48}}}}, "power of two"),
                     ({**body, "configs": {"1": {**body["configs"]["1"], "gemm2": {"BLOCK_N": 64}}}}, "exactly the keys")]:
        p = tmp_path / f"bad{len(msg)}.json"
        p.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=msg):
            K.load_config_file(str(p))


def test_a_tile_files_key_must_say_the_layer_its_name_looks_it_up_for(tmp_path):
    """A tile file is chosen by its name; a ``key`` that says another layer (format, E, block shape, device) is an error
    naming the file and the field, where the file's options (checked against ``key.format``) would otherwise reach a
    layer of another format (a new user's trial: an mxfp4 key's DIRECT bucket on a bf16 layer failed with a bare
    AssertionError at the first forward). So are an unknown top-level key, a num_warps that is no power of two and a
    ``us`` that is no number."""
    if not HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()
    g = {"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}
    name = K.config_file_name(4, 64, 64, "bf16", "cpu")
    key = {"E": 4, "N": 64, "K": 64, "format": "bf16", "block_shape": None, "device": "cpu"}
    body = {"format_version": 1, "key": key, "tuned": {}, "configs": {"16": {"BLOCK_M": 16, "gemm1": g, "gemm2": g}}}

    def lookup(b):
        (tmp_path / name).write_text(json.dumps(b))
        K.load_config_file.cache_clear()
        return K.get_config(4, 64, 64, "bf16", 16, 2, device_name="cpu", config_dir=tmp_path)

    assert lookup(body)[1] == name
    for field, value in (("format", "mxfp4"), ("E", 8), ("device", "NVIDIA H200"), ("block_shape", [128, 128])):
        with pytest.raises(ValueError, match=rf"{re.escape(name)}: key\.{field} is"):
            lookup({**body, "key": {**key, field: value}})
    for bad, msg in (({**body, "extra": 1}, "unknown top-level key"),
                     ({**body, "configs": {"16": {"BLOCK_M": 16, "gemm1": {**g, "num_warps": 3}, "gemm2": g}}},
                      "num_warps must be a power of two"),
                     ({**body, "configs": {"16": {"BLOCK_M": 16, "gemm1": {**g, "us": "fast"}, "gemm2": g}}},
                      "us .* must be a number"),
                     ({**body, "key": "bf16"}, "key must be an object")):
        with pytest.raises(ValueError, match=msg):
            lookup(bad)

@interp
def test_the_runner_checks_a_tile_files_key_where_it_loads_the_file():
    """TritonMoeCore loads its tile file itself (``_load_configs``), not through ``get_config``: a key that says another
    layer is the same error there, as a RunnerInputError naming the file and the field, before any weight."""
    K = _K()
    g = {"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}
    name = K.config_file_name(4, 64, 64, "bf16", "cpu")
    key = {"E": 4, "N": 64, "K": 64, "format": "bf16", "block_shape": None, "device": "cpu"}
    body = {"format_version": 1, "key": key, "tuned": {}, "configs": {"16": {"BLOCK_M": 16, "gemm1": g, "gemm2": g}}}
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=64, intermediate_size=32, activation="silu", quant="bf16")
    with tempfile.TemporaryDirectory() as d:
        def core(b):
            (Path(d) / name).write_text(json.dumps(b))
            K.load_config_file.cache_clear()
            return _tm().TritonMoeCore(spec, "cpu", config_dir=d)

        assert spec.w13_rows == 64 and core(body).config_source == name
        for field, value in (("format", "mxfp4"), ("E", 8), ("device", "NVIDIA H200"), ("block_shape", [128, 128])):
            with pytest.raises(RunnerInputError, match=rf"{re.escape(name)}: key\.{field} is"):
                core({**body, "key": {**key, field: value}})
        # SPLIT (fp8_block's split first GEMM) in a file this bf16 layer reads: refused here, before any weight, not
        # at the first forward (_gemm1_split): by load_config_file when the key says no fp8_block format, by the key
        # check when it says fp8_block
        split = {**body, "configs": {"16": {"BLOCK_M": 16, "gemm1": {**g, "SPLIT": True}, "gemm2": g}}}
        with pytest.raises(RunnerInputError, match=r"SPLIT is a first-GEMM option of fp8_block files only"):
            core(split)
        with pytest.raises(RunnerInputError, match=rf"{re.escape(name)}: key\.format is 'fp8_block'"):
            core({**split, "key": {**key, "format": "fp8_block", "block_shape": [128, 128]}})


_G2_BF16_128 = {"BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3, "WGMMA": True}


@interp
def test_the_core_checks_wgmma_buckets_and_runs_them_on_the_tl_tiles_where_gluon_cannot_run():
    """(tests/test_triton_wgmma.py holds the other WGMMA tests; this one runs in this file's interpreter worker.)
    The core checks a WGMMA bucket against the layer (BLOCK_N dividing the hidden size, the intermediate size a
    multiple of BLOCK_K) at construction, before any weight: RunnerInputError naming the file and bucket; where Gluon
    cannot run (here: the interpreter) the bucket's second GEMM runs the tl tiles of its other keys, and the config
    source says so; the layer's output is then the tl tiles' against float64."""
    K, tm = _K(), _tm()
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=128, intermediate_size=64, activation="silu", quant="bf16")
    name = K.config_file_name(4, 128, 128, "bf16", "cpu")
    key = {"E": 4, "N": 128, "K": 128, "format": "bf16", "block_shape": None, "device": "cpu"}
    g1 = {"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}
    with tempfile.TemporaryDirectory() as d:
        def core(g2: dict):
            body = {"format_version": 1, "key": key, "configs": {"16": {"BLOCK_M": 64, "gemm1": g1, "gemm2": g2}}}
            (Path(d) / name).write_text(json.dumps(body))
            K.load_config_file.cache_clear()
            return tm.TritonMoeCore(spec, "cpu", config_dir=d)

        c = core(_G2_BF16_128)
        assert "WGMMA second GEMMs run the tl tiles" in c.config_source and "interpreter" in c.config_source
        cfg = c.config_for(16)
        assert "WGMMA" not in cfg["gemm2"] and cfg["gemm2"]["BLOCK_N"] == 128
        # the ping-pong form falls back the same way (no PINGPONG left on the tl tiles' config)
        pp = core({**_G2_BF16_128, "PINGPONG": True})
        assert "WGMMA second GEMMs run the tl tiles" in pp.config_source
        assert not {"WGMMA", "PINGPONG"} & set(pp.config_for(16)["gemm2"])
        with pytest.raises(RunnerInputError, match=rf"{name}: tokens 16: gemm2: WGMMA: BLOCK_N must be .* divide the "
                                                   r"output width 128, got 256"):
            core({**_G2_BF16_128, "BLOCK_N": 256})
        layer = Layer(spec, fresh_seed())
        pw = c.prepare_weights(*layer.args, **layer.kwargs)
        x, ids, w = routing(spec, 16, 7)
        check(spec, layer, x, ids, w, c.forward(x, ids, w, pw), "WGMMA bucket on the tl tiles")


def test_warm_token_counts_cover_every_token_count():
    """One forward at each warm-up count compiles every (configuration, sort path) any count 1..20000 uses."""
    if not HAS_TRITON:
        pytest.skip("triton not installed")
    K = _K()
    for top_k, num_local, table in [(8, 128, {b: K.default_config(128, 1536, 2048, "bf16", b, 8) for b in K.TOKEN_BUCKETS}),
                                    (2, 8, {1: {"BLOCK_M": 16}, 256: {"BLOCK_M": 64}, 4096: {"BLOCK_M": 128}})]:
        warm = K.warm_token_counts(table, top_k, num_local=num_local)
        buckets = tuple(sorted(table))
        limit = K.single_cta_limit(num_local)

        def key(t, table=table, buckets=buckets, top_k=top_k, limit=limit):
            return json.dumps(table[K.token_bucket(t, buckets)], sort_keys=True), t * top_k <= limit

        warmed = {key(t) for t in warm}
        assert all(key(t) in warmed for t in range(1, 20001)), warm
        assert len(warm) == len(warmed)


# --- compiled for sm90 without a GPU -------------------------------------------------------------------

SMEM_SM90 = 227 * 1024          # the largest dynamic shared memory of one CTA on sm90 (H100/H200)


def _sm90_compile(kernel, args, kwargs) -> dict:
    """Compile one launch of ``kernel`` for sm90 (Triton's own binder, so the same specialisation as a
    real launch), then ``ptxas -v`` for registers and spills. No GPU or driver is needed."""
    import re
    import subprocess

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    jit = kernel.jit
    kwargs = {**kwargs, "debug": False}
    bound, spec, options = create_function_from_signature(jit.signature, jit.params, backend)(*args, **kwargs)
    options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound, spec, options)
    ck = triton.compile(ASTSource(jit, signature, constexprs, attrs), target=target, options=options.__dict__)
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ck.asm["ptx"])
    r = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", f.name, "-o", os.devnull], capture_output=True, text=True)
    os.unlink(f.name)
    return {"kernel": kernel.__name__, "shared": ck.metadata.shared,
            "regs": int(re.search(r"Used (\d+) registers", r.stderr).group(1)),
            "spill": int(re.search(r"(\d+) bytes spill stores", r.stderr).group(1)),
            "mma": ck.asm["ptx"].count("wgmma.mma_async") + ck.asm["ptx"].count("mma.sync"), "config": kwargs.get("BLOCK_M"),
            # element-by-element stores of 8/16-bit outputs (not st.global.v2/v4)
            "scalar_stores": len(re.findall(r"st\.global(?:\.[a-z0-9]+)*\.b(?:8|16) ", ck.asm["ptx"])),
            "tma_loads": ck.asm["ttgir"].count("async_tma_copy_global_to_local"),
            # the widest wgmma (its N: the columns one warpgroup's MMA instruction computes)
            "wgmma_n": max((int(n) for n in re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k", ck.asm["ptx"])),
                           default=0),
            "funnel_shifts": ck.asm["ptx"].count("shf.r.wrap.b32")}


def _ptxas_runs() -> bool:
    if not HAS_TRITON or INTERP:
        return False
    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    try:
        return subprocess.run([str(ptxas), "--version"], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.parametrize("quant, act, tokens", [
    ("bf16", "silu", 1), ("bf16", "silu", 2048), ("bf16", "gelu", 256), ("bf16", "relu2", 256),
    ("bf16", "swiglu_oai", 2048), ("fp16", "silu", 2048), ("fp8_tensor", "silu", 2048),
    ("fp8_channel", "silu", 1), ("fp8_channel", "silu", 8192), ("fp8_block", "silu", 1), ("fp8_block", "silu", 8192),
    ("int4_w4a16", "silu", 1), ("int4_w4a16", "silu", 8192), ("int8_w8a16", "silu", 2048)])
def test_default_configs_compile_for_sm90(monkeypatch, quant, act, tokens):
    """Every kernel a forward launches, with the default configuration, compiled for sm90 (Hopper) by
    Triton and ptxas here, without a GPU, at the Qwen3-30B-A3B layer shape (the sort's multi-CTA path
    above 128 slots for its 128 experts): it compiles, its shared memory fits an sm90 CTA, the GEMMs use tensor cores, and ptxas
    spills at most a few registers: 16 bytes (measured 8 in fp8_channel's second GEMM at ``BLOCK_M`` 128,
    0 elsewhere), 64 in fp8_block's first GEMM (measured 52 at ``BLOCK_M`` 64), and the GEMMs store their
    8/16-bit outputs with vector stores only."""
    if not _ptxas_runs():
        pytest.skip("needs triton's bundled ptxas (and triton imported without TRITON_INTERPRET)")
    K = _K()
    done = []
    monkeypatch.setattr(K._Kernel, "launch", lambda self, grid, device, *a, warmup=False, **kw:
                        done.append(_sm90_compile(self, a, kw)))
    e, k, h, i = 128, 8, 2048, 768
    spec = LayerSpec(num_experts=e, top_k=k, hidden_size=h, intermediate_size=i, activation=act, quant=quant)
    meta = torch.device("meta")
    n13 = spec.w13_rows
    kp = 2 if quant == "int4_w4a16" else 1
    wdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "int4_w4a16": torch.uint8, "int8_w8a16": torch.uint8}.get(
        quant, torch.float8_e4m3fn)
    w13 = torch.empty(e, n13, h // kp, dtype=wdt, device=meta)
    w2 = torch.empty(e, h, i // kp, dtype=wdt, device=meta)
    scales = {"fp8_tensor": ((e,), (e,)), "fp8_channel": ((e, n13), (e, h)),
              "fp8_block": ((e, n13 // 128, h // 128), (e, h // 128, i // 128)),
              "int4_w4a16": ((e, n13, h // 128), (e, h, i // 128)), "int8_w8a16": ((e, n13, h // 128), (e, h, i // 128))}
    kw = {}
    if quant in scales:
        kw = {"w13_scale": torch.empty(scales[quant][0], device=meta), "w2_scale": torch.empty(scales[quant][1], device=meta)}
    core = _tm().TritonMoeCore(spec, meta)
    pw = core.prepare_weights(w13, w2, **kw)
    x = torch.empty(tokens, h, dtype=torch.float16 if quant == "fp16" else torch.bfloat16, device=meta)
    core.forward(x, torch.empty(tokens, k, dtype=torch.int32, device=meta), torch.empty(tokens, k, device=meta), pw)
    names = [d["kernel"] for d in done]
    assert names.count("_moe_gemm_kernel") == 2 and "_topk_sum_kernel" in names, names
    assert ("_align_count_kernel" in names) == (tokens * k > K.single_cta_limit(e)), names
    for d in done:
        assert d["shared"] <= SMEM_SM90, d
        allowed = 64 if quant == "fp8_block" and d["kernel"] == "_moe_gemm_kernel" else 16
        assert d["spill"] <= allowed, (d, core.config_for(tokens))
        if d["kernel"] == "_moe_gemm_kernel":
            assert d["mma"] > 0, d                       # tensor cores: wgmma (BLOCK_M >= 64) or mma.sync
            # vector stores in the epilogue: element-wise ones made the GEMMs store-bound (about 10x slower
            # at 8192 tokens on an H200, benchmarks/gemm_profile.py)
            assert d["scalar_stores"] == 0, d
            assert d["tma_loads"] == 0, d                # pointer loads unless a config asks for TMA


def _sm90_forward(monkeypatch, quant: str, tokens: int, configure) -> tuple[list[dict], dict]:
    """One forward of the Qwen3-30B-A3B layer shape (128 experts, top-8, H 2048, I 768, silu; bf16 / fp8 weights)
    on the meta device at ``tokens``, each launch compiled for sm90 (:func:`_sm90_compile`) instead of run, with the
    tile config ``configure(default config)``. Returns (the compiled launches, the default config); skips where
    triton's ptxas does not run."""
    if not _ptxas_runs():
        pytest.skip("needs triton's bundled ptxas (and triton imported without TRITON_INTERPRET)")
    K = _K()
    done: list[dict] = []
    monkeypatch.setattr(K._Kernel, "launch", lambda self, grid, device, *a, warmup=False, **kw:
                        done.append(_sm90_compile(self, a, kw)))
    e, k, h, i = 128, 8, 2048, 768
    spec = LayerSpec(num_experts=e, top_k=k, hidden_size=h, intermediate_size=i, activation="silu", quant=quant)
    meta = torch.device("meta")
    n13 = spec.w13_rows
    wdt = torch.bfloat16 if quant == "bf16" else torch.float8_e4m3fn
    w13, w2 = torch.empty(e, n13, h, dtype=wdt, device=meta), torch.empty(e, h, i, dtype=wdt, device=meta)
    kw = {"fp8_channel": {"w13_scale": torch.empty(e, n13, device=meta), "w2_scale": torch.empty(e, h, device=meta)},
          "fp8_block": {"w13_scale": torch.empty(e, n13 // 128, h // 128, device=meta),
                        "w2_scale": torch.empty(e, h // 128, i // 128, device=meta)}}.get(quant, {})
    core = _tm().TritonMoeCore(spec, meta)
    pw = core.prepare_weights(w13, w2, **kw)
    base = core.config_for(tokens)
    core.config_for = lambda t: configure(base)
    x = torch.empty(tokens, h, dtype=torch.bfloat16, device=meta)
    core.forward(x, torch.empty(tokens, k, dtype=torch.int32, device=meta), torch.empty(tokens, k, device=meta), pw)
    return done, base


@pytest.mark.parametrize("quant", ["bf16", "fp8_channel", "fp8_block"])
def test_min_m_tiles_compile_for_sm90(monkeypatch, quant):
    """With ``MIN_M`` 64 in both GEMM configs of the 2048-token default tiles at BLOCK_M 128, every GEMM
    compiled for sm90 holds both tile heights (more MMA instructions than the tile without it), keeps its shared
    memory within an sm90 CTA, spills at most 16 bytes more than without it, and stores with vector stores only."""
    plain, base = _sm90_forward(monkeypatch, quant, 2048, lambda c: {**c, "BLOCK_M": 128})
    done, _ = _sm90_forward(monkeypatch, quant, 2048, lambda c: {
        **c, "BLOCK_M": 128, "gemm1": {**c["gemm1"], "MIN_M": 64}, "gemm2": {**c["gemm2"], "MIN_M": 64}})
    gemms = [d for d in done if d["kernel"] == "_moe_gemm_kernel"]
    before = [d for d in plain if d["kernel"] == "_moe_gemm_kernel"]
    assert len(gemms) == 2 == len(before), [d["kernel"] for d in done]
    for d, b in zip(gemms, before):
        assert d["mma"] > b["mma"] > 0, (d, b)
        assert d["shared"] <= SMEM_SM90 and d["spill"] <= b["spill"] + 16 and d["scalar_stores"] == 0, (d, b)


@pytest.mark.parametrize("quant", ["bf16", "fp8_channel", "fp8_block"])
def test_tma_tiles_compile_for_sm90(monkeypatch, quant):
    """With ``TMA`` in both GEMM configs (BLOCK_M 128 / 64, the tiles --tma tunes), every GEMM compiled for sm90
    here loads its weight tiles with TMA copies (per K step one per weight tile it reads: gate and up, or one), keeps its
    shared memory within an sm90 CTA and spills nothing, at the Qwen3-30B-A3B layer shape, 8192 tokens."""
    done, base = _sm90_forward(monkeypatch, quant, 8192, lambda c: _with_flag(c, "TMA", True))
    gemms = [d for d in done if d["kernel"] == "_moe_gemm_kernel"]
    assert len(gemms) == 2, [d["kernel"] for d in done]
    split = bool(base["gemm1"].get("SPLIT"))
    for j, d in enumerate(gemms):
        gated = j == 0 and not split
        # TMA copies in the pipelined TTGIR: the prologue's stages and the loop's, each a whole number of K steps
        assert d["tma_loads"] > 0 and d["tma_loads"] % (2 if gated else 1) == 0, d
        assert d["shared"] <= SMEM_SM90 and d["spill"] == 0 and d["mma"] > 0 and d["scalar_stores"] == 0, d


@pytest.mark.parametrize("quant", ["bf16", "fp8_channel"])
def test_gu_dot_tiles_compile_for_sm90(monkeypatch, quant):
    """``GU_DOT`` on the first GEMM (TMA, BLOCK_M 128, BLOCK_N 128, 8 warps; Qwen3-30B-A3B, 8192 tokens), compiled for sm90
    here: one TMA copy per K step where the two accumulators take two, each warpgroup's wgmma twice as wide (n256 against
    n128), the same shared memory at most, no spill, vector stores only; the second GEMM is unchanged."""
    g1 = {"BLOCK_N": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3, "TMA": True}
    plain, _ = _sm90_forward(monkeypatch, quant, 8192, lambda c: {**c, "BLOCK_M": 128, "gemm1": {**c["gemm1"], **g1}})
    done, _ = _sm90_forward(monkeypatch, quant, 8192, lambda c: {
        **c, "BLOCK_M": 128, "gemm1": {**c["gemm1"], **g1, "GU_DOT": True}})
    one = [d for d in done if d["kernel"] == "_moe_gemm_kernel"]
    two = [d for d in plain if d["kernel"] == "_moe_gemm_kernel"]
    assert len(one) == 2 == len(two), [d["kernel"] for d in done]
    assert one[0]["wgmma_n"] == 2 * two[0]["wgmma_n"] == 256, (one[0], two[0])
    assert 2 * one[0]["tma_loads"] == two[0]["tma_loads"] > 0, (one[0], two[0])
    assert one[0]["shared"] <= min(two[0]["shared"], SMEM_SM90) and one[0]["spill"] == 0 and one[0]["scalar_stores"] == 0
    assert {k: v for k, v in one[1].items() if k != "config"} == {k: v for k, v in two[1].items() if k != "config"}


def test_the_int_reference_dequantization_is_the_layouts_definition():
    """The tests' own integer dequantization (dequant_int_kernel_layout) on bytes decoded by hand, and equal to
    quant_int's on random codes (two implementations written apart)."""
    q4 = torch.tensor([[0x21, 0xF0], [0x08, 0x7F]], dtype=torch.uint8)      # codes [1, 2, 0, 15] and [8, 0, 15, 7]
    scales = torch.tensor([[0.5, 0.25], [2.0, 1.0]])                         # groups of 2 columns
    want_sym = torch.tensor([[(1 - 8) * 0.5, (2 - 8) * 0.5, (0 - 8) * 0.25, (15 - 8) * 0.25],
                             [(8 - 8) * 2.0, (0 - 8) * 2.0, (15 - 8) * 1.0, (7 - 8) * 1.0]], dtype=torch.float64)
    assert torch.equal(dequant_int_kernel_layout(q4, scales, None, 4), want_sym)
    zeros = torch.tensor([[1, 3], [0, 15]], dtype=torch.uint8)
    want = torch.tensor([[0.0, 0.5, -0.75, 3.0], [16.0, 0.0, 0.0, -8.0]], dtype=torch.float64)
    assert torch.equal(dequant_int_kernel_layout(q4, scales, zeros, 4), want)
    q8 = torch.tensor([[0, 128, 255, 129]], dtype=torch.uint8)
    assert dequant_int_kernel_layout(q8, torch.tensor([[0.5]]), None, 8).tolist() == [[-64.0, 0.0, 63.5, 0.5]]
    g = torch.Generator().manual_seed(0)
    for bits in (4, 8):
        iw = qi.quantize_int(torch.randn(3, 16, 64, generator=g), bits, 16, sym=False)
        q, s, z = qi.to_kernel(iw)
        theirs = qi.dequantize_int(iw.q, iw.scales, iw.zeros, bits).double()
        assert torch.equal(torch.stack([dequant_int_kernel_layout(q[e], s[e], z[e], bits) for e in range(3)]), theirs)


# --- quant_int (pure torch) ----------------------------------------------------------------------------

@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("sym", [True, False])
def test_int_quantization_round_trips_through_every_layout(bits, sym):
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(3, 32, 64, generator=g)
    iw = qi.quantize_int(w, bits, 16, sym=sym)
    d = qi.dequantize_int(iw.q, iw.scales, iw.zeros, bits)
    # round to nearest: half a step; asymmetric: the rounded zero point shifts the grid by up to half a
    # step, so values at the range ends may clip by up to one step
    bound = iw.scales.repeat_interleave(16, -1) * (0.5 * 1.01 if sym else 1.0)
    assert ((d - w).abs() <= bound + 1e-6).all(), f"round to nearest (seed {seed})"
    assert int(iw.q.max()) < 2 ** bits
    b = qi.from_kernel(*qi.to_kernel(iw), bits)
    assert torch.equal(b.q, iw.q) and torch.equal(b.scales, iw.scales)
    if bits == 4:
        a = qi.from_awq(*qi.to_awq(iw))
        assert torch.equal(a.q, iw.q) and torch.equal(a.zero_point, iw.zero_point) and torch.equal(a.scales, iw.scales)
    # GPTQ v1 stores zero - 1, so a zero point of 0 (a group with hardly a negative value: of the order of 2^-16 of
    # groups of 16 normal values, so some seeds draw one) has no v1 form (to_gptq refuses it, tested below): such
    # draws round-trip through v2
    v1 = not bool((iw.zero_point == 0).any())
    qw, qz, sc, gi = qi.to_gptq(iw, zeros_minus_one=v1)
    r = qi.from_gptq(qw, qz, sc, bits, g_idx=gi, zeros_minus_one=v1)
    assert torch.equal(r.q, iw.q) and torch.equal(r.zero_point, iw.zero_point), f"seed {seed}, v1 {v1}"
    assert torch.equal(qi.dequantize_int(r.q, r.scales, r.zeros, bits), d)


def test_awq_packing_follows_autoawq():
    """AutoAWQ's WQLinear_GEMM.from_linear loop, written out (casper-hansen/AutoAWQ@030fe2a1:
    awq/modules/linear/gemm.py): nibble i of qweight[:, col] = intweight[:, col * 8 + order_map[i]]."""
    seed = fresh_seed()
    w = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(seed))
    iw = qi.quantize_int(w, 4, 16, sym=False)
    qweight, qzeros, scales = qi.to_awq(iw)
    intweight = iw.q[0].T.to(torch.int64)                        # [K, N] = [in, out]
    zeros = iw.zeros[0].T.to(torch.int64)                        # [G, N]
    want_w = torch.zeros(32, 2, dtype=torch.int64)
    want_z = torch.zeros(2, 2, dtype=torch.int64)
    order_map = [0, 2, 4, 6, 1, 3, 5, 7]
    for col in range(2):
        for i in range(8):
            want_w[:, col] |= intweight[:, col * 8 + order_map[i]] << (i * 4)
            want_z[:, col] |= zeros[:, col * 8 + order_map[i]] << (i * 4)
    as_i32 = lambda t: torch.where(t >= 2 ** 31, t - 2 ** 32, t).to(torch.int32)  # noqa: E731
    assert torch.equal(qweight[0], as_i32(want_w)) and torch.equal(qzeros[0], as_i32(want_z)), f"seed {seed}"
    assert torch.equal(scales[0], iw.scales[0].T.half())


def test_gptq_packing_follows_autogptq():
    """AutoGPTQ's QuantLinear.pack loops, written out (AutoGPTQ/AutoGPTQ@179776bd:
    auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py): input rows packed in order along qweight's rows,
    zeros minus one packed in order along qzeros' columns."""
    seed = fresh_seed()
    w = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(seed))
    for bits in (4, 8):
        iw = qi.quantize_int(w, bits, 16, sym=False)
        iw.zeros = iw.zeros.clamp(min=1)                        # v1 cannot store a zero point of 0
        qweight, qzeros, _, g_idx = qi.to_gptq(iw)
        per = 32 // bits
        intweight = iw.q[0].T.to(torch.int64)                   # [K, N]
        want_w = torch.zeros(32 // per, 16, dtype=torch.int64)
        for row in range(32 // per):
            for j in range(row * per, row * per + per):
                want_w[row] |= intweight[j] << (bits * (j - row * per))
        zeros = iw.zeros[0].T.to(torch.int64) - 1               # [G, N]
        want_z = torch.zeros(2, 16 // per, dtype=torch.int64)
        for col in range(16 // per):
            for j in range(col * per, col * per + per):
                want_z[:, col] |= zeros[:, j] << (bits * (j - col * per))
        as_i32 = lambda t: torch.where(t >= 2 ** 31, t - 2 ** 32, t).to(torch.int32)  # noqa: E731
        assert torch.equal(qweight[0], as_i32(want_w)) and torch.equal(qzeros[0], as_i32(want_z)), f"{bits} bits, seed {seed}"
        assert g_idx[0].tolist() == [k // 16 for k in range(32)]


def test_int_layout_errors():
    iw = qi.quantize_int(torch.randn(2, 16, 32), 4, 16, sym=False)
    with pytest.raises(ValueError, match="group_size 12 must divide K = 32"):
        qi.quantize_int(torch.randn(2, 16, 32), 4, 12)
    with pytest.raises(ValueError, match="bits must be 4 or 8"):
        qi.quantize_int(torch.randn(2, 16, 32), 3, 16)
    qweight, qzeros, scales = qi.to_awq(iw)
    with pytest.raises(ValueError, match=r"AWQ qzeros must be int32 \[E, G, N/8\] = \[2, 2, 2\]"):
        qi.from_awq(qweight, qzeros[:, :1], scales)
    with pytest.raises(ValueError, match="AWQ checkpoints are 4-bit only"):
        qi.to_awq(qi.quantize_int(torch.randn(2, 16, 32), 8, 16))
    g = torch.arange(32) // 16
    qi.check_g_idx(g, 32, 16)
    with pytest.raises(ValueError, match="desc_act"):
        qi.check_g_idx(g.flip(0), 32, 16)
    iw.zeros = iw.zeros.clone()
    iw.zeros[0, 0, 0] = 0
    with pytest.raises(ValueError, match="zero point of 0 cannot be stored"):
        qi.to_gptq(iw)
    qw, qz, sc, _ = qi.to_gptq(iw, zeros_minus_one=False)
    with pytest.raises(ValueError, match="zero point of 16"):
        qi.from_gptq(qw, torch.full_like(qz, -1), sc, 4)              # every nibble 15: zero 16 in v1


# --- GPU tests ------------------------------------------------------------------------------------------

def gpu_test(fn):
    """Mark a test ``gpu`` and skip it without CUDA."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")(fn))


#: Real layer shapes (E, K, H, I, activation) for the GPU checks.
REAL = {"Qwen3-30B-A3B": (128, 8, 2048, 768, "silu"), "gpt-oss-20b": (32, 4, 2880, 2880, "swiglu_oai"),
        "DeepSeek-V3": (256, 8, 7168, 2048, "silu"), "Mixtral-8x7B": (8, 2, 4096, 14336, "silu")}


def gpu_layer(quant, act="silu", *, e=32, k=4, h=1024, i=384, ep=1, rank=0, seed=None, **kw):
    spec = LayerSpec(num_experts=e, top_k=k, hidden_size=h, intermediate_size=i, activation=act, quant=quant,
                     ep=ep, ep_rank=rank)
    seed = fresh_seed() if seed is None else seed
    layer = Layer(spec, seed, "cuda", block=(128, 128), groups=(128, 128))
    return spec, layer, seed


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("quant", FORMATS)
@gpu_test
def test_gpu_every_format_and_activation(quant, act):
    spec, layer, seed = gpu_layer(quant, act)
    core, pw = core_for(spec, layer, "cuda", warmup=False)
    for t in (1, 37):
        x, ids, w = routing(spec, t, seed + t, "cuda")
        check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), f"{t} tokens", seed)



@pytest.mark.parametrize("model, quant, tokens", [
    ("Qwen3-30B-A3B", "bf16", (1, 64)), ("Qwen3-30B-A3B", "fp8_channel", (1, 64)),
    ("Qwen3-30B-A3B", "fp8_block", (1, 64)), ("Qwen3-30B-A3B", "int4_w4a16", (3,)),
    ("gpt-oss-20b", "bf16", (1, 16)), ("Mixtral-8x7B", "fp8_tensor", (4,)), ("DeepSeek-V3", "fp8_block", (4,))])
@gpu_test
def test_gpu_real_layer_shapes(model, quant, tokens):
    e, k, h, i, act = REAL[model]
    spec, layer, seed = gpu_layer(quant, act, e=e, k=k, h=h, i=i)
    core, pw = core_for(spec, layer, "cuda", warmup=False)
    for t in tokens:
        x, ids, w = routing(spec, t, seed + t, "cuda")
        check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), f"{model}, {t} tokens", seed)



@pytest.mark.parametrize("quant", ["bf16", "fp8_channel", "fp8_block", "int4_w4a16"])
@gpu_test
def test_gpu_expert_parallel_ranks(quant):
    full, layer, seed = gpu_layer(quant, k=6)
    x, ids, w = routing(full, 50, seed, "cuda")
    total = torch.zeros(x.shape, dtype=torch.float64)
    for rank in range(4):
        spec = LayerSpec(num_experts=32, top_k=6, hidden_size=1024, intermediate_size=384, quant=quant, ep=4, ep_rank=rank)
        sl = slice(spec.expert_offset, spec.expert_offset + spec.num_local_experts)
        part = Layer.__new__(Layer)
        part.block = layer.block
        part.args = tuple(a[sl] for a in layer.args)
        part.kwargs = {k: (v[sl] if v is not None else None) for k, v in layer.kwargs.items()}
        part.d13, part.d2 = layer.d13[sl], layer.d2[sl]
        core, pw = core_for(spec, part, "cuda", warmup=False)
        out = core.forward(x, ids, w, pw)
        check(spec, part, x, ids, w, out, f"rank {rank}", seed)
        total += out.double().cpu()
    err = rel_error(total, reference_moe(x, ids, w, layer.d13, layer.d2))
    assert err <= TOL[quant], f"{quant}: ranks' sum rel_error {err:.3g} (seed {seed})"



@pytest.mark.parametrize("quant", ["bf16", "fp8_channel", "fp8_block", "int4_w4a16"])
@pytest.mark.parametrize("tokens", [1, 100, 700])
@gpu_test
def test_gpu_cuda_graph_replay_equals_eager(quant, tokens):
    spec, layer, seed = gpu_layer(quant, k=8, e=64)
    core, pw = core_for(spec, layer, "cuda", warmup=False)
    x, ids, w = routing(spec, tokens, seed, "cuda")
    sx, sids, sw = x.clone(), ids.clone(), w.clone()
    core.forward(sx, sids, sw, pw)                          # compiles outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        sout = core.forward(sx, sids, sw, pw)
    for s in range(3):                                      # new inputs copied into the captured buffers
        x2, ids2, w2 = routing(spec, tokens, seed + 100 + s, "cuda")
        sx.copy_(x2)
        sids.copy_(ids2)
        sw.copy_(w2)
        g.replay()
        eager = core.forward(x2, ids2, w2, pw)
        torch.cuda.synchronize()
        assert torch.equal(sout, eager), f"{quant}, {tokens} tokens: graph replay differs from eager (seed {seed})"
        check(spec, layer, x2, ids2, w2, sout, "graph replay", seed)



def _replayed(core, pw, x, ids, w) -> torch.Tensor:
    """``core.forward`` on copies of the inputs captured in a CUDA graph and replayed once: the replay's output."""
    sx, sids, sw = x.clone(), ids.clone(), w.clone()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        sout = core.forward(sx, sids, sw, pw)
    g.replay()
    torch.cuda.synchronize()
    return sout


@pytest.mark.parametrize("act", ["silu", "swiglu_oai"])
@gpu_test
def test_gpu_fp8_block_split_first_gemm(act):
    """fp8_block above 192 rows per expert runs its split first GEMM by default (BLOCK_M 128, act_quant):
    against float64 and the emulation with the first GEMM's output in bf16; CUDA-graph replay equals eager."""
    spec, layer, seed = gpu_layer("fp8_block", act, k=8, e=64, h=1024, i=512)
    core, pw = core_for(spec, layer, "cuda", warmup=False)
    assert core.config_for(2048)["gemm1"].get("SPLIT") is True
    x, ids, w = routing(spec, 2048, seed, "cuda")
    out = core.forward(x, ids, w, pw)
    check(spec, layer, x, ids, w, out, "split first GEMM, 2048 tokens", seed, h16=True)
    assert torch.equal(_replayed(core, pw, x, ids, w), out), f"graph replay differs from eager (seed {seed})"


@pytest.mark.parametrize("quant, tokens", [("fp8_channel", 2048), ("fp8_channel", 64), ("fp8_tensor", 700)])
@gpu_test
def test_gpu_prequant_equals_the_in_loop_quantization(quant, tokens):
    """``PREQUANT`` on the GPU: the layer's output bit for bit as the in-loop quantization (both GEMMs), within
    the FP8 tolerance of float64, and CUDA-graph replay equal to eager."""
    spec, layer, seed = gpu_layer(quant, k=8, e=64, h=1024, i=512)
    core, pw = core_for(spec, layer, "cuda", warmup=False, act_quant="token" if quant == "fp8_channel" else "tensor")
    base = core.config_for(tokens)
    x, ids, w = routing(spec, tokens, seed, "cuda")
    outs = {}
    for on in (False, True):
        core.config_for = lambda t, on=on: _with_flag(base, "PREQUANT", on)
        outs[on] = core.forward(x, ids, w, pw)
    assert torch.equal(outs[True], outs[False]), f"PREQUANT changed the output (seed {seed})"
    check(spec, layer, x, ids, w, outs[True], f"PREQUANT, {tokens} tokens", seed,
          act_quant="token" if quant == "fp8_channel" else "tensor")
    assert torch.equal(_replayed(core, pw, x, ids, w), outs[True]), f"graph replay differs from eager (seed {seed})"


@pytest.mark.parametrize("quant, tokens, min_m", [("bf16", 2048, 16), ("bf16", 2048, 32), ("bf16", 2048, 64),
                                                   ("fp8_channel", 2048, 64), ("fp8_block", 2048, 64),
                                                   ("fp8_tensor", 2048, 64), ("bf16", 300, 16)])
@gpu_test
def test_gpu_min_m_equals_the_full_tiles(quant, tokens, min_m):
    """``MIN_M`` on the GPU (both GEMMs, BLOCK_M 128 with the default tiles otherwise; 2048 tokens over 64 experts:
    about 256 rows per expert, so full blocks and a short last block per expert): the layer's output bit for bit as
    the full tiles (the sort's order within an expert varies run to run, so a row's sums must not depend on the tile
    height it lands in), within tolerance of float64, and CUDA-graph replay equal to eager."""
    spec, layer, seed = gpu_layer(quant, k=8, e=64, h=1024, i=512)
    core, pw = core_for(spec, layer, "cuda", warmup=False)
    base = {**core.config_for(2048), "BLOCK_M": 128}          # the 2048-token tiles (they fit BLOCK_M 128)
    x, ids, w = routing(spec, tokens, seed, "cuda")
    outs = {}
    for m in (0, min_m):
        core.config_for = lambda t, m=m: {**base, "gemm1": {**base["gemm1"], "MIN_M": m},
                                          "gemm2": {**base["gemm2"], "MIN_M": m}}
        outs[m] = core.forward(x, ids, w, pw)
    assert torch.equal(outs[min_m], outs[0]), f"MIN_M {min_m} changed the output (seed {seed})"
    check(spec, layer, x, ids, w, outs[min_m], f"MIN_M {min_m}, {tokens} tokens", seed,
          h16=bool(base["gemm1"].get("SPLIT")))
    assert torch.equal(_replayed(core, pw, x, ids, w), outs[min_m]), f"graph replay differs from eager (seed {seed})"


@pytest.mark.parametrize("quant, tokens", [("bf16", 2048), ("fp8_channel", 2048), ("fp8_block", 2048), ("bf16", 64)])
@gpu_test
def test_gpu_tma_equals_the_pointer_loads(quant, tokens):
    """``TMA`` on the GPU (both GEMMs, the default tiles otherwise): the layer's output bit for bit as the pointer
    loads, within tolerance of float64, and CUDA-graph replay equal to eager."""
    spec, layer, seed = gpu_layer(quant, k=8, e=64, h=1024, i=512)
    core, pw = core_for(spec, layer, "cuda", warmup=False)
    base = core.config_for(tokens)
    x, ids, w = routing(spec, tokens, seed, "cuda")
    outs = {}
    for on in (False, True):
        core.config_for = lambda t, on=on: _with_flag(base, "TMA", on)
        outs[on] = core.forward(x, ids, w, pw)
    assert torch.equal(outs[True], outs[False]), f"TMA changed the output (seed {seed})"
    check(spec, layer, x, ids, w, outs[True], f"TMA, {tokens} tokens", seed, h16=bool(base["gemm1"].get("SPLIT")))
    assert torch.equal(_replayed(core, pw, x, ids, w), outs[True]), f"graph replay differs from eager (seed {seed})"


@pytest.mark.parametrize("quant, act, tokens, g1", [
    ("bf16", "silu", 2048, {"BLOCK_N": 128, "num_warps": 8, "num_stages": 3}),
    ("bf16", "silu", 2048, {"BLOCK_N": 64, "num_warps": 4, "num_stages": 4, "MIN_M": 64}),
    ("fp8_channel", "silu", 2048, {"BLOCK_N": 128, "num_warps": 8, "num_stages": 3, "PREQUANT": True}),
    ("fp8_channel", "silu", 64, {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3}),
    ("fp8_tensor", "silu", 2048, {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3}),
    ("bf16", "swiglu_oai", 2048, {"BLOCK_N": 128, "num_warps": 8, "num_stages": 3})])
@gpu_test
def test_gpu_gu_dot_equals_the_two_accumulators(quant, act, tokens, g1):
    """``GU_DOT`` on the GPU (the gate and up tiles as one TMA box and one wgmma of ``2 * BLOCK_N`` columns): the layer's
    output against the same tiles with two accumulators (TMA), within rounding (their bits, recorded in the failure
    message where they differ), within tolerance of float64, and CUDA-graph replay equal to eager; I = 512 and
    BLOCK_N 128 / 64, gpt-oss's clamped SwiGLU with expert biases, PREQUANT and MIN_M included."""
    spec, layer, seed = gpu_layer(quant, k=8, e=64, h=1024, i=512, act=act)
    core, pw = core_for(spec, layer, "cuda", warmup=False)
    base = core.config_for(tokens)
    bk = 128 if quant.startswith("fp8") else 64
    two = {**base, "gemm1": {"BLOCK_K": bk, "GROUP_M": 8, **g1, "TMA": True}}
    one = {**two, "gemm1": {**two["gemm1"], "GU_DOT": True}}
    x, ids, w = routing(spec, tokens, seed, "cuda")
    outs = {}
    for name, cfg in (("two", two), ("one", one)):
        core.config_for = lambda t, cfg=cfg: cfg
        outs[name] = core.forward(x, ids, w, pw)
    diff = float((outs["one"].float() - outs["two"].float()).abs().max())
    torch.testing.assert_close(outs["one"].float(), outs["two"].float(), rtol=1e-2,
                               atol=1e-3 * float(outs["two"].abs().max()),
                               msg=lambda m: f"GU_DOT moved the output (seed {seed}, max abs diff {diff}): {m}")
    check(spec, layer, x, ids, w, outs["one"], f"GU_DOT {quant} {act}, {tokens} tokens", seed)
    assert torch.equal(_replayed(core, pw, x, ids, w), outs["one"]), f"graph replay differs from eager (seed {seed})"


@pytest.mark.parametrize("quant", ["bf16", "fp8_block"])
@gpu_test
def test_gpu_no_recompile_across_token_counts(quant):
    """After prepare_weights (which warms every variant up), token counts 1..4099 compile nothing: the
    JIT caches of every kernel keep their size."""
    K = _K()
    spec, layer, seed = gpu_layer(quant, k=8, e=64, h=512, i=256)
    core, pw = core_for(spec, layer, "cuda")
    assert core.compile_s is not None
    before = K.compiled_variants()
    x, ids, w = routing(spec, 4099, seed, "cuda")
    for t in range(1, 4100):
        core.forward(x[:t], ids[:t], w[:t], pw)
    torch.cuda.synchronize()
    assert K.compiled_variants() == before, f"{K.compiled_variants() - before} compiles after prepare_weights"
    check(spec, layer, x[:33], ids[:33], w[:33], core.forward(x[:33], ids[:33], w[:33], pw), "after the sweep", seed)



@pytest.mark.parametrize("case", ["weight_on_input", "act_quant_tensor", "awq", "gptq8"])
@gpu_test
def test_gpu_options_and_checkpoint_layouts(case):
    quant = {"weight_on_input": "bf16", "act_quant_tensor": "fp8_tensor", "awq": "int4_w4a16", "gptq8": "int8_w8a16"}[case]
    spec, layer, seed = gpu_layer(quant, k=1 if case == "weight_on_input" else 4)
    x, ids, w = routing(spec, 21, seed, "cuda", minus_one=False)
    if case in ("weight_on_input", "act_quant_tensor"):
        kw = {"apply_router_weight_on_input": True} if case == "weight_on_input" else {"act_quant": "tensor"}
        core, pw = core_for(spec, layer, "cuda", warmup=False, **kw)
        check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), case, seed, on_input=case == "weight_on_input",
              act_quant=kw.get("act_quant", "token"))
        return
    if case == "awq":
        (a13, z13, s13), (a2, z2, s2) = qi.to_awq(layer.i13), qi.to_awq(layer.i2)
    else:
        (a13, z13, s13, _), (a2, z2, s2, _) = qi.to_gptq(layer.i13), qi.to_gptq(layer.i2)
    core = _tm().TritonMoeCore(spec, "cuda", warmup=False)
    pw = core.prepare_weights(a13, a2, w13_scale=s13, w2_scale=s2, w13_zeros=z13, w2_zeros=z2)
    check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), case, seed)



TUNED_FILES = sorted(p.name for p in (ROOT / "backends" / "triton_configs").glob("*.json"))
#: The formats whose layers this file's gpu_layer builds (16-bit and FP8); packed-FP4 (W4A16) files are checked by
#: tests/test_triton_w4a16.py::test_gpu_fp4_tuned_config_files_load_and_match_the_reference.
GPU_TUNED_FORMATS = ("bf16", "fp16", "fp8_tensor", "fp8_channel", "fp8_block")
FP4_TUNED_FORMATS = ("mxfp4", "nvfp4")


def _tuned_format(name: str) -> object:
    return (json.loads((ROOT / "backends" / "triton_configs" / name).read_text()).get("key") or {}).get("format")


@pytest.mark.parametrize("name", [n for n in TUNED_FILES if _tuned_format(n) in GPU_TUNED_FORMATS])
@gpu_test
def test_gpu_tuned_config_files_load_and_match_the_reference(name):
    """Every 16-bit and FP8 tuned file in backends/triton_configs (one test each): on the GPU it was tuned for, a
    core of its key reads it and matches the reference at its buckets' token counts (up to 256)."""
    K = _K()
    dev = torch.cuda.get_device_name().replace(" ", "_")
    if not name.endswith(f"device={dev}.json"):
        pytest.skip(f"{name} is not for {dev}")
    data = json.loads((K.CONFIG_DIR / name).read_text())
    key = data["key"]
    top_k = data["tuned"].get("top_k", 8)
    e, n, h, quant = key["E"], key["N"], key["K"], key["format"]
    spec, layer, seed = gpu_layer(quant, e=e, k=top_k, h=h, i=n // 2)
    core, pw = core_for(spec, layer, "cuda", warmup=False)
    assert core.config_source == name
    for t in sorted(K.load_config_file(str(K.CONFIG_DIR / name))):
        if t <= 256:
            x, ids, w = routing(spec, t, seed + t, "cuda")
            check(spec, layer, x, ids, w, core.forward(x, ids, w, pw), f"{name}, {t} tokens", seed)


def _gpu_file_params(fn) -> list[str] | None:
    """The tuned-file names a GPU test function is parametrized over (its ``name`` parameter), or None when it is
    not a ``gpu``-marked test parametrized that way."""
    marks = getattr(fn, "pytestmark", [])
    if not any(m.name == "gpu" for m in marks):
        return None
    names = [list(m.args[1]) for m in marks if m.name == "parametrize" and m.args[0] == "name"]
    return names[0] if len(names) == 1 else None


def test_every_tuned_file_is_of_a_format_the_gpu_test_checks():
    """Every tuned file is checked on its GPU by a per-file test: the one above for 16-bit and FP8 files, and for
    mxfp4 and nvfp4 files tests/test_triton_w4a16.py::test_gpu_fp4_tuned_config_files_load_and_match_the_reference,
    accepted only while that test exists and is parametrized over exactly those files. A tuned file of another
    format, or an FP4 file without that test, would go unchecked."""
    spec = importlib.util.spec_from_file_location("_test_triton_w4a16_for_files", ROOT / "tests" / "test_triton_w4a16.py")
    assert spec is not None and spec.loader is not None
    w4 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(w4)
    fp4_params = _gpu_file_params(getattr(w4, "test_gpu_fp4_tuned_config_files_load_and_match_the_reference", None))
    formats = {n: _tuned_format(n) for n in TUNED_FILES}
    allowed = GPU_TUNED_FORMATS + (FP4_TUNED_FORMATS if fp4_params is not None else ())
    assert TUNED_FILES and set(formats.values()) <= set(allowed), {n: f for n, f in formats.items() if f not in allowed}
    own = _gpu_file_params(test_gpu_tuned_config_files_load_and_match_the_reference)
    assert own == [n for n, f in formats.items() if f in GPU_TUNED_FORMATS], own
    assert (fp4_params or []) == [n for n, f in formats.items() if f in FP4_TUNED_FORMATS], fp4_params


if __name__ == "__main__" and "--worker" in sys.argv:
    _serve()
