"""Tests that kill mutants the first sampled mutation run (benchmarks/mutation.py --sample 50 --seed 19, issue 19;
mutmut 3.8.1 on the H200 machine, tree adba75b: benchmarks/results/mutation_sampled_h200_2026-12-02.json) left
surviving in moe_select.catalog_cache, catalog and lint.

Each test names the mutant(s) it kills as mutmut prints them (``module.x_function__mutmut_N``) and the change; the
expectations are worked out by hand from the inputs (file contents, paths, yamlio's messages, packages.yaml), not by
re-running the code under test. Each kill was verified by applying the mutant's diff to a scratch worktree of
2e72eda (the three modules are as at adba75b) and running this file: it fails.

Killed by a test file the run did not have (verified the same way; no second test here):

- catalog_cache.x_content_key__mutmut_18 (``stamp = None``), x_read_value__mutmut_24 (``decode(None)``),
  x_write_value__mutmut_19 (the entry's name ``None``), "no tests" in the run: killed by test_mutants_cache.py
  (test_a_value_is_written_as_documented_and_read_back and others). That file is in catalog_cache's TESTS list at
  adba75b, but it was not in the device's copy of the tree: the entry records ``"missing_tests":
  ["test_mutants_cache.py"]`` (resolver's likewise ``["test_mutants_resolver.py"]``), and mutation.py leaves a listed
  file that is not there out of mutmut's test selection, so mutmut's stats saw no test calling these three functions
  (no other selected file calls them; only moe_select.cells.cached_evaluate does). With that file selected, a local
  mutmut 3.8.1 run over these three names recorded 7, 6 and 6 tests calling content_key, read_value and write_value
  and killed all three.

Equivalent mutants (no input can tell them apart), one line each:

- catalog_cache.x__digest__mutmut_7 (``read_input(path, str(None), ...)``): read_input puts its ``display`` argument
  only into each Issue's ``file`` (moe_select/yamlio.py: ``Issue(name, 0, "", message)``, no message names it), and
  _digest returns the sha256 or ``"unreadable: "`` + the issues' messages, never their files.
- catalog_cache.x__secret__mutmut_31 (``O_NOFOLLOW`` dropped from the key's ``O_CREAT | O_EXCL`` open): with
  O_CREAT and O_EXCL set, open() fails with EEXIST on a symbolic link whatever it points to (POSIX open(); Linux
  does so, checked here for a dangling link with and without O_NOFOLLOW), so the flag changes nothing there.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ConfigDict

from moe_select import catalog_cache, lint
from moe_select.catalog import Catalog, default_catalog
from moe_select.located import Located
from moe_select.policy import Rule

TAG = "\0"


# ---------------------------------------------------------------------------------------------- catalog_cache
def _inputs(bundled: Path, rules: Path, backends: list[Path] | None = None) -> catalog_cache.Inputs:
    return catalog_cache.Inputs(backends_dir=bundled, rules_dir=rules, plugins=[], adapters={},
                                backends=backends or [], rules=[], env=("", ""))


def test_key_path_is_under_home_when_xdg_state_home_is_unset_or_relative(tmp_path, monkeypatch):
    """key_path's docstring: ``$XDG_STATE_HOME/moe-select/cache-key`` for an absolute ``$XDG_STATE_HOME``, else
    ``~/.local/state/moe-select/cache-key``. Kills catalog_cache.x_key_path__mutmut_12 (``Path.home() * ".local"``:
    a TypeError wherever the variable is unset or relative)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    default = tmp_path / "home" / ".local" / "state" / "moe-select" / "cache-key"
    assert catalog_cache.key_path() == default
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # not absolute: the XDG spec says ignore it
    assert catalog_cache.key_path() == default
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert catalog_cache.key_path() == tmp_path / "xdg" / "moe-select" / "cache-key"


def test_tree_says_why_a_listed_file_cannot_be_read(tmp_path):
    """_tree gives each ``.yaml``/``.yml``/``.json`` entry the sha256 of its bytes, or ``unreadable: `` and
    read_input's message for a "rule or capability file" (moe_select/yamlio.py), and other entries by name alone.
    Kills catalog_cache.x__digest__mutmut_9 (the kind upper-cased: ``RULE OR CAPABILITY FILE not found``)."""
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "a.yaml").write_bytes(b"rules: []\n")
    (folder / "b.yml").mkdir()  # a folder under a rule file's name
    (folder / "c.json").symlink_to(tmp_path / "nowhere.json")  # a link to a missing file
    (folder / "README").write_bytes(b"not read\n")
    assert catalog_cache._tree(folder) == [
        ("README",),
        ("a.yaml", hashlib.sha256(b"rules: []\n").hexdigest()),
        ("b.yml", "unreadable: the rule or capability file is a folder, not a file"),
        ("c.json", "unreadable: rule or capability file not found (a link to a missing file)"),
    ]


def test_the_bundled_capability_folders_path_is_part_of_the_key(tmp_path):
    """Two bundled capability folders with the same files at different paths give different keys: the catalog's
    models carry their files' paths (file:line marks), so one must not be served for the other (module doc: "the
    entries of every folder it lists" and where it is). Kills catalog_cache.x_catalog_key__mutmut_4
    (``str(inputs.backends_dir)`` -> ``str(None)``: only the folders' contents hashed)."""
    for side in ("a", "b"):
        (tmp_path / side / "backends").mkdir(parents=True)
        (tmp_path / side / "backends" / "x.yaml").write_bytes(b"runner: x\n")
    rules = tmp_path / "rules"  # the same (missing) rules folder for both
    key_a = catalog_cache.catalog_key(_inputs(tmp_path / "a" / "backends", rules))
    key_b = catalog_cache.catalog_key(_inputs(tmp_path / "b" / "backends", rules))
    assert key_a != key_b
    assert catalog_cache.catalog_key(_inputs(tmp_path / "a" / "backends", rules)) == key_a  # and it is stable


def test_an_operator_capability_folder_given_relative_is_keyed_by_its_absolute_path(tmp_path, monkeypatch):
    """``--backends ops`` from two working folders, each with an ``ops`` folder of the same files, names two
    folders: the key holds the argument as given and made absolute (module doc). Kills
    catalog_cache.x_catalog_key__mutmut_34 (``str(folder)`` -> ``str(None)``: both keys alike)."""
    for side in ("a", "b"):
        (tmp_path / side / "ops").mkdir(parents=True)
        (tmp_path / side / "ops" / "x.yaml").write_bytes(b"runner: x\n")
    inputs = _inputs(tmp_path / "bundled", tmp_path / "rules", [Path("ops")])
    monkeypatch.chdir(tmp_path / "a")
    key_a = catalog_cache.catalog_key(inputs)
    monkeypatch.chdir(tmp_path / "b")
    key_b = catalog_cache.catalog_key(inputs)
    assert key_a != key_b


@pytest.mark.parametrize("form", [
    {TAG: "x", "v": 1},  # no such tag
    {TAG: "t", "v": "ab"},  # a tuple whose items are not a list
    {TAG: "p", "v": 3},  # a path that is not a string
    {TAG: "c", "c": "moe_select.catalog.Other", "f": {}},  # a catalog of another class than the kind read
], ids=["tag", "tuple", "path", "kind"])
def test_a_tagged_object_of_no_known_form_is_refused(form):
    """The decoder's last refusal, for tagged objects that match no form of the module comment. Kills
    catalog_cache.x__decoder__mutmut_183 (the message ``None``) and _184 (``XXnot a value of a cached catalogXX``)."""
    with pytest.raises(ValueError) as exc:
        json.loads(json.dumps(form), object_hook=catalog_cache._decoder(Catalog))
    assert str(exc.value) == "not a value of a cached catalog"


class _Loose(Located):
    """A Located model that keeps unknown keys (moe_select's own models refuse them): the form has no place
    for them."""

    model_config = ConfigDict(extra="allow")
    a: int = 0


def test_a_model_with_extra_keys_is_not_cached(monkeypatch):
    """_encode refuses a model holding values besides its fields (``__pydantic_extra__``): they would be lost.
    content_key is then None (nothing cached). Kills catalog_cache.x__encode__mutmut_62 (``or`` -> ``and``: the
    extra keys checked only together with a field count that differs, so the model is encoded without them)."""
    loose = _Loose(a=1, b=2)
    assert loose.__pydantic_extra__ == {"b": 2}
    with pytest.raises(TypeError) as exc:
        catalog_cache._encode(loose, {})
    assert str(exc.value) == "_Loose: only fields and file:line marks can be cached"
    assert catalog_cache.content_key([loose], "demo") is None
    # without extra keys it has the model form: its one field, set (bit 0), the default marks
    assert catalog_cache._encode(_Loose(a=1), {}) == {
        TAG: "m", "c": f"{__name__}._Loose", "i": 0, "f": [1], "s": 1, "w": ["<input>", 0, [], []]}


def test_an_entry_is_written_through_a_hidden_temporary_file_named_for_its_kind(tmp_path, monkeypatch):
    """_write_document writes ``.<kind>-XXXX.tmp`` in the cache folder and renames it onto the entry: a writer killed
    before the rename leaves a hidden file that names its kind and never matches an entry's ``<kind>-*.json``.
    Kills catalog_cache.x__write_document__mutmut_33 (the prefix left out: tempfile's ``tmpXXXX.tmp``)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    folder = tmp_path / "cache"
    renamed: list[tuple[str, str]] = []
    replace = os.replace

    def spy(src: Any, dst: Any) -> None:
        renamed.append((Path(src).name, Path(dst).name))
        assert Path(src).parent == folder and Path(src).is_file()
        replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    catalog_cache._write_document(folder, "catalog-k1.json", catalog_cache.MAGIC, b"[]")
    catalog_cache._write_document(folder, "cells-k2.json", b"moe-select cells cache 1\n", b"[]")
    assert [dst for _, dst in renamed] == ["catalog-k1.json", "cells-k2.json"]
    (src1, _), (src2, _) = renamed
    assert src1.startswith(".catalog-") and src1.endswith(".tmp") and len(src1) > len(".catalog-.tmp")
    assert src2.startswith(".cells-") and src2.endswith(".tmp") and len(src2) > len(".cells-.tmp")
    assert sorted(p.name for p in folder.iterdir()) == ["catalog-k1.json", "cells-k2.json"]  # no temporary left


# ---------------------------------------------------------------------------------------------- catalog
def test_engine_package_is_the_row_of_the_engines_distribution():
    """By hand from backends/packages.yaml: the rows with ``engine:`` are vllm (engine vllm), sglang (engine sglang)
    and tensorrt-llm (module tensorrt_llm, engine trtllm); no engine, or one no row names, has none. Kills
    catalog.xǁCatalogǁengine_package__mutmut_1 (``if (engine) and False``: always None)."""
    cat = default_catalog()
    rows = {e: cat.engine_package(e) for e in ("vllm", "sglang", "trtllm")}
    assert {e: (p.name, p.module, p.engine) for e, p in rows.items() if p is not None} == {
        "vllm": ("vllm", "vllm", "vllm"), "sglang": ("sglang", "sglang", "sglang"),
        "trtllm": ("tensorrt-llm", "tensorrt_llm", "trtllm")}
    assert cat.engine_package(None) is None and cat.engine_package("") is None
    assert cat.engine_package("no-such-engine") is None


# ---------------------------------------------------------------------------------------------- lint
def _rule(**fields: Any) -> Rule:
    return Rule.model_validate(fields)


def test_choice_reads_rules_of_arch_and_quant_and_skips_those_naming_more():
    """lint.choice looks only at rules whose ``when`` names nothing but arch and quant. By hand from
    backends/torch_grouped_mm.yaml and torch_native.yaml (both list bf16 on sm90): a prefer or disable rule that
    also names the engine is skipped, one naming arch and quant is read. Kills lint.x__only_arch_quant__mutmut_5
    (``"XXquantXX"``) and _6 (``"QUANT"``): every rule naming quant skipped, so no choice at all."""
    cat = default_catalog()
    aq = _rule(id="aq", when={"arch": ["sm90"], "quant": ["bf16"]}, prefer=["torch_grouped_mm", "torch_native"])
    by_engine = _rule(id="eng", when={"engine": ["vllm"], "quant": ["bf16"]}, prefer=["torch_native"])
    assert lint.choice(cat, [by_engine, aq], "sm90", "bf16") == ("torch_grouped_mm", "aq")
    disable_q = _rule(id="dq", when={"quant": ["bf16"]}, disable=["torch_grouped_mm"], reason="test")
    assert lint.choice(cat, [disable_q, aq], "sm90", "bf16") == ("torch_native", "aq")
    disable_e = _rule(id="de", when={"engine": ["vllm"], "quant": ["bf16"]}, disable=["torch_grouped_mm"],
                      reason="test")
    assert lint.choice(cat, [disable_e, aq], "sm90", "bf16") == ("torch_grouped_mm", "aq")
    assert lint.choice(cat, [by_engine], "sm90", "bf16") is None
