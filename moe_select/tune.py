"""``moe-select tune``: time every candidate runner of a deployment on this machine, per token count, with the
uncertainty of each time, and write a measurement file (:mod:`moe_select.measurements`); ``tune --check``
re-measures a few points of a file and reports drift.

Candidates: every runner the selector finds eligible for the deployment (with ``require_adapter``: it has an
adapter in this install; a runner the facts refuse is never built nor timed), planned for this machine
(``arch: auto``). A candidate whose first call would build kernels (``plan.jit``) is skipped unless
``allow_jit``. Each candidate is resolved with ``verify=True`` first (:func:`moe_select.verify.verify_runner`:
fresh random tokens against the float64 reference), so a wrong runner is never timed; one that fails is named
in the file's ``skipped`` with the reason.

Timing (:class:`TorchTimer`): the layer's weights are drawn once (:func:`moe_select.harness.weights.layer_weights`,
seed 0) and each candidate prepares its own copy (every candidate's prepared weights are held at once: the
memory is the sum); inputs are :data:`SETS` seeded batches of the model's routing per token count, rotated
between samples so that one batch's experts are not served from L2. Where the deployment captures CUDA graphs
(``cuda_graph``) and the layer runs on a GPU, each sample is one replay of a graph captured once per (runner,
token count), timed with CUDA events, the next batch copied into the graph's inputs before the start event
(outside the timed region): the engine's decode path. Otherwise each sample is one eager call (CUDA events after
a synchronisation on a GPU, so launch gaps count; ``time.perf_counter`` on the CPU).

Each point (runner, token count) is sampled in rounds, the runners of one token count in turn: a first batch of
:attr:`Settings.first_batch` samples, then batches that double the count (capped by the time left), until the 95 %
interval of the median (:func:`median_interval`: order statistics, distribution-free) has a relative half-width
at most :attr:`Settings.target_rel_half_width` (``narrow``), or the point's budget of
:attr:`Settings.budget_s_per_point` seconds of sampling is spent (``budget``), or its interval's low end lies
above the fastest runner's high end by more than :attr:`Settings.margin` (``cannot_win``: it cannot win that
point, whatever more samples say).

Token counts (:func:`default_tokens`): ``--tokens``; else the powers of two up to the deployment's
``max_tokens_per_rank`` (its per-rank prefill budget or capture limit), that count itself, its
``decode_tokens_per_rank`` and, from a launch line, the CUDA-graph capture sizes it lists (times the tokens per
request), each at most ``max_tokens_per_rank``.
"""
from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence, TextIO

from .errors import InputError, MoeSelectError, ResolveError
from .measurements import MIN_INTERVAL_SAMPLES as _MIN_SAMPLES
from .measurements import (DRIFT_THRESHOLD, INTERVAL, KIND, SCHEMA, TARGET_REL_HALF_WIDTH, TIE_RULE, LayerKey, MachineKey,
                           Measurements, Method, Point, layer_key, machine_key_mismatch, utc_now)

if TYPE_CHECKING:  # pragma: no cover
    from .plans import Plan
    from .report import Report

#: Token counts tried when neither ``--tokens`` nor the deployment says more (capped at ``max_tokens_per_rank``).
DEFAULT_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
#: Input batches rotated between samples.
SETS = 4
#: Default seconds of sampling per point.
BUDGET_S = 1.0
#: A runner whose interval's low end is above the best runner's high end by more than this fraction stops.
MARGIN = 0.05
#: The interval's confidence level.
LEVEL = 0.95
#: The fewest samples the interval is taken from (:data:`moe_select.measurements.MIN_INTERVAL_SAMPLES`).
MIN_INTERVAL_SAMPLES = _MIN_SAMPLES


@dataclass(frozen=True)
class Settings:
    """The numbers of one tune (README, "Tune"): ``target_rel_half_width`` of each point's interval,
    ``budget_s_per_point`` (seconds of sampling), ``margin`` of the early stop, ``first_batch`` (samples of a
    point's first round, at least :data:`MIN_INTERVAL_SAMPLES`), ``max_samples`` per point, and the
    ``drift_threshold`` recorded for ``tune --check``."""

    target_rel_half_width: float = TARGET_REL_HALF_WIDTH
    budget_s_per_point: float = BUDGET_S
    margin: float = MARGIN
    first_batch: int = 10
    max_samples: int = 5000
    drift_threshold: float = DRIFT_THRESHOLD

    def __post_init__(self) -> None:
        for name in ("target_rel_half_width", "budget_s_per_point", "drift_threshold"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v < math.inf):
                raise InputError(f"{name} must be a positive number, got {v!r}", file="<tune>", field=name)
        if not self.margin >= 0:
            raise InputError(f"margin must be >= 0, got {self.margin!r}", file="<tune>", field="margin")
        if not MIN_INTERVAL_SAMPLES <= self.first_batch <= self.max_samples:
            raise InputError(f"first_batch must be in [{MIN_INTERVAL_SAMPLES}, max_samples={self.max_samples}], got "
                             f"{self.first_batch}", file="<tune>", field="first_batch")


# ------------------------------------------------------------------------------------------ statistics
@lru_cache(maxsize=4096)
def _rank(n: int, level: float = LEVEL) -> int:
    """The largest ``l >= 1`` with ``P(Binomial(n, 1/2) < l) <= (1 - level) / 2``; 0 when none (n too small)."""
    alpha = (1 - level) / 2
    cum, rank = 0.0, 0
    log_half_n = n * math.log(0.5)
    for k in range(n + 1):
        cum += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + log_half_n)
        if cum > alpha:
            break
        rank = k + 1
    return rank


def median_interval(xs: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """The ``level`` (95 %) interval of the median of ``xs`` from order statistics: ``(x_(l), x_(n+1-l))`` of the
    sorted samples, ``l`` the largest rank with ``P(Binomial(n, 1/2) < l) <= (1 - level) / 2`` (coverage at least
    ``level`` for independent samples of any continuous distribution). Raises ValueError for fewer than
    :data:`MIN_INTERVAL_SAMPLES` samples (no such rank at 95 %)."""
    n = len(xs)
    rank = _rank(n, level)
    if rank < 1:
        raise ValueError(f"{n} samples are too few for a {level:.0%} interval of the median (at least {MIN_INTERVAL_SAMPLES})")
    s = sorted(xs)
    return s[rank - 1], s[n - rank]


def percentile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``xs``, linear between order statistics (numpy's default)."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(runner: str, tokens: int, xs: Sequence[float], stopped: str) -> Point:
    """The :class:`Point` of samples ``xs`` (microseconds)."""
    lo, hi = median_interval(xs)
    return Point(runner=runner, tokens=tokens, samples=len(xs), median_us=float(statistics.median(xs)),
                 p10_us=percentile(xs, 0.1), p90_us=percentile(xs, 0.9), ci_low_us=float(lo), ci_high_us=float(hi),
                 stopped=stopped)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ timing
class Timer(Protocol):
    """What :func:`measure` times with. ``timing``: ``cuda_graph_replay`` or ``eager`` (recorded in the file).
    :meth:`setup` prepares ``runner`` at ``tokens`` (graph capture, warm-up; not counted in the budget),
    :meth:`sample` returns ``n`` more per-call times in microseconds, :meth:`release` frees what ``tokens``
    held (graphs, inputs)."""

    timing: str

    def setup(self, runner: str, tokens: int) -> None: ...

    def sample(self, runner: str, tokens: int, n: int) -> list[float]: ...

    def release(self, tokens: int) -> None: ...


class TorchTimer:
    """The real timer (module doc): ``runners`` maps a name to ``(MoeRunner, PreparedWeights)``; ``model`` is
    the layer's model shape (a dict: routing, sizes); ``graph``: CUDA-graph replay (a CUDA device only)."""

    def __init__(self, runners: Mapping[str, tuple[Any, Any]], model: Mapping[str, Any], device: Any, *, graph: bool,
                 dtype: str = "bfloat16", seed: int = 0):
        import torch

        self.runners = dict(runners)
        self.model = dict(model)
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.graph = bool(graph and self.cuda)
        self.timing = "cuda_graph_replay" if self.graph else "eager"
        self.dtype, self.seed = dtype, seed
        self._inputs: dict[int, list[tuple[Any, Any, Any]]] = {}
        self._graphs: dict[tuple[str, int], tuple[Any, list[Any]]] = {}
        self._next: dict[tuple[str, int], int] = {}

    def _sets(self, tokens: int) -> list[tuple[Any, Any, Any]]:
        from .harness.weights import routed_tokens

        if tokens not in self._inputs:
            self._inputs[tokens] = [tuple(t.to(self.device) for t in routed_tokens(self.model, tokens, self.seed + 1000 * tokens + j,
                                                                                  self.dtype))  # type: ignore[misc]
                                    for j in range(SETS)]
        return self._inputs[tokens]

    def setup(self, runner: str, tokens: int) -> None:
        """Warm ``runner`` up at ``tokens`` (two calls) and, with graphs, capture one forward into static inputs."""
        import torch

        r, pw = self.runners[runner]
        sets = self._sets(tokens)
        if not self.graph:
            for i in range(2):
                r.run(*sets[i % SETS], pw)
            if self.cuda:
                torch.cuda.synchronize(self.device)
            return
        static = [t.clone() for t in sets[0]]
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                r.run(*static, pw)
        torch.cuda.current_stream(self.device).wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            r.run(*static, pw)
        g.replay()
        torch.cuda.synchronize(self.device)
        self._graphs[(runner, tokens)] = (g, static)

    def sample(self, runner: str, tokens: int, n: int) -> list[float]:
        """``n`` per-call times (microseconds) of ``runner`` at ``tokens``, the input batches rotated."""
        import torch

        sets = self._sets(tokens)
        i0 = self._next.get((runner, tokens), 0)
        self._next[(runner, tokens)] = i0 + n
        if not self.cuda:
            r, pw = self.runners[runner]
            out = []
            for i in range(i0, i0 + n):
                t0 = time.perf_counter()
                r.run(*sets[i % SETS], pw)
                out.append((time.perf_counter() - t0) * 1e6)
            return out
        events = []
        if self.graph:
            g, static = self._graphs[(runner, tokens)]
            for i in range(i0, i0 + n):
                for dst, src in zip(static, sets[i % SETS]):
                    dst.copy_(src)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                events.append((a, b))
        else:
            r, pw = self.runners[runner]
            for i in range(i0, i0 + n):
                torch.cuda.synchronize(self.device)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                r.run(*sets[i % SETS], pw)
                b.record()
                events.append((a, b))
        torch.cuda.synchronize(self.device)
        return [a.elapsed_time(b) * 1e3 for a, b in events]

    def release(self, tokens: int) -> None:
        """Drop the graphs and inputs of ``tokens``."""
        for key in [k for k in self._graphs if k[1] == tokens]:
            del self._graphs[key]
        self._inputs.pop(tokens, None)
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()


@dataclass
class _State:
    xs: list[float] = field(default_factory=list)
    spent: float = 0.0
    stopped: str | None = None


class Progress(Protocol):
    """What :func:`measure` reports progress to (a tqdm bar, or nothing)."""

    def update(self, n: int = 1) -> Any: ...

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> Any: ...


def measure(runners: Sequence[str], tokens: Sequence[int], timer: Timer, settings: Settings = Settings(), *,
            clock: Callable[[], float] = time.perf_counter, progress: Progress | None = None) -> list[Point]:
    """Time every runner at every token count (module doc): one :class:`Point` per (runner, tokens), in the order
    tokens, then runners. ``clock`` measures the seconds each :meth:`Timer.sample` call takes (the budget);
    ``progress`` advances by one as each point stops. Raises :class:`MoeSelectError` when the timer returns
    other than ``n`` positive finite times."""
    points: list[Point] = []
    for t in tokens:
        points.extend(_measure_point(runners, t, timer, settings, clock, progress))
    return points


def _measure_point(runners: Sequence[str], t: int, timer: Timer, settings: Settings, clock: Callable[[], float],
                   progress: Progress | None) -> list[Point]:
    """:func:`measure` at one token count."""
    state = {r: _State() for r in runners}
    for r in runners:
        timer.setup(r, t)
    active = list(runners)

    def stop(r: str, why: str) -> None:
        state[r].stopped = why
        active.remove(r)
        if progress is not None:
            progress.update(1)

    while active:
        for r in list(active):
            st = state[r]
            if not st.xs:
                n = settings.first_batch
            else:
                per = st.spent / len(st.xs) if st.spent > 0 else 0.0
                left = settings.budget_s_per_point - st.spent
                n = min(len(st.xs), settings.max_samples - len(st.xs))
                if per > 0:
                    n = min(n, max(1, int(left / per) + 1))
            if progress is not None:
                progress.set_postfix_str(f"{t} tokens: {r} ({len(st.xs)} samples)", refresh=False)
            t0 = clock()
            xs = timer.sample(r, t, n)
            st.spent += clock() - t0
            if len(xs) != n or not all(isinstance(x, (int, float)) and 0 < x < math.inf for x in xs):
                raise MoeSelectError(f"tune: the timer returned {len(xs)} times for {n} calls of {r} at {t} tokens, or a "
                                     f"time that is not a positive finite number of microseconds: {list(xs)[:8]}")
            st.xs.extend(float(x) for x in xs)
            lo, hi = median_interval(st.xs)
            med = statistics.median(st.xs)
            if (hi - lo) / 2 / med <= settings.target_rel_half_width:
                stop(r, "narrow")
            elif st.spent >= settings.budget_s_per_point or len(st.xs) >= settings.max_samples:
                stop(r, "budget")
        measured = [r for r in runners if len(state[r].xs) >= MIN_INTERVAL_SAMPLES]
        if len(measured) > 1 and active:
            best = min(measured, key=lambda q: statistics.median(state[q].xs))
            best_hi = median_interval(state[best].xs)[1]
            for r in list(active):
                if r != best and median_interval(state[r].xs)[0] > best_hi * (1 + settings.margin):
                    stop(r, "cannot_win")
    timer.release(t)
    return [summarize(r, t, state[r].xs, state[r].stopped or "budget") for r in runners]


# ------------------------------------------------------------------------------------------ candidates and building
def default_tokens(understood: Any, capture_sizes: Iterable[int] = ()) -> list[int]:
    """The token counts of a deployment as understood (module doc): powers of two up to ``max_tokens_per_rank``,
    that count, ``decode_tokens_per_rank`` when known and ``capture_sizes`` (tokens), each at most
    ``max_tokens_per_rank``; sorted."""
    cap = int(understood.max_tokens_per_rank)
    out = {t for t in DEFAULT_TOKENS if t <= cap}
    t = DEFAULT_TOKENS[-1] * 2
    while t <= cap:
        out.add(t)
        t *= 2
    out.add(cap)
    if understood.decode_tokens_per_rank:
        out.add(min(cap, int(understood.decode_tokens_per_rank)))
    out.update(int(c) for c in capture_sizes if 1 <= int(c) <= cap)
    return sorted(out)


def launch_capture_sizes(launch: Any, decode_tokens: int | None) -> list[int]:
    """The CUDA-graph capture sizes a launch line lists (SGLang ``--cuda-graph-bs``, vLLM ``compilation_config``'s
    ``cudagraph_capture_sizes``, TensorRT-LLM ``cuda_graph_config.batch_sizes``), as tokens per rank: each size
    times the tokens per request (``decode_tokens`` over the largest size, when that divides); empty when the
    line lists none."""
    if launch is None:
        return []
    v = launch.values
    sizes: list[int] = []
    if "cuda_graph_bs" in v:
        sizes = [int(x) for x in v["cuda_graph_bs"].value]
    for key, sub in (("compilation_config", "cudagraph_capture_sizes"), ("cuda_graph_config", "batch_sizes")):
        cfg = v.get(key)
        if not sizes and cfg is not None and isinstance(cfg.value, dict) and isinstance(cfg.value.get(sub), list):
            sizes = [int(x) for x in cfg.value[sub]]
    if not sizes:
        return []
    per = decode_tokens // max(sizes) if decode_tokens and decode_tokens % max(sizes) == 0 else 1
    return sorted({s * per for s in sizes if s >= 1})


def parse_tokens(text: str) -> list[int]:
    """``--tokens 1,2,4``: distinct positive integers, sorted. Raises :class:`InputError` naming the flag."""
    out = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            v = int(part)
        except ValueError:
            raise InputError(f"--tokens: {part!r} is not an integer", file="<command line>", field="tokens") from None
        if not 1 <= v <= 1 << 20:
            raise InputError(f"--tokens: {v} is not in [1, {1 << 20}]", file="<command line>", field="tokens")
        out.add(v)
    if not out:
        raise InputError("--tokens: give at least one token count, e.g. 1,16,256", file="<command line>", field="tokens")
    return sorted(out)


def rules_order(report: Report) -> list[str]:
    """The eligible runners in the rules' order: the plan's runner, then its alternatives."""
    if report.plan is None:
        return [c.backend for c in report.candidates if c.eligible]
    return [report.plan.runner, *report.plan.alternatives]


def candidates(report: Report, plans: Mapping[str, Plan], *, allow_jit: bool = False) -> tuple[list[str], dict[str, str]]:
    """The runners to time, in the rules' order, and those skipped with why: eligible for the deployment with an
    adapter (``report`` was made with ``require_adapter``), minus those whose first call would build kernels
    (``plan.jit``) unless ``allow_jit``. Refused candidates are neither timed nor listed."""
    names, skipped = [], {}
    for name in rules_order(report):
        cand = next((c for c in report.candidates if c.backend == name), None)
        if cand is None or not cand.eligible or cand.adapter is None:
            continue
        p = plans[name]
        if p.jit is not None and not allow_jit:
            skipped[name] = f"its first call would build kernels ({p.jit}); --allow-jit times it"
            continue
        names.append(name)
    return names, skipped


@dataclass
class Session:
    """What one tune times with: the deployment's ``report``, one plan per candidate (``plans``), the runners
    ``names`` to time (built, verified), those ``skipped`` with why, the ``timer``, the :class:`LayerKey` and
    :class:`MachineKey`, and the deployment as given (``deployment``, recorded for ``--check``)."""

    report: Any
    plans: dict[str, Any]
    names: list[str]
    skipped: dict[str, str]
    timer: Timer
    layer: LayerKey
    machine: MachineKey
    deployment: dict[str, Any] | None = None
    build_s: float = 0.0


def plan_each(report: Report, dep: Any, names: Iterable[str], *, environment: Any = None, **explain_kw: Any) -> dict[str, Plan]:
    """One plan per runner name: the deployment with ``runner`` set to it, on ``report``'s environment."""
    from .selector import explain

    out = {}
    for name in names:
        r = explain(dep.model_copy(update={"runner": name}), environment=environment or report.environment, **explain_kw)
        if r.plan is not None:
            out[name] = r.plan
    return out


def build_torch(plans: Mapping[str, Plan], names: Sequence[str], device: Any, *, allow_jit: bool = False, seed: int = 0,
                verify: Callable[[Any], Any] | None = None) -> tuple[dict[str, tuple[Any, Any]], dict[str, str]]:
    """Resolve each runner of ``names`` with ``verify=True`` (or ``verify(runner)`` when given), then prepare one
    shared set of seeded weights for it (:func:`~moe_select.harness.weights.layer_weights`). Returns the built
    ``{name: (runner, prepared weights)}`` and ``{name: why}`` for each refused or failed one (never timed)."""
    from .harness.weights import layer_weights
    from .layer import LayerSpec
    from .resolver import resolve

    built: dict[str, tuple[Any, Any]] = {}
    skipped: dict[str, str] = {}
    weights: dict[str, Any] | None = None
    for name in names:
        p = plans[name]
        try:
            runner = resolve(p, device=device, verify=verify is None, require_prebuilt=not allow_jit)
            if verify is not None:
                verify(runner)
            if weights is None:
                spec = LayerSpec.from_plan(p)
                weights = layer_weights(spec, p.deployment.model.as_dict(), seed, runner.device, generate_on=runner.device)
            w = dict(weights)
            pw = runner.prepare_weights(w.pop("w13"), w.pop("w2"), **w)
        except ResolveError as exc:
            skipped[name] = "; ".join(r.render() for r in exc.reasons)
            continue
        except (MoeSelectError, RuntimeError, ValueError, TypeError) as exc:
            skipped[name] = f"building it failed: {type(exc).__name__}: {exc}"
            continue
        built[name] = (runner, pw)
    return built, skipped


def tile_configs_of(runners: Iterable[Any]) -> str | None:
    """sha256 of the tuned Triton tile files the built ``runners`` read (:func:`measurements.tile_configs_of_cores`
    of their cores), None when none does."""
    from .measurements import tile_configs_of_cores

    return tile_configs_of_cores(r.core for r in runners)


def packages_of(plans: Iterable[Plan]) -> dict[str, str | None]:
    """The kernel packages the plans need (torch and triton have fields of their own), name -> the version found
    (None: absent, or present with no version found)."""
    out: dict[str, str | None] = {}
    for p in plans:
        for need in p.packages:
            if need.name not in ("torch", "triton"):
                out[need.name] = need.found if need.state != "absent" else None
    return dict(sorted(out.items()))


def open_session(dep: Any, *, device: Any = None, allow_jit: bool = False, rules_dirs: Sequence[str] = (),
                 backends_dirs: Sequence[str] = (), base_dir: Any = None, given: dict[str, Any] | None = None,
                 build: Callable[..., tuple[dict[str, tuple[Any, Any]], dict[str, str]]] = build_torch,
                 timer: Callable[[dict[str, tuple[Any, Any]], Any, Any], Timer] | None = None,
                 machine: MachineKey | None = None) -> Session:
    """Plan ``dep`` (a :class:`~moe_select.deployment.Deployment`) for this machine with ``require_adapter``, plan
    each eligible candidate, build and verify them (``build``) and make the ``timer`` (default
    :class:`TorchTimer`). Raises :class:`InputError` when the deployment names another machine (field ``arch`` or
    ``gpu``) and :class:`MoeSelectError` when no candidate is left to time."""
    from .resolver import torch_arch
    from .selector import explain
    from .vocab import gpu_arch

    on_cpu = device is not None and str(device).split(":")[0] == "cpu"
    here = "cpu" if on_cpu else torch_arch()[0]
    named = dep.arch if dep.arch not in (None, "auto") else (gpu_arch(dep.gpu) if dep.gpu else None)
    if named is not None and named != here:
        raise InputError(f"tune measures on this machine ({here}); the deployment is for {named}: run tune there, or "
                         "leave gpu and arch out", file=getattr(dep, "_file", None) or "<deployment>",
                         field="gpu" if dep.gpu else "arch")
    environment = None
    if on_cpu:  # the CPU of a GPU machine too: planned for arch cpu, as `moe-select run --device cpu`
        from .catalog import default_catalog
        from .environment import detect

        catalog = default_catalog(rules_dirs, backends_dirs)
        environment = detect(catalog.packages(), arch=("cpu", None), need_nvcc=False, markers=catalog.package_markers())
    dep = dep.model_copy(update={"arch": "cpu" if on_cpu else "auto", "gpu": None, "require_adapter": True, "runner": "auto"})
    kw: dict[str, Any] = {"rules_dirs": rules_dirs, "backends_dirs": backends_dirs, "base_dir": base_dir}
    report = explain(dep, environment=environment, **kw)
    plans = plan_each(report, dep, [c.backend for c in report.candidates if c.eligible], environment=environment, **kw)
    names, skipped = candidates(report, plans, allow_jit=allow_jit)
    t0 = time.perf_counter()
    built, failed = build(plans, names, device, allow_jit=allow_jit) if names else ({}, {})
    skipped.update(failed)
    names = [n for n in names if n in built]
    if not names:
        why = "; ".join(f"{k}: {v}" for k, v in skipped.items()) or "the selector finds no eligible runner with an adapter"
        raise MoeSelectError(f"tune: no candidate to time for {report.deployment.brief()}: {why}")
    u = report.deployment
    graph = bool(u.cuda_graph)
    if timer is None:
        first = built[names[0]][0]
        tm: Timer = TorchTimer(built, u.model.as_dict(), first.device, graph=graph,
                               dtype="float16" if u.quant == "fp16" else "bfloat16")
    else:
        tm = timer(built, u, device)
    if machine is None:
        machine = _machine_here(tm, plans, names, built, device)
    return Session(report=report, plans=plans, names=names, skipped=skipped, timer=tm, layer=layer_key(u), machine=machine,
                   deployment=given, build_s=time.perf_counter() - t0)


def _machine_here(tm: Timer, plans: Mapping[str, Plan], names: Sequence[str], built: Mapping[str, tuple[Any, Any]],
                  device: Any) -> MachineKey:
    from .measurements import this_machine

    dev = next(iter(built.values()))[0].device if built else device
    return this_machine(cuda_graph=tm.timing == "cuda_graph_replay", packages=packages_of(plans[n] for n in names),
                        tile_configs=tile_configs_of(r for r, _ in built.values()), device=dev)


def progress_bar(total: int, *, on: bool | None = None, file: TextIO | None = None, desc: str = "tune") -> Any:
    """A tqdm bar of ``total`` points on ``file`` (default stderr): drawn when ``on``, never when False, and on a
    terminal only when None."""
    from tqdm import tqdm

    out = file or sys.stderr
    if on is None:
        try:
            on = bool(out.isatty())
        except (AttributeError, ValueError):
            on = False
    return tqdm(total=total, desc=desc, unit="point", file=out, disable=not on, leave=True, dynamic_ncols=on and file is None,
                mininterval=0.2)


def run(session: Session, tokens: Sequence[int], settings: Settings = Settings(), *, progress: Any = None,
        clock: Callable[[], float] = time.perf_counter) -> Measurements:
    """Measure ``session``'s runners at ``tokens`` (:func:`measure`) and return the :class:`Measurements`."""
    t0 = clock()
    points = measure(session.names, tokens, session.timer, settings, clock=clock, progress=progress)
    method = Method(timing=session.timer.timing, interval=INTERVAL,  # type: ignore[arg-type]
                    target_rel_half_width=settings.target_rel_half_width, budget_s_per_point=settings.budget_s_per_point,
                    tie_rule=TIE_RULE, drift_threshold=settings.drift_threshold)
    return Measurements.model_validate({
        "kind": KIND, "schema": SCHEMA, "layer": session.layer.model_dump(), "machine": session.machine.model_dump(),
        "method": method.model_dump(), "created": utc_now(), "duration_s": session.build_s + (clock() - t0),
        "points": [p.model_dump() for p in points], "skipped": dict(session.skipped),
        **({"deployment": session.deployment} if session.deployment is not None else {})})


# ------------------------------------------------------------------------------------------ ranges, plot, check
def winners(m: Measurements, order: Sequence[str] = ()) -> list[tuple[int, str, list[str]]]:
    """Per measured token count: the fastest runner by median and the runners tied with it (intervals overlapping,
    :data:`~moe_select.measurements.TIE_RULE`); a tie goes to the first in ``order`` (the rules'), else by name.
    A helper for the plot and ``benchmarks/tune_check.py``; plans take theirs from the selector."""
    from .measurements import overlap

    rank = {n: i for i, n in enumerate(order)}
    out = []
    for t, row in m.table().items():
        fastest = min(row.values(), key=lambda p: p.median_us)
        tied = sorted((p.runner for p in row.values() if overlap(p, fastest)), key=lambda n: (rank.get(n, len(rank)), n))
        out.append((t, tied[0], tied))
    return out


def ranges(m: Measurements, order: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Token ranges from :func:`winners`: ``[{max_tokens, runner}, ..., {max_tokens: None, runner}]``, a boundary
    between measured counts a < b with different winners at ``floor(sqrt(a * b))``."""
    w = winners(m, order)
    out: list[dict[str, Any]] = []
    for (a, ra, _), (b, rb, _) in zip(w, w[1:]):
        if ra != rb:
            out.append({"max_tokens": math.isqrt(a * b), "runner": ra})
    out.append({"max_tokens": None, "runner": w[-1][1] if w else None})
    return out


def runner_for(rs: Sequence[Mapping[str, Any]], tokens: int) -> str:
    """The runner of ``tokens`` in ranges ``rs`` (the first range whose ``max_tokens`` is None or >= tokens)."""
    for r in rs:
        if r["max_tokens"] is None or tokens <= r["max_tokens"]:
            return str(r["runner"])
    raise ValueError("the ranges have no last range (max_tokens null)")


def plot(m: Measurements, path: str, *, floors: Mapping[int, float] | None = None, order: Sequence[str] = (),
         title: str | None = None) -> None:
    """Write a log-log plot of time per call against tokens, one line per runner with its 95 % intervals as error
    bars, the floor (``floors``: tokens -> microseconds) when known, and the switch points of :func:`ranges` as
    vertical lines. Raises :class:`MoeSelectError` when matplotlib is not installed (the ``plot`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MoeSelectError("--plot needs matplotlib: pip install 'moe-select[plot]' (or matplotlib)") from None
    fig, ax = plt.subplots(figsize=(8, 5))
    for name in m.runners():
        pts = sorted((p for p in m.points if p.runner == name), key=lambda p: p.tokens)
        ax.errorbar([p.tokens for p in pts], [p.median_us for p in pts],
                    yerr=[[p.median_us - p.ci_low_us for p in pts], [p.ci_high_us - p.median_us for p in pts]],
                    marker="o", ms=3, capsize=2, label=name)
    if floors:
        ts = sorted(floors)
        ax.plot(ts, [floors[t] for t in ts], "k--", lw=1, label="floor")
    for r in ranges(m, order)[:-1]:
        ax.axvline(r["max_tokens"] + 0.5, color="grey", lw=0.8, ls=":")
        ax.annotate(f"{r['max_tokens']}", (r["max_tokens"] + 0.5, 1), xycoords=("data", "axes fraction"), fontsize=7,
                    rotation=90, va="top", ha="right", color="grey")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens per rank")
    ax.set_ylabel(f"time per call (us, median, 95 % interval; {m.method.timing})")
    k = m.layer
    ax.set_title(title or f"{m.machine.gpu}: E={k.num_experts} K={k.top_k} H={k.hidden_size} I={k.intermediate_size} "
                          f"{k.activation} {k.format}", fontsize=9)
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def check_points(m: Measurements) -> list[tuple[str, int]]:
    """The points ``tune --check`` re-measures: each runner at the smallest, middle and largest of its token counts."""
    out = []
    for name in m.runners():
        ts = sorted(p.tokens for p in m.points if p.runner == name)
        for t in sorted({ts[0], ts[len(ts) // 2], ts[-1]}):
            out.append((name, t))
    return out


@dataclass(frozen=True)
class Drift:
    """One re-measured point: the old and new :class:`Point`, the relative change of the median and whether the
    new median lies in the old interval (``holds``); ``drifted`` when the change exceeds the threshold."""

    old: Point
    new: Point
    change: float
    holds: bool
    drifted: bool


def compare(old: Measurements, new_points: Sequence[Point], threshold: float) -> list[Drift]:
    """Each new point against the old one of the same runner and token count."""
    table = old.table()
    out = []
    for p in new_points:
        o = table[p.tokens][p.runner]
        change = p.median_us / o.median_us - 1
        out.append(Drift(o, p, change, o.ci_low_us <= p.median_us <= o.ci_high_us, abs(change) > threshold))
    return out


def check(old: Measurements, session: Session, settings: Settings, *, progress: Any = None,
          clock: Callable[[], float] = time.perf_counter, file: str = "<measurements>") -> tuple[list[Drift], list[str]]:
    """Re-measure :func:`check_points` of ``old`` with ``session`` (no early stop: every point gets its own median);
    returns the drifts and the runners of ``old`` that ``session`` can no longer time (each with why). Raises
    :class:`InputError` (field ``machine.<names>`` or ``layer.<names>``) when the keys differ."""
    from .measurements import layer_key_mismatch

    bad = [f"layer.{f}" for f in layer_key_mismatch(old, session.layer)]
    bad += [f"machine.{f}" for f in machine_key_mismatch(old, session.machine)]
    if bad:
        here = {**{f"layer.{k}": v for k, v in session.layer.model_dump().items()},
                **{f"machine.{k}": v for k, v in session.machine.model_dump().items()}}
        there = {**{f"layer.{k}": v for k, v in old.layer.model_dump().items()},
                 **{f"machine.{k}": v for k, v in old.machine.model_dump().items()}}
        raise InputError([_key_issue(file, f, there[f], here[f]) for f in bad])
    pts = check_points(old)
    missing = sorted({n for n, _ in pts if n not in session.names})
    gone = [f"{n}: {session.skipped.get(n, 'no longer a candidate here')}" for n in missing]
    plain = Settings(target_rel_half_width=settings.target_rel_half_width, budget_s_per_point=settings.budget_s_per_point,
                     margin=math.inf, first_batch=settings.first_batch, max_samples=settings.max_samples,
                     drift_threshold=settings.drift_threshold)
    new: list[Point] = []
    by_tokens: dict[int, list[str]] = {}
    for n, t in pts:
        if n in session.names:
            by_tokens.setdefault(t, []).append(n)
    for t, names in sorted(by_tokens.items()):
        new += measure(names, [t], session.timer, plain, clock=clock, progress=progress)
    return compare(old, new, settings.drift_threshold), gone


def _key_issue(file: str, field_name: str, there: Any, here: Any) -> Any:
    from .errors import Issue

    return Issue(file, 0, field_name, f"the file was measured with {there!r}; here it is {here!r}")


def render_points(m: Measurements) -> str:
    """A text table of ``m``: per token count, each runner's median, interval and spread, fastest first, then one line
    per token count naming the fastest runner and the runners tied with it (95 % intervals overlapping:
    :func:`~moe_select.measurements.overlap`; a plan breaks ties as ``explain --measurements`` says)."""
    from .measurements import overlap

    lines = [f"{'tokens':>7}  {'runner':<20} {'median us':>10}  {'95% interval':>21}  {'p10-p90':>19}  {'n':>5}  stopped"]
    verdicts = []
    for t, row in m.table().items():
        ranked = sorted(row.values(), key=lambda q: q.median_us)
        for p in ranked:
            lines.append(f"{t:>7}  {p.runner:<20} {p.median_us:>10.1f}  [{p.ci_low_us:>8.1f}, {p.ci_high_us:>8.1f}]  "
                         f"{p.p10_us:>8.1f}-{p.p90_us:<9.1f}  {p.samples:>5}  {p.stopped}")
        if ranked:
            tied = [p.runner for p in ranked[1:] if overlap(ranked[0], p)]
            verdicts.append(f"{t:>7}  fastest {ranked[0].runner}" + (f"; tied with {', '.join(tied)} (95 % intervals overlap: "
                                                                    "a plan from this file breaks the tie by the rules' "
                                                                    "order, explain names the winner)" if tied else ""))
    return "\n".join(lines + ["per token count:"] + verdicts)


def render_drift(drifts: Sequence[Drift], threshold: float) -> str:
    """A text table of ``tune --check``'s points."""
    lines = [f"{'runner':<20} {'tokens':>7}  {'old median':>10}  {'new median':>10}  {'change':>8}  old interval holds  verdict"]
    for d in drifts:
        lines.append(f"{d.new.runner:<20} {d.new.tokens:>7}  {d.old.median_us:>10.1f}  {d.new.median_us:>10.1f}  "
                     f"{d.change:>+8.1%}  {'yes' if d.holds else 'no':<18}  {'DRIFT' if d.drifted else 'ok'}")
    lines.append(f"drift threshold {threshold:.0%}: {sum(d.drifted for d in drifts)} of {len(drifts)} points drifted")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ the command
def _plot_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _settings(args: Any, method: Method | None = None) -> Settings:
    base = Settings()
    return Settings(target_rel_half_width=args.target if args.target is not None else
                    (method.target_rel_half_width if method else base.target_rel_half_width),
                    budget_s_per_point=args.budget_s if args.budget_s is not None else
                    (method.budget_s_per_point if method else base.budget_s_per_point),
                    drift_threshold=args.drift_threshold if args.drift_threshold is not None else
                    (method.drift_threshold if method else base.drift_threshold))


def _given_deployment(dep: Any) -> dict[str, Any]:
    """The deployment as given (its set keys, by their file names), as recorded in the measurement file."""
    out: dict[str, Any] = dep.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)
    return out


def cli_tune(args: Any, deployment: Callable[..., tuple[Any, Any]], has_deployment: bool,
             write_atomically: Callable[[Path, str], None]) -> int:
    """Body of ``moe-select tune`` (``deployment(args)`` reads the deployment flags as ``explain`` does;
    ``has_deployment``: whether any was given; ``write_atomically``: the CLI's writer of ``-o``, passed in so that
    this module does not import the CLI). Exit codes: 0 written / no drift; 1 no candidate, or drift
    (``--check``); 2 invalid input, ``--plot`` without matplotlib, or ``--check`` on another machine or layer."""
    import json

    from .deployment import deployment_from_dict
    from .measurements import load_measurements

    if args.plot and not _plot_available():
        raise InputError("--plot needs matplotlib, which is not installed: pip install 'moe-select[plot]' (or matplotlib), "
                         "or leave --plot out", file="<command line>", field="plot")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA device is available on this machine", file="<command line>", field="device")
    old = None
    if args.check:
        if args.plot or args.tokens:
            raise InputError("--check re-measures the file's own points: --plot and --tokens do not apply",
                             file="<command line>", field="check")
        found = load_measurements(args.check)
        if len(found) != 1:
            raise InputError(f"--check takes one measurement file; {args.check} holds {len(found)}", file=str(args.check),
                             field="check")
        old = found[0]
    if has_deployment and old is not None and old.deployment is not None and not getattr(args, "deployment", None) \
            and not getattr(args, "from_command", None):
        # --check FILE with flags: the file's recorded deployment, the flags over it (README: flags or -d override)
        dep, base = deployment(args, base_data=dict(old.deployment), base_file=str(args.check))
        given = _given_deployment(dep)
        if isinstance(given.get("model_config"), str) and base is not None:
            given["model_config"] = str((Path(base) / given["model_config"]).resolve())
    elif has_deployment:
        dep, base = deployment(args)
        given = _given_deployment(dep)
        if isinstance(given.get("model_config"), str) and base is not None:  # --check may run from another folder
            given["model_config"] = str((Path(base) / given["model_config"]).resolve())
    elif old is not None and old.deployment is not None:
        dep, base, given = deployment_from_dict(dict(old.deployment), str(args.check)), Path(args.check).resolve().parent, old.deployment
    else:
        raise InputError("give --deployment FILE or deployment flags (see moe-select tune --help)" +
                         (f"; {args.check} records no deployment" if old is not None else ""), file="<command line>")
    settings = _settings(args, old.method if old is not None else None)
    given_tokens = parse_tokens(args.tokens) if args.tokens is not None else None  # refused before anything is built
    launch = getattr(args, "launch", None)
    session = open_session(dep, device=args.device, allow_jit=args.allow_jit, rules_dirs=args.rules,
                           backends_dirs=getattr(args, "backends", []), base_dir=base, given=given)
    out = sys.stdout
    for name, why in session.skipped.items():
        print(f"moe-select tune: not timed: {name}: {why}", file=sys.stderr)
    if old is not None:
        pts = check_points(old)
        bar = progress_bar(len(pts), on=args.progress, desc="tune --check")
        try:
            drifts, gone = check(old, session, settings, progress=bar, file=str(args.check))
        finally:
            bar.close()
        print(render_drift(drifts, settings.drift_threshold), file=out)
        for line in gone:
            print(f"cannot re-measure {line}", file=out)
        if args.json:
            print(json.dumps({"drift_threshold": settings.drift_threshold, "gone": gone, "points": [
                {"runner": d.new.runner, "tokens": d.new.tokens, "old": d.old.model_dump(), "new": d.new.model_dump(),
                 "change": d.change, "old_interval_holds": d.holds, "drifted": d.drifted} for d in drifts]}, indent=1), file=out)
        return 1 if gone or any(d.drifted for d in drifts) else 0
    u = session.report.deployment
    tokens = given_tokens or default_tokens(u, launch_capture_sizes(launch, u.decode_tokens_per_rank))
    print(f"moe-select tune: {', '.join(session.names)} at {len(tokens)} token counts ({tokens[0]}..{tokens[-1]}), "
          f"{session.timer.timing}, target +-{settings.target_rel_half_width:.0%}, budget {settings.budget_s_per_point:g} s "
          f"per point", file=sys.stderr)
    bar = progress_bar(len(tokens) * len(session.names), on=args.progress)
    try:
        m = run(session, tokens, settings, progress=bar)
    finally:
        bar.close()
    text = m.to_json()
    table = render_points(m)
    if args.output and args.output != "-":
        write_atomically(Path(args.output), text)
        print(table, file=out)
        print(f"measurements written to {args.output} ({m.duration_s:.1f} s; fingerprint {m.fingerprint()[:16]}...)", file=sys.stderr)
    else:
        print(table, file=sys.stderr)
        out.write(text)
    if args.plot:
        plot(m, args.plot, order=rules_order(session.report))
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0
