"""Tests that kill the mutants of moe_select/yamlio.py that the sampled local run of 2026-12-02 (eighth session;
mutmut 3.8.1, seed 19, 50 of yamlio's mutants, yamlio at 352b298;
benchmarks/results/mutation_sampled_local_2026-12-02_s8.json) left: 12 survived (one that timed out is counted
killed). Each test names the mutants it kills (``yamlio.x_function__mutmut_N``, numbered at 352b298); the
expectations are written by hand from the inputs.

Equivalent, so not tested (the reason in one line each):

- x__field_path__mutmut_1 (the default ``kind="missing"`` -> ``"XXmissingXX"``): the one caller, validation_issues,
  always passes the error's type as ``kind``, so the default is never read (as in test_mutants_c.py).
- x_load_text__mutmut_79 (``text.rfind("\\n", None, pos)``): str.rfind reads a start of None as 0, the value written.
- x_load_text__mutmut_92 (the code point of a ReaderError character given as a string -> 0): with PyYAML >= 6.0
  (pyproject) and a str stream, both readers give the refused character as an int code point (libyaml's
  problem_value; the Python reader's ``ord(character)`` in Reader.check_printable), so the string branch is never
  reached; test_a_control_character_is_named_by_its_code_point pins the message of the branch that is.
- xǁ_BoundedComposerǁcompose_document__mutmut_4 (``self.anchors = None`` after the document): load_text composes
  one document with a fresh loader (``_start_counts`` sets the anchors when it starts) and a second document is
  refused before it is composed, so the anchors are never read after that assignment.
- x_validation_issues__mutmut_140 (``cutoff=0.6`` left out of get_close_matches): 0.6 is difflib's default cutoff.
- x_validation_issues__mutmut_4 (``exc.errors(include_url=True)``): it only adds a ``url`` key to each error, and
  validation_issues reads ``loc``, ``type``, ``msg``, ``ctx`` and ``input``, never ``url``.
- x_validation_issues__mutmut_73 (``e.get("type", None)``): the default is read only for an error without a type
  (pydantic gives every error one), and neither ``""`` nor ``"None"`` ends with ``_type``.
"""
from __future__ import annotations

import hashlib
import os

import pytest

from moe_select.errors import Issue
from moe_select.located import Located
from moe_select.yamlio import load_text, read_input, validate

from test_mutants_c import _issues


def test_a_control_character_is_named_by_its_code_point():
    """(Pins the message the equivalent x_load_text__mutmut_92 leaves alone.) A U+0001 on line 2, the fifth
    character of ``b: x\\x01y``."""
    assert _issues(load_text, "a: 1\nb: x\x01y\n", "f.yaml") == [
        Issue("f.yaml", 2, "", "not valid YAML: control character U+0001 at column 5 (only printable characters are allowed)")]


def test_a_file_under_a_file_is_not_found_at_its_display_name(tmp_path):
    """x_read_input__mutmut_30 (the issue's file -> None): a path through a regular file (ENOTDIR)."""
    (tmp_path / "f.yaml").write_text("a: 1\n")
    assert _issues(read_input, tmp_path / "f.yaml" / "dep.yaml", "dep.yaml", "deployment file") == [
        Issue("dep.yaml", 0, "", "deployment file not found (a parent of the path is not a folder)")]


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs Linux's /proc/self/mem")
def test_a_read_that_fails_names_the_file_and_the_os_error():
    """x_read_input__mutmut_199 (the message -> None) and __mutmut_201 (``Issue(name, "", message)``: a TypeError):
    /proc/self/mem is a regular file that opens, but reading at offset 0 (no memory mapped there) fails with EIO."""
    assert _issues(read_input, "/proc/self/mem", "mem.yaml", "model config") == [
        Issue("mem.yaml", 0, "", "cannot read the model config: Input/output error")]


def test_the_file_is_opened_read_only_where_os_has_no_o_noctty(tmp_path, monkeypatch):
    """x_read_input__mutmut_131 (``getattr(os, "O_NOCTTY", 1)``: where os has no O_NOCTTY, as on Windows, the flags
    gain 1, O_WRONLY, and the read fails): the file's bytes and their sha256 come back."""
    path = tmp_path / "dep.yaml"
    path.write_bytes(b"tp: 2\n")
    monkeypatch.delattr(os, "O_NOCTTY")
    assert read_input(path) == (b"tp: 2\n", hashlib.sha256(b"tp: 2\n").hexdigest())
    assert path.read_bytes() == b"tp: 2\n"


class _Counted(Located):
    name: str
    count: int = 1


def test_an_unknown_key_near_a_field_gets_a_suggestion():
    """x_validation_issues__mutmut_172 (``... and False``: no suggestion for an unknown key): ``cont`` on line 2 is
    close to ``count``."""
    data = load_text("name: a\ncont: 2\n", "m.yaml")
    assert _issues(validate, _Counted, data, "m.yaml") == [
        Issue("m.yaml", 2, "cont", "unknown key 'cont' (did you mean 'count'?); allowed here: count, name")]
