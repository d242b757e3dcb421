"""Re-check the listed mutants of a mutation results file (benchmarks/mutation.py) against today's tests, one at a
time, without mutmut.

    python benchmarks/mutant_check.py MODULE --results benchmarks/results/FILE.json [--tests tests/test_x.py ...]
        [--workdir /tmp/wt-mcheck] [--json OUT.json]

For each mutant the results file lists for MODULE (survived, no tests, ...) it writes that mutant into a scratch
tree of the checkout (a detached git worktree of HEAD, ``moe_select/backends``, ``rules`` and ``schemas`` linked as
the editable install maps them) and runs pytest there: ``--tests`` (default: the module's whole test list,
``TESTS`` in mutation.py, with mutation.py's deselections and fixed random inputs), ``-x``. A failing run kills
the mutant. The mutant is written the way mutmut made it: its diff's ``-`` lines, found in the mutated function
(the first match after ``def NAME``, NAME from mutmut's mangled name), are replaced by its ``+`` lines. A diff whose
lines are not in that function any more (the source changed since the run) is reported ``not found``, not
guessed at.

What this answers: whether the tests written since a run kill its survivors (each one, against the whole
selection mutmut would run, not only the tests its stats pass saw). It does not draw a new sample; the run's
killed mutants stay killed as long as no test was removed. Exit status 0 when every listed mutant was killed,
1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation import DESELECT, MUTMUT_ENV, REPO, TESTS, prepare_tree  # noqa: E402


def function_name(mutant: str) -> str:
    """The source name of the function mutmut mangled into ``mutant``: ``moe_select.cli.x__deployment__mutmut_9``
    -> ``_deployment``; a method ``xǁClassǁmethod__mutmut_3`` -> ``method``."""
    mangled = mutant.rsplit(".", 1)[-1].rsplit("__mutmut_", 1)[0]
    if "ǁ" in mangled:
        return mangled.split("ǁ")[-1]
    if not mangled.startswith("x_"):
        raise ValueError(f"{mutant}: not a mutmut mutant name")
    return mangled[2:]


def apply(source: str, mutant: str, diff: str) -> str | None:
    """``source`` with ``mutant``'s diff applied in its function, or None when the ``-`` lines are not there."""
    old = "\n".join(line[1:] for line in diff.splitlines() if line.startswith("-"))
    new = "\n".join(line[1:] for line in diff.splitlines() if line.startswith("+"))
    m = re.search(rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{re.escape(function_name(mutant))}\b", source, re.M)
    if m is None or not old:
        return None
    at = source.find(old, m.start())
    if at < 0:
        return None
    return source[:at] + new + source[at + len(old):]


def scratch_tree(work: Path) -> Path:
    """A detached worktree of HEAD at ``work/tree`` with the package-data links (mutation.py's ``prepare_tree``)."""
    tree = work / "tree"
    prepare_tree(tree, False, work)
    return tree


def check(module: str, listed: dict[str, Any], tests: list[str], work: Path) -> list[dict[str, Any]]:
    """Run ``tests`` against each of ``listed`` (mutant name -> results entry with ``diff``) in a scratch tree."""
    tree = scratch_tree(work)
    target = tree / "moe_select" / f"{module}.py"
    original = target.read_text()
    env = dict(os.environ, PYTHONPATH=str(tree), **MUTMUT_ENV)
    env.setdefault("MOE_SELECT_CACHE_DIR", str(work / "cache"))
    args = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts="]
    for test in DESELECT:
        args += ["--deselect", test]
    out = []
    try:
        for name, entry in sorted(listed.items()):
            mutated = apply(original, name, entry["diff"])
            row: dict[str, Any] = {"mutant": name, "was": entry.get("verdict")}
            if mutated is None:
                row["now"] = "not found"
            else:
                target.write_text(mutated)
                t0 = time.monotonic()
                r = subprocess.run(args + tests, cwd=tree, env=env, capture_output=True, text=True)
                row["now"] = "killed" if r.returncode == 1 else "survived" if r.returncode == 0 else f"exit {r.returncode}"
                row["seconds"] = round(time.monotonic() - t0, 1)
                if r.returncode == 1:
                    failed = [ln.split(" ", 1)[1] for ln in r.stdout.splitlines() if ln.startswith("FAILED ")]
                    row["by"] = failed[0].split(" - ")[0] if failed else ""
            print(f"{name:64s} {row['now']:10s} {row.get('by', '')}", flush=True)
            out.append(row)
    finally:
        target.write_text(original)
    return out


def main() -> None:
    """Parse the arguments, check each listed mutant of the module, print a line per mutant and a count."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("module", choices=sorted(TESTS))
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--tests", nargs="+", help="test files (default: the module's list in mutation.py)")
    ap.add_argument("--only", nargs="+", default=None, help="only these mutant names (or name suffixes)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "wt-mcheck")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args()
    results = json.loads(args.results.read_text())
    if args.module not in results:
        raise SystemExit(f"{args.module}: not in {args.results}")
    listed = results[args.module].get("survivors", {})
    if args.only:
        listed = {k: v for k, v in listed.items() if any(k.endswith(s) for s in args.only)}
    tests = args.tests or [f"tests/{t}" for t in TESTS[args.module]]
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = check(args.module, listed, tests, args.workdir)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["now"]] = counts.get(row["now"], 0) + 1
    print(f"{args.module}: {len(rows)} listed mutants of {args.results.name}: "
          + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    if args.json:
        args.json.write_text(json.dumps({"module": args.module, "results": str(args.results), "tests": tests,
                                         "commit": subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"],
                                                                  capture_output=True, text=True).stdout.strip(),
                                         "rows": rows}, indent=1) + "\n")
    sys.exit(0 if rows and all(r["now"] == "killed" for r in rows) else 1)


if __name__ == "__main__":
    main()
