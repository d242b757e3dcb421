"""Mutation run over the planning modules (issue 19), with mutmut 3, one mutmut process per module.

On the 2-core development machine (one module at a time, 2 workers):

    pip install 'mutmut==3.8.1'
    python benchmarks/mutation.py [MODULE ...] [--workdir /tmp/wt-mut] [--jobs 2]

On a many-core machine without ``.git`` (only a copy of the checkout's files), several modules at once,
inside a wall budget, results under ``$OUT`` (the same command again with ``--resume`` continues):

    python3 benchmarks/mutation.py --copy --workdir /tmp/mut --parallel 12 --cores 16 --stop-seconds 420 \\
        --resume --commit COMMIT --results "$OUT/mutation.json"

Reading a results file (no run): ``--summary`` prints each module's counts and kill ratio and the overall
ratio; ``--list-survivors MODULE`` (or ``all``) prints the surviving mutants' diffs; ``--merge-from FILE``
merges another results file's modules into ``--results`` (the newer entry by ``finished`` wins, but a partial
entry never replaces a whole one).

Never mutates this checkout. Each module gets its own tree at ``--workdir/MODULE``: a throw-away git
worktree of HEAD (commit first: the run sees HEAD's source and tests), or with ``--copy`` a plain copy of the
checkout's files as they are now (``git ls-files`` where there is a ``.git``, else every file that
``.gitignore`` does not ignore). ``moe_select/backends``, ``rules`` and ``schemas`` are linked there the way
the editable install maps them, and a ``setup.cfg`` [mutmut] section mutates that one file and selects that
module's test files (``TESTS`` below); mutmut then runs each mutant against the tests its stats phase saw
calling the mutated function, ``-x``, fastest first, with a CPU-time limit per mutant. Every mutmut process
runs under ``nice -n 19`` with ``PYTHONPATH`` = the tree + the caller's ``PYTHONPATH``, ``TMPDIR`` inside
the tree, fixed random inputs (the same draw for the clean run and every mutant) and no GPU (``MUTMUT_ENV``).
``--parallel N`` runs up to N modules at once (default 1), each with ``--jobs`` workers, or with ``--cores C``
each with its share of C (the free cores split by source lines over the modules that take the free slots, so
large modules, and modules started when few are left, get more). Without a module list: all twelve, small
ones first with ``--parallel 1``, else large ones first (by source lines). When the selected
tests fail without any mutant, mutmut stops; the report then names the failing tests (pytest run once more).

``--sample N --seed S``: instead of every mutant, a seeded random sample of N mutant names per module (all of
them where the module has fewer). mutmut first generates the module's mutants; their names, sorted, are put in
random order by ``random.Random(S).sample`` and the first N taken (the same seed and tree give the same names, and
a larger N the same names and more), and ``mutmut run NAME ...`` runs only those (with ``--resume``, only those
without a verdict yet: a sample grows across calls). The entry records the sample (size, requested size,
seed, population) and, for the kill ratio and the strict one, a 95 % Wilson score interval next to the point
estimate (none for a partial sample: mutmut runs the fastest mutants first, so its checked part is no random
sample).

``--max-seconds S``: no module starts after S seconds. ``--stop-seconds T``: modules still running at T
seconds are interrupted (SIGINT to mutmut, which stops its workers and keeps every finished verdict); their
entries say ``"partial": true`` with the count "not checked". ``--resume`` keeps each module's tree and
mutmut state from an earlier run with the same ``--workdir``: a module that finished is read back without
running, an interrupted one continues where it stopped (mutmut skips mutants that have a verdict).

Results (per module: counts, kill ratio, seconds, the surviving mutants' diffs) go to ``--results``
(default ``benchmarks/results/mutation.json``), merged with the modules already there; a module's entry is
replaced when it is run again. Kill ratio = (killed + timeout + caught by type check) / (all mutants -
"no tests" - skipped - not checked), mutmut's own score; "no tests" mutants (functions no selected test
reaches) are counted and listed separately, and the strict ratio counts them as survivors.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "mutation.json"

#: The test files that exercise each module. Chosen from line coverage (2026-12-01, HEAD e114d26): each CPU test
#: file was run alone under coverage.py, and for each module the lines inside its functions that each file
#: reached in-process were counted; a file is here when it reaches lines of the module that the others here do
#: not (or pins one of issue 19's eight areas: test_pinned.py), at a cost in seconds worth it. With these the
#: selection reaches all but 1-9 of the function lines any measured file reaches, per module. Tests that
#: only run ``moe-select`` as a subprocess cannot see a mutant (mutmut's switch lives in the process) and add
#: nothing. test_mutants.py holds the tests written for survivors. mutmut narrows further: a mutant runs only
#: the tests among these that called the mutated function.
TESTS: dict[str, list[str]] = {
    "versions": ["test_pinned.py", "test_engine_version.py", "test_mutants.py", "test_mutants_small.py"],
    # plans: range_view and WrittenBy.brief reach no file here ("no tests" in the run of c570f0d); they are reached
    # only through resolve of a measured plan (test_measured_plans.py) or of another writer's plan
    # (test_issue17_run.py), both of which build and run layers (torch), so test_mutants.py tests them directly
    # (every field of range_view, brief's exact text) instead, for a fraction of the cost.
    "plans": ["test_parallel.py", "test_evidence.py", "test_issue17_tooling.py", "test_reason_codes.py",
              "test_launch_line.py", "test_cli.py", "test_mutants.py", "test_mutants_small.py"],
    "yamlio": ["test_pinned.py", "test_hostile_inputs.py", "test_fuzz_inputs.py", "test_quant_sources.py",
               "test_mutants.py", "test_mutants_c.py", "test_mutants_yamlio.py"],
    "conditions": ["test_edges17_bounds.py", "test_latency.py", "test_pinned.py", "test_rules.py",
                   "test_missing_conditions.py", "test_mutants.py", "test_mutants_b.py", "test_mutants_e.py"],
    "lint": ["test_edges.py", "test_rules.py", "test_matrix_cells.py", "test_evidence_lists.py", "test_mutants.py",
             "test_mutants_b.py", "test_mutants_d.py", "test_mutants_lint.py"],
    "catalog_cache": ["test_catalog_cache.py", "test_hostile_inputs.py", "test_latency.py", "test_pinned.py",
                      "test_engine_version.py", "test_edges17_cli.py", "test_mutants.py", "test_mutants_cache.py",
                      "test_mutants_d.py", "test_mutants_small.py"],
    "deployment": ["test_inputs.py", "test_edges17_bounds.py", "test_fuzz_inputs.py", "test_typed_seams.py",
                   "test_engine_choice.py", "test_facts_amd_a2a.py", "test_trtllm_backends.py", "test_formats.py",
                   "test_install_engine.py", "test_engine_version.py", "test_mutants.py", "test_mutants_c.py",
                   "test_mutants_deployment.py"],
    "resolver": ["test_resolve.py", "test_issue17_run.py", "test_edges.py", "test_edges17_bounds.py",
                 "test_evidence.py", "test_pinned.py", "test_flashinfer_facts.py", "test_open_vocab.py",
                 "test_tune.py", "test_parallel.py", "test_measured_plans.py", "test_mutants.py",
                 "test_mutants_resolver.py", "test_mutants_e.py"],
    "model_config": ["test_model_configs.py", "test_quant_sources.py", "test_inputs.py", "test_hostile_inputs.py",
                     "test_pinned.py", "test_latency.py", "test_open_vocab.py", "test_mutants.py", "test_mutants_c.py",
                     "test_mutants_model_config.py"],
    "catalog": ["test_catalog_cache.py", "test_resolve.py", "test_pinned.py", "test_open_vocab.py", "test_rules.py",
                "test_inputs.py", "test_edges17_cli.py", "test_mutants.py", "test_mutants_b.py", "test_mutants_d.py",
                "test_mutants_catalog.py"],
    "selector": ["test_facts_nvidia.py", "test_facts_amd_a2a.py", "test_install_engine.py", "test_field_2026.py",
                 "test_edges.py", "test_cases.py", "test_trtllm_backends.py", "test_inputs.py",
                 "test_engine_version.py", "test_flashinfer_facts.py", "test_capacity.py", "test_facts_flashinfer.py",
                 "test_mutants.py", "test_mutants_selector.py"],
    "cli": ["test_cli.py", "test_edges.py", "test_hostile_inputs.py", "test_edges17_cli.py", "test_pinned.py",
            "test_issue17_tooling.py", "test_launch_line.py", "test_issue17_run.py", "test_tune.py", "test_formats.py",
            "test_mutants.py", "test_mutants_cli.py"],
}

ALSO_COPY = ["moe_select/backends", "moe_select/rules", "moe_select/schemas", "backends", "rules", "schemas",
             "examples", "benchmarks", "docs", "README.md"]
LINKED = ("backends", "rules", "schemas")
#: Left out of every run: test_matrix_is_committed_and_in_sync compares docs/ with the sources it was generated
#: from, so it fails on mutmut's copy (trampolined sources) whatever the mutant; the --nproc runs start worker
#: processes (which cannot see a mutant: mutmut's switch lives in its process) under a rendezvous timeout that a
#: loaded machine can miss (test_run_nproc_text failed so once beside the clean run of 2026-12-02).
DESELECT = ["tests/test_cli.py::test_matrix_is_committed_and_in_sync", "tests/test_cli.py::test_run_nproc_text",
            "tests/test_cli.py::test_run_nproc_gpt_oss_tp_split_biases",
            "tests/test_issue17_run.py::test_run_nproc_says_each_step_and_keeps_json_clean"]
#: The environment of every mutmut run. Fixed random inputs, so the stats, clean and every mutant's run see the
#: same ones and a verdict does not depend on the draw: the tests' ``seed`` fixture (tests/conftest.py) and
#: hypothesis in test_fuzz_inputs.py. No GPU: the planning modules need none, and on the GPU machine dozens of
#: workers would otherwise each open a CUDA context for the tests that run layers (``moe-select run``); the
#: tests then take the CPU paths they take on the development machine.
#: test_fuzz_inputs.py draws 25 examples per property instead of 250: a surviving mutant of a function every
#: test calls (yamlio's loaders) runs every selected test, and 250 examples cost minutes per mutant. The wall
#: time bounds of test_hostile_inputs.py and test_fuzz_inputs.py are 20 times looser: mutmut's trampolines
#: and its stats phase's call recording slow every call of the mutated module (yamlio's 49,000-item case took
#: 6.4 s against its 2 s bound in the stats phase), so a bound missed there says nothing about a mutant.
MUTMUT_ENV = {"MOE_SELECT_TEST_SEED": "2026120119", "MOE_SELECT_FUZZ_DERANDOMIZE": "1",
              "MOE_SELECT_FUZZ_EXAMPLES": "25", "MOE_SELECT_TEST_TIME_SCALE": "20", "CUDA_VISIBLE_DEVICES": ""}

# mutmut's exit-code verdicts (mutmut/stats.py: status_by_exit_code); None: not run yet.
VERDICT: dict[int | None, str] = {
    1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 35: "suspicious",
    36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout", 37: "caught by type check",
    2: "interrupted", -11: "segfault", -9: "segfault", None: "not checked"}
KILLED = ("killed", "timeout", "caught by type check")
NOT_TESTED = ("no tests", "skipped", "not checked")
LISTED = ("survived", "no tests", "suspicious", "segfault", "interrupted")


def sh(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
    """Run ``cmd``, raising on a non-zero exit."""
    return subprocess.run(cmd, check=True, text=True, **kw)


def has_git() -> bool:
    """Whether the checkout is a git checkout (the device machine gets the files without ``.git``)."""
    return (REPO / ".git").exists() and shutil.which("git") is not None


def gitignore_patterns(folder: Path) -> list[str]:
    """The patterns of ``folder/.gitignore`` (none if absent); a pattern form this reader does not handle is refused."""
    path = folder / ".gitignore"
    out = []
    for no, raw in enumerate(path.read_text().splitlines(), 1) if path.is_file() else []:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("!") or "**" in line:
            raise SystemExit(f"{path}:{no}: pattern {line!r} (negation or '**') is not read by --copy's "
                             "file walk; list the files another way")
        out.append(line)
    return out


def ignored(rel: str, is_dir: bool, patterns: list[str]) -> bool:
    """Whether ``rel`` (posix, relative to the folder of the ``.gitignore`` that holds ``patterns``) matches one."""
    name = rel.rsplit("/", 1)[-1]
    for pat in patterns:
        dir_only = pat.endswith("/")
        p = pat.rstrip("/")
        if dir_only and not is_dir:
            continue
        if "/" in p:  # anchored to the .gitignore's folder
            if fnmatch.fnmatchcase(rel, p.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(name, p):
            return True
    return False


def checkout_files(exclude: Path) -> list[str]:
    """The checkout's files for ``--copy``: tracked files (``git ls-files``) where git is there, else every
    file that no ``.gitignore`` on its way ignores, leaving out ``.git`` and ``exclude`` (the work folder)."""
    if has_git():
        # tracked files and untracked ones git does not ignore: a copy of a checkout whose .git index is older than
        # its files (the device machine's) lists new files only as untracked (tests/test_mutants_cache.py and
        # test_mutants_resolver.py were left out of the sampled device run of 2026-12-02 that way)
        # the work folder is left out: inside the checkout and not ignored, its trees are untracked files (each new
        # tree would copy the trees made before it, and files mutmut is writing there)
        listed = sh(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                    capture_output=True).stdout.split("\0")
        root = REPO.resolve()
        return sorted({f for f in listed if f and (REPO / f).is_file() and not (root / f).is_relative_to(exclude)})
    out = []
    rules: dict[Path, list[tuple[Path, list[str]]]] = {REPO: [(REPO, gitignore_patterns(REPO))]}

    def skip(path: Path, is_dir: bool, chain: list[tuple[Path, list[str]]]) -> bool:
        return any(ignored(path.relative_to(base).as_posix(), is_dir, pats) for base, pats in chain)

    for root, dirs, files in os.walk(REPO):
        here = Path(root)
        chain = rules[here]
        dirs[:] = sorted(d for d in dirs if d != ".git" and not skip(here / d, True, chain)
                         and (here / d).resolve() != exclude)
        for d in dirs:
            rules[here / d] = chain + [(here / d, gitignore_patterns(here / d))]
        out += [(here / f).relative_to(REPO).as_posix() for f in sorted(files) if not skip(here / f, False, chain)]
    return out


def source_label(tree: Path, copy: bool, commit: str | None, exclude: Path | None = None) -> str:
    """What the tree holds: the commit (and ``+changes`` when a copy differs from it: changed tracked files or
    untracked ones it copies, the work folder ``exclude`` left out), or ``--commit``."""
    if commit:
        return commit
    if not has_git():
        return "unknown (copy without .git; pass --commit)"
    repo = tree if not copy else REPO
    head = sh(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True).stdout.strip()
    if copy and (sh(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                    capture_output=True).stdout.strip() or untracked_files(exclude)):
        head += "+changes"   # a copy holds changed tracked files or untracked ones (checkout_files copies both)
    return head


def untracked_files(exclude: Path | None = None) -> list[str]:
    """The checkout's untracked files that git does not ignore (what :func:`checkout_files` copies besides the
    tracked ones), leaving out ``exclude`` (the work folder)."""
    listed = sh(["git", "-C", str(REPO), "ls-files", "-z", "--others", "--exclude-standard"],
                capture_output=True).stdout.split("\0")
    root = REPO.resolve()
    return sorted(f for f in listed if f and (exclude is None or not (root / f).is_relative_to(exclude)))


def prepare_tree(tree: Path, copy: bool, work: Path) -> None:
    """A fresh tree for one module at ``tree``: a detached worktree of HEAD, or a copy of the checkout's files."""
    if tree.exists():
        if (tree / ".git").is_file() and has_git():
            sh(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)])
        else:
            shutil.rmtree(tree)
    if has_git():
        sh(["git", "-C", str(REPO), "worktree", "prune"])
    if copy:
        for rel in checkout_files(work.resolve()):
            dest = tree / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest)
    else:
        sh(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), "HEAD"], capture_output=True)
    for name in LINKED:
        link = tree / "moe_select" / name
        if not link.exists():
            link.symlink_to(Path("..") / name)


def config(tests: list[str], module: str, timeout_constant: float) -> str:
    """The ``setup.cfg`` [mutmut] section that mutates ``moe_select/MODULE.py`` against ``tests``."""
    lines = ["[mutmut]", "source_paths =", "    moe_select/", "only_mutate =", f"    moe_select/{module}.py",
             "also_copy ="]
    lines += [f"    {p}" for p in ALSO_COPY]
    lines += ["pytest_add_cli_args =", "    -q", "    -p", "    no:cacheprovider"]
    for test in DESELECT:
        lines += ["    --deselect", f"    {test}"]
    lines += ["pytest_add_cli_args_test_selection ="]
    lines += [f"    tests/{t}" for t in tests]
    # The per-mutant limit is (tests' measured time + constant) * multiplier (CPU seconds, so a loaded machine
    # does not turn slow mutants into timeouts): the constant covers pytest's collection in the forked worker.
    # forkserver: workers fork from a process that never ran the suite (forking the one that did left workers
    # hung on a lock some thread held at the fork, reported as timeouts).
    lines += ["process_isolation = forkserver", "timeout_multiplier = 3.0", f"timeout_constant = {timeout_constant}",
              "use_git_change_detection = false"]
    return "\n".join(lines) + "\n"


class MissingTests(RuntimeError):
    """A module's tree lacks test files its ``TESTS`` list names (the run would measure a smaller selection)."""


class Run:
    """One module's mutmut process."""

    def __init__(self, module: str, tree: Path, jobs: int, timeout_constant: float, resume: bool,
                 label: str, deadline: float | None, sample: tuple[int, int] | None = None) -> None:
        self.module, self.tree, self.jobs, self.label, self.deadline = module, tree, jobs, label, deadline
        self.sample = sample  # (size, seed) with --sample
        self.tests = [t for t in TESTS[module] if (tree / "tests" / t).exists()]
        self.missing = [t for t in TESTS[module] if t not in self.tests]
        if self.missing:   # a smaller test selection would lower the kill ratio silently
            raise MissingTests(f"{module}: test files of its list are not in {tree}: {', '.join(self.missing)}")
        (tree / "setup.cfg").write_text(config(self.tests, module, timeout_constant))
        if not resume:
            shutil.rmtree(tree / "mutants", ignore_errors=True)
        (tree / "entry.json").unlink(missing_ok=True)
        (tree / "sample.json").unlink(missing_ok=True)
        tmp = tree / ".tmp"
        tmp.mkdir(exist_ok=True)
        pythonpath = os.pathsep.join([str(tree)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                                                    else []))
        self.env = dict(os.environ, PYTHONPATH=pythonpath, TMPDIR=str(tmp), **MUTMUT_ENV)
        self.log = tree / f"mutmut-{module}.log"
        self.start = time.monotonic()
        spent = tree / "seconds.txt"  # wall seconds of earlier, interrupted runs of this tree (--resume)
        self.before = float(spent.read_text()) if resume and spent.exists() else 0.0
        self.interrupted_at: float | None = None
        cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs)]
        if sample is not None:  # generates, draws, then becomes ``mutmut run NAME ...`` (same process)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--sampled-child", module, "--sample",
                   str(sample[0]), "--seed", str(sample[1]), "--jobs", str(jobs)]
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(["nice", "-n", "19"] + cmd, cwd=tree, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def interrupt(self) -> None:
        """SIGINT to mutmut itself (not its workers): it stops them and keeps the verdicts it has."""
        if self.interrupted_at is None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            self.interrupted_at = time.monotonic()

    def reap(self, grace: float) -> bool:
        """True when mutmut has exited; kills its process group ``grace`` seconds after an interrupt."""
        if self.proc.poll() is not None:
            self.kill_group()
            return True
        if self.interrupted_at is not None and time.monotonic() - self.interrupted_at > grace:
            self.kill_group()
            self.proc.wait()
            return True
        return False

    def kill_group(self) -> None:
        """Kill what is left of this mutmut's process group (its fork server and workers)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def log_tail(self, n: int = 15) -> str:
        """The last ``n`` lines of mutmut's output (its spinner lines left out)."""
        text = self.log.read_text(errors="replace").replace("\r", "\n")
        lines = [ln[:300] for ln in text.splitlines() if ln.strip() and not re.match(r"\s*[\u2800-\u28ff] ", ln)]
        return "\n".join(lines[-n:])

    def failing_tests(self, timeout: float) -> str:
        """mutmut hides the output of its stats and clean runs: run the selection once more with pytest in
        mutmut's copy (no mutant active) and return its failures, so the report names the failing test."""
        env = dict(self.env, MUTANT_UNDER_TEST="",
                   PYTHONPATH=os.pathsep.join([str(self.tree / "mutants")] + self.env["PYTHONPATH"].split(os.pathsep)[1:]))
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
        cmd += [a for t in DESELECT for a in ("--deselect", t)] + [f"tests/{t}" for t in self.tests]
        try:
            done = subprocess.run(["nice", "-n", "19"] + cmd, cwd=self.tree / "mutants", env=env, text=True,
                                  capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"(pytest on the selection did not finish in {timeout:.0f} s)"
        lines = (done.stdout + done.stderr).splitlines()
        found = [ln for ln in lines if ln.startswith(("FAILED", "ERROR", "E   "))][:12]
        return "\n".join(found + lines[-1:]) if lines else "(pytest printed nothing)"

    def entry(self) -> dict[str, Any] | str:
        """The results entry, or a line saying why there is none."""
        seconds = round(self.before + time.monotonic() - self.start)
        (self.tree / "seconds.txt").write_text(str(seconds))
        meta = self.tree / "mutants" / "moe_select" / f"{self.module}.py.meta"
        rc = self.proc.returncode
        try:
            codes = json.loads(meta.read_text())["exit_code_by_key"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError) as e:
            return f"mutmut exit {rc}, no readable {meta.name} ({type(e).__name__}); log {self.log}:\n{self.log_tail()}"
        if rc != 0 and self.interrupted_at is None:
            why = f"mutmut exit {rc}; log {self.log}:\n{self.log_tail()}"
            if re.search(r"failed to collect stats|Failed to run clean test", self.log.read_text(errors="replace")):
                left = 240.0 if self.deadline is None else min(240.0, self.deadline - time.monotonic())
                why += "\nthe selected tests fail without any mutant (mutmut needs them green):\n" + (
                    self.failing_tests(left) if left > 20 else "(no time left to run them again: see the log)")
            return why
        drawn: dict[str, Any] | None = None
        if self.sample is not None:
            try:
                drawn = json.loads((self.tree / "sample.json").read_text())
            except FileNotFoundError:
                return f"mutmut exit {rc}, no sample drawn (stopped before the mutants were generated?); " \
                       f"log {self.log}:\n{self.log_tail()}"
            if [drawn["requested"], drawn["seed"]] != list(self.sample):
                return f"{self.tree / 'sample.json'} holds a sample of {drawn['requested']} with seed " \
                       f"{drawn['seed']}, not the {self.sample[0]} with seed {self.sample[1]} asked for"
            codes = {name: codes.get(name) for name in drawn["names"]}
        verdicts = {name: VERDICT.get(code, "suspicious") for name, code in codes.items()}
        counts: dict[str, int] = {}
        for v in verdicts.values():
            counts[v] = counts.get(v, 0) + 1
        listed = sorted(n for n, v in verdicts.items() if v in LISTED)
        diffs = self.diffs(listed)
        rate = re.findall(r"([0-9.]+) mutations/second", self.log.read_text(errors="replace"))
        entry: dict[str, Any] = {
            "tests": self.tests, "missing_tests": self.missing, "mutants": len(verdicts), "counts": counts,
            "seconds": seconds, "jobs": self.jobs, "commit": self.label,
            "partial": counts.get("not checked", 0) > 0,
            "mutants_per_second": float(rate[-1]) if rate else None,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "survivors": {n: {"verdict": verdicts[n], "diff": diffs.get(n, "")} for n in listed}}
        if drawn is not None:
            entry["sample"] = {"size": len(drawn["names"]), "requested": drawn["requested"], "seed": drawn["seed"],
                               "population": drawn["population"]}
        entry.update(ratios(entry))
        entry.update(intervals(entry))
        if not entry["partial"]:
            (self.tree / "entry.json").write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
        return entry

    def diffs(self, names: list[str]) -> dict[str, str]:
        """The +/- lines of each mutant's diff, read by mutmut in one process."""
        if not names:
            return {}
        code = ("import json, sys\nfrom mutmut.mutation.diff_apply import get_diff_for_mutant\n"
                "out = {}\nfor n in json.load(sys.stdin):\n"
                "    try:\n        out[n] = get_diff_for_mutant(n, path=sys.argv[1])\n"
                "    except Exception as e:\n        out[n] = f'(no diff: {e!r})'\n"
                "print(json.dumps(out))\n")
        done = subprocess.run([sys.executable, "-c", code, f"moe_select/{self.module}.py"], cwd=self.tree,
                              env=self.env, input=json.dumps(names), capture_output=True, text=True)
        if done.returncode != 0:
            return {n: f"(no diff: {done.stderr.strip()[-300:]})" for n in names}
        return {n: "\n".join(ln for ln in d.splitlines() if ln.startswith(("-", "+"))
                             and not ln.startswith(("---", "+++")))
                for n, d in json.loads(done.stdout).items()}


def ratios(entry: dict[str, Any]) -> dict[str, float | None]:
    """mutmut's kill ratio (over mutants some selected test reached) and the strict one (no tests = survived)."""
    c = entry["counts"]
    killed = sum(c.get(k, 0) for k in KILLED)
    tested = entry["mutants"] - sum(c.get(k, 0) for k in NOT_TESTED)
    strict = tested + c.get("no tests", 0)
    return {"kill_ratio": round(killed / tested, 4) if tested else None,
            "strict_kill_ratio": round(killed / strict, 4) if strict else None}


def draw_sample(population: list[str], n: int, seed: int) -> list[str]:
    """``n`` names drawn from ``population`` (all of them when it has no more), sorted: the first ``n`` of the
    sorted population put in random order by ``random.Random(seed).sample``, so the same seed and the same names
    give the same sample, and a larger sample with the same seed holds the smaller one (a run grown with
    ``--resume --sample`` larger keeps every verdict it has)."""
    if n < 1:
        raise ValueError(f"a sample of {n} mutants: take at least one")
    names = sorted(set(population))
    return sorted(random.Random(seed).sample(names, len(names))[:n])


#: The 97.5 % point of the standard normal distribution: a two-sided 95 % interval.
Z95 = 1.959963984540054


def wilson(successes: int, trials: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval for a proportion of ``successes`` in ``trials`` (None for no trials):
    (p + z^2/2n -/+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), p = successes/n. A sample drawn without
    replacement from a finite population varies less than this assumes, so the interval errs wide."""
    if not 0 <= successes <= trials:
        raise ValueError(f"{successes} successes in {trials} trials")
    if trials == 0:
        return None
    p, n = successes / trials, trials
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)


def intervals(entry: dict[str, Any]) -> dict[str, list[float] | None]:
    """95 % Wilson intervals of a sampled entry's kill ratio and strict kill ratio (None when not sampled, when
    partial, or without a mutant in the ratio's denominator)."""
    c = entry["counts"]
    killed = sum(c.get(k, 0) for k in KILLED)
    tested = entry["mutants"] - sum(c.get(k, 0) for k in NOT_TESTED)
    out: dict[str, list[float] | None] = {"kill_ratio_interval": None, "strict_kill_ratio_interval": None}
    if entry.get("sample") is None or entry.get("partial"):
        return out
    for key, n in (("kill_ratio_interval", tested), ("strict_kill_ratio_interval", tested + c.get("no tests", 0))):
        ci = wilson(killed, n)
        out[key] = None if ci is None else [round(ci[0], 4), round(ci[1], 4)]
    return out


def sampled_child(module: str, n: int, seed: int, jobs: int) -> None:
    """Run in a module's tree (the current folder) by ``--sample``: have mutmut generate the module's mutants
    (its own generation steps, as ``mutmut run`` takes them), draw the sample from their names, write it to
    ``sample.json``, then become ``mutmut run NAME ...`` for the drawn names without a verdict yet (or exit 0
    when every one has one). mutmut 3.8.1's internals: pinned with the version."""
    from mutmut.__main__ import (copy_also_copy_files, copy_src_dir, create_mutants, set_mutant_under_test,
                                 setup_source_paths, store_lines_covered_by_tests)
    set_mutant_under_test("mutant_generation")
    os.makedirs("mutants", exist_ok=True)
    copy_src_dir()
    copy_also_copy_files()
    setup_source_paths()
    store_lines_covered_by_tests()
    create_mutants(jobs)
    codes = json.loads(Path("mutants", "moe_select", f"{module}.py.meta").read_text())["exit_code_by_key"]
    names = draw_sample(list(codes), n, seed)
    Path("sample.json").write_text(json.dumps({"requested": n, "seed": seed, "population": len(codes),
                                               "names": names}, indent=1) + "\n")
    todo = [name for name in names if codes[name] is None]
    print(f"sample of {len(names)} among {len(codes)} mutants (seed {seed}), {len(todo)} without a verdict",
          flush=True)
    if todo:
        sys.stdout.flush()
        os.execvp(sys.executable, [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs), *todo])


def line(module: str, e: dict[str, Any]) -> str:
    """One module's counts and ratios."""
    c = e["counts"]
    order = ["killed", "timeout", "caught by type check", "survived", "no tests", "suspicious", "segfault",
             "interrupted", "skipped", "not checked"]
    counts = ", ".join(f"{k} {c[k]}" for k in order if c.get(k)) or "none"
    r, s = ratios(e).values()
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f} %"
    sample = e.get("sample")
    if sample is None:
        head = f"{module:14s} {e['mutants']:5d} mutants  kill ratio {pct(r):>7s} (strict {pct(s):>7s})"
    else:
        ci = intervals(e)
        def within(key: str) -> str:
            lo_hi = ci[key]
            return "" if lo_hi is None else f", 95 % interval {100 * lo_hi[0]:.1f}-{100 * lo_hi[1]:.1f} %"
        head = (f"{module:14s} {e['mutants']:5d} of {sample['population']} mutants (sample, seed {sample['seed']})  "
                f"kill ratio {pct(r)}{within('kill_ratio_interval')} (strict {pct(s)}"
                f"{within('strict_kill_ratio_interval')})")
    return (f"{head}  [{counts}]  {e.get('seconds', '?')} s, {e.get('jobs', '?')} jobs, {e.get('commit', '?')}"
            + ("  PARTIAL" if e.get("partial") else ""))


def summary(results: dict[str, Any]) -> str:
    """Every module's line and the overall ratios over all modules in the file."""
    out = [line(m, results[m]) for m in TESTS if m in results]
    out += [line(m, e) for m, e in sorted(results.items()) if m not in TESTS]
    total: dict[str, Any] = {"mutants": 0, "counts": {}}
    for e in results.values():
        total["mutants"] += e["mutants"]
        for k, v in e["counts"].items():
            total["counts"][k] = total["counts"].get(k, 0) + v
    total.update(ratios(total), partial=any(e.get("partial") for e in results.values()),
                 seconds=sum(e.get("seconds", 0) for e in results.values()), jobs="-",
                 commit=",".join(sorted({str(e.get("commit")) for e in results.values()})))
    missing = [m for m in TESTS if m not in results]
    sampled = sorted(m for m, e in results.items() if e.get("sample") is not None)
    out.append(line("ALL", total) + (f"  (not in the file: {' '.join(missing)})" if missing else "")
               + (f"  (sampled: {' '.join(sampled)}: their sample counts are summed, not weighted by population)"
                  if sampled else ""))
    return "\n".join(out)


def list_survivors(results: dict[str, Any], module: str) -> str:
    """The listed mutants (survived, no tests, suspicious...) of ``module`` (or ``all``) with their diffs."""
    mods = [m for m in results if module in ("all", m)]
    if not mods:
        raise SystemExit(f"{module}: not in the results file (has: {' '.join(sorted(results)) or 'nothing'})")
    out = []
    for m in mods:
        for name, s in sorted(results[m].get("survivors", {}).items()):
            out.append(f"## {name}  ({s['verdict']}; {m} at {results[m].get('commit')})\n{s['diff']}")
    return "\n\n".join(out) or f"{module}: no survivors listed"


def size(module: str) -> int:
    """A module's size for ordering and core shares: its source lines (mutants run about 1.6-3.2 per line)."""
    return len((REPO / "moe_select" / f"{module}.py").read_text().splitlines())


def replaces(new: dict[str, Any], old: dict[str, Any] | None) -> bool:
    """Whether results entry ``new`` replaces ``old`` when files are merged: a partial entry never replaces a whole
    one, a whole one always replaces a partial one, else the later ``finished`` wins (an entry without one is the
    oldest; entries written before ``partial`` existed are whole)."""
    if old is None:
        return True
    if bool(new.get("partial")) != bool(old.get("partial")):
        return not new.get("partial")
    return str(new.get("finished", "")) >= str(old.get("finished", ""))


def write(path: Path, results: dict[str, Any]) -> None:
    """Write the results file (sorted, one key a line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def main() -> None:
    """Parse the arguments, then read a results file or run the modules."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("modules", nargs="*", help=f"modules to mutate (default: all twelve: {' '.join(TESTS)})")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/wt-mut"),
                    help="where each module's tree goes (WORKDIR/MODULE); never the checkout")
    ap.add_argument("--copy", action="store_true", help="copy the checkout's files instead of a git worktree")
    ap.add_argument("--jobs", type=int, default=2, help="mutmut workers per module (default 2: this machine's cores)")
    ap.add_argument("--parallel", type=int, default=1, help="modules run at once (default 1)")
    ap.add_argument("--cores", type=int, help="split these cores over the running modules instead of --jobs")
    ap.add_argument("--max-seconds", type=float, help="start no module after this many seconds")
    ap.add_argument("--stop-seconds", type=float, help="interrupt modules still running at this many seconds")
    ap.add_argument("--resume", action="store_true", help="keep earlier trees and verdicts under --workdir")
    ap.add_argument("--commit", help="label recorded as the entries' commit (for a copy without .git)")
    ap.add_argument("--timeout-constant", type=float, default=30.0)
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--summary", action="store_true", help="print the results file's counts and ratios; no run")
    ap.add_argument("--list-survivors", metavar="MODULE", help="print MODULE's (or all) survivors' diffs; no run")
    ap.add_argument("--merge-from", type=Path, nargs="+", metavar="FILE",
                    help="merge these results files into --results (newer entry wins); no run")
    ap.add_argument("--sample", type=int, metavar="N",
                    help="run a seeded random sample of N mutants per module (needs --seed)")
    ap.add_argument("--seed", type=int, help="the sample's seed (same seed, same tree: same mutants)")
    ap.add_argument("--sampled-child", metavar="MODULE", help=argparse.SUPPRESS)  # Run's own process, in its tree
    args = ap.parse_args()
    if (args.sample is None) != (args.seed is None):
        ap.error("--sample and --seed go together")
    if args.sample is not None and args.sample < 1:
        ap.error("--sample takes a positive number")
    if args.sampled_child:
        if args.sample is None:
            ap.error("--sampled-child needs --sample and --seed")
        sampled_child(args.sampled_child, args.sample, args.seed, args.jobs)
        return
    results: dict[str, Any] = json.loads(args.results.read_text()) if args.results.exists() else {}
    if args.merge_from:
        for path in args.merge_from:
            for m, e in json.loads(path.read_text()).items():
                if replaces(e, results.get(m)):
                    results[m] = e
        write(args.results, results)
    if args.list_survivors:
        print(list_survivors(results, args.list_survivors))
    if args.summary or args.merge_from:
        print(summary(results))
    if args.list_survivors or args.summary or args.merge_from:
        return
    unknown = [m for m in args.modules if m not in TESTS]
    if unknown:
        ap.error(f"not a planning module: {' '.join(unknown)}")
    if args.parallel < 1 or args.jobs < 1 or (args.cores is not None and args.cores < 1):
        ap.error("--parallel, --jobs and --cores take a positive number")
    work = args.workdir.resolve()
    if work == REPO or REPO.is_relative_to(work):
        ap.error(f"--workdir {work} holds the checkout: pick a folder outside it (or an ignored one inside)")
    if (work / ".git").exists():
        ap.error(f"--workdir {work} is a git worktree from the one-tree layout of earlier versions of this "
                 f"script; remove it (git worktree remove --force {work}) or pick another --workdir")
    if not args.copy and not has_git():
        ap.error("no .git here: use --copy")
    sample = None if args.sample is None else (args.sample, args.seed)

    def weight(module: str) -> int:
        # a sample's work is its size, not the module's (about 2.4 mutants a source line)
        return size(module) if sample is None else min(size(module) * 12 // 5, sample[0])

    modules = args.modules or (list(TESTS) if args.parallel == 1 else sorted(TESTS, key=lambda m: -size(m)))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    queue, failed, skipped = list(modules), [], []
    running: list[Run] = []

    def record(module: str, entry: dict[str, Any] | str) -> None:
        if isinstance(entry, str):
            failed.append(module)
            print(f"{module}: FAILED: {entry}", flush=True)
            return
        results[module] = entry
        write(args.results, results)
        print(line(module, entry), flush=True)

    try:
        while queue or running:
            elapsed = time.monotonic() - t0
            if queue and args.max_seconds is not None and elapsed > args.max_seconds:
                skipped += queue
                queue = []
            while queue and len(running) < args.parallel:
                module = queue.pop(0)
                tree = work / module
                done = tree / "entry.json"
                if args.resume and done.exists():
                    earlier = json.loads(done.read_text())
                    drawn = earlier.get("sample")
                    if (None if drawn is None else (drawn["requested"], drawn["seed"])) == sample:
                        print(f"{module}: finished in an earlier run (--resume), read back", flush=True)
                        record(module, earlier)
                        continue
                if args.cores is not None:
                    # this module's share of the free cores, by size, among the modules that take the free slots
                    free = args.cores - sum(r.jobs for r in running)
                    batch = [module] + queue[:args.parallel - len(running) - 1]
                    jobs = max(1, int(free * weight(module) / sum(weight(m) for m in batch)))
                else:
                    jobs = args.jobs
                again = args.resume and (tree / "mutants").exists()
                if not again:
                    prepare_tree(tree, args.copy, work)
                label = source_label(tree, args.copy, args.commit, work)
                print(f"{module}: {'continuing' if again else 'starting'} at {round(elapsed)} s, {jobs} jobs, "
                      f"tree {tree}", flush=True)
                deadline = None if args.stop_seconds is None else t0 + args.stop_seconds + 60
                try:
                    running.append(Run(module, tree, jobs, args.timeout_constant, again, label, deadline, sample))
                except MissingTests as exc:   # never a smaller selection: the module fails, the others go on
                    record(module, str(exc))
            if args.stop_seconds is not None and time.monotonic() - t0 > args.stop_seconds:
                for r in running:
                    if r.interrupted_at is None:
                        print(f"{r.module}: interrupted at {round(time.monotonic() - t0)} s (--stop-seconds)",
                              flush=True)
                    r.interrupt()
            for r in [r for r in running if r.reap(grace=60.0)]:
                running.remove(r)
                record(r.module, r.entry())
            time.sleep(1.0)
    except KeyboardInterrupt:
        print("interrupted: stopping the running modules, keeping their verdicts", flush=True)
        for r in running:
            r.interrupt()
        while running:
            for r in [r for r in running if r.reap(grace=60.0)]:
                running.remove(r)
                record(r.module, r.entry())
            time.sleep(1.0)
    finally:
        for r in running:
            r.kill_group()
    print(summary(results), flush=True)
    if skipped:
        print(f"not started (--max-seconds {args.max_seconds}): {' '.join(skipped)}", flush=True)
    if failed:
        raise SystemExit(f"failed: {' '.join(failed)}")


if __name__ == "__main__":
    main()
