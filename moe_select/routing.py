"""Routing (top-k expert selection) in PyTorch, for ``moe-select run``, tests and benchmarks.

Methods follow the models' own router code (Hugging Face transformers / SGLang):
- ``softmax_topk``: softmax over all experts, top-k, no renormalisation (Qwen1.5-MoE, OLMoE).
- ``renormalize``: softmax, top-k, weights renormalised to sum to 1 (Qwen3-MoE; equal to top-k on the
  logits then softmax over the k, as Mixtral, Granite-MoE and gpt-oss do).
- ``deepseek_v3``: sigmoid scores plus a correction bias choose ``topk_group`` of ``n_group`` groups
  (by the sum of each group's top-2), then top-k inside them; weights are the unbiased sigmoid scores,
  renormalised, times ``routed_scaling_factor``.
- ``llama4``: top-k on the logits, weight = sigmoid(logit).
- ``sigmoid_topk``: sigmoid scores plus the correction bias choose the top-k (no groups); weights are the
  unbiased scores, renormalised (MiniMax-M2: ``scoring_func: sigmoid``, ``use_routing_bias``).
Returns ``topk_weights [T, K] float32`` and ``topk_ids [T, K] int32``.
"""
from __future__ import annotations

import torch


def route(logits: torch.Tensor, method: str, top_k: int, *, n_group: int | None = None, topk_group: int | None = None,
          routed_scaling_factor: float | None = None, correction_bias: torch.Tensor | None = None
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Route ``logits [T, E]`` with ``method``. Raises ValueError for an unknown method."""
    logits = logits.float()
    if method in ("softmax_topk", "renormalize"):
        probs = torch.softmax(logits, dim=-1)
        w, ids = probs.topk(top_k, dim=-1)
        if method == "renormalize":
            w = w / w.sum(dim=-1, keepdim=True)
    elif method == "sigmoid_topk":
        scores = torch.sigmoid(logits)
        biased = scores + (correction_bias.float() if correction_bias is not None else 0.0)
        ids = biased.topk(top_k, dim=-1).indices
        w = scores.gather(1, ids)
        w = w / w.sum(dim=-1, keepdim=True)
    elif method == "llama4":
        vals, ids = logits.topk(top_k, dim=-1)
        w = torch.sigmoid(vals)
    elif method == "deepseek_v3":
        t, e = logits.shape
        scores = torch.sigmoid(logits)
        biased = scores + (correction_bias.float() if correction_bias is not None else 0.0)
        ng, tg = n_group or 1, topk_group or 1
        if e % ng:
            raise ValueError(f"num_experts {e} is not divisible by n_group {ng}")
        group_scores = biased.view(t, ng, e // ng).topk(min(2, e // ng), dim=-1).values.sum(-1)
        keep = torch.zeros_like(group_scores).scatter_(1, group_scores.topk(tg, dim=-1).indices, 1.0)
        mask = keep.repeat_interleave(e // ng, dim=1).bool()
        ids = biased.masked_fill(~mask, float("-inf")).topk(top_k, dim=-1).indices
        w = scores.gather(1, ids)
        w = w / w.sum(dim=-1, keepdim=True) * (routed_scaling_factor or 1.0)
    else:
        raise ValueError(f"unknown routing method {method!r}")
    return w.float().contiguous(), ids.to(torch.int32).contiguous()
