"""Release delta vLLM 0.29.0 -> 0.34.0 and SGLang 0.5.19 -> 0.5.23: the launch surface (flags, variables, choices) and
the all-to-all capacities, each at the new release and at the old one (read in the PyPI wheels of each release).

- SGLang 0.5.20 drops --cuda-graph-max-bs / --cuda-graph-bs (deprecated aliases of --cuda-graph-max-bs-decode /
  --cuda-graph-bs-decode from 0.5.14): the emitter writes the spelling of the declared release, the reader refuses the
  old one from 0.5.20.
- SGLang 0.5.22 adds --attn-dp-size (--enable-dp-attention --dp-size N deprecated, rewritten to it).
- SGLang 0.5.22's FlashInfer all-to-all takes prefill through its workspace and checks it at startup.
- SGLang's --moe-a2a-backend takes flashinfer_megamoe from 0.5.20 and ascend_tp throughout.
- vLLM 0.34.0 takes --all2all-backend mori again (auto); 0.31.0 adds moonep; 0.33.0 pairs --enable-X with --disable-X;
  0.31.0 adds --device-memory-utilization; 0.34.0 refuses VLLM_MARLIN_INPUT_DTYPE; 0.32.0 fixes MoRI's EP > 16 combine.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.errors import InputError
from moe_select.launch_emit import emit
from moe_select.launch_line import from_command

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "model_configs"
QWEN = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
NVFP4 = str(CONFIGS / "nvidia__DeepSeek-V3.1-NVFP4")
DSV3 = str(CONFIGS / "deepseek-ai__DeepSeek-V3")


def _kinds(launch, kind):
    return [f.token for f in launch.findings if f.kind == kind]


def _plan(engine, **dep):
    r = moe_select.explain({"gpu": dep.pop("gpu", "H200"), "model_config": dep.pop("model_config", QWEN), "engine": engine, **dep})
    assert r.plan is not None, r.summary()
    return r.plan


# ------------------------------------------------------------------ SGLang: the decode CUDA-graph capture limit (F1)
DECODE = dict(tp=8, ep=8, a2a="deepep", a2a_mode="low_latency", dp=8, phase="decode", max_tokens_per_rank=128)


@pytest.mark.parametrize("version, flag", [("0.5.13", "--cuda-graph-max-bs"), ("0.5.19", "--cuda-graph-max-bs-decode"),
                                           ("0.5.20", "--cuda-graph-max-bs-decode"), ("0.5.23", "--cuda-graph-max-bs-decode"),
                                           (None, "--cuda-graph-max-bs-decode")])
def test_sglang_emit_writes_the_capture_limit_as_the_release_spells_it(version, flag):
    out = emit(_plan("sglang", **DECODE), "sglang", engine_version=version)
    assert flag in out.argv and out.argv[out.argv.index(flag) + 1] == "128"
    other = {"--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"} - {flag}
    assert not other & set(out.argv)
    # read back at the same release: the same decode batch, no engine error
    back = from_command(out.argv, engine_version=version)
    assert back.deployment["max_tokens_per_rank"] == 128 and not _kinds(back, "engine_error")


@pytest.mark.parametrize("flag", ["--cuda-graph-max-bs 64", "--cuda-graph-bs 16 32 64"])
def test_sglang_old_capture_flags_refused_from_0_5_20(flag):
    line = f"python3 -m sglang.launch_server --model-path {QWEN} --tp 8 --disaggregation-mode decode {flag}"
    old = from_command(line, engine_version="0.5.19")
    assert old.deployment["max_tokens_per_rank"] == 64 and not _kinds(old, "engine_error")
    assert _kinds(old, "deprecated")            # a deprecated alias there (0.5.14 .. 0.5.19)
    new = from_command(line, engine_version="0.5.20")
    # refused as the parser does (an ambiguous prefix of the -decode flag), and its value planned as plan --emit writes
    # it, under the replacement (a fleet trial, break55: the emitted line read back with another decode budget)
    assert _kinds(new, "engine_error") and new.deployment["max_tokens_per_rank"] == 64
    # (--cuda-graph-max-bs is a prefix of the -decode and -prefill limits: ambiguous; the table names one flag the old
    # --cuda-graph-bs is a prefix of, and a unique prefix would be taken as it: said as the table's removal, unrecognized)
    said = " ".join(f.message for f in new.findings if f.kind == "engine_error")
    assert ("ambiguous option" in said) is flag.startswith("--cuda-graph-max-bs"), said
    # and the new spelling is read at 0.5.20, refused before 0.5.14
    line2 = line.replace("--cuda-graph-max-bs ", "--cuda-graph-max-bs-decode ").replace("--cuda-graph-bs ", "--cuda-graph-bs-decode ")
    assert from_command(line2, engine_version="0.5.20").deployment["max_tokens_per_rank"] == 64
    assert _kinds(from_command(line2, engine_version="0.5.13"), "engine_error")


# ------------------------------------------------------------------ SGLang: attention data parallelism (F2)
ATTN = f"python3 -m sglang.launch_server --model-path {QWEN} --tp 8 --attn-dp-size 8 --moe-a2a-backend deepep"


def test_sglang_attn_dp_size_read_from_0_5_22():
    new = from_command(ATTN, engine_version="0.5.22")
    assert new.deployment["dp"] == 8 and not _kinds(new, "engine_error")
    old = from_command(ATTN, engine_version="0.5.21")      # the 0.5.21 parser has no such flag
    assert old.deployment["dp"] == 1 and _kinds(old, "engine_error")   # not read: SGLang's default, no attention DP
    # the alias; the deprecated pair reads the same at 0.5.22, with a deprecation finding
    assert from_command(ATTN.replace("--attn-dp-size", "--attention-data-parallel-size"), engine_version="0.5.23").deployment["dp"] == 8
    pair = from_command(ATTN.replace("--attn-dp-size 8", "--enable-dp-attention --dp-size 8"), engine_version="0.5.22")
    assert pair.deployment["dp"] == 8 and "--enable-dp-attention" in _kinds(pair, "deprecated")
    pair_old = from_command(ATTN.replace("--attn-dp-size 8", "--enable-dp-attention --dp-size 8"), engine_version="0.5.21")
    assert pair_old.deployment["dp"] == 8 and not _kinds(pair_old, "deprecated")


def test_sglang_attn_dp_size_checks_the_engine_makes():
    with pytest.raises(InputError, match="data-parallel replicas combined"):
        from_command(ATTN + " --dp-size 2", engine_version="0.5.22")
    with pytest.raises(InputError, match="tp_size % attn_dp_size"):
        from_command(ATTN.replace("--attn-dp-size 8", "--attn-dp-size 3"), engine_version="0.5.22")


def test_sglang_flashinfer_a2a_launch_with_attn_dp_size_is_planned_at_0_5_22():
    line = (f"python3 -m sglang.launch_server --model-path {NVFP4} --tp 8 --attn-dp-size 8 --moe-a2a-backend flashinfer")
    r = from_command(line, engine_version="0.5.22").explain(deployment={"gpu": "B200"})
    assert not any("dp one_of" in x.detail or ("dp" in x.detail and "tp" in x.detail and x.code == "parallelism_unsupported")
                   for x in r.reasons if "flashinfer.yaml" in (x.source or "")), r.summary()


@pytest.mark.parametrize("version, words", [("0.5.21", ["--enable-dp-attention", "--dp-size", "8"]),
                                            ("0.5.22", ["--attn-dp-size", "8"]), (None, ["--attn-dp-size", "8"])])
def test_sglang_emit_writes_attention_dp_as_the_release_spells_it(version, words):
    out = emit(_plan("sglang", **DECODE), "sglang", engine_version=version)
    i = out.argv.index(words[0])
    assert out.argv[i:i + len(words)] == words
    assert ("--attn-dp-size" in out.argv) != ("--enable-dp-attention" in out.argv)
    assert from_command(out.argv, engine_version=version).deployment["dp"] == 8


# ------------------------------------------------------------------ SGLang: the FlashInfer all-to-all workspace (F3)
def _fi(version, **kw):
    d = {"gpu": "B200", "model_config": NVFP4, "a2a": "flashinfer", "engine": "sglang", "engine_version": version, "tp": 8,
         "ep": 8, "dp": 8, "phase": "both", "max_tokens_per_rank": 64, "decode_tokens_per_rank": 64}
    d.update(kw)
    return moe_select.explain(d)


def _cap(r):
    return [x for x in r.reasons if "a2a_tokens_per_rank" in x.detail and not x.detail.startswith("layers ")]


def test_sglang_flashinfer_prefill_chunk_checked_from_0_5_22():
    # a prefill chunk per rank above a set workspace: SGLang 0.5.22 raises at startup, 0.5.21 sends prefill by all-gather
    new = _fi("0.5.22", max_tokens_per_rank=8192, a2a_capacity=4096)
    assert new.plan is None and any("prefill 8192" in x.detail and "at startup" in x.detail for x in _cap(new)), new.summary()
    old = _fi("0.5.21", max_tokens_per_rank=8192, a2a_capacity=4096)
    assert old.plan is not None and not _cap(old), old.summary()


def test_sglang_flashinfer_unset_workspace_grows_with_the_prefill_chunk():
    # unset, SGLang sizes it max(chunk, 4096): a chunk of 8192 and a decode batch of 6000 fit at both releases
    for version in ("0.5.21", "0.5.22"):
        r = _fi(version, max_tokens_per_rank=8192, decode_tokens_per_rank=6000)
        assert r.plan is not None and not _cap(r), (version, r.summary())
    # with a small chunk, a decode batch above 4096 is still refused
    r = _fi("0.5.22", decode_tokens_per_rank=6000)
    assert r.plan is None and _cap(r)


# ------------------------------------------------------------------ SGLang: flashinfer_megamoe, ascend_tp (F8, F13)
def test_sglang_flashinfer_megamoe_a2a_first_in_0_5_20():
    line = f"python3 -m sglang.launch_server --model-path {NVFP4} --tp 8 --attn-dp-size 8 --moe-a2a-backend flashinfer_megamoe"
    old = from_command(line.replace("--attn-dp-size 8", "--enable-dp-attention --dp-size 8"), engine_version="0.5.19")
    assert any("first shipped in sglang 0.5.20" in f.message for f in old.found("engine_error")), old.findings
    assert from_command(line, engine_version="0.5.23").deployment["a2a"] == "flashinfer_megamoe"
    r = moe_select.explain({"gpu": "B200", "model_config": NVFP4, "engine": "sglang", "engine_version": "0.5.19", "tp": 8,
                            "ep": 8, "dp": 8, "a2a": "flashinfer_megamoe"})
    assert r.plan is None and any("0.5.20" in x.detail for x in r.reasons), r.summary()


def test_sglang_ascend_tp_is_a_choice():
    line = f"python3 -m sglang.launch_server --model-path {QWEN} --tp 8 --moe-a2a-backend ascend_tp"
    assert from_command(line, engine_version="0.5.19").deployment["a2a"] == "ascend_tp"


# ------------------------------------------------------------------ vLLM: mori, moonep (F3, F18)
def _vllm(a2a, version):
    return from_command(f"vllm serve {QWEN} -tp 8 -ep --all2all-backend {a2a}", engine_version=version)


def test_vllm_mori_is_auto_from_0_34_0_and_normal_before_0_23_0():
    assert (_vllm("mori", "0.34.0").deployment["a2a"], _vllm("mori", "0.34.0").deployment["a2a_mode"]) == ("mori", "auto")
    assert _vllm("mori", "0.20.0").deployment["a2a_mode"] == "normal"
    # 0.33.0's All2AllBackend has no plain mori: an engine error (exit 1 with the plan of the deployment the line
    # describes, as for a later release's name: README), not an input error (a review, 2026-12-05)
    mid = _vllm("mori", "0.33.0")
    assert mid.deployment["a2a"] == "mori"
    assert any("takes no such --all2all-backend value" in f.message and "0.34.0" in f.message
               for f in mid.found("engine_error")), mid.findings
    # the deprecated per-mode names still run their own kernels at 0.34.0
    assert _vllm("mori_low_latency", "0.34.0").deployment["a2a_mode"] == "low_latency"


def test_vllm_emit_writes_mori_for_auto_only_from_0_34_0():
    plan = _plan("vllm", gpu="MI300X", model_config=DSV3, tp=8, ep=8, a2a="mori", a2a_mode="normal", engine_version="0.34.0")
    assert "mori_high_throughput" in emit(plan, "vllm", engine_version="0.34.0").argv


def test_vllm_moonep_taken_from_0_31_0():
    assert _vllm("moonep", "0.31.0").deployment["a2a"] == "moonep"
    # the release lacks it: an engine error (explain exits 1 with the plan of the deployment the line describes, README)
    old = _vllm("moonep", "0.30.0")
    assert old.deployment["a2a"] == "moonep"
    assert any("first shipped in vllm 0.31.0" in f.message for f in old.found("engine_error")), old.findings


# ------------------------------------------------------------------ vLLM: --disable-X, aliases, removed variables (F13-F15)
def test_vllm_disable_expert_parallel_from_0_33_0():
    line = f"vllm serve {QWEN} -tp 8 -ep --disable-expert-parallel"
    new = from_command(line, engine_version="0.33.0")
    assert "ep" not in new.deployment and not _kinds(new, "unknown")
    old = from_command(line, engine_version="0.32.0")
    # 0.32.0's parser has no --disable-expert-parallel: 'unrecognized arguments' at startup, an engine error on the
    # table's inverse_enable_disable release (the eleventh trial found it kept as an unknown flag, exit 0)
    assert old.deployment["ep"] == 8 and "--disable-expert-parallel" not in _kinds(old, "unknown")
    err = [f for f in old.found("engine_error") if f.token == "--disable-expert-parallel"]
    assert err and "0.33.0" in err[0].message and "--no-enable-expert-parallel" in err[0].message, old.findings
    assert "EnableDisableAction" in err[0].source
    assert from_command(f"vllm serve {QWEN} -tp 8 --no-enable-expert-parallel", engine_version="0.29.0").deployment.get("ep") is None


def test_vllm_device_memory_utilization_from_0_31_0():
    line = f"vllm serve {QWEN} -tp 8 --device-memory-utilization 0.8"
    assert not _kinds(from_command(line, engine_version="0.31.0"), "engine_error")
    assert _kinds(from_command(line, engine_version="0.30.0"), "engine_error")


def test_vllm_marlin_input_dtype_refused_from_0_34_0():
    line = f"VLLM_MARLIN_INPUT_DTYPE=int8 vllm serve {QWEN} -tp 8"
    assert _kinds(from_command(line, engine_version="0.34.0"), "engine_error")
    old = from_command(line, engine_version="0.33.0")
    assert not _kinds(old, "engine_error") and not _kinds(old, "unknown")


# ------------------------------------------------------------------ vLLM: MoRI EP > 16 fixed in 0.32.0 (F1)
@pytest.mark.parametrize("version, refused", [("0.31.0", True), ("0.32.0", False), ("0.34.0", False)])
def test_vllm_mori_ep_32(version, refused):
    r = moe_select.explain({"gpu": "MI300X", "model_config": DSV3, "engine": "vllm", "engine_version": version, "tp": 32,
                            "ep": 32, "a2a": "mori", "a2a_mode": "normal"})
    hit = [x for x in r.reasons if "mori.yaml" in (x.source or "") and "EP 32" in x.detail]
    assert bool(hit) == refused, r.summary()


# ------------------------------------------------------------------ SGLang: DeepEP V2's prefill budget (F7)
@pytest.mark.parametrize("version, refused", [("0.5.21", True), ("0.5.22", False), ("0.5.23", False)])
def test_sglang_deepep_v2_prefill_scattered_over_tp_from_0_5_22(version, refused):
    # pure TP 8 (no attention DP): a chunk of 512 is 64 tokens per rank from 0.5.22, the whole 512 before
    r = moe_select.explain({"gpu": "H200", "model_config": DSV3, "a2a": "deepep_v2", "engine": "sglang", "engine_version": version,
                            "tp": 8, "ep": 8, "phase": "both", "max_tokens_per_rank": 512, "decode_tokens_per_rank": 64})
    cap = _cap(r)
    assert bool(cap) == refused, r.summary()
    if refused:
        assert "prefill 512" in cap[0].detail


def test_vllm_eplb_switch_spellings_pass_through_as_written():
    # --enable-eplb is a BooleanOptionalAction (bool_optional): each spelling is written back as the line gave it
    for version, flag in (("0.34.0", "--enable-eplb"), ("0.29.0", "--no-enable-eplb"), ("0.33.0", "--disable-eplb")):
        launch = from_command(f"vllm serve {QWEN} -tp 8 -ep --all2all-backend deepep_low_latency {flag}", engine_version=version)
        out = emit(launch.explain(deployment={"gpu": "H200"}).plan, "vllm", engine_version=version, launch=launch)
        assert flag in out.argv and "True" not in out.argv and "False" not in out.argv, out.argv


@pytest.mark.parametrize("a2a, version, refused", [
    ("mori_high_throughput", "0.22.0", True), ("mori_high_throughput", "0.23.0", False),
    ("flashinfer_nvlink_two_sided", "0.17.0", True), ("flashinfer_nvlink_two_sided", "0.18.0", False),
    ("flashinfer_all2allv", "0.17.0", False), ("mori", "0.20.0", False)])
def test_vllm_a2a_name_before_its_vllm_before_bound_is_an_engine_error(a2a, version, refused):
    """A names.yaml row's vLLM name starts where its older spelling (vllm_before) ends: below that release the
    All2AllBackend Literal has only the old name, so the new one is refused at startup (a review, 2026-12-05, found
    mori_high_throughput at 0.22.0 and flashinfer_nvlink_two_sided at 0.17.0 accepted)."""
    launch = _vllm(a2a, version)
    errs = [f for f in launch.found("engine_error") if "takes no such --all2all-backend value" in f.message]
    assert bool(errs) == refused, launch.findings
    assert launch.deployment["a2a"] in ("mori", "flashinfer_two_sided")
