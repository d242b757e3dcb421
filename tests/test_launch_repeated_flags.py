"""A runner, all-to-all or quantization option given twice in a launch line: argparse keeps the last value but checks
every occurrence against the option's choices as it reads it (CPython Lib/argparse.py ``_get_values`` ->
``_check_value``), so an invalid earlier value stops SGLang or vLLM although a valid one follows."""
from __future__ import annotations

from pathlib import Path

import pytest

from moe_select.errors import InputError
from moe_select.launch_line import from_command

DSV3 = str(Path(__file__).resolve().parents[1] / "examples" / "model_configs" / "deepseek-ai__DeepSeek-V3")
SGL = "python3 -m sglang.launch_server --model-path x --tp 8 "


@pytest.mark.parametrize("line, bad", [
    (SGL + "--moe-runner-backend foo --moe-runner-backend triton", "--moe-runner-backend foo"),
    ("vllm serve x -tp 8 --moe-backend trion --moe-backend triton", "--moe-backend trion"),
    (SGL + "--quantization fp9 --quantization fp8", "--quantization fp9"),
    (SGL + "--ep 8 --moe-a2a-backend deeeep --moe-a2a-backend deepep", "--moe-a2a-backend deeeep"),
])
def test_an_invalid_earlier_occurrence_is_refused(line, bad):
    with pytest.raises(InputError, match="refuses it at startup") as exc:
        from_command(line, model_config=DSV3)
    assert bad in str(exc.value)


def test_vllm_quantization_is_not_an_argparse_choice():
    # QuantizationMethods | str: a metavar, not choices (vllm/engine/arg_utils.py literal_to_kwargs): an earlier
    # occurrence is never validated, the last one is what ModelConfig reads
    launch = from_command("vllm serve x -tp 1 --quantization fp9 --quantization fp8", model_config=DSV3)
    assert not any(f.kind == "engine_error" and "fp9" in f.token for f in launch.findings)


def test_valid_occurrences_the_last_wins_with_a_note():
    launch = from_command(SGL + "--moe-runner-backend triton --moe-runner-backend deep_gemm", model_config=DSV3)
    assert launch.deployment["runner"] == "deep_gemm"
    assert any(f.kind == "note" and "given again" in f.message for f in launch.findings)


def test_an_earlier_value_of_a_later_release_is_an_engine_error():
    # humming first shipped in SGLang 0.5.16 (names.yaml choices since): at 0.5.12 the earlier occurrence stops it too
    launch = from_command(SGL + "--moe-runner-backend humming --moe-runner-backend triton", model_config=DSV3,
                          engine_version="0.5.12")
    assert any(f.kind == "engine_error" and f.token == "--moe-runner-backend humming" for f in launch.findings)
    assert launch.deployment["runner"] == "triton"
