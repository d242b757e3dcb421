"""Tests that kill mutants the mutation run (benchmarks/mutation.py, issue 19) found surviving.

Each test names the mutant(s) it kills as mutmut prints them (``module.x_function__mutmut_N``) and the change.

Equivalent mutants (no observable change), one line each:

- plans.xǁPlanǁto_json__mutmut_4 (``sort_keys=None``) and __mutmut_7 (``sort_keys`` left out): json.dumps's
  default is False and it only tests truth, so the text is byte-identical.
- plans.xǁPlanǁto_json__mutmut_8, 9, 10 (``model_dump(mode=None / 'XXjsonXX' / 'JSON')``): pydantic 2.14 treats
  any mode but ``'json'`` as python mode, and a plan holds only str, int, float, bool, None, list and dict (no
  tuple, set, Path, date, enum or bytes field anywhere in Plan's models; the Any-typed quant_params and
  layer_kinds hold JSON or yamlio values, YAML 1.2 core, dates kept as strings; floats, inf included, dump the
  same in both modes), so json.dumps writes the same text. The same holds for plans.x_fingerprint's ``mode`` mutants
  (__mutmut_4, 6, 8, 9 on the deployment, 23, 25, 27, 28 on the environment; the only fingerprint mutants that
  survive this file when applied by hand).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from moe_select import plans, versions


def test_parse_specifier_reads_the_text_it_is_given():
    """Kills versions.x_parse_specifier__mutmut_1 (``SpecifierSet(spec)`` -> ``SpecifierSet(None)``)."""
    spec = versions.parse_specifier(">=0.6.4,<0.7")
    assert "0.6.5" in spec and "0.7.0" not in spec and "0.6.3" not in spec


def test_parse_specifier_error_names_the_first_60_characters():
    """Kills versions.x_parse_specifier__mutmut_2 (message -> None) and __mutmut_3 (``spec[:60]`` -> ``spec[:61]``)."""
    spec = "x" * 70
    with pytest.raises(ValueError) as err:
        versions.parse_specifier(spec)
    assert str(err.value).startswith(f"version specifier {spec[:60]!r} is not a PEP 440 specifier")


@pytest.mark.parametrize(("version", "minimum", "met"), [("12.4", "12.4", True), ("12.3", "12.4", False),
                                                          ("12.8", "12.4", True), ("13.0", "12.10", True)])
def test_at_least(version, minimum, met):
    """Kills versions.x_at_least__mutmut_1..3 (``parse_version(None)`` on either side; ``>=`` -> ``>``): no
    selected test reached at_least (the nvcc minimum of toolchain facts)."""
    assert versions.at_least(version, minimum) is met


def test_parse_version_error_names_the_first_60_characters():
    """Kills versions.x_parse_version__mutmut_2 (message -> None) and __mutmut_3 (``version[:60]`` -> ``[:61]``)."""
    with pytest.raises(ValueError) as err:
        versions.parse_version("x" * 70)
    assert str(err.value) == f"not a version: {'x' * 60!r}"


@pytest.mark.parametrize(("version", "spec", "met"), [("0.7.0rc1", ">=0.6.4", True), ("0.6.4rc1", ">=0.6.4", False)])
def test_satisfies_counts_prereleases_as_the_versions_they_are(monkeypatch, version, spec, met):
    """Kills versions.x_satisfies__mutmut_13 (``prereleases=True`` -> False: ``0.7.0rc1`` would not meet
    ``>=0.6.4``). __mutmut_8 and __mutmut_10 (``prereleases=None`` / left out) are equivalent under packaging
    26 (its default accepts a pre-release Version), not under packaging 23 (pyproject's lower bound, which
    CI's lowest-versions step runs): there this test kills them too."""
    monkeypatch.setattr(versions, "_verdicts", {})
    assert versions.satisfies(version, spec) is met


def test_satisfies_answers_remembered_verdicts(monkeypatch):
    """Kills versions.x_satisfies__mutmut_3 (``_verdicts.get(...)`` -> None) and __mutmut_4 (``.get(None)``):
    a verdict taken in by ``remember`` (a cached catalog's) is answered as given, without recomputing it."""
    monkeypatch.setattr(versions, "_verdicts", {})
    versions.remember({("1.0", ">=2"): True})
    assert versions.satisfies("1.0", ">=2") is True
    assert versions.satisfies("1.0", ">=3") is False


def test_known_specifier_is_a_specifier_with_a_verdict(monkeypatch):
    """Kills versions.x_known_specifier__mutmut_2 (``s == spec`` -> ``s != spec``; the H200 run of bc97a02): only a
    specifier some verdict was computed for counts as already parsed, not any specifier beside another one."""
    monkeypatch.setattr(versions, "_verdicts", {})
    assert versions.known_specifier(">=2") is False
    versions.remember({("1.0", ">=2"): True})
    assert versions.known_specifier(">=2") is True
    assert versions.known_specifier("<0.5") is False


# --- moe_select.plans (the mutation run over plans, started at c570f0d) ---------------------------------------------

FIXTURE_PLAN = Path(__file__).parent / "fixtures" / "plan.json"


def _plan(**update: Any) -> plans.Plan:
    """The committed plan fixture (a deep_gemm plan, schema 3) with ``update`` applied to its JSON fields."""
    raw = json.loads(FIXTURE_PLAN.read_text())
    raw.update(update)
    return plans.Plan.model_validate_json(json.dumps(raw))


def test_reason_render_text():
    """Kills plans.xǁReasonǁrender__mutmut_3 (fix shown when None), __mutmut_4 (no fix -> ``XXXX``), __mutmut_5
    (``only`` -> None), __mutmut_6 (engines never shown), __mutmut_9 (``'XX, XX'`` between engines) and __mutmut_10
    (no engines -> ``XXXX``): the exact one-line texts with and without fix and engines."""
    full = plans.Reason(code="no_adapter", detail="no core for fp8_block", source="backends/x.yaml:12",
                        fix="install x", engines=["vllm", "sglang"])
    assert full.render() == "no_adapter: no core for fp8_block (vllm, sglang only) [backends/x.yaml:12] Fix: install x."
    bare = plans.Reason(code="arch_unsupported", detail="sm80 is not sm90", source="rules/10-nvidia.yaml:4")
    assert bare.render() == "arch_unsupported: sm80 is not sm90 [rules/10-nvidia.yaml:4]"


def test_unknown_render_text():
    """Kills plans.xǁUnknownǁrender__mutmut_1 (``only`` -> None), __mutmut_2 (engines never shown), __mutmut_5
    (``'XX, XX'`` between engines) and __mutmut_6 (no engines -> ``XXXX``)."""
    one = plans.Unknown(code="a2a_unsupported", detail="deepep with fp4", settle="a fact on deepep fp4",
                        source="backends/a2a/deepep.yaml:3", engines=["sglang", "trtllm"])
    assert one.render() == ("unverified (a2a_unsupported): deepep with fp4 (sglang, trtllm only) "
                            "[backends/a2a/deepep.yaml:3] Settled by: a fact on deepep fp4.")
    every = plans.Unknown(code="quant_unsupported", detail="mxfp8", settle="a row for mxfp8", source="open:1")
    assert every.render() == "unverified (quant_unsupported): mxfp8 [open:1] Settled by: a row for mxfp8."


def test_plan_to_json_is_two_space_indented_in_field_order():
    """Kills plans.xǁPlanǁto_json__mutmut_3 (``indent=None``), __mutmut_6 (indent left out), __mutmut_11
    (``indent=3``) and __mutmut_12 (``sort_keys=True``): the plan file is indented by two spaces, its keys in the
    model's field order (schema_version first; sorted, ``a2a`` would be), ending in one newline."""
    text = _plan().to_json()
    assert text.startswith('{\n  "schema_version": 3,\n  "runner": "deep_gemm",\n  "evidence": "supported",\n'
                           '  "evidence_by_engine": {\n    "sglang": "supported",\n    "vllm": "supported"\n  },\n')
    assert text.endswith("\n}\n") and not text.endswith("\n\n")
    assert json.loads(text)["fingerprint"] == json.loads(FIXTURE_PLAN.read_text())["fingerprint"]


def test_written_by_brief_names_twelve_hex_digits():
    """Kills plans.xǁWrittenByǁbrief__mutmut_1 (``facts[:19]`` -> ``[:20]``), which no selected test reached:
    ``sha256:`` and the first 12 hex digits of the fact files' digest."""
    w = plans.WrittenBy(package="0.1.0", facts="sha256:0123456789abcdef" + "0" * 48, plan_schema=4)
    assert w.brief() == "moe-select 0.1.0 (fact files sha256:0123456789ab..., plan schema 4)"


def test_range_view_is_the_plan_of_one_range_runner():
    """Kills plans.x_range_view__mutmut_1..19 (update dropped, each key renamed, ``list(None)``, ``or`` -> ``and``),
    which no selected test reached: the view runs ``r``'s runner, module, registers, JIT line and weight layout,
    its activation precision or else the plan's, and has no ranges of its own."""
    plan = _plan(schema_version=4, ranges=[{"max_tokens": 64, "runner": "triton"}, {"max_tokens": None,
                                                                                       "runner": "deep_gemm"}],
                 range_runners=[{"runner": "triton", "module": "m.triton", "registers": ["standard"]},
                                {"runner": "deep_gemm"}])
    r = plans.RangeRunner(runner="triton", module="m.triton", registers=["standard", "deepep_ll"],
                          weight_layout={"w13": "nk"}, activation_precision="bf16", jit="triton JIT at first call")
    view = plans.range_view(plan, r)
    assert (view.runner, view.module, view.registers, view.jit) == ("triton", "m.triton", ["standard", "deepep_ll"],
                                                                    "triton JIT at first call")
    assert view.registers is not r.registers
    assert (view.activation_precision, view.weight_layout) == ("bf16", {"w13": "nk"})
    assert (view.ranges, view.range_runners) == ([], [])
    assert (plan.runner, len(plan.ranges), plan.activation_precision) == ("deep_gemm", 2, "fp8_group")  # not changed
    inherits = plans.range_view(plan, plans.RangeRunner(runner="deep_gemm"))
    assert (inherits.activation_precision, inherits.module, inherits.registers, inherits.jit,
            inherits.weight_layout) == ("fp8_group", None, [], None, None)


def test_canonical_files_names_operator_files_by_their_source():
    """Kills plans.x_canonical_files__mutmut_5 (``name == src`` -> ``!=``), __mutmut_6 (a rule file given as its
    source -> None digest), __mutmut_10 (``rstrip(None)``: a source given with a trailing ``/`` no longer holds its
    files), __mutmut_11 (``lstrip``: no absolute source holds its files), __mutmut_12 (``rstrip('XX/\\\\XX')``: a
    source folder whose name ends in X loses the X; mutmut read it as a timeout) and __mutmut_13 (a file under a
    source -> None digest)."""
    files = {"rules/10-nvidia.yaml": "a1", "backends/triton.yaml": "b2", "/site/oprules/50-site.yaml": "c3",
             "/mnt/r/one.yaml": "d4", "/srv/rulesX/sub/60.yaml": "e5", "/elsewhere/70.yaml": "f6"}
    got = plans.canonical_files(files, ["/site/oprules/", "/mnt/r/one.yaml", "/srv/rulesX"])
    assert list(got.items()) == [("/elsewhere/70.yaml", "f6"), ("[0]/oprules/50-site.yaml", "c3"),
                                 ("[1]/one.yaml", "d4"), ("[2]/rulesX/sub/60.yaml", "e5"),
                                 ("backends/triton.yaml", "b2"), ("rules/10-nvidia.yaml", "a1")]


def test_facts_digest_of_the_bundled_files_only():
    """Kills plans.x_facts_digest mutants that change the text hashed (``'XXXX'`` between lines, other prefix):
    the expected digests are ``sha256sum`` of the literal lines (one ``name digest`` line per bundled file,
    sorted by name; the operator file left out) and of the empty text."""
    files = {"rules/b.yaml": "22", "/op/x.yaml": "33", "backends/a.yaml": "11", "backends/a2a/z.yaml": "44"}
    assert plans.facts_digest(files) == "sha256:19b4dfb5e646e10974a0f68662291c88867627b67e8a5d7ffa1749d6da53440c"
    assert plans.facts_digest({"/op/x.yaml": "33"}) == \
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.mark.parametrize(("levels", "weakest", "strongest"), [
    ([], "supported", "refused"), (["refused", "supported"], "refused", "supported"),
    (["supported", "unverified"], "unverified", "supported"), (["refused", "unverified"], "refused", "unverified"),
    (["unverified", "supported", "refused"], "refused", "supported")])
def test_weakest_and_strongest_evidence(levels, weakest, strongest):
    """Kills plans.x_weakest / x_strongest mutants (no key: the names' alphabetical order; no or other default):
    refused < unverified < supported; an empty list is supported at its weakest, refused at its strongest."""
    assert plans.weakest(levels) == weakest
    assert plans.strongest(levels) == strongest


def _fingerprint_by_definition(plan: plans.Plan, measured: dict[str, Any] | None = None) -> str:
    """The plan fingerprint as its definition states it, over the plan's JSON (pydantic's own serializer): sha256
    of the compact, key-sorted JSON of the deployment (less provenance, notes, model_config_path, input_files),
    the sorted input-file hashes, the environment (less provenance), the files, the runner and, given, measured."""
    d = json.loads(plan.model_dump_json())
    deployment = {k: v for k, v in d["deployment"].items()
                  if k not in ("provenance", "notes", "model_config_path", "input_files")}
    environment = {k: v for k, v in d["environment"].items() if k != "provenance"}
    canon = {"deployment": deployment, "inputs": sorted(d["deployment"]["input_files"].values()),
             "environment": environment, "files": d["files"], "runner": d["runner"]}
    if measured is not None:
        canon["measured"] = measured
    return "sha256:" + hashlib.sha256(json.dumps(canon, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def test_fingerprint_follows_its_definition():
    """Kills plans.x_fingerprint mutants that change the hashed text (a key renamed, ``sort_keys`` off, other
    separators, another prefix, ``measured`` added when None or taken as None): the fingerprint is a wire value
    (every rank, and a later moe-select, recomputes it from the plan's inputs), so it is checked against its
    definition over the plan's JSON, with and without a measured table."""
    plan = _plan()
    files = dict(reversed(list(plan.files.items())))  # given unsorted: the fingerprint sorts them
    assert plans.fingerprint(plan.deployment, plan.environment, files, plan.runner) == _fingerprint_by_definition(plan)
    measured = {"table": "sha256:" + "ab" * 32, "ranges": [{"max_tokens": 64, "runner": "triton"}]}
    assert plans.fingerprint(plan.deployment, plan.environment, files, plan.runner, measured) == \
        _fingerprint_by_definition(plan, measured)


def test_fingerprint_leaves_out_provenance_and_paths():
    """Kills plans.x_fingerprint mutants that stop leaving out a field (``exclude`` dropped or a name in it
    changed): two ranks that read the same values from other paths, with other provenance and notes, agree; a
    model-config file's contents (its hash) count, its path does not."""
    plan = _plan()
    u, env = plan.deployment, plan.environment
    base = plans.fingerprint(u, env, plan.files, plan.runner)
    moved = {f"/mnt/rank1/{Path(k).name}": v for k, v in u.input_files.items()}
    other = u.model_copy(update={"provenance": {"arch": "elsewhere"}, "notes": ["another note"],
                                 "model_config_path": "/mnt/rank1", "input_files": moved})
    assert plans.fingerprint(other, env.model_copy(update={"provenance": {"nvcc": "probed"}}), plan.files,
                             plan.runner) == base
    edited = dict(u.input_files)
    edited[next(iter(edited))] = "0" * 64
    assert plans.fingerprint(u.model_copy(update={"input_files": edited}), env, plan.files, plan.runner) != base
