"""The selector's full answer, :class:`Report`: the input as understood, every candidate with every
reason, and the plan; it renders itself as a table, as one log line, or as JSON."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .deployment import Understood
from .environment import Environment
from .plans import Candidate, Plan, Reason, ranges_text, shared_reasons


class Report(BaseModel):
    """The selector's full answer: the input as understood, every candidate with every reason, the plan
    (or None), and ``reasons`` (every reason of every rejected candidate considered)."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["ok", "rejected"]
    #: The plan's evidence (``supported`` / ``unverified``), ``refused`` without a plan.
    evidence: Literal["supported", "unverified", "refused"] = "refused"
    deployment: Understood
    environment: Environment
    plan: Plan | None
    candidates: list[Candidate]
    reasons: list[Reason]
    rule_files: list[str]
    capability_files: list[str]
    #: Bundled rule id -> "<bundled file:line> replaced by <operator file:line>" (operator overrides).
    overridden_rules: dict[str, str] = {}
    #: Display name -> origin of every capability or rule file that is not bundled (plugin, operator folder).
    origins: dict[str, str] = {}
    #: Installed or declared package versions newer than the facts were checked against.
    version_notes: list[str] = []
    #: Reports of the additional MoE layer kinds (the checkpoint's ``mtp`` or ``unquantized`` layers).
    layers: list["Report"] = []
    #: What each serving engine would itself pick (:class:`moe_select.engine_choice.EngineChoice`, issue 23).
    engine_choices: list[Any] = []
    #: What measurement tables did (:class:`moe_select.measured.MeasuredReport`, issue 25); None when none were
    #: given and no ``prefer: measured`` rule matched.
    measured: Any = None

    def summary(self) -> str:
        """One log line, e.g. ``moe-select: using triton (rule hopper-fp8-block ...) for sm90 ...; other eligible: ...``."""
        d = self.deployment.brief()
        if self.plan is not None:
            p = self.plan
            how = _how(p.chosen_by, " at ")
            if len(p.ranges) > 1:
                how += "; by token range: " + ", ".join(f"<= {r.max_tokens} {r.runner}" if r.max_tokens is not None
                                                        else f"above {r.runner}" for r in p.ranges)
            alts = ", ".join(p.alternatives) or "none"
            ev = "" if p.evidence == "supported" else f" [{p.evidence}: {len(p.unknowns)} unknown(s)]"
            return f"moe-select: using {p.runner} ({how}){ev} for {d}; other eligible: {alts}"
        kinds = self.refused_layer_kinds()
        if kinds:
            codes = _by_reach([r for sub in self.layers if sub.deployment.layer_kind in kinds for r in sub.reasons])
            return f"moe-select: refused {d}: no runner for the {', '.join(kinds)} layers ({', '.join(codes)})"
        codes = _by_reach(self.reasons)
        who = self.deployment.runner if self.deployment.runner != "auto" else "every candidate"
        return f"moe-select: refused {d}: {who} rejected ({', '.join(codes)})"

    def refused_layer_kinds(self) -> list[str]:
        """The layer kinds (``mtp``, ...) no runner serves, when the main layers have an eligible runner (the one the
        deployment asks for, where it asks one: a trial, break54, saw the headline blame the mtp layers while the asked
        runner was refused for the main layers): the refusal is theirs, not the main layers' (empty otherwise)."""
        asked = self.deployment.runner
        if self.plan is not None or not any(c.eligible and (asked == "auto" or c.backend == asked) for c in self.candidates):
            return []
        return [str(sub.deployment.layer_kind) for sub in self.layers if sub.plan is None]

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form (see README): status, deployment (flat), plan, candidates, reasons."""
        dep = self.deployment.model_dump(mode="json")
        model = dep.pop("model")
        flat = {**dep, **model, "deepep_mode": dep.get("a2a_mode")}  # deepep_mode: SGLang's name, kept for readers of v1
        return {
            "status": self.status,
            "evidence": self.evidence,
            "deployment": flat,
            "environment": self.environment.model_dump(mode="json"),
            "plan": self.plan.model_dump(mode="json") if self.plan else None,
            "candidates": [c.model_dump(mode="json") for c in self.candidates],
            "reasons": [r.model_dump(mode="json") for r in self.reasons],
            "rule_files": self.rule_files,
            "capability_files": self.capability_files,
            "overridden_rules": self.overridden_rules,
            "origins": self.origins,
            "version_notes": self.version_notes,
            "engine_choices": [c.to_dict() for c in self.engine_choices],
            "measured": self.measured.model_dump(mode="json") if self.measured is not None else None,
            "layers": [{"kind": k.deployment.layer_kind, "layers": k.deployment.layers, **k.to_dict()} for k in self.layers],
        }

    def render_text(self) -> str:
        """A human report: the input as understood (with where each value came from), the plan, and a
        table of every candidate with its reasons."""
        u, out = self.deployment, []
        out.append("Deployment (as understood)")
        rows = [("arch", f"{u.arch}" + (f" ({u.gpu})" if u.gpu else ""), u.provenance.get("arch", "")),
                ("quant", u.quant, u.provenance.get("quant", ""))]
        if u.quant_params:
            rows.append(("quant_params", ", ".join(f"{k} {v}" for k, v in u.quant_params.items()), u.provenance.get("quant_params", "")))
        for k, v in u.model.as_dict().items():
            rows.append((k, str(v), u.provenance.get(f"model.{k}", "")))
        for k in ("engine", "phase", "max_tokens_per_rank", "decode_tokens_per_rank", "tp", "ep", "dp", "shared_expert_fusion",
                  "a2a", "a2a_mode", "a2a_capacity", "runner", "cuda_graph"):
            v = getattr(u, k)
            if v is not None and not (k in ("dp",) and v == 1 and k not in u.provenance) and not (k == "shared_expert_fusion" and not v):
                text = str(v).lower() if isinstance(v, bool) else str(v)
                if k == "a2a_mode" and u.a2a_modes:
                    text += f" (uses {', '.join(u.a2a_modes)})"
                rows.append((k, text, u.provenance.get(k, "")))
                if k == "a2a" and (u.dispatch_precision != "auto" or any(x.get("dispatch_precision", "auto") != "auto"
                                                                        for x in u.layer_kinds)):
                    rows.append(("dispatch_precision", ", ".join([f"main {u.dispatch_precision}"] + [
                        f"{x['kind']} {x.get('dispatch_precision', 'auto')}" for x in u.layer_kinds]),
                        u.provenance.get("dispatch_precision", "")))
        w = max(len(r[0]) for r in rows)
        vw = max(len(r[1]) for r in rows)
        out += [f"  {k:<{w}}  {v:<{vw}}  {src}" for k, v, src in rows]
        out += [f"  note: {n}" for n in u.notes]
        env = self.environment
        out.append("Environment (" + ("detected on this machine" if env.detected else "declared; what is not declared is assumed present") + ")")
        fakes = env.lookalikes()
        pk = ", ".join(f"{k} {v or ('absent (a look-alike was found)' if k in fakes else 'absent')}"
                       for k, v in sorted(env.packages.items())) or "none declared"
        out.append(f"  packages: {pk}")
        out += [f"  note: {k} is absent: {why}" for k, why in fakes.items()]
        pre = ", ".join(f"{k} {'unknown' if v is None else v}" for k, v in sorted(env.prebuilt.items()))
        out.append(f"  nvcc: {env.nvcc or ('not found' if env.detected else 'not declared')}; "
                   f"CUDA runtime (cuda): {env.cuda or ('not detected' if env.detected else 'not declared')}; "
                   f"prebuilt JIT kernels: {pre or ('none detected' if env.detected else 'not declared')}")
        out += [f"  note: {n}" for n in self.version_notes]
        out.append("")
        if self.plan:
            p = self.plan
            how = _how(p.chosen_by, " ")
            out.append(f"Plan: {p.runner}  chosen by {how}")
            if p.ranges:
                out.append("  token ranges: " + ranges_text(p.ranges)
                           + (f" (measurements sha256:{p.measurements_fingerprint[:12]}...)" if p.measurements_fingerprint
                              else f" (rule {p.chosen_by.rule}: small_forwards)"))
            by = ", ".join(f"{e} {lv}" for e, lv in p.evidence_by_engine.items())
            out.append(f"  evidence: {p.evidence}" + (f" ({by})" if by else "") + (" (strict)" if p.strict else ""))
            out += [f"  {x.render()}" for x in p.unknowns]
            out.append(f"  adapter: {p.module or 'none in this install (plan-only)'}; a2a: {p.a2a}"
                       + (f" ({p.a2a_mode}: {', '.join(p.a2a_modes)})" if p.a2a_mode else "")
                       + f"; dispatch: {', '.join(p.dispatch_formats) or 'n/a'}"
                + (f" in {u.dispatch_precision}" if u.dispatch_precision != "auto" else "")
                + f"; activations: {p.activation_precision}")
            out.append(f"  engines: {', '.join(p.engines)}" + (" (engine: any)" if p.engine == "any" else ""))
            if p.weight_layout:
                out.append(f"  weights: w13 {p.weight_layout['w13']}; w2 {p.weight_layout['w2']}")
            out += [f"  note: {n}" for n in p.notes if n not in u.notes]  # the deployment's notes are printed above
            if p.jit:
                out.append(f"  jit: {p.jit}")
            out += [f"  assumed: {a}" for a in p.assumptions]
            in_ranges = [r.runner for r in p.range_runners if r.runner != p.runner] if p.ranges else []
            out.append(f"  other eligible: {', '.join(p.alternatives) or 'none'}"
                       + (f" (besides {', '.join(in_ranges)}, which the token ranges run)" if in_ranges else ""))
            out.append(f"  fingerprint: {p.fingerprint}")
        else:
            kinds = self.refused_layer_kinds()
            if kinds:
                out.append(f"Refused: no plan. The main layers have an eligible runner; no runner serves the "
                           f"{', '.join(kinds)} layers (below).")
            else:
                np = [r for r in self.reasons if r.code == "not_preferred"]
                if np:
                    eligible = [c for c in self.candidates if c.eligible]
                    if eligible and all(c.evidence != "supported" for c in eligible):
                        out.append("Refused: no plan. No runner is supported here: those the matching rules prefer are "
                                   "refused, and those left are eligible only as unverified (no fact says whether they "
                                   "run) and preferred by no rule:")
                    else:
                        out.append("Refused: no plan. No runner a matching rule prefers is eligible; eligible but "
                                   "preferred by no rule:")
                    out += [f"  {r.render()}" for r in np]
                else:
                    out.append("Refused: no plan. " + ("The requested runner cannot serve." if u.runner != "auto" else "No runner is eligible."))
        if self.measured is not None:
            out += self.measured.render()
        if self.engine_choices:
            out.append("What the engine itself would do (backends/engines/resolution.yaml, names.yaml; issue 23):")
            for ch in self.engine_choices:
                out += ch.render()
        if self.layers:
            from .deployment import _ranges

            out.append(f"MoE layer kinds (main: layers {_ranges(u.layers) or 'all'}, {u.quant}):")
            for sub in self.layers:
                d = sub.deployment
                head = (f"  {d.layer_kind}: layers {_ranges(d.layers)}, {d.quant}"
                        + (f", dispatch_precision {d.dispatch_precision}" if d.dispatch_precision != "auto" else "")
                        + f" -- {u.provenance.get(f'layers.{d.layer_kind}', '')}")
                out.append(head)
                if sub.plan is not None:
                    kp = sub.plan
                    how = (f"rule {kp.chosen_by.rule}" if kp.chosen_by.how == "rule" else "measured" if kp.chosen_by.how == "measured"
                           else "asked for")
                    out.append(f"    -> {kp.runner} ({how}); other eligible: {', '.join(kp.alternatives) or 'none'}")
                else:
                    out.append("    -> refused:")
                    out += [f"       {r.render()}" for r in sub.reasons]
        out.append("")
        # Reasons shared by every candidate (common facts, the a2a backend) are printed once.
        def key(r: Reason) -> tuple:
            return (r.code, r.detail, r.source)

        common = shared_reasons(self.candidates)
        shared = set(map(key, common))
        if common:
            out.append("Every runner is refused because:")
            out += [f"  {r.render()}" for r in common]
            out.append("")
        out.append("Candidates (in rule order; then runners no matching rule prefers)")
        width = max(len(c.backend) for c in self.candidates) if self.candidates else 8
        for c in self.candidates:
            mark = (f"eligible, {c.evidence}" if c.eligible else "rejected")
            chosen = " <- chosen" if self.plan and c.backend == self.plan.runner else ""
            pref = f" (preferred by {c.preferred_by})" if c.preferred_by else ""
            own = [r for r in c.reasons if key(r) not in shared]
            more = " (and the reasons above)" if shared and not c.eligible else ""
            out.append(f"  {c.backend:<{width}}  {mark}{chosen}{pref}{more}")
            for r in own:
                out.append(f"  {'':<{width}}    {r.render()}")
            if c.eligible:
                out += [f"  {'':<{width}}    {x.render()}" for x in c.unknowns]
        out.append("")
        if self.overridden_rules:
            out.append("Overridden rules (a rule of a later rules layer with the same id replaces a bundled or earlier "
                       "operator rule in place; the layers' order decides):")
            out += [f"  {rid}: {how}" for rid, how in self.overridden_rules.items()]
        if self.origins:
            out.append("Files from plugins and operator folders:")
            out += [f"  {name}: {origin}" for name, origin in sorted(self.origins.items())]
        out.append(f"Rule files: {', '.join(self.rule_files)}; capability files: {len(self.capability_files)}")
        return "\n".join(out)


def _how(chosen_by: Any, sep: str) -> str:
    """How a plan's runner was chosen, in words: ``rule X<sep>(source)``, ``measurement (...)``, ``asked for explicitly``."""
    if chosen_by.how == "rule":
        return f"rule {chosen_by.rule}{sep}{chosen_by.source}" if sep == " at " else f"rule {chosen_by.rule} ({chosen_by.source})"
    if chosen_by.how == "measured":
        return f"measurement ({f'rule {chosen_by.rule} at ' if chosen_by.rule else ''}{chosen_by.source})"
    return "asked for explicitly" if sep == " at " else f"asked for explicitly ({chosen_by.source})"


def _by_reach(reasons: list) -> list[str]:
    """The reason codes of ``reasons``, those that refuse the most candidates first (ties by name): the common cause
    leads a refusal's one line (a new user's trial, 2026-12-04: shape_unaligned, every candidate's, came last)."""
    reach: dict[str, set] = {}
    for r in reasons:
        reach.setdefault(r.code, set()).add(getattr(r, "backend", None))
    return sorted(reach, key=lambda c: (-len(reach[c]), c))
