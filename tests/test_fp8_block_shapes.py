"""fp8_block with a block other than 128 x 128 (a fourth new user's trial, 2026-12-03): ``torch_native`` applied 128 x
128 blocks whatever the plan's ``quant_params.block`` said, so a [96, 96] checkpoint whose scale grid happens to have
the 128 grid's shape (H 192, I 96: ceil(192/96) = ceil(192/128)) ran silently wrong, and ``verify`` / ``moe-select run``
passed because their weights and reference shared the 128 assumption. The block now travels from the plan
(``LayerSpec.block_shape``) into the runner's dequantization, the harness's quantization and its float64 reference
(which dequantizes apart from :mod:`moe_select.ops`)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import moe_select
from moe_select.ops import dequantize, quantize_fp8_block
from moe_select.reference import reference_dequantize, reference_moe, rel_error

ROOT = Path(__file__).resolve().parent.parent


def _dep(block, h=192, i=96, e=8, k=2):
    return {"arch": "cpu", "engine": "moe_select", "quant": "fp8_block", "quant_config": {"block": list(block)},
            "model": {"num_experts": e, "top_k": k, "hidden_size": h, "moe_intermediate_size": i, "activation": "silu"},
            "cuda_graph": False}


@pytest.mark.parametrize("block, i", [((96, 96), 96), ((32, 64), 96), ((48, 32), 96), ((128, 128), 128)])
def test_torch_native_honours_the_plans_block(block, i):
    torch.manual_seed(sum(block))
    h, e, k, t = 192, 8, 2, 24  # I a multiple of bn (the engines refuse a scale block split between rows)
    plan = moe_select.plan(_dep(block, h, i, e, k))
    runner = moe_select.resolve(plan)
    assert runner.spec.block_shape == block
    w13 = torch.randn(e, 2 * i, h) * h ** -0.5
    w2 = torch.randn(e, h, i) * i ** -0.5
    q13, s13 = quantize_fp8_block(w13, block)
    q2, s2 = quantize_fp8_block(w2, block)
    assert s13.shape == (e, -(-2 * i // block[0]), -(-h // block[1]))
    x = torch.randn(t, h)
    ids = torch.stack([torch.randperm(e)[:k] for _ in range(t)]).to(torch.int32)
    wts = torch.softmax(torch.randn(t, k), dim=-1)
    out = runner.run(x, ids, wts, runner.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2))
    ref = reference_moe(x.double(), ids, wts, reference_dequantize(q13, {"scale": s13}, "fp8_block", block),
                        reference_dequantize(q2, {"scale": s2}, "fp8_block", block))
    assert rel_error(out, ref) < 1e-5  # float32 activations: only the float32 arithmetic differs


def test_a_scale_grid_of_another_block_is_refused_naming_the_block():
    q, s = quantize_fp8_block(torch.randn(2, 64, 64), (32, 32))
    with pytest.raises(ValueError, match=r"fp8_block scale must be \[E, ceil\(N/128\), ceil\(K/128\)\] = \[2, 1, 1\] "
                                         r"\(block \[128, 128\]\), got \[2, 2, 2\]"):  # the layer's E, not one expert's
        dequantize(q, s, "fp8_block")
    assert dequantize(q, s, "fp8_block", block=(32, 32)).shape == (2, 64, 64)


def test_run_builds_and_checks_with_the_checkpoints_block(tmp_path, capsys):
    cfg = json.loads((ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B-FP8" / "config.json").read_text())
    cfg.update(hidden_size=192, moe_intermediate_size=96, num_experts=8, num_experts_per_tok=2)
    cfg["quantization_config"]["weight_block_size"] = [96, 96]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    from moe_select.cli import main

    assert main(["run", "--model-config", str(tmp_path), "--tokens", "8"]) == 0
    assert ": OK" in capsys.readouterr().out


def test_verify_passes_with_the_plans_block():
    runner = moe_select.resolve(moe_select.plan(_dep((96, 96))), verify=True)
    assert runner.spec.block_shape == (96, 96)


def test_flashinfer_cutlass_adapter_refuses_a_block_other_than_128():
    # the refusal comes before the adapter imports flashinfer: no flashinfer needed
    from moe_select.backends import flashinfer_cutlass as fic
    from moe_select.errors import RunnerInputError
    from moe_select.layer import LayerSpec

    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=256, intermediate_size=256, quant="fp8_block", block_shape=(64, 64))
    with pytest.raises(RunnerInputError, match=r"128x128 weight blocks only, the plan's are \[64, 64\]"):
        fic.FlashInferCutlassCore(spec, "cpu", kernel=object())
