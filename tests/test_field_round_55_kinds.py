"""Field round 55 of issue 21 (tests/cases/field_round_55.yaml), fixed as kinds in backends/a2a/mooncake.yaml and tested on
deployments other than the round's case: SGLang 0.5.4 .. 0.5.17's Qwen3 MoE block over Mooncake (wrong output,
sgl-project/sglang#34810); SGLang's Mooncake dispatcher refusing --deepep-mode auto (read in the wheels while checking
the round: NotImplementedError for any mode that enables normal); and the mode a backend lacks, asked for a decode
deployment, an input error (it was a traceback)."""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.cli import main
from report_helpers import report_codes

ROOT = Path(__file__).resolve().parents[1]
QWEN3_BF16 = str(ROOT / "examples/model_configs/Qwen__Qwen3-30B-A3B")
DSV3 = str(ROOT / "examples/model_configs/deepseek-ai__DeepSeek-V3")


def _mooncake(report) -> list[str]:
    return [r.detail for r in report.reasons if r.code == "a2a_unsupported" and r.source.startswith("backends/a2a/mooncake.yaml")]


@pytest.mark.parametrize("version, model, refused", [
    ("0.5.17", QWEN3_BF16, True), ("0.5.13", QWEN3_BF16, True), ("0.5.18", QWEN3_BF16, False), ("0.5.17", DSV3, False)])
def test_qwen3_moe_block_over_mooncake(version, model, refused):
    r = moe_select.explain({"gpu": "B200", "engine": "sglang", "engine_version": version, "model_config": model, "tp": 8,
                            "ep": 8, "dp": 8, "a2a": "mooncake", "a2a_mode": "low_latency", "decode_tokens_per_rank": 64})
    assert any("Qwen3 MoE block" in d for d in _mooncake(r)) is refused, report_codes(r)


@pytest.mark.parametrize("mode, refused", [(None, True), ("auto", True), ("low_latency", False)])
def test_sglang_mooncake_needs_low_latency_mode(mode, refused):
    dep = {"gpu": "H200", "engine": "sglang", "engine_version": "0.5.23", "model_config": DSV3, "tp": 8, "ep": 8, "dp": 8,
           "a2a": "mooncake", "decode_tokens_per_rank": 64, **({"a2a_mode": mode} if mode else {})}
    r = moe_select.explain(dep)
    said = [d for d in _mooncake(r) if "NotImplementedError" in d]
    assert bool(said) is refused, report_codes(r)
    if refused:
        assert "--deepep-mode low_latency" in said[0]


def test_a_launch_line_without_a_mode_is_refused():
    from moe_select.launch_line import from_command

    line = ("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --dp 8 --enable-dp-attention "
            "--moe-a2a-backend mooncake --cuda-graph-max-bs 64")
    for extra, refused in (("", True), (" --deepep-mode low_latency", False)):
        dep = dict(from_command(line + extra, model_config=DSV3, engine_version="0.5.23").deployment, gpu="H200")
        assert bool(_mooncake(moe_select.explain(dep))) is refused, extra


def test_a_mode_the_backend_lacks_for_decode_is_an_input_error(capsys):
    rc = main(["explain", "--gpu", "H200", "--model-config", DSV3, "--engine", "sglang", "--tp", "8", "--ep", "8",
               "--a2a", "mooncake", "--a2a-mode", "normal", "--phase", "decode"])
    assert rc == 2 and "a2a mooncake has no normal mode" in capsys.readouterr().err
