"""Issue 17, rows 9, 10 and 11 (resolve): `run --nproc` refusals rendered as a single-process run's, `run`'s
progress (the plan and the runner right after resolve, one line per phase, bars on a terminal), and
`resolve` of a plan written by another moe-select. These resolve and run layers: torch."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import moe_select
from moe_select.cli import main

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "examples" / "model_configs"


def _tiny_qwen3(tmp_path: Path) -> str:
    """A Qwen3-MoE config at a tiny shape (8 experts, top-2, hidden 64, expert width 32), bf16."""
    d = tmp_path / "tiny-qwen3-moe"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64, "moe_intermediate_size": 32,
        "num_experts": 8, "num_experts_per_tok": 2, "hidden_act": "silu", "norm_topk_prob": True, "torch_dtype": "bfloat16"}))
    return str(d)


# ------------------------------------------------------------------------------------------- row 9
def test_run_nproc_refusal_is_rendered_as_a_single_process_run(capsys, monkeypatch):
    """Row 9: `run --nproc 3` on a layer that tp 3 cannot split printed one line of reason codes on stderr.
    Now it prints what a single-process refusal prints (the same renderer, harness.run.print_refusal): the
    summary, the input as understood, and every candidate with every reason, its source and its fix."""
    import moe_select.harness.run as runmod

    reports: list = []
    real = getattr(runmod, "print_refusal", None)
    monkeypatch.setattr(runmod, "print_refusal", lambda report, file=None: (reports.append(report), real(report, file)),
                        raising=False)
    cfg = CONFIGS / "allenai__OLMoE-1B-7B-0125-Instruct"  # I=1024: 1024/3 is no whole number of rows
    rc = main(["run", "--model-config", str(cfg), "--nproc", "3", "--tokens", "4"])
    got = capsys.readouterr()
    assert rc == 1 and got.err == "" and "Deployment (as understood)" in got.out, got
    assert len(reports) == 1 and reports[0].plan is None and reports[0].deployment.tp == 3
    assert got.out == f"{reports[0].summary()}\n{reports[0].render_text()}\n"
    lines = got.out.splitlines()
    assert lines[0].startswith("moe-select: refused cpu bf16 E=64") and "shape_unaligned" in lines[0]
    shape = [x for x in lines if x.strip().startswith("shape_unaligned:")]
    assert shape and all(" [backends/" in x for x in shape) and any(" Fix: " in x for x in shape), shape
    # --json: the same report as JSON on stdout, nothing else there
    rc = main(["run", "--model-config", str(cfg), "--nproc", "3", "--tokens", "4", "--json"])
    got = capsys.readouterr()
    data = json.loads(got.out)
    assert rc == 1 and data["ok"] is False and data["refused"]["plan"] is None
    reasons = [r for c in data["refused"]["candidates"] for r in c["reasons"] if r["code"] == "shape_unaligned"]
    assert reasons and all(r["source"].startswith("backends/") for r in reasons) and any(r["fix"] for r in reasons)


# ------------------------------------------------------------------------------------------ row 10
def test_run_prints_the_runner_right_after_resolve_then_one_line_per_phase(tmp_path, capsys, monkeypatch):
    """Row 10: `run` printed nothing between the plan and the end (up to 77 s on a large layer), the resolved
    runner last. Now the runner is printed before the weights are built, then one line per phase."""
    import moe_select.harness.weights as weights

    seen_before_weights: list[str] = []
    real = weights.layer_weights

    def spy(*args, **kwargs):
        seen_before_weights.extend(capsys.readouterr().out.splitlines())
        return real(*args, **kwargs)

    monkeypatch.setattr(weights, "layer_weights", spy)
    rc = main(["run", "--model-config", _tiny_qwen3(tmp_path), "--tokens", "4", "--device", "cpu", "--repeat", "2"])
    rest = capsys.readouterr()
    assert rc == 0, rest.out
    assert [x.split(":")[0] for x in seen_before_weights] == ["moe-select", "layer", "runner"], seen_before_weights
    assert seen_before_weights[2].startswith("runner: MoeRunner(torch_native")
    lines = rest.out.splitlines()
    assert [x.split(":")[0] for x in lines] == ["weights", "forward", "reference", "max relative error vs float64 reference"], lines
    assert lines[0].startswith("weights: 8 experts built and prepared in ")
    assert " over 2 runs (cpu); first call " in lines[1] and "tokens 4, experts touched" in lines[1]
    assert lines[2].startswith("reference: float64, ") and " on cpu" in lines[2]
    assert rest.err == ""  # no bar when stderr is not a terminal


def test_run_draws_progress_bars_on_a_terminal(tmp_path, capsys, monkeypatch):
    """Row 10: on a terminal each long phase draws a tqdm bar on stderr counting its steps (experts built,
    calls, experts of the reference); stdout keeps the same lines."""
    import moe_select.harness.progress as progress

    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "REDRAW_S", 0.0)
    monkeypatch.setattr(progress, "_isatty", lambda f: True)
    rc = main(["run", "--model-config", _tiny_qwen3(tmp_path), "--tokens", "4", "--device", "cpu", "--repeat", "2"])
    got = capsys.readouterr()
    assert rc == 0, got.out
    assert "weights:" in got.err and "8/8" in got.err and "expert" in got.err
    assert "forward:" in got.err and "3/3" in got.err and "call" in got.err
    assert "reference:" in got.err
    assert [x.split(":")[0] for x in got.out.splitlines()][-4:] == ["weights", "forward", "reference",
                                                                   "max relative error vs float64 reference"]


def test_run_nproc_says_each_step_and_keeps_json_clean(tmp_path, capsys):
    """Row 10 for --nproc: the plan is printed before the ranks start, then one line for the ranks and one for
    the reference; with --json those lines go to stderr and stdout holds the JSON only."""
    rc = main(["run", "--model-config", _tiny_qwen3(tmp_path), "--nproc", "2", "--tokens", "4", "--json"])
    got = capsys.readouterr()
    assert rc == 0, got.err
    assert json.loads(got.out)["ok"] is True
    err = got.err.splitlines()
    assert err[0].startswith("moe-select: using torch_native") and err[1].startswith("ranks: 2 processes")
    assert err[2].startswith("reference: float64, ")


# ------------------------------------------------------------------------------------- row 11 (resolve)
def _plan(tmp_path: Path, capsys) -> dict:
    out = tmp_path / "plan.json"
    assert main(["plan", "--arch", "cpu", "--engine", "moe_select", "--quant", "bf16", "--model", "num_experts=8,top_k=2,hidden_size=64,moe_intermediate_size=32",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())


def test_resolve_says_when_a_plan_was_written_by_another_version(tmp_path, capsys):
    """Row 11: `resolve` of a plan written by another moe-select warns (PlanWriterWarning) naming both
    writers, and still resolves: nothing the plan depends on differs (a fresh selection gives the same)."""
    from moe_select.resolver import PlanWriterWarning

    plan = _plan(tmp_path, capsys)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # this version's own plan: no warning
        moe_select.resolve(plan)
    older = {**plan, "written_by": {**plan["written_by"], "package": "0.0.9"}}
    with pytest.warns(PlanWriterWarning, match=r"written by moe-select 0\.0\.9 .*this is moe-select "
                      + moe_select.__version__.replace(".", r"\.")):
        runner = moe_select.resolve(older)
    assert runner.plan.runner == plan["runner"]
    unsigned = {k: v for k, v in plan.items() if k != "written_by"}
    with pytest.warns(PlanWriterWarning, match="does not say which moe-select wrote it"):
        moe_select.resolve(unsigned)


def test_resolve_of_another_versions_plan_is_refused_only_for_what_differs(tmp_path, capsys):
    """A plan from another version whose derived fields differ (here: a hand-changed activation_precision) is refused
    with plan_mismatch naming the field, and the warning says which moe-select wrote it."""
    from moe_select.errors import ResolveError
    from moe_select.resolver import PlanWriterWarning

    plan = _plan(tmp_path, capsys)
    older = {**plan, "written_by": {**plan["written_by"], "package": "0.0.9"}, "activation_precision": "fp8"}
    with pytest.warns(PlanWriterWarning), pytest.raises(ResolveError) as exc:
        moe_select.resolve(older)
    assert exc.value.codes == ["plan_mismatch"] and "activation_precision" in str(exc.value)
