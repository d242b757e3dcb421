"""Capability files (facts): what a runner, an all-to-all backend, or every runner can do.

``backends/<runner>.yaml`` -> :class:`RunnerCapability`; ``backends/a2a/<name>.yaml`` ->
:class:`A2ACapability`; ``backends/common.yaml`` -> :class:`CommonFacts`. Every fact carries a
``source`` (library and version, code location, or "(reported)" with the report) so that an operator can
check it. Policy (which runner to prefer) never lives here: see :mod:`moe_select.rules`.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from .conditions import Constraint, When
from .located import Located
from .vocab import A2A, Activation, Arch, Quant, Routing

NAME_PATTERN = r"^[a-z][a-z0-9_]*$"


class Support(Located):
    """Formats a runner runs on some architectures. ``activation_precision`` overrides the
    format's own (e.g. mxfp4 weights with bf16 or mxfp8 activations)."""

    archs: list[Arch] = Field(min_length=1)
    formats: list[Quant] = Field(min_length=1)
    activation_precision: dict[Quant, str] = {}
    source: str = Field(min_length=1)


class ListFact(Located):
    """A list-valued fact with its source."""

    source: str = Field(min_length=1)


class ActivationFact(ListFact):
    """The gated activations the runner computes."""
    values: list[Activation] = Field(min_length=1)


class RoutingFact(ListFact):
    """``any``: the runner takes pre-computed top-k ids and weights, so routing is done outside it."""

    values: list[Routing] | Literal["any"]


class A2AFact(ListFact):
    """All-to-all backends whose dispatch output this runner accepts; DeepEP modes where it accepts DeepEP."""

    values: list[A2A] = Field(min_length=1)
    deepep_modes: list[Literal["normal", "low_latency"]] = []


class BoolFact(Located):
    """A yes/no fact with its source (e.g. CUDA-graph capture)."""
    supported: bool
    source: str = Field(min_length=1)


class ArchFact(ListFact):
    """The architectures an all-to-all backend runs on."""
    values: list[Arch] = Field(min_length=1)


class Package(Located):
    """A Python distribution the backend needs: ``name`` (distribution), ``module`` (import name),
    ``version`` (a specifier such as ``>=0.6.4,<0.7``; see :mod:`moe_select.versions`), and ``install``:
    how to install it when ``pip install NAME`` is not the way (built from source, not on PyPI)."""

    name: str = Field(min_length=1)
    module: str = Field(min_length=1)
    version: str | None = None
    when: When | None = None
    install: str | None = None
    source: str = Field(min_length=1)

    @field_validator("version")
    @classmethod
    def _spec(cls, v: str | None) -> str | None:
        from .versions import parse_specifier

        if v is not None:
            parse_specifier(v)
        return v


class Toolchain(Located):
    """A build tool the backend needs at JIT time: ``tool`` at least version ``min`` when ``when`` matches."""

    tool: Literal["nvcc"]
    min: str = Field(pattern=r"^\d+(\.\d+)*$")
    when: When | None = None
    why: str | None = None
    source: str = Field(min_length=1)


class Note(Located):
    """Text the plan carries when this backend is chosen and ``when`` matches (e.g. "slow fallback")."""

    text: str = Field(min_length=1)
    when: When | None = None
    source: str = Field(min_length=1)


class WeightLayout(Located):
    """The weight layout the runner's kernels expect, after ``prepare_weights``."""

    w13: str
    w2: str
    source: str = Field(min_length=1)


class JitFact(Located):
    """The backend JIT-compiles kernels at first use unless prebuilt. ``prebuilt_package`` is the
    distribution that ships them; ``cost`` says what a build costs (measured, with machine)."""

    package: str
    prebuilt_package: str | None = None
    cost: str
    source: str = Field(min_length=1)


class AdapterFormats(Located):
    """The formats this install's adapter module implements, when fewer than the runner runs: for the
    other formats of ``support`` the runner is plan-only here (an engine brings its own implementation)."""

    values: list[Quant] = Field(min_length=1)
    source: str = Field(min_length=1)


class RunnerCapability(Located):
    """Facts of one runner (``backends/<runner>.yaml``)."""

    schema_version: Literal[1]
    runner: str = Field(pattern=NAME_PATTERN)
    summary: str
    source: str = Field(min_length=1)
    module: str | None = None
    adapter_formats: AdapterFormats | None = None
    registers: list[A2A] = []
    weight_layout: WeightLayout | None = None
    support: list[Support] = Field(min_length=1)
    activations: ActivationFact
    routing: RoutingFact
    a2a: A2AFact
    cuda_graph: BoolFact
    constraints: list[Constraint] = []
    packages: list[Package] = []
    toolchain: list[Toolchain] = []
    jit: JitFact | None = None
    notes: list[Note] = []

    @model_validator(mode="after")
    def _registers_known(self) -> "RunnerCapability":
        if self.module is None and self.registers:
            raise ValueError("registers needs a module that registers them")
        if self.module is not None and not self.registers:
            raise ValueError("a module must register at least one (a2a, runner) pair: list the a2a names in registers")
        bad = [a for a in self.registers if a not in self.a2a.values]
        if bad:
            raise ValueError(f"registers names a2a backends the runner does not accept: {bad}")
        if self.adapter_formats is not None:
            if self.module is None:
                raise ValueError("adapter_formats needs a module")
            runs = {f for s in self.support for f in s.formats}
            extra = [f for f in self.adapter_formats.values if f not in runs]
            if extra:
                raise ValueError(f"adapter_formats names formats the runner does not run: {extra}")
        return self

    def implements(self, quant: str) -> bool:
        """True when this install's adapter module implements ``quant`` (False without a module)."""
        if self.module is None:
            return False
        return self.adapter_formats is None or quant in self.adapter_formats.values

    def formats_on(self, arch: str) -> list[str]:
        """Formats this runner runs on ``arch`` (may be empty)."""
        return [f for s in self.support if arch in s.archs for f in s.formats]

    def support_for(self, arch: str, quant: str) -> Support | None:
        """The support entry that runs ``quant`` on ``arch``, or None."""
        return next((s for s in self.support if arch in s.archs and quant in s.formats), None)

    @property
    def archs(self) -> list[str]:
        """Every architecture of the support entries, in file order."""
        seen: list[str] = []
        for s in self.support:
            seen += [a for a in s.archs if a not in seen]
        return seen


class DeepEPModeFact(Located):
    """One DeepEP mode: the dispatch output format and whether it can be captured in a CUDA graph."""

    format: Literal["standard", "batched"]
    cuda_graph: bool
    source: str = Field(min_length=1)


class A2ACapability(Located):
    """Facts of one all-to-all backend / token dispatcher (``backends/a2a/<name>.yaml``)."""

    schema_version: Literal[1]
    a2a: A2A
    summary: str
    source: str = Field(min_length=1)
    module: str | None = None
    archs: ArchFact
    output_format: Literal["standard", "batched", "by_mode"]
    modes: dict[Literal["normal", "low_latency"], DeepEPModeFact] = {}
    cuda_graph: BoolFact
    constraints: list[Constraint] = []
    packages: list[Package] = []

    @model_validator(mode="after")
    def _modes(self) -> "A2ACapability":
        if (self.output_format == "by_mode") != bool(self.modes):
            raise ValueError("output_format: by_mode needs modes, and modes need output_format: by_mode")
        return self


class CommonFacts(Located):
    """Constraints every runner obeys (``backends/common.yaml``)."""

    schema_version: Literal[1]
    source: str = Field(min_length=1)
    constraints: list[Constraint] = Field(min_length=1)
