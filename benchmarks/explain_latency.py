"""Latency of planning, as issue 8's targets state it, over every startup case (tests/cases/startup_cases.yaml).

Per case:

- **warm**: ``moe_select.explain(file)`` in-process with the catalog cached (a long-lived engine process):
  median of ``--reps`` calls after one untimed call. Target: under 10 ms.
- **CLI own**: the wall time of ``python -m moe_select explain -d FILE --json`` minus the wall time of
  ``python -c "import pydantic, yaml"`` (interpreter start and the two imports), both the median of ``--runs``
  runs with the same interpreter, the two commands interleaved so that machine noise hits both alike.
  The on-disk catalog cache is warm (one untimed run first) in a private cache folder.
- **own beyond pydantic's API**: the same, against ``python -c "import yaml; from pydantic import BaseModel,
  Field, ..."`` (the pydantic names moe_select imports): ``import pydantic`` alone is lazy and loads none of
  pydantic's model machinery (``pydantic.main``, ``fields``, ``types``, ...), which any pydantic user pays
  when it first names ``BaseModel``. The target (under 50 ms beyond "the pydantic/PyYAML imports") is
  judged on both columns and the script says which is met.
- **CLI cold cache**: the CLI with an empty catalog cache folder each run (the first run after a capability
  or rule file changed: every file is parsed and validated, and the cache is written).

Then a ``check`` row: ``moe-select check`` of the bundled tree (its uncovered-cell pass plans one deployment per
arch x format x engine cell), in-process with the cache off (``MOE_SELECT_CACHE_DIR=off``: every cell planned) and
warm (the cells kept in the process), and the command line with an empty cache folder each run (cold: the catalog
validated, every cell planned, both stored) and with the cache warm (the catalog and the cells read from it), each
the median of ``--check-runs`` runs. ``--only-check`` measures this row alone.

Then where the CLI's time goes, for the first case: the command's steps timed in a fresh interpreter
(``BREAKDOWN``), each a median over ``--runs`` runs.

The header names the machine, the interpreter and the number of installed distributions (plugin discovery
reads every distribution's entry points: issue 8 measures on a machine with ~100). ``--python PY`` runs the
whole measurement with another interpreter (e.g. a throwaway venv made with ``--system-site-packages`` to
have ~100 distributions; see benchmarks/README.md). The package's bytecode is compiled first
(``compileall``): a deployed install has it, and with PYTHONDONTWRITEBYTECODE set every run would otherwise
recompile the sources. No GPU needed. Run: ``python benchmarks/explain_latency.py [--python PY] [--json OUT]``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "cases" / "startup_cases.yaml"
WARM_TARGET_MS = 10.0
OWN_TARGET_MS = 50.0
BASELINE = "import pydantic, yaml"
#: pydantic's own modules behind the names moe_select uses (``import pydantic`` alone loads none of them).
PYDANTIC_NAMES = "AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator"
BASELINE_MODELS = f"import yaml; from pydantic import {PYDANTIC_NAMES}"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _distributions() -> int:
    import importlib.metadata as md

    names = set()
    for d in md.distributions():
        name = d.metadata["Name"] if d.metadata else None
        if name:
            names.add(name.lower().replace("_", "-").replace(".", "-"))
    return len(names)


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    dt = time.perf_counter() - t
    if p.returncode not in (0, 1):  # 1: a refusal, which is a valid answer
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.decode()[-2000:]}")
    return dt


def _case_files(tmp: Path, only: list[str]) -> list[tuple[str, Path]]:
    import yaml

    out = []
    for case in yaml.safe_load(CASES.read_text())["cases"]:
        if only and case["id"] not in only:
            continue
        dep = dict(case["deployment"])
        if "model_config" in dep:
            dep["model_config"] = str((CASES.parent / dep["model_config"]).resolve())
        f = tmp / f"{case['id']}.yaml"
        f.write_text(yaml.safe_dump(dep))
        out.append((case["id"], f))
    return out


def measure(runs: int, reps: int, only: list[str]) -> dict:
    import moe_select

    py = sys.executable
    pkg = Path(moe_select.__file__).parent
    subprocess.run([py, "-m", "compileall", "-q", str(pkg)], check=True, stdout=subprocess.DEVNULL)
    info = {
        "machine": f"{_cpu()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "python": f"{platform.python_version()} ({py})",
        "distributions": _distributions(),
        "versions": {m: __import__(m).__version__ for m in ("moe_select", "pydantic", "yaml")},
        "runs": runs, "reps": reps, "date": time.strftime("%Y-%m-%d"),
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        cache = tmp / "cache"
        env = dict(os.environ, XDG_CACHE_HOME=str(cache), MOE_SELECT_CACHE_DIR=str(cache / "moe-select"))
        code = "import sys; from moe_select.cli import main; main(sys.argv[1:]); assert 'torch' not in sys.modules, 'torch imported'"
        for case_id, f in _case_files(tmp, only):
            # (a) warm, in-process
            moe_select.explain(f)
            times = []
            for _ in range(reps):
                t = time.perf_counter()
                moe_select.explain(f)
                times.append(time.perf_counter() - t)
            warm = statistics.median(times) * 1e3
            # (b) the command line, against the baselines
            cli = [py, "-m", "moe_select", "explain", "-d", str(f), "--json"]
            _wall([py, "-c", code, "explain", "-d", str(f), "--json"], env)  # warms the catalog cache; no torch
            base, base_models, cmd, cold = [], [], [], []
            for i in range(runs):
                base.append(_wall([py, "-c", BASELINE], env))
                base_models.append(_wall([py, "-c", BASELINE_MODELS], env))
                cmd.append(_wall(cli, env))
                fresh = tmp / f"cold-{case_id}-{i}"
                cold.append(_wall(cli, dict(env, XDG_CACHE_HOME=str(fresh), MOE_SELECT_CACHE_DIR=str(fresh / "moe-select"))))
            med = {k: statistics.median(v) * 1e3 for k, v in
                   (("base", base), ("base_models", base_models), ("cli", cmd), ("cold", cold))}
            rows.append({"case": case_id, "warm_ms": warm, "cli_ms": med["cli"], "baseline_ms": med["base"],
                         "baseline_models_ms": med["base_models"], "own_ms": med["cli"] - med["base"],
                         "own_models_ms": med["cli"] - med["base_models"], "cli_cold_cache_ms": med["cold"]})
        steps = breakdown(_case_files(tmp, [rows[0]["case"]])[0][1], runs, env) if rows else []
    return {"info": info, "rows": rows, "breakdown": {"case": rows[0]["case"] if rows else None, "steps": steps}}


def measure_check(runs: int) -> dict:
    """The ``check`` row (module doc): median ms of ``moe-select check`` of the bundled tree in-process (cache off,
    warm) and on the command line (cold cache, warm cache)."""
    import moe_select
    from moe_select.lint import check

    py = sys.executable
    subprocess.run([py, "-m", "compileall", "-q", str(Path(moe_select.__file__).parent)], check=True, stdout=subprocess.DEVNULL)
    cli = [py, "-m", "moe_select", "check"]
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        env = dict(os.environ, XDG_CACHE_HOME=str(tmp / "cache"), MOE_SELECT_CACHE_DIR=str(tmp / "cache" / "moe-select"),
                   XDG_STATE_HOME=str(tmp / "state"))
        saved = {k: os.environ.get(k) for k in ("MOE_SELECT_CACHE_DIR", "XDG_STATE_HOME")}
        times: dict[str, list[float]] = {"in_off": [], "in_warm": [], "cli_cold": [], "cli_warm": []}
        try:
            os.environ.update(MOE_SELECT_CACHE_DIR="off", XDG_STATE_HOME=env["XDG_STATE_HOME"])
            for _ in range(runs):
                t = time.perf_counter()
                check()
                times["in_off"].append(time.perf_counter() - t)
            os.environ["MOE_SELECT_CACHE_DIR"] = env["MOE_SELECT_CACHE_DIR"]
            check()
            for _ in range(runs):
                t = time.perf_counter()
                check()
                times["in_warm"].append(time.perf_counter() - t)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        _wall(cli, env)
        for i in range(runs):
            fresh = tmp / f"cold-check-{i}"
            times["cli_cold"].append(_wall(cli, dict(env, XDG_CACHE_HOME=str(fresh), MOE_SELECT_CACHE_DIR=str(fresh / "moe-select"))))
            times["cli_warm"].append(_wall(cli, env))
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def render_check(row: dict, runs: int) -> list[str]:
    return [f"check (moe-select check of the bundled tree; medians of {runs} runs): in-process cache off "
            f"{row['in_off']:.0f} ms, in-process warm {row['in_warm']:.0f} ms; CLI cold cache {row['cli_cold']:.0f} ms, "
            f"CLI warm cache {row['cli_warm']:.0f} ms"]


#: Where the CLI's time goes: the command's steps, timed in a fresh interpreter as ``moe-select`` runs them
#: (no garbage collection, heap frozen before exit), each step's time a median over runs.
BREAKDOWN = """\
import time, sys, gc, io, contextlib
gc.disable()
t = [time.perf_counter()]
import pydantic, yaml
t.append(time.perf_counter())
from pydantic import %s
t.append(time.perf_counter())
from moe_select.pydantic_plugins import skip_plugin_lookup
skip_plugin_lookup()  # as moe-select's planning commands do
from pydantic.plugin._loader import get_plugins
list(get_plugins())
t.append(time.perf_counter())
import moe_select.cli, moe_select.selector
t.append(time.perf_counter())
from moe_select.catalog import default_catalog
default_catalog()
t.append(time.perf_counter())
with contextlib.redirect_stdout(io.StringIO()):
    moe_select.cli.main(sys.argv[1:])
t.append(time.perf_counter())
gc.freeze()
print(" ".join(str(b - a) for a, b in zip(t, t[1:])), t[-1] - t[0])
""" % PYDANTIC_NAMES
STEPS = ("import pydantic, yaml", "pydantic's model machinery (from pydantic import BaseModel, Field, ...)",
         "pydantic's plugin lookup (importlib.metadata and an entry-point scan only if a plugin may be declared)",
         "moe_select's modules (model classes, their stdlib imports)",
         "catalog: cache key (hash every file, plugin scan) and the entry read (HMAC, JSON)", "explain and its JSON (first call)")


def breakdown(case_file: Path, runs: int, env: dict[str, str]) -> list[tuple[str, float]]:
    """Median ms of each step of BREAKDOWN, and of the interpreter's start and exit (the wall time of the
    process less what it timed)."""
    py = sys.executable
    cmd = [py, "-c", BREAKDOWN, "explain", "-d", str(case_file), "--json"]
    subprocess.run(cmd, check=True, capture_output=True, env=env)  # the catalog cache warm
    steps: list[list[float]] = [[] for _ in range(len(STEPS) + 1)]
    for _ in range(runs):
        t = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.split()
        wall = time.perf_counter() - t
        for i, v in enumerate(out[:-1]):
            steps[i].append(float(v))
        steps[-1].append(wall - float(out[-1]))
    names = [*STEPS, "interpreter start and exit"]
    return [(n, statistics.median(v) * 1e3) for n, v in zip(names, steps)]


def render(result: dict) -> str:
    info, rows = result["info"], result["rows"]
    if not rows:  # --only-check
        return "\n".join([f"machine: {info['machine']}", f"python: {info['python']}",
                          *render_check(result["check"], info["check_runs"])])
    lines = [f"machine: {info['machine']}", f"python: {info['python']}",
             f"installed distributions: {info['distributions']}",
             "versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()),
             f"warm: median of {info['reps']} calls; CLI: medians of {info['runs']} runs each, interleaved with the baselines",
             ""]
    w = max(len(r["case"]) for r in rows)
    head = (f"{'case':<{w}}  {'warm ms':>7}  {'CLI ms':>6}  {'base ms':>7}  {'CLI own':>7}  "
            f"{'own beyond pydantic API':>23}  {'CLI cold cache':>14}")
    lines += [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['case']:<{w}}  {r['warm_ms']:>7.1f}  {r['cli_ms']:>6.0f}  {r['baseline_ms']:>7.0f}  "
                     f"{r['own_ms']:>7.0f}  {r['own_models_ms']:>23.0f}  {r['cli_cold_cache_ms']:>14.0f}")
    warm = [r["warm_ms"] for r in rows]
    own = [r["own_ms"] for r in rows]
    own_api = [r["own_models_ms"] for r in rows]
    lines += ["",
              f"warm explain: median {statistics.median(warm):.1f} ms, max {max(warm):.1f} ms "
              f"(target < {WARM_TARGET_MS:.0f} ms: {'met' if max(warm) < WARM_TARGET_MS else 'MISSED'})",
              f"CLI own time beyond `python -c \"{BASELINE}\"` (pydantic's model machinery counted as ours): median "
              f"{statistics.median(own):.0f} ms, max {max(own):.0f} ms "
              f"(< {OWN_TARGET_MS:.0f} ms: {'met' if max(own) < OWN_TARGET_MS else 'MISSED'})",
              f"CLI own time beyond pydantic's API imports (`{BASELINE_MODELS}`): median "
              f"{statistics.median(own_api):.0f} ms, max {max(own_api):.0f} ms "
              f"(< {OWN_TARGET_MS:.0f} ms: {'met' if max(own_api) < OWN_TARGET_MS else 'MISSED'})"]
    if result.get("check"):
        lines += ["", *render_check(result["check"], info["check_runs"])]
    bd = result.get("breakdown") or {}
    if bd.get("steps"):
        lines += ["", f"where the CLI's time goes ({bd['case']}, median ms of each step):"]
        lines += [f"  {ms:6.1f}  {name}" for name, ms in bd["steps"]]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", help="measure with this interpreter (it must have moe_select installed)")
    p.add_argument("--runs", type=int, default=11, help="CLI runs per case and command (default 11)")
    p.add_argument("--reps", type=int, default=20, help="warm in-process calls per case (default 20)")
    p.add_argument("--cases", default="", help="comma-separated case ids (default: every case)")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    p.add_argument("--check-runs", type=int, default=3, help="runs of each check measurement (default 3; 0: no check row)")
    p.add_argument("--only-check", action="store_true", help="measure the check row alone")
    p.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)  # child mode: print JSON only
    args = p.parse_args()
    if args.python:
        cmd = [args.python, str(Path(__file__).resolve()), "--raw", "--runs", str(args.runs), "--reps", str(args.reps),
               "--cases", args.cases, "--check-runs", str(args.check_runs)] + (["--only-check"] if args.only_check else [])
        child = subprocess.run(cmd, capture_output=True, text=True)
        if child.returncode:
            sys.exit(f"{args.python} failed:\n{child.stderr[-4000:]}")
        result = json.loads(child.stdout)
    elif args.only_check:
        result = {"info": {"machine": f"{_cpu()}, {os.cpu_count()} CPUs, {platform.platform()}",
                           "python": f"{platform.python_version()} ({sys.executable})", "date": time.strftime("%Y-%m-%d")},
                  "rows": []}
    else:
        result = measure(args.runs, args.reps, [c for c in args.cases.split(",") if c])
    if args.check_runs > 0 and not args.python:
        result["check"] = measure_check(args.check_runs)
        result["info"]["check_runs"] = args.check_runs
    if args.raw:
        print(json.dumps(result))
        return
    print(render(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
