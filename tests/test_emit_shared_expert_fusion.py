"""``plan --emit`` and the deployment's ``shared_expert_fusion`` (a stated value is written, or the emit is refused; a
default writes nothing): SGLang's ``--disable-shared-experts-fusion`` (read from a launch line, written back), vLLM's
AITER fusion variable on ROCm, and the engines that cannot be asked for it."""
from __future__ import annotations

from pathlib import Path

import pytest

from moe_select import explain
from moe_select.launch_emit import EmitError, emit
from moe_select.launch_line import from_command

CONFIGS = Path(__file__).resolve().parents[1] / "examples" / "model_configs"
DSV3 = str(CONFIGS / "deepseek-ai__DeepSeek-V3")


def _plan(**dep):
    report = explain({"model_config": DSV3, "tp": 8, **dep})
    assert report.plan is not None, report.summary()
    return report.plan


def test_sglang_fusion_off_is_written_and_read_back():
    out = emit(_plan(gpu="H200", engine="sglang", shared_expert_fusion=False), "sglang")
    assert "--disable-shared-experts-fusion" in out.argv
    back = from_command(out.argv)
    assert back.deployment["shared_expert_fusion"] is False
    assert "--disable-shared-experts-fusion" in back.provenance["shared_expert_fusion"]


def test_a_launch_lines_fusion_switch_survives_emit():
    # read from the user's line, planned, written again: before this the switch was read and then dropped
    line = "python3 -m sglang.launch_server --model-path x --tp 8 --disable-shared-experts-fusion"
    launch = from_command(line, model_config=DSV3)
    report = launch.explain(deployment={"gpu": "H200"})
    assert report.plan is not None and report.plan.deployment.shared_expert_fusion is False
    out = emit(report.plan, "sglang", launch=launch)
    assert out.argv.count("--disable-shared-experts-fusion") == 1


def test_sglang_fusion_on_has_no_switch_and_says_so():
    out = emit(_plan(gpu="H200", engine="sglang", shared_expert_fusion=True), "sglang")
    assert "--disable-shared-experts-fusion" not in out.argv
    assert any("SGLang has no switch that turns it on" in c for c in out.comments)


def test_the_default_writes_nothing():
    for engine in ("sglang", "vllm"):
        out = emit(_plan(gpu="H200", engine=engine), engine)
        assert "--disable-shared-experts-fusion" not in out.argv
        assert not any("FUSION" in k for k in out.env)
        assert not any("fusion" in c for c in out.comments)


@pytest.mark.parametrize("on", [True, False])
def test_vllm_on_rocm_writes_the_aiter_fusion_variable(on):
    out = emit(_plan(gpu="MI300X", engine="vllm", vendor_library=True, shared_expert_fusion=on), "vllm")
    assert out.env["VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS"] == ("1" if on else "0")
    back = from_command(out.argv, env=out.env, model_config=DSV3)
    assert back.deployment["shared_expert_fusion"] is on


def test_engines_that_cannot_be_asked_for_fusion_refuse_to_emit_it():
    with pytest.raises(EmitError, match="read on ROCm with the vendor library's fused MoE only, is not read on sm90"):
        emit(_plan(gpu="H200", engine="vllm", shared_expert_fusion=True), "vllm")
    with pytest.raises(EmitError, match=r"trtllm cannot be asked for it: its table \(backends/engines/trtllm.yaml\)"):
        emit(_plan(gpu="B200", engine="trtllm", shared_expert_fusion=True), "trtllm")
    # off is what vLLM on CUDA and TensorRT-LLM do: nothing to write, nothing refused
    assert not any("FUSION" in k for k in emit(_plan(gpu="H200", engine="vllm", shared_expert_fusion=False), "vllm").env)
    emit(_plan(gpu="B200", engine="trtllm", shared_expert_fusion=False), "trtllm")
