"""The closed vocabulary: architectures, GPUs, quantization formats, activations, routing, a2a backends.

Source: shared knowledge file ``backends.md`` (2026-11), gathered from FlashInfer, SGLang, vLLM and
TensorRT-LLM; GPU-to-arch mapping from NVIDIA's and AMD's published compute capabilities / gfx targets.
Names follow SGLang's operator-facing names.
"""
from __future__ import annotations

from typing import Literal, get_args

Arch = Literal["cpu", "sm80", "sm86", "sm89", "sm90", "sm100", "sm103", "sm110", "sm120", "sm121", "gfx942", "gfx950"]
ARCHS: tuple[str, ...] = get_args(Arch)
NVIDIA_ARCHS = tuple(a for a in ARCHS if a.startswith("sm"))

Quant = Literal[
    "bf16", "fp16", "fp8_tensor", "fp8_channel", "fp8_block", "mxfp8", "nvfp4", "mxfp4",
    "int8_w8a8", "int8_w8a16", "int4_w4a16",
]
QUANTS: tuple[str, ...] = get_args(Quant)

Activation = Literal["silu", "gelu", "relu2", "swiglu_oai"]
ACTIVATIONS: tuple[str, ...] = get_args(Activation)
#: Activations that read a gate and an up half from w13 ([E, 2*I, H]); relu2 is not gated ([E, I, H]).
GATED_ACTIVATIONS = ("silu", "gelu", "swiglu_oai")

Routing = Literal["softmax_topk", "renormalize", "deepseek_v3", "llama4", "sigmoid_topk"]
ROUTINGS: tuple[str, ...] = get_args(Routing)

A2A = Literal["none", "torch", "deepep", "flashinfer", "mooncake", "pplx", "mori"]
A2AS: tuple[str, ...] = get_args(A2A)

DeepEPMode = Literal["normal", "low_latency", "auto"]
#: ``auto`` (SGLang's default) uses normal mode for prefill and low_latency for decode.
DEEPEP_MODES_OF = {"normal": ("normal",), "low_latency": ("low_latency",), "auto": ("normal", "low_latency")}

Runner = str  # runner names are the capability files' names; validated against the catalog

#: Activation precision that a format fixes (None: the runner chooses, per its capability file).
ACTIVATION_PRECISION: dict[str, str | None] = {
    "bf16": "bf16", "fp16": "fp16",
    "fp8_tensor": "fp8 per-tensor", "fp8_channel": "fp8 dynamic per-token",
    "fp8_block": "fp8 per-token groups of 128", "mxfp8": "mxfp8", "nvfp4": "nvfp4",
    "mxfp4": None,
    "int8_w8a8": "int8 per-token", "int8_w8a16": "bf16", "int4_w4a16": "bf16",
}

#: Product name (upper-cased, spaces kept) -> architecture. Compute capabilities: NVIDIA CUDA GPUs
#: table; gfx targets: AMD ROCm hardware specifications.
GPUS: dict[str, str] = {
    "A100": "sm80", "A800": "sm80", "A30": "sm80",
    "A10": "sm86", "A10G": "sm86", "A40": "sm86", "RTX 3090": "sm86", "RTX A6000": "sm86",
    "L4": "sm89", "L40": "sm89", "L40S": "sm89", "RTX 4090": "sm89", "RTX 6000 ADA": "sm89",
    "H100": "sm90", "H200": "sm90", "H20": "sm90", "H800": "sm90", "GH200": "sm90",
    "B200": "sm100", "GB200": "sm100",
    "B300": "sm103", "GB300": "sm103",
    "THOR": "sm110",
    "RTX 5090": "sm120", "RTX PRO 6000": "sm120",
    "GB10": "sm121", "DGX SPARK": "sm121",
    "MI300X": "gfx942", "MI325X": "gfx942", "MI300A": "gfx942",
    "MI350X": "gfx950", "MI355X": "gfx950",
}


def gpu_arch(name: str) -> str | None:
    """Architecture of a GPU product name (case and spacing forgiven: 'h200', 'RTX-PRO-6000'), or None."""
    key = " ".join(name.upper().replace("-", " ").replace("_", " ").split())
    key = key.removeprefix("NVIDIA ").removeprefix("AMD INSTINCT ").removeprefix("AMD ")
    if key in GPUS:
        return GPUS[key]
    # Accept memory/form-factor suffixes ("H100 80GB HBM3", "H200 NVL", "A100-SXM4-80GB").
    for gpu in sorted(GPUS, key=len, reverse=True):
        if key.startswith(gpu + " "):
            return GPUS[gpu]
    return None


def arch_of_capability(major: int, minor: int) -> str:
    """``sm<major><minor>`` for an NVIDIA compute capability, e.g. (9, 0) -> 'sm90'."""
    return f"sm{major}{minor}"
