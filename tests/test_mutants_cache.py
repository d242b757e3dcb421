"""Tests that kill the mutants the mutation run (benchmarks/mutation.py, issue 19; mutmut 3.8.1 at bc97a02) left
surviving in moe_select.catalog_cache, or that reached no selected test ("no tests": ``content_key``,
``_same_code``, ``read_value`` and ``write_value``, which only ``moe_select.cells.cached_evaluate`` calls).

Each test names the mutants it kills as mutmut prints them (``x_function__mutmut_N``, all of
``moe_select.catalog_cache``); the expectations are written out by hand (entry bytes, JSON forms, sha256 and HMAC
computed here from the bytes the test wrote), not by re-running the code under test. Verified by applying each of
the 118 (39 survived, 79 no tests) to a scratch worktree of 4f1f78a and running this file: 112 fail it, the six
below pass.

Equivalent mutants (no input can tell them apart), one line each:

- x__decoder__mutmut_6 (``getattr(cls, "__private_attributes__", None)``) and x__decoder__mutmut_9 (the default
  left out): every class ``_model_classes`` returns is a pydantic model (a Located subclass), and pydantic's
  metaclass gives every model class ``__private_attributes__``, so the default is never read.
- x_content_key__mutmut_3 and x_write_value__mutmut_7 (``ensure_ascii=None``), x_content_key__mutmut_4 and
  x_write_value__mutmut_8 (``allow_nan=None``): json reads both flags by their truth (``if self.ensure_ascii``,
  ``if not allow_nan``; the C encoder parses allow_nan as a predicate), and None is false as False is.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import sys
from pathlib import Path

import packaging
import pydantic
import pydantic_core
import pytest

import moe_select
from moe_select import catalog_cache
from moe_select.catalog import Catalog
from moe_select.vocabulary import EngineEntry

TAG = "\0"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache folder and an HMAC key of this test's own; this process has stamped no code yet."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", str(folder))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(catalog_cache, "_stamps", [])
    return folder


def _engine_form(**change) -> dict:
    """The JSON form of one EngineEntry model (module comment of catalog_cache: tag "m"), read at
    vocabulary.yaml line 4 (its name at line 4, its source at line 5), both fields set."""
    form = {TAG: "m", "c": "moe_select.vocabulary.EngineEntry", "i": 0, "f": ["vllm", "x"], "s": 3,
            "w": ["vocabulary.yaml", 4, ["name", 4, "source", 5], []]}
    form.update(change)
    return form


def _decode(text: str):
    return json.loads(text, object_hook=catalog_cache._decoder(Catalog))


# ---------------------------------------------------------------------------------------------- _decoder, _pairs
def test_a_models_form_decodes_into_the_model_with_its_marks():
    """The well-formed form the refusals below start from: it decodes, with its fields, set fields and marks."""
    got = _decode(json.dumps(_engine_form()))
    assert type(got) is EngineEntry and (got.name, got.source) == ("vllm", "x")
    assert got.model_fields_set == {"name", "source"}
    assert (got.where(), got.where("source"), got.source_of("name")) == ("vocabulary.yaml:4", "vocabulary.yaml:5",
                                                                          "vocabulary.yaml:4")
    half = _decode(json.dumps(_engine_form(s=2)))  # bit 1: source only
    assert half.model_fields_set == {"source"}


MALFORMED = [
    # (what, the form (or a list of forms), the mutants it kills)
    ("the same number twice", [_engine_form(), _engine_form()], "42"),
    ("a number that is a string", _engine_form(i="0"), "42"),
    ("a line that is a string", _engine_form(w=["vocabulary.yaml", "4", [], []]), "43"),
    ("a file that is a number", _engine_form(w=[7, 4, [], []]), "44"),
    ("five marks", _engine_form(w=["vocabulary.yaml", 4, [], [], "x"]), "45"),
    ("marks that are a tuple", _engine_form(w={TAG: "t", "v": ["vocabulary.yaml", 4, [], []]}), "46"),
    ("a set-fields bit beyond the fields", _engine_form(s=4), "47, 48"),
    ("set fields that are a boolean", _engine_form(s=True), "49"),
    ("three values for two fields", _engine_form(f=["vllm", "x", "y"]), "50"),
    ("values that are a tuple", _engine_form(f={TAG: "t", "v": ["vllm", "x"]}), "51"),
]


@pytest.mark.parametrize("what, form, mutants", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_models_form_that_is_not_exactly_its_fields_and_marks_is_refused_naming_the_class(what, form, mutants):
    """Kills x__decoder__mutmut_42 ... _51 (each ``or`` of the refusal turned into ``and``: the mutant builds the
    model from the form named in MALFORMED) and x__decoder__mutmut_73 (the message ``None``)."""
    with pytest.raises(ValueError) as exc:
        _decode(json.dumps(form))
    assert str(exc.value) == "moe_select.vocabulary.EngineEntry: not this class's fields and marks"


def test_a_models_form_with_an_extra_key_is_not_a_value_of_a_catalog():
    """Kills x__decoder__mutmut_24 (``tag == "m" and len(d) == 6`` -> ``or``: a model form of 7 keys would be read
    as a model, the extra key ignored)."""
    with pytest.raises(ValueError) as exc:
        _decode(json.dumps(_engine_form(x=1)))
    assert str(exc.value) == "not a value of a cached catalog"


@pytest.mark.parametrize("flat", [[1, 2, 3], ["a"]])
def test_pairs_refuses_a_list_of_odd_length(flat):
    """Kills x__pairs__mutmut_1 (``or`` -> ``and``: a list of odd length would lose its last item) and
    x__pairs__mutmut_6, _7, _8 (the message None, ``XX..XX``, upper case)."""
    with pytest.raises(ValueError) as exc:
        catalog_cache._pairs(flat)
    assert str(exc.value) == "not a list of pairs"
    assert catalog_cache._pairs(["a", 1, "b", 2]) == {"a": 1, "b": 2} and catalog_cache._pairs([]) == {}


def _inputs(tmp_path: Path) -> catalog_cache.Inputs:
    return catalog_cache.Inputs(backends_dir=tmp_path / "b", rules_dir=tmp_path / "r", plugins=[], adapters={},
                                backends=[], rules=[], env=("", ""))


def test_a_kind_that_is_not_a_dataclass_is_cached_too(cache, tmp_path):
    """load_cached's ``kind`` is any class: a model (not a dataclass) is stored, and read back by the next call
    with its fields and marks. Kills x__decoder__mutmut_16 (``dataclasses.fields(kind)`` for every kind: a
    TypeError for a model, so every read a miss and ``load`` called again)."""
    model = _decode(json.dumps(_engine_form()))
    calls: list[int] = []

    def load() -> EngineEntry:
        calls.append(1)
        return model

    first = catalog_cache.load_cached(lambda: _inputs(tmp_path), load, EngineEntry)
    again = catalog_cache.load_cached(lambda: _inputs(tmp_path), load, EngineEntry)
    assert first is model and calls == [1] and len(list(cache.glob("catalog-*.json"))) == 1
    assert type(again) is EngineEntry and again is not model and again == model
    assert again.where("source") == "vocabulary.yaml:5"


# ---------------------------------------------------------------------------------------------- _rule_path
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_rule_path_records_the_argument_as_given_its_absolute_path_and_what_is_there(tmp_path, monkeypatch):
    """What the key hashes for each ``--rules`` argument (module doc: "the arguments as given and made absolute"
    and the sha256 of every file). Kills x__rule_path__mutmut_2 ... _5 (a file: the argument, the path, "file"),
    _7 ... _10 (a folder), _12 ... _19 (something else there, or nothing: "exists" / "missing", always one or the
    other), _20 ... _23 (a path the OS refuses: the argument, "unreadable", the OS's message)."""
    monkeypatch.chdir(tmp_path)
    here = os.getcwd()  # tmp_path with any link in it resolved, as Path.absolute() sees it
    text = b"schema_version: 1\nrules: []\n"
    (tmp_path / "site.yaml").write_bytes(text)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "50-a.yaml").write_bytes(text + b"# a\n")
    (tmp_path / "rules" / "README").write_bytes(b"not read\n")
    os.mkfifo(tmp_path / "pipe")
    sha = hashlib.sha256(text).hexdigest()
    sha_a = hashlib.sha256(text + b"# a\n").hexdigest()
    assert catalog_cache._rule_path(Path("site.yaml")) == ["site.yaml", f"{here}/site.yaml", "file", sha]
    assert catalog_cache._rule_path(Path("rules")) == ["rules", f"{here}/rules", "folder",
                                                       [("50-a.yaml", sha_a), ("README",)]]
    assert catalog_cache._rule_path(Path("pipe")) == ["pipe", f"{here}/pipe", "exists"]
    assert catalog_cache._rule_path(Path("gone.yaml")) == ["gone.yaml", f"{here}/gone.yaml", "missing"]
    long = "x" * 300  # longer than a file name may be (255 bytes): stat fails with ENAMETOOLONG
    assert catalog_cache._rule_path(Path(long)) == [
        long, "unreadable", f"[Errno {errno.ENAMETOOLONG}] {os.strerror(errno.ENAMETOOLONG)}: '{here}/{long}'"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_a_rules_path_that_is_something_else_and_one_that_is_missing_give_different_keys(tmp_path, monkeypatch):
    """The key tells a FIFO given as ``--rules`` from nothing there. Kills x__rule_path__mutmut_14 and _15 (both
    "missing", or both "exists")."""
    monkeypatch.chdir(tmp_path)

    def key() -> str:
        return catalog_cache.catalog_key(catalog_cache.Inputs(
            backends_dir=tmp_path / "b", rules_dir=tmp_path / "r", plugins=[], adapters={}, backends=[],
            rules=[Path("r.yaml")], env=("", "")))

    missing = key()
    os.mkfifo(tmp_path / "r.yaml")
    assert key() != missing


# ---------------------------------------------------------------------------------------------- content_key
def _code_stamp_by_hand() -> list[tuple[str, str]]:
    here = Path(moe_select.__file__).parent
    return [(p.name, hashlib.sha256(p.read_bytes()).hexdigest()) for p in sorted(here.glob("*.py"))]


def _catalog() -> list:
    """A small "catalog": one model, a non-ASCII string, a float."""
    return [_decode(json.dumps(_engine_form())), {"name": "é", "sizes": [1, 2.5]}]


#: Its JSON form (catalog_cache's module comment), compact, UTF-8, written out by hand.
CATALOG_DOCUMENT = ('[{"\\u0000":"m","c":"moe_select.vocabulary.EngineEntry","i":0,"f":["vllm","x"],"s":3,'
                    '"w":["vocabulary.yaml",4,["name",4,"source",5],[]]},{"name":"é","sizes":[1,2.5]}]').encode()


def test_content_key_is_the_sha256_of_the_catalogs_form_kind_code_and_versions(cache):
    """content_key's docstring: the sha256 over the catalog's JSON form (its entry's: compact, UTF-8), the kind,
    moe_select's version and every module's sha256, and the Python, pydantic, pydantic-core and packaging versions.
    Kills x_content_key__mutmut_1, _2, _5 ... _7, _9 ... _14, _16 ... _18, _21 ... _24 (no document, ``null`` for
    every catalog, other separators, ASCII escapes, no memo (a model's form needs one), no stamp, no parts)."""
    parts = [1, "demo", moe_select.__version__, sys.version, pydantic.VERSION, pydantic_core.__version__,
             packaging.__version__, _code_stamp_by_hand(), hashlib.sha256(CATALOG_DOCUMENT).hexdigest()]
    assert catalog_cache.content_key(_catalog(), "demo") == hashlib.sha256(repr(parts).encode()).hexdigest()
    assert catalog_cache.content_key(_catalog(), "other") != catalog_cache.content_key(_catalog(), "demo")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "\ud800"], ids=["nan", "inf", "lone surrogate"])
def test_what_the_form_cannot_hold_has_no_key_and_is_never_stored(cache, value):
    """The form is UTF-8 JSON: no NaN or infinity, no lone surrogate. content_key is None (nothing cached) and
    write_value stores nothing. Kills x_content_key__mutmut_7, _8, _14, _15 and x_write_value__mutmut_11, _12, _14,
    _15 (NaN allowed, or ASCII escapes that would hold the surrogate)."""
    assert catalog_cache.content_key({"name": "a", "value": value}, "demo") is None
    key = catalog_cache.content_key({"name": "a"}, "demo")
    assert key is not None
    catalog_cache.write_value("demo", key, {"value": value})
    assert not cache.exists()
    assert catalog_cache.read_value("demo", key, lambda v: v) is None


# ---------------------------------------------------------------------------------------------- write_value, read_value
def _magic(kind: str) -> bytes:
    return f"moe-select {kind} cache 1\n".encode()


def _secret(tmp_path: Path) -> bytes:
    data = (tmp_path / "state" / "moe-select" / "cache-key").read_bytes()
    assert len(data) == 32
    return data


def _sign(folder: Path, secret: bytes, kind: str, key: str, document: bytes) -> None:
    """Write ``document`` as the entry ``key`` of ``kind``, authenticated with ``secret``, by hand (module
    comment: the first line, the HMAC-SHA256 in hex over the first line and the document, a newline, the document)."""
    mac = hmac.new(secret, _magic(kind) + document, hashlib.sha256).hexdigest().encode()
    (folder / f"{kind}-{key}.json").write_bytes(_magic(kind) + mac + b"\n" + document)


def test_a_value_is_written_as_documented_and_read_back(cache, tmp_path):
    """The entry ``demo-<key>.json``: ``moe-select demo cache 1``, the MAC, then ``[1, kind, key, value]`` as compact
    UTF-8 JSON; read_value gives the value back. Kills x_write_value__mutmut_1, _3 ... _6, _9 ... _11, _13, _14, _16 ...
    _26 (nothing written, another document or magic, other separators, ASCII escapes), x_read_value__mutmut_1, _3 ...
    _15, _18 ... _25 (nothing read, or another item than the value), x_content_key__mutmut_18 ... _20 (the process's
    code not stamped: nothing read or written) and x__same_code__mutmut_2 ... _4."""
    key = catalog_cache.content_key(_catalog(), "demo")
    assert key is not None
    value = {"name": "é", "n": [1, 2.5, None, True]}
    catalog_cache.write_value("demo", key, value)
    assert [p.name for p in cache.iterdir()] == [f"demo-{key}.json"]
    document = f'[1,"demo","{key}",{{"name":"é","n":[1,2.5,null,true]}}]'.encode()
    mac = hmac.new(_secret(tmp_path), _magic("demo") + document, hashlib.sha256).hexdigest().encode()
    assert (cache / f"demo-{key}.json").read_bytes() == b"moe-select demo cache 1\n" + mac + b"\n" + document
    assert catalog_cache.read_value("demo", key, lambda v: v) == value
    assert catalog_cache.read_value("demo", key, lambda v: ("decoded", v["n"][1])) == ("decoded", 2.5)
    assert catalog_cache.read_value("other", key, lambda v: v) is None  # another kind: another file
    # an entry signed here by hand, with this machine's key, reads the same way
    _sign(cache, _secret(tmp_path), "demo", key, f'[1,"demo","{key}",{{"a":1}}]'.encode())
    assert catalog_cache.read_value("demo", key, lambda v: v) == {"a": 1}


def test_an_authenticated_entry_of_another_shape_or_key_is_a_miss(cache, tmp_path):
    """Only ``[1, kind, key, value]`` of this kind and key is read. Kills x_read_value__mutmut_16 (a fifth item
    would be accepted) and _17 (any list: another key's or kind's entry under this name would be read)."""
    key = catalog_cache.content_key(_catalog(), "demo")
    assert key is not None
    catalog_cache.write_value("demo", key, {"a": 0})  # the folder and this machine's key
    secret = _secret(tmp_path)
    for document in (f'[1,"demo","{key}",{{"a":1}},"extra"]', '[1,"demo","another key",{"a":1}]',
                     f'[1,"other","{key}",{{"a":1}}]', f'[2,"demo","{key}",{{"a":1}}]'):
        _sign(cache, secret, "demo", key, document.encode())
        assert catalog_cache.read_value("demo", key, lambda v: v) is None, document


def test_nothing_is_read_or_written_once_the_code_on_disk_changed(cache, tmp_path, monkeypatch):
    """An entry's value may be another code's answer: once the package's modules on disk differ from those this
    process stamped, read_value reads nothing and write_value writes nothing. Kills x__same_code__mutmut_1
    (``or``: any stamp would do), x_read_value__mutmut_2 and x_write_value__mutmut_2 (``and``: the check
    skipped whenever the cache is on)."""
    key = catalog_cache.content_key(_catalog(), "demo")
    assert key is not None
    catalog_cache.write_value("demo", key, {"a": 1})
    assert catalog_cache.read_value("demo", key, lambda v: v) == {"a": 1}
    monkeypatch.setattr(catalog_cache, "_code_stamp", lambda: [("catalog_cache.py", "0" * 64)])  # an edit
    assert catalog_cache.read_value("demo", key, lambda v: v) is None
    catalog_cache.write_value("demo", "k2", {"a": 2})
    assert [p.name for p in cache.iterdir()] == [f"demo-{key}.json"]
