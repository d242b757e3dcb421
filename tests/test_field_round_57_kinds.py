"""Field round 57 of issue 21 (tests/cases/field_round_57.yaml, sgl-project/sglang#30210), fixed as two kinds and tested
on deployments other than the round's case:

- what an engine gives a speculative draft's MTP layers when the launch names no runner for them (SGLang: the target's
  resolved runner) is predicted beside their plan, with the selector's verdict on it and the flag that runs the plan
  (moe_select/engine_choice.py DraftChoice); moe-select's own plan for those layers is unchanged;
- a kernel package the deployment does not declare is judged at the version the declared engine release pins
  (backends/engines/pins.yaml: its PyPI wheel's exact requirement), not at the newest version the facts were checked
  at: FlashInfer 0.6.12 under SGLang 0.5.15, whose BF16 TRT-LLM-gen launcher reads past its intermediates."""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.releases import pinned, pins, releases
from report_helpers import report_codes

ROOT = Path(__file__).resolve().parents[1]
NVFP4 = str(ROOT / "examples/model_configs/nvidia__DeepSeek-V3.1-NVFP4")


def _dep(version: str, **more):
    return {"gpu": "B200", "engine": "sglang", "engine_version": version, "model_config": NVFP4, "tp": 8,
            "speculative": True, **more}


def _mtp(report):
    return next(s for s in report.layers if s.deployment.layer_kind == "mtp")


def _draft(report):
    ch = next(c for c in report.engine_choices if c.engine == "sglang")
    return ch, ch.drafts


@pytest.mark.parametrize("version", ["0.5.13", "0.5.16", "0.5.18"])
def test_the_engines_draft_runner_is_predicted_and_refused_at_the_releases_flashinfer(version):
    r = moe_select.explain(_dep(version))
    ch, [d] = _draft(r)
    assert ch.runner == "flashinfer_trtllm" and d.runner == "flashinfer_trtllm" and d.evidence == "refused"
    assert "flashinfer-python >=0.6.18rc2" in d.cost and f"the version sglang {version} pins" in d.cost
    assert r.plan is not None and _mtp(r).plan is not None
    plan = _mtp(r).plan.runner
    assert plan != "flashinfer_trtllm" and d.plan_runner == plan
    assert d.follow == f"--speculative-moe-runner-backend {plan}"
    text = r.render_text()
    assert "mtp layers 61: runner flashinfer_trtllm" in text and "to run their plan: --speculative-moe-runner-backend" in text


def test_from_0_5_19_the_pinned_flashinfer_runs_the_inherited_draft():
    r = moe_select.explain(_dep("0.5.19"))
    _, [d] = _draft(r)
    assert d.runner == "flashinfer_trtllm" and d.evidence != "refused"


def test_a_declared_flashinfer_wins_over_the_pin():
    r = moe_select.explain(_dep("0.5.15", packages={"flashinfer-python": "0.6.18"}))
    _, [d] = _draft(r)
    assert d.evidence != "refused"


def test_no_draft_prediction_where_the_deployment_names_the_draft_runner_or_the_target():
    for more in ({"layer_runners": {"mtp": "triton"}}, {"runner": "flashinfer_trtllm"}):
        r = moe_select.explain(_dep("0.5.15", **more))
        _, drafts = _draft(r)
        assert drafts == [], more
    # without speculative decoding no mtp layer is planned: nothing to predict
    r = moe_select.explain(_dep("0.5.15", speculative=False))
    assert _draft(r)[1] == []


def test_an_explicit_draft_runner_is_refused_at_the_pin():
    r = moe_select.explain(_dep("0.5.17", layer_runners={"mtp": "flashinfer_trtllm"}))
    assert r.plan is None or _mtp(r).plan is None
    said = [x for x in _mtp(r).reasons if x.code == "dependency_missing"]
    assert said and "flashinfer-python assumed 0.6.15.post1, the version sglang 0.5.17 pins (not declared)" in said[0].detail
    assert "declare it" in said[0].fix
    assert "dependency_missing" in report_codes(r)


def test_an_engine_version_not_given_keeps_the_newest_checked():
    dep = _dep("0.5.15", layer_runners={"mtp": "flashinfer_trtllm"})
    del dep["engine_version"]
    r = moe_select.explain(dep)
    assert not [x for x in _mtp(r).reasons if x.code == "dependency_missing" and "pins" in x.detail]


def test_pinned_lookup():
    assert pinned("sglang", "0.5.15", "flashinfer-python") == "0.6.12"
    assert pinned("sglang", "0.5.15+cu130", "flashinfer-python") == "0.6.12"
    assert pinned("vllm", "0.34.0", "flashinfer-python") == "0.7.3"
    assert pinned("vllm", "0.10.0", "flashinfer-python") is None      # vLLM pinned torch only then
    assert pinned("sglang", "0.5.99", "flashinfer-python") is None    # a release not read is not guessed
    assert pinned("sglang", None, "torch") is None


def test_pins_name_known_packages_and_released_versions():
    from moe_select.catalog import default_catalog

    known = set(default_catalog().packages_table)
    dated = releases().engines
    for engine, rels in pins().engines.items():
        for release, row in rels.items():
            assert release in dated[engine], (engine, release)
            assert set(row) <= known, (engine, release, set(row) - known)


def test_the_pin_refuses_what_the_release_installs_without():
    """SGLang 0.5.12 pins sgl-deep-gemm 0.1.0, which has no BF16 grouped GEMM (deep_gemm.yaml's >=0.1.1 need): its bf16
    DeepGEMM runner is refused at the pin, and planned once a newer one is declared."""
    qwen = str(ROOT / "examples/model_configs/Qwen__Qwen3-30B-A3B")
    dep = {"gpu": "H200", "engine": "sglang", "engine_version": "0.5.12", "model_config": qwen, "tp": 4, "ep": 4,
           "a2a": "deepep", "runner": "deep_gemm"}
    r = moe_select.explain(dep)
    said = [x.detail for x in r.reasons if x.code == "dependency_missing"]
    assert r.plan is None and any("sgl-deep-gemm assumed 0.1.0, the version sglang 0.5.12 pins" in d for d in said), said
    ok = moe_select.explain({**dep, "packages": {"sgl-deep-gemm": "0.1.2"}})
    assert ok.plan is not None and ok.plan.runner == "deep_gemm", report_codes(ok)
