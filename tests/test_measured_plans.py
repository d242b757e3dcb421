"""Plans from measurements (issue 25, parts 2 and 3): which tables apply, the measured choice per token count with
the tie rule, token-range plans, ``prefer: measured``, and ``resolve`` building one core per range.

The tables are the hand-written files of ``tests/fixtures/measurements/`` (the spec of
:mod:`moe_select.measurements`): ``cpu_small.json`` times a small layer (8 experts, top-2, H 64, I 32, bf16) on the
CPU at 1, 16, 256 and 4096 tokens: torch_grouped_mm fastest at 1 and 16, torch_native at 256, the two tied at 4096
(intervals overlap), and triton fastest everywhere, which the facts refuse on a CPU. ``cpu_small_wider.json`` is the
same table for I 64; ``h200_small.json`` the same points for an H200 (sm90, CUDA graphs, flashinfer-python 0.6.8).
"""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

import moe_select
from moe_select.errors import InputError, ResolveError
from moe_select.measured import RangeRow, TokenVerdict, boundary, token_ranges, verdicts
from moe_select.measurements import Measurements, load_measurements

FIX = Path(__file__).parent / "fixtures" / "measurements"
CPU = FIX / "cpu_small.json"
SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu",
         "routing": "renormalize"}
DEP = {"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True}
H200 = {"gpu": "H200", "quant": "bf16", "model": SMALL, "engine": "moe_select", "cuda_graph": True}


def table(path: Path = CPU) -> Measurements:
    (m,) = load_measurements(path)
    return m


@pytest.fixture
def same_machine(monkeypatch):
    """This machine as the CPU table's (resolve compares the whole MachineKey; torch's version here varies)."""
    import moe_select.resolver as R

    monkeypatch.setattr(R, "machine_here", lambda plan, env, device=None: plan.measurements.machine)


# ------------------------------------------------------------------------------------------- which tables apply
def test_a_foreign_table_is_named_with_the_fields_that_differ():
    report = moe_select.explain(DEP, measurements=[FIX])
    m = report.measured
    assert m.applied and m.source == str(CPU)
    notes = "\n".join(m.notes)
    assert f"measurements {FIX / 'cpu_small_wider.json'}: layer differs in intermediate_size (32 here, 64 there)" in notes
    assert (f"measurements {FIX / 'h200_small.json'}: machine differs in arch (cpu here, sm90 there), gpu (cpu here, NVIDIA "
            "H200 there), cuda_graph (false here, true there)") in notes
    text = report.render_text()
    assert "layer differs in intermediate_size (32 here, 64 there)" in text and "Measured choice" in text


def test_only_foreign_tables_leave_the_rules_choice():
    report = moe_select.explain(DEP, measurements=[FIX / "cpu_small_wider.json"])
    assert report.plan.chosen_by.how == "rule" and report.plan.ranges == [] and report.plan.measurements is None
    assert not report.measured.applied and "no measurement table applies" in report.measured.why
    assert report.plan == moe_select.plan(DEP)  # the same plan as without the table, fingerprint included


def test_the_machine_key_at_explain_gpu_and_declared_packages():
    h200 = FIX / "h200_small.json"
    applied = moe_select.explain(H200, measurements=[h200])
    assert applied.measured.applied and applied.plan.ranges
    # flashinfer-python is not declared: taken as measured, and the plan says so
    assert any("flashinfer-python not declared: taken as measured (0.6.8)" in a for a in applied.plan.assumptions)
    other_gpu = moe_select.explain({**H200, "gpu": "H100"}, measurements=[h200])
    assert other_gpu.plan.ranges == [] and any("machine differs in gpu (H100 here, NVIDIA H200 there)" in n
                                               for n in other_gpu.measured.notes)
    other_pkg = moe_select.explain({**H200, "packages": {"flashinfer-python": "0.6.4"}}, measurements=[h200])
    assert any("packages.flashinfer-python (0.6.4 here, 0.6.8 there)" in n for n in other_pkg.measured.notes)
    eager = moe_select.explain({**H200, "cuda_graph": False}, measurements=[h200])
    assert any("cuda_graph (false here, true there)" in n for n in eager.measured.notes)


def test_a_serving_engine_plan_does_not_take_this_installs_times():
    report = moe_select.explain({"gpu": "H200", "quant": "bf16", "model": SMALL, "engine": "sglang"},
                                measurements=[FIX / "h200_small.json"])
    assert report.plan.chosen_by.how == "rule" and not report.plan.ranges
    assert "engine moe_select" in report.measured.notes[0] and "engine sglang" in report.measured.notes[0]


def test_an_invalid_table_is_an_input_error_naming_file_and_field(tmp_path):
    bad = json.loads(CPU.read_text())
    bad["points"][0]["median_us"] = "fast"
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(bad, indent=1))
    with pytest.raises(InputError) as exc:
        moe_select.explain(DEP, measurements=[f])
    assert str(f) in str(exc.value) and "median_us" in str(exc.value)


# -------------------------------------------------------------------------------------------- the choice
def test_token_ranges_sit_at_the_geometric_midpoint():
    p = moe_select.plan(DEP, measurements=[CPU])
    assert [(r.max_tokens, r.runner) for r in p.ranges] == [(boundary(16, 256), "torch_grouped_mm"), (None, "torch_native")]
    assert boundary(16, 256) == 64 and boundary(1, 2) == 1 and boundary(256, 2048) == 724
    # plan.runner is the runner of the range holding max_tokens_per_rank (8192 by default): older readers run it there
    assert p.runner == "torch_native" and p.chosen_by.how == "measured" and p.chosen_by.rule is None
    assert p.measurements == table() and p.measurements_fingerprint == table().fingerprint()
    assert {r.runner: r.module for r in p.range_runners} == {"torch_grouped_mm": "moe_select.backends.torch_grouped_mm",
                                                      "torch_native": "moe_select.backends.torch_native"}
    assert "torch_grouped_mm" not in p.alternatives
    assert any("above 4096 tokens (the largest count measured) up to max_tokens_per_rank 8192" in n for n in p.notes)


def test_ranges_stop_at_the_deployments_largest_forward():
    small = moe_select.plan({**DEP, "max_tokens_per_rank": 32}, measurements=[CPU])
    assert [(r.max_tokens, r.runner) for r in small.ranges] == [(None, "torch_grouped_mm")]  # 64 >= 32: never reached
    assert small.runner == "torch_grouped_mm"
    mid = moe_select.plan({**DEP, "max_tokens_per_rank": 200}, measurements=[CPU])
    assert [(r.max_tokens, r.runner) for r in mid.ranges] == [(64, "torch_grouped_mm"), (None, "torch_native")]


def _v(tokens: int, winner: str) -> TokenVerdict:
    return TokenVerdict(tokens=tokens, winner=winner, times=[])


def test_token_ranges_merge_runs_and_place_every_boundary():
    vs = [_v(1, "a"), _v(2, "a"), _v(8, "b"), _v(32, "b"), _v(128, "a"), _v(512, "c")]
    rows, notes = token_ranges(vs, 8192)
    assert rows == [RangeRow(max_tokens=4, runner="a"), RangeRow(max_tokens=64, runner="b"),
                    RangeRow(max_tokens=256, runner="a"), RangeRow(max_tokens=None, runner="c")]
    assert notes and "above 512" in notes[0]
    rows, _ = token_ranges(vs, 100)  # 128 is the first count at or above 100; 256 is beyond every forward
    assert rows == [RangeRow(max_tokens=4, runner="a"), RangeRow(max_tokens=64, runner="b"), RangeRow(max_tokens=None, runner="a")]


def test_a_tie_goes_to_the_rules_order_and_is_reported():
    p = moe_select.plan(DEP, measurements=[CPU])
    tie = [n for n in p.notes if n.startswith("tie at 4096 tokens")]
    assert tie == ["tie at 4096 tokens: torch_native 3050 us [2950, 3150] and torch_grouped_mm 3000 us [2900, 3100] overlap; "
                   "torch_native by the rules' order"]
    report = moe_select.explain(DEP, measurements=[CPU])
    v4096 = next(v for v in report.measured.verdicts if v.tokens == 4096)
    # torch_grouped_mm's median is smaller, but the bundled cpu rule names torch_native: the tie is its
    assert v4096.winner == "torch_native" and v4096.tied == ["torch_native", "torch_grouped_mm"]
    assert v4096.runner_up == "torch_grouped_mm" and v4096.gap_pct == pytest.approx((3000 / 3050 - 1) * 100, abs=0.01)


def test_a_rule_order_that_names_the_other_runner_first_moves_the_tie(tmp_path):
    (tmp_path / "r.yaml").write_text("schema_version: 1\nrules:\n  - id: cpu\n    when: {arch: [cpu]}\n"
                                     "    prefer: [torch_grouped_mm, torch_native]\n")
    p = moe_select.plan(DEP, measurements=[CPU], rules_dirs=[tmp_path])
    assert [(r.max_tokens, r.runner) for r in p.ranges] == [(64, "torch_grouped_mm"), (1024, "torch_native"),
                                                            (None, "torch_grouped_mm")]
    assert any(n.endswith("torch_grouped_mm by the rules' order") for n in p.notes)


def test_a_tie_no_rule_decides_goes_by_name():
    m = table()
    vs = verdicts(m, ["torch_native", "torch_grouped_mm"], rule_order=[])
    v = next(v for v in vs if v.tokens == 4096)
    assert v.winner == "torch_grouped_mm" and v.tie_break.startswith("name")


def test_the_explain_text_shows_the_numbers_and_the_runner_up():
    text = moe_select.explain(DEP, measurements=[CPU]).render_text()
    assert "       1 tokens -> torch_grouped_mm; runner-up torch_native +100.0 %" in text
    assert "torch_grouped_mm 10 us [9.8, 10.2] (n 30)" in text and "torch_native 20 us [19.5, 20.5] (n 30)" in text
    assert "ranges: 1-64 tokens: torch_grouped_mm; >= 65 tokens: torch_native" in text


def test_a_refused_candidate_is_never_chosen_even_when_measured_fastest(tmp_path):
    report = moe_select.explain(DEP, measurements=[CPU])
    assert all(v.times[0].runner == "triton" and not v.times[0].competes for v in report.measured.verdicts)
    assert "triton" not in {r.runner for r in report.plan.ranges}
    assert next(c for c in report.candidates if c.backend == "triton").eligible is False
    # a disable rule is a refusal too
    (tmp_path / "r.yaml").write_text("schema_version: 1\nrules:\n  - id: no-grouped\n    disable: [torch_grouped_mm]\n"
                                     "    reason: site policy\n")
    p = moe_select.plan(DEP, measurements=[CPU], rules_dirs=[tmp_path])
    assert [(r.max_tokens, r.runner) for r in p.ranges] == [(None, "torch_native")]


def test_a_measured_candidate_on_the_measured_machine_counts_as_supported():
    before = next(c for c in moe_select.explain(DEP).candidates if c.backend == "torch_grouped_mm")
    assert before.eligible and before.evidence == "unverified"  # no support row of it names the CPU
    after = next(c for c in moe_select.explain(DEP, measurements=[CPU]).candidates if c.backend == "torch_grouped_mm")
    assert after.evidence == "supported" and after.unknowns == []
    assert any("measured on cpu by moe-select tune" in n and "arch_unsupported" in n for n in after.notes)
    strict = moe_select.plan({**DEP, "strict": True}, measurements=[CPU])
    assert {r.runner for r in strict.ranges} == {"torch_grouped_mm", "torch_native"} and strict.evidence == "supported"
    refused = next(c for c in moe_select.explain({**DEP, "strict": True}).candidates if c.backend == "torch_grouped_mm")
    assert not refused.eligible and refused.reasons[0].code == "unverified"


def test_the_fingerprint_changes_with_the_table(tmp_path):
    base = moe_select.plan(DEP)
    p = moe_select.plan(DEP, measurements=[CPU])
    data = json.loads(CPU.read_text())
    data["points"][0]["median_us"] = 10.1
    f = tmp_path / "edited.json"
    f.write_text(json.dumps(data))
    q = moe_select.plan(DEP, measurements=[f])
    assert len({base.fingerprint, p.fingerprint, q.fingerprint}) == 3
    assert p.measurements_fingerprint != q.measurements_fingerprint and p.ranges == q.ranges
    assert base.measurements_fingerprint is None and base.ranges == []


def test_of_two_tables_that_apply_the_newest_is_used(tmp_path):
    shutil.copy(CPU, tmp_path / "a.json")
    newer = json.loads(CPU.read_text())
    newer["created"] = "2026-12-03T09:00:00Z"
    newer["points"] = [p for p in newer["points"] if p["runner"] == "torch_native"]
    (tmp_path / "b.json").write_text(json.dumps(newer))
    report = moe_select.explain(DEP, measurements=[tmp_path])
    assert report.measured.source == str(tmp_path / "b.json")
    assert any(f"{tmp_path / 'a.json'}: superseded by {tmp_path / 'b.json'}" in n for n in report.measured.notes)
    assert [(r.max_tokens, r.runner) for r in report.plan.ranges] == [(None, "torch_native")]


# ------------------------------------------------------------------------------------------ prefer: measured
def _rules(tmp_path: Path, body: str) -> Path:
    (tmp_path / "r.yaml").write_text("schema_version: 1\nrules:\n" + body)
    return tmp_path


def test_prefer_measured_at_its_rules_place(tmp_path):
    rules = _rules(tmp_path, "  - id: cpu-measured\n    when: {arch: [cpu]}\n    prefer: measured\n")
    p = moe_select.plan(DEP, measurements=[CPU], rules_dirs=[rules])
    assert p.chosen_by.how == "measured" and p.chosen_by.rule == "cpu-measured" and len(p.ranges) == 2
    assert "rule cpu-measured" in moe_select.explain(DEP, measurements=[CPU], rules_dirs=[rules]).measured.why
    without = moe_select.explain(DEP, rules_dirs=[rules])
    assert without.plan.chosen_by.rule == "cpu" and "no measurements given (--measurements FILE|DIR)" in without.measured.why


def test_a_prefer_measured_rule_that_does_not_match_leaves_the_rules(tmp_path):
    rules = _rules(tmp_path, "  - id: hopper-measured\n    when: {arch: [sm90]}\n    prefer: measured\n")
    report = moe_select.explain(DEP, measurements=[CPU], rules_dirs=[rules])
    assert report.plan.chosen_by.rule == "cpu" and report.plan.ranges == []
    assert not report.measured.applied and "none matches this deployment" in report.measured.why
    # the table still applies as evidence, and is embedded so that resolve selects the same way
    assert report.plan.measurements_fingerprint == table().fingerprint()


def test_an_earlier_rule_wins_over_a_later_prefer_measured(tmp_path):
    rules = _rules(tmp_path, "  - id: site-native\n    when: {arch: [cpu]}\n    prefer: [torch_native]\n"
                             "  - id: then-measured\n    prefer: measured\n")
    report = moe_select.explain(DEP, measurements=[CPU], rules_dirs=[rules])
    assert report.plan.chosen_by.rule == "site-native" and report.plan.ranges == []
    assert report.measured.why.startswith("rule site-native")


def test_check_accepts_prefer_measured(tmp_path):
    from moe_select.cli import main

    rules = _rules(tmp_path, "  - id: cpu-measured\n    when: {arch: [cpu]}\n    prefer: measured\n")
    assert main(["check", str(rules)]) == 0
    bad = _rules(tmp_path, "  - id: typo\n    prefer: measure\n")
    with pytest.raises(InputError):
        moe_select.plan(DEP, rules_dirs=[bad])


# ------------------------------------------------------------------------------------------------- resolve
def _weights(seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(8, 64, 64, generator=g) / 8).to(torch.bfloat16)
    w2 = (torch.randn(8, 64, 32, generator=g) / 6).to(torch.bfloat16)
    return w13, w2


def _tokens(t: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, 64, generator=g).to(torch.bfloat16)
    ids = torch.rand(t, 8, generator=g).argsort(dim=1)[:, :2].to(torch.int32)
    w = torch.rand(t, 2, generator=g) + 0.1
    return x, ids, (w / w.sum(dim=1, keepdim=True)).float()


def test_resolve_builds_one_core_per_range_and_run_picks_by_token_count(same_machine, monkeypatch):
    import torch

    from moe_select.formats import tolerance
    from moe_select.reference import QuantizedExperts, reference_moe, rel_error

    p = moe_select.plan(DEP, measurements=[CPU])
    runner = moe_select.resolve(p, verify=True)  # verify checks each range's runner against the float64 reference
    assert runner.range_runners == ("torch_grouped_mm", "torch_native")
    assert [runner.runner_for(t) for t in (1, 64, 65, 4096, 100000)] == ["torch_grouped_mm", "torch_grouped_mm",
                                                                         "torch_native", "torch_native", "torch_native"]
    calls: list[str] = []
    for name, core in zip(runner.range_runners, runner._cores):
        forward = core.forward
        monkeypatch.setattr(core, "forward", lambda *a, _f=forward, _n=name, **k: (calls.append(_n), _f(*a, **k))[1])
    w13, w2 = _weights()
    prepared = runner.prepare_weights(w13, w2)
    assert isinstance(prepared.data, tuple) and len(prepared.data) == 2  # one prepared set per runner
    # bf16: both keep the canonical tensors (torch_grouped_mm as transposed views): the two sets share memory (README)
    grouped, native = prepared.data
    assert grouped.w13.untyped_storage().data_ptr() == native.w13.untyped_storage().data_ptr() == w13.untyped_storage().data_ptr()
    tol = tolerance("bf16", "bfloat16")
    for t, seed, want in ((3, 1, "torch_grouped_mm"), (64, 2, "torch_grouped_mm"), (100, 3, "torch_native")):
        x, ids, wts = _tokens(t, seed)
        calls.clear()
        out = runner.run(x, ids, wts, prepared)
        ref = reference_moe(x, ids, wts, QuantizedExperts(w13, {}, "bf16"), QuantizedExperts(w2, {}, "bf16"), "silu")
        assert calls == [want] and out.shape == (t, 64) and out.dtype == torch.bfloat16
        assert rel_error(out, ref) <= tol  # bf16 tolerance of moe_select.formats.tolerance (1.6e-2)


def test_resolve_falls_back_to_the_rules_on_another_machine_and_strict_refuses(monkeypatch):
    import moe_select.resolver as R

    monkeypatch.setattr(R, "machine_here", lambda plan, env, device=None:
                        plan.measurements.machine.model_copy(update={"torch": "9.9.9", "driver": "999.1"}))
    p = moe_select.plan(DEP, measurements=[CPU])
    with pytest.warns(R.MeasurementsWarning) as rec:
        runner = moe_select.resolve(p)
    text = str(rec[0].message)
    assert "driver (999.1 here, None there)" in text and "torch (9.9.9 here, 2.13.0+cpu there)" in text
    assert "falling back to the rules' runner torch_native" in text
    assert runner.plan.ranges == [] and runner.plan.measurements is None and runner.name == "torch_native"
    assert runner.plan.chosen_by.rule == "cpu"
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(p, strict=True)
    assert exc.value.codes == ["plan_mismatch"] and "strict refuses a measured plan off its machine" in str(exc.value)
    assert "driver (999.1 here, None there)" in str(exc.value)


def test_resolve_refuses_an_edited_table(same_machine):
    data = json.loads(moe_select.plan(DEP, measurements=[CPU]).to_json())
    data["measurements"]["points"][0]["median_us"] = 10.1  # the fingerprint no longer matches the table
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(data)
    assert "plan_mismatch" in exc.value.codes and "measurements_fingerprint" in str(exc.value)


def test_a_measured_plan_file_round_trips_through_the_cli(tmp_path, same_machine, capsys):
    from moe_select.cli import main

    f = tmp_path / "plan.json"
    assert main(["plan", "--arch", "auto", "--quant", "bf16", "--model",
                 "num_experts=8,top_k=2,hidden_size=64,moe_intermediate_size=32", "--require-adapter",
                 "--measurements", str(CPU), "-o", str(f)]) == 0
    data = json.loads(f.read_text())
    assert data["schema_version"] == 4 and data["ranges"][0] == {"max_tokens": 64, "runner": "torch_grouped_mm"}
    assert data["range_runners"][0] == {"runner": "torch_grouped_mm", "module": "moe_select.backends.torch_grouped_mm",
                                        "registers": ["standard"], "weight_layout": data["range_runners"][0]["weight_layout"],
                                        "activation_precision": "bf16", "jit": None}
    assert data["ranges"][1]["max_tokens"] is None and data["measurements_fingerprint"] == table().fingerprint()
    assert moe_select.resolve(f).range_runners == ("torch_grouped_mm", "torch_native")
    capsys.readouterr()
    assert main(["explain", "--arch", "auto", "--quant", "bf16", "--model",
                 "num_experts=8,top_k=2,hidden_size=64,moe_intermediate_size=32", "--require-adapter",
                 "--measurements", str(FIX), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["measured"]["applied"] and out["measured"]["ranges"][0] == {"max_tokens": 64, "runner": "torch_grouped_mm"}


def test_older_plan_files_still_load_and_resolve():
    data = json.loads(moe_select.plan(DEP).to_json())
    for k in ("ranges", "range_runners", "measurements", "measurements_fingerprint"):
        data.pop(k)
    data["schema_version"] = 3
    runner = moe_select.resolve(data)
    assert runner.name == "torch_native" and runner.plan.schema_version == 3
    from moe_select.resolver import load_plan

    assert load_plan(Path(__file__).parent / "fixtures" / "plan.json").schema_version == 3  # the committed v3 seed


def test_ranks_compare_the_table_and_the_ranges():
    from moe_select.parallel import compare, plan_fields

    p = moe_select.plan(DEP, measurements=[CPU])
    q = moe_select.plan(DEP)
    lines = compare([{"rank": 0, "fields": plan_fields(p)}, {"rank": 1, "fields": plan_fields(q)}])
    assert any("measurements_fingerprint" in line for line in lines) and any("ranges" in line for line in lines)


def test_a_warning_free_resolve_on_the_measured_machine(same_machine):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        moe_select.resolve(moe_select.plan(DEP, measurements=[CPU]))


def test_other_tile_files_fall_back_too(tmp_path, same_machine):
    import moe_select.resolver as R

    data = json.loads(CPU.read_text())
    data["machine"]["tile_configs"] = "0" * 64  # tune read tuned Triton tiles; no core here reads any
    f = tmp_path / "tiles.json"
    f.write_text(json.dumps(data))
    p = moe_select.plan(DEP, measurements=[f])
    assert p.ranges  # explain does not see tile files: only resolve, once the cores exist
    with pytest.warns(R.MeasurementsWarning, match=r"tile_configs \(None here, 0{64} there\)"):
        runner = moe_select.resolve(p)
    assert runner.plan.ranges == [] and runner.name == "torch_native"
