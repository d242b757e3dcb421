"""Evidence decisions of the capability files (issue 18): every bundled runner and all-to-all file decides each
list kind (``lists:``), an exhaustive decision cites upstream code at a commit, and ``moe-select check``
reports a schema-3 file that leaves a kind undecided or cites something else as an error (file:line), and a
schema-2 file (read with every list open) as a warning."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import moe_select
from moe_select.capability import A2A_LIST_KINDS, LIST_KINDS, UPSTREAM_CODE_PATTERN, Exhaustive
from moe_select.catalog import load_catalog
from moe_select.cli import main
from moe_select.lint import check, evidence_findings, lint_catalog

UPSTREAM = "example-org/example-kernels@0123456789ab:src/moe.py:Experts._supports_quant_scheme"


def runner_file(name: str, *, schema: int = 3, lists: str | None = None) -> str:
    """A minimal runner file on sm90 / bf16 (``lists`` is the YAML of its ``lists:`` block, indented)."""
    text = textwrap.dedent(f"""\
        schema_version: {schema}
        runner: {name}
        summary: test runner {name}
        source: "{UPSTREAM}"
        support:
          - archs: [sm90]
            formats: [bf16]
            source: "{UPSTREAM}"
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
        """)
    return text + (f"lists:\n{lists}" if lists is not None else "")


def all_open(skip: tuple[str, ...] = ()) -> str:
    return "".join(f"  {k}: open\n" for k in LIST_KINDS if k not in skip)


def findings_for(tmp_path: Path, name: str, text: str):
    caps = tmp_path / name  # a folder per file: findings of one file only
    caps.mkdir()
    (caps / f"{name}.yaml").write_text(text)
    catalog = load_catalog(backends_dirs=[caps], use_env=False, plugins=False)
    return [f for f in lint_catalog(catalog) if f.where.startswith(str(caps)) or name in f.message], caps


# ------------------------------------------------------------------------------------------ bundled tree
def test_every_bundled_runner_and_a2a_file_decides_every_list_kind():
    catalog = load_catalog(use_env=False, plugins=False)
    for name, cap in catalog.runners.items():
        assert cap.schema_version == 3, name
        assert set(cap.lists) == set(LIST_KINDS), (name, sorted(set(LIST_KINDS) - set(cap.lists)))
    for name, acap in catalog.a2a.items():
        assert acap.schema_version == 3, name
        # a file with dispatch_precision facts decides that list too (issue 21)
        assert set(acap.lists) == set(A2A_LIST_KINDS) | ({"dispatch_precision"} if acap.dispatch_precision else set()), name
    assert catalog.common.schema_version == 3
    bundled = Path(moe_select.__file__).resolve().parent.parent / "backends"
    if (bundled / "packages.yaml").is_file():  # a source checkout (installed: moe_select.backends)
        assert "\nschema_version: 3\n" in "\n" + (bundled / "packages.yaml").read_text()


def test_every_bundled_exhaustive_decision_cites_upstream_code_and_says_why():
    catalog = load_catalog(use_env=False, plugins=False)
    pattern = re.compile(UPSTREAM_CODE_PATTERN)
    found = 0
    for cap in [*catalog.runners.values(), *catalog.a2a.values()]:
        for kind, d in cap.lists.items():
            if isinstance(d, Exhaustive):
                found += 1
                assert pattern.match(d.exhaustive), (d.where(), d.exhaustive)
                assert d.why, (d.where(), kind)
    assert found >= 20  # the upstream checks read for issue 18 (see the backends' lists: comments)


def test_bundled_tree_checks_clean(capsys):
    findings, _ = check([], use_env=False)
    assert not [f for f in findings if f.severity in ("error", "warning")], [str(f) for f in findings]
    assert evidence_findings(load_catalog(use_env=False, plugins=False).runners.values()) == []
    assert main(["check"]) == 0
    assert "0 error(s), 0 warning(s)" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ the lint
def test_a_schema_3_file_without_a_decision_for_some_kind_is_an_error(tmp_path):
    found, caps = findings_for(tmp_path, "site_partial", runner_file("site_partial", lists=all_open(("a2a", "cuda_graph"))))
    errors = [f for f in found if f.severity == "error" and "has no decision" in f.message]
    assert len(errors) == 1 and "a2a, cuda_graph" in errors[0].message
    assert re.fullmatch(rf"{re.escape(str(caps / 'site_partial.yaml'))}:\d+", errors[0].where), errors[0].where
    # No lists: block at all: every kind is named, at the file.
    found, _ = findings_for(tmp_path, "site_none", runner_file("site_none"))
    errors = [f for f in found if f.severity == "error" and "has no decision" in f.message]
    assert len(errors) == 1 and all(k in errors[0].message for k in LIST_KINDS)


def test_an_exhaustive_decision_citing_no_upstream_code_is_an_error(tmp_path):
    lists = all_open(("formats",)) + '  formats:\n    exhaustive: "vllm-project/vllm#12345"\n    why: a PR\n'
    found, caps = findings_for(tmp_path, "site_pr", runner_file("site_pr", lists=lists))
    errors = [f for f in found if f.severity == "error" and "exhaustive formats list" in f.message]
    assert len(errors) == 1 and "not upstream code" in errors[0].message
    line = int(errors[0].where.rsplit(":", 1)[1])
    assert "exhaustive:" in (caps / "site_pr.yaml").read_text().splitlines()[line - 1]
    lists = all_open(("archs",)) + '  archs:\n    exhaustive: "this project: backends/site.py"\n'
    found, _ = findings_for(tmp_path, "site_own", runner_file("site_own", lists=lists))
    assert any(f.severity == "error" and "exhaustive archs list" in f.message for f in found)
    # Upstream code (optionally followed by more sources) is clean.
    lists = all_open(("archs",)) + f'  archs:\n    exhaustive: "{UPSTREAM}; vllm-project/vllm#1"\n    engines: [vllm]\n'
    found, _ = findings_for(tmp_path, "site_ok", runner_file("site_ok", lists=lists))
    assert not [f for f in found if f.severity in ("error", "warning")], [str(f) for f in found]


def test_a_schema_2_file_is_a_warning_and_reads_as_all_open(tmp_path):
    found, caps = findings_for(tmp_path, "site_old", runner_file("site_old", schema=2))
    warnings = [f for f in found if f.severity == "warning" and "schema_version 2" in f.message]
    assert len(warnings) == 1 and warnings[0].where.startswith(str(caps / "site_old.yaml") + ":")
    assert not [f for f in found if f.severity == "error"]
    # Loaded as all open: an arch outside its list is unverified, not refused.
    r = moe_select.explain({"arch": "sm100", "quant": "bf16", "engine": "vllm", "runner": "site_old",
                            "model": {"num_experts": 8, "top_k": 2, "hidden_size": 1024, "moe_intermediate_size": 512}},
                           backends_dirs=[caps])
    assert r.plan is not None and r.plan.evidence == "unverified"
    assert any(x.code == "arch_unsupported" for x in r.plan.unknowns)


def test_check_command_reports_file_and_line_and_fails(tmp_path, capsys):
    caps = tmp_path / "caps"
    caps.mkdir()
    (caps / "site_partial.yaml").write_text(runner_file("site_partial", lists=all_open(("engines",))))
    assert main(["check", str(caps)]) == 1
    out = capsys.readouterr().out
    assert re.search(rf"{re.escape(str(caps / 'site_partial.yaml'))}:\d+: runner site_partial: lists: has no decision "
                     r"for engines", out), out
