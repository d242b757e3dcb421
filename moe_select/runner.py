"""``MoeRunner``: a token dispatcher (a2a) composed with an expert compute core, as ``resolve`` builds it.

The hot path (``run``) does no imports, string parsing or registry look-ups: it checks shapes, dtypes
and devices with plain attribute compares, then calls the dispatcher, which calls the core.

A plan chosen by measurement (issue 25) has one core per token range: ``run`` picks the core on the host from
``hidden_states.shape[0]`` (a Python int: no device synchronisation, so a forward captured in a CUDA graph at one
batch size holds that size's core), by a bisection over the ranges' bounds. ``prepare_weights`` prepares the
weights once per distinct runner of the ranges: the prepared sets are kept side by side (their layouts differ),
so a plan of two runners holds two prepared copies of the layer's weights.
"""
from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Any, Sequence

import torch

from .errors import RunnerInputError, RunnerOutputError
from .layer import LayerSpec

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from .contracts import ExpertCore, TokenDispatcher
    from .plans import Plan

_ID_DTYPES = (torch.int32, torch.int64)
_ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


class PreparedWeights:
    """Weights converted once by ``MoeRunner.prepare_weights``; opaque, tied to the runner that made them."""

    __slots__ = ("owner", "data")

    def __init__(self, owner: "MoeRunner", data: Any):
        self.owner = owner
        self.data = data


class MoeRunner:
    """A ready MoE layer runner for one rank.

    ``plan``: the :class:`~moe_select.plans.Plan` it was resolved from; ``spec``: this rank's
    :class:`~moe_select.layer.LayerSpec`; ``device``: where tensors must live. ``ranges``: for a plan chosen by
    measurement, ``(max_tokens, runner, core)`` per token range, ascending, the last ``max_tokens`` None (``core``
    is then the core of the plan's own runner, one of them).
    """

    def __init__(self, plan: Plan, spec: LayerSpec, core: ExpertCore[Any], dispatcher: TokenDispatcher,
                 device: torch.device | str, ranges: Sequence[tuple[int | None, str, ExpertCore[Any]]] | None = None):
        self.plan = plan
        self.spec = spec
        self.core = core
        self.dispatcher = dispatcher
        self.device = torch.device(device)
        #: The ranges' runners in order of first appearance (one prepared weight set each), the range bounds
        #: (``max_tokens`` of every range but the last), and for each range the index of its runner.
        self.range_runners: tuple[str, ...] = ()
        self._bounds: list[int] = []
        self._slots: tuple[int, ...] = ()
        self._cores: tuple[ExpertCore[Any], ...] = ()
        if ranges:
            if ranges[-1][0] is not None or any(b is None for b, _, _ in ranges[:-1]):
                raise ValueError("ranges: every range but the last has a max_tokens; the last has none")
            bounds = [int(b) for b, _, _ in ranges[:-1]]  # type: ignore[arg-type]
            if bounds != sorted(set(bounds)):
                raise ValueError(f"ranges: max_tokens must ascend strictly, got {bounds}")
            names = list(dict.fromkeys(n for _, n, _ in ranges))
            by_name = {n: c for _, n, c in ranges}
            self.range_runners = tuple(names)
            self._bounds = bounds
            self._slots = tuple(names.index(n) for _, n, _ in ranges)
            self._cores = tuple(by_name[n] for n in names)
        self._check = True
        #: Also check that every top-k id is in [-1, num_experts). On by default on the CPU; off on GPUs,
        #: where it costs a host synchronisation (and breaks CUDA-graph capture): turn it on to debug.
        self.check_ids = self.device.type == "cpu"

    @property
    def name(self) -> str:
        """The runner's name (the plan's runner)."""
        return self.plan.runner

    def runner_for(self, tokens: int) -> str:
        """The runner ``run`` uses for a forward of ``tokens`` tokens (the plan's runner without ranges)."""
        if not self._slots:
            return self.plan.runner
        return self.range_runners[self._slots[bisect_left(self._bounds, tokens)]]

    def per_range(self) -> list["MoeRunner"]:
        """One single-core runner per distinct runner of the ranges (each with a plan of that runner alone, as
        :func:`moe_select.plans.range_view` makes it), sharing this runner's dispatcher; ``[self]`` without
        ranges. ``resolve(verify=True)`` checks each against the float64 reference."""
        if not self._slots:
            return [self]
        from .plans import range_view

        rows = {r.runner: r for r in self.plan.range_runners}
        return [MoeRunner(range_view(self.plan, rows[n]), self.spec, c, self.dispatcher, self.device)
                for n, c in zip(self.range_runners, self._cores)]

    def prepare_weights(self, w13: torch.Tensor, w2: torch.Tensor, **scales: torch.Tensor) -> PreparedWeights:
        """Convert canonical weights once, at load.

        ``w13 [E_local, 2*I, H]`` (gate rows then up rows; ``[E_local, I, H]`` for relu2), ``w2
        [E_local, H, I]``, on ``self.device``; ``E_local = num_experts / ep``, ``I`` per rank.
        ``scales``: ``w13_<name>``/``w2_<name>`` for each scale of the format's row in ``backends/formats.yaml``
        (``scale``; nvfp4 also ``global_scale``; the int formats ``zeros``, and GPTQ's ``g_idx``; shapes:
        :mod:`moe_select.ops`; 4-bit weights are packed two per byte along the last dimension; fp8_block scales on the
        plan's block, ``spec.block_shape``), and ``w13_bias [E_local, 2*I]`` / ``w2_bias [E_local, H]`` (gpt-oss's
        expert biases) where the runner takes them. Checkpoint layouts go through the converters first
        (:mod:`moe_select.checkpoint_layouts`: gpt-oss ``*_blocks``/``*_scales``, ModelOpt NVFP4;
        :mod:`moe_select.quant_int`: AWQ/GPTQ); each runner's own ``prepare_weights`` documents what it takes.
        Raises :class:`RunnerInputError` naming the tensor and the expected shape/dtype/device."""
        s = self.spec
        pk = s.k_pack
        want13 = (s.num_local_experts, s.w13_rows, s.hidden_size // pk)
        want2 = (s.num_local_experts, s.hidden_size, s.intermediate_size // pk)
        packed = f"/{pk} (packed)" if pk > 1 else ""
        for name, t, want in (("w13", w13, want13), ("w2", w2, want2)):
            if not isinstance(t, torch.Tensor):
                raise RunnerInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if tuple(t.shape) != want:
                raise RunnerInputError(f"{name} must be [E_local, {'2*I' if name == 'w13' and s.gated else 'I' if name == 'w13' else 'H'}, "
                                       f"{'H' if name == 'w13' else 'I'}{packed}] = {list(want)} for this rank "
                                       f"(E={s.num_experts}, ep={s.ep}, I per rank={s.intermediate_size}), got {list(t.shape)}")
            if t.device != self.device and not (t.device.type == self.device.type and self.device.index is None):
                raise RunnerInputError(f"{name} is on {t.device}; this runner runs on {self.device}")
        from .formats import lookup

        row = lookup(s.quant)
        takes = ", ".join(f"w13_{c.name}/w2_{c.name} {c.shape} {c.dtype}" + (" (optional)" if c.optional else "")
                          for c in (row.scales if row is not None else []))
        known = {f"w{p}_{c.name}" for c in (row.scales if row is not None else []) for p in ("13", "2")} \
            | {"w13_bias", "w2_bias", "w13_g_idx", "w2_g_idx"}
        unknown = sorted(set(scales) - known)
        if unknown:
            raise RunnerInputError(f"prepare_weights for {s.quant}: unknown argument{'s' if len(unknown) > 1 else ''} "
                                   f"{', '.join(unknown)}; {s.quant} takes " + (takes or "no scales")
                                   + " and, where the runner takes them, w13_bias/w2_bias (backends/formats.yaml)")
        for name, t in scales.items():
            if t is not None and not isinstance(t, torch.Tensor):
                raise RunnerInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        # float32 scales (the format row's dtype): another dtype would be converted silently (bf16 drops 16 bits of the
        # scale), and a NaN or infinite scale poisons every output it touches
        for c in (row.scales if row is not None else []):
            for p in ("13", "2"):
                sc = scales.get(f"w{p}_{c.name}")
                if sc is None or c.dtype != "float32":
                    continue
                if sc.dtype != torch.float32:
                    raise RunnerInputError(f"w{p}_{c.name}: {s.quant} scales must be float32 (backends/formats.yaml), got "
                                           f"{sc.dtype}")
                if not bool(torch.isfinite(sc).all()):
                    raise RunnerInputError(f"w{p}_{c.name} holds NaN or infinite values: a scale must be finite")
        import inspect

        for core in self._cores or (self.core,):
            # a keyword this runner's core does not take: say which scales the format takes. Only the call's binding is
            # the caller's error: a TypeError raised inside the core is the core's, and keeps its traceback (a trial:
            # a core's own bug was reported as the caller's scales, from None)
            try:
                inspect.signature(core.prepare_weights).bind(w13, w2, **scales)
            except TypeError as exc:
                raise RunnerInputError(f"prepare_weights for {s.quant} ({self.plan.runner}): {exc}; {s.quant} takes "
                                       + (takes or "no scales") + " (backends/formats.yaml)") from None
            except ValueError:   # no signature to read (a builtin): the call decides
                pass
        if self._cores:  # one prepared set per runner of the ranges (layouts differ: module doc)
            return PreparedWeights(self, tuple(c.prepare_weights(w13, w2, **scales) for c in self._cores))
        return PreparedWeights(self, self.core.prepare_weights(w13, w2, **scales))

    def run(self, hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
            weights: PreparedWeights) -> torch.Tensor:
        """The MoE layer: ``hidden_states [T, H]`` (float), ``topk_ids [T, K]`` (int32/int64, global
        expert ids), ``topk_weights [T, K]`` float32 -> ``[T, H]`` in ``hidden_states.dtype``.

        With tp or ep > 1 and ``a2a: none`` the result is this rank's partial sum. Raises
        :class:`RunnerInputError` on an input that is no tensor, a wrong shape, dtype or device, or weights from another
        runner; :class:`RunnerOutputError` where the core returns no ``[T, H]`` tensor of the input's dtype."""
        if self._check:
            s = self.spec
            for name, t in (("hidden_states", hidden_states), ("topk_ids", topk_ids), ("topk_weights", topk_weights)):
                if not isinstance(t, torch.Tensor):
                    raise RunnerInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            hs, ids, tw = hidden_states.shape, topk_ids.shape, topk_weights.shape
            if len(hs) != 2 or hs[1] != s.hidden_size:
                raise RunnerInputError(f"hidden_states must be [T, H={s.hidden_size}], got {list(hs)}")
            if len(ids) != 2 or ids[1] != s.top_k or ids[0] != hs[0]:
                raise RunnerInputError(f"topk_ids must be [T={hs[0]}, K={s.top_k}], got {list(ids)}")
            if tw != ids:
                raise RunnerInputError(f"topk_weights must be [T={hs[0]}, K={s.top_k}], got {list(tw)}")
            if topk_ids.dtype not in _ID_DTYPES:
                raise RunnerInputError(f"topk_ids must be int32 or int64, got {topk_ids.dtype}")
            if topk_weights.dtype != torch.float32:
                raise RunnerInputError(f"topk_weights must be float32, got {topk_weights.dtype}")
            if hidden_states.dtype not in _ACT_DTYPES:
                raise RunnerInputError(f"hidden_states must be bfloat16, float16, float32 or float64, got {hidden_states.dtype}")
            dev = hidden_states.device
            if dev.type != self.device.type or topk_ids.device != dev or topk_weights.device != dev:
                raise RunnerInputError(f"hidden_states ({dev}), topk_ids ({topk_ids.device}) and topk_weights "
                                       f"({topk_weights.device}) must all be on {self.device}")
            if not isinstance(weights, PreparedWeights) or weights.owner is not self:
                raise RunnerInputError("weights must come from this runner's prepare_weights")
            if self.check_ids and topk_ids.numel():
                lo, hi = int(topk_ids.min()), int(topk_ids.max())
                if lo < -1 or hi >= s.num_experts:
                    raise RunnerInputError(f"topk_ids must be global expert ids in [0, {s.num_experts}) or -1 (skipped); "
                                           f"got values in [{lo}, {hi}]")
        if self._slots:  # one core per token range: picked on the host, no device sync
            i = self._slots[bisect_left(self._bounds, hidden_states.shape[0])]
            out = self.dispatcher.run(self._cores[i], hidden_states, topk_ids, topk_weights, weights.data[i])
        else:
            out = self.dispatcher.run(self.core, hidden_states, topk_ids, topk_weights, weights.data)
        if self._check and (not isinstance(out, torch.Tensor) or out.shape != hidden_states.shape
                            or out.dtype != hidden_states.dtype):
            got = f"{list(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
            raise RunnerOutputError(f"{self.plan.runner} returned {got}; the runner contract is [T, H] = "
                                    f"{list(hidden_states.shape)} {hidden_states.dtype} (the input's dtype)")
        return out

    def __repr__(self) -> str:
        s = self.spec
        path = getattr(self.core, "path", None)  # a core with several implementations says which one runs
        if self._slots:
            lo, parts = 1, []
            for b, slot in zip([*self._bounds, None], self._slots):
                parts.append(f"{lo}-{b}: {self.range_runners[slot]}" if b is not None else f">={lo}: {self.range_runners[slot]}")
                lo = (b or 0) + 1
            return (f"MoeRunner(ranges [{'; '.join(parts)}], a2a={self.plan.a2a}, {s.quant}, E={s.num_experts} (local "
                    f"{s.num_local_experts}), K={s.top_k}, H={s.hidden_size}, I={s.intermediate_size}, device={self.device})")
        return (f"MoeRunner({self.plan.runner}, a2a={self.plan.a2a}, {s.quant}, E={s.num_experts} (local "
                f"{s.num_local_experts}), K={s.top_k}, H={s.hidden_size}, I={s.intermediate_size}, device={self.device}"
                f"{'' if path is None else f', path={path}'})")
