"""Issue 17, rows 8, 9, 11 and 14: `check` on the README's own override example, `run --nproc` refusals,
`--version` and the plan's writer, and the CLI at the lowest supported pydantic. Planning only: no torch."""
from __future__ import annotations

import re
from pathlib import Path

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
    that changes no runner. Now: exit 0, two notes, no warning."""
    (tmp_path / "ops.yaml").write_text(_readme_override_example(), encoding="utf-8")
    rc = main(["check", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.rstrip().endswith("0 error(s), 0 warning(s), 2 note(s)"), out
    notes = [line for line in out.splitlines() if ": note: " in line]
    assert [n.split(": note: ")[0] for n in notes] == ["rules/10-nvidia.yaml:11", "rules/10-nvidia.yaml:16"], out
    assert all("prefers deep_gemm, which rule no-deep-gemm-on-our-driver" in n and "it still chooses among triton" in n
               for n in notes), out
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
