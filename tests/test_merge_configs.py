"""benchmarks/merge_configs.py: a partial tune's buckets replace the committed file's same buckets, the rest are kept."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
G = {"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 3}
KEY = {"E": 8, "N": 64, "K": 32, "format": "bf16", "block_shape": None, "device": "NVIDIA H200"}


def _module():
    spec = importlib.util.spec_from_file_location("merge_configs", ROOT / "benchmarks" / "merge_configs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _file(configs: dict, date: str, key: dict = KEY) -> dict:
    return {"format_version": 1, "key": key, "tuned": {"date": date, "torch": "2.11", "triton": "3.6"},
            "configs": configs}


def test_new_buckets_replace_old_ones_and_the_rest_stay(tmp_path):
    m = _module()
    old = _file({"1": {"BLOCK_M": 16, "gemm1": G, "gemm2": G}, "2048": {"BLOCK_M": 64, "gemm1": G, "gemm2": G}}, "d1")
    new = _file({"2048": {"BLOCK_M": 128, "gemm1": {**G, "TMA": True}, "gemm2": G},
                 "8192": {"BLOCK_M": 128, "gemm1": G, "gemm2": G}}, "d2")
    into, src = tmp_path / "into", tmp_path / "new"
    into.mkdir()
    src.mkdir()
    name = "E=8,N=64,K=32,format=bf16,device=NVIDIA_H200.json"
    (into / name).write_text(json.dumps(old))
    (src / name).write_text(json.dumps(new))
    other = "E=8,N=64,K=32,format=fp8_channel,device=NVIDIA_H200.json"
    (src / other).write_text(json.dumps(_file({"1": {"BLOCK_M": 16, "gemm1": G, "gemm2": G}}, "d2",
                                              {**KEY, "format": "fp8_channel"})))
    assert m.main([str(src), "--into", str(into), "--note", "TMA tune"]) == 0
    got = json.loads((into / name).read_text())
    assert list(got["configs"]) == ["1", "2048", "8192"]
    assert got["configs"]["1"] == old["configs"]["1"]
    assert got["configs"]["2048"]["BLOCK_M"] == 128 and got["configs"]["2048"]["gemm1"]["TMA"] is True
    assert got["tuned"]["date"] == "d1"
    assert got["tuned"]["merged"] == [{"date": "d2", "torch": "2.11", "triton": "3.6", "buckets": ["2048", "8192"],
                                      "note": "TMA tune"}]
    assert json.loads((into / other).read_text())["configs"].keys() == {"1"}      # no counterpart: copied


def test_files_of_different_layers_are_not_merged():
    m = _module()
    with pytest.raises(ValueError, match="different layers"):
        m.merge(_file({"1": {}}, "d2", {**KEY, "E": 16}), _file({"1": {}}, "d1"))
