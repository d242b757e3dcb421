"""Weight-only integer formats (W4A16 ``int4_w4a16``, W8A16 ``int8_w8a16``): pure-torch quantize, pack,
unpack and dequantize helpers, and converters between the layouts that published AWQ and GPTQ
checkpoints store and the layout the ``triton`` runner's kernels read. No triton import.

Every tensor here holds the experts of one MoE weight stacked on a leading dimension ``E``; per expert the
weight is a linear layer ``W [N, K]`` (``N`` output rows, ``K`` input columns: ``w13``: N = 2*I, K = H;
``w2``: N = H, K = I). ``bits`` is 4 or 8; one scale (and zero point) per ``group_size`` consecutive
input columns, ``G = K / group_size`` groups (``group_size = K``: one group per row, "per channel").

Value of every element in every layout: ``w = (q - z) * s`` with ``q`` the unsigned code in
``[0, 2**bits)``, ``z`` the zero point of its group (an unsigned code too; symmetric formats use
``z = 2**(bits-1)``: 8 for int4, 128 for int8) and ``s`` the group's scale.

Layouts
-------
``codes`` (this module's canonical, unpacked form; :class:`IntWeights`):
    ``q [E, N, K]`` uint8 codes, ``scales [E, N, G]`` float32, ``zeros [E, N, G]`` uint8 or None
    (None = symmetric).

``kernel`` (what :mod:`moe_select.backends.triton_moe` runs; :func:`to_kernel`):
    int4: ``q [E, N, K/2]`` uint8, column ``2j`` in the low nibble and ``2j+1`` in the high nibble of
    byte ``j`` (the same nibble order as the packed FP4 formats of :mod:`moe_select.ops`);
    int8: ``q [E, N, K]`` uint8 (unsigned codes). Scales ``[E, N, G]`` float32, zero points
    ``[E, N, G]`` uint8 or None. K-contiguous rows, like the 16-bit and FP8 weights.

``awq`` (AutoAWQ ``WQLinear_GEMM``, 4-bit only; ``quant_method: awq``, ``version: gemm``), per expert:
    ``qweight [K, N/8]`` int32: nibble ``i`` (bits ``4i..4i+3``) of element ``[k, j]`` holds the code
    of output column ``8j + AWQ_ORDER[i]``, ``AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)``;
    ``qzeros [G, N/8]`` int32 packed the same way (zero codes stored as they are);
    ``scales [G, N]`` float16. ``w[k, n] = (q - z) * s``.
    Source: casper-hansen/AutoAWQ@030fe2a15b959425d278de8121f03ed895e3b10c:awq/modules/linear/gemm.py
    (``WQLinear_GEMM.from_linear``: ``order_map = [0, 2, 4, 6, 1, 3, 5, 7]``, ``qweight[:, col] |=
    intweight[:, col * 8 + order_map[i]] << (i * 4)``) and
    casper-hansen/AutoAWQ@7ee28736ab85f95724eeab2598bf49b13b86439f:awq/utils/packing_utils.py
    (``unpack_awq``, ``reverse_awq_order``, ``dequantize_gemm``: ``(iweight - izeros) * scales``).

``gptq`` (AutoGPTQ / GPTQModel ``checkpoint_format: gptq``, bits 4 or 8), per expert:
    ``qweight [K * bits / 32, N]`` int32: code of input row ``k`` in element ``[k // (32/bits), n]`` at
    bits ``bits * (k % (32/bits))`` (rows packed in order, low bits first);
    ``qzeros [G, N * bits / 32]`` int32: zero codes **minus one** (AutoGPTQ's ``zeros -= 1`` before
    packing; the dequantization adds 1 back), output columns packed in order, low bits first;
    ``scales [G, N]`` float16; ``g_idx [K]`` int32, the group of each input row: ``k // group_size``
    unless the checkpoint was quantized with ``desc_act`` (act-order), which permutes it.
    ``w[k, n] = s[g_idx[k], n] * (q[k, n] - (z[g_idx[k], n] + 1))``.
    Source: AutoGPTQ/AutoGPTQ@179776bd1d97a2e7f84b72318630f43719647a11:auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py
    (``QuantLinear.pack``: ``qweight[row] |= intweight[j] << (bits * (j - i))``, ``zeros -= 1``,
    ``qzeros[:, col] |= zeros[:, j] << (bits * (j - i))``; ``forward``: ``zeros = zeros + 1``,
    ``weight = scales * (weight - zeros)``; buffer shapes in ``__init__``).
    GPTQModel's internal ``gptq_v2`` format stores the zero codes without the minus one: pass
    ``zeros_minus_one=False``. A symmetric GPTQ checkpoint (``sym: true``) stores ``z - 1 =
    2**(bits-1) - 1`` in every nibble; its qzeros may be passed or left out (None).

All functions raise ValueError naming the tensor and the expected shape/dtype on a wrong input.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

#: AutoAWQ's packing order: nibble i of a packed int32 holds output column ``8j + AWQ_ORDER[i]``.
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
BITS = (4, 8)


@dataclass
class IntWeights:
    """Integer weights in the ``codes`` layout (module doc): ``q [E, N, K]`` uint8 codes, ``scales
    [E, N, G]`` float32, ``zeros [E, N, G]`` uint8 or None (symmetric: ``2**(bits-1)``)."""

    q: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None
    bits: int
    group_size: int

    @property
    def zero_point(self) -> torch.Tensor:
        """``[E, N, G]`` uint8 zero codes (the symmetric constant expanded when ``zeros`` is None)."""
        if self.zeros is not None:
            return self.zeros
        return torch.full(self.scales.shape, 1 << (self.bits - 1), dtype=torch.uint8, device=self.q.device)


def _check_bits(bits: int) -> None:
    if bits not in BITS:
        raise ValueError(f"bits must be 4 or 8, got {bits}")


def _groups(k: int, group_size: int) -> int:
    if group_size <= 0 or k % group_size:
        raise ValueError(f"group_size {group_size} must divide K = {k}")
    return k // group_size


def quantize_int(w: torch.Tensor, bits: int, group_size: int, *, sym: bool = True,
                 scale_dtype: torch.dtype = torch.float16) -> IntWeights:
    """Round-to-nearest group quantization of float ``w [E, N, K]`` (K a multiple of ``group_size``).

    Symmetric: ``s = amax / (2**(bits-1) - 1)`` per group, ``z = 2**(bits-1)``; asymmetric: ``s = (max -
    min) / (2**bits - 1)``, ``z = round(-min / s)`` clamped to the code range. Scales are rounded to
    ``scale_dtype`` first (checkpoints store float16) and the codes computed with the rounded scale, so
    :func:`dequantize_int` of the result is exactly what a checkpoint with these tensors means.
    Returns :class:`IntWeights` (scales stored float32, holding ``scale_dtype`` values)."""
    _check_bits(bits)
    if w.dim() != 3 or not w.is_floating_point():
        raise ValueError(f"w must be a float [E, N, K] tensor, got {w.dtype} {list(w.shape)}")
    e, n, k = w.shape
    g = _groups(k, group_size)
    blocks = w.float().reshape(e, n, g, group_size)
    qmax = (1 << bits) - 1
    if sym:
        half = 1 << (bits - 1)
        s = (blocks.abs().amax(-1) / (half - 1)).clamp(min=1e-8).to(scale_dtype).float()
        q = (torch.round(blocks / s[..., None]) + half).clamp(0, qmax)
        zeros = None
    else:
        lo, hi = blocks.amin(-1).clamp(max=0), blocks.amax(-1).clamp(min=0)
        s = ((hi - lo) / qmax).clamp(min=1e-8).to(scale_dtype).float()
        z = torch.round(-lo / s).clamp(0, qmax)
        q = (torch.round(blocks / s[..., None]) + z[..., None]).clamp(0, qmax)
        zeros = z.to(torch.uint8)
    return IntWeights(q.reshape(e, n, k).to(torch.uint8), s, zeros, bits, group_size)


def dequantize_int(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, bits: int,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``codes`` layout -> ``[E, N, K]`` in ``dtype``: ``(q - z) * s`` with the group of column k being
    ``k // (K / G)``. ``q [E, N, K]`` uint8, ``scales [E, N, G]`` float, ``zeros [E, N, G]`` uint8 or None."""
    _check_bits(bits)
    if q.dtype != torch.uint8 or q.dim() != 3:
        raise ValueError(f"q must be uint8 [E, N, K] codes, got {q.dtype} {list(q.shape)}")
    e, n, k = q.shape
    if scales.dim() != 3 or tuple(scales.shape[:2]) != (e, n) or k % scales.shape[2]:
        raise ValueError(f"scales must be [E, N, G] = [{e}, {n}, G] with G dividing K = {k}, got {list(scales.shape)}")
    gs = k // scales.shape[2]
    if zeros is None:
        z = torch.full((), float(1 << (bits - 1)), device=q.device)
    else:
        if tuple(zeros.shape) != tuple(scales.shape):
            raise ValueError(f"zeros must be [E, N, G] = {list(scales.shape)}, got {list(zeros.shape)}")
        z = zeros.float().repeat_interleave(gs, dim=-1)
    return ((q.float() - z) * scales.float().repeat_interleave(gs, dim=-1)).to(dtype)


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """``q [..., K]`` uint8 codes < 16 (K even) -> ``[..., K/2]`` uint8, column 2j low nibble, 2j+1 high."""
    if q.dtype != torch.uint8 or q.shape[-1] % 2:
        raise ValueError(f"int4 codes must be uint8 with an even last dimension, got {q.dtype} {list(q.shape)}")
    return (q[..., 0::2] | (q[..., 1::2] << 4)).contiguous()


def unpack_int4(p: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_int4`: ``[..., K/2]`` uint8 -> ``[..., K]`` uint8 codes."""
    if p.dtype != torch.uint8:
        raise ValueError(f"packed int4 must be uint8, got {p.dtype}")
    return torch.stack([p & 0xF, p >> 4], dim=-1).reshape(*p.shape[:-1], 2 * p.shape[-1])


def to_kernel(w: IntWeights) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``codes`` -> ``kernel`` layout: (``q`` [E, N, K/2] (int4) or [E, N, K] (int8) uint8, ``scales
    [E, N, G]`` float32 contiguous, ``zeros [E, N, G]`` uint8 or None)."""
    q = pack_int4(w.q) if w.bits == 4 else w.q.contiguous()
    return q, w.scales.float().contiguous(), None if w.zeros is None else w.zeros.contiguous()


def from_kernel(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, bits: int) -> IntWeights:
    """``kernel`` layout -> :class:`IntWeights` (checks shapes; raises ValueError)."""
    _check_bits(bits)
    if q.dtype != torch.uint8 or q.dim() != 3:
        raise ValueError(f"int{bits} kernel-layout weights must be uint8 [E, N, K{'/2' if bits == 4 else ''}], "
                         f"got {q.dtype} {list(q.shape)}")
    codes = unpack_int4(q) if bits == 4 else q
    k = codes.shape[2]
    if scales.dim() != 3 or tuple(scales.shape[:2]) != tuple(codes.shape[:2]) or k % scales.shape[2]:
        raise ValueError(f"scales must be [E, N, G] = [{codes.shape[0]}, {codes.shape[1]}, G] with G dividing "
                         f"K = {k}, got {list(scales.shape)}")
    if zeros is not None and (zeros.dtype != torch.uint8 or tuple(zeros.shape) != tuple(scales.shape)):
        raise ValueError(f"zeros must be uint8 {list(scales.shape)}, got {zeros.dtype} {list(zeros.shape)}")
    return IntWeights(codes, scales.float(), zeros, bits, k // scales.shape[2])


# --- int32 packing shared by AWQ and GPTQ ---------------------------------------------------------

def _pack32(codes: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Pack ``32/bits`` consecutive codes along ``dim`` into one int32, first code in the low bits."""
    per = 32 // bits
    c = codes.to(torch.int64).movedim(dim, -1)
    if c.shape[-1] % per:
        raise ValueError(f"the packed dimension ({c.shape[-1]}) must be a multiple of {per}")
    c = c.reshape(*c.shape[:-1], c.shape[-1] // per, per)
    shifts = torch.arange(0, 32, bits, device=codes.device, dtype=torch.int64)
    word = (c << shifts).sum(-1)
    word = torch.where(word >= 1 << 31, word - (1 << 32), word)      # two's complement int32
    return word.to(torch.int32).movedim(-1, dim).contiguous()


def _unpack32(words: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Inverse of :func:`_pack32`: int32 ``words`` -> uint8 codes, ``32/bits`` per word along ``dim``."""
    if words.dtype != torch.int32:
        raise ValueError(f"packed words must be int32, got {words.dtype}")
    shifts = torch.arange(0, 32, bits, device=words.device, dtype=torch.int32)
    w = words.movedim(dim, -1)
    c = (w[..., None] >> shifts) & ((1 << bits) - 1)                 # arithmetic shift, then mask
    return c.reshape(*w.shape[:-1], w.shape[-1] * (32 // bits)).movedim(-1, dim).to(torch.uint8)


def _awq_perm(n: int, device) -> torch.Tensor:
    """Column permutation: packed position ``8j + i`` holds column ``8j + AWQ_ORDER[i]``."""
    order = torch.tensor(AWQ_ORDER, device=device)
    return (torch.arange(0, n, 8, device=device)[:, None] + order).reshape(-1)


# --- AWQ ------------------------------------------------------------------------------------------

def to_awq(w: IntWeights) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``codes`` (4-bit) -> AWQ tensors stacked per expert: (``qweight [E, K, N/8]`` int32, ``qzeros
    [E, G, N/8]`` int32, ``scales [E, G, N]`` float16). Symmetric weights get their constant zero
    point (8) written out, as AWQ always stores zeros. Raises ValueError for 8-bit or N not a multiple of 8."""
    if w.bits != 4:
        raise ValueError("AWQ checkpoints are 4-bit only")
    e, n, k = w.q.shape
    if n % 8:
        raise ValueError(f"AWQ packs 8 output columns per int32: N = {n} is not a multiple of 8")
    perm = _awq_perm(n, w.q.device)
    qweight = _pack32(w.q.transpose(1, 2)[:, :, perm], 4, dim=2)                  # [E, K, N/8]
    qzeros = _pack32(w.zero_point.transpose(1, 2)[:, :, perm], 4, dim=2)          # [E, G, N/8]
    return qweight, qzeros, w.scales.transpose(1, 2).to(torch.float16).contiguous()


def from_awq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor) -> IntWeights:
    """AWQ tensors stacked per expert (``qweight [E, K, N/8]`` int32, ``qzeros [E, G, N/8]`` int32,
    ``scales [E, G, N]`` float) -> :class:`IntWeights` (4-bit, explicit zero points). Raises ValueError
    naming the tensor and the expected shape when they do not fit together."""
    if qweight.dtype != torch.int32 or qweight.dim() != 3:
        raise ValueError(f"AWQ qweight must be int32 [E, K, N/8], got {qweight.dtype} {list(qweight.shape)}")
    e, k, n8 = qweight.shape
    n = 8 * n8
    if scales.dim() != 3 or scales.shape[0] != e or scales.shape[2] != n or k % scales.shape[1]:
        raise ValueError(f"AWQ scales must be [E, G, N] = [{e}, G, {n}] with G dividing K = {k}, got {list(scales.shape)}")
    g = scales.shape[1]
    if qzeros is None or qzeros.dtype != torch.int32 or tuple(qzeros.shape) != (e, g, n8):
        got = None if qzeros is None else f"{qzeros.dtype} {list(qzeros.shape)}"
        raise ValueError(f"AWQ qzeros must be int32 [E, G, N/8] = [{e}, {g}, {n8}], got {got}")
    inv = torch.argsort(_awq_perm(n, qweight.device))
    q = _unpack32(qweight, 4, dim=2)[:, :, inv].transpose(1, 2).contiguous()     # [E, N, K]
    z = _unpack32(qzeros, 4, dim=2)[:, :, inv].transpose(1, 2).contiguous()      # [E, N, G]
    return IntWeights(q, scales.float().transpose(1, 2).contiguous(), z, 4, k // g)


# --- GPTQ -----------------------------------------------------------------------------------------

def to_gptq(w: IntWeights, *, zeros_minus_one: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``codes`` -> GPTQ tensors stacked per expert: (``qweight [E, K*bits/32, N]`` int32, ``qzeros
    [E, G, N*bits/32]`` int32 (zero codes minus one unless ``zeros_minus_one=False``), ``scales [E, G,
    N]`` float16, ``g_idx [E, K]`` int32 = ``k // group_size``). Raises ValueError when K or N is not a
    multiple of ``32/bits``."""
    e, n, k = w.q.shape
    qweight = _pack32(w.q.transpose(1, 2), w.bits, dim=1)                          # [E, K*bits/32, N]
    z = w.zero_point.transpose(1, 2).to(torch.int64)
    if zeros_minus_one:
        if bool((z == 0).any()):
            raise ValueError("a zero point of 0 cannot be stored in GPTQ's (v1) format, which stores zero - 1; "
                             "use zeros_minus_one=False (gptq_v2) or a symmetric quantization")
        z = z - 1
    qzeros = _pack32(z, w.bits, dim=2)                                            # [E, G, N*bits/32]
    g_idx = (torch.arange(k, device=w.q.device, dtype=torch.int32) // w.group_size).expand(e, k).contiguous()
    return qweight, qzeros, w.scales.transpose(1, 2).to(torch.float16).contiguous(), g_idx


def check_g_idx(g_idx: torch.Tensor | None, k: int, group_size: int, name: str = "g_idx") -> None:
    """Accept ``g_idx`` ``[K]`` or ``[E, K]`` only when it is the trivial ``k // group_size`` (no
    act-order). Raises ValueError otherwise: a desc_act (act-order) GPTQ checkpoint permutes the input
    rows of every group, which these kernels (grouped by consecutive input rows) do not implement."""
    if g_idx is None:
        return
    if g_idx.shape[-1] != k or g_idx.dim() not in (1, 2):
        raise ValueError(f"{name} must be [K] or [E, K] with K = {k}, got {list(g_idx.shape)}")
    want = torch.arange(k, device=g_idx.device) // group_size
    if not bool((g_idx.to(torch.int64) == want).all()):
        raise ValueError(f"{name} is not the trivial k // group_size ({group_size}): the checkpoint was quantized with "
                         "desc_act (act-order), which the triton runner does not implement; use a checkpoint quantized "
                         "with desc_act=false, or a runner that reorders rows by g_idx")


def from_gptq(qweight: torch.Tensor, qzeros: torch.Tensor | None, scales: torch.Tensor, bits: int, *,
              g_idx: torch.Tensor | None = None, zeros_minus_one: bool = True) -> IntWeights:
    """GPTQ tensors stacked per expert -> :class:`IntWeights`. ``qweight [E, K*bits/32, N]`` int32,
    ``qzeros [E, G, N*bits/32]`` int32 or None (symmetric: zero ``2**(bits-1)``), ``scales [E, G, N]``
    float, ``g_idx`` ``[K]``/``[E, K]`` or None. Raises ValueError on shapes that do not fit together
    and on a non-trivial ``g_idx`` (desc_act, :func:`check_g_idx`)."""
    _check_bits(bits)
    per = 32 // bits
    if qweight.dtype != torch.int32 or qweight.dim() != 3:
        raise ValueError(f"GPTQ qweight must be int32 [E, K*{bits}/32, N], got {qweight.dtype} {list(qweight.shape)}")
    e, kp, n = qweight.shape
    k = kp * per
    if scales.dim() != 3 or scales.shape[0] != e or scales.shape[2] != n or k % scales.shape[1]:
        raise ValueError(f"GPTQ scales must be [E, G, N] = [{e}, G, {n}] with G dividing K = {k}, got {list(scales.shape)}")
    g = scales.shape[1]
    check_g_idx(g_idx, k, k // g)
    q = _unpack32(qweight, bits, dim=1).transpose(1, 2).contiguous()              # [E, N, K]
    zeros = None
    if qzeros is not None:
        if qzeros.dtype != torch.int32 or tuple(qzeros.shape) != (e, g, n // per) or n % per:
            raise ValueError(f"GPTQ qzeros must be int32 [E, G, N*{bits}/32] = [{e}, {g}, {n // per}], "
                             f"got {qzeros.dtype} {list(qzeros.shape)}")
        z = _unpack32(qzeros, bits, dim=2).to(torch.int64) + (1 if zeros_minus_one else 0)
        if bool((z >> bits).any()):
            raise ValueError(f"GPTQ qzeros hold the code {(1 << bits) - 1}, i.e. a zero point of {1 << bits} in the v1 "
                             "format (stored zero - 1), outside the code range: the checkpoint cannot be read exactly "
                             "(if it is in the gptq_v2 format: from_gptq(..., zeros_minus_one=False), then "
                             "quant_int.to_kernel, and give prepare_weights the result; TritonMoeCore takes "
                             "gptq_zeros_minus_one=False for its own detection)")
        zeros = z.to(torch.uint8).transpose(1, 2).contiguous()                   # [E, N, G]
    return IntWeights(q, scales.float().transpose(1, 2).contiguous(), zeros, bits, k // g)
