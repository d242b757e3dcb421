"""Operator rules: override by id, add in front, environment variable; `moe-select check` lint."""
from __future__ import annotations


import moe_select
from hypothesis import given
from hypothesis import strategies as st
from moe_select.catalog import load_catalog
from moe_select.cli import main
from moe_select.lint import check

H200_BF16 = {"gpu": "H200", "quant": "bf16", "model": {"num_experts": 128, "top_k": 8, "hidden_size": 2048,
                                                      "moe_intermediate_size": 768}, "tp": 1}
# Planned for this install (engine moe_select): the Hopper rules were measured on this install's adapters
# (torch_grouped_mm and triton), and torch_grouped_mm runs under no serving engine.
H200_BF16_HERE = {**H200_BF16, "engine": "moe_select"}


def write(d, name, text):
    d.mkdir(exist_ok=True)
    (d / name).write_text("schema_version: 1\nrules:\n" + text)
    return d / name


def test_bundled_choice_for_reference():
    """The Hopper bf16 / row-wise FP8 rules as measured (benchmarks/README.md, issue 11 table): triton for a
    128-expert layer at every token count (deep_gemm's bf16 GEMMs no faster in the same run of 2026-12-04), triton for the
    8-expert layer's bf16 too (one H100 run of 2026-12-06: 1.03-1.06x torch_grouped_mm), torch_grouped_mm for its
    fp8_tensor unless the forwards stay within 256 tokens per rank; fp8_channel on triton, deep_gemm above 2048 tokens
    on up to 8 experts (results/deep_gemm_h200_2026-12-04/layer_same_run.json, results/h100_dg_2026-12-06/layer_dg.json:
    on 128 experts triton is now the faster)."""
    assert moe_select.plan({**H200_BF16_HERE, "max_tokens_per_rank": 2048}).runner == "triton"
    # bf16 at 8192 tokens on 128 experts: triton (1346 vs 1364 us of deep_gemm on Qwen3-30B-A3B, same run)
    big = moe_select.plan(H200_BF16_HERE)
    assert big.runner == "triton" and big.chosen_by.rule == "hopper-16bit-and-fp8-rowwise" and big.ranges == []
    mixtral = {**H200_BF16_HERE, "model": {"num_experts": 8, "top_k": 2, "hidden_size": 4096, "moe_intermediate_size": 14336}}
    p = moe_select.plan(mixtral)
    assert p.runner == "triton" and p.chosen_by.rule == "hopper-16bit-and-fp8-rowwise"
    assert moe_select.plan({**mixtral, "max_tokens_per_rank": 256}).runner == "triton"
    # fp8_channel with triton's PREQUANT tiles (benchmarks/README.md): triton up to 2048 tokens (1496 vs 2027 us of
    # torch_grouped_mm at 2048), deep_gemm above (2586 vs 2877 us at 4096, 5366 vs 5723 at 8192, same run)
    assert moe_select.plan({**mixtral, "quant": "fp8_channel", "max_tokens_per_rank": 1024}).runner == "triton"
    assert moe_select.plan({**mixtral, "quant": "fp8_channel", "max_tokens_per_rank": 2048}).runner == "triton"
    fp8 = moe_select.plan({**mixtral, "quant": "fp8_channel", "max_tokens_per_rank": 8192})
    assert fp8.runner == "deep_gemm" and [(r.max_tokens, r.runner) for r in fp8.ranges] == [(2048, "triton"), (None, "deep_gemm")]
    assert fp8.chosen_by.rule == "hopper-fp8-channel-largest-batches"
    # 128 experts: triton at every token count in fp8_channel (H100, 2026-12-06)
    q = moe_select.plan({**H200_BF16_HERE, "quant": "fp8_channel", "max_tokens_per_rank": 8192})
    assert q.runner == "triton" and q.ranges == [], q.chosen_by
    # fp8_tensor keeps the 8-expert rule (its PREQUANT tiles not timed there)
    tensor = {**mixtral, "quant": "fp8_tensor"}
    assert moe_select.plan({**tensor, "max_tokens_per_rank": 2048}).runner == "torch_grouped_mm"
    # the measured condition is the model's expert count: Mixtral over ep 2 stays on torch_grouped_mm, while a
    # 128-expert layer split to 8 experts per rank (small per-expert GEMMs, not measured) stays on triton
    assert moe_select.plan({**tensor, "tp": 2, "ep": 2}).runner == "torch_grouped_mm"
    assert moe_select.plan({**H200_BF16_HERE, "tp": 16, "ep": 16}).runner == "triton"


def test_fp8_block_on_256_experts_keeps_4096_token_forwards_on_triton():
    """results/h100_dg_2026-12-06/layer_block.json: on DeepSeek-V3's 256 experts triton was 1.20x faster than deep_gemm at
    4096 tokens and deep_gemm 1.09x faster at 8192; on 128 experts deep_gemm led from 4096."""
    dsv3 = {**H200_BF16_HERE, "quant": "fp8_block", "model": {"num_experts": 256, "top_k": 8, "hidden_size": 7168,
                                                               "moe_intermediate_size": 2048}}
    big = moe_select.plan({**dsv3, "max_tokens_per_rank": 8192})
    assert big.runner == "deep_gemm" and [(r.max_tokens, r.runner) for r in big.ranges] == [(4096, "triton"), (None, "deep_gemm")]
    mid = moe_select.plan({**dsv3, "max_tokens_per_rank": 4096})
    assert mid.runner == "triton" and mid.chosen_by.rule == "hopper-fp8-block-many-experts"
    q128 = moe_select.plan({**H200_BF16_HERE, "quant": "fp8_block", "max_tokens_per_rank": 8192})
    assert [(r.max_tokens, r.runner) for r in q128.ranges] == [(2048, "triton"), (None, "deep_gemm")]


def test_operator_rule_overrides_bundled_one_by_id_in_place(tmp_path):
    f = write(tmp_path, "ops.yaml", "  - id: hopper-16bit-and-fp8-rowwise\n    when: {arch: [sm90], quant: [bf16]}\n"
                                    "    prefer: [flashinfer_cutlass, triton]\n")
    cat = load_catalog([tmp_path], use_env=False)
    ids = [r.id for r in cat.rules]
    assert ids.count("hopper-16bit-and-fp8-rowwise") == 1
    assert cat.overridden["hopper-16bit-and-fp8-rowwise"].startswith("rules/10-nvidia.yaml:")
    p = moe_select.plan(H200_BF16, rules_dirs=[tmp_path])
    assert p.runner == "flashinfer_cutlass" and p.chosen_by.source == f"{f}:3"
    assert str(f) in p.files


def test_new_operator_rule_goes_first(tmp_path):
    write(tmp_path, "ops.yaml", "  - id: always-triton\n    prefer: [triton]\n")
    cat = load_catalog([tmp_path], use_env=False)
    assert cat.rules[0].id == "always-triton"
    assert moe_select.plan(H200_BF16, rules_dirs=[tmp_path]).runner == "triton"


def test_rules_from_environment_variable(tmp_path, monkeypatch):
    write(tmp_path, "ops.yaml", "  - id: always-triton\n    prefer: [triton]\n")
    monkeypatch.setenv("MOE_SELECT_RULES", str(tmp_path))
    cat = load_catalog()
    assert cat.rules[0].id == "always-triton" and str(tmp_path / "ops.yaml") in cat.rule_files


def test_fingerprint_changes_with_rules(tmp_path):
    a = moe_select.plan(H200_BF16).fingerprint
    write(tmp_path, "ops.yaml", "  - id: unrelated\n    when: {arch: [gfx950]}\n    prefer: [aiter]\n")
    b = moe_select.plan(H200_BF16, rules_dirs=[tmp_path]).fingerprint
    assert a != b and a == moe_select.plan(H200_BF16).fingerprint


def test_explicit_runner_is_honoured_or_refused_never_replaced():
    p = moe_select.plan({**H200_BF16, "runner": "triton"})
    assert p.runner == "triton" and p.chosen_by.how == "explicit"
    # Issue 18: a runner refused on evidence (FlashInfer's TRT-LLM-gen cubins exist for sm100/sm103 only, an
    # exhaustive arch list); marlin with bf16 is refused by vLLM's check but only unverified for SGLang now.
    report = moe_select.explain({**H200_BF16, "runner": "flashinfer_trtllm"})
    assert report.status == "rejected" and report.plan is None
    assert {r.backend for r in report.reasons} == {"flashinfer_trtllm"}
    assert any(c.eligible for c in report.candidates)  # alternatives exist, but are not taken


def test_auto_refusal_lists_every_candidate():
    report = moe_select.explain({**H200_BF16, "quant": "fp8_block", "tp": 8, "engine": "sglang"})   # vLLM >= 0.29 runs it
    assert report.status == "rejected"
    assert {c.backend for c in report.candidates} == set(load_catalog(use_env=False).runners)
    assert all(c.reasons for c in report.candidates)


def test_bundled_rules_lint_clean():
    """No error or warning in the bundled tree; its only findings are notes of arch x format x engine cells no
    rule covers where every eligible runner is only unverified (lint.uncovered_findings, README "Command line")."""
    findings, _ = check()
    assert [f for f in findings if not f.message.startswith("no rule covers ")] == []
    assert all(f.severity == "note" for f in findings), findings


def test_check_finds_dead_and_misdirected_rules(tmp_path):
    f = write(tmp_path, "ops.yaml",
              "  - id: empty-range\n    when: {tp: {min: 8, max: 4}}\n    prefer: [triton]\n"
              "  - id: a2a-without-ep\n    when: {a2a: [deepep], ep: [1]}\n    prefer: [deep_gemm]\n"
              "  - id: wrong-arch\n    when: {arch: [sm80]}\n    prefer: [flashinfer_trtllm, triton]\n"
              "  - id: broad\n    when: {arch: [sm90]}\n    prefer: [triton, deep_gemm]\n"
              "  - id: shadowed\n    when: {arch: [sm90], quant: [fp8_block]}\n    prefer: [deep_gemm]\n")
    findings, _ = check([f])
    text = "\n".join(map(str, findings))
    assert f"{f}:3: rule empty-range never fires: when.tp: min 8 > max 4" in text
    assert "rule a2a-without-ep never fires" in text
    assert f"{f}:11: rule wrong-arch prefers flashinfer_trtllm, which the capability files exclude" in text
    assert "rule shadowed never fires: rule broad" in text
    assert main(["check", str(f)]) == 1


def test_check_invalid_file_exit_2(tmp_path, capsys):
    f = write(tmp_path, "bad.yaml", "  - id: x\n    prefr: [triton]\n")
    assert main(["check", str(f)]) == 2
    assert "unknown key 'prefr' (did you mean 'prefer'?)" in capsys.readouterr().err


def test_check_validates_capability_files(tmp_path, capsys):
    f = tmp_path / "runner.yaml"
    f.write_text("schema_version: 1\nrunner: mine\nsummary: x\nsource: y\nsupport: []\n")
    assert main(["check", str(f)]) == 2
    err = capsys.readouterr().err
    assert "support" in err and "activations" in err


def test_check_a_capability_directory_and_json_rules(tmp_path):
    from moe_select.catalog import bundled_dirs

    assert main(["check", str(bundled_dirs()[0])]) == 0
    (tmp_path / "a.json").write_text('{"schema_version": 1, "rules": [{"id": "j", "prefer": ["triton"]}]}')
    _, cat = check([tmp_path])
    assert str(tmp_path / "a.json") in cat.rule_files and cat.rules[0].id == "j"


def test_check_empty_dir_and_bad_capability_constraints(tmp_path, capsys):
    from moe_select.catalog import bundled_dirs

    (tmp_path / "empty").mkdir()
    assert main(["check", str(tmp_path / "empty")]) == 2
    assert "no *.yaml, *.yml, *.json files" in capsys.readouterr().err
    text = (bundled_dirs()[0] / "flashinfer_cutlass.yaml").read_text()
    for bad, msg in (("multiple_of: 8, when: {quant: [bf16, fp16]}", "multiple_of: 0, when: {quant: [bf16, fp16]}"),):
        f = tmp_path / "flashinfer_cutlass.yaml"
        f.write_text(text.replace(bad, msg, 1))
        assert main(["check", str(f)]) == 2
        assert "multiple_of must be a positive integer" in capsys.readouterr().err
    f.write_text(text.replace("multiple_of: 8, when: {quant: [bf16, fp16]}", "multiple_of: 8, when: {tp: {min: 5, max: 2}}", 1))
    assert main(["check", str(f)]) == 2
    assert "when can never match" in capsys.readouterr().err


@given(lo=st.integers(1, 64), width=st.integers(0, 64), step=st.sampled_from([None, 1, 2, 4, 8]),
       value=st.integers(1, 160), key=st.sampled_from(["tp", "ep", "hidden_size", "num_experts"]))
def test_when_ranges_are_inclusive_at_both_ends(lo, width, step, value, key):
    """A ``when`` range ``{min, max, multiple_of}`` holds exactly for min <= value <= max that are multiples
    (a planted ``max`` made exclusive was caught only by a fact that happened to sit on the boundary)."""
    from moe_select.conditions import When

    hi = lo + width
    cond = {"min": lo, "max": hi} | ({"multiple_of": step} if step else {})
    expect = lo <= value <= hi and (step is None or value % step == 0)
    assert When.model_validate({key: cond}).matches({key: value}) == expect
    assert When.model_validate({key: {"max": hi}}).matches({key: hi}) and not When.model_validate({key: {"max": hi}}).matches({key: hi + 1})
    assert When.model_validate({key: {"min": lo}}).matches({key: lo}) and not When.model_validate({key: {"min": lo + 1}}).matches({key: lo})
