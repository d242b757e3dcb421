"""What the serving engine itself would pick for a deployment, beside moe-select's plan (issue 23).

The engine resolves the MoE kernel on its own: SGLang's argument pipeline rewrites values (an all-to-all forces the
EP size, a mode of it disables CUDA graphs, a runner or an all-to-all turns shared-expert fusion off, ``auto`` becomes
a runner) before the model loads; vLLM's per-format oracle takes the first kernel of a priority list (with platform
tweaks and environment variables) whose ``is_supported_config`` passes, and logs ``Using X ... out of potential
backends: [...]``; TensorRT-LLM's ``moe_config.backend: AUTO`` names one backend and degrades to its fallback when that
one cannot serve the layer. The facts are data: ``backends/engines/resolution.yaml`` (SGLang's hooks, vLLM's oracles,
each cited at a commit) and ``backends/engines/names.yaml`` (TensorRT-LLM's AUTO rows and the bundled rules that state
them). :func:`predict` replays them over a report of the selector and says, per engine:

- the runner the engine would run (our name and the engine's), how it got there (asked, a hook, the oracle's list, the
  AUTO row), the line it would log, and the source;
- every value the engine changes, and whether it changes one the deployment gave explicitly (a silent override);
- where the engine's choice differs from the plan: what the difference costs (the engine's runner refused here on
  evidence, or not covered by any fact, or both run), and the flag that makes the engine follow the plan.

A kernel's ``is_supported_config`` is stood for by the selector's verdict on that runner under that engine: a runner
the facts refuse is skipped, one they support or leave open is taken (the prediction then says which). Where the
engine resolves ``auto`` at model load in code no fact states (SGLang's quantization methods), nothing is predicted
and the entry says so. Torch-free, pure: the selector passes the facts; this module imports neither it nor torch.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

from pydantic import Field, field_validator, model_validator

from .conditions import When
from .contracts import DispatchFormat
from .engine_tables import CITATION, ENGINES, engines_dir, names, table
from .located import Located
from .releases import _load
from .vocab import Quant

#: The deployment fields an engine hook reads (``asked``) or writes (``sets``).
HookField = Literal["runner", "a2a_mode", "cuda_graph", "ep", "shared_expert_fusion"]
FIELDS: tuple[str, ...] = HookField.__args__  # type: ignore[attr-defined]


class _Cited(Located):
    """A fact with a ``source``: one or more citations separated by ``; ``."""

    source: str

    @field_validator("source")
    @classmethod
    def _cited(cls, v: str) -> str:
        for part in v.split("; "):
            if not CITATION.match(part):
                raise ValueError(f"{part[:60]!r} is not a citation (owner/repo@commit:path[:symbol] or owner/repo#N)")
        return v


class _Gated(_Cited):
    """A cited entry that holds in the engine versions ``requires`` names only (distribution -> PEP 440 specifier, as a
    runner fact's ``requires``: ``{sglang: "<0.5.11"}``; None: every version), where the deployment's versions
    (declared, or the checked one assumed) meet it."""

    requires: dict[str, str] | None = None

    @field_validator("requires")
    @classmethod
    def _specifiers(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        from .conditions import _check_requires

        return _check_requires(v)


class Hook(_Gated):
    """One step of an engine's argument pipeline: for a checkpoint of one of ``architectures`` (when given), where
    ``when`` holds (the deployment's facts) and every field of
    ``asked`` has one of its values (as the earlier hooks left it), the engine writes ``sets`` (``ep: tp``: the tp
    size; ``runner: auto``: the engine drops the runner asked and resolves the layer itself, as for ``auto``) and
    prints ``log`` (``{a2a}``, ``{ep}``, ``{tp}``, ``{architecture}`` filled in; ``{asked}``: the value the hook
    replaces)."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    engine: Literal["sglang", "vllm", "trtllm"]
    #: The checkpoint architectures it is registered for (config.json ``architectures[0]``); None: any model.
    architectures: list[str] | None = None
    when: When | None = None
    asked: dict[HookField, list[str | bool | int]] | None = None
    sets: dict[HookField, str | bool | int] = Field(min_length=1)
    log: str | None = None


class OracleEntry(Located):
    """A kernel of an oracle's priority list: ``name`` as the engine logs it, our ``runner`` (None: no runner of ours
    stands for it; it is not judged), the dispatch formats it takes (None: any)."""

    name: str = Field(min_length=1)
    runner: str | None = None
    dispatch: list[DispatchFormat] | None = None


class OracleList(Located):
    """A priority list that holds where ``when`` holds (None: always; the oracle takes the first that holds)."""

    when: When | None = None
    order: list[OracleEntry] = Field(min_length=1)


class Tweak(_Cited):
    """A platform or configuration tweak of a priority list: where ``when`` holds, ``front`` moves entries to the
    front (the last named ends first), ``back`` to the back, in the order written."""

    when: When
    front: list[str] = []
    back: list[str] = []


class EnvRule(_Gated):
    """An environment variable that removes entries when set to one of ``values``, in the engine versions ``requires``
    names: outside them the engine no longer reads the variable and the rule does not apply."""

    variable: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    values: list[str] = Field(min_length=1)
    remove: list[str] = Field(min_length=1)


class Oracle(_Gated):
    """One per-format kernel oracle of an engine (vLLM's ``select_*_moe_backend``). ``requires``: the engine releases
    whose oracle the lists were read in; at another release (declared or detected) nothing is predicted (a ninth new
    user's trial: today's priority list was applied to vLLM 0.11.0, which chose its FP8 kernel by environment switches,
    and ``--emit`` refused a plan the engine would have run). A format may have several oracles, one per range of
    releases whose lists differ: the first whose ``requires`` the deployment's versions meet is replayed."""

    engine: Literal["vllm"]
    name: str
    formats: list[Quant] = Field(min_length=1)
    log: str
    lists: list[OracleList] = Field(min_length=1)
    tweaks: list[Tweak] = []
    env: list[EnvRule] = []

    @model_validator(mode="after")
    def _names_known(self) -> "Oracle":
        known = {e.name for lst in self.lists for e in lst.order}
        for t in self.tweaks:
            for n in [*t.front, *t.back]:
                if n not in known:
                    raise ValueError(f"tweak at {t.where()} names {n!r}, which no list of oracle {self.name} has")
        for e in self.env:
            for n in e.remove:
                if n not in known:
                    raise ValueError(f"env rule {e.variable} removes {n!r}, which no list of oracle {self.name} has")
        return self


class Resolution(Located):
    """``backends/engines/resolution.yaml``."""

    schema_version: Literal[1]
    hooks: list[Hook] = []
    oracles: list[Oracle] = []

    @model_validator(mode="after")
    def _runners_known(self) -> "Resolution":
        ours = {r.ours for r in names().runners}
        for h in self.hooks:
            r = h.sets.get("runner")
            # "auto": the engine drops the asked runner and resolves the layer itself (its oracle then runs)
            if isinstance(r, str) and r not in ours and r != "auto":
                raise ValueError(f"hook {h.id} sets runner {r!r}, which names.yaml does not know")
        for o in self.oracles:
            for lst in o.lists:
                for e in lst.order:
                    if e.runner is not None and e.runner not in ours:
                        raise ValueError(f"oracle {o.name}: {e.name} is runner {e.runner!r}, which names.yaml does not know")
        ids = [h.id for h in self.hooks]
        if len(ids) != len(set(ids)):
            raise ValueError("hook ids must be unique")
        return self


@functools.lru_cache(maxsize=None)
def resolution() -> Resolution:
    """The validated ``resolution.yaml`` (read once per process). Raises :class:`InputError` (file:line)."""
    return _load(engines_dir() / "resolution.yaml", Resolution)


# ---------------------------------------------------------------------------------------------- prediction
@dataclass
class Override:
    """A value the engine changes: ``asked`` -> ``becomes`` (``explicit``: the deployment gave ``asked`` itself, so
    the engine silently overrides what was asked)."""

    field: str
    asked: Any
    becomes: Any
    explicit: bool
    hook: str
    log: str | None
    source: str

    def render(self) -> str:
        silent = " (silently overrides what was asked)" if self.explicit else ""
        log = f"; logs \"{self.log}\"" if self.log else ""
        return f"{self.field} {_text(self.asked)} -> {_text(self.becomes)}{silent} by {self.hook}{log} [{self.source}]"


@dataclass
class EngineChoice:
    """What one engine would do for the deployment (module docstring). ``runner`` is ours (None: not predicted);
    ``engine_name`` the engine's own spelling; ``how`` how it got there; ``evidence`` the selector's verdict on that
    runner under that engine; ``considered`` the oracle's entries in order with each verdict."""

    engine: str
    runner: str | None
    engine_name: str | None
    how: str
    source: str | None
    log: str | None = None
    evidence: str | None = None
    overrides: list[Override] = field(default_factory=list)
    considered: list[tuple[str, str | None, str]] = field(default_factory=list)
    #: The all-to-all mode of each phase after the engine's hooks (empty: a backend without modes).
    modes: dict[str, str] = field(default_factory=dict)
    plan_runner: str | None = None
    differs: bool = False
    cost: str | None = None
    follow: str | None = None
    #: What the engine gives the checkpoint's speculative-draft (MTP) layers where the deployment names no runner for
    #: them (:class:`DraftChoice`; empty where the engine's table has no draft rule or no such layers are planned).
    drafts: list["DraftChoice"] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``engine_choices`` of ``explain --json``)."""
        return {"engine": self.engine, "runner": self.runner, "engine_name": self.engine_name, "how": self.how,
                "source": self.source, "log": self.log, "evidence": self.evidence,
                "overrides": [o.__dict__ for o in self.overrides], "a2a_modes": dict(self.modes),
                "considered": [{"name": n, "runner": r, "verdict": v} for n, r, v in self.considered],
                "plan_runner": self.plan_runner, "differs": self.differs, "cost": self.cost, "follow": self.follow,
                "drafts": [d.__dict__ for d in self.drafts]}

    def render(self) -> list[str]:
        """Text lines of ``explain``."""
        head = (f"  {self.engine}: runner {self.runner}" + (f" ({self.engine}: {self.engine_name})" if self.engine_name
                                                             and self.engine_name != self.runner else "")
                if self.runner else f"  {self.engine}: {self.engine_name} (its own kernels)" if self.engine_name
                else f"  {self.engine}: runner not predicted")
        out = [head + f": {self.how}" + (f" [{self.source}]" if self.source else "")]
        if self.log:
            out.append(f"    logs: {self.log}")
        if self.modes:
            out.append("    a2a mode: " + ", ".join(f"{m} for {p}" for p, m in self.modes.items()))
        out += [f"    {o.render()}" for o in self.overrides]
        if self.differs:
            out.append(f"    differs from the plan ({self.plan_runner or 'refused'}): {self.cost}")
            if self.follow:
                out.append(f"    to run the plan: {self.follow}")
        for d in self.drafts:
            out += d.render()
        return out


@dataclass
class DraftChoice:
    """The runner an engine gives the checkpoint's ``kind`` layers (a speculative draft's MTP / NextN MoE layers) when
    the launch names none for them: ``runner`` (ours; None: not predicted), ``how`` (the engine table's draft rule),
    ``evidence`` the selector's verdict on it for those layers, ``plan_runner`` the layers' plan, ``cost`` where they
    differ, ``follow`` the flag that gives the draft the plan's runner."""

    kind: str
    layers: str
    runner: str | None
    how: str
    evidence: str | None = None
    plan_runner: str | None = None
    cost: str | None = None
    follow: str | None = None

    def render(self) -> list[str]:
        """Text lines of ``explain`` (under the engine's choice)."""
        out = [f"    {self.kind} layers {self.layers}: runner {self.runner or 'not predicted'}: {self.how}"]
        if self.cost:
            out.append(f"      differs from their plan ({self.plan_runner or 'refused'}): {self.cost}")
        if self.follow:
            out.append(f"      to run their plan: {self.follow}")
        return out


def _draft_choices(engine: str, choice: EngineChoice, report: Any, reported: frozenset[str],
                   requires_met: "RequiresCheck | None") -> list[DraftChoice]:
    """What ``engine`` runs the ``mtp`` layer kind on where the deployment leaves that kind's runner and the target's at
    auto: its table's draft rule gives the draft the target's resolved runner (``choice.runner``), or a default of the
    release for that runner (field round 57, sgl-project/sglang#30210: a DeepSeek-family target's draft inherited a
    runner whose BF16 path the release's pinned kernel package runs out of bounds, while moe-select planned the draft
    on its own). A runner the deployment names is the deployment's, planned as such (moe_select/deployment.py), so
    nothing is predicted for it."""
    from .deployment import _ranges

    rules = table(engine).draft
    u = report.deployment
    # an engine whose draft inherits only a named runner (resolved: false) resolves the draft's auto by itself: not
    # predicted here (the named runner is planned for the draft as the deployment's, moe_select/deployment.py)
    if rules is None or not rules.resolved or "runner" not in rules.inherits or u.runner != "auto":
        return []
    out = []
    for sub in report.layers:
        d = sub.deployment
        if d.layer_kind != "mtp" or d.runner != "auto":   # a runner the deployment gives them is planned as such
            continue
        layers = _ranges(d.layers)
        if choice.runner is None:
            out.append(DraftChoice("mtp", layers, None, f"the target's resolved runner ({rules.source}), which is not "
                                   "predicted here"))
            continue
        runner, how = choice.runner, f"the target's resolved runner, which the draft inherits [{rules.source}]"
        for dd in rules.defaults:
            if dd.main_runner == choice.runner and dd.runner is not None and (
                    dd.version is None or requires_met is None or requires_met({engine: dd.version})[0]):
                runner, how = dd.runner, f"the draft's default for a {choice.runner} target [{dd.source}]"
        cands = {c.backend: c for c in sub.candidates}
        level, c = _level(cands, runner, engine, reported)
        dc = DraftChoice("mtp", layers, runner, how, evidence=level, plan_runner=sub.plan.runner if sub.plan else None)
        if runner != dc.plan_runner:
            if level in ("refused", "known failure"):
                dc.cost = (f"the engine's draft runner is {'a known failure' if level == 'known failure' else 'refused'} "
                           f"for these layers: {_why_refused(c, engine)}")
            elif level == "unverified":
                dc.cost = f"no fact says {runner} runs these layers under {engine} (unverified)"
            else:
                dc.cost = f"both run these layers ({runner} {level}); their plan follows the rules"
            if dc.plan_runner is not None:
                dc.follow = (_follow(engine, dc.plan_runner, d.quant, means="draft_runner")
                             or f"{engine} has no flag for the draft's runner here: the draft runs {runner}")
        out.append(dc)
    return out


def _text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _level(candidates: Mapping[str, Any], runner: str, engine: str, reported: frozenset[str] = frozenset()
           ) -> tuple[str, Any]:
    """The selector's verdict on ``runner`` under ``engine`` (``refused``/``unverified``/``supported``; ``unknown``
    for a runner no candidate stands for; ``known failure`` for one refused only by reported failures, facts at
    ``reported``: the engine's own checks pass it) and its candidate."""
    c = candidates.get(runner)
    if c is None:
        return "unknown", None
    by = (c.evidence_by_engine or {}).get(engine) or c.evidence
    if by == "refused" and reported:
        mine = [r for r in c.reasons if not r.engines or engine in r.engines]
        if mine and all(r.source in reported for r in mine):
            return "known failure", c
    return by, c


def _why_refused(c: Any, engine: str) -> str:
    """The first reason ``c`` is refused under ``engine``: code, detail, source."""
    rs = [r for r in c.reasons if not r.engines or engine in r.engines] or list(c.reasons)
    return f"{rs[0].code}: {rs[0].detail} [{rs[0].source}]" if rs else "refused"


def _apply_hooks(engine: str, u: Any, facts: Mapping[str, Any], state: dict[str, Any], architecture: str | None,
                 requires_met: "RequiresCheck | None" = None) -> tuple[list[Override], str | None]:
    """Run ``engine``'s hooks over ``state`` (in place); returns the overrides and the id of the hook that set the runner.
    A hook with ``requires`` runs only where ``requires_met`` says the versions meet it (None: not checked, not run)."""
    out: list[Override] = []
    runner_hook = None
    given = {k: not str(u.provenance.get(k, "default")).startswith("default") for k in FIELDS}
    for h in resolution().hooks:
        if h.engine != engine or (h.when is not None and not h.when.matches(facts)):
            continue
        if h.requires and (requires_met is None or not requires_met(h.requires)[0]):
            continue
        if h.architectures is not None and architecture not in h.architectures:
            continue
        if h.asked and not all(state.get(k) in vals for k, vals in h.asked.items()):
            continue
        for k, v in h.sets.items():
            new = u.tp if (k == "ep" and v == "tp") else v
            old = state.get(k)
            if old == new:
                continue
            state[k] = new
            if k == "runner":
                runner_hook = h.id
            log = h.log.format(a2a=u.a2a, ep=old, tp=u.tp, architecture=architecture, asked=old) if h.log else None
            # an explicit auto is a request for the engine's choice, not a value it overrides
            out.append(Override(k, old, new, given.get(k, False) and old == getattr(u, k, old) and old != "auto", h.id, log,
                                h.source))
    return out, runner_hook


#: ``requires`` -> ``(met, why)``: whether the deployment's packages (the engine's own version among them) meet a
#: fact's ``requires``, and what was read or assumed (the selector's version check, passed in: this module stays pure).
RequiresCheck = Callable[[Mapping[str, str]], tuple[bool, str]]


def _oracle(engine: str, u: Any, facts: Mapping[str, Any], env: Mapping[str, str], formats: Sequence[str],
            candidates: Mapping[str, Any], reported: frozenset[str], requires_met: RequiresCheck | None = None
            ) -> EngineChoice | None:
    """The oracle of ``u.quant`` under ``engine`` replayed (None: no oracle for the format). An environment rule with
    ``requires`` applies only where ``requires_met`` says the versions meet it (None: not checked, applied, and the
    note says so)."""
    found = [x for x in resolution().oracles if x.engine == engine and u.quant in x.formats]
    if not found:
        return None
    # one oracle per range of releases (``requires``): the first whose range the deployment's versions meet
    o = found[0]
    if requires_met is not None:
        verdicts = [(x, requires_met(x.requires) if x.requires else (True, "")) for x in found]
        hit = next((x for x, (met, _) in verdicts if met), None)
        if hit is None:
            read_at = " or ".join(", ".join(f"{k} {v}" for k, v in (x.requires or {}).items()) for x in found)
            return EngineChoice(engine, None, None, f"the {o.name} oracle's priority list was read at {read_at} "
                                f"({verdicts[0][1][1]}): this release orders its kernels otherwise, or picks them without "
                                "an oracle, and no fact states how", o.where())
        o = hit
    lst = next((x for x in o.lists if x.when is None or x.when.matches(facts)), o.lists[-1])
    order = list(lst.order)
    by_name = {e.name: e for e in order}
    notes = []
    for t in o.tweaks:
        if not t.when.matches(facts):
            continue
        for n in reversed(t.front):
            if n in by_name:
                order.insert(0, order.pop(order.index(by_name[n])))
        for n in t.back:
            if n in by_name:
                order.append(order.pop(order.index(by_name[n])))
        notes.append(f"{', '.join(t.front) + ' first' if t.front else ''}{', '.join(t.back) + ' last' if t.back else ''} "
                     f"({t.when.describe()})")
    for rule in o.env:
        if env.get(rule.variable) not in rule.values:
            continue
        said = f"{rule.variable}={env[rule.variable]}"
        read_at = ", ".join(f"{k} {v}" for k, v in (rule.requires or {}).items())
        if rule.requires and requires_met is not None:
            met, why = requires_met(rule.requires)
            if not met:
                notes.append(f"{said} is not read ({why}; {engine} reads it at {read_at} only) [{rule.where()}]")
                continue
            read_at = f"{read_at}: {why}" if why else read_at
        order = [e for e in order if e.name not in rule.remove]
        notes.append(f"{said} removes {', '.join(rule.remove)}"
                     + (f" ({'read at ' + read_at if requires_met is not None else read_at + ', version not checked'})"
                        if rule.requires else ""))
    listed = [e.name for e in order]
    considered: list[tuple[str, str | None, str]] = []
    pick = None
    open_before: list[str] = []
    first_open = None
    refused_cands: list[Any] = []
    for e in order:
        if e.dispatch is not None and not set(e.dispatch) & set(formats):
            considered.append((e.name, e.runner, f"takes {'/'.join(e.dispatch)} dispatch; this is {'/'.join(formats)}"))
            continue
        if e.runner is None:
            considered.append((e.name, None, "no runner of moe-select stands for it: not judged"))
            continue
        level, c = _level(candidates, e.runner, engine, reported)
        if level == "refused" and c is not None:
            refused_cands.append(c)
        considered.append((e.name, e.runner, level if level != "refused" else f"refused ({_why_refused(c, engine)})"))
        if level in ("supported", "known failure"):
            pick = (e, level)
            break
        if level in ("unverified", "unknown"):
            open_before.append(e.name)
            first_open = first_open or (e, level)
    if pick is None and first_open is not None:
        pick, open_before = first_open, []
    if pick is None and order and all(e.runner is None for e in order):
        # a list of the engine's own kernels only (vLLM's CPU experts on a CPU): it runs the first, which no runner of
        # ours stands for, so there is nothing to judge
        e = order[0]
        return EngineChoice(engine, None, e.name, f"{o.name} oracle: its list here is {listed}; {engine} runs {e.name}, which "
                            "no runner of moe-select stands for (not judged)", o.source,
                            log=o.log.format(backend=e.name, backends=listed), considered=considered)
    if pick is None:
        # one reason every refused kernel shares (an engine method that loads the layer with none: EPLB on a method
        # without it) is where the engine fails, not its oracle's "no backend" error
        from .plans import shared_reasons

        common = next(iter(shared_reasons(refused_cands)), None)
        if common is not None:
            return EngineChoice(engine, None, None, f"{o.name} oracle: the facts refuse every kernel of its list {listed} for "
                                f"one reason, so the engine fails whatever it chooses: {common.detail} "
                                f"[{common.source}]", o.source, considered=considered)
        return EngineChoice(engine, None, None, f"{o.name} oracle: the facts refuse every kernel of its list {listed} "
                            "(the engine raises 'No ... MoE backend supports the deployment configuration')", o.source,
                            considered=considered)
    e, level = pick
    how = (f"{o.name} oracle, the first of {listed} whose kernel passes {engine}'s own checks, as the facts tell"
           + (f" ({'; '.join(notes)})" if notes else "")
           + (f"; unless {', '.join(n for n in open_before if n != e.name)} (no fact either way) passes first"
              if any(n != e.name for n in open_before) else ""))
    return EngineChoice(engine, e.runner, e.name, how, o.source, log=o.log.format(backend=e.name, backends=listed),
                        evidence=level, considered=considered)


#: TensorRT-LLM's explicit moe_config.backend: the asked family in priority order, then the fallback (names.yaml's
#: trtllm_auto.fallback), which resolve_moe_impl takes when the family cannot serve the layer (allow_degradation, on by
#: default); VANILLA has none (NO_FALLBACK_BACKENDS). A new user's trial saw "runs it or raises" for a backend
#: TensorRT-LLM degrades.
TRTLLM_NO_FALLBACK = ("VANILLA",)
TRTLLM_DEGRADE_SOURCE = ("NVIDIA/TensorRT-LLM@05b032481336:tensorrt_llm/_torch/moe/fused_moe/moe_resolution.py:_candidates_for "
                         "(NO_FALLBACK_BACKENDS, resolve_moe_impl allow_degradation=True)")


def _trtllm_auto(u: Any, facts: Mapping[str, Any], rules: Sequence[Any], candidates: Mapping[str, Any]) -> EngineChoice:
    """TensorRT-LLM's AUTO: the first names.yaml row whose bundled rule matches, degraded to the fallback when the
    facts refuse that backend here."""
    t = names()
    auto = t.trtllm_auto
    if auto is None:
        return EngineChoice("trtllm", None, None, "no AUTO table in names.yaml", None)
    by_id = {r.id: r for r in rules}
    skipped = []
    for row in auto.rows:
        rule = by_id.get(row.rule) if row.rule else None
        cond = row.match if row.match is not None else (rule.when if rule is not None else None)
        if cond is None:
            skipped.append(row.when)
            continue
        if cond.matches(facts):
            ours = t.runner_from("trtllm", row.backend)
            level, c = _level(candidates, ours or "", "trtllm")
            unless = f"; unless {'; '.join(skipped)} (rows moe-select cannot state)" if skipped else ""
            if level == "refused" and row.backend != auto.fallback:
                fb = t.runner_from("trtllm", auto.fallback)
                fl, _ = _level(candidates, fb or "", "trtllm")
                return EngineChoice("trtllm", fb, auto.fallback, f"AUTO names {row.backend} ({row.when}), which cannot serve "
                                    f"the layer here ({_why_refused(c, 'trtllm')}): degrades to {auto.fallback}{unless}",
                                    auto.source, evidence=fl)
            how = f"rule {row.rule}" if row.match is None else f"{row.where()}" + (f"; the plan's rule {row.rule}" if row.rule else "")
            fails = (f", which cannot serve the layer here ({_why_refused(c, 'trtllm')}): TensorRT-LLM has nothing to "
                     "degrade to and fails at startup") if level == "refused" else ""
            return EngineChoice("trtllm", ours, row.backend, f"AUTO row '{row.when}' ({how}){fails}{unless}", auto.source,
                                evidence=level)
    return EngineChoice("trtllm", None, None, "no AUTO row matches", auto.source)


def _follow(engine: str, runner: str, quant: str | None = None, means: str = "runner") -> str | None:
    """The flag (or key) that makes ``engine`` run our ``runner`` on a ``quant`` checkpoint (``means``: the flag's
    meaning, ``draft_runner`` for a speculative draft's layers); None where the engine has no such flag."""
    known, theirs = names().runner_for(engine, runner, quant)
    if not known or theirs is None:
        return f"{engine} has no name for {runner}" + (f" on {quant}" if known and quant else "") + " (names.yaml): it cannot be told to run it"
    if engine == "trtllm" and means == "runner":
        return f"moe_config.backend: {theirs}"
    flag = next((e.name for e in table(engine).flags if e.means == means and not e.removed), None)
    return f"{flag} {theirs}" if flag else None


def predict(report: Any, facts_by_engine: Mapping[str, Mapping[str, Any]], rules: Sequence[Any], a2a: Any = None,
            env: Mapping[str, str] | None = None, reported: frozenset[str] = frozenset(),
            architecture: str | None = None, requires_met: RequiresCheck | None = None) -> list[EngineChoice]:
    """What each serving engine of ``report``'s deployment would pick (module docstring).

    ``facts_by_engine``: the deployment's facts per engine (the selector's); ``rules``: the bundled rules (TensorRT-LLM's
    AUTO rows name them); ``a2a``: the all-to-all's capability (None: none or no file), whose modes give the
    dispatch formats and the mode of each phase after the engine's hooks; ``env``:
    the engine's environment (a launch line's), read by the oracles' environment rules; ``reported``: the ``file:line``
    of every fact that states a reported failure (source ``(reported) ...``): a runner refused only by those passes the
    engine's own checks, so the engine still takes it (the cost says it is a known failure); ``architecture``: the
    checkpoint's ``architectures[0]`` (None: no checkpoint; hooks registered for architectures then do not run);
    ``requires_met``: the version check of the oracles' environment rules that name engine versions (:data:`RequiresCheck`;
    None: not checked, such a rule applies and says so). A deployment for ``moe_select`` gets no entry (it is not a
    serving engine)."""
    u = report.deployment
    env = env or {}
    candidates = {c.backend: c for c in report.candidates}
    plan_runner = report.plan.runner if report.plan is not None else None
    out = []
    for engine in [e for e in facts_by_engine if e in ENGINES]:
        facts = facts_by_engine[engine]
        state = {"runner": u.runner, "a2a_mode": u.a2a_mode, "cuda_graph": u.cuda_graph, "ep": u.ep,
                 "shared_expert_fusion": u.shared_expert_fusion}
        overrides, runner_hook = _apply_hooks(engine, u, facts, state, architecture, requires_met)
        modes = {p: (a2a.modes_used(state["a2a_mode"], (p,)) or ("",))[0] for p in u.phases} if a2a is not None and a2a.modes else {}
        formats = list(a2a.formats_used(tuple(m for m in modes.values() if m), engine)) if a2a is not None else []
        formats = formats or ["standard"]
        runner = state["runner"]
        if runner != "auto":
            level, asked = _level(candidates, runner, engine)
            known, theirs = names().runner_for(engine, runner, u.quant)
            if runner_hook is not None:
                how = f"set by {runner_hook}"
                src = next(o.source for o in overrides if o.field == "runner")
            else:
                how, src = f"asked for ({u.provenance.get('runner', 'deployment')}): the engine runs it or raises", None
            choice = EngineChoice(engine, runner, theirs, how, src, evidence=level)
            auto = names().trtllm_auto if engine == "trtllm" else None
            if (auto is not None and runner_hook is None and level == "refused" and theirs is not None
                    and theirs.upper() not in (auto.fallback, *TRTLLM_NO_FALLBACK)):
                # TensorRT-LLM tries the asked family, then its fallback (resolve_moe_impl, allow_degradation on)
                fb = names().runner_from("trtllm", auto.fallback)
                fl, _ = _level(candidates, fb or "", "trtllm")
                choice = EngineChoice(engine, fb, auto.fallback, f"asked for {theirs} ({u.provenance.get('runner', 'deployment')}), "
                                      f"which cannot serve the layer here ({_why_refused(asked, 'trtllm')}): TensorRT-LLM "
                                      f"degrades it to {auto.fallback} (a warning in its log)", TRTLLM_DEGRADE_SOURCE,
                                      evidence=fl)
        elif engine == "vllm":
            choice = _oracle(engine, u, facts, env, formats, candidates, reported, requires_met) or EngineChoice(
                engine, None, None, f"no oracle of resolution.yaml covers {u.quant}", None)
        elif engine == "trtllm":
            choice = _trtllm_auto(u, facts, rules, candidates)
        else:
            choice = EngineChoice(engine, None, None, f"auto is resolved at model load by {engine}'s quantization method for "
                                  f"{u.quant}; no fact states that choice yet", None)
        choice.overrides = overrides
        choice.modes = modes
        choice.plan_runner = plan_runner
        if report.plan is not None and report.plan.engines and engine not in report.plan.engines:
            choice.differs = choice.runner is not None
            choice.cost = f"the plan ({plan_runner}) holds for {', '.join(report.plan.engines)}, not for {engine}"
        elif choice.runner is not None and choice.runner != plan_runner:
            choice.differs = True
            level, c = _level(candidates, choice.runner, engine, reported)
            if level == "known failure":
                choice.cost = f"the engine's choice is a known failure here: {_why_refused(c, engine)}"
            elif level == "refused":
                choice.cost = f"the engine's choice is refused here on evidence: {_why_refused(c, engine)}"
            elif level == "unverified":
                choice.cost = f"no fact says {choice.runner} runs here under {engine} (unverified); the plan's runner " + (
                    "is the rules' choice" if plan_runner else "is none: moe-select refuses this deployment")
            elif plan_runner is None:
                choice.cost = f"moe-select refuses this deployment (reasons above); {engine} would start with {choice.runner}"
            else:
                choice.cost = (f"both run here ({choice.runner} {level}); the plan follows the rules "
                               f"({report.plan.chosen_by.rule or 'asked'}); no measurement here compares them")
            if plan_runner is not None and engine in (report.plan.engines or [engine]):
                choice.follow = _follow(engine, plan_runner, u.quant)
        untold = _no_runner_option(engine, requires_met) if plan_runner is not None and choice.runner != plan_runner else None
        if untold is not None:
            # a release without the runner option picks its own kernel: the plan names what moe-select judges
            # runnable, not what the engine will be told to run (a ninth new user's trial: vLLM 0.11.0, AWQ)
            choice.how += f"; {untold}: it cannot be told to run the plan's {plan_runner}"
            choice.follow = None
        choice.drafts = _draft_choices(engine, choice, report, reported, requires_met)
        out.append(choice)
    return out


def _runner_option_since(engine: str) -> tuple[Any, str] | None:
    """``(flag, ">=version")`` of ``engine``'s runner option where the table dates it by a release (vLLM, SGLang), else
    None."""
    import re

    if engine not in ("vllm", "sglang"):
        return None
    flag = next((e for e in table(engine).flags if e.means == "runner" and not e.removed), None)
    if flag is None or flag.since is None or not flag.since.version or not re.match(r"^\d+(\.\d+)*$", flag.since.version):
        return None
    return flag, f">={flag.since.version}"


def runner_option_specifiers() -> list[tuple[str, str]]:
    """(engine, specifier) of :func:`_no_runner_option`'s checks: the catalog caches their verdicts (no ``packaging``
    import when planning from a cached catalog)."""
    return [(e, hit[1]) for e in ("vllm", "sglang") if (hit := _runner_option_since(e)) is not None]


def _no_runner_option(engine: str, requires_met: RequiresCheck | None) -> str | None:
    """Why ``engine`` at the deployment's version has no runner option (its flag came in a later release), or None
    (it has one, the version is not known, or the table dates the flag by a PR only)."""
    if requires_met is None or (hit := _runner_option_since(engine)) is None:
        return None
    flag, spec = hit
    met, why = requires_met({engine: spec})
    return None if met else f"{flag.name} came in {flag.since.text()} ({why})"


__all__ = ["Hook", "Oracle", "Resolution", "resolution", "Override", "EngineChoice", "DraftChoice", "RequiresCheck",
           "predict"]
