"""Shared fixtures: paths to the bundled real model configs and the startup cases."""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "examples" / "model_configs"
CASES = Path(__file__).resolve().parent / "cases" / "startup_cases.yaml"


@pytest.fixture(scope="session", autouse=True)
def _private_catalog_cache(tmp_path_factory):
    """The suite's processes share one on-disk catalog cache of their own (moe_select.catalog_cache), and its
    key, not the user's: every test that plans goes through it, so the suite checks cached catalogs too."""
    saved = {name: os.environ.get(name) for name in ("MOE_SELECT_CACHE_DIR", "XDG_STATE_HOME")}
    os.environ["MOE_SELECT_CACHE_DIR"] = str(tmp_path_factory.mktemp("catalog-cache"))
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))  # the cache's key (catalog_cache.key_path)
    yield
    for name, old in saved.items():
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@pytest.fixture(scope="module")
def mxfp4_mtp(tmp_path_factory):
    """A DeepSeek-V3-shaped MXFP4 checkpoint (the shape of nvidia__DeepSeek-V3.1-NVFP4) whose MTP layer 61 stays BF16
    (the dispatch-precision tests: a 16-bit MTP layer behind a forced FP4 dispatch, sgl-project/sglang#20453)."""
    cfg = json.loads((CONFIGS / "nvidia__DeepSeek-V3.1-NVFP4" / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.61", "lm_head"]}
    d = tmp_path_factory.mktemp("mxfp4_mtp")
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.fixture
def configs() -> Path:
    return CONFIGS


def explain_json(capsys, argv: list[str]) -> tuple[int, dict]:
    """Run ``moe-select explain ... --json`` in-process; return (exit code, parsed JSON)."""
    from moe_select.cli import main

    rc = main(["explain", *argv, "--json"])
    out = capsys.readouterr().out
    return rc, (json.loads(out) if out.strip() else {})


#: Set to rerun a failed test with the same random inputs (the seed is printed on failure).
SEED_ENV = "MOE_SELECT_TEST_SEED"


@pytest.fixture
def seed(request) -> int:
    """A fresh random seed per test run (``$MOE_SELECT_TEST_SEED`` fixes it); tests draw their inputs
    from it, so every run checks new inputs and a failure says how to reproduce it."""
    value = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(2**31))
    request.node._moe_seed = value
    return value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    value = getattr(item, "_moe_seed", None)
    if value is not None and report.failed:
        report.sections.append(("random inputs", f"seed {value}: rerun with {SEED_ENV}={value} to reproduce"))
