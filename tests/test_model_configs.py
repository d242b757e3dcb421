"""Every bundled real Hugging Face config parses to the right layer shape, routing and format."""
from __future__ import annotations

import json

import pytest

from moe_select.errors import InputError
from moe_select.model_config import read_model_config

# name: (num_experts, top_k, hidden, moe_intermediate, activation, routing, quant, shared)
EXPECTED = {
    "Qwen__Qwen1.5-MoE-A2.7B-Chat": (60, 4, 2048, 1408, "silu", "softmax_topk", "bf16", 1),
    "Qwen__Qwen3-235B-A22B": (128, 8, 4096, 1536, "silu", "renormalize", "bf16", 0),
    "Qwen__Qwen3-235B-A22B-FP8": (128, 8, 4096, 1536, "silu", "renormalize", "fp8_block", 0),
    "Qwen__Qwen3-30B-A3B": (128, 8, 2048, 768, "silu", "renormalize", "bf16", 0),
    "Qwen__Qwen3-30B-A3B-FP8": (128, 8, 2048, 768, "silu", "renormalize", "fp8_block", 0),
    "allenai__OLMoE-1B-7B-0125-Instruct": (64, 8, 2048, 1024, "silu", "softmax_topk", "bf16", 0),
    "deepseek-ai__DeepSeek-R1": (256, 8, 7168, 2048, "silu", "deepseek_v3", "fp8_block", 1),
    "deepseek-ai__DeepSeek-V3": (256, 8, 7168, 2048, "silu", "deepseek_v3", "fp8_block", 1),
    "ibm-granite__granite-3.1-3b-a800m-instruct": (40, 8, 1536, 512, "silu", "renormalize", "bf16", 0),
    "llm-compressor__Llama-4-Scout-17B-16E-Instruct-FP8-dynamic": (16, 1, 5120, 8192, "silu", "llama4", "fp8_channel", 1),
    "meta-llama__Llama-4-Scout-17B-16E-Instruct": (16, 1, 5120, 8192, "silu", "llama4", "bf16", 1),
    "mistralai__Mixtral-8x7B-v0.1": (8, 2, 4096, 14336, "silu", "renormalize", "bf16", 0),
    "nvidia__DeepSeek-V3.1-NVFP4": (256, 8, 7168, 2048, "silu", "deepseek_v3", "nvfp4", 1),
    "nvidia__Qwen3-30B-A3B-NVFP4": (128, 8, 2048, 768, "silu", "renormalize", "nvfp4", 0),
    "openai__gpt-oss-120b": (128, 4, 2880, 2880, "swiglu_oai", "renormalize", "mxfp4", 0),
    "openai__gpt-oss-20b": (32, 4, 2880, 2880, "swiglu_oai", "renormalize", "mxfp4", 0),
    # MiniMax-M2: sigmoid scores with a routing bias and no expert groups (not DeepSeek's grouped routing)
    "MiniMaxAI__MiniMax-M2": (256, 8, 3072, 1536, "silu", "sigmoid_topk", "fp8_block", 0),
    "Qwen__Qwen3-30B-A3B-AWQ": (128, 8, 2048, 768, "silu", "renormalize", "int4_w4a16", 0),
}
# name: (quant_params, [(layer kind, number of layers, its format)]); layer counts from each config's
# num_hidden_layers and its dense/MoE layer keys (DeepSeek: first_k_dense_replace 3 of 61, plus 1 MTP layer)
PARAMS_AND_KINDS = {
    "deepseek-ai__DeepSeek-V3": ({"block": [128, 128], "layout": "fp8"}, [("main", 59, "fp8_block")]),
    "Qwen__Qwen3-30B-A3B-AWQ": ({"group_size": 128, "bits": 4, "layout": "awq", "zero_point": True}, [("main", 48, "int4_w4a16")]),
    # NVIDIA's DeepSeek-V3.1 NVFP4 checkpoint excludes `model.layers.61*` (its MTP layer) from quantization
    "nvidia__DeepSeek-V3.1-NVFP4": ({"block": 16, "layout": "modelopt"}, [("main", 58, "nvfp4"), ("mtp", 1, "bf16")]),
    "Qwen__Qwen1.5-MoE-A2.7B-Chat": ({}, [("main", 24, "bf16")]),
}


@pytest.mark.parametrize("name", sorted(PARAMS_AND_KINDS))
def test_quant_params_and_layer_kinds(name, configs):
    info = read_model_config(configs / name)
    params, kinds = PARAMS_AND_KINDS[name]
    assert info.quant_params == params
    assert [(k["kind"], len(k["layers"]), k["quant"]) for k in info.layer_kinds] == kinds


def test_every_bundled_config_is_covered(configs):
    assert sorted(p.name for p in configs.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_config_parses(name, configs):
    info = read_model_config(configs / name)
    e, k, h, i, act, routing, quant, shared = EXPECTED[name]
    s = info.shape
    assert (s["num_experts"], s["top_k"], s["hidden_size"], s["moe_intermediate_size"]) == (e, k, h, i)
    assert (s["activation"], s["routing"], info.quant, s["num_shared_experts"]) == (act, routing, quant, shared)
    # Every value says where it came from (file:line or the rule that derived it).
    for key in ("num_experts", "top_k", "hidden_size", "moe_intermediate_size", "routing", "quant"):
        assert info.provenance[key]


def test_deepseek_router_parameters(configs):
    s = read_model_config(configs / "deepseek-ai__DeepSeek-V3").shape
    assert (s["n_group"], s["topk_group"], s["routed_scaling_factor"]) == (8, 4, 2.5)


def test_config_json_path_and_line_numbers(configs):
    info = read_model_config(configs / "Qwen__Qwen3-30B-A3B-FP8" / "config.json")
    assert info.provenance["num_experts"].endswith("config.json:9 (num_experts)")


def _write(tmp_path, cfg):
    (tmp_path / "config.json").write_text(json.dumps(cfg, indent=2))
    return tmp_path


def test_unknown_quantization_names_what_was_found(tmp_path, configs):
    cfg = json.loads((configs / "Qwen__Qwen3-30B-A3B" / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    with pytest.raises(InputError) as exc:
        read_model_config(_write(tmp_path, cfg))
    msg = str(exc.value)
    assert "bitsandbytes" in msg and "config.json:" in msg and "quant_method" in msg


def test_other_block_shapes_are_read_and_decide_the_split(tmp_path, configs):
    """Block FP8 is not always 128x128 (SGLang ships Triton configs for block_shape=[64, 64] checkpoints):
    the block shape is read from the checkpoint and the per-rank split must keep whole blocks of it."""
    import moe_select

    cfg = json.loads((configs / "Qwen__Qwen3-30B-A3B-FP8" / "config.json").read_text())
    cfg["quantization_config"]["weight_block_size"] = [64, 64]
    info = read_model_config(_write(tmp_path, cfg))
    assert info.quant == "fp8_block" and info.quant_params["block"] == [64, 64]
    # 768 / 8 = 96 rows per rank: not whole 128-blocks (refused for the real checkpoint), but not whole
    # 64-blocks either; at tp 4 (192 rows) 64-blocks fit and 128-blocks do not.
    ok = moe_select.explain({"gpu": "H200", "model_config": str(tmp_path), "tp": 4})
    assert ok.deployment.quant_params["block"] == [64, 64]
    assert ok.status == "ok" and not any("multiple of quant_block_n" in r.detail for r in ok.reasons), ok.reasons
    cfg["quantization_config"]["weight_block_size"] = [128, 128]
    real = moe_select.explain({"gpu": "H200", "model_config": str(_write(tmp_path, cfg)), "tp": 4})
    assert any(r.code == "shape_unaligned" and "quant_block_n (128)" in r.detail for r in real.reasons), real.reasons
    for bad in ([64], [0, 64], "64x64", [64, True]):
        cfg["quantization_config"]["weight_block_size"] = bad
        with pytest.raises(InputError, match="weight_block_size"):
            read_model_config(_write(tmp_path, cfg))


@pytest.mark.parametrize("block", [[128, 64], [64, 128]])
def test_non_square_blocks_keep_both_sides_through_the_plan(tmp_path, configs, block):
    """A non-square ``weight_block_size [bn, bk]`` keeps bn and bk in their places from the config to the
    plan and the runner's layer spec (found missing by an independent planted-bug check: a block read as
    ``[bn, bn]`` passed every square-block test)."""
    import moe_select
    from moe_select.layer import LayerSpec

    cfg = json.loads((configs / "Qwen__Qwen3-30B-A3B-FP8" / "config.json").read_text())
    cfg["quantization_config"]["weight_block_size"] = block
    info = read_model_config(_write(tmp_path, cfg))
    assert info.quant == "fp8_block" and info.quant_params["block"] == block
    report = moe_select.explain({"gpu": "H200", "model_config": str(tmp_path)})
    assert report.plan is not None, report.reasons
    assert report.plan.deployment.quant_params["block"] == block
    assert LayerSpec.from_plan(report.plan).block_shape == tuple(block)


def test_dense_model_is_not_a_moe(tmp_path):
    with pytest.raises(InputError, match="not a MoE config"):
        read_model_config(_write(tmp_path, {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008}))


def test_missing_folder_and_missing_config(tmp_path):
    with pytest.raises(InputError, match="no such file or folder"):
        read_model_config(tmp_path / "nope")
    with pytest.raises(InputError, match="no config.json"):
        read_model_config(tmp_path)


def test_fp8_without_blocks_is_per_tensor(tmp_path, configs):
    cfg = json.loads((configs / "Qwen__Qwen3-30B-A3B-FP8" / "config.json").read_text())
    del cfg["quantization_config"]["weight_block_size"]
    assert read_model_config(_write(tmp_path, cfg)).quant == "fp8_tensor"


def test_qwen_decoder_sparse_step_selects_layers_as_transformers(tmp_path, configs):
    """transformers' Qwen2MoE/Qwen3MoE decoder layer is a MoE layer when (layer_idx + 1) % decoder_sparse_step
    == 0 and layer_idx is not in mlp_only_layers (huggingface/transformers models/qwen3_moe/modeling_qwen3_moe.py:
    Qwen3MoeDecoderLayer). Every bundled config has step 1, where an off-by-one is invisible."""
    cfg = json.loads((configs / "Qwen__Qwen3-30B-A3B-FP8" / "config.json").read_text())
    cfg.update(num_hidden_layers=6, decoder_sparse_step=2, mlp_only_layers=[4])
    info = read_model_config(_write(tmp_path, cfg))
    assert [(k["kind"], k["layers"]) for k in info.layer_kinds] == [("main", [1, 3, 5])]


@pytest.mark.parametrize("names, kinds", [
    (["gate", "lm_head"], [("main", 48, "fp8_block")]),          # the router 'gate' is not the experts' gate_proj
    (["model.layers.1"], [("main", 47, "fp8_block"), ("unquantized", 1, "bf16")]),  # layer 1 only, not 10-19
])
def test_modules_to_not_convert_match_whole_dotted_segments(tmp_path, configs, names, kinds):
    """A quantization config's ``modules_to_not_convert`` names module paths; they match by whole dotted
    segments (found missing by an independent planted-bug check: substring matching passed every test)."""
    cfg = json.loads((configs / "Qwen__Qwen3-30B-A3B-FP8" / "config.json").read_text())
    cfg["quantization_config"]["modules_to_not_convert"] = names
    info = read_model_config(_write(tmp_path, cfg))
    assert [(k["kind"], len(k["layers"]), k["quant"]) for k in info.layer_kinds] == kinds
    if len(kinds) > 1:
        assert info.layer_kinds[1]["layers"] == [1]
