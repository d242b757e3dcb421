"""Issue 21 part B.2: upstream conditions no fact expressed before, each a refused deployment and one just inside the
limit, planning only (moe_select.explain on declared machines). Each fact cites its upstream check at a commit:

- vLLM's TRT-LLM-gen FP8 experts (TrtLlmFp8ExpertsMonolithic._apply_block_scale @0390b581472b) assert at most 512
  experts (FP8 block, MXFP8) and top-k at most 32 (FP8 block): backends/flashinfer_trtllm.yaml;
- FlashInfer's DeepSeek routing kernel (trtllm_fused_moe_routing_deepseek.cu run @v0.6.18rc7, runImpl @v0.6.4): at most
  32 experts per group and an expert count that is a multiple of 4 (grouped; every n_group before 0.6.8), the new
  quantity experts_per_group = num_experts / n_group (moe_select/conditions.py): backends/flashinfer_trtllm.yaml;
- DeepEP's normal-mode kernels assert num_topk <= 32 (csrc/kernels/legacy/intranode.cu @dd758caf4518, v1.2.1):
  backends/a2a/deepep.yaml;
- SGLang turns shared-expert fusion off for the flashinfer_cutedsl, flashinfer_trtllm and flashinfer_trtllm_routed
  runners (overrides.py _moe_runner_fusion_disable @bc0c93b5e495) and the flashinfer all-to-all
  (_a2a_fusion_adjustments); deepep_v2's fact was there (backends/a2a/deepep_v2.yaml);
- vLLM's EP size is exactly tp x dp x pcp (FusedMoEParallelConfig.make @002d6073aa03): with dp given, ep is the
  group written as tp (a launch line folds dp and pcp into tp) or as tp x dp (the new quantity tp_dp), not only a
  multiple of tp as before: backends/common.yaml;
- the pplx / deepep_v2 / flashinfer all-to-all token budgets are issue 23's capacity facts (moe_select/capacity.py,
  d3b17ad): checked here at the capacity and one token above.

Left out: SGLang's model allow-lists (deepep_v2's register_deepep_v2_model registry, MegaMoE's validated
architectures) name model architectures, which no deployment key carries.
"""
from __future__ import annotations

import moe_select

DSV3 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
        "routing": "deepseek_v3", "n_group": 8, "topk_group": 4, "num_shared_experts": 1}
RENORM = dict(DSV3, routing="renormalize", n_group=None, topk_group=None, num_shared_experts=0)


def explain(**dep):
    return moe_select.explain(dep)


def reasons(report, runner):
    """Every reason of ``runner``'s candidate, the deployment-wide ones (the all-to-all's, every runner's) included."""
    cand = next(c for c in report.candidates if c.backend == runner)
    return list(report.reasons) + list(cand.reasons)


def cites(report, runner, text, file):
    """The reasons of ``runner`` whose detail has ``text`` and whose source is in ``file``."""
    return [r for r in reasons(report, runner) if text in r.detail and r.source.startswith(file)]


def planned(report, runner):
    return report.status == "ok" and report.plan.runner == runner


# ------------------------------------------------------------------ vLLM's TRT-LLM-gen FP8 experts
def test_vllm_trtllm_fp8_block_at_most_512_experts():
    over = explain(gpu="B200", quant="fp8_block", engine="vllm", runner="flashinfer_trtllm", tp=8,
                   model=dict(RENORM, num_experts=516))
    assert cites(over, "flashinfer_trtllm", "global_num_experts <= 512", "backends/flashinfer_trtllm.yaml")
    assert over.status != "ok"
    ok = explain(gpu="B200", quant="fp8_block", engine="vllm", runner="flashinfer_trtllm", tp=8,
                 model=dict(RENORM, num_experts=512))
    assert planned(ok, "flashinfer_trtllm")
    # SGLang does not assert it (FlashInfer's renormalize routing takes 2048 experts from 0.6.7)
    sglang = explain(gpu="B200", quant="fp8_block", engine="sglang", runner="flashinfer_trtllm", tp=8,
                     model=dict(RENORM, num_experts=516))
    assert not cites(sglang, "flashinfer_trtllm", "global_num_experts <= 512", "backends/flashinfer_trtllm.yaml")


def test_vllm_trtllm_mxfp8_at_most_512_experts():
    over = explain(gpu="B200", quant="mxfp8", engine="vllm", runner="flashinfer_trtllm", tp=8,
                   model=dict(RENORM, num_experts=516))
    assert cites(over, "flashinfer_trtllm", "global_num_experts <= 512", "backends/flashinfer_trtllm.yaml")
    ok = explain(gpu="B200", quant="mxfp8", engine="vllm", runner="flashinfer_trtllm", tp=8,
                 model=dict(RENORM, num_experts=512))
    assert not cites(ok, "flashinfer_trtllm", "global_num_experts <= 512", "backends/flashinfer_trtllm.yaml")


def test_vllm_trtllm_fp8_block_top_k_at_most_32():
    over = explain(gpu="B200", quant="fp8_block", engine="vllm", runner="flashinfer_trtllm", tp=8,
                   model=dict(RENORM, top_k=33))
    assert cites(over, "flashinfer_trtllm", "assert topk <= 32", "backends/flashinfer_trtllm.yaml")
    ok = explain(gpu="B200", quant="fp8_block", engine="vllm", runner="flashinfer_trtllm", tp=8,
                 model=dict(RENORM, top_k=32))
    assert planned(ok, "flashinfer_trtllm")


# ------------------------------------------------------------------ FlashInfer's DeepSeek routing kernel
def test_deepseek_routing_at_most_32_experts_per_group():
    over = explain(gpu="B200", quant="nvfp4", engine="sglang", runner="flashinfer_trtllm", tp=8,
                   model=dict(DSV3, num_experts=384, n_group=8))  # 48 per group
    hit = cites(over, "flashinfer_trtllm", "experts_per_group = 48 is above 32", "backends/flashinfer_trtllm.yaml")
    assert hit and over.status != "ok"
    ok = explain(gpu="B200", quant="nvfp4", engine="sglang", runner="flashinfer_trtllm", tp=8, model=DSV3)  # 32
    assert planned(ok, "flashinfer_trtllm")
    # ungrouped (n_group 1): the custom routing path, no per-group cap
    flat = explain(gpu="B200", quant="nvfp4", engine="sglang", runner="flashinfer_trtllm", tp=8,
                   model=dict(DSV3, num_experts=384, n_group=1, topk_group=1))
    assert not cites(flat, "flashinfer_trtllm", "experts_per_group", "backends/flashinfer_trtllm.yaml")


def test_deepseek_routing_expert_count_a_multiple_of_4():
    model = dict(DSV3, num_experts=30, top_k=4, n_group=2, topk_group=1, moe_intermediate_size=2048)
    over = explain(gpu="B200", quant="nvfp4", engine="sglang", runner="flashinfer_trtllm", tp=1, model=model)
    assert cites(over, "flashinfer_trtllm", "num_experts = 30 is not a multiple of 4", "backends/flashinfer_trtllm.yaml")
    ok = explain(gpu="B200", quant="nvfp4", engine="sglang", runner="flashinfer_trtllm", tp=1,
                 model=dict(model, num_experts=32))
    assert planned(ok, "flashinfer_trtllm")


def test_deepseek_routing_ungrouped_multiple_of_4_before_0_6_8_only():
    model = dict(DSV3, num_experts=30, top_k=4, n_group=1, topk_group=1)
    old = explain(gpu="B200", quant="nvfp4", engine="sglang", runner="flashinfer_trtllm", tp=1, model=model,
                  packages={"flashinfer-python": "0.6.4"})
    assert cites(old, "flashinfer_trtllm", "before 0.6.8: the expert count is a multiple of 4",
                 "backends/flashinfer_trtllm.yaml")
    new = explain(gpu="B200", quant="nvfp4", engine="sglang", runner="flashinfer_trtllm", tp=1, model=model,
                  packages={"flashinfer-python": "0.6.8"})
    assert not cites(new, "flashinfer_trtllm", "multiple of 4", "backends/flashinfer_trtllm.yaml")


# ------------------------------------------------------------------ DeepEP normal mode
def test_deepep_normal_mode_top_k_at_most_32():
    common = dict(gpu="H200", quant="fp8_block", engine="sglang", tp=8, ep=8, a2a="deepep", a2a_mode="normal",
                  cuda_graph=False, runner="deep_gemm")
    over = explain(**common, model=dict(RENORM, top_k=33))
    assert cites(over, "deep_gemm", "num_topk <= 32", "backends/a2a/deepep.yaml") and over.status != "ok"
    ok = explain(**common, model=dict(RENORM, top_k=32))
    assert not cites(ok, "deep_gemm", "num_topk <= 32", "backends/a2a/deepep.yaml")
    assert planned(ok, "deep_gemm")


# ------------------------------------------------------------------ SGLang turns shared-expert fusion off
def _fusion(runner, **dep):
    fused = explain(engine="sglang", runner=runner, shared_expert_fusion=True, **dep)
    plain = explain(engine="sglang", runner=runner, **dep)
    return fused, plain


def test_sglang_fusion_off_for_flashinfer_trtllm():
    fused, plain = _fusion("flashinfer_trtllm", gpu="B200", quant="nvfp4", tp=8, model=DSV3)
    assert cites(fused, "flashinfer_trtllm", "disables shared-expert fusion", "backends/flashinfer_trtllm.yaml")
    assert fused.status != "ok" and planned(plain, "flashinfer_trtllm")
    vllm = explain(engine="vllm", runner="flashinfer_trtllm", shared_expert_fusion=True, gpu="B200", quant="nvfp4",
                   tp=8, model=DSV3)
    assert not cites(vllm, "flashinfer_trtllm", "disables shared-expert fusion", "backends/flashinfer_trtllm.yaml")


def test_sglang_fusion_off_for_flashinfer_trtllm_routed():
    fused, plain = _fusion("flashinfer_trtllm_routed", gpu="B200", quant="nvfp4", tp=8, model=DSV3)
    assert cites(fused, "flashinfer_trtllm_routed", "disables shared-expert fusion",
                 "backends/flashinfer_trtllm_routed.yaml")
    assert not cites(plain, "flashinfer_trtllm_routed", "disables shared-expert fusion",
                     "backends/flashinfer_trtllm_routed.yaml")


def test_sglang_fusion_off_for_flashinfer_cutedsl():
    fused, plain = _fusion("flashinfer_cutedsl", gpu="B200", quant="nvfp4", tp=8, model=DSV3)
    assert cites(fused, "flashinfer_cutedsl", "disables shared-expert fusion", "backends/flashinfer_cutedsl.yaml")
    assert fused.status != "ok" and planned(plain, "flashinfer_cutedsl")


def test_sglang_fusion_off_with_the_flashinfer_all_to_all():
    dep = dict(gpu="B200", quant="nvfp4", tp=8, ep=8, dp=8, a2a="flashinfer", model=DSV3)
    fused, plain = _fusion("flashinfer_cutlass", **dep)
    assert cites(fused, "flashinfer_cutlass", "with --moe-a2a-backend flashinfer", "backends/a2a/flashinfer.yaml")
    assert fused.status != "ok" and planned(plain, "flashinfer_cutlass")


def test_sglang_fusion_off_with_deepep_v2_was_already_a_fact():
    dep = dict(gpu="H200", quant="fp8_block", tp=8, ep=8, a2a="deepep_v2", model=DSV3)
    fused, plain = _fusion("deep_gemm", **dep)
    assert cites(fused, "deep_gemm", "disables shared-expert fusion with deepep_v2", "backends/a2a/deepep_v2.yaml")
    assert not cites(plain, "deep_gemm", "shared-expert fusion", "backends/a2a/deepep_v2.yaml")


# ------------------------------------------------------------------ vLLM's EP size is the whole MoE group
VLLM_EP = "vLLM's EP size is exactly dp x pcp x tp"


def test_vllm_ep_is_exactly_the_moe_group_when_dp_is_given():
    model = dict(RENORM, num_experts=128, hidden_size=2048, moe_intermediate_size=768)
    for tp, dp, ep in ((1, 8, 4), (4, 2, 12), (2, 2, 8)):  # a multiple of tp, but neither tp nor tp x dp
        r = explain(gpu="H200", quant="bf16", engine="vllm", tp=tp, dp=dp, ep=ep, model=model)
        hit = [x for x in r.reasons if VLLM_EP in x.detail and x.source.startswith("backends/common.yaml")]
        assert hit and hit[0].code == "parallelism_unsupported" and r.status != "ok", (tp, dp, ep)
    # the group as tp x dp (tp 1 with 8 DP engines), or as tp (a launch line's -tp 4 -dp 2 -ep: tp 8, dp 2, ep 8)
    for tp, dp, ep in ((1, 8, 8), (4, 2, 8), (8, 2, 8), (8, 8, 8)):
        r = explain(gpu="H200", quant="bf16", engine="vllm", tp=tp, dp=dp, ep=ep, model=model)
        assert r.status == "ok" and not [x for x in r.reasons if VLLM_EP in x.detail], (tp, dp, ep)
    # without dp (the unstated-input rule): ep 8 at tp 4 is refused at dp 1 and fine at dp 2, so the plan is
    # unverified, the unknown naming the constraint, the dp it would be refused at and "state dp"
    r = explain(gpu="H200", quant="bf16", engine="vllm", tp=4, ep=8, model=model)
    gap = [x for c in r.candidates for x in c.unknowns if VLLM_EP in x.detail]
    assert r.status == "ok" and r.plan.evidence == "unverified" and gap
    assert all(x.code == "parallelism_unsupported" and x.source.startswith("backends/common.yaml:")
               and "does not state dp" in x.detail and "at dp 1" in x.detail for x in gap)
    # ep equal to tp holds at every dp: no unknown
    r = explain(gpu="H200", quant="bf16", engine="vllm", tp=8, ep=8, model=model)
    assert r.status == "ok" and not [x for c in r.candidates for x in c.unknowns if VLLM_EP in x.detail]
    # SGLang's rule is its own (ep divides tp; its dp divides tp too, an input error otherwise): ep 4 is neither tp nor
    # tp x dp, which vLLM's rule would refuse
    r = explain(gpu="H200", quant="bf16", engine="sglang", tp=8, dp=8, ep=4, model=model)
    assert not [x for x in r.reasons if VLLM_EP in x.detail]


# ------------------------------------------------------------------ all-to-all token budgets (issue 23's facts)
def _budget(a2a, tokens, **dep):
    return explain(engine="sglang", a2a=a2a, max_tokens_per_rank=tokens, **dep)


def test_token_budgets_of_pplx_deepep_v2_and_flashinfer():
    """Pinned at SGLang 0.5.19 (the release assumed when this was written). From 0.5.22 SGLang divides DeepEP V2's
    prefill budget by the ranks a DP group's chunk is scattered over, tp // attn_dp (sglang-0.5.22 and 0.5.23
    sglang/srt/arg_groups/moe_hook.py:required_deepep_v2_prefill_tokens_per_rank): at tp 8, dp 1 a prefill chunk of
    8 x 128 tokens fits the default 128, one more does not."""
    pplx = dict(gpu="H200", quant="fp8_block", tp=8, ep=8, dp=8, runner="deep_gemm", model=DSV3, phase="prefill")
    v2 = dict(gpu="H200", quant="fp8_block", tp=8, ep=8, runner="deep_gemm", model=dict(DSV3, num_shared_experts=0),
              phase="prefill")
    fi = dict(gpu="B200", quant="nvfp4", tp=8, ep=8, dp=8, runner="flashinfer_cutlass", model=DSV3, phase="decode")
    for a2a, dep, capacity in (("pplx", pplx, 128), ("deepep_v2", v2, 128), ("flashinfer", fi, 4096)):
        inside = _budget(a2a, capacity, engine_version="0.5.19", **dep)
        over = _budget(a2a, capacity + 1, engine_version="0.5.19", **dep)
        assert not [r for r in inside.reasons if "a2a_tokens_per_rank" in r.detail], (a2a, inside.reasons)
        assert [r for r in over.reasons if "a2a_tokens_per_rank" in r.detail and
                r.source.startswith(f"backends/a2a/{a2a}.yaml")], (a2a, over.reasons)
        assert over.status != "ok", a2a
    inside = _budget("deepep_v2", 8 * 128, engine_version="0.5.23", **v2)
    assert inside.status == "ok" and not [r for r in inside.reasons if "a2a_tokens_per_rank" in r.detail]
    over = _budget("deepep_v2", 8 * 128 + 1, engine_version="0.5.23", **v2)
    assert over.status != "ok"
    assert [r for r in over.reasons if "a2a_tokens_per_rank = 129" in r.detail and
            r.source.startswith("backends/a2a/deepep_v2.yaml")], over.reasons
