"""benchmarks/ep_nccl_check.py: its schedule for 2, 4 and 8 ranks (no processes), and its gloo path end to
end with 2 CPU processes on the toy shape (E16 K4 H256 I256): every configuration of 2 ranks checked
against the float64 reference, times per token count, the refusals, the JSON; and ``--budget-s 0``
skipping every configuration while the refusals still run and the JSON is still written."""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "ep_nccl_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("ep_nccl_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_configurations_that_fit_n_ranks():
    m = load_script()
    names = {n: [(c[0], c[1], c[2], c[3], c[4]) for c in m.parallel_configs(n)] for n in (2, 4, 8)}
    assert names[2] == [("pure_tp", 2, 1, "none", "replicated"), ("ep_none_replicated", 2, 2, "none", "replicated"),
                        ("ep_none_sharded", 2, 2, "none", "sharded"), ("ep_torch", 2, 2, "torch", "own")]
    assert {(tp, ep, a2a, lay) for _, tp, ep, a2a, lay in names[4]} >= {(4, 2, "none", "replicated"), (4, 2, "none", "sharded"),
                                                                     (4, 2, "torch", "own")}
    mixed8 = {(tp, ep) for name, tp, ep, _, _ in names[8] if name.startswith("mixed")}
    assert mixed8 == {(8, 4), (8, 2)}
    assert len(m.edge_configs(2)) == 2 and len(m.edge_configs(4)) == 4


def test_cases_real_layers_and_graph_flags():
    m = load_script()
    args = argparse.Namespace(formats="float32,bf16,fp8_channel,fp8_block", models="Qwen3-30B-A3B,DeepSeek-V3:4",
                              float32_shape="model", check_tokens=None, no_edge=False)
    suites, cases = m.make_cases(args, 8, gpu=True)
    q = suites["Qwen3-30B-A3B"]
    assert (q["num_experts"], q["top_k"], q["hidden_size"], q["moe_intermediate_size"], q["routing"]) == (128, 8, 2048, 768, "renormalize")
    d = suites["DeepSeek-V3/4"]
    assert (d["num_experts"], d["hidden_size"], d["moe_intermediate_size"], d["routing"], d["n_group"], d["topk_group"]) == \
        (256, 1792, 512, "deepseek_v3", 8, 4)
    graph = {(c["format"], c["a2a"], c["layout"]) for c in cases if c["graph"]}
    assert graph == {(f, "none", "replicated") for f in ("bf16", "fp8_channel", "fp8_block")}
    # cases of one shard (suite, weight quant, tp, ep) are adjacent: the ranks build those weights once
    shards = [(c["suite"], c["quant"], c["tp"], c["ep"]) for c in cases]
    assert len(set(shards)) == sum(1 for i, s in enumerate(shards) if i == 0 or shards[i - 1] != s)
    assert all(c["runner_asked"] == "torch_native" for c in cases if c["dtype"] == "float32")


@pytest.mark.slow
def test_gloo_two_processes_tiny_shape(tmp_path):
    out = tmp_path / "ep.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--nproc", "2", "--backend", "gloo", "--device", "cpu", "--models", "toy",
                           "--formats", "float32,fp8_block", "--tokens", "1,3", "--reps", "1", "--check-tokens", "8",
                           "--late-timeout-s", "1", "--json", str(out)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["ok"] and res["complete"] and res["nproc"] == 2 and res["backend"] == "gloo"
    rows = [r for r in res["rows"] if r["suite"] == "toy"]
    assert {(r["format"], r["config"]) for r in rows} == {(f, c) for f in ("float32", "fp8_block")
                                                          for c in ("pure_tp", "ep_none_replicated", "ep_none_sharded", "ep_torch")}
    for r in rows:
        assert r["status"] == "ok" and r["rel_error"] <= r["tolerance"] and r["runner"] == "torch_native"
        assert r["tolerance"] == (1e-4 if r["format"] == "float32" else pytest.approx(2 ** -8 * 4))
        assert [t["tokens_per_rank"] for t in r["times"]] == [1, 3]
        assert all(t["forward_ms"] > 0 and t["comm_ms"] > 0 and len(t["forward_ms_per_rank"]) == 2 for t in r["times"])
    edge = {r["config"]: r for r in res["rows"] if r["suite"] == "toy-edge"}
    assert set(edge) == {"ep_torch_one_expert", "ep_none_sharded_sparse"} and all(r["status"] == "ok" for r in edge.values())
    assert all(d["refused"] and "rank 1" in d["msg"] for d in res["disagreement"])
    assert len(res["late"]) == 1 and res["late"][0]["refused"] and res["late"][0]["s"] <= res["late_bound_s"]
    assert "| toy | fp8_block | ep_torch | 2 | 2 | torch |" in proc.stdout


@pytest.mark.slow
def test_budget_zero_skips_configurations_and_writes_json(tmp_path):
    out = tmp_path / "ep.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--nproc", "2", "--cpu", "--models", "toy", "--formats", "bf16",
                           "--no-edge", "--budget-s", "0", "--late-timeout-s", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["ok"] and not res["complete"]
    assert {r["status"] for r in res["rows"]} == {"skipped_budget"} and len(res["rows"]) == 4
    assert all(d["refused"] for d in res["disagreement"]) and res["late"][0]["refused"]
    assert "INCOMPLETE" in proc.stdout
