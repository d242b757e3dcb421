"""Shared fixtures: paths to the bundled real model configs and the startup cases."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "examples" / "model_configs"
CASES = Path(__file__).resolve().parent / "cases" / "startup_cases.yaml"


@pytest.fixture
def configs() -> Path:
    return CONFIGS


def explain_json(capsys, argv: list[str]) -> tuple[int, dict]:
    """Run ``moe-select explain ... --json`` in-process; return (exit code, parsed JSON)."""
    from moe_select.cli import main

    rc = main(["explain", *argv, "--json"])
    out = capsys.readouterr().out
    return rc, (json.loads(out) if out.strip() else {})
