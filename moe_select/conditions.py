"""Conditions (``when``, ``requires``) and numeric constraints shared by rule files and capability files.

A deployment is seen by conditions as flat *facts* (:func:`facts_of`): categorical values (arch, quant,
a2a, the a2a modes used, activation, routing, engine, phases, cuda_graph) and the quantities below.
``moe_tp = tp / ep`` is the MoE tensor-parallel size (1 where ep is a multiple of tp above it: :func:`moe_tp_of`); each rank keeps ``experts_per_rank = (num_experts +
fused_shared_experts) / ep`` experts and ``intermediate_per_rank = moe_intermediate_size / moe_tp``
rows of each (SGLang's and vLLM's FusedMoE weight loaders). Quantities are exact fractions, so an uneven
split is visible instead of being rounded away. ``low_latency_tokens_per_rank`` is ``max_tokens_per_rank``
when an all-to-all's low-latency mode is the only mode used (given, or ``auto`` for a decode-only
deployment); under ``auto`` over prefill and decode the decode batch is not an input, so it is absent. A
quantity a deployment does not have (the block shape of a format without blocks) is absent: conditions
on it do not match, constraints on it do not apply. ``a2a_capacity`` (the all-to-all buffer's per-rank token
capacity under the engine: the deployment's value, else the engine's default) and ``a2a_tokens_per_rank`` (the most
tokens one rank passes through that buffer in one forward, over the phases whose needs are given) are added by the
selector from the a2a file's ``capacity`` facts (:mod:`moe_select.capacity`, issue 23); absent where none applies.
``experts_per_group`` is ``num_experts / n_group``, the routed experts one group of a grouped (``deepseek_v3``) router
scores together (a routing kernel that gives each group one warp caps it); absent without ``n_group``. ``attn_tp`` is the
ranks an attention layer's heads are split over (SGLang: ``tp / dp``; others: ``tp``). ``tp_dp`` is
``tp x dp``: vLLM's MoE group when a deployment writes ``tp`` as vLLM's tensor-parallel size beside ``dp`` (a launch
line writes the whole group as ``tp``); absent without ``dp``.

``requires`` conditions a fact on package versions (PEP 440 specifiers, :mod:`packaging`): a version
that is declared or detected decides; a package assumed present without a version is taken at the
newest version the facts were checked against (the known-packages table), and the report says which
facts that decided.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Collection, Literal, Mapping, Sequence, Union

from pydantic import AliasChoices, Field, ValidationInfo, field_validator, model_validator

from .formats import CheckpointLayout, Precision
from .located import Located
from .vocab import Activation, Arch, Engine, Quant, Routing, arch_in

Quantity = Literal[
    "num_experts", "top_k", "hidden_size", "moe_intermediate_size", "tp", "ep", "dp", "moe_tp",
    "experts_per_rank", "intermediate_per_rank", "num_shared_experts", "fused_shared_experts",
    "max_tokens_per_rank", "low_latency_tokens_per_rank", "n_group", "topk_group", "quant_block_n", "quant_block_k", "quant_group_size",
    "shared_intermediate_per_tp", "dense_intermediate_per_tp", "a2a_tokens_per_rank", "a2a_capacity", "experts_per_group",
    "tp_dp", "num_attention_heads", "attn_tp", "ep_per_dp",
]
QUANTITIES: tuple[str, ...] = Quantity.__args__  # type: ignore[attr-defined]
#: Quantities that are 0 for many deployments (no shared experts, or shared-expert fusion off); every other is
#: positive, so a condition that admits no positive value of one of those can never match.
MAY_BE_ZERO: tuple[str, ...] = ("num_shared_experts", "fused_shared_experts")


def fmt_num(x: Fraction | int) -> str:
    """An exact quantity as text: 96, or 153.6 for an uneven split."""
    if type(x) is int:
        return str(x)
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{float(x):g}"


class IntRange(Located):
    """A numeric condition: ``min`` <= value <= ``max``, value a multiple of ``multiple_of`` and not a multiple of
    ``not_multiple_of`` (a kernel whose tile choice depends on another dimension's alignment: a field-round-36 kind, in
    a runner file of backends/), and none of ``not_one_of`` (the shapes an engine ships a tuned kernel config for, which
    then decide instead of the failing default: field round 40)."""

    min: int | None = None
    max: int | None = None
    multiple_of: int | None = Field(default=None, gt=0)
    not_multiple_of: int | None = Field(default=None, gt=1)
    not_one_of: list[int] | None = Field(default=None, min_length=1)

    def contains(self, value: Fraction | int) -> bool:
        """True when ``value`` is within the range, a multiple of ``multiple_of``, not of ``not_multiple_of``, and none
        of ``not_one_of``."""
        if not isinstance(value, (int, Fraction)):
            value = Fraction(value)
        if self.not_one_of is not None and value in self.not_one_of:
            return False
        if self.min is not None and value < self.min:
            return False
        if self.max is not None and value > self.max:
            return False
        if self.not_multiple_of is not None and value % self.not_multiple_of == 0:
            return False
        return self.multiple_of is None or value % self.multiple_of == 0

    def empty(self, positive: bool = False) -> bool:
        """True when no value can match: ``min > max``, or no multiple of ``multiple_of`` in [min, max]
        (``positive``: only values >= 1 count, as for every quantity of a deployment)."""
        lo = max(self.min or 1, 1) if positive else self.min
        if lo is not None and self.max is not None and lo > self.max:
            return True
        if self.multiple_of and self.not_multiple_of and self.multiple_of % self.not_multiple_of == 0:
            return True  # every multiple of the one is a multiple of the other
        if self.not_one_of and lo is not None and self.max is not None and self.max - lo < 4096:
            return not any(self.contains(v) for v in range(lo, self.max + 1))   # a small range: every value listed
        if self.multiple_of and self.max is not None:
            lo = lo if lo is not None else self.max - self.multiple_of  # some multiple <= max exists
            first = -(-lo // self.multiple_of) * self.multiple_of  # smallest multiple >= lo
            return first > self.max
        return False


IntCond = Union[list[int], IntRange]

#: Categorical ``when`` keys whose fact is a *set* (the deployment uses several): a condition matches
#: when it names any of them. ``phase: both`` runs prefill and decode; ``a2a_mode: auto`` may use two.
SET_KEYS = ("phase", "a2a_mode")

#: Condition keys that hold for every value but those listed (the deployment's ``architecture``, ``activation_precision``).
NEGATED = ("architecture_not", "activation_precision_not")

#: The value of ``activation_precision_not`` in a deployment's facts when it asks no activation precision.
NONE_ASKED = "(none asked)"


def _int_match(cond: IntCond, value: Fraction | int) -> bool:
    return value in cond if isinstance(cond, list) else cond.contains(value)


class When(Located):
    """Conditions on a deployment; every key given must match (lists: any of). Empty: always.

    ``engine`` restricts a fact to the engines it holds for (with ``engine: any`` the selector checks
    each engine and a runner is eligible where at least one engine runs it). ``deepep_mode`` is read as
    ``a2a_mode`` (SGLang's name for it). ``arch`` takes arch names, families (``sm10x``, ``gfx9``) and ranges
    (``sm80+``), as facts do (:func:`moe_select.vocab.arch_in`); every name must be declared in a vocabulary.
    ``architecture`` names checkpoint model classes (config.json ``architectures[0]``, e.g. ``NemotronHForCausalLM``):
    a deployment that does not say its architecture (an inline ``model`` without one) matches no such condition, and
    the selector reports a fact that holds only there as not decided; a refusal that would hold at some value of such
    an unstated input leaves the candidate unverified (:func:`moe_select.selector.unstated_refusal`)."""

    arch: list[Arch] | None = None
    quant: list[Quant] | None = None
    a2a: list[str] | None = None
    a2a_mode: list[Literal["normal", "low_latency"]] | None = Field(
        default=None, validation_alias=AliasChoices("a2a_mode", "deepep_mode"))
    #: The all-to-all mode the deployment asks for, as written (``auto`` included; SGLang's ``--deepep-mode``), where
    #: ``a2a_mode`` reads the modes it uses: a fact about the engine's setting itself (an all-to-all that refuses
    #: ``auto``).
    a2a_mode_asked: list[Literal["auto", "normal", "low_latency"]] | None = None
    activation: list[Activation] | None = None
    routing: list[Routing] | None = None
    engine: list[Engine] | None = None
    phase: list[Literal["prefill", "decode"]] | None = None
    cuda_graph: bool | None = None
    tp: IntCond | None = None
    ep: IntCond | None = None
    dp: IntCond | None = None
    moe_tp: IntCond | None = None
    num_experts: IntCond | None = None
    top_k: IntCond | None = None
    hidden_size: IntCond | None = None
    moe_intermediate_size: IntCond | None = None
    intermediate_per_rank: IntCond | None = None
    experts_per_rank: IntCond | None = None
    num_shared_experts: IntCond | None = None
    fused_shared_experts: IntCond | None = None
    #: ep over the attention data-parallel size (``[1]``: the expert group is the DP-attention group); a deployment
    #: that does not give dp matches no such condition (dp is then explored as an unstated input).
    ep_per_dp: IntCond | None = None
    #: The dense MLP layers' intermediate size per tp rank, present only for a checkpoint with dense layers beside its
    #: MoE layers (``first_k_dense_replace``, ``mlp_only_layers``, ...): ``{min: 1}`` holds where it has them.
    dense_intermediate_per_tp: IntCond | None = None
    max_tokens_per_rank: IntCond | None = None
    low_latency_tokens_per_rank: IntCond | None = None
    n_group: IntCond | None = None
    topk_group: IntCond | None = None
    quant_block_n: IntCond | None = None
    quant_block_k: IntCond | None = None
    quant_group_size: IntCond | None = None
    #: A weight-only int checkpoint with one scale per output channel over all of K (``group_size`` -1: AutoAWQ /
    #: AutoGPTQ's -1, compressed-tensors' ``strategy: channel``, inline ``quant_config.group_size: -1``); false for a
    #: grouped one (a group size given, or the format's default group); absent for formats without groups.
    quant_per_channel: bool | None = None
    #: A per-channel compressed-tensors checkpoint whose config leaves ``weights.group_size`` unset (null: what
    #: llm-compressor writes for ``strategy: channel``), which an engine may read as None where it expects -1; false where
    #: the config writes -1 or a group; a deployment that gives only ``quant_config.group_size: -1`` does not say which, so
    #: a fact that holds for one only leaves it undecided.
    quant_group_size_unset: bool | None = None
    architecture: list[str] | None = None
    #: Checkpoint model classes the fact does NOT hold for (an engine's allow-list of architectures, refusing every
    #: other, such as an all-to-all's registry of validated models); like ``architecture``, a deployment that does not say its
    #: architecture matches no such condition, and a refusal under it leaves the candidate unverified.
    architecture_not: list[str] | None = None
    #: The kind of MoE layer planned (``main``; ``mtp`` for the MTP / NextN layers a speculative-decoding draft runs;
    #: ``unquantized`` for a checkpoint's 16-bit MoE layers beside quantized ones): an engine may run a draft's layers
    #: under other rules than the target's.
    layer_kind: list[str] | None = None
    #: The format of the checkpoint's main MoE layers (for the main kind, ``quant``): an engine may build another
    #: layer kind (an MTP draft's) with the main layers' quantization method whatever the config excludes.
    main_quant: list[Quant] | None = None
    #: The checkpoint's serialization of a weight-only int or MXFP4 format (``quant_params.layout``: ``awq``, ``gptq``,
    #: ``compressed-tensors``, ``mxfp4`` (MXFP4's own quant_method), ``quark``, ``fp8`` (block FP8's ``quant_method: fp8``), from the checkpoint's ``quant_method``, the
    #: deployment's ``quant_config.layout`` or the format's default); a deployment that does not say it matches no such
    #: condition, and the selector reports a fact that holds only there as not decided.
    checkpoint_layout: list[CheckpointLayout] | None = None
    #: The checkpoint carries no activation scales (``quant_params.weight_only``: ModelOpt W4A16_NVFP4,
    #: compressed-tensors NVFP4A16; moe_select/model_config.py, "Weight-only NVFP4").
    weight_only: bool | None = None
    #: How an NVFP4 deployment scales its activations (``quant_params.activation_scale``): ``per_tensor`` (the
    #: checkpoint's static FP32 input scale, the default) or ``per_token`` (a dynamic FP32 scale per row: SGLang's
    #: ``--quantization nvfp4_online`` or its per-token environment variable); absent for other formats.
    activation_scale: list[Literal["per_tensor", "per_token"]] | None = None
    #: The activation precision the deployment asks of the engine (``quant_config.activation_precision``): a fact
    #: with this key holds only when it is asked, so a support row under it runs only on request (an
    #: engine's precision flag, backends/engines/); a deployment that asks none matches no such condition.
    activation_precision: list[Precision] | None = None
    #: Activation precisions the fact does NOT hold for: unlike ``activation_precision``, a deployment that asks none
    #: matches (it runs the runner's default, which is none of those asked by name), so a row can hold "unless this
    #: precision is asked" (an engine whose auto choice reaches another runner only on request).
    activation_precision_not: list[Precision] | None = None
    #: The engine makes the format at load from an unquantized checkpoint (online quantization, backends/formats.yaml
    #: ``online``): weights it quantizes itself may be laid out (padded) unlike a serialized checkpoint's.
    online: bool | None = None
    #: The engine's vendor-library switch (the deployment's ``vendor_library``); a deployment that does not state it
    #: matches no such condition, and a refusal under it leaves the candidate unverified.
    vendor_library: bool | None = None
    #: Expert-parallel load balancing on (the deployment's ``eplb``; off unless stated).
    eplb: bool | None = None
    #: LoRA adapters served (the deployment's ``lora``; off unless stated).
    lora: bool | None = None
    #: A speculative draft runs the checkpoint's own MTP (NextN) layers (the deployment's ``speculative``); a deployment
    #: that does not state it matches no such condition, and a refusal under it leaves the candidate unverified.
    speculative: bool | None = None
    #: The deployment states whether the engine fuses the shared experts into the routed experts' kernel (its
    #: ``shared_expert_fusion``, said in the file or by a launch line); one that leaves it at this project's default (off)
    #: matches no such condition, since the engines' own defaults differ (one fuses under its vendor library unless told
    #: not to: backends/common.yaml, field round 45), and a refusal under it leaves the candidate unverified. ``fused_shared_experts`` (a quantity) reads
    #: the default as off.
    shared_expert_fusion: bool | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _quantity_shape(cls, v: Any, info: ValidationInfo) -> Any:
        """A bare number or string where a quantity's list or range goes (``tp: 8``): one clear message instead of the
        union's two."""
        if info.field_name in QUANTITIES and isinstance(v, (int, float, str)) and not isinstance(v, bool):
            raise ValueError(f"write a list ([{v}]) or a range ({{min: {v}, max: {v}}}), not a bare value")
        return v

    @field_validator("architecture", "architecture_not")
    @classmethod
    def _classes(cls, v: list[str] | None) -> list[str] | None:
        import re

        for name in v or []:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,127}", name):
                raise ValueError(f"{name!r} is not a model class name (config.json architectures, e.g. NemotronHForCausalLM)")
        return v

    @field_validator("a2a")
    @classmethod
    def _names(cls, v: list[str] | None) -> list[str] | None:
        import re

        for name in v or []:
            if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
                raise ValueError(f"{name!r} is not an a2a backend name (lower case, digits, _)")
        return v

    def keys(self) -> list[str]:
        """The condition keys that are set."""
        return [k for k, v in self.__dict__.items() if v is not None]  # the fields, in declaration order

    def matches(self, facts: Mapping[str, Any], ignore: Collection[str] = ()) -> bool:
        """True when every set key matches ``facts`` (see :func:`facts_of`); keys in ``ignore`` are not
        looked at."""
        for key, cond in self.__dict__.items():  # the fields (as keys() lists them, without the getattr)
            if cond is None or key in ignore:
                continue
            value = facts.get(key)
            if value is None:
                return False
            if key in QUANTITIES:
                if not _int_match(cond, value):
                    return False
            elif isinstance(cond, bool):
                if cond != value:
                    return False
            elif key in NEGATED:
                if value in cond:
                    return False
            elif key in SET_KEYS:
                if not set(cond) & set(value):
                    return False
            elif value not in cond:
                # an arch condition names archs, families (sm10x) and ranges (sm80+): moe_select.vocab.arch_in
                if key != "arch" or not arch_in(value, cond):
                    return False
        return True

    def unsatisfiable(self) -> str | None:
        """Why no deployment can ever match (an empty list or range, sizes that are never positive), or None."""
        for key in self.keys():
            cond = getattr(self, key)
            if isinstance(cond, list) and not cond and key not in NEGATED:
                return f"when.{key} is an empty list"
            if key in NEGATED and getattr(self, key.removesuffix("_not")) is not None \
                    and set(getattr(self, key.removesuffix("_not"))) <= set(cond):
                return f"when.{key.removesuffix('_not')} names only values when.{key} excludes"
            positive = key in QUANTITIES and key not in MAY_BE_ZERO
            if isinstance(cond, IntRange) and cond.empty(positive=positive):
                if cond.min is not None and cond.max is not None and cond.min > cond.max:
                    return f"when.{key}: min {cond.min} > max {cond.max}"
                if cond.max is not None and cond.max <= 0:
                    return f"when.{key}: max {cond.max} is not positive, and {key} is always positive"
                return (f"when.{key}: no positive multiple of {cond.multiple_of} lies in "
                        f"[{max(cond.min or 1, 1)}, {cond.max}]")
            if positive and isinstance(cond, list) and all(v <= 0 for v in cond):
                return f"when.{key}: {cond} holds no positive value, and {key} is always positive"
        if self.a2a is not None and "none" not in self.a2a and self.ep is not None:
            if isinstance(self.ep, list) and self.ep and all(e <= 1 for e in self.ep):
                return "when.a2a names only all-to-all backends, which need ep > 1, but when.ep allows only 1"
            if isinstance(self.ep, IntRange) and self.ep.max is not None and self.ep.max <= 1:
                return "when.a2a names only all-to-all backends, which need ep > 1, but when.ep allows only 1"
        return None

    def describe(self) -> str:
        """Short text of the set conditions, e.g. ``arch in [sm90], quant in [fp8_block]``."""
        parts = []
        for key in self.keys():
            cond = getattr(self, key)
            if isinstance(cond, IntRange):
                bits = [f">= {cond.min}" if cond.min is not None else "", f"<= {cond.max}" if cond.max is not None else "",
                        f"multiple of {cond.multiple_of}" if cond.multiple_of else "",
                        f"not a multiple of {cond.not_multiple_of}" if cond.not_multiple_of else "",
                        f"not one of {cond.not_one_of}" if cond.not_one_of else ""]
                parts.append(f"{key} " + ", ".join(b for b in bits if b))
            elif isinstance(cond, bool):
                parts.append(f"{key} = {str(cond).lower()}")
            elif key in NEGATED:
                parts.append(f"{key.removesuffix('_not')} not in [{', '.join(cond)}]")
            else:
                parts.append(f"{key} in [{', '.join(map(str, cond))}]")
        return ", ".join(parts) or "always"


def _check_requires(v: dict[str, str] | None) -> dict[str, str] | None:
    """``v`` when each specifier is a valid PEP 440 specifier, else ValueError naming it. A specifier the process
    already holds a verdict for (a cached catalog's, :func:`moe_select.versions.known_specifier`) was parsed when
    that verdict was computed: it is not parsed again (planning from the cache imports no ``packaging.specifiers``)."""
    from .versions import known_specifier

    todo = {name: spec for name, spec in (v or {}).items() if not known_specifier(spec)}
    if not todo:
        return v
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    for name, spec in todo.items():
        try:
            parsed = SpecifierSet(spec)
        except InvalidSpecifier:
            raise ValueError(f"requires.{name}: {spec!r} is not a PEP 440 version specifier (e.g. \">=0.6.8\")") from None
        if not _satisfiable(parsed):
            raise ValueError(f"requires.{name}: {spec!r} admits no version (its bounds exclude each other): the fact "
                             "could never apply")
    return v


def _satisfiable(spec: Any) -> bool:
    """Whether some version meets ``spec`` (a ``packaging`` SpecifierSet): tried at every version it names, just above
    and below each (``.post1``, ``.1``, ``.0.1``, ``.dev0``), 0 and a version above all (a set no version meets fails at all of them:
    the versions that decide a bound are those it names)."""
    from packaging.version import InvalidVersion, Version

    tries = ["0", "99999"]
    for s in spec:
        base = s.version.replace(".*", "")
        tries += [base, f"{base}.post1", f"{base}.dev0", f"{base}.1", f"{base}.0.1"]
    for t in tries:
        try:
            if spec.contains(Version(t), prereleases=True):
                return True
        except InvalidVersion:
            continue
    return False


def describe_conditions(when: When | None, requires: dict[str, str] | None) -> str:
    """``when ...; requires ...`` text of a fact's condition and package gate, or '' for neither."""
    bits = []
    if when is not None and when.keys():
        bits.append(when.describe())
    if requires:
        bits.append(", ".join(f"{k} {v}" for k, v in requires.items()))
    return "; ".join(bits)


class Conditional(Located):
    """A fact that holds only where ``when`` matches the deployment and the packages meet ``requires``
    (distribution -> PEP 440 specifier, e.g. ``{some-kernels: ">=0.6.8"}``)."""

    when: When | None = None
    requires: dict[str, str] | None = None

    @field_validator("requires")
    @classmethod
    def _requires(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        return _check_requires(v)

    def describe_conditions(self) -> str:
        """``when ...; requires ...`` text, or '' for an unconditional fact."""
        return describe_conditions(self.when, self.requires)


ConstraintCode = Literal["shape_unaligned", "experts_not_divisible", "parallelism_unsupported"]


class Constraint(Conditional):
    """A numeric fact about a runner, an a2a backend, or every runner (``common.yaml``).

    ``field`` must be a multiple of ``multiple_of``, at least ``min``, at most ``max``, and one of
    ``one_of`` (each an integer or the name of another quantity, e.g. ``one_of: [1, tp]``), where
    ``when``/``requires`` hold. A violation is reported with ``code`` and the text ``why``.
    """

    field: Quantity
    multiple_of: int | Quantity | None = None
    min: int | None = None
    max: int | Quantity | None = None
    one_of: list[int | Quantity] | None = None
    code: ConstraintCode = "shape_unaligned"
    why: str | None = None
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _one_test(self) -> "Constraint":
        if self.multiple_of is None and self.min is None and self.max is None and self.one_of is None:
            raise ValueError("a constraint needs multiple_of, min, max or one_of")
        if isinstance(self.multiple_of, int) and self.multiple_of <= 0:
            raise ValueError(f"multiple_of must be a positive integer or a quantity, got {self.multiple_of}")
        if self.when is not None and self.when.unsatisfiable():
            raise ValueError(f"when can never match: {self.when.unsatisfiable()}")
        if self.min is not None and isinstance(self.max, int) and self.min > self.max:
            # refuses every deployment it applies to (an eighth new user's trial: silently accepted, as a rule's or a
            # package range's empty bounds are not)
            raise ValueError(f"min {self.min} > max {self.max}: the constraint admits no value of {self.field}")
        if self.one_of is not None and not self.one_of:
            raise ValueError("one_of is empty: the constraint admits no value")
        return self

    def applies(self, facts: Mapping[str, Any]) -> bool:
        """True when ``when`` matches ``facts`` and every quantity the test reads is present."""
        if self.when is not None and not self.when.matches(facts):
            return False
        needed = [self.field] + [v for v in (self.multiple_of, self.max, *(self.one_of or [])) if isinstance(v, str)]
        return all(facts.get(q) is not None for q in needed)

    def holds(self, facts: Mapping[str, Any]) -> bool:
        """``violation(facts) is None`` without the text (the fix search tests many (tp, ep) pairs)."""
        value = facts[self.field]
        if not isinstance(value, (int, Fraction)):
            value = Fraction(value)
        if self.multiple_of is not None:
            div = facts[self.multiple_of] if isinstance(self.multiple_of, str) else self.multiple_of
            if div == 0 or value % div != 0:
                return False
        if self.min is not None and value < self.min:
            return False
        if self.max is not None and value > (facts[self.max] if isinstance(self.max, str) else self.max):
            return False
        return self.one_of is None or value in [facts[v] if isinstance(v, str) else v for v in self.one_of]

    def violation(self, facts: Mapping[str, Any]) -> str | None:
        """Text of the violation in ``facts``, or None when the constraint holds."""
        value = facts[self.field]
        if not isinstance(value, (int, Fraction)):
            value = Fraction(value)
        if self.multiple_of is not None:
            div = facts[self.multiple_of] if isinstance(self.multiple_of, str) else self.multiple_of
            if div == 0 or value % div != 0:
                name = f"{self.multiple_of} ({fmt_num(div)})" if isinstance(self.multiple_of, str) else str(div)
                return f"{self.field} = {fmt_num(value)} is not a multiple of {name}"
        if self.min is not None and value < self.min:
            return f"{self.field} = {fmt_num(value)} is below {self.min}"
        if self.max is not None:
            top = facts[self.max] if isinstance(self.max, str) else self.max
            if value > top:
                name = f"{self.max} ({fmt_num(top)})" if isinstance(self.max, str) else str(top)
                return f"{self.field} = {fmt_num(value)} is above {name}"
        if self.one_of is not None:
            allowed = [facts[v] if isinstance(v, str) else v for v in self.one_of]
            if value not in allowed:
                names = ", ".join(f"{v} ({fmt_num(facts[v])})" if isinstance(v, str) else str(v) for v in self.one_of)
                return f"{self.field} = {fmt_num(value)} is not one of {{{names}}}"
        return None


def facts_of(*, arch: str, quant: str, a2a: str, a2a_modes: Sequence[str] = (), activation: str, routing: str,
             cuda_graph: bool, tp: int, ep: int, num_experts: int, top_k: int, hidden_size: int,
             moe_intermediate_size: int, engine: str | None = None, phases: Sequence[str] = ("prefill", "decode"),
             dp: int | None = None, num_shared_experts: int = 0, fused_shared_experts: int = 0, max_tokens_per_rank: int | None = None,
             n_group: int | None = None, topk_group: int | None = None, block: tuple[int, int] | None = None,
             group_size: int | None = None, per_channel: bool | None = None, group_size_unset: bool | None = None,
             shared_intermediate_size: int | None = None, dense_intermediate_size: int | None = None, architecture: str | None = None,
             layer_kind: str = "main", main_quant: str | None = None,
             checkpoint_layout: str | None = None, weight_only: bool = False, activation_scale: str | None = None,
             activation_precision: str | None = None, online: bool = False, vendor_library: bool | None = None, eplb: bool = False,
             lora: bool = False,
             max_tokens_given: bool = True, num_attention_heads: int | None = None, speculative: bool | None = None,
             shared_expert_fusion: bool | None = None, a2a_mode_asked: str | None = None) -> dict[str, Any]:
    """Flat facts of a deployment, as conditions and constraints read them (module doc). ``block``:
    the FP8 block shape ``(bn, bk)``; ``group_size``: elements along K sharing a scale; ``per_channel``: a weight-only
    int format with one scale per output channel (None: a format without groups); ``group_size_unset``: a per-channel
    checkpoint's config leaves its group size null (None: not known); ``architecture``: the
    checkpoint's model class (None: not given); ``main_quant``: the format of the checkpoint's main MoE layers, for a
    layer kind planned on its own (None: this is the main kind, ``quant``); ``checkpoint_layout``: a weight-only int checkpoint's serialization
    (awq, gptq, compressed-tensors; None: not given); ``weight_only``: the checkpoint has no activation scales;
    ``activation_scale``: ``per_tensor`` or ``per_token`` for an NVFP4 deployment that quantizes activations, else None;
    ``activation_precision``: the activation precision the deployment asks for (None: the runner's default);
    ``online``: the engine quantizes an unquantized checkpoint at load; ``vendor_library``: the engine's vendor-library switch
    (None: not given); ``max_tokens_given``: ``max_tokens_per_rank`` is the deployment's (False: this project's default,
    so ``low_latency_tokens_per_rank`` is absent); ``speculative``: a draft runs the checkpoint's MTP layers (None: not
    given); ``shared_expert_fusion``: the fusion as the deployment states it (None: left at the default);
    ``a2a_mode_asked``: the all-to-all mode as the deployment asks it (``auto`` or a mode; None: a backend without modes)."""
    moe_tp = moe_tp_of(tp, ep) if ep else Fraction(0)
    slots = num_experts + fused_shared_experts
    return {
        "arch": arch, "quant": quant, "a2a": a2a, "a2a_mode": tuple(a2a_modes) or None, "a2a_mode_asked": a2a_mode_asked,
        "activation": activation,
        "routing": routing, "engine": engine, "phase": tuple(phases), "cuda_graph": cuda_graph, "tp": tp, "ep": ep,
        "dp": dp, "moe_tp": moe_tp, "num_experts": num_experts, "top_k": top_k, "hidden_size": hidden_size,
        "moe_intermediate_size": moe_intermediate_size, "num_shared_experts": num_shared_experts,
        "fused_shared_experts": fused_shared_experts,
        "experts_per_rank": Fraction(slots, ep) if ep else Fraction(0),
        "intermediate_per_rank": Fraction(moe_intermediate_size) / moe_tp if moe_tp else Fraction(0),
        "max_tokens_per_rank": max_tokens_per_rank,
        # the tokens per rank of forwards that run in an all-to-all's low-latency mode, known when it is the only
        # mode used (given, or auto for decode only); auto over prefill and decode: decode's batch is not an input
        # (absent where max_tokens_per_rank is this project's default, not the deployment's: a need left at its default
        # is not checked, as the a2a capacity's)
        "low_latency_tokens_per_rank": max_tokens_per_rank if tuple(a2a_modes) == ("low_latency",) and max_tokens_given
        else None,
        # quantities the deployment would state through an input it left at this project's default: a fact reading them
        # is not decided (moe_select/selector.py, _unstated)
        "unstated_defaults": ("low_latency_tokens_per_rank",) if tuple(a2a_modes) == ("low_latency",) and not max_tokens_given
        else (),
        "n_group": n_group, "topk_group": topk_group,
        # the routed experts of one group of a grouped (deepseek_v3) router; absent without n_group
        "experts_per_group": Fraction(num_experts, n_group) if n_group else None,
        **dp_quantities(tp, ep, dp),
        "num_attention_heads": num_attention_heads,
        "attn_tp": _attn_tp(engine, tp, dp),
        "quant_block_n": block[0] if block else None, "quant_block_k": block[1] if block else None,
        "quant_group_size": group_size,
        "quant_per_channel": per_channel,
        "quant_group_size_unset": group_size_unset,
        "shared_intermediate_per_tp": Fraction(shared_intermediate_size, tp) if shared_intermediate_size else None,
        "dense_intermediate_per_tp": Fraction(dense_intermediate_size, tp) if dense_intermediate_size else None,
        "architecture": architecture,
        "architecture_not": architecture,     # the same input, read by the allow-list condition (When.architecture_not)
        "layer_kind": layer_kind,
        "main_quant": main_quant or quant,
        "checkpoint_layout": checkpoint_layout,
        "weight_only": weight_only,
        "activation_scale": activation_scale,
        "activation_precision": activation_precision,
        # none asked is none of the named precisions (When.activation_precision_not), not an unstated input
        "activation_precision_not": activation_precision or NONE_ASKED,
        "online": online,
        "vendor_library": vendor_library,
        "eplb": eplb,
        "lora": lora,
        "speculative": speculative,
        "shared_expert_fusion": shared_expert_fusion,
    }


def moe_tp_of(tp: int, ep: int) -> Fraction:
    """The MoE tensor-parallel size: ``tp / ep`` (a fraction where ep does not divide tp: facts refuse that), or 1 where
    ep is a multiple of tp above it: vLLM's expert parallelism over tp x dp ranks (a deployment that writes tp as
    vLLM's tensor-parallel size beside dp, ep = tp x dp), whose experts are never tensor-split
    (vllm-project/vllm@002d6073aa03:vllm/model_executor/layers/fused_moe/config.py:FusedMoEParallelConfig.make: tp
    size 1 with EP on). An eighth new user's trial found tp 2 with ep 4 read as each expert split over half a rank,
    doubling ``intermediate_per_rank``, where the same launch line (tp 4 as the whole group) gave the real one."""
    return Fraction(1) if ep > tp and ep % tp == 0 else Fraction(tp, ep)


#: The quantities :func:`with_parallelism` recomputes (every other fact stays as it is).
PARALLEL_QUANTITIES = ("tp", "ep", "moe_tp", "experts_per_rank", "intermediate_per_rank", "shared_intermediate_per_tp",
                       "dense_intermediate_per_tp", "tp_dp")


def dp_quantities(tp: int, ep: int, dp: int | None) -> dict[str, Any]:
    """The quantities derived from the deployment's ``dp`` (None where it is not given): ``tp_dp`` (tp x dp, vLLM's MoE
    group when tp is written as its tensor-parallel size beside dp) and ``ep_per_dp`` (ep / dp as a Fraction; 1: the MoE
    expert group is the DP-attention group, where an engine may reduce-scatter the MoE output). The one place
    :func:`facts_of`, :func:`with_parallelism` and the selector's unstated-dp exploration compute them."""
    return {"tp_dp": tp * dp if dp else None, "ep_per_dp": Fraction(ep, dp) if dp else None}


def _attn_tp(engine: str | None, tp: int, dp: int | None) -> Fraction:
    """The ranks one attention layer's heads are split over: SGLang's ``tp / dp`` (its dp is attention data
    parallelism inside the tp group: parallel_state.py, attn_tp_size = tp_size // attn_cp_size // attn_dp_size; dp not
    given: 1, its default), vLLM's (and any other engine's) ``tp`` (its dp replicates the whole tp group)."""
    return Fraction(tp, dp) if engine == "sglang" and dp else Fraction(tp)


def with_parallelism(facts: Mapping[str, Any], tp: int, ep: int) -> dict[str, Any]:
    """``facts`` with tp and ep replaced and the quantities derived from them recomputed."""
    f = dict(facts)
    f["attn_tp"] = _attn_tp(f.get("engine"), tp, f.get("dp"))
    moe_tp = moe_tp_of(tp, ep)
    slots = f["num_experts"] + f.get("fused_shared_experts", 0)
    f.update({"tp": tp, "ep": ep, "moe_tp": moe_tp, "experts_per_rank": Fraction(slots, ep),
              "intermediate_per_rank": Fraction(f["moe_intermediate_size"]) / moe_tp})
    if f.get("dp"):
        f.update(dp_quantities(tp, ep, f["dp"]))
    for key, per in (("shared_intermediate_per_tp", facts.get("shared_intermediate_per_tp")),
                     ("dense_intermediate_per_tp", facts.get("dense_intermediate_per_tp"))):
        if per is not None:
            f[key] = per * facts["tp"] / tp
    return f


@dataclass(frozen=True)
class FixOptions:
    """Single changes of tp or ep (and, when none helps, nearby (tp, ep) pairs) under which a constraint
    holds, found by :func:`fix_options` for the deployment at ``(tp, ep)``.

    ``eps``: ep values at this tp (divisors of tp, at most ``MAX_RANKS``); ``tps``: tp values at this ep (up
    to the search's ``max_tp``); ``pairs``: the nearest ``(tp, ep)`` pairs, nearest first, only when neither
    single change helps."""

    tp: int
    ep: int
    eps: tuple[int, ...] = ()
    tps: tuple[int, ...] = ()
    pairs: tuple[tuple[int, int], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.eps or self.tps or self.pairs)

    def text(self) -> str | None:
        """e.g. ``"ep in {4, 8} (tp 8), or tp in {1, 2, 3, 6} (ep 1)"``; None when there is nothing."""
        parts = []
        if self.eps:
            parts.append(f"ep in {{{', '.join(map(str, self.eps))}}} (tp {self.tp})" if len(self.eps) > 1
                         else f"set ep: {self.eps[0]} (tp {self.tp})")
        if self.tps:
            parts.append(f"tp in {{{', '.join(map(str, self.tps[:8]))}{', ...' if len(self.tps) > 8 else ''}}} (ep {self.ep})")
        if self.pairs:
            parts.append("(tp, ep) in {" + ", ".join(f"({t}, {e})" for t, e in self.pairs) + "}")
        return ", or ".join(parts) or None

    def beyond(self, common: "FixOptions") -> "FixOptions":
        """What this engine's options add to ``common`` (the options of every engine): the single changes
        ``common`` lacks, or, where this engine has no single change, the pairs ``common`` lacks."""
        if self.eps or self.tps:
            return FixOptions(self.tp, self.ep, tuple(e for e in self.eps if e not in common.eps),
                              tuple(t for t in self.tps if t not in common.tps))
        return FixOptions(self.tp, self.ep, pairs=tuple(p for p in self.pairs if p not in common.pairs))


def _divisors(n: int, limit: int) -> list[int]:
    """The divisors of ``n`` that are at most ``limit``, ascending: at most ``limit`` tests, whatever ``n``."""
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def fix_options(constraint: Constraint, facts: Sequence[Mapping[str, Any]], max_tp: int = 64,
                also: Sequence[Constraint] = (), memo: dict[Any, Any] | None = None) -> FixOptions:
    """The tp/ep changes under which ``constraint`` and every constraint in ``also`` (e.g. the rules every
    runner obeys) hold for each of ``facts`` (one mapping per engine, differing in ``engine`` at most), with
    everything else unchanged.

    Bounded whatever tp the facts hold (a plan file is checked before it gets here, but facts are not
    trusted to be): ep candidates are the divisors of tp up to ``MAX_RANKS`` (the deployment bound), tp
    candidates 1..``max_tp``; at most ``MAX_RANKS + max_tp * (1 + divisors)`` candidates, each checked once
    per engine. ``memo``: a dict shared by calls over the same deployment (the engines checked for one
    deployment): the facts at each (tp, ep) and each constraint's verdict there are computed once.
    Facts with tp or ep below 1 get no options.
    """
    from .deployment import MAX_RANKS

    memo = {} if memo is None else memo
    tp, ep = facts[0]["tp"], facts[0]["ep"]
    if not all(isinstance(x, int) and x >= 1 for x in (tp, ep)):
        return FixOptions(tp, ep)
    engines = []
    for f in facts:
        # A constraint whose conditions fail on a fact that tp/ep do not change applies to no candidate.
        relevant = [c for c in (constraint, *also) if c.when is None or c.when.matches(f, ignore=PARALLEL_QUANTITIES)]
        engine = f.get("engine")
        engines.append((f, engine, [(c, id(c), engine if c.when is not None and c.when.engine is not None else None)
                                    for c in relevant]))

    def ok(t: int, e: int) -> bool:
        if t % e:
            return False
        for base, engine, checks in engines:
            fp: dict[str, Any] | None = None
            for c, cid, eng in checks:
                verdict = memo.get((cid, t, e, eng))
                if verdict is None:
                    if fp is None:
                        fp = memo.get(("facts", t, e, engine))
                        if fp is None:
                            fp = memo[("facts", t, e, engine)] = with_parallelism(base, t, e)
                    verdict = memo[(cid, t, e, eng)] = not c.applies(fp) or c.holds(fp)
                if not verdict:
                    return False
        return True

    eps = tuple(e for e in _divisors(tp, MAX_RANKS) if e != ep and ok(tp, e))
    tps = tuple(t for t in range(1, max_tp + 1) if t % ep == 0 and t != tp and ok(t, ep))
    if eps or tps:
        return FixOptions(tp, ep, eps, tps)
    # no single change helps: the nearest 4 (tp, ep) pairs that do, nearest first
    pairs: list[tuple[int, int]] = []
    for t in sorted(range(1, max_tp + 1), key=lambda t: (abs(t - tp), t)):
        for e in sorted(_divisors(t, t), key=lambda e: abs(e - ep)):
            if len(pairs) < 4 and ok(t, e):
                pairs.append((t, e))
        if len(pairs) == 4:
            break
    return FixOptions(tp, ep, pairs=tuple(pairs))


def parallel_fixes(constraint: Constraint, facts: Mapping[str, Any], max_tp: int = 64,
                   also: Sequence[Constraint] = (), memo: dict[Any, Any] | None = None) -> str | None:
    """Suggest tp/ep values that satisfy ``constraint`` (and every constraint in ``also``) for one engine's
    ``facts`` (:func:`fix_options`, bounded whatever tp the facts hold).

    Returns e.g. ``"ep in {4, 8} (tp 8), or tp in {1, 2, 3, 6} (ep 1)"``, or None when nothing helps.
    """
    return fix_options(constraint, [facts], max_tp, also, memo).text()


def parallel_fixes_for_engines(constraints: Sequence[Constraint], facts: Mapping[str, Mapping[str, Any]],
                               max_tp: int = 64, also: Sequence[Constraint] = (),
                               memo: dict[Any, Any] | None = None) -> str | None:
    """A fix for a reason that holds for several engines (``facts``: engine -> that engine's facts, the
    engines the reason holds for): each suggestion holds in every engine named, or says for which.

    ``constraints``: the violated constraint(s) the fix must satisfy (with ``also``). Returns the changes
    that work in every engine (e.g. ``"set ep: 8 (tp 8), or tp in {1, 2, 3, 6} (ep 1)"``), followed by what
    works in some engines only (``"; sglang, trtllm also: set ep: 4 (tp 8)"``); when no change works in
    every engine, each engine's own (``"sglang: set ep: 2 (tp 4); vllm: set ep: 4 (tp 4)"``). None when
    nothing helps anywhere. Example: vLLM spans EP over TP x DP (ep a multiple of tp), so ep 4 at tp 8,
    which SGLang takes, is no vLLM configuration (``backends/common.yaml``).
    """
    if not constraints or not facts:
        return None
    first, *rest = constraints
    also = (*rest, *also)
    if len(facts) == 1:
        return fix_options(first, list(facts.values()), max_tp, also, memo).text()
    common = fix_options(first, list(facts.values()), max_tp, also, memo)
    groups: dict[FixOptions, list[str]] = {}  # what some engines add to the common options -> those engines
    for engine, f in facts.items():
        own = fix_options(first, [f], max_tp, also, memo)
        extra = own.beyond(common) if common else own
        if extra:
            groups.setdefault(extra, []).append(engine)
    parts = [common.text()] if common else []
    parts += [f"{', '.join(names)}{' also' if common else ''}: {extra.text()}" for extra, names in groups.items()]
    return "; ".join(p for p in parts if p) or None
