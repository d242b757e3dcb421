"""Issue 21, small correctness fixes.

1. TensorRT-LLM's runners (backends/trtllm_*.yaml) are refused under vLLM: their engines list is exhaustive for vLLM
   too (vLLM's --moe-backend values are the MoEBackend literal, vllm-project/vllm@00634b8acf93:vllm/config/kernel.py,
   which names no TensorRT-LLM backend); under engine trtllm their verdicts are those before the change.
2. A ``not_preferred`` reason names the rule that would have chosen (the first matching prefer rule, file:line), not
   the first rule file of the catalog; where no prefer rule matches, it says so and names no file.
3. This install's NVFP4 adapters (triton, torch_native) compute W4A16 (bf16 activations, none quantized): a deployment
   stating ``quant_config.activation_scale: per_token`` is refused on them (no_adapter, from their ``adapter:`` block's
   ``activation_scales``); per_tensor (stated or not) is planned as before.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select
from moe_select.catalog import default_catalog, load_catalog
from moe_select.cells import evaluate, uncovered
from moe_select.errors import SelectionError
from moe_select.selector import NO_MATCHING_PREFER_RULE

from conftest import CONFIGS, ROOT

NVFP4 = str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4")
BF16 = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
FP8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
GPT_OSS = str(CONFIGS / "openai__gpt-oss-120b")
TRTLLM_RUNNERS = {"trtllm_cutedsl", "trtllm_cutlass", "trtllm_deepgemm", "trtllm_densegemm", "trtllm_gen",
                  "trtllm_marlin", "trtllm_megamoe_cutedsl", "trtllm_megamoe_deepgemm", "trtllm_triton",
                  "trtllm_vanilla"}


def _explain(**dep: Any) -> Any:
    d: dict[str, Any] = dict(tp=1, ep=1)
    d.update(dep)
    return moe_select.explain(d)


def test_trtllm_runner_set_is_the_catalogs():
    """The ten runners named here are exactly the catalog's trtllm_* runners (a new one is not silently skipped)."""
    cat = default_catalog()
    assert {n for n in cat.runners if n.startswith("trtllm_")} == TRTLLM_RUNNERS


@pytest.mark.parametrize("gpu", ["L40", "H200", "B200", "RTX PRO 6000"])
@pytest.mark.parametrize("model", [NVFP4, BF16, FP8, GPT_OSS])
def test_trtllm_runners_refused_under_vllm(gpu, model):
    """Under engine vllm on an NVIDIA GPU no trtllm_* runner is eligible (before: 7-9 of them were 'eligible,
    unverified'); each is refused as engine_unsupported citing its own file's engines decision (vLLM's MoEBackend)."""
    r = _explain(gpu=gpu, engine="vllm", model_config=model)
    cands = {c.backend: c for c in r.candidates if c.backend in TRTLLM_RUNNERS}
    assert set(cands) == TRTLLM_RUNNERS
    assert not [n for n, c in cands.items() if c.eligible]
    for name in TRTLLM_RUNNERS:
        eng = [x for x in r.reasons if x.backend == name and x.code == "engine_unsupported"]
        assert eng, name
        assert any(x.source.startswith(f"backends/{name}.yaml:") and "MoEBackend literal" in x.detail for x in eng), \
            [(x.source, x.detail) for x in eng]


# Measured with the catalog before the change (commit 1b0f02b): plan and eligible trtllm_* runners under engine trtllm.
TRTLLM_BEFORE = [
    ("H200", NVFP4, "trtllm_marlin", {"trtllm_marlin": "supported", "trtllm_vanilla": "unverified"}),
    ("H200", GPT_OSS, "trtllm_triton", {"trtllm_cutlass": "supported", "trtllm_triton": "supported"}),
    ("B200", NVFP4, "trtllm_cutlass", {"trtllm_cutedsl": "supported", "trtllm_cutlass": "supported",
                                       "trtllm_densegemm": "supported", "trtllm_gen": "supported",
                                       "trtllm_megamoe_cutedsl": "supported", "trtllm_vanilla": "unverified"}),
    ("B200", FP8, "trtllm_gen", {"trtllm_deepgemm": "supported", "trtllm_gen": "supported",
                                 "trtllm_vanilla": "unverified"}),
    ("RTX PRO 6000", NVFP4, "trtllm_cutlass", {"trtllm_cutedsl": "unverified", "trtllm_cutlass": "supported",
                                               "trtllm_vanilla": "unverified"}),
    ("L40", FP8, None, {"trtllm_vanilla": "unverified"}),
]


@pytest.mark.parametrize("gpu,model,plan,eligible", TRTLLM_BEFORE)
def test_trtllm_runners_unchanged_under_trtllm(gpu, model, plan, eligible):
    """Under engine trtllm the plan and the eligible trtllm_* runners (with their evidence) are as before, and no
    trtllm_* runner carries an engine_unsupported reason."""
    r = _explain(gpu=gpu, engine="trtllm", model_config=model)
    assert (r.plan.runner if r.plan else None) == plan
    assert {c.backend: c.evidence for c in r.candidates if c.eligible and c.backend in TRTLLM_RUNNERS} == eligible
    assert not [x for x in r.reasons if x.backend in TRTLLM_RUNNERS and x.code == "engine_unsupported"]


def _rule(catalog: Any, rule_id: str) -> Any:
    return next(r for r in catalog.rules if r.id == rule_id)


def _line_of(source: str) -> str:
    path, line = source.rsplit(":", 1)
    return (ROOT / path).read_text(encoding="utf-8").splitlines()[int(line) - 1]


def test_not_preferred_names_the_first_matching_prefer_rule():
    """gfx950 NVFP4 under trtllm: trtllm_vanilla is eligible (unverified), and the matching prefer rules (trtllm-auto,
    amd, reference-fallback) name no eligible runner: the reason's source is trtllm-auto's file:line (the rule that
    would have chosen; before: rules/10-nvidia.yaml, whose rules do not match a gfx950), and the detail names each
    matching prefer rule with its file:line."""
    r = _explain(arch="gfx950", engine="trtllm", model_config=NVFP4)
    assert r.plan is None
    np = [x for x in r.reasons if x.code == "not_preferred"]
    assert [x.backend for x in np] == ["trtllm_vanilla"]
    auto = _rule(default_catalog(), "trtllm-auto")
    assert np[0].source == auto.where() and np[0].source.startswith("rules/15-trtllm.yaml:")
    assert _line_of(np[0].source).strip() == "- id: trtllm-auto"
    for rid in ("trtllm-auto", "amd", "reference-fallback"):
        assert f"{rid} ({_rule(default_catalog(), rid).where()})" in np[0].detail
    assert "no matching rule prefers it" in np[0].detail


def test_not_preferred_after_a_disable_names_the_matching_cpu_rule(tmp_path):
    """An operator rule disables torch_native on cpu: the first matching prefer rule is the bundled cpu rule
    (rules/90-fallback.yaml), and the reasons name it, not the catalog's first rule file."""
    (tmp_path / "ops.yaml").write_text("schema_version: 1\nrules:\n  - id: no-reference\n    when: {arch: [cpu]}\n"
                                       "    disable: [torch_native]\n    reason: test\n")
    r = moe_select.explain({"arch": "cpu", "quant": "bf16", "model_config": BF16, "tp": 1}, rules_dirs=[tmp_path])
    np = [x for x in r.reasons if x.code == "not_preferred"]
    assert r.plan is None and np
    cpu = _rule(default_catalog(), "cpu")
    assert {x.source for x in np} == {cpu.where()} and _line_of(cpu.where()).strip() == "- id: cpu"


def test_not_preferred_without_a_matching_prefer_rule_names_no_file(tmp_path):
    """Only an operator's rules (no bundled ones), none matching a cpu deployment: torch_native is eligible and no
    prefer rule matches; the reason says so and its source names no rule file."""
    (tmp_path / "ops.yaml").write_text("schema_version: 1\nrules:\n  - id: sm90-only\n    when: {arch: [sm90]}\n"
                                       "    prefer: [triton]\n")
    cat = load_catalog([tmp_path], use_env=False, bundled_rules=False, plugins=False)
    r = moe_select.explain({"arch": "cpu", "quant": "bf16", "model_config": BF16, "tp": 1, "engine": "moe_select"},
                           catalog=cat)
    assert r.plan is None
    np = [x for x in r.reasons if x.code == "not_preferred"]
    assert "torch_native" in {x.backend for x in np}
    for x in np:
        assert x.source == NO_MATCHING_PREFER_RULE and ".yaml" not in x.source
        assert "no prefer rule matches this deployment (cpu x bf16 x engine moe_select)" in x.detail


def test_uncovered_cells_name_their_own_engines_rule():
    """check's 'no rule covers' notes take their location from a cell of the same arch, engine and kind: the
    gfx950 x vllm group names a rule that matches vLLM (amd), not TensorRT-LLM's trtllm-auto."""
    cat = default_catalog()
    cells = evaluate(cat, archs=("gfx950",), engines=("vllm", "trtllm"))
    groups = {engines: source for arch, _, engines, _, source in uncovered(cells) if arch == "gfx950"}
    assert groups, groups
    for engines, source in groups.items():
        rid = _line_of(str(source)).strip().removeprefix("- id: ")
        rule_engines = _rule(cat, rid).when.engine
        assert rule_engines is None or set(engines) <= set(rule_engines), (engines, source)


NVFP4_ADAPTERS = ("triton", "torch_native")


def _install(arch: str, scale: str | None, **dep: Any) -> Any:
    d: dict[str, Any] = dict(arch=arch, engine="moe_select", model_config=NVFP4, cuda_graph=False, **dep)
    if scale is not None:
        d["quant_config"] = {"activation_scale": scale}
    return _explain(**d)


def _scale_refusals(r: Any) -> dict[str, Any]:
    return {x.backend: x for x in r.reasons if x.code == "no_adapter" and "activation_scale" in x.detail}


@pytest.mark.parametrize("arch", ["cpu", "sm90", "sm100"])
def test_per_token_nvfp4_refused_on_this_installs_adapters(arch):
    """Per-token NVFP4 under engine moe_select: triton and torch_native are refused no_adapter, each naming
    activation_scale per_token and what the adapter computes (nvfp4 with bf16 activations), at its adapter block's
    activation_scales line; nothing is planned (before: torch_native or triton ran it as W4A16, silently)."""
    r = _install(arch, "per_token")
    assert r.plan is None and not [c.backend for c in r.candidates if c.eligible]
    refused = _scale_refusals(r)
    expect = {"cpu": {"torch_native"}}.get(arch, set(NVFP4_ADAPTERS))  # triton's support rows name no cpu
    assert expect <= set(refused), [(x.backend, x.code, x.detail) for x in r.reasons if x.backend in NVFP4_ADAPTERS]
    for name in expect:
        x = refused[name]
        assert "activation_scale per_token" in x.detail and "computes nvfp4 with bf16 activations" in x.detail
        assert x.source.startswith(f"backends/{name}.yaml:") and _line_of(x.source).strip() == "activation_scales: [per_tensor]"
    with pytest.raises(SelectionError):
        moe_select.plan(dict(arch=arch, engine="moe_select", model_config=NVFP4, cuda_graph=False, tp=1, ep=1,
                             quant_config={"activation_scale": "per_token"}))


@pytest.mark.parametrize("scale", [None, "per_tensor"])
@pytest.mark.parametrize("arch,plan", [("cpu", "torch_native"), ("sm90", "triton"), ("sm100", "torch_native")])
def test_per_tensor_nvfp4_unchanged_on_this_installs_adapters(arch, plan, scale):
    """Per-tensor NVFP4 (stated or the default) under moe_select: planned as before (the plans measured at 1b0f02b),
    both adapters eligible where their facts name the GPU, no activation_scale refusal."""
    r = _install(arch, scale)
    assert r.plan is not None and r.plan.runner == plan
    assert not _scale_refusals(r)
    eligible = {c.backend for c in r.candidates if c.eligible}
    assert eligible == ({"torch_native"} if arch == "cpu" else set(NVFP4_ADAPTERS))


def test_per_token_refusal_is_this_installs_only():
    """Under a serving engine the adapters' activation_scales say nothing: SGLang's per-token NVFP4 on a B200 is
    planned (flashinfer-python 0.6.18rc4: the tile-192 range of tests/test_nvfp4_per_token.py left), and no reason
    names an adapter's activation_scales; under moe_select another format (gpt-oss's mxfp4) is not touched either."""
    r = _explain(gpu="B200", engine="sglang", model_config=NVFP4, tp=4, quant_config={"activation_scale": "per_token"},
                 packages={"flashinfer-python": "0.6.18rc4"})
    assert r.plan is not None and not _scale_refusals(r)
    m = _explain(arch="sm90", engine="moe_select", model_config=GPT_OSS, cuda_graph=False)
    assert m.plan is not None and m.plan.runner in NVFP4_ADAPTERS and not _scale_refusals(m)
