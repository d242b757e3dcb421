"""``moe-select check``'s uncovered-cell pass is cached (moe_select.cells.cached_evaluate, stored beside the catalog
cache): a cached check reports exactly what an uncached one does, an edit to a fact or rule file gives another key
(the cells are computed again), and an entry that does not verify or decode is a miss, never an answer."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from moe_select import catalog as catmod
from moe_select import cells
from moe_select.catalog import bundled_dirs, load_catalog
from moe_select.lint import check


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", str(folder))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the entries' key: this test's own
    monkeypatch.delenv("MOE_SELECT_RULES", raising=False)
    monkeypatch.delenv("MOE_SELECT_BACKENDS", raising=False)
    monkeypatch.setattr(cells, "_memo", {})  # this process's cells: none yet
    return folder


@pytest.fixture
def bundled_copy(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """A private copy of the bundled capability and rule folders, loaded as the bundled ones."""
    bdir, rdir = bundled_dirs()
    b, r = tmp_path / "backends", tmp_path / "rules"
    shutil.copytree(bdir, b, ignore=shutil.ignore_patterns("*.py", "__pycache__", "triton_configs"))
    shutil.copytree(rdir, r, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    monkeypatch.setattr(catmod, "bundled_dirs", lambda: (b, r))
    return b, r


@pytest.fixture
def counted(monkeypatch) -> list[int]:
    """cells.evaluate replaced by a cheap real one (the first arch and engine only: a dozen selections) that
    counts its calls: the cache tests below need to know whether the cells were computed, not all of them."""
    real = cells.evaluate
    calls: list[int] = []

    def small(catalog, **kw):
        calls.append(1)
        full = cells._archs(catalog)
        from moe_select.vocab import ENGINES

        return real(catalog, archs=full[:1], engines=tuple(ENGINES)[:1])

    monkeypatch.setattr(cells, "evaluate", small)
    return calls


def _lines(findings) -> list[str]:
    return [str(f) for f in findings]


def test_a_cached_check_equals_an_uncached_one(cache, monkeypatch):
    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", "off")
    plain, _ = check([])
    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", str(cache))
    cold, catalog = check([])  # computed, and stored
    assert _lines(cold) == _lines(plain)
    assert len(list(cache.glob("cells-*.json"))) == 1
    fresh = cells.evaluate(catalog)

    def refuse(*a, **k):
        raise AssertionError("the cells were computed: the cache was not used")

    monkeypatch.setattr(cells, "evaluate", refuse)
    monkeypatch.setattr(cells, "_memo", {})  # a new process: read from disk
    warm, catalog = check([])
    assert _lines(warm) == _lines(plain)
    assert [(f.where, f.message, f.severity) for f in warm] == [(f.where, f.message, f.severity) for f in plain]
    from_disk = cells.cached_evaluate(catalog)  # in this process now: the memo
    assert cells.encode_cells(from_disk) == cells.encode_cells(fresh)
    assert from_disk.plans == fresh.plans and from_disk.verdicts == fresh.verdicts


def test_an_edit_to_a_fact_file_or_a_rule_file_invalidates(cache, bundled_copy, counted, monkeypatch):
    b, r = bundled_copy
    first, _ = check([])
    assert counted == [1]
    check([])
    monkeypatch.setattr(cells, "_memo", {})
    check([])
    assert counted == [1]  # the same files: the memo, then the disk entry
    f = b / "triton.yaml"
    text = f.read_text()
    f.write_text("# moved one line down\n" + text)  # every fact of the file: another file:line
    catalog = load_catalog()
    assert catalog.runners["triton"].support[0]._line > 1
    check([])
    assert counted == [1, 1]
    f.write_text(text)  # the same bytes again: the first entry is valid again, and is read
    check([])
    assert counted == [1, 1]
    rule = sorted(r.glob("*.yaml"))[0]
    rule.write_text(rule.read_text() + "\n# a comment at the end\n")  # the catalog keeps every file's sha256
    again, _ = check([])
    assert counted == [1, 1, 1]
    assert len(list(cache.glob("cells-*.json"))) == 3
    assert [f.message for f in again] == [f.message for f in first]


def test_an_operator_rule_file_is_another_key(cache, tmp_path, counted):
    check([])
    rules = tmp_path / "site.yaml"
    rules.write_text("schema_version: 1\nrules:\n  - id: site\n    when: {arch: [sm90]}\n    prefer: [triton]\n")
    check([rules])
    assert counted == [1, 1]
    check([rules])
    assert counted == [1, 1]


def test_an_entry_that_does_not_verify_is_a_miss(cache, counted, monkeypatch):
    _, catalog = check([])
    want = cells.encode_cells(cells.cached_evaluate(catalog))
    (entry,) = cache.glob("cells-*.json")
    data = entry.read_bytes()
    level = b'"supported"' if b'"supported"' in data else b'"unverified"'
    edited = data.replace(level, b'"refused"', 1)  # a runner's verdict, refused
    assert edited != data
    entry.write_bytes(edited)  # the MAC no longer verifies
    monkeypatch.setattr(cells, "_memo", {})
    assert cells.encode_cells(cells.cached_evaluate(catalog)) == want
    assert counted == [1, 1]
    monkeypatch.setattr(cells, "_memo", {})
    assert cells.encode_cells(cells.cached_evaluate(catalog)) == want
    assert counted == [1, 1]  # rewritten by the miss, read again


def test_the_cache_off_computes_every_time(cache, counted, monkeypatch):
    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", "off")
    catalog = load_catalog()
    cells.cached_evaluate(catalog)
    cells.cached_evaluate(catalog)
    assert counted == [1, 1] and not cache.exists()


def test_decode_refuses_what_encode_never_writes(cache):
    catalog = load_catalog()
    c = cells.evaluate(catalog, archs=cells._archs(catalog)[:2], engines=("vllm",))
    doc = cells.encode_cells(c)
    back = cells.decode_cells(doc)
    assert back.plans == c.plans and back.verdicts == c.verdicts and back.archs == c.archs and back.quants == c.quants
    assert list(back.plans) == list(c.plans) and list(back.verdicts) == list(c.verdicts)
    bad = [{**doc, "extra": 1}, {**doc, "archs": [1]}, {**doc, "verdict_table": [["supported", 3, None]]},
           {**doc, "verdicts": [[*doc["verdicts"][0][:4], len(doc["verdict_table"])]]},
           {**doc, "plans": [[*doc["plans"][0][:6], [["triton"]], None]]}, {**doc, "plans": [["sm90", "bf16"]]}, []]
    for d in bad:
        with pytest.raises((ValueError, TypeError, IndexError)):
            cells.decode_cells(d)
