"""The closed vocabulary: architectures, GPUs, activations, routing methods, engines, phases, a2a modes.
Quantization formats live in :mod:`moe_select.formats` (re-exported here); runner and all-to-all
backend names are open (the capability files' names, checked against the catalog).

GPU-to-arch mapping from NVIDIA's published compute capabilities (developer.nvidia.com/cuda-gpus) and
AMD's gfx targets (ROCm's GPU hardware specifications); names follow SGLang's operator-facing names.
"""
from __future__ import annotations

from typing import Literal, get_args

from .formats import QUANTS, Quant  # noqa: F401  (one table of formats; re-exported)

Arch = Literal["cpu", "sm80", "sm86", "sm89", "sm90", "sm100", "sm103", "sm110", "sm120", "sm121", "gfx942", "gfx950"]
ARCHS: tuple[str, ...] = get_args(Arch)
NVIDIA_ARCHS = tuple(a for a in ARCHS if a.startswith("sm"))

Activation = Literal["silu", "gelu", "relu2", "swiglu_oai"]
ACTIVATIONS: tuple[str, ...] = get_args(Activation)
#: Activations that read a gate and an up half from w13 ([E, 2*I, H]); relu2 is not gated ([E, I, H]).
GATED_ACTIVATIONS = ("silu", "gelu", "swiglu_oai")

#: Routing methods as the engines distinguish them (``moe_select.routing`` implements each):
#: softmax_topk (softmax, top-k, no renormalisation: Qwen1.5-MoE, OLMoE), renormalize (softmax, top-k,
#: renormalised: Qwen3-MoE, Mixtral, gpt-oss), deepseek_v3 (sigmoid + correction bias, group-limited),
#: sigmoid_topk (sigmoid + correction bias, no groups: MiniMax-M2), llama4 (top-k logits, sigmoid
#: weight applied to the expert's *input*), sparsemixer (Phi-3.5-MoE), custom (the engine computes the
#: top-k ids and weights itself and passes them; weights applied to the output).
Routing = Literal["softmax_topk", "renormalize", "deepseek_v3", "sigmoid_topk", "llama4", "sparsemixer", "custom"]
ROUTINGS: tuple[str, ...] = get_args(Routing)
#: Routing methods whose weight multiplies the expert's input, not its output.
WEIGHT_ON_INPUT_ROUTINGS = ("llama4",)

#: Serving engines whose facts can differ; ``any`` (the default) plans for whichever engine runs it.
Engine = Literal["sglang", "vllm", "trtllm"]
ENGINES: tuple[str, ...] = get_args(Engine)

#: What a deployment runs: prefill workers, decode workers, or both (no PD disaggregation).
Phase = Literal["prefill", "decode", "both"]
PHASES_OF = {"prefill": ("prefill",), "decode": ("decode",), "both": ("prefill", "decode")}

#: Modes of an all-to-all backend (SGLang's names; each a2a capability file says which it has). ``auto``
#: picks per phase as the a2a capability file says (usually normal for prefill, low_latency for decode).
A2AMode = Literal["normal", "low_latency", "auto"]
A2A_MODES = ("normal", "low_latency")

Runner = str  # runner names are the capability files' names; validated against the catalog


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
