"""TensorRT-LLM's own MoE backends (issue 20): one runner file per ``moe_config.backend`` (``backends/trtllm_*.yaml``),
one names table (``backends/engines/names.yaml``, generated into the README), and ``AUTO`` as a fact (the table's
``trtllm_auto`` rows and the bundled rules ``rules/15-trtllm.yaml`` say the same). For each backend at least one
deployment is planned and one refused, each naming the fact (file:line) and the fact its upstream source."""
from __future__ import annotations

import re

import pytest
import yaml

import moe_select
from moe_select.catalog import load_catalog
from moe_select.engine_tables import names
from moe_select.errors import InputError

from conftest import CONFIGS, ROOT

QWEN = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
QWEN_FP8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
QWEN_NVFP4 = str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4")
GPT_OSS = str(CONFIGS / "openai__gpt-oss-20b")
#: A layer of DeepSeek-V3's width with MXFP4 experts (hidden 7168 = 14 x 512, as MegaMoE needs).
WIDE_MXFP4 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
              "routing": "deepseek_v3", "n_group": 8, "topk_group": 4}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(use_env=False, plugins=False)


def _trt(**dep):
    return moe_select.explain({"engine": "trtllm", "tp": 1, "ep": 1, **dep})


def _fact_source(where: str) -> str:
    """The ``source`` of the fact at ``file:line`` (a support row, constraint, list decision ...)."""
    path, line = where.rsplit(":", 1)
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    for text in lines[int(line) - 1:int(line) + 12]:
        m = re.search(r'(?:source|exhaustive): "([^"]+)"', text)
        if m:
            return m.group(1)
    raise AssertionError(f"no source near {where}")


def _planned(report, runner: str, evidence: str = "supported"):
    assert report.plan is not None, [r.render() for r in report.reasons]
    assert report.plan.runner == runner and report.plan.evidence == evidence, (report.plan.runner, report.plan.evidence,
                                                                               [x.render() for x in report.plan.unknowns])
    return report.plan


def _refused(report, runner: str, code: str, cites: str):
    """``runner`` is refused with ``code`` by a fact whose source cites ``cites``."""
    cand = next(c for c in report.candidates if c.backend == runner)
    assert not cand.eligible, (runner, cand.evidence)
    hits = [r for r in cand.reasons if r.code == code]
    assert hits, [r.render() for r in cand.reasons]
    assert any(cites in _fact_source(r.source) or cites in r.detail for r in hits), [(r.source, _fact_source(r.source)) for r in hits]
    return hits


# ------------------------------------------------------------------------------------- per backend
def test_cutlass_planned_and_refused():
    _planned(_trt(gpu="H100", model_config=QWEN), "trtllm_cutlass")  # AUTO: anything else -> CUTLASS
    gb300 = _trt(gpu="GB300", model_config=QWEN_FP8, runner="trtllm_cutlass")
    _refused(gb300, "trtllm_cutlass", "quant_unsupported", "NVIDIA/TensorRT-LLM#13327")
    # gpt-oss-20b on an L4 (sm89): "WFP4A16 MoE is unsupported on SM89" (NVIDIA/TensorRT-LLM#6717); nothing else runs it.
    l4 = _trt(gpu="L4", model_config=GPT_OSS)
    assert l4.plan is None
    _refused(l4, "trtllm_cutlass", "quant_unsupported", "NVIDIA/TensorRT-LLM#6717")


def test_trtllm_gen_planned_on_gb300_and_refused_on_hopper():
    plan = _planned(_trt(gpu="GB300", model_config=QWEN_FP8), "trtllm_gen")  # the field case of PR #13327
    assert plan.chosen_by.rule == "trtllm-auto-fp8-block-blackwell"
    hopper = _trt(gpu="H100", model_config=QWEN_FP8, runner="trtllm_gen")
    _refused(hopper, "trtllm_gen", "arch_unsupported", "NVIDIA/TensorRT-LLM#7101")  # a device gate (is_sm_100f)
    # llama4 routing puts the router weight on the input: create_moe asserts TRTLLMGenFusedMoE is not asked to.
    llama4 = _trt(gpu="B200", quant="nvfp4", runner="trtllm_gen",
                  model={**WIDE_MXFP4, "routing": "llama4", "top_k": 1, "n_group": None, "topk_group": None})
    _refused(llama4, "trtllm_gen", "routing_unsupported", "create_moe.py:create_moe")


def test_trtllm_gen_bf16_calls_flashinfer():
    """The BF16 path of TRTLLM is FlashInfer's trtllm_bf16_moe: flashinfer-python is a need, and its absence refuses."""
    plan = _planned(_trt(gpu="B200", model_config=QWEN, runner="trtllm_gen"), "trtllm_gen")
    assert [p.name for p in plan.packages] == ["flashinfer-python"]
    absent = _trt(gpu="B200", model_config=QWEN, runner="trtllm_gen", packages={"flashinfer-python": None})
    _refused(absent, "trtllm_gen", "dependency_missing", "FLASHINFER_BF16_MOE")
    narrow = _trt(gpu="B200", model_config=QWEN, runner="trtllm_gen", tp=8)  # 768 / 8 = 96 per rank
    _refused(narrow, "trtllm_gen", "shape_unaligned", "TRTLLMGenFusedMoE.can_implement")


def test_deepgemm_planned_on_blackwell_refused_on_hopper():
    _planned(_trt(gpu="B200", model_config=QWEN_FP8, runner="trtllm_deepgemm"), "trtllm_deepgemm")
    _refused(_trt(gpu="H200", model_config=QWEN_FP8, runner="trtllm_deepgemm"), "trtllm_deepgemm", "arch_unsupported",
             "NVIDIA/TensorRT-LLM#15081")  # a device gate: SM {100, 103} only


def test_cutedsl_on_blackwell_and_flashinfer_on_sm120():
    _planned(_trt(gpu="B200", model_config=QWEN_NVFP4, runner="trtllm_cutedsl"), "trtllm_cutedsl")
    # SM120: CuteDslB12xFusedMoE, FlashInfer's NVFP4 MoE (NVIDIA/TensorRT-LLM#13773): TensorRT-LLM calls flashinfer-python.
    # dp stated: CuteDslB12xFusedMoE rejects attention DP, so an unstated dp leaves it unverified (the unstated-input rule)
    _planned(_trt(gpu="RTX PRO 6000", model_config=QWEN_NVFP4, runner="trtllm_cutedsl"), "trtllm_cutedsl", "unverified")
    plan = _planned(_trt(gpu="RTX PRO 6000", model_config=QWEN_NVFP4, runner="trtllm_cutedsl", dp=1), "trtllm_cutedsl")
    # FlashInfer's b12x kernels, and the CuTe-DSL compiler they need (not 4.5.0 there: NVIDIA/cutlass#3227)
    assert [p.name for p in plan.packages] == ["flashinfer-python", "nvidia-cutlass-dsl"]
    _refused(_trt(gpu="RTX PRO 6000", model_config=QWEN_NVFP4, runner="trtllm_cutedsl", tp=2, ep=2), "trtllm_cutedsl",
             "parallelism_unsupported", "CuteDslB12xFusedMoE")
    _refused(_trt(gpu="B200", model_config=QWEN_FP8, runner="trtllm_cutedsl"), "trtllm_cutedsl", "quant_unsupported",
             "note on CuteDSL FP8 Block Scales")


def test_densegemm_planned_and_refused():
    _planned(_trt(gpu="B200", model_config=QWEN_NVFP4, runner="trtllm_densegemm"), "trtllm_densegemm")
    hopper = _trt(gpu="H100", model_config=QWEN_NVFP4, runner="trtllm_densegemm")
    _refused(hopper, "trtllm_densegemm", "arch_unsupported", "create_moe.py:get_moe_cls")


def test_triton_serves_gpt_oss_on_hopper_where_trtllm_gen_does_not():
    """NVIDIA/TensorRT-LLM#7101: TRTLLM does not run on Hopper; TRITON serves gpt-oss there (AUTO picks it)."""
    report = _trt(gpu="H100", model_config=GPT_OSS)
    plan = _planned(report, "trtllm_triton")
    assert plan.chosen_by.rule == "trtllm-auto-gpt-oss-hopper" and plan.activation_precision == "bf16"
    assert any("deprecated" in n for n in plan.notes)
    # Plain SwiGLU (Qwen3): can_implement's swiglu_gptoss_style gate refuses it up to 1.3.0rc24; the SwiGLU-family gate
    # after it (NVIDIA/TensorRT-LLM#18255; @1068f2445e51) takes it.
    old = _trt(gpu="H100", model_config=QWEN, runner="trtllm_triton")
    _refused(old, "trtllm_triton", "activation_unsupported", "NVIDIA/TensorRT-LLM#18255")
    assert any("tensorrt-llm >1.3.0rc24" in r.detail for r in next(c for c in old.candidates if c.backend == "trtllm_triton").reasons)
    new = _trt(gpu="H100", model_config=QWEN, runner="trtllm_triton", packages={"tensorrt-llm": "1.3.0rc25"})
    assert new.status == "ok" and new.plan.runner == "trtllm_triton"
    assert not [r for r in next(c for c in new.candidates if c.backend == "trtllm_triton").reasons if r.code == "activation_unsupported"]
    # Routing: renormalize only at every version (TritonEPRouter routes the raw logits with top-k then softmax).
    for version in ("1.3.0rc24", "1.3.0rc25"):
        oss_softmax = {"num_experts": 32, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
                       "activation": "swiglu_oai", "routing": "softmax_topk"}
        _refused(_trt(gpu="H100", quant="mxfp4", model=oss_softmax, runner="trtllm_triton", packages={"tensorrt-llm": version}),
                 "trtllm_triton", "routing_unsupported", "TritonFusedMoE.can_implement")
    _refused(_trt(gpu="B200", model_config=GPT_OSS, runner="trtllm_triton"), "trtllm_triton", "arch_unsupported",
             "MOE_DEVELOPER_GUIDE.md")
    blackwell = _planned(_trt(gpu="B200", model_config=GPT_OSS), "trtllm_gen")
    assert blackwell.chosen_by.rule == "trtllm-auto-gpt-oss-blackwell" and blackwell.activation_precision == "mxfp8"


def test_marlin_planned_on_hopper_refused_on_blackwell():
    plan = _planned(_trt(gpu="H100", model_config=QWEN_NVFP4), "trtllm_marlin")
    assert plan.activation_precision == "bf16" and plan.chosen_by.rule == "trtllm-nvfp4-ada-hopper"
    _refused(_trt(gpu="B200", model_config=QWEN_NVFP4, runner="trtllm_marlin"), "trtllm_marlin", "arch_unsupported",
             "MOE_DEVELOPER_GUIDE.md")


def test_vanilla_planned_without_graphs_refused_for_mxfp4():
    report = _trt(gpu="H100", model_config=QWEN, runner="trtllm_vanilla", cuda_graph=False)
    plan = _planned(report, "trtllm_vanilla")
    assert any("reference" in n for n in plan.notes)
    graphs = _trt(gpu="H100", model_config=QWEN, runner="trtllm_vanilla")  # capture: no fact either way
    assert graphs.plan is not None and graphs.plan.evidence == "unverified"
    _refused(_trt(gpu="H100", model_config=GPT_OSS, runner="trtllm_vanilla", cuda_graph=False), "trtllm_vanilla",
             "quant_unsupported", "MOE_DEVELOPER_GUIDE.md")


def test_megamoe_deepgemm_planned_and_refused_on_hidden_size():
    _planned(_trt(gpu="B200", quant="mxfp4", model=WIDE_MXFP4, runner="trtllm_megamoe_deepgemm"), "trtllm_megamoe_deepgemm")
    # gpt-oss's hidden size 2880 is no multiple of 512.
    _refused(_trt(gpu="B200", model_config=GPT_OSS, runner="trtllm_megamoe_deepgemm"), "trtllm_megamoe_deepgemm",
             "shape_unaligned", "MegaMoEDeepGemm")


def test_megamoe_cutedsl_planned_and_refused_with_a_host_all_to_all():
    _planned(_trt(gpu="B200", model_config=QWEN_NVFP4, runner="trtllm_megamoe_cutedsl"), "trtllm_megamoe_cutedsl")
    deepep = _trt(gpu="B200", model_config=QWEN_NVFP4, runner="trtllm_megamoe_cutedsl", tp=8, ep=8, a2a="deepep")
    _refused(deepep, "trtllm_megamoe_cutedsl", "a2a_unsupported", "MOE_DEVELOPER_GUIDE.md")


def test_megamoe_cutedsl_on_sm107():
    # MegaMoECuteDsl.can_implement (NVIDIA/TensorRT-LLM@023005e8ad10) takes SM100, SM103 or SM107, as the guide's matrix
    # says: SM107 NVFP4 is supported, and the rule trtllm-nvfp4-sm107 names it (no other backend's facts name SM107).
    plan = _planned(_trt(arch="sm107", model_config=QWEN_NVFP4), "trtllm_megamoe_cutedsl")
    assert plan.chosen_by.rule == "trtllm-nvfp4-sm107"
    _refused(_trt(arch="sm110", model_config=QWEN_NVFP4, runner="trtllm_megamoe_cutedsl"), "trtllm_megamoe_cutedsl",
             "arch_unsupported", "MOE_DEVELOPER_GUIDE.md")


# ------------------------------------------------------------------------------------ engines
def test_other_runners_are_refused_under_trtllm_and_trtllm_runners_elsewhere():
    report = _trt(gpu="B200", model_config=QWEN_FP8, runner="deep_gemm")
    _refused(report, "deep_gemm", "engine_unsupported", "moe_resolution.py:_candidates_for")
    sglang = moe_select.explain({"gpu": "B200", "engine": "sglang", "model_config": QWEN_FP8, "runner": "trtllm_gen"})
    _refused(sglang, "trtllm_gen", "engine_unsupported", "MoeRunnerBackend")
    mine = moe_select.explain({"gpu": "B200", "engine": "moe_select", "model_config": QWEN_FP8, "runner": "trtllm_gen"})
    assert mine.plan is None and any(r.code == "no_adapter" for r in mine.reasons)
    anyone = moe_select.explain({"gpu": "GB300", "engine": "any", "model_config": QWEN_FP8})
    assert anyone.plan is None or not anyone.plan.runner.startswith("trtllm_")  # engine any: no rule names them


def test_every_trtllm_backend_has_a_runner_file_and_a_name(catalog):
    table = names()
    backends = {r.trtllm: r.ours for r in table.runners if r.trtllm}
    # MoeConfig.backend's values (NVIDIA/TensorRT-LLM@000439672005 llm_args.py), AUTO aside; WIDEEP is retired.
    assert set(backends) == {"CUTLASS", "CUTEDSL", "TRTLLM", "DEEPGEMM", "DENSEGEMM", "VANILLA", "TRITON", "MARLIN",
                             "MEGAMOE_DEEPGEMM", "MEGAMOE_CUTEDSL"}
    assert table.retired_name("trtllm", "wideep") is not None
    for _theirs, ours in backends.items():
        cap = catalog.runners[ours]
        assert cap.engines is not None and cap.engines.values == ["trtllm"], ours
        assert ours.startswith("trtllm_") and cap.module is None, ours
    for row in table.runners:
        if row.kernel:
            assert row.kernel in catalog.runners and row.ours in catalog.runners


def test_auto_is_data_and_the_rules_say_the_same(catalog):
    """names.yaml's trtllm_auto rows and rules/15-trtllm.yaml: each row a rule states prefers that backend's runner
    first, the rules are in the rows' order, and the catch-all prefers the fallback."""
    auto = names().trtllm_auto
    assert auto is not None and auto.fallback == "CUTLASS"
    by_name = {r.trtllm: r.ours for r in names().runners if r.trtllm}
    rules = {r.id: r for r in catalog.rules}
    order = [r.id for r in catalog.rules]
    stated = [row for row in auto.rows if row.rule]
    assert stated[-1].rule == "trtllm-auto" and rules["trtllm-auto"].prefer == [by_name[auto.fallback]]
    for row in stated:
        rule = rules[row.rule]
        assert rule.when.engine == ["trtllm"] and rule.prefer[0] == by_name[row.backend], row.rule
        assert rule.prefer[-1] == by_name[auto.fallback] or row.rule == "trtllm-auto-fp8-block-blackwell", row.rule
    positions = [order.index(row.rule) for row in stated if row.rule != "trtllm-nvfp4-ada-hopper"]
    assert positions == sorted(positions)


def test_readme_names_block_is_the_table():
    from moe_select.engine_tables import names_block

    assert names_block() in (ROOT / "README.md").read_text(encoding="utf-8")


def test_launch_line_trtllm_backends_map_to_our_runners(tmp_path):
    from moe_select.launch_line import from_command

    for backend, ours in (("TRTLLM", "trtllm_gen"), ("DEEPGEMM", "trtllm_deepgemm"), ("CUTLASS", "trtllm_cutlass")):
        cfg = tmp_path / f"{backend}.yaml"
        cfg.write_text(yaml.safe_dump({"moe_config": {"backend": backend}}))
        launch = from_command(f"trtllm-serve M --extra_llm_api_options {cfg}", model_config=QWEN_FP8)
        assert launch.deployment["runner"] == ours
    # MoeConfig.backend is a Literal of the upper-case names, matched as written (a second trial: 'cutlass' was planned)
    cfg = tmp_path / "lower.yaml"
    cfg.write_text("moe_config:\n  backend: deepgemm\n")
    with pytest.raises(InputError, match=r"'deepgemm' is not a runner value trtllm takes: .*did you mean DEEPGEMM"):
        from_command(f"trtllm-serve M --extra_llm_api_options {cfg}", model_config=QWEN_FP8)
    cfg = tmp_path / "auto.yaml"
    cfg.write_text("moe_config:\n  backend: AUTO\n")
    assert "runner" not in from_command(f"trtllm-serve M --extra_llm_api_options {cfg}", model_config=QWEN_FP8).deployment
    # WIDEEP can no longer be selected (NVIDIA/TensorRT-LLM#17408): TensorRT-LLM raises for it at startup.
    cfg.write_text("moe_config:\n  backend: WIDEEP\n")
    wide = from_command(f"trtllm-serve M --extra_llm_api_options {cfg}", model_config=QWEN_FP8)
    assert "runner" not in wide.deployment
    (err,) = wide.found("engine_error")
    assert "WIDEEP" in err.message and "#17408" in (err.source or "")


def test_trtllm_engine_version(catalog):
    checked = catalog.engine_package("trtllm").checked_up_to  # type: ignore[union-attr]
    at = _trt(gpu="GB300", model_config=QWEN_FP8, engine_version=checked)
    _planned(at, "trtllm_gen")
    newer = _trt(gpu="GB300", model_config=QWEN_FP8, engine_version="1.4.0")
    plan = _planned(newer, "trtllm_gen", evidence="unverified")
    assert any(x.code == "engine_unsupported" and "tensorrt-llm" in x.detail for x in plan.unknowns)
