"""Field round 5 of issue 21 (tests/cases/field_round_5.yaml), fixed as kinds: each kind a round case missed, tested on
another deployment of the same kind than the round's case, on both sides of each version bound, and the two
capability-file mechanisms the kinds needed (a negative support row's ``code``; negative routing facts).

1. vLLM's own CUTLASS MoE (backends/cutlass.yaml): FP8 and NVFP4 rows by arch and by the vLLM release that built the
   kernels (NVFP4 on 12.x from 0.12.0, sm103 from 0.11.2; FP8 on 10.x from 0.10.0, broken on Hopper in 0.9.0-0.9.1).
2. vLLM 0.15.0's FlashInfer CUTLASS device gate without the 12.x family (backends/flashinfer_cutlass.yaml).
3. FlashInfer's SM12x NVFP4 CUTLASS MoE from 0.6.7 (backends/flashinfer_cutlass.yaml).
4. FlashInfer TRT-LLM-gen Llama4 routing: bf16 puts the weight on the output (refused), and 0.6.11 / 0.6.11.post1 have
   no BF16/NVFP4 kernels for it (backends/flashinfer_trtllm.yaml); and the NVFP4 relu2 hidden-size report (512).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select
from moe_select.catalog import load_catalog
from moe_select.errors import InputError

from conftest import CONFIGS
from report_helpers import planned as _planned, reason_of as _reason, report_codes as _codes

NVFP4 = str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4")
SCOUT = str(CONFIGS / "meta-llama__Llama-4-Scout-17B-16E-Instruct")
# Llama-4 Maverick's MoE (128 experts, top-1, weight on the expert input) written inline with a format.
MAVERICK = {"num_experts": 128, "top_k": 1, "hidden_size": 5120, "moe_intermediate_size": 8192, "activation": "silu",
            "routing": "llama4", "num_shared_experts": 1}
# Nemotron-3-Nano's MoE: hidden 2688 (not a multiple of 512 nor of 256), non-gated ReLU^2.
NEMOTRON = {"num_experts": 128, "top_k": 6, "hidden_size": 2688, "moe_intermediate_size": 1856, "activation": "relu2",
            "routing": "sigmoid_topk"}
BASE = {"tp": 1, "ep": 1, "a2a": "none"}


def _explain(**dep: Any) -> Any:
    return moe_select.explain({**BASE, **dep})


# ---------------------------------------------------------------------------------------- kind 1: vLLM's CUTLASS MoE
@pytest.mark.parametrize("gpu", ["RTX PRO 6000", "GB10"])
def test_vllm_cutlass_nvfp4_before_the_12x_build_is_refused_as_an_arch(gpu):
    """vLLM before 0.12.0 built no 12.x CUTLASS MoE kernels (get_cutlass_moe_mm_data raised 'Required capability: 90
    or 100'): an NVFP4 Qwen3 on an RTX PRO 6000 or a GB10 with --moe-backend cutlass is refused for the GPU."""
    r = _explain(gpu=gpu, engine="vllm", engine_version="0.11.2", model_config=NVFP4, runner="cutlass")
    assert r.plan is None and _codes(r) == {"arch_unsupported"}
    reason = _reason(r, "arch_unsupported", "cutlass")
    assert reason.source.startswith("backends/cutlass.yaml:") and "vllm <0.12.0" in reason.detail


def test_vllm_cutlass_nvfp4_on_sm120_from_0_12_0():
    """vllm-project/vllm#29242 (first in 0.12.0) builds the NVFP4 MoE kernels for 12.0: supported from there."""
    r = _explain(gpu="RTX PRO 6000", engine="vllm", engine_version="0.12.0", model_config=NVFP4, runner="cutlass")
    assert _planned(r, "cutlass") and r.plan.evidence == "supported"


def test_vllm_cutlass_nvfp4_on_sm103_from_0_11_2():
    """10.3a joined the NVFP4 MoE build in 0.11.2 (0.11.1 without CUDA 13 built 10.0a;10.1a;12.0a;12.1a): a B300 is
    refused below it (the row's version gate) and supported at it."""
    old = _explain(gpu="B300", engine="vllm", engine_version="0.11.1", model_config=NVFP4, runner="cutlass")
    assert old.plan is None and "quant_unsupported" in _codes(old)
    assert "vllm >=0.11.2" in _reason(old, "quant_unsupported", "cutlass").detail
    new = _explain(gpu="B300", engine="vllm", engine_version="0.11.2", model_config=NVFP4, runner="cutlass")
    assert _planned(new, "cutlass")


@pytest.mark.parametrize("gpu", ["H200", "A100"])
def test_vllm_cutlass_nvfp4_below_blackwell_is_refused_as_an_arch(gpu):
    """CutlassExpertsFp4's device gate takes the 10.x, 11.x and 12.x families only."""
    r = _explain(gpu=gpu, engine="vllm", model_config=NVFP4, runner="cutlass")
    assert r.plan is None and "arch_unsupported" in _codes(r)


@pytest.mark.parametrize(("gpu", "quant"), [("RTX 5090", "fp8_tensor"), ("GB10", "fp8_channel"), ("L40", "fp8_tensor"),
                                            ("A100", "fp8_channel")])
def test_vllm_cutlass_fp8_off_hopper_and_datacenter_blackwell_is_refused(gpu, quant):
    """cutlass_group_gemm_supported: 9.0 <= capability < 11.0; no release builds an SM120 FP8 grouped GEMM."""
    r = _explain(gpu=gpu, engine="vllm", quant=quant, model=MAVERICK | {"routing": "renormalize", "top_k": 2},
                 runner="cutlass")
    assert r.plan is None and "arch_unsupported" in _codes(r)


def test_vllm_cutlass_fp8_on_hopper_broken_in_0_9_0_and_0_9_1():
    """vllm-project/vllm#19648: 0.9.0 and 0.9.1 built the Hopper grouped GEMM for 9.0a;10.0a and it failed on H100;
    0.9.2 builds it for 9.0a. Per-tensor FP8 on an H200 at 0.9.1 is refused, at 0.9.2 supported."""
    dep = {"gpu": "H200", "engine": "vllm", "quant": "fp8_tensor", "runner": "cutlass",
           "model": MAVERICK | {"routing": "renormalize", "top_k": 2}}
    broken = _explain(**dep, engine_version="0.9.1")
    assert broken.plan is None and "quant_unsupported" in _codes(broken)
    assert "vllm >=0.9.0,<0.9.2" in _reason(broken, "quant_unsupported", "cutlass").detail
    fixed = _explain(**dep, engine_version="0.9.2")
    assert _planned(fixed, "cutlass") and fixed.plan.evidence == "supported"


def test_vllm_cutlass_fp8_on_sm100_from_0_10_0():
    """grouped_mm_c3x_sm100 first in 0.10.0 (10.0a); 0.9.2 built no 10.x FP8 grouped GEMM."""
    dep = {"gpu": "B200", "engine": "vllm", "quant": "fp8_channel", "runner": "cutlass",
           "model": MAVERICK | {"routing": "renormalize", "top_k": 2}}
    assert _explain(**dep, engine_version="0.9.2").plan is None
    assert _planned(_explain(**dep, engine_version="0.10.0"), "cutlass")


def test_vllm_cutlass_auto_at_0_9_0_never_plans_cutlass_for_fp8_on_hopper():
    """The round's weak pass (vllm-project/vllm#18841's kind): another Hopper FP8 deployment at 0.9.0 under auto."""
    r = _explain(gpu="H100", engine="vllm", engine_version="0.9.0", quant="fp8_channel", tp=2,
                 model=MAVERICK | {"routing": "renormalize", "top_k": 4})
    assert r.plan is not None and r.plan.runner != "cutlass"
    cutlass = next(c for c in r.candidates if c.backend == "cutlass")
    assert not cutlass.eligible and any(x.code == "quant_unsupported" for x in cutlass.reasons)


# ------------------------------------------------------------ kind 2: vLLM 0.15.0's FlashInfer CUTLASS device gate
@pytest.mark.parametrize("gpu", ["GB10", "RTX 5090"])
def test_vllm_0_15_0_flashinfer_cutlass_refuses_the_12x_family(gpu):
    """0.15.0's FlashInferExperts device gate is 9.0 or the 10.x family (#32414): any format on a 12.x GPU is refused
    for the GPU there (here bf16 Qwen3-30B), not at 0.14.1 or 0.15.1 (where #33417 put the 12.x family back)."""
    dep = {"gpu": gpu, "engine": "vllm", "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B"),
           "runner": "flashinfer_cutlass"}
    r = _explain(**dep, engine_version="0.15.0")
    assert r.plan is None and _codes(r) == {"arch_unsupported"}
    assert "vllm ==0.15.0" in _reason(r, "arch_unsupported", "flashinfer_cutlass").detail
    for version in ("0.14.1", "0.15.1"):
        assert _planned(_explain(**dep, engine_version=version), "flashinfer_cutlass"), version


def test_the_vllm_regression_is_not_sglangs():
    """The 0.15.0 gate is vLLM's: the same GPU and format under SGLang is not refused by it."""
    r = _explain(gpu="RTX PRO 6000", engine="sglang", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"),
                 runner="flashinfer_cutlass", packages={"sglang": "0.5.19"})
    assert _planned(r, "flashinfer_cutlass")


# ---------------------------------------------------------------- kind 3: FlashInfer's SM12x NVFP4 CUTLASS from 0.6.7
def test_flashinfer_cutlass_nvfp4_on_gb10_needs_0_6_7():
    """The SM12x NVFP4 grouped GEMM works from 0.6.7 (#2725: compute_120f; #2798: CUTLASS 4.4.2, the Sm120 FP4 MoE
    launcher crash on GB10): a DGX Spark with 0.6.6 is refused with the version to install; 0.6.7 (nvcc 12.9) runs."""
    dep = {"gpu": "GB10", "engine": "vllm", "model_config": NVFP4, "runner": "flashinfer_cutlass", "nvcc": "12.9"}
    old = _explain(**dep, packages={"flashinfer-python": "0.6.6"})
    assert old.plan is None and _codes(old) == {"quant_unsupported"}
    reason = _reason(old, "quant_unsupported", "flashinfer_cutlass")
    assert "flashinfer-python >=0.6.7" in reason.detail and reason.fix == "pip install 'flashinfer-python>=0.6.7'"
    assert _planned(_explain(**dep, packages={"flashinfer-python": "0.6.7"}), "flashinfer_cutlass")


def test_flashinfer_cutlass_16bit_on_sm120_keeps_no_lower_bound():
    """Only the NVFP4 cell moved: bf16 on an RTX PRO 6000 with FlashInfer 0.6.5 is still planned."""
    r = _explain(gpu="RTX PRO 6000", engine="vllm", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"),
                 runner="flashinfer_cutlass", packages={"flashinfer-python": "0.6.5"}, nvcc="12.8")
    assert _planned(r, "flashinfer_cutlass")


# ------------------------------------------------------------- kind 4: TRT-LLM-gen Llama4 routing, per release
@pytest.mark.parametrize("version", ["0.6.11", "0.6.11.post1"])
def test_trtllm_gen_nvfp4_llama4_has_no_kernels_in_0_6_11(version):
    """0.6.11 and 0.6.11.post1 request a per-token-scaled FC1 for every Llama4-routed launch and ship no NVFP4 cubin
    for it ("No kernel found"): Maverick's MoE in NVFP4 on a B200 is refused for the routing there."""
    r = _explain(gpu="B200", engine="vllm", quant="nvfp4", model=MAVERICK, runner="flashinfer_trtllm",
                 packages={"flashinfer-python": version})
    assert r.plan is None and "routing_unsupported" in _codes(r)
    reason = _reason(r, "routing_unsupported", "flashinfer_trtllm")
    assert "flashinfer-python >=0.6.11,<0.6.11.post2" in reason.detail
    assert reason.source.startswith("backends/flashinfer_trtllm.yaml:")


@pytest.mark.parametrize("version", ["0.6.10", "0.6.11.post2", "0.6.12"])
def test_trtllm_gen_nvfp4_llama4_outside_those_releases_is_not_refused_by_it(version):
    """Outside 0.6.11 .. 0.6.11.post1 the NVFP4 Llama4 cell stays as open as before (unverified), not refused."""
    r = _explain(gpu="B200", engine="vllm", quant="nvfp4", model=MAVERICK, runner="flashinfer_trtllm",
                 packages={"flashinfer-python": version})
    assert "routing_unsupported" not in _codes(r)
    assert _planned(r, "flashinfer_trtllm") and r.plan.evidence == "unverified"


def test_trtllm_gen_bf16_llama4_is_refused_at_every_release():
    """The BF16 launcher multiplies the Llama4 weight into the expert output (never on the input): Scout in bf16 is
    refused whatever the FlashInfer release (here 0.6.18, after the kernel-set fix and the BF16 intermediates'
    padding of flashinfer-ai/flashinfer#4319, so the Llama4 routing is the only reason)."""
    r = _explain(gpu="B200", engine="vllm", model_config=SCOUT, runner="flashinfer_trtllm",
                 packages={"flashinfer-python": "0.6.18"})
    assert r.plan is None and _codes(r) == {"routing_unsupported"}
    assert "(with" not in _reason(r, "routing_unsupported", "flashinfer_trtllm").detail


def test_trtllm_gen_fp8_tensor_llama4_kept_its_kernels():
    """The per-tensor FP8 launcher scaled the input before 0.6.11 and keeps its kernels: not refused at 0.6.11.post1."""
    r = _explain(gpu="B200", engine="vllm", quant="fp8_tensor", model=MAVERICK, runner="flashinfer_trtllm",
                 packages={"flashinfer-python": "0.6.11.post1"})
    assert "routing_unsupported" not in _codes(r) and _planned(r, "flashinfer_trtllm")


@pytest.mark.parametrize(("hidden", "refused"), [(2688, True), (2816, True), (3072, False)])
def test_trtllm_gen_nvfp4_relu2_hidden_a_multiple_of_512(hidden, refused):
    """flashinfer-ai/flashinfer#3168's condition (open): NVFP4 relu2 with a hidden size not a multiple of 512, which
    vLLM pads to 256, corrupts on SM100/SM103; at FlashInfer 0.6.9 (the report's time) 2688 and 2816 (its padded
    size) are refused, 3072 (6 x 512) is not."""
    r = _explain(gpu="GB200", engine="vllm", quant="nvfp4", model=NEMOTRON | {"hidden_size": hidden},
                 runner="flashinfer_trtllm", packages={"flashinfer-python": "0.6.9"})
    assert (r.plan is None and "shape_unaligned" in _codes(r)) is refused
    if not refused:
        assert _planned(r, "flashinfer_trtllm")


def test_the_matrix_marks_negative_routing_facts():
    """moe-select matrix shows flashinfer_trtllm's refused routing facts (the llama4 ones of this kind, and any other
    the file holds, read from the YAML itself) as refused (JSON supported: false), in the file's order."""
    import yaml

    from moe_select.matrix import build

    root = CONFIGS.parents[1]
    written = yaml.safe_load((root / "backends" / "flashinfer_trtllm.yaml").read_text())["routing"]
    negative = [f["values"] for f in written if f.get("supported") is False]
    assert negative.count(["llama4"]) == 2, negative
    data = build(load_catalog(use_env=False, plugins=False))
    trt = next(r for r in data["runners"] if r["runner"] == "flashinfer_trtllm")
    refused = [f for f in trt["routing"] if f.get("supported") is False]
    assert [f["values"] for f in refused] == negative
    assert all(f.get("supported", True) for f in trt["routing"] if f not in refused)


# ------------------------------------------------------------------------------------------ the two mechanisms
TOY = """\
schema_version: 3
runner: toy_gated
summary: a kernel with negative rows and a negative routing fact
source: "this project: test"
support:
  - {archs: [sm90, sm100], formats: [bf16, fp8_tensor], source: "this project: test"}
  - {archs: [sm100], formats: [bf16], supported: false, code: arch_unsupported, requires: {vllm: "<0.20"}, source: "this project: test"}
  - {archs: [sm90], formats: [fp8_tensor], supported: false, source: "this project: test"}
activations: {values: [silu], source: "this project: test"}
routing:
  - {values: [renormalize, llama4], source: "this project: test"}
  - {values: [llama4], supported: false, when: {quant: [fp8_tensor]}, source: "this project: test"}
dispatch: {formats: [standard], source: "this project: test"}
cuda_graph: {supported: true, source: "this project: test"}
lists: {archs: open, formats: open, support: open, activations: open, routing: open, dispatch: open, a2a: open,
        cuda_graph: open, engines: open}
"""
SHAPE = {"num_experts": 16, "top_k": 1, "hidden_size": 1024, "moe_intermediate_size": 512, "activation": "silu"}


def _toy(tmp_path, text: str = TOY) -> Any:
    (tmp_path / "toy_gated.yaml").write_text(text, encoding="utf-8")
    return tmp_path


def _toy_explain(tmp_path, **dep: Any) -> Any:
    dep = {"engine": "vllm", "runner": "toy_gated", **BASE, **dep}
    dep["model"] = SHAPE | {"routing": dep.pop("routing", "renormalize")}
    return moe_select.explain(dep, backends_dirs=[tmp_path])


def test_a_negative_row_refuses_with_its_code_and_under_its_version_bound(tmp_path):
    """code: arch_unsupported is the reason a negative row gives (the default stays quant_unsupported); its requires
    bounds it (vllm < 0.20: refused at 0.19, not at 0.20); the detail names the bound."""
    _toy(tmp_path)
    r = _toy_explain(tmp_path, arch="sm100", quant="bf16", engine_version="0.19.0")
    assert r.plan is None and _codes(r) == {"arch_unsupported"}
    assert "(with vllm <0.20)" in r.reasons[0].detail and r.reasons[0].source.endswith("toy_gated.yaml:7")
    assert _planned(_toy_explain(tmp_path, arch="sm100", quant="bf16", engine_version="0.20.0"), "toy_gated")
    default = _toy_explain(tmp_path, arch="sm90", quant="fp8_tensor")
    assert default.plan is None and _codes(default) == {"quant_unsupported"} and "(with" not in default.reasons[0].detail


def test_a_negative_routing_fact_refuses_where_it_holds_only(tmp_path):
    """A negative routing fact refuses its methods where its when holds (llama4 with fp8_tensor), before the positive
    facts are read; elsewhere the positive fact decides (llama4 with bf16 is planned)."""
    _toy(tmp_path)
    r = _toy_explain(tmp_path, arch="sm100", quant="fp8_tensor", routing="llama4")
    assert r.plan is None and _codes(r) == {"routing_unsupported"}
    assert r.reasons[0].source.endswith("toy_gated.yaml:12")
    assert _planned(_toy_explain(tmp_path, arch="sm100", quant="bf16", routing="llama4"), "toy_gated")
    assert _planned(_toy_explain(tmp_path, arch="sm100", quant="fp8_tensor", routing="renormalize"), "toy_gated")


@pytest.mark.parametrize(("old", "new", "says"), [
    ("{archs: [sm90], formats: [fp8_tensor], supported: false,", "{archs: [sm90], formats: [fp8_tensor], code: arch_unsupported,",
     "needs supported: false"),
    ("{values: [llama4], supported: false,", "{values: any, supported: false,", "not any"),
    ("code: arch_unsupported", "code: shape_unaligned", "code"),
])
def test_the_new_keys_are_checked_at_load(tmp_path, old, new, says):
    """code only on a negative row and only arch/quant codes; a negative routing fact names methods, not any."""
    assert TOY.count(old) == 1
    _toy(tmp_path, TOY.replace(old, new))
    with pytest.raises(InputError) as exc:
        load_catalog(use_env=False, plugins=False, backends_dirs=[tmp_path])
    assert "toy_gated.yaml" in str(exc.value) and says in str(exc.value)
