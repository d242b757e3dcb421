"""benchmarks/mutation.py (issue 19): which entry of a module wins a merge of results files; the sampled mode
(``--sample N --seed S``): its draw, its Wilson interval, its summary line, and a sampled mutmut run on a toy tree."""
from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("mutation_tool", Path(__file__).resolve().parents[1] / "benchmarks" / "mutation.py")
assert SPEC is not None and SPEC.loader is not None
mutation = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(mutation)


def test_a_partial_entry_never_replaces_a_whole_one_and_a_whole_one_always_replaces_a_partial():
    whole_old = {"finished": "2026-12-01T10:00:00"}  # written before "partial" existed: whole
    partial_new = {"partial": True, "finished": "2026-12-02T10:00:00"}
    assert mutation.replaces(whole_old, None) and mutation.replaces(partial_new, None)
    assert not mutation.replaces(partial_new, whole_old)
    assert mutation.replaces(whole_old, partial_new)


def test_between_entries_of_the_same_kind_the_later_finished_wins():
    a, b = {"partial": False, "finished": "2026-12-01T10:00:00"}, {"partial": False, "finished": "2026-12-02T09:00:00"}
    assert mutation.replaces(b, a) and not mutation.replaces(a, b)
    pa, pb = dict(a, partial=True), dict(b, partial=True)
    assert mutation.replaces(pb, pa) and not mutation.replaces(pa, pb)
    assert mutation.replaces({"partial": False}, {"partial": False}) is True  # no dates: the file merged last wins


# --sample (issue 19): the draw, the Wilson interval, the summary line, and one sampled mutmut run on a toy tree.

def test_a_sample_is_the_sorted_population_through_random_sample_and_the_same_seed_draws_the_same_names():
    population = [f"moe_select.toy.x_f__mutmut_{i}" for i in range(1, 301)]
    drawn = mutation.draw_sample(population, 40, seed=19)
    # the documented recipe: the sorted names in random order, the first 40
    assert drawn == sorted(random.Random(19).sample(sorted(population), 300)[:40])
    assert mutation.draw_sample(list(reversed(population)), 40, seed=19) == drawn  # listing order plays no part
    assert mutation.draw_sample(population + population[:5], 40, seed=19) == drawn  # nor a name listed twice
    assert len(drawn) == len(set(drawn)) == 40 and set(drawn) <= set(population)
    assert mutation.draw_sample(population, 40, seed=20) != drawn


def test_a_larger_sample_with_the_same_seed_holds_the_smaller_one():
    # --resume with a larger --sample keeps the verdicts it has: random.sample(population, k) alone would not
    # promise this (CPython 3.11's switches its method with k: for 3000 names, k=100 and k=400 differ)
    population = [f"m.x_f__mutmut_{i}" for i in range(3000)]
    small, large = mutation.draw_sample(population, 100, seed=3), mutation.draw_sample(population, 400, seed=3)
    assert len(small) == 100 and len(large) == 400 and set(small) < set(large)


def test_a_sample_never_exceeds_the_population_and_takes_at_least_one():
    population = ["b", "a", "c"]
    assert mutation.draw_sample(population, 3, seed=1) == ["a", "b", "c"]
    assert mutation.draw_sample(population, 400, seed=1) == ["a", "b", "c"]  # fewer mutants than asked: all
    assert mutation.draw_sample([], 5, seed=1) == []
    with pytest.raises(ValueError, match="at least one"):
        mutation.draw_sample(population, 0, seed=1)


def test_wilson_interval_matches_published_and_hand_computed_values():
    # Newcombe (1998), Statistics in Medicine 17:857, Table I, method 3 (score interval without continuity
    # correction), 95 %: 81/263, 15/148, 0/20, 1/29.
    for (k, n), (lo, hi) in {(81, 263): (0.2553, 0.3662), (15, 148): (0.0624, 0.1605), (0, 20): (0.0, 0.1611),
                             (1, 29): (0.0061, 0.1718)}.items():
        got = mutation.wilson(k, n)
        assert got is not None and (round(got[0], 4), round(got[1], 4)) == (lo, hi), (k, n, got)
    # 360 killed of 400 by hand: p = 0.9, z^2 = 3.841459, z^2/n = 0.0096036, z^2/2n = 0.0048018,
    # p(1-p)/n + z^2/4n^2 = 0.000225 + 0.0000060 = 0.0002310, z * sqrt(.) = 1.959964 * 0.0151988 = 0.0297891,
    # (0.9048018 -/+ 0.0297891) / 1.0096036 = 0.866689 / 0.925701
    lo, hi = mutation.wilson(360, 400)
    assert abs(lo - 0.866689) < 2e-6 and abs(hi - 0.925701) < 2e-6
    assert mutation.wilson(10, 10) == (pytest.approx(0.722467, abs=2e-6), pytest.approx(1.0, abs=1e-12))
    assert mutation.wilson(0, 0) is None
    with pytest.raises(ValueError):
        mutation.wilson(11, 10)


def sampled_entry(partial: bool = False) -> dict:
    """A sampled entry of 400 mutants out of 3012: 350 killed, 10 timeouts, 20 survived, 20 reached by no test."""
    counts = {"killed": 350, "timeout": 10, "survived": 20, "no tests": 20}
    if partial:
        counts = {"killed": 300, "survived": 20, "not checked": 80}
    return {"mutants": 400, "counts": counts, "seconds": 300, "jobs": 4, "commit": "abc1234", "partial": partial,
            "sample": {"size": 400, "requested": 400, "seed": 7, "population": 3012}}


def test_intervals_take_the_kill_ratios_denominators_and_only_for_a_whole_sample():
    e = sampled_entry()
    ci = mutation.intervals(e)
    # kill ratio 360 / (400 - 20 no tests) = 360/380; strict 360/400 (the hand-computed value above)
    assert ci["kill_ratio_interval"] == [round(x, 4) for x in mutation.wilson(360, 380)]
    assert ci["strict_kill_ratio_interval"] == [0.8667, 0.9257]
    assert mutation.intervals(sampled_entry(partial=True)) == {"kill_ratio_interval": None,
                                                               "strict_kill_ratio_interval": None}
    whole = dict(e)
    del whole["sample"]
    assert mutation.intervals(whole) == {"kill_ratio_interval": None, "strict_kill_ratio_interval": None}


def test_summary_gives_a_sampled_modules_interval_next_to_its_point_estimate():
    text = mutation.summary({"selector": sampled_entry(), "lint": sampled_entry(partial=True)})
    lines = text.splitlines()
    # 360/380 = 94.7 %: by hand (0.952423 -/+ 0.023013) / 1.010109 = 92.0 % / 96.6 %
    assert lines[0] == ("lint             400 of 3012 mutants (sample, seed 7)  kill ratio 93.8 % (strict 93.8 %)  "
                        "[killed 300, survived 20, not checked 80]  300 s, 4 jobs, abc1234  PARTIAL")
    assert lines[1] == ("selector         400 of 3012 mutants (sample, seed 7)  kill ratio 94.7 %, 95 % interval "
                        "92.0-96.6 % (strict 90.0 %, 95 % interval 86.7-92.6 %)  [killed 350, timeout 10, "
                        "survived 20, no tests 20]  300 s, 4 jobs, abc1234")
    assert lines[2].startswith("ALL              800 mutants")
    assert lines[2].endswith("(sampled: lint selector: their sample counts are summed, not weighted by population)")


TOY = '''def clamp(x, lo, hi):
    """x within [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def scale(x, k):
    """x times k plus one."""
    return x * k + 1
'''

TOY_TEST = '''from moe_select.toy import clamp, scale


def test_clamp():
    assert clamp(-5, 0, 10) == 0 and clamp(15, 0, 10) == 10 and clamp(3, 0, 10) == 3


def test_scale():
    assert scale(2, 3) == 7
'''


def test_a_sampled_run_has_mutmut_run_only_the_drawn_mutants(tmp_path):
    """The child a ``--sample`` run starts in a module's tree: mutmut generates every mutant of the module, the
    sample drawn from their names is written down, and only those get a verdict."""
    pytest.importorskip("mutmut")
    (tmp_path / "moe_select").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "moe_select" / "__init__.py").write_text("")
    (tmp_path / "moe_select" / "toy.py").write_text(TOY)
    (tmp_path / "tests" / "test_toy.py").write_text(TOY_TEST)
    (tmp_path / "setup.cfg").write_text(mutation.config(["test_toy.py"], "toy", 10.0))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MUTANT_UNDER_TEST")}
    env.update(PYTHONPATH=str(tmp_path), **mutation.MUTMUT_ENV)
    done = subprocess.run([sys.executable, str(mutation.__file__), "--sampled-child", "toy", "--sample", "3",
                           "--seed", "5", "--jobs", "1"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    codes = json.loads((tmp_path / "mutants" / "moe_select" / "toy.py.meta").read_text())["exit_code_by_key"]
    drawn = json.loads((tmp_path / "sample.json").read_text())
    assert len(codes) > 3 and drawn["population"] == len(codes)
    assert drawn["names"] == mutation.draw_sample(list(codes), 3, 5) and (drawn["requested"], drawn["seed"]) == (3, 5)
    assert {n for n, c in codes.items() if c is not None} == set(drawn["names"])  # those three, no other


def test_a_module_whose_tree_lacks_a_listed_test_file_is_refused(tmp_path, monkeypatch):
    """A tree without a test file of the module's list fails that module (MissingTests, naming the file) before
    mutmut starts, instead of measuring a smaller test selection (the sampled device run of 2026-12-02 ran
    catalog_cache and resolver without their survivor-test files and reported their mutants as surviving)."""
    monkeypatch.setitem(mutation.TESTS, "toy", ["test_a.py", "test_b.py"])
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("")
    started = []
    monkeypatch.setattr(mutation.subprocess, "Popen", lambda *a, **k: started.append(a))
    with pytest.raises(mutation.MissingTests, match=r"toy: test files of its list are not in .*: test_b\.py"):
        mutation.Run("toy", tmp_path, 1, 10.0, False, "label", None)
    assert started == []


def test_copy_lists_untracked_files_git_does_not_ignore(tmp_path, monkeypatch):
    """``--copy`` copies tracked files and untracked ones git does not ignore: a checkout whose .git index is older
    than its files still gets every test file; ignored files stay out."""
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("needs git")
    repo = tmp_path / "repo"
    repo.mkdir()
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (repo / ".gitignore").write_text("build/\n")
    (repo / "tracked.py").write_text("")
    run("add", ".gitignore", "tracked.py")
    (repo / "new_test.py").write_text("")          # not in the index
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_text("")      # ignored
    monkeypatch.setattr(mutation, "REPO", repo)
    assert mutation.checkout_files(tmp_path / "work") == [".gitignore", "new_test.py", "tracked.py"]
