"""Choosing by measurement (issue 25, parts 2 and 3): which measurement tables of ``moe-select tune``
(:mod:`moe_select.measurements`) apply to a deployment, the measured winner at each token count with the tie
rule, and the token ranges of a plan. Imports no torch (``explain`` calls it).

Where a table applies:
- the deployment is planned for this install (``engine: moe_select``, or ``require_adapter``): ``tune`` times
  this install's adapters, which a serving engine does not run;
- its :class:`~moe_select.measurements.LayerKey` equals the deployment's (:func:`layer_key`: experts on a rank,
  hidden size, intermediate size per rank, top-k, activation, format, tp, ep, a2a);
- its :class:`~moe_select.measurements.MachineKey` agrees with what the deployment says of the machine: the arch,
  the GPU when the deployment names one (product names compared as ``backends/vocabulary.yaml`` reads them:
  ``H200`` is ``NVIDIA H200``), CUDA graphs on or off, this install's moe-select version, and torch, Triton and
  each kernel package the table recorded whose version the deployment declares or this machine has (a package
  neither declares is assumed as measured, and said). ``resolve`` checks the rest of the key (driver, CUDA, tile
  files) on the machine.
Of several tables that apply, the newest (``created``) is used and the others are named as superseded.

The choice: among the candidates the facts leave eligible that the table times (never one the facts refuse,
whatever it measured; of the strongest evidence level among them, supported first as the rules order them),
the winner at each measured token count is the runner of the smallest median, unless others' 95 % intervals of the
median overlap its interval: those tie, and a tie goes to the runner the rules order first among them (runners no
matching rule names come after, by name); ties are reported. Between two measured counts ``a < b`` with
different winners the range boundary is ``floor(sqrt(a * b))`` (the geometric midpoint: forwards of at most
that many tokens run ``a``'s winner). Counts above the deployment's ``max_tokens_per_rank`` beyond the first
one measured at or above it are not used; the last range is open (``max_tokens: None``).

A measured candidate on the measured GPU (the deployment names the same GPU, or it is this machine, detected)
counts as supported there: the unknowns the facts leave for it are settled by the measurement (``tune`` runs a
candidate only after ``verify=True``), and the candidate says so in a note.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import isqrt
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from .measurements import LayerKey, Measurements, Point, layer_key_mismatch, load_measurements, overlap
from .vocab import INSTALL_ENGINE

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from .deployment import Understood
    from .environment import Environment


@dataclass(frozen=True)
class Source:
    """A measurement table and the name it is reported by (its file; ``the plan's embedded table`` at resolve)."""

    name: str
    table: Measurements


#: The name of a plan's embedded table (``resolve`` selects again over it).
EMBEDDED = "the plan's embedded measurements"


def load_tables(paths: Iterable[str | Path]) -> list[Source]:
    """Every measurement table at ``paths`` (files, or folders of ``*.json`` files, sorted by name), each with its
    file name. Raises :class:`~moe_select.errors.InputError` naming the file, line and field of every problem."""
    from .errors import InputError, Issue

    out: list[Source] = []
    issues: list[Issue] = []
    for path in paths:
        p = Path(path)
        files = sorted(q for q in p.glob("*.json") if q.is_file()) if p.is_dir() else [p]
        if p.is_dir() and not files:
            issues.append(Issue(str(p), 0, "measurements", "no *.json measurement files in this folder"))
        for f in files:
            try:
                out += [Source(str(f), m) for m in load_measurements(f)]
            except InputError as exc:
                issues += exc.issues
    if issues:
        raise InputError(issues)
    return out


def sources_of(measurements: Any) -> list[Source]:
    """``measurements`` as :class:`Source` objects: None (none), paths (read with :func:`load_tables`), or
    :class:`Source` / :class:`~moe_select.measurements.Measurements` objects (named ``<measurements N>``)."""
    if measurements is None:
        return []
    if isinstance(measurements, (str, Path, Measurements, Source)):
        measurements = [measurements]
    out: list[Source] = []
    paths: list[str | Path] = []
    from .errors import InputError

    if not isinstance(measurements, (list, tuple)):
        raise InputError(f"measurements: a path, a Measurements object or a list of them, got "
                         f"{type(measurements).__name__}", file="<explain>", field="measurements")
    for i, m in enumerate(measurements):
        if isinstance(m, Source):
            out.append(m)
        elif isinstance(m, Measurements):
            out.append(Source(f"<measurements {i}>", m))
        elif isinstance(m, (str, Path)):
            paths.append(m)
        else:
            raise InputError(f"measurements[{i}]: a path to a moe-select tune table (or a folder of them) or a "
                             f"Measurements object, got {type(m).__name__} (a table read by hand: "
                             f"moe_select.measurements.Measurements)", file="<explain>", field=f"measurements[{i}]")
    return out + load_tables(paths)


def layer_key(u: Understood) -> LayerKey | None:
    """:func:`moe_select.measurements.layer_key` of deployment ``u`` on one rank, or None when the split does not
    divide (no table can match)."""
    from .errors import InputError
    from .measurements import layer_key as key_of

    try:
        return key_of(u)
    except InputError:
        return None


def same_gpu(a: str, b: str) -> bool:
    """Whether GPU names ``a`` and ``b`` name one product (vendor prefixes, case, ``-``/``_`` forgiven, and a
    memory or form-factor suffix on one of them: ``H100`` is ``NVIDIA H100 80GB HBM3``)."""
    from .vocab_names import product_key

    ka, kb = product_key(a), product_key(b)
    return ka == kb or ka.startswith(kb + " ") or kb.startswith(ka + " ")


def gpu_of(u: Understood) -> str | None:
    """The deployment's GPU name as a table's ``machine.gpu`` would say it: its ``gpu`` (given, or detected), ``cpu``
    for a CPU deployment (``tune`` writes ``cpu`` there), else None (only an arch was given)."""
    return u.gpu or ("cpu" if u.arch == "cpu" else None)


def _differs(field_: str, here: Any, there: Any) -> str:
    return f"{field_} ({here} here, {there} there)"


def machine_differences(m: Measurements, u: Understood, env: Environment) -> tuple[list[str], list[str]]:
    """What the deployment says of its machine against ``m.machine``: ``(differences, assumptions)``, each a
    phrase naming the field and both values. Checked: arch, the GPU when the deployment names one, CUDA graphs,
    the moe-select version (this install's), and the versions of torch, Triton and each package ``m`` recorded that
    the deployment declares or this machine has (a package the environment only assumes is an assumption, not a
    difference). The driver, CUDA and tile files are for ``resolve`` (they need torch or the GPU)."""
    mk = m.machine
    out: list[str] = []
    assumed: list[str] = []
    if mk.arch != u.arch:
        out.append(_differs("arch", u.arch, mk.arch))
    here = gpu_of(u)
    if here:
        if not same_gpu(here, mk.gpu):
            out.append(_differs("gpu", here, mk.gpu))
    else:
        assumed.append(f"the deployment names no GPU: measured on {mk.gpu} ({mk.arch}), taken as this {u.arch} GPU")
    if mk.cuda_graph != u.cuda_graph:
        out.append(_differs("cuda_graph", str(u.cuda_graph).lower(), str(mk.cuda_graph).lower()))
    from . import __version__

    if mk.moe_select != __version__:  # resolve compares the table with the installed moe-select it runs in
        out.append(_differs("moe_select", __version__, mk.moe_select))
    # torch and Triton are keys of their own in the table (resolve reads them from the running process), compared
    # like the kernel packages: with the version the deployment declares or this machine has
    keyed = [("torch", "torch", mk.torch), ("triton", "triton", mk.triton),
             *((f"packages.{n}", n, v) for n, v in sorted(mk.packages.items()))]
    for label, name, version in keyed:
        state, found = env.package(name)
        there = version if version is not None else "absent"
        if state == "assumed":
            assumed.append(f"{name} not declared: taken as measured ({there})")
        elif state == "absent" and version is not None:
            out.append(_differs(label, "absent", there))
        elif state == "present" and version is None:
            out.append(_differs(label, found or "present", there))
        elif state == "present" and found not in (None, "unknown") and found != version:
            out.append(_differs(label, found, there))
    return out, assumed


def layer_differences(m: Measurements, key: LayerKey) -> list[str]:
    """The :class:`~moe_select.measurements.LayerKey` fields of ``m`` that differ from ``key``, each with both
    values: ``intermediate_size (768 here, 1536 there)``."""
    return [_differs(f, getattr(key, f), getattr(m.layer, f)) for f in layer_key_mismatch(m, key)]


@dataclass
class Applicable:
    """Which table applies to a deployment: ``source`` (None: none does), ``on_this_gpu`` (the measured GPU is the
    deployment's: its measured candidates count as supported), ``notes`` (why each other table does not apply,
    naming its file), ``assumed`` (what the applicable table was taken to match without the deployment saying:
    no file names, so a plan may hold them) and ``given`` (whether any table was given)."""

    source: Source | None = None
    on_this_gpu: bool = False
    notes: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    given: bool = False


def applicable(u: Understood, env: Environment, sources: Sequence[Source]) -> Applicable:
    """The table of ``sources`` that applies to deployment ``u`` on machine ``env`` (module doc), with a note for
    every other table naming what differs: ``measurements X: layer differs in intermediate_size (768 here, 1536
    there)``, ``measurements X: machine differs in gpu (H100 here, NVIDIA H200 there)``."""
    out = Applicable(given=bool(sources))
    if not sources:
        return out
    if u.engine != INSTALL_ENGINE:
        out.notes.append(f"measurements not applied: they time this install's adapters (engine {INSTALL_ENGINE}); this "
                         f"deployment is planned for engine {u.engine} (plan with --engine {INSTALL_ENGINE} or "
                         "--require-adapter to use them)")
        return out
    key = layer_key(u)
    fits: list[tuple[Source, list[str]]] = []
    for s in sources:
        if key is None:
            out.notes.append(f"measurements {s.name}: not applied: the deployment's layer does not split over tp {u.tp}, "
                             f"ep {u.ep}")
            continue
        layer = layer_differences(s.table, key)
        if layer:
            out.notes.append(f"measurements {s.name}: layer differs in {', '.join(layer)}")
            continue
        machine, assumed = machine_differences(s.table, u, env)
        if machine:
            out.notes.append(f"measurements {s.name}: machine differs in {', '.join(machine)}")
            continue
        fits.append((s, assumed))
    if not fits:
        return out
    fits.sort(key=lambda f: (f[0].table.created, f[0].name), reverse=True)
    (chosen, assumed), rest = fits[0], fits[1:]
    out.source = chosen
    here = gpu_of(u)
    out.on_this_gpu = here is not None and same_gpu(here, chosen.table.machine.gpu)
    out.notes += [f"measurements {s.name}: superseded by {chosen.name} (newer: {chosen.table.created})" for s, _ in rest]
    out.assumed = [f"measurements sha256:{chosen.table.fingerprint()[:12]}: {a}" for a in assumed]
    out.notes += [f"measurements {chosen.name}: {r} was not timed: {why}" for r, why in sorted(chosen.table.skipped.items())]
    return out


# ------------------------------------------------------------------------------------------------ the choice
class RunnerTime(BaseModel):
    """One runner's point at a token count, as explain shows it; ``competes``: False for a runner the facts
    refuse (or that is not of the strongest evidence level), which is shown but never chosen."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    runner: str
    median_us: float
    ci_low_us: float
    ci_high_us: float
    samples: int
    competes: bool = True

    def render(self) -> str:
        """``triton 12.3 us [12.1, 12.6] (n 40)``."""
        out = f"{self.runner} {self.median_us:.4g} us [{self.ci_low_us:.4g}, {self.ci_high_us:.4g}] (n {self.samples})"
        return out if self.competes else out + " (not a candidate here)"


class TokenVerdict(BaseModel):
    """The measured choice at one token count: the ``winner``, every runner's time (fastest first), the runners
    that ``tie`` with the fastest (overlapping intervals, the winner among them), how the tie was broken, and the
    ``runner_up`` with its ``gap_pct`` (its median over the winner's, minus 1, in per cent)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    tokens: int
    winner: str
    times: list[RunnerTime]
    tied: list[str] = []
    tie_break: str | None = None
    runner_up: str | None = None
    gap_pct: float | None = None

    def tie_text(self) -> str | None:
        """The tie as one line, or None when there is none."""
        if len(self.tied) < 2:
            return None
        times = {t.runner: t for t in self.times}
        parts = " and ".join(f"{r} {times[r].median_us:.4g} us [{times[r].ci_low_us:.4g}, {times[r].ci_high_us:.4g}]"
                             for r in self.tied)
        return f"tie at {self.tokens} tokens: {parts} overlap; {self.winner} by {self.tie_break}"


class RangeRow(BaseModel):
    """A token range as the contract of issue 25 states it: ``max_tokens`` (None: the last, open range) and ``runner``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    max_tokens: int | None
    runner: str


class MeasuredReport(BaseModel):
    """What measurements did to a selection (``Report.measured``; explain's section "Measured choice"): whether
    they were ``applied``, ``why`` (or why not), the table used (``source``, ``fingerprint``, ``created``, the
    GPU), the verdict at each measured token count, the ``ranges``, the ``ties`` and the ``notes`` (tables that do
    not apply and what differs, assumptions, extrapolation)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    applied: bool
    why: str
    source: str | None = None
    fingerprint: str | None = None
    created: str | None = None
    gpu: str | None = None
    timing: str | None = None
    verdicts: list[TokenVerdict] = []
    ranges: list[RangeRow] = []
    ties: list[str] = []
    notes: list[str] = []

    def render(self) -> list[str]:
        """The text lines of explain's section."""
        head = "Measured choice" + (f" ({self.source}, sha256 {self.fingerprint[:12]}..., {self.gpu}, {self.timing}, "
                                    f"{self.created})" if self.source and self.fingerprint else "")
        out = [head + ":", f"  {'applied' if self.applied else 'not applied'}: {self.why}"]
        if self.ranges:
            lo = 1
            parts = []
            for r in self.ranges:
                parts.append(f"{lo}-{r.max_tokens} tokens: {r.runner}" if r.max_tokens is not None else f">= {lo} tokens: {r.runner}")
                lo = (r.max_tokens or 0) + 1
            out.append("  ranges: " + "; ".join(parts))
        for v in self.verdicts:
            gap = ""
            if v.runner_up is not None and v.gap_pct is not None:
                # a tie broken toward the slower median leaves a runner-up that is faster by median: said in words,
                # not as a negative gap (a ninth new user's trial)
                gap = (f"; runner-up {v.runner_up} {v.gap_pct:+.1f} %" if v.gap_pct >= 0 else
                       f"; runner-up {v.runner_up}, {-v.gap_pct:.1f} % faster by median but within the intervals")
            tie = f" (tie: {', '.join(v.tied)}; {v.winner} by {v.tie_break})" if len(v.tied) > 1 else ""
            out.append(f"  {v.tokens:>6} tokens -> {v.winner}{tie}{gap}")
            out += [f"           {t.render()}" for t in v.times]
        out += [f"  {t}" for t in self.ties]
        out += [f"  note: {n}" for n in self.notes]
        return out


def _rank(runner: str, rule_order: Sequence[str]) -> tuple[int, int, str]:
    """Tie-break key: runners the rules name, in the rules' order, then the others by name."""
    return (0, rule_order.index(runner), runner) if runner in rule_order else (1, 0, runner)


def verdicts(table: Measurements, competitors: Iterable[str], rule_order: Sequence[str]) -> list[TokenVerdict]:
    """The verdict at every measured token count where one of ``competitors`` has a point (module doc); runners
    outside ``competitors`` are listed (``competes`` False) but never win, tie or come second. ``rule_order``:
    the runners in the order the matching prefer rules name them (the tie rule)."""
    comp = set(competitors)
    out: list[TokenVerdict] = []
    for tokens, row in table.table().items():
        pts = [p for r, p in row.items() if r in comp]
        if not pts:
            continue
        best = min(pts, key=lambda p: (p.median_us, _rank(p.runner, rule_order)))
        tied = sorted((p for p in pts if overlap(p, best)), key=lambda p: _rank(p.runner, rule_order))
        winner = tied[0]
        how = None
        if len(tied) > 1:
            how = "the rules' order" if winner.runner in rule_order else "name (no matching rule names the tied runners)"
        others = sorted((p for p in pts if p.runner != winner.runner), key=lambda p: (p.median_us, p.runner))
        up: Point | None = others[0] if others else None
        times = [RunnerTime(runner=p.runner, median_us=p.median_us, ci_low_us=p.ci_low_us, ci_high_us=p.ci_high_us,
                            samples=p.samples, competes=p.runner in comp)
                 for p in sorted(row.values(), key=lambda p: (p.median_us, p.runner))]
        out.append(TokenVerdict(tokens=tokens, winner=winner.runner, times=times,
                                tied=[p.runner for p in tied] if len(tied) > 1 else [], tie_break=how,
                                runner_up=up.runner if up else None,
                                gap_pct=round((up.median_us / winner.median_us - 1) * 100, 2) if up else None))
    return out


def boundary(a: int, b: int) -> int:
    """The last token count of ``a``'s range between measured counts ``a < b``: ``floor(sqrt(a * b))``."""
    return isqrt(a * b)


def token_ranges(vs: Sequence[TokenVerdict], max_tokens: int) -> tuple[list[RangeRow], list[str]]:
    """The token ranges of verdicts ``vs`` (ascending token counts) for a deployment whose largest forward is
    ``max_tokens`` tokens per rank, and notes on what was not measured (below the smallest count, above the largest).
    Boundaries at or above ``max_tokens`` are dropped (no forward reaches them); the last range is open."""
    if not vs:
        return [], []
    kept: list[TokenVerdict] = []
    for v in vs:
        kept.append(v)
        if v.tokens >= max_tokens:
            break
    rows: list[RangeRow] = []
    cur = kept[0].winner
    for a, b in zip(kept, kept[1:]):
        if b.winner == cur:
            continue
        bound = boundary(a.tokens, b.tokens)
        if bound >= max_tokens:
            break
        rows.append(RangeRow(max_tokens=bound, runner=cur))
        cur = b.winner
    rows.append(RangeRow(max_tokens=None, runner=cur))
    notes = []
    if kept[0].tokens > 1:
        notes.append(f"below {kept[0].tokens} tokens (the smallest count measured): {rows[0].runner}, as measured there")
    if kept[-1].tokens < max_tokens:
        notes.append(f"above {kept[-1].tokens} tokens (the largest count measured) up to max_tokens_per_rank {max_tokens}: "
                     f"{rows[-1].runner}, as measured at {kept[-1].tokens}")
    return rows, notes


__all__ = ["Source", "Applicable", "MeasuredReport", "TokenVerdict", "RunnerTime", "RangeRow", "load_tables", "sources_of",
           "layer_key", "same_gpu", "machine_differences", "layer_differences", "applicable", "verdicts", "boundary",
           "token_ranges", "EMBEDDED"]
