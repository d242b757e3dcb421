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
