"""Issue 17, rows 8, 9, 11 and 14: `check` on the README's own override example, `run --nproc` refusals,
`--version` and the plan's writer, and the CLI at the lowest supported pydantic. Planning only: no torch."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from moe_select.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _readme_override_example() -> str:
    """The YAML block of the README's section "Overriding rules", as an operator would copy it."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Overriding rules"):]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------- row 8
def test_check_of_the_readme_override_example_is_clean_with_notes(tmp_path, capsys):
    """Row 8: the README's example (override of hopper-16bit-and-fp8-rowwise, a disable of deep_gemm on sm90)
    exited 1 with two errors (the two fp8_block rules that still have triton) and warned about an override
    that changes no runner. Now: exit 0, a note per sm90 rule that prefers deep_gemm among others, no warning."""
    (tmp_path / "ops.yaml").write_text(_readme_override_example(), encoding="utf-8")
    rc = main(["check", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    covers = sum(": note: no rule covers " in line for line in out.splitlines())  # the bundled tree's (lint.uncovered_findings)
    notes = [line for line in out.splitlines() if ": note: " in line and "no rule covers " not in line]
    # one note per bundled sm90 rule that names deep_gemm and another runner, at its `prefer:` line (read here from
    # the file itself: the rules that prefer deep_gemm come and go with the measurements, issue 26)
    lines = (ROOT / "rules" / "10-nvidia.yaml").read_text(encoding="utf-8").splitlines()
    want = []
    for r in yaml.safe_load("\n".join(lines))["rules"]:
        if "sm90" in (r.get("when") or {}).get("arch", []) and "deep_gemm" in r.get("prefer", []) and len(r["prefer"]) > 1:
            at = lines.index("  - id: " + r["id"])
            at += next(i for i, s in enumerate(lines[at:]) if s.startswith("    prefer:"))
            want.append(f"rules/10-nvidia.yaml:{at + 1}")
    assert len(want) >= 2 and [n.split(": note: ")[0] for n in notes] == want, out
    assert out.rstrip().endswith(f"0 error(s), 0 warning(s), {len(want) + covers} note(s)"), out
    assert all("prefers deep_gemm, which rule no-deep-gemm-on-our-driver" in n and "it still chooses among " in n
               and "deep_gemm" not in n.split("it still chooses among ")[1] for n in notes), out
    assert "warning" not in out.replace("0 warning(s)", "")


def test_check_errors_only_where_a_rule_can_choose_nothing(tmp_path, capsys):
    """A disable that removes every runner of a prefer rule where it matches stays an error (exit 1)."""
    (tmp_path / "ops.yaml").write_text(
        "schema_version: 1\nrules:\n  - id: no-fp8-block-kernels\n    when: {arch: [sm90]}\n"
        "    disable: [deep_gemm, triton, flashinfer_cutlass, cutlass]\n    reason: test\n", encoding="utf-8")
    rc = main(["check", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1
    assert re.search(r"rules/10-nvidia.yaml:\d+: rule hopper-fp8-block never chooses anything: disable rule\(s\) "
                     r"no-fp8-block-kernels", out), out
    assert re.search(r"capability files: [1-9]\d* error\(s\)", out), out


# ------------------------------------------------------------------------------------------ row 11
def _version_lines(capsys) -> list[str]:
    import pytest

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    return capsys.readouterr().out.splitlines()


def test_version_prints_package_fact_files_and_schema_versions(capsys):
    """Row 11: `moe-select --version` did not exist (argparse: exit 2). It prints the package version, the
    bundled fact files' version (a digest of their contents) with the schema_version each format is read in,
    the plan schema version, and the planning dependencies' versions."""
    import importlib.metadata

    import moe_select
    from moe_select.plans import PLAN_SCHEMA_VERSION

    lines = _version_lines(capsys)
    assert lines[0] == f"moe-select {moe_select.__version__}"
    assert importlib.metadata.version("moe-select") == moe_select.__version__  # one version (pyproject reads it)
    assert re.fullmatch(r"fact files sha256:[0-9a-f]{64} \(\d+ bundled capability and rule files; schema_version read: "
                        r"runner [\d/]+, a2a [\d/]+, common [\d/]+, packages [\d/]+, rules [\d/]+\)", lines[1]), lines[1]
    assert lines[2] == f"plan schema_version {PLAN_SCHEMA_VERSION}"
    assert re.fullmatch(r"Python \S+, pydantic \S+, PyYAML \S+, packaging \S+", lines[3]), lines[3]


def test_a_plan_records_its_writer(tmp_path, capsys):
    """Row 11: plans did not record which moe-select wrote them. `written_by` holds the package version, the
    fact files' version as `--version` prints it, and the plan schema version; it is not in the fingerprint."""
    import json

    import moe_select
    from moe_select.plans import PLAN_SCHEMA_VERSION

    facts = _version_lines(capsys)[1].split()[2]
    out = tmp_path / "plan.json"
    assert main(["plan", "--gpu", "H200", "--model-config", str(ROOT / "examples/model_configs/Qwen__Qwen3-30B-A3B"),
                 "-o", str(out)]) == 0
    capsys.readouterr()
    plan = json.loads(out.read_text())
    assert plan["written_by"] == {"package": moe_select.__version__, "facts": facts, "plan_schema": PLAN_SCHEMA_VERSION}
    other = moe_select.Plan.model_validate({**plan, "written_by": {**plan["written_by"], "package": "0.0.1"}})
    assert other.fingerprint == plan["fingerprint"]
    assert moe_select.Plan.model_validate({k: v for k, v in plan.items() if k != "written_by"}).written_by is None


# ------------------------------------------------------------------------------------------ row 14
def test_schemas_in_a_fresh_process(tmp_path):
    """Row 14: `moe-select schemas` in a fresh process with pydantic 2.13.4 (allowed by the bounds) died with
    `TypeError: 'MockValSer' object is not an instance of 'SchemaSerializer'` (Rule.when's default, a model
    whose build is deferred). CI runs this file at the lowest supported pydantic, PyYAML and packaging."""
    import subprocess
    import sys

    from moe_select.schema_gen import SCHEMAS, text_differs

    p = subprocess.run([sys.executable, "-c", "from moe_select.schema_gen import generate; print(len(generate()))"],
                       capture_output=True, text=True, cwd=tmp_path)  # what raised, whatever the pydantic version
    assert (p.returncode, p.stdout, p.stderr) == (0, f"{len(SCHEMAS)}\n", "")
    p = subprocess.run([sys.executable, "-m", "moe_select", "schemas"], capture_output=True, text=True, cwd=tmp_path)
    if text_differs():  # pydantic < 2.11 (CI's lowest-versions step): it says why it cannot check, no traceback
        assert p.returncode == 1 and p.stderr == f"moe-select schemas: {text_differs()}\n", p.stderr
        return
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")
    p = subprocess.run([sys.executable, "-m", "moe_select", "schemas", "--write", "--dir", str(tmp_path)], capture_output=True,
                       text=True, cwd=tmp_path)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert sorted(f.name for f in tmp_path.glob("*.schema.json")) == sorted(f.name for f in (ROOT / "schemas").glob("*.schema.json"))
