"""Tile-configuration tuner of the ``triton`` runner (backends/triton_moe_kernels.py), for one GPU call:

    python benchmarks/tune_triton_moe.py --out $OUT --budget-s 540

What it tunes: for each layer shape (one rank, tp = ep = 1) of Qwen3-30B-A3B (E128 K8 H2048 I768),
Qwen3-235B-A22B (E128 K8 H4096 I1536), DeepSeek-V3 (E256 K8 H7168 I2048), Mixtral-8x7B (E8 K2 H4096
I14336) and gpt-oss-20b (E32 K4 H2880 I2880, swiglu_oai), formats bf16, fp8_channel and fp8_block
(128x128), at 1, 32, 256, 2048 and 8192 tokens: ``BLOCK_M`` (shared by the sort and both GEMMs) and,
per GEMM, ``BLOCK_N``, ``BLOCK_K``, ``GROUP_M``, ``num_warps``, ``num_stages``.

How (the search is separable, so it times sum-of-candidates, not their product):

- Inputs: random weights ``~N(0, 1/fan_in)`` quantized to the format (moe_select.ops), routing from
  random logits (softmax top-k, renormalised: moe_select.routing), bf16 hidden states; 4 input sets
  (different tokens and experts) rotated inside each timed graph so that weights are not served from L2.
- For each candidate ``BLOCK_M``: the sort (``moe_align``) of each set is run once; then each GEMM config
  is timed alone on those sorted rows: one CUDA graph holding ``reps`` launches over the 4 sets, replayed
  (1 warm-up, then ``timed`` replays, CUDA events), time per launch = median replay / launches. The
  second GEMM reads the first GEMM's real output (default config). A candidate slower than 1.5x the
  best so far after its first replay is not replayed further. The sort is timed the same way per
  ``BLOCK_M``. Best ``BLOCK_M`` = argmin(sort + best GEMM1 + best GEMM2); the top-k sum does not depend
  on the configuration and is left out.
- Candidates: the default heuristic's configuration (always, so a tuned entry is never slower than the
  default in this measurement) plus a pruned grid: ``BLOCK_N``, ``BLOCK_K`` in {64, 128, 256} (FP8:
  {128, 256}; fp8_block: the block's 128), ``num_stages``, ``num_warps`` 4/8 (the default's ``GROUP_M``,
  and the other of 1/8 once), keeping configs whose pipelined shared memory fits 220 KB, whose float32
  accumulators fit 128 registers per thread, and whose tiles are not wider than the layer.
  Weight-streaming tiles (``BLOCK_M`` <= 32) try ``BLOCK_N`` 32-128 and 3-5 stages; compute tiles
  ``BLOCK_N`` 64-256 and 2-4 stages. ``BLOCK_M`` candidates: the default's and its half and double,
  at most ``2*pow2(m)`` for the mean rows per expert ``m = T*K/E``, from 64 when ``m >= 256``. Phase ``quick`` (every shape first): the default ``BLOCK_M`` and a handful of
  neighbours of the default configuration; phase ``full``: every candidate, for shapes in the same
  order, as long as the budget lasts.
- fp8_channel: every candidate is also timed with ``PREQUANT`` switched (each GEMM's A quantized to e4m3 by
  one pass before it, ``triton_moe_kernels.row_quant``, instead of in its main loop; the timed call includes the
  pass), so a tuned entry keeps whichever is faster per GEMM.
- ``--gu-dot`` (bf16, fp8_channel; gated layers): every first-GEMM candidate from ``BLOCK_M`` 64 is also timed with
  ``GU_DOT`` and ``TMA`` (the gate and up tiles as one TMA box and one MMA of ``2 * BLOCK_N`` columns).
- ``--prefetch`` (mxfp4, nvfp4): every MMA-tile candidate is also timed with ``PREFETCH`` (the next K tile's block
  scales loaded one iteration ahead; on one H100 2026-12-06 16 % faster on gpt-oss-20b at 256 tokens, slower at the
  other buckets measured, so a per-bucket choice).
- ``--tma`` (bf16, fp8_channel, fp8_block): every candidate from ``BLOCK_M`` 64 is also timed with ``TMA`` switched
  (the weight tiles loaded through a TMA tensor descriptor instead of per-thread pointer loads), so a tuned entry
  keeps whichever is faster per GEMM.
- Compilation runs ahead in ``--jobs`` CPU worker processes (spawned; each compiles a configuration
  with ``warmup=True`` on a one-expert layer of the real strides, which fills Triton's on-disk cache;
  the main process's own first launch of that configuration then loads it from the cache). Jobs are
  queued in the order the measurements need them; a configuration that does not compile is logged and
  skipped.
- Budget: ``--budget-s`` wall-clock seconds from the start; the script stops measuring
  ``--reserve-s`` (default 15) before it, writes what it has (config files hold the tokens measured so
  far; the log says what was skipped), stops its workers and exits 0.

Packed FP4 (W4A16, issue 24): ``--formats mxfp4 nvfp4`` (random packed codes and scales: every code value,
scales around ``1/sqrt(K)``), or ``--fp4`` for the issue's four layers in their checkpoints' formats (gpt-oss-20b
and gpt-oss-120b in mxfp4, Qwen3-30B-A3B and DeepSeek-V3 in nvfp4). Their ``BLOCK_K`` candidates are whole scale
groups (>= 32); ``SWAP_AB`` (the weight tile as the MMA's M operand) is not tried: the runner's GPU decode cannot
read it (``triton_moe_kernels.SWAP_AB_ASM_ERROR``). Where the mean rows per expert ``m = T*K/E`` is at most 4, the GEMV mode (``GEMV``: no MMA, the block's
few rows in registers) is timed as well: ``BLOCK_M`` 1, 2 and 4 (at most ``pow2(T)``) next to the MMA tile's 16,
each with GEMV configs (``BLOCK_N`` 16-64, ``BLOCK_K`` 64-256, ``SPLIT_K`` 1, 2, 4 or 8, and 2 warps near the
default; the sum of both launches when split). The default heuristic keeps the MMA tiles (GEMV is opt-in until
measured); up to ``m = 2`` (``triton_moe_kernels.GEMV_MAX_ROWS_PER_EXPERT``) the quick phase times the GEMV mode's
block height next to the default's (:func:`quick_block_ms`), and the full phase all of them. Up to
:data:`DIRECT_TUNE_MAX_TOKENS` tokens the full phase also searches the DIRECT buckets (no sort, the top-k sum fused
into the second GEMM: ``triton_moe_kernels.fp4_direct_gemm``; :func:`tune_direct`), timing whole forwards, and
compares them with the sorted path's whole forward (its top-k sum included) at the best tiles found: the faster one is
the bucket's entry (``"DIRECT": true`` when the direct GEMVs win).

Output under ``--out``: ``triton_configs/<file>.json`` in the format of
``backends/triton_configs/README.md`` (copy them into ``backends/triton_configs/`` to use them), and
``tune_log.json``: environment, arguments, every timing (us per call), compile statistics, default
versus tuned time per shape and token count, and what was skipped.

``--dry-run``: tiny shapes (:data:`DRY_MODEL`) on the CPU through Triton's interpreter (set
``TRITON_INTERPRET=1`` before triton is imported), no graphs (one timed call each), no workers, a
few candidates: checks the script's logic and output format (tests/test_triton_moe.py).
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import statistics
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import torch

MODELS = {  # E, K, H, I, activation
    "Qwen3-30B-A3B": (128, 8, 2048, 768, "silu"),
    "Qwen3-235B-A22B": (128, 8, 4096, 1536, "silu"),
    "DeepSeek-V3": (256, 8, 7168, 2048, "silu"),
    "Mixtral-8x7B": (8, 2, 4096, 14336, "silu"),
    "gpt-oss-20b": (32, 4, 2880, 2880, "swiglu_oai"),
    "gpt-oss-120b": (128, 4, 2880, 2880, "swiglu_oai"),
}
#: Models tuned by default (gpt-oss-120b's layer is gpt-oss-20b's with 4x the experts: asked for by name or --fp4).
DEFAULT_MODELS = ("Qwen3-30B-A3B", "Qwen3-235B-A22B", "DeepSeek-V3", "Mixtral-8x7B", "gpt-oss-20b")
FORMATS = ("bf16", "fp8_channel", "fp8_block")
FP4_FORMATS = ("mxfp4", "nvfp4")
ALL_FORMATS = FORMATS + FP4_FORMATS
#: The smallest ``BLOCK_M`` at which ``--tma`` also times each candidate with ``TMA`` switched (compute tiles: the
#: weight-streaming ones are not its target); the formats: the kernels' ``TMA_FORMATS``
TMA_MIN_BLOCK_M = 64
#: Set by ``--tma``
TRY_TMA = False
#: Set by ``--gu-dot``
TRY_GU_DOT = False
#: Set by ``--prefetch``
TRY_PREFETCH = False
#: --fp4: the issue-24 layers in their checkpoints' formats.
FP4_PAIRS = (("gpt-oss-20b", "mxfp4"), ("gpt-oss-120b", "mxfp4"), ("Qwen3-30B-A3B", "nvfp4"), ("DeepSeek-V3", "nvfp4"))
TOKENS = (1, 32, 256, 2048, 8192)
BLOCK = (128, 128)
DRY_MODEL = (4, 2, 64, 32, "silu")
DRY_FORMATS = ("bf16", "fp8_channel", "fp8_block")
DRY_TOKENS = (1, 8)
DRY_BLOCK = (32, 32)
SMEM_LIMIT = 220 * 1024
N_SETS = 4
ABANDON = 1.5
#: Packed FP4: token counts up to which the DIRECT buckets (no sort, the top-k sum fused: ``fp4_direct_gemm``) are
#: searched next to the sorted path (:func:`direct_search`)
DIRECT_TUNE_MAX_TOKENS = 4
#: DIRECT GEMM candidates, before the scale-tile rule of :func:`direct_candidates`: ``(num_warps, BLOCK_K)``
DIRECT_TUNE_SHAPES = ((4, 128), (4, 64), (4, 256), (2, 128), (2, 256), (8, 128), (8, 256), (8, 64), (2, 64))


def direct_candidates(group: int) -> list[tuple[int, int, int, int]]:
    """DIRECT GEMM candidates ``(BLOCK_N, BLOCK_K, num_warps, num_stages)`` for packed FP4 with scale groups of
    ``group`` elements: per :data:`DIRECT_TUNE_SHAPES` entry, the largest power-of-two ``BLOCK_N`` (4 to 64) whose scale
    tile ``[BLOCK_N, BLOCK_K / group]`` has fewer elements than the CTA has threads. Why: at that size Triton 3.6 loads
    the scale tile straight into the layout the decode needs; at or above it, it loads it in another layout and converts
    it through shared memory, two CTA barriers per K tile and weight matrix (sm90 SASS, ``tests/test_triton_w4a16_direct.py``
    ``test_direct_scale_tile_rule``), which is what made the first DIRECT search 1.3-1.7x slower than the sorted path
    (5-14x pipelined; one H200, 2026-12-03, benchmarks/README.md). ``num_stages`` 1: Triton's pipeline moves these loads through shared
    memory too; PREFETCH (a register double buffer) is searched instead (:func:`direct_search`)."""
    out = []
    for nw, bk in DIRECT_TUNE_SHAPES:
        g = bk // group
        bn = 64
        while bn > 4 and bn * g >= 32 * nw:
            bn //= 2
        if bn * g < 32 * nw:
            out.append((bn, bk, nw, 1))
    return out


def direct_gemm(c: tuple[int, int, int, int], split: bool = False, prefetch: bool = False) -> dict:
    """A DIRECT bucket's GEMM config from a candidate ``(BLOCK_N, BLOCK_K, num_warps, num_stages)``; ``split``: with
    ``SPLIT_SLOTS`` (second GEMM only); ``prefetch``: with ``PREFETCH``. Also ``benchmarks/w4a16_layer.py``'s
    ``direct`` search."""
    return {"BLOCK_N": c[0], "BLOCK_K": c[1], "GROUP_M": 1, "num_warps": c[2], "num_stages": c[3], "GEMV": True,
            **({"SPLIT_SLOTS": True} if split else {}), **({"PREFETCH": True} if prefetch else {})}


def direct_search(time_cfg, group: int, dry: bool = False) -> tuple[dict, dict, float, list[dict]] | None:
    """The DIRECT coordinate search shared by :func:`tune_direct` and ``benchmarks/w4a16_layer.py``: ``time_cfg(cfg)``
    times a whole DIRECT forward for a bucket config (µs, or None when it failed or the budget ran out). First GEMM:
    each of :func:`direct_candidates` with the second GEMM at the first candidate, then the best with PREFETCH and with
    half its ``BLOCK_N``; second GEMM: each candidate with that first GEMM, then the best with PREFETCH, SPLIT_SLOTS and
    both. ``dry``: the first two candidates only. Returns ``(gemm1, gemm2, best µs, timings)``, or None when nothing
    was timed."""
    cands = direct_candidates(group)[:2 if dry else None]
    timings: list[dict] = []
    best: list = [None, direct_gemm(cands[0]), direct_gemm(cands[0])]

    def trial(g1: dict, g2: dict) -> None:
        cfg = {"BLOCK_M": 1, "DIRECT": True, "gemm1": g1, "gemm2": g2}
        us = time_cfg(cfg)
        if us is None:
            return
        timings.append({"gemm1": g1, "gemm2": g2, "us": round(us, 2)})
        if best[0] is None or us < best[0]:
            best[:] = [us, g1, g2]

    for c in cands:
        trial(direct_gemm(c), best[2])
    c1 = best[1]
    for g1 in ({**c1, "PREFETCH": True}, {**c1, "BLOCK_N": c1["BLOCK_N"] // 2}):
        if g1["BLOCK_N"] >= 4:
            trial(g1, best[2])
    for c in cands:
        trial(best[1], direct_gemm(c))
    c2 = best[2]
    for extra in ({"PREFETCH": True}, {"SPLIT_SLOTS": True}, {"PREFETCH": True, "SPLIT_SLOTS": True}):
        trial(best[1], {**c2, **extra})
    if best[0] is None:
        return None
    return best[1], best[2], best[0], timings


def _K():
    from moe_select.backends import triton_moe_kernels

    return triton_moe_kernels


def _pow2(n: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


# --- candidates ------------------------------------------------------------------------------------

#: Packed FP4: mean rows per expert up to which the GEMV mode's block heights are timed.
GEMV_TUNE_MAX_ROWS = 4


def block_m_candidates(tokens: int, e: int, k: int, default: int, fmt: str = "bf16") -> list[int]:
    """``BLOCK_M`` values worth timing for ``tokens``: the default and its neighbours (half, double),
    at most ``2 * pow2(m)`` for ``m = tokens * k / e`` rows per expert (taller blocks would be mostly
    padding), from 64 when ``m >= 256`` (fp8_block's fused first GEMM spills registers at 128: there only
    its split variant fits, :func:`gemm_candidates`). Packed FP4 with ``m <= GEMV_TUNE_MAX_ROWS``: the GEMV
    mode's 1, 2, 4 (at most ``pow2(tokens)``: a block never holds more rows than tokens) and the MMA tile's 16."""
    m = tokens * k / e
    if fmt in FP4_FORMATS and m <= GEMV_TUNE_MAX_ROWS:
        return sorted({bm for bm in (1, 2, 4) if bm <= _pow2(tokens)} | {16})
    lo = 64 if m >= 256 else 16
    hi = min(max(16, 2 * _pow2(m)), 128)
    return [bm for bm in (16, 32, 64, 128) if lo <= bm <= hi and default // 2 <= bm <= default * 2]


def quick_block_ms(base: dict, e: int, k: int, fmt: str, tokens: int) -> list[int]:
    """``BLOCK_M`` values of the quick phase (and of ``--dry-run``): the default's, and for packed FP4 at up to
    ``GEMV_MAX_ROWS_PER_EXPERT`` mean rows per expert also the GEMV mode's (``min(4, pow2(T))``: GEMV is opt-in in
    the default heuristic until measured, so the tuner is where it is measured against the MMA tile)."""
    K = _K()
    bms = {base["BLOCK_M"]}
    if fmt in FP4_FORMATS and tokens * k / e <= K.GEMV_MAX_ROWS_PER_EXPERT:
        bms.add(min(4, _pow2(K.token_bucket(tokens))))
    return sorted(bms)


def base_at(base: dict, bm: int, e: int, n13: int, h: int, fmt: str, tokens: int, k: int, block, gated: bool) -> dict:
    """The default configuration ``base`` moved to ``BLOCK_M`` ``bm``: the GEMV mode's default GEMM configs
    below 16 rows (the MMA tile cannot run them), the MMA default (``default_config(..., gemv=False)``) when
    ``base`` is GEMV and ``bm`` is 16 or more, else ``base``'s GEMM configs."""
    K = _K()
    if bm < 16:
        g = K.gemv_config(e, n13, h, fmt, K.token_bucket(tokens), k, gated)
    elif base["gemm1"].get("GEMV"):
        g = K.default_config(e, n13, h, fmt, K.token_bucket(tokens), k, block, gated, gemv=False)
    else:
        g = base
    return {"BLOCK_M": bm, "gemm1": g["gemm1"], "gemm2": g["gemm2"]}


def _fits(cfg: dict, bm: int, fmt: str, gated: bool, n_out: int, k_dim: int) -> bool:
    if cfg.get("GEMV"):             # decoded float32 weight tile(s) in registers; no shared-memory pipeline
        regs = cfg["BLOCK_N"] * cfg["BLOCK_K"] * (2 if gated else 1) / (32 * cfg["num_warps"])
        return (regs <= 128 and cfg["BLOCK_N"] <= max(16, _pow2(n_out)) and cfg["BLOCK_K"] <= max(32, _pow2(k_dim))
                and cfg["BLOCK_K"] % (32 if fmt == "mxfp4" else 16) == 0 and cfg["BLOCK_K"] >= 32
                and cfg.get("SPLIT_K", 1) <= -(-k_dim // cfg["BLOCK_K"]))     # at least one K tile per split
    if cfg.get("SPLIT"):            # one accumulator over the gate and up rows
        gated, n_out = False, 2 * n_out
    bn, bk, warps, stages = cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["num_warps"], cfg["num_stages"]
    b_bytes = 1 if fmt.startswith("fp8") or fmt in FP4_FORMATS else 2   # packed FP4: half a byte, counted as one
    a_bytes = 1 if fmt == "fp8_block" or cfg.get("PREQUANT") else 2
    if fmt in FP4_FORMATS and (cfg["BLOCK_K"] < 32 or cfg["BLOCK_K"] % (32 if fmt == "mxfp4" else 16)):
        return False
    mult = 2 if gated else 1
    smem = stages * (bm * bk * a_bytes + bn * bk * b_bytes * mult)
    # float32 accumulators per thread; block scaling keeps a second one per dot (the scaled partial sum)
    regs = bm * bn * mult * (2 if fmt == "fp8_block" else 1) / (32 * warps)
    if smem > SMEM_LIMIT or regs > 128:
        return False
    if bn > max(16, _pow2(n_out)) or (fmt != "fp8_block" and bk > max(16, _pow2(k_dim))):
        return False
    if warps == 8 and bm * bn * mult < 8192:
        return False
    return True


def gemm_candidates(phase: str, base: dict, bm: int, fmt: str, gated: bool, n_out: int, k_dim: int,
                    block_k: int | None, dry: bool = False, min_bn: int = 16) -> list[dict]:
    """GEMM configs to time for one (shape, format, ``BLOCK_M``, GEMM): the default ``base`` first, then
    its neighbours (``quick``) or the pruned grid (``full``). ``min_bn``: fp8_block's first GEMM needs
    ``BLOCK_N`` >= (a multiple of) the block's K size. fp8_block's first GEMM (gated) from ``BLOCK_M`` 64 also
    tries its split variant (``SPLIT``: 16-bit out over the gate and up rows, then the activation kernel)."""
    out = [dict(base)]
    if base.get("GEMV"):
        return out + [c for c in gemv_candidates(phase, base, dry, bm) if c not in out
                      and (c.get("GLUON") or _fits(c, bm, fmt, gated, n_out, k_dim))]
    split_ok = fmt == "fp8_block" and gated and block_k is not None and bm >= 64 and not dry
    splits: list[dict] = []
    if split_ok and phase == "quick" and not base.get("SPLIT"):
        splits = [{"BLOCK_N": 128, "BLOCK_K": block_k, "GROUP_M": 8, "num_warps": 8, "num_stages": 3, "SPLIT": True}]
    elif split_ok and phase != "quick":
        splits = [{"BLOCK_N": bn, "BLOCK_K": block_k, "GROUP_M": 8, "num_warps": w, "num_stages": st, "SPLIT": True}
                  for bn, w, st in itertools.product((128, 256), (4, 8), (2, 3, 4))]
    if dry:
        alt = {**base, "BLOCK_N": max(16, min_bn, base["BLOCK_N"] // 2)}
        alts = [alt] if alt != base else [alt | {"num_stages": base["num_stages"] + 1}]
        return out + alts + ([_toggle(base, "PREQUANT")] if fmt in _K().PREQUANT_FORMATS else [])
    if phase == "quick":
        cands = [{**base, "BLOCK_N": base["BLOCK_N"] * 2}, {**base, "BLOCK_N": base["BLOCK_N"] // 2},
                 {**base, "num_stages": base["num_stages"] + 1}, {**base, "num_stages": base["num_stages"] - 1},
                 {**base, "num_warps": 12 - base["num_warps"]}]
        if block_k is None:
            cands += [{**base, "BLOCK_K": base["BLOCK_K"] * 2}, {**base, "BLOCK_K": base["BLOCK_K"] // 2}]
    else:
        if bm <= 32:     # weight streaming: narrow tiles, deep pipelines
            bns, stages = (32, 64, 128), (3, 4, 5)
            bks = [block_k] if block_k else ([128, 256] if fmt.startswith("fp8") else [64, 128, 256])
        else:            # compute: wide tiles
            bns, stages = (64, 128, 256), (2, 3, 4)
            bks = [block_k] if block_k else ([128, 256] if fmt.startswith("fp8") else [64, 128])
        cands = [{"BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": base["GROUP_M"], "num_warps": w, "num_stages": st}
                 for bn, bk, w, st in itertools.product(bns, bks, (4, 8), stages)]
        if bm >= 64:
            cands.append({**base, "GROUP_M": 1 if base["GROUP_M"] > 1 else 8})
    if fmt in _K().PREQUANT_FORMATS:    # each candidate with and without A quantized before the GEMM (PREQUANT)
        cands = cands + [_toggle(c, "PREQUANT") for c in [base, *cands]]
    if TRY_TMA and fmt in _K().TMA_FORMATS and bm >= TMA_MIN_BLOCK_M:   # and with the weights through TMA (--tma)
        cands = cands + [_toggle(c, "TMA") for c in [base, *cands, *splits]]
    if TRY_PREFETCH and fmt in _K().FP4_FORMATS:   # and the next K tile's block scales loaded ahead (--prefetch)
        cands = cands + [_toggle(c, "PREFETCH") for c in [base, *cands]]
    if TRY_GU_DOT and gated and fmt in _K().GU_DOT_FORMATS and bm >= TMA_MIN_BLOCK_M:
        # and the gate and up tiles as one MMA (--gu-dot: GU_DOT needs TMA)
        cands = cands + [{**c, "TMA": True, "GU_DOT": True} for c in [base, *cands] if not c.get("SPLIT")]
    for c in cands + splits:
        if c["BLOCK_N"] >= max(16, min_bn) and c["BLOCK_K"] >= 16 and c["num_stages"] >= 1 and c not in out \
                and _fits(c, bm, fmt, gated, n_out, k_dim):
            out.append(c)
    return out


def _toggle(c: dict, flag: str) -> dict:
    """``c`` with the boolean option ``flag`` switched: set when absent, removed when set."""
    if c.get(flag):
        return {k: v for k, v in c.items() if k != flag}
    return {**c, flag: True}


def gemv_candidates(phase: str, base: dict, dry: bool = False, bm: int = 0) -> list[dict]:
    """GEMV-mode configs to time next to ``base`` (a GEMV config): its neighbours (``quick``: ``BLOCK_N``,
    ``BLOCK_K`` and ``SPLIT_K`` halved and doubled, the other warp count) or a grid (``full``: ``BLOCK_N`` 16, 32,
    64, ``BLOCK_K`` 64, 128, 256, ``SPLIT_K`` 1, 2, 4, 8, warps and stages as ``base``: the loop has no dot, so
    Triton does not pipeline its loads), and at ``bm`` 1 the Gluon GEMV (``GLUON``, backends/triton_moe_gluon.py) at
    :data:`GLUON_SHAPES` rows per thread x warps (not with ``dry``: Gluon has no interpreter). ``dry``: a split of two
    32-deep K tiles and a narrower tile."""
    sk = base.get("SPLIT_K", 1)

    def mk(**kw) -> dict:
        c = {**base, **kw}
        if c.get("SPLIT_K", 1) <= 1:
            c.pop("SPLIT_K", None)
        return c

    if dry:
        return [mk(BLOCK_K=32, SPLIT_K=2), mk(BLOCK_N=max(16, base["BLOCK_N"] // 2))]
    gluon = [{"BLOCK_N": r * w, "BLOCK_K": base["BLOCK_K"], "GROUP_M": 1, "num_warps": w, "num_stages": 1, "GEMV": True,
              "GLUON": True} for r, w in GLUON_SHAPES] if bm == 1 and not dry else []
    if phase == "quick":
        return [mk(BLOCK_N=base["BLOCK_N"] * 2), mk(BLOCK_N=max(16, base["BLOCK_N"] // 2)),
                mk(BLOCK_K=base["BLOCK_K"] * 2), mk(BLOCK_K=base["BLOCK_K"] // 2),
                mk(SPLIT_K=2 * sk), mk(SPLIT_K=max(1, sk // 2)), mk(num_warps=6 - base["num_warps"]), *gluon[:2]]
    return [mk(BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=s) for bn, bk, s in itertools.product((16, 32, 64), (64, 128, 256), (1, 2, 4, 8))] \
        + gluon


#: (rows per thread, warps) of the Gluon GEMV candidates at ``BLOCK_M`` 1 (:func:`gemv_candidates`); the first two are
#: the quick phase's (gpt-oss layers, one H200, 2026-12-03: 2 x 4 best, 1 x 8 and 4 x 2 within 1-4 %)
GLUON_SHAPES = ((2, 4), (1, 8), (4, 2), (2, 2), (1, 4), (4, 4))


def cfg_key(c: dict) -> tuple:
    """A GEMM candidate's identity (timings and compile jobs are shared by equal keys): its sizes, ``SPLIT_K`` and
    ``MIN_M`` and every boolean option the tile files take (``triton_moe_kernels.GEMM_CONFIG_FLAGS``)."""
    return (c["BLOCK_N"], c["BLOCK_K"], c["GROUP_M"], c["num_warps"], c["num_stages"], c.get("SPLIT_K", 1),
            c.get("MIN_M", 0), *(bool(c.get(f)) for f in _K().GEMM_CONFIG_FLAGS))


# --- layers and inputs --------------------------------------------------------------------------------

class Bench:
    """One (shape, format) on ``device``: weights as the core prepares them, and helpers to launch the
    sort and each GEMM on an input set."""

    def __init__(self, name: str, shape: tuple, fmt: str, device: torch.device, block: tuple[int, int], seed: int = 0):
        from moe_select.backends.triton_moe import TritonMoeCore
        from moe_select.layer import LayerSpec

        self.name, self.fmt, self.device = name, fmt, device
        self.e, self.k, self.h, self.i, self.act = shape
        self.spec = LayerSpec(num_experts=self.e, top_k=self.k, hidden_size=self.h, intermediate_size=self.i,
                              activation=self.act, quant=fmt)
        self.block = block if fmt == "fp8_block" else None
        self.core = TritonMoeCore(self.spec, device, block_shape=self.block, warmup=False)
        w13, w2, scales = make_weights(self.spec, fmt, device, self.block, seed)
        self.weights = self.core.prepare_weights(w13, w2, **scales)
        self.n13 = self.spec.w13_rows

    def inputs(self, tokens: int, seed: int, n_sets: int) -> list[tuple]:
        from moe_select.routing import route

        g = torch.Generator(device=self.device).manual_seed(seed)
        sets = []
        for _ in range(n_sets):
            logits = torch.randn(tokens, self.e, generator=g, device=self.device)
            tw, ids = route(logits, "renormalize", self.k)
            x = torch.randn(tokens, self.h, generator=g, device=self.device).to(torch.bfloat16)
            sets.append((x, ids, tw))
        return sets


def make_weights(spec, fmt: str, device, block, seed: int):
    """(w13, w2, {scales}) for ``prepare_weights``: random ``N(0, 1/fan_in)``, quantized per chunk of
    experts (bounded float32 temporaries); packed FP4: random codes (every byte value) with random scales
    around ``1/(3 sqrt(fan_in))`` (e8m0 exponents, or e4m3 scales and a global scale per expert)."""
    from moe_select.ops import quantize_fp8_channel

    g = torch.Generator(device=device).manual_seed(seed)
    e, h, i, n13 = spec.num_local_experts, spec.hidden_size, spec.intermediate_size, spec.w13_rows
    out = []
    scales = {}
    if fmt in FP4_FORMATS:
        for name, (n, k) in (("w13", (n13, h)), ("w2", (h, i))):
            out.append(torch.randint(0, 256, (e, n, k // 2), generator=g, device=device, dtype=torch.int32).to(torch.uint8))
            target = 1.0 / (3 * k ** 0.5)
            if fmt == "mxfp4":
                base = 127 + round(math.log2(target))
                scales[f"{name}_scale"] = torch.randint(base - 3, base + 3, (e, n, k // 32), generator=g, device=device,
                                                        dtype=torch.int32).to(torch.uint8)
            else:
                scales[f"{name}_scale"] = (torch.rand(e, n, k // 16, generator=g, device=device) * 3.75 + 0.25).to(torch.float8_e4m3fn)
                scales[f"{name}_global_scale"] = torch.full((e,), target / 2, device=device)
        return out[0], out[1], scales
    for name, shape, fan in (("w13", (e, n13, h), h), ("w2", (e, h, i), i)):
        if fmt == "bf16":
            out.append((torch.randn(shape, generator=g, device=device, dtype=torch.bfloat16) / fan ** 0.5))
            continue
        q = torch.empty(shape, dtype=torch.float8_e4m3fn, device=device)
        per = max(1, int(2e9 // (shape[1] * shape[2] * 4)))
        ss = []
        for e0 in range(0, e, per):
            w = torch.randn((min(per, e - e0), *shape[1:]), generator=g, device=device) / fan ** 0.5
            if fmt == "fp8_channel":
                qq, s = quantize_fp8_channel(w)
            else:
                qq, s = _quantize_block(w, *block)
            q[e0:e0 + qq.shape[0]] = qq
            ss.append(s)
            del w
        out.append(q)
        scales[f"{name}_scale"] = torch.cat(ss)
    return out[0], out[1], scales


def _quantize_block(w, bn, bk):
    e, n, k = w.shape
    nb, kb = -(-n // bn), -(-k // bk)
    pad = torch.zeros(e, nb * bn, kb * bk, dtype=torch.float32, device=w.device)
    pad[:, :n, :k] = w
    blocks = pad.view(e, nb, bn, kb, bk)
    scale = (blocks.abs().amax(dim=(2, 4)) / 448.0).clamp(min=1e-12)
    q = (blocks / scale[:, :, None, :, None]).clamp(-448, 448).view(e, nb * bn, kb * bk)[:, :n, :k]
    return q.to(torch.float8_e4m3fn).contiguous(), scale


# --- launching one stage ------------------------------------------------------------------------------

class Stage:
    """One input set at one ``BLOCK_M``: the core's own forward pass
    (:class:`moe_select.backends.triton_moe.ForwardPass`: quantized hidden states, sorted rows, buffers),
    whose steps are launched with candidate configurations."""

    def __init__(self, bench: Bench, x, ids, tw, bm: int):
        from moe_select.backends.triton_moe import ForwardPass

        self.p = ForwardPass(bench.core, bench.weights, x, ids, tw, bm)

    def sort(self):
        self.p.sort()

    def gemm(self, kind: str, cfg: dict, warmup: bool = False):
        return (self.p.gemm1 if kind == "gemm1" else self.p.gemm2)(cfg, warmup=warmup)


# --- compile workers ----------------------------------------------------------------------------------

def _compile_job(job: dict) -> dict:
    """Worker: compile one GEMM configuration (``warmup=True``) for a one-expert layer with the real
    strides and shapes, filling Triton's on-disk cache. Returns ``{"key", "ok", "s", "error"}``."""
    t0 = time.perf_counter()
    try:
        dev = torch.device("cuda", torch.cuda.current_device())
        e, k, h, i, act = job["shape"]
        bench = _one_expert_bench(tuple(job["shape"]), job["fmt"], dev, tuple(job["block"]) if job["block"] else None)
        x = torch.zeros(1, h, dtype=torch.bfloat16, device=dev)
        ids = torch.zeros(1, k, dtype=torch.int32, device=dev)
        tw = torch.ones(1, k, device=dev)
        stage = Stage(bench, x, ids, tw, job["bm"])
        stage.gemm(job["kind"], job["cfg"], warmup=True)
        return {"key": job["key"], "ok": True, "s": time.perf_counter() - t0, "error": None}
    except Exception as exc:  # a configuration that does not compile: reported, skipped by the parent
        return {"key": job["key"], "ok": False, "s": time.perf_counter() - t0,
                "error": " ".join(f"{type(exc).__name__}: {exc}".split())[:400]}


_ONE: dict = {}


def _one_expert_bench(shape, fmt, dev, block):
    """A one-expert layer with the shape's H, I and K: the same strides and argument values as the real
    layer's launches (only E differs, and no argument depends on it), so the same compiled variant."""
    key = (tuple(shape), fmt, block)
    if key not in _ONE:
        e, k, h, i, act = shape
        _ONE[key] = Bench("one-expert", (1, k, h, i, act), fmt, dev, block)
    return _ONE[key]


class Compiler:
    """Compile jobs run ahead in worker processes; ``wait(key)`` blocks until that job is done."""

    def __init__(self, jobs: int):
        import multiprocessing as mp

        self.pool = ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) if jobs > 0 else None
        self.futures: dict[tuple, Future] = {}
        self.results: dict[tuple, dict] = {}

    def submit(self, job: dict) -> None:
        if self.pool is None or job["key"] in self.futures:
            return
        self.futures[job["key"]] = self.pool.submit(_compile_job, job)

    def wait(self, key: tuple, timeout: float) -> dict | None:
        """The job's result (None: not submitted or not done within ``timeout``: the caller compiles)."""
        if key in self.results:
            return self.results[key]
        f = self.futures.get(key)
        if f is None:
            return None
        try:
            r = f.result(timeout=max(0.0, timeout))
        except Exception:
            return None
        self.results[key] = r
        return r

    def stats(self) -> dict:
        done = [f.result() for f in self.futures.values() if f.done() and not f.cancelled() and f.exception() is None]
        return {"submitted": len(self.futures), "done": len(done), "failed": sum(not r["ok"] for r in done),
                "compile_s_total": round(sum(r["s"] for r in done), 1)}

    def close(self) -> None:
        if self.pool is None:
            return
        procs = list(getattr(self.pool, "_processes", {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:                         # our own workers, by their process objects
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)


# --- timing -----------------------------------------------------------------------------------------

class Timer:
    """Time per launch of ``launch(i)`` over the input sets: CUDA-graph replay on the GPU, a plain timed
    call on the CPU (dry run)."""

    def __init__(self, device: torch.device, timed: int = 3):
        self.device, self.timed = device, timed

    def __call__(self, launches: list, best: float | None = None) -> float:
        if self.device.type != "cuda":
            t0 = time.perf_counter()
            launches[0]()
            return (time.perf_counter() - t0) * 1e6
        for fn in launches:                     # compile / load, and one eager pass
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for fn in launches:
            fn()
        torch.cuda.synchronize()
        eager = (time.perf_counter() - t0) / len(launches)
        reps = max(1, min(8, int(4e-3 / max(eager, 1e-6))))     # a replay of about >= 4 ms when cheap
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                for fn in launches:
                    fn()
        g.replay()
        torch.cuda.synchronize()
        n = reps * len(launches)
        times = []
        for i in range(self.timed):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / n)
            if i == 0 and best is not None and times[0] > ABANDON * best:
                break
        del g
        return statistics.median(times)


# --- the search ---------------------------------------------------------------------------------------

def default_for(bench: Bench, tokens: int) -> dict:
    K = _K()
    return K.default_config(bench.e, bench.n13, bench.h, bench.fmt, K.token_bucket(tokens), bench.k, bench.block,
                            bench.spec.gated)


def plan_jobs(pairs: list[tuple[str, tuple, str]], tokens, block, phase: str, dry: bool) -> list[dict]:
    """Compile jobs in the order the measurements of ``phase`` need them (``pairs``: (model, shape, format))."""
    K = _K()
    jobs = []
    for name, shape, fmt in pairs:
        e, k, h, i, act = shape
        n13 = i if act == "relu2" else 2 * i
        blk = block if fmt == "fp8_block" else None
        for t in tokens:
            base = K.default_config(e, n13, h, fmt, K.token_bucket(t), k, blk, act != "relu2")
            bms = (quick_block_ms(base, e, k, fmt, t) if phase == "quick" or dry
                   else block_m_candidates(t, e, k, base["BLOCK_M"], fmt))
            for bm in bms:
                at = base_at(base, bm, e, n13, h, fmt, t, k, blk, act != "relu2")
                for kind, gated, n_out, kd in (("gemm1", act != "relu2", i, h), ("gemm2", False, h, i)):
                    min_bn = blk[1] if blk and kind == "gemm1" else 16
                    for c in gemm_candidates(phase, at[kind], bm, fmt, gated, n_out, kd, blk[1] if blk else None,
                                             dry, min_bn):
                        jobs.append({"key": (name, fmt, kind, bm, cfg_key(c)), "shape": list(shape), "fmt": fmt,
                                     "block": list(blk) if blk else None, "kind": kind, "bm": bm, "cfg": c})
    return jobs


def tune(args) -> dict:
    t_start = time.monotonic()
    deadline = t_start + args.budget_s - args.reserve_s
    dry = args.dry_run
    dev = torch.device("cpu") if dry else torch.device("cuda", torch.cuda.current_device())
    chosen = args.models if args.models is not None else list(DEFAULT_MODELS)
    models = {"dry": DRY_MODEL} if dry else {m: MODELS[m] for m in chosen}
    formats = (DRY_FORMATS if args.formats == list(FORMATS) else tuple(args.formats)) if dry else tuple(args.formats)
    pairs = [(n, s, f) for n, s in models.items() for f in formats]
    if getattr(args, "fp4", False) and not dry:
        pairs = [(n, MODELS[n], f) for n, f in FP4_PAIRS if args.models is None or n in args.models]
        if not pairs:
            raise SystemExit(f"--fp4 --models {' '.join(args.models)}: none of these layers is in FP4_PAIRS "
                             f"({', '.join(n for n, _ in FP4_PAIRS)})")
    tokens = DRY_TOKENS if dry else tuple(args.tokens)
    block = DRY_BLOCK if dry else BLOCK
    device_name = "cpu" if dry else torch.cuda.get_device_name(dev)
    phases = ("quick",) if dry else ("quick", "full")
    log = {"script": "benchmarks/tune_triton_moe.py", "argv": sys.argv[1:], "dry_run": dry, "budget_s": args.budget_s,
           "device": device_name, "torch": torch.__version__, "triton": _triton_version(),
           "cuda": torch.version.cuda, "started": _now(), "method": __doc__.split("How (")[1].split("Output under")[0].strip(),
           "results": {}, "skipped": [], "errors": []}
    comp = Compiler(0 if dry else args.jobs)
    all_jobs = {p: plan_jobs(pairs, tokens, block, p, dry) for p in phases}
    for p in phases:
        for j in all_jobs[p]:
            comp.submit(j)
    log["compile_jobs_planned"] = {p: len(v) for p, v in all_jobs.items()}
    timer = Timer(dev, timed=args.timed)
    best: dict[tuple, dict] = {}          # (model, fmt, tokens) -> result
    measured: dict[tuple, float] = {}     # (model, fmt, tokens, kind, bm, cfg_key) -> us
    out_dir = Path(args.out)
    (out_dir / "triton_configs").mkdir(parents=True, exist_ok=True)
    stop = False
    try:
        for phase in phases:
            for name, shape, fmt in pairs:
                if stop or time.monotonic() > deadline:
                    stop = True
                    log["skipped"].append({"phase": phase, "model": name, "format": fmt, "why": "budget"})
                    continue
                bench = Bench(name, shape, fmt, dev, block)
                for t in tokens:
                    if time.monotonic() > deadline:
                        stop = True
                        log["skipped"].append({"phase": phase, "model": name, "format": fmt, "tokens": t, "why": "budget"})
                        continue
                    try:
                        res = tune_point(bench, t, phase, dry, comp, timer, measured, deadline, log, args.seed)
                    except torch.cuda.OutOfMemoryError as exc:
                        log["errors"].append({"model": name, "format": fmt, "tokens": t, "error": f"OOM: {exc}"[:300]})
                        torch.cuda.empty_cache()
                        continue
                    if res is None:
                        stop = True
                        continue
                    prev = best.get((name, fmt, t))
                    if prev is None or res["us"] <= prev["us"]:
                        res["phase"] = phase
                        best[(name, fmt, t)] = res
                    log["results"].setdefault(name, {}).setdefault(fmt, {})[str(t)] = best[(name, fmt, t)]
                write_config_file(out_dir, bench, device_name, {t: r for (m, f, t), r in best.items()
                                                                if m == name and f == fmt}, log)
                del bench
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
                _write_log(out_dir, log, comp, t_start)
    finally:
        log["compile"] = comp.stats()
        comp.close()
        log["finished"] = _now()
        log["elapsed_s"] = round(time.monotonic() - t_start, 1)
        _write_log(out_dir, log, comp, t_start)
    return log


def tune_point(bench: Bench, t: int, phase: str, dry: bool, comp: Compiler, timer: Timer, measured: dict,
               deadline: float, log: dict, seed: int) -> dict | None:
    """Time the candidates of one (shape, format, token count); None when the budget ran out first."""
    base = default_for(bench, t)
    bms = (quick_block_ms(base, bench.e, bench.k, bench.fmt, t) if phase == "quick" or dry
           else block_m_candidates(t, bench.e, bench.k, base["BLOCK_M"], bench.fmt))
    sets = bench.inputs(t, seed + t, 1 if dry else N_SETS)
    per_bm = {}
    for bm in bms:
        stages = [Stage(bench, x, ids, tw, bm) for x, ids, tw in sets]
        sort_us = timer([st.sort for st in stages])
        base_cfg = base if bm == base["BLOCK_M"] else base_at(base, bm, bench.e, bench.n13, bench.h, bench.fmt, t,
                                                              bench.k, bench.block, bench.spec.gated)
        for st in stages:                      # real activations for the second GEMM
            st.gemm("gemm1", base_cfg["gemm1"])
        row = {"sort_us": round(sort_us, 2)}
        blk = bench.block[1] if bench.block else None
        for kind, gated, n_out, kd in (("gemm1", bench.spec.gated, bench.i, bench.h), ("gemm2", False, bench.h, bench.i)):
            cands = gemm_candidates(phase, base_cfg[kind], bm, bench.fmt, gated, n_out, kd, blk, dry,
                                    blk if blk and kind == "gemm1" else 16)
            timings = []
            best_us = None
            for c in cands:
                if time.monotonic() > deadline:
                    return None
                mkey = (bench.name, bench.fmt, t, kind, bm, cfg_key(c))
                if mkey in measured:
                    us = measured[mkey]
                else:
                    r = comp.wait((bench.name, bench.fmt, kind, bm, cfg_key(c)), deadline - time.monotonic())
                    if r is not None and not r["ok"]:
                        log["errors"].append({"model": bench.name, "format": bench.fmt, "kind": kind, "bm": bm,
                                              "cfg": c, "error": r["error"]})
                        continue
                    try:
                        us = timer([lambda st=st, c=c, kind=kind: st.gemm(kind, c) for st in stages], best_us)
                    except Exception as exc:  # a config that fails to compile or launch here: skipped, logged
                        log["errors"].append({"model": bench.name, "format": bench.fmt, "kind": kind, "bm": bm,
                                              "cfg": c, "error": " ".join(f"{type(exc).__name__}: {exc}".split())[:300]})
                        continue
                    measured[mkey] = us
                timings.append({**c, "us": round(us, 2)})
                best_us = us if best_us is None else min(best_us, us)
            if not timings:
                break
            row[kind] = sorted(timings, key=lambda r: r["us"])
        else:
            row["us"] = round(row["sort_us"] + row["gemm1"][0]["us"] + row["gemm2"][0]["us"], 2)
            per_bm[bm] = row
        del stages
    if not per_bm:
        return None
    bm = min(per_bm, key=lambda b: per_bm[b]["us"])
    r = per_bm[bm]
    direct = None
    if bench.fmt in FP4_FORMATS and t <= DIRECT_TUNE_MAX_TOKENS and phase == "full" or dry and bench.fmt in FP4_FORMATS:
        direct = tune_direct(bench, t, sets, {"BLOCK_M": bm, "gemm1": _strip(r["gemm1"][0], us=False),
                                              "gemm2": _strip(r["gemm2"][0], us=False)}, timer, deadline, log, dry)
    dflt = per_bm.get(base["BLOCK_M"])
    default_us = None
    if dflt is not None:
        d1 = next((x["us"] for x in dflt["gemm1"] if cfg_key(x) == cfg_key(base["gemm1"])), None)
        d2 = next((x["us"] for x in dflt["gemm2"] if cfg_key(x) == cfg_key(base["gemm2"])), None)
        if d1 is not None and d2 is not None:
            default_us = round(dflt["sort_us"] + d1 + d2, 2)
    out = {"BLOCK_M": bm, "gemm1": _strip(r["gemm1"][0]), "gemm2": _strip(r["gemm2"][0]), "us": r["us"],
           "default_us": default_us, "per_block_m": per_bm}
    if direct is not None:
        out["direct"] = direct
        if direct["us"] < direct["sorted_us"]:       # whole layers compared: the sorted path with its top-k sum
            out.update(BLOCK_M=1, DIRECT=True, gemm1=direct["gemm1"], gemm2=direct["gemm2"], us=direct["us"])
    return out


def tune_direct(bench: Bench, t: int, sets: list, sorted_cfg: dict, timer: Timer, deadline: float, log: dict,
                dry: bool) -> dict | None:
    """The DIRECT search at ``t`` tokens (:func:`direct_search`; the whole direct forward timed, two launches), and the
    sorted path's whole forward with ``sorted_cfg`` (the best ``BLOCK_M`` and GEMM configs found: sort, both GEMMs,
    top-k sum) timed the same way, for the comparison (the sorted search leaves the top-k sum out). Returns
    ``{"gemm1", "gemm2", "us", "sorted_us", "timings"}``, or None when the budget ran out."""
    from moe_select.backends.triton_moe import FP4_GROUP, ForwardPass, direct_forward

    core, w = bench.core, bench.weights
    best_us: list = [None]

    def time_cfg(cfg):
        if time.monotonic() > deadline:
            return None
        try:
            us = timer([lambda s=s: direct_forward(core, w, *s, cfg) for s in sets], best_us[0])
        except Exception as exc:  # a config that fails to compile or launch here: skipped, logged
            log["errors"].append({"model": bench.name, "format": bench.fmt, "kind": "direct", "cfg": cfg,
                                  "error": " ".join(f"{type(exc).__name__}: {exc}".split())[:300]})
            return None
        if us is not None and (best_us[0] is None or us < best_us[0]):
            best_us[0] = us
        return us

    found = direct_search(time_cfg, FP4_GROUP[bench.fmt], dry)
    if found is None or time.monotonic() > deadline:
        return None
    g1, g2, us, timings = found

    def sorted_forward(x, ids, tw):
        p = ForwardPass(core, w, x, ids, tw, sorted_cfg["BLOCK_M"])
        p.gemm1(sorted_cfg["gemm1"])
        p.gemm2(sorted_cfg["gemm2"])
        return p.combine()

    sorted_us = timer([lambda s=s: sorted_forward(*s) for s in sets])
    return {"gemm1": g1, "gemm2": g2, "us": round(us, 2), "sorted_us": round(sorted_us, 2), "timings": timings}


def _strip(c: dict, us: bool = True) -> dict:
    return {k: c[k] for k in ("BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages", "SPLIT_K", "MIN_M",
                              *_K().GEMM_CONFIG_FLAGS, *(("us",) if us else ()))
            if k in c}


def write_config_file(out_dir: Path, bench: Bench | _Shape, device_name: str, table: dict[int, dict], log: dict,
                      stamp: dict | None = None) -> None:
    """One file per (shape, format), format_version 1 (backends/triton_configs/README.md). ``stamp``: the
    ``date``, ``torch`` and ``triton`` of the run (default: now and this process's versions)."""
    stamp = stamp or {"date": _now(), "torch": torch.__version__, "triton": _triton_version()}
    if not table:
        return
    K = _K()
    name = K.config_file_name(bench.e, bench.n13, bench.h, bench.fmt, device_name, bench.block)
    body = {"format_version": K.CONFIG_FORMAT_VERSION,
            "key": {"E": bench.e, "N": bench.n13, "K": bench.h, "format": bench.fmt,
                    "block_shape": list(bench.block) if bench.block else None, "device": device_name},
            "tuned": {"script": "benchmarks/tune_triton_moe.py", "date": stamp["date"], "torch": stamp["torch"],
                      "triton": stamp["triton"], "top_k": bench.k, "activation": bench.act, "model": bench.name,
                      "method": "CUDA-graph replay, 4 input sets rotated, median of replays; separable search "
                                "(benchmarks/tune_triton_moe.py module doc)" if bench.device.type == "cuda"
                                else "dry run (interpreter, one call each): not a measurement",
                      "phase": {str(t): r.get("phase") for t, r in sorted(table.items())}},
            "configs": {str(t): {"BLOCK_M": r["BLOCK_M"], **({"DIRECT": True} if r.get("DIRECT") else {}),
                                 "gemm1": r["gemm1"], "gemm2": r["gemm2"], "us": r["us"]}
                        for t, r in sorted(table.items())}}
    path = out_dir / "triton_configs" / name
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=1) + "\n")
    os.replace(tmp, path)
    log.setdefault("files", [])
    if name not in log["files"]:
        log["files"].append(name)


class _Shape:
    """What :func:`write_config_file` reads of a :class:`Bench`, rebuilt from a log (no weights, no GPU)."""

    def __init__(self, name: str, fmt: str, block):
        self.name, self.fmt = name, fmt
        self.e, self.k, self.h, self.i, self.act = MODELS[name]
        self.n13 = self.i if self.act == "relu2" else 2 * self.i
        self.block = tuple(block) if fmt == "fp8_block" and block else None
        self.device = torch.device("cuda")


def files_from_log(log_path: Path, out_dir: Path) -> list[str]:
    """Write ``out_dir/triton_configs/*.json`` again from a ``tune_log.json`` (its ``results``), stamped with the
    log's finish time, torch and triton versions: the config files of a run whose files could not be copied
    back (the device tool refuses names with ``=`` and ``,``). Raises KeyError on a log of another layout."""
    log = json.loads(Path(log_path).read_text())
    (out_dir / "triton_configs").mkdir(parents=True, exist_ok=True)
    block = BLOCK
    if "--dry-run" in log.get("argv", []):
        raise ValueError(f"{log_path}: a dry run's log; its tables are not measurements")
    written: dict = {"files": []}
    stamp = {"date": log["finished"], "torch": log["torch"], "triton": log["triton"]}
    for name, fmts in log["results"].items():
        for fmt, per_t in fmts.items():
            write_config_file(out_dir, _Shape(name, fmt, block), log["device"], {int(t): r for t, r in per_t.items()},
                              written, stamp)
    return written["files"]


def _write_log(out_dir: Path, log: dict, comp: Compiler, t_start: float) -> None:
    log["compile"] = comp.stats()
    log["elapsed_s"] = round(time.monotonic() - t_start, 1)
    tmp = out_dir / "tune_log.json.tmp"
    tmp.write_text(json.dumps(log, indent=1, default=str) + "\n")
    os.replace(tmp, out_dir / "tune_log.json")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _triton_version() -> str:
    import triton

    return triton.__version__


def summary(log: dict) -> str:
    lines = [f"{'model':16} {'format':12} {'tokens':>6} {'BLOCK_M':>7} {'tuned us':>9} {'default us':>10} {'speed-up':>8} phase"]
    for name, fmts in log["results"].items():
        for fmt, pts in fmts.items():
            for t, r in sorted(pts.items(), key=lambda kv: int(kv[0])):
                d = r.get("default_us")
                sp = f"{d / r['us']:.2f}x" if d else "-"
                lines.append(f"{name:16} {fmt:12} {t:>6} {r['BLOCK_M']:>7} {r['us']:>9.1f} {d if d else '-':>10} {sp:>8} {r.get('phase')}")
    lines.append(f"elapsed {log.get('elapsed_s')} s; compile {log.get('compile')}; skipped {len(log['skipped'])}; "
                 f"errors {len(log['errors'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    global TRY_TMA, TRY_GU_DOT, TRY_PREFETCH, TMA_MIN_BLOCK_M
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (triton_configs/ and tune_log.json)")
    p.add_argument("--budget-s", type=float, default=540.0, help="wall-clock budget from the start (s)")
    p.add_argument("--reserve-s", type=float, default=15.0, help="stop measuring this long before the budget ends")
    p.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2), help="compile worker processes")
    p.add_argument("--models", nargs="+", default=None, choices=list(MODELS),
                   help="layers to tune (default: DEFAULT_MODELS; with --fp4, the FP4_PAIRS of these layers)")
    p.add_argument("--formats", nargs="+", default=list(FORMATS), choices=list(ALL_FORMATS))
    p.add_argument("--fp4", action="store_true", help="tune the issue-24 layers in their formats (FP4_PAIRS); "
                                                      "overrides --models and --formats")
    p.add_argument("--tokens", nargs="+", type=int, default=list(TOKENS))
    p.add_argument("--timed", type=int, default=3, help="timed graph replays per candidate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU through the interpreter")
    p.add_argument("--tma", action="store_true", help="also time each compute tile (BLOCK_M >= 64) of bf16 and FP8 "
                                                      "with its weights through a TMA descriptor (config TMA)")
    p.add_argument("--gu-dot", action="store_true", help="also time each compute tile (BLOCK_M >= --tma-min-block-m) of "
                   "a gated first GEMM of bf16 / fp8_channel with GU_DOT (the gate and up tiles as one MMA; with TMA)")
    p.add_argument("--prefetch", action="store_true", help="also time each MMA tile of mxfp4 / nvfp4 with PREFETCH (the "
                   "next K tile's block scales loaded one iteration ahead)")
    p.add_argument("--tma-min-block-m", type=int, default=TMA_MIN_BLOCK_M,
                   help=f"with --tma: the smallest BLOCK_M tried with TMA (default {TMA_MIN_BLOCK_M}; 16 also tries the "
                        "weight-streaming tiles)")
    p.add_argument("--files-from-log", metavar="TUNE_LOG", help="only write --out/triton_configs/ again from a "
                   "tune_log.json of an earlier run (no GPU): for runs whose files did not come back")
    args = p.parse_args(argv)
    TRY_TMA = args.tma
    TRY_GU_DOT = args.gu_dot
    TRY_PREFETCH = args.prefetch
    TMA_MIN_BLOCK_M = args.tma_min_block_m
    if args.files_from_log:
        for f in files_from_log(Path(args.files_from_log), Path(args.out)):
            print(f)
        return 0
    if args.dry_run:
        from moe_select.backends.triton_moe_kernels import interpreting

        if not interpreting():
            p.error("--dry-run runs the kernels through Triton's interpreter: set TRITON_INTERPRET=1")
        args.reserve_s = min(args.reserve_s, 1.0)
    elif not torch.cuda.is_available():
        p.error("needs a CUDA GPU (or --dry-run)")
    log = tune(args)
    print(summary(log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
