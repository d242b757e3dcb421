"""Issue 21's four loose ends in the facts, each fixed as a kind with a planned and a refused deployment.

2. A refusal carries only what its citation checks: SGLang's MXFP4 refusals of aiter on gfx942
   (Mxfp4Config.from_config) and of flashinfer_trtllm on SM100 (moe_hook.handle_moe_kernel_config's quantization
   allow-list) are checks of quant_method mxfp4 checkpoints (gpt-oss), which DeepSeek-V4's FP8 checkpoint with MXFP4
   experts never meets: refused for the gpt-oss architecture, undecided for DeepSeek-V4 and for a model that does not
   say its architecture.
4. A version an engine's deprecation message announced is re-read as a release: vLLM's --cuda-graph-sizes is gone
   from the 0.13.0 wheel, as announced, so the table no longer says ``announced``; an ``announced: true`` that stays
   must say why in one line (engine_tables.Change).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

import moe_select
from moe_select import engine_tables

from report_helpers import refusals, unknown_codes

ROOT = Path(__file__).resolve().parent.parent
# gpt-oss-120b's MoE (examples/model_configs/openai__gpt-oss-120b), written inline so the architecture can vary.
GPT_OSS = {"num_experts": 128, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
           "activation": "swiglu_oai", "routing": "renormalize"}
BASE = {"tp": 8, "ep": 1, "a2a": "none", "engine": "sglang", "quant": "mxfp4"}


def _explain(**dep: Any) -> Any:
    return moe_select.explain({**BASE, **dep})


# ------------------------------------------------------------ 2: SGLang's MXFP4 refusals scoped to their check
@pytest.mark.parametrize(("gpu", "runner", "file"), [("MI300X", "aiter", "backends/aiter.yaml"),
                                                      ("B200", "flashinfer_trtllm", "backends/flashinfer_trtllm.yaml")])
def test_gpt_oss_mxfp4_refused_under_sglang(gpu, runner, file):
    """A gpt-oss checkpoint (quant_method mxfp4: Mxfp4Config) meets the cited check: refused, from that file."""
    r = _explain(gpu=gpu, runner=runner, model={**GPT_OSS, "architecture": "GptOssForCausalLM"})
    assert r.plan is None
    assert refusals(r, runner).get("quant_unsupported", "").startswith(file + ":"), refusals(r, runner)


# (gpu, runner, activation): on MI300X the activation is SiTU, which AITER keeps in bf16 (a16w4, FlyDSL on gfx942),
# so only the scoped Mxfp4Config check could refuse it; SiLU there meets AITER's kernel row (test below).
@pytest.mark.parametrize(("gpu", "runner", "activation"), [("MI300X", "aiter", "situ"),
                                                           ("B200", "flashinfer_trtllm", "silu")])
@pytest.mark.parametrize("architecture", ["DeepseekV4ForCausalLM", None])
def test_mxfp4_not_refused_past_the_check(gpu, runner, activation, architecture):
    """DeepSeek-V4's MXFP4 experts load through Fp8Config (server quantization fp8), which neither check reads; a
    model without an architecture may be either. The cell is undecided (planned, unverified), not refused."""
    model = {**GPT_OSS, "activation": activation} | ({"architecture": architecture} if architecture else {})
    r = _explain(gpu=gpu, runner=runner, model=model)
    assert "quant_unsupported" not in refusals(r, runner)
    assert "quant_unsupported" in unknown_codes(r, runner)
    assert r.plan is not None and r.plan.runner == runner


def _row_line(file: str, needle: str) -> str:
    """``file:line`` of the list item (``- `` line) whose block holds ``needle``; exactly one such item."""
    lines = (ROOT / file).read_text().splitlines()
    hits = [i for i, text in enumerate(lines) if needle in text]
    assert len(hits) == 1, (needle, hits)
    start = next(i for i in range(hits[0], -1, -1) if lines[i].lstrip().startswith("- "))
    return f"{file}:{start + 1}"


@pytest.mark.parametrize("activation", ["silu", "gelu"])
@pytest.mark.parametrize("architecture", ["DeepseekV4ForCausalLM", None])
def test_aiter_gfx942_silu_mxfp4_refused_by_the_kernel_row_not_the_gpt_oss_check(activation, architecture):
    """The gpt-oss-scoped Mxfp4Config row does not reach DeepSeek-V4 or an unnamed architecture, but AITER quantises
    SiLU/GELU activations to fp4x2, which its gfx942 builds compile out (sgl-project/sglang#35525): refused, from the
    kernel row, whatever the architecture."""
    model = {**GPT_OSS, "activation": activation} | ({"architecture": architecture} if architecture else {})
    r = _explain(gpu="MI300X", runner="aiter", model=model)
    assert r.plan is None
    where = refusals(r, "aiter").get("quant_unsupported")
    assert where == _row_line("backends/aiter.yaml", "-D__Float4_e2m1fn_x2 when get_gfx()"), refusals(r, "aiter")
    assert where != _row_line("backends/aiter.yaml", "architecture: [GptOssForCausalLM]}")


def test_the_gpt_oss_config_is_refused_from_its_architecture():
    """The bundled gpt-oss-120b config.json says GptOssForCausalLM: the scoped refusal reaches a real config."""
    r = moe_select.explain({"gpu": "B200", "engine": "sglang", "tp": 1, "ep": 1, "a2a": "none",
                            "model_config": str(ROOT / "examples/model_configs/openai__gpt-oss-120b"),
                            "runner": "flashinfer_trtllm"})
    assert r.plan is None and "quant_unsupported" in refusals(r, "flashinfer_trtllm")


# ------------------------------------------------------------ 4: announced versions re-read as releases
def _announced(node: Any, path: str, out: list[tuple[str, Any]]) -> None:
    if isinstance(node, dict):
        if node.get("announced") is True:
            out.append((path, node))
        for k, v in node.items():
            _announced(v, f"{path}.{k}", out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _announced(v, f"{path}[{i}]", out)


def announced_entries() -> list[tuple[str, Any]]:
    """Every mapping with ``announced: true`` under backends/ and rules/ (file and key path)."""
    out: list[tuple[str, Any]] = []
    for f in sorted([*ROOT.glob("backends/**/*.yaml"), *ROOT.glob("rules/*.yaml")]):
        _announced(yaml.safe_load(f.read_text()), str(f.relative_to(ROOT)), out)
    return out


def test_every_announced_version_says_why_in_one_line():
    for where, entry in announced_entries():
        why = entry.get("why")
        assert isinstance(why, str) and why.strip() and "\n" not in why, f"{where}: announced without a one-line why"


def test_the_walk_finds_announced_entries(tmp_path):
    """The reader above is not vacuous: it finds a nested announced entry and lets one without a why through to
    the assertion."""
    found: list[tuple[str, Any]] = []
    _announced({"flags": [{"removed": {"version": "9.0", "announced": True}}]}, "x.yaml", found)
    assert found == [("x.yaml.flags[0].removed", {"version": "9.0", "announced": True})]


def test_change_refuses_announced_without_why():
    by = "vllm-project/vllm@99d7eb5d6a51:vllm/engine/arg_utils.py:EngineArgs.add_cli_args"
    with pytest.raises(ValidationError, match="needs a why"):
        engine_tables.Change.model_validate({"by": by, "version": "0.13.0", "announced": True})
    with pytest.raises(ValidationError, match="one non-empty line"):
        engine_tables.Change.model_validate({"by": by, "version": "0.13.0", "announced": True, "why": "a\nb"})
    ok = engine_tables.Change.model_validate({"by": by, "version": "9.0.0", "announced": True,
                                              "why": "9.0.0 is not on PyPI yet"})
    assert "as announced" in ok.text()


def test_vllm_cuda_graph_sizes_removal_is_a_checked_release():
    """vLLM 0.12.0's wheel still parses --cuda-graph-sizes (deprecated, 'will be removed in v0.13.0'); the 0.13.0
    wheel (PyPI) has no trace of it: removed in 0.13.0, a release read, not an announcement."""
    flag = next(f for f in engine_tables.table("vllm").flags if "--cuda-graph-sizes" in f.names)
    assert flag.removed is not None and flag.removed.version == "0.13.0" and not flag.removed.announced
    assert "as announced" not in flag.removed.text()
