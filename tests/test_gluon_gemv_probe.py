"""benchmarks/gluon_gemv_probe.py compiled for sm90 without a GPU: at the issue-24 layers' shapes its explicit
layouts give a GEMV loop with no CTA barrier, no spill and 16-byte weight loads (what the ``tl`` GEMVs could not get:
benchmarks/README.md, "DIRECT buckets"), and its tensor-core variant's weight order and loop. The GPU checks (``--gpu``:
against float64, then timed) ran on an H200: benchmarks/results/gluon_probe_h200_2026-12-03/."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_triton_moe as base  # noqa: E402  (its ptxas probe: triton imported without the interpreter)


def test_probe_compiles_for_sm90_without_barriers_or_spills():
    if not base._ptxas_runs():
        pytest.skip("needs triton's bundled ptxas (and triton imported without TRITON_INTERPRET)")
    pytest.importorskip("triton.experimental.gluon")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gluon_gemv_probe as probe

    stats = probe.compile_stats(rows=2, warps=4)
    assert [s["shape"] for s in stats] == [s[0] for s in probe.SHAPES]
    for s in stats:
        assert s["barriers"] == 0 and s["spill_bytes"] == 0, s
        assert s["ld_global_v4"] >= 2 * s["k_steps"], s        # each step: R rows of 16 weight bytes, vectorised
        assert s["regs"] <= 168, s


def _probe():
    pytest.importorskip("triton.experimental.gluon")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gluon_gemv_probe as probe

    return probe


def test_mma_weights_put_each_lanes_a_fragments_in_its_16_bytes():
    """``mma_weights`` (before the decode's in-word shuffle) stores, per expert, 16-row group ``g``, 32-byte K step
    ``s``, lane ``t = 4 q + c`` and byte ``i``, the canonical byte that PTX's ``mma.m16n8k16`` A fragment wants there:
    registers a0a1 / a2a3 / a4a5 / a6a7 of k tile ``kt`` are (row q, k 16 kt + 2c), (row q + 8, same k), (row q,
    k + 8), (row q + 8, k + 8), one byte (two e2m1 codes) each, at ``i = 8 rh + 2 kt + bb``. Written from the PTX
    fragment table, not from the function."""
    import torch

    probe = _probe()
    from moe_select.backends import triton_moe_kernels as K

    e, n, kb = 2, 32, 64
    q = torch.randint(0, 256, (e, n, kb), dtype=torch.uint8)
    got = K.fp4_unshuffle(probe.mma_weights(q)).reshape(e, n // 16, kb // 32, 32, 16)
    for ex in range(e):
        for g in range(n // 16):
            for s in range(kb // 32):
                for t in range(32):
                    qq, c = divmod(t, 4)
                    for i in range(16):
                        rh, kt, bb = i // 8, (i // 2) % 4, i % 2
                        row, kbyte = 16 * g + 8 * rh + qq, 32 * s + 8 * kt + 4 * bb + c
                        assert got[ex, g, s, t, i] == q[ex, row, kbyte], (ex, g, s, t, i)


def test_mma_probe_compiles_to_tensor_core_loop_without_shared_memory():
    """The tensor-core GEMV at the eight shapes: 4 ``mma.sync`` per 32-byte K step in the SASS main loop, no shared
    memory and no barrier (the decoded words are the A fragments as loaded), 16-byte weight loads, no spill, and
    under 4 instructions per weight (the CUDA-core probe: 4.4-5.5; an H200 issues about 4 per 4-bit weight at copy
    bandwidth, benchmarks/README.md)."""
    if not base._ptxas_runs():
        pytest.skip("needs triton's bundled ptxas (and triton imported without TRITON_INTERPRET)")
    probe = _probe()
    for prefetch in (False, True):
        for s in probe.mma_compile_stats(warps=2, unroll=4, prefetch=prefetch):
            assert s["loop_hmma"] == 16 and s["st_shared"] == 0 and s["barriers"] == 0 and s["spill_bytes"] == 0, s
            assert s["ld_global_v4"] >= 4, s
            assert s["instr_per_weight"] < (4.7 if prefetch else 3.6), s


def test_mmab_weights_put_each_lanes_b_fragments_in_its_16_bytes():
    """``mmab_weights`` (before the decode's in-word shuffle): per expert, 8-row group ``g``, 64-byte K step ``s``,
    lane ``t = 4 q + c``, byte ``i = 2 kt + bb``: the canonical byte of row ``8 g + q`` at ``64 s + 8 kt + 4 bb + c``
    (zero past the row's bytes), i.e. PTX ``mma.m16n8k16``'s B fragment of k tile ``kt``: b0b1 (k 2c, 2c + 1) and
    b2b3 (k + 8) of column ``q``, one byte each. The scale bytes padded with zeros to the padded K."""
    import torch

    probe = _probe()
    from moe_select.backends import triton_moe_kernels as K

    e, n, kb = 2, 16, 96
    for fmt, cb in (("mxfp4", 16), ("nvfp4", 8)):
        q = torch.randint(0, 256, (e, n, kb), dtype=torch.uint8)
        s = torch.randint(1, 200, (e, n, kb // cb), dtype=torch.uint8)
        qb, sb = probe.mmab_weights(q, s, fmt)
        assert qb.shape == (e, n, 128) and sb.shape == (e, n, 128 // cb)
        assert torch.equal(sb[:, :, :kb // cb], s) and not sb[:, :, kb // cb:].any()
        got = K.fp4_unshuffle(qb).reshape(e, n // 8, 2, 32, 16)
        for ex in range(e):
            for g in range(n // 8):
                for st in range(2):
                    for t in range(32):
                        qq, c = divmod(t, 4)
                        for i in range(16):
                            kt, bb = divmod(i, 2)
                            kbyte = 64 * st + 8 * kt + 4 * bb + c
                            want = int(q[ex, 8 * g + qq, kbyte]) if kbyte < kb else 0
                            assert int(got[ex, g, st, t, i]) == want, (fmt, ex, g, st, t, i)


def test_mmab_act_gives_each_lane_its_a_fragment_words():
    """``mmab_act``: per 128-element step ``s`` and lane column ``c``, 16 words ``w = 2 kt + bb``, each the bf16 pair
    (low half first) at ``k = 128 s + 16 kt + 8 bb + 2 c``: PTX ``m16n8k16``'s A fragment a0a1 / a4a5 of k tile
    ``kt`` (the token in every row), zeros past K."""
    import torch

    probe = _probe()
    a = torch.randn(3, 200).to(torch.bfloat16)
    words = probe.mmab_act(a, 128)
    assert words.dtype == torch.int32 and words.shape == (3, 128)
    pairs = words.view(torch.bfloat16).reshape(3, 2, 4, 16, 2)       # (row, step, c, word, half)
    for r in range(3):
        for st in range(2):
            for c in range(4):
                for w in range(16):
                    kt, bb = divmod(w, 2)
                    k = 128 * st + 16 * kt + 8 * bb + 2 * c
                    for h in range(2):
                        want = a[r, k + h] if k + h < 200 else torch.tensor(0.0, dtype=torch.bfloat16)
                        assert pairs[r, st, c, w, h] == want, (r, st, c, w, h)


def test_mmab_probe_compiles_without_shared_memory():
    """The B-operand tensor-core GEMV: 8 ``mma.sync`` per 64-byte K step, no shared memory or barrier (the decoded
    words are the B fragments and the activation words the A fragments as loaded), no spill, at most 64 registers
    (room for 4x the warps per SM of the A-operand kernel's grid)."""
    if not base._ptxas_runs():
        pytest.skip("needs triton's bundled ptxas (and triton imported without TRITON_INTERPRET)")
    probe = _probe()
    for s in probe.mma_compile_stats(warps=2, unroll=2, b_weights=True):
        assert s["loop_hmma"] == 16 and s["st_shared"] == 0 and s["barriers"] == 0 and s["spill_bytes"] == 0, s
        assert s["regs"] <= 64 and s["instr_per_weight"] < 4.5, s
