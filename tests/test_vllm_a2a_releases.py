"""Which all-to-all backends each vLLM release takes (issue 21: an all-to-all planned under a release that does not ship it).

ParallelConfig's All2AllBackend Literal, read in the 0.13.0 .. 0.34.0 wheels (0.13.0: the Literal of its all2all_backend
field): 0.13.0 / 0.14.x naive, pplx, deepep_high_throughput, deepep_low_latency, allgather_reducescatter,
flashinfer_all2allv; 0.15.0 + mori; 0.18.0 + nixl_ep, flashinfer_nvlink_two_sided, flashinfer_nvlink_one_sided; 0.23.0
mori -> mori_high_throughput, mori_low_latency; 0.24.0 + deepep_v2; 0.31.0 + moonep (MoonshotAI's MoonEP, not Mooncake);
0.32.0 + passthrough (bound to the FlashInfer moe_ep megakernel MoE backends); 0.34.0 + mori again. pplx is rewritten to
allgather_reducescatter from 0.17.0.

The expectations are written out by hand from the wheels, not computed from the facts: each bound is checked on both
sides (the last release without, the first with).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import assert_planned, only_refusal

# A 64-expert top-6 MoE (DeepSeek-V2-Lite-like widths), DP 4 / EP 4: not a field round's deployment.
MODEL = {"num_experts": 64, "top_k": 6, "hidden_size": 2048, "moe_intermediate_size": 1408, "activation": "silu",
         "routing": "renormalize"}
DEP = dict(engine="vllm", model=MODEL, tp=1, ep=4, dp=4, quant="bf16")


def _explain(**over: Any) -> Any:
    return moe_select.explain({**DEP, **over})


def _shipped_or_refused(r, shipped: bool, runner: str, a2a_file: str, *says: str) -> None:
    """Planned on ``runner`` where the release ships the all-to-all; else refused by ``a2a_file`` alone, its detail
    saying each of ``says``."""
    if shipped:
        assert_planned(r, runner)
    else:
        assert r.plan is None
        detail = only_refusal(r, runner, "a2a_unsupported", a2a_file)
        assert all(text in detail for text in says), detail


# ------------------------------------------------------------------ MoRI: 'mori' from 0.15.0, mori_low_latency from 0.23.0
@pytest.mark.parametrize(("vllm", "shipped"), [("0.13.0", False), ("0.14.1", False), ("0.15.0", True), ("0.22.1", True),
                                               ("0.23.0", True), ("0.34.0", True)])
def test_mori_normal_from_0_15(vllm, shipped):
    """0.14.1's Literal has no MoRI value (0.13.0's field neither); 0.15.0 .. 0.22.1 take 'mori' (IntraNode / InterNodeV1,
    our normal mode), 0.23.0 on mori_high_throughput: aiter behind MoRI normal on MI300X refused before 0.15.0 only."""
    r = _explain(gpu="MI300X", a2a="mori", a2a_mode="normal", runner="aiter", engine_version=vllm)
    _shipped_or_refused(r, shipped, "aiter", "a2a/mori.yaml", "takes MoRI from 0.15.0")


@pytest.mark.parametrize(("vllm", "shipped"), [("0.15.0", False), ("0.22.1", False), ("0.23.0", True), ("0.29.0", True)])
def test_mori_low_latency_from_0_23(vllm, shipped):
    """mori_low_latency (InterNodeV1LL) is first in 0.23.0's Literal; 0.15.0 .. 0.22.1's single 'mori' runs the normal
    kernels: low_latency refused there, planned from 0.23.0."""
    r = _explain(gpu="MI300X", a2a="mori", a2a_mode="low_latency", runner="aiter", engine_version=vllm)
    _shipped_or_refused(r, shipped, "aiter", "a2a/mori.yaml", "0.23.0", "low-latency")


def test_mori_low_latency_bound_does_not_touch_sglang():
    """The low_latency bound is vLLM's: SGLang (its own --deepep-mode low_latency) is not refused by it."""
    r = _explain(engine="sglang", gpu="MI300X", a2a="mori", a2a_mode="low_latency", runner="aiter", tp=4, ep=4, dp=4,
                 engine_version="0.5.23")
    assert not any(x.source.startswith("backends/a2a/mori.yaml") and "0.23.0" in x.detail for x in r.reasons)


# ------------------------------------------------------------------ NIXL-EP and FlashInfer one-sided: from 0.18.0
@pytest.mark.parametrize(("vllm", "shipped"), [("0.13.0", False), ("0.17.0", False), ("0.24.0", True), ("0.34.0", True)])
def test_nixl_ep_from_0_18(vllm, shipped):
    """nixl_ep is first in 0.18.0's Literal: triton behind NIXL-EP on H200 refused at 0.17.0 as not shipped, planned at
    0.24.0 (0.18.0 .. 0.23.x ship it but fail without elastic EP: tests/test_field_round_35_kinds.py)."""
    r = _explain(gpu="H200", a2a="nixl", runner="triton", engine_version=vllm)
    _shipped_or_refused(r, shipped, "triton", "a2a/nixl.yaml", "nixl_ep from 0.18.0")


@pytest.mark.parametrize(("vllm", "shipped"), [("0.14.0", False), ("0.17.0", False), ("0.18.0", True), ("0.29.0", True)])
def test_flashinfer_one_sided_from_0_18(vllm, shipped):
    """flashinfer_nvlink_one_sided (MoeAlltoAll) is first in 0.18.0; flashinfer_all2allv before is the two-sided kernel."""
    # FlashInfer declared in MoeAlltoAll's range: 0.14.0's own pin (0.5.3) predates it, refused on its own
    r = _explain(gpu="B200", a2a="flashinfer", runner="triton", engine_version=vllm, packages={"flashinfer-python": "0.6.18"})
    _shipped_or_refused(r, shipped, "triton", "a2a/flashinfer.yaml", "flashinfer_nvlink_one_sided from 0.18.0")


@pytest.mark.parametrize("vllm", ["0.13.0", "0.17.0", "0.18.0", "0.34.0"])
def test_flashinfer_two_sided_in_every_release(vllm):
    """MnnvlMoe alltoallv ships as flashinfer_all2allv from 0.13.0 and as flashinfer_nvlink_two_sided (alias kept) from
    0.18.0: never refused for the release (eager: its capture was not read)."""
    r = _explain(gpu="B200", a2a="flashinfer_two_sided", runner="triton", cuda_graph=False, engine_version=vllm)
    assert_planned(r, "triton")


# ------------------------------------------------------------------ pplx: shipped up to 0.16.0, rewritten from 0.17.0
@pytest.mark.parametrize(("vllm", "shipped"), [("0.13.0", True), ("0.16.0", True), ("0.17.0", False), ("0.34.0", False)])
def test_pplx_up_to_0_16(vllm, shipped):
    """0.16.0 runs PPLXAll2AllManager (batched hand-over); 0.17.0's _validate_parallel_config rewrites pplx to
    allgather_reducescatter: triton behind pplx on H200 planned up to 0.16.0, refused from 0.17.0."""
    r = _explain(gpu="H200", a2a="pplx", runner="triton", engine_version=vllm)
    _shipped_or_refused(r, shipped, "triton", "a2a/pplx.yaml", "removed its pplx all-to-all in 0.17.0")


# ------------------------------------------------------------------ Mooncake: never (moonep is MoonEP)
@pytest.mark.parametrize("vllm", ["0.13.0", "0.30.0", "0.31.0", "0.34.0"])
def test_mooncake_refused_in_every_release(vllm):
    """No release has a Mooncake value; 0.31.0's moonep is MoonshotAI's MoonEP: refused on both sides of 0.31.0."""
    r = _explain(gpu="H200", a2a="mooncake", runner="triton", engine_version=vllm)
    assert r.plan is None
    detail = only_refusal(r, "triton", "a2a_unsupported", "a2a/mooncake.yaml")
    assert "MoonEP" in detail, detail


def test_mooncake_not_refused_as_unshipped_under_sglang():
    """The vLLM refusal does not reach SGLang (--moe-a2a-backend mooncake)."""
    r = _explain(engine="sglang", gpu="H200", a2a="mooncake", runner="deep_gemm", quant="fp8_block", tp=4, ep=4, dp=4,
                 engine_version="0.5.23", a2a_mode="low_latency")
    assert not any(x.code == "a2a_unsupported" and x.source.startswith("backends/a2a/mooncake.yaml") for x in r.reasons)


# ------------------------------------------------------------------ FlashInfer MegaMoE: Literal before 0.32.0, passthrough from it
@pytest.mark.parametrize(("vllm", "why"), [("0.31.0", "before 0.32.0"), ("0.32.0", "bind_passthrough_all2all_backend"),
                                          ("0.34.0", "bind_passthrough_all2all_backend")])
def test_flashinfer_megamoe_refused_on_both_sides_of_0_32(vllm, why):
    """Up to 0.31.0 no value runs FlashInfer's moe_ep; from 0.32.0 'passthrough' does, bound only to vLLM's
    flashinfer_moe_ep_* MoE backends (any other raises): deep_gemm refused on both sides, each for its own reason."""
    # block FP8: deep_gemm's own format under vLLM (an unquantized layer is refused by deep_gemm.yaml itself: vLLM's
    # unquantized oracle has no deep_gemm), so the all-to-all is the one refusal
    r = _explain(gpu="B200", a2a="flashinfer_megamoe", runner="deep_gemm", engine_version=vllm, quant="fp8_block",
                 quant_config={"block": [128, 128]})
    assert r.plan is None
    detail = only_refusal(r, "deep_gemm", "a2a_unsupported", "a2a/flashinfer_megamoe.yaml")
    assert why in detail, detail


# ------------------------------------------------------------------ torch: this project's dispatcher, in no release
@pytest.mark.parametrize("vllm", ["0.13.0", "0.34.0"])
def test_torch_a2a_refused_in_every_release(vllm):
    r = _explain(gpu="H200", a2a="torch", runner="triton", cuda_graph=False, engine_version=vllm)
    assert r.plan is None
    detail = only_refusal(r, "triton", "a2a_unsupported", "a2a/torch.yaml")
    assert "all_to_all_single" in detail, detail


# ------------------------------------------------------------------ the launch-line reader: the vLLM values touched here
@pytest.mark.parametrize(("value", "a2a", "mode"), [
    ("allgather_reducescatter", "none", None), ("mori_high_throughput", "mori", "normal"),
    ("mori_low_latency", "mori", "low_latency"), ("nixl_ep", "nixl", None), ("pplx", "pplx", None),
    ("flashinfer_nvlink_one_sided", "flashinfer", None), ("flashinfer_nvlink_two_sided", "flashinfer_two_sided", None)])
def test_launch_line_reads_the_vllm_values(value, a2a, mode):
    from moe_select.launch_line import from_command
    launch = from_command(f"vllm serve deepseek-ai/DeepSeek-V3 -dp 8 --enable-expert-parallel --all2all-backend {value}",
                          model_config="examples/model_configs/deepseek-ai__DeepSeek-V3", engine_version="0.29.0")
    assert launch.deployment["a2a"] == a2a
    assert launch.deployment.get("a2a_mode") == mode


# ------------------------------------------------------------------ the launch writer: the release's own spelling
@pytest.mark.parametrize(("vllm", "written"), [("0.15.0", "mori"), ("0.22.1", "mori"), ("0.23.0", "mori_high_throughput"),
                                               ("0.34.0", "mori_high_throughput")])
def test_launch_writer_spells_mori_normal_per_release(vllm, written):
    """(tp 4 = dp 4 x vLLM's --tensor-parallel-size 1, EP 4.) A MoRI normal-mode plan is written as 'mori' for 0.15.0 .. 0.22.1 (their Literal has no mori_high_throughput) and
    as mori_high_throughput from 0.23.0 (backends/engines/names.yaml vllm_before)."""
    from moe_select.launch_emit import EmitError, emit
    r = _explain(gpu="MI300X", a2a="mori", a2a_mode="normal", runner="aiter", engine_version=vllm, tp=4)
    assert_planned(r, "aiter")
    if _no_moe_backend(vllm):
        with pytest.raises(EmitError, match=rf"--moe-backend was added in .*: vllm {vllm} does not have it"):
            emit(r.plan, "vllm", engine_version=vllm, model="M")
        assert _a2a_spelling("mori", "normal", vllm) == written
        return
    words = emit(r.plan, "vllm", engine_version=vllm, model="M").argv
    assert words[words.index("--all2all-backend") + 1] == written, words


def _no_moe_backend(vllm: str) -> bool:
    """--moe-backend first shipped in vLLM 0.17.0 (backends/engines/vllm.yaml): a plan's runner cannot be written for an
    older release, so emit refuses the plan there and the a2a spelling is checked on its own."""
    from packaging.version import Version

    return Version(vllm) < Version("0.17.0")


def _a2a_spelling(ours: str, mode: str | None, vllm: str) -> str:
    from moe_select.engine_tables import names
    from moe_select.launch_emit import _release_name

    row = next(r for r in names().a2a if r.ours == ours and r.mode == mode)
    return _release_name(row.vllm, row.vllm_before, vllm, [], "vLLM's --all2all-backend")


@pytest.mark.parametrize(("vllm", "written"), [("0.14.0", "flashinfer_all2allv"), ("0.17.0", "flashinfer_all2allv"),
                                               ("0.18.0", "flashinfer_nvlink_two_sided"), ("0.29.0", "flashinfer_nvlink_two_sided")])
def test_launch_writer_spells_the_two_sided_flashinfer_a2a_per_release(vllm, written):
    """FlashInfer's two-sided all-to-all is flashinfer_all2allv up to 0.17.0 and flashinfer_nvlink_two_sided from 0.18.0;
    the written line reads back as the same all-to-all at that release."""
    from moe_select.launch_emit import emit
    from moe_select.launch_line import from_command
    r = _explain(gpu="B200", a2a="flashinfer_two_sided", runner="triton", engine_version=vllm, tp=4)
    assert_planned(r, "triton")
    if _no_moe_backend(vllm):
        assert _a2a_spelling("flashinfer_two_sided", None, vllm) == written
        return
    words = emit(r.plan, "vllm", engine_version=vllm, model="M").argv
    assert words[words.index("--all2all-backend") + 1] == written, words
    back = from_command(" ".join(words), model_config="examples/model_configs/deepseek-ai__DeepSeek-V3", engine_version=vllm)
    assert back.deployment["a2a"] == "flashinfer_two_sided"


def test_launch_writer_without_a_version_writes_the_newest_spelling_and_says_so():
    """No --engine-version: the newest releases' spelling, and a comment naming the older one and its bound."""
    from moe_select.launch_emit import emit
    r = _explain(gpu="MI300X", a2a="mori", a2a_mode="normal", runner="aiter", tp=4)
    assert_planned(r, "aiter")
    out = emit(r.plan, "vllm", model="M")
    assert out.argv[out.argv.index("--all2all-backend") + 1] == "mori_high_throughput"
    assert any("before 0.23.0 take mori" in c for c in out.comments), out.comments


def test_an_older_spelling_needs_a_release_and_a_name():
    """names.yaml's ``vllm_before`` rows: ``below`` must be a PEP 440 release and ``name`` an engine value."""
    from pydantic import ValidationError

    from moe_select.engine_tables import OlderName
    assert OlderName(below="0.23.0", name="mori").below == "0.23.0"
    with pytest.raises(ValidationError, match="not a PEP 440 version"):
        OlderName(below="x.y", name="mori")
    with pytest.raises(ValidationError, match="name"):
        OlderName(below="0.23.0", name="Mori HT")
