"""Distributed helpers: every rank agreeing on one plan (:func:`agree_on_plan`), the all-reduce of
partial sums (:func:`all_reduce`), and the token layout of the ``none`` dispatcher (:func:`set_tokens`).

Rank layout (the same everywhere in this package): the MoE layer of a plan with ``tp`` and ``ep`` spans
one process group of ``tp`` ranks; group rank ``r`` holds experts of ``ep_rank = r // (tp / ep)`` and
the intermediate slice ``tp_rank = r % (tp / ep)``. Ranks in messages are ranks within that group.

Agreement (called by ``resolve(plan, group=...)``) gathers once, from every rank, the plan's key fields
(arch, gpu, runner, module, quant, tp, ep, a2a, model shape, the sha256 of every rule and capability
file, package versions of ``plan.environment`` and ``plan.packages``, and for a plan chosen by measurement its
token ranges and its table's fingerprint: every rank runs one table, issue 25), what ``resolve`` detected on
the machine (arch, gpu, package versions), the plan fingerprint, and the rank's own refusal reasons.
If any rank refused, or any field differs, every rank raises the same
:class:`~moe_select.errors.ResolveError`: codes of the failing ranks' reasons, each prefixed with
its ranks, and ``plan_mismatch`` naming the ranks and fields that differ.

Timeouts (no rank hangs): on a gloo group the gather is preceded by ``dist.monitored_barrier(group,
timeout=timeout_s, wait_all_ranks=True)``. Other backends (NCCL) get a gloo side group over the same
ranks, created once per group with ``timeout=timeout_s`` (its creation is the rendezvous). A rank that
never arrives (it failed before ``resolve``, e.g. could not read its plan file, or it hangs) makes every
other rank raise ``ResolveError`` (``plan_mismatch``, "not every rank ... reached the plan agreement
within N s"): group rank 0 after ``timeout_s``, naming the missing ranks (torch's message); the others
when their wait on rank 0 fails, after ``timeout_s`` to about twice that when rank 0 itself is missing
(measured on gloo: 1.5 s and 2.3 s for timeout_s=1.5). A rank that died closes its connections, and
the others fail at once. A rank whose plan file is invalid still takes part (``resolve`` sends "could
not read its plan"), so the others refuse at once instead of waiting.
"""
from __future__ import annotations

import json

import weakref
from datetime import timedelta
from typing import Any, Iterable

from .errors import MoeSelectError, ResolveError, first_line
from .plans import Reason

TOKEN_LAYOUTS = ("replicated", "sharded")
_SIDE_GROUPS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
_ABSENT = "<absent>"


class DispatchError(MoeSelectError, ValueError):
    """A dispatcher cannot work with this process group (missing, wrong size, rank layout) or token layout."""


def group_rank(group: Any) -> tuple[int, int]:
    """``(rank within group, group size)``; raises :class:`DispatchError` when torch.distributed is not
    initialized or this process is not in ``group``."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise DispatchError("torch.distributed is not initialized (dist.init_process_group first)")
    rank = dist.get_rank(group)
    if rank < 0:
        raise DispatchError("this process is not a member of the given process group")
    return rank, dist.get_world_size(group)


def check_layout(spec: Any, group: Any, who: str) -> tuple[int, int]:
    """Check that ``group`` is the MoE group of ``spec`` (size tp; this rank at ``ep_rank * tp/ep +
    tp_rank``). Returns ``(rank, size)``; raises :class:`DispatchError` naming ``who`` and the rank."""
    if group is None:
        raise DispatchError(f"{who} needs the MoE process group: resolve(plan, group=...)")
    rank, size = group_rank(group)
    if size != spec.tp:
        raise DispatchError(f"rank {rank}: {who}: the group has {size} ranks; the layer spans tp={spec.tp} ranks (ep {spec.ep})")
    want = spec.ep_rank * (spec.tp // spec.ep) + spec.tp_rank
    if rank != want:
        raise DispatchError(f"rank {rank}: {who}: spec says ep_rank {spec.ep_rank}, tp_rank {spec.tp_rank}, which is group rank {want}")
    return rank, size


def all_reduce(tensor: Any, group: Any) -> Any:
    """Sum partial MoE outputs over ``group`` in place and return ``tensor`` (``[T, H]``, any float dtype;
    the backend adds in that dtype: bf16 sums round once per step).

    For engines that do not reduce themselves: with ``a2a: none`` and replicated tokens (pure TP, or EP
    without an all-to-all), ``MoeRunner.run`` returns this rank's partial sum (its experts and its
    intermediate slice); the sum over the group is the layer's output. ``group``: the MoE group (None:
    the default group). Raises :class:`DispatchError` when torch.distributed is not initialized."""
    import torch.distributed as dist

    group_rank(group)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    return tensor


def set_tokens(runner: Any, tokens: str) -> None:
    """Choose the token layout of a resolved ``a2a: none`` runner, explicitly (the default, from
    ``resolve``, is ``replicated``).

    ``replicated``: every rank of the group passes the same tokens; ``run`` returns this rank's partial
    sum (reduce with :func:`all_reduce`). ``sharded``: each rank passes its own tokens (any count, also 0);
    ``run`` all-gathers them, computes the local experts, and reduce-scatters, returning the complete
    output of this rank's tokens. Raises :class:`DispatchError` for another a2a or an unknown layout."""
    if tokens not in TOKEN_LAYOUTS:
        raise DispatchError(f"tokens must be one of {', '.join(TOKEN_LAYOUTS)}, got {tokens!r}")
    d = runner.dispatcher
    if getattr(d, "token_layouts", ()) == () or tokens not in d.token_layouts:
        raise DispatchError(f"a2a {runner.plan.a2a}: its dispatcher takes each rank's own tokens; no {tokens!r} layout to choose")
    runner.dispatcher = type(d)(d.spec, d.group, tokens=tokens)


# ---------------------------------------------------------------------------------------------- agreement

def group_reasons(plan: Any, group: Any) -> list[Reason]:
    """Local reasons the group cannot run ``plan``: its size must be the plan's tp."""
    _, size = group_rank(group)
    d = plan.deployment
    if size == d.tp:
        return []
    return [Reason(code="parallelism_unsupported", detail=f"the process group has {size} ranks; the plan's MoE layer spans "
                   f"tp={d.tp} ranks (ep {d.ep})", source="resolve(group=...)", fix=f"pass the group of the {d.tp} ranks of this layer")]


def unreadable_plan(exc: Exception, where: str) -> Reason:
    """The reason a rank sends when it cannot read its plan file."""
    return Reason(code="plan_mismatch", detail=f"could not read its plan: {first_line(exc)}", source=where,
                  fix="give every rank the same valid plan file")


def plan_fields(plan: Any, environment: Any = None) -> dict[str, str]:
    """The fields ranks must agree on, as text: plan fields, ``file:NAME`` hashes, ``package:NAME``
    versions, ``detected ...`` facts of ``environment`` (this machine, as resolve detected it), and
    ``fingerprint``."""
    d = plan.deployment
    f: dict[str, Any] = {"arch": plan.arch, "gpu": plan.gpu, "runner": plan.runner, "module": plan.module,
                         "quant": plan.quant, "tp": d.tp, "ep": d.ep, "a2a": plan.a2a, "a2a_mode": plan.a2a_mode,
                         "a2a_module": plan.a2a_module, "cuda_graph": plan.cuda_graph}
    f.update({f"model.{k}": v for k, v in sorted(d.model.as_dict().items())})
    # the rest of the deployment as understood (token budgets, dp, phase, ...), so a rank whose plan differs in any of
    # it is named by the field, not by the fingerprint alone (a fifth new user's trial, 2026-12-04)
    for k, v in sorted(d.model_dump(mode="json", exclude={"model", "provenance", "notes"}).items()):
        f.setdefault(k, json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v)
    ranges = getattr(plan, "ranges", None)
    if ranges or getattr(plan, "measurements_fingerprint", None):  # issue 25: one table, one set of ranges
        f["measurements_fingerprint"] = plan.measurements_fingerprint
        f["ranges"] = ", ".join(f"<= {r.max_tokens}: {r.runner}" if r.max_tokens is not None else f"above: {r.runner}"
                                for r in ranges or [])
    from .plans import canonical_files

    f.update({f"file:{k}": v for k, v in canonical_files(plan.files, plan.rule_sources + plan.backend_sources).items()})
    env = plan.environment
    f.update({f"package:{k}": v or "absent" for k, v in sorted(env.packages.items())})
    for need in plan.packages:
        f.setdefault(f"package:{need.name}", need.found or need.state)
    f.update({"nvcc": env.nvcc, **{f"prebuilt:{k}": v for k, v in sorted(env.prebuilt.items())}})
    if environment is not None:  # only what the plan needs, so ranks given wider environments still compare
        f.update({"detected arch": environment.arch, "detected gpu": environment.gpu})
        for need in sorted(plan.packages, key=lambda n: n.name):
            f[f"detected package:{need.name}"] = environment.package(need.name, need.module)[1] or "absent"
    f["fingerprint"] = plan.fingerprint
    return {k: str(v) for k, v in f.items()}


def _who(ranks: Iterable[int]) -> str:
    rs = sorted(ranks)
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


def _line(key: str, value: str, ranks: list[int], ref: str, ref_ranks: list[int]) -> str:
    who, on = _who(ranks), _who(ref_ranks)
    if key.startswith("file:"):
        name = key[5:].split("/", 1)[1] if key.startswith("file:[") else key[5:]  # "[i]/dir/file" -> "dir/file"
        if value == _ABSENT:
            return f"{who}: {name} is absent (present on {on})"
        if ref == _ABSENT:
            return f"{who}: {name} is present (absent on {on})"
        return f"{who}: {name} hash differs ({value[:12]} vs {ref[:12]} on {on})"
    name = key.replace(":", " ", 1)
    value, ref = (("(not recorded)" if v == _ABSENT else v) for v in (value, ref))
    return f"{who}: {name} {value} vs {ref} on {on}"


def compare(records: list[dict[str, Any]]) -> list[str]:
    """One line per (field, group of ranks) that differs from the value most ranks hold (ties: the
    lowest rank's). The fingerprint is named only when no other field explains it."""
    rows = [r for r in records if r.get("fields")]
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r["fields"] if k not in keys]
    lines: list[str] = []
    for key in keys:
        by_value: dict[str, list[int]] = {}
        for r in rows:
            by_value.setdefault(r["fields"].get(key, _ABSENT), []).append(r["rank"])
        if len(by_value) < 2 or (key == "fingerprint" and lines):
            continue
        ref = max(by_value, key=lambda v: (len(by_value[v]), -min(by_value[v])))
        lines += [_line(key, v, rs, ref, by_value[ref]) for v, rs in by_value.items() if v != ref]
    return lines


def _refusals(records: list[dict[str, Any]], n: int) -> list[Reason]:
    """Every rank's local reasons, identical ones merged, each detail prefixed with its ranks."""
    seen: dict[tuple, list[int]] = {}
    for r in records:
        for reason in r["reasons"]:
            seen.setdefault(tuple(sorted(reason.items())), []).append(r["rank"])
    out = []
    for key, ranks in seen.items():
        d = dict(key)
        d["detail"] = f"{_who(ranks) if len(ranks) < n else 'every rank'}: {d['detail']}"
        out.append(Reason(**d))
    return out


def _agreement_group(group: Any, timeout: timedelta) -> Any:
    import torch.distributed as dist

    if str(dist.get_backend(group)).lower() == "gloo":
        return group
    side = _SIDE_GROUPS.get(group)
    if side is None:
        side = dist.new_group(dist.get_process_group_ranks(group), timeout=timeout, backend="gloo",
                              use_local_synchronization=True)
        _SIDE_GROUPS[group] = side
    return side


def agree_on_plan(plan: Any, group: Any, *, local_reasons: list[Reason], timeout_s: float,
                  environment: Any = None) -> None:
    """Check across ``group`` that every rank resolves the same plan and none refused (see module doc).

    ``plan``: this rank's :class:`~moe_select.plans.Plan`, or None when it could not be read (then
    ``local_reasons`` says why); ``local_reasons``: this rank's refusal reasons (may be empty);
    ``timeout_s``: seconds to wait for the other ranks; ``environment``: this machine as resolve
    detected it. Collective: every rank of ``group`` must call it. Returns None when all agree; raises
    :class:`ResolveError` on every rank otherwise, or on every rank that arrived when one did not."""
    import torch.distributed as dist

    rank, size = group_rank(group)
    timeout = timedelta(seconds=timeout_s)
    mine = {"rank": rank, "fields": plan_fields(plan, environment) if plan is not None else None,
            "reasons": [r.model_dump() for r in local_reasons]}
    records: list[Any] = [None] * size
    try:
        g = _agreement_group(group, timeout)
        dist.monitored_barrier(g, timeout=timeout, wait_all_ranks=True)
        dist.all_gather_object(records, mine, group=g)
    except RuntimeError as exc:
        raise ResolveError([Reason(
            code="plan_mismatch", source="moe_select.parallel.agree_on_plan",
            detail=f"not every rank of the {size}-rank group reached the plan agreement within {timeout_s:g} s "
                   f"({first_line(exc)}); a rank that failed before resolve(group=...) or hangs leaves the others here",
            fix="read the other ranks' logs (group rank 0's error names the missing ranks)")], rank=rank) from exc
    reasons = _refusals(records, size)
    reasons += [Reason(code="plan_mismatch", detail=line, source=f"moe_select.parallel.agree_on_plan ({size} ranks)",
                       fix="give every rank the same plan file and the same install (GPU model, packages, rule and "
                           "capability files), or plan again on each machine")
                for line in compare(records)]
    if reasons:
        raise ResolveError(reasons, rank=rank)


__all__ = ["agree_on_plan", "all_reduce", "set_tokens", "check_layout", "group_reasons", "compare",
           "plan_fields", "DispatchError"]
