"""Memory estimates of ``moe-select run`` (one process) and ``run --nproc`` (one process per rank), so
that a run that cannot fit is refused before any weight is built, with advice that helps.

Bytes are counted per element as the runners hold them (:data:`STORED_BYTES`, :data:`BUILD_BYTES`) and
per token as the forward's temporaries need them (:func:`activation_bytes`); the numbers are upper
estimates, not measurements of a particular runner.
"""
from __future__ import annotations

import os
from pathlib import Path

#: Bytes per stored expert-weight element (mxfp4/nvfp4: two e2m1 per byte; their scales add 1/32 or 1/16).
STORED_BYTES = {"bf16": 2, "fp16": 2, "fp8_tensor": 1, "fp8_channel": 1, "fp8_block": 1, "mxfp4": 0.5, "nvfp4": 0.5}
#: Bytes per element while the layer is built: the stored weights plus, for the formats torch_native
#: dequantizes in prepare_weights, its float32 copy.
BUILD_BYTES = {"bf16": 2, "fp16": 2, "fp8_tensor": 1 + 4, "fp8_channel": 1 + 4, "fp8_block": 1 + 4, "mxfp4": 0.5 + 4,
               "nvfp4": 0.5 + 4}
#: Resident size of a Python process with torch (CPU) imported: measured about 0.4 GiB.
PROCESS_OVERHEAD = 450 * 2**20


def layer_bytes(num_local_experts: int, w13_rows: int, hidden: int, inter: int, quant: str, table=STORED_BYTES) -> int:
    """Bytes of one rank's expert weights (w13 ``[E, w13_rows, H]`` + w2 ``[E, H, I]``) in ``quant``, per
    element as ``table`` counts them (2 bytes for formats it does not list)."""
    return int(num_local_experts * (w13_rows * hidden + hidden * inter) * table.get(quant, 2))


def activation_bytes(*, tokens: int, hidden: int, inter: int, top_k: int, num_experts: int) -> int:
    """Upper estimate of the forward's temporaries for ``tokens`` tokens, in bytes: the hidden states and
    output (16-bit, 2 x H x 2), the router logits (E x 4), and per routed slot (K per token) the gathered
    row, h, the activation and y in float32 ((3 H + 3 I) x 4) -- torch_native computes in float32, the
    grouped-GEMM runners hold less."""
    per_token = 2 * hidden * 2 + num_experts * 4 + top_k * (3 * hidden + 3 * inter) * 4
    return tokens * per_token


def available_host_bytes() -> int:
    """Available RAM in bytes: ``MemAvailable`` of /proc/meminfo (Linux), else total physical memory."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def device_free_bytes(device) -> int:
    """Free memory of a CUDA ``device`` in bytes (``torch.cuda.mem_get_info``)."""
    import torch

    return int(torch.cuda.mem_get_info(device)[0])


def gib(n: float) -> str:
    """``n`` bytes as GiB text, e.g. ``'3.9 GiB'``."""
    return f"{n / 2**30:.1f} GiB"
