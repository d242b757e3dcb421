"""Facts of the AMD runner (backends/aiter.yaml), the rules every runner obeys (backends/common.yaml) and
the all-to-all backends (backends/a2a/*.yaml except flashinfer), read against upstream code (issue 10).

Each test is a deployment and the answer the facts must give (eligible, or refused with the right code),
with the public source of the fact in a comment. Torch-free and fast: planning only."""
from __future__ import annotations

import pytest
import yaml

from conftest import explain_json

# gpt-oss-120b's MoE; its architecture scopes SGLang's Mxfp4Config facts (quant_method mxfp4 checkpoints).
GPT_OSS_120B = {"num_experts": 128, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
                "activation": "swiglu_oai", "routing": "renormalize", "architecture": "GptOssForCausalLM"}
DEEPSEEK_R1 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048,
               "activation": "silu", "routing": "deepseek_v3", "num_shared_experts": 1}
QWEN3_30B = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768,
             "activation": "silu", "routing": "renormalize"}


def explain(tmp_path, capsys, **dep):
    f = tmp_path / "d.yaml"
    f.write_text(yaml.safe_dump(dep))
    rc, out = explain_json(capsys, ["--deployment", str(f)])
    assert out, "explain printed nothing"
    return out


def candidate(out, name):
    return next(c for c in out["candidates"] if c["backend"] == name)


def codes(c, file=None):
    """Reason codes of a candidate (only those whose source is in ``file`` when given)."""
    return {r["code"] for r in c["reasons"] if file is None or r["source"].startswith(file)}


def reasons_from(out, file, engine=None):
    """Reasons sourced from ``file`` on any candidate (deployment-level reasons repeat on each one),
    holding for ``engine`` (a reason without ``engines`` holds for every engine)."""
    seen = {}
    for c in out["candidates"]:
        for r in c["reasons"]:
            if r["source"].startswith(file) and (engine is None or not r["engines"] or engine in r["engines"]):
                seen[(r["code"], r["detail"])] = r
    return list(seen.values())


# ------------------------------------------------------------------------------ issue 9 cases (AMD)
def test_gpt_oss_on_mi300x_plans_aiter_or_triton_kernel(tmp_path, capsys):
    # vllm-project/vllm#55934 (gpt-oss-120b on MI300X), vllm-project/vllm#50622 (AITER Triton W4A16 MXFP4
    # MoE, vLLM's default on gfx942 with AITER on): aiter_mxfp4_w4a16_moe.py AiterW4A16ExpertsMonolithic.
    out = explain(tmp_path, capsys, gpu="MI300X", quant="mxfp4", model=GPT_OSS_120B, tp=8, ep=1, a2a="none",
                  runner="auto")
    assert out["status"] == "ok", out["reasons"]
    assert out["plan"]["runner"] in ("triton_kernel", "aiter")
    aiter = candidate(out, "aiter")
    assert aiter["eligible"] and aiter["engines"] == ["vllm"]


def test_deepseek_r1_per_channel_fp8_on_aiter_gfx942(tmp_path, capsys):
    # sgl-project/sglang#12181: PTPC FP8 (per-channel weights, per-token activations) DeepSeek-R1 on MI308X, TP 8.
    # SGLang builds AITER only under SGLANG_USE_AITER (vendor_library; its ROCm images set it): stated here
    out = explain(tmp_path, capsys, arch="gfx942", quant="fp8_channel", model=DEEPSEEK_R1, tp=8, ep=1, a2a="none",
                  runner="aiter", vendor_library=True)
    assert out["status"] == "ok", out["reasons"]
    assert out["plan"]["runner"] == "aiter"
    assert set(candidate(out, "aiter")["engines"]) == {"sglang", "vllm"}  # AITER is not a TensorRT-LLM kernel


# ------------------------------------------------------------------------------ aiter
def test_aiter_mxfp4_on_gfx942_is_vllm_only(tmp_path, capsys):
    # SGLang registers MXFP4 on ROCm only for gfx95x (quantization/mxfp4.py Mxfp4Config.from_config); AITER's
    # CK/asm MXFP4 kernels are gfx950-only; vLLM's Triton W4A16 path runs on gfx942.
    # The check is Mxfp4Config's (quant_method mxfp4, gpt-oss): the refusal holds for the gpt-oss architecture.
    out = explain(tmp_path, capsys, gpu="MI300X", quant="mxfp4", model=GPT_OSS_120B, tp=8, engine="sglang")
    assert "quant_unsupported" in codes(candidate(out, "aiter"))


def test_aiter_mxfp4_swiglu_on_gfx950_both_engines(tmp_path, capsys):
    # AiterExperts accepts kMxfp4Static on gfx950 (rocm_aiter_moe.py); ActivationType.Swiglu since aiter v0.1.7. The AITER
    # switch stated on (vLLM's AITER MXFP4 experts need VLLM_ROCM_USE_AITER; SGLang's SGLANG_USE_AITER).
    out = explain(tmp_path, capsys, gpu="MI355X", quant="mxfp4", model=GPT_OSS_120B, tp=8, runner="aiter",
                  vendor_library=True)
    assert out["status"] == "ok", out["reasons"]
    assert set(candidate(out, "aiter")["engines"]) == {"sglang", "vllm"}
    # An aiter older than v0.1.7 has no Swiglu activation.
    out = explain(tmp_path, capsys, gpu="MI355X", quant="mxfp4", model=GPT_OSS_120B, tp=8, runner="aiter",
                  vendor_library=True, packages={"amd-aiter": "0.1.6"})
    assert "activation_unsupported" in codes(candidate(out, "aiter"))


def test_aiter_triton_mxfp4_routes_renormalize_only_and_no_dp(tmp_path, capsys):
    """aiter_mxfp4_w4a16_moe.py: routing Renormalize/RenormalizeNaive; _supports_parallel_config dp_size <= 1.

    This pinned, at the release then assumed (vLLM 0.29.0), a deepseek_v3-routed gfx942 MXFP4 deployment as unverified
    for vLLM (issue 18: aiter's routing list is open). The 2026-12-05 release delta (docs/release_delta_2026-12-05/
    vllm_B.md F5, F6) found it wrong, and the wheels confirm:
    - 0.29.0: no AITER MXFP4 class takes gfx942 (vllm-0.29.0 experts/aiter_mxfp4_w4a8_moe.py:
      AiterW4A16ExpertsMonolithic._supports_current_device: on_gfx950() or on_gfx1250()): refused, arch_unsupported;
    - 0.30.0 .. 0.31.0: the gfx942 Triton W4A16 class exists, but its routing check has no DeepSeekV3 (vllm-0.31.0
      experts/aiter_mxfp4_w4a16_moe.py:AiterW4A16ExpertsMonolithic._supports_routing_method: Renormalize,
      RenormalizeNaive, DeepseekV4): refused, routing_unsupported;
    - 0.32.0 on: _supports_routing_method adds DeepSeekV3 (vllm-0.32.0, same function): the routing is supported, the
      plan unverified only for the unstated dp (the dp <= 1 fact).
    SGLang refuses MXFP4 on gfx942 (Mxfp4Config.from_config) at every release."""
    model = dict(GPT_OSS_120B, routing="deepseek_v3")
    out = explain(tmp_path, capsys, gpu="MI300X", quant="mxfp4", model=model, tp=8, packages={"vllm": "0.29.0"})
    aiter = candidate(out, "aiter")
    assert aiter["evidence_by_engine"] == {"sglang": "refused", "vllm": "refused"}
    assert "arch_unsupported" in codes(aiter, "backends/aiter.yaml")
    out = explain(tmp_path, capsys, gpu="MI300X", quant="mxfp4", model=model, tp=8, packages={"vllm": "0.31.0"})
    aiter = candidate(out, "aiter")
    assert aiter["evidence_by_engine"] == {"sglang": "refused", "vllm": "refused"}
    assert "routing_unsupported" in codes(aiter, "backends/aiter.yaml")
    assert "arch_unsupported" not in codes(aiter)
    out = explain(tmp_path, capsys, gpu="MI300X", quant="mxfp4", model=model, tp=8, packages={"vllm": "0.32.0"})
    aiter = candidate(out, "aiter")
    assert aiter["evidence_by_engine"] == {"sglang": "refused", "vllm": "unverified"}
    assert "routing_unsupported" not in codes(aiter) | {u["code"] for u in aiter["unknowns"]}
    assert "parallelism_unsupported" in {u["code"] for u in aiter["unknowns"]}
    out = explain(tmp_path, capsys, gpu="MI300X", quant="mxfp4", model=GPT_OSS_120B, tp=8, dp=2)
    assert "parallelism_unsupported" in codes(candidate(out, "aiter"), "backends/aiter.yaml")


def test_aiter_bf16_ck_tile_alignment(tmp_path, capsys):
    # ROCm/aiter v0.1.20.post1 gen_instances.py A16W16_gemm1_heuristic_dispatch: 64-wide tiles up to
    # inter_dim 192, 128-wide above; ROCm/aiter#5444 (1792 / 8 = 224 refused).
    model = dict(QWEN3_30B)
    out = explain(tmp_path, capsys, gpu="MI300X", quant="bf16", model=model, tp=8)  # 96 per rank
    assert "shape_unaligned" in codes(candidate(out, "aiter"), "backends/aiter.yaml")
    out = explain(tmp_path, capsys, gpu="MI300X", quant="bf16", model=model, tp=4)  # 192 per rank
    assert candidate(out, "aiter")["eligible"], candidate(out, "aiter")["reasons"]
    model["moe_intermediate_size"] = 1792  # 224 per rank at TP 8
    out = explain(tmp_path, capsys, gpu="MI300X", quant="bf16", model=model, tp=8)
    assert "shape_unaligned" in codes(candidate(out, "aiter"), "backends/aiter.yaml")


def test_aiter_fp8_ck_alignment_holds_for_both_engines(tmp_path, capsys):
    # ROCm/aiter#5413: CK 2-stage fp8 MoE needs N, K % 128. SGLang's AITER path does not pad; vLLM's padding
    # (vllm-project/vllm#55251) was an open PR when read, and field round 29 (vllm-project/recipes#620) saw 192 per rank
    # die at warm-up under vLLM: both engines are held to it.
    model = dict(DEEPSEEK_R1, moe_intermediate_size=1536)  # 192 per rank at TP 8
    for engine in ("vllm", "sglang"):
        out = explain(tmp_path, capsys, arch="gfx942", quant="fp8_channel", model=model, tp=8, runner="aiter",
                      engine=engine, vendor_library=True)
        assert "shape_unaligned" in codes(candidate(out, "aiter"), "backends/aiter.yaml")
    out = explain(tmp_path, capsys, arch="gfx942", quant="fp8_channel", model=DEEPSEEK_R1, tp=8, runner="aiter",
                  engine="vllm", vendor_library=True)  # 2048 / 8 = 256 per rank
    assert out["status"] == "ok", out["reasons"]


def test_aiter_weight_on_input_only_top1_and_not_block_fp8(tmp_path, capsys):
    # vLLM rocm_aiter_fused_experts: apply_router_weight_on_input asserts topk == 1 and not block-scaled FP8.
    # SGLang (issue 21, sgl-project/sglang#6274): top-1 in every non-MXFP4 format from 0.5.11 (its default here is
    # newer), block FP8 included (tests/test_field_2026_kinds_b.py).
    model = {"num_experts": 16, "top_k": 1, "hidden_size": 5120, "moe_intermediate_size": 8192,
             "activation": "silu", "routing": "llama4"}
    out = explain(tmp_path, capsys, gpu="MI300X", quant="bf16", model=model, tp=8, runner="aiter", vendor_library=True)
    assert out["status"] == "ok", out["reasons"]
    assert candidate(out, "aiter")["engines"] == ["sglang", "vllm"]
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=model, tp=8, runner="aiter", vendor_library=True)
    assert out["status"] == "ok" and candidate(out, "aiter")["engines"] == ["sglang"], out["reasons"]
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=model, tp=8, runner="aiter", engine="vllm")
    assert "routing_unsupported" in codes(candidate(out, "aiter"), "backends/aiter.yaml")


def test_aiter_takes_mori_not_deepep_or_mooncake(tmp_path, capsys):
    # vllm-project/vllm#28664 and sgl-project/sglang#17012: MoRI dispatch + AITER experts. DeepEP and Mooncake EP
    # are NVIDIA builds (mooncake-ep/setup.py has no HIP branch).
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=DEEPSEEK_R1, tp=8, ep=8, a2a="mori",
                  runner="aiter")
    assert out["status"] == "ok", out["reasons"]
    # Issue 18: the a2a arch lists (DeepEP, Mooncake) and aiter's a2a list name what was verified, and no check
    # refuses a ROCm GPU (SGLang even registers DeepEP/Mooncake fused functions for aiter): both are unverified
    # (Mooncake's per-rank cap was once checked against moe-select's default token count, which refused it here; a
    # default is not checked: break51).
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=DEEPSEEK_R1, tp=8, ep=8, a2a="deepep",
                  runner="aiter")
    aiter = candidate(out, "aiter")
    assert aiter["evidence"] == "unverified" and "a2a_unsupported" in {u["code"] for u in aiter["unknowns"]}
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=DEEPSEEK_R1, tp=8, ep=8, a2a="mooncake",
                  a2a_mode="low_latency", runner="aiter")
    aiter = candidate(out, "aiter")
    assert aiter["evidence"] == "unverified" and "a2a_unsupported" in {u["code"] for u in aiter["unknowns"]}


# ------------------------------------------------------------------------------ common
def test_block_fp8_has_no_hidden_size_rule(tmp_path, capsys):
    # sglang fp8.py Fp8MoEMethod.create_weights: scales use ceil division over hidden; only the per-rank
    # intermediate is checked. A hidden size of 2880 is not refused by the rules every runner obeys.
    model = dict(DEEPSEEK_R1, hidden_size=2880)
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=model, tp=8, runner="aiter")
    assert not reasons_from(out, "backends/common.yaml"), out["reasons"]
    assert out["status"] == "ok"


def test_block_fp8_split_uses_the_block_shape(tmp_path, capsys):
    # Fp8MoEMethod.create_weights: intermediate_size_per_partition % block_n always, % block_k when tp > 1.
    model = dict(QWEN3_30B, moe_intermediate_size=512)  # 64 per rank at TP 8
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=model, tp=8)
    assert any(r["code"] == "shape_unaligned" for r in reasons_from(out, "backends/common.yaml"))
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=model, tp=8,
                  quant_config={"block": [64, 64]})
    assert not reasons_from(out, "backends/common.yaml")
    # block_k only with tp > 1: [128, 256] blocks, 384 rows per rank.
    model["moe_intermediate_size"] = 384
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=model, tp=2, ep=2,
                  quant_config={"block": [128, 256]})
    assert any("quant_block_k" in r["detail"] for r in reasons_from(out, "backends/common.yaml"))
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=model, tp=1,
                  quant_config={"block": [128, 256]})
    assert not reasons_from(out, "backends/common.yaml")


def test_block_fp8_shared_experts_split_by_tp_even_when_ep_equals_tp(tmp_path, capsys):
    # sglang fp8.py Fp8LinearMethod.validate_block_quant_shapes / vLLM fp8_utils.validate_fp8_block_shape:
    # the TP-split shared expert (1408 / 8 = 176) is refused even with ep == tp; SGLang replicates the shared
    # experts with the deepep/mooncake/mori all-to-alls.
    model = dict(DEEPSEEK_R1, moe_intermediate_size=1408, shared_expert_intermediate_size=1408)
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=model, tp=8, ep=8, dp=1, runner="aiter")
    shared = [r for r in reasons_from(out, "backends/common.yaml") if "shared_intermediate_per_tp" in r["detail"]]
    assert shared and {r["code"] for r in shared} == {"shape_unaligned"}
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=model, tp=8, ep=8, a2a="mori",
                  runner="aiter", engine="sglang")
    assert not [r for r in reasons_from(out, "backends/common.yaml") if "shared_intermediate_per_tp" in r["detail"]]
    # The dense MLP layers too: 11328 / 8 = 1416 rows per TP rank is not a multiple of 128.
    model = dict(DEEPSEEK_R1, dense_intermediate_size=11328)
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=model, tp=8, dp=1, runner="aiter")
    assert [r for r in reasons_from(out, "backends/common.yaml") if "dense_intermediate_per_tp" in r["detail"]]
    # dp not given: never assumed either way; the rule refuses at dp 1, so the candidate is unverified (issue 21), its
    # unknown naming dp and the rule
    out = explain(tmp_path, capsys, gpu="MI300X", quant="fp8_block", model=model, tp=8, runner="aiter")
    assert not [r for r in reasons_from(out, "backends/common.yaml") if "dense_intermediate_per_tp" in r["detail"]]
    aiter = candidate(out, "aiter")
    assert aiter["evidence"] == "unverified"
    dense = [x for x in aiter["unknowns"] if "dense_intermediate_per_tp" in x["detail"]]
    assert dense and all(x["source"].startswith("backends/common.yaml:") and "not state dp" in x["detail"]
                         and x["settle"].startswith("state dp") for x in dense), aiter["unknowns"]


def test_int4_group_alignment_per_rank(tmp_path, capsys):
    # A compressed-tensors WNA16 MoE layer takes whole scale groups per rank in vLLM on any GPU (0.24.0 on: create_weights
    # raises): group 128 at TP 4 (192 rows per rank) is refused, TP 2 is not. AWQ on ROCm runs MoeWNA16's Triton path
    # (the CUDA kernel that vllm-project/vllm#17604 hit is CUDA only): not refused by the group rows.
    ct = {"quant_config": {"group_size": 128, "layout": "compressed-tensors"}, "engine": "vllm"}
    out = explain(tmp_path, capsys, gpu="MI300X", quant="int4_w4a16", model=QWEN3_30B, tp=4, **ct)
    assert any(r["code"] == "shape_unaligned" and "quant_group_size" in r["detail"]
               for r in reasons_from(out, "backends/common.yaml"))
    out = explain(tmp_path, capsys, gpu="MI300X", quant="int4_w4a16", model=QWEN3_30B, tp=2, **ct)
    assert not [r for r in reasons_from(out, "backends/common.yaml") if r["code"] == "shape_unaligned"]
    out = explain(tmp_path, capsys, gpu="MI300X", quant="int4_w4a16", model=QWEN3_30B, tp=4, engine="vllm",
                  engine_version="0.12.0", quant_config={"group_size": 128, "layout": "awq"})
    assert not [r for r in reasons_from(out, "backends/common.yaml") if "quant_group_size" in r["detail"]]


def test_expert_divisibility_and_tp_multiple_of_ep_are_sglang_rules(tmp_path, capsys):
    # sglang FusedMoE.__init__ asserts routed experts % ep; vLLM's determine_expert_map splits unevenly.
    model = dict(QWEN3_30B, num_experts=60, top_k=4, moe_intermediate_size=1408)
    out = explain(tmp_path, capsys, gpu="MI300X", quant="bf16", model=model, tp=8, ep=8)
    divis = [r for r in reasons_from(out, "backends/common.yaml") if r["code"] == "experts_not_divisible"]
    assert divis and all(r["engines"] == ["sglang"] for r in divis)
    # sglang parallel_state: moe_tp = tp // ep // moe_dp, so ep must divide tp.
    out = explain(tmp_path, capsys, gpu="MI300X", quant="bf16", model=QWEN3_30B, tp=8, ep=3, engine="sglang")
    assert any(r["code"] == "parallelism_unsupported" for r in reasons_from(out, "backends/common.yaml"))


# ------------------------------------------------------------------------------ deepep
def test_deepep_low_latency_hidden_sizes_in_sglang_only(tmp_path, capsys):
    # DeepEP csrc/kernels/legacy/launch.cuh SWITCH_HIDDEN; vLLM pads the hidden size (deepep_ll.py), SGLang does not.
    model = dict(GPT_OSS_120B, activation="silu", moe_intermediate_size=2048)
    out = explain(tmp_path, capsys, gpu="H200", quant="bf16", model=model, tp=8, ep=8, a2a="deepep",
                  a2a_mode="low_latency", engine="sglang")
    assert any(r["code"] == "shape_unaligned" for r in reasons_from(out, "backends/a2a/deepep.yaml"))
    out = explain(tmp_path, capsys, gpu="H200", quant="bf16", model=model, tp=8, ep=8, a2a="deepep",
                  a2a_mode="low_latency", engine="vllm")
    assert not reasons_from(out, "backends/a2a/deepep.yaml")
    # 3072 joined the set after v1.2.1.
    model["hidden_size"] = 3072
    for version, refused in (("1.2.1", True), ("2.0.0", False)):
        out = explain(tmp_path, capsys, gpu="H200", quant="bf16", model=model, tp=8, ep=8, a2a="deepep",
                      a2a_mode="low_latency", engine="sglang", packages={"deep_ep": version}, max_tokens_per_rank=256,
                      a2a_capacity=256)  # the buffer raised to the tokens (its default 128 refuses 256: issue 23)
        assert bool(reasons_from(out, "backends/a2a/deepep.yaml")) == refused, version


def test_deepep_low_latency_top_k_cap(tmp_path, capsys):
    # DeepEP v1.2.1 csrc/kernels/internode_ll.cu: kNumMaxTopK = 11.
    model = dict(QWEN3_30B, top_k=12, moe_intermediate_size=1536, hidden_size=4096)
    out = explain(tmp_path, capsys, gpu="H200", quant="bf16", model=model, tp=8, ep=8, a2a="deepep",
                  a2a_mode="low_latency")
    assert any("top_k = 12 is above 11" in r["detail"] for r in reasons_from(out, "backends/a2a/deepep.yaml"))


def test_deepep_normal_ep_sizes_and_sglang_ep_equals_tp(tmp_path, capsys):
    # DeepEP buffers/legacy.py Buffer.get_dispatch_config: configs for 2..160 ranks (no 12);
    # sglang overrides.py _a2a_ep_size: ep = tp for every TP-spanning all-to-all.
    model = dict(QWEN3_30B, num_experts=96)
    out = explain(tmp_path, capsys, gpu="H200", quant="bf16", model=model, tp=12, ep=12, a2a="deepep",
                  a2a_mode="normal", cuda_graph=False)
    assert any("ep = 12 is not one of" in r["detail"] for r in reasons_from(out, "backends/a2a/deepep.yaml"))
    out = explain(tmp_path, capsys, gpu="H200", quant="bf16", model=QWEN3_30B, tp=8, ep=4, a2a="deepep",
                  engine="vllm")
    assert not [r for r in reasons_from(out, "backends/a2a/deepep.yaml") if "one of {tp" in r["detail"]]
    out = explain(tmp_path, capsys, gpu="H200", quant="bf16", model=QWEN3_30B, tp=8, ep=4, a2a="deepep",
                  engine="sglang")
    assert [r for r in reasons_from(out, "backends/a2a/deepep.yaml") if "one of {tp" in r["detail"]]


# ------------------------------------------------------------------------------ mooncake, pplx, nixl, deepep_v2
def test_mooncake_is_sglang_low_latency_with_token_cap(tmp_path, capsys):
    # sglang token_dispatcher/mooncake.py: low-latency only, per-rank cap asserted <= 1024; vLLM's All2AllBackend
    # has no mooncake; Mooncake EP has no ROCm build.
    dep = dict(gpu="H200", quant="bf16", model=QWEN3_30B, tp=8, ep=8, a2a="mooncake", phase="decode",
               max_tokens_per_rank=128, a2a_mode="low_latency")   # auto: SGLang's Mooncake dispatcher raises
    out = explain(tmp_path, capsys, **dep, engine="sglang")
    assert not reasons_from(out, "backends/a2a/mooncake.yaml")
    assert out["deployment"]["a2a_modes"] == ["low_latency"]
    out = explain(tmp_path, capsys, **dict(dep, phase="both", max_tokens_per_rank=4096), engine="sglang")
    assert any("a2a_tokens_per_rank = 4096 is above a2a_capacity (128)" in r["detail"]
               for r in reasons_from(out, "backends/a2a/mooncake.yaml"))
    out = explain(tmp_path, capsys, **dict(dep, phase="both", max_tokens_per_rank=4096,
                                           a2a_capacity=2048),
                  engine="sglang")
    assert any("a2a_capacity = 2048 is above 1024" in r["detail"] for r in reasons_from(out, "backends/a2a/mooncake.yaml"))
    out = explain(tmp_path, capsys, **dep, engine="vllm")
    assert any(r["code"] == "a2a_unsupported" and "not shipped by vllm" in r["detail"]
               for r in reasons_from(out, "backends/a2a/mooncake.yaml"))
    out = explain(tmp_path, capsys, **dict(dep, gpu="MI300X"))
    assert "a2a_unsupported" in {r["code"] for r in reasons_from(out, "backends/a2a/mooncake.yaml")}


def test_pplx_is_sglang_only_and_needs_dp_attention(tmp_path, capsys):
    # sgl-project/sglang#30756 (pplx in SGLang: low-latency only, dp-attention with dp >= 2);
    # vllm-project/vllm#33724 (vLLM removed pplx: falls back to allgather_reducescatter).
    dep = dict(gpu="H200", quant="bf16", model=QWEN3_30B, tp=4, ep=4, a2a="pplx")
    out = explain(tmp_path, capsys, **dep, engine="vllm")
    assert any("pplx" in r["detail"] for r in reasons_from(out, "backends/a2a/pplx.yaml"))
    out = explain(tmp_path, capsys, **dep, engine="sglang", dp=1)
    assert any("dp = 1 is below 2" in r["detail"] for r in reasons_from(out, "backends/a2a/pplx.yaml"))
    out = explain(tmp_path, capsys, **dep, engine="sglang", dp=4, decode_tokens_per_rank=128)   # SGLang's own: 512 (round 53)
    assert not reasons_from(out, "backends/a2a/pplx.yaml")
    assert out["deployment"]["a2a_modes"] == ["low_latency"]


def test_nixl_and_deepep_v2_exist_with_their_layouts(tmp_path, capsys):
    # sglang token_dispatcher/nixl.py (DeepEP-LL masked output, low-latency only) and sgl-project/sglang#29525
    # (deepep_v2: contiguous layout for prefill, masked expert-major for decode; fusion disabled).
    out = explain(tmp_path, capsys, gpu="H200", quant="bf16", model=QWEN3_30B, tp=8, ep=8, a2a="nixl",
                  phase="decode", max_tokens_per_rank=128, engine="sglang")
    assert out["deployment"]["a2a_modes"] == ["low_latency"]
    assert not reasons_from(out, "backends/a2a/nixl.yaml")
    # SGLang 0.5.21: 0.5.19 and 0.5.20 (0.5.19 is the release assumed without engine_version) fail DeepEP V2's prefill
    # into DeepGEMM (sgl-project/sglang#38160, backends/a2a/deepep_v2.yaml), which this check is not about.
    out = explain(tmp_path, capsys, gpu="H200", quant="bf16", model=QWEN3_30B, tp=8, ep=8, a2a="deepep_v2",
                  engine="sglang", engine_version="0.5.21", cuda_graph=True)
    assert out["deployment"]["a2a_modes"] == ["normal", "low_latency"]
    assert not reasons_from(out, "backends/a2a/deepep_v2.yaml")  # decode is captured, prefill is not
    out = explain(tmp_path, capsys, gpu="H200", quant="bf16", model=DEEPSEEK_R1, tp=8, ep=8, a2a="deepep_v2",
                  engine="sglang", shared_expert_fusion=True)
    assert any("fused_shared_experts" in r["detail"] for r in reasons_from(out, "backends/a2a/deepep_v2.yaml"))
    for a2a in ("nixl", "deepep_v2", "mori", "pplx", "mooncake"):  # TensorRT-LLM communication_factory.py
        gpu = "MI300X" if a2a == "mori" else "H200"
        out = explain(tmp_path, capsys, gpu=gpu, quant="bf16", model=QWEN3_30B, tp=8, ep=8, a2a=a2a, engine="trtllm")
        assert reasons_from(out, f"backends/a2a/{a2a}.yaml"), a2a


def test_deepep_v2_under_vllm_hands_over_token_major_rows(tmp_path, capsys):
    # vllm-project/vllm@02bd2a494f5c prepare_finalize/deepep_v2.py: DeepEPV2PrepareAndFinalize hands token-major rows in
    # both layouts (decode/CUDA-graph and prefill), where SGLang's decode layout is expert-major (batched); the rows are
    # padded (an upper-bound count, -1 ids), vLLM's PaddedStandard from 0.34.0 (tests/test_vllm_deepep_v2_padded.py).
    dep = dict(gpu="H200", quant="bf16", model=QWEN3_30B, tp=8, ep=8, a2a="deepep_v2")
    vllm = explain(tmp_path, capsys, **dep, engine="vllm")
    assert vllm["status"] == "ok" and vllm["plan"]["dispatch_formats"] == ["padded_standard"], vllm["plan"]
    # vLLM's TritonExperts refuse FlashInfer's NVLink all-to-alls only: triton takes deepep_v2 there, supported.
    assert vllm["plan"]["runner"] == "triton" and vllm["plan"]["evidence"] == "supported", vllm["plan"]["unknowns"]
    # SGLang 0.5.21: 0.5.19 (assumed) and 0.5.20 fail DeepEP V2's prefill (sgl-project/sglang#38160).
    sglang = explain(tmp_path, capsys, **dep, engine="sglang", engine_version="0.5.21")
    assert sglang["plan"]["dispatch_formats"] == ["standard", "batched"]
    # A runner that consumes token-major rows only (vLLM's CUTLASS experts) is not held back by a batched hand-over.
    assert not [u for u in candidate(vllm, "cutlass")["unknowns"] + candidate(vllm, "cutlass")["reasons"]
                if "hands over batched" in u["detail"]]
    # vLLM applies a router weight on the input only for top-1 (prepare_async asserts topk == 1).
    llama4 = explain(tmp_path, capsys, **{**dep, "model": {**QWEN3_30B, "routing": "llama4", "top_k": 2}}, engine="vllm")
    assert any(r["code"] == "shape_unaligned" and "topk=1" in r["detail"] for r in reasons_from(llama4, "backends/a2a/deepep_v2.yaml"))


# ------------------------------------------------------------------------------ mori, none, torch
def test_mori_normal_mode_is_not_captured(tmp_path, capsys):
    # sgl-project/sglang#32039: MoRI normal mode with the decode graph broke routing; SGLang disables it.
    # sgl-project/sglang#19498: auto is forced to normal.
    dep = dict(gpu="MI300X", quant="fp8_block", model=DEEPSEEK_R1, tp=8, ep=8, a2a="mori", runner="aiter")
    out = explain(tmp_path, capsys, **dep)
    assert out["status"] == "ok" and out["deployment"]["a2a_modes"] == ["normal"]
    assert out["deployment"]["cuda_graph"] is False
    out = explain(tmp_path, capsys, **dep, cuda_graph=True)
    assert out["status"] == "rejected" and "cuda_graph_unsupported" in {r["code"] for r in out["reasons"]}
    out = explain(tmp_path, capsys, **dep, cuda_graph=True, a2a_mode="low_latency")
    assert out["status"] == "ok", out["reasons"]


def test_mori_archs_are_asserted_by_vllm_only(tmp_path, capsys):
    # vllm-project/vllm@001430048e81 all2all.py MoriAll2AllManager._make_all2all_kwargs asserts on_gfx942() or
    # on_gfx950(): MoRI on an MI250 (gfx90a) is refused under vLLM; SGLang's archs are MoRI's documented GPUs (open).
    dep = dict(gpu="MI250", quant="bf16", model=QWEN3_30B, tp=8, ep=8, a2a="mori")
    vllm = reasons_from(explain(tmp_path, capsys, **dep, engine="vllm"), "backends/a2a/mori.yaml")
    assert any(r["code"] == "a2a_unsupported" and "exhaustive archs list" in r["detail"] for r in vllm), vllm
    sglang = explain(tmp_path, capsys, **dep, engine="sglang")
    assert not [r for r in reasons_from(sglang, "backends/a2a/mori.yaml") if "archs" in r["detail"]]


@pytest.mark.parametrize("a2a,graph", [("none", True), ("torch", False)])
def test_this_projects_dispatchers(tmp_path, capsys, a2a, graph):
    # this project: backends/a2a/dispatch_none.py (identity, no host sync) and dispatch_torch.py (split sizes
    # copied to the host before all_to_all_single: not capturable).
    ep = 1 if a2a == "none" else 2
    out = explain(tmp_path, capsys, gpu="H200", quant="bf16", model=QWEN3_30B, tp=2, ep=ep, a2a=a2a, cuda_graph=True)
    graph_reasons = [r for r in reasons_from(out, f"backends/a2a/{a2a}.yaml") if r["code"] == "cuda_graph_unsupported"]
    assert bool(graph_reasons) != graph
