"""Worst time and memory per input over the fuzz corpus: the seed files, a few hundred mutations of them
and the hostile inputs of issue 7, per input kind (deployment, rule file, capability file, model config,
plan, and a plan given to ``resolve``). Goal: every input answered in under a second and 300 MB.

    python benchmarks/fuzz_inputs.py [--mutations N] [--seed S] [--kinds plan,resolve]

Each kind runs in its own subprocess (a worker), which drives the product as a user does, exactly as
``tests/test_fuzz_inputs.py`` does (it reuses that file's mutations and ``tests/test_hostile_inputs.py``'s
cases): ``moe-select explain --deployment F --json``, ``check F``, ``explain --model-config DIR --json``
in-process, ``load_plan(F)`` for plans, and ``resolve(F)`` (this machine's environment as the plan
declares it, a fresh registry) for the ``resolve`` kind: a fresh plan with its deployment's tp, ep, dp,
max_tokens_per_rank or moe_tp set to boundary and hostile values (issue 17 row 1: ``tp: 2**63`` spun one
core forever in the fix search, ``tp: 2**24`` took 8 s). Per case it measures the wall time (the run without
tracing) and the peak of Python allocations (``tracemalloc``, a second run); per worker the peak
resident set (``getrusage``: the interpreter, its imports and every case of that kind, so an upper
bound on any one input). The printed table has one row per kind; ``--json`` prints the raw results.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
KINDS = ("deployment", "rules", "capability", "model", "plan", "resolve")
#: Deployment fields of a plan the ``resolve`` kind sets, and the values it sets them to (bounds: 1..4096 ranks,
#: 1..2**20 tokens; moe_tp must be tp / ep).
RESOLVE_FIELDS = ("tp", "ep", "dp", "max_tokens_per_rank", "moe_tp")
RESOLVE_VALUES = (0, -1, -4, 1, 2, 3, 7, 8, 16, 4095, 4096, 4097, 2**20, 2**20 + 1, 2**24, 2**31, 2**63, 10**30, None)


def _modules() -> tuple[Any, Any]:
    sys.path.insert(0, str(TESTS))
    import test_fuzz_inputs as fuzz  # noqa: E402  (the mutations and seeds of the fuzz suite)
    import test_hostile_inputs as hostile  # noqa: E402  (the hostile cases)

    return fuzz, hostile


def _corpus(kind: str, n: int, seed: int, work: Path) -> list[tuple[str, Callable[[], Any]]]:
    """``[(case name, prepare)]``: ``prepare()`` writes the case's files and returns what to run (an
    argv list, or a Path for load_plan)."""
    fuzz, hostile = _modules()
    rng = random.Random(f"{seed}-{kind}")
    c = fuzz.RandomChooser(rng)
    cases: list[tuple[str, Callable[[], Any]]] = []

    def file_case(name: str, rel_target: str, raw: bytes, argv: Callable[[Path], Any]) -> None:
        def prepare() -> Any:
            f = work / rel_target
            f.write_bytes(raw)
            return argv(f)
        cases.append((name, prepare))

    def model_case(name: str, files: dict[str, bytes]) -> None:
        def prepare() -> Any:
            import shutil

            d = work / "model"
            if d.exists():
                shutil.rmtree(d)
            d.mkdir()
            for fname, raw in files.items():
                (d / fname).write_bytes(raw)
            return ["explain", "--gpu", "H200", "--model-config", str(d), "--json"]
        cases.append((name, prepare))

    if kind == "resolve":
        def plan_case(name: str, changes: dict[str, Any]) -> None:
            def prepare() -> Any:
                return ("resolve", hostile._plan_with(Path(tempfile.mkdtemp(dir=work)), **changes)[0])
            cases.append((name, prepare))

        plan_case("seed: a fresh plan", {})
        for field, value, _ in hostile.PLAN_BOUNDS:
            plan_case(f"hostile: deployment.{field}: {value}", {field: value})
        for _ in range(n):
            changes = {c.choice(RESOLVE_FIELDS): c.choice(RESOLVE_VALUES) for _ in range(c.integer(1, 2))}
            plan_case("deployment " + ", ".join(f"{k}: {v}" for k, v in changes.items()), changes)
        return cases
    if kind in ("deployment", "rules", "capability", "plan"):
        seeds = {"deployment": fuzz.DEPLOYMENTS, "rules": fuzz.RULES, "capability": fuzz.CAPABILITIES, "plan": fuzz.PLANS}[kind]
        target = {"deployment": "deployment.yaml", "plan": "plan.json"}.get(kind, "file.yaml")
        argv = {"deployment": lambda f: ["explain", "--deployment", str(f), "--json"],
                "plan": lambda f: f}.get(kind, lambda f: ["check", str(f)])
        for rel in seeds:
            file_case(f"seed {rel}", target, fuzz.seed_bytes(rel), argv)
        for i in range(n):
            rel = c.choice(seeds)
            if i % 2:
                raw, what = fuzz.mutate_bytes(fuzz.seed_bytes(rel), c)
            else:
                mutated, what = fuzz.mutate_data(fuzz.seed_data(rel), c)
                raw = fuzz.dump(mutated, c)
            file_case(f"{rel}: {what}"[:160], target, raw, argv)
    else:
        for model in fuzz.MODELS:
            model_case(f"seed {model}", fuzz._model_files(model))
        for i in range(n):
            model = c.choice(fuzz.MODELS)
            files = fuzz._model_files(model)
            name = c.choice(sorted(files))
            if i % 2:
                files[name], what = fuzz.mutate_bytes(files[name], c)
            else:
                mutated, what = fuzz.mutate_data(json.loads(files[name]), c)
                files[name] = json.dumps(mutated, indent=2).encode()
            model_case(f"{model}/{name}: {what}"[:160], files)

    for case in hostile.CASES:
        if case.kind == kind:
            def prepare(case: Any = case) -> Any:
                d = Path(tempfile.mkdtemp(dir=work))
                return case.build(d)[0]
            cases.append((f"hostile: {case.name}", prepare))
    return cases


def _resolve_exit(path: Path) -> int:
    """``resolve(path)`` as an exit code: 0 ready, 1 refused (ResolveError), 2 invalid (InputError). The
    environment is the one the fresh plan declares (so the plan is checked, not this machine)."""
    from moe_select.environment import Environment
    from moe_select.errors import InputError, ResolveError
    from moe_select.registry import Registry
    from moe_select.resolver import resolve

    _, hostile = _modules()
    env = Environment.model_validate(json.loads(hostile._fresh_plan())["environment"])
    try:
        with hostile.no_hang():
            resolve(path, environment=env, registry=Registry())
    except InputError:
        return 2
    except ResolveError:
        return 1
    return 0


def _execute(target: Any) -> int:
    """Run one case; the exit code (load_plan: 0 loaded, 2 InputError; resolve: also 1 refused). Other
    exceptions propagate."""
    fuzz, hostile = _modules()
    if isinstance(target, tuple):
        return _resolve_exit(target[1])
    if isinstance(target, Path):
        return hostile.plan_exit(target)[0]
    return hostile.run(target)[0]


def worker(kind: str, n: int, seed: int) -> dict[str, Any]:
    """Run every case of ``kind``; the measurements as a dict."""
    fuzz, _ = _modules()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "models").symlink_to(fuzz.FIXTURES / "models", target_is_directory=True)
        cases = _corpus(kind, n, seed, work)
        _execute(cases[0][1]())  # warm-up: imports, catalog cache
        base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        codes: dict[str, int] = {}
        worst_t = (0.0, "")
        worst_m = (0.0, "")
        errors = []
        for name, prepare in cases:
            try:
                target = prepare()
                t0 = time.perf_counter()
                rc = _execute(target)
                seconds = time.perf_counter() - t0
                target = prepare()
                tracemalloc.start()
                _execute(target)
                peak = tracemalloc.get_traced_memory()[1] / 2**20
                tracemalloc.stop()
            except BaseException as exc:  # noqa: BLE001 - a traceback is a finding: report it
                tracemalloc.stop()
                errors.append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            codes[str(rc)] = codes.get(str(rc), 0) + 1
            worst_t = max(worst_t, (seconds, name))
            worst_m = max(worst_m, (peak, name))
        return {"kind": kind, "cases": len(cases), "exit_codes": codes, "worst_s": worst_t[0], "worst_s_case": worst_t[1],
                "worst_traced_mb": worst_m[0], "worst_traced_case": worst_m[1], "base_rss_mb": base_rss,
                "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "errors": errors}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mutations", type=int, default=200, help="mutations per kind (half byte-level, half data-level)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the raw results as JSON")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"input kinds to run, comma-separated (default: {','.join(KINDS)})")
    p.add_argument("--worker", choices=KINDS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.mutations, args.seed)))
        return 0
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        p.error(f"unknown kind(s) {', '.join(unknown)}; kinds: {', '.join(KINDS)}")
    results = []
    t0 = time.perf_counter()
    for kind in kinds:
        proc = subprocess.run([sys.executable, __file__, "--worker", kind, "--mutations", str(args.mutations),
                               "--seed", str(args.seed)], capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONHASHSEED": "0"})
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return 1
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"fuzz corpus: seeds + {args.mutations} mutations per kind (seed {args.seed}) + the hostile cases; "
          f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    print(f"{'input kind':<11} {'cases':>5}  {'exit 0/1/2':<12} {'worst time':>10}  {'worst traced':>12}  "
          f"{'RSS base/max':>13}  worst-time case")
    ok = True
    for r in results:
        codes = "/".join(str(r["exit_codes"].get(k, 0)) for k in ("0", "1", "2"))
        print(f"{r['kind']:<11} {r['cases']:>5}  {codes:<12} {r['worst_s'] * 1e3:>7.1f} ms  {r['worst_traced_mb']:>9.1f} MB  "
              f"{r['base_rss_mb']:>5.0f}/{r['max_rss_mb']:>3.0f} MB  {r['worst_s_case'][:70]}")
        for e in r["errors"]:
            print(f"  UNEXPECTED EXCEPTION: {e}")
        ok = ok and not r["errors"] and r["worst_s"] < 1.0 and r["max_rss_mb"] < 300
    print("worst traced-peak cases: " + "; ".join(f"{r['kind']}: {r['worst_traced_case'][:60]}" for r in results))
    print(f"goal (< 1 s and < 300 MB per input, no exception): {'met' if ok else 'NOT met'}; total {time.perf_counter() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
