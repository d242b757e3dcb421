"""Tests that kill mutants the mutation run (benchmarks/mutation.py, issue 19) found surviving.

Each test names the mutant(s) it kills as mutmut prints them (``module.x_function__mutmut_N``) and the change.
"""
from __future__ import annotations

import pytest

from moe_select import versions


def test_parse_specifier_reads_the_text_it_is_given():
    """Kills versions.x_parse_specifier__mutmut_1 (``SpecifierSet(spec)`` -> ``SpecifierSet(None)``)."""
    spec = versions.parse_specifier(">=0.6.4,<0.7")
    assert "0.6.5" in spec and "0.7.0" not in spec and "0.6.3" not in spec


def test_parse_specifier_error_names_the_first_60_characters():
    """Kills versions.x_parse_specifier__mutmut_2 (message -> None) and __mutmut_3 (``spec[:60]`` -> ``spec[:61]``)."""
    spec = "x" * 70
    with pytest.raises(ValueError) as err:
        versions.parse_specifier(spec)
    assert str(err.value).startswith(f"version specifier {spec[:60]!r} is not a PEP 440 specifier")


@pytest.mark.parametrize(("version", "minimum", "met"), [("12.4", "12.4", True), ("12.3", "12.4", False),
                                                          ("12.8", "12.4", True), ("13.0", "12.10", True)])
def test_at_least(version, minimum, met):
    """Kills versions.x_at_least__mutmut_1..3 (``parse_version(None)`` on either side; ``>=`` -> ``>``): no
    selected test reached at_least (the nvcc minimum of toolchain facts)."""
    assert versions.at_least(version, minimum) is met


def test_parse_version_error_names_the_first_60_characters():
    """Kills versions.x_parse_version__mutmut_2 (message -> None) and __mutmut_3 (``version[:60]`` -> ``[:61]``)."""
    with pytest.raises(ValueError) as err:
        versions.parse_version("x" * 70)
    assert str(err.value) == f"not a version: {'x' * 60!r}"


@pytest.mark.parametrize(("version", "spec", "met"), [("0.7.0rc1", ">=0.6.4", True), ("0.6.4rc1", ">=0.6.4", False)])
def test_satisfies_counts_prereleases_as_the_versions_they_are(monkeypatch, version, spec, met):
    """Kills versions.x_satisfies__mutmut_13 (``prereleases=True`` -> False: ``0.7.0rc1`` would not meet
    ``>=0.6.4``). __mutmut_8 and __mutmut_10 (``prereleases=None`` / left out) are equivalent under packaging
    26 (its default accepts a pre-release Version), not under packaging 23 (pyproject's lower bound, which
    CI's lowest-versions step runs): there this test kills them too."""
    monkeypatch.setattr(versions, "_verdicts", {})
    assert versions.satisfies(version, spec) is met


def test_satisfies_answers_remembered_verdicts(monkeypatch):
    """Kills versions.x_satisfies__mutmut_3 (``_verdicts.get(...)`` -> None) and __mutmut_4 (``.get(None)``):
    a verdict taken in by ``remember`` (a cached catalog's) is answered as given, without recomputing it."""
    monkeypatch.setattr(versions, "_verdicts", {})
    versions.remember({("1.0", ">=2"): True})
    assert versions.satisfies("1.0", ">=2") is True
    assert versions.satisfies("1.0", ">=3") is False
