"""Break-it session 7: negative activation facts (``activations: [{..., supported: false}]``, 236507f) against the
clamped-activation fallback, version-gated positive facts and the fixes a refusal offers.

Toy runner files (written here, loaded with ``backends_dirs``) keep the mechanism apart from the shipped facts.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import moe_select

from report_helpers import cand, planned

HEAD = """\
schema_version: 3
runner: toy_s7
summary: a kernel one engine path runs wrongly
source: "this project: test"
support:
  - {archs: [sm90, sm100], formats: [bf16, fp8_block], source: "this project: test"}
"""
TAIL = """\
dispatch: {formats: [standard], source: "this project: test"}
cuda_graph: {supported: true, source: "this project: test"}
lists: {archs: open, formats: open, support: open, activations: open, routing: open, dispatch: open, a2a: open,
        cuda_graph: open, engines: open}
"""
ROUTING = 'routing: {values: [renormalize], source: "this project: test"}\n'
SHAPE = {"num_experts": 16, "top_k": 2, "hidden_size": 1024, "moe_intermediate_size": 512, "routing": "renormalize"}
CLAMPED = SHAPE | {"activation": "silu_clamped", "swiglu_limit": 7.0}


def _toy(tmp_path: Path, activations: str, routing: str = ROUTING) -> Path:
    (tmp_path / "toy_s7.yaml").write_text(HEAD + "activations:\n" + activations + routing + TAIL, encoding="utf-8")
    return tmp_path


def _explain(tmp_path: Path, **dep: Any) -> Any:
    dep = {"arch": "sm100", "tp": 1, "ep": 1, "a2a": "none", "runner": "toy_s7", "quant": "bf16", "model": CLAMPED,
           **dep}
    return moe_select.explain(dep, backends_dirs=[tmp_path])


# ----------------------------------------------------------------- defect 1: the clamped fallback's base activation
BASE_REFUSED = """\
  - {values: [silu, swiglu_oai], source: "this project: test"}
  - {values: [silu], supported: false, when: {engine: [sglang], quant: [bf16]}, source: "this project: test"}
"""


def test_a_negative_fact_on_the_base_activation_refuses_the_clamped_one(tmp_path):
    """The model uses silu_clamped; no fact names it, so the selector falls back to its base, silu (unverified: "takes
    silu; no fact says it applies the clamp"). Under SGLang with bf16 a negative fact says this runner does not apply
    silu at all: the fallback's premise is refuted, so the runner is refused (activation_unsupported, citing line 9,
    the negative fact), not planned as unverified on the strength of a silu the facts deny."""
    _toy(tmp_path, BASE_REFUSED)
    r = _explain(tmp_path, engine="sglang")
    c = cand(r, "toy_s7")
    assert r.plan is None and c.evidence == "refused", (c.evidence, [u.detail for u in c.unknowns])
    (reason,) = c.reasons
    assert reason.code == "activation_unsupported" and reason.source.endswith("toy_s7.yaml:9"), reason
    assert "does not apply silu" in reason.detail and "silu_clamped" in reason.detail, reason.detail
    assert not any("takes silu" in u.detail for u in c.unknowns), [u.detail for u in c.unknowns]


def test_where_the_base_negative_fact_does_not_hold_the_fallback_stays_unverified(tmp_path):
    """Under vLLM the negative fact (SGLang only) says nothing: the fallback plans the runner, unverified, with the
    unknown that names the clamp."""
    _toy(tmp_path, BASE_REFUSED)
    r = _explain(tmp_path, engine="vllm")
    assert planned(r, "toy_s7")
    c = cand(r, "toy_s7")
    assert c.evidence == "unverified"
    assert any(u.code == "activation_unsupported" and "takes silu" in u.detail for u in c.unknowns)


# ------------------------------------------------------------- defect 2: a refusal by a negative fact offers no fix
BOUNDED = """\
  - {values: [silu, silu_clamped], source: "this project: test"}
  - {values: [silu_clamped], supported: false, when: {engine: [sglang]}, requires: {sglang: "<0.5.20"}, source: "this project: test"}
"""
GATED = """\
  - {values: [silu], source: "this project: test"}
  - {values: [silu_clamped], when: {engine: [sglang]}, requires: {sglang: ">=0.5.20"}, source: "this project: test"}
  - {values: [silu_clamped], supported: false, when: {engine: [sglang]}, requires: {sglang: "<0.5.20"}, source: "this project: test"}
"""


def test_a_version_bounded_negative_activation_fact_offers_leaving_its_bound(tmp_path):
    """SGLang 0.5.19 is inside the negative fact's bound (<0.5.20); the positive fact takes silu_clamped everywhere, so
    the bound is the only obstacle (at 0.5.20 the runner is planned): the refusal's fix names leaving it."""
    _toy(tmp_path, BOUNDED)
    r = _explain(tmp_path, engine="sglang", engine_version="0.5.19")
    (reason,) = cand(r, "toy_s7").reasons
    assert reason.code == "activation_unsupported"
    assert reason.fix is not None and "sglang outside <0.5.20" in reason.fix, reason.fix
    assert planned(_explain(tmp_path, engine="sglang", engine_version="0.5.20"), "toy_s7")


def test_a_negative_fact_keeps_the_fix_of_a_version_gated_positive_fact(tmp_path):
    """Before the negative fact, SGLang 0.5.19 was refused by the version gate of the positive silu_clamped fact with
    the fix ``pip install 'sglang>=0.5.20'``; the negative fact (the same bound, now cited) must not lose it."""
    _toy(tmp_path, GATED)
    r = _explain(tmp_path, engine="sglang", engine_version="0.5.19")
    (reason,) = cand(r, "toy_s7").reasons
    assert reason.code == "activation_unsupported" and reason.source.endswith("toy_s7.yaml:10"), reason
    assert reason.fix is not None and "pip install 'sglang>=0.5.20'" in reason.fix, reason.fix


def test_no_fix_where_leaving_the_bound_leaves_the_activation_untaken(tmp_path):
    """A negative fact with a version bound, but no positive fact takes silu_clamped at any version (the list is open:
    unverified at best): leaving the bound is no fix, and none is offered."""
    _toy(tmp_path, """\
  - {values: [silu], source: "this project: test"}
  - {values: [silu_clamped], supported: false, when: {engine: [sglang]}, requires: {sglang: "<0.5.20"}, source: "this project: test"}
""")
    r = _explain(tmp_path, engine="sglang", engine_version="0.5.19")
    (reason,) = cand(r, "toy_s7").reasons
    assert reason.code == "activation_unsupported" and reason.fix is None, reason


def test_a_version_bounded_negative_routing_fact_offers_leaving_its_bound_too(tmp_path):
    """The same gap in the negative routing fact (the form the activation one copies): renormalize is refused under
    SGLang < 0.5.20, taken by the positive fact elsewhere: the fix names leaving the bound; at 0.5.20 it plans."""
    _toy(tmp_path, '  - {values: [silu], source: "this project: test"}\n', routing="""\
routing:
  - {values: [renormalize], source: "this project: test"}
  - {values: [renormalize], supported: false, when: {engine: [sglang]}, requires: {sglang: "<0.5.20"}, source: "this project: test"}
""")
    silu = SHAPE | {"activation": "silu"}
    r = _explain(tmp_path, engine="sglang", engine_version="0.5.19", model=silu)
    (reason,) = cand(r, "toy_s7").reasons
    assert reason.code == "routing_unsupported" and reason.fix == "sglang outside <0.5.20", reason
    assert planned(_explain(tmp_path, engine="sglang", engine_version="0.5.20", model=silu), "toy_s7")


# ------------------------------------------- defect 3: moe-select check is silent about a dead or clashing negative fact
def _check(tmp_path: Path, activations: str, engines: str = "", routing: str = ROUTING) -> list[Any]:
    """``moe-select check`` of the toy file: its findings (file:line, message, severity) on that file only."""
    from moe_select.lint import check

    (tmp_path / "toy_s7.yaml").write_text(HEAD + "activations:\n" + activations + routing + engines + TAIL,
                                          encoding="utf-8")
    findings, _ = check([tmp_path], use_env=False)
    return [f for f in findings if "toy_s7.yaml" in f.where]


def test_check_names_a_negative_fact_whose_activation_condition_excludes_its_values(tmp_path):
    """Line 9 refuses silu_clamped only when the model's activation is silu: it can never match (the selector reads a
    negative fact for the model's activation, which would have to be both): an error at that line."""
    found = _check(tmp_path, """\
  - {values: [silu, silu_clamped], source: "this project: test"}
  - {values: [silu_clamped], supported: false, when: {activation: [silu]}, source: "this project: test"}
""")
    assert [(f.where.rsplit(":", 1)[1], f.severity) for f in found] == [("9", "error")], found
    assert "never matches" in found[0].message and "silu_clamped" in found[0].message, found[0].message


def test_check_names_a_negative_fact_scoped_to_an_engine_that_does_not_ship_the_runner(tmp_path):
    """The runner is shipped by vLLM only (engines:); line 9 refuses under SGLang: it can never match."""
    found = _check(tmp_path, """\
  - {values: [silu, silu_clamped], source: "this project: test"}
  - {values: [silu_clamped], supported: false, when: {engine: [sglang]}, source: "this project: test"}
""", engines='engines: {values: [vllm], source: "this project: test"}\n')
    assert [(f.where.rsplit(":", 1)[1], f.severity) for f in found] == [("9", "error")], found
    assert "never matches" in found[0].message and "sglang" in found[0].message, found[0].message


def test_check_warns_of_a_negative_fact_bounded_by_an_engine_version_without_that_engine(tmp_path):
    """Line 9 is bounded by SGLang's version but names no engine: under vLLM, SGLang's package is read at its declared
    version or else its newest checked release, so the fact refuses vLLM deployments too where that version is inside
    the bound (explain does: below, with sglang 0.5.19, the newest checked release when this was written; from the
    2026-12-05 release delta the undeclared default is 0.5.23, outside the bound, so the release is declared). A
    warning at line 9."""
    acts = """\
  - {values: [silu, silu_clamped], source: "this project: test"}
  - {values: [silu_clamped], supported: false, requires: {sglang: "<0.5.20"}, source: "this project: test"}
"""
    found = _check(tmp_path, acts)
    assert [(f.where.rsplit(":", 1)[1], f.severity) for f in found] == [("9", "warning")], found
    assert "sglang" in found[0].message and "when: {engine: [sglang]}" in found[0].message, found[0].message
    r = _explain(tmp_path, engine="vllm", packages={"sglang": "0.5.19"})
    assert r.plan is None and {x.code for x in cand(r, "toy_s7").reasons} == {"activation_unsupported"}


def test_check_warns_of_a_negative_fact_that_cancels_an_unconditional_positive_one(tmp_path):
    """Line 8 says the runner computes silu everywhere; line 9 refuses silu everywhere (no when, no requires): they
    contradict, and line 8's silu never takes effect. A warning at line 9."""
    found = _check(tmp_path, """\
  - {values: [silu, swiglu_oai], source: "this project: test"}
  - {values: [silu], supported: false, source: "this project: test"}
""")
    assert [(f.where.rsplit(":", 1)[1], f.severity) for f in found] == [("9", "warning")], found
    assert "line 8" in found[0].message or "toy_s7.yaml:8" in found[0].message, found[0].message


def test_check_is_quiet_about_a_negative_fact_that_can_match(tmp_path):
    """The shape test_negative_activations.py uses (an engine and a format, a version bound of that engine): no
    finding on the toy file; the same holds for a negative routing fact of that shape."""
    assert _check(tmp_path, BOUNDED) == []
    assert _check(tmp_path, '  - {values: [silu], source: "this project: test"}\n', routing="""\
routing:
  - {values: [renormalize], source: "this project: test"}
  - {values: [renormalize], supported: false, when: {engine: [sglang]}, requires: {sglang: "<0.5.20"}, source: "this project: test"}
""") == []
