"""Issue 25's GPU done-when: ``moe-select tune`` on each benchmark layer, then the measured plan at token counts
between the tuned ones against every eligible runner.

Run on the GPU machine in one call (after ``source .device/setup.sh``)::

    python benchmarks/tune_check.py [--models ...] [--formats bf16] [--budget-s 480] [--point-budget-s 0.5] [--out PATH]

``--smoke``: a tiny layer on the CPU (checks the script). For each layer of ``benchmarks/moe_layer.py``'s shapes
(default the four silu layers: Qwen3-30B-A3B, Qwen3-235B-A22B, DeepSeek-V3, Mixtral-8x7B; one rank, tp = ep = 1)
and format (default bf16), with CUDA graphs (``cuda_graph: true``: graph replay, as engines run decode):

(a) tune: :func:`moe_select.tune.open_session` (the candidates with an adapter, each verified against the float64
    reference) and :func:`moe_select.tune.run` at the default token list (``--tokens`` overrides), the duration
    recorded (target: at most 5 minutes per layer) and the measurement file written next to ``--out``;
(b) then, separately, at ``--check-tokens`` (default 3, 48, 384, 3072: between the tuned counts), every runner
    tuned in (a) timed again with no early stop (same timer: graph replay, the same weights), and the measured
    choice's runner for that count: from the plan the selector makes with the measurement file (its ``ranges``,
    when this install's selector reads ``measurements``; that plan is also resolved and timed as ``plan[ranges]``),
    else from :func:`moe_select.tune.ranges` (the issue's rule: winner per tuned count, ties to the rules' order,
    boundaries at ``floor(sqrt(a*b))``). The gap is the measured choice's median over the best median, minus one
    (target: at most 5 % at every point); ``ties_best`` says whether the two intervals overlap.

Prints a table and writes JSON (default ``$OUT/tune_check.json``, else ``./tune_check.json``). ``--budget-s``: no
new layer is started after this many seconds (the whole script).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import moe_layer  # noqa: E402 (the benchmark layers)

from moe_select import tune as T  # noqa: E402
from moe_select.deployment import deployment_from_dict  # noqa: E402

DEFAULT_MODELS = ("Qwen3-30B-A3B", "Qwen3-235B-A22B", "DeepSeek-V3", "Mixtral-8x7B")
CHECK_TOKENS = (3, 48, 384, 3072)
GAP_TARGET = 0.05
LAYER_TARGET_S = 300.0


#: CUDA graphs on (graph replay, as engines run decode); --smoke turns them off (the CPU times eager calls).
CUDA_GRAPH = {"on": True}


def deployment(name: str, quant: str) -> dict:
    """The layer's deployment for tune: moe_layer's (arch auto, tp 1, require_adapter) with CUDA graphs on."""
    return {**moe_layer.deployment(name, quant), "cuda_graph": CUDA_GRAPH["on"], "runner": "auto"}


def measured_choice(dep: dict, mfile: Path, m, order) -> tuple[list[dict], str, object]:
    """The token ranges of the measured plan: the selector's plan with the measurement file (its ``ranges``) when
    this install's ``explain`` takes ``measurements``, else :func:`moe_select.tune.ranges`. Returns (ranges, how,
    the plan or None)."""
    import inspect

    import moe_select

    if "measurements" in inspect.signature(moe_select.explain).parameters:
        try:
            report = moe_select.explain(dep, measurements=[str(mfile)])
        except Exception as exc:  # noqa: BLE001 - the spec's ranges stand in, and the error is reported
            return T.ranges(m, order), f"tune.ranges (the selector with measurements raised {type(exc).__name__}: {exc})", None
        plan = report.plan
        rs = getattr(plan, "ranges", None) if plan is not None else None
        if rs:
            return [r.model_dump() if hasattr(r, "model_dump") else dict(r) for r in rs], "plan.ranges (selector)", plan
        why = "no plan" if plan is None else "the plan has no ranges"
        return T.ranges(m, order), f"tune.ranges (the selector's plan: {why})", None
    return T.ranges(m, order), "tune.ranges (this selector reads no measurements)", None


def time_plan(plan, session, tokens, settings, dev):
    """Resolve the measured ``plan`` (one runner per range), give it the session's weights and time it at
    ``tokens`` as ``plan[ranges]`` (graph replay per count, as the others). Returns points."""
    import torch

    import moe_select
    from moe_select.harness.memory import layer_bytes, stored_bytes
    from moe_select.harness.weights import layer_weights
    from moe_select.layer import LayerSpec

    spec = LayerSpec.from_plan(plan)
    one = layer_bytes(spec.num_local_experts, spec.w13_rows, spec.hidden_size, spec.intermediate_size, stored_bytes(plan.quant))
    runners = {r["runner"] for r in (x.model_dump() if hasattr(x, "model_dump") else x for x in plan.ranges)}
    need = one * (1 + len(runners)) * 1.1
    free = torch.cuda.mem_get_info()[0] if str(dev).startswith("cuda") else need
    if need > free:  # its own weights and each range's prepared copy, beside the session's runners
        raise MemoryError(f"not timed: it needs about {need / 2**30:.1f} GiB (weights and {len(runners)} prepared copies), "
                          f"{free / 2**30:.1f} GiB is free beside the tuned runners")
    runner = moe_select.resolve(plan, device=dev, verify=True)
    w = layer_weights(LayerSpec.from_plan(plan), plan.deployment.model.as_dict(), 0, runner.device, generate_on=runner.device)
    pw = runner.prepare_weights(w.pop("w13"), w.pop("w2"), **w)
    timer = T.TorchTimer({"plan[ranges]": (runner, pw)}, plan.deployment.model.as_dict(), runner.device,
                         graph=session.timer.timing == "cuda_graph_replay")
    try:
        return T.measure(["plan[ranges]"], tokens, timer, settings)
    finally:
        del timer, runner, pw


def check_layer(name: str, quant: str, args, dev, out_dir: Path, open_session=T.open_session) -> dict:
    """(a) then (b) for one layer and format; returns the layer's result."""
    dep = deployment(name, quant)
    t0 = time.perf_counter()
    session = open_session(deployment_from_dict(dict(dep), f"<tune_check {name} {quant}>"), device=dev, given=dep)
    tokens = T.parse_tokens(args.tokens) if args.tokens else T.default_tokens(session.report.deployment)
    settings = T.Settings(budget_s_per_point=args.point_budget_s)
    m = T.run(session, tokens, settings)
    tune_s = time.perf_counter() - t0
    mfile = out_dir / f"tune_{name}_{quant}.json"
    mfile.write_text(m.to_json())
    order = T.rules_order(session.report)
    print(f"\n## {name} {quant}: tuned {', '.join(session.names)} at {len(tokens)} counts in {tune_s:.1f} s "
          f"(build and verify {session.build_s:.1f} s); skipped: {session.skipped or 'none'}", flush=True)
    print(T.render_points(m), flush=True)
    rs, how, plan = measured_choice(dep, mfile, m, order)
    print(f"ranges ({how}): {[(r['max_tokens'], r['runner']) for r in rs]}", flush=True)
    # (b): every tuned runner at the check counts, no early stop, then the measured plan itself where there is one
    check_tokens = T.parse_tokens(args.check_tokens)
    plain = T.Settings(budget_s_per_point=args.point_budget_s, margin=math.inf)
    t1 = time.perf_counter()
    pts = T.measure(session.names, check_tokens, session.timer, plain)
    plan_pts, plan_error = [], None
    if plan is not None and getattr(args, "time_plan", True):
        try:
            plan_pts = time_plan(plan, session, check_tokens, plain, dev)
        except Exception as exc:  # noqa: BLE001 - the single runners' table stands without it
            plan_error = f"{type(exc).__name__}: {exc}"[:2000]
    rows = []
    for t in check_tokens:
        row = {p.runner: p for p in pts if p.tokens == t}
        best = min(row.values(), key=lambda p: p.median_us)
        choice = T.runner_for(rs, t)
        if choice not in row:  # a range's runner that (b) did not time: reported, never guessed
            rows.append({"tokens": t, "best": best.runner, "best_us": best.median_us, "choice": choice, "choice_us": None,
                         "gap": math.inf, "ties_best": False, "within_target": False, "rules_runner": None, "rules_gap": None,
                         "points": [p.model_dump() for p in row.values()], "error": f"{choice} was not timed at {t} tokens"})
            continue
        c = row[choice]
        gap = c.median_us / best.median_us - 1
        rules = order[0] if order and order[0] in row else None
        entry = {"tokens": t, "best": best.runner, "best_us": best.median_us, "choice": choice, "choice_us": c.median_us,
                 "gap": gap, "ties_best": c.ci_low_us <= best.ci_high_us, "within_target": gap <= GAP_TARGET,
                 "rules_runner": rules, "rules_gap": row[rules].median_us / best.median_us - 1 if rules else None,
                 "points": [p.model_dump() for p in row.values()]}
        pp = next((p for p in plan_pts if p.tokens == t), None)
        if pp is not None:
            entry["plan_us"] = pp.median_us
            entry["plan_gap"] = pp.median_us / best.median_us - 1
        rows.append(entry)
    return {"model": name, "quant": quant, "runners": session.names, "skipped": session.skipped, "tokens": tokens,
            "tune_s": tune_s, "build_s": session.build_s, "tune_within_target": tune_s <= LAYER_TARGET_S,
            "measurements": str(mfile), "fingerprint": m.fingerprint(), "ranges": rs, "ranges_from": how,
            "check_s": time.perf_counter() - t1, "check": rows, "plan_error": plan_error, "machine": m.machine.model_dump()}


def print_table(result: dict) -> None:
    print(f"\n## tune_check: {result['machine']}, {result['date']}; targets: tune <= {LAYER_TARGET_S:.0f} s per layer, "
          f"measured choice within {GAP_TARGET:.0%} of the best at every check point")
    print("| model | format | tune s | tokens | best (us) | measured choice (us) | gap | ties best | plan[ranges] gap | rules' runner gap |")
    print("|---|---|---:|---:|---|---|---:|---|---:|---:|")
    for lay in result["layers"]:
        for r in lay["check"]:
            pg = f"{r['plan_gap']:+.1%}" if "plan_gap" in r else "-"
            rg = f"{r['rules_gap']:+.1%} ({r['rules_runner']})" if r["rules_gap"] is not None else "-"
            cu = f"{r['choice_us']:.1f}" if r["choice_us"] is not None else "not timed"
            print(f"| {lay['model']} | {lay['quant']} | {lay['tune_s']:.0f} | {r['tokens']} | {r['best']} ({r['best_us']:.1f}) | "
                  f"{r['choice']} ({cu}) | {r['gap']:+.1%} | {'yes' if r['ties_best'] else 'no'} | {pg} | {rg} |")
    for lay in result["layers"]:
        if lay.get("plan_error"):
            print(f"plan[ranges] of {lay['model']} {lay['quant']} not timed: {lay['plan_error']}")
    n = sum(len(lay["check"]) for lay in result["layers"])
    ok = sum(r["within_target"] for lay in result["layers"] for r in lay["check"])
    fast = sum(lay["tune_within_target"] for lay in result["layers"])
    print(f"\nmeasured choice within {GAP_TARGET:.0%}: {ok} of {n} points; tune within {LAYER_TARGET_S:.0f} s: {fast} of "
          f"{len(result['layers'])} layers; total {result['elapsed_s']:.0f} s")
    for s in result["skipped"]:
        print(f"skipped: {s}")
    for f in result["failed"]:
        print(f"FAILED: {f['model']} {f['quant']}: {f['error'][:400]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "tune_check.json"))
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated layers of benchmarks/moe_layer.py")
    ap.add_argument("--formats", default="bf16", help="comma-separated formats (bf16, fp8_channel, fp8_block)")
    ap.add_argument("--budget-s", type=float, default=480.0, help="start no new layer after this many seconds")
    ap.add_argument("--point-budget-s", type=float, default=0.5, help="tune's seconds of sampling per point")
    ap.add_argument("--tokens", default=None, help="tune's token counts (default: tune's default list)")
    ap.add_argument("--check-tokens", default=",".join(map(str, CHECK_TOKENS)))
    ap.add_argument("--smoke", action="store_true", help="a tiny layer on the CPU (checks the script)")
    ap.add_argument("--time-plan", dest="time_plan", action=argparse.BooleanOptionalAction, default=True,
                    help="also resolve the measured plan (one runner per range) and time it at the check counts")
    args = ap.parse_args(argv)
    import torch

    t_start = time.time()
    if args.smoke:
        moe_layer.MODELS.clear()
        moe_layer.MODELS["smoke"] = (8, 2, 64, 32, "silu")
        models, dev = ["smoke"], "cpu"
        CUDA_GRAPH["on"] = False
        args.tokens = args.tokens or "1,2,8,16"
        args.check_tokens = "3,12"
    else:
        models, dev = args.models.split(","), "cuda"
        unknown = [m for m in models if m not in moe_layer.MODELS]
        if unknown:
            ap.error(f"unknown layers {unknown}; benchmarks/moe_layer.py has {list(moe_layer.MODELS)}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"machine": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu", "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d"), "point_budget_s": args.point_budget_s, "layers": [], "skipped": [], "failed": []}

    def save():
        result["elapsed_s"] = time.time() - t_start
        out.write_text(json.dumps(result, indent=1))

    for name in models:
        for quant in args.formats.split(","):
            if time.time() - t_start > args.budget_s:
                result["skipped"].append(f"{name} {quant}: the --budget-s of {args.budget_s:g} s was spent")
                continue
            try:
                result["layers"].append(check_layer(name, quant, args, dev, out.parent))
            except Exception as exc:  # noqa: BLE001 - one failing layer must not lose the others
                result["failed"].append({"model": name, "quant": quant, "error": f"{type(exc).__name__}: {exc}"[:2000],
                                         "traceback": traceback.format_exc()[-4000:]})
                print(f"FAILED {name} {quant}: {type(exc).__name__}: {exc}", flush=True)
            if dev == "cuda":
                torch.cuda.empty_cache()
            save()
    save()
    print_table(result)
    print(f"results written to {out}")
    return 0 if not result["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
