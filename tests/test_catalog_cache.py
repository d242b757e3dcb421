"""The on-disk catalog cache (moe_select.catalog_cache) is never stale and never changes an answer: an edit
to a capability or rule file, an operator rules folder, a file added to a folder, a different plugin set
each give a catalog validated from the files; errors are load_catalog's own, every time; a cache folder
that cannot be written, or that others could write, is simply not used; an entry is JSON data under an
HMAC whose key lives outside the cache folder: a planted entry runs no code and a forged one changes no
answer (issue 17, row 5)."""
from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import stat
import threading
from pathlib import Path

import pytest

from moe_select import catalog as catmod
from moe_select import catalog_cache
from moe_select.catalog import bundled_dirs, cached_load_catalog, load_catalog
from moe_select.errors import InputError

RULE = """\
schema_version: 1
rules:
  - id: site-prefers-triton
    when: {{arch: [sm90]}}
    prefer: [{runner}]
"""


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", str(folder))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the entries' key: this test's own
    monkeypatch.delenv("MOE_SELECT_RULES", raising=False)
    monkeypatch.delenv("MOE_SELECT_BACKENDS", raising=False)
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


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("catalog-*.json"))


def _no_load(monkeypatch) -> None:
    def refuse(*a, **k):
        raise AssertionError("load_catalog was called: the cache was not used")

    monkeypatch.setattr(catmod, "load_catalog", refuse)


def test_a_second_load_is_read_from_the_cache_and_equals_a_fresh_load(cache, monkeypatch):
    first = cached_load_catalog()
    assert len(_entries(cache)) == 1
    fresh = load_catalog()
    with monkeypatch.context() as m:
        _no_load(m)
        again = cached_load_catalog()
    assert again == fresh and again.files == fresh.files and again.rules == fresh.rules and again.origins == fresh.origins
    assert [r.where() for r in again.rules] == [r.where() for r in fresh.rules]  # file:line marks survive
    assert again.runners["triton"].support[0].where() == fresh.runners["triton"].support[0].where()
    assert first == fresh
    if hasattr(os, "getuid"):
        assert (cache.stat().st_mode & 0o777) == 0o700


def test_explain_over_a_cached_catalog_gives_the_same_report(cache):
    import moe_select

    dep = {"gpu": "H100", "quant": "fp8_block", "tp": 8, "ep": 1, "model": {
        "num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
        "routing": "renormalize"}}
    cached_load_catalog()
    cached = moe_select.explain(dep, catalog=cached_load_catalog())
    fresh = moe_select.explain(dep, catalog=load_catalog())
    assert cached.to_dict() == fresh.to_dict()


def test_an_edit_to_a_capability_file_invalidates(cache, bundled_copy, monkeypatch):
    b, _ = bundled_copy
    before = cached_load_catalog()
    f = b / "triton.yaml"
    text = f.read_text()
    assert "summary: " in text
    f.write_text(text.replace("summary: ", "summary: EDITED ", 1))
    after = cached_load_catalog()
    assert after.runners["triton"].summary.startswith("EDITED ") and not before.runners["triton"].summary.startswith("EDITED ")
    assert after == load_catalog() and after.files["backends/triton.yaml"] != before.files["backends/triton.yaml"]
    assert len(_entries(cache)) == 2
    # the same bytes again: the first entry is valid again, and is read
    f.write_text(text)
    with monkeypatch.context() as m:
        _no_load(m)
        assert cached_load_catalog() == before


def test_an_edit_to_an_a2a_file_and_a_new_file_invalidate(cache, bundled_copy):
    b, _ = bundled_copy
    before = cached_load_catalog()
    (b / "a2a" / "deepep.yaml").write_text((b / "a2a" / "deepep.yaml").read_text().replace("summary: ", "summary: EDITED ", 1))
    assert cached_load_catalog().a2a["deepep"].summary.startswith("EDITED ")
    shutil.copy(b / "a2a" / "deepep.yaml", b / "a2a" / "deepep_copy.yaml")  # a new file: a name that must match its a2a
    with pytest.raises(InputError) as exc:
        cached_load_catalog()
    assert "deepep_copy" in str(exc.value)
    (b / "a2a" / "deepep_copy.yaml").unlink()
    assert cached_load_catalog().a2a.keys() == before.a2a.keys()


def test_errors_are_load_catalogs_own_and_never_cached(cache, bundled_copy):
    b, _ = bundled_copy
    cached_load_catalog()
    n = len(_entries(cache))
    f = b / "triton.yaml"
    f.write_text(re.sub(r"^(schema_version: \d+)$", r"\1\nbogus_key: 1", f.read_text(), count=1, flags=re.M))
    with pytest.raises(InputError) as cached_err:
        cached_load_catalog()
    with pytest.raises(InputError) as fresh_err:
        load_catalog()
    assert [str(i) for i in cached_err.value.issues] == [str(i) for i in fresh_err.value.issues]
    assert any("backends/triton.yaml:" in str(i) and "bogus_key" in str(i) for i in cached_err.value.issues)
    with pytest.raises(InputError):
        cached_load_catalog()  # again from the files, not from a cache
    assert len(_entries(cache)) == n


def test_an_operator_rules_folder_is_in_the_key(cache, tmp_path, monkeypatch):
    rules = tmp_path / "oprules"
    rules.mkdir()
    (rules / "50-site.yaml").write_text(RULE.format(runner="triton"))
    plain = cached_load_catalog()
    with_rules = cached_load_catalog([rules])
    assert "site-prefers-triton" not in {r.id for r in plain.rules}
    assert with_rules.rules[0].id == "site-prefers-triton" and with_rules.rules[0].prefer == ["triton"]
    (rules / "50-site.yaml").write_text(RULE.format(runner="torch_native"))
    assert cached_load_catalog([rules]).rules[0].prefer == ["torch_native"]
    (rules / "60-more.yml").write_text(RULE.format(runner="triton").replace("site-prefers-triton", "more"))
    assert {"site-prefers-triton", "more"} <= {r.id for r in cached_load_catalog([rules]).rules}
    assert cached_load_catalog([rules]) == load_catalog([rules])
    # the same folder through the environment variable, and a rules file given alone
    monkeypatch.setenv("MOE_SELECT_RULES", str(rules))
    assert cached_load_catalog() == load_catalog()
    monkeypatch.delenv("MOE_SELECT_RULES")
    one = rules / "50-site.yaml"
    assert cached_load_catalog([one]) == load_catalog([one])
    one.write_text(RULE.format(runner="cutlass"))
    assert cached_load_catalog([one]).rules[0].prefer == ["cutlass"]


def test_a_relative_rules_folder_resolves_against_the_working_directory(cache, tmp_path, monkeypatch):
    for name, runner in (("a", "triton"), ("b", "torch_native")):
        (tmp_path / name / "rules").mkdir(parents=True)
        (tmp_path / name / "rules" / "50-site.yaml").write_text(RULE.format(runner=runner))
    monkeypatch.chdir(tmp_path / "a")
    assert cached_load_catalog(["rules"]).rules[0].prefer == ["triton"]
    monkeypatch.chdir(tmp_path / "b")
    got = cached_load_catalog(["rules"])
    assert got.rules[0].prefer == ["torch_native"] and got.rule_sources == [str(tmp_path / "b" / "rules")]


def test_an_operator_capability_folder_is_in_the_key(cache, tmp_path):
    folder = tmp_path / "caps"
    (folder / "a2a").mkdir(parents=True)
    bdir, _ = bundled_dirs()
    text = (bdir / "torch_native.yaml").read_text().replace("runner: torch_native", "runner: site_runner")
    (folder / "site_runner.yaml").write_text(text)
    got = cached_load_catalog(backends_dirs=[folder])
    assert "site_runner" in got.runners and got == load_catalog(backends_dirs=[folder])
    (folder / "site_runner.yaml").write_text(text.replace("summary: ", "summary: EDITED ", 1))
    assert cached_load_catalog(backends_dirs=[folder]).runners["site_runner"].summary.startswith("EDITED ")


def test_plugins_are_in_the_key(cache, tmp_path, monkeypatch):
    plain = cached_load_catalog()
    monkeypatch.setattr(catmod, "plugin_adapters", lambda: {"deep_gemm": "my_plugin"})
    assert cached_load_catalog().plugins == {"deep_gemm": "my_plugin"}
    monkeypatch.setattr(catmod, "plugin_adapters", lambda: {})
    assert cached_load_catalog() == plain


def test_the_key_covers_every_file_load_catalog_reads(cache, tmp_path, monkeypatch):
    """A guard for changes to load_catalog: every file it reads is hashed into the key."""
    rules = tmp_path / "oprules"
    rules.mkdir()
    (rules / "50-site.yaml").write_text(RULE.format(runner="triton"))
    caps = tmp_path / "caps"
    (caps / "a2a").mkdir(parents=True)
    (caps / "a2a" / "deepep.yaml").write_bytes((catmod.bundled_dirs()[0] / "a2a" / "deepep.yaml").read_bytes())
    read, hashed = set(), set()
    real_read, real_digest = catmod.read_input, catalog_cache._digest

    def spy_read(path, *a, **k):
        read.add(Path(path).resolve())
        return real_read(path, *a, **k)

    def spy_digest(path):
        hashed.add(Path(path).resolve())
        return real_digest(path)

    monkeypatch.setattr(catmod, "read_input", spy_read)
    monkeypatch.setattr(catalog_cache, "_digest", spy_digest)
    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", "off")
    load_catalog([rules], backends_dirs=[caps])
    catalog_cache.catalog_key(catmod._inputs((str(rules),), (str(caps),)))
    assert read and read <= hashed, sorted(read - hashed)


def test_an_unwritable_cache_folder_is_not_used(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", str(blocker / "cache"))
    assert cached_load_catalog() == load_catalog()
    assert cached_load_catalog() == load_catalog()
    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", "off")
    assert catalog_cache.cache_dir() is None and cached_load_catalog() == load_catalog()


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_a_cache_folder_others_can_write_is_not_read(cache, monkeypatch):
    cached_load_catalog()
    os.chmod(cache, 0o777)
    calls = []
    real = catmod.load_catalog
    monkeypatch.setattr(catmod, "load_catalog", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert cached_load_catalog() == real()
    assert calls == [1]


def test_a_damaged_or_foreign_entry_is_a_miss(cache, monkeypatch):
    good = cached_load_catalog()
    (entry,) = _entries(cache)
    entry.write_bytes(b"not an entry")
    assert cached_load_catalog() == good
    (entry,) = _entries(cache)
    # a catalog of other inputs, under this key's name, correctly authenticated: its own key does not match
    other = _document(entry)
    other[1] = "another key"
    _store(entry, other, catalog_cache._secret(create=False))
    calls = []
    real = catmod.load_catalog
    monkeypatch.setattr(catmod, "load_catalog", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert cached_load_catalog() == good and calls == [1]


def test_old_entries_are_pruned(cache, bundled_copy, monkeypatch):
    b, _ = bundled_copy
    monkeypatch.setattr(catalog_cache, "KEEP", 3)
    f = b / "triton.yaml"
    text = f.read_text()
    for i in range(5):
        f.write_text(text.replace("summary: ", f"summary: v{i} ", 1))
        assert cached_load_catalog().runners["triton"].summary.startswith(f"v{i} ")
    assert len(_entries(cache)) == 3


# --------------------------------------------------------------------------- issue 17, row 5: planted and forged entries
def _document(entry: Path) -> list:
    """The JSON document of a cache entry (after MAGIC and the MAC line)."""
    data = entry.read_bytes()
    assert data.startswith(catalog_cache.MAGIC)
    return json.loads(data[len(catalog_cache.MAGIC):].partition(b"\n")[2])


def _store(entry: Path, document: list, secret: bytes) -> None:
    """Write ``document`` as an entry authenticated with ``secret``, as the cache writes one."""
    raw = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
    entry.write_bytes(catalog_cache.MAGIC + catalog_cache._mac(secret, raw) + b"\n" + raw)


def _key() -> str:
    return catalog_cache.catalog_key(catmod._inputs((), ()))


def _counting(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = catmod.load_catalog
    monkeypatch.setattr(catmod, "load_catalog", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


class _RunsCode:
    """Unpickling this runs ``os.mkdir(marker)``: what a planted pickle can do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_a_planted_pickle_runs_no_code(cache, tmp_path, monkeypatch):
    """Issue 17 row 5: a file planted in the cache folder (another container running as root that shares the
    mounted cache passes the owner/mode checks) ran its code during explain/plan. Now it is never unpickled:
    the catalog comes from the files, and the planted code did not run."""
    fresh = load_catalog()
    key = _key()
    marker = tmp_path / "the-planted-code-ran"
    cache.mkdir(mode=0o700)
    payload = pickle.dumps({"key": key, "catalog": _RunsCode(marker)})
    for name in (f"catalog-{key}.pickle", f"catalog-{key}.json"):  # the old entry's name and the new one's
        (cache / name).write_bytes(payload)
    calls = _counting(monkeypatch)
    assert cached_load_catalog() == fresh
    assert not marker.exists() and calls == [1]
    # a JSON document planted under the entry's name, with the right shape, but no MAC of this machine's key
    (cache / f"catalog-{key}.json").write_bytes(catalog_cache.MAGIC + b"0" * 64 + b"\n" + json.dumps([2, key, None]).encode())
    assert cached_load_catalog() == fresh and calls == [1, 1]


def _forge(document: list) -> tuple[list, str]:
    """The document with the first rule's line changed (what a forged entry would make explain cite)."""
    forged = json.loads(json.dumps(document))
    rules = forged[2]["f"]["rules"]
    first = rules[0] if rules[0][catalog_cache.TAG] == "m" else None
    assert first is not None and first["c"] == "moe_select.policy.Rule"
    first["w"][1] += 100
    return forged, f"{first['w'][0]}:{first['w'][1]}"


def test_a_forged_entry_is_a_miss_and_never_an_answer(cache, tmp_path, monkeypatch):
    """Issue 17 row 5: an entry whose content differs from the files (a rule's line moved), under the right
    key, is a miss: explain cites the rule line the files say. The forgery is well formed (with this
    machine's key it would be read: the last step shows it), so only the MAC stops it."""
    dep = {"gpu": "H100", "quant": "bf16", "tp": 1, "ep": 1, "model": {
        "num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
        "routing": "renormalize"}}
    import moe_select

    fresh = load_catalog()
    truth = moe_select.explain(dep, catalog=fresh).to_dict()
    cached_load_catalog()
    (entry,) = _entries(cache)
    forged, cited = _forge(_document(entry))
    calls = _counting(monkeypatch)

    # 1. the real entry, edited in place (its MAC left as it was)
    data = entry.read_bytes()
    mac_line = data[len(catalog_cache.MAGIC):].partition(b"\n")[0]
    raw = json.dumps(forged, ensure_ascii=False, separators=(",", ":")).encode()
    entry.write_bytes(catalog_cache.MAGIC + mac_line + b"\n" + raw)
    got = cached_load_catalog()
    assert got == fresh and got.rules[0].where() == fresh.rules[0].where() != cited and calls == [1]
    assert moe_select.explain(dep, catalog=got).to_dict() == truth

    # 2. the forgery authenticated with a key that is not this machine's (another container's)
    _store(entry, forged, b"k" * 32)
    assert cached_load_catalog() == fresh and calls == [1, 1]

    # 3. the forgery is well formed: signed with this machine's key it is read (and cited), no load
    assert forged[1] == _key(), "the package's files changed during the test (the key names every module's hash)"
    _store(entry, forged, catalog_cache._secret(create=False))
    hit = cached_load_catalog()
    assert hit.rules[0].where() == cited and calls == [1, 1]


def test_an_entry_is_json_data_and_the_key_is_kept_apart(cache):
    cached_load_catalog()
    (entry,) = _entries(cache)
    key = _key()
    assert entry.name == f"catalog-{key}.json"
    document = _document(entry)
    assert document[:2] == [2, key] and document[2][catalog_cache.TAG] == "c"
    kp = catalog_cache.key_path()
    assert cache not in kp.parents and kp.read_bytes() and len(kp.read_bytes()) == 32
    if hasattr(os, "getuid"):
        assert stat.S_IMODE(kp.stat().st_mode) == 0o600 and stat.S_IMODE(kp.parent.stat().st_mode) == 0o700


def test_a_cache_folder_that_holds_the_key_is_not_used(tmp_path, monkeypatch):
    """Whoever writes entries must not read the key: a cache folder that is the key's folder, or holds it,
    is not used (every load from the files, nothing written)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    calls = _counting(monkeypatch)
    for folder in (tmp_path / "state" / "moe-select", tmp_path / "state", tmp_path):
        monkeypatch.setenv("MOE_SELECT_CACHE_DIR", str(folder))
        cached_load_catalog()
        cached_load_catalog()
        assert not list(folder.glob("catalog-*"))
    assert len(calls) == 6


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_a_fifo_planted_as_an_entry_does_not_hang_the_load(cache, monkeypatch):
    fresh = load_catalog()
    cache.mkdir(mode=0o700)
    os.mkfifo(cache / f"catalog-{_key()}.json")
    os.mkfifo(cache / f"catalog-{_key()}.pickle")
    got: list = []
    t = threading.Thread(target=lambda: got.append(cached_load_catalog()), daemon=True)
    t.start()
    t.join(timeout=60)
    if t.is_alive():  # the old reader blocked in open(): let it go, then fail
        for name in (f"catalog-{_key()}.json", f"catalog-{_key()}.pickle"):
            try:
                os.close(os.open(cache / name, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        t.join(timeout=10)
        pytest.fail("reading the cache blocked on a FIFO planted under an entry's name")
    assert got == [fresh]


def test_an_empty_cache_dir_variable_is_an_error_naming_it(cache, monkeypatch):
    """Issue 17 row 7: MOE_SELECT_CACHE_DIR="" silently meant the default folder."""
    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", "")
    with pytest.raises(InputError) as exc:
        cached_load_catalog()
    assert "$MOE_SELECT_CACHE_DIR" in str(exc.value) and "empty" in str(exc.value)
