"""``a2a: torch``: token dispatch with ``torch.distributed.all_to_all_single`` (NCCL on GPUs, gloo on CPUs).

Each rank passes **its own tokens** (any number, also 0) and gets the **complete** layer output for
them (no further reduction). Standard (token-major) format on both sides.

Payload, per (token, destination rank) pair: a token is sent once to each rank that holds at least one
of its K experts: the ``tp/ep`` ranks of that expert's EP group, each of which holds one intermediate
slice. The row carries ``x [H]`` (activation dtype), ``topk_ids [K]`` int32 with the ids of experts
*not* on the destination's EP group set to -1, and ``topk_weights [K]`` float32 (0 where masked).

1. exchange split sizes: ``all_to_all_single`` of the per-destination row counts (int64), then the
   counts go to the host (one sync: not CUDA-graph capturable, as ``backends/a2a/torch.yaml`` says);
2. three ``all_to_all_single`` calls move x, ids and weights (uneven splits);
3. the receiving rank calls ``core.forward`` on the received rows: each output row is the routing-
   weighted sum over that rank's experts (and intermediate slice) of the token's expert outputs,
   computed by the core in float32 and rounded once to the activation dtype; the weight is applied on
   the expert side;
4. one ``all_to_all_single`` sends the rows back in the same order;
5. combine: the returned rows of each token are summed in float32 (``index_add_``) and rounded once.
   Against a single-rank run, each returned row adds one rounding to the activation dtype (exact in
   float32/float64 up to summation order).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moe_select.contracts import Registrar
from moe_select.parallel import check_layout

if TYPE_CHECKING:  # pragma: no cover - annotations only: torch loads at the first run
    import torch

    from moe_select.contracts import ExpertCore
    from moe_select.layer import LayerSpec


class TorchAllToAll:
    """``all_to_all_single`` dispatcher for one rank; see module doc.

    ``spec``: this rank's :class:`~moe_select.layer.LayerSpec`; ``group``: the MoE process group
    (size tp, rank ``ep_rank * tp/ep + tp_rank``). Raises
    :class:`~moe_select.parallel.DispatchError` when the group is missing or does not fit the spec."""

    format = "standard"
    output = "complete"
    tokens = "own"
    token_layouts = ()

    def __init__(self, spec: LayerSpec, group: Any):
        self.spec = spec
        self.group = group
        self.rank, self.size = check_layout(spec, group, "a2a torch")
        self.moe_tp = spec.tp // spec.ep

    def run(self, core: ExpertCore[Any], hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
            weights: Any) -> torch.Tensor:
        """``hidden_states [T, H]``, ``topk_ids [T, K]`` (global ids; -1 skipped), ``topk_weights [T, K]``
        float32 -> ``[T, H]`` in ``hidden_states.dtype``: the layer's output for these tokens."""
        import torch
        import torch.distributed as dist

        s, g, x = self.spec, self.group, hidden_states
        t, h = x.shape
        dev = x.device
        ids = topk_ids.to(torch.int64)
        owner = torch.where(ids >= 0, ids // s.num_local_experts, torch.full_like(ids, -1))  # [T, K] EP rank
        ep_ranks = torch.arange(s.ep, device=dev)
        hit = (owner[:, :, None] == ep_ranks).any(dim=1)  # [T, ep]
        hit = hit[:, :, None].expand(t, s.ep, self.moe_tp).reshape(t, self.size)  # [T, ranks]
        dest, tok = hit.t().nonzero(as_tuple=True)  # pairs sorted by destination rank, then token
        send_counts = hit.sum(dim=0).to(torch.int64)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=g)
        sc, rc = send_counts.tolist(), recv_counts.tolist()
        keep = owner[tok] == (dest // self.moe_tp)[:, None]  # [N, K] slots held by the destination
        send = (x[tok].contiguous(), torch.where(keep, ids[tok], -1).to(torch.int32),
                torch.where(keep, topk_weights[tok].float(), 0.0))
        m = sum(rc)
        recv = tuple(v.new_empty((m,) + tuple(v.shape[1:])) for v in send)
        for out, inp in zip(recv, send):
            dist.all_to_all_single(out, inp, rc, sc, group=g)
        y = core.forward(recv[0], recv[1], recv[2], weights).contiguous()  # [M, H], weights applied
        back = x.new_empty(tok.shape[0], h)
        dist.all_to_all_single(back, y, sc, rc, group=g)
        return combine(tok, back, t)


def combine(token_of_row: torch.Tensor, rows: torch.Tensor, tokens: int) -> torch.Tensor:
    """Sum the returned ``rows [N, H]`` (each a rank's partial output of token ``token_of_row[n]``) per
    token in float32 and round once: ``[tokens, H]`` in ``rows.dtype``. A bf16 running sum would round
    after every addition (1 + 2^-8 + 2^-8 gives 1 in bf16, 1.0078125 summed in float32 then rounded)."""
    import torch

    out = torch.zeros(tokens, rows.shape[1], dtype=torch.float32, device=rows.device)
    out.index_add_(0, token_of_row, rows.float())
    return out.to(rows.dtype)


def register(registry: Registrar) -> None:
    """Register :class:`TorchAllToAll` as the ``torch`` dispatcher."""
    registry.register_dispatcher("torch", TorchAllToAll)
