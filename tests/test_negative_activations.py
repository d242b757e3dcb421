"""Negative activation facts (``activations: [{values: [...], supported: false, ...}]``, issue 21, field round 19).

An engine path can take a runner whose kernel computes an activation and still run it wrongly: SGLang's bf16, per-tensor
FP8 and MXINT4 paths of the FlashInfer TRT-LLM-gen MoE drop a ``swiglu_limit`` clamp (sgl-project/sglang#39920), and
before 0.5.21 its flashinfer_cutlass path drops gpt-oss's alpha/beta/limit (sgl-project/sglang#39939). Without a
negative form such a path could only stay unverified. A negative activation fact refuses its activations
(activation_unsupported) where its ``when``/``requires`` hold, before any positive fact is read, names its version
bound, is judged per engine where the deployment names none, and shows as refused in the matrix. Toy runner
files keep the mechanism apart from the shipped facts.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select
from moe_select.catalog import load_catalog
from moe_select.errors import InputError

from report_helpers import planned, report_codes

TOY = """\
schema_version: 3
runner: toy_clamp
summary: a kernel whose clamp one engine path drops
source: "this project: test"
support:
  - {archs: [sm90, sm100], formats: [bf16, fp8_block], source: "this project: test"}
activations:
  - {values: [silu, silu_clamped, swiglu_oai], source: "this project: test"}
  - {values: [silu_clamped], supported: false, when: {engine: [sglang], quant: [bf16]}, requires: {sglang: "<0.5.20"}, source: "this project: test"}
routing: {values: [renormalize], source: "this project: test"}
dispatch: {formats: [standard], source: "this project: test"}
cuda_graph: {supported: true, source: "this project: test"}
lists: {archs: open, formats: open, support: open, activations: open, routing: open, dispatch: open, a2a: open,
        cuda_graph: open, engines: open}
"""
SHAPE = {"num_experts": 16, "top_k": 2, "hidden_size": 1024, "moe_intermediate_size": 512, "routing": "renormalize"}
CLAMPED = SHAPE | {"activation": "silu_clamped", "swiglu_limit": 7.0}


def _toy(tmp_path: Any, text: str = TOY) -> Any:
    (tmp_path / "toy_clamp.yaml").write_text(text, encoding="utf-8")
    return tmp_path


def _explain(tmp_path: Any, **dep: Any) -> Any:
    dep = {"arch": "sm100", "tp": 1, "ep": 1, "a2a": "none", "runner": "toy_clamp", "model": CLAMPED, **dep}
    return moe_select.explain(dep, backends_dirs=[tmp_path])


def test_a_negative_activation_fact_refuses_where_it_holds(tmp_path):
    """SGLang < 0.5.20 with bf16: refused with activation_unsupported, citing the negative fact's line and naming its
    bound; the positive fact lists silu_clamped, so without the negative one it would plan."""
    _toy(tmp_path)
    r = _explain(tmp_path, engine="sglang", engine_version="0.5.19", quant="bf16")
    assert r.plan is None and report_codes(r) == {"activation_unsupported"}
    reason = r.reasons[0]
    assert reason.source.endswith("toy_clamp.yaml:9"), reason.source
    assert "does not apply silu_clamped" in reason.detail and "(with sglang <0.5.20)" in reason.detail, reason.detail


@pytest.mark.parametrize(("dep", "why"), [
    ({"engine": "sglang", "engine_version": "0.5.20", "quant": "bf16"}, "past the version bound"),
    ({"engine": "sglang", "engine_version": "0.5.19", "quant": "fp8_block"}, "another format"),
    ({"engine": "vllm", "quant": "bf16"}, "another engine"),
    ({"engine": "sglang", "engine_version": "0.5.19", "quant": "bf16", "model": SHAPE | {"activation": "silu"}},
     "another activation"),
])
def test_elsewhere_the_positive_facts_decide(tmp_path, dep, why):
    """Outside its when/requires the negative fact says nothing: the positive fact plans the runner."""
    _toy(tmp_path)
    assert planned(_explain(tmp_path, **dep), "toy_clamp"), why


def test_an_unstated_engine_is_judged_per_engine(tmp_path):
    """A deployment that names no engine is judged for each: the negative fact refuses under SGLang (read at 0.5.19,
    below the bound: the release SGLang's facts were checked up to when this was written, pinned through packages)
    and leaves vLLM supported. Unpinned, SGLang is read at its newest checked release (backends/packages.yaml
    checked_up_to, 0.5.23 since the 2026-12-05 release delta), past the toy's <0.5.20 bound: supported there too."""
    _toy(tmp_path)
    r = _explain(tmp_path, quant="bf16", packages={"sglang": "0.5.19"})
    c = next(c for c in r.candidates if c.backend == "toy_clamp")
    assert c.evidence_by_engine["sglang"] == "refused", c.evidence_by_engine
    assert c.evidence_by_engine["vllm"] == "supported", c.evidence_by_engine
    newest = next(c for c in _explain(tmp_path, quant="bf16").candidates if c.backend == "toy_clamp")
    assert newest.evidence_by_engine["sglang"] == "supported", newest.evidence_by_engine
    assert newest.evidence_by_engine["vllm"] == "supported", newest.evidence_by_engine


def test_the_matrix_marks_a_negative_activation_fact(tmp_path):
    """moe-select matrix lists the negative fact as refused (JSON supported: false; markdown '(refused)'), the positive
    one without the key."""
    from moe_select.matrix import build, render_markdown

    _toy(tmp_path)
    data = build(load_catalog(use_env=False, plugins=False, backends_dirs=[tmp_path]))
    toy = next(r for r in data["runners"] if r["runner"] == "toy_clamp")
    assert [f.get("supported", True) for f in toy["activations"]] == [True, False]
    assert "- activations: silu_clamped (refused) -- engines sglang" in render_markdown(data)


def test_a_negative_activation_fact_names_activations_known_to_the_vocabulary(tmp_path):
    """The negative form takes the same values as the positive one: an unknown activation is refused at load, naming
    the file."""
    _toy(tmp_path, TOY.replace("{values: [silu_clamped], supported: false,", "{values: [silu_clampd], supported: false,"))
    with pytest.raises(InputError) as exc:
        load_catalog(use_env=False, plugins=False, backends_dirs=[tmp_path])
    assert "toy_clamp.yaml" in str(exc.value) and "silu_clampd" in str(exc.value)


def test_a_refusal_reading_an_unstated_input_is_an_unknown_not_a_pass(tmp_path):
    """A negative fact whose when reads dp, which the deployment leaves unstated: the candidate is not supported and
    records an activation_unsupported unknown naming dp (stated, the fact decides: refused at dp 2, planned at dp 1)."""
    _toy(tmp_path, TOY.replace("when: {engine: [sglang], quant: [bf16]}, requires: {sglang: \"<0.5.20\"}",
                               "when: {quant: [bf16], dp: {min: 2}}"))
    r = _explain(tmp_path, engine="vllm", quant="bf16")
    c = next(c for c in r.candidates if c.backend == "toy_clamp")
    assert c.evidence != "supported", c.evidence
    assert any(u.code == "activation_unsupported" and "dp" in u.detail for u in c.unknowns), \
        [(u.code, u.detail) for u in c.unknowns]
    stated = _explain(tmp_path, engine="vllm", quant="bf16", dp=2, ep=2)
    assert stated.plan is None and "activation_unsupported" in report_codes(stated)
    assert planned(_explain(tmp_path, engine="vllm", quant="bf16", dp=1), "toy_clamp")
