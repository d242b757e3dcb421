"""The MoE layer's shape (:class:`ModelShape`) and the bounds on its sizes, shared by deployments, model
configs and plans."""
from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from .located import Located
from .vocab import Activation, Routing

#: Most routed experts a config may declare. Published MoE models have at most a few hundred (DeepSeek-V3:
#: 256); the bound keeps shape arithmetic, fix enumeration and run's memory estimate meaningful.
MAX_EXPERTS = 1 << 16
#: Largest hidden size or expert width (``moe_intermediate_size``) a config may declare. Published models:
#: hidden 7168 (DeepSeek-V3), expert width 14336 (Mixtral); 2**20 is far above any.
MAX_WIDTH = 1 << 20


class ModelShape(Located):
    """The MoE layer's shape: ``num_experts`` routed experts (E), ``top_k`` (K), ``hidden_size`` (H),
    ``moe_intermediate_size`` (I, per expert, before tensor parallelism), the gated ``activation`` and the
    ``routing`` method. Optional router parameters are used by ``moe-select run`` only. ``architecture``: the
    checkpoint's model class (config.json ``architectures[0]``), read by facts that hold for some model architectures
    only (``when.architecture``); None (an inline ``model`` without it): those facts are not decided (unverified)."""

    num_experts: int = Field(gt=0)
    top_k: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    moe_intermediate_size: int = Field(gt=0)
    activation: Activation = "silu"
    routing: Routing = "renormalize"
    num_shared_experts: int = Field(default=0, ge=0)
    n_group: int | None = Field(default=None, gt=0)
    topk_group: int | None = Field(default=None, gt=0)
    routed_scaling_factor: float | None = None
    swiglu_limit: float | None = None
    shared_expert_intermediate_size: int | None = Field(default=None, gt=0)
    dense_intermediate_size: int | None = Field(default=None, gt=0)
    architecture: str | None = Field(default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    #: The attention heads (config.json ``num_attention_heads``): an engine splits them over its tensor-parallel ranks,
    #: so a tp that does not divide them is refused at startup (a fact of ``backends/common.yaml``; tp fixes avoid it).
    #: None (an inline ``model`` without it): not checked.
    num_attention_heads: int | None = Field(default=None, gt=0)

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain mapping, unset optional ones (None) left out: how a plan writes
        ``deployment.model`` and how ``explain`` lists it."""
        return self.model_dump(exclude_none=True)

    @model_validator(mode="after")
    def _k_le_e(self) -> "ModelShape":
        """Cross-field and range checks (kept out of the field constraints so the JSON Schemas stay as
        they are): top_k at most num_experts; num_experts and num_shared_experts at most
        ``MAX_EXPERTS``, hidden_size and moe_intermediate_size at most ``MAX_WIDTH`` (far above any
        published model: huge values are typos or attacks, and would reach shape arithmetic and run's
        memory estimate); n_group divides num_experts and topk_group is at most n_group (the
        deepseek_v3 router splits the experts into n_group groups and keeps topk_group of them);
        routed_scaling_factor and swiglu_limit finite and positive; swiglu_limit given only with a clamped
        activation (swiglu_oai, silu_clamped, swiglu_oai_split: another activation would run unclamped), and
        silu_clamped and swiglu_oai_split need it (no default limit). Raises ValueError (pydantic reports it at the model's line)."""
        import math

        for name, hi in (("num_experts", MAX_EXPERTS), ("num_shared_experts", MAX_EXPERTS),
                         ("hidden_size", MAX_WIDTH), ("moe_intermediate_size", MAX_WIDTH)):
            if getattr(self, name) > hi:
                raise ValueError(f"{name} {getattr(self, name)} is larger than {hi}")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k {self.top_k} exceeds num_experts {self.num_experts}")
        if self.n_group is not None and (self.n_group > self.num_experts or self.num_experts % self.n_group):
            raise ValueError(f"n_group {self.n_group} does not divide num_experts {self.num_experts}")
        if self.topk_group is not None and self.n_group is not None and self.topk_group > self.n_group:
            raise ValueError(f"topk_group {self.topk_group} exceeds n_group {self.n_group}")
        for name in ("routed_scaling_factor", "swiglu_limit"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite positive number, got {value!r}")
        if self.activation in ("silu_clamped", "swiglu_oai_split") and self.swiglu_limit is None:
            raise ValueError(f"activation {self.activation} needs swiglu_limit (the clamp of gate and up; DeepSeek-V4's "
                             "and MiniMax-M3's config.json swiglu_limit)")
        if self.swiglu_limit is not None and self.activation not in ("swiglu_oai", "silu_clamped", "swiglu_oai_split"):
            hint = " (SiLU with the clamp: write activation silu_clamped)" if self.activation == "silu" else ""
            raise ValueError(f"swiglu_limit {self.swiglu_limit} is given with activation {self.activation}, which has no "
                             f"clamp{hint}")
        return self
