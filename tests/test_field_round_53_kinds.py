"""Field round 53 of issue 21 (tests/cases/field_round_53.yaml), the two kinds fixed, tested on deployments other than
the round's cases:

- SGLang's own decode CUDA-graph batch limit (backends/engines/sglang.yaml ``graph_defaults``: from the GPU's memory,
  backends/vocabulary.yaml ``memory_gib``, and tp; 20 .. 35 GiB changed in 0.5.20) is the decode need of an all-to-all
  buffer when the deployment gives none (sgl-project/sglang#28914: batch 512 through DeepEP low_latency's 128);
- SGLang 0.5.11 .. 0.5.12.post1 size flashinfer_cutedsl's wrapper per DP rank while the MoE layer without an
  all-to-all takes the DP-gathered batch (backends/flashinfer_cutedsl.yaml; sgl-project/sglang#26696)."""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.errors import InputError
from moe_select.launch_line import from_command
from moe_select.vocab import gpu_memory_gib
from moe_select.vocabulary import ArchEntry
from report_helpers import report_codes

ROOT = Path(__file__).resolve().parents[1]
DSV3 = str(ROOT / "examples/model_configs/deepseek-ai__DeepSeek-V3")
NVFP4 = str(ROOT / "examples/model_configs/nvidia__DeepSeek-V3.1-NVFP4")
QWEN = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
        "routing": "renormalize"}


def _cap(report) -> list[str]:
    """The capacity reasons' texts (every layer kind)."""
    return [r.detail for r in report.reasons if "a2a_tokens_per_rank" in r.detail]


def _deepep(**kw):
    d = {"gpu": "H200", "engine": "sglang", "engine_version": "0.5.13", "model_config": DSV3, "tp": 8, "ep": 8, "dp": 8,
         "a2a": "deepep"}
    d.update(kw)
    return d


@pytest.mark.parametrize("gpu, tp, dp, bs", [
    ("H200", 8, 8, 512),            # 90 .. 160 GiB, tp >= 4
    ("H100", 4, 4, 512),            # H100 80 .. 94 GiB: both boards in 60 .. 160
    ("B200", 2, 2, 512),            # 160 GiB and more: 512 at any tp
    ("H20", 2, 2, 256),             # below tp 4: 256
    ("A100-SXM4-80GB", 2, 2, 256),  # the size in the name decides (A100 alone is 40 or 80)
])
def test_sglangs_own_decode_batch_is_the_need(gpu, tp, dp, bs):
    r = moe_select.explain(_deepep(gpu=gpu, tp=tp, ep=tp, dp=dp))
    caps = _cap(r)
    assert caps and f"a2a_tokens_per_rank = {bs} is above a2a_capacity (128)" in caps[0], report_codes(r)
    assert "sglang's own decode CUDA-graph batch limit" in caps[0] and "backends/engines/sglang.yaml:" in caps[0]
    assert r.plan is None


def test_a_given_batch_or_capacity_wins_over_the_engines_limit():
    assert not _cap(moe_select.explain(_deepep(decode_tokens_per_rank=128)))
    r = moe_select.explain(_deepep(a2a_capacity=512))
    assert not _cap(r) and r.plan is not None, report_codes(r)


def test_the_launch_line_without_a_batch_is_refused_and_with_one_is_not():
    line = ("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --dp 8 --enable-dp-attention "
            "--moe-a2a-backend deepep")
    def explain(text):
        return moe_select.explain(dict(from_command(text, model_config=DSV3, engine_version="0.5.13").deployment, gpu="H200"))
    assert _cap(explain(line))
    assert not _cap(explain(line + " --cuda-graph-max-bs 128"))


@pytest.mark.parametrize("kw", [
    dict(gpu="A100"),                       # 40 or 80 GiB: SGLang's branch is not known
    dict(gpu=None, arch="sm90"),            # no product, no memory
    dict(cuda_graph=False),                 # no capture: the limit is not a batch
    dict(dp=2),                             # attention over 4 ranks per DP group: each dispatches its share
])
def test_where_the_engines_limit_does_not_decide_it_is_not_checked(kw):
    d = _deepep(**kw)
    if d.get("gpu") is None:
        d.pop("gpu")
    r = moe_select.explain(d)
    assert not _cap(r), report_codes(r)
    notes = " ".join(a for c in r.candidates for a in c.assumptions) + " ".join(r.plan.assumptions if r.plan else [])
    assert "decode tokens per rank not given" in notes
    if kw.get("dp") == 2:
        assert "attention over 4 ranks per DP group" in notes


def test_the_20_to_35_gib_branch_changed_in_0_5_20():
    # RTX 4090 (24 GiB) at tp 4: 80 through 0.5.19, 160 from 0.5.20; Mooncake's capacity is 128
    def need(version):
        r = moe_select.explain({"gpu": "RTX 4090", "engine": "sglang", "engine_version": version, "quant": "bf16",
                                "model": QWEN, "tp": 4, "ep": 4, "dp": 4, "a2a": "mooncake",
                                "a2a_mode": "low_latency"})
        return _cap(r)
    assert not need("0.5.19")
    assert any("a2a_tokens_per_rank = 160" in c for c in need("0.5.20"))


def test_speculative_decoding_says_the_need_is_at_least_the_batch():
    r = moe_select.explain(_deepep(speculative=True))
    assert any("at least this" in c for c in _cap(r))


def test_memory_sizes():
    assert gpu_memory_gib("H200")[0] == (141, 141)
    assert gpu_memory_gib("NVIDIA H100 80GB HBM3")[0] == (80, 80)
    assert gpu_memory_gib("A100")[0] == (40, 80)
    assert gpu_memory_gib("THOR") is None and gpu_memory_gib("no such gpu 80GB") is None


@pytest.mark.parametrize("entry, says", [
    ({"memory_gib": {"H999": 80}, "memory_source": "https://example.com/x"}, "not one of this arch's products"),
    ({"memory_gib": {"H100": 80}}, "memory_gib needs memory_source"),
    ({"memory_gib": {"H100": [94, 80]}, "memory_source": "https://example.com/x"}, "min <= max"),
])
def test_memory_entries_are_checked(entry, says):
    with pytest.raises(Exception, match=says):
        ArchEntry.model_validate({"name": "sm90", "vendor": "nvidia", "products": ["H100"],
                                  "source": "https://developer.nvidia.com/cuda-gpus", **entry})


# --- flashinfer_cutedsl's wrapper under SGLang 0.5.11 .. 0.5.12.post1 with attention DP and no all-to-all


def _cutedsl(**kw):
    d = {"gpu": "B200", "engine": "sglang", "engine_version": "0.5.12.post1", "model_config": NVFP4, "tp": 4, "ep": 4,
         "dp": 4, "a2a": "none", "runner": "flashinfer_cutedsl"}
    d.update(kw)
    return d


def _wrapper(report) -> bool:
    return any("CuTe-DSL MoE wrapper" in r.detail for r in report.reasons)


@pytest.mark.parametrize("kw, refused", [
    ({}, True), (dict(engine_version="0.5.11", tp=8, ep=8, dp=2), True),
    (dict(engine_version="0.5.13"), False), (dict(dp=1), False), (dict(cuda_graph=False), False),
    (dict(a2a="deepep"), False), (dict(engine="vllm", engine_version="0.20.0"), False)])
def test_cutedsl_wrapper_sized_per_dp_rank(kw, refused):
    r = moe_select.explain(_cutedsl(**kw))
    assert _wrapper(r) is refused, report_codes(r)


def test_an_undeclared_product_memory_is_a_load_error(tmp_path):
    (tmp_path / "vocabulary.yaml").write_text(
        "schema_version: 3\narchs:\n  - {name: sm131, vendor: nvidia, products: [X1], source: 'https://example.com/a',\n"
        "     memory_gib: {X2: 80}, memory_source: 'https://example.com/b'}\n")
    with pytest.raises(InputError, match=r"vocabulary.yaml:3.*X2"):
        moe_select.explain({"arch": "sm131", "quant": "bf16", "model": QWEN},
                           backends_dirs=[str(tmp_path)])


@pytest.mark.parametrize("version, flag", [("0.5.13", "--cuda-graph-max-bs"), ("0.5.16", "--cuda-graph-max-bs-decode"),
                                           ("0.5.20", "--cuda-graph-max-bs-decode")])
def test_the_capacity_fix_names_the_flag_the_release_has(version, flag):
    # --cuda-graph-max-bs-decode from 0.5.14, --cuda-graph-max-bs removed in 0.5.20 (backends/engines/sglang.yaml)
    r = moe_select.explain(_deepep(engine_version=version))
    fix = next(x.fix for x in r.reasons if "a2a_tokens_per_rank" in x.detail)
    assert f"sglang {flag})" in fix, fix
