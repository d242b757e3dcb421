"""Evidence levels (issue 18): supported / refused / unverified, per candidate, per engine and per plan;
``strict``; selection order (supported first); ``not_preferred``; unknown runners and a2a backends.

Each test builds its own runner files in an operator capability folder (``--backends DIR``) and a rule
preferring them (``--rules DIR``), so the outcome depends only on the semantics under test, not on the
bundled facts."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

import moe_select
from moe_select.cli import main
from moe_select.errors import ResolveError
from moe_select.plans import weakest

MODEL = {"num_experts": 8, "top_k": 2, "hidden_size": 1024, "moe_intermediate_size": 512,
         "activation": "silu", "routing": "renormalize"}
UPSTREAM = "example-org/example-engine@0123456789ab:engine/moe/site.py:SiteExperts._supports_current_device"


def runner_file(name: str, *, archs=("sm90",), formats=("bf16",), lists: dict | None = None, extra: str = "",
                support_extra: str = "") -> str:
    """A minimal schema-3 runner file: one support row, silu, pre-computed top-k, standard dispatch, capturable."""
    lists_text = yaml.safe_dump({"lists": lists}, default_flow_style=False) if lists else ""
    return textwrap.dedent(f"""\
        schema_version: 3
        runner: {name}
        summary: test runner {name}
        source: "{UPSTREAM}"
        support:
          - archs: [{', '.join(archs)}]
            formats: [{', '.join(formats)}]
            source: "{UPSTREAM}"
        """) + support_extra + textwrap.dedent(f"""\
        activations:
          - values: [silu]
            source: "{UPSTREAM}"
        routing:
          - values: any
            source: "{UPSTREAM}"
        dispatch:
          - formats: [standard]
            source: "{UPSTREAM}"
        cuda_graph:
          - supported: true
            source: "{UPSTREAM}"
        """) + lists_text + extra


def setup(tmp_path: Path, runners: dict[str, str], prefer: list[str], arch: str = "sm89") -> tuple[Path, Path]:
    caps, rules = tmp_path / "caps", tmp_path / "rules"
    caps.mkdir(parents=True)
    rules.mkdir(parents=True)
    for name, text in runners.items():
        (caps / f"{name}.yaml").write_text(text)
    (rules / "50-site.yaml").write_text(yaml.safe_dump({"schema_version": 1, "rules": [
        {"id": "site-first", "when": {"arch": [arch]}, "prefer": prefer}]}))
    return caps, rules


def explain(dep: dict, caps: Path, rules: Path):
    return moe_select.explain({"gpu": None, "model": MODEL, **dep}, backends_dirs=[caps], rules_dirs=[rules])


def cand(report, name):
    return next(c for c in report.candidates if c.backend == name)


ALL_EXHAUSTIVE = {k: {"exhaustive": UPSTREAM} for k in
                  ("archs", "formats", "support", "activations", "routing", "dispatch", "a2a", "cuda_graph", "engines")}


def test_open_arch_list_is_unverified_not_refused(tmp_path):
    caps, rules = setup(tmp_path, {"site_open": runner_file("site_open", lists={"archs": "open"})}, ["site_open"])
    r = explain({"arch": "sm89", "quant": "bf16", "engine": "vllm", "runner": "site_open"}, caps, rules)
    c = cand(r, "site_open")
    assert c.eligible and c.evidence == "unverified" and r.status == "ok"
    assert r.evidence == "unverified" and r.plan.evidence == "unverified"
    [u] = [x for x in c.unknowns if x.code == "arch_unsupported"]
    assert "sm89" in u.detail and "site_open" in u.settle and u.source.endswith("site_open.yaml:6")  # the support row


def test_exhaustive_arch_list_refuses_citing_the_decision(tmp_path):
    caps, rules = setup(tmp_path, {"site_ex": runner_file("site_ex", lists={"archs": {"exhaustive": UPSTREAM, "why": "cc 9.0 only"}})},
                        ["site_ex"])
    r = explain({"arch": "sm89", "quant": "bf16", "engine": "vllm", "runner": "site_ex"}, caps, rules)
    c = cand(r, "site_ex")
    assert not c.eligible and c.evidence == "refused" and r.status == "rejected" and r.evidence == "refused"
    [reason] = [x for x in c.reasons if x.code == "arch_unsupported"]
    assert "cc 9.0 only" in reason.detail
    text = (caps / "site_ex.yaml").read_text().splitlines()
    line = int(reason.source.rsplit(":", 1)[1])
    assert "site_ex.yaml" in reason.source
    # The decision's own lines: lists -> archs -> exhaustive: <source>.
    assert text[line - 1].strip().startswith("exhaustive:") and text[line - 2].strip() == "archs:", (reason.source, text[line - 2:line])


def test_supported_when_every_part_has_a_fact(tmp_path):
    caps, rules = setup(tmp_path, {"site_sup": runner_file("site_sup", archs=("sm89",), lists=ALL_EXHAUSTIVE)}, ["site_sup"])
    r = explain({"arch": "sm89", "quant": "bf16", "engine": "vllm"}, caps, rules)
    assert r.plan.runner == "site_sup" and r.plan.evidence == "supported" and not r.plan.unknowns


def test_negative_row_refuses(tmp_path):
    neg = (f"  - archs: [sm89]\n    formats: [fp8_tensor]\n    supported: false\n    source: \"{UPSTREAM}\"\n")
    caps, rules = setup(tmp_path, {"site_neg": runner_file("site_neg", archs=("sm89",), formats=("bf16", "fp8_tensor"),
                                                           support_extra=neg)}, ["site_neg"])
    r = explain({"arch": "sm89", "quant": "fp8_tensor", "engine": "vllm", "runner": "site_neg"}, caps, rules)
    c = cand(r, "site_neg")
    assert not c.eligible and [x.code for x in c.reasons] == ["quant_unsupported"]
    assert c.reasons[0].source.endswith("site_neg.yaml:9")  # the negative row


def test_failed_version_gate_refuses_even_on_open_lists(tmp_path):
    gated = (f"  - archs: [sm89]\n    formats: [fp8_tensor]\n    requires: {{flashinfer-python: \">=9.9\"}}\n"
             f"    source: \"{UPSTREAM}\"\n")
    caps, rules = setup(tmp_path, {"site_gate": runner_file("site_gate", archs=("sm89",), support_extra=gated)}, ["site_gate"])
    r = explain({"arch": "sm89", "quant": "fp8_tensor", "engine": "vllm", "runner": "site_gate",
                 "packages": {"flashinfer-python": "0.6.4"}}, caps, rules)
    c = cand(r, "site_gate")
    assert not c.eligible and c.reasons[0].code == "quant_unsupported"
    assert "flashinfer-python >=9.9" in c.reasons[0].detail and "9.9" in (c.reasons[0].fix or "")


def test_engine_scoped_decision_gives_a_level_per_engine(tmp_path):
    lists = {"archs": {"exhaustive": UPSTREAM, "engines": ["vllm"]}}
    caps, rules = setup(tmp_path, {"site_eng": runner_file("site_eng", lists=lists)}, ["site_eng"])
    r = explain({"arch": "sm89", "quant": "bf16", "runner": "site_eng"}, caps, rules)  # engine: any
    c = cand(r, "site_eng")
    assert c.evidence_by_engine["vllm"] == "refused"
    assert c.evidence_by_engine["sglang"] == "unverified" and c.evidence == "unverified"
    assert "vllm" not in c.engines and "sglang" in c.engines
    assert r.plan.evidence_by_engine == c.evidence_by_engine


def test_supported_candidates_first_then_unverified_in_rule_order(tmp_path):
    caps, rules = setup(tmp_path, {"site_a_unv": runner_file("site_a_unv", archs=("sm90",)),
                                   "site_b_sup": runner_file("site_b_sup", archs=("sm89",), lists=ALL_EXHAUSTIVE)},
                        ["site_a_unv", "site_b_sup"])
    r = explain({"arch": "sm89", "quant": "bf16", "engine": "vllm"}, caps, rules)
    assert r.plan.runner == "site_b_sup" and r.plan.evidence == "supported"
    order = [c.backend for c in r.candidates]
    # Every eligible supported candidate (the bundled rules' too) before the first unverified one.
    levels = [c.evidence for c in r.candidates if c.eligible and c.preferred_by]
    assert levels == sorted(levels, key=["supported", "unverified"].index), levels
    assert order[0] == "site_b_sup" and order.index("site_a_unv") > order.index("triton")
    # Without a supported one, the unverified one is chosen, and says so.
    caps2, rules2 = setup(tmp_path / "two", {"site_a_unv": runner_file("site_a_unv", archs=("sm90",))}, ["site_a_unv"])
    from moe_select.catalog import load_catalog

    bundled = sorted(load_catalog(use_env=False).runners)
    (rules2 / "60-off.yaml").write_text(yaml.safe_dump({"schema_version": 1, "rules": [
        {"id": "bundled-off", "when": {"arch": ["sm89"]}, "disable": bundled, "reason": "test: only site runners"}]}))
    r2 = explain({"arch": "sm89", "quant": "bf16", "engine": "vllm"}, caps2, rules2)
    assert r2.plan.runner == "site_a_unv" and r2.plan.evidence == "unverified"


def test_strict_refuses_unverified_with_its_own_code(tmp_path, capsys):
    caps, rules = setup(tmp_path, {"site_open": runner_file("site_open")}, ["site_open"])
    base = ["explain", "--arch", "sm89", "--quant", "bf16", "--engine", "vllm", "--runner", "site_open",
            "--model", ",".join(f"{k}={v}" for k, v in MODEL.items()), "--backends", str(caps), "--rules", str(rules), "--json"]
    assert main(base) == 0
    out = capsys.readouterr()
    j = json.loads(out.out)
    assert j["status"] == "ok" and j["evidence"] == "unverified" and j["plan"]["evidence"] == "unverified"
    site = next(c for c in j["candidates"] if c["backend"] == "site_open")
    assert site["evidence"] == "unverified" and site["unknowns"]
    warn = [line for line in out.err.splitlines() if "warning" in line]
    assert len(warn) == 1 and "unverified" in warn[0] and "--strict" in warn[0]
    assert main(base + ["--strict"]) == 1
    j = json.loads(capsys.readouterr().out)
    assert j["status"] == "rejected" and j["evidence"] == "refused"
    assert {r["code"] for r in j["reasons"]} == {"unverified"}


def test_not_preferred_is_its_own_reason(tmp_path):
    caps, rules = setup(tmp_path, {"site_x": runner_file("site_x", archs=("gfx950",), lists=ALL_EXHAUSTIVE),
                                   "site_y": runner_file("site_y", archs=("gfx950",), lists=ALL_EXHAUSTIVE)},
                        ["site_x"], arch="gfx950")
    # A disable rule removes the preferred one: site_y runs, but no rule prefers it.
    (rules / "60-off.yaml").write_text(yaml.safe_dump({"schema_version": 1, "rules": [
        {"id": "site-x-off", "when": {"arch": ["gfx950"]}, "disable": ["site_x"], "reason": "test"}]}))
    r = explain({"arch": "gfx950", "quant": "bf16", "engine": "vllm"}, caps, rules)
    np = [x for x in r.reasons if x.code == "not_preferred" and x.backend == "site_y"]
    if r.plan is None:
        assert np and "runner: site_y" in np[0].fix
    else:  # a bundled rule may prefer some other eligible runner on gfx950: then site_y is simply an alternative
        assert r.plan.runner != "site_y" and "site_y" in r.plan.alternatives


def test_unknown_runner_and_a2a_are_judged_not_invalid(tmp_path, capsys):
    caps, rules = setup(tmp_path, {"site_open": runner_file("site_open")}, ["site_open"])
    # a vLLM release newer than the tables read may take the name (its runner option, as read, does not: without a
    # version, or at a release read, the name is refused: tests/test_trial_2026_12_04b_kinds.py)
    r = explain({"arch": "sm90", "quant": "bf16", "engine": "vllm", "engine_version": "0.40.0", "runner": "brand_new_runner"},
                caps, rules)
    assert r.plan is not None and r.plan.runner == "brand_new_runner" and r.plan.evidence == "unverified"
    assert r.plan.module is None
    assert any(x.code == "no_adapter" and "brand_new_runner" in x.detail for x in r.plan.unknowns)
    r = explain({"arch": "sm90", "quant": "bf16", "engine": "vllm", "tp": 2, "ep": 2, "a2a": "brand_new_a2a",
                 "runner": "site_open"}, caps, rules)
    c = cand(r, "site_open")
    assert c.eligible and any(x.code == "a2a_unsupported" and "brand_new_a2a" in x.detail for x in c.unknowns)


def test_exhaustive_a2a_list_refuses_an_unknown_a2a(tmp_path):
    extra = textwrap.dedent(f"""\
        a2a:
          - values: [none]
            source: "{UPSTREAM}"
        """)
    caps, rules = setup(tmp_path, {"site_a2a": runner_file("site_a2a", lists={"a2a": {"exhaustive": UPSTREAM}}, extra=extra)},
                        ["site_a2a"])
    r = explain({"arch": "sm90", "quant": "bf16", "engine": "vllm", "tp": 2, "ep": 2, "a2a": "brand_new_a2a",
                 "runner": "site_a2a"}, caps, rules)
    c = cand(r, "site_a2a")
    assert not c.eligible and c.reasons[0].code == "a2a_unsupported"


def test_schema_2_file_loads_with_every_list_open(tmp_path):
    text = runner_file("site_v2", archs=("sm90",)).replace("schema_version: 3", "schema_version: 2")
    caps, rules = setup(tmp_path, {"site_v2": text}, ["site_v2"])
    r = explain({"arch": "sm89", "quant": "bf16", "engine": "vllm", "runner": "site_v2"}, caps, rules)
    assert cand(r, "site_v2").evidence == "unverified"


def test_schema_2_file_with_lists_is_an_error(tmp_path):
    text = runner_file("site_v2l", lists={"archs": "open"}).replace("schema_version: 3", "schema_version: 2")
    caps, rules = setup(tmp_path, {"site_v2l": text}, ["site_v2l"])
    with pytest.raises(moe_select.InputError, match="schema_version 3"):
        explain({"arch": "sm89", "quant": "bf16", "runner": "site_v2l"}, caps, rules)


def test_weakest_level():
    assert weakest(["supported", "unverified"]) == "unverified"
    assert weakest(["supported", "supported"]) == "supported"
    assert weakest(["unverified", "refused", "supported"]) == "refused"
    assert weakest([]) == "supported"


def test_resolve_strict_refuses_an_unverified_plan(tmp_path):
    caps, rules = setup(tmp_path, {"site_open": runner_file("site_open", archs=("sm90",))}, ["site_open"])
    r = explain({"arch": "cpu", "quant": "bf16", "engine": "moe_select", "runner": "torch_native", "cuda_graph": False}, caps, rules)
    plan = r.plan
    assert plan is not None
    from moe_select.resolver import strict_reasons

    if plan.evidence == "unverified":
        assert strict_reasons(plan, True) and all(x.code == "unverified" for x in strict_reasons(plan, True))
    assert strict_reasons(plan, False) == []
    fake = plan.model_copy(update={"evidence": "unverified", "unknowns": []})
    [x] = strict_reasons(fake, True)
    assert x.code == "unverified"
    with pytest.raises(ResolveError) as e:
        moe_select.resolve(fake, strict=True)
    assert any(x.code == "unverified" for x in e.value.reasons)
