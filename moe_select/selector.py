"""The selector: a pure function from a deployment to a plan, or a refusal with every reason.

Nothing here imports torch or reads the environment inside a check: the :class:`Environment` is an
input (declared for another machine, or detected once for this one before checks run). Every runner
of the catalog is checked against every fact, and every failure is reported with its closed code, a
detail naming the values, the ``file:line`` of the fact or rule, and a fix where one exists.

Engines: with ``engine: any`` each runner is checked once per serving engine whose facts differ (SGLang,
vLLM, TensorRT-LLM) and is eligible where at least one engine runs it; the candidate and the plan name those
engines, and a reason that holds for some engines only says which. ``engine: moe_select`` is this install as
an engine (its own adapters and dispatchers, what ``resolve`` builds): the facts scoped to it, and the
checks of this install's code (:func:`adapter_reasons`: a runner or all-to-all without an adapter here, a
format, activation or dispatch format the adapter does not implement, each ``no_adapter``). ``engine: any``
never includes it; ``require_adapter`` plans for it (with a serving engine: a candidate this install cannot
run that way is refused, ``no_adapter``, naming the failing fact). Versions: a fact conditioned on a
package version (``requires``) is decided by the declared or detected version; a package assumed present
without a version is taken at the newest version the facts were checked against, and the candidate
lists every fact that assumption decided. The serving engine's own version (``engine_version``, or its package under
``packages``) is such a version: a candidate the facts scoped to that engine make supported is unverified when the
engine is newer than they were checked at (issue 20: :func:`_newer_engines`, :func:`_engine_unknown`).
"""
from __future__ import annotations

import difflib
import os
import weakref
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Mapping, Sequence, TypeVar, cast

from pydantic import BaseModel

from . import capacity as a2a_capacity
from .capability import A2ACapability, Fact, MethodRunners, PackageNeedFact, RunnerCapability, Support, Unavailable
from .catalog import Catalog, default_catalog
from .conditions import Conditional, Constraint, dp_quantities, facts_of, fmt_num, parallel_fixes_for_engines
from .deployment import Deployment, Understood, load_deployment, understand
from .environment import Environment, declared, detect, normalize_package_name
from .errors import InputError, Issue, SelectionError
from .formats import block_shape, group_size, lookup, per_channel
from .plans import (PLAN_SCHEMA_VERSION, Candidate, ChosenBy, PackageNeed, Plan, Reason, Unknown, canonical_files, fingerprint, writer,
                    ranges_text,
                    strongest, weakest)
from .report import Report
from .versions import at_least, newer, satisfies
from .vocab import ENGINES, INSTALL_ENGINE, WEIGHT_ON_INPUT_ROUTINGS
from .vocab_names import CLAMPED_ACTIVATIONS
from .yamlio import shorten

#: Most issues of one kind reported for one input (a 10,000-key mapping gives 20 lines and a count).
MAX_ISSUES = 20

#: Inputs a deployment may leave out; facts that read them are then reported as not checked (``architecture``: the
#: checkpoint's model class, from model_config or model.architecture; a support row that holds only for some
#: architectures leaves its cell unverified when the deployment does not say which).
UNGIVEN = ("dp", "architecture", "architecture_not", "vendor_library", "checkpoint_layout", "quant_group_size_unset",
           "speculative", "shared_expert_fusion")

#: The source of a ``not_preferred`` reason where no prefer rule matches the deployment: no rule file to name.
NO_MATCHING_PREFER_RULE = "rules: no matching prefer rule"

#: How a deployment states each input of :data:`UNGIVEN` (the fix an unknown of an unstated input names, issue 21).
STATE_HOW = {
    "dp": "state dp (the attention data-parallel size; a launch line's --dp / --data-parallel-size)",
    "architecture": "state model.architecture (config.json architectures[0]), or give model_config: a checkpoint that names it",
    "vendor_library": "state vendor_library: true or false (the engine's switch for the GPU vendor's kernel library; "
                      "a launch line's environment states it)",
    "quant_group_size_unset": "give model_config: the checkpoint whose config says whether its per-channel weights' "
                              "group_size is null (llm-compressor's strategy channel) or -1",
    "low_latency_tokens_per_rank": "state max_tokens_per_rank: the most tokens a rank's forward sends in the "
                                   "low-latency mode (the chunked-prefill size, or the decode CUDA-graph batch)",
    "speculative": "state speculative: true or false (whether a speculative draft runs the checkpoint's own MTP layers; "
                   "a launch line's speculative-decoding flag states it)",
    "shared_expert_fusion": "state shared_expert_fusion: true or false (whether the engine fuses the shared experts into "
                            "the routed experts' kernel; a launch line's flag or variable states it)",
    "checkpoint_layout": "state quant_config.layout (awq, gptq, compressed-tensors, mxfp4, quark or fp8: the checkpoint's quant_method), or "
                         "give model_config: a checkpoint whose config says it",
}

STATE_HOW["architecture_not"] = STATE_HOW["architecture"]   # the same input, read by the allow-list condition

#: Quantities among the :data:`UNGIVEN` inputs and what is derived from them (a fact stating ``dp`` states ``tp_dp``).
_DERIVED = {"dp": lambda f: dp_quantities(f["tp"], f["ep"], f["dp"])}


def _quantities_read(c: Constraint) -> list[str]:
    qs: list[str] = [str(c.field)] + [v for v in (c.multiple_of, c.max, *(c.one_of or [])) if isinstance(v, str)]
    if c.when is not None:
        qs += [k for k in c.when.keys()]
    return qs


def _unstated_values(key: str, fact: Conditional | Unavailable) -> list[Any]:
    """The values of unstated input ``key`` worth trying against ``fact``: what its ``when`` names (a list's entries,
    a range's bounds) and, for a quantity, the sizes 1 to 64 and either side of the bounds a constraint on it names."""
    from .conditions import QUANTITIES, IntRange

    cond = getattr(fact.when, key, None) if fact.when is not None else None
    named: list[Any] = []
    if isinstance(cond, list):
        named = list(cond)
    elif isinstance(cond, IntRange):
        named = [v for v in (cond.min, cond.max) if v is not None]
    elif isinstance(cond, bool):
        named = [cond]
    if key == "architecture_not":   # an allow-list refuses any class it does not name: one such stands for them all
        named = ["(a class it does not name)"]
    if key in QUANTITIES:
        bounds = [getattr(fact, "min", None), getattr(fact, "max", None)] if getattr(fact, "field", None) == key else []
        near = [v + d for v in bounds if isinstance(v, int) for d in (-1, 1) if v + d >= 1]
        named += [v for v in (*range(1, 65), *near) if v not in named]
    return named


def _group_size_unset(u: Understood) -> bool | None:
    """The ``quant_group_size_unset`` fact: what a checkpoint's config says (``quant_params.group_size_unset``, read by
    moe_select/model_config.py for compressed-tensors); unknown (None) for a per-channel deployment that says only
    ``group_size: -1`` inline with the compressed-tensors layout (or none); False otherwise (a grouped checkpoint, AWQ /
    GPTQ, which always write their group size); absent (None) for a format without groups."""
    pc = per_channel(u.quant, u.quant_params)
    if pc is None:
        return None
    said = u.quant_params.get("group_size_unset")
    if isinstance(said, bool):
        return said
    if pc and u.quant_params.get("layout") in (None, "compressed-tensors"):
        return None
    return False


def _unstated(facts: Mapping[str, Any], key: str) -> bool:
    """Whether the deployment leaves input ``key`` unstated: one of :data:`UNGIVEN` not given, or a quantity it would
    derive from an input left at this project's default (``facts['unstated_defaults']``: the tokens per rank of a
    low-latency-only all-to-all, whose default is not the engine's chunked-prefill size; a new user's trial found the
    fact unchecked there and the deployment supported)."""
    return (key in UNGIVEN and facts.get(key) is None) or key in (facts.get("unstated_defaults") or ())


def unstated_refusal(fact: Conditional | Unavailable, ctx: _Ctx, reads: Iterable[str],
                     refuses: Any) -> tuple[list[str], tuple[Any, ...]] | None:
    """Whether a refusal ``fact`` might apply: ``(the unstated inputs, values of them)`` when ``fact`` reads (``reads``:
    its condition keys and quantities) inputs of :data:`UNGIVEN` the deployment leaves unstated, its package gate
    holds, and ``refuses`` (facts -> bool: the fact applies there and refuses) is true for some value of them; else
    None. Such a candidate is not supported: the caller records an unknown naming the inputs (issue 21)."""
    from itertools import product

    keys = [k for k in dict.fromkeys(reads) if _unstated(ctx.facts, k)]
    if not keys or not _requires(fact.requires, ctx)[0]:
        return None
    for combo in product(*(_unstated_values(k, fact) for k in keys)):
        f = dict(ctx.facts)
        f.update(zip(keys, combo))
        for k in keys:
            f.update(_DERIVED.get(k, lambda _: {})(f))
        if refuses(f):
            return keys, combo
    return None


def _unstated_unknown(fact: Conditional | Unavailable, keys: Sequence[str], values: Sequence[Any], code: str, what: str,
                      backend: str | None) -> Unknown:
    """The unknown of a refusal that might apply (:func:`unstated_refusal`): the unstated inputs, the fact and how to
    state them."""
    at = ", ".join(f"{k} {v}" for k, v in zip(keys, values))
    return Unknown(code=cast(Any, code), backend=backend, source=fact.where(),
                   detail=f"{what} where {fact.describe_conditions() or 'always'} [{fact.where()}]; this deployment does "
                          f"not state {', '.join(keys)}, and the fact refuses it at {at}",
                   settle="; ".join(_state_how(k) for k in keys), refuses_at=dict(zip(keys, values)))


def _state_how(key: str) -> str:
    """How a deployment states unstated input ``key`` (:data:`STATE_HOW`); for ``vendor_library``, with the engines'
    variables of it (backends/engines/<engine>.yaml ``means: vendor_library``)."""
    text = STATE_HOW.get(key, f"state {key}")
    if key == "vendor_library":
        from .engine_tables import ENGINES, table

        names = [f"{e} {v.name}" for e in ENGINES for v in table(e).env if v.means == "vendor_library"]
        text += f": {', '.join(names)}" if names else ""
    return text


def _test_text(c: Constraint) -> str:
    bits = [f"multiple of {c.multiple_of}" if c.multiple_of is not None else "", f">= {c.min}" if c.min is not None else "",
            f"<= {c.max}" if c.max is not None else "",
            f"one of {c.one_of}" if c.one_of is not None else ""]
    return "is " + ", ".join(b for b in bits if b)


#: Quantities of an all-to-all buffer's capacity (issue 23): their reasons name the engine variable and the needs.
CAPACITY_FIELDS = ("a2a_tokens_per_rank", "a2a_capacity")

#: Quantities a tp/ep change can fix: constraints on them get a parallelism suggestion.
PARALLEL_FIELDS = ("tp", "ep", "moe_tp", "num_experts", "experts_per_rank", "intermediate_per_rank",
                   "moe_intermediate_size", "shared_intermediate_per_tp", "dense_intermediate_per_tp")


@dataclass
class _Ctx:
    """What every check reads: the deployment, the machine, the catalog, and the flat facts of one engine."""

    u: Understood
    env: Environment
    catalog: Catalog
    facts: dict[str, Any]
    #: What no fact covers (open lists), collected by the checks of one candidate under this engine.
    unknowns: list[Unknown] = field(default_factory=list)
    #: ``(id(constraint), engines) -> parallel fix``, shared by the engines' contexts of one select.
    fixes: dict[Any, str | None] = field(default_factory=dict)
    #: Constraint verdicts of the fix search, shared by the engines' contexts of one select (their facts
    #: differ in ``engine`` only, which the memo keys where a constraint reads it).
    verdicts: dict[Any, Any] = field(default_factory=dict)
    #: Every engine the deployment is checked for -> its facts (one entry unless ``engine: any``): a fix is
    #: checked in each engine its reason holds for (row 12 of issue 17: vLLM takes no ep 4 at tp 8).
    engine_facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: ``file:line`` of every fact scoped to this context's engine (``when: {engine: [...]}`` naming it, or a runner's
    #: ``engines`` fact) that held for the candidate being checked: what was read at the engine's own source, and
    #: is unverified at an engine version newer than the facts were checked at (issue 20).
    engine_used: list[str] = field(default_factory=list)
    #: The all-to-all capacity entry that holds under this context's engine, with the deployment's needs of it
    #: (:class:`moe_select.capacity.Capacity`), or None (issue 23).
    capacity: Any = None
    #: ``(id(facts), id(method)) -> (facts, verdict)``: the engine methods' verdicts (:func:`_method_verdict`), which
    #: read the facts and the machine but not the runner; shared by the contexts of one select (a runner's own
    #: context, :func:`_runner_ctx`, has other facts and so other keys; ``facts`` is kept so an id is never reused).
    method_memo: dict[Any, Any] = field(default_factory=dict)


def _add_capacity(ctx: _Ctx) -> None:
    """Set ``a2a_capacity`` and ``a2a_tokens_per_rank`` in ``ctx.facts`` (shared with ``engine_facts``) from the a2a
    file's capacity entry that holds under this engine (:mod:`moe_select.capacity`)."""
    ctx.capacity = a2a_capacity.capacity_for(ctx.u, ctx.catalog.a2a.get(ctx.u.a2a), ctx.facts,
                                             lambda req: _requires(req, ctx)[0],
                                             engine_versions(ctx.env, ctx.catalog).get(str(ctx.facts.get("engine"))))
    ctx.facts.update(a2a_capacity.quantities(ctx.capacity))


def _facts(u: Understood, engine: str | None) -> dict[str, Any]:
    m = u.model
    return facts_of(arch=u.arch, quant=u.quant, a2a=u.a2a, a2a_modes=u.a2a_modes, activation=m.activation,
                    routing=m.routing, cuda_graph=u.cuda_graph, tp=u.tp, ep=u.ep, num_experts=m.num_experts,
                    top_k=m.top_k, hidden_size=m.hidden_size, moe_intermediate_size=m.moe_intermediate_size,
                    engine=engine, phases=u.phases, dp=u.dp, num_shared_experts=m.num_shared_experts,
                    fused_shared_experts=u.fused_shared_experts, max_tokens_per_rank=u.max_tokens_per_rank,
                    n_group=m.n_group, topk_group=m.topk_group, block=block_shape(u.quant, u.quant_params),
                    group_size=group_size(u.quant, u.quant_params), per_channel=per_channel(u.quant, u.quant_params),
                    group_size_unset=_group_size_unset(u),
                    shared_intermediate_size=m.shared_expert_intermediate_size,
                    dense_intermediate_size=m.dense_intermediate_size, architecture=m.architecture,
                    layer_kind=u.layer_kind, main_quant=u.main_quant,
                    checkpoint_layout=u.quant_params.get("layout"),
                    weight_only=bool(u.quant_params.get("weight_only")), activation_scale=activation_scale_of(u),
                    activation_precision=u.quant_params.get("activation_precision"),
                    online=bool(u.quant_params.get("online")), vendor_library=u.vendor_library, eplb=u.eplb, lora=u.lora,
                    max_tokens_given=not u.provenance.get("max_tokens_per_rank", "default").startswith("default"),
                    num_attention_heads=m.num_attention_heads, speculative=u.speculative,
                    shared_expert_fusion=None if u.provenance.get("shared_expert_fusion", "default") == "default"
                    else u.shared_expert_fusion, a2a_mode_asked=u.a2a_mode)


def engine_versions(env: Any, catalog: Any) -> dict[str, str | None]:
    """Serving engine -> the version its facts are read at for ``env`` (an :class:`~moe_select.environment.Environment`)
    and ``catalog``: the engine's package as given (``engine_version``, ``packages``) or detected, else the newest
    version its facts were checked at (backends/packages.yaml ``checked_up_to``, the selector's assumption: issue
    20); None where neither is known. The online-quantization check of :func:`moe_select.deployment.understand`
    reads it."""
    out: dict[str, str | None] = {}
    for e in ENGINES:
        pkg = catalog.engine_package(e)
        if pkg is None:
            out[e] = None
            continue
        state, found = env.package(pkg.name, pkg.module)
        out[e] = found if state == "present" and found not in (None, "unknown") else pkg.checked_up_to
    return out


def activation_scale_of(u: Understood) -> str | None:
    """How the deployment's NVFP4 activations are scaled: ``quant_params.activation_scale`` when given, else
    ``per_tensor`` (SGLang's default: ModelOpt's static input scale; its per-token variable, named in
    backends/engines/sglang.yaml, defaults to false); None for another format and for a weight-only NVFP4 checkpoint (16-bit activations)."""
    if u.quant != "nvfp4" or u.quant_params.get("weight_only"):
        return None
    return str(u.quant_params.get("activation_scale") or "per_tensor")


def _arch_label(u: Understood) -> str:
    return f"{u.arch} ({u.gpu})" if u.gpu else u.arch


# --------------------------------------------------------------------------------------- conditions
def _requires(req: dict[str, str] | None, ctx: _Ctx) -> tuple[bool, list[str], str]:
    """Whether the packages meet ``req``: ``(ok, assumptions, what differs)``. A package assumed present
    (not declared, or declared without a version) is taken at the table's ``checked_up_to`` version."""
    ok, assumed, differs = True, [], []
    for name, spec in (req or {}).items():
        known = ctx.catalog.packages_table.get(name)
        state, found = ctx.env.package(name, known.module if known else None)
        if state == "absent":
            ok = False
            differs.append(f"{name} is not installed")
            continue
        version = found if found not in (None, "unknown") else (known.checked_up_to if known else None)
        if found in (None, "unknown"):
            # a fact's version window is read at the newest version checked, not at the engine release's pin: the windows
            # were read against that version, and their audit against each release's pin (pins.yaml) is not done yet
            if version is None:
                assumed.append(f"{name} {spec} assumed (version not known)")
                continue
            assumed.append(f"{name} {spec} decided assuming {version}, the newest version checked (not declared)")
        if not satisfies(version, spec):  # type: ignore[arg-type]
            ok = False
            differs.append(f"{name} is {version}" if found not in (None, "unknown")
                           else f"{name} assumed {version}, the newest version checked (not declared)")
    return ok, assumed, "; ".join(differs)


def _engine_pin(ctx: _Ctx, name: str) -> tuple[str, str] | None:
    """``(version, why)`` of package ``name`` as the deployment's serving engine release installs it (its wheel's exact
    requirement, backends/engines/pins.yaml): the release given or detected, else the one the engine is assumed at (the
    newest checked, as its facts are read: a trial, break54, saw the verdict flip when that very release was declared);
    None where the release pins no such package."""
    from .releases import pinned

    engine = str(ctx.facts.get("engine"))
    if engine not in ENGINES:
        return None
    pkg = ctx.catalog.engine_package(engine)
    if pkg is None:
        return None
    state, release = ctx.env.package(pkg.name, pkg.module)
    if state == "present" and release not in (None, "unknown"):
        said = f"the version {engine} {release} pins"
    elif state != "absent" and pkg.checked_up_to:
        release, said = pkg.checked_up_to, f"the version {engine} {pkg.checked_up_to} pins ({engine} assumed at it, the newest checked)"
    else:
        return None
    pin = pinned(engine, release, name)
    return (pin, said) if pin is not None else None


def _holds(fact: Conditional, ctx: _Ctx, assumed: list[str]) -> bool:
    """True when ``fact``'s ``when`` and ``requires`` hold; version assumptions are appended to ``assumed``."""
    if fact.when is not None and not fact.when.matches(ctx.facts):
        return False
    ok, assumptions, _ = _requires(fact.requires, ctx)
    if ok:
        assumed.extend(assumptions)
        if fact.when is not None and fact.when.engine is not None and ctx.facts.get("engine") in fact.when.engine:
            ctx.engine_used.append(fact.where())
    return ok


def _why_not(fact: Conditional, ctx: _Ctx) -> tuple[str, str | None]:
    """Text of a fact's conditions that do not hold here, and a fix when only package versions differ."""
    parts, fix = [], None
    when_ok = fact.when is None or fact.when.matches(ctx.facts)
    if fact.when is not None and fact.when.keys():
        parts.append(f"when {fact.when.describe()}")
    ok, _, differs = _requires(fact.requires, ctx)
    if fact.requires:
        parts.append(", ".join(f"{k} {v}" for k, v in fact.requires.items()) + (f" ({differs})" if differs else ""))
        if when_ok and not ok:
            fix = " and ".join(f"pip install '{k}{v}'" + _beyond_checked(k, v, ctx) for k, v in fact.requires.items())
    return "; ".join(parts), fix


def _beyond_checked(name: str, spec: str, ctx: _Ctx) -> str:
    """A note for a ``pip install`` fix whose versions lie beyond the newest release the facts were checked at (a new
    user's trial: a fix past ``checked_up_to``, where the facts are unverified, read as a plain remedy)."""
    known = ctx.catalog.packages_table.get(name)
    checked = known.checked_up_to if known else None
    if checked is None or satisfies(checked, spec):
        return ""
    import re

    # a lower bound at or past the checked release (clauses parsed here: a plan from the cached catalog imports no
    # packaging.specifiers)
    lows = [m.group(2) for c in spec.split(",") if (m := re.match(r"^\s*(>=|>)\s*([^\s,]+)\s*$", c))]
    try:
        beyond = any(at_least(low, checked) for low in lows)
    except ValueError:
        return ""
    if not beyond:
        return ""
    return f" (newer than {checked}, the newest {name} the facts were checked at: not verified there)"


def _refusing(facts: Sequence[Any], value: str, ctx: _Ctx, assumed: list[str]) -> Any:
    """The first negative fact (``supported: false``) among ``facts`` that names ``value`` and holds here, or None."""
    return next((f for f in facts if not f.supported and value in f.values and _holds(f, ctx, assumed)), None)


def _negative_refusal(facts: Sequence[Any], value: str, ctx: _Ctx, assumed: list[str], code: str, what: str,
                      backend: str) -> Any:
    """The negative fact (``supported: false``) among ``facts`` (activation or routing facts) that refuses ``value``
    here, or None. Where none does but one would at some value of an input the deployment leaves unstated
    (:func:`unstated_refusal`), that unknown is recorded in ``ctx`` (``code``, ``what``), issue 21."""
    refused = _refusing(facts, value, ctx, assumed)
    if refused is None:
        maybe = next(((f, hit) for f in facts if not f.supported and value in f.values and f.when is not None
                      and (hit := unstated_refusal(f, ctx, f.when.keys(), f.when.matches)) is not None), None)
        if maybe is not None:
            ctx.unknowns.append(_unstated_unknown(maybe[0], maybe[1][0], maybe[1][1], code, what, backend))
    return refused


def _under(fact: Conditional) -> str:
    """`` (with <package> <versions>)`` for a negative fact bounded by package versions (the releases it names), else ''."""
    if not fact.requires:
        return ""
    return " (with " + ", ".join(f"{k} {v}" for k, v in fact.requires.items()) + ")"


def _negative_fix(fact: Conditional, ok: bool, gated_fix: str | None) -> str | None:
    """The fix of a refusal by negative fact ``fact``: leaving its package version bound (each package outside its
    specifier), offered only where the positive facts then take the value: they take it here (``ok``), or only at other
    package versions (``gated_fix``, their version gate's fix, named with it). None where the fact has no version
    bound or the positive facts take the value at no version (no fix exists)."""
    if not fact.requires or not (ok or gated_fix):
        return None
    leave = " or ".join(f"{k} outside {v}" for k, v in fact.requires.items())
    return leave if ok else f"{leave}: {gated_fix}"


def _version_gate(fact: Conditional | None, ctx: _Ctx) -> bool:
    """True when ``fact``'s ``when`` holds but its ``requires`` (a package version gate) does not: a refusal
    on evidence (the fact says which versions run it), not a gap."""
    if fact is None or not fact.requires or (fact.when is not None and not fact.when.matches(ctx.facts)):
        return False
    return not _requires(fact.requires, ctx)[0]


def _gap(ctx: _Ctx, owner: Any, kind: str, code: str, detail: str, settle: str, source: str,
         backend: str | None) -> list[Reason]:
    """A value no applicable fact of list ``kind`` names: refused when ``owner``'s list is exhaustive there (citing
    the upstream check), else recorded as unknown in ``ctx.unknowns`` (unverified)."""
    d = owner.decision(kind, ctx.facts.get("engine"))
    if d is not None:
        return [Reason(code=cast(Any, code), detail=f"{detail} (exhaustive {kind} list: {d.why or d.exhaustive})",
                       source=d.where(), backend=backend)]
    ctx.unknowns.append(Unknown(code=cast(Any, code), detail=detail, settle=settle, source=source, backend=backend))
    return []


# ------------------------------------------------------------------------------------------- checks
def _parallel_fix(c: Constraint, ctx: _Ctx, engines: Sequence[str] | None) -> str | None:
    """The tp/ep fix of a violated constraint ``c``, checked in every engine of ``engines`` (default: all the
    deployment's) where ``c`` is violated too, i.e. every engine the reason will name: a change that works
    in all of them, or labeled with those it works in (:func:`~moe_select.conditions.parallel_fixes_for_engines`)."""
    pool = ctx.engine_facts or {str(ctx.facts.get("engine")): ctx.facts}
    names = [e for e in (engines or pool) if e in pool]
    holds = {e: pool[e] for e in names if c.applies(pool[e]) and not c.holds(pool[e])} or {"": ctx.facts}
    key = (id(c), tuple(holds))
    if key not in ctx.fixes:
        # the rules every runner obeys, less those whose package gate fails here (an EP limit of old SGLang releases does
        # not bound the fix at the deployment's release)
        also = [k for k in ctx.catalog.common.constraints if not k.requires or _requires(k.requires, ctx)[0]]
        ctx.fixes[key] = parallel_fixes_for_engines([c], holds, also=also, memo=ctx.verdicts)
    return ctx.fixes[key]


def _no_such_split(c: Constraint, facts: dict[str, Any]) -> bool:
    """True for a constraint on the per-rank intermediate size where ep does not divide tp: ``moe_tp`` is then a fraction
    (:func:`moe_select.conditions.moe_tp_of`), the size it gives (768 x 7 / 8 = 672) is a split no engine makes, and the
    parallelism facts refuse the deployment on their own (a field round's checker read the number as a real size)."""
    moe_tp = facts.get("moe_tp")
    return (isinstance(moe_tp, Fraction) and moe_tp.denominator != 1
            and "intermediate_per_rank" in {c.field, *_quantities_read(c)})


def _constraint_reasons(cons: Iterable[Constraint], ctx: _Ctx, owner: str, backend: str | None,
                        assumed: list[str], engines: Sequence[str] | None = None) -> list[Reason]:
    """A reason per constraint of ``cons`` that applies and is violated in ``ctx``; a constraint on a
    quantity a tp/ep change can fix gets a fix checked in each of ``engines`` (default: every engine of the
    deployment) where it is violated too."""
    out = []
    for c in cons:
        unknown = [q for q in _quantities_read(c) if _unstated(ctx.facts, q)]
        if unknown:  # a fact about an input the deployment left out: say so, do not guess
            # refused at some value of the input: not supported (issue 21); refused at none: a note that it was not read
            hit = unstated_refusal(c, ctx, _quantities_read(c),
                                   lambda f, c=c: c.applies(f) and not c.holds(f))
            if hit is not None:
                ctx.unknowns.append(_unstated_unknown(c, *hit, c.code, f"{owner}: {c.field} {_test_text(c)}"
                                                      + (f" ({c.why})" if c.why else ""), backend))
                continue
            rest = c.when.model_copy(update={k: None for k in unknown}) if c.when is not None else None
            if rest is None or rest.matches(ctx.facts):
                assumed.append(f"{', '.join(unknown)} not given: not checked whether {c.field} {_test_text(c)}"
                               f" ({c.why or 'see the fact'}) [{c.where()}]")
            continue
        if not c.applies(ctx.facts) or not _holds(c, ctx, assumed):
            continue
        v = c.violation(ctx.facts)
        if v is None:
            continue
        if _no_such_split(c, ctx.facts):
            continue
        why = f" ({c.why})" if c.why else ""
        cond = c.describe_conditions()
        cond = f" (when {cond})" if cond else ""
        fix = _parallel_fix(c, ctx, engines) if c.field in PARALLEL_FIELDS else None
        more = ""
        if c.field in CAPACITY_FIELDS and ctx.capacity is not None:  # name the variable, the numbers, the fix
            more, fix = f"; {a2a_capacity.describe(ctx.capacity)}", a2a_capacity.fix(ctx.capacity, c.field)
        out.append(Reason(code=c.code, detail=f"{owner}{cond}: {v}{why}{more}", source=c.where(), fix=fix, backend=backend))
    return out


def _method_verdict(m: MethodRunners, ctx: _Ctx) -> tuple[tuple[list[str], tuple[Any, ...]] | None, bool, list[str], list[str]]:
    """What engine method ``m`` says here, for any runner it does not build: ``(unstated hit, holds, assumptions,
    engine facts used)``, where the hit is :func:`unstated_refusal`'s and the last two are what :func:`_holds` appends to
    the plan's assumptions and ``ctx.engine_used`` when it holds. Computed once per facts and method (``check`` runs
    every runner of every cell: the methods list is the longest the selector reads) and replayed by
    :func:`_method_reasons`."""
    key = (id(ctx.facts), id(m))
    memo = ctx.method_memo.get(key)
    if memo is not None and memo[0] is ctx.facts:
        return memo[1]
    assert m.when is not None
    hit = unstated_refusal(m, ctx, m.when.keys(), m.when.matches)
    assumptions: list[str] = []
    used: list[str] = []
    holds = False
    if hit is None:
        before = len(ctx.engine_used)
        holds = _holds(m, ctx, assumptions)
        used = ctx.engine_used[before:]
        del ctx.engine_used[before:]
    verdict = (hit, holds, assumptions, used)
    ctx.method_memo[key] = (ctx.facts, verdict)
    return verdict


def _method_reasons(methods: Iterable[MethodRunners], ctx: _Ctx, name: str, assumed: list[str]) -> list[Reason]:
    """A reason for runner ``name`` per engine method of ``backends/common.yaml`` (:class:`MethodRunners`) that holds
    here and does not build it. Where the method's ``when`` reads an input the deployment leaves unstated
    (``checkpoint_layout``: an inline MXFP4 deployment that does not say compressed-tensors) and would hold at some
    value of it, the plan says what it assumed (the format's native serialization, the common one) instead of
    refusing or marking every other runner unverified: a gate on an unstated layout would block the working
    deployments of the common layout in strict mode."""
    out = []
    for m in methods:
        if name in m.runners:
            continue
        what = (f"{name} is not built by {m.why}, which builds {', '.join(m.runners)}" if m.runners
                else f"no runner can load this layer: {m.why}")   # the same words for every runner: printed once
        hit, holds, assumptions, used = _method_verdict(m, ctx)
        if hit is not None:
            keys, values = hit
            assumed.append(f"{', '.join(keys)} not given: taken as not {', '.join(map(str, values))}; if it is, {what} "
                           f"[{m.where()}] ({'; '.join(_state_how(k) for k in keys)})")
            continue
        if holds:
            assumed.extend(assumptions)
            ctx.engine_used.extend(used)
            out.append(Reason(code=m.code, detail=f"{what} (when {m.describe_conditions()})", source=m.where(),
                              backend=name, fix=f"runner: {' or '.join(m.runners)}" if m.runners else m.fix))
    return out


def _package_reasons(pkgs: Iterable[PackageNeedFact], ctx: _Ctx, owner: str, backend: str | None,
                     needs: list[PackageNeed]) -> list[Reason]:
    out = []
    for p in pkgs:
        if p.when is not None and not p.when.matches(ctx.facts):
            continue
        with_, assumptions = "", list[str]()
        if p.requires:  # a package interaction: the need holds only with these versions of other packages
            ok, assumptions, _ = _requires(p.requires, ctx)
            if not ok:
                continue
            with_ = " with " + ", ".join(f"{k} {v}" for k, v in p.requires.items())
        known = ctx.catalog.packages_table.get(p.name)
        module = known.module if known else p.name.replace("-", "_")
        install = (known.install if known else None) or f"pip install '{p.name}{p.version or ''}'"
        state, found = ctx.env.package(p.name, module)
        needs.append(PackageNeed(name=p.name, module=module, version=p.version, state=cast(Any, state), found=found,
                                 needed_by=owner, source=p.where(), install=known.install if known else None))
        spec = f" {p.version}" if p.version else ""
        where = "on this machine" if ctx.env.detected else "in the deployment's packages"
        if state == "absent":
            why = ctx.env.lookalike(p.name)  # a look-alike distribution was found instead (issue 21)
            out.append(Reason(code="dependency_missing", detail=f"{owner} needs {p.name}{spec}{with_} (import {module}); "
                              f"it is not installed ({where})" + (f": {why}" if why else ""), source=p.where(), fix=install,
                              backend=backend))
        elif state == "present" and found not in (None, "unknown") and not satisfies(found, p.version):
            assumed_ = f" ({'; '.join(assumptions)})" if p.requires and assumptions else ""
            out.append(Reason(code="dependency_missing", detail=f"{owner} needs {p.name}{spec}{with_}; {found} is installed "
                              f"({where}){assumed_}", source=p.where(), backend=backend,
                              fix=f"pip install '{p.name}{p.version}'" + (" or other versions of " + ", ".join(p.requires)
                                                                          if p.requires else "")))
        elif state != "absent" and found in (None, "unknown") and p.version and (pin := _engine_pin(ctx, p.name)) \
                and not satisfies(pin[0], p.version):
            # not declared: the version the declared engine release installs (its wheel's exact requirement)
            out.append(Reason(code="dependency_missing", detail=f"{owner} needs {p.name}{spec}{with_}; {p.name} assumed "
                              f"{pin[0]}, {pin[1]} (not declared)", source=p.where(), backend=backend,
                              fix=f"pip install '{p.name}{p.version}' and declare it (packages: {p.name}: <version>)"))
    return out


def _a2a_reasons(a2a: A2ACapability, ctx: _Ctx, needs: list[PackageNeed], assumed: list[str]) -> list[Reason]:
    """Deployment-level reasons of the all-to-all backend (they apply to every candidate)."""
    u, owner = ctx.u, f"a2a {a2a.a2a}"
    out: list[Reason] = []
    engine = ctx.facts.get("engine")
    if engine == INSTALL_ENGINE and a2a.module is None:
        out.append(Reason(code="no_adapter", detail=f"{owner} has no dispatcher in this install (plan-only: a serving engine "
                          "brings its own)", source=a2a.where("module"),
                          fix="an a2a backend with a dispatcher here (none, torch), or a serving engine"))
    for gone in a2a.unavailable:
        if engine not in gone.engines:
            continue
        if gone.requires:  # shipped, but fails under this engine with these package versions (where ``when`` holds)
            if gone.when is not None and not gone.when.matches(ctx.facts):
                # a ``when`` that reads an input the deployment leaves unstated (model.architecture) and holds at some
                # value of it leaves the backend unverified, never supported (issue 21)
                hit = unstated_refusal(gone, ctx, gone.when.keys(), gone.when.matches)
                if hit is not None:
                    ctx.unknowns.append(_unstated_unknown(gone, *hit, "a2a_unsupported", f"{owner} fails under {engine}: "
                                                          f"{gone.why}", None))
                continue
            ok, assumptions, _ = _requires(gone.requires, ctx)
            if not ok:
                continue
            assumed.extend(assumptions)
            bound = ", ".join(f"{k} {v}" for k, v in gone.requires.items())
            if gone.when is not None and gone.when.keys():
                bound += f" where {gone.when.describe()}"
            out.append(Reason(code="a2a_unsupported", detail=f"{owner} fails under {engine} with {bound}: {gone.why}",
                              source=gone.where(), fix="another a2a backend, another engine, or package versions "
                              f"outside {bound}"))
            continue
        out.append(Reason(code="a2a_unsupported", detail=f"{owner} is not shipped by {engine}: {gone.why}",
                          source=gone.where(), fix="another a2a backend, or another engine"))
    if not _arch_in(u.arch, a2a.archs.values):
        gap = _gap(ctx, a2a, "archs", "a2a_unsupported", f"{owner} runs on {', '.join(a2a.archs.values)}; this deployment is "
                   f"{_arch_label(u)}", f"a fact that {owner} runs on {u.arch}", a2a.archs.where(), None)
        out += [r.model_copy(update={"fix": "a2a: none"}) for r in gap]
    out += _constraint_reasons(a2a.constraints, ctx, owner, None, assumed)
    if ctx.capacity is not None:
        line = a2a_capacity.unchecked(ctx.capacity)
        if line:
            assumed.append(line)
    elif u.a2a_capacity is not None:
        assumed.append(f"a2a_capacity {u.a2a_capacity} ({u.provenance.get('a2a_capacity', 'given')}): {owner} has no capacity "
                       f"fact under {engine}: not read")
    out += _package_reasons(a2a.packages, ctx, owner, None, needs)
    if u.cuda_graph:
        for m in a2a.graph_modes(u.a2a_mode, u.phases):
            if not a2a.mode(m).cuda_graph:
                others = [x for x in a2a.modes if a2a.modes[x].cuda_graph]
                out.append(Reason(code="cuda_graph_unsupported", detail=f"{owner} {m} mode (used for decode) cannot be captured in a CUDA graph",
                                  source=a2a.mode(m).where(),
                                  fix=(f"a2a_mode: {others[0]}, or " if others else "") + "cuda_graph: false"))
        if not a2a.modes and a2a.cuda_graph is not None and not a2a.cuda_graph.supported:
            out.append(Reason(code="cuda_graph_unsupported", detail=f"{owner} cannot be captured in a CUDA graph",
                              source=a2a.cuda_graph.where(), fix="cuda_graph: false"))
    return out


def _values_check(facts: Sequence[Fact], attr: str, value: str, ctx: _Ctx, assumed: list[str]
                  ) -> tuple[bool, list[str], Fact | None, str, str | None]:
    """For list-valued facts: ``(value accepted, values of the applicable facts, a fact that would accept
    value but does not apply, why not, fix)``. Of several such facts, one whose ``when`` holds and whose
    package version gate fails (a refusal on evidence) is the one returned."""
    have: list[str] = []
    blocked: Fact | None = None
    for f in facts:
        vals = getattr(f, attr)
        vals = ["any"] if vals == "any" else list(vals)
        if _holds(f, ctx, assumed):
            have += [v for v in vals if v not in have]
        elif value in vals and (blocked is None or (not _version_gate(cast(Any, blocked), ctx)
                                                    and _version_gate(cast(Any, f), ctx))):
            blocked = f
    why, fix = _why_not(blocked, ctx) if blocked is not None else ("", None)
    return value in have, have, blocked, why, fix


def _arch_in(arch: str, specs: Sequence[str]) -> bool:
    """True when ``arch`` is named by ``specs`` (names, families, ranges: :func:`moe_select.vocab.arch_in`)."""
    from . import vocab

    fn = getattr(vocab, "arch_in", None)
    return fn(arch, specs) if fn is not None else arch in specs


def _support_reasons(cap: RunnerCapability, ctx: _Ctx, assumed: list[str]) -> list[Reason]:
    """The support rows against the deployment's arch and format. A negative row (``supported: false``) that
    applies refuses; an arch or format no row names, or a cell no applicable row lists, is refused where the
    ``archs`` / ``formats`` / ``support`` list is exhaustive and unknown where it is open; a row that fails on
    a package version (``requires``) refuses (a version gate)."""
    u, name = ctx.u, cap.runner
    for s in cap.support:
        if not s.supported and _arch_in(u.arch, s.archs) and u.quant in s.formats and _holds(s, ctx, assumed):
            # a row scoped to checkpoint architectures names the one it refused (the format alone did not decide)
            of = f" from a {ctx.facts['architecture']} checkpoint" if s.when is not None and s.when.architecture else ""
            if s.when is not None and s.when.activation_precision:  # a row that refuses an asked activation precision
                of += f" with {asked_precision(u, name)} activations"
            return [Reason(code=s.code, detail=f"{name} does not run {u.quant}{of} on {_arch_label(u)}{_under(s)}"
                           + (f": {s.why}" if s.why else ""), source=s.where(), backend=name, fix=s.fix)]
    for s in cap.support:  # a negative row that reads an input the deployment leaves unstated may refuse it (issue 21)
        if not s.supported and s.when is not None and _arch_in(u.arch, s.archs) and u.quant in s.formats:
            hit = unstated_refusal(s, ctx, s.when.keys(), s.when.matches)
            if hit is not None:
                ctx.unknowns.append(_unstated_unknown(s, *hit, s.code, f"{name} does not run {u.quant} on {u.arch}"
                                                      + (f" ({s.why})" if s.why else ""), name))
                break
    pos = [s for s in cap.support if s.supported]
    archs = list(dict.fromkeys(a for s in pos for a in s.archs))
    formats = list(dict.fromkeys(f for s in pos for f in s.formats))
    out: list[Reason] = []
    on_arch = [s for s in pos if _arch_in(u.arch, s.archs)]
    if not on_arch:
        out += _gap(ctx, cap, "archs", "arch_unsupported", f"{name} runs on {', '.join(archs)}; this deployment is {_arch_label(u)}",
                    f"a support row of {name} naming {u.arch}", pos[0].where() if pos else cap.where("support"), name)
    if u.quant not in formats:
        out += _gap(ctx, cap, "formats", "quant_unsupported", f"{name} runs {', '.join(formats)}; not {u.quant}",
                    f"a support row of {name} naming {u.quant}", pos[0].where() if pos else cap.where("support"), name)
    if not on_arch or u.quant not in formats:
        return out
    rows = [s for s in on_arch if u.quant in s.formats]
    if u.quant_params.get("weight_only"):
        # A weight-only checkpoint (no activation scales: moe_select/model_config.py, "Weight-only NVFP4") runs only
        # where the runner keeps 16-bit activations; a row that quantizes them does not decide it.
        a16 = [s for s in rows if _row_precision(s, u) in _SIXTEEN_BIT]
        quantizing = next((s for s in rows if s not in a16 and _holds(s, ctx, assumed)), None)
        rows = a16
        if not any(_holds(s, ctx, assumed) for s in rows) and quantizing is not None:
            ctx.unknowns.append(Unknown(
                code="quant_unsupported", backend=name, source=quantizing.where(),
                detail=f"{name} runs {u.quant} on {u.arch} with {_row_precision(quantizing, u)} activations; this "
                       f"checkpoint is weight-only (no activation scales: weight_only)",
                settle=f"a support row of {name} running {u.quant} with bf16 activations here"))
            return []
    asked = asked_precision(u, name)
    if asked is not None:
        # quant_config.activation_precision: only rows of that precision run it; a row of another precision that holds
        # here is the runner's answer for the format, not for this request
        others = [s for s in rows if _row_precision(s, u) != asked]
        other = next((s for s in others if _holds(s, ctx, assumed)), others[0] if others else None)
        rows = [s for s in rows if _row_precision(s, u) == asked]
        if not rows and other is not None:
            named = _row_precision(other, u)
            prec = named or "its own (the row names none)"
            gap = _gap(ctx, cap, "support", "quant_unsupported",
                       f"{name} runs {u.quant} on {u.arch} with {prec} activations{_under(other)}; the deployment asks "
                       f"activation_precision {asked}", f"a support row of {name} running {u.quant} with {asked} "
                       f"activations on {u.arch}", other.where(), name)
            ask = (f"quant_config.activation_precision {named} (or not given)" if named else
                   "quant_config.activation_precision not given") + ", or another runner"
            return [r.model_copy(update={"fix": ask}) for r in gap]
    if any(_holds(s, ctx, assumed) for s in rows):
        return []
    # A row that would hold but reads an input the deployment left out (its architecture): not decided either way.
    ungiven = [k for k in UNGIVEN if ctx.facts.get(k) is None]
    undecided = next((s for s in rows if s.when is not None and set(s.when.keys()) & set(ungiven)
                      and s.when.matches(ctx.facts, ignore=ungiven) and _requires(s.requires, ctx)[0]), None)
    if undecided is not None:
        keys = [k for k in undecided.when.keys() if k in ungiven]  # type: ignore[union-attr]
        ctx.unknowns.append(Unknown(code="quant_unsupported", detail=f"{name} runs {u.quant} on {u.arch} only when "
                                    f"{undecided.when.describe()}; {', '.join(keys)} not given",  # type: ignore[union-attr]
                                    settle="; ".join(STATE_HOW.get(k, f"state {k}") for k in keys),
                                    source=undecided.where(), backend=name))
        return []
    gate = next((s for s in rows if _version_gate(s, ctx)), None)
    if gate is not None:
        why, fix = _why_not(gate, ctx)
        return [Reason(code="quant_unsupported", detail=f"{name} runs {u.quant} on {u.arch} only {why}", source=gate.where(),
                       fix=fix, backend=name)]
    if rows:
        why, _ = _why_not(rows[0], ctx)
        detail, src = f"{name} runs {u.quant} on {u.arch} only {why}", rows[0].where()
    else:
        elsewhere = sorted({a for s in pos if u.quant in s.formats for a in s.archs})
        detail = (f"{name} on {u.arch} runs {', '.join(dict.fromkeys(f for s in on_arch for f in s.formats))}; not {u.quant} "
                  f"({u.quant} runs on {', '.join(elsewhere)})")
        src = on_arch[0].where()
    return _gap(ctx, cap, "support", "quant_unsupported", detail, f"a support row of {name} for {u.quant} on {u.arch} here", src, name)


_SIXTEEN_BIT = ("bf16", "fp16")


def asked_precision(u: Understood, runner: str) -> str | None:
    """The activation precision the deployment asks of ``runner`` (``quant_config.activation_precision``), or None
    (the runner's default): None also where ``activation_precision_runners`` names other runners (an engine flag
    only those read: an activation-precision entry's ``runners`` in backends/engines/)."""
    asked = u.quant_params.get("activation_precision")
    scope = u.quant_params.get("activation_precision_runners")
    return None if asked is None or (scope is not None and runner not in scope) else str(asked)


def _runner_ctx(ctx: _Ctx, runner: str) -> _Ctx:
    """``ctx`` as ``runner``'s facts see it: without the asked activation precision where the request is not read by
    ``runner`` (:func:`asked_precision`); the lists it collects are shared with ``ctx``."""
    if ctx.facts.get("activation_precision") is None or asked_precision(ctx.u, runner) is not None:
        return ctx
    return replace(ctx, facts=_unasked(ctx.facts),
                   engine_facts={e: _unasked(f) for e, f in ctx.engine_facts.items()})


def _unasked(facts: Mapping[str, Any]) -> dict[str, Any]:
    """``facts`` with no activation precision asked (both keys that read it: When.activation_precision, _not)."""
    from .conditions import NONE_ASKED

    return {**facts, "activation_precision": None, "activation_precision_not": NONE_ASKED}


def _row_precision(s: Support, u: Understood) -> str | None:
    """The activation precision support row ``s`` runs ``u.quant`` with (its ``activation_precision``, else the
    format's; None: the format fixes none)."""
    fmt = lookup(u.quant)
    return s.activation_precision.get(u.quant) or (fmt.activation if fmt else None)


def _support_row(cap: RunnerCapability, ctx: _Ctx) -> Support | None:
    """The first supported row of ``cap`` that holds here (for a weight-only checkpoint, one with 16-bit
    activations first)."""
    u = ctx.u
    asked = asked_precision(u, cap.runner)
    rows = [s for s in cap.support if s.supported and _arch_in(u.arch, s.archs) and u.quant in s.formats
            and _holds(s, ctx, []) and (asked is None or _row_precision(s, u) == asked)]
    if u.quant_params.get("weight_only"):
        rows.sort(key=lambda s: _row_precision(s, u) not in _SIXTEEN_BIT)
    return rows[0] if rows else None


def check_runner(cap: RunnerCapability, ctx: _Ctx, needs: list[PackageNeed], assumed: list[str]) -> list[Reason]:
    """Every reason ``cap`` cannot serve the deployment of ``ctx`` under its engine (not counting rules
    and a2a-level reasons)."""
    ctx = _runner_ctx(ctx, cap.runner)
    u, name, out = ctx.u, cap.runner, []
    engine = ctx.facts.get("engine")
    # an engine the runner's own engines fact does not name: where its list is open, the engine's closed runner option
    # (names.yaml) still decides. (A file with no engines fact at all is judged by its other facts under every engine:
    # the evidence tests' runner files are written so; an engine author's trial, break53, found such a plugin runner
    # planned supported under serving engines that refuse its name: left open, see the issue notes.)
    unnamed = _unnamed_for_engine(name, engine) if cap.engines is not None and engine not in cap.engines.values else None
    if unnamed is not None:
        out.append(unnamed)
    unreleased = _unreleased_name(name, engine, ctx)
    if unreleased is not None:
        # a launch line that names the runner by the release's option is refused by the engine's parser; otherwise the
        # engine may still reach the runner itself (a quantization method that builds it with the option unset or
        # absent: an old release's weight-only int path), which the table of names cannot tell: unverified, strict decides
        if u.runner == name and str(u.provenance.get("runner", "")).startswith("launch line"):
            out.append(unreleased)
        else:
            ctx.unknowns.append(Unknown(code="engine_unsupported", backend=name, source=unreleased.source,
                                        detail=f"{unreleased.detail}: it runs only where {engine} picks it itself",
                                        settle=f"a fact that {engine} "
                                               f"builds {name} without naming it (a methods fact with option auto), or "
                                               f"{unreleased.fix}"))
    if cap.engines is not None and engine in cap.engines.values:
        ctx.engine_used.append(cap.engines.where())
        # the runner's own file says the engine ships it, but the engine's closed runner option (as read) takes no such
        # name: the two facts disagree, so not supported (a ninth new user's trial: planned, then --emit refused it)
        clash = _unnamed_for_engine(name, engine) if engine not in cap.engines.options else None
        if clash is not None:
            ctx.unknowns.append(Unknown(code="engine_unsupported", backend=name, source=clash.source,
                                        detail=f"{cap.engines.where()} says {engine} ships {name}; {clash.detail}: a stock "
                                               f"{engine} refuses it and --emit cannot write it",
                                        settle=f"the value your {engine} build's runner option takes for {name}: "
                                               f"engines.options in {cap.engines.where().rsplit(':', 1)[0]}"))
    # this install (engine moe_select) runs what has an adapter here: a runner without one is refused by no_adapter
    # (adapter_reasons), not by an engines list whose exhaustive decision cites another engine's code (an eighth new
    # user's trial: TensorRT-LLM's get_moe_cls was cited for moe_select)
    if cap.engines is not None and engine not in cap.engines.values and unnamed is None \
            and not (engine == INSTALL_ENGINE and cap.module is None):
        gap = _gap(ctx, cap, "engines", "engine_unsupported", f"{name} is not shipped by {engine} (shipped by "
                   f"{', '.join(cap.engines.values)})", f"a fact that {engine} ships {name}", cap.engines.where(), name)
        out += [r.model_copy(update={"fix": f"engine: {' or '.join(cap.engines.values)}, or another runner"}) for r in gap]
    out += _support_reasons(cap, ctx, assumed)
    act = u.model.activation
    act_facts = [f for f in cap.activations if f.supported]
    act_refused = _negative_refusal(cap.activations, act, ctx, assumed, "activation_unsupported",
                                    f"{name} does not apply {act}", name)
    ok, have, blocked, why, fix = _values_check(act_facts, "values", act, ctx, assumed)
    if act_refused is not None:
        out.append(Reason(code="activation_unsupported", detail=f"{name} does not apply {act}{_under(act_refused)}",
                          source=act_refused.where(), backend=name,
                          fix=_negative_fix(act_refused, ok, fix if _version_gate(blocked, ctx) else None)))
    elif not ok:
        more = f"; {act} only {why}" if why else ""
        src = next((f for f in act_facts if act in f.values), (act_facts or cap.activations)[0])
        detail = f"{name} computes {', '.join(have) or 'nothing here'}{more}; the model uses {act}"
        base = CLAMPED_ACTIVATIONS.get(act)
        # a negative fact refusing the base activation here refutes the fallback to it
        base_refused = None if base is None else _refusing(cap.activations, base, ctx, assumed)
        if _version_gate(blocked, ctx):
            out.append(Reason(code="activation_unsupported", detail=detail, source=src.where(), fix=fix, backend=name))
        elif base_refused is not None:
            out.append(Reason(code="activation_unsupported", detail=f"{detail}; {name} does not apply {base}, its base "
                              f"activation{_under(base_refused)}", source=base_refused.where(), backend=name))
        elif base is not None and _values_check(act_facts, "values", base, ctx, assumed)[0]:
            # The base activation is taken here; whether the clamp is applied no fact says (an exhaustive list is a
            # check of the base activation, not of the limit): unverified, never refused, never planned as plain silu.
            ctx.unknowns.append(Unknown(code="activation_unsupported", detail=f"{detail} (swiglu_limit "
                                        f"{u.model.swiglu_limit}): {name} takes {base}; no fact says it applies the clamp",
                                        settle=f"an activations fact of {name} naming {act} here (upstream code passing "
                                        "swiglu_limit to its kernel)", source=src.where(), backend=name))
        else:
            out += _gap(ctx, cap, "activations", "activation_unsupported", detail, f"an activations fact of {name} naming {act} here",
                        src.where(), name)
    routing = u.model.routing
    routing_facts = [f for f in cap.routing if f.supported]
    refused = _negative_refusal(cap.routing, routing, ctx, assumed, "routing_unsupported",
                                f"{name} does not apply {routing} routing", name)
    ok, have, blocked, why, fix = _values_check(routing_facts, "values", routing, ctx, assumed)
    takes_topk = "any" in have
    if refused is not None:
        out.append(Reason(code="routing_unsupported", detail=f"{name} does not apply {routing} routing{_under(refused)}",
                          source=refused.where(), backend=name,
                          fix=_negative_fix(refused, ok, fix if _version_gate(blocked, ctx) else None)))
    elif takes_topk and routing in WEIGHT_ON_INPUT_ROUTINGS:
        if not any(f.values == "any" and f.weight_on_input and _holds(f, ctx, []) for f in routing_facts):
            out += _gap(ctx, cap, "routing", "routing_unsupported", f"{name} takes pre-computed top-k; no fact says it applies the "
                        f"routing weight to the expert input, which {routing} routing needs",
                        f"a routing fact of {name} with weight_on_input: true here",
                        next(f for f in routing_facts if f.values == "any").where(), name)
    elif not ok and not takes_topk:
        more = f"; {routing} only {why}" if why else ""
        rsrc = next((f for f in routing_facts if f.values != "any" and routing in f.values),
                    (routing_facts or cap.routing)[0])
        detail = f"{name} routes inside the kernel with {', '.join(have) or 'nothing here'}{more}; the model routes with {routing}"
        if _version_gate(blocked, ctx):
            out.append(Reason(code="routing_unsupported", detail=detail, source=rsrc.where(), fix=fix, backend=name))
        else:
            out += _gap(ctx, cap, "routing", "routing_unsupported", detail, f"a routing fact of {name} naming {routing} here",
                        rsrc.where(), name)
    out += _dispatch_reasons(cap, ctx, assumed)
    shipped = [e for e in ctx.engine_facts if cap.engines is None or e in cap.engines.values] or None
    out += _constraint_reasons(cap.constraints, ctx, name, name, assumed, shipped)
    out += _method_reasons(ctx.catalog.common.methods, ctx, name, assumed)
    out += _package_reasons(cap.packages, ctx, name, name, needs)
    prebuilt = cap.jit is not None and ctx.env.prebuilt.get(cap.jit.package) is True
    for t in cap.toolchain:
        if (prebuilt and t.tool == "nvcc") or not _holds(t, ctx, assumed):
            continue
        cond = t.describe_conditions()
        cond = f" for {cond}" if cond else ""
        why_ = f" ({t.why})" if t.why else ""
        if t.tool == "cuda":  # the CUDA runtime: declared only (``cuda``), never detected
            if ctx.env.cuda is None:
                assumed.append(f"CUDA runtime >= {t.min} assumed for {name}{cond} (cuda not declared; {t.where()})")
            elif not at_least(ctx.env.cuda, t.min):
                out.append(Reason(code="toolchain_unsupported", detail=f"{name}{cond} needs a CUDA runtime >= {t.min}; "
                                  f"cuda is {ctx.env.cuda}{why_}", source=t.where(), fix=f"a CUDA {t.min} or newer runtime",
                                  backend=name))
        elif ctx.env.nvcc is None and ctx.env.detected:
            out.append(Reason(code="toolchain_unsupported", detail=f"{name}{cond} JIT-compiles with nvcc >= {t.min}; "
                              f"no nvcc found on this machine{why_}", source=t.where(), fix=f"install CUDA toolkit >= {t.min}", backend=name))
        elif ctx.env.nvcc is not None and not at_least(ctx.env.nvcc, t.min):
            out.append(Reason(code="toolchain_unsupported", detail=f"{name}{cond} JIT-compiles with nvcc >= {t.min}; "
                              f"nvcc is {ctx.env.nvcc}{why_}", source=t.where(), fix=f"nvcc >= {t.min}", backend=name))
    if u.cuda_graph:
        held = [i for i, f in enumerate(cap.cuda_graph) if _holds(f, ctx, assumed)]
        graph = [cap.cuda_graph[i] for i in held]
        if graph and not graph[-1].supported:
            out.append(Reason(code="cuda_graph_unsupported", detail=f"{name} cannot be captured in a CUDA graph"
                              + (f" (when {graph[-1].describe_conditions()})" if graph[-1].describe_conditions() else ""),
                              source=graph[-1].where(), fix="cuda_graph: false (SGLang: --disable-cuda-graph)", backend=name))
        else:
            # a later refusal that reads an input the deployment leaves unstated may decide it (issue 21)
            later = next(((f, hit) for f in cap.cuda_graph[held[-1] + 1 if held else 0:]
                          if not f.supported and f.when is not None
                          and (hit := unstated_refusal(f, ctx, f.when.keys(), f.when.matches)) is not None), None)
            if later is not None:
                ctx.unknowns.append(_unstated_unknown(later[0], later[1][0], later[1][1], "cuda_graph_unsupported",
                                                      f"{name} cannot be captured in a CUDA graph", name))
            elif not graph:
                gap = _gap(ctx, cap, "cuda_graph", "cuda_graph_unsupported", f"no capture fact of {name} applies here",
                           f"a cuda_graph fact of {name} that applies here", cap.cuda_graph[0].where(), name)
                out += [r.model_copy(update={"fix": "cuda_graph: false (SGLang: --disable-cuda-graph)"}) for r in gap]
    if engine == INSTALL_ENGINE:
        out += adapter_reasons(cap, ctx.catalog, u)
    return out


def adapter_reasons(cap: RunnerCapability, catalog: Catalog, u: Understood) -> list[Reason]:
    """What this install's own code refuses for runner ``cap`` (engine ``moe_select``), each ``no_adapter`` naming
    the fact: no adapter module here (and no plugin: a plan-only runner), an ``adapter`` block that leaves out the
    deployment's format or activation (the core raises for them: ``RunnerInputError``), a dispatch format the
    all-to-all hands over that the module does not register (``registers``; resolve's registry check), an NVFP4
    activation scaling the ``adapter`` block's ``activation_scales`` leaves out (a W4A16 adapter: per_token)."""
    name, act = cap.runner, u.model.activation
    module = catalog.adapter(name, u.quant, act)
    if module is None:
        if cap.module is not None and cap.adapter is not None:
            return [Reason(code="no_adapter", detail=f"{name}'s adapter in this install implements {', '.join(cap.adapter.formats)}"
                           + (f" with {', '.join(cap.adapter.activations)}" if cap.adapter.activations else "")
                           + f"; {u.quant} with {act}"
                           + (f" (swiglu_limit {u.model.swiglu_limit}: its kernels do not apply the clamp)"
                              if act in CLAMPED_ACTIVATIONS else "")
                           + " is plan-only here", source=cap.adapter.where(), backend=name)]
        return [Reason(code="no_adapter", detail=f"{name} has no adapter in this install (plan-only: an engine must "
                       "bring its own implementation)", source=cap.where("module"), backend=name)]
    a2a = catalog.a2a.get(u.a2a)
    if module == cap.module and a2a is not None:
        missing = [f for f in a2a.formats_used(tuple(u.a2a_modes), INSTALL_ENGINE) if f not in cap.registers]
        if missing:
            return [Reason(code="no_adapter", detail=f"{name}'s adapter registers {', '.join(cap.registers)} dispatch; a2a {u.a2a} "
                           f"hands over {', '.join(missing)}", source=cap.where("registers"), backend=name,
                           fix=f"a2a: none, or an a2a backend handing over {', '.join(cap.registers)} rows")]
    scale, facts = activation_scale_of(u), cap.adapter
    if (module == cap.module and facts is not None and facts.activation_scales is not None and scale is not None
            and scale not in facts.activation_scales):
        prec = sorted({str(r.activation_precision[u.quant]) for r in cap.support
                       if r.supported and u.quant in r.activation_precision
                       and (r.when is None or r.when.engine is None or INSTALL_ENGINE in r.when.engine)})
        computes = f"computes {u.quant} with {'/'.join(prec)} activations" if prec else f"is planned for {u.quant}"
        if prec and all(p in ("bf16", "fp16") for p in prec):
            computes += " (weight-only: no activation is quantized, so no activation scale is applied)"
        means = {"per_token": "a dynamic FP4 quantization of each token row",
                 "per_tensor": "one static FP32 input scale per tensor"}[scale]
        return [Reason(code="no_adapter", detail=f"{name}'s adapter in this install {computes}; the deployment states "
                       f"activation_scale {scale} ({means}), which it does not compute: it takes activation_scale {', '.join(facts.activation_scales)} only, so {u.quant} with "
                       f"activation_scale {scale} is plan-only here", source=facts.where("activation_scales"),
                       backend=name, fix=f"activation_scale {', '.join(facts.activation_scales)}, or a serving engine")]
    return []


def _dispatch_reasons(cap: RunnerCapability, ctx: _Ctx, assumed: list[str]) -> list[Reason]:
    """The a2a backend's dispatch formats against those the runner consumes; the runner's a2a restrictions."""
    u, name = ctx.u, cap.runner
    a2a = ctx.catalog.a2a.get(u.a2a)
    out: list[Reason] = []
    restrict = [f for f in cap.a2a if _holds(f, ctx, assumed)]
    allowed = sorted({v for f in restrict for v in f.values})
    if restrict and u.a2a not in allowed:
        gap = _gap(ctx, cap, "a2a", "a2a_unsupported", f"{name} is paired with a2a {', '.join(allowed)}; no fact pairs it with "
                   f"{u.a2a}", f"an a2a fact of {name} naming {u.a2a} here", restrict[0].where(), name)
        if gap or a2a is None:
            return [r.model_copy(update={"fix": f"a2a in {{{', '.join(allowed)}}}"}) for r in gap] + (
                _dispatch_precision_reasons(a2a, name, ctx, assumed) if a2a is not None else [])
        # An open a2a list leaves the pairing unverified; the dispatch formats can still refuse it (an exhaustive
        # dispatch list: the engine's own format check).
    if a2a is None:
        return out
    consumed = {f for d in cap.dispatch if _holds(d, ctx, assumed) for f in d.formats}
    engine = ctx.facts.get("engine")
    used = a2a.formats_used(tuple(u.a2a_modes), engine)
    missing = [f for f in used if f not in consumed]
    if missing:
        fix = None
        if a2a.modes:
            ok_modes = [m for m, fact in a2a.modes.items() if fact.format_for(engine) in consumed]
            if ok_modes:
                capturable = a2a.modes[ok_modes[0]].cuda_graph
                fix = f"a2a_mode: {ok_modes[0]}" + ("" if capturable or not u.cuda_graph else " and cuda_graph: false")
        modes = f" in {'/'.join(u.a2a_modes)} mode" if u.a2a_modes else ""
        src = next((d for d in cap.dispatch), cap.dispatch[0])
        gap = _gap(ctx, cap, "dispatch", "a2a_unsupported", f"{name} consumes {', '.join(sorted(consumed)) or 'no'} dispatch; a2a {u.a2a}"
                   f"{modes} hands over {', '.join(missing)} (a2a_mode {u.a2a_mode or 'n/a'} uses {', '.join(u.a2a_modes) or 'one mode'})",
                   f"a dispatch fact of {name} consuming {', '.join(missing)} here", src.where(), name)
        out += [r.model_copy(update={"fix": fix}) for r in gap]
    return out + _dispatch_precision_reasons(a2a, name, ctx, assumed)


def _dispatch_precision_reasons(a2a: A2ACapability, name: str, ctx: _Ctx, assumed: list[str]) -> list[Reason]:
    """The deployment's ``dispatch_precision`` for this MoE layer kind against what all-to-all ``a2a`` sends with runner
    ``name`` under this engine (issue 21; ``auto``: the engine's choice, not checked). A negative fact that holds and
    names it refuses (``a2a_unsupported``); a positive fact that holds and names it supports it; a positive fact whose
    package version gate fails refuses; anything else is a gap of the ``dispatch_precision`` list (refused where it is
    exhaustive for the engine, else unverified)."""
    u = ctx.u
    want = u.dispatch_precision
    if want == "auto":
        return []
    owner, layer = f"a2a {a2a.a2a}", f"the {u.layer_kind} layers ({u.quant}, runner {name})"
    facts = [f for f in a2a.dispatch_precision if f.holds_for(name)]
    refused = next((f for f in facts if not f.supported and want in f.values and _holds(f, ctx, assumed)), None)
    auto_fix = "dispatch_precision: auto (the engine chooses from the layer's weights)" if u.layer_kind == "main" else (
        f"dispatch_precision: {{{u.layer_kind}: auto}} (the engine chooses from the layer's weights)")
    if refused is not None:
        return [Reason(code="a2a_unsupported", detail=f"{owner} does not send {want} activations for {layer}{_under(refused)}"
                       + (f": {refused.why}" if refused.why else ""), source=refused.where(), backend=name, fix=auto_fix)]
    ok, have, blocked, why, fix = _values_check([f for f in facts if f.supported], "values", want, ctx, assumed)
    if ok:
        return []
    other = next((f for f in a2a.dispatch_precision if f.supported and want in f.values and not f.holds_for(name)
                  and (f.when is None or f.when.matches(ctx.facts))), None)
    more = (f"; {want} only {why}" if why else "") + (f"; {want} only with runner {', '.join(other.runners or [])} "
                                                      f"[{other.where()}]" if other is not None else "")
    detail = f"{owner} sends {', '.join(have) or 'no precision a fact names'} for {layer}{more}; dispatch_precision is {want}"
    if _version_gate(blocked, ctx):
        return [Reason(code="a2a_unsupported", detail=detail, source=cast(Any, blocked).where(), fix=fix or auto_fix, backend=name)]
    src = blocked or other or next((f for f in a2a.dispatch_precision if f.supported), None)
    gap = _gap(ctx, a2a, "dispatch_precision", "a2a_unsupported", detail,
               f"a dispatch_precision fact of a2a {a2a.a2a} naming {want} here", src.where() if src is not None
               else a2a.where(), name)
    return [r.model_copy(update={"fix": (f"runner {', '.join(other.runners or [])}, or " if other is not None else "") + auto_fix
                                 + (f", or one of {', '.join(have)}" if have else "")}) for r in gap]


def _read_at(engine: str, version: str | None, newer: bool) -> bool:
    """Whether the declared ``version`` of ``engine`` lies within the releases whose runner values names.yaml read
    (its ``choices`` row's ``read_up_to``; without one, not ``newer`` than the facts' checked version)."""
    from packaging.version import InvalidVersion, Version

    from .engine_tables import names

    ch = names().choices_of(engine, "runner")
    if ch is None or ch.read_up_to is None or version is None:
        return not newer
    try:
        return Version(version) <= Version(ch.read_up_to)
    except InvalidVersion:
        return False


def _closed_runner_option(name: str, engine: str) -> Any:
    """``engine``'s runner-option choices row (backends/engines/names.yaml) where it is closed and takes no value
    ``name`` (as the row normalizes it), else None."""
    from .engine_tables import names

    table = names()
    ch = table.choices_of(engine, "runner")
    if ch is None or not ch.closed or ch.norm(name) in table.accepted(engine, "runner"):
        return None
    return ch


def _not_an_engine_name(name: str, engine: str, mean: str, close: str | None) -> Reason | None:
    """A runner no capability file describes, under an engine whose runner option is closed (backends/engines/names.yaml
    ``choices``: SGLang's argparse choices, vLLM's MoEBackend Literal, TensorRT-LLM's MoeConfig Literal) that takes no
    such name: ``engine_unsupported`` (the engine refuses it at startup), citing the choices row. None where the option
    is open or takes the name (a backend of the engine's that no capability file describes yet: unverified). The caller
    asks only for a declared engine version the facts were checked at (a newer or undeclared release may take a value
    the table has not read)."""
    ch = _closed_runner_option(name, engine)
    if ch is None:
        return None
    return Reason(code="engine_unsupported", backend=name, source=ch.where(),
                  detail=f"no capability file describes runner {name}{mean}, and {engine}'s runner option takes no such "
                         f"value: it refuses it at startup ({ch.source})",
                  fix=f"runner: {close}" if close else f"a runner {engine} takes (moe-select explain lists them)")


def _unreleased_name(name: str, engine: str | None, ctx: _Ctx) -> Reason | None:
    """``engine_unsupported`` where the engine's release (declared, or detected) is older than the first release whose
    runner option takes the engine's name for ``name`` (backends/engines/names.yaml ``choices`` ``since``, read in the
    engines' releases) and that option has no earlier value reaching it: the engine refuses the value at startup, so
    the runner cannot be asked of that release (a new user's tenth trial: a runner first shipped in a later release
    was supported in strict mode while ``--emit`` refused it). None where no release is declared or detected (the
    newest is assumed, as ``--emit`` does). The caller refuses with it only a runner a launch line names by the option
    (the engine's parser refuses the value); elsewhere it makes the candidate unverified (the engine may reach the
    runner itself, unnamed)."""
    from .engine_tables import names

    if engine is None or engine == INSTALL_ENGINE:
        return None
    known, theirs = names().runner_for(engine, name, ctx.u.quant)
    c = names().choices_of(engine, "runner")
    if not known or theirs is None or c is None or theirs in c.earlier:
        return None
    pkg = ctx.catalog.engine_package(engine)
    state, version = ctx.env.package(pkg.name, pkg.module) if pkg is not None else (None, None)
    if state != "present" or version in (None, "unknown"):
        return None   # no release declared or detected: the newest is assumed, whose option takes every value read
    first = c.first_release(theirs, version)
    if first is None:
        return None
    if any(m.auto_for(name) and _holds(m, ctx, []) for m in ctx.catalog.common.methods):
        return None   # the engine's method builds the runner itself, the option left at auto: its values do not matter
    return Reason(code="engine_unsupported", backend=name, source=c.where(),
                  detail=f"{name} ({engine}'s {theirs}) first shipped in {engine} {first}: {engine} {version} does not "
                         f"take it and refuses the value at startup ({c.since_source or c.source})",
                  fix=f"{engine} >= {first}, or another runner")


def _unnamed_for_engine(name: str, engine: str | None) -> Reason | None:
    """A runner with a capability file but no row of backends/engines/names.yaml (an operator's new runner), under a
    serving engine its own ``engines`` fact does not name, whose runner option is closed and takes no such value:
    ``engine_unsupported`` citing the choices row (the engine refuses ``name`` at startup). None for a runner
    names.yaml maps (its ``engines`` facts decide), an open option, or this install's engine. An eighth new user's
    trial: an operator runner was refused under TensorRT-LLM without a file and planned unverified with one."""
    from .engine_tables import names

    if engine is None or engine == INSTALL_ENGINE or any(r.ours == name for r in names().runners):
        return None
    ch = _closed_runner_option(name, engine)
    if ch is None:
        return None
    return Reason(code="engine_unsupported", backend=name, source=ch.where(),
                  detail=f"no row of backends/engines/names.yaml gives {name} a name in {engine}, and {engine}'s runner "
                         f"option takes no such value: it refuses it at startup ({ch.source})",
                  fix=f"another engine; or, where a build of {engine} ships it, {engine} in the runner file's engines.values "
                      f"and the value its runner option takes in engines.options")


# ------------------------------------------------------------------------------------------ explain
def explain(deployment: Deployment | str | Path | dict[str, Any], *, catalog: Catalog | None = None,
            environment: Environment | None = None, base_dir: Path | None = None,
            rules_dirs: Iterable[str | Path] = (), backends_dirs: Iterable[str | Path] = (),
            engine_env: dict[str, str] | None = None, measurements: Any = None) -> Report:
    """Evaluate every runner for ``deployment`` and return the full :class:`Report` (never raises for
    a refusal: see ``report.status``). ``deployment``: a model, a file path, or a dict.

    ``environment``: machine facts; by default declared by the deployment when it names a gpu/arch
    (planning another machine), detected on this machine for ``arch: auto`` (no torch import).
    ``engine_env``: the serving engine's environment (a launch line's), read by the engine-choice prediction
    (:mod:`moe_select.engine_choice`: ``report.engine_choices``, what the engine itself would pick, issue 23) and,
    for ``arch: auto``, by detection: the GPUs its ``CUDA_VISIBLE_DEVICES`` (and ``CUDA_DEVICE_ORDER``) leave the
    engine; a variable it does not set is this process's (the engine inherits it; no ``engine_env``: this
    process's environment).
    ``measurements``: measurement tables of ``moe-select tune`` (files or folders, or
    :class:`~moe_select.measurements.Measurements` objects): where one applies, ``prefer: measured`` (or, with no
    such rule in the rules, every selection) chooses by them (:mod:`moe_select.measured`, issue 25).
    Raises :class:`InputError` for invalid input (file:line, field) and
    :class:`~moe_select.environment.DetectionError` when this machine's GPU cannot be told.
    """
    if isinstance(deployment, (str, Path)):
        deployment, base_dir = load_deployment(deployment)
    elif isinstance(deployment, dict):
        from .deployment import deployment_from_dict

        deployment = deployment_from_dict(deployment, "<dict>")
    elif not isinstance(deployment, Deployment):
        raise InputError(f"a deployment is a Deployment, a file path or a dict, not {type(deployment).__name__}",
                         file="<python>", field="deployment")
    catalog = catalog or default_catalog(rules_dirs, backends_dirs)
    from .measured import sources_of

    tables = sources_of(measurements)  # read (and refused: InputError) before anything is detected
    this_machine = deployment.for_this_machine
    _check_declared(deployment, catalog, this_machine and environment is None)
    if environment is None:
        if this_machine:
            jit = sorted({(c.jit.package, c.jit.detect) for c in catalog.runners.values() if c.jit is not None})
            # the GPUs the engine will see: a launch line's CUDA_VISIBLE_DEVICES (engine_env), else this process's
            # (an engine started from here inherits what engine_env does not set)
            env = None if engine_env is None else {**os.environ, **engine_env}
            environment = detect(catalog.packages(), jit=jit, markers=catalog.package_markers(), env=env)
        else:
            environment = declared(packages=deployment.packages, nvcc=deployment.nvcc, cuda=deployment.cuda,
                                   prebuilt=deployment.prebuilt, where=deployment._file)
    environment = _with_engine_version(deployment, environment, catalog)
    u = understand(deployment, base_dir=base_dir, detected_arch=environment.arch, detected_gpu=environment.gpu,
                   a2a_backends=catalog.a2a, engine_versions=engine_versions(environment, catalog),
                   draft_rules=_draft_rules())
    # A runner no capability file describes is judged (unverified), not invalid input: see select().
    report = select(u, environment, catalog, tables)
    report.engine_choices = engine_choices(report, catalog, engine_env)
    return report


def engine_choices(report: Report, catalog: Catalog, env: dict[str, str] | None = None) -> list[Any]:
    """What each serving engine of ``report``'s deployment would itself pick, beside the plan
    (:func:`moe_select.engine_choice.predict`, fed the facts each engine's checks read and the bundled rules)."""
    from .engine_choice import predict

    u = report.deployment
    facts = {}
    for e in _engines(u):
        ctx = _Ctx(u, report.environment, catalog, _facts(u, e))
        _add_capacity(ctx)
        facts[e] = ctx.facts
    bundled = [r for r in catalog.rules if r.id not in catalog.overridden]

    def requires_met(req: Mapping[str, str]) -> tuple[bool, str]:
        """The deployment's packages against ``req`` (an oracle's environment rule dated by engine version)."""
        ok, assumed, differs = _requires(dict(req), _Ctx(u, report.environment, catalog, {}))
        return ok, "; ".join(x for x in (differs, *assumed) if x)

    return predict(report, facts, bundled, catalog.a2a.get(u.a2a), env, _reported_facts(catalog), _architecture(u),
                   requires_met)


def _architecture(u: Understood) -> str | None:
    """``architectures[0]`` of the deployment's checkpoint config; without one, the inline model's ``architecture`` (a
    stated input the engines' architecture hooks read as well: field round 56's DeepSeek-V4 case named it inline and the
    prediction skipped its hook); None where neither says, or the config is unreadable."""
    import json

    if not u.model_config_path:
        return u.model.architecture or None
    path = Path(u.model_config_path)
    path = path / "config.json" if path.is_dir() else path
    try:
        archs = json.loads(path.read_text(encoding="utf-8")).get("architectures")
    except (OSError, ValueError, AttributeError):
        return None
    return str(archs[0]) if isinstance(archs, list) and archs else None


#: id(catalog) -> (a weak reference to it, its reported-failure facts): :func:`_reported_facts` walks a catalog once
#: (a Catalog is an unhashable dataclass; the entry goes when the catalog does).
_REPORTED: dict[int, tuple["weakref.ref[Catalog]", frozenset[str]]] = {}


def _reported_facts(catalog: Catalog) -> frozenset[str]:
    """``file:line`` of every capability fact whose source is a reported failure (``(reported) ...``), once per
    catalog (the walk over every fact costs about as much as a selection)."""
    key = id(catalog)
    hit = _REPORTED.get(key)
    if hit is not None and hit[0]() is catalog:
        return hit[1]
    found = _walk_reported(catalog)

    def forget(_ref: object) -> None:
        _REPORTED.pop(key, None)

    _REPORTED[key] = (weakref.ref(catalog, forget), found)
    return found


def _walk_reported(catalog: Catalog) -> frozenset[str]:
    out: set[str] = set()

    def walk(obj: Any) -> None:
        if isinstance(obj, (list, tuple)):
            for x in obj:
                walk(x)
        elif isinstance(obj, dict):
            for x in obj.values():
                walk(x)
        elif isinstance(obj, BaseModel):
            src = getattr(obj, "source", None)
            if isinstance(src, str) and src.startswith("(reported)") and hasattr(obj, "where"):
                out.add(obj.where())
            for name in type(obj).model_fields:
                walk(getattr(obj, name))

    walk(list(catalog.runners.values()) + list(catalog.a2a.values()))
    return frozenset(out)


def _with_engine_version(dep: Deployment, env: Environment, catalog: Catalog) -> Environment:
    """``env`` with the deployment's ``engine_version`` as the version of the engine's own package (issue 20): the
    same as declaring that package under ``packages`` (both, differing: an error); over a detected version too (the
    plan is for that engine version). Raises :class:`InputError` for an engine_version without one serving engine."""
    from .deployment import _release_check

    # a serving engine's package declared under packages is its engine_version: a final version that is no release of
    # the engine is the same input error (a fleet trial, break55: packages {vllm: 0.16.5} planned, engine_version 0.16.5
    # refused)
    for e in ENGINES:
        ep = catalog.engine_package(e)
        names = {normalize_package_name(ep.name), normalize_package_name(ep.module)} if ep is not None else set()
        for k, v in (dep.packages or {}).items():
            if v is not None and normalize_package_name(k) in names and (gone := _release_check(e, v)[0]):
                raise InputError(Issue(dep._file, dep._lines.get("packages", dep._line), f"packages.{k}", gone))
    if dep.engine_version is None:
        return env
    line = dep._lines.get("engine_version", dep._line)
    pkg = catalog.engine_package(dep.engine) if dep.engine in ENGINES else None
    if pkg is None:
        raise InputError(Issue(dep._file, line, "engine_version", f"engine_version needs one serving engine (engine: "
                               f"{', '.join(ENGINES)}), not engine {dep.engine}; with engine: any declare each engine's package "
                               "under packages (vllm, sglang, tensorrt-llm)"))
    keys = {normalize_package_name(pkg.name), normalize_package_name(pkg.module)}
    said = {k: v for k, v in (dep.packages or {}).items() if normalize_package_name(k) in keys}
    if any(v != dep.engine_version for v in said.values()):
        raise InputError(Issue(dep._file, line, "engine_version", f"engine_version {dep.engine_version} contradicts packages "
                               f"{', '.join(f'{k}: {v}' for k, v in said.items())}; give one"))
    packages = {k: v for k, v in env.packages.items() if normalize_package_name(k) not in keys}
    packages[pkg.name] = dep.engine_version
    prov = dict(env.provenance)
    prov["engine_version"] = f"{pkg.name} {dep.engine_version}: engine_version ({dep.where('engine_version')})"
    return env.model_copy(update={"packages": packages, "provenance": prov})


def _check_declared(dep: Deployment, catalog: Catalog, detecting: bool) -> None:
    """Declared environment facts are for planning another machine: refuse them when this machine is
    detected (they would be ignored), and refuse package names no capability file knows and
    ``prebuilt`` keys that are no runner's JIT package."""
    issues = []
    if detecting and dep.declares_environment:
        for k in dep.declares_environment:
            issues.append(Issue(dep._file, dep._lines.get(k, dep._line), k, f"{k} declares a fact of another machine, but "
                                "arch is auto (this machine, detected): give gpu/arch to plan for another machine, or drop it"))
    known: dict[str, str] = {}
    spellings: set[str] = set()  # distribution and import names, either is accepted
    for name, module in catalog.packages():
        known[normalize_package_name(name)] = name
        known[normalize_package_name(module)] = name
        spellings |= {name, module}
    unknown = [name for name in dep.packages or {} if normalize_package_name(name) not in known]
    for name in unknown[:MAX_ISSUES]:
        close = difflib.get_close_matches(name, sorted(spellings), n=1)
        issues.append(Issue(dep._file, dep._lines.get("packages", dep._line), f"packages.{shorten(name)[1:-1]}",
                            f"unknown package {shorten(name)}" + (f" (did you mean {close[0]!r}?)" if close else "")
                            + f"; the capability files name: {', '.join(sorted(set(known.values())))}"))
    if len(unknown) > MAX_ISSUES:
        issues.append(Issue(dep._file, dep._lines.get("packages", dep._line), "packages",
                            f"... and {len(unknown) - MAX_ISSUES} more unknown packages"))
    jits = sorted({c.jit.package for c in catalog.runners.values() if c.jit is not None})
    for name in [n for n in dep.prebuilt or {} if n not in jits][:MAX_ISSUES]:
        issues.append(Issue(dep._file, dep._lines.get("prebuilt", dep._line), f"prebuilt.{shorten(name)[1:-1]}",
                            f"{shorten(name)} is no runner's JIT package (prebuilt takes: {', '.join(jits) or 'none'})"))
    if issues:
        raise InputError(issues)


# ------------------------------------------------------------------------------------------- select
def _engines(u: Understood) -> list[str]:
    return list(ENGINES) if u.engine == "any" else [u.engine]


def _online_refusal(u: Understood, engine: str, env: Environment, catalog: Catalog) -> Reason | None:
    """The reason serving engine ``engine`` cannot serve a deployment whose format it would have to make at load
    from a 16-bit checkpoint (or the quantized one ``quant_params.online_from`` names) and does not (issue 21):
    ``quant_params.online_engines`` (set by
    :func:`~moe_select.deployment.understand` from backends/formats.yaml's ``online`` column) lists the engines
    that do; the detail is that column's evidence for ``engine`` at its version. None where the engine is listed,
    where no list was recorded, and for this install (``moe_select``: it loads no checkpoint)."""
    makers = u.quant_params.get("online_engines")
    if makers is None or engine not in ENGINES or engine in makers:
        return None
    from .formats import FILE_NAME, online_clause

    fmt = lookup(u.quant)
    version = engine_versions(env, catalog).get(engine)
    if fmt is None:
        words, where = "no online column to read", f"backends/{FILE_NAME}"
    else:
        _, words, where = online_clause(fmt, engine, version, u.arch, activation_scale_of(u), u.quant_params.get("online_from"))
    src = u.quant_params.get("online_from") or "16-bit"
    return Reason(code="quant_unsupported", detail=f"{u.quant} is made at load from the {src} checkpoint (online "
                  f"quantization), and {words}", source=where,
                  fix=f"engine: {' or '.join(makers) or 'none'}, or a checkpoint in {u.quant}")


_R = TypeVar("_R", Reason, Unknown)


def _merge(per_engine: dict[str, list[_R]]) -> list[_R]:
    """Reasons (or unknowns) of every engine, each once; one that does not hold for every engine names those it holds
    for (``engines``)."""
    engines = list(per_engine)
    seen: dict[tuple[str, ...], list[str]] = {}
    first: dict[tuple[str, ...], _R] = {}
    for e, items in per_engine.items():
        for x in items:
            k: tuple[str, ...] = (x.code, x.detail, x.source)
            first.setdefault(k, x)
            seen.setdefault(k, []).append(e)
    return [x if len(seen[k]) == len(engines) else x.model_copy(update={"engines": seen[k]}) for k, x in first.items()]


def select(u: Understood, env: Environment, catalog: Catalog, measurements: Sequence[Any] | None = None) -> Report:
    """The pure selection: every runner of ``catalog`` checked against the deployment ``u`` (as
    :func:`~moe_select.deployment.understand` states it) on machine ``env``; returns the
    :class:`~moe_select.report.Report` (a plan, or a refusal with every reason). Reads nothing, imports
    nothing, never raises for a refusal. ``explain`` calls it after reading and understanding the
    input; ``resolve`` calls it again over a plan's own inputs to refuse an edited plan.
    ``measurements``: :class:`~moe_select.measured.Source` tables (issue 25; :func:`_measured_choice`)."""
    from . import measured as msr

    app = msr.applicable(u, env, list(measurements or []))
    table = app.source.table if app.source is not None else None
    timed = set(table.runners()) if table is not None else set()
    engines = _engines(u)
    single = len(engines) == 1
    verdicts: dict[Any, Any] = {}
    fixes: dict[Any, str | None] = {}
    engine_facts = {e: _facts(u, e) for e in engines}
    ctxs = {e: _Ctx(u, env, catalog, engine_facts[e], fixes=fixes, verdicts=verdicts, engine_facts=engine_facts)
            for e in engines}
    for ctx in ctxs.values():
        _add_capacity(ctx)
    base: dict[str, list[Reason]] = {}
    base_unknowns: dict[str, list[Unknown]] = {}
    base_used: dict[str, list[str]] = {}
    # Engines whose declared or detected version is newer than their facts were checked at (issue 20).
    newer_engines = _newer_engines(engines, env, catalog)
    untold_engines = _untold_engines(engines, env, catalog)
    base_assumed: list[str] = []
    base_needs: list[PackageNeed] = []
    a2a_cap = catalog.a2a.get(u.a2a)
    for e, ctx in ctxs.items():
        a2a_needs: list[PackageNeed] = []
        found = _constraint_reasons(catalog.common.constraints, ctx, "every runner", None, base_assumed)
        if a2a_cap is None and e == INSTALL_ENGINE:  # no file, no module: nothing here dispatches it
            found.append(Reason(code="no_adapter", detail=f"no capability file describes a2a {u.a2a}: this install has no "
                                "dispatcher for it", source="backends/a2a/",
                                fix=f"backends/a2a/{u.a2a}.yaml with its dispatcher module (README, Hand-edited files to add (d))"))
        elif a2a_cap is None:
            ctx.unknowns.append(Unknown(code="a2a_unsupported", detail=f"no capability file describes a2a {u.a2a}",
                                        settle=f"backends/a2a/{u.a2a}.yaml (its archs, modes and dispatch formats)",
                                        source="backends/a2a/"))
        else:
            found += _a2a_reasons(a2a_cap, ctx, a2a_needs, base_assumed)
        online = _online_refusal(u, e, env, catalog)
        if online is not None:
            found.append(online)
        base[e], base_unknowns[e], base_used[e] = found, list(ctx.unknowns), list(ctx.engine_used)
        ctx.unknowns.clear()
        ctx.engine_used = []
        if not base_needs:
            base_needs = a2a_needs
    rule_facts = _facts(u, engines[0] if single else None)  # engine: any matches no engine-specific rule
    matching = [r for r in catalog.rules if r.when.matches(rule_facts)]
    disabled: dict[str, list[Any]] = {}
    for r in matching:
        if r.action == "disable":
            for name in r.runners:
                disabled.setdefault(name, []).append(r)
    # prefer: measured (issue 25) prefers, at its place, the runners the applicable table times; with measurements
    # given and no such rule in the rules at all, they come before every rule (_IMPLICIT).
    slot_rule = next((r for r in matching if r.action == "prefer" and r.measured), None)
    any_measured_rule = any(r.action == "prefer" and r.measured for r in catalog.rules)
    slot: Any = None if table is None else slot_rule if slot_rule is not None else None if any_measured_rule else _IMPLICIT
    rule_order: list[str] = []  # the runners of the matching prefer rules, in order (the measured tie rule)
    preferred: dict[str, Any] = {}  # runner -> the first matching prefer rule naming it, in rule order
    if slot is _IMPLICIT:
        for runner in sorted(timed):
            preferred.setdefault(runner, slot)
    for r in matching:
        if r.action == "prefer" and r.measured:
            if r is slot:
                for runner in sorted(timed):
                    preferred.setdefault(runner, r)
        elif r.action == "prefer":
            for runner in r.runners:
                preferred.setdefault(runner, r)
                if runner not in rule_order:
                    rule_order.append(runner)

    base_sensitive = bool(a2a_cap and (a2a_cap.unavailable or a2a_cap.engine_sensitive)) or any(
        c.when is not None and c.when.engine is not None for c in [*catalog.common.constraints, *(a2a_cap.constraints if a2a_cap else [])]
    ) or bool(a2a_cap and any(getattr(d, "engines", None) for d in a2a_cap.lists.values())) or any(
        e in ENGINES and e not in u.quant_params.get("online_engines", ENGINES) for e in engines)  # online: per engine
    candidates: dict[str, Candidate] = {}
    needs_of: dict[str, list[PackageNeed]] = {}
    measured_notes: dict[str, str] = {}
    names = sorted(catalog.runners)
    if u.runner != "auto" and u.runner not in catalog.runners:
        names.append(u.runner)  # a runner no capability file describes: judged on the common facts alone
    # require_adapter with a serving engine: what that engine runs, where this install runs it too.
    install = install_refusals(u, env, catalog, names) if u.require_adapter and INSTALL_ENGINE not in engines else {}
    for name in names:
        cap = catalog.runners.get(name)
        per_engine: dict[str, list[Reason]] = {}
        unknowns_by: dict[str, list[Unknown]] = {}
        assumed: list[str] = list(base_assumed)
        # Facts that name no engine give the same answer for every engine: check once, then copy.
        # engine: any asks whether some engine runs it: engines that do not ship the runner are not asked
        # (naming one explicitly gives engine_unsupported).
        shipped = engines
        if not single and cap is not None and cap.engines is not None:
            shipped = [e for e in engines if e in cap.engines.values] or engines
        sensitive = cap is not None and (cap.engine_sensitive or any(getattr(d, "engines", None) for d in cap.lists.values()))
        check_engines = shipped if (sensitive or base_sensitive) else shipped[:1]
        needs_by: dict[str, list[PackageNeed]] = {}
        for e in check_engines:
            engine_needs: list[PackageNeed] = []
            engine_reasons = [r.model_copy(update={"backend": name}) for r in base[e]]
            ctx = ctxs[e]
            ctx.unknowns = [x.model_copy(update={"backend": name}) for x in base_unknowns[e]]
            ctx.engine_used = list(base_used[e])
            if cap is not None:
                engine_reasons += check_runner(cap, ctx, engine_needs, assumed)
                if e in newer_engines and ctx.engine_used and not engine_reasons:
                    ctx.unknowns.append(_engine_unknown(name, e, *newer_engines[e], ctx.engine_used))
                elif e in untold_engines and ctx.engine_used:
                    assumed.append(untold_engines[e])
            else:
                close = difflib.get_close_matches(name, list(catalog.runners), n=1)
                mean = f" (did you mean {close[0]!r}?)" if close else ""
                if e == INSTALL_ENGINE:  # this install builds only runners whose files it has (plugins bring theirs)
                    engine_reasons.append(Reason(code="no_adapter", detail=f"no capability file describes runner {name}{mean}: "
                                                 "this install has no adapter for it", source="backends/", backend=name,
                                                 fix=f"runner: {close[0]}" if close else None))
                elif _read_at(e, engine_versions(env, catalog).get(e), e in newer_engines) and \
                        (refusal := _not_an_engine_name(name, e, mean, close[0] if close else None)) is not None:
                    # the release's runner option, as read, takes no such name: refused on that evidence. An undeclared
                    # version is read at the newest checked, as every version-scoped fact is (the refusal says so: a new
                    # user's trial found a misspelled runner planned with exit 0 only when no version was given); a
                    # declared release newer than the table read may take a value it has not read: judged below, unverified
                    if e in untold_engines:
                        refusal = refusal.model_copy(update={"detail": f"{refusal.detail} ({untold_engines[e]})"})
                    engine_reasons.append(refusal)
                else:
                    closed = _not_an_engine_name(name, e, mean, close[0] if close else None)
                    also = ("; the engine's runner option as read takes no such value (backends/engines/names.yaml "
                            "choices): the engine refuses it unless a release newer than those read added it") if closed else ""
                    ctx.unknowns.append(Unknown(code="no_adapter", detail=f"no capability file describes runner {name}{mean}{also}",
                                                settle=f"backends/{name}.yaml (its support rows, activations, routing, dispatch)",
                                                source="backends/", backend=name))
            per_engine[e], unknowns_by[e], needs_by[e] = engine_reasons + install.get(name, []), ctx.unknowns, engine_needs
            ctx.unknowns = []
        for e in shipped[len(check_engines):]:
            per_engine[e], needs_by[e], unknowns_by[e] = per_engine[shipped[0]], needs_by[shipped[0]], unknowns_by[shipped[0]]
        level = {e: "refused" if rs else "unverified" if unknowns_by[e] else "supported" for e, rs in per_engine.items()}
        best = strongest(list(level.values()))
        ok_engines = [e for e in per_engine if level[e] == best and best != "refused"]
        # What the plan says (packages, notes, activation precision) is what the first engine that runs it best does.
        lead = ok_engines[0] if ok_engines else check_engines[0]
        needs = needs_by[lead]
        unknowns = [] if best == "refused" else _merge({e: unknowns_by[e] for e in per_engine if level[e] != "refused"})
        reasons = [] if best != "refused" else _merge(per_engine)
        if best == "unverified" and app.on_this_gpu and name in timed and table is not None:
            # A measured candidate on the measured GPU counts as supported there (issue 25): tune ran it after verify.
            codes = ", ".join(sorted({x.code for x in unknowns}))
            measured_notes[name] = (f"measured on {table.machine.gpu} by moe-select tune (measurements sha256:"
                                    f"{table.fingerprint()[:12]}, verified before timing): supported here; the facts left "
                                    f"{len(unknowns)} point(s) open ({codes})")
            best, unknowns = "supported", []
            level = {e: "supported" if lv == "unverified" else lv for e, lv in level.items()}
            ok_engines = [e for e in per_engine if level[e] == best]
        if best == "unverified" and u.strict:
            reasons = [Reason(code="unverified", detail=f"strict: {x.detail}", source=x.source, backend=name, engines=x.engines,
                              fix=f"{x.settle}; or strict: false") for x in unknowns]
        for rule in disabled.get(name, []):
            reasons.append(Reason(code="disabled_by_rule", detail=f"rule {rule.id}: {rule.reason}", source=rule.where(),
                                  fix=f"override rule {rule.id} in an operator rules directory (--rules DIR)", backend=name))
        notes = [x.text for x in cap.notes if _holds(x, ctxs[lead], [])] if cap is not None else []
        if name in measured_notes:
            notes.append(measured_notes[name])
        pref = preferred.get(name)
        candidates[name] = Candidate(backend=name, eligible=not reasons, evidence=cast(Any, best),
                                     evidence_by_engine=cast(Any, level) if not single else {}, unknowns=unknowns, reasons=reasons,
                                     notes=notes, preferred_by=f"{pref.id} ({pref.where()})" if pref else None,
                                     adapter=catalog.adapter(name, u.quant, u.model.activation) if cap is not None else None,
                                     engines=ok_engines if not reasons else [], assumptions=sorted(set(assumed)))
        needs_of[name] = base_needs + needs

    # Supported candidates first, in rule order across every matching prefer rule, then unverified ones.
    pref_ranked = [candidates[n] for n in preferred if n in candidates]
    pref_ranked = ([c for c in pref_ranked if c.eligible and c.evidence == "supported"]
                   + [c for c in pref_ranked if c.eligible and c.evidence != "supported"] + [c for c in pref_ranked if not c.eligible])
    ranked = pref_ranked + [c for n, c in candidates.items() if n not in preferred]
    chosen: Candidate | None = None
    chosen_by: ChosenBy | None = None
    not_preferred: list[Reason] = []
    if u.runner == "auto":
        for c in pref_ranked:
            if c.eligible:
                rule = preferred[c.backend]
                chosen, chosen_by = c, ChosenBy(how="rule", rule=rule.id, source=rule.where())
                break
        considered = [c for c in ranked if not c.eligible]
        if chosen is None:
            # The source is the rule that would have chosen (the first matching prefer rule: none of the matching
            # prefer rules names an eligible runner), or, where no prefer rule matches, no file at all.
            prefer_rules = [r for r in matching if r.action == "prefer"]
            if prefer_rules:
                np_source = prefer_rules[0].where()
                np_why = ("the matching prefer rules name no eligible runner: "
                          + ", ".join(f"{r.id} ({r.where()})" for r in prefer_rules))
            else:
                np_source = NO_MATCHING_PREFER_RULE
                np_why = (f"no prefer rule matches this deployment ({_arch_label(u)} x {u.quant} x engine "
                          f"{engines[0] if single else 'any'})")
            for c in ranked:
                if c.eligible and c.backend not in preferred:
                    not_preferred.append(Reason(
                        code="not_preferred",
                        detail=f"{c.backend} is eligible ({c.evidence}) but no matching rule prefers it; {np_why}",
                        source=np_source, backend=c.backend,
                        fix=f"runner: {c.backend}, or a prefer rule naming it (--rules DIR)"))
    else:
        c = candidates[u.runner]
        considered = [c] if not c.eligible else []
        if c.eligible:
            chosen, chosen_by = c, ChosenBy(how="explicit", source=u.provenance.get("runner", "deployment"))
    reasons = [r for c in considered for r in c.reasons] + not_preferred
    mreport: Any = None
    rows: list[Any] = []
    if table is not None or slot_rule is not None or app.given:
        mreport, rows, chosen, chosen_by = _measured_choice(u, app, slot, slot_rule, candidates, chosen, chosen_by, preferred,
                                                            rule_order)
    small: tuple[Any, Candidate] | None = None  # (the rule, the runner of its small forwards) when they split the plan
    if chosen is not None and chosen_by is not None and chosen_by.how == "rule" and not rows:
        chosen, chosen_by, small = _small_forwards(u, preferred[chosen.backend], chosen, chosen_by, candidates)
    plan = None
    if chosen is not None and chosen_by is not None:
        how: ChosenBy = chosen_by

        def plan_of(c: Candidate) -> Plan:
            return _make_plan(c, how, u, env, catalog, ranked, needs_of[c.backend], ctxs[c.engines[0] if c.engines else engines[0]])

        plan = plan_of(chosen)
        if table is not None:
            plan = _with_measurements(plan, table, rows, [plan_of(candidates[r]) for r in dict.fromkeys(x.runner for x in rows)
                                                          if r != chosen.backend], mreport, app.assumed, u, env, catalog)
        elif small is not None:
            plan = _with_rule_ranges(plan, small[0], plan_of(small[1]), u, env, catalog)
    kind_reports = [_select_kind(u, k, env, catalog, measurements) for k in u.layer_kinds]
    for k in kind_reports:
        if k.plan is None:
            where = f"layers {_ranges(k.deployment.layers)} ({k.deployment.layer_kind}, {k.deployment.quant})"
            reasons += [r.model_copy(update={"detail": f"{where}: {r.detail}"}) for r in k.reasons]
    if plan is not None and all(k.plan is not None for k in kind_reports):
        # A deployment's level is the weakest over its MoE layer kinds.
        deployment_level = weakest([str(plan.evidence)] + [str(k.plan.evidence) for k in kind_reports if k.plan is not None])
        plan = plan.model_copy(update={"layers": [k.plan for k in kind_reports], "evidence": deployment_level})
    elif plan is not None:
        plan = None  # a deployment is refused when any of its MoE layer kinds has no runner
    return Report(status="ok" if plan else "rejected", evidence=plan.evidence if plan else "refused", deployment=u,
                  environment=env, plan=plan, candidates=ranked,
                  reasons=reasons, rule_files=catalog.rule_files, capability_files=_capability_files(catalog),
                  overridden_rules={rid: f"{where} replaced by {next(r.where() for r in catalog.rules if r.id == rid)}"
                                    for rid, where in catalog.overridden.items()},
                  origins=dict(catalog.origins), version_notes=_version_notes(env, catalog), layers=kind_reports,
                  measured=mreport)


class _ImplicitMeasured:
    """The place of measurements given with no ``prefer: measured`` rule in the rules: before every rule."""

    id = "measurements"
    measured = True

    def where(self, field: str | None = None) -> str:
        """What ``preferred_by`` shows."""
        return "--measurements, before every rule"


_IMPLICIT = _ImplicitMeasured()


def _measured_choice(u: Understood, app: Any, slot: Any, slot_rule: Any, candidates: dict[str, Candidate],
                     chosen: Candidate | None, chosen_by: ChosenBy | None, preferred: dict[str, Any],
                     rule_order: list[str]) -> tuple[Any, list[Any], Candidate | None, ChosenBy | None]:
    """The measured choice of issue 25 (:mod:`moe_select.measured`): ``(the report's MeasuredReport, the token ranges,
    the chosen candidate, how)``. The rules' choice stands unless the candidate they rank first is preferred by the
    measured place (``slot``: the first matching ``prefer: measured`` rule, or :data:`_IMPLICIT`); then the runner of
    the range holding ``max_tokens_per_rank`` is the plan's. The competitors are the eligible measured candidates of
    the strongest evidence level among them (a refused one is never chosen, whatever it measured)."""
    from .measured import MeasuredReport, token_ranges, verdicts

    src = app.source
    if src is None:
        why = "no measurement table applies to this deployment (notes)" if app.given else \
            "no measurements given (--measurements FILE|DIR)"
        if slot_rule is not None:
            why = f"rule {slot_rule.id} ({slot_rule.where()}) prefers measured: {why}"
        return MeasuredReport(applied=False, why=why, notes=list(app.notes)), [], chosen, chosen_by
    table = src.table
    fp = table.fingerprint()
    eligible = [c for c in candidates.values() if c.eligible and c.backend in set(table.runners())]
    level = strongest([c.evidence for c in eligible])
    competitors = [c.backend for c in eligible if c.evidence == level]
    vs = verdicts(table, competitors, rule_order)
    rows, range_notes = token_ranges(vs, u.max_tokens_per_rank)
    refused = sorted(set(table.runners()) - {c.backend for c in eligible})
    notes = list(app.notes) + [f"{a}" for a in app.assumed] + range_notes
    if refused:
        notes.append(f"measured but not candidates here (the facts or rules refuse them, or not {level}): {', '.join(refused)}")
    report = MeasuredReport(applied=False, why="", source=src.name, fingerprint=fp, created=table.created, gpu=table.machine.gpu,
                            timing=table.method.timing, verdicts=vs, ties=[t for v in vs if (t := v.tie_text())], notes=notes)
    place = (f"rule {slot_rule.id} ({slot_rule.where()}) prefers measured" if slot_rule is not None
             else "--measurements, before every rule (no prefer: measured rule in the rules)")
    if u.runner != "auto":
        why = f"runner {u.runner} is asked for explicitly"
    elif slot is None:
        why = "the rules have prefer: measured rules, and none matches this deployment: the rules choose"
    elif not rows:
        why = f"{place}; no eligible candidate is measured (the table times {', '.join(table.runners())})"
    elif chosen is None or preferred.get(chosen.backend) is not slot:
        rule = preferred.get(chosen.backend) if chosen is not None else None
        why = (f"rule {rule.id} ({rule.where()}) chose {chosen.backend} before {place}" if rule is not None and chosen is not None
               else "no runner chosen")
    else:
        report = report.model_copy(update={"applied": True, "why": place, "ranges": rows})
        main = candidates[rows[-1].runner]
        how = ChosenBy(how="measured", rule=slot_rule.id if slot_rule is not None else None,
                       source=slot_rule.where() if slot_rule is not None else f"--measurements, table sha256:{fp[:12]}")
        return report, rows, main, how
    return report.model_copy(update={"why": why}), [], chosen, chosen_by


def _small_forwards(u: Understood, rule: Any, chosen: Candidate, chosen_by: ChosenBy,
                    candidates: dict[str, Candidate]) -> tuple[Candidate, ChosenBy, tuple[Any, Candidate] | None]:
    """A rule's ``small_forwards`` (:mod:`moe_select.policy`): the first eligible runner of its list (supported before
    unverified, as the rules rank). When the deployment's largest forward is within its ``max_tokens``, that runner is
    the plan's; when it is larger and the runner differs from the rule's choice, ``(rule, runner)`` for the plan's
    token ranges. Unchanged without ``small_forwards`` or an eligible runner in its list."""
    sf = getattr(rule, "small_forwards", None)
    if sf is None:
        return chosen, chosen_by, None
    listed = [candidates[n] for n in sf.prefer if n in candidates and candidates[n].eligible]
    pick = next((c for c in listed if c.evidence == "supported"), listed[0] if listed else None)
    if pick is None or pick.backend == chosen.backend:
        return chosen, chosen_by, None
    if u.max_tokens_per_rank is not None and u.max_tokens_per_rank <= sf.max_tokens:
        return pick, ChosenBy(how="rule", rule=rule.id, source=rule.where("small_forwards")), None
    return chosen, chosen_by, (rule, pick)


def _range_parts(plan: Plan, rows: list[Any], others: list[Plan]) -> dict[str, Any]:
    """What a plan with token ``rows`` takes from the plans of the ranges' other runners (``others``): the
    ``range_runners`` (module, registrations, layout, precision, JIT line of each), and the union of packages and
    unknowns; its evidence is the weakest of them."""
    from .plans import RangeRunner, TokenRange

    pieces = {p.runner: p for p in [plan, *others]}
    packages = list(plan.packages)
    unknowns = list(plan.unknowns)
    for p in others:
        packages += [n for n in p.packages if n not in packages]
        unknowns += [x for x in p.unknowns if x not in unknowns]
    return {"ranges": [TokenRange(max_tokens=r.max_tokens, runner=r.runner) for r in rows],
            "range_runners": [RangeRunner(runner=n, module=pieces[n].module, registers=list(pieces[n].registers),
                                          weight_layout=pieces[n].weight_layout,
                                          activation_precision=pieces[n].activation_precision, jit=pieces[n].jit)
                              for n in dict.fromkeys(r.runner for r in rows)],
            "packages": packages, "unknowns": unknowns, "evidence": weakest([str(p.evidence) for p in pieces.values()]),
            "alternatives": [a for a in plan.alternatives if a not in pieces]}


def _with_rule_ranges(plan: Plan, rule: Any, other: Plan, u: Understood, env: Environment, catalog: Catalog) -> Plan:
    """``plan`` (the rule's choice, for the largest forwards) with the token ranges of the rule's ``small_forwards``:
    forwards of at most its ``max_tokens`` run ``other``'s runner. The fingerprint covers the ranges."""
    from .plans import TokenRange

    sf = rule.small_forwards
    rows = [TokenRange(max_tokens=sf.max_tokens, runner=other.runner), TokenRange(max_tokens=None, runner=plan.runner)]
    notes = list(plan.notes) + [f"token ranges (rule {rule.id}, {rule.where('small_forwards')}): {ranges_text(rows)}"]
    return plan.model_copy(update={**_range_parts(plan, rows, [other]), "notes": notes, "fingerprint": _ranged_fingerprint(
        plan, u, env, catalog, {"rule_ranges": [[r.max_tokens, r.runner] for r in rows]})})


def _ranged_fingerprint(plan: Plan, u: Understood, env: Environment, catalog: Catalog, ranges: dict[str, Any]) -> str:
    """The fingerprint of a plan with token ranges: :func:`moe_select.plans.fingerprint` over the inputs, the
    catalog's files and ``ranges`` (a measured plan's table and ranges, or a rule's ranges)."""
    files = dict(sorted(catalog.files.items()))
    sources = list(catalog.rule_sources) + list(catalog.backend_sources)
    return fingerprint(u, env, canonical_files(files, sources), plan.runner, ranges)


def _with_measurements(plan: Plan, table: Any, rows: list[Any], others: list[Plan], mreport: Any, assumed: list[str],
                       u: Understood, env: Environment, catalog: Catalog) -> Plan:
    """``plan`` with the applicable measurement ``table`` embedded (and its fingerprint) and, when the table chose,
    its token ``rows`` (``others``: the plans of the ranges' other runners, whose module, registers and packages the
    ranges and the plan take), the ties and the extrapolation notes; the fingerprint covers both."""
    parts = _range_parts(plan, rows, others)
    notes = list(plan.notes)
    if rows:
        notes.append("measured token ranges: " + ranges_text(rows))
        notes += list(mreport.ties) + [n for n in mreport.notes if n.startswith(("below ", "above "))]
    fp = table.fingerprint()
    measured = {"table": fp, "ranges": [[r.max_tokens, r.runner] for r in rows]}
    return plan.model_copy(update={
        **parts, "measurements": table, "measurements_fingerprint": fp, "notes": notes,
        "assumptions": list(plan.assumptions) + [a for a in assumed if a not in plan.assumptions],
        "fingerprint": _ranged_fingerprint(plan, u, env, catalog, measured)})


def install_refusals(u: Understood, env: Environment, catalog: Catalog, runners: Iterable[str]) -> dict[str, list[Reason]]:
    """Each of ``runners`` checked under ``engine: moe_select`` (this install's facts and code) for deployment ``u``
    as it stands (made for another engine): runner -> the reasons it is refused here, each as ``no_adapter`` (this
    install cannot build it that way), naming the failing fact's code, detail and source; [] where this install
    runs it (supported or unverified: only a refusal counts). What ``require_adapter`` adds to a serving engine's
    candidates and ``resolve`` checks for a plan made for a serving engine (README "Python API")."""
    uk = u.model_copy(update={"engine": INSTALL_ENGINE, "require_adapter": False, "strict": False, "layer_kinds": []})
    facts = _facts(uk, INSTALL_ENGINE)
    ctx = _Ctx(uk, env, catalog, facts, engine_facts={INSTALL_ENGINE: facts})
    _add_capacity(ctx)
    base = _constraint_reasons(catalog.common.constraints, ctx, "every runner", None, [])
    a2a_cap = catalog.a2a.get(uk.a2a)
    if a2a_cap is None:
        base.append(Reason(code="no_adapter", detail=f"no capability file describes a2a {uk.a2a}: this install has no "
                           "dispatcher for it", source="backends/a2a/"))
    else:
        base += _a2a_reasons(a2a_cap, ctx, [], [])
    out: dict[str, list[Reason]] = {}
    for name in runners:
        cap = catalog.runners.get(name)
        ctx.unknowns = []
        found = list(base) + (check_runner(cap, ctx, [], []) if cap is not None else [
            Reason(code="no_adapter", detail=f"no capability file describes runner {name}: this install has no adapter for it",
                   source="backends/")])
        out[name] = [Reason(code="no_adapter", detail=f"this install (engine {INSTALL_ENGINE}) does not run it: {r.code}: {r.detail}",
                            source=r.source, fix=r.fix, backend=name) if r.code != "no_adapter" else r.model_copy(update={"backend": name})
                     for r in found]
    return out


def _draft_rules() -> dict[str, Any]:
    """Each serving engine's rule for a speculative draft's MoE layers (its table's ``draft`` section; None where the
    table states none), for :func:`moe_select.deployment.understand`."""
    from .engine_tables import ENGINES, table

    return {e: table(e).draft for e in ENGINES}


def _select_kind(u: Understood, kind: dict[str, Any], env: Environment, catalog: Catalog,
                 measurements: Sequence[Any] | None = None) -> Report:
    """Select for one additional MoE layer kind: the same deployment with that kind's format and runner."""
    prov = dict(u.provenance)
    prov["quant"] = prov.get(f"layers.{kind['kind']}", "layer kind")
    prov["runner"] = prov.get(f"layers.{kind['kind']}", "layer kind")
    prov["dispatch_precision"] = f"{prov.get('dispatch_precision', 'default')} ({kind['kind']}: {kind.get('dispatch_precision', 'auto')})"
    a2a = {"a2a": kind["a2a"], "a2a_mode": None} if kind.get("a2a") else {}   # the kind's own all-to-all (layer_a2a)
    if a2a:
        prov["a2a"] = prov.get(f"layers.{kind['kind']}", "layer kind")
    uk = u.model_copy(update={"quant": kind["quant"], "quant_params": dict(kind["quant_params"]), "runner": kind["runner"],
                              **a2a, "dispatch_precision": kind.get("dispatch_precision", "auto"),
                              "layer_kinds": [], "layers": list(kind["layers"]), "layer_kind": kind["kind"],
                              "main_quant": u.quant, "provenance": prov})
    return select(uk, env, catalog, measurements)


def _ranges(ids: list[int]) -> str:
    from .deployment import _ranges as r

    return r(ids)


def _checked_engines(engines: Sequence[str], env: Environment, catalog: Catalog) -> Iterator[tuple[str, Any, str, Any]]:
    """``(engine, package row, state, version)`` of each of ``engines`` whose package row has a ``checked_up_to``:
    the state and version of its package in ``env`` (``Environment.package``)."""
    for e in engines:
        pkg = catalog.engine_package(e)
        if pkg is not None and pkg.checked_up_to is not None:
            yield (e, pkg, *env.package(pkg.name, pkg.module))


def _newer_engines(engines: Sequence[str], env: Environment, catalog: Catalog) -> dict[str, tuple[Any, str]]:
    """Engine -> (its package row, its version) for each of ``engines`` whose version (the deployment's
    ``engine_version``, its package declared under ``packages``, or detected here) is newer than the facts scoped
    to it were checked at (the row's ``checked_up_to``)."""
    out: dict[str, tuple[Any, str]] = {}
    for e, pkg, state, found in _checked_engines(engines, env, catalog):
        if state == "present" and found not in (None, "unknown"):
            try:
                if newer(found, pkg.checked_up_to):
                    out[e] = (pkg, found)
            except ValueError:
                continue
    return out


def _untold_engines(engines: Sequence[str], env: Environment, catalog: Catalog) -> dict[str, str]:
    """Engine -> the assumption its facts are read under, for each of ``engines`` whose version is not given (no
    ``engine_version``, its package not declared, not installed here): the newest version checked (issue 20)."""
    out: dict[str, str] = {}
    for e, pkg, state, found in _checked_engines(engines, env, catalog):
        if state == "present" and found not in (None, "unknown"):
            continue
        why = "not installed on this machine" if state == "absent" else "not given (engine_version)"
        out[e] = (f"{e}'s version {why}: the facts scoped to {e} are read as at {pkg.name} {pkg.checked_up_to}, the newest "
                  f"checked [{pkg.where()}]")
    return out


def _engine_unknown(name: str, engine: str, pkg: Any, version: str, used: list[str]) -> Unknown:
    """What a runner's facts say under ``engine`` at ``version``, newer than they were read at: unverified (issue 20).
    ``used``: the engine-scoped facts that held (the first is named)."""
    used = list(dict.fromkeys(used))
    more = f" and {len(used) - 1} more" if len(used) > 1 else ""
    return Unknown(code="engine_unsupported",
                   detail=f"{name} under {engine} {version}: the facts for {engine} that make it run ({used[0]}{more}) were "
                          f"read at {pkg.name} up to {pkg.checked_up_to}; {version} is newer and may differ",
                   settle=f"those facts re-read at {pkg.name} {version}, then checked_up_to raised in backends/packages.yaml",
                   source=pkg.where(), backend=name)


def _version_notes(env: Environment, catalog: Catalog) -> list[str]:
    """An installed or declared version newer than the facts were checked against (an engine's too, issue 20)."""
    out = []
    for name, version in sorted(env.packages.items()):
        known = catalog.packages_table.get(name)
        if known and known.checked_up_to and version not in (None, "unknown"):
            try:
                if newer(version, known.checked_up_to):
                    then = (f"; what the facts scoped to {known.engine} allow is unverified at {version}, what they refuse "
                            "stays refused" if known.engine else "")
                    out.append(f"{name}: facts checked up to {known.checked_up_to}; {version} is "
                               f"{'installed' if env.detected else 'declared'} (newer: facts may have changed{then}) "
                               f"[{known.where()}]")
            except ValueError:
                continue
    return out


def _make_plan(chosen: Candidate, chosen_by: ChosenBy, u: Understood, env: Environment, catalog: Catalog,
               ranked: list[Candidate], needs: list[PackageNeed], ctx: _Ctx) -> Plan:
    cap = catalog.runners.get(chosen.backend)  # None: a runner no capability file describes (unverified)
    support = _support_row(cap, _runner_ctx(ctx, cap.runner)) if cap is not None else None
    fmt = lookup(u.quant)
    act = (support.activation_precision.get(u.quant) if support else None) or (fmt.activation if fmt else None) or _default_precision(u.arch)
    asked = asked_precision(u, chosen.backend)
    if asked:  # asked of the engine: the plan says it, verified by a row or not
        act = asked
    elif u.quant_params.get("weight_only") and act not in _SIXTEEN_BIT:
        act = _default_precision(u.arch)  # no activation scales: the checkpoint keeps 16-bit activations
    notes = list(u.notes) + list(chosen.notes)
    if u.quant_params.get("activation_precision") and not asked:
        notes.append(f"activation_precision {u.quant_params['activation_precision']} is asked of "
                     f"{' and '.join(u.quant_params.get('activation_precision_runners') or [])} only "
                     f"(activation_precision_runners); {chosen.backend} runs its own: {act} activations")
    if chosen_by.how in ("rule", "measured") and chosen_by.rule is not None:
        rule = next(r for r in catalog.rules if r.id == chosen_by.rule)
        if rule.note:
            notes.append(f"{rule.note} (rule {rule.id})")
    jit = None
    if cap is not None and cap.jit is not None and env.prebuilt.get(cap.jit.package) is not True:
        state = env.prebuilt.get(cap.jit.package)
        said = ("not prebuilt on this machine" if env.detected else "declared not prebuilt" if state is False
                else "prebuilt state not declared")
        jit = f"{cap.jit.package}: {said}; the first call JIT-compiles ({cap.jit.cost}) [{cap.jit.where()}]"
    for n in needs:
        said = f"{n.name}{' ' + n.version if n.version else ''} assumed installed (not declared)"
        if n.state == "assumed" and said not in notes:  # one line per package and version, whoever needs it
            notes.append(said)
    if u.engine == "any":
        notes.append(f"holds for engines: {', '.join(chosen.engines)}")
    option_auto = _option_auto(chosen, ctx)
    for e, why in option_auto.items():
        notes.append(f"{e}: leave its runner option at auto: {why}")
    a2a_cap = catalog.a2a.get(u.a2a)
    files = dict(sorted(catalog.files.items()))
    sources = list(catalog.rule_sources) + list(catalog.backend_sources)
    return Plan(
        schema_version=cast(Literal[3], PLAN_SCHEMA_VERSION), runner=chosen.backend,
        evidence=cast(Any, chosen.evidence), evidence_by_engine=dict(chosen.evidence_by_engine), unknowns=list(chosen.unknowns),
        strict=u.strict, module=catalog.adapter(chosen.backend, u.quant, u.model.activation) if cap is not None else None,
        registers=list(cap.registers) if cap is not None else [],
        dispatch_formats=list(a2a_cap.formats_used(tuple(u.a2a_modes), chosen.engines[0] if len(chosen.engines) == 1 else None))
        if a2a_cap else [],
        a2a=u.a2a, a2a_module=a2a_cap.module if a2a_cap else None, a2a_mode=u.a2a_mode, a2a_modes=list(u.a2a_modes),
        arch=u.arch, gpu=u.gpu, quant=u.quant, quant_params=dict(u.quant_params), activation_precision=act,
        weight_layout={"w13": cap.weight_layout.w13, "w2": cap.weight_layout.w2} if cap is not None and cap.weight_layout else None,
        cuda_graph=u.cuda_graph, engine=u.engine, engines=list(chosen.engines), chosen_by=chosen_by,
        alternatives=[c.backend for c in ranked if c.eligible and c.backend != chosen.backend],
        rejected=[c for c in ranked if not c.eligible], deployment=u, environment=env, packages=needs, jit=jit,
        notes=notes, assumptions=list(chosen.assumptions), runner_option_auto=option_auto,
        runner_option_values={str(k): v for k, v in cap.engines.options.items()} if cap is not None and cap.engines is not None else {}, files=files,
        rule_sources=list(catalog.rule_sources),
        backend_sources=list(catalog.backend_sources), written_by=writer(files),
        fingerprint=fingerprint(u, env, canonical_files(files, sources), chosen.backend),
    )


def _option_auto(chosen: Candidate, ctx: _Ctx) -> dict[str, str]:
    """Engine -> why (with the fact's file:line) where an engine method that builds the chosen runner (a ``methods``
    fact with ``option: auto``, or naming it in ``auto_only``) holds for that engine's facts: the launch must leave the runner option at auto."""
    out: dict[str, str] = {}
    ctx = _runner_ctx(ctx, chosen.backend)
    for m in ctx.catalog.common.methods:
        if not m.auto_for(chosen.backend):
            continue
        for e in chosen.engines:
            facts = ctx.engine_facts.get(e, ctx.facts)
            if m.when is not None and m.when.matches(facts) and _requires(m.requires, replace(ctx, facts=facts))[0]:
                out.setdefault(e, f"{m.why} [{m.where()}]")
    return out


def _capability_files(catalog: Catalog) -> list[str]:
    """Display names of the capability files in force, sorted: every file read but the rule files and the bundled files
    an operator's file of the same runner or a2a replaces (read, not in force; a new user's tenth trial saw 47 for 46)."""
    replaced = {where.rsplit(":", 1)[0] for where in catalog.replaced_files.values()}
    return sorted(k for k in catalog.files if k not in catalog.rule_files and k not in replaced)


def _default_precision(arch: str) -> str:
    """Activation precision of a weight-only plan: bf16, or fp16 on GPUs without bf16 (before sm80)."""
    from . import vocab

    has_bf16 = getattr(vocab, "has_bf16", None)
    return "bf16" if has_bf16 is None or has_bf16(arch) else "fp16"


def plan(deployment: Deployment | str | Path | dict[str, Any], **kwargs: Any) -> Plan:
    """Like :func:`explain`, but return the :class:`Plan` or raise :class:`SelectionError` (carrying the
    report) when the deployment is refused."""
    report = explain(deployment, **kwargs)
    if report.plan is None:
        raise SelectionError(report)
    return report.plan


__all__ = ["explain", "plan", "select", "check_runner", "adapter_reasons", "install_refusals", "fmt_num"]
