"""Per-token NVFP4 activation scales (issue 21, field round 7: sgl-project/sglang#34629 = flashinfer-ai/flashinfer#4486).

``quant_config.activation_scale`` (nvfp4 only; ``per_tensor`` by default, SGLang's default) says how an NVFP4
deployment scales its activations; SGLang runs ``per_token`` for ``--quantization nvfp4_online`` or
``SGLANG_FLASHINFER_NVFP4_PER_TOKEN_ACTIVATION=1`` (sgl-project/sglang#28354), read from a launch line. FlashInfer's
TRT-LLM-gen FP4 MoE advertises tile-192 tactics for E2m1 x E2m1 from v0.6.16rc5 (c4053a282) and keeps them off for
per-token scaling from v0.6.18rc4 (#4563, 02647e810): flashinfer_trtllm is refused for per-token NVFP4 on sm100/sm103
with flashinfer-python >=0.6.16rc5,<0.6.18rc4 and planned for per-tensor NVFP4 in every release.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select
from moe_select.errors import InputError
from moe_select.launch_line import from_command

from conftest import CONFIGS
from report_helpers import report_codes

NVFP4 = str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4")
BF16 = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
FP8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
BAD_FI = ["0.6.16rc5", "0.6.16", "0.6.16.post4", "0.6.17rc1", "0.6.17", "0.6.18rc3"]
GOOD_FI = ["0.6.15.post1", "0.6.16rc4", "0.6.18rc4", "0.6.18rc7"]
ENV = "SGLANG_FLASHINFER_NVFP4_PER_TOKEN_ACTIVATION"


def _explain(fi: str, scale: str | None = None, gpu: str = "B200", **dep: Any) -> Any:
    d: dict[str, Any] = dict(gpu=gpu, engine="sglang", model_config=NVFP4, tp=4, ep=1, a2a="none",
                             packages={"flashinfer-python": fi}, **dep)
    if scale is not None:
        d["quant_config"] = {"activation_scale": scale}
    return moe_select.explain(d)


def _tile192(report: Any) -> list[Any]:
    """The reasons given by the per-token tile-192 row of flashinfer_trtllm.yaml."""
    return [r for r in report.reasons if r.backend == "flashinfer_trtllm" and r.code == "quant_unsupported"
            and r.source.startswith("backends/flashinfer_trtllm.yaml:") and ">=0.6.16rc5,<0.6.18rc4" in r.detail]


@pytest.mark.parametrize("scale", [None, "per_tensor"])
@pytest.mark.parametrize("fi", ["0.6.16rc5", "0.6.17", "0.6.18rc4"])
def test_per_tensor_nvfp4_planned_on_trtllm(scale, fi):
    """Per-tensor NVFP4 (unstated or stated) keeps tile 192 in every release and is planned on flashinfer_trtllm."""
    r = _explain(fi, scale, runner="flashinfer_trtllm")
    assert r.plan is not None and r.plan.runner == "flashinfer_trtllm", [(x.code, x.detail) for x in r.reasons]
    assert not _tile192(r)


@pytest.mark.parametrize("gpu", ["B200", "B300"])
@pytest.mark.parametrize("fi", BAD_FI)
def test_per_token_nvfp4_refused_in_range(gpu, fi):
    """Per-token NVFP4 on sm100 / sm103 in the tile-192 range: flashinfer_trtllm refused (its row named), auto plans
    another runner."""
    r = _explain(fi, "per_token", gpu=gpu, runner="flashinfer_trtllm")
    assert r.plan is None and report_codes(r) == {"quant_unsupported"} and _tile192(r)
    auto = _explain(fi, "per_token", gpu=gpu)
    assert auto.plan is not None and auto.plan.runner != "flashinfer_trtllm"


@pytest.mark.parametrize("fi", GOOD_FI)
def test_per_token_nvfp4_planned_outside_range(fi):
    """Before tile 192 (0.6.16rc4 and older) and from the fix (0.6.18rc4): per-token NVFP4 planned on flashinfer_trtllm."""
    r = _explain(fi, "per_token", runner="flashinfer_trtllm")
    assert r.plan is not None and r.plan.runner == "flashinfer_trtllm", [(x.code, x.detail) for x in r.reasons]


def test_plan_carries_the_stated_scale():
    """The stated scale reaches the plan's quant_params; the unstated default does not invent one."""
    stated = _explain("0.6.18rc4", "per_token", runner="flashinfer_trtllm")
    assert stated.plan is not None and stated.deployment.quant_params.get("activation_scale") == "per_token"
    unstated = _explain("0.6.18rc4", runner="flashinfer_trtllm")
    assert "activation_scale" not in unstated.deployment.quant_params


# ------------------------------------------------------------------------------------------------ launch lines
def _launch(line: str) -> Any:
    return from_command(line)


@pytest.mark.parametrize("value", ["1", "true", "Yes", "y"])
def test_launch_env_var_true_reads_per_token(value):
    """SGLANG_FLASHINFER_NVFP4_PER_TOKEN_ACTIVATION true (EnvBool's spellings) on a serialized NVFP4 checkpoint: per-token,
    with the variable as provenance; refused at flashinfer 0.6.17, planned at 0.6.18rc4."""
    launch = _launch(f"{ENV}={value} python -m sglang.launch_server --model-path {NVFP4} --tp 4")
    assert launch.deployment["quant_config"] == {"activation_scale": "per_token"}
    assert ENV in launch.provenance["quant_config"]
    bad = launch.explain(deployment=dict(gpu="B200", packages={"flashinfer-python": "0.6.17"}, runner="flashinfer_trtllm"))
    assert bad.plan is None and _tile192(bad)
    good = launch.explain(deployment=dict(gpu="B200", packages={"flashinfer-python": "0.6.18rc4"}, runner="flashinfer_trtllm"))
    assert good.plan is not None and good.plan.runner == "flashinfer_trtllm"


def test_launch_env_var_false_or_invalid_keeps_per_tensor():
    """False is the default (per-tensor: nothing set); a value EnvBool refuses is an engine_error finding, not read."""
    off = _launch(f"{ENV}=0 python -m sglang.launch_server --model-path {NVFP4} --tp 4")
    assert "quant_config" not in off.deployment
    bad = _launch(f"{ENV}=maybe python -m sglang.launch_server --model-path {NVFP4} --tp 4")
    assert "quant_config" not in bad.deployment
    assert [f for f in bad.found("engine_error") if f.token.startswith(ENV)]


def test_launch_env_var_not_read_for_another_format():
    """SGLang reads the variable for serialized NVFP4 checkpoints only: on an FP8 checkpoint it is a note, and the
    deployment plans (no activation_scale error)."""
    launch = _launch(f"{ENV}=1 python -m sglang.launch_server --model-path {FP8} --tp 4")
    assert "quant_config" not in launch.deployment
    assert any("not read" in f.message for f in launch.found("note") if f.token.startswith(ENV))
    launch.explain(deployment=dict(gpu="B200"))  # no InputError


def test_launch_nvfp4_online_flag():
    """--quantization nvfp4_online on a BF16 checkpoint: NVFP4 made at load with per-token scales (quant nvfp4,
    activation_scale per_token, an online-quantization note); flashinfer_trtllm refused at 0.6.17."""
    launch = _launch(f"python -m sglang.launch_server --model-path {BF16} --tp 4 --quantization nvfp4_online")
    assert launch.deployment["quant"] == "nvfp4"
    assert launch.deployment["quant_config"] == {"activation_scale": "per_token"}
    assert "nvfp4_online" in launch.provenance["quant_config"]
    r = launch.explain(deployment=dict(gpu="B200", packages={"flashinfer-python": "0.6.17"}, runner="flashinfer_trtllm"))
    assert r.plan is None and _tile192(r)
    assert any("nvfp4_online" in n for n in r.deployment.notes)
    other = _launch(f"python -m sglang.launch_server --model-path {NVFP4} --tp 4 --quantization modelopt_fp4")
    assert "quant_config" not in other.deployment and "quant" not in other.deployment


def test_online_nvfp4_from_an_fp8_block_checkpoint_takes_nvfp4s_block_not_the_checkpoints():
    """nvfp4_online on a block-FP8 checkpoint (Qwen3-30B-A3B-FP8: weight_block_size [128, 128]): the served layer is
    NVFP4 with its 16-element scale blocks (backends/formats.yaml); the checkpoint's [128, 128] describes the FP8
    weights before conversion. It was kept (the checkpoint's parameters won over the format's defaults), so the
    understood NVFP4 layer said block [128, 128]; now a note says the checkpoint's parameters were not carried over.
    The served layer also takes nvfp4's default layout, modelopt (backends/formats.yaml, from 2026-12-05; the
    checkpoint's fp8 layout is not carried over either): SGLang's online NVFP4 method is ModelOpt's
    (sglang-0.5.19 .. 0.5.23 python/sglang/srt/layers/quantization/nvfp4_online.py:ModelOptNvFp4OnlineFusedMoEMethod,
    a ModelOptNvFp4FusedMoEMethod; NvFp4OnlineConfig is a ModelOptQuantConfig)."""
    dep = dict(gpu="B200", engine="sglang", model_config=FP8, tp=4, quant="nvfp4",
               quant_config={"activation_scale": "per_token"})
    understood = moe_select.explain(dep).deployment
    assert understood.quant == "nvfp4"
    assert understood.quant_params == {"block": 16, "layout": "modelopt", "activation_scale": "per_token",
                                       "online": True, "online_engines": ["sglang"], "online_from": "fp8_block"}
    assert ("the checkpoint's fp8_block parameters (block [128, 128], layout fp8) describe its weights before online quantization: "
            "the served nvfp4 layer takes nvfp4's own") in understood.notes


# ------------------------------------------------------------------------------------------------ typed errors
def _write(tmp_path: Any, text: str) -> str:
    p = tmp_path / "dep.yaml"
    p.write_text(text)
    return str(p)


def test_activation_scale_for_another_format_is_a_typed_error(tmp_path):
    """activation_scale on an FP8 checkpoint: InputError naming the file, the line of activation_scale and the field."""
    path = _write(tmp_path, f"gpu: B200\nengine: sglang\nmodel_config: {FP8}\ntp: 4\nquant_config:\n  activation_scale: per_token\n")
    with pytest.raises(InputError) as e:
        moe_select.explain(path)
    text = str(e.value)
    assert f"{path}:6" in text and "quant_config.activation_scale" in text and "nvfp4 only" in text and "fp8_block" in text


def test_per_token_on_weight_only_is_a_typed_error():
    """A weight-only NVFP4 checkpoint keeps 16-bit activations: per_token contradicts it (the field named)."""
    with pytest.raises(InputError) as e:
        moe_select.explain(dict(gpu="B200", engine="sglang", quant="nvfp4", tp=1,
                                model=dict(num_experts=128, top_k=8, hidden_size=2048, moe_intermediate_size=768),
                                quant_config={"weight_only": True, "activation_scale": "per_token"}))
    assert "quant_config.activation_scale" in str(e.value) and "weight-only" in str(e.value)


def test_bf16_checkpoint_nvfp4_without_per_token_still_refused():
    """NVFP4 made at load with per-tensor activation scales: SGLang's --quantization modelopt_fp4 on a checkpoint without a
    quantization file, from 0.5.18 (corrected, issue 21: it was refused at every version); 0.5.17 makes NVFP4 at load
    only per token (nvfp4_online): an error there."""
    with pytest.raises(InputError, match="no engine makes nvfp4 at load"):
        moe_select.explain(dict(gpu="B200", engine="sglang", engine_version="0.5.17", model_config=BF16, quant="nvfp4", tp=4))
    r = moe_select.explain(dict(gpu="B200", engine="sglang", engine_version="0.5.18", model_config=BF16, quant="nvfp4", tp=4))
    assert any("modelopt_fp4" in n for n in r.deployment.notes)
