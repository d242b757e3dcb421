"""The launch-line trial's leftovers (2026-12-05, twenty-seventh session), fixed as kinds; read in the PyPI wheels.

- SGLang's FlashInfer MegaMoE all-to-all validates the checkpoint's architecture against a fixed list per release
  (arg_groups/moe_hook.py validate_flashinfer_megamoe_model, called by handle_a2a_moe before any weight) and raises for
  every other class: gpt-oss was planned unverified with exit 0. The list per release (0.5.20; 0.5.21-0.5.22 add
  GlmMoeDsa; 0.5.23 adds Beam and Kimi K3) is an ``architecture_not`` fact of backends/a2a/flashinfer_megamoe.yaml.
"""
from __future__ import annotations

import pytest

import moe_select
from report_helpers import cand

from conftest import CONFIGS

MEGA = {"gpu": "B200", "engine": "sglang", "tp": 4, "ep": 4, "dp": 4, "a2a": "flashinfer_megamoe",
        "runner": "flashinfer_megamoe"}
#: an NVFP4 layer of DeepSeek-V3's shape, inline, with the architecture the test names
LAYER = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu"}


def _megamoe_refusals(version: str, **dep) -> set[str]:
    r = moe_select.explain({**MEGA, "engine_version": version, **dep})
    return {x.source.split(":")[0] for x in cand(r, "flashinfer_megamoe").reasons if x.code == "a2a_unsupported"}


@pytest.mark.parametrize("version", ["0.5.20", "0.5.21", "0.5.22", "0.5.23"])
def test_sglang_megamoe_refuses_gpt_oss_in_every_release(version):
    got = _megamoe_refusals(version, model_config=str(CONFIGS / "openai__gpt-oss-120b"))
    assert "backends/a2a/flashinfer_megamoe.yaml" in got, got


@pytest.mark.parametrize("arch, refused_in", [
    ("DeepseekV3ForCausalLM", set()),
    ("Qwen3MoeForCausalLM", set()),
    ("GlmMoeDsaForCausalLM", {"0.5.20"}),
    ("KimiK3ForConditionalGeneration", {"0.5.20", "0.5.21", "0.5.22"}),
    ("BeamForCausalLM", {"0.5.20", "0.5.21", "0.5.22"}),
    ("MixtralForCausalLM", {"0.5.20", "0.5.21", "0.5.22", "0.5.23"}),
])
def test_sglang_megamoe_architecture_list_grows_by_release(arch, refused_in):
    for version in ("0.5.20", "0.5.21", "0.5.22", "0.5.23"):
        got = _megamoe_refusals(version, quant="nvfp4", model={**LAYER, "architecture": arch})
        assert ("backends/a2a/flashinfer_megamoe.yaml" in got) == (version in refused_in), (arch, version, got)


def test_sglang_megamoe_unstated_architecture_is_not_refused_by_the_list():
    """An inline layer that names no architecture: the allow-list cannot judge it (no refusal from it)."""
    got = _megamoe_refusals("0.5.23", quant="nvfp4", model=LAYER)
    assert "backends/a2a/flashinfer_megamoe.yaml" not in got, got


def test_megamoe_on_a_validated_checkpoint_plans():
    r = moe_select.explain({**MEGA, "engine_version": "0.5.23", "model_config": str(CONFIGS / "nvidia__DeepSeek-V3.1-NVFP4")})
    assert r.plan is not None and r.plan.runner == "flashinfer_megamoe", r.summary()


# --------------------------------------------------------------------------------------------------------------------
# Field round 40 (sgl-project/sglang#24975): SGLang before 0.5.14 runs FP8 W8A8 (no blocks) Triton MoE on sm89 / sm120
# with its default 128x256x128 tile wherever no tuned file matches; the tile needs 147456 B of shared memory where those
# GPUs allow 101376 B per block. The shapes the 0.5.13 wheel ships files for (intermediate per rank 192, 352, 384, 640,
# 3584) are left out by an IntRange ``not_one_of``.
MIXTRAL = {"num_experts": 8, "top_k": 2, "hidden_size": 4096, "moe_intermediate_size": 14336, "activation": "silu"}


def _triton_smem(gpu: str, tp: int, version: str, **dep) -> list:
    r = moe_select.explain({"gpu": gpu, "engine": "sglang", "engine_version": version, "quant": "fp8_tensor",
                            "model": MIXTRAL, "tp": tp, "runner": "triton", **dep})
    return [x for x in cand(r, "triton").reasons if x.code == "shape_unaligned" and "147456" in x.detail]


@pytest.mark.parametrize("gpu, tp, version, refused", [
    ("L40S", 2, "0.5.13", True),          # the report's shape: 7168 per rank, no tuned file
    ("RTX 5090", 2, "0.5.13", True),      # sm120: the same 99 KB per block
    ("RTX 4090", 4, "0.5.13", False),     # 3584 per rank: the wheel ships E=8,N=3584 for the RTX 4090
    ("L40S", 2, "0.5.14", False),         # 0.5.14's low-smem default tile
    ("H100", 2, "0.5.13", False),         # sm90: 227 KB per block
])
def test_sglang_fp8_default_tile_over_the_shared_memory_of_sm89_and_sm120(gpu, tp, version, refused):
    assert bool(_triton_smem(gpu, tp, version)) == refused, (gpu, tp, version)


def test_forwards_of_at_most_the_local_experts_take_the_small_tile():
    assert not _triton_smem("L40S", 2, "0.5.13", max_tokens_per_rank=8)
    assert _triton_smem("L40S", 2, "0.5.13", max_tokens_per_rank=9)


def test_int_condition_not_one_of():
    from moe_select.conditions import IntRange

    r = IntRange(min=100, not_one_of=[352, 640])
    assert r.contains(7168) and not r.contains(352) and not r.contains(640) and not r.contains(64)
    with pytest.raises(ValueError):
        IntRange(not_one_of=[])


def test_l20_is_an_sm89_gpu():
    """NVIDIA L20 (Ada, compute capability 8.9; the field round's checker found it refused as an unknown GPU), and the
    names around it keep their own archs."""
    from moe_select.vocab import gpu_arch

    assert gpu_arch("L20") == gpu_arch("NVIDIA L20") == "sm89"
    assert gpu_arch("H20") == "sm90" and gpu_arch("L40S") == "sm89" and gpu_arch("L4") == "sm89"
    assert _triton_smem("L20", 2, "0.5.13")


@pytest.mark.parametrize("file_key, flag, want", [
    ("gpu: L40S", ["--arch", "sm121"], "sm121        command line (--arch); replaces the base's gpu L40S"),
    ("arch: sm89", ["--gpu", "H100"], "command line (--gpu); replaces the base's arch sm89"),
])
def test_a_machine_flag_overrides_the_files_machine(tmp_path, capsys, file_key, flag, want):
    """``--arch`` over a file's ``gpu:`` (and ``--gpu`` over its ``arch:``) is the file's machine overridden, as the help
    says of every flag, not a contradiction (the round's checker got 'arch sm121 contradicts gpu L40S'); the understood
    key says which base key it replaced. Both in the file still contradict (tests/test_inputs.py)."""
    from moe_select.cli import main

    f = tmp_path / "d.yaml"
    f.write_text(f"{file_key}\nengine: sglang\nquant: fp8_tensor\nmodel: {{num_experts: 8, top_k: 2, hidden_size: 4096, "
                 "moe_intermediate_size: 14336, activation: silu}\ntp: 2\n")
    main(["explain", "--deployment", str(f), *flag])
    out = capsys.readouterr().out
    assert want in out and "contradicts" not in out, out[:600]


# --------------------------------------------------------------------------------------------------------------------
# vLLM refuses expert-parallel load balancing per quantization method (RoutedExperts.__init__: NotImplementedError 'EPLB
# is not supported <Method>' where supports_eplb is False; read in the 0.29.0 .. 0.34.0 wheels): methods rows of
# backends/common.yaml with code parallelism_unsupported.
def _vllm(model: str, eplb: bool, version: str = "0.34.0", **dep):
    return moe_select.explain({"gpu": "H100", "engine": "vllm", "engine_version": version,
                               "model_config": str(CONFIGS / model), "tp": 4, "ep": 4, "eplb": eplb, **dep})


def _eplb_refusals(r) -> set[str]:
    return {c.backend for c in r.candidates for x in c.reasons
            if x.code == "parallelism_unsupported" and x.source.startswith("backends/common.yaml")}


@pytest.mark.parametrize("model", ["openai__gpt-oss-120b", "Qwen__Qwen3-30B-A3B-AWQ"])
def test_vllm_methods_without_eplb_refuse_every_runner(model):
    on = _vllm(model, True)
    assert on.plan is None and _eplb_refusals(on) == {c.backend for c in on.candidates}, on.summary()
    text = on.render_text()
    cands = text[text.index("Candidates ("):]
    assert "Every runner is refused because" in text and "EPLB is not supported" not in cands, text   # printed once
    if model.startswith("openai"):     # the engine's MXFP4 prediction names the method's failure, not its oracle's
        assert "fails whatever it chooses" in text and "No ... MoE backend supports" not in text, text
    off = _vllm(model, False)
    assert off.plan is not None and not _eplb_refusals(off), off.summary()


@pytest.mark.parametrize("model", ["Qwen__Qwen3-30B-A3B-FP8", "Qwen__Qwen3-30B-A3B", "nvidia__Qwen3-30B-A3B-NVFP4"])
def test_vllm_methods_with_eplb_are_not_touched(model):
    """quant_method fp8 (Fp8MoEMethod), unquantized and ModelOpt NVFP4 take EPLB in every release read."""
    assert not _eplb_refusals(_vllm(model, True))


def test_compressed_tensors_w4a16_with_eplb_takes_the_triton_experts_only():
    r = moe_select.explain({"gpu": "H100", "engine": "vllm", "engine_version": "0.34.0", "quant": "int4_w4a16",
                            "quant_config": {"group_size": 128, "layout": "compressed-tensors"}, "model": {
                                "num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768,
                                "activation": "silu"}, "tp": 4, "ep": 4, "eplb": True})
    refused = _eplb_refusals(r)
    assert "marlin" in refused and "triton" not in refused, r.summary()


def test_releases_before_the_ones_read_are_not_claimed():
    assert not _eplb_refusals(_vllm("openai__gpt-oss-120b", True, version="0.28.0"))


# --------------------------------------------------------------------------------------------------------------------
# Field round 41 (sgl-project/sglang#40623): SGLang's draft (MTP / NextN) MoE layers take the target's runner and
# all-to-all unless --speculative-moe-runner-backend / --speculative-moe-a2a-backend name theirs; from 0.5.22 a
# flashinfer_megamoe target's draft gets flashinfer_trtllm and no all-to-all.
DSV31 = str(CONFIGS / "nvidia__DeepSeek-V3.1-NVFP4")
MEGA_DSV31 = {"gpu": "B200", "engine": "sglang", "model_config": DSV31, "tp": 4, "ep": 4, "dp": 4,
              "a2a": "flashinfer_megamoe", "runner": "flashinfer_megamoe", "speculative": True}


def _mtp(r):
    return next(sub for sub in r.layers if sub.deployment.layer_kind == "mtp")


def test_sglang_megamoe_draft_before_and_after_0_5_22():
    old = moe_select.explain({**MEGA_DSV31, "engine_version": "0.5.21"})
    assert old.plan is None and _mtp(old).deployment.runner == "flashinfer_megamoe"
    assert _mtp(old).deployment.a2a == "flashinfer_megamoe"
    new = moe_select.explain({**MEGA_DSV31, "engine_version": "0.5.23"})
    assert new.plan is not None and new.plan.runner == "flashinfer_megamoe", new.summary()
    sub = _mtp(new)
    assert sub.deployment.runner == "flashinfer_trtllm" and sub.deployment.a2a == "none" and sub.plan is not None


def test_sglang_draft_flags_are_the_mtp_layers(capsys):
    from moe_select.cli import main
    from moe_select.launch_line import from_command

    line = ("python -m sglang.launch_server --model-path nvidia/DeepSeek-V3.1-NVFP4 --tp 4 --enable-dp-attention --dp 4 "
            "--quantization modelopt_fp4 --moe-a2a-backend flashinfer_megamoe --moe-runner-backend flashinfer_megamoe "
            "--speculative-algorithm EAGLE --speculative-moe-runner-backend flashinfer_trtllm --speculative-moe-a2a-backend none")
    launch = from_command(line, engine_version="0.5.21", model_config=DSV31)
    assert launch.deployment["layer_runners"] == {"mtp": "flashinfer_trtllm"}
    assert launch.deployment["layer_a2a"] == {"mtp": "none"}
    r = launch.explain(deployment={"gpu": "B200"})
    assert r.plan is not None and _mtp(r).plan is not None, r.summary()      # the explicit draft flags: it runs
    main(["plan", "--from-command", line, "--gpu", "B200", "--engine-version", "0.5.21", "--model-config", DSV31,
          "--emit", "sglang"])
    emitted = " ".join(capsys.readouterr().out.split())
    assert "--speculative-moe-runner-backend flashinfer_trtllm" in emitted and "--speculative-moe-a2a-backend none" in emitted


def test_draft_flags_without_mtp_layers_are_a_note():
    from moe_select.launch_line import from_command

    line = ("python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp 2 --speculative-algorithm EAGLE "
            "--speculative-draft-model-path some/draft --speculative-moe-runner-backend triton")
    launch = from_command(line, engine_version="0.5.23", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert "layer_runners" not in launch.deployment
    assert any("no MTP layers" in f.message for f in launch.findings), launch.findings


def test_layer_a2a_of_a_kind_the_checkpoint_lacks_is_an_input_error():
    with pytest.raises(moe_select.InputError, match="layer_a2a"):
        moe_select.explain({"gpu": "H100", "engine": "sglang", "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B"),
                            "tp": 2, "layer_a2a": {"mtp": "none"}})


# --------------------------------------------------------------------------------------------------------------------
# Field round 41 (vllm-project/vllm#31628): vLLM before 0.15.0 indexes a Llama-4 checkpoint's fused FP8 expert tensors
# on the CPU under expert parallelism (PyTorch < 2.11 has no CPU float8 indexing); and a retired FlashInfer variable
# still read at the line's release is not described as ignored.
SCOUT = str(CONFIGS / "meta-llama__Llama-4-Scout-17B-16E-Instruct")


def _scout(version: str, **dep):
    return moe_select.explain({"gpu": "H100", "engine": "vllm", "engine_version": version, "model_config": SCOUT,
                               "quant": "fp8_tensor", "quant_config": {"layout": "modelopt"}, "tp": 1, "dp": 2, "ep": 2,
                               **dep})


def _llama4_loader(r) -> bool:
    return any(x.code == "parallelism_unsupported" and "Float8_e4m3fn" in x.detail for c in r.candidates for x in c.reasons)


@pytest.mark.parametrize("version, ep, refused", [
    ("0.14.1", 2, True), ("0.10.0", 2, True), ("0.15.0", 2, False), ("0.14.1", 1, False)])
def test_vllm_llama4_fused_fp8_experts_with_ep_before_0_15(version, ep, refused):
    r = _scout(version, ep=ep, dp=ep)
    assert _llama4_loader(r) == refused, r.summary()
    if refused:
        assert r.plan is None


def test_llama4_per_expert_checkpoints_are_not_claimed():
    """llm-compressor's FP8 Llama-4 stores experts one by one (compressed-tensors): another loader path."""
    r = _scout("0.14.1", quant_config={"layout": "compressed-tensors"})
    assert not _llama4_loader(r)


def test_retired_flashinfer_variable_still_read_is_not_called_ignored():
    from moe_select.launch_line import from_command

    line = "VLLM_USE_FLASHINFER_MOE_FP8=1 VLLM_FLASHINFER_MOE_BACKEND=throughput vllm serve x -tp 2"
    cfg = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
    old = from_command(line, engine_version="0.14.1", model_config=cfg)
    said = [f.message for f in old.findings if f.token.startswith("VLLM_USE_FLASHINFER_MOE_FP8")]
    assert said and all("got vLLM's automatic choice" not in m for m in said) and "still read at vllm 0.14.1" in said[0]
    new = from_command(line, engine_version="0.30.0", model_config=cfg)
    assert any(f.kind == "ignored" for f in new.findings if f.token.startswith("VLLM_USE_FLASHINFER_MOE_FP8"))


# --------------------------------------------------------------------------------------------------------------------
# not_one_of beyond the one width (the session's review: mutations of lint's cover check, describe(), the 352 width and
# the fp8_channel format went unseen).
def test_not_one_of_in_the_cover_check_and_the_text():
    from moe_select.conditions import IntRange, When
    from moe_select.lint import _covers

    wide = When(intermediate_per_rank=IntRange(not_one_of=[352]))
    narrow = When(intermediate_per_rank=IntRange(not_one_of=[352, 640]))
    assert _covers(wide, narrow) and not _covers(narrow, wide)      # narrow excludes 640, which wide holds
    assert not _covers(narrow, When(intermediate_per_rank=[640]))
    assert _covers(narrow, When(intermediate_per_rank=[7168]))
    assert "not one of [352, 640]" in narrow.describe()


def test_not_one_of_that_leaves_nothing_is_empty():
    from moe_select.conditions import IntRange, When

    assert IntRange(min=352, max=352, not_one_of=[352]).empty()
    assert IntRange(max=2, not_one_of=[1, 2]).empty(positive=True)
    assert not IntRange(min=352, max=353, not_one_of=[352]).empty()
    assert When(intermediate_per_rank={"min": 352, "max": 352, "not_one_of": [352]}).unsatisfiable() is not None


@pytest.mark.parametrize("gpu, width, quant, refused", [
    ("RTX 6000 Ada", 352, "fp8_tensor", False),     # a width the wheel ships a file for (RTX 6000 Ada, E=128)
    ("RTX 6000 Ada", 384, "fp8_channel", False),
    ("RTX 6000 Ada", 768, "fp8_channel", True),     # per-channel FP8 takes the same default tile
    ("L40S", 768, "fp8_block", False),              # block FP8: 64 x block_n x block_k, 3 stages (fits)
])
def test_default_tile_fact_over_widths_and_formats(gpu, width, quant, refused):
    model = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": width, "activation": "silu"}
    r = moe_select.explain({"gpu": gpu, "engine": "sglang", "engine_version": "0.5.13", "quant": quant, "model": model,
                            "tp": 1, "runner": "triton"})
    hit = [x for x in cand(r, "triton").reasons if x.code == "shape_unaligned" and "147456" in x.detail]
    assert bool(hit) == refused, (gpu, width, quant)


# --------------------------------------------------------------------------------------------------------------------
# Field round 42 (sgl-project/sglang#29182): SGLang's Quark W4A4 MXFP4 MoE method builds only the AITER runner, which
# computed MiniMax-M3's split SwiGLU-OAI as plain SiLU before 0.5.21.
MM3 = {"gpu": "MI355X", "engine": "sglang", "quant": "mxfp4", "quant_config": {"layout": "quark"}, "tp": 4,
       "vendor_library": True, "model": {"num_experts": 128, "top_k": 4, "hidden_size": 6144, "moe_intermediate_size": 3072,
                                         "activation": "swiglu_oai_split", "swiglu_limit": 7.0, "routing": "sigmoid_topk",
                                         "architecture": "MiniMaxM3SparseForCausalLM"}}


@pytest.mark.parametrize("version, refused", [("0.5.19", True), ("0.5.20", True), ("0.5.22", False)])
def test_sglang_quark_mxfp4_aiter_split_swiglu_oai(version, refused):
    r = moe_select.explain({**MM3, "engine_version": version})
    codes = {x.code for x in cand(r, "aiter").reasons}
    assert ("activation_unsupported" in codes) == refused, (version, cand(r, "aiter").reasons)
    assert (r.plan is None) == refused


def test_sglang_quark_mxfp4_builds_aiter_only():
    r = moe_select.explain({**MM3, "engine_version": "0.5.22"})
    for other in ("triton", "triton_kernel", "cutlass"):
        assert any(x.code == "quant_unsupported" and "QuarkW4A4MXFp4MoE" in x.detail for x in cand(r, other).reasons), other
    assert not any("QuarkW4A4MXFp4MoE" in x.detail for x in cand(r, "aiter").reasons)


def test_no_per_rank_intermediate_where_ep_does_not_divide_tp():
    """tp 8 with ep 7: moe_tp is 8/7, so 'intermediate_per_rank = 672' named a split no engine makes (field round 40's
    checker read it as a real size); the parallelism facts refuse the deployment, and no per-rank shape reason is
    printed. With ep dividing tp the shape facts still speak (tp 8, ep 1: 96 per rank, under the 128 block)."""
    dep = {"gpu": "H100", "engine": "sglang", "engine_version": "0.5.4",
           "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8"), "tp": 8}
    r = moe_select.explain({**dep, "ep": 7})
    codes = {x.code for c in r.candidates for x in c.reasons}
    assert r.plan is None and "parallelism_unsupported" in codes and "shape_unaligned" not in codes, codes
    assert "672" not in r.render_text()
    r = moe_select.explain({**dep, "ep": 1})
    assert any(x.code == "shape_unaligned" and "96" in x.detail for x in r.reasons), r.summary()
