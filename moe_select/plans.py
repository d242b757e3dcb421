"""The plan and its parts: :class:`Reason` records (closed codes), :class:`Candidate` rows, how the runner
was chosen, the packages it needs, and the :class:`Plan` itself (what ``moe-select plan`` writes and
``resolve`` reads), with its fingerprint. Rendering lives in :mod:`moe_select.report`."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .deployment import Understood
from .environment import Environment
from .measurements import Measurements

ReasonCode = Literal[
    "arch_unsupported", "quant_unsupported", "activation_unsupported", "routing_unsupported",
    "a2a_unsupported", "parallelism_unsupported", "experts_not_divisible", "shape_unaligned",
    "dependency_missing", "toolchain_unsupported", "cuda_graph_unsupported", "disabled_by_rule",
    "no_adapter", "plan_mismatch", "engine_unsupported", "unverified", "not_preferred",
]
REASON_CODES: tuple[str, ...] = ReasonCode.__args__  # type: ignore[attr-defined]


def ranges_text(rows: Any) -> str:
    """``<= 1024: runner_a; above: runner_b`` (token ranges as explain and the plan's notes say them); a single range
    reads ``every forward: runner``."""
    rows = list(rows)
    return "; ".join(f"<= {r.max_tokens}: {r.runner}" if r.max_tokens is not None
                     else f"above: {r.runner}" if len(rows) > 1 else f"every forward: {r.runner}" for r in rows)


#: Version of the plan JSON. 2: rule and capability sources, model-config hashes, engines, a2a modes and
#: dispatch formats, quantization parameters, version assumptions, per-layer plans. 3: evidence levels
#: (supported / unverified) with their unknowns, per engine, and strict mode. 4: plans from measurements
#: (issue 25): ``ranges`` (one runner per token range) and ``range_runners`` (each one's module and registrations),
#: the embedded ``measurements`` table and its ``measurements_fingerprint``, and ``chosen_by.how`` ``measured``.
PLAN_SCHEMA_VERSION = 4
#: Plan versions ``resolve`` reads: 4 only adds optional fields to 3 (a version-3 plan is a plan without
#: measurements and reads the same), so a version-3 plan still loads; older ones are refused ("plan again").
READABLE_PLAN_SCHEMAS = (3, 4)

#: Evidence level of a candidate or plan: ``supported`` (a cited fact says every part runs), ``refused``
#: (a cited fact says some part does not), ``unverified`` (no fact either way for some part).
Evidence = Literal["supported", "refused", "unverified"]
#: Order of the levels, strongest first (a deployment's level is the weakest over its MoE layer kinds).
EVIDENCE_ORDER = ("supported", "unverified", "refused")


def weakest(levels: "list[str]") -> str:
    """The weakest of evidence ``levels`` (``refused`` < ``unverified`` < ``supported``); supported when empty."""
    return max(levels, key=EVIDENCE_ORDER.index, default="supported")


def strongest(levels: "list[str]") -> str:
    """The strongest of evidence ``levels``; refused when empty."""
    return min(levels, key=EVIDENCE_ORDER.index, default="refused")


class Reason(BaseModel):
    """Why a candidate cannot serve: a closed ``code``, a ``detail`` naming the values, the ``source``
    (``file:line`` of the fact or rule), and a ``fix`` where one exists."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    code: ReasonCode
    detail: str
    source: str
    fix: str | None = None
    backend: str | None = None
    #: The engines this reason holds for, when it does not hold for every engine checked (``engine: any``).
    engines: list[str] | None = None

    def render(self) -> str:
        """One line: ``code: detail [source] Fix: ...``."""
        fix = f" Fix: {self.fix}." if self.fix else ""
        only = f" ({', '.join(self.engines)} only)" if self.engines else ""
        return f"{self.code}: {self.detail}{only} [{self.source}]{fix}"


class Unknown(BaseModel):
    """What no fact covers for a candidate: the refusal ``code`` it would be, a ``detail`` naming the values,
    ``settle`` (the fact that would decide it), the ``source`` of the open list (``file:line``), and
    ``engines`` when it holds for some engines only."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    code: ReasonCode
    detail: str
    settle: str
    source: str
    backend: str | None = None
    engines: list[str] | None = None
    #: For a refusal that might apply because the deployment leaves inputs unstated: the values of those inputs at
    #: which the fact refuses (``{"vendor_library": False}``); None otherwise. ``plan --emit`` states the other value.
    refuses_at: dict[str, bool | int | float | str] | None = None

    def render(self) -> str:
        """One line: ``unverified (code): detail [source] Settled by: ...``."""
        only = f" ({', '.join(self.engines)} only)" if self.engines else ""
        return f"unverified ({self.code}): {self.detail}{only} [{self.source}] Settled by: {self.settle}."


def shared_reasons(candidates: "list[Candidate]") -> list[Reason]:
    """The reasons every one of ``candidates`` has (the same code, detail and source: a common fact, the all-to-all, an
    engine method that builds no runner), in the first candidate's order; empty for no candidates."""
    if not candidates:
        return []
    keys = set.intersection(*({(r.code, r.detail, r.source) for r in c.reasons} for c in candidates))
    return [r for r in candidates[0].reasons if (r.code, r.detail, r.source) in keys]


class Candidate(BaseModel):
    """One runner as evaluated: eligible or not, with every reason, the rule that prefers it, and its
    evidence (``evidence``: the best level over the engines checked, ``evidence_by_engine`` each engine's,
    ``unknowns``: what no fact covers on the engines it is not refused on)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    backend: str
    eligible: bool
    evidence: Evidence = "supported"
    evidence_by_engine: dict[str, Evidence] = {}
    unknowns: list[Unknown] = []
    reasons: list[Reason] = []
    preferred_by: str | None = None
    adapter: str | None = None
    notes: list[str] = []
    #: Engines the runner is eligible with (all checked engines' names; empty when rejected).
    engines: list[str] = []
    #: Facts decided by an assumed package version (a package declared present without a version, or
    #: not declared): each names the fact, its condition and the version assumed.
    assumptions: list[str] = []


class ChosenBy(BaseModel):
    """How the runner was chosen: by a rule (``rule`` id at ``source``), asked for explicitly, or ``measured``
    (by a measurement table, :mod:`moe_select.measured`: ``rule`` is the ``prefer: measured`` rule, None when
    ``--measurements`` applied before every rule; ``source`` names the rule or the table's fingerprint)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    how: Literal["rule", "explicit", "measured"]
    rule: str | None = None
    source: str


class TokenRange(BaseModel):
    """One token range of a measured plan (issue 25): forwards of at most ``max_tokens`` tokens per rank (None:
    every larger count; the last range) and above the previous range's bound run ``runner``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    max_tokens: int | None
    runner: str


class RangeRunner(BaseModel):
    """A runner of a measured plan's ranges as a plan of it alone would hold it: its adapter ``module``, the dispatch
    formats it ``registers``, its ``weight_layout``, ``activation_precision`` and ``jit`` line (what ``resolve``
    builds and checks for its ranges, and ``verify`` checks it as)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    runner: str
    module: str | None = None
    registers: list[str] = []
    weight_layout: dict[str, str] | None = None
    activation_precision: str | None = None
    jit: str | None = None


class PackageNeed(BaseModel):
    """A package the plan needs, with what the planning environment said of it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str
    module: str
    version: str | None
    state: Literal["present", "absent", "assumed"]
    found: str | None = None
    needed_by: str
    source: str
    install: str | None = None


#: Display-name prefixes of the bundled capability and rule files in a catalog's ``files`` (operator and
#: plugin files are named by their absolute paths).
BUNDLED_PREFIXES = ("backends/", "rules/")


def facts_digest(files: dict[str, str]) -> str:
    """The version of the bundled fact files: ``sha256:`` + the sha256 of one ``"<name> <sha256>\\n"`` line per
    bundled capability file (``backends/*.yaml``, ``backends/a2a/*.yaml``) and rule file (``rules/*.yaml``),
    sorted by name, taken from ``files`` (display name -> sha256 of the file's bytes, as
    :class:`~moe_select.catalog.Catalog` and :attr:`Plan.files` hold them; other entries are ignored). The files
    carry no release number of their own (their ``schema_version`` is their format's), so their contents are
    their version: any edit of any bundled file changes it."""
    lines = "".join(f"{name} {digest}\n" for name, digest in sorted(files.items()) if name.startswith(BUNDLED_PREFIXES))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


class WrittenBy(BaseModel):
    """Which moe-select wrote a plan (``moe-select --version`` prints the same three for this install):
    ``package``, the moe-select version (:data:`moe_select.__version__`, the distribution's version);
    ``facts``, the bundled fact and rule files' version (:func:`facts_digest`); ``plan_schema``, the plan
    format's :data:`PLAN_SCHEMA_VERSION`. Provenance, not an input: it is not in the fingerprint, and
    ``resolve`` warns when it differs from this install's (``PlanWriterWarning``) while it refuses
    (``plan_mismatch``) only what a fresh selection over the plan's inputs finds different."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    package: str
    facts: str
    plan_schema: int

    def brief(self) -> str:
        """``moe-select 0.1.0 (fact files sha256:0123456789ab..., plan schema 2)``."""
        return f"moe-select {self.package} (fact files {self.facts[:19]}..., plan schema {self.plan_schema})"


def writer(files: dict[str, str]) -> WrittenBy:
    """This install as a plan's writer, for a catalog whose ``files`` (display name -> sha256) were read."""
    from . import __version__

    return WrittenBy(package=__version__, facts=facts_digest(files), plan_schema=PLAN_SCHEMA_VERSION)


class Plan(BaseModel):
    """A selection, as JSON for the engine (``moe-select plan -o plan.json``) and for ``resolve``.

    Fields: the chosen ``runner`` and its adapter ``module`` (None: plan-only), the dispatch formats
    the module must register cores for (``registers``) and those the a2a backend hands over
    (``dispatch_formats``), ``a2a``/``a2a_mode``/``a2a_modes`` and the dispatcher module, ``arch``,
    ``quant`` and ``quant_params``, ``activation_precision``, ``weight_layout`` (what
    ``prepare_weights`` produces), ``engine`` (asked for) and ``engines`` (those the plan holds for),
    ``chosen_by``,
    eligible ``alternatives``, ``rejected`` candidates with reasons, the ``deployment`` and
    ``environment`` as understood, the ``packages`` needed, ``files`` (sha256 of every rule and
    capability file read), ``rule_sources``/``backend_sources`` (the operator rule and capability
    folders, absolute, in layering order), ``assumptions`` (facts decided by assumed package versions),
    ``layers`` (one entry per distinct MoE layer kind when the model has more than one),
    ``ranges``/``range_runners``/``measurements``/``measurements_fingerprint`` (a plan chosen by measurement,
    issue 25) and ``fingerprint`` (sha256 over the canonical inputs and those files, and the measured table and ranges). ``deployment.input_files`` holds
    the sha256 of every model-config file read.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    schema_version: Literal[3, 4]  # required: a plan without it was not written by this moe-select
    #: The runner; in a plan with ``ranges``, the runner of the range that holds the deployment's
    #: ``max_tokens_per_rank`` (its largest forward), so that a reader that knows no ranges runs what the plan
    #: runs at that count.
    runner: str
    #: ``supported`` or ``unverified`` (the weakest over the plan's MoE layer kinds), its ``unknowns``, each
    #: engine's level (``engine: any``), and ``strict`` (True: an unverified plan is refused).
    evidence: Literal["supported", "unverified"]
    evidence_by_engine: dict[str, Evidence] = {}
    unknowns: list[Unknown] = []
    strict: bool = False
    module: str | None
    registers: list[str]
    dispatch_formats: list[str]
    a2a: str
    a2a_module: str | None
    a2a_mode: str | None
    a2a_modes: list[str]
    arch: str
    gpu: str | None
    quant: str
    quant_params: dict[str, Any]
    activation_precision: str
    weight_layout: dict[str, str] | None
    cuda_graph: bool
    engine: str
    engines: list[str]
    chosen_by: ChosenBy
    alternatives: list[str]
    rejected: list[Candidate]
    deployment: Understood
    environment: Environment
    packages: list[PackageNeed]
    jit: str | None = None
    notes: list[str] = []
    assumptions: list[str] = []
    #: Engine -> why its quantization method wants the runner option left at auto for this plan (a ``methods`` fact
    #: of backends/common.yaml with ``option: auto``, its file:line): the engine builds the plan's runner itself and
    #: fails at load where the launch names one, so ``plan --emit`` writes no runner option for that engine.
    runner_option_auto: dict[str, str] = {}
    #: Engine -> the value its runner option takes for the plan's runner, as the runner's own capability file gives it
    #: (``engines.options``: an operator's runner in an engine build that registers it, no row of
    #: backends/engines/names.yaml); ``plan --emit`` writes it where names.yaml has none.
    runner_option_values: dict[str, str] = {}
    #: One plan per additional MoE layer kind (``mtp``, ``unquantized``), each a full plan of its own.
    layers: list["Plan"] = []
    files: dict[str, str]
    rule_sources: list[str] = []
    backend_sources: list[str] = []
    fingerprint: str
    #: The moe-select that wrote the plan (:class:`WrittenBy`); None in plans written before it was recorded.
    written_by: WrittenBy | None = None
    #: One runner per token range, ascending (issue 25; :mod:`moe_select.measured`): empty unless a measurement
    #: table chose the runner. ``resolve`` builds one core per range and ``MoeRunner.run`` picks by token count.
    ranges: list[TokenRange] = []
    #: Each distinct runner of ``ranges`` (the plan's own included), with its module and registrations.
    range_runners: list[RangeRunner] = []
    #: The measurement table that applied to this deployment (embedded whole: ``resolve`` needs no file), and
    #: its :meth:`~moe_select.measurements.Measurements.fingerprint`; None when none applied.
    measurements: Measurements | None = None
    measurements_fingerprint: str | None = None

    def to_json(self) -> str:
        """The plan as indented JSON text (what ``moe-select plan -o`` writes)."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=False) + "\n"


def range_view(p: Plan, r: RangeRunner) -> Plan:
    """``p`` as a plan of one of its range runners ``r`` (a :class:`~moe_select.plans.RangeRunner`) alone (its runner,
    module, registers, activation precision, JIT line; no ranges): what steps 2-4 check for its ranges and what
    ``verify`` checks it as."""
    return p.model_copy(update={"runner": r.runner, "module": r.module, "registers": list(r.registers), "jit": r.jit,
                                "activation_precision": r.activation_precision or p.activation_precision,
                                "weight_layout": r.weight_layout, "ranges": [], "range_runners": []})


def canonical_files(files: dict[str, str], rule_sources: list[str]) -> dict[str, str]:
    """``files`` (display name -> sha256) with operator rule files named relative to their rule source
    (``<source folder name>/<file>``, e.g. ``oprules/50-site.yaml``), so that ranks which keep the same
    rules in different folders (or mount points) agree; bundled files keep their names."""
    out: dict[str, str] = {}
    for name, digest in files.items():
        for i, src in enumerate(rule_sources):
            sp = Path(src)
            if name == src:
                out[f"[{i}]/{sp.name}"] = digest
                break
            if name.startswith(src.rstrip("/\\") + os.sep):
                out[f"[{i}]/{sp.name}/{Path(name).relative_to(sp).as_posix()}"] = digest
                break
        else:
            out[name] = digest
    return dict(sorted(out.items()))


def fingerprint(understood: Understood, environment: Environment, files: dict[str, str], runner: str,
                measured: dict[str, Any] | None = None) -> str:
    """sha256 over the canonical inputs (deployment as understood, environment facts, chosen runner)
    and the contents (hashes) of the rule and capability files. Provenance is left out: two ranks
    that read the same values from differently formatted files agree. ``measured``: the measurement table's
    fingerprint and the token ranges of a measured plan (left out when None, so a plan without measurements
    keeps the fingerprint it had before issue 25)."""
    canon: dict[str, Any] = {
        "deployment": understood.model_dump(mode="json", exclude={"provenance", "notes", "model_config_path", "input_files"}),
        "inputs": sorted(understood.input_files.values()),  # contents, not paths: ranks may mount them elsewhere
        "environment": environment.model_dump(mode="json", exclude={"provenance"}),
        "files": dict(sorted(files.items())),
        "runner": runner,
    }
    if measured is not None:
        canon["measured"] = measured
    blob = json.dumps(canon, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


