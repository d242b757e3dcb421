"""A launch line's --quantization on an already-quantized checkpoint, judged by the engines' allow-lists where the whole
check was read (backends/engines/vllm.yaml and sglang.yaml ``quant_mismatch`` ``accepts``: vLLM 0.20.0 .. 0.23.0 and 0.24.0 .. 0.34.0, SGLang
0.5.13 .. 0.5.23), else by the block-lists; ``quant_method: fp8`` and compressed-tensors FP8 checkpoints are two kinds."""
from __future__ import annotations

from pathlib import Path

import pytest

from moe_select.engine_tables import table
from moe_select.launch_line import from_command

C = Path(__file__).resolve().parents[1] / "examples" / "model_configs"
FP8 = str(C / "Qwen__Qwen3-30B-A3B-FP8")                                          # quant_method fp8 (block)
CT_FP8 = str(C / "llm-compressor__Llama-4-Scout-17B-16E-Instruct-FP8-dynamic")   # compressed-tensors FP8
AWQ = str(C / "Qwen__Qwen3-30B-A3B-AWQ")
VLLM = "vllm serve x -tp 1 --quantization {}"
SGL = "python3 -m sglang.launch_server --model-path x --tp 1 --quantization {}"


def _verdict(line: str, model: str, version: str | None) -> str:
    launch = from_command(line, model_config=model, engine_version=version)
    kinds = {f.kind for f in launch.findings if f.token.startswith("--quantization")}
    return "engine_error" if "engine_error" in kinds else "ok"


@pytest.mark.parametrize("engine_line, model, value, version, verdict", [
    # vLLM allow-lists (0.20.0 .. 0.34.0; undeclared: the newest read)
    (VLLM, FP8, "fp8", "0.30.0", "ok"),
    (VLLM, FP8, "humming", None, "ok"),
    (VLLM, FP8, "fp8_per_block", "0.34.0", "engine_error"),   # an online shorthand on a serialized FP8 checkpoint
    (VLLM, FP8, "fp8_per_block", "0.25.0", "engine_error"),   # 0.24.0 .. 0.28.0 gave the same lists (harness run)
    (VLLM, FP8, "fp8_per_block", "0.21.0", "engine_error"),
    (VLLM, FP8, "fp8_per_block", "0.19.0", "ok"),             # before the read range: only the block-list speaks
    (VLLM, FP8, "gguf", "0.22.0", "ok"),                      # GGUFConfig's override claims any checkpoint (to 0.23.0)
    (VLLM, FP8, "gguf", "0.24.0", "engine_error"),
    (VLLM, CT_FP8, "fp8", "0.28.0", "engine_error"),          # compressed-tensors FP8 takes no `fp8`
    (VLLM, CT_FP8, "compressed-tensors", "0.28.0", "ok"),
    (VLLM, AWQ, "marlin", "0.34.0", "ok"),                    # AutoAWQ's override claims it
    (VLLM, AWQ, "moe_wna16", "0.34.0", "ok"),                 # claimed for 4-bit AWQ (a condition of the checkpoint)
    (VLLM, AWQ, "bitsandbytes", "0.34.0", "engine_error"),
    (VLLM, AWQ, "gptq", "0.20.0", "engine_error"),            # the block-list holds at every release
    # SGLang allow-lists (0.5.13 .. 0.5.23)
    (SGL, FP8, "w8a8_fp8", "0.5.23", "engine_error"),
    (SGL, FP8, "modelopt_fp4", "0.5.23", "ok"),               # online NVFP4 from the FP8 checkpoint
    (SGL, CT_FP8, "w8a8_fp8", "0.5.13", "ok"),                # compatible_quantization_methods
    (SGL, AWQ, "marlin", "0.5.13", "ok"),
    (SGL, AWQ, "w8a8_int8", "0.5.23", "engine_error"),
    (SGL, AWQ, "w8a8_int8", "0.5.20", "engine_error"),        # 0.5.14 .. 0.5.22 read too (the harness, 2026-12-06)
    (SGL, AWQ, "w8a8_int8", "0.5.12", "ok"),                  # not read: no allow-list, not on the block-list
    (SGL, FP8, "humming", "0.5.15", "engine_error"),          # humming's override from 0.5.16
    (SGL, FP8, "humming", "0.5.16", "ok"),
    (SGL, AWQ, "marlin", "0.5.19", "ok"),
    (SGL, AWQ, "marlin", "0.5.20", "engine_error"),           # dropped from AWQ's overrides in 0.5.20
])
def test_quantization_name_on_a_quantized_checkpoint(engine_line, model, value, version, verdict):
    assert _verdict(engine_line.format(value), model, version) == verdict


def test_the_refusal_names_what_the_release_takes():
    launch = from_command(VLLM.format("fp8"), model_config=CT_FP8, engine_version="0.30.0")
    f = next(x for x in launch.findings if x.kind == "engine_error")
    assert "takes only compressed-tensors, humming" in f.message and "vllm/config/model.py" in (f.source or "")


def test_every_allow_list_names_the_engines_own_values():
    """An allow-list names only values the engine's --quantization takes (the names table's choices), or SGLang's
    `unquant` (its no-method value)."""
    from moe_select.engine_tables import names

    for engine in ("vllm", "sglang"):
        takes = set(names().accepted(engine, "quant")) | {"unquant", "auto_awq", "auto_gptq", "marlin"}
        for m in table(engine).quant_mismatch:
            assert set(m.accepts) <= takes, (engine, m.checkpoint, set(m.accepts) - takes)


def test_deepseek_v4_family_takes_any_name_under_vllm():
    from moe_select import launch_line

    assert {"deepseek_v4", "deepseek_v41_text"} <= set(launch_line._VLLM_DSV4_FP8_TYPES)


def test_a_malformed_entry_is_refused_at_load():
    """An entry gives refuses or accepts (one of them) and releases as [first, last] PEP 440 versions."""
    from pydantic import ValidationError

    from moe_select.engine_tables import QuantMismatch

    src = "vllm-project/vllm@v0.28.0:vllm/config/model.py:ModelConfig._verify_quantization"
    with pytest.raises(ValidationError, match="one of them"):
        QuantMismatch(checkpoint="fp8", refuses=["awq"], accepts=["fp8"], source=src)
    with pytest.raises(ValidationError, match="one of them"):
        QuantMismatch(checkpoint="fp8", source=src)
    with pytest.raises(ValidationError, match=r"\[first, last\]"):
        QuantMismatch(checkpoint="fp8", accepts=["fp8"], releases=["0.28.0"], source=src)
    with pytest.raises(ValidationError):
        QuantMismatch(checkpoint="fp8", accepts=["fp8"], releases=["0.28.0", "not-a-version"], source=src)
    ok = QuantMismatch(checkpoint="fp8", accepts=["fp8"], releases=["0.28.0", "0.34.0"], source=src)
    assert ok.holds_at("0.28.0", None) and ok.holds_at("0.34.0", None) and not ok.holds_at("0.35.0", None)
    assert ok.holds_at(None, "0.30.0") and not ok.holds_at(None, None)


GPTOSS = str(C / "openai__gpt-oss-20b")   # quant_method mxfp4, model_type gpt_oss


@pytest.mark.parametrize("engine_line, value, version, verdict", [
    (VLLM, "humming", "0.21.0", "engine_error"),   # HummingConfig's override raises on gpt-oss MXFP4 (use --moe-backend)
    (VLLM, "humming", "0.34.0", "engine_error"),
    (VLLM, "humming", "0.20.0", "ok"),             # 0.20.0 takes it
    (VLLM, "fp8", "0.34.0", "ok"),                 # Mxfp4Config's override claims the checkpoint whatever is named
    (SGL, "fp8", "0.5.20", "engine_error"),        # no override: 'does not match'
    (SGL, "mxfp4", "0.5.20", "ok"),
    (SGL, "quark_mxfp4", "0.5.23", "engine_error"),   # passes the check, but requantizes only FP8 (left out)
])
def test_quantization_name_on_gpt_oss_mxfp4(engine_line, value, version, verdict):
    assert _verdict(engine_line.format(value), GPTOSS, version) == verdict


def test_humming_on_gpt_oss_quotes_the_engines_own_message():
    launch = from_command(VLLM.format("humming"), model_config=GPTOSS, engine_version="0.30.0")
    f = next(x for x in launch.findings if x.kind == "engine_error")
    assert "--moe-backend humming" in f.message and "does not match" not in f.message
