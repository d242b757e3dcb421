"""Every real startup case (tests/cases/startup_cases.yaml) and every case from public failure reports
(tests/cases/field_cases.yaml, the team's; tests/cases/own_field_cases.yaml, found by an independent check)
through `moe-select explain --deployment FILE --json`."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from conftest import CASES, explain_json

CASE_LIST = yaml.safe_load(CASES.read_text())["cases"]
FIELD_CASES = yaml.safe_load((CASES.parent / "field_cases.yaml").read_text())["cases"]
OWN_CASES = yaml.safe_load((CASES.parent / "own_field_cases.yaml").read_text())["cases"]
ALL_CASES = CASE_LIST + FIELD_CASES + OWN_CASES


def run_case(case: dict, tmp_path, capsys) -> tuple[int, dict]:
    """``explain --deployment FILE --json`` of a case's deployment (its model_config relative to the cases folder, as
    the deployment format says): ``(exit code, report)``."""
    dep = dict(case["deployment"])
    if "model_config" in dep:
        dep["model_config"] = str((CASES.parent / dep["model_config"]).resolve())
    f = tmp_path / "deployment.yaml"
    f.write_text(yaml.safe_dump(dep))
    return explain_json(capsys, ["--deployment", str(f)])


def check_expect(case: dict, rc: int, out: dict) -> None:
    """A case's ``expect``: status (and its exit code), reason codes, runner, runner_in, runner_not_in, evidence."""
    expect = case["expect"]
    assert out["status"] == expect["status"], out["reasons"]
    assert rc == (0 if expect["status"] == "ok" else 1)
    codes = {r["code"] for r in out["reasons"]}
    if "reason_in" in expect:
        assert codes & set(expect["reason_in"]), f"{case['id']}: got {sorted(codes)}"
    runner = out["plan"]["runner"] if out["plan"] else None
    if "runner" in expect:
        assert runner == expect["runner"]
    if "runner_in" in expect:
        assert runner in expect["runner_in"]
    if "runner_not_in" in expect:
        assert runner not in expect["runner_not_in"]
    if "evidence" in expect:
        assert out["evidence"] == expect["evidence"]


@pytest.mark.parametrize("case", ALL_CASES, ids=[c["id"] for c in ALL_CASES])
def test_startup_case(case, tmp_path, capsys):
    rc, out = run_case(case, tmp_path, capsys)
    check_expect(case, rc, out)
    # Every reason carries a source file:line and a detail.
    for r in out["reasons"]:
        assert r["detail"] and ":" in r["source"], r


def test_relative_model_config_resolves_against_the_deployment_file(tmp_path, capsys, configs):
    (tmp_path / "sub").mkdir()
    f = tmp_path / "sub" / "d.yaml"
    rel = "../" + str(configs.relative_to(configs.anchor)) if False else None
    import os

    rel = os.path.relpath(configs / "Qwen__Qwen3-30B-A3B-FP8", f.parent)
    f.write_text(f"gpu: H100\nmodel_config: {rel}\ntp: 8\nep: 8\n")
    rc, out = explain_json(capsys, ["--deployment", str(f)])
    assert rc == 0 and out["deployment"]["quant"] == "fp8_block"


def test_explain_imports_no_torch(tmp_path):
    """The planning path stays light. (Its latency is measured by benchmarks/explain_latency.py, not
    asserted here.)"""
    f = tmp_path / "d.yaml"
    f.write_text(yaml.safe_dump(CASE_LIST[0]["deployment"]))
    code = (
        "import sys; from moe_select.cli import main; "
        f"rc = main(['explain', '--deployment', {str(f)!r}, '--json']); "
        "assert 'torch' not in sys.modules, 'explain imported torch'; sys.exit(rc)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 1, p.stderr  # the first case is a refusal
    assert json.loads(p.stdout)["status"] == "rejected"


S3_CASES = yaml.safe_load((CASES.parent / "field_cases_s3.yaml").read_text())["cases"]


@pytest.mark.parametrize("case", S3_CASES, ids=[c["id"] for c in S3_CASES])
def test_field_case_s3_is_valid_input(case, tmp_path, capsys):
    """Every round-3 field case (tests/cases/field_cases_s3.yaml) is valid input (issue 18): a plan, or a refusal on
    evidence (exit 0 or 1, every reason with a source), never exit 2, whatever names it uses (T4, W4A8, a fused
    all-to-all, TensorRT-LLM). Their runners and evidence levels are the knowledge issues' (see the next test)."""
    rc, out = run_case(case, tmp_path, capsys)
    assert rc in (0, 1) and out["status"] in ("ok", "rejected")
    assert out["evidence"] in ("supported", "unverified", "refused")
    for r in out["reasons"]:
        assert r["detail"] and r["source"], r


@pytest.mark.parametrize("case", S3_CASES, ids=[c["id"] for c in S3_CASES])
def test_field_case_s3_outcome(case, tmp_path, capsys):
    """The round-3 cases' expected outcomes (runner and evidence level). Cases whose facts are not written yet are
    expected failures, listed in XFAIL_S3 with the issue that brings them."""
    if case["id"] in XFAIL_S3:
        pytest.xfail(XFAIL_S3[case["id"]])
    rc, out = run_case(case, tmp_path, capsys)
    check_expect(case, rc, out)


#: Round-3 cases whose facts come with later issues (20: TensorRT-LLM's own backends; 21: the field of 2026).
XFAIL_S3: dict[str, str] = {}
