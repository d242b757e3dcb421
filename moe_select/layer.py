"""The per-rank description of one MoE layer that cores and dispatchers are built for (no torch)."""
from __future__ import annotations

from dataclasses import dataclass

from .vocab import GATED_ACTIVATIONS, WEIGHT_ON_INPUT_ROUTINGS


def moe_tp_size(tp: int, ep: int) -> int:
    """Ranks each expert is split over, ``tp / ep``: this install's runners keep the expert-parallel group inside
    the TP group (as SGLang's FusedMoE). Raises ValueError when ``ep`` does not divide ``tp``."""
    if ep < 1 or tp < 1 or tp % ep:
        raise ValueError(f"ep {ep} does not divide tp {tp}: this install's runners split each expert over tp/ep ranks "
                         "inside the TP group")
    return tp // ep


@dataclass(frozen=True)
class LayerSpec:
    """One rank's view of a MoE layer.

    ``num_experts`` (E, global), ``top_k`` (K), ``hidden_size`` (H), ``intermediate_size`` (I on this
    rank: ``moe_intermediate_size / (tp / ep)``), the gated ``activation``, the weight ``quant`` format,
    ``tp``/``ep`` and this rank's ``ep_rank``. The rank keeps experts
    ``[expert_offset, expert_offset + num_local_experts)``; top-k ids outside that range (and -1) are
    skipped by its core, so partial outputs of the ranks sum to the layer's output.
    """

    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int
    activation: str = "silu"
    quant: str = "bf16"
    tp: int = 1
    ep: int = 1
    ep_rank: int = 0
    tp_rank: int = 0
    swiglu_limit: float | None = None
    #: The routing weight multiplies the expert's input instead of its output (llama4 routing).
    weight_on_input: bool = False
    #: fp8_block's ``(bn, bk)`` (the checkpoint's ``weight_block_size``); None: the format's default.
    block_shape: tuple[int, int] | None = None
    #: Elements along K sharing one scale for the weight-only int formats (AWQ/GPTQ ``group_size``); None for
    #: per-output-channel scales (``group_size`` -1) and formats without groups.
    group_size: int | None = None

    def __post_init__(self) -> None:
        if self.num_experts % self.ep:
            raise ValueError(f"num_experts {self.num_experts} is not divisible by ep {self.ep}")
        if not 0 <= self.ep_rank < self.ep:
            raise ValueError(f"ep_rank {self.ep_rank} outside [0, {self.ep})")
        if not 0 <= self.tp_rank < max(1, self.tp // self.ep):
            raise ValueError(f"tp_rank {self.tp_rank} outside [0, {max(1, self.tp // self.ep)}) (tp/ep)")

    @property
    def num_local_experts(self) -> int:
        """Experts on this rank: ``num_experts / ep``."""
        return self.num_experts // self.ep

    @property
    def expert_offset(self) -> int:
        """Global id of this rank's first expert: ``ep_rank * num_local_experts``."""
        return self.ep_rank * self.num_local_experts

    @property
    def gated(self) -> bool:
        """True for activations that read gate and up halves from w13."""
        return self.activation in GATED_ACTIVATIONS

    @property
    def w13_rows(self) -> int:
        """Rows of w13 per expert: 2*I for gated activations (gate then up), I for relu2."""
        return 2 * self.intermediate_size if self.gated else self.intermediate_size

    @property
    def k_pack(self) -> int:
        """Elements per stored weight element along K (the format's row, :attr:`moe_select.formats.Format.pack_k`):
        2 for the 4-bit formats (mxfp4, nvfp4, int4_w4a16: two per uint8), else 1. Raises
        :class:`~moe_select.errors.RunnerInputError` for a format without a row (its layout is unknown here)."""
        from .errors import RunnerInputError
        from .formats import lookup, missing_row

        row = lookup(self.quant)
        if row is None:
            raise RunnerInputError(missing_row(self.quant) or self.quant)
        return row.pack_k

    @classmethod
    def from_plan(cls, plan, *, ep_rank: int = 0, tp_rank: int = 0) -> "LayerSpec":
        """The spec of rank (ep_rank, tp_rank) of ``plan``'s deployment."""
        from .formats import block_shape, group_size, lookup

        d = plan.deployment
        m = d.model
        moe_tp = moe_tp_size(d.tp, d.ep)
        if m.moe_intermediate_size % moe_tp:
            raise ValueError(f"moe_intermediate_size {m.moe_intermediate_size} is not divisible by tp/ep = {moe_tp}")
        params = getattr(plan, "quant_params", None) or {}
        row = lookup(plan.quant)  # group_size: the formats whose row has one (weight-only int)
        return cls(num_experts=m.num_experts, top_k=m.top_k, hidden_size=m.hidden_size,
                   intermediate_size=m.moe_intermediate_size // moe_tp, activation=m.activation,
                   quant=plan.quant, tp=d.tp, ep=d.ep, ep_rank=ep_rank, tp_rank=tp_rank,
                   swiglu_limit=m.swiglu_limit, weight_on_input=m.routing in WEIGHT_ON_INPUT_ROUTINGS,
                   block_shape=block_shape(plan.quant, params), group_size=group_size(plan.quant, params)
                   if row is not None and row.parameters.group_size is not None else None)
