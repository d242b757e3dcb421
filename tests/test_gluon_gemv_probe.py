"""benchmarks/gluon_gemv_probe.py compiled for sm90 without a GPU: at the issue-24 layers' shapes its explicit
layouts give a GEMV loop with no CTA barrier, no spill and 16-byte weight loads (what the ``tl`` GEMVs could not get:
benchmarks/README.md, "DIRECT buckets"). Its GPU check (``--gpu``: against float64, then timed) has not run yet."""
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
