"""moe-select tune (issue 25): the sampling loop with a fake timer and clock (interval narrowing, budget stop, early
stop of a runner that cannot win), the written file, progress output, the plot, --check's exit codes, candidates the
facts refuse or verification fails never timed, and one tiny real run on the CPU (torch_native, torch_grouped_mm)."""
from __future__ import annotations

import io
import json
import math
import random

import pytest

from moe_select import tune as T
from moe_select.cli import main
from moe_select.errors import InputError, MoeSelectError
from moe_select.measurements import TIE_RULE, MachineKey, load_measurements

MODEL = "num_experts=8,top_k=2,hidden_size=64,moe_intermediate_size=32,activation=silu,routing=renormalize"
DEP = {"arch": "cpu", "quant": "bf16", "engine": "moe_select", "model": {
    "num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu", "routing": "renormalize"}}


class Clock:
    """A fake clock the fake timer moves: each sample costs its own time."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class FakeTimer:
    """Scripted times: ``draw[runner](tokens, rng) -> microseconds``; records every call."""

    timing = "eager"

    def __init__(self, draw, clock, seed=0):
        self.draw, self.clock, self.rng = draw, clock, random.Random(seed)
        self.calls, self.setups, self.released = [], [], []

    def setup(self, runner, tokens):
        self.setups.append((runner, tokens))

    def sample(self, runner, tokens, n):
        xs = [self.draw[runner](tokens, self.rng) for _ in range(n)]
        self.clock.now += sum(xs) / 1e6
        self.calls.append((runner, tokens, n, sum(xs) / 1e6))
        return xs

    def release(self, tokens):
        self.released.append(tokens)


def steady(us, noise=0.002):
    return lambda t, rng: us * t ** 0.5 * (1 + rng.uniform(-noise, noise))


def test_interval_ranks_are_exact_binomial_bounds():
    for n in (6, 7, 10, 20, 51, 200, 1000):
        lo, hi = T.median_interval(list(range(1, n + 1)))
        rank = int(lo)
        assert hi == n + 1 - rank
        below = sum(math.comb(n, k) for k in range(rank)) / 2 ** n   # P(B < l)
        assert 1 - 2 * below >= 0.95                                  # coverage of [x_(l), x_(n+1-l)]
        assert 1 - 2 * (below + math.comb(n, rank) / 2 ** n) < 0.95   # l + 1 would fall short
    assert T.median_interval([3, 1, 2, 6, 5, 4]) == (1, 6)
    with pytest.raises(ValueError, match="too few"):
        T.median_interval([1, 2, 3, 4, 5])


def test_percentiles_and_summary():
    xs = [float(x) for x in range(1, 12)]
    assert T.percentile(xs, 0.1) == 2.0 and T.percentile(xs, 0.9) == 10.0
    p = T.summarize("r", 4, xs, "narrow")
    assert (p.median_us, p.samples, p.stopped) == (6.0, 11, "narrow") and p.ci_low_us <= 6.0 <= p.ci_high_us


def test_a_steady_runner_narrows_and_a_noisy_one_spends_its_budget():
    clock = Clock()
    timer = FakeTimer({"steady": steady(100.0), "noisy": lambda t, rng: rng.uniform(50, 150)}, clock)
    s = T.Settings(budget_s_per_point=0.05, margin=math.inf)
    pts = {(p.runner, p.tokens): p for p in T.measure(["steady", "noisy"], [1, 4], timer, s, clock=clock)}
    for t in (1, 4):
        st, no = pts[("steady", t)], pts[("noisy", t)]
        assert st.stopped == "narrow" and st.samples == s.first_batch and st.rel_half_width <= 0.02
        assert no.stopped == "budget" and no.rel_half_width > 0.02
        costs = [c for r, tt, n, c in timer.calls if (r, tt) == ("noisy", t)]
        assert sum(costs) >= 0.05 > sum(costs[:-1])   # stops once the budget is spent, not before
        assert sum(costs) < 0.05 * 1.1                # the last batch is sized by the time left
    assert timer.setups == [("steady", 1), ("noisy", 1), ("steady", 4), ("noisy", 4)] and timer.released == [1, 4]


def test_a_runner_that_cannot_win_stops_early_and_a_close_one_does_not():
    clock = Clock()
    noisy = lambda us: (lambda t, rng: us * (1 + rng.uniform(-0.2, 0.2)))  # noqa: E731 - never narrow at 0.2 %
    timer = FakeTimer({"fast": noisy(100), "slow": noisy(200), "close": noisy(103)}, clock)
    s = T.Settings(budget_s_per_point=0.2, target_rel_half_width=0.002)
    pts = {p.runner: p for p in T.measure(["fast", "slow", "close"], [8], timer, s, clock=clock)}
    assert pts["slow"].stopped == "cannot_win" and pts["slow"].samples == s.first_batch
    assert pts["slow"].ci_low_us > pts["fast"].ci_high_us * (1 + s.margin)
    assert pts["fast"].stopped == "budget" and pts["close"].stopped == "budget"
    assert pts["fast"].samples > 10 * s.first_batch


def test_a_timer_returning_bad_times_is_an_error():
    clock = Clock()
    timer = FakeTimer({"a": lambda t, rng: float("nan")}, clock)
    with pytest.raises(MoeSelectError, match="positive finite"):
        T.measure(["a"], [1], timer, clock=clock)


def test_default_tokens_and_parse():
    class U:
        max_tokens_per_rank, decode_tokens_per_rank = 8192, None
    assert T.default_tokens(U()) == list(T.DEFAULT_TOKENS)
    U.max_tokens_per_rank, U.decode_tokens_per_rank = 3000, 96
    assert T.default_tokens(U(), [24, 48, 4000]) == [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048, 3000]
    U.max_tokens_per_rank = 20000
    assert T.default_tokens(U())[-3:] == [8192, 16384, 20000]
    assert T.parse_tokens("16, 1,4,4") == [1, 4, 16]
    for bad in ("1,x", "0", ""):
        with pytest.raises(InputError, match="--tokens"):
            T.parse_tokens(bad)


def _machine(**kw):
    return MachineKey(**{"gpu": "cpu", "arch": "cpu", "driver": None, "cuda": None, "torch": "x", "triton": None,
                         "moe_select": "0.1.0", "tile_configs": None, "cuda_graph": False, **kw})


def _fake_session(draw, *, machine=None, verify_fails=(), clock=None):
    """open_session on DEP with a build that records what it was asked to build and a fake timer."""
    from moe_select.deployment import deployment_from_dict

    asked = []
    clock = clock or Clock()

    def build(plans, names, device, allow_jit=False):
        asked.extend(names)
        return ({n: (None, None) for n in names if n not in verify_fails},
                {n: "plan_mismatch: verify: differs from the float64 reference" for n in names if n in verify_fails})
    timer = FakeTimer(draw, clock)
    s = T.open_session(deployment_from_dict(dict(DEP), "<test>"), device="cpu", build=build,
                       timer=lambda built, u, dev: timer, machine=machine or _machine(), given=dict(DEP))
    return s, timer, asked, clock


def test_the_written_file_holds_the_keys_method_and_points():
    draw = {"torch_native": steady(300.0), "torch_grouped_mm": steady(100.0)}
    s, timer, asked, clock = _fake_session(draw)
    assert s.report.candidates and not next(c for c in s.report.candidates if c.backend == "triton").eligible
    assert "triton" not in asked and set(asked) == {"torch_native", "torch_grouped_mm"}  # refused by the facts: never built
    m = T.run(s, [1, 16, 256], T.Settings(budget_s_per_point=0.5), clock=clock)
    assert m.layer.model_dump() == {"num_experts": 8, "hidden_size": 64, "intermediate_size": 32, "top_k": 2,
                                    "activation": "silu", "format": "bf16", "tp": 1, "ep": 1, "a2a": "none"}
    assert m.machine == _machine() and m.method.timing == "eager" and m.method.tie_rule == TIE_RULE
    assert (m.method.target_rel_half_width, m.method.budget_s_per_point, m.method.drift_threshold) == (0.02, 0.5, 0.1)
    assert m.token_counts() == [1, 16, 256] and m.runners() == ["torch_grouped_mm", "torch_native"]
    assert m.table()[16]["torch_grouped_mm"].median_us == pytest.approx(400, rel=0.01)
    assert {p.stopped for p in m.points} == {"narrow"}   # steady times: narrow after the first batch
    assert m.deployment == DEP and m.skipped == {}
    assert T.ranges(m, ["torch_native", "torch_grouped_mm"]) == [{"max_tokens": None, "runner": "torch_grouped_mm"}]


def test_a_runner_failing_verification_is_named_and_never_timed():
    s, timer, asked, clock = _fake_session({"torch_native": steady(300.0)}, verify_fails=("torch_grouped_mm",))
    m = T.run(s, [1, 2], clock=clock)
    assert {c[0] for c in timer.calls} == {"torch_native"} and m.runners() == ["torch_native"]
    assert "verify" in m.skipped["torch_grouped_mm"]


def test_real_verification_failure_skips_the_runner(monkeypatch):
    """build_torch with the real resolve(verify=True): a torch_grouped_mm core made wrong is refused, torch_native built."""
    import moe_select
    from moe_select.backends.torch_grouped_mm import TorchGroupedMMCore

    real = TorchGroupedMMCore.forward
    monkeypatch.setattr(TorchGroupedMMCore, "forward", lambda self, *a, **k: real(self, *a, **k) * 2)
    plans = {n: moe_select.plan({**DEP, "runner": n}) for n in ("torch_native", "torch_grouped_mm")}
    built, skipped = T.build_torch(plans, list(plans), "cpu")
    assert list(built) == ["torch_native"] and "verify" in skipped["torch_grouped_mm"] and "float64" in skipped["torch_grouped_mm"]


def test_progress_bar_text():
    out = io.StringIO()
    s, timer, asked, clock = _fake_session({"torch_native": steady(300.0), "torch_grouped_mm": steady(100.0)})
    bar = T.progress_bar(2 * 3, on=True, file=out)
    T.run(s, [1, 2, 4], progress=bar, clock=clock)
    bar.close()
    text = out.getvalue()
    assert "tune" in text and "6/6" in text and "point" in text
    quiet = io.StringIO()  # not a terminal and not asked: nothing drawn
    bar = T.progress_bar(6, file=quiet)
    bar.update(6)
    bar.close()
    assert quiet.getvalue() == ""


def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    s, timer, asked, clock = _fake_session({"torch_native": lambda t, rng: 50.0 * t * (1 + rng.uniform(0, 0.001)),
                                            "torch_grouped_mm": lambda t, rng: 400.0 * (1 + rng.uniform(0, 0.001))})
    m = T.run(s, [1, 4, 16, 64], clock=clock)
    assert T.ranges(m) == [{"max_tokens": 8, "runner": "torch_native"}, {"max_tokens": None, "runner": "torch_grouped_mm"}]
    f = tmp_path / "tune.png"
    T.plot(m, str(f), floors={1: 10.0, 64: 100.0})
    assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 5000


def test_plot_without_matplotlib_exits_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(T, "_plot_available", lambda: False)
    rc = main(["tune", "--quant", "bf16", "--model", MODEL, "--device", "cpu", "--plot", str(tmp_path / "p.png")])
    assert rc == 2 and "--plot needs matplotlib" in capsys.readouterr().err


def _file(tmp_path, m):
    f = tmp_path / "tune.json"
    f.write_text(m.to_json())
    return f


REAL_OPEN = T.open_session


def _patched_cli(monkeypatch, draw, machine=None):
    real = REAL_OPEN
    clock = Clock()

    def fake(dep, **kw):
        timer = FakeTimer(draw, clock, seed=7)
        return real(dep, **{**kw, "build": lambda plans, names, device, allow_jit=False: ({n: (None, None) for n in names}, {}),
                            "timer": lambda built, u, dev: timer, "machine": machine or _machine()})
    monkeypatch.setattr(T, "open_session", fake)


def test_check_exit_codes(monkeypatch, tmp_path, capsys):
    draw = {"torch_native": steady(300.0), "torch_grouped_mm": steady(100.0)}
    s, timer, asked, clock = _fake_session(draw)
    f = _file(tmp_path, T.run(s, [1, 2, 4, 8, 16], clock=clock))
    assert T.check_points(load_measurements(f)[0]) == [(r, t) for r in ("torch_grouped_mm", "torch_native") for t in (1, 4, 16)]

    _patched_cli(monkeypatch, draw)
    assert main(["tune", "--check", str(f)]) == 0   # steady: the file's own deployment is rebuilt
    out = capsys.readouterr().out
    assert "0 of 6 points drifted" in out and "DRIFT" not in out

    _patched_cli(monkeypatch, {"torch_native": steady(300.0), "torch_grouped_mm": steady(125.0)})
    assert main(["tune", "--check", str(f), "--json"]) == 1   # 25 % slower: drift
    out = capsys.readouterr().out
    assert "3 of 6 points drifted" in out and out.count("DRIFT") == 3
    doc = json.loads(out[out.index("{"):])
    assert all(p["drifted"] == (p["runner"] == "torch_grouped_mm") for p in doc["points"])
    assert all(p["change"] == pytest.approx(0.25, abs=0.01) for p in doc["points"] if p["drifted"])

    _patched_cli(monkeypatch, {"torch_native": steady(300.0), "torch_grouped_mm": steady(108.0)})
    assert main(["tune", "--check", str(f), "--drift-threshold", "0.05"]) == 1   # 8 %: a drift at 5 %, not at 10 %
    _patched_cli(monkeypatch, {"torch_native": steady(300.0), "torch_grouped_mm": steady(108.0)})
    assert main(["tune", "--check", str(f)]) == 0
    capsys.readouterr()

    _patched_cli(monkeypatch, draw, machine=_machine(gpu="NVIDIA H200", arch="sm90"))
    assert main(["tune", "--check", str(f)]) == 2   # another machine: the fields named
    err = capsys.readouterr().err
    assert f"{f}: machine.gpu:" in err and "machine.arch" in err and "machine.torch" not in err

    _patched_cli(monkeypatch, draw)
    assert main(["tune", "--check", str(f), "--quant", "bf16", "--model", MODEL.replace("top_k=2", "top_k=4")]) == 2
    assert "layer.top_k" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["tune", "--check", str(bad)]) == 2


def test_check_names_a_runner_no_longer_timed(monkeypatch, tmp_path, capsys):
    draw = {"torch_native": steady(300.0), "torch_grouped_mm": steady(100.0)}
    s, timer, asked, clock = _fake_session(draw)
    m = T.run(s, [1, 2], clock=clock)
    s2, _, _, clock2 = _fake_session(draw, verify_fails=("torch_grouped_mm",))
    drifts, gone = T.check(m, s2, T.Settings(), clock=clock2)
    assert {d.new.runner for d in drifts} == {"torch_native"} and gone == [
        "torch_grouped_mm: plan_mismatch: verify: differs from the float64 reference"]


def test_another_machine_in_the_deployment_is_refused():
    from moe_select.deployment import deployment_from_dict

    with pytest.raises(InputError, match="tune measures on this machine") as e:
        T.open_session(deployment_from_dict({**DEP, "arch": None, "gpu": "H200"}, "<test>"), device="cpu")
    assert e.value.issues[0].field == "gpu"


@pytest.mark.slow
def test_tiny_real_run_on_the_cpu(tmp_path, capsys):
    """The real timer, verification and file, through the command: torch_native and torch_grouped_mm on a tiny layer."""
    f = tmp_path / "tune.json"
    rc = main(["tune", "--quant", "bf16", "--model", MODEL, "--engine", "moe_select", "--device", "cpu", "--tokens", "1,8",
               "--budget-s", "0.05", "-o", str(f)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    (m,) = load_measurements(f)
    assert m.runners() == ["torch_grouped_mm", "torch_native"] and m.token_counts() == [1, 8]
    assert m.machine.gpu == "cpu" and m.machine.cuda_graph is False and m.method.timing == "eager"
    assert all(p.samples >= 10 and p.median_us > 0 for p in m.points)
    assert "torch_native" in captured.out and f"measurements written to {f}" in captured.err


def test_tune_check_logic_with_a_fake_timer(monkeypatch, tmp_path):
    """benchmarks/tune_check.py's check_layer: tune, the ranges, then every runner at the check counts and the gap."""
    import argparse
    import importlib.util
    import pathlib
    import sys

    root = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(root))
    spec = importlib.util.spec_from_file_location("tune_check_under_test", root / "tune_check.py")
    tc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tc)
    monkeypatch.setitem(sys.modules["moe_layer"].MODELS, "tiny", (8, 2, 64, 32, "silu"))
    real_dep = tc.deployment
    monkeypatch.setattr(tc, "deployment", lambda n, q: {**real_dep(n, q), "cuda_graph": False})  # torch_native too
    draw = {"torch_native": lambda t, rng: 20.0 * t * (1 + rng.uniform(0, 1e-3)),
            "torch_grouped_mm": lambda t, rng: (100.0 + t) * (1 + rng.uniform(0, 1e-3))}
    clock = Clock()

    def session(dep, **kw):
        timer = FakeTimer(draw, clock)
        return REAL_OPEN(dep, **{**kw, "build": lambda plans, names, device, allow_jit=False: ({n: (None, None) for n in names}, {}),
                                 "timer": lambda built, u, dev: timer, "machine": _machine()})
    args = argparse.Namespace(tokens="1,2,4,8,16", point_budget_s=0.2, check_tokens="3,5,6,12", time_plan=False)
    lay = tc.check_layer("tiny", "bf16", args, "cpu", tmp_path, open_session=session)
    # the selector's plan.ranges where it reads measurements, else tune.ranges: the same ranges either way
    assert [(r["max_tokens"], r["runner"]) for r in lay["ranges"]] == [(5, "torch_native"), (None, "torch_grouped_mm")], lay["ranges_from"]
    assert load_measurements(tmp_path / "tune_tiny_bf16.json")[0].fingerprint() == lay["fingerprint"]
    rows = {r["tokens"]: r for r in lay["check"]}
    assert [rows[t]["choice"] for t in (3, 5, 6, 12)] == ["torch_native"] * 2 + ["torch_grouped_mm"] * 2
    assert [rows[t]["best"] for t in (3, 5, 6, 12)] == ["torch_native", "torch_native", "torch_grouped_mm", "torch_grouped_mm"]
    for r in rows.values():
        by = {p["runner"]: p["median_us"] for p in r["points"]}
        assert set(by) == {"torch_native", "torch_grouped_mm"}   # every runner timed at every check count
        assert r["gap"] == pytest.approx(by[r["choice"]] / min(by.values()) - 1) and r["within_target"] == (r["gap"] <= 0.05)
    assert rows[3]["gap"] == 0 and lay["tune_within_target"]


def test_capture_sizes_of_a_launch_line():
    """A launch line's CUDA-graph capture sizes, as tokens per rank (times the tokens per request)."""
    from pathlib import Path

    from moe_select.launch_line import from_command

    cfg = str(Path(__file__).resolve().parents[1] / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B")
    sg = from_command("python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --cuda-graph-bs-decode 1 2 4 8 24 "
                      "--speculative-num-draft-tokens 4", {}, model_config=cfg)
    assert T.launch_capture_sizes(sg, sg.deployment["decode_tokens_per_rank"]) == [4, 8, 16, 32, 96]
    vl = from_command("vllm serve Qwen/Qwen3-30B-A3B --compilation-config '{\"cudagraph_capture_sizes\": [1, 2, 4, 16]}'", {},
                      model_config=cfg)
    assert T.launch_capture_sizes(vl, vl.deployment["decode_tokens_per_rank"]) == [1, 2, 4, 16]
    assert T.launch_capture_sizes(None, None) == []
