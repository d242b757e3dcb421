"""The tenth new user's trial (2026-12-05), fixed as kinds.

- (1b) vLLM from 0.29.0 refines the block scales of an Fp8Config (``quant_method: fp8``) checkpoint whose per-rank
  intermediate splits a 128x128 block, to gcd(block_n, block_k, per-rank intermediate, hidden) >= 32, and only
  TritonExperts takes the refined block (refine_fp8_moe_block_shape; read in the 0.28.0-0.34.0 wheels); from 0.31.0 a
  runner asked by name runs on shards padded to whole blocks under pure TP with 128-aligned global widths
  (pad_tp_shard_to_weight_blocks). The compressed-tensors and Quark FP8 methods refine nothing. moe-select refused
  every runner (SGLang's and old vLLM's rule for every engine and release).
- (1a) AWQ checkpoints: `triton` was planned and written as the runner flag. vLLM from 0.27.0 gives AWQ MoE layers Marlin
  takes its WNA16 method, whose oracle refuses TRITON for the AutoAWQ layout; SGLang's AWQ MoE scheme (read from 0.5.11)
  asserts the runner option is auto and builds Marlin, so a launch naming any runner fails at load: the plan says
  ``runner_option_auto`` and ``plan --emit`` writes no runner option; a launch line that names one exits 1.
"""
from __future__ import annotations

import pytest

import moe_select
from moe_select.cli import main
from moe_select.model_config import read_model_config
from report_helpers import cand, refusals

from conftest import CONFIGS

FP8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")        # 768 wide: 96 rows per rank at TP 8 (gcd 32), 192 at TP 4
QWEN3_30B = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
             "routing": "renormalize"}


def _vllm(version: str, **dep):
    return moe_select.explain({"gpu": "H100", "engine": "vllm", "engine_version": version, **dep})


def test_the_fp8_config_reader_states_the_serialization():
    assert read_model_config(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8").quant_params["layout"] == "fp8"


@pytest.mark.parametrize("tp", [4, 8])
def test_vllm_0_28_refuses_a_split_block_and_0_29_runs_triton_only(tp):
    old = _vllm("0.28.0", model_config=FP8, tp=tp)
    assert old.status == "rejected" and "shape_unaligned" in refusals(old, "triton")
    new = _vllm("0.29.0", model_config=FP8, tp=tp)
    assert new.status == "ok" and new.plan.runner == "triton" and new.evidence == "supported"
    for other in ("deep_gemm", "flashinfer_cutlass", "cutlass"):
        why = [r for r in cand(new, other).reasons if r.code == "quant_unsupported" and "common.yaml" in r.source]
        assert why and "refine_fp8_moe_block_shape" in why[0].detail, (other, refusals(new, other))
    # the fix names the runner that takes the refined block
    assert any(r.fix == "runner: triton" for r in cand(new, "deep_gemm").reasons)


def test_vllm_refines_only_to_blocks_of_32_or_more():
    # 1536 / 16 = 96 rows per rank at TP 16 -> gcd 32, runs; a width of 1520 at TP 8 -> 190 rows, gcd 2: refused
    ok = _vllm("0.29.0", model={**QWEN3_30B, "moe_intermediate_size": 1536}, quant="fp8_block", tp=16)
    assert ok.status == "ok" and ok.plan.runner == "triton"
    bad = _vllm("0.29.0", model={**QWEN3_30B, "moe_intermediate_size": 1520}, quant="fp8_block", tp=8)
    assert bad.status == "rejected" and "shape_unaligned" in refusals(bad, "triton")


def test_compressed_tensors_and_quark_fp8_keep_whole_blocks_per_rank():
    """compressed-tensors block FP8 keeps whole blocks per rank from 0.29.0; Quark's from 0.30.0. Corrected by the
    release-delta audit (2026-12-05; this asserted shape_unaligned for Quark at 0.29.0): vLLM 0.29.0's Quark FP8 MoE
    method takes no block FP8 at all (vllm-0.29.0 vllm/model_executor/layers/quantization/quark/quark_moe.py:
    QuarkW8A8Fp8MoEMethod.__init__ raises ValueError unless per-tensor or per-channel), so every runner is refused
    with quant_unsupported there; block FP8 with validate_fp8_block_shape_moe is first in vllm-0.30.0
    (quark_moe.py: QuarkW8A8Fp8MoEMethod weight_block_size)."""
    for version, layout in (("0.29.0", "compressed-tensors"), ("0.34.0", "compressed-tensors"), ("0.30.0", "quark"),
                            ("0.34.0", "quark")):
        r = _vllm(version, model=QWEN3_30B, quant="fp8_block", quant_config={"block": [128, 128], "layout": layout},
                  tp=8)
        assert r.status == "rejected" and "shape_unaligned" in refusals(r, "triton"), (version, layout)
    old = _vllm("0.29.0", model=QWEN3_30B, quant="fp8_block", quant_config={"block": [128, 128], "layout": "quark"}, tp=8)
    assert old.status == "rejected" and set(refusals(old, "triton")) == {"quant_unsupported"}
    why = [x for x in cand(old, "triton").reasons if x.code == "quant_unsupported"]
    assert why and why[0].source.startswith("backends/common.yaml:") and "per-tensor and per-channel" in why[0].detail
    # an inline block-FP8 deployment is planned as quant_method fp8 (the format's default layout), and says so
    r = _vllm("0.29.0", model=QWEN3_30B, quant="fp8_block", tp=8)
    assert r.status == "ok" and r.plan.runner == "triton"


def test_vllm_0_31_pads_the_shard_for_a_runner_asked_by_name_under_pure_tp_only():
    pure = _vllm("0.31.0", model_config=FP8, tp=8, runner="deep_gemm")
    assert pure.status == "ok" and pure.plan.runner == "deep_gemm"          # padded to whole blocks (unverified: newer)
    ep = _vllm("0.31.0", model=QWEN3_30B, quant="fp8_block", tp=8, ep=8)
    # EP 8: whole experts per rank (768, a multiple of 128): nothing to refine, every FP8 runner stays
    assert "quant_unsupported" not in refusals(ep, "deep_gemm")


def test_sglang_still_refuses_the_split_block():
    r = moe_select.explain({"gpu": "H100", "engine": "sglang", "model_config": FP8, "tp": 8})
    assert r.status == "rejected" and "shape_unaligned" in refusals(r, "triton")


AWQ = str(CONFIGS / "Qwen__Qwen3-30B-A3B-AWQ")          # 4 bits, group 128, zero points; 768 wide


def test_vllm_awq_moe_layers_marlin_takes_never_run_triton():
    r = _vllm("0.29.0", model_config=AWQ)
    assert r.status == "ok" and r.plan.runner == "marlin"
    why = [x for x in cand(r, "triton").reasons if x.code == "quant_unsupported" and "common.yaml" in x.source]
    assert why and "AutoAWQ" in why[0].detail and why[0].fix == "runner: marlin or humming"
    # a layer Marlin cannot take (a per-rank intermediate that splits a group of 128: 768 / 8 = 96) falls back to
    # MoeWNA16 (Triton): the fact does not hold there
    tp8 = _vllm("0.29.0", model_config=AWQ, tp=8)
    assert not [x for x in cand(tp8, "triton").reasons if "AutoAWQ" in x.detail]
    # releases before the oracle refused the layout are not stated
    assert not [x for x in cand(_vllm("0.24.0", model_config=AWQ), "triton").reasons if "AutoAWQ" in x.detail]


def test_sglang_awq_plans_marlin_and_leaves_the_runner_option_at_auto(capsys):
    r = moe_select.explain({"gpu": "H100", "engine": "sglang", "model_config": AWQ})
    assert r.status == "ok" and r.plan.runner == "marlin" and "AWQMoEScheme" in r.plan.runner_option_auto["sglang"]
    assert "quant_unsupported" in refusals(r, "triton")
    assert main(["plan", "--gpu", "H100", "--model-config", AWQ, "--engine", "sglang", "--emit", "sglang"]) == 0
    out = capsys.readouterr().out
    assert "--moe-runner-backend" not in out and "no runner option written: sglang builds marlin itself" in out
    line = f"python3 -m sglang.launch_server --model-path {AWQ} --moe-runner-backend marlin"
    assert main(["explain", "--brief", "--gpu", "H100", "--from-command", line]) == 1
    assert "wants its runner option at auto here" in capsys.readouterr().err
    # vLLM names the runner: no such note there
    assert _vllm("0.29.0", model_config=AWQ).plan.runner_option_auto == {}


def test_a_runner_name_newer_than_the_declared_release_is_refused_in_selection():
    """(1c) names.yaml's first releases of the runner option's values are read by the selector too: an explicit runner
    the declared release does not take is refused (engine_unsupported, with the release), strict mode included, and
    auto leaves such runners out; a runner the engine's method builds with the option at auto is exempt."""
    base = {"gpu": "H100", "engine": "sglang", "engine_version": "0.5.6", "model_config": FP8, "tp": 8, "ep": 8}
    # asked by moe-select (not by the release's option): the engine may still reach it unnamed, so unverified, which
    # strict mode refuses; a launch line that names it by the option is refused by the engine's parser (an engine
    # error: exit 1)
    strict = moe_select.explain({**base, "runner": "hpc_ops", "strict": True})
    assert strict.status == "rejected" and [u for u in cand(strict, "hpc_ops").unknowns if u.code == "engine_unsupported"]
    assert main(["explain", "--brief", "--gpu", "H100", "--engine-version", "0.5.6", "--from-command",
                 f"python -m sglang.launch_server --model-path {FP8} --tp 8 --ep 8 --moe-runner-backend hpc_ops"]) == 1
    # a value 0.5.6's option takes (deep_gemm) is not refused for its release
    assert not [x for x in cand(moe_select.explain(base), "deep_gemm").unknowns if "first shipped" in x.detail]
    for runner, first in (("hpc_ops", "0.5.17"), ("humming", "0.5.16")):
        why = [x for x in cand(moe_select.explain(base), runner).unknowns if x.code == "engine_unsupported"]
        assert why and f"first shipped in sglang {first}: sglang 0.5.6" in why[0].detail, (runner, why)
    assert not [x for x in cand(moe_select.explain({**base, "engine_version": "0.5.19"}), "humming").unknowns
                if "first shipped" in x.detail]
    # SGLang 0.5.6 builds Marlin for AWQ itself (the option unread): planned, no option written
    awq = moe_select.explain({"gpu": "H100", "engine": "sglang", "engine_version": "0.5.6", "model_config": AWQ})
    assert awq.plan.runner == "marlin" and "sglang" in awq.plan.runner_option_auto


@pytest.mark.parametrize("flag", ["-O0", "-O 0", "-O=0", "--optimization-level 0", "--optimization-level=0"])
def test_vllm_optimization_level_0_turns_cuda_graphs_off(flag, capsys):
    """(2a) vLLM's optimization level 0 defaults cudagraph_mode to NONE (0.14.1 on: OPTIMIZATION_LEVEL_00; 0.11.0: any
    compilation level but PIECEWISE) where the compilation config sets none; -O3 and an explicit cudagraph_mode keep
    them. The emitted line keeps the flag and adds no switch."""
    from moe_select.launch_line import from_command

    qwen = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
    line = from_command(f"vllm serve {qwen} -tp 4 {flag}")
    assert line.deployment["cuda_graph"] is False and "optimization level 0" in line.provenance["cuda_graph"]
    assert "cuda_graph" not in from_command(f"vllm serve {qwen} -tp 4 -O3").deployment
    assert "cuda_graph" not in from_command(f"vllm serve {qwen} -tp 4 {flag} -cc.cudagraph_mode=FULL").deployment
    assert main(["plan", "--gpu", "H100", "--from-command", f"vllm serve {qwen} -tp 4 {flag}", "--emit", "vllm"]) == 0
    out = capsys.readouterr().out
    assert "--enforce-eager" not in out and flag.split()[0].split("=")[0] in out


def test_vllm_weight_only_int_methods_take_four_runner_names():
    """(3b) vLLM from 0.27.0 builds weight-only int MoE layers through select_wna16_moe_backend, whose map takes
    triton, marlin, humming and flashinfer_trtllm (and emulation) only: the other runners are refused there, on that
    evidence (they were listed eligible, unverified)."""
    r = _vllm("0.29.0", model_config=AWQ)
    for other in ("cutlass", "deep_gemm", "triton_kernel"):
        why = [x for x in cand(r, other).reasons if x.code == "quant_unsupported" and "map_wna16_backend" in x.detail]
        assert why, (other, refusals(r, other))
    assert r.plan.alternatives == ["humming"]


def test_engine_version_flag_is_labelled_as_moe_selects_own():
    """(3d) --engine-version is moe-select's flag, not the launch line's; an image tag's version stays the line's."""
    from moe_select.launch_line import from_command

    qwen = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
    line = from_command(f"python -m sglang.launch_server --model-path {qwen}", engine_version="0.5.19")
    assert line.provenance["engine_version"] == "command line (--engine-version 0.5.19)"
    tagged = from_command(f"docker run --gpus all lmsysorg/sglang:v0.5.19 python3 -m sglang.launch_server --model-path {qwen}")
    assert tagged.provenance["engine_version"].startswith("launch line: the image tag of lmsysorg/sglang:v0.5.19")



def test_review_of_the_day_kinds():
    """A reviewer's check of this session's facts (2026-12-05): AutoAWQ never builds flashinfer_trtllm (it declares an
    expert bias); from vLLM 0.31.0 a shard is padded only under MoE tp > 1 with 128-aligned global widths, so at tp 1 a
    per-rank intermediate that refines below 32 fails, and an unaligned hidden size leaves refined blocks to Triton; the
    batched experts of DeepEP low-latency take no refined block; Blackwell plans AWQ on Marlin."""
    awq_b200 = _vllm("0.29.0", model_config=AWQ, gpu="B200")
    assert awq_b200.plan.runner == "marlin" and "flashinfer_trtllm" not in awq_b200.plan.alternatives
    assert [x for x in cand(awq_b200, "flashinfer_trtllm").reasons if "may_have_bias" in x.detail]
    sg = moe_select.explain({"gpu": "B200", "engine": "sglang", "model_config": AWQ})
    assert sg.plan.runner == "marlin"
    odd = {**QWEN3_30B, "moe_intermediate_size": 1296}                       # gcd(128, 1296) = 16
    r = _vllm("0.31.0", model=odd, quant="fp8_block", tp=1)
    assert r.status == "rejected" and "shape_unaligned" in refusals(r, "triton")
    wide = {**QWEN3_30B, "hidden_size": 2880}                              # hidden not 128-aligned: no padding
    r = _vllm("0.31.0", model=wide, quant="fp8_block", tp=8)
    assert r.plan is not None and r.plan.runner == "triton" and "quant_unsupported" in refusals(r, "deep_gemm")
    refine = {**QWEN3_30B, "moe_intermediate_size": 1376}                   # 43 x 32: refined to 32-wide blocks
    normal = _vllm("0.29.0", model=refine, quant="fp8_block", tp=8, ep=8, a2a="deepep", a2a_mode="normal")
    ll = _vllm("0.29.0", model=refine, quant="fp8_block", tp=8, ep=8, a2a="deepep", a2a_mode="low_latency", phase="decode",
               max_tokens_per_rank=128)
    assert "BatchedTritonExperts" not in " ".join(x.detail for x in cand(normal, "triton").reasons)
    assert [x for x in cand(ll, "triton").reasons if "batched experts" in x.detail], refusals(ll, "triton")


def test_a_replaced_bundled_file_is_counted_once(tmp_path):
    """(3e) an operator's copy of a bundled runner file replaces it: the report lists the files in force, once."""
    import shutil

    from conftest import ROOT

    shutil.copy(ROOT / "backends" / "triton.yaml", tmp_path / "triton.yaml")
    with open(tmp_path / "triton.yaml", "a") as f:
        f.write("# an operator's copy\n")
    dep = {"gpu": "H100", "quant": "bf16", "model": QWEN3_30B}
    bundled = moe_select.explain(dep)
    mine = moe_select.explain(dep, backends_dirs=[tmp_path])
    assert len(mine.capability_files) == len(bundled.capability_files)
    assert "backends/triton.yaml" in bundled.capability_files and "backends/triton.yaml" not in mine.capability_files


@pytest.mark.parametrize("quant, layout, ok", [("int4_w4a16", "fp8", False), ("fp8_block", "awq", False),
                                               ("nvfp4", "mxfp4", False), ("fp8_block", "fp8", True),
                                               ("int4_w4a16", "gptq", True), ("fp8_block", "compressed-tensors", True)])
def test_a_layout_of_another_formats_weights_is_invalid_input(quant, layout, ok):
    """quant_config.layout names a serialization; awq/gptq (integer), mxfp4 and fp8 serialize one family of formats:
    with another quant the deployment describes no checkpoint (an input error naming the field), not a plan."""
    from moe_select.errors import InputError

    dep = {"gpu": "H100", "quant": quant, "model": QWEN3_30B, "quant_config": {"layout": layout}}
    if ok:
        assert moe_select.explain(dep).deployment.quant_params["layout"] == layout
    else:
        with pytest.raises(InputError, match=rf"quant_config.layout.*layout {layout} serializes"):
            moe_select.explain(dep)
