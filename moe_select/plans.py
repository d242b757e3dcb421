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

ReasonCode = Literal[
    "arch_unsupported", "quant_unsupported", "activation_unsupported", "routing_unsupported",
    "a2a_unsupported", "parallelism_unsupported", "experts_not_divisible", "shape_unaligned",
    "dependency_missing", "toolchain_unsupported", "cuda_graph_unsupported", "disabled_by_rule",
    "no_adapter", "plan_mismatch", "engine_unsupported",
]
REASON_CODES: tuple[str, ...] = ReasonCode.__args__  # type: ignore[attr-defined]

#: Version of the plan JSON. 2: rule and capability sources, model-config hashes, engines, a2a modes and
#: dispatch formats, quantization parameters, version assumptions, per-layer plans.
PLAN_SCHEMA_VERSION = 2


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


class Candidate(BaseModel):
    """One runner as evaluated: eligible or not, with every reason, and the rule that prefers it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    backend: str
    eligible: bool
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
    """How the runner was chosen: by a rule (``rule`` id at ``source``), or asked for explicitly."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    how: Literal["rule", "explicit"]
    rule: str | None = None
    source: str


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
    ``layers`` (one entry per distinct MoE layer kind when the model has more than one) and
    ``fingerprint`` (sha256 over the canonical inputs and those files). ``deployment.input_files`` holds
    the sha256 of every model-config file read.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    schema_version: Literal[2]  # required: a plan without it was not written by this moe-select
    runner: str
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
    #: One plan per additional MoE layer kind (``mtp``, ``unquantized``), each a full plan of its own.
    layers: list["Plan"] = []
    files: dict[str, str]
    rule_sources: list[str] = []
    backend_sources: list[str] = []
    fingerprint: str

    def to_json(self) -> str:
        """The plan as indented JSON text (what ``moe-select plan -o`` writes)."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=False) + "\n"


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


def fingerprint(understood: Understood, environment: Environment, files: dict[str, str], runner: str) -> str:
    """sha256 over the canonical inputs (deployment as understood, environment facts, chosen runner)
    and the contents (hashes) of the rule and capability files. Provenance is left out: two ranks
    that read the same values from differently formatted files agree."""
    canon = {
        "deployment": understood.model_dump(mode="json", exclude={"provenance", "notes", "model_config_path", "input_files"}),
        "inputs": sorted(understood.input_files.values()),  # contents, not paths: ranks may mount them elsewhere
        "environment": environment.model_dump(mode="json", exclude={"provenance"}),
        "files": dict(sorted(files.items())),
        "runner": runner,
    }
    blob = json.dumps(canon, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


