"""What the selector answers: :class:`Reason` records, :class:`Candidate` rows, the :class:`Plan` and
the :class:`Report` (which renders itself as a table, as one log line, or as JSON)."""
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

    schema_version: Literal[2] = PLAN_SCHEMA_VERSION
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


class Report(BaseModel):
    """The selector's full answer: the input as understood, every candidate with every reason, the plan
    (or None), and ``reasons`` (every reason of every rejected candidate considered)."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["ok", "rejected"]
    deployment: Understood
    environment: Environment
    plan: Plan | None
    candidates: list[Candidate]
    reasons: list[Reason]
    rule_files: list[str]
    capability_files: list[str]
    #: Bundled rule id -> "<bundled file:line> replaced by <operator file:line>" (operator overrides).
    overridden_rules: dict[str, str] = {}

    def summary(self) -> str:
        """One log line, e.g. ``moe-select: deep_gemm (rule sm90-fp8-block ...) for sm90 ...; eligible: ...``."""
        d = self.deployment.brief()
        if self.plan is not None:
            p = self.plan
            how = f"rule {p.chosen_by.rule} at {p.chosen_by.source}" if p.chosen_by.how == "rule" else "asked for explicitly"
            alts = ", ".join(p.alternatives) or "none"
            return f"moe-select: using {p.runner} ({how}) for {d}; other eligible: {alts}"
        codes = sorted({r.code for r in self.reasons})
        who = self.deployment.runner if self.deployment.runner != "auto" else "every candidate"
        return f"moe-select: refused {d}: {who} rejected ({', '.join(codes)})"

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form (see README): status, deployment (flat), plan, candidates, reasons."""
        dep = self.deployment.model_dump(mode="json")
        model = dep.pop("model")
        flat = {**dep, **model}
        return {
            "status": self.status,
            "deployment": flat,
            "environment": self.environment.model_dump(mode="json"),
            "plan": self.plan.model_dump(mode="json") if self.plan else None,
            "candidates": [c.model_dump(mode="json") for c in self.candidates],
            "reasons": [r.model_dump(mode="json") for r in self.reasons],
            "rule_files": self.rule_files,
            "capability_files": self.capability_files,
            "overridden_rules": self.overridden_rules,
        }

    def render_text(self) -> str:
        """A human report: the input as understood (with where each value came from), the plan, and a
        table of every candidate with its reasons."""
        u, out = self.deployment, []
        out.append("Deployment (as understood)")
        rows = [("arch", f"{u.arch}" + (f" ({u.gpu})" if u.gpu else ""), u.provenance.get("arch", "")),
                ("quant", u.quant, u.provenance.get("quant", ""))]
        for k, v in u.model.items():
            rows.append((k, str(v), u.provenance.get(f"model.{k}", "")))
        for k in ("tp", "ep", "a2a", "deepep_mode", "runner", "cuda_graph"):
            v = getattr(u, k)
            if v is not None:
                rows.append((k, str(v).lower() if isinstance(v, bool) else str(v), u.provenance.get(k, "")))
        w = max(len(r[0]) for r in rows)
        vw = max(len(r[1]) for r in rows)
        out += [f"  {k:<{w}}  {v:<{vw}}  {src}" for k, v, src in rows]
        out += [f"  note: {n}" for n in u.notes]
        env = self.environment
        out.append("Environment (" + ("detected on this machine" if env.detected else "declared; what is not declared is assumed present") + ")")
        pk = ", ".join(f"{k} {v or 'absent'}" for k, v in sorted(env.packages.items())) or "none declared"
        out.append(f"  packages: {pk}")
        out.append(f"  nvcc: {env.nvcc or ('not found' if env.detected else 'not declared')}; "
                   f"flashinfer prebuilt: {'unknown' if env.flashinfer_prebuilt is None else env.flashinfer_prebuilt}")
        out.append("")
        if self.plan:
            p = self.plan
            how = f"rule {p.chosen_by.rule} ({p.chosen_by.source})" if p.chosen_by.how == "rule" else f"asked for explicitly ({p.chosen_by.source})"
            out.append(f"Plan: {p.runner}  chosen by {how}")
            out.append(f"  adapter: {p.module or 'none in this install (plan-only)'}; a2a: {p.a2a}"
                       + (f" ({p.deepep_mode})" if p.deepep_mode else "") + f"; activations: {p.activation_precision}")
            if p.weight_layout:
                out.append(f"  weights: w13 {p.weight_layout['w13']}; w2 {p.weight_layout['w2']}")
            out += [f"  note: {n}" for n in p.notes]
            if p.jit:
                out.append(f"  jit: {p.jit}")
            out.append(f"  other eligible: {', '.join(p.alternatives) or 'none'}")
            out.append(f"  fingerprint: {p.fingerprint}")
        else:
            out.append("Refused: no plan. " + ("The requested runner cannot serve." if u.runner != "auto" else "No runner is eligible."))
        out.append("")
        # Reasons shared by every candidate (common facts, the a2a backend) are printed once.
        def key(r: Reason) -> tuple:
            return (r.code, r.detail, r.source)

        shared = set.intersection(*(set(map(key, c.reasons)) for c in self.candidates)) if self.candidates else set()
        if shared:
            out.append("Every runner is refused because:")
            first = self.candidates[0].reasons
            out += [f"  {r.render()}" for r in first if key(r) in shared]
            out.append("")
        out.append("Candidates (in rule order; then runners no matching rule prefers)")
        width = max(len(c.backend) for c in self.candidates) if self.candidates else 8
        for c in self.candidates:
            mark = "eligible" if c.eligible else "rejected"
            chosen = " <- chosen" if self.plan and c.backend == self.plan.runner else ""
            pref = f" (preferred by {c.preferred_by})" if c.preferred_by else ""
            own = [r for r in c.reasons if key(r) not in shared]
            more = " (and the reasons above)" if shared and not c.eligible else ""
            out.append(f"  {c.backend:<{width}}  {mark}{chosen}{pref}{more}")
            for r in own:
                out.append(f"  {'':<{width}}    {r.render()}")
        out.append("")
        if self.overridden_rules:
            out.append("Overridden bundled rules (operator rules with the same id replace them in place):")
            out += [f"  {rid}: {how}" for rid, how in self.overridden_rules.items()]
        out.append(f"Rule files: {', '.join(self.rule_files)}; capability files: {len(self.capability_files)} under backends/")
        return "\n".join(out)
