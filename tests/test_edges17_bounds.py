"""Issue 17, rows 1, 12 and 13: input -> outcome -> message.

- Row 1: a plan whose ``deployment.tp`` (ep, dp, max_tokens_per_rank, moe_tp) is out of the bounds a
  deployment file has is refused by ``resolve`` (and ``load_plan``) with an :class:`InputError` naming the
  field, at once (before: ``tp: 2**63`` spun one core forever in the fix search); and the fix search
  (``conditions.parallel_fixes``) tests a bounded set of candidates, whatever tp the facts hold.
- Row 12: with ``engine: any`` a suggested parallelism fix holds for every engine the reason is for, or says
  for which engines it holds (vLLM spans EP over TP x DP: ep 4 at tp 8 is no vLLM configuration).
- Row 13: a ``no_adapter`` reason for a runner read from an operator folder (``--backends DIR``) names that
  file, not ``backends/<runner>.yaml``.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

import moe_select
from moe_select.conditions import Constraint, facts_of, parallel_fixes, with_parallelism
from moe_select.deployment import MAX_RANKS, MAX_TOKENS
from moe_select.errors import InputError, ResolveError
from moe_select.registry import Registry
from moe_select.resolver import load_plan

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu",
         "routing": "renormalize"}
#: A refusal takes milliseconds; the alarm only turns a spin (the bug) into a failure instead of a hang.
HANG_SECONDS = 20


@contextlib.contextmanager
def no_hang(seconds: float = HANG_SECONDS):
    """Raise TimeoutError in the body after ``seconds`` (a spinning loop fails the test, never hangs it)."""
    def fire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def cpu_plan_json() -> str:
    """A real plan (this machine, torch_native, tp 1) as ``moe-select plan`` writes it."""
    return moe_select.plan({"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True}).to_json()


def _line(text: str, needle: str, after: str = '"deployment"') -> int:
    start = text.index(after)
    return text[:text.index(needle, start)].count("\n") + 1


# ----------------------------------------------------------------------------------------------- row 1
BAD_DEPLOYMENTS = [
    ("tp", 2**63, "less than or equal to 4096"),
    ("tp", 2**24, "less than or equal to 4096"),
    ("tp", 0, "greater than or equal to 1"),
    ("tp", -4, "greater than or equal to 1"),
    ("ep", 2**63, "less than or equal to 4096"),
    ("ep", 0, "greater than or equal to 1"),
    ("dp", 0, "greater than or equal to 1"),
    ("dp", 2**40, "less than or equal to 4096"),
    ("max_tokens_per_rank", 0, "greater than or equal to 1"),
    ("max_tokens_per_rank", 2**63, f"less than or equal to {MAX_TOKENS}"),
]


@pytest.mark.parametrize("field, value, says", BAD_DEPLOYMENTS, ids=[f"{f}={v}" for f, v, _ in BAD_DEPLOYMENTS])
def test_a_plan_file_with_an_out_of_bounds_deployment_is_refused_naming_the_field(tmp_path, cpu_plan_json, field, value, says):
    data = json.loads(cpu_plan_json)
    data["deployment"][field] = value
    f = tmp_path / "plan.json"
    text = json.dumps(data, indent=2)
    f.write_text(text)
    with no_hang(), pytest.raises(InputError) as exc:
        moe_select.resolve(f, registry=Registry())
    msg = str(exc.value)
    line = _line(text, '"' + field + '"')
    assert f"{f}:{line}: deployment.{field}: " in msg, msg
    assert says in msg, msg


def test_the_bounds_are_those_of_a_deployment_file():
    """The same bounds as ``Deployment`` (MAX_RANKS for tp, ep, dp; MAX_TOKENS for the token budget)."""
    from moe_select.deployment import Deployment, Understood

    for name in ("tp", "ep", "dp", "max_tokens_per_rank"):
        want = [(m.__class__.__name__, getattr(m, "ge", None), getattr(m, "le", None)) for m in Deployment.model_fields[name].metadata]
        got = [(m.__class__.__name__, getattr(m, "ge", None), getattr(m, "le", None)) for m in Understood.model_fields[name].metadata]
        assert got == want, name
    assert MAX_RANKS == 4096


@pytest.mark.parametrize("tp, ep, moe_tp", [(8, 2, 3), (8, 3, 2), (8, 4, None), (8, 8, None), (8, 16, 0)])
def test_an_inconsistent_moe_tp_is_refused(tmp_path, cpu_plan_json, tp, ep, moe_tp):
    """moe_tp is tp / ep when ep divides tp, else null; anything else is an edited plan."""
    data = json.loads(cpu_plan_json)
    data["deployment"].update(tp=tp, ep=ep, moe_tp=moe_tp)
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(data, indent=2))
    with no_hang(), pytest.raises(InputError, match=r"deployment\.moe_tp: .*moe_tp must be "):
        moe_select.resolve(f, registry=Registry())


def test_a_plan_object_edited_past_validation_is_refused_too(cpu_plan_json):
    """``model_copy(update=...)`` skips validation: ``resolve`` checks a Plan object's deployment itself."""
    from moe_select.plans import Plan

    plan = Plan.model_validate(json.loads(cpu_plan_json))
    bad = plan.model_copy(update={"deployment": plan.deployment.model_copy(update={"tp": 2**63})})
    with no_hang(), pytest.raises(InputError, match=r"<plan>: deployment\.tp: Input should be less than or equal to 4096"):
        moe_select.resolve(bad, registry=Registry())
    layer = plan.model_copy(update={"layers": [bad]})
    with no_hang(), pytest.raises(InputError, match=r"<plan>: layers\[0\]\.deployment\.tp: "):
        load_plan(layer)


def test_a_plan_within_bounds_still_resolves(cpu_plan_json):
    runner = moe_select.resolve(json.loads(cpu_plan_json), registry=Registry())
    assert runner.name == "torch_native"


class CountingInt(int):
    """An int that counts the ``%`` taken of it, and refuses to go on past ``limit`` (a spin)."""

    count = 0
    limit = 50_000

    def __mod__(self, other: Any) -> Any:
        type(self).count += 1
        if type(self).count > self.limit:
            raise RuntimeError(f"{self.limit} candidates tested: the fix search is not bounded")
        return int.__mod__(self, other)


def _fp8_facts(tp: int, ep: int = 1, engine: str | None = "sglang") -> dict[str, Any]:
    return facts_of(arch="sm90", quant="fp8_block", a2a="none", activation="silu", routing="renormalize",
                    cuda_graph=True, tp=tp, ep=ep, num_experts=128, top_k=8, hidden_size=2048,
                    moe_intermediate_size=768, block=(128, 128), engine=engine)


def _block_n() -> Constraint:
    from moe_select.catalog import default_catalog

    return next(c for c in default_catalog().common.constraints
                if c.field == "intermediate_per_rank" and c.multiple_of == "quant_block_n")


@pytest.mark.parametrize("tp", [2**63, 2**24 * 3, 10**30 + 1])
def test_the_fix_search_is_bounded_whatever_tp_the_facts_hold(tp):
    """Timing-free: the number of candidates the search tests does not grow with tp (it was one per tp value)."""
    from moe_select.catalog import default_catalog

    CountingInt.count = 0
    facts = _fp8_facts(CountingInt(tp))
    c = _block_n()
    assert c.applies(facts) and not c.holds(facts)
    with no_hang():
        fix = parallel_fixes(c, facts, also=default_catalog().common.constraints)
    assert CountingInt.count <= 2 * MAX_RANKS + 1000, CountingInt.count
    assert fix is not None and "tp in {1, 2, 3, 6} (ep 1)" in fix  # the small tps that work are still found


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(tp=st.integers(1, 200), ep_pick=st.integers(0, 50), width=st.sampled_from([96, 768, 1408, 2048, 96 * 7]),
       experts=st.sampled_from([60, 64, 128, 256]), engine=st.sampled_from(["sglang", "vllm", "trtllm"]))
def test_every_suggested_ep_is_a_divisor_that_works_and_every_divisor_that_works_is_suggested(tp, ep_pick, width, experts,
                                                                                            engine):
    """The divisors are enumerated (not every value up to tp), and none is lost: against a brute force."""
    from moe_select.catalog import default_catalog

    common = default_catalog().common.constraints
    divisors = [e for e in range(1, tp + 1) if tp % e == 0]
    ep = divisors[ep_pick % len(divisors)]
    facts = facts_of(arch="sm90", quant="fp8_block", a2a="none", activation="silu", routing="renormalize", cuda_graph=True,
                     tp=tp, ep=ep, num_experts=experts, top_k=8, hidden_size=2048, moe_intermediate_size=width,
                     block=(128, 128), engine=engine)
    c = _block_n()
    if c.holds(facts):
        return
    fix = parallel_fixes(c, facts, also=common) or ""
    m = re.search(r"ep in \{([\d, ]+)\} \(tp \d+\)|set ep: (\d+) \(tp \d+\)", fix)
    got = [int(x) for x in (m.group(1) or m.group(2)).split(", ")] if m else []

    def works(e: int) -> bool:
        f = with_parallelism(facts, tp, e)
        return all(not k.applies(f) or k.holds(f) for k in (c, *common))

    assert got == [e for e in divisors if e != ep and works(e)], fix


# ---------------------------------------------------------------------------------------------- row 12
README_ARGS = ["explain", "--gpu", "H100", "--model-config", str(ROOT / "examples/model_configs/Qwen__Qwen3-30B-A3B-FP8"),
               "--tp", "8"]


def _explain(argv: list[str]) -> tuple[int, str]:
    from moe_select.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(argv)
    return rc, out.getvalue()


def test_the_readme_example_suggests_only_what_every_engine_accepts_or_says_which():
    """engine: any, Qwen3-30B-A3B-FP8 at tp 8: 768/8 = 96 rows per rank split a 128-block (vLLM 0.28.0 declared: from
    0.29.0 vLLM refines the blocks for its Triton experts, so the split is SGLang's and TensorRT-LLM's fact alone, and
    old vLLM's). ep 8 or tp 1, 2 work in every engine; ep 4 at tp 8 works in SGLang and TensorRT-LLM only (vLLM's EP is
    tp x dp: ep must be a multiple of tp); tp 3 and 6 split the 32 attention heads unevenly, which vLLM and SGLang
    refuse (the ninth trial): TensorRT-LLM's check of the heads is not in the facts, so they stay its fix, labeled."""
    rc, out = _explain([*README_ARGS, "--package", "vllm=0.28.0"])
    assert rc == 1
    fixes = re.findall(r"intermediate_per_rank = 96 is not a multiple of quant_block_n .*? Fix: (.*)\.$", out, re.M)
    assert set(fixes) == {"ep in {4, 8} (tp 8), or tp in {1, 2} (ep 1); trtllm also: tp in {3, 6} (ep 1)",
                          "set ep: 8 (tp 8), or tp in {1, 2} (ep 1)"}, fixes
    assert re.search(r"\(sglang only\) \[backends/common\.yaml:\d+\] Fix: ep in \{4, 8\}", out)
    assert re.search(r"\(vllm only\) \[backends/common\.yaml:\d+\] Fix: set ep: 8 \(tp 8\)", out)


def test_each_engine_named_alone_gets_its_own_fix():
    for engine, want, extra in (("vllm", "set ep: 8 (tp 8), or tp in {1, 2} (ep 1)", ["--engine-version", "0.28.0"]),
                                ("sglang", "ep in {4, 8} (tp 8), or tp in {1, 2} (ep 1)", [])):
        rc, out = _explain([*README_ARGS, "--engine", engine, *extra])
        assert rc == 1 and "quant_block_n (128) (a scale block" in out
        assert re.search(rf"\[backends/common\.yaml:\d+\] Fix: {re.escape(want)}\.$", out, re.M), out


def test_a_fix_no_engine_shares_is_given_per_engine():
    """When no change works in every engine, each engine's fix is labeled with the engines it holds for."""
    from moe_select.conditions import parallel_fixes_for_engines

    # a made-up constraint per engine: sglang needs ep = 2, vllm needs ep = 4 (tp 4)
    def con(engine: str, ep: int) -> Constraint:
        return Constraint.model_validate({"field": "ep", "one_of": [ep], "when": {"engine": [engine]}, "source": "test"})

    sg, vl = con("sglang", 2), con("vllm", 4)
    facts = {e: facts_of(arch="sm90", quant="bf16", a2a="none", activation="silu", routing="renormalize", cuda_graph=True,
                         tp=4, ep=1, num_experts=8, top_k=2, hidden_size=64, moe_intermediate_size=64, engine=e)
             for e in ("sglang", "vllm")}
    got = parallel_fixes_for_engines([sg, vl], facts)
    assert got == "sglang: set ep: 2 (tp 4); vllm: set ep: 4 (tp 4)", got
    # one engine only: the plain text, no label
    assert parallel_fixes_for_engines([sg], {"sglang": facts["sglang"]}) == "set ep: 2 (tp 4)"


# ---------------------------------------------------------------------------------------------- row 13
def _operator_runner(folder: Path) -> Path:
    """A plan-only runner ``site_runner`` in an operator capability folder (torch_native's facts, no module)."""
    from moe_select.catalog import bundled_dirs

    bdir, _ = bundled_dirs()
    (folder / "a2a").mkdir(parents=True)
    text = (bdir / "torch_native.yaml").read_text().replace("runner: torch_native", "runner: site_runner")
    # said shipped by vLLM too (an operator's fact): so it plans under engine any (vLLM's own runner option, closed,
    # does not name it; a runner whose file does not name an engine is refused there: selector._unnamed_for_engine)
    text = text.replace("engines:\n  values: [moe_select]", "engines:\n  values: [moe_select, vllm]", 1)
    text = re.sub(r"^module: .*\n", "", text, flags=re.M)
    text = re.sub(r"^registers: .*\n", "", text, flags=re.M)
    text = re.sub(r"^adapter:\n(?:  .*\n)+", "", text, flags=re.M)  # what this install's module implements: none here
    f = folder / "site_runner.yaml"
    f.write_text(text)
    return f


def test_no_adapter_names_the_operator_file_the_runner_came_from(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", "off")
    f = _operator_runner(tmp_path / "caps")
    plan = moe_select.plan({"arch": "auto", "quant": "bf16", "model": SMALL, "runner": "site_runner",
                            "cuda_graph": False}, backends_dirs=[tmp_path / "caps"])
    assert plan.runner == "site_runner" and plan.module is None
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan, registry=Registry())
    sources = [r.source for r in exc.value.reasons if r.code == "no_adapter"]
    assert sources and all(s.startswith(str(f)) for s in sources), sources
    assert "backends/site_runner.yaml" not in str(exc.value)
