"""The ``deep_gemm`` adapter (backends/deep_gemm_moe.py): DeepGEMM's sm90 contiguous grouped GEMMs between this
project's Triton sort, gather, activation and combine.

CPU: DeepGEMM needs a Hopper GPU, so a stand-in ``deep_gemm`` module (:class:`FakeDeepGemm`, put in
``sys.modules``) implements the contract of the two grouped GEMMs in float64 torch, as deepseek-ai/DeepGEMM
@54e22612409371 documents and tests it (csrc/apis/gemm.hpp, csrc/utils/layout.hpp, tests/generators.py
generate_m_grouped_contiguous): it asserts the argument layouts, dtypes and contiguity DeepGEMM asserts and the
contiguous layout's structure (every 128-row block holds one group's rows followed by -1 padding, or only -1),
and writes NaN into rows whose layout is -1 (their content is undefined), so a combine that read one fails. The
Triton pieces run through Triton's interpreter at tiny shapes: in a subprocess started with
``TRITON_INTERPRET=1`` (``test_interpreter_suite``; run the file with ``TRITON_INTERPRET=1`` to run them here).
Numerical checks compare with :func:`moe_select.reference.reference_moe` (float64) on fresh random inputs at the
one tolerance table's values (:func:`moe_select.formats.tolerance`: bf16 1.6e-2; fp8_block, activations fp8_group,
0.14).

GPU (``-m gpu``; skipped without an sm90 GPU and an importable deep_gemm): bf16 and fp8_block at three layer
shapes (Qwen3-30B-A3B, Mixtral-8x7B, DeepSeek-V3 per rank at ep 8) x 1/64/2048 tokens against float64 (the
first 64 tokens), CUDA-graph replay equal to eager, and EP ranks of the DeepSeek-V3 layer.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from moe_select.errors import RunnerInputError
from moe_select.formats import tolerance
from moe_select.layer import LayerSpec
from moe_select.ops import quantize
from moe_select.reference import reference_dequantize, reference_moe, rel_error

INTERP = os.environ.get("TRITON_INTERPRET") == "1"
ROOT = Path(__file__).resolve().parent.parent
TOL = {"bf16": tolerance("bf16"), "fp8_block": tolerance("fp8_group"), "fp8_channel": tolerance("fp8_group")}
needs_interp = pytest.mark.skipif(not INTERP, reason="Triton interpreter pieces: run by test_interpreter_suite "
                                                     "(or run this file with TRITON_INTERPRET=1)")


def fresh_seed() -> int:
    """A new seed per call (or ``MOE_SELECT_TEST_SEED``), printed so that a failure can be replayed."""
    env = os.environ.get("MOE_SELECT_TEST_SEED")
    seed = int(env) if env else random.SystemRandom().randrange(2 ** 31)
    print(f"random inputs: seed {seed} (MOE_SELECT_TEST_SEED={seed} replays them)")
    return seed


# --- the stand-in deep_gemm ----------------------------------------------------------------------------

def _major_check(t: torch.Tensor) -> None:
    """DeepGEMM's major_check (csrc/utils/layout.hpp): 2-D or 3-D, batch stride packed, one unit stride."""
    assert t.dim() in (2, 3), t.shape
    if t.dim() == 3:
        assert t.stride(0) == t.size(-2) * t.size(-1), "grouped operand: batch stride must be N*K"
    assert t.stride(-2) == 1 or t.stride(-1) == 1


def _block_scales(sf: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """``[G, ceil(n/128), ceil(k/128)]`` -> ``[G, n, k]`` float64, each element its block's scale."""
    rows = torch.arange(n) // 128
    cols = torch.arange(k) // 128
    return sf.double()[:, rows][:, :, cols]


class FakeDeepGemm(types.ModuleType):
    """float64 stand-in for DeepGEMM's sm90 grouped GEMMs (module doc). ``calls`` records every call
    (name, M, the layout as a list); ``alignment`` is what get_mk_alignment_for_contiguous_layout returns."""

    def __init__(self, alignment: int = 128):
        super().__init__("deep_gemm")
        self.alignment = alignment
        self.calls: list[tuple[str, int, list[int]]] = []
        self.transformed: list[torch.Tensor] = []
        self.__file__ = "<fake deep_gemm>"

    def get_mk_alignment_for_contiguous_layout(self) -> int:
        return self.alignment

    def transform_sf_into_required_layout(self, sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False):
        # SFB of the sm90 recipe: checked, returned as is (csrc/apis/layout.hpp: "(FP32, 128, 128) on SM90")
        assert tuple(recipe) == (1, 128, 128) and is_sfa is False and not disable_ue8m0_cast
        assert sf.dtype == torch.float32 and sf.dim() == 3 and sf.shape[0] == num_groups
        assert tuple(sf.shape[1:]) == (-(-mn // 128), -(-k // 128)), (sf.shape, mn, k)
        assert sf.is_contiguous(), "sm90 SFB must be contiguous"
        self.transformed.append(sf)
        return sf

    def _check_layout(self, layout: torch.Tensor, m: int, num_groups: int) -> torch.Tensor:
        assert layout.dtype == torch.int32 and layout.is_contiguous() and tuple(layout.shape) == (m,)
        assert m % self.alignment == 0, f"M {m} is not a multiple of the alignment {self.alignment}"
        lay = layout.to(torch.int64)
        assert ((lay >= -1) & (lay < num_groups)).all()
        for b in range(m // self.alignment):
            blk = lay[b * self.alignment:(b + 1) * self.alignment]
            real = blk[blk >= 0]
            if real.numel():
                assert (real == real[0]).all(), f"block {b} mixes groups {real.unique().tolist()}"
                n = real.numel()
                assert (blk[:n] >= 0).all() and (blk[n:] == -1).all(), f"block {b}: -1 padding must trail the group's rows"
        return lay

    def _store(self, d: torch.Tensor, lay: torch.Tensor, a64: torch.Tensor, b64) -> None:
        out = torch.full(d.shape, float("nan"), dtype=torch.float64)
        for g in lay.unique().tolist():
            if g >= 0:
                rows = lay == g
                out[rows] = a64[rows] @ b64(g).T
        d.copy_(out.to(d.dtype))

    def m_grouped_bf16_gemm_nt_contiguous(self, a, b, d, grouped_layout, compiled_dims="nk", use_psum_layout=False,
                                          ensure_zero_padding=True, expected_m_for_psum_layout=None):
        assert not use_psum_layout and expected_m_for_psum_layout is None
        _major_check(a)
        _major_check(b)
        assert a.stride(-1) == 1, "A must be K-major"
        assert a.dtype == b.dtype == d.dtype == torch.bfloat16
        m, k = a.shape
        g, n, k2 = b.shape
        assert k == k2 and tuple(d.shape) == (m, n) and n > 0 and k > 0 and g > 0
        assert k % 64 == 0, "sm90 bf16 grouped GEMM asserts K % 64 == 0"
        _major_check(d)
        assert d.stride(-1) == 1, "D must be N-major"
        lay = self._check_layout(grouped_layout, m, g)
        self.calls.append(("bf16", m, lay.tolist()))
        self._store(d, lay, a.double(), lambda e: b[e].double())

    def m_grouped_fp8_fp4_gemm_nt_contiguous(self, a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                             compiled_dims="nk", disable_ue8m0_cast=False, use_psum_layout=False,
                                             ensure_zero_padding=True, expected_m_for_psum_layout=None):
        assert not use_psum_layout and expected_m_for_psum_layout is None and recipe_a is None and recipe_b is None
        assert recipe in (None, (1, 128, 128))
        (a_data, a_sf), (b_data, b_sf) = a, b
        _major_check(a_data)
        _major_check(b_data)
        assert a_data.stride(-1) == 1 and b_data.stride(-1) == 1, "sm90 FP8: A and B must be K-major"
        assert a_data.dtype == b_data.dtype == torch.float8_e4m3fn and d.dtype == torch.bfloat16
        m, k = a_data.shape
        g, n, k2 = b_data.shape
        assert k == k2 and tuple(d.shape) == (m, n)
        assert d.stride(-1) == 1
        # SFA (1, 128) float32: shape as check_sf_layout; this core hands it MN-major and TMA-aligned already
        # (get_mn_major_tma_aligned_tensor then returns it without a copy)
        assert a_sf.dtype == torch.float32 and tuple(a_sf.shape) == (m, -(-k // 128))
        assert a_sf.stride(0) == 1 and a_sf.stride(1) == -(-m // 4) * 4, f"SFA not MN-major TMA-aligned: {a_sf.stride()}"
        assert b_sf.dtype == torch.float32 and tuple(b_sf.shape) == (g, -(-n // 128), -(-k // 128)) and b_sf.is_contiguous()
        lay = self._check_layout(grouped_layout, m, g)
        self.calls.append(("fp8", m, lay.tolist()))
        cols = torch.arange(k) // 128
        a64 = a_data.double() * a_sf.double()[:, cols]
        self._store(d, lay, a64, lambda e: b_data[e].double() * _block_scales(b_sf[e:e + 1], n, k)[0])


@pytest.fixture
def fake_dg(monkeypatch):
    fake = FakeDeepGemm()
    monkeypatch.setitem(sys.modules, "deep_gemm", fake)
    return fake


# --- helpers ---------------------------------------------------------------------------------------------

def make_case(spec: LayerSpec, t: int, seed: int, *, ids: torch.Tensor | None = None, device="cpu"):
    """Inputs, weights of the spec's format and their dequantized float64 copies (the reference's)."""
    g = torch.Generator().manual_seed(seed)
    h, i, e = spec.hidden_size, spec.intermediate_size, spec.num_local_experts
    x = torch.randn(t, h, generator=g).to(torch.bfloat16)
    w13 = torch.randn(e, spec.w13_rows, h, generator=g) / h ** 0.5
    w2 = torch.randn(e, h, i, generator=g) / i ** 0.5
    if ids is None:
        ids = torch.rand(t, spec.num_experts, generator=g).argsort(1)[:, :spec.top_k].to(torch.int32)
    wts = torch.rand(t, spec.top_k, generator=g) + 0.1
    wts = (wts / wts.sum(1, keepdim=True)).float()
    q13, s13 = quantize(w13.to(device), spec.quant)
    q2, s2 = quantize(w2.to(device), spec.quant)
    scales = {} if s13 is None else {"w13_scale": s13, "w2_scale": s2}
    d13 = reference_dequantize(q13, {"scale": s13}, spec.quant)
    d2 = reference_dequantize(q2, {"scale": s2}, spec.quant)
    return x.to(device), ids.to(device), wts.to(device), (q13, q2, scales), (d13, d2)


def run(spec: LayerSpec, x, ids, wts, weights, device="cpu", **kw):
    from moe_select.backends import deep_gemm_moe as dgm

    core = dgm.DeepGemmMoeCore(spec, device, **kw)
    q13, q2, scales = weights
    return core, core.forward(x, ids, wts, core.prepare_weights(q13, q2, **scales))


def check(spec, x, ids, wts, deq, out, seed, n_ref=None):
    n = x.shape[0] if n_ref is None else min(n_ref, x.shape[0])
    ref = reference_moe(x[:n], ids[:n], wts[:n], deq[0], deq[1], spec.activation, expert_offset=spec.expert_offset,
                        device=x.device if x.is_cuda else "cpu")
    err = rel_error(out[:n].cpu(), ref)
    assert out.dtype == x.dtype and tuple(out.shape) == tuple(x.shape)
    assert torch.isfinite(out).all(), f"seed {seed}: non-finite output"
    assert err < TOL[spec.quant], f"seed {seed}: rel_error {err:.3e} >= {TOL[spec.quant]} ({spec.quant}, {spec.activation})"
    return err


# --- tests without the interpreter (this process) ---------------------------------------------------------

@pytest.mark.skipif(INTERP, reason="this process already runs the interpreter tests")
def test_interpreter_suite():
    """Runs this file's interpreter tests in a subprocess with TRITON_INTERPRET=1 (Triton must see the variable
    before it is imported, which would change every other test of this session)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-m", "not gpu", "-p", "no:cacheprovider",
                        "-rA", str(Path(__file__).resolve())], env=env, cwd=str(ROOT), capture_output=True, text=True,
                       timeout=1500)
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "test_bf16_and_fp8_block_match_float64" in r.stdout, r.stdout[-3000:]


def test_module_import_does_not_import_deep_gemm():
    code = ("import sys, moe_select.backends.deep_gemm_moe as m; from moe_select.registry import Registry; "
            "r = Registry(); m.register(r); assert r.core('deep_gemm', 'standard') is m.DeepGemmMoeCore; "
            "print('deep_gemm' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "False"


@pytest.mark.skipif(INTERP, reason="checks the refusal without the interpreter")
def test_cpu_without_interpreter_is_refused(fake_dg):
    from moe_select.backends import deep_gemm_moe as dgm

    with pytest.raises(RunnerInputError, match="TRITON_INTERPRET=1"):
        dgm.DeepGemmMoeCore(LayerSpec(8, 2, 128, 128), "cpu")


@pytest.mark.parametrize("kw, match", [
    ({"quant": "fp8_tensor"}, "does not implement fp8_tensor"),
    ({"activation": "swiglu_oai"}, "activation 'swiglu_oai'"),
    ({"weight_on_input": True}, "router weights on the input"),
    ({"quant": "fp8_block", "block_shape": (128, 64)}, r"block shape \[128, 64\]"),
    ({"hidden_size": 96}, "hidden_size 96 is not a multiple of 64"),
    ({"quant": "fp8_block", "intermediate_size": 192}, "intermediate_size per rank 192 is not a multiple of 128"),
])
def test_refusals_at_construction(fake_dg, kw, match):
    from moe_select.backends import deep_gemm_moe as dgm

    spec = LayerSpec(**{"num_experts": 8, "top_k": 2, "hidden_size": 128, "intermediate_size": 128, **kw})
    with pytest.raises(RunnerInputError, match=match):
        dgm.DeepGemmMoeCore(spec, "cpu")


def test_missing_or_lookalike_package_is_refused(monkeypatch):
    from moe_select.backends import deep_gemm_moe as dgm

    monkeypatch.setitem(sys.modules, "deep_gemm", types.ModuleType("deep_gemm"))      # a look-alike without the API
    with pytest.raises(RunnerInputError, match="m_grouped_bf16_gemm_nt_contiguous"):
        dgm.load_deep_gemm()
    monkeypatch.setitem(sys.modules, "deep_gemm", None)                              # not importable
    with pytest.raises(RunnerInputError, match="cannot import the deep_gemm module"):
        dgm.load_deep_gemm()


@needs_interp
def test_other_alignment_is_refused(monkeypatch):
    from moe_select.backends import deep_gemm_moe as dgm

    monkeypatch.setitem(sys.modules, "deep_gemm", FakeDeepGemm(alignment=64))
    with pytest.raises(RunnerInputError, match="M alignment is 64"):
        dgm.DeepGemmMoeCore(LayerSpec(8, 2, 128, 128), "cpu")


def _sm90(quant, e, k, h, i, **kw):
    return {"arch": "sm90", "quant": quant, "tp": 1, "require_adapter": True, "cuda_graph": True,
            "model": {"num_experts": e, "top_k": k, "hidden_size": h, "moe_intermediate_size": i,
                      "activation": "silu", "routing": "renormalize"}, **kw}


def test_sm90_support_stands_on_the_passing_gpu_run():
    """deep_gemm.yaml's sm90 row for this install cites the source-built run that passed (issue 26,
    benchmarks/results/deep_gemm_h200_2026-12-02/); the note names the torch the _C extension must match."""
    import moe_select

    for quant in ("bf16", "fp8_block", "fp8_channel"):
        r = moe_select.explain(_sm90(quant, 128, 8, 2048, 768))
        c = {c.backend: c for c in r.candidates}["deep_gemm"]
        assert c.eligible is True and c.evidence == "supported", (quant, c)
        assert any("compiled against the running torch" in n for n in c.notes), c.notes
        assert moe_select.plan({**_sm90(quant, 128, 8, 2048, 768), "runner": "deep_gemm"}).runner == "deep_gemm"


@pytest.mark.parametrize("quant, e, k, h, i, tokens, want, small", [
    # (layer, largest forward per rank) -> the runner of the largest forwards, measured fastest there, and the runner
    # of the rule's small forwards (None: no token ranges). deep_gemm and triton in one run
    # (benchmarks/results/deep_gemm_h200_2026-12-04/layer_same_run.json), Mixtral-8x7B at 256 from moe_layer_dg*.txt;
    # then again in one run on an H100 (benchmarks/results/h100_dg_2026-12-06/): triton on 128-expert fp8_channel, 256-expert
    # fp8_block up to 4096, the 8-expert bf16 layer
    ("fp8_block", 8, 2, 4096, 14336, 256, "deep_gemm", (128, "triton")),    # Mixtral-8x7B: 535 vs 739 us (12-02)
    ("fp8_block", 8, 2, 4096, 14336, 128, "triton", None),                  # below every measured deep_gemm win
    ("fp8_block", 128, 8, 2048, 768, 2048, "triton", None),                 # Qwen3-30B-A3B: 358 vs 385 us
    ("fp8_block", 128, 8, 2048, 768, 4096, "deep_gemm", (2048, "triton")),  # 533 vs 603 us
    ("fp8_block", 128, 8, 2048, 768, 256, "triton", None),                  # 197 vs 268 us (12-02)
    ("fp8_block", 128, 8, 4096, 1536, 2048, "triton", None),                # Qwen3-235B-A22B: 1129 vs 1206 us
    ("fp8_block", 256, 8, 7168, 2048, 2048, "triton", None),                # DeepSeek-V3: 3496 vs 4642 us
    ("fp8_block", 256, 8, 7168, 2048, 8192, "deep_gemm", (4096, "triton")), # 7524 vs 9560 us; H100: 9401 vs 10252
    ("fp8_block", 256, 8, 7168, 2048, None, "deep_gemm", (4096, "triton")), # the default largest forward: 8192
    ("fp8_block", 256, 8, 7168, 2048, 4096, "triton", None),                # H100: 6190 vs 7403 us (H200: a tie)
    ("bf16", 8, 2, 4096, 14336, 2048, "triton", None),                      # no bf16 rule prefers deep_gemm; H100: triton
                                                                            # 2637 vs torch_grouped_mm 2726 us
    ("fp8_channel", 8, 2, 4096, 14336, 8192, "deep_gemm", (2048, "triton")),  # Mixtral-8x7B: 5366 vs 5723 us
    ("fp8_channel", 8, 2, 4096, 14336, 2048, "triton", None),               # 1475 vs 1453 us: a tie
    ("fp8_channel", 8, 2, 4096, 14336, 1024, "triton", None),               # torch_grouped_mm no longer first
    ("fp8_channel", 8, 2, 4096, 14336, 256, "triton", None),                # 422 vs 547 us (12-02)
    ("fp8_channel", 128, 8, 4096, 1536, 2048, "triton", None),              # Qwen3-235B-A22B: 1038 vs 1227 us
    ("fp8_channel", 128, 8, 4096, 1536, 4096, "triton", None),              # H100: 1710 vs 1971 us (H200 12-04: 1664 vs 1819 dg)
    ("fp8_channel", 128, 8, 4096, 1536, 8192, "triton", None),              # H100: 2939 vs 3132 us
    ("fp8_channel", 256, 8, 7168, 2048, 2048, "triton", None),              # DeepSeek-V3: 3249 vs 4675 us
    ("fp8_channel", 256, 8, 7168, 2048, 8192, "triton", None),              # 7798 vs 7955 us
    ("bf16", 128, 8, 2048, 768, 8192, "triton", None),                      # Qwen3-30B-A3B: 1346 vs 1364 us
    ("bf16", 128, 8, 4096, 1536, 8192, "triton", None),                     # Qwen3-235B-A22B: 4980 vs 5005 us
    ("bf16", 128, 8, 4096, 1536, 2048, "triton", None),                     # 1702 vs 2282 us
    ("bf16", 256, 8, 7168, 2048, 8192, "triton", None),                     # DeepSeek-V3: 13038 vs 14250 us
])
def test_rules_choose_deep_gemm_where_it_was_measured_faster(quant, e, k, h, i, tokens, want, small):
    """deep_gemm for a deployment's largest forwards where the H200 run timed it faster, with the rule's small
    forwards on triton (token ranges); the same for a prefill worker and a worker that also decodes."""
    import moe_select

    kw = {} if tokens is None else {"max_tokens_per_rank": tokens}
    for phase in ("both", "prefill"):
        p = moe_select.explain(_sm90(quant, e, k, h, i, phase=phase, **kw)).plan
        assert p is not None and p.runner == want, (quant, e, tokens, phase, p and p.runner)
        got = [(r.max_tokens, r.runner) for r in p.ranges]
        assert got == ([] if small is None else [small, (None, want)]), (quant, e, tokens, phase, got)


def test_serving_engines_keep_their_own_choice():
    """The deep_gemm rules are this install's (engine moe_select): SGLang's plan under pure TP stays triton."""
    import moe_select

    d = _sm90("fp8_block", 8, 2, 4096, 14336, max_tokens_per_rank=8192)
    del d["require_adapter"]
    r = moe_select.explain({**d, "engine": "sglang"})
    assert r.plan is not None and r.plan.runner == "triton", r.plan and r.plan.runner


WHEEL_REQUIRES = ["apache-tvm-ffi==0.1.11", 'pytest; extra == "dev"']


@pytest.mark.parametrize("tvm, torch_v, bad", [
    ("0.1.11", "2.13.0+cu130", []),
    ("0.1.11", "2.13.1", []),
    ("0.1.15.post2", "2.11.0+cu130", ["apache-tvm-ffi 0.1.15.post2", "torch 2.11.0+cu130"]),   # the H200 run
    (None, "2.13.0", ["apache-tvm-ffi not installed"]),
    ("0.1.11", "2.14.0", ["torch 2.14.0"]),
])
def test_wheel_runtime_problems(tvm, torch_v, bad):
    from moe_select.backends import deep_gemm_moe as dgm

    got = dgm.wheel_runtime_problems("0.1.7", WHEEL_REQUIRES, tvm, torch_v)
    assert len(got) == len(bad) and all(p.startswith(b) for p, b in zip(got, bad)), got
    assert "was not checked" in dgm.wheel_runtime_problems("0.1.8", WHEEL_REQUIRES, "0.1.11", "2.13.0")[0]


def test_wheel_on_another_runtime_is_refused_before_import(monkeypatch, fake_dg):
    """The H200 run's runtime (torch 2.11, apache-tvm-ffi 0.1.15.post2 under the 0.1.7 wheel) is refused with a
    typed error before deep_gemm (and its _C.so) is imported; the wheel's own runtime loads."""
    from moe_select.backends import deep_gemm_moe as dgm

    versions = {"sgl-deep-gemm": "0.1.7", "apache-tvm-ffi": "0.1.15.post2"}
    monkeypatch.setattr(dgm, "_dist_version", versions.get)
    monkeypatch.setattr(dgm, "_dist_requires", lambda name: WHEEL_REQUIRES if name == "sgl-deep-gemm" else [])
    monkeypatch.setattr(dgm.torch, "__version__", "2.11.0+cu130")
    imported = []
    monkeypatch.setattr(dgm.importlib, "import_module", lambda name: imported.append(name) or fake_dg)
    with pytest.raises(RunnerInputError, match=r"apache-tvm-ffi 0.1.15.post2 .*==0.1.11.*torch 2.11.0\+cu130"):
        dgm.load_deep_gemm()
    assert imported == [], "deep_gemm must not be imported on a mismatched runtime"
    versions["apache-tvm-ffi"] = "0.1.11"
    monkeypatch.setattr(dgm.torch, "__version__", "2.13.0+cu130")
    assert dgm.load_deep_gemm() is fake_dg and imported == ["deep_gemm"]


# --- interpreter tests ---------------------------------------------------------------------------------

@needs_interp
@pytest.mark.parametrize("quant", ["bf16", "fp8_block", "fp8_channel"])
@pytest.mark.parametrize("activation", ["silu", "gelu", "relu2"])
def test_bf16_and_fp8_block_match_float64(fake_dg, quant, activation):
    seed = fresh_seed()
    h, i = (64, 64) if quant == "bf16" else (128, 128)
    spec = LayerSpec(8, 2, h, i, activation=activation, quant=quant)
    for t in (1, 13):
        x, ids, wts, w, deq = make_case(spec, t, seed + t)
        core, out = run(spec, x, ids, wts, w)
        check(spec, x, ids, wts, deq, out, seed)
    if quant != "bf16":
        # DeepGEMM's sm90 transform returns a view that does not own its input's memory (from_blob): the weights
        # must hold every tensor they passed to it, or the scales dangle once it is freed (seen on the H200)
        pw = core.prepare_weights(w[0], w[1], **w[2])
        passed = fake_dg.transformed[-2:]
        assert len(passed) == 2 and all(any(p is k for k in pw.keep) for p in passed), "scale inputs not kept"
    # two GEMM calls per forward, each at the static row bound
    from moe_select.backends import triton_moe_kernels as K

    rows, _ = K.max_padded_rows(13 * 2, 8, 128)
    assert [c[1] for c in fake_dg.calls[-2:]] == [rows, rows]


@needs_interp
def test_layout_padding_and_row_bound(fake_dg):
    """The layout DeepGEMM receives: each expert's rows in one aligned segment (count = its slots), -1 for the
    padding and past the rows in use, M the static bound; slots of -1 ids and other ranks' experts absent."""
    from moe_select.backends import triton_moe_kernels as K

    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    spec = LayerSpec(16, 3, 64, 64, ep=2, ep_rank=1)           # local experts 8..15
    t = 11
    ids = torch.randint(-1, 16, (t, 3), generator=g).to(torch.int32)
    x, ids, wts, w, deq = make_case(spec, t, seed, ids=ids)
    _, out = run(spec, x, ids, wts, w)
    check(spec, x, ids, wts, deq, out, seed)
    name, m, lay = fake_dg.calls[0]
    assert m == K.max_padded_rows(t * 3, 8, 128)[0]
    lay_t = torch.tensor(lay)
    local = ids.reshape(-1).long() - 8
    for e in range(8):
        assert int((lay_t == e).sum()) == int((local == e).sum()), f"seed {seed}: expert {e}"
    used = sum(-(-int((local == e).sum()) // 128) * 128 for e in range(8))
    assert (lay_t[used:] == -1).all(), f"seed {seed}: rows past the rows in use must be -1"


@needs_interp
def test_expert_parallel_ranks_sum_to_the_layer(fake_dg):
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    full = LayerSpec(16, 4, 64, 64, quant="bf16")
    t = 9
    ids = torch.randint(-1, 16, (t, 4), generator=g).to(torch.int32)
    x, ids, wts, (q13, q2, _), deq = make_case(full, t, seed, ids=ids)
    total = torch.zeros(t, 64, dtype=torch.float64)
    for r in range(4):
        spec = LayerSpec(16, 4, 64, 64, quant="bf16", ep=4, ep_rank=r)
        sl = slice(4 * r, 4 * r + 4)
        _, out = run(spec, x, ids, wts, (q13[sl], q2[sl], {}))
        check(spec, x, ids, wts, (deq[0][sl], deq[1][sl]), out, seed)
        total += out.double()
    ref = reference_moe(x, ids, wts, deq[0], deq[1], "silu")
    assert rel_error(total, ref) < TOL["bf16"], f"seed {seed}"


@needs_interp
def test_fp8_channel_scales_follow_the_local_expert(fake_dg):
    """fp8_channel's per-row scales are applied after the GEMMs by local expert (layout row -> scale row): on an
    EP rank whose experts have very different scales, each rank's output matches float64, and swapping two local
    experts' scales (not their weights) breaks it."""
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    full = LayerSpec(8, 2, 128, 128, quant="fp8_channel")
    t = 7
    ids = torch.randint(0, 8, (t, 2), generator=g).to(torch.int32)
    ids[0] = torch.tensor([4, 5])                                # rank 1's local experts 0 and 1 are used
    x, ids, wts, (q13, q2, sc), deq = make_case(full, t, seed, ids=ids)
    spread = torch.logspace(-0.5, 0.5, 8).view(8, 1)             # experts' scales 0.32 .. 3.2 x
    s13, s2 = sc["w13_scale"].reshape(8, -1) * spread, sc["w2_scale"].reshape(8, -1) * spread
    d13 = q13.double() * s13.double()[:, :, None]
    d2 = q2.double() * s2.double()[:, :, None]
    for r in range(2):
        spec = LayerSpec(8, 2, 128, 128, quant="fp8_channel", ep=2, ep_rank=r)
        sl = slice(4 * r, 4 * r + 4)
        _, out = run(spec, x, ids, wts, (q13[sl], q2[sl], {"w13_scale": s13[sl], "w2_scale": s2[sl]}))
        check(spec, x, ids, wts, (d13[sl], d2[sl]), out, seed)
    swapped = s13[sl].clone()[[1, 0, 2, 3]]
    _, bad = run(spec, x, ids, wts, (q13[sl], q2[sl], {"w13_scale": swapped, "w2_scale": s2[sl]}))
    with pytest.raises(AssertionError, match="rel_error"):                 # token 0: local experts 0 and 1
        check(spec, x, ids, wts, (d13[sl], d2[sl]), bad, seed, n_ref=1)


@needs_interp
def test_no_local_slot_and_zero_tokens(fake_dg):
    spec = LayerSpec(16, 2, 64, 64, ep=2, ep_rank=0)
    x, _, wts, w, _ = make_case(spec, 5, 3)
    ids = torch.full((5, 2), 12, dtype=torch.int32)             # every slot on the other rank
    _, out = run(spec, x, ids, wts, w)
    assert torch.equal(out, torch.zeros_like(out))
    from moe_select.backends import deep_gemm_moe as dgm

    core = dgm.DeepGemmMoeCore(spec, "cpu")
    pw = core.prepare_weights(w[0], w[1])
    assert core.forward(x[:0], ids[:0], wts[:0], pw).shape == (0, 64)


@needs_interp
def test_weight_and_input_errors(fake_dg):
    from moe_select.backends import deep_gemm_moe as dgm

    spec = LayerSpec(8, 2, 128, 128, quant="fp8_block")
    core = dgm.DeepGemmMoeCore(spec, "cpu")
    x, ids, wts, (q13, q2, sc), _ = make_case(spec, 3, 1)
    with pytest.raises(RunnerInputError, match="w13: deep_gemm fp8_block weights must be"):
        core.prepare_weights(q13.float(), q2, **sc)
    with pytest.raises(RunnerInputError, match="w13_scale is required"):
        core.prepare_weights(q13, q2, w2_scale=sc["w2_scale"])
    with pytest.raises(RunnerInputError, match=r"w2_scale: fp8_block scale must be \[E, ceil\(N/128\), ceil\(K/128\)\]"):
        core.prepare_weights(q13, q2, w13_scale=sc["w13_scale"], w2_scale=sc["w2_scale"][:, :, :0])
    with pytest.raises(RunnerInputError, match=r"w2: expected \[8, 128, 128\]"):
        core.prepare_weights(q13, q2[:, :64], **sc)
    pw = core.prepare_weights(q13, q2, **sc)
    with pytest.raises(RunnerInputError, match="hidden_states must be"):
        core.forward(x[:, :64], ids, wts, pw)
    with pytest.raises(RunnerInputError, match="topk_ids must be int32 or int64"):
        core.forward(x, ids.float(), wts, pw)
    bf = dgm.DeepGemmMoeCore(LayerSpec(8, 2, 128, 128), "cpu")
    with pytest.raises(RunnerInputError, match="bf16 weights take no scales"):
        bf.prepare_weights(q13.to(torch.bfloat16), q2.to(torch.bfloat16), **sc)


# --- GPU ---------------------------------------------------------------------------------------------------

def _gpu_ready() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    if torch.cuda.get_device_capability()[0] != 9:
        return "needs an sm90 GPU"
    try:
        import deep_gemm  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"deep_gemm not importable: {exc}"
    return None


GPU_SKIP = _gpu_ready() if not INTERP else "interpreter process"
needs_gpu = pytest.mark.skipif(GPU_SKIP is not None, reason=str(GPU_SKIP))
#: E, K, H, I, ep (DeepSeek-V3 per rank at ep 8: 32 local experts)
LAYERS = {"Qwen3-30B-A3B": (128, 8, 2048, 768, 1), "Mixtral-8x7B": (8, 2, 4096, 14336, 1), "DeepSeek-V3/ep8": (256, 8, 7168, 2048, 8)}
#: tokens checked against float64 per call (the output rows are independent; the reference is a Python loop)
N_REF = 64


def _gpu_case(name, quant, t, seed, ep_rank=0):
    e, k, h, i, ep = LAYERS[name]
    spec = LayerSpec(e, k, h, i, quant=quant, ep=ep, ep_rank=ep_rank, tp=ep)
    g = torch.Generator(device="cuda").manual_seed(seed)
    el = spec.num_local_experts
    x = torch.randn(t, h, generator=g, device="cuda").to(torch.bfloat16)
    ids = torch.rand(t, e, generator=g, device="cuda").argsort(1)[:, :k].to(torch.int32)
    wts = torch.rand(t, k, generator=g, device="cuda") + 0.1
    wts = wts / wts.sum(1, keepdim=True)
    w13 = torch.randn(el, 2 * i, h, generator=g, device="cuda") / h ** 0.5
    w2 = torch.randn(el, h, i, generator=g, device="cuda") / i ** 0.5
    q13, s13 = quantize(w13, quant)
    q2, s2 = quantize(w2, quant)
    del w13, w2
    scales = {} if s13 is None else {"w13_scale": s13, "w2_scale": s2}
    return spec, x, ids, wts, (q13, q2, scales)


def _gpu_check(spec, x, ids, wts, w, out, seed):
    q13, q2, sc = w
    d13 = reference_dequantize(q13, {"scale": sc.get("w13_scale")}, spec.quant, device="cuda")
    d2 = reference_dequantize(q2, {"scale": sc.get("w2_scale")}, spec.quant, device="cuda")
    check(spec, x, ids, wts, (d13, d2), out, seed, n_ref=N_REF)


@pytest.mark.parametrize("t", [1, 64, 2048])
@pytest.mark.parametrize("quant", ["bf16", "fp8_block", "fp8_channel"])
@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.gpu
@needs_gpu
def test_gpu_layers_match_float64(name, quant, t):
    seed = fresh_seed()
    spec, x, ids, wts, w = _gpu_case(name, quant, t, seed)
    _, out = run(spec, x, ids, wts, w, device="cuda")
    _gpu_check(spec, x, ids, wts, w, out, seed)



@pytest.mark.parametrize("t", [64, 2048])
@pytest.mark.parametrize("quant", ["bf16", "fp8_block", "fp8_channel"])
@pytest.mark.gpu
@needs_gpu
def test_gpu_cuda_graph_replay_equals_eager(quant, t):
    from moe_select.backends import deep_gemm_moe as dgm

    seed = fresh_seed()
    spec, x, ids, wts, w = _gpu_case("Qwen3-30B-A3B", quant, t, seed)
    core = dgm.DeepGemmMoeCore(spec, "cuda")
    pw = core.prepare_weights(w[0], w[1], **w[2])
    static = [x.clone(), ids.clone(), wts.clone()]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            core.forward(*static, pw)                 # DeepGEMM's JIT compiles here, not in the capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gout = core.forward(*static, pw)
    _, x2, ids2, wts2, _ = _gpu_case("Qwen3-30B-A3B", quant, t, seed + 1)
    for dst, src in zip(static, (x2, ids2, wts2)):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    eager = core.forward(x2, ids2, wts2, pw)
    assert torch.equal(gout, eager), f"seed {seed}: replay differs from eager by {(gout.float() - eager.float()).abs().max()}"
    _gpu_check(spec, x2, ids2, wts2, w, gout, seed)



@pytest.mark.parametrize("ep_rank", [0, 5, 7])
@pytest.mark.parametrize("quant", ["bf16", "fp8_block", "fp8_channel"])
@pytest.mark.gpu
@needs_gpu
def test_gpu_expert_parallel_ranks(quant, ep_rank):
    seed = fresh_seed()
    spec, x, ids, wts, w = _gpu_case("DeepSeek-V3/ep8", quant, 256, seed, ep_rank=ep_rank)
    assert spec.expert_offset == 32 * ep_rank
    _, out = run(spec, x, ids, wts, w, device="cuda")
    _gpu_check(spec, x, ids, wts, w, out, seed)

