"""More tests that kill mutants the mutation run (benchmarks/mutation.py, issue 19) left surviving in conditions,
catalog and lint (mutmut 3.8.1 at bc97a02).

Each test names the mutant(s) it kills as mutmut prints them (``module.x_function__mutmut_N``) and the change;
the expectations are worked out by hand from the inputs, not by re-running the code under test.

Equivalent mutants (no input can tell them apart), one line each:

- conditions.x_parallel_fixes_for_engines__mutmut_46 (``own.beyond(common) if (common) or True``): when common is
  empty, ``own.beyond(common)`` subtracts nothing and keeps own's tp, ep and eps/tps (or pairs, which own holds only
  when it has no eps/tps), so it equals ``own``.
- conditions.x_parallel_fixes_for_engines__mutmut_55 (``[common.text()] if (common) or True``): an empty common's
  text() is None, and the join keeps only truthy parts (``p for p in parts if p``).
- catalog.x__did_you_mean__mutmut_7 (``n=1`` left out: difflib's default n=3) and __mutmut_9 (``n=2``): only
  ``close[0]`` is read, and get_close_matches returns ``heapq.nlargest(n, [(ratio, name), ...])`` names
  (python/cpython@v3.11.7:Lib/difflib.py:get_close_matches), whose first is the same maximum for every n >= 1.

Lint's six survivors are all killed (test_choice_reads_arch_and_quant_rules_and_their_disables).
"""
from __future__ import annotations

from typing import Any

import pytest

from moe_select import conditions, formats, lint, vocab
from moe_select.catalog import default_catalog, load_catalog
from moe_select.conditions import (Constraint, FixOptions, facts_of, parallel_fixes,
                                   parallel_fixes_for_engines)
from moe_select.errors import InputError
from moe_select.policy import Rule


# ---------------------------------------------------------------------------------------------- conditions
def _facts(engine: str = "vllm", tp: int = 1, ep: int = 1) -> dict[str, Any]:
    """A small bf16 deployment (8 experts, width 64): no bundled constraint is involved, only the test's own."""
    return facts_of(arch="sm90", quant="bf16", a2a="none", activation="silu", routing="renormalize", cuda_graph=True,
                    tp=tp, ep=ep, num_experts=8, top_k=2, hidden_size=64, moe_intermediate_size=64, engine=engine)


def _tp_at_least_64() -> Constraint:
    """Holds at tp >= 64 only: from tp 1 (ep 1) the single changes are tp 64..max_tp."""
    return Constraint.model_validate({"field": "tp", "min": 64, "source": "test"})


def test_parallel_fixes_searches_tp_up_to_64_by_default():
    """Kills conditions.x_parallel_fixes__mutmut_1 (default ``max_tp`` 64 -> 65): tp 65 would be offered too."""
    assert parallel_fixes(_tp_at_least_64(), _facts()) == "tp in {64} (ep 1)"


def test_parallel_fixes_for_engines_searches_tp_up_to_64_by_default_and_keeps_a_tp_only_common_fix():
    """Kills conditions.x_parallel_fixes_for_engines__mutmut_1 (default ``max_tp`` 64 -> 65) and
    conditions.xǁFixOptionsǁ__bool____mutmut_2 (``eps or tps or pairs`` -> ``eps or tps and pairs``: the common
    options, tps only, would read as empty and the fix be labeled per engine, ``"sglang, vllm: tp in {64} (ep 1)"``)."""
    facts = {e: _facts(e) for e in ("sglang", "vllm")}
    assert parallel_fixes_for_engines([_tp_at_least_64()], facts) == "tp in {64} (ep 1)"
    assert parallel_fixes_for_engines([_tp_at_least_64()], {"vllm": facts["vllm"]}) == "tp in {64} (ep 1)"


def test_parallel_fixes_for_engines_with_no_constraint_or_no_engine_is_none():
    """Kills conditions.x_parallel_fixes_for_engines__mutmut_2 (``not constraints or not facts`` -> ``and``: no
    constraint would fail unpacking ``first, *rest``, no engine would index ``facts[0]`` of an empty list)."""
    assert parallel_fixes_for_engines([], {"vllm": _facts()}) is None
    assert parallel_fixes_for_engines([_tp_at_least_64()], {}) is None


class _CountingWithParallelism:
    """Wraps conditions.with_parallelism and counts the calls (each is one (tp, ep, engine) facts computation)."""

    def __init__(self) -> None:
        self.calls = 0
        self.real = conditions.with_parallelism

    def __call__(self, facts: Any, tp: int, ep: int) -> dict[str, Any]:
        self.calls += 1
        return self.real(facts, tp, ep)


def test_parallel_fixes_fills_the_callers_memo(monkeypatch):
    """Kills conditions.x_parallel_fixes__mutmut_6 (``memo`` -> None) and __mutmut_11 (``memo`` left out): the
    docstring's promise, facts and verdicts computed once per deployment, needs the caller's dict to be the one used;
    a second call with the same memo computes no facts."""
    counter = _CountingWithParallelism()
    monkeypatch.setattr(conditions, "with_parallelism", counter)
    memo: dict[Any, Any] = {}
    assert parallel_fixes(_tp_at_least_64(), _facts(), memo=memo) == "tp in {64} (ep 1)"
    assert counter.calls == 63  # tp 2..64 at ep 1, once each (tp 1 has no other ep; no pair search: tps help)
    assert memo
    counter.calls = 0
    assert parallel_fixes(_tp_at_least_64(), _facts(), memo=memo) == "tp in {64} (ep 1)"
    assert counter.calls == 0


@pytest.mark.parametrize("engines", [("vllm",), ("sglang", "vllm")])
def test_parallel_fixes_for_engines_fills_the_callers_memo(monkeypatch, engines):
    """Kills conditions.x_parallel_fixes_for_engines__mutmut_13 and __mutmut_18 (one engine: ``memo`` -> None / left
    out), __mutmut_25 and __mutmut_30 (the options common to all engines) and __mutmut_38 and __mutmut_43 (each
    engine's own options): a second call with the same memo computes no facts."""
    counter = _CountingWithParallelism()
    monkeypatch.setattr(conditions, "with_parallelism", counter)
    facts = {e: _facts(e) for e in engines}
    memo: dict[Any, Any] = {}
    assert parallel_fixes_for_engines([_tp_at_least_64()], facts, memo=memo) == "tp in {64} (ep 1)"
    # tp 2..64 at ep 1, once each: the constraint names no engine, so its verdict at (tp, ep) serves every engine
    assert counter.calls == 63
    counter.calls = 0
    assert parallel_fixes_for_engines([_tp_at_least_64()], facts, memo=memo) == "tp in {64} (ep 1)"
    assert counter.calls == 0


def test_fix_options_is_true_with_any_one_kind_of_option():
    """Kills conditions.xǁFixOptionsǁ__bool____mutmut_2 (``eps or tps or pairs`` -> ``eps or tps and pairs``)."""
    assert FixOptions(4, 1, tps=(2,))
    assert FixOptions(4, 1, pairs=((2, 2),))
    assert FixOptions(4, 1, eps=(2,))
    assert not FixOptions(4, 1)


def test_beyond_keeps_the_eps_and_the_tps_common_lacks():
    """Kills conditions.xǁFixOptionsǁbeyond__mutmut_1 (``eps or tps`` -> ``eps and tps``: eps-only options would take
    the pairs branch and come back empty), __mutmut_3 (ep -> None), __mutmut_5 (tps -> None) and __mutmut_9 (tps
    left out)."""
    mine = FixOptions(8, 2, eps=(1, 4, 8), tps=(2, 4, 6, 16))
    common = FixOptions(8, 2, eps=(4,), tps=(2, 6))
    assert mine.beyond(common) == FixOptions(8, 2, eps=(1, 8), tps=(4, 16))
    eps_only = FixOptions(8, 2, eps=(4, 8))
    assert eps_only.beyond(FixOptions(8, 2)) == FixOptions(8, 2, eps=(4, 8))
    assert eps_only.beyond(FixOptions(8, 2)).text() == "ep in {4, 8} (tp 8)"


def test_beyond_keeps_the_pairs_common_lacks_and_the_deployment():
    """Kills conditions.xǁFixOptionsǁbeyond__mutmut_14 (tp -> None), __mutmut_15 (ep -> None), __mutmut_16 (pairs ->
    None), __mutmut_17 (``FixOptions(self.ep, pairs=...)``: no ep, TypeError), __mutmut_18 (``FixOptions(self.tp,
    pairs=...)``: TypeError), __mutmut_19 (pairs left out), __mutmut_20 (``tuple(None)``: TypeError) and __mutmut_21
    (``not in`` -> ``in``: the shared pairs instead of the extra ones)."""
    mine = FixOptions(8, 2, pairs=((7, 1), (9, 3), (6, 2), (10, 2)))
    common = FixOptions(8, 2, pairs=((7, 1), (6, 2), (5, 5), (12, 4)))
    got = mine.beyond(common)
    assert got == FixOptions(8, 2, pairs=((9, 3), (10, 2)))
    assert (got.tp, got.ep, got.eps, got.tps, got.pairs) == (8, 2, (), (), ((9, 3), (10, 2)))
    assert got.text() == "(tp, ep) in {(9, 3), (10, 2)}"


@pytest.mark.parametrize(("tps", "want"), [
    (tuple(range(2, 10)), "tp in {2, 3, 4, 5, 6, 7, 8, 9} (ep 1)"),
    (tuple(range(2, 11)), "tp in {2, 3, 4, 5, 6, 7, 8, 9, ...} (ep 1)"),
])
def test_text_lists_eight_tps_then_an_ellipsis(tps, want):
    """Kills conditions.xǁFixOptionsǁtext__mutmut_26 (``len(tps) > 8`` -> ``> 9``: nine tps would show eight and no
    ``...``)."""
    assert FixOptions(1, 1, tps=tps).text() == want


# ---------------------------------------------------------------------------------------------- catalog
def test_an_unknown_runner_gets_a_suggestion_only_when_one_is_close(tmp_path):
    """Kills catalog.x__did_you_mean__mutmut_11 (``if close`` -> ``if (close) or True``: ``close[0]`` of no match, an
    IndexError instead of the load error) and __mutmut_13 (no match -> ``"XXXX"`` appended to the message)."""
    (tmp_path / "site.yaml").write_text("schema_version: 1\nrules:\n"
                                        "  - id: site-far\n    when: {arch: [sm90]}\n    prefer: [qqqqqqqq]\n"
                                        "  - id: site-near\n    when: {arch: [sm90]}\n    prefer: [tritn]\n")
    with pytest.raises(InputError) as err:
        load_catalog([tmp_path], use_env=False)
    lines = str(err.value).splitlines()
    assert f"{tmp_path}/site.yaml:5: prefer: rule 'site-far' names unknown runner 'qqqqqqqq'" in lines
    assert f"{tmp_path}/site.yaml:8: prefer: rule 'site-near' names unknown runner 'tritn' (did you mean 'triton'?)" in lines


VOCABULARY = ('schema_version: 3\narchs:\n  - {name: sm130, vendor: nvidia, products: [Z9000], '
              'source: "this project: tests/test_mutants_b.py"}\n')


def test_default_catalog_reads_the_backends_folders_and_makes_their_vocabulary_active(tmp_path, monkeypatch):
    """Kills catalog.x_default_catalog__mutmut_14 (``cached_load_catalog(rd, )``: the backends folders dropped),
    __mutmut_5 (each folder read as ``str(None)``) and __mutmut_16 (``vocab.use(None)``: the bundled vocabulary made
    active instead of the catalog's): an operator folder whose vocabulary.yaml declares sm130 (product Z9000); the
    vocabulary is made active again when the catalog comes back from the in-memory cache."""
    monkeypatch.delenv("MOE_SELECT_RULES", raising=False)
    monkeypatch.delenv("MOE_SELECT_BACKENDS", raising=False)
    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "operator"
    folder.mkdir()
    (folder / "vocabulary.yaml").write_text(VOCABULARY)
    try:
        cat = default_catalog(backends_dirs=[folder])
        assert f"{folder}/vocabulary.yaml" in cat.files
        assert vocab.gpu_arch("Z9000") == "sm130"
        default_catalog()
        assert vocab.gpu_arch("Z9000") is None  # the bundled vocabulary knows no Z9000
        assert default_catalog(backends_dirs=[folder]) is cat
        assert vocab.gpu_arch("Z9000") == "sm130"
    finally:
        default_catalog()  # leave the bundled catalog's vocabulary active for other tests


def test_default_catalog_makes_its_formats_table_active_again(monkeypatch):
    """Kills catalog.x_default_catalog__mutmut_17 (``formats.use(None)``, which formats.use ignores): another table
    made active since (here a one-row table, as another catalog's load would) stays active after default_catalog()
    returns its catalog from the in-memory cache."""
    monkeypatch.delenv("MOE_SELECT_RULES", raising=False)
    monkeypatch.delenv("MOE_SELECT_BACKENDS", raising=False)
    cat = default_catalog()
    other = {"bf16": cat.formats["bf16"]}
    try:
        formats.use(other)
        assert formats.table() is other
        assert default_catalog() is cat
        assert formats.table() is cat.formats and "fp8_block" in formats.table()
    finally:
        formats.use(cat.formats)


def test_package_markers_are_the_rows_that_have_markers():
    """Kills catalog.xǁCatalogǁpackage_markers__mutmut_1 (``markers is not None`` -> ``is None``). By hand from
    backends/packages.yaml: triton_kernels and amd-aiter have ``markers:`` (files listed there); torch, vllm and
    flashinfer-cubin have none."""
    markers = default_catalog().package_markers()
    assert {"triton_kernels", "amd-aiter"} <= set(markers)
    assert not {"torch", "vllm", "flashinfer-cubin"} & set(markers)
    assert markers["triton_kernels"].files == ["triton_kernels/matmul_ogs.py", "triton_kernels/matmul.py",
                                               "triton_kernels/numerics_details/mxfp.py"]
    assert markers["amd-aiter"].files == ["aiter/jit/core.py", "aiter_meta/*"]


def test_packages_include_the_engines_and_not_the_unnamed_table_rows():
    """Kills catalog.xǁCatalogǁpackages__mutmut_7 (``engine is not None`` -> ``is None``). By hand: tensorrt-llm is an
    engine row of backends/packages.yaml (``engine: trtllm``, module tensorrt_llm) that no capability file names;
    flashinfer-cubin and nixl are rows without ``engine:`` that no capability file names either."""
    pairs = default_catalog().packages()
    assert ("tensorrt-llm", "tensorrt_llm") in pairs
    names = {n for n, _ in pairs}
    assert "flashinfer-cubin" not in names and "nixl" not in names


# ---------------------------------------------------------------------------------------------- lint
def _rule(**fields: Any) -> Rule:
    return Rule.model_validate(fields)


def test_choice_reads_arch_and_quant_rules_and_their_disables():
    """Kills lint.x__only_arch_quant__mutmut_2 (``<=`` -> ``<``: a rule naming both arch and quant would be skipped),
    __mutmut_5 and __mutmut_6 (``"quant"`` misspelt: a rule naming quant skipped), lint.x_choice__mutmut_6 and
    __mutmut_7 (``"disable"`` misspelt: disable rules ignored) and __mutmut_8 (``_only_arch_quant(None)``:
    AttributeError). By hand from backends/torch_grouped_mm.yaml and torch_native.yaml: both list bf16 on sm90, so the
    prefer rule picks torch_grouped_mm, and torch_native once torch_grouped_mm is disabled there."""
    cat = default_catalog()
    when = {"arch": ["sm90"], "quant": ["bf16"]}
    prefer = _rule(id="p", when=when, prefer=["torch_grouped_mm", "torch_native"])
    disable = _rule(id="d", when=when, disable=["torch_grouped_mm"], reason="test")
    assert lint.choice(cat, [prefer], "sm90", "bf16") == ("torch_grouped_mm", "p")
    assert lint.choice(cat, [disable, prefer], "sm90", "bf16") == ("torch_native", "p")
    quant_only = _rule(id="q", when={"quant": ["bf16"]}, prefer=["torch_native"])
    assert lint.choice(cat, [quant_only], "sm90", "bf16") == ("torch_native", "q")
    assert lint.choice(cat, [prefer], "sm90", "fp16") is None  # the rule's quant does not match
