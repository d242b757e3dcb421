"""Tests that kill the mutants the sampled device run (benchmarks/results/mutation_sampled_h200_2026-12-02.json;
mutmut 3.8.1, seed 19, 50 mutants per module, tree adba75b) left in moe_select/resolver.py (11 survived, 1 "no
tests") and moe_select/conditions.py (9 survived).

Each test names the mutants it kills as mutmut prints them (``module.x_function__mutmut_N``, numbered at adba75b);
the expectations are worked out by hand from the inputs. Every kill was checked by applying the mutant's diff to a
scratch worktree and running the test. Resolver's tests need no GPU: the plans are made for ``arch: cpu``, and
``torch.cuda.is_available`` is patched where the default device depends on it.

Ten of the 21 mutants are killed by tests that already exist but did not run in that device run (each diff applied
to a scratch worktree: the named file fails):

- resolver.x__fall_back__mutmut_23, _35, _48, x__tile_differences__mutmut_17, _27, _31 and x_machine_here__mutmut_13
  (the "no tests" one): tests/test_mutants_resolver.py (test_strict_refuses_a_measured_plan_off_its_machine,
  test_fall_back_refused_by_the_rules_names_their_codes, test_tile_differences_skip_a_runner_whose_adapter_does_not_
  implement_the_layer, test_tile_differences_build_the_eligible_runners_without_a_core,
  test_machine_here_hands_the_device_to_this_machine). It is in resolver's TESTS list, but the run's entry has
  ``"missing_tests": ["test_mutants_resolver.py"]``: the tree the device copied lacked it.
- conditions.x_fix_options__mutmut_54 (the memo's facts key ``"XXfactsXX"`` where it is stored, ``"facts"`` where it
  is read: the facts are computed again on every lookup), x_parallel_fixes__mutmut_6 (``memo`` -> None) and
  xǁFixOptionsǁbeyond__mutmut_21 (``not in`` -> ``in``): tests/test_mutants_b.py
  (test_parallel_fixes_fills_the_callers_memo, test_parallel_fixes_for_engines_fills_the_callers_memo,
  test_beyond_keeps_the_pairs_common_lacks_and_the_deployment), which conditions's TESTS list does not name.

No mutant of the 21 is equivalent.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

import moe_select
import moe_select.resolver as R
from moe_select.catalog import bundled_dirs, default_catalog
from moe_select.conditions import Constraint, When, facts_of, fmt_num, with_parallelism
from moe_select.errors import ResolveError
from moe_select.plans import Plan, Reason
from moe_select.registry import Registry

SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu",
         "routing": "renormalize"}


@pytest.fixture(scope="module")
def cpu_tp2() -> Plan:
    """A bf16 plan for the CPU at tp 2, ep 1: runner torch_native, a2a none (dispatch_none)."""
    p = moe_select.plan({"arch": "cpu", "quant": "bf16", "model": SMALL, "require_adapter": True, "tp": 2})
    assert (p.runner, p.arch, p.a2a, p.deployment.tp, p.deployment.ep) == ("torch_native", "cpu", "none", 2, 1)
    assert p.module == "moe_select.backends.torch_native"
    return p


def _line_of(path: Any, key: str) -> int:
    """The 1-based line of the first top-level ``key:`` in the YAML file ``path``."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(f"{key}:"))


# ------------------------------------------------------------------------------------------ resolver: _adapter_reasons
def test_an_a2a_without_a_dispatcher_module_names_its_capability_file(cpu_tp2):
    """The runner's module loads into a fresh registry; the plan's a2a ``none`` has no dispatcher module, and the
    reason names ``module:`` in backends/a2a/none.yaml. Kills resolver.x__adapter_reasons__mutmut_37
    (``fact_file(catalog, None, a2a=True)``: ``backends/a2a/None.yaml``, no such file)."""
    backends, _ = bundled_dirs()
    line = _line_of(backends / "a2a" / "none.yaml", "module")
    assert line > 1
    p = cpu_tp2.model_copy(update={"a2a_module": None})
    assert R._adapter_reasons(p, Registry(), default_catalog()) == [Reason(
        code="no_adapter", detail="a2a none has no dispatcher in this install", source=f"backends/a2a/none.yaml:{line}")]


# ------------------------------------------------------------------------------------------------- resolver: _device
def test_a_device_torch_does_not_know_is_refused_naming_the_argument(cpu_tp2):
    """``"no_such_device"`` is no torch device: plan_mismatch, source ``resolve(device=...)``, the given rank. Kills
    resolver.x__device__mutmut_28 (source ``RESOLVE(DEVICE=...)``)."""
    with pytest.raises(ResolveError) as err:
        R._device("no_such_device", cpu_tp2, 3)
    assert err.value.rank == 3
    [reason] = err.value.reasons
    assert isinstance(reason, Reason)
    assert (reason.code, reason.source) == ("plan_mismatch", "resolve(device=...)")
    assert reason.detail.startswith("device 'no_such_device': ")


def test_a_device_that_is_neither_cpu_nor_cuda_is_refused_naming_the_argument(cpu_tp2):
    """``meta`` is a torch device but no runner's: plan_mismatch with source ``resolve(device=...)``. Kills
    resolver.x__device__mutmut_74 (source ``XXresolve(device=...)XX``)."""
    with pytest.raises(ResolveError) as err:
        R._device("meta", cpu_tp2, None)
    assert err.value.reasons == [Reason(code="plan_mismatch", detail="device meta: runners run on cpu or cuda",
                                        source="resolve(device=...)")]


def test_a_gpu_plan_defaults_to_cuda_and_is_refused_where_there_is_none(cpu_tp2, monkeypatch):
    """With no device given, a plan for sm90 asks for ``cuda``; on a machine without CUDA (patched so, whatever this
    machine has) that device is refused as not available. Kills resolver.x__device__mutmut_8 (``"XXcudaXX"``: torch
    refuses the name, and the refusal reads ``device None: ...``). The CPU plan's default is the CPU."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ResolveError) as err:
        R._device(None, cpu_tp2.model_copy(update={"arch": "sm90"}), None)
    assert err.value.reasons == [Reason(
        code="plan_mismatch", detail="device cuda is not available on this machine (torch.cuda.is_available() = False)",
        source="resolve(device=...)", fix="device='cpu', or run on a machine with that GPU")]
    assert R._device(None, cpu_tp2, None) == torch.device("cpu")


# --------------------------------------------------------------------------------------------- resolver: _rank_parts
def test_group_rank_gives_the_ranks_through_the_moe_tp_size(cpu_tp2):
    """tp 2, ep 1: moe_tp = 2, so group rank 1 is ep_rank 1 // 2 = 0 and tp_rank 1 % 2 = 1. A tp_rank 0 given beside it
    contradicts the group and is refused; without given ranks the spec is rank (0, 1) and the dispatcher factory gets
    the group. Kills resolver.x__rank_parts__mutmut_24 (``moe_tp_size(None, ep)``: TypeError, not a refusal)."""
    group = object()
    assert R._rank_parts(cpu_tp2, Registry(), group, 1, None, 0, "cpu", default_catalog()) == (None, [Reason(
        code="parallelism_unsupported", detail="rank: tp_rank=0 was given, but group rank 1 is tp_rank 1 (tp 2, ep 1): "
        "leave the ranks to the group", source="resolve(ep_rank=..., tp_rank=...)")])
    registry = Registry()
    made: list[tuple[Any, Any]] = []

    def dispatcher(spec: Any, g: Any) -> Any:
        made.append((spec, g))
        return "dispatcher"

    registry.register_dispatcher("none", dispatcher)
    built, reasons = R._rank_parts(cpu_tp2, registry, group, 1, None, None, "cpu", default_catalog())
    assert reasons == [] and built is not None
    spec, dev, got = built
    assert (spec.ep_rank, spec.tp_rank, str(dev), got) == (0, 1, "cpu", "dispatcher")
    assert made == [(spec, group)]


# --------------------------------------------------------------------------------------------------- conditions
def _deepseek_like(**over: Any) -> dict[str, Any]:
    """facts_of for a 256-expert FP8-block deployment at tp 8, ep 4, dp 2, one fused shared expert, 8 groups,
    low-latency a2a with 128 tokens per rank."""
    kw: dict[str, Any] = dict(arch="sm90", quant="fp8_block", a2a="deepep", a2a_modes=("low_latency",),
                              activation="silu", routing="deepseek_v3", cuda_graph=True, tp=8, ep=4, num_experts=256,
                              top_k=8, hidden_size=7168, moe_intermediate_size=2048, engine="sglang", phases=("decode",),
                              dp=2, num_shared_experts=1, fused_shared_experts=1, max_tokens_per_rank=128, n_group=8,
                              topk_group=4, block=(128, 128))
    kw.update(over)
    return facts_of(**kw)


def test_facts_of_a_deployment_by_hand():
    """Every fact of the deployment above, worked out by hand: moe_tp 8/4 = 2, experts_per_rank (256 + 1)/4,
    intermediate_per_rank 2048/2, experts_per_group 256/8, tp_dp 8 x 2, ep_per_dp 4/2, low-latency tokens 128 (the only
    mode).
    Kills conditions.x_facts_of__mutmut_50 (the key ``HIDDEN_SIZE``: no ``hidden_size`` fact)."""
    assert _deepseek_like() == {
        "arch": "sm90", "quant": "fp8_block", "a2a": "deepep", "a2a_mode": ("low_latency",), "a2a_mode_asked": None,
        "activation": "silu",
        "routing": "deepseek_v3", "engine": "sglang", "phase": ("decode",), "cuda_graph": True, "tp": 8, "ep": 4,
        "dp": 2, "moe_tp": Fraction(2), "num_experts": 256, "top_k": 8, "hidden_size": 7168,
        "moe_intermediate_size": 2048, "num_shared_experts": 1, "fused_shared_experts": 1,
        "experts_per_rank": Fraction(257, 4), "intermediate_per_rank": Fraction(1024), "max_tokens_per_rank": 128,
        "low_latency_tokens_per_rank": 128, "n_group": 8, "topk_group": 4, "experts_per_group": Fraction(32),
        "tp_dp": 16, "quant_block_n": 128, "quant_block_k": 128, "quant_group_size": None, "quant_per_channel": None,
        "quant_group_size_unset": None, "unstated_defaults": (), "layer_kind": "main", "main_quant": "fp8_block",
        "num_attention_heads": None, "attn_tp": Fraction(4),
        "shared_intermediate_per_tp": None, "dense_intermediate_per_tp": None, "architecture": None, "architecture_not": None, "checkpoint_layout": None,
        "weight_only": False, "activation_scale": None, "activation_precision": None, "activation_precision_not": "(none asked)",
        "online": False, "vendor_library": None, "eplb": False, "lora": False, "speculative": None, "shared_expert_fusion": None,
        "ep_per_dp": Fraction(2)}
    assert When.model_validate({"hidden_size": [7168]}).matches(_deepseek_like())
    assert not When.model_validate({"hidden_size": [4096]}).matches(_deepseek_like())


def test_with_parallelism_recomputes_the_experts_per_rank():
    """From tp 8, ep 4 to tp 8, ep 8: moe_tp 1, experts_per_rank (256 + 1)/8, intermediate_per_rank 2048, ep_per_dp 8/2;
    tp_dp stays 8 x 2 = 16; no other fact changes and no key is added. Kills conditions.x_with_parallelism__mutmut_26 (the key
    ``XXexperts_per_rankXX``: experts_per_rank stays 257/4 and a new key appears)."""
    before = _deepseek_like()
    after = with_parallelism(before, 8, 8)
    assert after.keys() == before.keys()
    assert {k: v for k, v in after.items() if before[k] != v} == {
        "ep": 8, "moe_tp": Fraction(1), "experts_per_rank": Fraction(257, 8), "intermediate_per_rank": Fraction(2048),
        "ep_per_dp": Fraction(4)}
    assert after == _deepseek_like(ep=8)


@pytest.mark.parametrize(("x", "text"), [(Fraction(3, 2), "1.5"), (Fraction(12, 4), "3"), (Fraction(768, 5), "153.6"),
                                         (Fraction(10 ** 7), "10000000"), (96, "96")])
def test_fmt_num_writes_whole_quantities_as_integers(x, text):
    """A whole fraction is its numerator (10**7 too, which ``:g`` would write 1e+07), any other its decimal. Kills
    conditions.x_fmt_num__mutmut_10 (``denominator == 2``: 3/2 written ``3``, 10**7 written ``1e+07``)."""
    assert fmt_num(x) == text


def test_a_one_of_violation_lists_the_allowed_values_comma_separated():
    """moe_tp must be 1 or tp; at tp 8, ep 4 it is 2. Kills conditions.xǁConstraintǁviolation__mutmut_43 (the
    allowed values joined by ``XX, XX``)."""
    c = Constraint.model_validate({"field": "moe_tp", "one_of": [1, "tp"], "source": "test"})
    assert c.violation(_deepseek_like()) == "moe_tp = 2 is not one of {1, tp (8)}"
    assert c.violation(_deepseek_like(ep=8)) is None


def test_describe_writes_a_boolean_condition_in_lower_case():
    """Kills conditions.xǁWhenǁdescribe__mutmut_25 (``str(None).lower()``: ``cuda_graph = none``)."""
    assert When.model_validate({"arch": ["sm90"], "cuda_graph": False}).describe() == "arch in [sm90], cuda_graph = false"
    assert When.model_validate({"weight_only": True}).describe() == "weight_only = true"


def test_an_all_to_all_condition_with_ep_2_can_match():
    """An all-to-all backend needs ep > 1: ``ep: [1]`` beside it never matches, ``ep: [2]`` (and ``[1, 2]``) can.
    Kills conditions.xǁWhenǁunsatisfiable__mutmut_46 (``e <= 2``: ep 2 would read as unsatisfiable, and a
    constraint under it refused at load)."""
    text = "when.a2a names only all-to-all backends, which need ep > 1, but when.ep allows only 1"
    assert When.model_validate({"a2a": ["deepep"], "ep": [1]}).unsatisfiable() == text
    assert When.model_validate({"a2a": ["deepep"], "ep": [2]}).unsatisfiable() is None
    assert When.model_validate({"a2a": ["deepep"], "ep": [1, 2]}).unsatisfiable() is None
    c = Constraint.model_validate({"field": "experts_per_rank", "multiple_of": 2, "source": "test",
                                   "when": {"a2a": ["deepep"], "ep": [2]}})
    assert c.violation(_deepseek_like(ep=2, fused_shared_experts=0)) is None
