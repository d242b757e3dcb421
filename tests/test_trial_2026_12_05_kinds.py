"""The ninth new user's trial (2026-12-05), fixed as kinds.

- (1a) vLLM's kernel oracles were replayed at any release: today's FP8 list (FlashInfer CUTLASS first on sm90 with EP)
  was applied to vLLM 0.11.0, which has no oracle. Each oracle of backends/engines/resolution.yaml now says the releases
  whose code matches its list (``requires``, read in the 0.15.1, 0.18.0, 0.24.0 wheels): elsewhere, not predicted.
- (1b) a release without the engine's runner option (vLLM before 0.17.0: no --moe-backend) cannot be told to run the
  plan's runner: the engine-choice line says so.
- (1d) a Qwen3-MoE / DeepSeek config without moe_intermediate_size took intermediate_size (the dense MLP's) as the
  experts' width: an input error naming the key.
- (1e) an operator runner whose own file says SGLang ships it, under SGLang's closed runner option that takes no such
  name, was supported: now unverified (tests/test_trial_2026_12_04d_kinds.py).
- (1f) a scale group that divides neither the hidden nor the intermediate size (AWQ group 100 on hidden 2048) was
  planned: an input error.
- (3b) a quantized format's parameter (group_size, block, layout, weight_only) on a 16-bit format was kept silently.
- (3c) ``--model a=1,,b=2`` skipped the empty item; ``b=`` took an empty value.
- (3d) a shell variable read with ``--shell-env`` was labelled as the ``--env`` file's.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import moe_select
from moe_select.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "model_configs"


def _vllm_choice(r):
    return next(c for c in r.engine_choices if c.engine == "vllm")


@pytest.mark.parametrize("version, predicted", [("0.11.0", False), ("0.15.1", False), ("0.18.0", True), ("0.24.0", True)])
def test_the_fp8_oracle_is_replayed_only_at_the_releases_it_was_read_in(version, predicted):
    r = moe_select.explain({"gpu": "H200", "engine": "vllm", "engine_version": version,
                            "model_config": str(CONFIGS / "deepseek-ai__DeepSeek-R1"), "tp": 8, "ep": 8})
    c = _vllm_choice(r)
    assert (c.runner is not None) == predicted, c.render()
    if not predicted:
        assert "the Fp8 oracle's priority list was read at vllm >=0.18.0" in c.how and f"vllm is {version}" in c.how
        assert not c.differs


def test_the_nvfp4_oracle_holds_from_0_15_1():
    for version, predicted in (("0.14.1", False), ("0.15.1", True)):
        r = moe_select.explain({"gpu": "B200", "engine": "vllm", "engine_version": version,
                                "model_config": str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4"), "tp": 1})
        assert (_vllm_choice(r).runner is not None) == predicted, (version, _vllm_choice(r).render())


@pytest.mark.parametrize("version, untold", [("0.11.0", True), ("0.17.0", False)])
def test_a_release_without_the_runner_option_is_said(version, untold):
    r = moe_select.explain({"gpu": "A100", "engine": "vllm", "engine_version": version,
                            "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B-AWQ"), "tp": 2})
    c = _vllm_choice(r)
    said = f"it cannot be told to run the plan's {r.plan.runner}"
    assert (said in c.how) == untold, c.how
    if untold:
        assert "--moe-backend came in" in c.how and c.follow is None


def _config(tmp_path: Path, name: str, **edit) -> Path:
    c = json.loads((CONFIGS / name / "config.json").read_text())
    for k, v in edit.items():
        if v is None:
            c.pop(k, None)
        elif k == "quantization_config":
            c[k] = {**c[k], **v}
        else:
            c[k] = v
    d = tmp_path / f"c{len(list(tmp_path.iterdir()))}"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(c, indent=1))
    return d


def test_a_missing_moe_intermediate_size_is_not_taken_from_the_dense_width(tmp_path):
    for name in ("Qwen__Qwen3-30B-A3B", "deepseek-ai__DeepSeek-V3"):
        with pytest.raises(InputError, match=r"moe_intermediate_size: no moe_intermediate_size: a (qwen3_moe|deepseek_v3) "
                                             r"config gives the experts' width there"):
            moe_select.explain({"gpu": "H100", "model_config": str(_config(tmp_path, name, moe_intermediate_size=None))})
    # Mixtral's experts are intermediate_size wide: read as before
    r = moe_select.explain({"gpu": "H100", "model_config": str(CONFIGS / "mistralai__Mixtral-8x7B-v0.1"), "tp": 2})
    assert r.deployment.model.moe_intermediate_size == 14336


def test_a_scale_group_that_divides_no_width_is_no_checkpoint(tmp_path):
    path = _config(tmp_path, "Qwen__Qwen3-30B-A3B-AWQ", quantization_config={"group_size": 100})
    with pytest.raises(InputError, match=r"group_size 100 .* does not divide hidden_size 2048 or moe_intermediate_size "
                                         r"768: .* no such checkpoint exists"):
        moe_select.explain({"gpu": "A100", "model_config": str(path), "tp": 1})
    dep = {"gpu": "A100", "quant": "int4_w4a16", "quant_config": {"layout": "awq", "group_size": 64},
           "model": {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768}}
    assert moe_select.explain(dep).deployment.quant_params["group_size"] == 64
    with pytest.raises(InputError, match=r"quant_config.group_size: group_size 96 .* does not divide hidden_size 2048"):
        moe_select.explain({**dep, "quant_config": {"layout": "awq", "group_size": 96}})


@pytest.mark.parametrize("key, value", [("group_size", 128), ("block", [128, 128]), ("layout", "awq"), ("weight_only", True)])
def test_a_quantized_formats_parameter_on_a_16_bit_format_is_refused(key, value):
    with pytest.raises(InputError, match=rf"quant_config.{key}: {key} is a parameter of quantized formats .* bf16 has none"):
        moe_select.explain({"gpu": "H100", "quant": "bf16", "quant_config": {key: value},
                            "model": {"num_experts": 8, "top_k": 2, "hidden_size": 1024, "moe_intermediate_size": 512}})


def test_model_flag_items(capsys):
    from moe_select.cli import main

    shape = "num_experts=128,top_k=8,hidden_size=2048,moe_intermediate_size=768"
    assert main(["explain", "--gpu", "H100", "--model", shape.replace(",top_k", ",,top_k")]) == 2
    assert "an empty item" in capsys.readouterr().err
    assert main(["explain", "--gpu", "H100", "--model", shape.replace("top_k=8", "top_k=")]) == 2
    assert "'top_k=' has an empty value" in capsys.readouterr().err
    assert main(["explain", "--gpu", "H100", "--quant", "bf16", "--model", shape + ","]) in (0, 1)  # a trailing comma: harmless


def test_a_shell_variable_is_labelled_as_the_shells(monkeypatch, capsys):
    from moe_select.cli import main

    monkeypatch.setenv("SGLANG_USE_AITER", "1")
    line = f"python -m sglang.launch_server --model-path {CONFIGS / 'Qwen__Qwen3-30B-A3B-FP8'} --tp 8"
    main(["explain", "--from-command", line, "--gpu", "MI300X", "--shell-env"])
    out = capsys.readouterr().out
    assert "SGLANG_USE_AITER=1 (set by the shell)" in out and "--env file" not in out


def test_a_vllm_image_with_the_model_right_after_it_is_read_as_vllm_serve():
    """(3a) ``docker run ... vllm/vllm-openai:TAG MODEL --flags``: the image's entrypoint is vllm serve, whose model is
    positional; was refused as an unknown launcher."""
    from moe_select.launch_line import from_command

    model = str(CONFIGS / "deepseek-ai__DeepSeek-R1")
    launch = from_command(f"docker run --gpus all -e VLLM_USE_DEEP_GEMM=0 vllm/vllm-openai:v0.11.0 {model} "
                          "--tensor-parallel-size 8 --enable-expert-parallel")
    assert launch.engine == "vllm" and launch.deployment["tp"] == 8 and launch.deployment["model_config"] == model
    assert any("entrypoint is vLLM's server" in f.message for f in launch.findings)
    # an explicit command after the image is still the command
    explicit = from_command(f"docker run --gpus all vllm/vllm-openai:v0.11.0 vllm serve {model} --tensor-parallel-size 8")
    assert explicit.engine == "vllm" and explicit.deployment["tp"] == 8


def test_another_engines_flag_names_this_engines_spelling():
    """(5b) ``--tp-size`` (SGLang's) under vLLM: the did-you-mean named --block-size or --dtype."""
    from moe_select.launch_line import from_command

    launch = from_command(f"vllm serve {CONFIGS / 'Qwen__Qwen3-30B-A3B'} --tp-size 2")
    [f] = [f for f in launch.findings if f.token == "--tp-size"]
    assert "sglang's flag for tp; vllm writes --tensor-parallel-size or -tp" in f.message


def test_a_tie_broken_toward_the_slower_median_is_said_in_words():
    """(4d) explain printed 'runner-up torch_grouped_mm -63.1 %' for a tie the rules' order broke toward the slower
    median; tune's summary now says a plan breaks ties by the rules' order."""
    from moe_select.measured import MeasuredReport, TokenVerdict

    def line(gap: float) -> str:
        m = MeasuredReport(applied=True, why="x", verdicts=[TokenVerdict(tokens=1, winner="torch_native", times=[],
                                                                         tied=["torch_native", "torch_grouped_mm"],
                                                                         tie_break="rule order", runner_up="torch_grouped_mm",
                                                                         gap_pct=gap)])
        return next(x for x in m.render() if "tokens ->" in x)

    assert "runner-up torch_grouped_mm, 63.1 % faster by median but within the intervals" in line(-63.1)
    assert "runner-up torch_grouped_mm +12.0 %" in line(12.0)
    assert "-63.1" not in line(-63.1)


def test_vllm_refuses_a_tp_that_does_not_divide_the_attention_heads_and_the_fixes_avoid_it():
    """(1c) The tp fixes named 3 and 6 for Qwen3-30B-A3B (32 attention heads), which vLLM refuses at startup
    (ModelConfig.verify_with_parallel_config). The checkpoint's num_attention_heads is read; under vLLM a tp that does
    not divide it is refused (backends/common.yaml), and the tp fixes leave such sizes out."""
    awq = str(CONFIGS / "Qwen__Qwen3-30B-A3B-AWQ")
    r = moe_select.explain({"gpu": "A100", "engine": "vllm", "model_config": awq, "tp": 4})
    assert r.deployment.model.num_attention_heads == 32
    fixes = [x.fix for c in r.candidates if c.backend == "marlin" for x in c.reasons if x.fix and "tp in" in x.fix]
    assert fixes and all("3" not in f.split("tp in", 1)[1] for f in fixes), fixes
    bad = moe_select.explain({"gpu": "H100", "engine": "vllm", "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B"), "tp": 3})
    assert bad.plan is None
    assert any(x.code == "parallelism_unsupported" and "num_attention_heads = 32 is not a multiple of attn_tp (3)" in x.detail
               and "common.yaml" in x.source for x in bad.reasons), bad.summary()
    # SGLang: the heads split over tp / dp (its dp is attention DP): tp 3 refused, tp 8 with dp 8 (one rank) not
    sg = {"gpu": "H100", "engine": "sglang", "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B")}
    assert any("num_attention_heads = 32 is not a multiple of attn_tp (3)" in x.detail
               for x in moe_select.explain({**sg, "tp": 3}).reasons)
    assert not any("num_attention_heads" in x.detail for x in moe_select.explain({**sg, "tp": 8, "ep": 8, "dp": 8}).reasons)
    # an inline model without the heads: not checked
    inline = moe_select.explain({"gpu": "H100", "engine": "vllm", "quant": "bf16", "tp": 3, "model": {
        "num_experts": 8, "top_k": 2, "hidden_size": 3072, "moe_intermediate_size": 3072}})
    assert not any("num_attention_heads" in x.detail for x in inline.reasons)


@pytest.mark.parametrize("wrapper, engine", [
    ("mpirun -n 16 --allow-run-as-root --oversubscribe trtllm-llmapi-launch", "trtllm"),
    ("srun --nodes 2 --ntasks-per-node 8", "sglang"),
    ("mpiexec -np 8", "vllm")])
def test_multi_node_launchers_are_stripped(wrapper, engine):
    """(5c) ``mpirun ... trtllm-serve`` (multi-node TensorRT-LLM) and ``srun`` were refused outright: their options are
    now skipped (a note says so) and the engine's command after them is read."""
    from moe_select.launch_line import from_command

    model = CONFIGS / "Qwen__Qwen3-30B-A3B"
    cmd = {"trtllm": f"trtllm-serve {model} --tp_size 8", "sglang": f"python3 -m sglang.launch_server --model-path {model} --tp 8",
           "vllm": f"vllm serve {model} -tp 8"}[engine]
    launch = from_command(f"{wrapper} {cmd}")
    assert launch.engine == engine and launch.deployment["tp"] == 8
    assert any("own options are not read" in f.message for f in launch.findings)
    with pytest.raises(InputError, match="no engine command follows it"):
        from_command("mpirun -n 8 ./my_script.sh")


def test_a_rocm_target_with_feature_flags_is_its_base_arch():
    """(5d) ``--arch gfx942:sramecc+:xnack-`` (what rocminfo and torch's gcnArchName report) was refused, while nvcc's
    sm_90a was read."""
    from moe_select.vocab_names import normalize_arch

    assert normalize_arch("gfx942:sramecc+:xnack-") == "gfx942" and normalize_arch("gfx90a:xnack+") == "gfx90a"
    with pytest.raises(ValueError, match="is not an architecture name"):
        normalize_arch("gfx942:sramecc")      # a feature without its + / - is no target feature
    r = moe_select.explain({"arch": "gfx942:sramecc+:xnack-", "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B")})
    assert r.deployment.arch == "gfx942"
