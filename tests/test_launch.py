"""moe_select.harness.launch.run_distributed: the distributed path end to end (plan, spawn gloo ranks, resolve
with the group, shard, route, forward, float64 reference), and its refusals before anything starts."""
from __future__ import annotations

import json

import pytest
import torch

from moe_select.harness.launch import PROCESS_OVERHEAD, LaunchError, estimate_bytes, run_distributed, token_range
from moe_select.harness.weights import expert_slice, full_expert, layer_weights

TINY = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 256,
        "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2, "hidden_act": "silu",
        "norm_topk_prob": True, "torch_dtype": "bfloat16"}


@pytest.fixture
def tiny(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    return str(tmp_path)


@pytest.mark.slow
def test_torch_all_to_all_end_to_end_with_fresh_processes(tiny):
    r = run_distributed(model_config=tiny, tokens=13, nproc=2, tp=2, ep=2, a2a="torch", seed=7, dtype="bfloat16", timeout_s=90)
    assert r["ok"] and r["max_rel_error"] <= r["tolerance"] == 2.0**-6, r  # formats.tolerance("bf16")
    assert (r["nproc"], r["tp"], r["ep"], r["a2a"], r["token_layout"]) == (2, 2, 2, "torch", "own")
    assert r["plan"]["runner"] == "torch_native" and r["plan"]["fingerprint"].startswith("sha256:")
    assert [x["experts"] for x in r["ranks"]] == [[0, 4], [4, 8]]
    assert [x["token_range"] for x in r["ranks"]] == [[0, 7], [7, 13]]
    assert all(x["forward_s"] >= 0 and x["resolve_s"] > 0 for x in r["ranks"])
    assert 0 < r["reference_experts"] <= 8


def test_refuses_before_starting_when_memory_would_not_fit(configs, monkeypatch):
    import moe_select.harness.launch as launchmod

    monkeypatch.setattr(launchmod, "available_host_bytes", lambda: 16 << 30)  # the same answer on every machine
    with pytest.raises(LaunchError, match=r"not enough memory: 2 ranks x [\d.]+ GiB .*E=256/ep 1 .*16.0 GiB available.*no tp/ep split"):
        run_distributed(model_config=str(configs / "deepseek-ai__DeepSeek-V3"), tokens=8, nproc=2, tp=2, ep=1, a2a="none")


def test_refuses_bad_arguments():
    with pytest.raises(LaunchError) as exc:
        run_distributed(model_config="unused", tokens=0, nproc=2, tp=4, ep=1, a2a="none", dtype="int8")
    assert exc.value.problems == ["nproc 2 must equal tp 4: the MoE layer spans tp ranks, one process each",
                                  "dtype must be one of bfloat16, float16, float32, got 'int8'", "tokens must be >= 1, got 0"]


def test_memory_estimate_counts_the_shard():
    m = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768}  # Qwen3-30B-A3B
    one = estimate_bytes(m, "bf16", tp=1, ep=1, nproc=1, tokens=0)
    four = estimate_bytes(m, "bf16", tp=4, ep=4, nproc=4, tokens=0)
    shard = 128 * 3 * 768 * 2048 * 2  # E x (2I + I) x H x 2 bytes
    assert shard < one["per_rank"] - PROCESS_OVERHEAD < shard * 1.02  # plus one expert slice in float32 while generating
    assert four["per_rank"] - one["per_rank"] == pytest.approx(-shard * 3 / 4, rel=0.01)


def test_token_split_and_slices_reassemble():
    assert [token_range(r, 3, 8) for r in range(3)] == [(0, 3), (3, 6), (6, 8)]
    m = {"num_experts": 4, "top_k": 2, "hidden_size": 16, "moe_intermediate_size": 8, "activation": "silu"}
    w13, w2 = full_expert(m, "bf16", 2, 0, 1)
    assert w13.shape == (1, 16, 16) and w2.shape == (1, 16, 8)
    # the two slices put back: gate rows of both slices first, then up rows (canonical order)
    a13, a2, _, _ = expert_slice(m, "bf16", 2, 0, 1, 0)
    b13, b2, _, _ = expert_slice(m, "bf16", 2, 0, 1, 1)
    assert torch.equal(w13[0, :4], a13[0, :4].double()) and torch.equal(w13[0, 4:8], b13[0, :4].double())
    assert torch.equal(w13[0, 8:12], a13[0, 4:].double()) and torch.equal(w2[0, :, 4:], b2[0].double())


@pytest.mark.parametrize("quant", ["bf16", "fp8_block", "mxfp4", "nvfp4"])
def test_a_rank_builds_exactly_its_shard(quant):
    from moe_select.layer import LayerSpec

    m = {"num_experts": 8, "top_k": 2, "hidden_size": 128, "moe_intermediate_size": 256, "activation": "silu"}
    spec = LayerSpec(num_experts=8, top_k=2, hidden_size=128, intermediate_size=128, quant=quant, tp=4, ep=2, ep_rank=1, tp_rank=1)
    w = layer_weights(spec, m, seed=3)
    q13, q2, s13, _ = expert_slice(m, quant, 2, 3, 5, 1)  # rank (ep 1, tp 1) holds experts 4..7, slice 1
    assert torch.equal(w["w13"][1], q13[0]) and torch.equal(w["w2"][1], q2[0])
    assert set(w) == {"w13", "w2", *(f"w13_{k}" for k in s13), *(f"w2_{k}" for k in s13)}
