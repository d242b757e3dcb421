"""An operator's trial (2026-12-06, break54: engine upgrades, speculative decoding, expert parallelism), the defects
fixed as kinds: SGLang's Mega MoE all-to-all from 0.5.21, whose blocks without a fallback never reach the runner (16-bit
experts, and FP8 experts off SM90, fail at the first forward; no Triton prediction for them); its two other spellings,
``--moe-runner-backend megamoe`` (an alias from 0.5.18) and ``SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE=1`` (0.5.12 .. 0.5.17),
read as the all-to-all they set."""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.launch_line import from_command
from report_helpers import report_codes

ROOT = Path(__file__).resolve().parents[1]
QWEN3_BF16 = str(ROOT / "examples/model_configs/Qwen__Qwen3-30B-A3B")
QWEN3_FP8 = str(ROOT / "examples/model_configs/Qwen__Qwen3-30B-A3B-FP8")
DSV3 = str(ROOT / "examples/model_configs/deepseek-ai__DeepSeek-V3")


def _mega(report) -> list[str]:
    return [x.detail for x in report.reasons if x.source.startswith("backends/a2a/megamoe.yaml") and "RuntimeError" in x.detail]


def _mm(gpu: str, cfg: str, version: str, tp: int = 4):
    return moe_select.explain({"gpu": gpu, "engine": "sglang", "engine_version": version, "model_config": cfg, "tp": tp,
                               "ep": tp, "a2a": "megamoe", "max_tokens_per_rank": 4096})


@pytest.mark.parametrize("version, refused", [("0.5.20", False), ("0.5.21", True), ("0.5.23", True)])
def test_a_16_bit_block_without_fallback_is_refused_from_0_5_21(version, refused):
    r = _mm("H100", QWEN3_BF16, version)
    assert bool(_mega(r)) is refused, report_codes(r)
    assert (r.plan is None) is refused


@pytest.mark.parametrize("gpu, refused", [("B200", True), ("H100", False)])
def test_fp8_experts_without_fallback_run_on_sm90_only(gpu, refused):
    r = _mm(gpu, QWEN3_FP8, "0.5.23")
    assert bool(_mega(r)) is refused, report_codes(r)


def test_a_block_with_a_fallback_keeps_its_runner():
    r = _mm("H100", DSV3, "0.5.23", tp=8)
    assert not _mega(r) and r.plan is not None, report_codes(r)
    ch = next(c for c in r.engine_choices if c.engine == "sglang")
    assert ch.runner == "triton" and any(o.hook == "sglang-megamoe-auto-triton-fallback-blocks" for o in ch.overrides)


@pytest.mark.parametrize("version", ["0.5.21", "0.5.23"])
def test_no_triton_prediction_for_a_block_without_fallback(version):
    r = _mm("H100", QWEN3_FP8, version)
    ch = next(c for c in r.engine_choices if c.engine == "sglang")
    assert ch.runner != "triton", ch.how
    old = _mm("H100", QWEN3_FP8, "0.5.20")
    assert next(c for c in old.engine_choices if c.engine == "sglang").runner == "triton"


LINE = "python3 -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B-FP8 --tp 4"


@pytest.mark.parametrize("version", ["0.5.18", "0.5.19", "0.5.23"])
def test_the_runner_alias_is_the_all_to_all(version):
    launch = from_command(LINE + " --moe-runner-backend megamoe", model_config=QWEN3_FP8, engine_version=version)
    d = launch.deployment
    assert d["a2a"] == "megamoe" and d.get("runner", "auto") == "auto" and d["ep"] == 4, d
    assert any(f.kind == "rewritten" and "--moe-a2a-backend megamoe" in f.message for f in launch.findings)


def test_the_runner_alias_with_another_all_to_all_is_an_engine_error():
    launch = from_command(LINE + " --moe-runner-backend megamoe --moe-a2a-backend deepep", model_config=QWEN3_FP8,
                          engine_version="0.5.19")
    assert any(f.kind == "engine_error" and "megamoe" in f.message for f in launch.findings), launch.findings


def test_the_runner_alias_before_0_5_18_is_not_a_choice():
    launch = from_command(LINE + " --moe-runner-backend megamoe", model_config=QWEN3_FP8, engine_version="0.5.17")
    assert launch.deployment.get("a2a", "none") != "megamoe"
    assert any(f.kind == "engine_error" for f in launch.findings)


@pytest.mark.parametrize("version, read", [("0.5.13", True), ("0.5.15", True), ("0.5.17", True), ("0.5.18", False)])
def test_the_mega_moe_switch_sets_the_all_to_all(version, read):
    launch = from_command("SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE=1 " + LINE, model_config=QWEN3_FP8, engine_version=version)
    d = launch.deployment
    assert (d.get("a2a") == "megamoe") is read, (d, [f.message for f in launch.findings])
    if read:
        assert d["ep"] == 4
    off = from_command("SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE=0 " + LINE, model_config=QWEN3_FP8, engine_version=version)
    assert off.deployment.get("a2a", "none") != "megamoe"


# ------------------------------------------------------------------ vLLM: the speculative draft's own moe_backend
NVFP4 = str(ROOT / "examples/model_configs/nvidia__DeepSeek-V3.1-NVFP4")
VLINE = ("vllm serve nvidia/DeepSeek-V3.1-NVFP4 -tp 8 --speculative-config "
         "'{\"method\":\"mtp\",\"num_speculative_tokens\":1%s}'")


@pytest.mark.parametrize("version, read", [("0.27.1", False), ("0.28.0", True), ("0.34.0", True)])
def test_vllm_reads_the_drafts_moe_backend_from_0_28(version, read):
    launch = from_command(VLINE % ',"moe_backend":"triton"' + " --moe-backend flashinfer_trtllm", model_config=NVFP4,
                          engine_version=version)
    mtp = (launch.deployment.get("layer_runners") or {}).get("mtp")
    assert (mtp == "triton") is read, (launch.deployment, [f.message for f in launch.findings])
    if not read:
        assert any("does not read the speculative config's moe_backend" in f.message for f in launch.findings)


def _emit(version: str, flashinfer: str | None = None):
    """A vLLM MTP launch of DeepSeek-V3.1-NVFP4 on B200 whose plan gives the bf16 draft another runner than the NVFP4
    main layers (flashinfer_trtllm's BF16 path is refused below FlashInfer 0.6.18rc2: the release's pin, or the
    FlashInfer declared)."""
    from moe_select.launch_emit import emit

    launch = from_command(VLINE % "", model_config=NVFP4, engine_version=version)
    report = launch.explain(deployment={"gpu": "B200", **({"packages": {"flashinfer-python": flashinfer}} if flashinfer else {})})
    mtp = next(k for k in report.plan.layers if k.deployment.layer_kind == "mtp")
    assert mtp.runner != report.plan.runner, (mtp.runner, report.plan.runner)
    return report, mtp, (lambda: emit(report.plan, "vllm", launch=launch, engine_version=version))


def test_vllm_emit_writes_the_drafts_runner_into_the_speculative_config():
    import json

    report, mtp, run = _emit("0.28.0")
    out = run()
    i = out.argv.index("--speculative-config")
    cfg = json.loads(out.argv[i + 1])
    assert cfg["method"] == "mtp" and cfg["moe_backend"] == mtp.runner, cfg
    assert out.argv[out.argv.index("--moe-backend") + 1] == report.plan.runner


@pytest.mark.parametrize("version, flashinfer", [("0.24.0", None), ("0.29.0", "0.6.17")])
def test_vllm_emit_refuses_a_draft_runner_the_release_cannot_take(version, flashinfer):
    from moe_select.launch_emit import EmitError

    _, _, run = _emit(version, flashinfer)
    with pytest.raises(EmitError, match="speculative draft's MoE layers"):
        run()


# ------------------------------------------------------------------ SGLang: a DeepEP v2 speculative draft
def _fp8_with_bf16_mtp(tmp_path) -> str:
    """DeepSeek-V3's config with its MTP layer (61) left unquantized: the checkpoint's mtp layer kind, bf16."""
    import json

    cfg = json.loads((Path(DSV3) / "config.json").read_text())
    cfg["quantization_config"]["modules_to_not_convert"] = ["model.layers.61"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


@pytest.mark.parametrize("version, draft_a2a, refused", [("0.5.18", None, False), ("0.5.21", None, True),
                                                          ("0.5.23", None, True), ("0.5.23", "none", False)])
def test_sglang_refuses_a_deepep_v2_draft_from_0_5_19(tmp_path, version, draft_a2a, refused):
    dep = {"gpu": "H200", "engine": "sglang", "engine_version": version, "model_config": _fp8_with_bf16_mtp(tmp_path),
           "tp": 8, "ep": 8, "dp": 8, "a2a": "deepep_v2", "speculative": True, "decode_tokens_per_rank": 64,
           **({"layer_a2a": {"mtp": draft_a2a}} if draft_a2a else {})}
    r = moe_select.explain(dep)
    mtp = next(s for s in r.layers if s.deployment.layer_kind == "mtp")
    said = [x for x in mtp.reasons if x.code == "a2a_unsupported" and "not validated as a speculative draft" in x.detail]
    assert bool(said) is refused, report_codes(r)
    assert (r.plan is None) is refused


def test_the_headline_blames_the_asked_runner_before_the_mtp_layers():
    """vLLM 0.34 with --moe-backend flashinfer_trtllm over DeepEP low-latency and MTP: the asked runner is refused for the
    main layers (its exhaustive a2a list), so the summary names it, not the mtp layers."""
    r = moe_select.explain({"gpu": "B200", "engine": "vllm", "engine_version": "0.34.0", "model_config": NVFP4, "tp": 8,
                            "ep": 8, "dp": 1, "a2a": "deepep", "a2a_mode": "low_latency", "runner": "flashinfer_trtllm",
                            "speculative": True, "decode_tokens_per_rank": 64})
    assert r.plan is None
    assert "flashinfer_trtllm rejected" in r.summary() and "no runner for the mtp layers" not in r.summary(), r.summary()
    assert "The main layers have an eligible runner" not in r.render_text()


# --- the draft-only runner key as a table fact (session 34): vLLM's speculative-config moe_backend windows are the
# engine table's draft.own_runner, read by launch_line, launch_emit and deployment alike (they were literals in each)

def test_the_draft_only_runner_key_is_the_vllm_tables():
    from moe_select.engine_tables import table

    rules = table("vllm").draft
    assert rules is not None and rules.own_runner_key == "moe_backend" and not rules.resolved
    assert rules.own_runner_at("0.27.1") is None
    assert rules.own_runner_at("0.28.0").ignored is None
    assert "54788" in rules.own_runner_at("0.29.1").source and rules.own_runner_at("0.29.1").ignored
    assert rules.own_runner_at("0.30.0").ignored is None and rules.own_runner_at(None) is rules.own_runner[-1]
    # the other engines: SGLang's draft flag is a flag of its table (no key); TensorRT-LLM's backend is model-wide
    assert table("sglang").draft.own_runner_key is None and table("sglang").draft.resolved
    assert table("trtllm").draft.own_runner_key is None and not table("trtllm").draft.resolved


def test_an_own_runner_window_without_its_key_is_refused():
    from pydantic import ValidationError

    from moe_select.engine_tables import DraftRules

    with pytest.raises(ValidationError, match="own_runner and own_runner_key come together"):
        DraftRules(inherits=["runner"], source="vllm-project/vllm#54788",
                   own_runner=[{"version": ">=0.28.0", "source": "vllm-project/vllm#54788"}])
    with pytest.raises(ValidationError, match="PEP 440"):
        DraftRules(inherits=["runner"], source="vllm-project/vllm#54788", own_runner_key="moe_backend",
                   own_runner=[{"version": "0.28+", "source": "vllm-project/vllm#54788"}])


@pytest.mark.parametrize("version, why", [("0.27.1", "has no moe_backend"), ("0.29.0", "Model Runner V2"),
                                          ("0.30.0", None)])
def test_emit_follows_the_tables_windows(version, why):
    from moe_select.launch_emit import EmitError

    report, mtp, run = _emit(version, "0.6.17")
    if why is None:
        assert '"moe_backend"' in " ".join(run().argv)
    else:
        with pytest.raises(EmitError, match=why):
            run()
