"""Release delta vLLM 0.29.0 -> 0.34.0 and SGLang 0.5.19 -> 0.5.23: what the engine itself would pick
(backends/engines/resolution.yaml, moe_select/engine_choice.py), each change at the release that has it and the old
behaviour at the release before. Read in the PyPI wheels of those releases (sources cited in resolution.yaml):

- vLLM 0.32.0 ``prioritize_humming``: HUMMING ahead of MARLIN on compute capability 9.0 (NvFp4, Fp8, Mxfp4 oracles);
- vLLM Mxfp4 (gpt-oss) list: filtered by the activation asked, TRITON behind Marlin on 12.x from 0.32.0 (11.x from
  0.34.0), BF16 fallback of an MXFP8 request from 0.32.0, the log without quotes from 0.34.0 (NvFp4 too);
- vLLM 0.33.0: Qwen3.5 FP8 MoE drops DeepGEMM on Blackwell; --moe-backend marlin on an unquantized layer runs auto;
- SGLang MXFP8 runner resolution (0.5.20 flashinfer_megamoe in the list and its all-to-all's default; 0.5.21 triton
  kept on ROCm, aiter on gfx95 with SGLANG_USE_AITER); NVFP4 flashinfer_cutlass on sm121 and, from 0.5.22, sm110;
  MoRI EPv2 (0.5.22); unquantized SwiGLU-OAI off AITER on gfx950 (0.5.21); gpt-oss bf16 on ROCm with AITER -> triton.
"""
from __future__ import annotations

import ast
import atexit
import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest

import moe_select

ROOT = Path(__file__).resolve().parents[1]
CFG = ROOT / "examples" / "model_configs"
NVFP4 = str(CFG / "nvidia__Qwen3-30B-A3B-NVFP4")
FP8 = str(CFG / "Qwen__Qwen3-30B-A3B-FP8")
BF16 = str(CFG / "Qwen__Qwen3-30B-A3B")
GPT_OSS = str(CFG / "openai__gpt-oss-20b")
DSV4 = str(ROOT / "tests" / "fixtures" / "models" / "deepseek-ai__DeepSeek-V4-Flash")
# an MXFP8 / SwiGLU-OAI stand-in shape (the hooks read no shape): NVIDIA-Nemotron-3-Nano-30B-A3B's, as tests/test_engine_choice.py
NANO = dict(num_experts=128, top_k=6, hidden_size=2688, moe_intermediate_size=1856, activation="silu",
            routing="deepseek_v3", n_group=1, topk_group=1, num_shared_experts=1)

_TMP = Path(tempfile.mkdtemp(prefix="moe-select-release-delta-"))
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)


def _config(src: str, name: str, drop: tuple[str, ...] = (), **changes) -> str:
    """A copy of ``src``'s config.json with ``changes`` (architectures: a class the stand-in shape carries) and the keys
    ``drop`` removed: a checkpoint of another model class, written for the hook that reads only its class."""
    cfg = json.loads((Path(src) / "config.json").read_text())
    for k in drop:
        cfg.pop(k, None)
    cfg.update(changes)
    out = _TMP / name
    out.mkdir(exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg))
    return str(out)


# Qwen3.5 MoE FP8 (Qwen3_5MoeForConditionalGeneration; its text config is qwen3_5_moe_text): Qwen3-30B-A3B-FP8's shape
QWEN35_FP8 = _config(FP8, "Qwen3_5-MoE-FP8", architectures=["Qwen3_5MoeForConditionalGeneration"])
# gpt-oss-20b without its MXFP4 quantization_config: the bf16 release's checkpoint kind
GPT_OSS_BF16 = _config(GPT_OSS, "gpt-oss-20b-bf16", drop=("quantization_config",))


def _choice(dep: dict, engine: str):
    r = moe_select.explain(dep)
    return next(c for c in r.engine_choices if c.engine == engine)


def _names(ch) -> list[str]:
    """The oracle's whole list as the prediction states it ("the first of [...]"), tweaks and environment applied."""
    m = re.search(r"the first of (\[[^\]]*\])", ch.how) or re.search(r"its list (?:here )?(?:is )?(\[[^\]]*\])", ch.how)
    assert m, ch.how
    return ast.literal_eval(m.group(1))


def _vllm(gpu: str, version: str, **dep):
    return _choice({"gpu": gpu, "engine": "vllm", "engine_version": version, **dep}, "vllm")


def _sglang(gpu: str, version: str, **dep):
    return _choice({"gpu": gpu, "engine": "sglang", "engine_version": version, **dep}, "sglang")


def _by(ch, hook: str):
    return [o for o in ch.overrides if o.hook == hook]


# ------------------------------------------------------------------------------------------------ vLLM oracles
def _before(names: list[str], a: str, b: str) -> bool:
    return a in names and b in names and names.index(a) < names.index(b)


@pytest.mark.parametrize("version, humming_first", [("0.31.0", False), ("0.32.0", True), ("0.33.0", True), ("0.34.0", True)])
def test_vllm_nvfp4_hopper_tries_humming_before_marlin_from_0_32_0(version, humming_first):
    """prioritize_humming (oracle/nvfp4.py select_nvfp4_moe_backend, 0.32.0 on): on H200 (cc 9.0) HUMMING moves ahead of
    MARLIN; elsewhere (B200) the list keeps MARLIN first."""
    names = _names(_vllm("H200", version, model_config=NVFP4))
    assert _before(names, "HUMMING", "MARLIN") == humming_first, names
    assert _before(_names(_vllm("B200", version, model_config=NVFP4)), "MARLIN", "HUMMING")


@pytest.mark.parametrize("version, quoted", [("0.31.0", True), ("0.33.0", True), ("0.34.0", False)])
def test_vllm_nvfp4_log_drops_the_quotes_in_0_34_0(version, quoted):
    log = _vllm("H200", version, model_config=NVFP4).log
    assert log.startswith("Using '") == quoted and "NvFp4 MoE backend out of potential backends" in log, log


def test_vllm_fp8_hopper_humming_joins_ahead_of_marlin_in_0_32_0():
    old = _names(_vllm("H200", "0.31.0", model_config=FP8))
    new = _names(_vllm("H200", "0.32.0", model_config=FP8))
    assert "HUMMING" not in old and _before(new, "HUMMING", "MARLIN"), (old, new)
    assert _before(_names(_vllm("B200", "0.32.0", model_config=FP8)), "MARLIN", "HUMMING")


@pytest.mark.parametrize("version, deep_gemm", [("0.32.0", True), ("0.33.0", False), ("0.34.0", False)])
def test_vllm_fp8_qwen3_5_drops_deep_gemm_on_blackwell_from_0_33_0(version, deep_gemm):
    """should_auto_disable_deep_gemm in select_fp8_moe_backend (0.33.0 on): qwen3_5_moe_text on the 10.x / 12.x families;
    another model keeps DEEPGEMM, and Hopper is not touched."""
    assert ("DEEPGEMM" in _names(_vllm("B200", version, model_config=QWEN35_FP8))) == deep_gemm
    assert "DEEPGEMM" in _names(_vllm("B200", version, model_config=FP8))
    assert "DEEPGEMM" in _names(_vllm("H200", version, model_config=QWEN35_FP8))


@pytest.mark.parametrize("gpu, version, triton_first", [
    ("RTX PRO 6000", "0.31.0", True), ("RTX PRO 6000", "0.32.0", False), ("RTX PRO 6000", "0.34.0", False),
    ("THOR", "0.33.0", True), ("THOR", "0.34.0", False), ("B200", "0.34.0", True)])
def test_vllm_gpt_oss_triton_behind_marlin_on_consumer_blackwell_and_thor(gpu, version, triton_first):
    """_get_priority_backends_for_gpt_oss: TRITON after BATCHED_MARLIN on the 12.x family from 0.32.0, 11.x too from
    0.34.0."""
    names = _names(_vllm(gpu, version, model_config=GPT_OSS))
    assert _before(names, "TRITON", "MARLIN") == triton_first, names


def test_vllm_gpt_oss_list_is_filtered_by_the_activation_asked():
    """_filter_by_activation: without an activation asked only the BF16-activation variants are tried (0.29.0 on; the
    0.24.0 reading listed the MXFP8 ones too); an MXFP8 request keeps the MXFP8 ones, plus the BF16 ones as a fallback from
    0.32.0."""
    assert "FLASHINFER_TRTLLM_MXFP4_MXFP8" in _names(_vllm("B200", "0.28.0", model_config=GPT_OSS))
    assert "FLASHINFER_TRTLLM_MXFP4_MXFP8" not in _names(_vllm("B200", "0.29.0", model_config=GPT_OSS))
    ask = {"quant_config": {"activation_precision": "mxfp8"}}
    old = _names(_vllm("H200", "0.31.0", model_config=GPT_OSS, **ask))
    new = _names(_vllm("H200", "0.32.0", model_config=GPT_OSS, **ask))
    assert old == ["FLASHINFER_TRTLLM_MXFP4_MXFP8", "FLASHINFER_CUTLASS_MXFP4_MXFP8", "EMULATION"], old
    # on Hopper neither MXFP8 kernel runs: 0.31.0 raises (EMULATION needs amd-quark), 0.32.0 falls back to BF16
    assert _vllm("H200", "0.31.0", model_config=GPT_OSS, **ask).runner is None
    assert _vllm("H200", "0.32.0", model_config=GPT_OSS, **ask).runner is not None
    assert new[:3] == old and "TRITON" in new and _before(new, "HUMMING", "MARLIN"), new


@pytest.mark.parametrize("version, log", [("0.33.0", "Using 'TRITON' Mxfp4 MoE backend."),
                                          ("0.34.0", "Using TRITON Mxfp4 MoE backend.")])
def test_vllm_mxfp4_log_line_per_release(version, log):
    ch = _vllm("H200", version, model_config=GPT_OSS, vendor_library=False)
    assert ch.engine_name != "TRITON" or ch.log == log, (ch.engine_name, ch.log)
    assert ch.log.startswith("Using '") == (version < "0.34.0") and ch.log.endswith("Mxfp4 MoE backend."), ch.log


@pytest.mark.parametrize("version, runner, falls_through", [
    ("0.32.0", "marlin", False), ("0.33.0", "marlin", True), ("0.34.0", "marlin", True),
    ("0.28.0", "humming", False), ("0.29.0", "humming", True)])
def test_vllm_quantization_only_backend_on_an_unquantized_layer_runs_auto(version, runner, falls_through):
    """select_unquantized_moe_backend: 'humming' (0.29.0 on, older not read) and 'marlin' (0.33.0 on) fall through to the
    auto choice for an unquantized layer; 0.32.0 raises for marlin (map_unquantized_backend)."""
    ch = _vllm("H100", version, model_config=BF16, runner=runner)
    hits = [o for o in ch.overrides if o.hook.startswith("vllm-unquantized-")]
    assert bool(hits) == falls_through, [o.render() for o in ch.overrides]
    if falls_through:
        assert hits[0].explicit and hits[0].becomes == "auto" and ch.runner != runner and "Unquantized oracle" in ch.how
    else:
        assert ch.runner == runner and "asked for" in ch.how


# ------------------------------------------------------------------------------------------------ SGLang hooks
MXFP8 = dict(model=NANO, quant="mxfp8")


@pytest.mark.parametrize("version, becomes, log_has_megamoe", [("0.5.19", "flashinfer_trtllm", False),
                                                               ("0.5.20", "flashinfer_trtllm", True),
                                                               ("0.5.21", None, None), ("0.5.23", None, None)])
def test_sglang_mxfp8_explicit_triton_on_gfx942(version, becomes, log_has_megamoe):
    """_moe_runner_backend_quant_constraints: before 0.5.21 an explicit triton on gfx942 is overridden to
    flashinfer_trtllm (the warning lists flashinfer_megamoe from 0.5.20); from 0.5.21 it is kept."""
    ch = _sglang("MI300X", version, runner="triton", **MXFP8)
    runner = [o for o in ch.overrides if o.field == "runner"]
    if becomes is None:
        assert not runner and ch.runner == "triton", [o.render() for o in runner]
    else:
        assert runner[0].becomes == becomes and runner[0].explicit
        assert ("flashinfer_megamoe" in runner[0].log) == log_has_megamoe, runner[0].log


@pytest.mark.parametrize("version, aiter, kept", [("0.5.20", True, False), ("0.5.21", True, True), ("0.5.21", False, False)])
def test_sglang_mxfp8_aiter_kept_on_gfx950_with_sglang_use_aiter_from_0_5_21(version, aiter, kept):
    ch = _sglang("MI355X", version, runner="aiter", vendor_library=aiter, **MXFP8)
    runner = [o for o in ch.overrides if o.field == "runner"]
    assert (not runner and ch.runner == "aiter") == kept, [o.render() for o in runner]
    if not kept:
        assert runner[0].becomes == "triton" and "flashinfer_megamoe" in runner[0].log and "aiter backends" not in runner[0].log
    other = _sglang("MI355X", version, runner="marlin", vendor_library=aiter, **MXFP8)
    log = next(o.log for o in other.overrides if o.field == "runner")
    assert log.endswith(("triton, aiter backends. Overriding 'marlin'." if (aiter and version >= "0.5.21")
                         else "triton backends. Overriding 'marlin'."))


def test_sglang_mxfp8_with_the_megamoe_all_to_all_defaults_to_megamoe():
    """0.5.20 on: with --moe-a2a-backend flashinfer_megamoe the MXFP8 default is flashinfer_megamoe, not flashinfer_trtllm
    (auto and an overridden runner alike)."""
    base = dict(tp=8, ep=8, dp=8, a2a="flashinfer_megamoe", **MXFP8)
    auto = _sglang("B200", "0.5.23", **base)
    assert auto.runner == "flashinfer_megamoe" and not _by(auto, "sglang-mxfp8-runner"), [o.render() for o in auto.overrides]
    asked = _sglang("B200", "0.5.23", runner="triton", **base)
    assert [o.becomes for o in _by(asked, "sglang-mxfp8-runner-override-megamoe")] == ["flashinfer_megamoe"]


@pytest.mark.parametrize("gpu, version, cutlass", [("THOR", "0.5.21", False), ("THOR", "0.5.22", True),
                                                   ("DGX SPARK", "0.5.19", True), ("RTX PRO 6000", "0.5.23", True),
                                                   ("B200", "0.5.23", False)])
def test_sglang_nvfp4_flashinfer_cutlass_on_sm12x_and_from_0_5_22_sm11x(gpu, version, cutlass):
    """is_sm120 is capability major 12 (sm121 too, every release read); is_sm110 joins in 0.5.22."""
    ch = _sglang(gpu, version, model_config=NVFP4)
    hits = [o for o in ch.overrides if o.hook.startswith("sglang-nvfp4-")]
    assert bool(hits) == cutlass, [o.render() for o in ch.overrides]
    if cutlass:
        assert hits[0].becomes == "flashinfer_cutlass"
        assert ("SM110/SM120" in hits[0].log) == (version >= "0.5.22")


@pytest.mark.parametrize("version, tp, aiter, mode", [("0.5.21", 8, True, "low_latency"), ("0.5.22", 8, True, "normal"),
                                                       ("0.5.23", 16, True, "low_latency"), ("0.5.23", 8, False, "low_latency")])
def test_sglang_mori_epv2_runs_low_latency_as_normal(version, tp, aiter, mode):
    """handle_a2a_moe (0.5.22 on): MoRI EPv2 (DeepSeek-V4 within a host under SGLANG_USE_AITER) has no low-latency
    kernel; --deepep-mode low_latency becomes normal. More than 8 ranks or AITER off: EPv1, low_latency kept."""
    ch = _sglang("MI355X", version, model_config=DSV4, tp=tp, ep=tp, a2a="mori", a2a_mode="low_latency", vendor_library=aiter)
    hit = _by(ch, "sglang-mori-epv2-normal")
    assert bool(hit) == (mode == "normal"), [o.render() for o in ch.overrides]
    if hit:
        assert hit[0].explicit and hit[0].becomes == "normal"


@pytest.mark.parametrize("version, runner", [("0.5.20", "aiter"), ("0.5.21", "triton"), ("0.5.23", "triton")])
def test_sglang_gfx950_unquantized_swiglu_oai_is_not_aiter_from_0_5_21(version, runner):
    """UnquantizedFusedMoEMethod._aiter_ck_moe_unsupported_reason (0.5.21 on): gemm1_alpha / gemm1_clamp_limit on gfx95
    -> Triton at auto. gfx942 and SiLU layers keep AITER."""
    swiglu = dict(model=dict(NANO, activation="swiglu_oai"), quant="bf16", vendor_library=True)
    assert _sglang("MI355X", version, **swiglu).runner == runner
    assert _sglang("MI300X", version, **swiglu).runner == "aiter"
    assert _sglang("MI355X", version, model=NANO, quant="bf16", vendor_library=True).runner == "aiter"


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_sglang_gpt_oss_bf16_on_rocm_with_aiter_is_triton(version):
    """_gpt_oss_overrides: ROCm with SGLANG_USE_AITER and a checkpoint that is not MXFP4 -> triton (0.5.19 and 0.5.23)."""
    ch = _sglang("MI300X", version, model_config=GPT_OSS_BF16, vendor_library=True)
    assert ch.runner == "triton" and _by(ch, "sglang-gpt-oss-rocm-aiter-bf16-triton"), [o.render() for o in ch.overrides]


# hook id -> (deployment, engine, field, asked, becomes): the new hooks' deployments, read by
# tests/test_engine_choice.py's every-hook check beside its own table
NEW_HOOK_DEPLOYMENTS = {
    "sglang-gpt-oss-rocm-aiter-bf16-triton": (dict(gpu="MI300X", engine="sglang", model_config=GPT_OSS_BF16, vendor_library=True),
                                              "sglang", "runner", "auto", "triton"),
    "sglang-mxfp8-runner-override-cuda": (dict(gpu="B200", engine="sglang", engine_version="0.5.23", runner="marlin", **MXFP8),
                                          "sglang", "runner", "marlin", "flashinfer_trtllm"),
    "sglang-mxfp8-runner-override-rocm-0520": (dict(gpu="MI300X", engine="sglang", engine_version="0.5.20", runner="triton", **MXFP8),
                                               "sglang", "runner", "triton", "flashinfer_trtllm"),
    "sglang-mxfp8-runner-override-rocm": (dict(gpu="MI300X", engine="sglang", engine_version="0.5.21", runner="marlin", **MXFP8),
                                          "sglang", "runner", "marlin", "flashinfer_trtllm"),
    "sglang-mxfp8-runner-override-megamoe": (dict(gpu="B200", engine="sglang", engine_version="0.5.20", runner="triton", tp=8, ep=8,
                                                  dp=8, a2a="flashinfer_megamoe", **MXFP8), "sglang", "runner", "triton", "flashinfer_megamoe"),
    "sglang-mxfp8-runner-override-gfx95-0520": (dict(gpu="MI355X", engine="sglang", engine_version="0.5.20", runner="aiter", **MXFP8),
                                                "sglang", "runner", "aiter", "triton"),
    "sglang-mxfp8-runner-override-gfx95-no-aiter": (dict(gpu="MI355X", engine="sglang", engine_version="0.5.21", runner="aiter",
                                                         vendor_library=False, **MXFP8), "sglang", "runner", "aiter", "triton"),
    "sglang-mxfp8-runner-override-gfx95-aiter": (dict(gpu="MI355X", engine="sglang", engine_version="0.5.21", runner="marlin",
                                                      vendor_library=True, **MXFP8), "sglang", "runner", "marlin", "triton"),
    "sglang-nvfp4-sm110-sm120-runner": (dict(gpu="THOR", engine="sglang", engine_version="0.5.22", model_config=NVFP4),
                                        "sglang", "runner", "auto", "flashinfer_cutlass"),
    "sglang-mori-epv2-normal": (dict(gpu="MI355X", engine="sglang", engine_version="0.5.22", model_config=DSV4, tp=8, ep=8, a2a="mori",
                                     a2a_mode="low_latency", vendor_library=True), "sglang", "a2a_mode", "low_latency", "normal"),
    "sglang-rocm-gfx95-swiglu-oai-triton": (dict(gpu="MI355X", engine="sglang", engine_version="0.5.21", quant="bf16",
                                                 model=dict(NANO, activation="swiglu_oai"), vendor_library=True),
                                            "sglang", "runner", "auto", "triton"),
    "vllm-unquantized-humming-auto": (dict(gpu="H100", engine="vllm", engine_version="0.29.0", model_config=BF16, runner="humming"),
                                      "vllm", "runner", "humming", "auto"),
    "vllm-unquantized-marlin-auto": (dict(gpu="H100", engine="vllm", engine_version="0.33.0", model_config=BF16, runner="marlin"),
                                     "vllm", "runner", "marlin", "auto"),
}


@pytest.mark.parametrize("hook", sorted(NEW_HOOK_DEPLOYMENTS))
def test_each_new_hook_fires_on_its_deployment(hook):
    dep, engine, fld, asked, becomes = NEW_HOOK_DEPLOYMENTS[hook]
    found = _by(_choice(dep, engine), hook)
    assert found and (found[0].field, found[0].asked, found[0].becomes) == (fld, asked, becomes), hook
    assert found[0].explicit == (fld in dep and asked != "auto")
