"""``a2a: none``: no all-to-all kernel. Two token layouts, chosen explicitly (never switched on tp/ep):

- ``replicated`` (the default that ``resolve`` builds): every rank of the MoE group passes the same
  tokens, and ``run`` returns this rank's **partial sum** (its experts ``[expert_offset, +E/ep)`` and
  its intermediate slice). The layer's output is the sum over the group: the engine reduces it, or
  calls :func:`moe_select.parallel.all_reduce`. This is pure tensor parallelism, and expert parallelism
  with replicated tokens.
- ``sharded`` (:func:`moe_select.parallel.set_tokens`): each rank passes its own tokens (any number,
  also 0). ``run`` all-gathers them (padded to the largest rank's count: ids -1, weights 0), runs the
  local experts on every gathered token, and reduce-scatters the partial sums, so each rank gets the
  **complete** output of its own tokens. This is expert parallelism without an all-to-all kernel.

Both keep the core's standard (token-major) format: rows are tokens, ``topk_ids [T, K]`` global ids.
Reductions add in the activation dtype (what NCCL and gloo do for bf16).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moe_select.contracts import Registrar
from moe_select.parallel import TOKEN_LAYOUTS, DispatchError, check_layout

if TYPE_CHECKING:  # pragma: no cover - annotations only: torch loads at the first sharded run
    import torch

    from moe_select.contracts import ExpertCore
    from moe_select.layer import LayerSpec


def _all_gather(out: Any, inp: Any, group: Any) -> None:
    import torch.distributed as dist

    # torch renamed all_gather_into_tensor to all_gather_single (same collective); use what exists.
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp, group=group)


def _reduce_scatter(out: Any, inp: Any, group: Any) -> None:
    import torch.distributed as dist

    (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp, group=group)


class NoDispatch:
    """Identity (``replicated``) or all-gather/reduce-scatter (``sharded``) dispatch; see module doc.

    ``spec``: this rank's :class:`~moe_select.layer.LayerSpec`; ``group``: the MoE process group (may be
    None for ``replicated``; ``sharded`` needs it, of size tp). Raises
    :class:`~moe_select.parallel.DispatchError` for an unknown layout or a group that does not fit."""

    format = "standard"
    token_layouts = TOKEN_LAYOUTS

    def __init__(self, spec: LayerSpec, group: Any = None, *, tokens: str = "replicated"):
        if tokens not in TOKEN_LAYOUTS:
            raise DispatchError(f"a2a none: tokens must be one of {', '.join(TOKEN_LAYOUTS)}, got {tokens!r}")
        self.spec = spec
        self.group = group
        self.tokens = tokens
        self.output = "partial" if tokens == "replicated" else "complete"
        if tokens == "sharded":
            self.rank, self.size = check_layout(spec, group, "a2a none (sharded tokens)")

    def run(self, core: ExpertCore[Any], hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
            weights: Any) -> torch.Tensor:
        """``hidden_states [T, H]``, ``topk_ids [T, K]`` (global ids), ``topk_weights [T, K]`` float32 ->
        ``[T, H]`` in ``hidden_states.dtype``: partial (replicated) or complete (sharded) output."""
        if self.tokens == "replicated":
            return core.forward(hidden_states, topk_ids, topk_weights, weights)
        return self._run_sharded(core, hidden_states, topk_ids, topk_weights, weights)

    def _run_sharded(self, core: ExpertCore[Any], x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor,
                     weights: Any) -> torch.Tensor:
        import torch

        g, size = self.group, self.size
        n, h = x.shape
        k = ids.shape[1]
        counts = torch.empty(size, dtype=torch.int64, device=x.device)
        _all_gather(counts, torch.tensor([n], dtype=torch.int64, device=x.device), g)
        m = int(counts.max())  # host sync: the padded length
        px = x.new_zeros(m, h)
        px[:n] = x
        pid = torch.full((m, k), -1, dtype=torch.int32, device=x.device)
        pid[:n] = ids
        pw = torch.zeros(m, k, dtype=torch.float32, device=x.device)
        pw[:n] = wts
        gx, gid, gw = x.new_empty(size * m, h), pid.new_empty(size * m, k), pw.new_empty(size * m, k)
        for out, inp in ((gx, px), (gid, pid), (gw, pw)):
            _all_gather(out, inp, g)
        partial = core.forward(gx, gid, gw, weights).contiguous()  # [size*m, H]: rank j's tokens at rows [j*m, j*m+m)
        out = x.new_empty(m, h)
        _reduce_scatter(out, partial, g)
        return out[:n]


def register(registry: Registrar) -> None:
    """Register :class:`NoDispatch` as the ``none`` dispatcher."""
    registry.register_dispatcher("none", NoDispatch)
