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
    "no_adapter", "plan_mismatch",
]
REASON_CODES: tuple[str, ...] = ReasonCode.__args__  # type: ignore[attr-defined]

#: Version of the plan JSON. 2: ``rule_sources`` and ``deployment.input_files`` (model-config hashes).
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

    def render(self) -> str:
        """One line: ``code: detail [source] Fix: ...``."""
        fix = f" Fix: {self.fix}." if self.fix else ""
        return f"{self.code}: {self.detail} [{self.source}]{fix}"


class Candidate(BaseModel):
    """One runner as evaluated: eligible or not, with every reason, and the rule that prefers it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    backend: str
    eligible: bool
    reasons: list[Reason] = []
    preferred_by: str | None = None
    adapter: str | None = None
    notes: list[str] = []


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

    Fields: the chosen ``runner`` and its adapter ``module`` (None: plan-only), the (a2a, runner) pairs
    the module must register, ``a2a``/``deepep_mode`` and the dispatcher module, ``arch``, ``quant``,
    ``activation_precision``, ``weight_layout`` (what ``prepare_weights`` produces), ``chosen_by``,
    eligible ``alternatives``, ``rejected`` candidates with reasons, the ``deployment`` and
    ``environment`` as understood, the ``packages`` needed, ``files`` (sha256 of every rule and
    capability file read), ``rule_sources`` (the operator rule directories and files, absolute, in
    layering order) and ``fingerprint`` (sha256 over the canonical inputs and those files).
    ``deployment.input_files`` holds the sha256 of every model-config file read.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    schema_version: Literal[2]  # required: a plan without it was not written by this moe-select
    runner: str
    module: str | None
    registers: list[str]
    a2a: str
    a2a_module: str | None
    deepep_mode: str | None
    arch: str
    gpu: str | None
    quant: str
    activation_precision: str
    weight_layout: dict[str, str] | None
    cuda_graph: bool
    chosen_by: ChosenBy
    alternatives: list[str]
    rejected: list[Candidate]
    deployment: Understood
    environment: Environment
    packages: list[PackageNeed]
    jit: str | None = None
    notes: list[str] = []
    files: dict[str, str]
    rule_sources: list[str] = []
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


