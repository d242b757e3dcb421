"""benchmarks/mutation.py's merge of results files (issue 19): which entry of a module wins."""
from __future__ import annotations

import importlib.util
from pathlib import Path

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
