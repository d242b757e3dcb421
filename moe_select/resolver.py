"""``resolve(plan)``: at engine startup, before weights load, make a plan ready on this machine or refuse.

Steps, each refusing with a :class:`~moe_select.errors.ResolveError` that names what is wrong:
1. re-detect the machine (arch through torch, packages from their metadata) and compare with the
   plan: a different arch, changed rule/capability files, or a changed package version is
   ``plan_mismatch`` (each differing field named); a missing package or version is ``dependency_missing``;
   a plan made for a serving engine is checked again under ``engine: moe_select`` (this install's facts and
   code): a refusal there is ``no_adapter`` naming the failing fact (:func:`engine_plan_reasons`);
2. with ``require_prebuilt=True``, refuse a runner whose first call would JIT-compile;
3. import the adapter module and the dispatcher module eagerly and call their ``register(registry)``
   (a plan-only runner without a plugin is ``no_adapter``);
4. check that every (a2a, runner) pair the capability file promises is registered;
5. with ``group=``: every rank's reasons from steps 1-4 and its plan's key fields are gathered
   (:func:`moe_select.parallel.agree_on_plan`, with a timeout); all ranks refuse if any refused or differ;
6. build the core and the dispatcher for this rank and return a :class:`~moe_select.runner.MoeRunner`.
All of it runs under one lock, so concurrent resolves are safe.

A plan chosen by measurement (issue 25: ``plan.measurements``, ``plan.ranges``) is checked against this machine in
full first: the embedded table's :class:`~moe_select.measurements.MachineKey` (GPU, arch, driver, CUDA, torch,
Triton, kernel packages, moe-select, the tile files its Triton cores read, CUDA graphs) against this machine's
(:func:`machine_here`). Where it differs, the plan falls back to the runner the rules choose over the same inputs
without the table, with a :class:`MeasurementsWarning` naming each field; under ``strict`` it is refused
(``plan_mismatch``). Every range's runner goes through steps 2-4 (adapter imported, registrations checked) and gets
its core; the ranks agree on the table through the plan's fingerprint and ``measurements_fingerprint``.
"""
from __future__ import annotations

import importlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .catalog import load_catalog
from .environment import Environment, detect
from .errors import InputError, ResolveError
from .plans import Plan, Reason, range_view
from .versions import satisfies
from .yamlio import load_file, shorten

if TYPE_CHECKING:  # pragma: no cover - annotations only: resolve imports torch and the runner when it builds one
    import torch

    from .contracts import TokenDispatcher
    from .layer import LayerSpec
    from .registry import Registry
    from .runner import MoeRunner

_lock = threading.RLock()


class MeasurementsWarning(UserWarning):
    """``resolve`` was given a plan chosen by measurement whose table was taken on another machine (its
    :class:`~moe_select.measurements.MachineKey` differs from this machine's in the fields the message names): the
    times may not hold here, so the runner the rules choose over the same inputs is built instead. Strict mode
    refuses such a plan (``plan_mismatch``) rather than fall back."""


class PlanWriterWarning(UserWarning):
    """``resolve`` was given a plan written by another moe-select than this one (another package version or
    other bundled fact files, :class:`~moe_select.plans.WrittenBy`), or by one that did not record itself.
    A warning, not a refusal: the plan is still checked against a fresh selection over its own inputs with
    this install's files, and refused (``plan_mismatch``) only for what differs."""


def writer_note(plan: Plan, files: dict[str, str], name: str = "the plan") -> str | None:
    """Why ``plan`` reads as written by another moe-select than this install, whose catalog read ``files``
    (display name -> sha256), or None when the writer is this one. ``name`` names the plan in the text."""
    from .plans import writer

    here, was = writer(files), plan.written_by
    if was is None:
        return (f"{name} does not say which moe-select wrote it (no written_by: written before plans recorded it); this is "
                f"{here.brief()}: it is checked against a fresh selection with this install's files")
    if (was.package, was.facts) == (here.package, here.facts):
        return None
    return (f"{name} was written by {was.brief()}; this is {here.brief()}: it is checked against a fresh selection "
            "with this install's files and refused (plan_mismatch) only where that differs")


def load_plan(plan: Plan | dict | str | Path) -> Plan:
    """A :class:`Plan` from a Plan, a dict, or a JSON file (errors name file, line and field).

    A plan written by another version of moe-select (another ``schema_version``) is refused with a
    "plan again" message before any other field is read, never misread. Raises :class:`InputError`."""
    if isinstance(plan, Plan):
        _check_deployments(plan)  # model_copy(update=...) skips validation (issue 17)
        return plan
    if isinstance(plan, str) and plan.lstrip().startswith("{"):
        # the plan's JSON text, not a path: it was opened as a file name and echoed whole in the error (a trial, break53)
        raise InputError("a plan given as JSON text: pass a path to the plan file, or the parsed object "
                         "(json.loads(text))", file="<plan>", field="plan")
    if isinstance(plan, (str, Path)):
        data = load_file(plan, kind="plan file")
        name = str(plan)
    else:
        data, name = plan, "<plan>"
    from pydantic import ValidationError

    from .errors import Issue
    from .plans import PLAN_SCHEMA_VERSION

    if not isinstance(data, dict):
        raise InputError(Issue(name, getattr(data, "line", 0), "", "a plan file holds a JSON object (moe-select plan -o FILE)"))
    version = data.get("schema_version")
    from .plans import READABLE_PLAN_SCHEMAS

    if version not in READABLE_PLAN_SCHEMAS or type(version) is not int:
        line = getattr(data, "key_lines", {}).get("schema_version", getattr(data, "line", 0))
        if type(version) is int and version < PLAN_SCHEMA_VERSION:
            why = f"was written by an older moe-select (plan schema_version {version}; this one reads {PLAN_SCHEMA_VERSION})"
        elif type(version) is int:
            why = f"was written by a newer moe-select (plan schema_version {version}; this one reads {PLAN_SCHEMA_VERSION})"
        else:
            why = f"has no valid schema_version ({str(version)[:40]!r}; this moe-select writes {PLAN_SCHEMA_VERSION})"
        raise InputError(Issue(name, line, "schema_version", f"the plan {why}: plan again with this version (moe-select plan)"))
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        from .yamlio import validation_issues

        raise InputError(validation_issues(exc, data, name, Plan)) from None


def _check_deployments(plan: Plan, prefix: str = "") -> None:
    """Validate a :class:`Plan` object's deployments (its own and every layer kind's) again, as a plan file's
    are: ``plan.model_copy(update=...)`` skips validation, and a tp of 2**63 would reach the selector.
    Raises :class:`InputError` naming the field (``<plan>: deployment.tp: ...``)."""
    from pydantic import ValidationError

    from .deployment import Understood
    from .errors import Issue
    from .yamlio import validation_issues

    data = plan.deployment.model_dump()
    try:
        Understood.model_validate(data)
    except ValidationError as exc:
        raise InputError([Issue(i.file, i.line, f"{prefix}deployment.{i.field}", i.message)
                          for i in validation_issues(exc, data, "<plan>", Understood)]) from None
    for n, sub in enumerate(plan.layers):
        _check_deployments(sub, f"{prefix}layers[{n}].")


def torch_arch() -> tuple[str, str | None]:
    """``(arch, gpu name)`` of the current CUDA device through torch; ``("cpu", None)`` without one. The arch
    is a base arch name, declared in a vocabulary or not (compute capability 13.0 -> ``sm130``; ROCm's
    ``gfx90a:sramecc+:xnack-`` -> ``gfx90a``); what is no arch name at all is returned as torch said it, and
    the plan's arch then differs from it (``plan_mismatch``)."""
    import torch

    from .vocab import normalize_arch

    if torch.cuda.is_available():
        if getattr(torch.version, "hip", None):
            arch = torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
        else:
            major, minor = torch.cuda.get_device_capability()
            arch = f"sm{major}{minor}"
        try:
            arch = normalize_arch(arch)
        except ValueError:
            pass
        return arch, torch.cuda.get_device_name(0)
    return "cpu", None


#: Plan fields that the selector derives; a plan whose fields differ from a fresh selection over its own
#: inputs was edited (or made by other code) and is refused.
DERIVED_FIELDS = tuple(f for f in Plan.model_fields
                       if f not in ("schema_version", "deployment", "environment", "files", "rule_sources", "backend_sources",
                                    "written_by"))


def _replan_reasons(plan: Plan, catalog: Any) -> list[Reason]:
    """Select again over the plan's own inputs (deployment and environment as understood) with the
    current files; every derived field that differs is a ``plan_mismatch``. This is what makes a
    hand-edited plan (another module, quant, cuda_graph, fingerprint) fail at startup."""
    from .measured import EMBEDDED, Source
    from .selector import select

    tables = [Source(EMBEDDED, plan.measurements)] if plan.measurements is not None else None
    try:
        report = select(plan.deployment, plan.environment, catalog, tables)
    except (TypeError, ValueError, KeyError) as exc:  # inputs a selector never wrote
        return [Reason(code="plan_mismatch", detail=f"the plan's deployment/environment cannot be selected over ({exc}): the "
                       "plan was edited or made by other code", source="plan", fix="plan again (moe-select plan)")]
    if report.plan is None:
        codes = ", ".join(sorted({r.code for r in report.reasons}))
        return [Reason(code="plan_mismatch", detail=f"the selector refuses this plan's own inputs ({codes}): its deployment or "
                       "environment block was edited after planning (or made by other code)", source="plan",
                       fix="plan again (moe-select plan)")]
    differs = [f for f in DERIVED_FIELDS if getattr(plan, f) != getattr(report.plan, f)]
    if "fingerprint" in differs and "measurements_fingerprint" not in differs:
        # the inputs changed: the other derived fields follow from that, so they are not listed
        return [Reason(code="plan_mismatch", detail="fingerprint: the plan's inputs (deployment or environment) differ from "
                       "those it was made for: the plan was edited after planning", source="plan",
                       fix="plan again (moe-select plan)")]
    out: list[Reason] = []
    for field in differs:
        mine, fresh = getattr(plan, field), getattr(report.plan, field)
        if field != "fingerprint":
            where, a, b = _first_difference(_plain(mine), _plain(fresh), field)
            out.append(Reason(code="plan_mismatch", detail=f"{where}: the plan says {shorten(a)}, selection over its own "
                              f"inputs gives {shorten(b)} (the plan was edited or made by other code)", source="plan",
                              fix="plan again (moe-select plan)"))
    return out


def _plain(value: Any) -> Any:
    """``value`` as JSON data (models dumped), for :func:`_first_difference`."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _first_difference(a: Any, b: Any, path: str) -> tuple[str, Any, Any]:
    """The first place (``field[2].eligible``) where JSON data ``a`` and ``b`` differ, with both values there."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return path, a, b


def _input_file_reasons(plan: Plan) -> list[Reason]:
    """A model-config file that changed (or is gone) since planning: the checkpoint the plan was made
    for is not the one that will load (e.g. a bf16 config.json replaced by an FP8 one)."""
    import hashlib

    from .model_config import ABSENT

    out = []
    folders = sorted({str(Path(k).parent) for k in plan.deployment.input_files})
    if len(folders) > 1:
        # one checkpoint's config files, read from one folder; their paths are not in the fingerprint (the contents
        # are), so an entry moved elsewhere (an absent hf_quant_config.json pointed at a path that will never exist:
        # a trial, break53) would silently stop being checked
        return [Reason(code="plan_mismatch", detail="the plan's model-config files are not in one folder ("
                       + ", ".join(folders) + "): deployment.input_files was edited", source="plan: deployment.input_files",
                       fix="plan again with the checkpoint that will load")]
    for path, digest in sorted(plan.deployment.input_files.items()):
        if digest == ABSENT:
            if os.path.lexists(path):
                out.append(Reason(code="plan_mismatch", detail=f"{path} appeared since the plan was made (it was absent: "
                                  "the checkpoint's format may differ)", source=path,
                                  fix="plan again with the checkpoint that will load"))
            continue
        try:
            now = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError as exc:
            out.append(Reason(code="plan_mismatch", detail=f"{path}: the model config the plan was made from cannot be read "
                              f"({exc.strerror or exc}); the plan reads it at the path it was planned with",
                              source=path, fix="plan again where the checkpoint is mounted (the same path on every rank), "
                              "or mount it at the planned path"))
            continue
        if now != digest:
            out.append(Reason(code="plan_mismatch", detail=f"{path} changed since the plan was made (the checkpoint's "
                              "shape or format may differ)", source=path, fix="plan again with the checkpoint that will load"))
    return out


def strict_reasons(plan: Plan, strict: bool) -> list[Reason]:
    """Under ``strict``, one ``unverified`` reason per unknown of a plan (or of its layer kinds) whose evidence
    is ``unverified``; [] otherwise."""
    if not strict:
        return []
    out = []
    for p in (plan, *plan.layers):
        if p.evidence == "unverified":
            out += [Reason(code="unverified", detail=f"strict: {x.detail}", source=x.source, backend=p.runner,
                           fix=f"{x.settle}; or resolve(..., strict=False)") for x in p.unknowns]
            if not p.unknowns:
                out.append(Reason(code="unverified", detail=f"strict: the {p.deployment.layer_kind} plan is unverified",
                                  source="plan", backend=p.runner, fix="plan again; or resolve(..., strict=False)"))
    return out


def check_environment(plan: Plan, env: Environment, *, require_prebuilt: bool = False, catalog: Any = None) -> list[Reason]:
    """Every reason ``plan`` cannot be used on ``env`` (the machine as detected): arch, files, a fresh
    selection over the plan's inputs, packages, JIT state, and a runner with no adapter."""
    out: list[Reason] = []
    if env.arch != plan.arch:
        made = f"{plan.arch} ({plan.gpu})" if plan.gpu else plan.arch
        here = f"{env.arch} ({env.gpu})" if env.gpu else env.arch
        out.append(Reason(code="plan_mismatch", detail=f"arch: the plan was made for {made}; this machine is {here}",
                          source=plan.deployment.provenance.get("arch", "plan"), fix="plan again on this machine (arch: auto)"))
    try:
        catalog = catalog or plan_catalog(plan)
        now = catalog.files
    except InputError as exc:
        out.append(Reason(code="plan_mismatch", detail=f"the rule/capability files no longer load: {exc}", source="catalog"))
        now = {}
    changed = False
    for name in sorted(set(plan.files) | set(now)):
        before, after = plan.files.get(name), now.get(name)
        if before != after and now:
            changed = True
            what = "is new" if before is None else "is gone" if after is None else "changed"
            out.append(Reason(code="plan_mismatch", detail=f"{name} {what} since the plan was made", source=name,
                              fix="plan again with the current files"))
    out += _input_file_reasons(plan)
    if now and not changed:
        out += _replan_reasons(plan, catalog)
        if plan.module is None and catalog.plugins.get(plan.runner) is None:
            out.append(Reason(code="no_adapter", detail=f"{plan.runner} has no adapter in this install (plan-only); install a "
                              "plugin that registers one under the moe_select.adapters entry-point group",
                              source=fact_file(catalog, plan.runner)))
        else:
            out += engine_plan_reasons(plan, catalog)
    for need in plan.packages:
        found = env.package(need.name, need.module)[1]
        spec = f" {need.version}" if need.version else ""
        if found is None:
            why = env.lookalike(need.name)
            out.append(Reason(code="dependency_missing", detail=f"{need.needed_by} needs {need.name}{spec} (import {need.module}); "
                              "not installed on this machine" + (f": {why}" if why else ""), source=need.source, fix=need.install or f"pip install '{need.name}{need.version or ''}'"))
        elif need.state == "present" and need.found not in (None, "unknown") and not _same_version(need.found, found):
            out.append(Reason(code="plan_mismatch", detail=f"{need.name}: {need.found} when planned, {found} on this machine",
                              source=need.source, fix="plan again on this machine"))
        elif found != "unknown" and not satisfies(found, need.version):
            out.append(Reason(code="dependency_missing", detail=f"{need.needed_by} needs {need.name}{spec}; {found} is installed",
                              source=need.source, fix=f"pip install '{need.name}{need.version}'"))
    jit = catalog.runners[plan.runner].jit if catalog is not None and plan.runner in catalog.runners else None
    if require_prebuilt and plan.jit is not None and (jit is None or env.prebuilt.get(jit.package) is not True):
        hint = (f"install {jit.prebuilt_package} (matching {jit.package}), or " if jit is not None and jit.prebuilt_package else "")
        out.append(Reason(code="dependency_missing", detail=f"{plan.runner} would JIT-compile at its first call and "
                          f"require_prebuilt is set: {plan.jit}", source="resolve(require_prebuilt=True)",
                          fix=f"{hint}plan another runner"))
    return out


def engine_plan_reasons(plan: Plan, catalog: Any) -> list[Reason]:
    """A plan made for a serving engine (``engine`` sglang, vllm, trtllm or any) says what that engine runs; this
    install builds its own adapter for it only where it runs that too. The plan's deployment (as planned: runner,
    format, activation, parallelism, a2a, CUDA graphs) is checked again under ``engine: moe_select``
    (:func:`moe_select.selector.install_refusals`); each refusal there is a ``no_adapter`` naming the failing fact.
    A plan made for ``moe_select`` was selected under those facts already: []."""
    from .selector import install_refusals
    from .vocab import INSTALL_ENGINE

    if plan.engine == INSTALL_ENGINE:
        return []
    try:
        return install_refusals(plan.deployment, plan.environment, catalog, [plan.runner]).get(plan.runner, [])
    except (TypeError, ValueError, KeyError) as exc:  # inputs a selector never wrote: _replan_reasons says so
        return [Reason(code="plan_mismatch", detail=f"the plan's deployment cannot be checked under this install's facts "
                       f"({exc})", source="plan", fix="plan again (moe-select plan)")]


def plan_catalog(plan: Plan) -> Any:
    """The catalog a plan was made with: bundled files, installed plugins, and the plan's operator rule
    and capability folders (absolute; never the environment variables: the plan says what was used)."""
    return load_catalog(plan.rule_sources, use_env=False, backends_dirs=plan.backend_sources)


def fact_file(catalog: Any, name: str, key: str = "module", *, a2a: bool = False) -> str:
    """``file:line`` of ``key`` (its object's line where the file has no such key) in runner ``name``'s (with
    ``a2a``: a2a backend ``name``'s) capability file in ``catalog``: the bundled ``backends/<name>.yaml``, a
    plugin's file, or an operator folder's (``--backends DIR``), as the catalog read it; the bundled name
    when the catalog has no such file. Issue 17: a reason names the file its fact came from."""
    caps = getattr(catalog, "a2a" if a2a else "runners", None) or {}
    cap = caps.get(name)
    return cap.where(key) if cap is not None else f"backends/{'a2a/' if a2a else ''}{name}.yaml"


def _rank_parts(p: Plan, registry: Registry, group: Any, rank: int | None, ep_rank: Any, tp_rank: Any, device: Any,
                catalog: Any = None) -> tuple[tuple[LayerSpec, torch.device, TokenDispatcher] | None, list[Reason]]:
    """This rank's ``(LayerSpec, torch device, dispatcher)``, or the reasons it cannot have them. With a
    ``group`` the ranks come from the group rank (``ep_rank = rank // (tp/ep)``, ``tp_rank = rank % (tp/ep)``);
    ranks also given must be those (a contradicting rank would build another rank's shard)."""
    from .layer import LayerSpec, moe_tp_size
    from .parallel import DispatchError

    def refuse(detail: str, source: str = "resolve(ep_rank=..., tp_rank=...)") -> tuple[None, list[Reason]]:
        return None, [Reason(code="parallelism_unsupported", detail=f"rank: {detail}", source=source)]

    for name, value in (("ep_rank", ep_rank), ("tp_rank", tp_rank)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return refuse(f"{name} must be an integer, got {value!r}")
    try:
        if group is not None and rank is not None:
            moe_tp = moe_tp_size(p.deployment.tp, p.deployment.ep)
            want_ep, want_tp = rank // moe_tp, rank % moe_tp
            for name, given, want in (("ep_rank", ep_rank, want_ep), ("tp_rank", tp_rank, want_tp)):
                if given is not None and given != want:
                    return refuse(f"{name}={given} was given, but group rank {rank} is {name} {want} "
                                  f"(tp {p.deployment.tp}, ep {p.deployment.ep}): leave the ranks to the group")
            ep_rank, tp_rank = want_ep, want_tp
        spec = LayerSpec.from_plan(p, ep_rank=ep_rank or 0, tp_rank=tp_rank or 0)
    except ValueError as exc:
        return refuse(str(exc))
    try:
        dev = _device(device, p, rank)
    except ResolveError as exc:
        return None, [r for r in exc.reasons if isinstance(r, Reason)]
    factory = registry.dispatcher(p.a2a)
    if factory is None:  # _adapter_reasons checked it; a registry changed since is refused, not called
        return None, [Reason(code="no_adapter", detail=f"no dispatcher is registered for a2a {p.a2a}",
                             source=fact_file(catalog, p.a2a, a2a=True))]
    try:
        dispatcher = factory(spec, group)
    except DispatchError as exc:
        return refuse(str(exc), source=f"{fact_file(catalog, p.a2a, a2a=True)} (dispatcher)")
    return (spec, dev, dispatcher), []


def _device(device: Any, plan: Plan, rank: int | None) -> torch.device:
    """The runner's torch device: ``device``, or cuda for a GPU plan and cpu otherwise; refused when
    it is not a device torch knows or not present on this machine."""
    import torch

    try:
        dev = torch.device(device if device is not None else ("cuda" if plan.arch != "cpu" else "cpu"))
    except (RuntimeError, TypeError) as exc:
        raise ResolveError([Reason(code="plan_mismatch", detail=f"device {device!r}: {exc}", source="resolve(device=...)")],
                           rank=rank) from None
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise ResolveError([Reason(code="plan_mismatch", detail=f"device {dev} is not available on this machine "
                                   f"(torch.cuda.is_available() = {torch.cuda.is_available()})", source="resolve(device=...)",
                                   fix="device='cpu', or run on a machine with that GPU")], rank=rank)
    if dev.type not in ("cpu", "cuda"):
        raise ResolveError([Reason(code="plan_mismatch", detail=f"device {dev}: runners run on cpu or cuda",
                                   source="resolve(device=...)")], rank=rank)
    return dev


def _load_adapter(module: str, what: str, registry: Registry, owns: frozenset[str] | None = None) -> list[Reason]:
    """Import ``module`` and call its ``register(registry)`` through a recording registrar (``owns``: the runners whose
    capability files name the module; a core for another is refused, and a ``register`` that fails takes back what it
    added). The reasons it is refused: a module that is not there (no_adapter where its package is installed but the
    module is not: a misspelt ``module:``; dependency_missing where the package or a module it imports is missing), an
    import that raises, no ``register``, a registration refused."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        top = module.split(".")[0]
        if isinstance(exc, ModuleNotFoundError) and missing and module.startswith(missing) and missing != top \
                and (module == missing or module[len(missing)] == "."):
            # the package is there, the module the capability file names is not: a misspelt module, not a dependency
            return [Reason(code="no_adapter", detail=f"{what} module {module} does not exist: package {top} is installed "
                           f"but has no {missing} (is the capability file's module spelt right?)", source=module,
                           fix=f"name a module of {top} that defines register(registry)")]
        if isinstance(exc, ModuleNotFoundError) and missing == top:
            return [Reason(code="dependency_missing", detail=f"{what} module {module}: package {top} is not installed",
                           source=module, fix=f"install the distribution that provides {top}")]
        return [Reason(code="dependency_missing", detail=f"importing {what} module {module} failed: {exc}", source=module)]
    except (Exception, SystemExit) as exc:  # an adapter that fails at import is refused here, not raised raw
        return [Reason(code="no_adapter", detail=f"importing {what} module {module} raised {type(exc).__name__}: {exc}",
                       source=module)]
    reg = getattr(mod, "register", None)
    if not callable(reg):
        return [Reason(code="no_adapter", detail=f"{what} module {module} has no register(registry) function", source=module)]
    from .registry import RegistrationError

    recording = registry.recording(module, owns)
    try:
        reg(recording)
    except RegistrationError as exc:
        recording.undo()
        return [Reason(code="no_adapter", detail=f"{what} module {module} could not register: {exc}", source=module)]
    except Exception as exc:  # register() that raises or takes other arguments
        recording.undo()
        return [Reason(code="no_adapter", detail=f"{what} module {module}: register(registry) raised {type(exc).__name__}: "
                       f"{exc}", source=module)]
    registry.loaded_modules.add(module)
    return []


def _adapter_reasons(p: Plan, registry: Registry, catalog: Any) -> list[Reason]:
    """Steps 3-4: load the runner's and the dispatcher's modules, check what they registered: a core for
    every dispatch format the capability file promises and the a2a backend hands over, and the dispatcher."""
    module = p.module or catalog.plugins.get(p.runner)
    if module is None:
        return [Reason(code="no_adapter", detail=f"{p.runner} has no adapter in this install (plan-only); "
                       "install a plugin that registers one under the moe_select.adapters entry-point group",
                       source=fact_file(catalog, p.runner))]
    owns = frozenset(r for r, cap in catalog.runners.items() if cap.module == module or catalog.plugins.get(r) == module)
    reasons = _load_adapter(module, f"runner {p.runner}", registry, owns | {p.runner})
    if p.a2a_module is None:
        reasons.append(Reason(code="no_adapter", detail=f"a2a {p.a2a} has no dispatcher in this install",
                              source=fact_file(catalog, p.a2a, a2a=True)))
    else:
        reasons += _load_adapter(p.a2a_module, f"a2a {p.a2a}", registry)
    if reasons:
        return reasons
    promised = sorted(set(p.registers) | set(p.dispatch_formats))
    # what this module's register(registry) registered, not what the process holds: a core registered as a side effect of
    # importing some other module passes only where something happened to import it first (break53, D7), which is the
    # late failure this check exists to catch
    made = set(registry.registered_by.get(module, []))
    missing = [f for f in promised if (p.runner, f) not in made or registry.core(p.runner, f) is None]
    if missing:
        return [Reason(code="no_adapter", detail=f"module {module} did not register a {p.runner} core for "
                       + ", ".join(f"{f} dispatch" for f in missing)
                       + f" (registered: {sorted(registry.registered_by.get(module, []))})",
                       source=fact_file(catalog, p.runner, "registers"))]
    if registry.dispatcher(p.a2a) is None:
        return [Reason(code="no_adapter", detail=f"module {p.a2a_module} did not register dispatcher {p.a2a}",
                       source=fact_file(catalog, p.a2a, a2a=True))]
    return []


def machine_here(plan: Plan, env: Environment, device: Any = None) -> Any:
    """This machine's :class:`~moe_select.measurements.MachineKey` for ``plan``'s embedded table (imports torch;
    :func:`moe_select.measurements.this_machine`): ``device``'s GPU (default: the current CUDA device, else the
    CPU), the driver, CUDA, torch and Triton versions, the versions found in ``env`` of the packages the table
    recorded, the plan's ``cuda_graph``. ``tile_configs`` is the table's: :func:`_tile_differences` compares the
    tile files once the cores exist."""
    from .measurements import this_machine

    m = plan.measurements
    assert m is not None
    packages = {name: env.package(name)[1] for name in m.machine.packages}
    return this_machine(cuda_graph=plan.cuda_graph, packages=packages, tile_configs=m.machine.tile_configs, device=device)


def _machine_differences(plan: Plan, here: Any) -> list[str]:
    """Each field of ``plan``'s table's MachineKey that differs from ``here``, with both values."""
    from .measurements import machine_key_mismatch

    m = plan.measurements
    assert m is not None
    return [f"{f} ({getattr(here, f)} here, {getattr(m.machine, f)} there)" for f in machine_key_mismatch(m, here)]


def _tile_differences(plan: Plan, registry: Registry, catalog: Any, spec: Any, dev: Any, fmt: str,
                      cores: dict[str, Any]) -> list[str]:
    """The tile files the Triton cores of the table's runners read here against the table's ``tile_configs``: tune
    recorded the digest over the cores of every runner it timed, so the cores of the timed runners this install
    builds for the plan (its ranges, and its other eligible runners, built once here and dropped) are asked."""
    m = plan.measurements
    assert m is not None
    runners = []
    eligible = {plan.runner, *plan.alternatives, *(r.runner for r in plan.ranges)}
    for name in m.runners():
        core = cores.get(name)
        if core is None and name in eligible:
            cap = catalog.runners.get(name)
            module = catalog.adapter(name, plan.quant, plan.deployment.model.activation) if cap is not None else None
            if module is not None and not _load_adapter(module, f"runner {name}", registry):
                make = registry.core(name, fmt)
                try:
                    core = make(spec, dev) if make is not None else None
                except Exception:  # a runner that cannot be built here reads no tile file (tune skipped it too)
                    core = None
        if core is not None:
            runners.append(core)
    here = _tile_digest(runners)
    return [] if here == m.machine.tile_configs else [f"tile_configs ({here} here, {m.machine.tile_configs} there)"]


def _tile_digest(cores: list[Any]) -> str | None:
    """sha256 of the tuned Triton tile files ``cores`` read, as ``tune`` records it for a table
    (:func:`moe_select.measurements.tile_configs_of_cores`)."""
    from .measurements import tile_configs_of_cores

    return tile_configs_of_cores(cores)


def _user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning issued by this function's caller name the first frame outside this
    package: the line that called ``resolve`` or ``resolve_layers`` (however many of the package's frames lie
    between). The frames of a mutation run's trampolines (mutmut 3's ``mutmut.mutation.trampoline``, which wraps
    every function of the mutated module, this one and its caller included) count as the package's: without that,
    a mutation run (benchmarks/mutation.py) would see every warning named at the package line that issued it."""
    import sys

    package = os.path.dirname(os.path.abspath(__file__)) + os.sep

    def trampoline(f: Any) -> bool:
        return f.f_globals.get("__name__") == "mutmut.mutation.trampoline"

    frame = sys._getframe(1)
    while trampoline(frame) and frame.f_back is not None:   # this function's own trampoline, if any
        frame = frame.f_back
    level = 1                                    # the warning's issuer; warnings.warn counts it as 1
    while frame.f_back is not None and (os.path.abspath(frame.f_code.co_filename).startswith(package)
                                        or trampoline(frame)):
        frame, level = frame.f_back, level + 1
    return level


def _fall_back(p: Plan, differences: list[str], catalog: Any, strict: bool) -> tuple[Plan | None, list[Reason]]:
    """A measured plan whose table was taken on another machine (``differences``): under ``strict`` the refusal;
    else the plan the rules choose over the same inputs without the table (and a :class:`MeasurementsWarning`), or
    the rules' refusal."""
    from .selector import select

    what = (f"the plan's measurements (sha256:{(p.measurements_fingerprint or '')[:12]}) were taken on another machine: "
            + "; ".join(differences))
    if strict:
        return None, [Reason(code="plan_mismatch", detail=f"{what}; strict refuses a measured plan off its machine",
                             source="plan (measurements.machine)",
                             fix="measure on this machine (moe-select tune) and plan again; or resolve without strict to fall "
                                 "back to the rules' runner")]
    report = select(p.deployment, p.environment, catalog)
    if report.plan is None:
        codes = ", ".join(sorted({r.code for r in report.reasons}))
        return None, [Reason(code="plan_mismatch", detail=f"{what}; without them the rules refuse this deployment ({codes})",
                             source="plan (measurements.machine)", fix="measure on this machine (moe-select tune) and plan again")]
    import warnings

    warnings.warn(MeasurementsWarning(f"{what}: falling back to the rules' runner {report.plan.runner} (chosen by "
                                      f"{report.plan.chosen_by.rule or report.plan.chosen_by.how})"), stacklevel=_user_stacklevel())
    return report.plan, []


def _prepare(p: Plan, catalog: Any, registry: Registry, *, environment: Environment | None, require_prebuilt: bool,
             strict: bool, group: Any, rank: int | None, ep_rank: Any, tp_rank: Any, device: Any, measured: bool = True
             ) -> tuple[Plan, Environment, list[Reason], Any, dict[str, Any]]:
    """Steps 1-4 and this rank's parts for ``p`` (after a measured plan's machine check, which may put the rules' plan
    in its place: :func:`_fall_back`): ``(the plan to build, the environment detected, the reasons, (spec, device,
    dispatcher) or None, the cores of a plan with ranges by runner)``."""
    cap = catalog.runners.get(p.runner)
    jit = [(cap.jit.package, cap.jit.detect)] if cap is not None and cap.jit is not None else []
    wanted: list[tuple[str, str | None]] = [(n.name, n.module) for n in p.packages]
    if p.measurements is not None:
        wanted += [(name, None) for name in p.measurements.machine.packages if name not in {n for n, _ in wanted}]
    env = environment or detect(wanted, arch=torch_arch(), need_nvcc=p.jit is not None, jit=jit,
                                markers=catalog.package_markers())

    def fall_back(differences: list[str]) -> tuple[Plan, Environment, list[Reason], Any, dict[str, Any]]:
        rules_plan, why = _fall_back(p, differences, catalog, strict)
        if rules_plan is None:
            return p, env, why, None, {}
        return _prepare(rules_plan, catalog, registry, environment=environment, require_prebuilt=require_prebuilt,
                        strict=strict, group=group, rank=rank, ep_rank=ep_rank, tp_rank=tp_rank, device=device, measured=False)

    if measured and p.measurements is not None:
        differences = _machine_differences(p, machine_here(p, env, device))
        if differences:
            return fall_back(differences)
    reasons = check_environment(p, env, require_prebuilt=require_prebuilt, catalog=catalog)
    for r in p.range_runners:
        if require_prebuilt and r.jit is not None and r.runner != p.runner:
            reasons.append(Reason(code="dependency_missing", detail=f"{r.runner} (a runner of the plan's token ranges) would "
                                  f"JIT-compile at its first call and require_prebuilt is set: {r.jit}",
                                  source="resolve(require_prebuilt=True)", fix="plan another runner"))
    reasons += strict_reasons(p, strict)
    from .weight_checks import format_reasons

    reasons += format_reasons(p.quant)
    if group is not None:
        from .parallel import group_reasons

        reasons += group_reasons(p, group)
    if not reasons:
        reasons = _adapter_reasons(p, registry, catalog)
        for r in p.range_runners:
            if not reasons and r.runner != p.runner:
                reasons = _adapter_reasons(range_view(p, r), registry, catalog)
    # This rank's layer, device and dispatcher are checked before the ranks agree, so that a rank whose
    # own arguments are wrong makes every rank refuse (never some ranks with a runner and some without).
    built: tuple[LayerSpec, torch.device, TokenDispatcher] | None = None
    if not reasons:
        built, reasons = _rank_parts(p, registry, group, rank, ep_rank, tp_rank, device, catalog)
    cores: dict[str, Any] = {}
    if not reasons and built is not None:  # the cores (a measured plan's, one per range runner), before the ranks agree
        spec, dev, dispatcher = built
        for name in dict.fromkeys(r.runner for r in p.ranges) if p.ranges else [p.runner]:
            make = registry.core(name, dispatcher.format)
            if make is None:
                reasons.append(Reason(code="no_adapter", detail=f"dispatcher {p.a2a} hands over the {dispatcher.format} dispatch "
                                      f"format; no {name} core is registered for it (registered: {sorted(registry.pairs())})",
                                      source=fact_file(catalog, name, "registers")))
                continue
            what = f"the {name} core" + (" (tokens up to its range)" if p.ranges else "")
            try:
                # any exception: a plugin's core may raise its own class, an assertion or an OSError loading a library; a
                # raw one here left this rank without a runner and the others with one (a trial, break53)
                core = make(spec, dev)
            except Exception as exc:
                reasons.append(Reason(code="no_adapter", detail=f"building {what} raised {type(exc).__name__}: {exc}",
                                      source=fact_file(catalog, name)))
                continue
            missing = [m for m in ("prepare_weights", "forward") if not callable(getattr(core, m, None))]
            if missing:
                reasons.append(Reason(code="no_adapter", detail=f"{what} registered for {name} built a "
                                      f"{type(core).__name__}, which has no {' or '.join(missing)} (the runner contract)",
                                      source=fact_file(catalog, name, "registers")))
                continue
            cores[name] = core
    if not reasons and measured and p.measurements is not None and built is not None:
        spec, dev, dispatcher = built
        differences = _tile_differences(p, registry, catalog, spec, dev, dispatcher.format, cores)
        if differences:
            return fall_back(differences)
    return p, env, reasons, built, cores


def _same_version(planned: str, found: str | None) -> bool:
    """Whether the version a plan was made at is the one found here: equal, or the same public version where one of
    them names no local build (PEP 440: ``2.13.0`` is ``2.13.0+cpu``; ``2.13.0+cu130`` is not ``2.13.0+cpu``)."""
    if found == planned:
        return True
    from packaging.version import InvalidVersion, Version

    try:
        a, b = Version(planned), Version(str(found))
    except InvalidVersion:
        return False
    return a.public == b.public and (a.local is None or b.local is None)


def resolve(plan: Plan | dict | str | Path, *, device: Any = None, ep_rank: int | None = None, tp_rank: int | None = None,
            group: Any = None, environment: Environment | None = None, require_prebuilt: bool = False,
            verify: bool = False, registry: Registry | None = None, timeout_s: float = 60.0, catalog: Any = None,
            strict: bool | None = None) -> MoeRunner:
    """Make ``plan`` ready on this machine; return a :class:`~moe_select.runner.MoeRunner`.

    ``device``: where the runner's tensors live (default: ``cuda`` on a GPU plan, else ``cpu``).
    ``ep_rank``/``tp_rank``: this rank (default: from ``group`` when given, else 0).
    ``group``: the torch.distributed process group of the layer's ``tp`` ranks (group rank ``r`` is
    ``ep_rank = r // (tp/ep)``, ``tp_rank = r % (tp/ep)``). Every rank must call ``resolve`` with it:
    all of steps 1-4 run on each rank, then :func:`moe_select.parallel.agree_on_plan` gathers every
    rank's plan fields and reasons (waiting at most ``timeout_s`` seconds for the others), and every
    rank refuses when any rank refused or the plans differ. A rank that cannot read its plan file still
    takes part (the others refuse naming it) and raises its :class:`InputError`.
    ``environment``: machine facts (default: detected now, arch through torch).
    ``require_prebuilt``: refuse a runner whose first call would JIT-compile.
    ``verify``: run a few tokens through the runner and the float64 reference; refuse on disagreement.
    ``strict``: refuse a plan whose evidence is ``unverified`` (reason ``unverified``, one per unknown); None
    (default): the plan's own ``strict``.
    A measured plan (token ranges from ``moe-select tune``) whose table was taken on another machine (driver, CUDA,
    torch, Triton, moe-select, tile files) is replaced by the plan the rules choose over the same inputs, with a
    :class:`MeasurementsWarning` naming each field (under ``strict``: refused, plan_mismatch). A plan written by
    another moe-select (or that does not say) emits a :class:`PlanWriterWarning`.
    Raises :class:`ResolveError` (codes plan_mismatch, dependency_missing, no_adapter, ...; ``codes`` lists them,
    ``reasons`` holds each with its source and fix) or :class:`InputError` (the plan file is invalid).
    """
    from .registry import REGISTRY

    registry = registry or REGISTRY
    if not (isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool) and 0 < timeout_s < float("inf")):
        raise InputError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}", file="<resolve>", field="timeout_s")
    for flag, value in (("verify", verify), ("require_prebuilt", require_prebuilt)):
        if not isinstance(value, bool):   # "no" or "0" would read as true (a trial, break53)
            raise InputError(f"{flag} must be True or False, got {value!r}", file="<resolve>", field=flag)
    if strict is not None and not isinstance(strict, bool):
        raise InputError(f"strict must be True, False or None (the plan's own), got {strict!r}", file="<resolve>",
                         field="strict")
    rank = None
    if group is not None:
        import torch.distributed as dist

        try:
            rank = dist.get_rank(group)
        except (ValueError, RuntimeError, TypeError, AttributeError) as exc:
            raise ResolveError([Reason(code="parallelism_unsupported", detail=f"group: {exc} (a torch.distributed process "
                                       "group this process belongs to, after init_process_group)",
                                       source="resolve(group=...)")]) from None
        if rank < 0:
            raise ResolveError([Reason(code="parallelism_unsupported", detail="this process is not a member of the group",
                                       source="resolve(group=...)")])
    try:
        p = load_plan(plan)
    except InputError as exc:
        if group is not None:
            from .parallel import agree_on_plan, unreadable_plan

            where = str(plan) if isinstance(plan, (str, Path)) else "<plan>"
            try:
                agree_on_plan(None, group, local_reasons=[unreadable_plan(exc, where)], timeout_s=timeout_s)
            except ResolveError:
                pass  # every rank now refuses; this one with its own error
        raise
    with _lock:
        try:
            catalog = catalog or plan_catalog(p)
        except InputError as exc:
            raise ResolveError([Reason(code="plan_mismatch", detail=f"the rule/capability files no longer load: {exc}",
                                       source="catalog", fix="fix the files, or plan again")], rank=rank) from None
        note = writer_note(p, catalog.files, f"plan {plan}" if isinstance(plan, (str, Path)) else "the plan")
        if note:
            import warnings

            warnings.warn(PlanWriterWarning(note), stacklevel=_user_stacklevel())
        strict_on = p.strict if strict is None else strict
        p, env, reasons, built, cores = _prepare(p, catalog, registry, environment=environment, require_prebuilt=require_prebuilt,
                                                 strict=strict_on, group=group, rank=rank, ep_rank=ep_rank, tp_rank=tp_rank,
                                                 device=device)
        if group is not None:
            from .parallel import agree_on_plan

            agree_on_plan(p, group, local_reasons=reasons, timeout_s=timeout_s, environment=env)
        if reasons:
            raise ResolveError(reasons, rank=rank)
        assert built is not None
        spec, dev, dispatcher = built

        from .runner import MoeRunner

        if p.ranges:
            runner = MoeRunner(p, spec, cores[p.runner], dispatcher, dev,
                               ranges=[(r.max_tokens, r.runner, cores[r.runner]) for r in p.ranges])
        else:
            runner = MoeRunner(p, spec, cores[p.runner], dispatcher, dev)
    if verify:
        from .verify import verify_runner

        failed: list[Reason] = []
        try:
            for single in runner.per_range():  # each range's runner against the float64 reference
                verify_runner(single)
        except ResolveError as exc:
            failed = [r for r in exc.reasons if isinstance(r, Reason)]
        if group is not None:   # a rank whose verification failed makes every rank refuse (a trial, break53)
            from .parallel import agree_on_plan

            agree_on_plan(p, group, local_reasons=failed, timeout_s=timeout_s, environment=env)
        if failed:
            raise ResolveError(failed, rank=rank)
    return runner


def resolve_layers(plan: Plan | dict | str | Path, **kwargs: Any) -> dict[str, MoeRunner]:
    """One ready runner per MoE layer kind of ``plan``: ``{"main": ..., "<kind>": ...}`` (the checkpoint's
    ``mtp`` or ``unquantized`` layers have plans of their own in ``plan.layers``). Every kind is resolved
    with the same arguments as :func:`resolve` (``device``, ``group``, ranks, ...), the main kind first;
    raises what :func:`resolve` raises, for the first kind that is refused."""
    p = load_plan(plan)
    out = {"main": resolve(p, **kwargs)}
    for sub in p.layers:
        out[sub.deployment.layer_kind] = resolve(sub, **kwargs)
    return out
