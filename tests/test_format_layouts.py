"""Issue 21, field round 4 (tests/cases/field_round_4.yaml, r4-sgl30595 / r4-sgl35557): one format name for two
checkpoint layouts. Planning only (no GPU): ``moe_select.model_config.read_model_config`` and ``moe_select.explain``.

DeepSeek-V4's routed experts are MXFP4 (packed e2m1, an e8m0 scale per 32 along K: the elements, scales and packing
of the ``mxfp4`` row of backends/formats.yaml; vLLM loads them with ``Mxfp4MoEMethod``, gpt-oss's method) inside an
FP8 checkpoint (``quantization_config.quant_method: fp8``, ``expert_dtype: fp4``). So the format is ``mxfp4`` and
what tells the two layouts apart is the checkpoint kind, its architecture: SGLang loads DeepSeek-V4's experts
through ``Fp8Config`` with ``is_fp4_experts`` (marlin, humming and flashinfer_mxfp4 wrap them; everything else gets
``Fp8MoEMethod``, whose Triton path has no FP4 mode), gpt-oss's through ``Mxfp4Config``. moe_select/model_config.py
reads a DeepSeek-V4 config.json as mxfp4 with ``architecture: DeepseekV4ForCausalLM``; backends/triton.yaml refuses
SGLang's triton for that architecture and keeps it for gpt-oss.

The fixture (tests/fixtures/models/deepseek-ai__DeepSeek-V4-Flash) and its sources are listed in
tests/fixtures/README.md.

The same kind for NVFP4: weight-only checkpoints (ModelOpt W4A16_NVFP4, compressed-tensors NVFP4A16) store the
NVFP4 weights and scales without activation scales. The format stays ``nvfp4``; ``quant_params.weight_only`` is the
checkpoint kind, and only support rows with 16-bit activations decide it (vLLM's W4A4 backends reject a selection
without an activation key; SGLang's weight-only scheme always builds Marlin).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import moe_select
from moe_select.errors import InputError
from moe_select.model_config import read_model_config
from report_helpers import cand

ROOT = Path(__file__).resolve().parents[1]
DSV4 = ROOT / "tests" / "fixtures" / "models" / "deepseek-ai__DeepSeek-V4-Flash"
GPT_OSS = ROOT / "examples" / "model_configs" / "openai__gpt-oss-20b"
DSV3 = ROOT / "examples" / "model_configs" / "deepseek-ai__DeepSeek-V3"
DSV4_FLASH_SHAPE = {"num_experts": 256, "top_k": 6, "hidden_size": 4096, "moe_intermediate_size": 2048,
                    "activation": "silu", "routing": "custom", "num_shared_experts": 1}


def line_of(path: Path, needle: str) -> int:
    """1-based line of the first line of ``path`` containing ``needle``."""
    return next(i for i, s in enumerate(path.read_text().splitlines(), 1) if needle in s)


def edited(tmp_path: Path, src: Path, **changes) -> Path:
    """A copy of ``src``'s config.json with top-level keys set (None: removed)."""
    cfg = json.loads((src / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    out = tmp_path / src.name
    out.mkdir()
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def codes(report, runner):
    return {r.code: r.source for r in cand(report, runner).reasons}


# ------------------------------------------------------------------------------------------------ reading the config
@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm", "any"])
def test_deepseek_v4_config_is_read_as_mxfp4_with_its_architecture(engine):
    """The FP8 quantization_config (weight_block_size [128, 128]) describes the linear layers, expert_dtype fp4 the
    experts: mxfp4 with mxfp4's own parameters (not the linear layers' block), from the expert_dtype line, and the
    checkpoint kind in ``architecture``; the note says why (Fp8Config, not Mxfp4Config, under SGLang)."""
    info = read_model_config(DSV4, engine=engine)
    cfg = DSV4 / "config.json"
    assert info.quant == "mxfp4"
    assert "block" not in info.quant_params
    assert info.shape["architecture"] == "DeepseekV4ForCausalLM"
    assert info.provenance["quant"].endswith(f"config.json:{line_of(cfg, 'expert_dtype')} (expert_dtype)")
    (note,) = [n for n in info.notes if n.startswith("DeepSeek-V4 checkpoint")]
    assert "Fp8Config (is_fp4_experts)" in note and f":{line_of(cfg, 'quant_method')})" in note
    assert {k: info.shape[k] for k in DSV4_FLASH_SHAPE} == DSV4_FLASH_SHAPE
    assert info.shape["routing"] == "custom" and "sqrtsoftplus" in info.provenance["routing"]
    assert [k["quant"] for k in info.layer_kinds] == ["mxfp4"]


def test_deepseek_v4_fp8_experts_stay_block_fp8(tmp_path):
    """expert_dtype fp8 (DeepSeek-V4-Flash-Base): the experts are block FP8 with the config's block, no DSv4 note."""
    info = read_model_config(edited(tmp_path, DSV4, expert_dtype="fp8"))
    assert (info.quant, info.quant_params["block"]) == ("fp8_block", [128, 128])
    assert not [n for n in info.notes if n.startswith("DeepSeek-V4 checkpoint")]


def test_deepseek_v4_without_expert_dtype_is_fp4_as_the_engines_default(tmp_path):
    """No expert_dtype: both engines take FP4 (vLLM's default, SGLang's env default): mxfp4 from quant_method, and
    the note says the default was taken and what the engines would probe."""
    info = read_model_config(edited(tmp_path, DSV4, expert_dtype=None))
    assert info.quant == "mxfp4"
    assert info.provenance["quant"].endswith("(quant_method)")
    (note,) = [n for n in info.notes if n.startswith("DeepSeek-V4 checkpoint")]
    assert "gives no expert_dtype" in note and "F8_E4M3" in note


def test_deepseek_v4_by_model_type_alone(tmp_path):
    """vLLM keys DeepseekV4FP8Config on model_type deepseek_v4: a config without architectures is read the same."""
    info = read_model_config(edited(tmp_path, DSV4, architectures=None))
    assert info.quant == "mxfp4" and "architecture" not in info.shape


def test_deepseek_v4_unknown_expert_dtype_is_an_error_at_its_line(tmp_path):
    path = edited(tmp_path, DSV4, expert_dtype="int4")
    with pytest.raises(InputError) as exc:
        read_model_config(path)
    issue = exc.value.issues[0]
    assert (issue.line, issue.field) == (line_of(path / "config.json", "expert_dtype"), "expert_dtype")
    assert "not fp4 or fp8" in issue.message


def test_expert_dtype_of_another_architecture_changes_nothing(tmp_path):
    """An FP8 DeepSeek-V3 config with an expert_dtype key is still block FP8: the key is read for DeepSeek-V4 only."""
    info = read_model_config(edited(tmp_path, DSV3, expert_dtype="fp4"))
    assert (info.quant, info.quant_params["block"]) == ("fp8_block", [128, 128])


def test_gpt_oss_config_is_still_mxfp4_from_mxfp4config():
    """gpt-oss: quant_method mxfp4 (Mxfp4Config), architecture GptOssForCausalLM, no DeepSeek-V4 note."""
    info = read_model_config(GPT_OSS)
    assert (info.quant, info.shape["architecture"]) == ("mxfp4", "GptOssForCausalLM")
    assert info.provenance["quant"].endswith("(quant_method)")
    assert not [n for n in info.notes if "DeepSeek-V4" in n]


# ------------------------------------------------------------------------------------------------------ runner facts
def _explain(gpu: str, engine: str, source: Path | dict, runner: str = "auto", tp: int = 8):
    dep = {"gpu": gpu, "engine": engine, "tp": tp, "ep": 1, "a2a": "none", "runner": runner}
    if isinstance(source, Path):
        dep["model_config"] = str(source)
    else:
        dep.update(quant="mxfp4", model=source)
    return moe_select.explain(dep)


def test_sglang_triton_refuses_deepseek_v4_fp4_experts_and_runs_gpt_oss():
    """H200 under SGLang: triton is refused for the DeepSeek-V4 checkpoint by the architecture-scoped row (the
    detail names the architecture) and supported for gpt-oss (Mxfp4Config's bf16 upcast)."""
    dsv4 = _explain("H200", "sglang", DSV4, runner="triton")
    assert dsv4.plan is None
    src = codes(dsv4, "triton")["quant_unsupported"]
    assert src.startswith("backends/triton.yaml:")
    row = (ROOT / "backends" / "triton.yaml").read_text().splitlines()[int(src.split(":")[1]) - 1:][:6]
    assert any("DeepseekV4ForCausalLM" in s for s in row), row
    assert any("DeepseekV4ForCausalLM checkpoint" in r.detail for r in cand(dsv4, "triton").reasons)
    oss = _explain("H200", "sglang", GPT_OSS, runner="triton", tp=1)
    assert oss.plan is not None and (oss.plan.runner, oss.plan.evidence) == ("triton", "supported")


def test_sglang_runners_that_take_deepseek_v4_fp4_experts():
    """The other SGLang runners keep their facts: on H200 marlin and flashinfer_mxfp4 (Fp8Config wraps the FP4
    experts for both) are supported and auto plans one of them; on B200 deep_gemm (the FP4 recipe, SM100) is
    supported and triton still refused; on H200 deep_gemm is refused (DeepGEMM's packed FP4 needs SM100)."""
    hopper = _explain("H200", "sglang", DSV4)
    for runner in ("marlin", "flashinfer_mxfp4"):
        assert cand(hopper, runner).eligible and cand(hopper, runner).evidence == "supported", runner
    assert hopper.plan is not None and hopper.plan.runner in ("marlin", "flashinfer_mxfp4")
    assert "quant_unsupported" in codes(hopper, "triton")
    assert codes(hopper, "deep_gemm")
    blackwell = _explain("B200", "sglang", DSV4)
    assert cand(blackwell, "deep_gemm").evidence == "supported"
    assert codes(blackwell, "triton")["quant_unsupported"].startswith("backends/triton.yaml:")


def test_vllm_reads_both_layouts_with_the_same_method():
    """vLLM loads DeepSeek-V4's FP4 experts with Mxfp4MoEMethod, as gpt-oss's: the same runner facts apply (marlin
    supported on H200); our triton there is vLLM's --moe-backend emulation (names.yaml by_format), refused by vLLM's
    exhaustive list for DeepSeek-V4 and supported for gpt-oss (OCP-MX emulation, amd-quark assumed; break51)."""
    for source in (DSV4, GPT_OSS):
        report = _explain("H200", "vllm", source, tp=1)
        assert cand(report, "marlin").evidence == "supported", source.name
    assert "quant_unsupported" in codes(_explain("H200", "vllm", DSV4, tp=1), "triton")
    assert cand(_explain("H200", "vllm", GPT_OSS, tp=1), "triton").evidence == "supported"


def test_inline_model_states_the_checkpoint_kind_with_model_architecture():
    """An inline ``model`` says its checkpoint kind with ``model.architecture``: DeepseekV4ForCausalLM refuses SGLang's
    triton for mxfp4, GptOssForCausalLM keeps it supported (the round's cases, r4-sgl30595 and r4-sgl35557, give no
    architecture and stay xfail: stating one is a change of the case)."""
    dsv4 = _explain("H200", "sglang", {**DSV4_FLASH_SHAPE, "architecture": "DeepseekV4ForCausalLM"}, runner="triton")
    assert dsv4.plan is None and "quant_unsupported" in codes(dsv4, "triton")
    oss = _explain("H200", "sglang", {**DSV4_FLASH_SHAPE, "architecture": "GptOssForCausalLM"}, runner="triton")
    assert oss.plan is not None and oss.plan.runner == "triton"


def test_round_4_cases_name_why_they_stay_xfail():
    """The two cases' xfail reasons say that the fix needs the checkpoint architecture their inline model lacks."""
    import yaml

    d = yaml.safe_load((ROOT / "tests" / "cases" / "field_round_4.yaml").read_text())
    for case_id in ("r4-sgl30595-dsv4-flash-fp4-triton", "r4-sgl35557-dsv4-flash-mxfp4-deepep-hopper"):
        case = next(c for c in d["cases"] if c["id"] == case_id)
        assert "architecture" not in case["deployment"]["model"], case_id
        assert "model.architecture DeepseekV4ForCausalLM" in d["xfail"][case_id], case_id


# ------------------------------------------------- weight-only NVFP4 (W4A16) vs NVFP4 with FP4 activations (W4A4)
# The same NVFP4 weights and scales, without activation scales: a checkpoint kind (quant_params weight_only), not a
# format. Read from ModelOpt's quant_algo W4A16_NVFP4 (vLLM's modelopt QUANT_ALGOS) and from a compressed-tensors
# group without input_activations (vLLM's _is_fp4a16_nvfp4, SGLang's CompressedTensorsW4A16Nvfp4MoE). The fixtures
# are real files with one stated edit each, made here.
NVFP4 = ROOT / "tests" / "fixtures" / "models" / "nvidia__Qwen3-30B-A3B-NVFP4"
SCOUT_CT = ROOT / "tests" / "fixtures" / "models" / "llm-compressor__Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"
_FP4_ARGS = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": True,
             "dynamic": False}


def modelopt_w4a16(tmp_path: Path) -> Path:
    """nvidia/Qwen3-30B-A3B-NVFP4 with its hf_quant_config.json's quant_algo NVFP4 -> W4A16_NVFP4."""
    out = tmp_path / "modelopt-w4a16"
    shutil.copytree(NVFP4, out)
    hfq = out / "hf_quant_config.json"
    text = hfq.read_text()
    assert text.count('"quant_algo": "NVFP4"') == 1
    hfq.write_text(text.replace('"quant_algo": "NVFP4"', '"quant_algo": "W4A16_NVFP4"'))
    return out


def ct_nvfp4(tmp_path: Path, activations: bool) -> Path:
    """Llama-4-Scout's compressed-tensors config with its one group's weights made NVFP4 (4-bit float, group 16,
    llm-compressor's NVFP4 / NVFP4A16 schemes) and input_activations FP4 (W4A4) or absent (NVFP4A16)."""
    cfg = json.loads((SCOUT_CT / "config.json").read_text())
    q = cfg["quantization_config"]
    q["format"] = "nvfp4-pack-quantized"
    group = q["config_groups"]["group_0"]
    group["weights"] = dict(_FP4_ARGS)
    group["input_activations"] = {**_FP4_ARGS, "dynamic": "local"} if activations else None
    out = tmp_path / ("ct-nvfp4" if activations else "ct-nvfp4a16")
    out.mkdir()
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def test_weight_only_nvfp4_is_read_as_nvfp4_weight_only(tmp_path):
    """ModelOpt W4A16_NVFP4 and compressed-tensors NVFP4A16: nvfp4 with weight_only (a note at the line that says
    so); their W4A4 counterparts: nvfp4 without it."""
    for path in (modelopt_w4a16(tmp_path), ct_nvfp4(tmp_path, activations=False)):
        info = read_model_config(path)
        assert (info.quant, info.quant_params.get("weight_only")) == ("nvfp4", True), path.name
        assert any("weight-only NVFP4" in n for n in info.notes), path.name
        assert info.layer_kinds[0]["quant_params"]["weight_only"] is True
    for path in (NVFP4, ct_nvfp4(tmp_path, activations=True)):
        info = read_model_config(path)
        assert info.quant == "nvfp4" and "weight_only" not in info.quant_params, path.name
    (tmp_path / "again").mkdir()
    hfq = modelopt_w4a16(tmp_path / "again")
    line = line_of(hfq / "hf_quant_config.json", "W4A16_NVFP4")
    assert any(f"hf_quant_config.json:{line} (quant_algo) W4A16_NVFP4" in n for n in read_model_config(hfq).notes)


def test_modelopt_w4a16_in_quantization_config_too(tmp_path):
    """quant_method modelopt with quant_algo W4A16_NVFP4 in config.json (vLLM's compressed-tensors-style ModelOpt
    config) reads the same."""
    src = json.loads((NVFP4 / "config.json").read_text())
    src["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "W4A16_NVFP4", "group_size": 16}
    out = tmp_path / "inline"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(src))
    info = read_model_config(out)
    assert (info.quant, info.quant_params.get("weight_only")) == ("nvfp4", True)


def test_mixed_weight_only_groups_are_an_error(tmp_path):
    path = ct_nvfp4(tmp_path, activations=False)
    cfg = json.loads((path / "config.json").read_text())
    groups = cfg["quantization_config"]["config_groups"]
    groups["group_1"] = {**groups["group_0"], "input_activations": {**_FP4_ARGS, "dynamic": "local"},
                         "targets": ["re:.*experts.*"]}
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    with pytest.raises(InputError) as exc:
        read_model_config(path)
    assert "mix weight-only NVFP4" in exc.value.issues[0].message


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_weight_only_nvfp4_plans_marlin_and_leaves_w4a4_runners_unverified(tmp_path, engine):
    """On B200 a W4A4 checkpoint plans an FP4-activation runner (flashinfer_trtllm, supported); the weight-only one
    plans marlin (rule weight-only-nvfp4, bf16 activations) and flashinfer_trtllm is unverified, its W4A4 row named
    (it does not decide a checkpoint without activation scales)."""
    w4a4 = _explain("B200", engine, NVFP4, tp=1)
    assert w4a4.plan is not None and w4a4.plan.activation_precision == "nvfp4"
    assert cand(w4a4, "flashinfer_trtllm").evidence == "supported"
    w4a16 = _explain("B200", engine, modelopt_w4a16(tmp_path), tp=1)
    assert w4a16.plan is not None
    assert (w4a16.plan.runner, w4a16.plan.evidence, w4a16.plan.activation_precision) == ("marlin", "supported", "bf16")
    assert w4a16.plan.chosen_by.rule == "weight-only-nvfp4"
    fi = cand(w4a16, "flashinfer_trtllm")
    assert fi.evidence == "unverified"
    (unk,) = [x for x in fi.unknowns if "weight-only" in x.detail]
    assert unk.code == "quant_unsupported" and unk.source.startswith("backends/flashinfer_trtllm.yaml:")


def test_inline_quant_config_states_weight_only():
    """An inline deployment says weight_only in quant_config; it is an error for a format whose activations are
    16-bit or the runner's (bf16, mxfp4)."""
    shape = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
             "routing": "renormalize"}
    dep = {"gpu": "B200", "engine": "vllm", "quant": "nvfp4", "model": shape, "tp": 1, "ep": 1}
    plain = moe_select.explain(dep)
    wo = moe_select.explain({**dep, "quant_config": {"weight_only": True}})
    assert plain.plan is not None and plain.plan.runner != "marlin"
    assert wo.plan is not None and (wo.plan.runner, wo.plan.activation_precision) == ("marlin", "bf16")
    for quant in ("bf16", "mxfp4"):
        with pytest.raises(InputError) as exc:
            moe_select.explain({**dep, "quant": quant, "quant_config": {"weight_only": True}})
        assert any(i.field == "quant_config" and "weight_only" in i.message for i in exc.value.issues), quant
