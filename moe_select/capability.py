"""Capability files (facts): what a runner, an all-to-all backend, or every runner can do.

``backends/<runner>.yaml`` -> :class:`RunnerCapability`; ``backends/a2a/<name>.yaml`` ->
:class:`A2ACapability`; ``backends/common.yaml`` -> :class:`CommonFacts`; ``backends/packages.yaml`` ->
:class:`PackageTable` (the kernel packages the facts may name). Every fact carries a ``source`` in a
checkable form (``owner/repo@version:path[:symbol]``, ``owner/repo#N``, ``(reported) owner/repo#N``, or
``this project: ...`` for what this repository measured), and may hold only under conditions:
``when`` (deployment values, including ``engine``) and ``requires`` (package versions). Policy (which
runner to prefer) never lives here: see :mod:`moe_select.policy`.

Positive facts (support rows, activations, routing, dispatch formats, a2a restrictions) are lists: the
runner can do a thing where at least one applicable fact says so. ``cuda_graph`` is a list too, the last
applicable entry deciding. Constraints apply where their conditions hold.

Evidence (schema 3): each list kind of a file carries a decision in ``lists:`` (:data:`LIST_KINDS`). An
*exhaustive* list mirrors an upstream check that refuses everything else and cites it (file and symbol at a
commit): a value outside it is refused. An *open* list names only what was verified: a value outside it is
*unverified* (no fact either way), never refused. Support rows may be negative (``supported: false``): a cell
an upstream check refuses. A file of schema 2 (an older plugin) loads with every list open, with a warning.
"""
from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .conditions import Conditional, Constraint, When, _check_requires, describe_conditions
from .contracts import DispatchFormat
from .formats import Precision
from .located import Located
from .vocab import Activation, Arch, Engine, Quant, Routing, arch_in

NAME_PATTERN = r"^[a-z][a-z0-9_]*$"
#: Every fact's ``source``: a repository file at a version, a PR/issue, a report, or this project's own
#: code and measurements (``this project: <path>``).
SOURCE_PATTERN = (r"^(\(reported\) )?[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(@[A-Za-z0-9_.+-]+:[^\s:]+(:[A-Za-z0-9_.]+)?|#\d+)"
                  r"|^this project: ")
SCHEMA_VERSION = 3
#: Sources an exhaustive list may cite: upstream code at a commit (``owner/repo@commit:path[:symbol]``),
#: optionally followed by more sources after ``; ``. A PR/issue or this project's own text is not enough to
#: say that everything else is refused.
UPSTREAM_CODE_PATTERN = r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@[A-Za-z0-9_.+-]+:[^\s:;]+"

#: The list kinds of a runner file that need a decision (``lists:``), and what each covers:
#: ``archs`` (the union of the support rows' archs), ``formats`` (the union of their formats), ``support``
#: (the arch x format cells: a cell no positive row lists, or listed under conditions that do not hold),
#: ``activations``, ``routing`` (incl. the routing weight on the expert input), ``dispatch`` (dispatch
#: formats consumed), ``a2a`` (the all-to-all backends the runner pairs with), ``cuda_graph`` (no
#: applicable capture fact), ``engines`` (the engines that ship the runner). Constraints, packages and
#: toolchain entries are gates (each one refuses where it fails) and need no decision.
LIST_KINDS = ("archs", "formats", "support", "activations", "routing", "dispatch", "a2a", "cuda_graph", "engines")
#: The list kinds of an all-to-all file: ``archs`` (where the backend runs). ``dispatch_precision`` (the precisions it
#: sends: :class:`DispatchPrecisionFact`) needs a decision in a file that has such facts (``moe-select check``).
A2A_LIST_KINDS = ("archs",)


def _as_list(value: Any) -> Any:
    """A single fact (mapping) written without a list is a list of one."""
    return [value] if isinstance(value, dict) else value


class Fact(Conditional):
    """Base of every conditional fact: ``source`` plus ``when``/``requires``."""

    source: str = Field(min_length=1)


class Support(Fact):
    """Formats a runner runs on some architectures. ``activation_precision`` gives, per format, the
    precision of the activations when it is not the one the format fixes (e.g. mxfp4 weights with
    bf16 or mxfp8 activations)."""

    archs: list[Arch] = Field(min_length=1)
    formats: list[Quant] = Field(min_length=1)
    activation_precision: dict[Quant, Precision] = {}
    #: False: a negative row, a cell an upstream check refuses (cited by ``source``); the selector refuses it.
    supported: bool = Field(True, description=(
        "false: a negative row, a cell (archs x formats, under its when/requires) that an upstream check refuses, "
        "cited by source; the selector refuses it (with code) before any positive row is read"))
    #: The reason code a negative row refuses with: ``quant_unsupported`` (the format on this GPU), or
    #: ``arch_unsupported`` where the upstream check refuses the GPU itself (a device gate, no build for it).
    #: ``engine_unsupported`` where the engine, as its ``when`` configures it, does not build the runner at all (a
    #: switch of the engine's off, such as its vendor-library switch). ``parallelism_unsupported`` where the kernel's
    #: parallel-config check refuses what the row's ``when`` names (expert-parallel load balancing).
    code: Literal["quant_unsupported", "arch_unsupported", "engine_unsupported", "parallelism_unsupported"] = Field(
        "quant_unsupported", description=(
            "a negative row's reason code: quant_unsupported (default), arch_unsupported (the upstream check refuses "
            "the GPU: a device gate, no kernels built for it), engine_unsupported (the engine, configured as the row's "
            "when says, does not build the runner: a switch off) or parallelism_unsupported (the kernel's parallel-config "
            "check refuses what the row's when names); only with supported: false"))
    #: A negative row's reason in words (what the upstream check does), appended to the refusal's detail.
    why: str | None = Field(None, min_length=1, description="a negative row's reason in words (what the upstream "
                            "check does), shown with the refusal; only with supported: false")
    #: A negative row's fix (what the operator changes), shown as the refusal's fix.
    fix: str | None = Field(None, min_length=1, description="a negative row's fix (what the operator changes), shown "
                            "as the refusal's fix; only with supported: false")

    @model_validator(mode="after")
    def _code_only_negative(self) -> "Support":
        for key in ("code", "why", "fix"):
            if self.supported and key in self.model_fields_set:
                raise ValueError(f"{key} belongs to a negative row (the reason it refuses with): it needs supported: false")
        return self


class ActivationFact(Fact):
    """Activations the runner computes (gated: silu, gelu, swiglu_oai; non-gated: relu2). ``supported: false``: a
    negative fact, activations the runner's path computes wrongly or refuses where its ``when``/``requires`` hold (an
    engine path that drops a clamp or gpt-oss's alpha/beta/limit and runs the plain activation, cited by ``source``);
    the selector refuses them (activation_unsupported) before any positive fact is read."""

    values: list[Activation] = Field(min_length=1)
    #: False: a negative fact, activations an upstream path refuses or computes wrongly (under its when/requires),
    #: cited by ``source``; the selector refuses them (activation_unsupported) before any positive fact is read.
    supported: bool = Field(True, description=(
        "false: a negative fact, activations that the runner's path (under its when/requires) refuses or computes "
        "wrongly (e.g. an engine path that drops a clamp), cited by source; the selector refuses them "
        "(activation_unsupported)"))


class RoutingFact(Fact):
    """Routing methods the runner applies. ``any``: it takes pre-computed top-k ids and weights (the
    engine routes); ``weight_on_input``: it can apply a routing weight to the expert's input (what
    llama4 routing needs), so ``any`` covers llama4 only with it. ``supported: false``: a negative fact,
    methods refused where its ``when``/``requires`` hold (a kernel that puts llama4's weight on the output, a
    release without kernels for a method)."""

    values: list[Routing] | Literal["any"]
    weight_on_input: bool = False
    #: False: a negative fact, routing methods an upstream check or kernel refuses (under its when/requires),
    #: cited by ``source``; the selector refuses them (routing_unsupported) before any positive fact is read.
    supported: bool = Field(True, description=(
        "false: a negative fact, routing methods (a list, not any) that an upstream check or the kernel refuses "
        "under its when/requires, cited by source; the selector refuses them (routing_unsupported)"))

    @model_validator(mode="after")
    def _negative_names_values(self) -> "RoutingFact":
        if not self.supported and (self.values == "any" or self.weight_on_input):
            raise ValueError("a negative routing fact (supported: false) names routing methods, not any, and no weight_on_input")
        return self


class DispatchFact(Fact):
    """Dispatch formats the runner's kernels consume (``standard`` token-major, ``padded_standard`` token-major with padding
    rows, ``batched`` expert-major; :mod:`moe_select.contracts`)."""

    formats: list[DispatchFormat] = Field(min_length=1)


class A2AFact(Fact):
    """A restriction: where it applies, the runner is paired only with these all-to-all backends (how
    the engine integrates it), whatever their dispatch format."""

    values: list[str] = Field(min_length=1)


class BoolFact(Fact):
    """A yes/no fact with its source (e.g. CUDA-graph capture)."""

    supported: bool


class ArchFact(Fact):
    """The architectures an all-to-all backend runs on (names, families, ranges: :func:`moe_select.vocab.arch_in`)."""

    values: list[Arch] = Field(min_length=1)

    def includes(self, arch: str) -> bool:
        """True when ``values`` name base arch ``arch`` (by name, family or range)."""
        return arch_in(arch, self.values)


class PackageNeedFact(Located):
    """A package the backend needs: ``name`` (a distribution of the known-packages table, which gives its
    import name and how to install it) and a ``version`` specifier (PEP 440), where ``when`` holds and the other
    packages meet ``requires`` (a package interaction: e.g. a kernel library's releases that work with older
    releases of its DSL compiler only; distribution -> PEP 440 specifier, as a fact's ``requires``)."""

    name: str = Field(min_length=1)
    version: str | None = None
    when: When | None = None
    requires: dict[str, str] | None = None
    source: str = Field(min_length=1)

    @field_validator("version")
    @classmethod
    def _spec(cls, v: str | None) -> str | None:
        if v is not None:
            _check_requires({"version": v})
        return v

    @field_validator("requires")
    @classmethod
    def _requires(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        return _check_requires(v)


class Toolchain(Fact):
    """A toolchain the backend needs: ``tool`` at least version ``min`` where it applies. ``nvcc``: the CUDA compiler
    its JIT builds with (the deployment's ``nvcc``, or ``nvcc --version``); ``cuda``: the CUDA runtime the machine runs
    the backend's prebuilt kernels on (the deployment's ``cuda``; not detected: where it is not declared, the report
    says the minimum was assumed met)."""

    tool: Literal["nvcc", "cuda"]
    min: str = Field(pattern=r"^\d+(\.\d+)*$")
    why: str | None = None


class Note(Fact):
    """Text the plan carries when this backend is chosen and the conditions hold (e.g. "slow fallback").
    A wrong-output path is never a note: it is a constraint or a missing support cell."""

    text: str = Field(min_length=1)


class WeightLayout(Located):
    """The weight layout the runner's kernels expect, after ``prepare_weights``."""

    w13: str
    w2: str
    source: str = Field(min_length=1)


class JitFact(Located):
    """The backend compiles kernels at first use unless prebuilt. ``package``: the distribution whose JIT
    it is (the plan's and the deployment's ``prebuilt`` are keyed by it); ``detect``: a torch-free
    module with ``detect_prebuilt(arch) -> bool`` (never the adapter module); ``prebuilt_package``: the
    distribution that ships the prebuilt modules; ``cost``: what a build costs (measured, with machine)."""

    package: str
    detect: str | None = None
    prebuilt_package: str | None = None
    cost: str
    source: str = Field(min_length=1)


class AdapterFacts(Located):
    """What this install's adapter module implements, when less than the runner runs: other formats (or
    activations) are plan-only here (an engine brings its own implementation)."""

    formats: list[Quant] = Field(min_length=1)
    activations: list[Activation] | None = None
    #: The NVFP4 activation scalings (``quant_config.activation_scale``) this adapter is planned for; absent: any.
    #: An adapter that computes NVFP4 as W4A16 (16-bit activations, no activation quantized) names ``per_tensor``
    #: only: a ``per_token`` deployment states a dynamic FP4 quantization of each token row that it does not compute.
    activation_scales: list[Literal["per_tensor", "per_token"]] | None = Field(None, min_length=1, description=(
        "the NVFP4 activation scalings (quant_config.activation_scale) this adapter is planned for; absent: any. "
        "A W4A16 adapter (16-bit activations) names per_tensor only: per_token is plan-only here (no_adapter)"))
    source: str = Field(min_length=1)


class EnginesFact(Located):
    """The engines that ship this runner (by this name and package): under another engine it is refused
    (``engine_unsupported``). Absent: no engine is excluded."""

    values: list[Engine] = Field(min_length=1)
    source: str = Field(min_length=1)
    #: Engine -> the value its runner option (``--moe-runner-backend``, ``--moe-backend``) takes for this runner, for a
    #: runner no row of backends/engines/names.yaml names (an operator's runner in an engine build that registers it):
    #: under that engine the runner is not refused for want of a names row, and ``plan --emit`` writes this value.
    options: dict[Engine, str] = {}

    @field_validator("options")
    @classmethod
    def _options(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        import re

        for engine, value in v.items():
            if engine not in (info.data.get("values") or []):
                raise ValueError(f"options names {engine}, which values does not: name the engines that ship the runner")
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,63}", value):
                raise ValueError(f"{value!r} is not a runner option value")
        return v


class Exhaustive(Located):
    """An exhaustive list's decision: ``exhaustive`` cites the upstream check that refuses every value the
    list does not name (``owner/repo@commit:path:symbol``); ``engines``, when given, limits the decision to
    those engines (the list is open for the others); ``why`` says what the check does."""

    exhaustive: str = Field(min_length=1)
    engines: list[Engine] | None = None
    why: str | None = None


ListDecision = Literal["open"] | Exhaustive


def decision_of(lists: Mapping[Any, Any], kind: str, engine: str | None) -> Exhaustive | None:
    """The exhaustive decision of list ``kind`` for ``engine`` (None: the list is open there, or undecided)."""
    d = lists.get(kind)
    if isinstance(d, Exhaustive) and (d.engines is None or engine in d.engines):
        return d
    return None


class RunnerCapability(Located):
    """Facts of one runner (``backends/<runner>.yaml``). ``lists`` holds each list kind's decision
    (:data:`LIST_KINDS`): ``open`` or ``{exhaustive: <upstream source>}``; a kind left out is open (``moe-select
    check`` reports it as undecided)."""

    schema_version: Literal[2, 3]
    runner: str = Field(pattern=NAME_PATTERN)
    summary: str
    source: str = Field(min_length=1)
    module: str | None = None
    adapter: AdapterFacts | None = None
    registers: list[DispatchFormat] = []
    engines: EnginesFact | None = None
    weight_layout: WeightLayout | None = None
    support: list[Support] = Field(min_length=1)
    activations: list[ActivationFact] = Field(min_length=1)
    routing: list[RoutingFact] = Field(min_length=1)
    dispatch: list[DispatchFact] = Field(min_length=1)
    a2a: list[A2AFact] = []
    cuda_graph: list[BoolFact] = Field(min_length=1)
    constraints: list[Constraint] = []
    packages: list[PackageNeedFact] = []
    toolchain: list[Toolchain] = []
    jit: JitFact | None = None
    notes: list[Note] = []
    lists: dict[Literal["archs", "formats", "support", "activations", "routing", "dispatch", "a2a", "cuda_graph", "engines"],
                ListDecision] = Field({}, description=(
        "Evidence decision per list kind (issue 18): 'open' (the list names only what was verified: a value "
        "outside it is unverified) or {exhaustive: owner/repo@commit:path:symbol, why, engines} (the list mirrors "
        "an upstream check that refuses every other value: a value outside it is refused, citing the check; "
        "engines limits the decision to those engines). Kinds: archs, formats, support (arch x format cells), "
        "activations, routing, dispatch, a2a, cuda_graph, engines. A kind left out is open and 'moe-select "
        "check' reports it as an error; schema_version 3 only"))

    def decision(self, kind: str, engine: str | None) -> Exhaustive | None:
        """The exhaustive decision of list ``kind`` under ``engine``, or None (open)."""
        return decision_of(self.lists, kind, engine)

    @field_validator("activations", "routing", "dispatch", "a2a", "cuda_graph", mode="before")
    @classmethod
    def _lists(cls, v: Any) -> Any:
        return _as_list(v)

    @model_validator(mode="after")
    def _registers_known(self) -> "RunnerCapability":
        if self.module is None and self.registers:
            raise ValueError("registers needs a module that registers them")
        if self.module is not None and not self.registers:
            raise ValueError("a module must register a core for at least one dispatch format: list them in registers")
        if self.schema_version == 2 and self.lists:
            raise ValueError("lists (evidence decisions) needs schema_version 3")
        consumed = {f for d in self.dispatch for f in d.formats}
        bad = [f for f in self.registers if f not in consumed]
        if bad:
            raise ValueError(f"registers names dispatch formats the runner does not consume (dispatch): {bad}")
        if self.adapter is not None:
            if self.module is None:
                raise ValueError("adapter needs a module")
            extra = [f for f in self.adapter.formats if f not in {f for s in self.support for f in s.formats}]
            if extra:
                raise ValueError(f"adapter.formats names formats the runner does not run: {extra}")
        return self

    def implements(self, quant: str, activation: str | None = None) -> bool:
        """True when this install's adapter module implements ``quant`` (and ``activation``)."""
        if self.module is None:
            return False
        if self.adapter is None:
            return True
        return quant in self.adapter.formats and (activation is None or self.adapter.activations is None
                                                  or activation in self.adapter.activations)

    def formats_on(self, arch: str) -> list[str]:
        """Formats some positive support row runs on base arch ``arch`` (its ``archs`` name it, a family holding it,
        or a range: :func:`moe_select.vocab.arch_in`; any conditions; may be empty). A negative row
        (``supported: false``) runs nothing."""
        return [f for s in self.support if s.supported and arch_in(arch, s.archs) for f in s.formats]

    def has_arch(self, arch: str) -> bool:
        """True when some positive support row names base arch ``arch`` (by name, family or range; any conditions)."""
        return any(s.supported and arch_in(arch, s.archs) for s in self.support)

    @property
    def archs(self) -> list[str]:
        """Every arch specifier of the support rows (names, families, ranges), in file order: for display;
        :meth:`has_arch` tells whether they hold an arch."""
        seen: list[str] = []
        for s in self.support:
            seen += [a for a in s.archs if a not in seen]
        return seen

    @property
    def engine_sensitive(self) -> bool:
        """True when some fact holds for some engines only (the selector then checks engine by engine)."""
        facts = [*self.support, *self.activations, *self.routing, *self.dispatch, *self.a2a, *self.cuda_graph,
                 *self.constraints, *self.toolchain, *self.notes]
        return self.engines is not None or any(f.when is not None and f.when.engine is not None for f in facts)


class Unavailable(Located):
    """The engines that do not ship this backend (an engine that removed an all-to-all): where the
    deployment's engine is one of them, the backend is refused (``a2a_unsupported``) with ``why``. With ``requires``
    (distribution -> PEP 440 specifier) the engine ships it but it fails there with those package versions only (a
    package interaction: the backend's package under that engine); a version not declared is taken at the
    packages table's ``checked_up_to``, as for any version-bounded fact. ``when`` narrows such an entry to the
    deployments it matches (the topology a failure was reported at)."""

    engines: list[Engine] = Field(min_length=1)
    when: When | None = None
    requires: dict[str, str] | None = None
    why: str = Field(min_length=1)
    source: str = Field(min_length=1)

    @field_validator("requires")
    @classmethod
    def _requires(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        return _check_requires(v)

    @model_validator(mode="after")
    def _when_needs_requires(self) -> "Unavailable":
        if self.when is not None and not self.requires:
            raise ValueError("when narrows a version-bounded entry only: give requires too (an engine that does not ship "
                             "the backend does not ship it anywhere)")
        return self

    def describe_conditions(self) -> str:
        """``when ...; requires ...`` text, as a :class:`Conditional`'s (the unknown of an unstated input names it)."""
        return describe_conditions(self.when, self.requires)


class ModeEngineFact(Located):
    """How one engine's integration of an all-to-all mode differs from the mode's own facts: the dispatch ``format`` it
    hands over there."""

    format: DispatchFormat
    source: str = Field(min_length=1)


class ModeFact(Located):
    """One mode of an all-to-all backend: the dispatch format it hands over and whether it can be
    captured in a CUDA graph. ``engines``: the engines whose integration hands over another format in this mode
    (one engine's integration of an all-to-all may give its experts token-major rows where another's
    decode layout is expert-major: backends/a2a/*.yaml)."""

    format: DispatchFormat
    cuda_graph: bool
    source: str = Field(min_length=1)
    engines: dict[Engine, ModeEngineFact] = {}

    def format_for(self, engine: str | None) -> str:
        """The dispatch format this mode hands over under ``engine`` (None or an engine with no entry: ``format``)."""
        fact = next((f for e, f in self.engines.items() if e == engine), None)
        return fact.format if fact is not None else self.format


class CapacityFact(Conditional):
    """The per-rank token capacity of an all-to-all's buffer under an engine (issue 23): the engine's environment
    ``variable`` that sizes it, its ``default`` when unset, the most the engine accepts (``max``: the engine asserts
    the variable is at most it; None: no bound), and which forwards pass through it: those in ``modes`` (None: every
    mode) of the phases in ``phases`` (None: both). ``checked``: when the engine itself finds a need above it
    (``startup``: a check while reading its arguments; ``capture``: at CUDA-graph capture, after the weights loaded;
    ``runtime``: at the first forward that exceeds it). ``when`` scopes it (``engine``), ``requires`` dates it (the
    engine's package version). The deployment's ``a2a_capacity`` is the variable's value; the check itself is a
    constraint of the file (``a2a_tokens_per_rank`` at most ``a2a_capacity``: :mod:`moe_select.capacity`)."""

    variable: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    default: int = Field(ge=1)
    #: What the default means when it is not one number (e.g. "max(chunked_prefill_size, 4096)").
    default_note: str | None = None
    #: Unset, the engine sizes the buffer to at least this phase's need (``prefill``: max(default, the prefill chunk per
    #: rank), where the deployment gives that chunk); None: the default alone.
    default_covers: Literal["prefill"] | None = None
    #: The engine scatters a DP group's prefill chunk over its tp / dp ranks before the dispatch: the prefill need is
    #: ceil(the chunk per rank / (tp / dp)) (dp: the attention-DP groups; none: the whole TP group).
    prefill_scatter: bool = False
    max: int | None = Field(default=None, ge=1)
    modes: list[Literal["normal", "low_latency"]] | None = None
    phases: list[Literal["prefill", "decode"]] | None = None
    checked: Literal["startup", "capture", "runtime"]
    why: str | None = None
    source: str = Field(min_length=1)


#: The precisions an all-to-all may send a MoE layer's activations in (the deployment's ``dispatch_precision``):
#: the activation precisions of :mod:`moe_select.formats` (``mxfp4``: e2m1 with an e8m0 scale per 32).
DispatchPrecision = Precision


class DispatchPrecisionFact(Fact):
    """What an all-to-all sends a MoE layer's activations in (issue 21: the deployment's ``dispatch_precision``, per MoE
    layer kind), where ``when``/``requires`` hold and, with ``runners``, only when the layer's runner is one of them (an
    engine check that names the experts' runner). Positive facts list what it can send there; ``supported: false`` is a
    negative fact: precisions an upstream check refuses there (a raise, an assert), cited by ``source``; the selector
    refuses them (``a2a_unsupported``) before any positive fact is read. A precision no applicable positive fact names is
    refused where the file's ``dispatch_precision`` list is exhaustive for the engine, else unverified. ``dispatch_precision:
    auto`` (the engine chooses from the layer's weights) is never checked against these facts."""

    values: list[DispatchPrecision] = Field(min_length=1)
    supported: bool = Field(True, description=(
        "false: a negative fact, precisions an upstream check refuses where when/requires (and runners) hold, cited by "
        "source; the selector refuses them (a2a_unsupported)"))
    runners: list[str] | None = Field(None, min_length=1, description=(
        "the fact holds only when the MoE layer's runner is one of these (an engine check naming the experts' runner)"))
    why: str | None = None

    @field_validator("runners")
    @classmethod
    def _runner_names(cls, v: list[str] | None) -> list[str] | None:
        import re

        for name in v or []:
            if not re.match(NAME_PATTERN, name):
                raise ValueError(f"{name!r} is not a runner name (lower case, digits, _)")
        return v

    def holds_for(self, runner: str) -> bool:
        """True when ``runners`` is absent or names ``runner``."""
        return self.runners is None or runner in self.runners


class A2ACapability(Located):
    """Facts of one all-to-all backend / token dispatcher (``backends/a2a/<name>.yaml``).

    A backend has one dispatch ``format`` and a ``cuda_graph`` fact, or ``modes`` (``normal`` and/or
    ``low_latency``, each with its own format and capture fact) and ``auto``: the mode ``a2a_mode: auto``
    uses in each phase (default: normal for prefill, low_latency for decode, as SGLang's auto mode)."""

    schema_version: Literal[2, 3]
    a2a: str = Field(pattern=NAME_PATTERN)
    summary: str
    source: str = Field(min_length=1)
    module: str | None = None
    archs: ArchFact
    format: DispatchFormat | None = None
    cuda_graph: BoolFact | None = None
    modes: dict[Literal["normal", "low_latency"], ModeFact] = {}
    auto: dict[Literal["prefill", "decode"], Literal["normal", "low_latency"]] | None = None
    unavailable: list[Unavailable] = []
    constraints: list[Constraint] = []
    packages: list[PackageNeedFact] = []
    #: Per-rank token capacities of its buffers, per engine (issue 23: :class:`CapacityFact`).
    capacity: list[CapacityFact] = []
    #: What it sends each MoE layer's activations in (issue 21: :class:`DispatchPrecisionFact`), per engine.
    dispatch_precision: list[DispatchPrecisionFact] = []
    lists: dict[Literal["archs", "dispatch_precision"], ListDecision] = Field({}, description=(
        "Evidence decisions (issue 18) of the archs list and the dispatch_precision list: 'open' (a GPU / a dispatch "
        "precision outside it is unverified) or {exhaustive: owner/repo@commit:path:symbol, why, engines} (an upstream "
        "check refuses every other value; engines limits the decision to those engines); schema_version 3 only"))

    @field_validator("dispatch_precision", mode="before")
    @classmethod
    def _dispatch_list(cls, v: Any) -> Any:
        return _as_list(v)

    def decision(self, kind: str, engine: str | None) -> Exhaustive | None:
        """The exhaustive decision of list ``kind`` under ``engine``, or None (open)."""
        return decision_of(self.lists, kind, engine)

    @model_validator(mode="after")
    def _modes(self) -> "A2ACapability":
        if bool(self.modes) == (self.format is not None):
            raise ValueError("give format (one dispatch format) or modes (normal / low_latency), not both")
        if self.format is not None and self.cuda_graph is None:
            raise ValueError("a backend without modes needs a cuda_graph fact")
        if self.auto is not None:
            bad = [m for m in self.auto.values() if m not in self.modes]
            if bad:
                raise ValueError(f"auto names modes this backend does not have: {bad}")
        return self

    def modes_used(self, a2a_mode: str | None, phases: tuple[str, ...]) -> tuple[str, ...]:
        """The modes a deployment with ``a2a_mode`` (None/auto/normal/low_latency) runs in ``phases``;
        () for a backend without modes."""
        if not self.modes:
            return ()
        if a2a_mode in (None, "auto"):
            auto: dict[str, str] = {str(k): str(v) for k, v in (self.auto or {}).items()}
            if not auto:
                auto = {p: m for p, m in (("prefill", "normal"), ("decode", "low_latency")) if m in self.modes}
            first: str = next(iter(self.modes))
            return tuple(dict.fromkeys(auto.get(p, first) for p in phases))
        return (a2a_mode,) if a2a_mode is not None else ()

    def mode(self, name: str) -> ModeFact:
        """The fact of mode ``name`` (KeyError when the backend has no such mode)."""
        return {str(k): v for k, v in self.modes.items()}[name]

    def graph_modes(self, a2a_mode: str | None, phases: tuple[str, ...]) -> tuple[str, ...]:
        """The modes CUDA graphs would capture: those used in the decode phase (engines capture decode
        forwards only: SGLang's CUDA graphs are decode batches), () when the deployment does not decode."""
        return self.modes_used(a2a_mode, ("decode",)) if "decode" in phases else ()

    @property
    def engine_sensitive(self) -> bool:
        """True when a mode hands over another dispatch format under some engine, or a dispatch precision fact holds for
        some engines only (the selector then checks engine by engine)."""
        return any(m.engines for m in self.modes.values()) or any(
            f.when is not None and f.when.engine is not None for f in self.dispatch_precision)

    def formats_used(self, modes: tuple[str, ...], engine: str | None = None) -> tuple[str, ...]:
        """The dispatch formats handed over in ``modes`` (the single format when there are no modes) under ``engine``
        (None: under every engine, the union of each mode's format and its engines' formats)."""
        if not self.modes:
            return (self.format,) if self.format else ()
        by_mode: dict[str, ModeFact] = {str(k): v for k, v in self.modes.items()}
        out: list[str] = []
        for m in modes:
            if m not in by_mode:
                continue
            fact = by_mode[m]
            out += [fact.format_for(engine)] if engine is not None else [fact.format, *(e.format for e in fact.engines.values())]
        return tuple(dict.fromkeys(out))


class MethodRunners(Conditional):
    """An engine's quantization method that builds only some runners (``backends/common.yaml`` ``methods``): where
    ``when`` (with an ``engine``) and ``requires`` hold, the engine loads the checkpoint through one MoE method, and
    that method constructs ``runners`` only (our names, backends/engines/names.yaml); every other runner is refused
    there with ``code`` and ``why`` (the method, by its upstream name). A fact of the engine's loader, not of any one
    runner, so it lives beside the constraints every runner obeys. Empty ``runners``: the method cannot load the
    layer with any runner (an engine that builds an MTP draft's bf16 experts with the main layers' FP4 method: field
    round 37). First stated for field round 36: one engine's MXFP4 method for compressed-tensors checkpoints, which
    builds two runners of the many its native MXFP4 method builds. A ``when``
    on an input the deployment leaves unstated (``checkpoint_layout``) refuses nothing: the plan says what it
    assumed (the selector's ``_method_reasons``)."""

    runners: list[str]
    #: ``parallelism_unsupported`` where the method refuses a parallel feature (expert-parallel load balancing), not
    #: the format; ``engine_unsupported`` where the engine's model code cannot load the layer at those releases whatever
    #: the format's method (a model block that drops a module its loader still maps: field round 45);
    #: ``activation_unsupported`` where the method builds the other runners but never hands them the model's activation
    #: parameters (a clamp the format's oracle does not pass: field round 50), so they compute another activation
    code: Literal["quant_unsupported", "parallelism_unsupported", "engine_unsupported", "activation_unsupported"] = "quant_unsupported"
    why: str = Field(min_length=1)
    source: str = Field(min_length=1)
    #: What to change where ``runners`` is empty (the method loads the layer with no runner: e.g. a release that fixes it)
    fix: str | None = None
    #: ``auto``: the method asserts the engine's runner option is left at its default and builds its runner itself
    #: (SGLang's AWQ MoE scheme): a launch that names a runner fails at load, so a plan of one of ``runners`` is written
    #: with no runner option (the plan's ``runner_option_auto``); ``named`` (default): the option may name the runner.
    option: Literal["named", "auto"] = "named"
    #: Runners of ``runners`` the method builds only with the runner option left at auto (the engine's auto choice
    #: reaches them; its option has no value for them here: backends/common.yaml says which):
    #: a plan of one is written as ``option: auto`` writes every runner of the row. Empty: as ``option`` says.
    auto_only: list[str] = Field(default_factory=list)

    def auto_for(self, runner: str) -> bool:
        """True when a plan of ``runner`` under this method must leave the engine's runner option at auto."""
        return runner in self.runners and (self.option == "auto" or runner in self.auto_only)

    @model_validator(mode="after")
    def _engine_scoped(self) -> "MethodRunners":
        if self.when is None or self.when.engine is None:
            raise ValueError("a method fact names the engine whose loader it describes (when.engine)")
        if set(self.auto_only) - set(self.runners):
            raise ValueError(f"auto_only names runners the method does not build: {sorted(set(self.auto_only) - set(self.runners))}")
        if self.when.unsatisfiable():
            raise ValueError(f"when can never match: {self.when.unsatisfiable()}")
        return self


class CommonFacts(Located):
    """Constraints every runner obeys, and the engines' quantization methods that build only some runners
    (``backends/common.yaml``)."""

    schema_version: Literal[2, 3]
    source: str = Field(min_length=1)
    #: (an operator folder's common.yaml may hold methods only: added to the bundled file's)
    constraints: list[Constraint] = Field(default_factory=list)
    methods: list[MethodRunners] = Field(default_factory=list)


class PackageMarkers(Located):
    """What tells a package's real distribution from a look-alike, read from installed metadata without importing it
    (issue 21): ``importlib.metadata`` normalises names (``a-b`` is ``a_b``), so an unrelated distribution whose name
    normalises to the row's, or one that installs a module of the same name, would pass for it.

    A distribution found for the row (by its ``name``, by one of ``distributions``, or as the owner of its
    ``module``) is the real package when its RECORD lists a path matching one of ``files`` (shell patterns relative
    to the install folder, ``*`` crossing ``/``), or its METADATA's Home-page, Download-URL, Project-URL, Author,
    Author-email, Maintainer or Maintainer-email contains one of ``metadata`` (case folded). An install whose RECORD
    lists no file of the module (an editable install) and a module found without any distribution are judged by the
    files next to the module (``files`` matched in the folder that holds it). Anything else is a look-alike: the
    package is absent for the facts, and the report names the distribution found and why it is not the package.
    ``distributions``: other names the real package was published under (its version is then read from it).
    ``lookalikes``: what the known look-alikes are, for the report."""

    files: list[str] = []
    metadata: list[str] = []
    distributions: list[str] = []
    lookalikes: str | None = None
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _some_marker(self) -> "PackageMarkers":
        if not self.files and not self.metadata:
            raise ValueError("markers need files (paths the real RECORD lists) or metadata (text its METADATA names)")
        for pattern in self.files:
            if pattern.startswith("/") or ".." in pattern.split("/") or "\\" in pattern:
                raise ValueError(f"markers.files: {pattern!r} is not a relative path pattern inside the install folder")
        return self


class KnownPackage(Located):
    """A kernel package the facts may name: ``name`` (PyPI distribution, exact), ``module`` (import name),
    ``pypi`` (False: not installable from PyPI under this name, see ``install``), ``install`` (how to get
    it when ``pip install <name>`` is not the way), ``shipped`` (how the engines obtain it), and
    ``checked_up_to``: the newest version the facts were read against (a newer installed version is
    reported; an undeclared version is assumed to be this one). ``engine``: this distribution is that serving
    engine itself (``vllm``, ``sglang``, ``tensorrt-llm``): its version is the deployment's ``engine_version``, and
    ``checked_up_to`` is the newest engine release the facts scoped to that engine were read at (issue 20).
    ``markers``: how detection tells the real distribution from a look-alike (:class:`PackageMarkers`)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    module: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")
    pypi: bool = True
    install: str | None = None
    shipped: str
    checked_up_to: str | None = None
    engine: Engine | None = Field(None, description=(
        "The serving engine this distribution is (its version is the deployment's engine_version; checked_up_to is the "
        "newest engine release the facts scoped to that engine were read at: a newer one leaves them unverified)"))
    markers: PackageMarkers | None = None
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _install(self) -> "KnownPackage":
        if not self.pypi and not self.install:
            raise ValueError(f"{self.name} is not on PyPI under this name: say how to install it (install)")
        return self


class PackageTable(Located):
    """``backends/packages.yaml``: every kernel package a capability file may name."""

    schema_version: Literal[2, 3]
    packages: list[KnownPackage] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_per_engine(self) -> "PackageTable":
        seen: dict[str, str] = {}
        for p in self.packages:
            if p.engine is not None:
                if p.engine in seen:
                    raise ValueError(f"engine {p.engine} is both {seen[p.engine]} and {p.name}: one package row per engine")
                if p.checked_up_to is None:
                    raise ValueError(f"{p.name} is engine {p.engine}: give checked_up_to (the newest release its facts were read at)")
                seen[p.engine] = p.name
        return self

    def engine_package(self, engine: str) -> KnownPackage | None:
        """The row of the distribution that is serving engine ``engine`` (None: no row says so)."""
        return next((p for p in self.packages if p.engine == engine), None)
