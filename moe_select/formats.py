"""The quantization formats of expert weights, one table: what each format stores, its parameters (block
and group shapes, packing), the names of the scale tensors ``prepare_weights`` takes, the activation
precision the format fixes, bytes per element, and the tolerance of a runner's output against the
float64 reference. Everything that needs such a fact reads it here (vocabulary, model-config reading,
planning constraints, memory estimates, runners' shape checks, ``verify``), nothing repeats it.

Adding a format: a row in :data:`FORMATS` and its name in :data:`Quant` (checked against each other at
import), the capability files of the runners that run it, and tests (README, "Where things live").

Sources of the layouts: OCP Microscaling Formats v1.0 (MXFP4/MXFP8: 32-element blocks, e8m0 scales);
NVIDIA ModelOpt NVFP4 (16-element blocks, e4m3 block scales and a float32 global scale per tensor);
DeepSeek-V3 ``quantization_config`` (``weight_block_size: [128, 128]``, ``weight_scale_inv`` multiplies);
AutoAWQ / AutoGPTQ packing (:mod:`moe_select.quant_int` cites the code).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

Quant = Literal[
    "bf16", "fp16", "fp8_tensor", "fp8_channel", "fp8_block", "mxfp8", "nvfp4", "mxfp4",
    "int8_w8a8", "int8_w8a16", "int4_w4a16",
]

#: Precision of the activations a runner feeds its GEMMs (structured; capability files use these names).
Precision = Literal["float32", "bf16", "fp16", "fp8_tensor", "fp8_token", "fp8_group", "mxfp8", "nvfp4", "int8_token"]
PRECISIONS: tuple[str, ...] = get_args(Precision)

#: Unit roundoff of each precision's element (2^-p for p significand bits): bf16 8, fp16 11, e4m3 4
#: (fp8 and mxfp8 elements), e2m1 2; int8 with a per-token absmax scale: half a step of 127 levels.
UNIT_ROUNDOFF: dict[str, float] = {
    "float32": 2.0**-24, "bf16": 2.0**-8, "fp16": 2.0**-11, "fp8_tensor": 2.0**-4, "fp8_token": 2.0**-4,
    "fp8_group": 2.0**-4, "mxfp8": 2.0**-4, "nvfp4": 2.0**-2, "int8_token": 1 / 254,
}


#: Output dtype names ``tolerance`` takes, torch's spelling included.
_OUTPUT = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "float32": "float32"}


def tolerance(precision: str, output: str = "bf16") -> float:
    """Tolerance on ``rel_error = max|out - ref| / max|ref|`` against the float64 reference for a runner
    whose GEMM inputs are in ``precision`` (a plan's ``activation_precision``) and whose output dtype is
    ``output`` (``bf16``/``bfloat16``, ``fp16``/``float16`` or ``float32``). The one table of tolerances:
    ``verify``, ``moe-select run``, the launcher, the benchmarks and the tests all read it. The weights
    are dequantized exactly for the reference, so only the runner's arithmetic counts.

    16-bit activations: 4 roundings in that dtype (input, h, gated activation, output), ``4u``: bf16
    1.6e-2 (measured on an H200 at five layer shapes: 3.6e-3 to 9.5e-3), fp16 2.0e-3. Quantized
    activations: their two quantizations (input and gated activation), whose per-element errors dot
    products average, ``2u``, plus the output's 16-bit roundings ``4u_out``: fp8 0.14 (measured 3.7e-2
    to 6.0e-2), int8 2.3e-2. float32 compute: sums of up to ~10^4 terms, 1e-4, plus ``4u_out`` when the
    output is 16-bit. Raises ``KeyError`` for an unknown precision or output name."""
    out = _OUTPUT[output]
    out_u = 0.0 if out == "float32" else 4 * UNIT_ROUNDOFF[out]
    if precision == "float32":
        return 1e-4 + out_u
    if precision in ("bf16", "fp16"):
        return max(4 * UNIT_ROUNDOFF[precision], out_u)
    return 2 * UNIT_ROUNDOFF[precision] + out_u


@dataclass(frozen=True)
class Format:
    """One row of the table.

    ``bits`` per stored weight element; ``pack_k``: elements packed per stored element along K (2 for
    4-bit formats in their canonical layout); ``stored_bytes``: bytes per weight element including its
    scales (the memory estimate); ``scales``: ``prepare_weights`` keyword suffixes (``w13_<name>``,
    ``w2_<name>``) with the shape and dtype of each; ``params``: the format's parameters and defaults
    (``block``: ``[bn, bk]`` or an element count along K; ``group_size``); ``activation``: the
    precision the format fixes (None: the runner chooses, per its capability file, else the plan computes in
    bf16, or fp16 on a GPU without bf16: the weight-only ``*_w*a16`` formats and mxfp4); ``online``: an
    engine can make it from a bf16/fp16 checkpoint at load."""

    name: str
    bits: int
    pack_k: int
    stored_bytes: float
    activation: str | None
    scales: dict[str, str] = field(default_factory=dict)
    params: dict[str, object] = field(default_factory=dict)
    online: bool = False
    summary: str = ""


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("bf16", 16, 1, 2, "bf16", summary="unquantized bfloat16"),
    Format("fp16", 16, 1, 2, "fp16", summary="unquantized float16"),
    Format("fp8_tensor", 8, 1, 1, "fp8_tensor", {"scale": "[E] float32"}, online=True,
           summary="FP8 e4m3 weights, one scale per expert tensor; per-tensor FP8 activations"),
    Format("fp8_channel", 8, 1, 1, "fp8_token", {"scale": "[E, N] float32"}, online=True,
           summary="FP8 e4m3 weights, one scale per output channel; dynamic per-token FP8 activations"),
    Format("fp8_block", 8, 1, 1 + 4 / (128 * 128), "fp8_group", {"scale": "[E, ceil(N/bn), ceil(K/bk)] float32"},
           {"block": [128, 128]},
           summary="FP8 e4m3 weights in [bn, bk] blocks (DeepSeek-V3: 128x128); per-token-group FP8 activations"),
    Format("mxfp8", 8, 1, 1 + 1 / 32, "mxfp8", {"scale": "[E, N, K/32] uint8 (e8m0)"}, {"block": 32},
           summary="OCP MXFP8: e4m3 elements, an e8m0 scale per 32 along K"),
    Format("nvfp4", 4, 2, 0.5 + 1 / 16, "nvfp4", {"scale": "[E, N, K/16] float8_e4m3fn", "global_scale": "[E] float32"},
           {"block": 16}, summary="NVIDIA NVFP4: packed e2m1, an e4m3 scale per 16 along K, a global scale"),
    Format("mxfp4", 4, 2, 0.5 + 1 / 32, None, {"scale": "[E, N, K/32] uint8 (e8m0)"}, {"block": 32},
           summary="OCP MXFP4 (gpt-oss): packed e2m1, an e8m0 scale per 32 along K; activations per runner"),
    Format("int8_w8a8", 8, 1, 1, "int8_token", {"scale": "[E, N] float32"},
           summary="int8 weights per channel, dynamic per-token int8 activations"),
    Format("int8_w8a16", 8, 1, 1, None, {"scale": "[E, N, K/group] float32", "zeros": "[E, N, K/group] uint8 or none"},
           {"group_size": 128}, summary="weight-only int8 with group scales (GPTQ 8-bit)"),
    Format("int4_w4a16", 4, 2, 0.5, None, {"scale": "[E, N, K/group] float32", "zeros": "[E, N, K/group] uint8 or none"},
           {"group_size": 128}, summary="weight-only int4 with group scales (AWQ, GPTQ, compressed-tensors wNa16)"),
)}
QUANTS: tuple[str, ...] = get_args(Quant)
if tuple(FORMATS) != QUANTS:  # a format added in one place only
    raise RuntimeError(f"moe_select.formats: FORMATS {tuple(FORMATS)} and Quant {QUANTS} disagree")


def lookup(name: str) -> Format | None:
    """The row of format ``name``, or None for a name this moe-select does not know (a deployment may name
    any well-formed format: the selector judges it; nothing that reads the table may fail with a KeyError)."""
    return FORMATS.get(name)


def block_shape(quant: str, params: dict[str, object] | None = None) -> tuple[int, int] | None:
    """``(bn, bk)`` of a block-scaled FP8 format (the checkpoint's ``weight_block_size``, default
    128x128), None for other formats."""
    if quant != "fp8_block":
        return None
    block = (params or {}).get("block") or FORMATS[quant].params["block"]
    if not isinstance(block, (list, tuple)) or len(block) != 2:
        raise ValueError(f"fp8_block needs a [bn, bk] block, got {block!r}")
    return int(block[0]), int(block[1])


def group_size(quant: str, params: dict[str, object] | None = None) -> int | None:
    """Elements along K that share one scale: the weight-only int formats' group, the FP4/MXFP8 block;
    None for formats without groups along K, and for a weight-only int format with ``group_size`` -1 (per
    output channel, as AutoAWQ/AutoGPTQ write it: one scale over all of K, so no group constrains the split),
    and for a name that is no format (:func:`lookup`)."""
    f = lookup(quant)
    if f is None:
        return None
    if "group_size" in f.params:
        g = (params or {}).get("group_size") or f.params["group_size"]
        return g if isinstance(g, int) and g > 0 else None
    block = f.params.get("block")
    return int(block) if isinstance(block, int) else None
