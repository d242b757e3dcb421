"""Tests that kill the mutants of moe_select/catalog_cache.py, versions.py and plans.py that the local sampled run of
2026-12-02 (eighth session; mutmut 3.8.1, seed 19, 50 mutants per module; catalog_cache at a0d1820, versions and
plans at c581f8e; benchmarks/results/mutation_sampled_local_2026-12-02_s8.json) left alive: catalog_cache 2, versions
2, plans 3 survived. One section per module; each test names the mutants it kills (``module.x_function__mutmut_N``);
the expectations are written by hand from the inputs.

Equivalent, so not tested (the reason in one line each):

- catalog_cache.x__digest__mutmut_7 (``read_input(path, str(None), ...)``): the display name only goes into the
  Issue's ``file``; _digest keeps the digest, or the issues' messages (which never hold the name), never the file.
- catalog_cache.x__secret__mutmut_31 (``O_NOFOLLOW`` looked up misspelt, so 0): the key is created with
  ``O_CREAT | O_EXCL``, which never follows a link (POSIX: open fails with EEXIST when the path is a link, even a
  dangling one), so O_NOFOLLOW changes nothing there.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

import moe_select
from moe_select import versions
from moe_select.plans import Plan, fingerprint

MODEL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32}


# ------------------------------------------------------------------------------------------------------ versions
@pytest.fixture
def packaging_before_26(monkeypatch):
    """``SpecifierSet.contains`` as packaging 23 to 25 had it (pyproject allows packaging>=23): with
    ``prereleases=None`` a pre-release matches only a specifier that names one itself. packaging 26 changed the
    default to match it (a single version has no alternatives), so the installed packaging alone cannot show
    whether satisfies asks for pre-releases. The verdicts memo starts empty."""
    real = SpecifierSet.contains

    def contains(self, item, prereleases=None, installed=None):
        if prereleases is None:
            prereleases = bool(self.prereleases)
        return real(self, item, prereleases=prereleases, installed=installed)

    monkeypatch.setattr(SpecifierSet, "contains", contains)
    monkeypatch.setattr(versions, "_verdicts", {})


def test_a_pre_release_counts_as_the_version_it_is(packaging_before_26):
    """versions.x_satisfies__mutmut_8 (``prereleases=None``) and _10 (``prereleases`` left out): under packaging < 26
    either would refuse every pre-release. 0.6.5rc1 is newer than 0.6.4, so it meets ``>=0.6.4``; 0.6.4rc1 is older
    than 0.6.4, so it does not (the module doc); 0.6.9rc1 is inside ``>=0.6.4,<0.7``; 0.7.0rc1 is not under ``<0.7``
    (PEP 440: an exclusive ``<V`` leaves out the pre-releases of V itself)."""
    assert versions.satisfies("0.6.5rc1", ">=0.6.4") is True
    assert versions.satisfies("0.6.4rc1", ">=0.6.4") is False
    assert versions.satisfies("0.6.9rc1", ">=0.6.4,<0.7") is True
    assert versions.satisfies("0.7.0rc1", "<0.7") is False


# --------------------------------------------------------------------------------------------------------- plans
@pytest.fixture(scope="module")
def plan() -> Plan:
    r = moe_select.explain({"arch": "sm90", "quant": "bf16", "model": MODEL})
    assert r.plan is not None
    return r.plan


def test_to_json_writes_pydantics_json_form(plan):
    """plans.xǁPlanǁto_json__mutmut_8 (``mode=None``) and _10 (``mode="JSON"``): both dump in Python mode, so a path
    in the plan's free-form parameters stops json.dumps (TypeError) and an infinite float would be written as
    ``Infinity``, which is not JSON. In JSON mode the path is its text and the infinity null."""
    p = Plan.model_validate({**plan.model_dump(), "quant_params": {"table": Path("/tables/moe.json"),
                                                                    "limit": float("inf")}})

    def refuse(name: str) -> None:
        raise AssertionError(f"not JSON: {name}")

    text = p.to_json()
    assert json.loads(text, parse_constant=refuse)["quant_params"] == {"table": "/tables/moe.json", "limit": None}
    assert text.endswith("}\n")


def test_the_fingerprint_hashes_the_deployment_in_json_form(plan):
    """plans.x_fingerprint__mutmut_9 (the deployment dumped with ``mode="JSON"``, i.e. Python mode): a path among the
    deployment's quantization parameters hashes as its text, the way the plan's JSON writes it (in Python mode
    json.dumps raises TypeError), and an infinite one as null."""
    dep, env = plan.deployment, plan.environment

    def fp(params: dict) -> str:
        return fingerprint(dep.model_copy(update={"quant_params": params}), env, {"rules/x.yaml": "0" * 64}, "triton")

    assert fp({"table": Path("/tables/moe.json")}) == fp({"table": "/tables/moe.json"})
    assert fp({"limit": float("inf")}) == fp({"limit": None})
    assert fp({"limit": 1.0}) != fp({"limit": None})


# ---------------------------------------------------------------------------------------------------- conditions
def test_fix_options_computes_the_facts_at_each_tp_ep_once_per_shared_memo(monkeypatch):
    """conditions.x_fix_options__mutmut_54 (the facts memoized under ``"XXfactsXX"``, read under ``"facts"``: never
    found again), from the fresh local run s9b (36d8aaa): fix_options' docstring promises that calls sharing a memo
    (the engines of one deployment, each runner's constraints) compute the facts at each (tp, ep) once. Two calls with
    two constraints over one memo: the second call derives no facts again."""
    from moe_select import conditions as C

    calls: list[tuple[int, int]] = []
    real = C.with_parallelism
    monkeypatch.setattr(C, "with_parallelism", lambda f, t, e: calls.append((t, e)) or real(f, t, e))
    facts = C.facts_of(arch="sm90", quant="bf16", a2a="none", activation="silu", routing="renormalize", cuda_graph=True,
                       tp=8, ep=8, num_experts=64, top_k=2, hidden_size=1024, moe_intermediate_size=256)
    memo: dict = {}
    # both constraints stay alive: the memo keys verdicts by id(constraint), which a freed object's successor can reuse
    at_most_4, at_most_2 = C.Constraint(field="ep", max=4, source="x"), C.Constraint(field="ep", max=2, source="x")
    C.fix_options(at_most_4, [facts], max_tp=8, memo=memo)
    first = len(calls)
    assert first > 0 and len(set(calls)) == first          # each (tp, ep) derived once in the first call
    C.fix_options(at_most_2, [facts], max_tp=8, memo=memo)
    assert len(calls) == first                              # the second call reads them from the memo
