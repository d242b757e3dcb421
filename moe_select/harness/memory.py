"""Memory estimates of ``moe-select run`` (one process) and ``run --nproc`` (one process per rank), so
that a run that cannot fit is refused before any weight is built, with advice that helps.

Bytes are counted per element as the runners hold them (:func:`stored_bytes`, :func:`build_bytes`: the
format's row in ``backends/formats.yaml``, :mod:`moe_select.formats`) and per token as the forward's
temporaries need them (:func:`activation_bytes`); the numbers are upper estimates, not measurements of a
particular runner.
"""
from __future__ import annotations

import os
from pathlib import Path

#: Bytes per element of the float32 copy torch_native's prepare_weights makes of a quantized format.
DEQUANTIZED_BYTES = 4
#: Resident size of a Python process with torch (CPU) imported: measured about 0.4 GiB.
PROCESS_OVERHEAD = 450 * 2**20


def stored_bytes(quant: str) -> float:
    """Bytes per stored expert-weight element of format ``quant``, scales included (the row's
    :attr:`~moe_select.formats.Format.stored_bytes`: mxfp4 0.5 + 1/32, nvfp4 0.5 + 1/16, fp8 1, bf16 2).
    Raises ValueError for a name without a row (:func:`moe_select.formats.missing_row`)."""
    from ..formats import lookup, missing_row

    row = lookup(quant)
    if row is None:
        raise ValueError(missing_row(quant))
    return row.stored_bytes


def build_bytes(quant: str) -> float:
    """Bytes per element while the layer is built: the stored weights plus, for a quantized format (one with
    scales; torch_native dequantizes it in prepare_weights), its float32 copy. Raises as :func:`stored_bytes`."""
    from ..formats import lookup

    row = lookup(quant)
    return stored_bytes(quant) + (DEQUANTIZED_BYTES if row is not None and row.quantized else 0)


def layer_bytes(num_local_experts: int, w13_rows: int, hidden: int, inter: int, per_element: float) -> int:
    """Bytes of one rank's expert weights (w13 ``[E, w13_rows, H]`` + w2 ``[E, H, I]``) at ``per_element``
    bytes per element (:func:`stored_bytes`, :func:`build_bytes`, or 8 for float64)."""
    return int(num_local_experts * (w13_rows * hidden + hidden * inter) * per_element)


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
