"""The facts the upstream audit of entries 61-90 (benchmarks/results/fact_audit_round2_2026-12-05/audit_61-90.yaml) found partly true, as
corrected: each assertion fails on the fact as it was."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import moe_select
from report_helpers import refusals

ROOT = Path(__file__).resolve().parents[1]
QWEN3 = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
         "routing": "renormalize"}


def _triton(engine: str, version: str | None, **dep):
    d = {"engine": engine, "model": QWEN3, "runner": "triton", **dep}
    if version:
        d["engine_version"] = version
    return moe_select.explain(d)


@pytest.mark.parametrize("version, runs", [("0.24.0", False), ("0.26.0", False), ("0.27.0", True), ("0.29.0", True)])
def test_vllm_int8_w8a8_on_cdna_from_0_27_only(version, runs):
    """87: vLLM's int8 oracle offers the Triton experts only, CUDA-only until 0.27.0 added any ROCm GPU."""
    r = _triton("vllm", version, gpu="MI300X", quant="int8_w8a8", quant_config={"layout": "compressed-tensors"})
    assert (r.status == "ok") == runs, r.summary()
    if not runs:
        assert "quant_unsupported" in refusals(r, "triton")
    assert _triton("sglang", None, gpu="MI300X", quant="int8_w8a8").status == "ok"


@pytest.mark.parametrize("version, runs", [("0.32.0", False), ("0.33.0", True)])
def test_vllm_fp8_on_rdna3_from_0_33(version, runs):
    """65: from 0.33.0 supports_fp8() is on_cdna() or on_rdna(): TritonExperts takes FP8 on gfx11."""
    r = _triton("vllm", version, arch="gfx1100", quant="fp8_channel")
    assert (r.status == "ok") == runs, r.summary()


def test_mooncake_ep_ships_in_the_cuda_wheels_from_0_3_7():
    """85: the CUDA wheels include Mooncake EP from 0.3.7 (the audit read 0.3.7.post1 from the docs; a reviewer read the
    PyPI 0.3.7 wheel, which ships mooncake/ep, and v0.3.7's release workflow, WITH_EP=ON)."""
    pkgs = yaml.safe_load((ROOT / "backends" / "packages.yaml").read_text())
    row = next(p for p in pkgs["packages"] if p["name"] == "mooncake-transfer-engine")
    assert "the CUDA wheels include Mooncake EP from 0.3.7" in row["shipped"] and "post1" not in row["shipped"]


def test_trtllm_triton_dispatch_cites_the_module_that_routes_itself():
    """76: TritonFusedMoE is on the developer guide's old path (it routes itself), not the external-comm flow."""
    cap = yaml.safe_load((ROOT / "backends" / "trtllm_triton.yaml").read_text())
    src = cap["dispatch"][0]["source"]
    assert "TritonFusedMoE.forward" in src and "External-comm" not in src
