"""Mutation run over the planning modules (issue 19), with mutmut 3, one module at a time.

    pip install 'mutmut==3.8.1'
    python benchmarks/mutation.py [MODULE ...] [--workdir /tmp/wt-mut] [--jobs 2]

Never mutates this checkout: it adds a throw-away git worktree of HEAD at --workdir (commit first: the run
sees HEAD's source and tests), links ``moe_select/backends``, ``rules`` and ``schemas`` there the way the
editable install maps them, and for each module writes a ``setup.cfg`` [mutmut] section that mutates that
one file and selects that module's test files (``TESTS`` below); mutmut then runs each mutant against the
tests its stats phase saw calling the mutated function, ``-x``, with a wall-clock timeout per mutant. Every
mutmut process runs under ``nice -n 19``. Results (counts per module, the surviving mutants' diffs) go to
``benchmarks/results/mutation.json``, merged with earlier modules' entries; a module's entry is replaced
when it is run again. Kill ratio = (killed + timeout) / (all mutants - "no tests" - skipped), mutmut's own
score; "no tests" mutants (functions no selected test reaches) are counted and listed separately.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "mutation.json"

#: The test files that exercise each module (found by grepping tests/ for the module and its names).
#: mutmut narrows further: a mutant runs only the tests among these that called the mutated function.
TESTS: dict[str, list[str]] = {
    "versions": ["test_pinned.py", "test_engine_version.py", "test_mutants.py"],
    "plans": ["test_parallel.py", "test_evidence.py", "test_issue17_tooling.py", "test_architecture.py",
              "test_reason_codes.py", "test_cli.py", "test_mutants.py"],
    "yamlio": ["test_pinned.py", "test_hostile_inputs.py", "test_fuzz_inputs.py", "test_quant_sources.py",
               "test_mutants.py"],
    "conditions": ["test_edges17_bounds.py", "test_latency.py", "test_pinned.py", "test_rules.py", "test_mutants.py"],
    "lint": ["test_edges.py", "test_rules.py", "test_matrix_cells.py", "test_evidence_lists.py", "test_mutants.py"],
    "catalog_cache": ["test_catalog_cache.py", "test_hostile_inputs.py", "test_latency.py", "test_mutants.py"],
    "deployment": ["test_inputs.py", "test_edges17_bounds.py", "test_fuzz_inputs.py", "test_typed_seams.py",
                   "test_mutants.py"],
    "resolver": ["test_resolve.py", "test_issue17_run.py", "test_edges.py", "test_edges17_bounds.py",
                 "test_evidence.py", "test_mutants.py"],
    "model_config": ["test_model_configs.py", "test_quant_sources.py", "test_inputs.py", "test_hostile_inputs.py",
                     "test_mutants.py"],
    "catalog": ["test_catalog_cache.py", "test_resolve.py", "test_pinned.py", "test_open_vocab.py", "test_rules.py",
                "test_mutants.py"],
    "selector": ["test_facts_nvidia.py", "test_facts_amd_a2a.py", "test_install_engine.py", "test_field_2026.py",
                 "test_edges.py", "test_cases.py", "test_mutants.py"],
    "cli": ["test_cli.py", "test_edges.py", "test_hostile_inputs.py", "test_edges17_cli.py", "test_mutants.py"],
}

ALSO_COPY = ["moe_select/backends", "moe_select/rules", "moe_select/schemas", "backends", "rules", "schemas",
             "examples", "benchmarks", "docs", "README.md"]

# mutmut's exit-code verdicts (mutmut/stats.py).
VERDICT = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
           -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout", 37: "caught by type check"}


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, **kw)


def worktree(work: Path) -> None:
    if not (work / ".git").exists():
        sh(["git", "-C", str(REPO), "worktree", "add", "--detach", str(work), "HEAD"])
    for name in ("backends", "rules", "schemas"):
        link = work / "moe_select" / name
        if not link.exists():
            link.symlink_to(Path("..") / name)


def config(module: str, timeout_constant: float) -> str:
    lines = ["[mutmut]", "source_paths =", "    moe_select/", "only_mutate =", f"    moe_select/{module}.py",
             "also_copy ="]
    lines += [f"    {p}" for p in ALSO_COPY]
    # test_matrix_is_committed_and_in_sync compares docs/ with the sources it was generated from: it fails
    # on mutmut's copy (trampolined sources) whatever the mutant, so it is left out.
    lines += ["pytest_add_cli_args =", "    -q", "    -p", "    no:cacheprovider", "    --deselect",
              "    tests/test_cli.py::test_matrix_is_committed_and_in_sync",
              "pytest_add_cli_args_test_selection ="]
    lines += [f"    tests/{t}" for t in TESTS[module]]
    # The per-mutant wall limit is (tests' measured time + constant) * multiplier: the constant covers pytest's
    # collection in the forked worker, which the measured test durations leave out.
    # forkserver: workers fork from a process that never ran the suite (forking the one that did left workers
    # hung on a lock some thread held at the fork, reported as timeouts).
    lines += ["process_isolation = forkserver", "timeout_multiplier = 3.0", f"timeout_constant = {timeout_constant}",
              "use_git_change_detection = false"]
    return "\n".join(lines) + "\n"


def run_module(module: str, work: Path, jobs: int, timeout_constant: float) -> dict:
    missing = [t for t in TESTS[module] if not (work / "tests" / t).exists()]
    TESTS[module] = [t for t in TESTS[module] if t not in missing]
    (work / "setup.cfg").write_text(config(module, timeout_constant))
    sh(["rm", "-rf", str(work / "mutants")])
    env = dict(os.environ, PYTHONPATH=str(work))
    start = time.monotonic()
    log = work / f"mutmut-{module}.log"
    with log.open("w") as out:
        rc = subprocess.run(["nice", "-n", "19", sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs)],
                            cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    seconds = round(time.monotonic() - start)
    meta = work / "mutants" / "moe_select" / f"{module}.py.meta"
    if rc != 0 or not meta.exists():
        raise SystemExit(f"mutmut failed on {module} (exit {rc}); see {log}")
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    verdicts = {name: VERDICT.get(code, "suspicious") for name, code in codes.items()}
    counts: dict[str, int] = {}
    for v in verdicts.values():
        counts[v] = counts.get(v, 0) + 1
    tested = len(verdicts) - counts.get("no tests", 0) - counts.get("skipped", 0)
    killed = counts.get("killed", 0) + counts.get("timeout", 0) + counts.get("caught by type check", 0)
    survivors = {}
    for name, v in sorted(verdicts.items()):
        if v in ("survived", "no tests", "suspicious"):
            diff = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=work, env=env,
                                  capture_output=True, text=True).stdout
            survivors[name] = {"verdict": v, "diff": "\n".join(ln for ln in diff.splitlines()
                                                               if ln.startswith(("-", "+")) and not
                                                               ln.startswith(("---", "+++")))}
    return {"tests": TESTS[module], "missing_tests": missing, "mutants": len(verdicts), "counts": counts,
            "kill_ratio": round(killed / tested, 4) if tested else None, "seconds": seconds, "jobs": jobs,
            "survivors": survivors}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("modules", nargs="*", help=f"modules to mutate (default: all twelve, small ones first: {' '.join(TESTS)})")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/wt-mut"))
    ap.add_argument("--jobs", type=int, default=2, help="mutmut workers (default 2: this machine's cores)")
    ap.add_argument("--timeout-constant", type=float, default=30.0)
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args()
    unknown = [m for m in args.modules if m not in TESTS]
    if unknown:
        ap.error(f"not a planning module: {' '.join(unknown)}")
    args.modules = args.modules or list(TESTS)
    worktree(args.workdir)
    results = json.loads(args.results.read_text()) if args.results.exists() else {}
    for module in args.modules:
        entry = run_module(module, args.workdir, args.jobs, args.timeout_constant)
        entry["commit"] = sh(["git", "-C", str(args.workdir), "rev-parse", "--short", "HEAD"],
                             capture_output=True).stdout.strip()
        results[module] = entry
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        c = entry["counts"]
        print(f"{module}: {entry['mutants']} mutants, kill ratio {entry['kill_ratio']}, {c}, {entry['seconds']} s",
              flush=True)


if __name__ == "__main__":
    main()
