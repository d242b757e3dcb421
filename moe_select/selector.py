"""The selector: a pure function from a deployment to a plan, or a refusal with every reason.

Nothing here imports torch or reads the environment inside a check: the :class:`Environment` is an
input (declared for another machine, or detected once for this one before checks run). Every runner
of the catalog is checked against every fact, and every failure is reported with its closed code, a
detail naming the values, the ``file:line`` of the fact or rule, and a fix where one exists.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Iterable

from .capability import A2ACapability, Package, RunnerCapability
from .catalog import Catalog, default_catalog
from .conditions import Constraint, facts_of, fmt_num, parallel_fixes
from .deployment import Deployment, Understood, load_deployment, understand
from .environment import Environment, declared, detect, normalize_package_name
from .errors import InputError, Issue, SelectionError
from .plans import PLAN_SCHEMA_VERSION, Candidate, ChosenBy, PackageNeed, Plan, Reason, canonical_files, fingerprint
from .report import Report
from .versions import at_least, satisfies
from .vocab import ACTIVATION_PRECISION, DEEPEP_MODES_OF


def _facts(u: Understood, env: Environment) -> dict[str, Any]:
    m = u.model
    f = facts_of(arch=u.arch, quant=u.quant, a2a=u.a2a, deepep_mode=u.deepep_mode, activation=m["activation"],
                 routing=m["routing"], cuda_graph=u.cuda_graph, tp=u.tp, ep=u.ep, num_experts=m["num_experts"],
                 top_k=m["top_k"], hidden_size=m["hidden_size"], moe_intermediate_size=m["moe_intermediate_size"])
    f["flashinfer_prebuilt"] = env.flashinfer_prebuilt
    return f


def _arch_label(u: Understood) -> str:
    return f"{u.arch} ({u.gpu})" if u.gpu else u.arch


def _constraint_reasons(cons: Iterable[Constraint], facts: dict[str, Any], owner: str, backend: str,
                        common: Iterable[Constraint] = ()) -> list[Reason]:
    out = []
    common = list(common)
    for c in cons:
        if not c.applies(facts):
            continue
        v = c.violation(facts)
        if v is None:
            continue
        why = f" ({c.why})" if c.why else ""
        cond = f" (when {c.when.describe()})" if c.when else ""
        fix = parallel_fixes(c, facts, also=common) if c.field in ("tp", "ep", "moe_tp", "num_experts", "experts_per_rank",
                                                        "intermediate_per_rank", "moe_intermediate_size") else None
        out.append(Reason(code=c.code, detail=f"{owner}{cond}: {v}{why}", source=c.where(), fix=fix, backend=backend))
    return out


def _package_reasons(pkgs: Iterable[Package], env: Environment, facts: dict[str, Any], owner: str,
                     backend: str, needs: list[PackageNeed]) -> list[Reason]:
    out = []
    for p in pkgs:
        if p.when is not None and not p.when.matches(facts):
            continue
        state, found = env.package(p.name, p.module)
        needs.append(PackageNeed(name=p.name, module=p.module, version=p.version, state=state, found=found,
                                 needed_by=owner, source=p.where(), install=p.install))
        spec = f" {p.version}" if p.version else ""
        where = "on this machine" if env.detected else "in the deployment's packages"
        if state == "absent":
            out.append(Reason(code="dependency_missing", detail=f"{owner} needs {p.name}{spec} (import {p.module}); "
                              f"it is not installed ({where})", source=p.where(),
                              fix=p.install or f"pip install '{p.name}{p.version or ''}'", backend=backend))
        elif state == "present" and found not in (None, "unknown") and not satisfies(found, p.version):
            out.append(Reason(code="dependency_missing", detail=f"{owner} needs {p.name}{spec}; {found} is installed ({where})",
                              source=p.where(), fix=f"pip install '{p.name}{p.version}'", backend=backend))
    return out


def _a2a_reasons(a2a: A2ACapability, u: Understood, env: Environment, facts: dict[str, Any],
                 needs: list[PackageNeed], common: Iterable[Constraint] = ()) -> list[Reason]:
    """Deployment-level reasons of the all-to-all backend (they apply to every candidate)."""
    owner = f"a2a {a2a.a2a}"
    out: list[Reason] = []
    if u.arch not in a2a.archs.values:
        out.append(Reason(code="a2a_unsupported", detail=f"{owner} runs on {', '.join(a2a.archs.values)}; this deployment is {_arch_label(u)}",
                          source=a2a.archs.where(), fix="a2a: none"))
    out += _constraint_reasons(a2a.constraints, facts, owner, None, common)  # type: ignore[arg-type]
    out += _package_reasons(a2a.packages, env, facts, owner, None, needs)  # type: ignore[arg-type]
    if u.cuda_graph:
        modes = DEEPEP_MODES_OF.get(u.deepep_mode or "", ())
        if a2a.modes and u.deepep_mode != "auto":
            for m in modes:
                if not a2a.modes[m].cuda_graph:
                    out.append(Reason(code="cuda_graph_unsupported", detail=f"{owner} {m} mode cannot be captured in a CUDA graph",
                                      source=a2a.modes[m].where(), fix="deepep_mode: low_latency (or auto), or cuda_graph: false"))
        elif not a2a.modes and not a2a.cuda_graph.supported:
            out.append(Reason(code="cuda_graph_unsupported", detail=f"{owner} cannot be captured in a CUDA graph",
                              source=a2a.cuda_graph.where(), fix="cuda_graph: false"))
    return out


def _mode_fix(modes: list[str], cuda_graph: bool, deepep: A2ACapability | None) -> str | None:
    """``deepep_mode: X`` for a runner that accepts one mode, with ``cuda_graph: false`` when X cannot be captured."""
    if len(modes) != 1:
        return None
    mode = modes[0]
    capturable = deepep is None or mode not in deepep.modes or deepep.modes[mode].cuda_graph
    return f"deepep_mode: {mode}" + ("" if capturable or not cuda_graph else " and cuda_graph: false")


def check_runner(cap: RunnerCapability, u: Understood, env: Environment, facts: dict[str, Any],
                 catalog: Catalog, needs: list[PackageNeed]) -> list[Reason]:
    """Every reason ``cap`` cannot serve ``u`` on ``env`` (not counting rules and a2a-level reasons)."""
    name, out = cap.runner, []
    arch = _arch_label(u)
    if u.arch not in cap.archs:
        out.append(Reason(code="arch_unsupported", detail=f"{name} runs on {', '.join(cap.archs)}; this deployment is {arch}",
                          source=cap.support[0].where(), backend=name))
    elif u.quant not in cap.formats_on(u.arch):
        elsewhere = sorted({a for s in cap.support if u.quant in s.formats for a in s.archs})
        hint = f"; {u.quant} runs on {', '.join(elsewhere)}" if elsewhere else f"; {name} never runs {u.quant}"
        src = next(s for s in cap.support if u.arch in s.archs)
        out.append(Reason(code="quant_unsupported", detail=f"{name} on {u.arch} runs {', '.join(cap.formats_on(u.arch))}; "
                          f"not {u.quant}{hint}", source=src.where(), backend=name))
    if u.arch not in cap.archs and not any(u.quant in s.formats for s in cap.support):
        out.append(Reason(code="quant_unsupported", detail=f"{name} never runs {u.quant} (on any arch)",
                          source=cap.support[0].where(), backend=name))
    act = u.model["activation"]
    if act not in cap.activations.values:
        out.append(Reason(code="activation_unsupported", detail=f"{name} computes {', '.join(cap.activations.values)}; "
                          f"the model uses {act}", source=cap.activations.where(), backend=name))
    routing = u.model["routing"]
    if cap.routing.values != "any" and routing not in cap.routing.values:
        out.append(Reason(code="routing_unsupported", detail=f"{name} routes inside the kernel with "
                          f"{', '.join(cap.routing.values)}; the model routes with {routing}", source=cap.routing.where(), backend=name))
    if u.a2a not in cap.a2a.values:
        out.append(Reason(code="a2a_unsupported", detail=f"{name} takes dispatch from a2a {', '.join(cap.a2a.values)}; "
                          f"this deployment uses {u.a2a}", source=cap.a2a.where(),
                          fix=f"a2a in {{{', '.join(cap.a2a.values)}}}", backend=name))
    elif u.a2a == "deepep":
        needed = DEEPEP_MODES_OF[u.deepep_mode or "auto"]
        missing = [m for m in needed if m not in cap.a2a.deepep_modes]
        if missing:
            have = ", ".join(cap.a2a.deepep_modes) or "no mode"
            out.append(Reason(code="a2a_unsupported", detail=f"{name} accepts DeepEP {have}; deepep_mode {u.deepep_mode} "
                              f"also uses {', '.join(missing)}", source=cap.a2a.where(),
                              fix=_mode_fix(cap.a2a.deepep_modes, u.cuda_graph, catalog.a2a.get("deepep")), backend=name))
    out += _constraint_reasons(cap.constraints, facts, name, name, catalog.common.constraints)
    out += _package_reasons(cap.packages, env, facts, name, name, needs)
    prebuilt = cap.jit is not None and env.flashinfer_prebuilt is True
    for t in cap.toolchain:
        if prebuilt or (t.when is not None and not t.when.matches(facts)):
            continue
        cond = f" for {t.when.describe()}" if t.when else ""
        why = f" ({t.why})" if t.why else ""
        if env.nvcc is None and env.detected:
            out.append(Reason(code="toolchain_unsupported", detail=f"{name}{cond} JIT-compiles with nvcc >= {t.min}; "
                              f"no nvcc found on this machine{why}", source=t.where(), fix=f"install CUDA toolkit >= {t.min}", backend=name))
        elif env.nvcc is not None and not at_least(env.nvcc, t.min):
            out.append(Reason(code="toolchain_unsupported", detail=f"{name}{cond} JIT-compiles with nvcc >= {t.min}; "
                              f"nvcc is {env.nvcc}{why}", source=t.where(), fix=f"nvcc >= {t.min}", backend=name))
    if u.cuda_graph and not cap.cuda_graph.supported:
        out.append(Reason(code="cuda_graph_unsupported", detail=f"{name} cannot be captured in a CUDA graph",
                          source=cap.cuda_graph.where(), fix="cuda_graph: false (SGLang: --disable-cuda-graph)", backend=name))
    if u.require_adapter and catalog.adapter(name, u.quant) is None:
        if cap.module is not None and cap.adapter_formats is not None:
            out.append(Reason(code="no_adapter", detail=f"{name}'s adapter in this install implements "
                              f"{', '.join(cap.adapter_formats.values)}; {u.quant} is plan-only here",
                              source=cap.adapter_formats.where(), backend=name))
        else:
            out.append(Reason(code="no_adapter", detail=f"{name} has no adapter in this install (plan-only: an engine must "
                              "bring its own implementation)", source=cap.where("module"), backend=name))
    return out


def _common_reasons(catalog: Catalog, facts: dict[str, Any]) -> list[Reason]:
    return _constraint_reasons(catalog.common.constraints, facts, "every runner", None,  # type: ignore[arg-type]
                               catalog.common.constraints)


def explain(deployment: Deployment | str | Path | dict, *, catalog: Catalog | None = None,
            environment: Environment | None = None, base_dir: Path | None = None,
            rules_dirs: Iterable[str | Path] = ()) -> Report:
    """Evaluate every runner for ``deployment`` and return the full :class:`Report` (never raises for
    a refusal: see ``report.status``). ``deployment``: a model, a file path, or a dict.

    ``environment``: machine facts; by default declared by the deployment when it names a gpu/arch
    (planning another machine), detected on this machine for ``arch: auto`` (no torch import).
    Raises :class:`InputError` for invalid input (file:line, field).
    """
    if isinstance(deployment, (str, Path)):
        deployment, base_dir = load_deployment(deployment)
    elif isinstance(deployment, dict):
        from .deployment import deployment_from_dict

        deployment = deployment_from_dict(deployment, "<dict>")
    elif not isinstance(deployment, Deployment):
        raise InputError(f"a deployment is a Deployment, a file path or a dict, not {type(deployment).__name__}",
                         file="<python>", field="deployment")
    catalog = catalog or default_catalog(rules_dirs)
    this_machine = deployment.arch == "auto" or (deployment.arch is None and deployment.gpu is None)
    _check_declared(deployment, catalog, this_machine and environment is None)
    if environment is None:
        if this_machine:
            environment = detect(catalog.packages())
        else:
            environment = declared(packages=deployment.packages, nvcc=deployment.nvcc, cuda=deployment.cuda,
                                   flashinfer_prebuilt=deployment.flashinfer_prebuilt, where=deployment._file)
    u = understand(deployment, base_dir=base_dir, detected_arch=environment.arch, detected_gpu=environment.gpu)
    if u.runner != "auto" and u.runner not in catalog.runners:
        close = difflib.get_close_matches(u.runner, list(catalog.runners), n=1)
        raise InputError(Issue(deployment._file, deployment._lines.get("runner", 0), "runner",
                               f"unknown runner {u.runner!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                               + f"; runners: auto, {', '.join(sorted(catalog.runners))}"))
    return select(u, environment, catalog)


def _check_declared(dep: Deployment, catalog: Catalog, detecting: bool) -> None:
    """Declared environment facts are for planning another machine: refuse them when this machine is
    detected (they would be ignored), and refuse package names no capability file knows."""
    issues = []
    if detecting and dep.declares_environment:
        for k in dep.declares_environment:
            issues.append(Issue(dep._file, dep._lines.get(k, dep._line), k, f"{k} declares a fact of another machine, but "
                                "arch is auto (this machine, detected): give gpu/arch to plan for another machine, or drop it"))
    known: dict[str, str] = {}
    for name, module in catalog.packages():
        known[normalize_package_name(name)] = name
        known[normalize_package_name(module)] = name
    for name in (dep.packages or {}):
        if normalize_package_name(name) not in known:
            close = difflib.get_close_matches(name, sorted(set(known.values())), n=1)
            issues.append(Issue(dep._file, dep._lines.get("packages", dep._line), f"packages.{name}",
                                f"unknown package {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                                + f"; the capability files name: {', '.join(sorted(set(known.values())))}"))
    if issues:
        raise InputError(issues)


def select(u: Understood, env: Environment, catalog: Catalog) -> Report:
    """The pure selection: every runner of ``catalog`` checked against the deployment ``u`` (as
    :func:`~moe_select.deployment.understand` states it) on machine ``env``; returns the
    :class:`~moe_select.report.Report` (a plan, or a refusal with every reason). Reads nothing, imports
    nothing, never raises for a refusal. ``explain`` calls it after reading and understanding the
    input; ``resolve`` calls it again over a plan's own inputs to refuse an edited plan."""
    facts = _facts(u, env)
    a2a_cap = catalog.a2a.get(u.a2a)
    base_needs: list[PackageNeed] = []
    base: list[Reason] = _common_reasons(catalog, facts)
    if a2a_cap is None:
        base.append(Reason(code="a2a_unsupported", detail=f"no capability file for a2a {u.a2a}", source="backends/a2a/"))
    else:
        base += _a2a_reasons(a2a_cap, u, env, facts, base_needs, catalog.common.constraints)
    matching = [r for r in catalog.rules if r.when.matches(facts)]
    disabled: dict[str, list] = {}
    for r in matching:
        if r.action == "disable":
            for name in r.runners:
                disabled.setdefault(name, []).append(r)
    preferred: dict[str, Any] = {}  # runner -> the first matching prefer rule naming it, in rule order
    for r in matching:
        if r.action == "prefer":
            for n in r.runners:
                preferred.setdefault(n, r)
    order = list(preferred.items())

    candidates: dict[str, Candidate] = {}
    needs_of: dict[str, list[PackageNeed]] = {}
    for name in sorted(catalog.runners):
        cap = catalog.runners[name]
        needs: list[PackageNeed] = []
        reasons = [r.model_copy(update={"backend": name}) for r in base]
        reasons += check_runner(cap, u, env, facts, catalog, needs)
        for rule in disabled.get(name, []):
            reasons.append(Reason(code="disabled_by_rule", detail=f"rule {rule.id}: {rule.reason}", source=rule.where(),
                                  fix=f"override rule {rule.id} in an operator rules directory (--rules DIR)", backend=name))
        notes = [n.text for n in cap.notes if n.when is None or n.when.matches(facts)]
        pref = preferred.get(name)
        candidates[name] = Candidate(backend=name, eligible=not reasons, reasons=reasons, notes=notes,
                                     preferred_by=f"{pref.id} ({pref.where()})" if pref else None,
                                     adapter=catalog.adapter(name, u.quant))
        needs_of[name] = base_needs + needs

    ranked = [candidates[n] for n, _ in order] + [c for n, c in candidates.items() if n not in preferred]
    chosen: Candidate | None = None
    chosen_by: ChosenBy | None = None
    if u.runner == "auto":
        for n, rule in order:
            if candidates[n].eligible:
                chosen, chosen_by = candidates[n], ChosenBy(how="rule", rule=rule.id, source=rule.where())
                break
        considered = [c for c in ranked if not c.eligible]
    else:
        c = candidates[u.runner]
        considered = [c] if not c.eligible else []
        if c.eligible:
            chosen, chosen_by = c, ChosenBy(how="explicit", source=u.provenance.get("runner", "deployment"))
    reasons = [r for c in considered for r in c.reasons]
    plan = None
    if chosen is not None and chosen_by is not None:
        plan = _make_plan(chosen, chosen_by, u, env, catalog, ranked, needs_of[chosen.backend], facts)
    return Report(status="ok" if plan else "rejected", deployment=u, environment=env, plan=plan, candidates=ranked,
                  reasons=reasons, rule_files=catalog.rule_files, capability_files=sorted(k for k in catalog.files if k.startswith("backends/")),
                  overridden_rules={rid: f"{where} replaced by {next(r.where() for r in catalog.rules if r.id == rid)}"
                                    for rid, where in catalog.overridden.items()})


def _make_plan(chosen: Candidate, chosen_by: ChosenBy, u: Understood, env: Environment, catalog: Catalog,
               ranked: list[Candidate], needs: list[PackageNeed], facts: dict[str, Any]) -> Plan:
    cap = catalog.runners[chosen.backend]
    support = cap.support_for(u.arch, u.quant)
    act = (support.activation_precision.get(u.quant) if support else None) or ACTIVATION_PRECISION[u.quant] or "chosen by the runner"
    notes = list(u.notes) + list(chosen.notes)
    if chosen_by.how == "rule":
        rule = next(r for r in catalog.rules if r.id == chosen_by.rule)
        if rule.note:
            notes.append(f"{rule.note} (rule {rule.id})")
    jit = None
    if cap.jit is not None and env.flashinfer_prebuilt is not True:
        state = "not prebuilt on this machine" if env.detected else ("declared not prebuilt" if env.flashinfer_prebuilt is False else "prebuilt state not declared")
        jit = f"{cap.jit.package}: {state}; the first call JIT-compiles ({cap.jit.cost}) [{cap.jit.where()}]"
    for n in needs:
        if n.state == "assumed":
            notes.append(f"{n.name}{' ' + n.version if n.version else ''} assumed installed (not declared)")
    a2a_cap = catalog.a2a.get(u.a2a)
    files = dict(sorted(catalog.files.items()))
    return Plan(
        schema_version=PLAN_SCHEMA_VERSION, runner=cap.runner, module=catalog.adapter(cap.runner, u.quant), registers=list(cap.registers), a2a=u.a2a,
        a2a_module=a2a_cap.module if a2a_cap else None, deepep_mode=u.deepep_mode, arch=u.arch, gpu=u.gpu,
        quant=u.quant, activation_precision=act,
        weight_layout={"w13": cap.weight_layout.w13, "w2": cap.weight_layout.w2} if cap.weight_layout else None,
        cuda_graph=u.cuda_graph, chosen_by=chosen_by,
        alternatives=[c.backend for c in ranked if c.eligible and c.backend != cap.runner],
        rejected=[c for c in ranked if not c.eligible], deployment=u, environment=env, packages=needs, jit=jit,
        notes=notes, files=files, rule_sources=list(catalog.rule_sources), fingerprint=fingerprint(u, env, canonical_files(files, catalog.rule_sources), cap.runner),
    )


def plan(deployment: Deployment | str | Path | dict, **kwargs: Any) -> Plan:
    """Like :func:`explain`, but return the :class:`Plan` or raise :class:`SelectionError` (carrying the
    report) when the deployment is refused."""
    report = explain(deployment, **kwargs)
    if report.plan is None:
        raise SelectionError(report)
    return report.plan


__all__ = ["explain", "plan", "select", "check_runner", "fmt_num"]
