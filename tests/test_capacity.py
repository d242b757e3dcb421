"""Issue 23, part 2: the all-to-all buffer capacities checked before launch.

Each a2a backend with a per-rank token capacity (backends/a2a/*.yaml ``capacity``: the engine variable, its default,
the most the engine accepts, the forwards that pass through it) refuses a deployment whose need exceeds it, naming
the variable, the computed need and the fix, and accepts the same deployment with a capacity that fits. Sources:

- sgl-project/sglang#29942: DeepEP low_latency with SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=512, a decode graph
  batch of 128 and 6 tokens per request (768 tokens per rank) fails at CUDA-graph capture (deep_ep.cpp assert);
- sgl-project/sglang@003b6ade987f:python/sglang/srt/arg_groups/moe_hook.py (pplx, MoRI, DeepEP v2 budgets);
- sgl-project/sglang@008b79d2358b:python/sglang/srt/layers/moe/token_dispatcher/flashinfer.py (FlashInfer workspace);
- sgl-project/sglang@007baab6e1d2:python/sglang/srt/layers/moe/token_dispatcher/nixl.py (NIXL-EP, at most 1024);
- sgl-project/sglang@0003215cf146:python/sglang/srt/environ.py (the defaults: 128, 128, 128, 128, 4096, unset).
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.catalog import default_catalog
from moe_select.launch_line import from_command

ROOT = Path(__file__).resolve().parents[1]
DSV3 = str(ROOT / "examples/model_configs/deepseek-ai__DeepSeek-V3")
NVFP4 = str(ROOT / "examples/model_configs/nvidia__DeepSeek-V3.1-NVFP4")

# One deployment per a2a backend with a capacity under SGLang, planned as it is (tests below vary the numbers).
BASE = {
    "deepep": dict(gpu="H200", model_config=DSV3, a2a="deepep"),
    # SGLang 0.5.21: 0.5.19 and 0.5.20 refuse DeepEP V2's prefill into deep_gemm (sgl-project/sglang#38160, 60b8517)
    "deepep_v2": dict(gpu="H200", model_config=DSV3, a2a="deepep_v2", engine_version="0.5.21"),
    "pplx": dict(gpu="H200", model_config=DSV3, a2a="pplx"),
    "nixl": dict(gpu="H200", model_config=DSV3, a2a="nixl"),
    "mooncake": dict(gpu="H200", model_config=DSV3, a2a="mooncake", a2a_mode="low_latency"),  # auto: SGLang raises
    "mori": dict(gpu="MI300X", model_config=DSV3, a2a="mori"),
    "flashinfer": dict(gpu="B200", model_config=NVFP4, a2a="flashinfer"),
    # SGLang 0.5.17's startup check of DeepSeek-V4's prefill chunk per rank against the Mega MoE cap (field round 56)
    "megamoe": dict(gpu="B200", a2a="megamoe", engine_version="0.5.17", quant="mxfp4",
                    model=dict(num_experts=256, top_k=6, hidden_size=4096, moe_intermediate_size=2048,
                               activation="silu_clamped", swiglu_limit=10.0, architecture="DeepseekV4ForCausalLM")),
}
#: a2a -> (variable, default, the phase whose need the test raises: a phase the buffer carries)
CAPS = {
    "deepep": ("SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK", 128, "decode"),
    "deepep_v2": ("SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK", 128, "prefill"),
    "pplx": ("SGLANG_PPLX_NUM_MAX_DISPATCH_TOKENS_PER_RANK", 128, "prefill"),
    "nixl": ("SGLANG_NIXL_EP_NUM_MAX_DISPATCH_TOKENS_PER_RANK", 128, "decode"),
    "mooncake": ("SGLANG_MOONCAKE_EP_NUM_MAX_DISPATCH_TOKENS_PER_RANK", 128, "decode"),
    "mori": ("SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK", 4096, "prefill"),
    "flashinfer": ("SGLANG_FLASHINFER_NUM_MAX_DISPATCH_TOKENS_PER_RANK", 4096, "decode"),
    "megamoe": ("SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK", 1024, "prefill"),
}


def _dep(a2a: str, **kw):
    d = {**BASE[a2a], "engine": "sglang", "tp": 8, "ep": 8, "dp": 8, "phase": "both", "max_tokens_per_rank": 64,
         "decode_tokens_per_rank": 64}
    d.update(kw)
    return d


def _capacity_reasons(report):
    """The capacity reasons of the main MoE layers (an NVFP4 checkpoint's bf16 mtp layer repeats them, prefixed)."""
    return [r for r in report.reasons if ("a2a_tokens_per_rank" in r.detail or "a2a_capacity =" in r.detail)
            and not r.detail.startswith("layers ")]


def test_every_capacity_fact_names_a_variable_the_sglang_table_reads_as_a_capacity():
    cat = default_catalog()
    from moe_select.engine_tables import table

    env = {e.name: e.means for e in table("sglang").env}
    found = {}
    for name, a2a in cat.a2a.items():
        for c in a2a.capacity:
            found[name] = c.variable
            assert env.get(c.variable) == "a2a_capacity", c.variable
            # the check itself is a constraint of the same file
            assert any(k.field == "a2a_tokens_per_rank" and k.max == "a2a_capacity" for k in a2a.constraints), name
    assert {k: v for k, v in found.items()} == {k: v[0] for k, v in CAPS.items()}
    assert {name: cat.a2a[name].capacity[0].default for name in CAPS} == {k: v[1] for k, v in CAPS.items()}


@pytest.mark.parametrize("a2a", sorted(CAPS))
def test_the_base_deployment_plans(a2a):
    r = moe_select.explain(_dep(a2a))
    assert r.plan is not None, [x.detail for x in r.reasons]


@pytest.mark.parametrize("a2a", sorted(CAPS))
def test_a_need_above_the_capacity_is_refused_naming_the_variable_the_need_and_the_fix(a2a):
    variable, default, phase = CAPS[a2a]
    need = default * 2
    key = "decode_tokens_per_rank" if phase == "decode" else "max_tokens_per_rank"
    r = moe_select.explain(_dep(a2a, **{key: need}))
    assert r.plan is None
    [reason] = {x.detail: x for x in _capacity_reasons(r)}.values()
    assert reason.code == "parallelism_unsupported"
    assert f"a2a_tokens_per_rank = {need} is above a2a_capacity ({default})" in reason.detail
    assert variable in reason.detail and f"{phase} {need}" in reason.detail
    assert reason.source.startswith(f"backends/a2a/{a2a}.yaml:")
    assert f"set {variable}={need}" in reason.fix
    flag = "--cuda-graph-max-bs" if phase == "decode" else "--chunked-prefill-size"
    assert f"<= {default}" in reason.fix and flag in reason.fix
    # the same deployment with a capacity that fits (the engine's variable set to the need) plans
    ok = moe_select.explain(_dep(a2a, **{key: need, "a2a_capacity": need}))
    assert ok.plan is not None, [x.detail for x in ok.reasons]
    assert not _capacity_reasons(ok)


def test_issue_29942_launch_line_refused_before_loading_and_accepted_with_1024():
    """sgl-project/sglang#29942: TP=8, DP=8 with DP attention, EP=8, deepep (auto: low_latency for decode),
    deep_gemm, graph batch 128, 6 tokens per request (target verify), SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=512:
    768 tokens per rank at capture; the report raised the variable to get past capture."""
    line = ("SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK={cap} python3 -m sglang.launch_server --model-path m --tp 8 "
            "--dp 8 --enable-dp-attention --ep 8 --moe-a2a-backend deepep --moe-runner-backend deep_gemm "
            "--cuda-graph-max-bs 128 --speculative-algorithm EAGLE --speculative-num-draft-tokens 6")
    # read at 0.5.19, the last release that takes --cuda-graph-max-bs (an alias of --cuda-graph-max-bs-decode, gone in 0.5.20)
    launch = from_command(line.format(cap=512), model_config=DSV3, engine_version="0.5.19")
    assert launch.deployment["a2a_capacity"] == 512 and launch.deployment["decode_tokens_per_rank"] == 768
    r = launch.explain(deployment={"gpu": "B300"})
    assert r.plan is None
    [reason] = {x.detail: x for x in _capacity_reasons(r)}.values()
    assert "a2a_tokens_per_rank = 768 is above a2a_capacity (512)" in reason.detail
    assert "--cuda-graph-max-bs 128 x 6 tokens per request (--speculative-num-draft-tokens 6)" in reason.detail
    assert "only at CUDA-graph capture" in reason.detail
    assert reason.fix.startswith("set SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=768 (at most 1024)")
    ok = from_command(line.format(cap=1024), model_config=DSV3, engine_version="0.5.19").explain(deployment={"gpu": "B300"})
    assert ok.plan is not None and ok.plan.runner == "deep_gemm"
    # 128 x 5 (the draft width of the same report) is 640: still above 512
    five = from_command(line.format(cap=512).replace("draft-tokens 6", "draft-tokens 5"), model_config=DSV3, engine_version="0.5.19")
    assert five.deployment["decode_tokens_per_rank"] == 640
    assert _capacity_reasons(five.explain(deployment={"gpu": "B300"}))


def test_deepep_auto_counts_decode_only_and_low_latency_counts_prefill_too():
    # auto: prefill runs normal mode (no capacity), decode low_latency
    assert moe_select.explain(_dep("deepep", max_tokens_per_rank=8192)).plan is not None
    r = moe_select.explain(_dep("deepep", max_tokens_per_rank=8192, a2a_mode="low_latency", cuda_graph=True))
    assert any("prefill 8192" in x.detail for x in _capacity_reasons(r))


def test_the_variable_above_what_sglang_accepts_is_refused():
    r = moe_select.explain(_dep("deepep", a2a_capacity=2048))
    [reason] = {x.detail: x for x in _capacity_reasons(r)}.values()
    assert "a2a_capacity = 2048 is above 1024" in reason.detail
    assert reason.fix.startswith("set SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK <= 1024")


def test_a_need_above_the_most_the_engine_accepts_gets_only_the_lowering_fix():
    r = moe_select.explain(_dep("nixl", decode_tokens_per_rank=2048, a2a_capacity=1024))
    reason = next(x for x in _capacity_reasons(r) if "a2a_tokens_per_rank" in x.detail)
    assert "set SGLANG_NIXL" not in reason.fix and "<= 1024" in reason.fix


def test_a_need_not_given_is_not_checked_and_the_report_says_so():
    # arch, not gpu: no memory size, so SGLang's own decode batch limit is not known either (the next tests)
    d = {k: v for k, v in _dep("pplx", arch="sm90").items() if k not in ("gpu", "decode_tokens_per_rank", "max_tokens_per_rank")}
    r = moe_select.explain(d)
    assert r.plan is not None
    text = " ".join(r.plan.assumptions)
    assert "prefill, decode tokens per rank not given" in text and "SGLANG_PPLX_NUM_MAX_DISPATCH_TOKENS_PER_RANK (128)" in text


def test_a_capacity_under_an_engine_without_one_is_said_not_read():
    r = moe_select.explain({**_dep("deepep", a2a_capacity=512), "engine": "vllm", "decode_tokens_per_rank": 4096})
    assert not _capacity_reasons(r)
    assert any("has no capacity fact under vllm: not read" in a for c in r.candidates for a in c.assumptions)


def test_a_capacity_variable_of_another_a2a_is_a_note_not_a_capacity():
    launch = from_command("SGLANG_PPLX_NUM_MAX_DISPATCH_TOKENS_PER_RANK=4 python3 -m sglang.launch_server --model-path m "
                          "--tp 8 --moe-a2a-backend deepep", model_config=DSV3)
    assert "a2a_capacity" not in launch.deployment
    assert any("another all-to-all" in f.message for f in launch.found("note"))
