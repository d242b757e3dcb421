"""benchmarks/tile_check.py without a GPU: which setting wins a GEMM, and the one-bucket files it writes from a run's
JSON (only settings that beat the tile as it is by more than MIN_GAIN; files the runner's loader reads)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
G1 = {"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3}
G2 = {"BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
GEMV = {"BLOCK_N": 16, "BLOCK_K": 256, "GROUP_M": 1, "num_warps": 4, "num_stages": 3, "GEMV": True, "SPLIT_K": 2}


@pytest.fixture(scope="module")
def tc():
    pytest.importorskip("triton")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tile_check

    return tile_check


def _run(sets: list[dict], rows: list[dict]) -> dict:
    return {"machine": "NVIDIA H200", "date": "2026-12-03", "torch": "2.11.0+cu130", "triton": "3.6.0", "sets": sets,
            "rows": rows}


def test_best_setting_and_apply(tc):
    r = {"gemm1": {"config": G1, "us": [100.0, 95.0, None, 99.0]}, "gemm2": {"config": G2, "us": [None, 10.0]}}
    assert tc.best_setting(r, "gemm1") == (1, pytest.approx(100 / 95 - 1))
    assert tc.best_setting(r, "gemm2") == (0, 0.0)           # the tile as it is failed: nothing to compare with
    assert tc.apply(GEMV, {"SPLIT_K": 1, "num_warps": 8}) == {**{k: v for k, v in GEMV.items() if k != "SPLIT_K"},
                                                              "num_warps": 8}
    assert tc.apply({**G1, "us": 3.0, "TMA": True}, {"TMA": False}) == G1


def test_files_keep_only_the_settings_that_won_by_more_than_min_gain(tc, tmp_path):
    from moe_select.backends import triton_moe_kernels as K

    sets = [{"TMA": True}, {"num_warps": 8, "SPLIT_K": 1}]
    rows = [
        {"layer": "Qwen3-235B-A22B", "format": "bf16", "tokens": 2048, "BLOCK_M": 128, "source": "file",
         "gemm1": {"config": G1, "us": [1136.2, 1217.4, None]},
         "gemm2": {"config": G2, "us": [591.4, 556.5, 600.0]}},                    # S1 wins by 6 %
        {"layer": "Qwen3-235B-A22B", "format": "bf16", "tokens": 8192, "BLOCK_M": 128, "source": "file",
         "gemm1": {"config": G1, "us": [2790.8, 2780.0, 2800.0]},                   # 0.4 %: noise, kept as is
         "gemm2": {"config": G2, "us": [1657.3, 1738.0, 1968.3]}},
        {"layer": "gpt-oss-20b", "format": "mxfp4", "tokens": 1, "BLOCK_M": 1, "source": "file",
         "gemm1": {"config": GEMV, "us": [26.3, None, 20.0]},                       # S2: 8 warps, no split
         "gemm2": {"config": {**GEMV, "SPLIT_K": 1}, "us": [14.6, None, 14.5]}},
        {"layer": "DeepSeek-V3", "format": "bf16", "tokens": 2048, "BLOCK_M": 128, "source": "file",
         "gemm1": {"config": G1, "us": [None, 990.0, None]},                       # as is failed: no time to record
         "gemm2": {"config": G2, "us": [500.0, 400.0, 520.0]}},
        {"layer": "Mixtral-8x7B", "format": "bf16", "skipped": "time budget"}]
    src = tmp_path / "run.json"
    src.write_text(json.dumps(_run(sets, rows)))
    out = tmp_path / "files"
    assert tc.main(["--from-json", str(src), "--files", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["E=128,N=3072,K=4096,format=bf16,device=NVIDIA_H200.json",
                     "E=32,N=5760,K=2880,format=mxfp4,device=NVIDIA_H200.json"], names
    bf16 = K.load_config_file(str(out / names[0]))
    assert list(bf16) == [2048]
    assert bf16[2048]["gemm1"] == G1 and bf16[2048]["gemm2"] == {**G2, "TMA": True}
    fp4 = K.load_config_file(str(out / names[1]))
    want = {k: v for k, v in GEMV.items() if k != "SPLIT_K"}
    assert fp4[1]["gemm1"] == {**want, "num_warps": 8} and fp4[1]["gemm2"] == want
    body = json.loads((out / names[0]).read_text())
    assert body["configs"]["2048"]["us"] == round(1136.2 + 556.5, 2) and body["tuned"]["script"] == "benchmarks/tile_check.py"


def test_from_json_needs_files_and_sets_are_objects(tc, tmp_path, capsys):
    src = tmp_path / "run.json"
    src.write_text(json.dumps(_run([], [])))
    with pytest.raises(SystemExit):
        tc.main(["--from-json", str(src)])
    with pytest.raises(SystemExit):              # a GPU run needs something to compare
        tc.main(["--tokens", "1"])
    assert "at least one --set" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tc.main(["--set", "[1, 2]", "--from-json", str(src), "--files", str(tmp_path / "x")])
    assert "JSON objects" in capsys.readouterr().err
