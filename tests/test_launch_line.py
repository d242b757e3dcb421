"""Issue 22: launch lines read as the engines read them (moe_select/launch_line.py), written back
(moe_select/launch_emit.py), and the engine tables (backends/engines/, moe_select/engine_tables.py).

Real launch lines: each test cites where the line was published (owner/repo#N for an issue or PR,
owner/repo@commit:path for a file, each checked against its source with the search tools) and the outcome its source
reports; the line is the source's, word for word except where the comment says. Tests marked "project-written" hold
lines the project wrote (not field cases). A model named by its Hugging Face id is given from a fake offline cache
(tmp_path) holding the repository's config.json from examples/model_configs (what the lookup reads), or through
model_config= (the nearest example config of the same architecture) where no example config exists.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from moe_select.cli import main
from moe_select.engine_tables import names, table
from moe_select.errors import InputError
from moe_select.launch_emit import EmitError, emit
from moe_select.launch_line import Launch, from_command

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "model_configs"
GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture
def hf_cache(tmp_path: Path) -> dict[str, str]:
    """A Hugging Face hub cache with the example configs under their hub names (refs/main -> a snapshot)."""
    hub = tmp_path / "hub"
    for folder in CONFIGS.iterdir():
        if "__" not in folder.name:
            continue
        repo = hub / ("models--" + folder.name.replace("__", "--"))
        snap = repo / "snapshots" / "0123abcd"
        snap.mkdir(parents=True)
        for f in folder.iterdir():
            shutil.copy(f, snap / f.name)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("0123abcd")
    return {"HF_HUB_CACHE": str(hub)}


def kinds(launch: Launch, kind: str) -> dict[str, str]:
    return {f.token: f.message for f in launch.found(kind)}


# ------------------------------------------------------------------------------------ real launch lines
def test_sglang_deepep_pr_4232_removed_flag():
    # sgl-project/sglang#4232 (a PR; yicwang's comment of 2025-03-15): on the SGLang of that PR the line hit CUDA out of
    # memory on H20 96GB. At the tables' newest, --enable-deepep-moe is gone (sgl-project/sglang#10770): the engine
    # refuses the line. The model is a local folder there (/data00/models/DeepSeek-V3): given by model_config=.
    line = ("python3 -m sglang.launch_server --model-path /data00/models/DeepSeek-V3 --tp 8 --dp 8 --enable-dp-attention "
            "--enable-deepep-moe --trust-remote-code  --port 8010 --context-length 8192 --mem-fraction-static 0.8 --disable-cuda-graph")
    launch = from_command(line, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-V3"))
    err = kinds(launch, "engine_error")
    assert "removed by sgl-project/sglang#10770" in err["--enable-deepep-moe"]
    assert "write --moe-a2a-backend deepep" in err["--enable-deepep-moe"]
    assert launch.deployment["tp"] == 8 and launch.deployment["dp"] == 8
    assert launch.deployment["cuda_graph"] is False
    assert "a2a" not in launch.deployment  # a removed flag means nothing: no silent rewrite to deepep


def test_sglang_underscore_flag_issue_12818():
    # sgl-project/sglang#12818 (description): "launch_server.py: error: unrecognized arguments: --reasoning_parser
    # kimi_k2" on v0.5.5; the answer: "please use --reasoning-parser kimi_k2". Kimi-K2 is DeepSeek-V3's architecture.
    line = ("python -m sglang.launch_server --model-path /moonshotai/Kimi-K2-Thinking --tp 8 --disable-radix-cache "
            "--trust-remote-code --tool-call-parser kimi_k2 --reasoning_parser kimi_k2 --context-length 262144")
    launch = from_command(line, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-V3"))
    err = kinds(launch, "engine_error")
    assert "write --reasoning-parser" in err["--reasoning_parser"] and "unrecognized arguments" in err["--reasoning_parser"]
    assert launch.deployment["tp"] == 8
    assert "--tp" in kinds(launch, "note") and "abbreviation of --tp-size" in kinds(launch, "note")["--tp"]


def test_sglang_readme_deepseek_single_node(hf_cache):
    # sgl-project/sglang@0006053c1f74:benchmark/deepseek_v3/README.md ("Using pip"; docs/basic_usage/deepseek.md links to
    # it for "one node of 8 x H200"). Ran: sgl-project/sglang#2735 launched this very line on H200 (GSM8K 0.951).
    launch = from_command("python3 -m sglang.launch_server --model deepseek-ai/DeepSeek-V3 --tp 8 --trust-remote-code", hf_cache)
    assert not launch.found("engine_error") and not launch.found("unknown")
    assert launch.deployment == {"engine": "sglang", "tp": 8, "dp": 1, "model_config": launch.deployment["model_config"],
                                 "speculative": False}    # dp 1: SGLang's default, no attention data parallelism
    report = launch.explain(deployment={"gpu": "H200"})
    assert report.plan is not None
    assert report.deployment.provenance["tp"] == "launch line: --tp 8"


def test_sglang_readme_deepseek_two_nodes_internode(hf_cache):
    # sgl-project/sglang@0006053c1f74:benchmark/deepseek_v3/README.md ("Serving with two H20*8 nodes", node 1 of 2; a
    # documented launch, no run reported).
    line = ("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 16 --dist-init-addr 10.0.0.1:5000 "
            "--nnodes 2 --node-rank 0 --trust-remote-code")
    launch = from_command(line, hf_cache)
    assert launch.deployment["tp"] == 16
    assert "internode" in kinds(launch, "note")["--nnodes 2"]
    assert {"--dist-init-addr", "--node-rank", "--trust-remote-code"} <= set(kinds(launch, "not_moe"))


def test_sglang_a2a_forces_ep_equals_tp_project_written():
    # Project-written line (not a field case). The rule is SGLang's server_args: every a2a backend but none sets
    # ep_size = tp_size with a warning ("DeepEP MoE is enabled. The expert parallel size is adjusted to be the same as
    # the tensor parallel size[N]", logged in sgl-project/sglang#11088 and #16026; Mega MoE joined in #24884).
    line = "python3 -m sglang.launch_server --model-path M --tp 8 --ep-size 4 --moe-a2a-backend deepep --deepep-mode low_latency"
    launch = from_command(line, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-V3"))
    assert launch.deployment["ep"] == 8 and launch.deployment["a2a_mode"] == "low_latency"
    assert "not what runs" in kinds(launch, "rewritten")["--ep-size 4"]


def test_sglang_config_file_and_env(tmp_path):
    # Project-written line (not a field case): SGLang --config FILE.yaml (server_args: the same keys; the command line
    # wins) and an export line.
    cfg = tmp_path / "sglang.yaml"
    cfg.write_text("tp-size: 4\nmoe-runner-backend: deep_gemm\nchunked-prefill-size: 4096\ntrust-remote-code: true\n")
    text = (f"export SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=256\n"
            f"sglang serve --model-path M --config {cfg} --tp-size 8  # the line wins\n")
    launch = from_command(text, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-V3"))
    assert launch.deployment["tp"] == 8 and launch.deployment["runner"] == "deep_gemm"
    assert launch.deployment["max_tokens_per_rank"] == 4096
    assert "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=256" in kinds(launch, "understood")


def test_vllm_pr_26732_new_way(hf_cache):
    # vllm-project/vllm#26732 (merged PR's description, "New way", verbatim): runs on vLLM >= 0.11.1.
    line = "vllm serve openai/gpt-oss-20b --data-parallel-size 2 --enable-expert-parallel --all2all-backend deepep_high_throughput"
    launch = from_command(line, hf_cache)
    d = launch.deployment
    assert (d["tp"], d["ep"], d["dp"], d["a2a"], d["a2a_mode"]) == (2, 2, 2, "deepep", "normal")
    assert "EP = tp x dp x pcp" in launch.provenance["ep"]


def test_vllm_pr_26732_old_way_env_removed(hf_cache):
    # vllm-project/vllm#26732 (PR description, "Old way (still works but deprecated)"): VLLM_ALL2ALL_BACKEND; removed by
    # vllm-project/vllm#33535 (v0.16.0): at the tables' newest the variable is not read and the a2a falls back.
    line = "VLLM_ALL2ALL_BACKEND=deepep_high_throughput vllm serve openai/gpt-oss-20b --data-parallel-size 2 --enable-expert-parallel"
    launch = from_command(line, hf_cache)
    removed = kinds(launch, "removed")
    assert "vllm-project/vllm#33535" in removed["VLLM_ALL2ALL_BACKEND=deepep_high_throughput"]
    assert "write --all2all-backend" in removed["VLLM_ALL2ALL_BACKEND=deepep_high_throughput"]
    assert "a2a" not in launch.deployment
    old = from_command(line, hf_cache, engine_version="0.11.1")  # still read then: deprecated
    assert "deprecated by vllm-project/vllm#26732" in kinds(old, "deprecated")["VLLM_ALL2ALL_BACKEND=deepep_high_throughput"]


def test_vllm_all2all_env_read_through_0_15_removed_in_0_16(hf_cache):
    # The 0.15.0 and 0.15.1 wheels still read VLLM_ALL2ALL_BACKEND (vllm/config/parallel.py ParallelConfig.__post_init__,
    # warning that it "will be removed in v0.15.0"); the 0.16.0 wheel has no trace of it (backends/engines/vllm.yaml).
    line = "VLLM_ALL2ALL_BACKEND=deepep_high_throughput vllm serve openai/gpt-oss-20b --data-parallel-size 2 --enable-expert-parallel"
    token = "VLLM_ALL2ALL_BACKEND=deepep_high_throughput"
    for version in ("0.15.0", "0.15.1"):
        launch = from_command(line, hf_cache, engine_version=version)
        assert token in kinds(launch, "deprecated") and token not in kinds(launch, "removed"), version
        assert (launch.deployment["a2a"], launch.deployment["a2a_mode"]) == ("deepep", "normal"), version
    gone = from_command(line, hf_cache, engine_version="0.16.0")
    assert "v0.16.0" in kinds(gone, "removed")[token] and "as announced" not in kinds(gone, "removed")[token]
    assert "a2a" not in gone.deployment


def test_vllm_flag_newer_than_version_project_written():
    # Project-written line (not a field case): vllm-project/vllm#27347's own command could not be retrieved; its error,
    # "vllm: error: unrecognized arguments: --all2all-backend deepep_low_latency", is what a vLLM older than 0.11.1 says.
    line = "vllm serve M -tp 8 --enable-expert-parallel --all2all-backend deepep_low_latency"
    launch = from_command(line, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-V3"), engine_version="0.11.0")
    assert "does not have it" in kinds(launch, "engine_error")["--all2all-backend deepep_low_latency"]
    assert "a2a" not in launch.deployment
    now = from_command(line, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-V3"), engine_version="0.12.0")
    assert now.deployment["a2a_mode"] == "low_latency" and not now.found("engine_error")


def test_vllm_issue_34249_qwen3_fp8():
    # vllm-project/vllm#34249 (description, verbatim): on 8 x H100 (vLLM 0.15.2rc1.dev152) the server launched and served
    # inputs under 16k tokens; FLASHINFER_CUTLASS was auto-selected and inputs over 16k failed. --gpu-utilization is no
    # vLLM flag (not a prefix of --gpu-memory-utilization): reported. The 2507 checkpoint has Qwen3-235B-A22B-FP8's shape.
    text = """vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 \\
  --gpu-utilization 0.95 \\
  --tensor-parallel-size 8 \\
  --enable-expert-parallel \\
  --max-model-len 262144 \\
  --max-num-batched-tokens 16384  # set --max-num-batched-tokens to prove that flashinfer fp8 does not work over this token limit
"""
    launch = from_command(text, model_config=str(CONFIGS / "Qwen__Qwen3-235B-A22B-FP8"))
    d = launch.deployment
    assert (d["tp"], d["ep"], d["max_tokens_per_rank"]) == (8, 8, 16384)
    assert "did you mean --gpu-memory-utilization" in kinds(launch, "unknown")["--gpu-utilization"]
    report = launch.explain(deployment={"gpu": "H100"})
    assert report.deployment.max_tokens_per_rank == 16384


def test_vllm_pr_32954_env_ignored_and_dotted_json():
    # vllm-project/vllm#32954 (merged; test plan verbatim, the line of #28238 too; ran, GSM8K 0.953): VLLM_FLASHINFER_MOE_BACKEND, deprecated by
    # vllm-project/vllm#43148 and no longer read (v0.24.0): a user who set it paid a JIT build for vLLM's own choice.
    line = ("VLLM_USE_FLASHINFER_MOE_FP16=1 VLLM_FLASHINFER_MOE_BACKEND=latency vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct  "
            "--max-num-batched-tokens 8192  --max-model-len 32768  --no-enable-prefix-caching  --async-scheduling  "
            "--compilation_config.pass_config.enable_fi_allreduce_fusion true --compilation_config.pass_config.enable_noop true  "
            "--compilation_config.custom_ops+=+rms_norm  --compilation_config.cudagraph_mode FULL_DECODE_ONLY  "
            "--compilation_config.splitting_ops []  --disable-log-requests -tp 2")
    launch = from_command(line, model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    ignored = kinds(launch, "ignored")["VLLM_FLASHINFER_MOE_BACKEND=latency"]
    assert "vllm-project/vllm#43148" in ignored and "--moe-backend flashinfer_trtllm" in ignored and "JIT" in ignored
    assert "VLLM_USE_FLASHINFER_MOE_FP16" in kinds(launch, "unknown")
    cc = launch.values["compilation_config"].value
    assert cc["pass_config"] == {"enable_fi_allreduce_fusion": True, "enable_noop": True}
    assert cc["custom_ops"] == ["+rms_norm"] and cc["cudagraph_mode"] == "FULL_DECODE_ONLY" and cc["splitting_ops"] == []
    assert launch.deployment["tp"] == 2 and launch.deployment["max_tokens_per_rank"] == 8192
    assert "--no-enable-prefix-caching" in kinds(launch, "not_moe")


def test_vllm_fp8_env_ignored_at_version_and_read_before_project_written():
    # Project-written lines (not field cases): VLLM_USE_FLASHINFER_MOE_FP8 (vllm-project/vllm#43148: "will be removed
    # in v0.23"; the 0.23.0 wheel still reads it, the 0.24.0 wheel does not).
    line = "VLLM_USE_FLASHINFER_MOE_FP8=1 vllm serve M -tp 8"
    at = from_command(line, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-V3"), engine_version="0.24.0")
    assert "no longer read" in kinds(at, "ignored")["VLLM_USE_FLASHINFER_MOE_FP8=1"]
    for version in ("0.22.0", "0.23.0"):
        before = from_command(line, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-V3"), engine_version=version)
        assert "VLLM_USE_FLASHINFER_MOE_FP8=1" in kinds(before, "deprecated") and not before.found("ignored"), version
    fp4 = from_command("VLLM_USE_FLASHINFER_MOE_FP4=1 vllm serve M", model_config=str(CONFIGS / "deepseek-ai__DeepSeek-V3"))
    assert "VLLM_USE_FLASHINFER_MOE_FP4=1" in kinds(fp4, "ignored")


def test_vllm_pr_28723_pcp():
    # vllm-project/vllm#28723 (PR closed unmerged, split from #26864; its test plan verbatim, ran on the PR's branch:
    # GSM8K reported): export line, -pcp 2 x tp 4 = an MoE group of 8 ranks.
    text = ("export VLLM_ATTENTION_BACKEND='FLASHINFER'\n"
            "vllm serve Qwen/Qwen2.5-3B --tensor-parallel-size 4 --decode-context-parallel-size 2 --prefill-context-parallel-size 2 "
            "--dcp-kv-cache-interleave-size 8\n")
    launch = from_command(text, model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert launch.deployment["tp"] == 8 and "4 x 1 x 2" in launch.provenance["tp"]
    assert "VLLM_ATTENTION_BACKEND" in kinds(launch, "unknown")
    assert "--decode-context-parallel-size" in kinds(launch, "unknown")


def test_vllm_pr_28988_pcp_mla(hf_cache):
    # vllm-project/vllm#28988 (PR closed unmerged; its test plan verbatim; the results it reports are for PCP2TP4 against
    # PCP1TP8, GSM8K 0.6259 vs 0.6277, on the PR's branch): PCP 2 with TP 1.
    line = "vllm serve deepseek-ai/DeepSeek-V2-Lite-Chat --gpu-memory-utilization 0.9 --tensor-parallel-size 1 --prefill-context-parallel-size 2"
    launch = from_command(line, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-V3"))
    assert launch.deployment["tp"] == 2 and "ep" not in launch.deployment


def test_vllm_issue_8273_config_yaml(tmp_path):
    # vllm-project/vllm#8273 (description, verbatim: the line and its config.yaml): `vllm serve model --config
    # config.yaml` failed on the reporter's vLLM of Sept 2024 ("vllm: error: unrecognized arguments: --config"); current
    # vLLM inserts the file's keys (argparse_utils). The model named "model" is given by model_config=.
    (tmp_path / "config.yaml").write_text('host: "127.0.0.1"\nport: 6379\nuvicorn-log-level: "info"\n')
    launch = from_command("vllm serve model --config config.yaml", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"),
                          base_dir=tmp_path)
    assert launch.deployment.get("tp", 1) == 1 and "ep" not in launch.deployment
    assert "--uvicorn-log-level" in kinds(launch, "unknown") and {"--host", "--port"} <= set(kinds(launch, "not_moe"))
    # Project-written extension (not from the issue): a parallel key in the same file reaches the deployment.
    (tmp_path / "config.yaml").write_text('host: "127.0.0.1"\nport: 6379\ntensor-parallel-size: 4\n')
    launch = from_command("vllm serve model --config config.yaml", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"),
                          base_dir=tmp_path)
    assert launch.deployment["tp"] == 4


def test_vllm_api_server_entrypoint_korgym_script():
    # multimodal-art-projection/KORGym@1a4686f139aa:game_lib/24-snake/script/DeepSeek-R1-Distill-Llama-70B.sh (the
    # repository's serving script for its benchmark runs; no failure reported): the OpenAI server module with --model,
    # underscore spellings with "=", pipeline parallel 2 x tensor parallel 4, and CUDA_VISIBLE_DEVICES. The model is a
    # dense Llama (no MoE layer): model_config= gives an MoE config to read the parallel flags against.
    line = ("CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 python -m vllm.entrypoints.openai.api_server --model "
            "/map-vepfs/models/jiajun/DeepSeek/DeepSeek-R1-Distill-Llama-70B --served-model-name DeepSeek-R1-Distill-Llama-70B "
            "--max_model_len=15000 --port=9003 --pipeline_parallel_size=2 --tensor_parallel_size=4 --gpu_memory_utilization=0.95")
    launch = from_command(line, model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert launch.engine == "vllm" and launch.deployment["tp"] == 4
    assert not launch.found("unknown") and not launch.found("engine_error")
    assert "8 GPU(s) visible" in kinds(launch, "note")["CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"]
    assert "--pipeline_parallel_size 2" in kinds(launch, "note")


def _trt_guide_yaml(tmp_path: Path) -> Path:
    # The FP8 YAML of NVIDIA/TensorRT-LLM@0d2a78561126:docs/source/deployment-guide/quick-start-recipe-for-deepseek-r1-on-trtllm.md
    # ("For FP8 model, we need extra moe_config"), verbatim.
    p = tmp_path / "config.yml"
    p.write_text("enable_attention_dp: true\ncuda_graph_config:\n  enable_padding: true\n  max_batch_size: 128\n"
                 "kv_cache_config:\n  dtype: fp8\nstream_interval: 10\nspeculative_config:\n  decoding_type: MTP\n"
                 "  num_nextn_predict_layers: 1\nmoe_config:\n  backend: DEEPGEMM\n  max_num_tokens: 3200\n")
    return p


def test_trtllm_deepseek_r1_deployment_guide(tmp_path):
    # NVIDIA/TensorRT-LLM@0d2a78561126:docs/source/deployment-guide/quick-start-recipe-for-deepseek-r1-on-trtllm.md
    # (1024/1024 launch, verbatim; the guide reports its FP8 GSM8K sample result on Blackwell, 0.9538): the guide sets
    # EXTRA_LLM_API_FILE=/tmp/config.yml and writes the YAML there with a heredoc; here the variable names tmp_path's copy.
    cfg = _trt_guide_yaml(tmp_path)
    text = f"""EXTRA_LLM_API_FILE={cfg}
trtllm-serve deepseek-ai/DeepSeek-R1-0528 \\
    --host 0.0.0.0 \\
    --port 8000 \\
    --max_batch_size 1024 \\
    --max_num_tokens 3200 \\
    --max_seq_len 2048 \\
    --kv_cache_free_gpu_memory_fraction 0.8 \\
    --tp_size 8 \\
    --ep_size 8 \\
    --trust_remote_code \\
    --extra_llm_api_options ${{EXTRA_LLM_API_FILE}}
"""
    launch = from_command(text, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-R1"))
    d = launch.deployment
    # moe_config.backend DEEPGEMM is TensorRT-LLM's own DeepGemmFusedMoE (issue 20: backends/trtllm_deepgemm.yaml).
    assert (d["tp"], d["ep"], d["dp"], d["runner"], d["cuda_graph"], d["max_tokens_per_rank"]) == (8, 8, 8, "trtllm_deepgemm", True, 3200)
    report = launch.explain(deployment={"gpu": "B200"})
    assert report.plan is not None and report.plan.runner == "trtllm_deepgemm"


_CURATED_DEEPGEMM = (  # NVIDIA/TensorRT-LLM@6d2ab8f725e4:examples/configs/curated/deepseek-r1-deepgemm.yaml, verbatim
    "max_batch_size: 1024\nmax_num_tokens: 3200\ntensor_parallel_size: 8\nmoe_expert_parallel_size: 8\n"
    "trust_remote_code: true\nenable_attention_dp: true\ncuda_graph_config:\n  enable_padding: true\n  max_batch_size: 128\n"
    "kv_cache_config:\n  dtype: fp8\n  free_gpu_memory_fraction: 0.8\nstream_interval: 10\nspeculative_config:\n"
    "  decoding_type: MTP\n  num_nextn_predict_layers: 1\nmoe_config:\n  backend: DEEPGEMM\n  max_num_tokens: 3200\n")
_GUIDE_CONFIG_LINE = "trtllm-serve deepseek-ai/DeepSeek-R1-0528 --host 0.0.0.0 --port 8000 --config ${EXTRA_LLM_API_FILE}\n"


def test_trtllm_guide_config_alias(tmp_path):
    # NVIDIA/TensorRT-LLM@7c22bbf9f6f7:docs/source/deployment-guide/deployment-guide-for-deepseek-r1-on-trtllm.md (the
    # DeepGEMM path for B200/GB200; the launch line verbatim, same GSM8K sample result as above), its YAML written the
    # guide's "Show code" way (EXTRA_LLM_API_FILE=/tmp/config.yml and a heredoc; tmp_path here): the parallel sizes now
    # live in the YAML, and --config is the alias of --extra_llm_api_options. (This test once paired the line with the
    # quick-start YAML and expected tp 1, dp 1: not what the guide runs.)
    (tmp_path / "config.yml").write_text(_CURATED_DEEPGEMM)
    launch = from_command(f"EXTRA_LLM_API_FILE={tmp_path / 'config.yml'}\n" + _GUIDE_CONFIG_LINE,
                          model_config=str(CONFIGS / "deepseek-ai__DeepSeek-R1"))
    d = launch.deployment
    assert (d["tp"], d["ep"], d["dp"], d["runner"], d["cuda_graph"], d["max_tokens_per_rank"]) == (8, 8, 8, "trtllm_deepgemm", True, 3200)
    assert launch.explain(deployment={"gpu": "B200"}).plan is not None


def test_trtllm_guide_config_alias_trtllm_dir(tmp_path):
    # The same guide's main way, verbatim but for TRTLLM_DIR (the guide: /app/tensorrt_llm, "change as needed to match
    # your environment"): the variable is set from another one.
    curated = tmp_path / "examples" / "configs" / "curated"
    curated.mkdir(parents=True)
    (curated / "deepseek-r1-deepgemm.yaml").write_text(_CURATED_DEEPGEMM)
    text = (f"TRTLLM_DIR={tmp_path} # change as needed to match your environment\n"
            "EXTRA_LLM_API_FILE=${TRTLLM_DIR}/examples/configs/curated/deepseek-r1-deepgemm.yaml\n" + _GUIDE_CONFIG_LINE)
    launch = from_command(text, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-R1"))
    assert (launch.deployment["tp"], launch.deployment["runner"]) == (8, "trtllm_deepgemm")


def test_trtllm_decode_worker_tokens_project_written(tmp_path):
    # Project-written line (not a field case): the quick-start guide's YAML on a GENERATION worker (disaggregated
    # serving, --server_role: serve.py): the CUDA-graph
    # batch (128) x (1 + 1 MTP draft token) tokens per rank.
    cfg = _trt_guide_yaml(tmp_path)
    launch = from_command(f"trtllm-serve M --tp_size 8 --ep_size 8 --server_role GENERATION --extra_llm_api_options {cfg}",
                          model_config=str(CONFIGS / "deepseek-ai__DeepSeek-R1"))
    assert launch.deployment["phase"] == "decode" and launch.deployment["max_tokens_per_rank"] == 256


def test_trtllm_serve_genai_perf_guide(tmp_path):
    # slikhite-1/TRTLLM-serve-guide@f07a3028ae8d:README.md ("Benchmarking with trtllm-serve and genai-perf", written for
    # the Triton container 25.04 with tensorrt_llm==0.19.0; a how-to, no result reported): the line and its example
    # extra_llm_api_configs.yml, verbatim. Not a triton-inference-server tutorial, as this test once said. Dense 70B, tp 8;
    # pytorch_backend_config (the 0.19 nesting) is no key of the tables' TensorRT-LLM: reported.
    (tmp_path / "extra_llm_api_configs.yml").write_text(
        "pytorch_backend_config:\n  enable_overlap_scheduler: true \n  use_cuda_graph: true\n  cuda_graph_max_batch_size: 1024\n"
        "  cuda_graph_padding_enabled: true\n")
    text = ("trtllm-serve deepseek-ai/DeepSeek-R1-Distill-Llama-70B \\\n    --backend pytorch \\\n    --tp_size 8 \\\n"
            "    --kv_cache_free_gpu_memory_fraction 0.9 \\\n    --trust_remote_code \\\n    --extra_llm_api_options extra_llm_api_configs.yml\n")
    launch = from_command(text, model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"), base_dir=tmp_path)
    assert launch.deployment["tp"] == 8 and "dp" not in launch.deployment
    assert "pytorch_backend_config" in kinds(launch, "unknown")


def test_trtllm_mpirun_wrapper_is_stripped(tmp_path):
    # NVIDIA/dgx-spark-playbooks@532624b3644e:nvidia/trt-llm/README.md ("Run on two Sparks", step 10: the command inside
    # `docker exec ... bash -c '...'`, verbatim; the playbook expects server startup logs and a ready message): mpirun and
    # trtllm-llmapi-launch were launchers moe-select did not strip (refused); since the ninth new user's trial their
    # options are skipped with a note and trtllm-serve's line is read (here up to the options file it needs).
    extra = tmp_path / "extra-llm-api-config.yml"     # the playbook's /tmp/extra-llm-api-config.yml, here
    extra.write_text("moe_config:\n  backend: CUTLASS\n")
    launch = from_command("mpirun -x HF_TOKEN trtllm-llmapi-launch trtllm-serve $MODEL \\\n      --tp_size 2 \\\n"
                          "      --backend pytorch \\\n      --max_num_tokens 32768 \\\n      --max_batch_size 4 \\\n"
                          f"      --extra_llm_api_options {extra} \\\n      --port 8355",
                          {"MODEL": "nvidia/Qwen3-235B-A22B-FP4"},
                          model_config=str(ROOT / "examples" / "model_configs" / "Qwen__Qwen3-235B-A22B"))
    assert launch.engine == "trtllm" and launch.deployment["tp"] == 2
    assert [f.token for f in launch.findings if "own options are not read" in f.message] == [
        "mpirun -x HF_TOKEN", "trtllm-llmapi-launch"]


def test_trtllm_moe_tp_times_ep_must_be_tp_project_written(tmp_path):
    # Project-written lines (not field cases).
    cfg = tmp_path / "c.yaml"
    cfg.write_text("moe_tensor_parallel_size: 2\nmoe_expert_parallel_size: 2\n")
    with pytest.raises(InputError, match="cannot be expressed"):
        from_command(f"trtllm-serve M --tp_size 8 --extra_llm_api_options {cfg}", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    cfg.write_text("moe_tensor_parallel_size: 2\n")
    launch = from_command(f"trtllm-serve M --tp_size 8 --extra_llm_api_options {cfg}", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert launch.deployment["ep"] == 4



def test_trtllm_yaml_values_name_their_file_and_line(tmp_path):
    """A TensorRT-LLM ``--extra_llm_api_options`` value of the wrong type is an error naming the YAML file and the key's
    line; a value read names them too (the provenance an operator follows back)."""
    cfg = tmp_path / "extra.yaml"
    cfg.write_text("# options\nmoe_expert_parallel_size: two\n")
    with pytest.raises(InputError) as err:
        from_command(f"trtllm-serve M --tp_size 8 --extra_llm_api_options {cfg}", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert f"{cfg}:2" in str(err.value) and "moe_expert_parallel_size" in str(err.value), str(err.value)
    cfg.write_text("# options\n\nmoe_expert_parallel_size: 4\n")
    launch = from_command(f"trtllm-serve M --tp_size 8 --extra_llm_api_options {cfg}", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert launch.deployment["ep"] == 4
    assert any("extra.yaml:3: moe_expert_parallel_size" in r.written for r in launch.values.values()), \
        [r.written for r in launch.values.values()]


def test_a_refused_runner_value_lists_what_the_engine_takes_now(tmp_path):
    """The values offered for a runner name the engine refuses are those it takes; a retired one (TensorRT-LLM's
    WIDEEP, NVIDIA/TensorRT-LLM#17408) is named apart, not offered, and the YAML key's own line is named (break55: it named its parent's)."""
    cfg = tmp_path / "extra.yaml"
    cfg.write_text("moe_config:\n  backend: FOO\n")
    with pytest.raises(InputError) as err:
        from_command(f"trtllm-serve M --tp_size 8 --extra_llm_api_options {cfg}", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    msg = str(err.value)
    takes = msg.split("it takes ", 1)[1].split(" [", 1)[0]
    assert "CUTLASS" in takes and "(no longer: WIDEEP)" in takes and "WIDEEP," not in takes, msg
    assert "extra.yaml:2: moe_config.backend" in msg, msg

# ------------------------------------------------------------------------------------ wrappers, env, models
def test_docker_run_and_cuda_visible_devices(hf_cache):
    # Project-written line (not a field case), modelled on the README's docker line (test_sglang_readme_docker_line).
    line = ("docker run --gpus all --shm-size 32g -p 30000:30000 -e SGLANG_ENABLE_JIT_DEEPGEMM=0 --ipc=host lmsysorg/sglang:latest "
            "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8")
    launch = from_command("CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 " + line, hf_cache)
    # the shell's CUDA_VISIBLE_DEVICES does not reach the container (docker run passes only -e variables)
    assert launch.env["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0" and "CUDA_VISIBLE_DEVICES" not in launch.env
    assert "only with -e/--env" in kinds(launch, "note")["CUDA_VISIBLE_DEVICES"]
    launch = from_command(line.replace("-e SGLANG", "-e CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 -e SGLANG"), hf_cache)
    assert launch.env["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0" and "8 GPU(s) visible" in kinds(launch, "note")["CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"]


def test_docker_run_reads_only_the_variables_it_passes(hf_cache):
    """A variable exported in the shell that runs docker reaches the container only through -e/--env (-e NAME passes
    the shell's value): a new user's trial saw an exported SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=512 read as
    the container's capacity, so the DeepEP capacity check passed a launch that fails at CUDA-graph capture."""
    text = ("export SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=512\nexport OTHER=1\n"
            "docker run --gpus all {e}lmsysorg/sglang:latest python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 "
            "--tp 8 --moe-a2a-backend deepep")
    launch = from_command(text.format(e=""), hf_cache)
    assert "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK" not in launch.env and "a2a_capacity" not in launch.deployment
    assert "not read" in kinds(launch, "note")["OTHER, SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"]
    launch = from_command(text.format(e="-e SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK "), hf_cache)
    assert launch.env["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "512" and "OTHER" not in launch.env
    assert launch.deployment["a2a_capacity"] == 512
    launch = from_command(text.format(e="--env-file vars.env "), hf_cache)
    assert "not read" in kinds(launch, "note")["--env-file vars.env"]
    with pytest.raises(InputError, match="default command"):
        from_command("docker run --gpus all lmsysorg/sglang:latest")


def test_vllm_line_without_dp_states_dp_1():
    """A vLLM line is the whole server: no --data-parallel-size is vLLM's default 1, stated (a new user's trial saw
    'assumed: dp not given' on such lines)."""
    launch = from_command("vllm serve M --tensor-parallel-size 4 --enable-expert-parallel",
                          model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert launch.deployment["dp"] == 1 and launch.deployment["ep"] == 4
    launch = from_command("vllm serve M -tp 2 -dp 4 --enable-expert-parallel", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert launch.deployment["dp"] == 4 and launch.deployment["tp"] == 8


def test_vllm_image_entrypoint_takes_the_arguments():
    """vLLM's images run the server as their entrypoint (docker/Dockerfile, stage vllm-openai), so the words after the
    image are its arguments (a new user's trial: this standard form was 'unknown engine launcher'). Another image with
    no command stays an error."""
    launch = from_command("docker run --gpus all -e VLLM_USE_DEEP_GEMM=0 vllm/vllm-openai:v0.29.0 --model M "
                          "--tensor-parallel-size 4 --enable-expert-parallel",
                          model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert launch.engine == "vllm" and launch.deployment["tp"] == 4 and launch.env["VLLM_USE_DEEP_GEMM"] == "0"
    assert any("entrypoint is vLLM's server" in text for text in kinds(launch, "note").values())
    launch = from_command("docker run --gpus all docker.io/vllm/vllm-openai-rocm@sha256:abc --model M -tp 2",
                          model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert launch.engine == "vllm" and launch.deployment["tp"] == 2
    launch = from_command("docker run --gpus all localhost:5000/vllm/vllm-openai:v0.29.0 --model M -tp 2",
                          model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))     # a registry's port is no tag
    assert launch.engine == "vllm" and launch.deployment["tp"] == 2
    with pytest.raises(InputError, match="unknown engine launcher"):
        from_command("docker run --gpus all lmsysorg/sglang:latest --model-path M --tp 8")


def test_torchrun_stripped_or_refused():
    launch = from_command("torchrun --nproc-per-node 8 -m sglang.launch_server --model-path M --tp 8",
                          model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert launch.engine == "sglang" and launch.deployment["tp"] == 8
    with pytest.raises(InputError, match="torchrun"):
        from_command("torchrun --nproc-per-node 8 train.py")


def test_env_precedence(tmp_path):
    env_file = tmp_path / "engine.env"
    env_file.write_text("export VLLM_ALL2ALL_BACKEND=deepep_low_latency\nVLLM_USE_DEEP_GEMM=0\n")
    from moe_select.launch_line import merge_env, read_env_file

    env, src = merge_env({"VLLM_USE_DEEP_GEMM": "1"}, read_env_file(str(env_file)), {"VLLM_USE_DEEP_GEMM": "2", "HOME": "/h"})
    assert env["VLLM_USE_DEEP_GEMM"] == "1" and src["VLLM_USE_DEEP_GEMM"] == "launch line"
    assert src["VLLM_ALL2ALL_BACKEND"] == "--env file" and src["HOME"] == "shell"


def test_hub_model_not_cached_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match=r"not in the Hugging Face cache .*give --model-config PATH"):
        from_command("vllm serve nobody/NoSuchModel -tp 2", {"HF_HUB_CACHE": str(tmp_path)})


# ------------------------------------------------------------------------------------ malformed lines (exit 2)
@pytest.mark.parametrize("line, token", [
    ("vllm serve M --moe-backend 'triton", "unbalanced ' quote"),
    ("llamacpp-server -m model.gguf", "unknown engine launcher 'llamacpp-server"),
    ("vllm serve M -tp", "-tp without its value"),
    ("python -m sglang.launch_server --model-path M --tp-size", "--tp-size without its value"),
    ("vllm serve M -tp eight", "-tp takes an integer"),
    ("vllm serve M --enforce-eager=1", "--enforce-eager is a switch"),
])
def test_malformed_lines_exit_2_naming_the_token(line, token, capsys):
    rc = main(["explain", "--gpu", "H200", "--model-config", str(CONFIGS / "Qwen__Qwen3-30B-A3B"), "--from-command", line])
    err = capsys.readouterr().err
    assert rc == 2 and token in err and "Traceback" not in err


def test_config_yaml_not_a_mapping_exit_2(tmp_path, capsys):
    cfg = tmp_path / "extra.yaml"
    cfg.write_text("- moe_config\n- backend: DEEPGEMM\n")
    rc = main(["explain", "--gpu", "B200", "--model-config", str(CONFIGS / "Qwen__Qwen3-30B-A3B"), "--from-command",
               f"trtllm-serve M --extra_llm_api_options {cfg}"])
    err = capsys.readouterr().err
    assert rc == 2 and "--extra_llm_api_options" in err and "not a mapping" in err


# ------------------------------------------------------------------------------------ CLI
def test_cli_argv_after_dashes_and_file_and_json(tmp_path, capsys):
    m = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
    rc = main(["explain", "--gpu", "H200", "--from-command", "--", "vllm", "serve", m, "-tp", "4", "--moe-backend", "triton"])
    out = capsys.readouterr().out
    assert rc == 0 and "Launch line: vllm (vllm serve)" in out and "launch line: --moe-backend triton" in out
    f = tmp_path / "launch.sh"
    f.write_text(f"# a comment\nexport VLLM_USE_DEEP_GEMM=0\nvllm serve {m} \\\n  -tp 4\n")
    rc = main(["explain", "--gpu", "H200", "--json", "--ep", "4", "--from-command", f"@{f}"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["launch"]["engine"] == "vllm"
    assert data["deployment"]["provenance"]["ep"] == "command line (--ep)"
    assert data["deployment"]["provenance"]["tp"] == "launch line: -tp 4"


# ------------------------------------------------------------------------------------ tables
def test_tables_validate_and_cite():
    for engine in ("sglang", "vllm", "trtllm"):
        t = table(engine)
        for e in [*t.flags, *t.config_keys, *t.env]:
            assert t.cite(e) and e.checked
    assert {r.ours for r in names().runners} >= {"triton", "deep_gemm", "flashinfer_trtllm", "flashinfer_cutlass"}


def test_table_error_names_file_and_line(tmp_path, monkeypatch):
    from moe_select import engine_tables

    bad = tmp_path / "vllm.yaml"
    bad.write_text((ROOT / "backends/engines/vllm.yaml").read_text().replace("means: tp,", "means: tensor,", 1))
    monkeypatch.setattr(engine_tables, "engines_dir", lambda: tmp_path)
    engine_tables.table.cache_clear()
    try:
        with pytest.raises(InputError, match=r"backends/engines/vllm.yaml:\d+"):
            engine_tables.table("vllm")
    finally:
        engine_tables.table.cache_clear()


# ------------------------------------------------------------------------------------ emit
def _plan(engine: str, **dep):
    from moe_select import explain

    report = explain({"gpu": dep.pop("gpu", "H200"), "model_config": str(CONFIGS / dep.pop("model", "Qwen__Qwen3-30B-A3B-FP8")),
                      "engine": engine, **dep})
    assert report.plan is not None, report.summary()
    return report.plan


@pytest.mark.parametrize("engine, dep, golden", [
    ("sglang", {"tp": 8, "ep": 8, "a2a": "deepep", "a2a_mode": "low_latency", "dp": 8, "phase": "decode", "max_tokens_per_rank": 128},
     "sglang.sh"),
    ("vllm", {"tp": 8, "ep": 8, "dp": 2, "a2a": "deepep", "a2a_mode": "normal", "max_tokens_per_rank": 8192}, "vllm.sh"),
    ("trtllm", {"gpu": "B200", "model": "deepseek-ai__DeepSeek-V3", "tp": 8, "ep": 8, "dp": 8}, "trtllm.sh"),
])
def test_emit_golden_and_read_back(engine, dep, golden, tmp_path, monkeypatch):
    plan = _plan(engine, **dict(dep))
    out = emit(plan, engine)
    text = out.script().replace(str(ROOT), "<repo>")
    gold = GOLDEN / golden
    if not gold.exists():  # pragma: no cover - written once, then reviewed and committed
        gold.parent.mkdir(exist_ok=True)
        gold.write_text(text)
    assert text == gold.read_text()
    # every emitted flag exists at the tables' newest (and is the canonical spelling)
    t = table(engine)
    skip = {"sglang": 3, "vllm": 3, "trtllm": 2}[engine]  # the launcher (python3 -m ...) and the model
    flags = [w.split("=")[0] for w in out.argv[skip:] if w.startswith("-")]
    for f in flags:
        assert any(f in e.names and e.removed is None for e in t.flags), f
    # read back: the same plan
    monkeypatch.chdir(tmp_path)
    if out.yaml is not None:
        import yaml

        (tmp_path / "moe-select-llm-api.yaml").write_text(yaml.safe_dump(out.yaml))
    back = from_command(out.argv, engine_version=None, base_dir=tmp_path)
    report = back.explain(deployment={"gpu": plan.gpu})
    assert report.plan is not None
    for attr in ("runner", "a2a", "a2a_mode", "cuda_graph"):
        assert getattr(report.plan, attr) == getattr(plan, attr), attr
    for attr in ("tp", "ep", "dp", "phase", "max_tokens_per_rank"):
        assert getattr(report.plan.deployment, attr) == getattr(plan.deployment, attr), attr


def test_emit_refuses_what_the_engine_cannot_express():
    plan = _plan("sglang", tp=8, ep=4)
    with pytest.raises(EmitError, match="holds for sglang, not vllm|not vllm"):
        emit(plan, "vllm")
    plan = _plan("vllm", tp=8, ep=8, dp=2, a2a="deepep", a2a_mode="low_latency")
    with pytest.raises(EmitError, match="vllm 0.11.0 does not have it"):
        emit(plan, "vllm", engine_version="0.11.0")  # --all2all-backend came in 0.11.1
    # --moe-backend first shipped in 0.17.0 (absent from the 0.16.0 sdist): a new user's trial saw it written for 0.12.0
    plan = _plan("vllm", tp=2, runner="deep_gemm")
    for old in ("0.12.0", "0.16.0"):
        with pytest.raises(EmitError, match=rf"--moe-backend was added in .*v0\.17\.0\): vllm {old} does not have it"):
            emit(plan, "vllm", engine_version=old)
    assert "--moe-backend deep_gemm" in " ".join(emit(plan, "vllm", engine_version="0.17.0").argv)


def test_emit_keeps_the_users_other_flags(hf_cache, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", hf_cache["HF_HUB_CACHE"])
    rc = main(["plan", "--gpu", "H200", "--emit", "sglang", "--shell-env", "--from-command",
               "python3 -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B-FP8 --tp 2 --trust-remote-code --port 30001 --foo 1"],)
    out = capsys.readouterr().out
    assert rc == 0 and "--port 30001" in out and "--trust-remote-code" in out and "--foo 1" in out and "--moe-runner-backend" in out


# ------------------------------------------------------------------------------------ more real lines
def test_vllm_issue_27389_api_server_positional_model():
    # vllm-project/vllm#27389 (description): `docker run ... ee2917e260bb serve /root/models/Qwen3-8B
    # --tensor-parallel-size 2 ...` on the vllm-openai image, whose entrypoint runs the api_server module, so the
    # container ran the line below; vLLM answered "api_server.py: error: unrecognized arguments: /root/models/Qwen3-8B"
    # (only the path). The earlier version of this test read `api_server /root/models/Qwen3-8B`, a line vLLM accepts.
    line = ("python3 -m vllm.entrypoints.openai.api_server serve /root/models/Qwen3-8B --tensor-parallel-size 2 "
            "--max-model-len 16000 --gpu-memory-utilization 0.9 --served-model-name Qwen3-8B --api-key jiangxin")
    launch = from_command(line, {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
                          model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    errors = kinds(launch, "engine_error")
    assert "unrecognized arguments: /root/models/Qwen3-8B" in errors["/root/models/Qwen3-8B"]
    assert launch.deployment["tp"] == 2
    assert "serve" not in errors  # vLLM took it as model_tag


def test_vllm_issue_8273_one_word_per_flag_and_value():
    # vllm-project/vllm#8273 (update 1): subprocess.run(["vllm", "serve", f"{model_path}", "--host 127.0.0.1", "--port 6379"])
    # failed: "the commands host and port are suddenly unknown" ("--host 127.0.0.1" is one word, no flag vLLM has);
    # update 2: with "--host=127.0.0.1", "--port=6379" it worked. model_path is the reporter's variable: "/m" here.
    # Current vLLM's FlexibleArgumentParser (argparse_utils) reads a "-..." word holding a "." as a dotted argument that
    # takes the next word as its value, so "--port 6379" goes with "--host 127.0.0.1"; moe-select reads it the same way.
    bad = from_command(["vllm", "serve", "/m", "--host 127.0.0.1", "--port 6379"], model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert "--host 127.0.0.1" in kinds(bad, "unknown")
    good = from_command(["vllm", "serve", "/m", "--host=127.0.0.1", "--port=6379"], model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert not good.found("unknown") and {"--host", "--port"} <= set(kinds(good, "not_moe"))


def test_sglang_enable_reasoning_unknown_flag_reported_not_fatal():
    # The line: sgl-project/sglang#3859's example (verbatim; a PR closed unmerged, so --enable-reasoning never shipped;
    # #4000 added only --reasoning-parser). The outcome: sgl-project/sglang#4116, "launch_server.py: error: unrecognized
    # arguments: --enable-reasoning" ("Sglang does not have the --enable-reasoning parameter"). #4116's own command is
    # not retrievable. moe-select reports a flag its table lacks as unknown, never fatal (tables lag releases).
    text = ("python -m sglang.launch_server --host 0.0.0.0 \\\n--model-path deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B \\\n"
            "--tp 1 --enable-reasoning --reasoning-parser deepseek-r1 \n")
    launch = from_command(text, model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))  # dense Qwen2: an MoE config stands in
    assert "--enable-reasoning" in kinds(launch, "unknown") and launch.deployment["tp"] == 1
    assert not launch.found("engine_error")


def test_sglang_dp_attention_gpustack_h200():
    # gpustack/gpustack@1f37f1b8bd79:docs/performance-lab/deepseek-v3.2/h200.md ("Parallelism: TP+DP+DP Attention",
    # verbatim): ran on 8 x H200 with SGLang v0.5.6.post2, 1000/1000 requests. DeepSeek-V3.2's MoE is DeepSeek-V3's.
    text = ("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --host 0.0.0.0 --port 8000 \\\n"
            "    --chat-template ./tool_chat_template_deepseekv32.jinja \\\n    --tp-size 8 --dp-size 8 --enable-dp-attention\n")
    launch = from_command(text, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-V3"))
    assert (launch.deployment["tp"], launch.deployment["dp"]) == (8, 8) and "ep" not in launch.deployment
    assert not launch.found("unknown") and not launch.found("engine_error")
    assert launch.explain(deployment={"gpu": "H200"}).plan is not None


def test_sglang_issue_11088_deepep_sets_ep_to_tp():
    # sgl-project/sglang#11088 (description, verbatim): SGLang logged "DeepEP MoE is enabled. The expert parallel size is
    # adjusted to be the same as the tensor parallel size[4]", then Qwen3-VL failed to initialise with DeepEP (a model
    # gap moe-select does not judge). Qwen3-VL-235B-A22B's text MoE has Qwen3-235B-A22B's shape.
    text = ("python -m sglang.launch_server \\\n  --model-path /models/Qwen/Qwen3-VL-235B-A22B-Instruct \\\n  --dp-size 1 \\\n"
            "  --tp-size 4 \\\n  --port 30000 \\\n  --trust-remote-code \\\n  --moe-a2a-backend deepep\n")
    launch = from_command(text, model_config=str(CONFIGS / "Qwen__Qwen3-235B-A22B"))
    d = launch.deployment
    assert (d["tp"], d["ep"], d["a2a"]) == (4, 4, "deepep")
    assert "SGLang sets ep = tp" in launch.provenance["ep"]


def test_sglang_readme_docker_line(hf_cache):
    # sgl-project/sglang@0006053c1f74:benchmark/deepseek_v3/README.md ("Using Docker (Recommended)", verbatim): docker's
    # options are skipped, the container's command is read.
    text = ("docker run --gpus all --shm-size 32g -p 30000:30000 -v ~/.cache/huggingface:/root/.cache/huggingface --ipc=host "
            "--network=host --privileged lmsysorg/sglang:latest \\\n"
            "    python3 -m sglang.launch_server --model deepseek-ai/DeepSeek-V3 --tp 8 --trust-remote-code --port 30000\n")
    launch = from_command(text, hf_cache)
    assert launch.engine == "sglang" and launch.deployment["tp"] == 8
    assert "docker run ... lmsysorg/sglang:latest" in kinds(launch, "note")
    assert launch.explain(deployment={"gpu": "H200"}).plan is not None


def test_vllm_pr_25904_env_all2all_low_latency():
    # vllm-project/vllm#25904 (merged; test plan verbatim): with the PR the server "starts up successfully" (before it,
    # an AssertionError at startup). VLLM_ALL2ALL_BACKEND was read then (deprecated by #26732 in 0.11.1, removed by #33535
    # in 0.16.0): at 0.11.0 the a2a is DeepEP low-latency over DP 8 x EP; at the tables' newest it is not read.
    text = ("VLLM_ALL2ALL_BACKEND=deepep_low_latency \\\nVLLM_ATTENTION_BACKEND=FLASH_ATTN_MLA \\\n"
            "vllm serve deepseek-ai/DeepSeek-R1 \\\n    --tensor-parallel-size 1 \\\n    --enable-expert-parallel \\\n"
            "    --data-parallel-size 8 \\\n    --trust-remote-code \\\n    --host 0.0.0.0 \\\n    --port 8000 \\\n"
            "    --speculative-config '{\"method\": \"deepseek_mtp\", \"num_speculative_tokens\": 1}'\n")
    then = from_command(text, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-R1"), engine_version="0.11.0")
    d = then.deployment
    assert (d["tp"], d["dp"], d["ep"], d.get("a2a"), d.get("a2a_mode")) == (8, 8, 8, "deepep", "low_latency")
    # 0.11.0 (released 2025-10-04) predates the deprecation (#26732, merged 2025-10-13; first in 0.11.1): the variable is
    # how that release chooses the all-to-all, so no deprecation is reported there (a fifth new user's trial, 2026-12-04:
    # it advised --all2all-backend, which 0.11.0 lacks)
    assert "VLLM_ALL2ALL_BACKEND=deepep_low_latency" not in kinds(then, "deprecated")
    assert "VLLM_ALL2ALL_BACKEND=deepep_low_latency" in kinds(then, "understood")
    at_11_1 = from_command(text, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-R1"), engine_version="0.11.1")
    assert "VLLM_ALL2ALL_BACKEND=deepep_low_latency" in kinds(at_11_1, "deprecated")
    now = from_command(text, model_config=str(CONFIGS / "deepseek-ai__DeepSeek-R1"))
    assert "VLLM_ALL2ALL_BACKEND=deepep_low_latency" in kinds(now, "removed") and "a2a" not in now.deployment


# ------------------------------------------------------------------ names the engine dispatches on the checkpoint format
def test_vllm_moe_backend_triton_is_triton_kernel_on_an_mxfp4_checkpoint():
    # vllm-project/vllm@001eda31e3d0 oracle/mxfp4.py map_mxfp4_backend: --moe-backend triton on MXFP4 is
    # Mxfp4MoeBackend.TRITON (OAITritonExperts, OpenAI's triton_kernels); on other formats vLLM's Triton fused MoE.
    oss = from_command("vllm serve openai/gpt-oss-20b --moe-backend triton", model_config=str(CONFIGS / "openai__gpt-oss-20b"))
    assert oss.deployment["runner"] == "triton_kernel"
    assert "triton as triton_kernel on a mxfp4 checkpoint" in kinds(oss, "note")["--moe-backend triton"]
    report = oss.explain(deployment={"gpu": "H100"})
    assert report.plan is not None and report.plan.runner == "triton_kernel", report.summary()
    qwen = from_command("vllm serve Qwen/Qwen3-30B-A3B --moe-backend triton", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert qwen.deployment["runner"] == "triton" and "--moe-backend triton" not in kinds(qwen, "note")
    # SGLang spells triton_kernel itself: its triton is our triton on every format.
    sgl = from_command("python3 -m sglang.launch_server --model-path openai/gpt-oss-20b --moe-runner-backend triton",
                       model_config=str(CONFIGS / "openai__gpt-oss-20b"))
    assert sgl.deployment["runner"] == "triton"


def test_emit_writes_vllms_triton_for_triton_kernel_on_mxfp4_only():
    oss = _plan("vllm", gpu="H100", model="openai__gpt-oss-20b", runner="triton_kernel")
    out = emit(oss, "vllm")
    assert out.argv[out.argv.index("--moe-backend") + 1] == "triton"
    assert any("triton runs triton_kernel on mxfp4 checkpoints" in c for c in out.comments)
    back = from_command(out.argv, model_config=str(CONFIGS / "openai__gpt-oss-20b"))
    assert back.deployment["runner"] == "triton_kernel"
    # our Triton kernel on an MXFP4 checkpoint is vLLM's emulation (its triton is triton_kernel there; field round 49,
    # names.yaml by_format): the same plan with the runner swapped is written with it
    assert names().runner_for("vllm", "triton", "mxfp4") == (True, "emulation")
    swapped = emit(oss.model_copy(update={"runner": "triton"}), "vllm")
    assert swapped.argv[swapped.argv.index("--moe-backend") + 1] == "emulation"
    # ... nor triton_kernel on another format (vLLM has no name for it).
    bf16 = _plan("vllm", gpu="H100", model="Qwen__Qwen3-30B-A3B", runner="triton")
    assert emit(bf16, "vllm").argv[emit(bf16, "vllm").argv.index("--moe-backend") + 1] == "triton"
    assert names().runner_for("vllm", "triton_kernel", "bf16") == (True, None)


def test_names_by_format_is_one_runner_per_name_and_format():
    from moe_select.engine_tables import NamesTable
    from moe_select.yamlio import load_text, validate

    head = ("schema_version: 1\nrunners:\n  - {ours: triton, sglang: triton, vllm: triton, trtllm: null, source: \"a/b#1\"}\n"
            "  - {ours: triton_kernel, sglang: triton_kernel, vllm: null, trtllm: null, source: \"a/b#1\"}\na2a: []\nby_format:\n"
            "  - {engine: vllm, name: triton, formats: [mxfp4], ours: triton_kernel, source: \"a/b#1\"}\n")
    t = validate(NamesTable, load_text(head, "n.yaml"), "n.yaml")
    assert t.runner_from("vllm", "triton", "mxfp4") == "triton_kernel" and t.runner_from("vllm", "triton", "bf16") == "triton"
    assert t.runner_from("vllm", "triton") == "triton"  # no format known: the runners table's reading
    for extra, msg in (("  - {engine: vllm, name: triton, formats: [mxfp4, nvfp4], ours: triton, source: \"a/b#1\"}\n",
                        "one runner per name and format"),
                       ("  - {engine: vllm, name: tk, formats: [mxfp4], ours: triton_kernel, source: \"a/b#1\"}\n",
                        "one name per runner and format"),
                       ("  - {engine: vllm, name: tk, formats: [mxfp5], ours: triton_kernel, source: \"a/b#1\"}\n",
                        "mxfp5 is no format"),
                       ("  - {engine: vllm, name: tk, formats: [mxfp4], ours: nobody, source: \"a/b#1\"}\n",
                        "no runner of this table")):
        with pytest.raises(InputError, match=msg) as e:
            validate(NamesTable, load_text(head + extra, "n.yaml"), "n.yaml")
        assert "n.yaml:" in str(e.value)


def test_vllm_all2all_backend_deepep_v2_read_and_emitted():
    # vllm-project/vllm@00193b82b0e2 config/parallel.py All2AllBackend names deepep_v2 (vllm-project/vllm#41183).
    line = "vllm serve Qwen/Qwen3-30B-A3B -tp 8 --enable-expert-parallel --all2all-backend deepep_v2"
    launch = from_command(line, model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert launch.deployment["a2a"] == "deepep_v2" and "a2a_mode" not in launch.deployment
    assert "deepep_v2" not in kinds(launch, "note").get("--all2all-backend deepep_v2", "")
    plan = _plan("vllm", model="Qwen__Qwen3-30B-A3B", tp=8, ep=8, a2a="deepep_v2")
    out = emit(plan, "vllm")
    assert out.argv[out.argv.index("--all2all-backend") + 1] == "deepep_v2"


@pytest.mark.parametrize(("theirs", "ours"), [("naive", "none"), ("allgather_reducescatter", "none"),
                                              ("flashinfer_all2allv", "flashinfer_two_sided"),
                                              ("flashinfer_nvlink_two_sided", "flashinfer_two_sided")])
def test_vllm_older_all2all_names_are_read_as_ours(hf_cache, theirs, ours):
    """vLLM's naive (broadcast + all-reduce) is our none, and flashinfer_all2allv (the two-sided alltoallv's name up to
    0.17.0, an alias from 0.18.0) our flashinfer_two_sided: read, with no "no row in names.yaml" note (both were read
    as a2a names of their own, judged)."""
    line = f"vllm serve openai/gpt-oss-20b --data-parallel-size 2 --enable-expert-parallel --all2all-backend {theirs}"
    launch = from_command(line, hf_cache)
    assert launch.deployment["a2a"] == ours
    assert not any("no row in backends/engines/names.yaml" in str(f) for f in launch.findings)


def test_runner_and_a2a_values_the_engine_refuses_are_refused(tmp_path):
    """A new user's trial (2026-12-03): misspelt backends were planned as unknown runners, exit 0. SGLang's
    --moe-runner-backend and --moe-a2a-backend are argparse choices and TensorRT-LLM's moe_config.backend a Literal
    (backends/engines/names.yaml choices): a value none of them takes is refused, naming the option, the values and a
    close match. vLLM lower-cases --moe-backend and reads - as _ (KernelConfig._normalize_moe_backend), so its spellings
    are read so; its MoEBackend Literal refuses the rest (any stored release's values are taken)."""
    q = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
    for line, flag, close in (("--moe-runner-backend tritonx", "--moe-runner-backend tritonx", "did you mean triton"),
                              ("--moe-runner-backend Triton", "--moe-runner-backend Triton", "did you mean triton"),
                              ("--moe-a2a-backend deep_ep --tp 8", "--moe-a2a-backend deep_ep", "did you mean deepep")):
        with pytest.raises(InputError, match=rf"{flag}: .* is not (a runner|an all-to-all) value sglang takes: it refuses it "
                                             rf"at startup \({close}") as info:
            from_command(f"python -m sglang.launch_server --model-path M {line}", model_config=q)
        msg = str(info.value)
        assert "MOE_" in msg and ("--runner" in msg if "runner value" in msg else "--a2a" in msg), msg
    cfg = tmp_path / "x.yaml"
    cfg.write_text("moe_config:\n  backend: FOO\n")
    with pytest.raises(InputError, match=r"moe_config.backend: 'FOO' is not a runner value trtllm takes"):
        from_command(f"trtllm-serve M --tp_size 2 --extra_llm_api_options {cfg}", model_config=q)
    cfg.write_text("moe_config:\n  backend: CUTLASS\n")
    assert from_command(f"trtllm-serve M --tp_size 2 --extra_llm_api_options {cfg}", model_config=q).deployment["runner"] == "trtllm_cutlass"
    for bad, close in (("vllm serve M -tp 8 -ep --all2all-backend=DeepEP_low_latency", "deepep_low_latency"),
                       ("vllm serve M -tp 8 -ep --all2all-backend deepep_lowlatency", "deepep_low_latency")):
        with pytest.raises(InputError, match=rf"is not an all-to-all value vllm takes: .*did you mean {close}.* with --a2a"):
            from_command(bad, model_config=q)
    launch = from_command("vllm serve M -tp 8 -ep --all2all-backend mori", model_config=q, engine_version="0.20.0")
    assert launch.deployment["a2a"] == "mori" and launch.deployment["a2a_mode"] == "normal"   # 0.15.0 .. 0.22.1's name
    for written, ours in (("flashinfer-cutlass", "flashinfer_cutlass"), ("Triton", "triton"), ("DEEP_GEMM", "deep_gemm")):
        launch = from_command(f"vllm serve M -tp 2 --moe-backend {written}", model_config=q)
        assert launch.deployment["runner"] == ours and not kinds(launch, "note").get(f"--moe-backend {written}"), written
    with pytest.raises(InputError, match=r"'flashinfer_cutlass_afp8' is not a runner value vllm takes: .*did you mean "
                                         r"flashinfer_cutlass"):   # a key of map_mxfp4_backend, not a --moe-backend value
        from_command("vllm serve M -tp 2 --moe-backend flashinfer_cutlass_afp8", model_config=q)
    launch = from_command("vllm serve M -tp 2 --moe-backend flydsl", model_config=q)   # taken by vLLM, no row here
    assert launch.deployment["runner"] == "flydsl" and "no row" in kinds(launch, "note")["--moe-backend flydsl"]
    # SGLang's alias from 0.5.18: the Mega MoE all-to-all with the runner at auto (break54; tests/test_break54_kinds.py)
    mega = from_command("python -m sglang.launch_server --model-path M --moe-runner-backend megamoe", model_config=q).deployment
    assert mega["a2a"] == "megamoe" and "runner" not in mega


def test_every_variable_the_engine_prediction_reads_is_in_the_engines_table():
    """backends/engines/resolution.yaml's oracles remove entries on environment variables; each of them is in that engine's
    table (backends/engines/<engine>.yaml env), so a launch line that sets one reports it understood, not unknown (a new
    user's trial saw 'VLLM_USE_DEEP_GEMM ... not read' beside a prediction that applied it)."""
    import yaml

    res = yaml.safe_load((Path(__file__).resolve().parents[1] / "backends" / "engines" / "resolution.yaml").read_text())
    used: set[tuple[str, str]] = set()

    def walk(node, engine):
        if isinstance(node, dict):
            engine = node.get("engine", engine)
            if "variable" in node:
                used.add((engine, node["variable"]))
            for v in node.values():
                walk(v, engine)
        elif isinstance(node, list):
            for v in node:
                walk(v, engine)

    walk(res, None)
    assert used, "resolution.yaml names no variable"
    for engine, var in sorted(used):
        assert var in {e.name for e in table(engine).env}, f"{engine} {var}: used by resolution.yaml, not in {engine}.yaml's env"
    launch = from_command("VLLM_USE_DEEP_GEMM=0 vllm serve M -tp 2", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8"))
    assert not [f for f in launch.findings if f.kind == "unknown" and "VLLM_USE_DEEP_GEMM" in f.token], launch.findings
    understood = launch.render_text().split("understood:", 1)[1]
    assert "VLLM_USE_DEEP_GEMM=0" in understood, understood


def test_sglang_dp_attention_with_a_dp_that_does_not_divide_tp_is_refused():
    """SGLang asserts tp_size % dp_size == 0 under --enable-dp-attention (a new user's trial planned --tp 8 --dp 3)."""
    q = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
    with pytest.raises(InputError, match=r"--tp 8 --dp 3 with --enable-dp-attention: SGLang asserts tp_size % dp_size == 0"):
        from_command("python -m sglang.launch_server --model-path M --tp 8 --dp 3 --enable-dp-attention", model_config=q)
    assert from_command("python -m sglang.launch_server --model-path M --tp 8 --dp 4 --enable-dp-attention",
                        model_config=q).deployment["dp"] == 4
    launch = from_command("python -m sglang.launch_server --model-path M --tp 8 --dp 3", model_config=q)   # replicas
    assert launch.deployment["dp"] == 1       # each replica is one tp group without attention data parallelism


def test_vllm_eplb_config_is_read():
    """--eplb-config is vLLM's (EPLBConfig's JSON): read as understood, not an unknown flag (a new user's trial)."""
    launch = from_command("vllm serve M -tp 4 --enable-expert-parallel --enable-eplb "
                          "--eplb-config '{\"num_redundant_experts\": 32}'", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    assert not launch.found("unknown"), launch.found("unknown")


def test_an_engine_image_sets_its_environment_unless_the_line_overrides_it():
    """SGLang's ROCm images set SGLANG_USE_AITER=1 (backends/engines/sglang.yaml images): a docker run line of one
    starts the engine with it unless -e gives another value (a second trial: such a launch of triton on block FP8 was
    planned as unverified, the Hyperloom#1459 wrong-output case)."""
    q = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
    line = ("docker run --gpus all {e}lmsysorg/sglang:v0.5.16-rocm630-mi30x python3 -m sglang.launch_server --model-path M "
            "--tp 2 --moe-runner-backend triton")
    launch = from_command(line.format(e=""), model_config=q, engine_version="0.5.16")
    assert launch.env["SGLANG_USE_AITER"] == "1" and launch.deployment["vendor_library"] is True
    assert "set by the image" in launch.provenance["vendor_library"]
    assert launch.explain(deployment={"gpu": "MI300X"}).plan is None
    launch = from_command(line.format(e="-e SGLANG_USE_AITER=0 "), model_config=q, engine_version="0.5.16")
    assert launch.deployment["vendor_library"] is False and "-e SGLANG_USE_AITER=0 wins" in kinds(launch, "note")["SGLANG_USE_AITER=1"]
    assert launch.explain(deployment={"gpu": "MI300X"}).plan is not None
    cuda = from_command(line.format(e="").replace("-rocm630-mi30x", ""), model_config=q, engine_version="0.5.16")
    assert "SGLANG_USE_AITER" not in cuda.env and "vendor_library" not in cuda.deployment


def test_a_runner_value_older_than_its_first_release_is_refused_and_not_written():
    """names.yaml choices since (read in SGLang's PyPI wheels): aiter first shipped in 0.5.11, marlin in 0.5.12. A launch
    line at an older declared version that names one is an engine error (the engine refuses it at startup; explain exits
    1), and --emit does not write one for it (a second trial saw --emit sglang write --moe-runner-backend aiter for
    0.5.5)."""
    q = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
    old = from_command("python -m sglang.launch_server --model-path M --moe-runner-backend aiter", model_config=q,
                       engine_version="0.5.10")
    assert any(re.search(r"'aiter' first shipped in sglang 0\.5\.11: sglang 0\.5\.10 \(the declared version\) "
                         r"refuses it at startup", f.message) for f in old.found("engine_error")), old.findings
    assert from_command("python -m sglang.launch_server --model-path M --moe-runner-backend aiter", model_config=q,
                        engine_version="0.5.11").deployment["runner"] == "aiter"
    assert from_command("python -m sglang.launch_server --model-path M --moe-runner-backend marlin", model_config=q,
                        ).deployment["runner"] == "marlin"                 # no version declared: the newest
    # a GPTQ layer (SGLang's AWQ MoE scheme asserts the option is auto: no option written there, test_trial_2026_12_05b)
    from moe_select import explain
    plan = explain({"gpu": "H100", "engine": "sglang", "quant": "int4_w4a16", "runner": "marlin",
                    "quant_config": {"group_size": 128, "layout": "gptq"},
                    "model": {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768,
                              "activation": "silu", "routing": "renormalize"}}).plan
    assert plan is not None and plan.runner_option_auto == {}
    with pytest.raises(EmitError, match=r"marlin first shipped in sglang 0\.5\.12: sglang 0\.5\.11 does not take it"):
        emit(plan, "sglang", engine_version="0.5.11", model="M")
    assert "--moe-runner-backend marlin" in " ".join(emit(plan, "sglang", engine_version="0.5.12", model="M").argv)
    # aiter has an earlier way (names.yaml choices earlier): before 0.5.11 SGLang runs AITER as auto under
    # SGLANG_USE_AITER, so the plan is written so there, with the switch (the deployment does not state it)
    plan = _plan("sglang", gpu="MI300X", tp=1, runner="aiter")
    old = emit(plan, "sglang", engine_version="0.5.5")
    assert "--moe-runner-backend auto" in " ".join(old.argv) and old.env == {"SGLANG_USE_AITER": "1"}
    assert any("sglang 0.5.5 reaches it as auto" in c for c in old.comments)
    new = emit(plan, "sglang", engine_version="0.5.16")
    assert "--moe-runner-backend aiter" in " ".join(new.argv) and new.env == {"SGLANG_USE_AITER": "1"}


@pytest.mark.parametrize("value, engine_error", [("off", True), ("true", True), ("null", False),
                                                 ("\n  max_batch_size: 64", False)])
def test_trtllm_cuda_graph_config_takes_a_mapping_or_null(tmp_path, value, engine_error):
    # YAML 1.1 (as TensorRT-LLM reads the file) makes `off` false; LlmArgs.cuda_graph_config is Optional[CudaGraphConfig]
    cfg = tmp_path / "extra.yml"
    cfg.write_text(f"cuda_graph_config: {value}\n")
    launch = from_command(f"trtllm-serve Qwen/Qwen3-30B-A3B --tp_size 1 --extra_llm_api_options {cfg}",
                          model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B"))
    errs = kinds(launch, "engine_error")
    assert bool(errs) is engine_error, errs
    if engine_error:
        assert "CudaGraphConfig" in next(iter(errs.values()))
        assert "cuda_graph" not in launch.deployment
    else:
        assert launch.deployment["cuda_graph"] is (value != "null")


@pytest.mark.parametrize("value, version, refused", [
    ("MARLIN", "1.3.0rc15", True), ("MARLIN", "1.3.0rc22", False), ("TRITON", "1.0.0", True), ("TRITON", "1.1.0", False),
    ("MEGAMOE_CUTEDSL", "1.3.0rc23", True), ("MEGAMOE_CUTEDSL", "1.3.0rc24", False), ("AUTO", "1.2.0", True)])
def test_trtllm_backend_values_by_release(value, version, refused, tmp_path):
    """TensorRT-LLM's moe_config.backend takes a name from the release its MoeConfig Literal first has it (names.yaml's
    since, read in the release docs): a declared older release refuses it at startup."""
    cfg = tmp_path / "extra.yaml"
    cfg.write_text(f"moe_config:\n  backend: {value}\n")
    line = f"trtllm-serve M --tp_size 8 --extra_llm_api_options {cfg}"
    launch = from_command(line, model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8"), engine_version=version)
    said = [f for f in launch.found("engine_error") if f"'{value}' first shipped in trtllm" in f.message]
    assert bool(said) == refused, launch.findings


@pytest.mark.parametrize("version, retired", [("1.2.0", False), ("1.3.0rc27", True), (None, True)])
def test_trtllm_wideep_is_retired_from_the_release_that_drops_it(version, retired, tmp_path):
    cfg = tmp_path / "extra.yaml"
    cfg.write_text("moe_config:\n  backend: WIDEEP\n")
    launch = from_command(f"trtllm-serve M --tp_size 8 --ep_size 8 --extra_llm_api_options {cfg}",
                          model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8"), engine_version=version)
    errs = [f for f in launch.findings if f.kind == "engine_error" and "WIDEEP" in f.message]
    assert bool(errs) == retired, [(f.kind, f.message) for f in launch.findings]


def test_a_line_read_from_a_file_resolves_relative_paths_against_the_working_directory(tmp_path, monkeypatch, capsys):
    """``@FILE``: the model path and config files of the line are the working directory's, as the shell that runs the file
    reads them, not the file's folder (a new user's eleventh trial: a script kept in a scripts/ folder naming
    ``models/...`` was read against scripts/)."""
    import shutil

    shutil.copytree(CONFIGS / "Qwen__Qwen3-30B-A3B", tmp_path / "models" / "q")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "models").mkdir()   # a decoy: the file's folder has no such model
    f = tmp_path / "scripts" / "launch.sh"
    f.write_text("vllm serve models/q -tp 2\n")
    monkeypatch.chdir(tmp_path)
    rc = main(["explain", "--gpu", "H200", "--json", "--from-command", f"@{f}"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["deployment"]["model_config_path"].startswith(str(tmp_path / "models" / "q"))
    monkeypatch.chdir(tmp_path / "scripts")
    assert main(["explain", "--gpu", "H200", "--from-command", f"@{f}"]) == 2   # scripts/models/q: no such folder


def test_plan_emit_writes_for_the_version_the_deployment_file_declares(tmp_path, capsys):
    """``plan -d FILE --emit vllm`` writes the line for the file's ``engine_version`` (a review: it wrote the newest
    releases' spelling, mori_high_throughput, for a file declaring vLLM 0.22.0, whose option takes mori); the command
    line's --engine-version still wins."""
    dep = tmp_path / "d.yaml"
    dep.write_text(f"gpu: MI300X\nengine: vllm\nengine_version: '0.22.0'\nmodel_config: {CONFIGS / 'deepseek-ai__DeepSeek-V3'}\n"
                   "tp: 1\ndp: 8\nep: 8\na2a: mori\na2a_mode: normal\nvendor_library: true\n")
    assert main(["plan", "-d", str(dep), "--emit", "vllm"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("--all2all-backend mori")
    assert main(["plan", "-d", str(dep), "--emit", "vllm", "--engine-version", "0.23.0"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("--all2all-backend mori_high_throughput")


def test_vllms_speculative_shorthands_build_the_draft_as_the_config_does():
    """vLLM's -sc and --spec-method / --spec-model / --spec-tokens (EngineArgs.create_speculative_config folds them into
    the speculative config; the 0.29.0 and 0.34.0 wheels) state a draft as --speculative-config does: the checkpoint's MTP
    layers are planned, and the decode batch carries 1 + N tokens per request (a launch-line trial: -sc read as unknown,
    and the same deployment got opposite verdicts)."""
    m = str(CONFIGS / "nvidia__DeepSeek-V3.1-NVFP4")
    base = f"vllm serve {m} -tp 4 --max-cudagraph-capture-size 64"
    lines = [f"{base} --speculative-config '{{\"method\": \"mtp\", \"num_speculative_tokens\": 2}}'",
             f"{base} -sc '{{\"method\": \"mtp\", \"num_speculative_tokens\": 2}}'",
             f"{base} --spec-method mtp --spec-tokens 2"]
    got = [from_command(line).deployment for line in lines]
    assert all(d["speculative"] is True for d in got), got
    assert {d.get("decode_tokens_per_rank") for d in got} == {64 * 3}, [d.get("decode_tokens_per_rank") for d in got]
    assert from_command(base).deployment["speculative"] is False


@pytest.mark.parametrize("flags, off", [("--disable-decode-cuda-graph", True), ("--cuda-graph-backend-decode disabled", True),
                                        ("--cuda-graph-backend-decode full", False),
                                        ("--cuda-graph-config '{\"decode\": {\"backend\": \"disabled\"}}'", True),
                                        ("--cuda-graph-config '{\"prefill\": {\"backend\": \"disabled\"}}'", False)])
def test_sglangs_decode_phase_graph_options_turn_cuda_graphs_off(flags, off):
    """SGLang's per-phase CUDA-graph options (0.5.19 .. 0.5.23: ExecGraph; --disable-cuda-graph is their deprecated
    spelling): the decode phase disabled is a deployment without CUDA graphs; other backends and the prefill phase leave
    them on (a launch-line trial: read as unknown, graphs assumed on)."""
    line = from_command(f"python3 -m sglang.launch_server --model-path {CONFIGS / 'Qwen__Qwen3-30B-A3B'} --tp 2 {flags}")
    assert (line.deployment.get("cuda_graph") is False) == off, line.deployment.get("cuda_graph")


def test_vllm_dual_batch_overlap_needs_a_deepep_or_nixl_all_to_all():
    """--enable-dbo: VllmConfig.__post_init__ asserts the all-to-all is deepep_low_latency, deepep_high_throughput or
    nixl_ep on CUDA (the 0.29.0 .. 0.34.0 wheels; ROCm also takes allgather_reducescatter from 0.33.0): an engine error at
    a declared release before that, a note where only the GPU decides (a launch-line trial: planned and emitted)."""
    m = str(CONFIGS / "deepseek-ai__DeepSeek-V3")
    base = f"vllm serve {m} -tp 1 -dp 8 -ep --enable-dbo"
    old = from_command(base, engine_version="0.32.0")
    assert "--enable-dbo" in kinds(old, "engine_error")
    new = from_command(base, engine_version="0.34.0")
    assert "--enable-dbo" not in kinds(new, "engine_error") and "ROCm" in kinds(new, "note")["--enable-dbo"]
    ok = from_command(base + " --all2all-backend deepep_low_latency", engine_version="0.32.0")
    assert "--enable-dbo" not in kinds(ok, "engine_error") and "--enable-dbo" not in kinds(ok, "note")


def test_sglang_ascend_tp_keeps_the_ep_asked():
    """ascend_tp is no backend of SGLang's _A2A_EP_SPANNING_BACKENDS (0.5.19 .. 0.5.23 overrides.py): ep stays as given,
    where deepep sets ep = tp (a launch-line trial read ep 4)."""
    m = CONFIGS / "Qwen__Qwen3-30B-A3B"
    tp4 = f"python3 -m sglang.launch_server --model-path {m} --tp 4"
    assert from_command(f"{tp4} --moe-a2a-backend ascend_tp").deployment.get("ep", 1) == 1
    assert from_command(f"{tp4} --moe-a2a-backend deepep").deployment["ep"] == 4


def test_expert_parallel_load_balancing_is_a_deployment_input_some_kernels_refuse():
    """--enable-eplb is the deployment's eplb: vLLM's TRT-LLM-gen BF16 / FP8 experts refuse it (_supports_parallel_config,
    the 0.29.0 .. 0.34.0 wheels), so an explicit flashinfer_trtllm is refused and auto (ours and vLLM's predicted choice)
    takes another runner; the emitted line keeps --enable-eplb (a launch-line trial: read, dropped, emitted as a line that
    fails at startup)."""
    m = str(CONFIGS / "deepseek-ai__DeepSeek-V3")
    plain = from_command(f"vllm serve {m} -tp 8 -ep", engine_version="0.34.0")
    eplb = from_command(f"vllm serve {m} -tp 8 -ep --enable-eplb", engine_version="0.34.0")
    assert eplb.deployment["eplb"] is True and "eplb" not in plain.deployment
    before, after = plain.explain(deployment={"gpu": "B200"}), eplb.explain(deployment={"gpu": "B200"})
    assert before.plan is not None and before.plan.runner == "flashinfer_trtllm"
    assert after.plan is not None and after.plan.runner != "flashinfer_trtllm"
    assert {c.engine: c.runner for c in after.engine_choices}["vllm"] != "flashinfer_trtllm"
    asked = from_command(f"vllm serve {m} -tp 8 -ep --enable-eplb --moe-backend flashinfer_trtllm", engine_version="0.34.0")
    refused = asked.explain(deployment={"gpu": "B200"})
    assert refused.plan is None
    assert any(r.code == "parallelism_unsupported" and r.source.startswith("backends/flashinfer_trtllm.yaml")
               for c in refused.candidates if c.backend == "flashinfer_trtllm" for r in c.reasons)
    out = emit(after.plan, "vllm", engine_version="0.34.0")
    assert "--enable-eplb" in out.argv
    # NVFP4 takes it (the modular TRT-LLM-gen NVFP4 experts accept every parallel config)
    nv = from_command(f"vllm serve {CONFIGS / 'nvidia__DeepSeek-V3.1-NVFP4'} -tp 8 -ep --enable-eplb --moe-backend "
                      "flashinfer_trtllm", engine_version="0.34.0")
    assert not [r for c in nv.explain(deployment={"gpu": "B200"}).candidates if c.backend == "flashinfer_trtllm"
                for r in c.reasons if r.code == "parallelism_unsupported"]


def test_vllm_kernel_config_moe_backend_is_the_runner_where_the_option_is_auto():
    """vLLM's --kernel-config JSON: its moe_backend runs where --moe-backend is left at auto (create_engine_config, the
    0.29.0 and 0.34.0 wheels); a named --moe-backend overrides it. The emitted line keeps the kernel config (a launch-line
    trial: read as unknown, planned as auto, emitted with another backend beside it)."""
    m = CONFIGS / "nvidia__DeepSeek-V3.1-NVFP4"
    kc = "--kernel-config '{\"moe_backend\": \"flashinfer_cutlass\"}'"
    assert from_command(f"vllm serve {m} -tp 4 {kc}").deployment["runner"] == "flashinfer_cutlass"
    assert from_command(f"vllm serve {m} -tp 4 --moe-backend auto {kc}").deployment["runner"] == "flashinfer_cutlass"
    assert from_command(f"vllm serve {m} -tp 4 --moe-backend marlin {kc}").deployment["runner"] == "marlin"
    launch = from_command(f"vllm serve {m} -tp 4 {kc}")
    out = emit(launch.explain(deployment={"gpu": "B200"}).plan, "vllm", launch=launch)
    assert out.argv[out.argv.index("--moe-backend") + 1] == "flashinfer_cutlass" and "--kernel-config" in out.argv


def test_sglang_waterfill_overrides_the_all_to_all_to_deepep():
    """--enable-waterfill (SGLang 0.5.19 .. 0.5.23, overrides.py _a2a_backend_overrides, _a2a_fusion_adjustments): an
    all-to-all other than deepep or megamoe is overridden to deepep, so ep = tp, and shared-expert fusion is enforced (a
    launch-line trial: read as unknown, planned with a2a none and ep 1)."""
    m = CONFIGS / "deepseek-ai__DeepSeek-R1"
    base = f"python3 -m sglang.launch_server --model-path {m} --tp-size 8 --attn-dp-size 8 --enable-waterfill"
    line = from_command(base, engine_version="0.5.23")
    assert (line.deployment["a2a"], line.deployment["ep"]) == ("deepep", 8)
    assert "--enable-waterfill" in kinds(line, "rewritten")
    fused = from_command(base + " --disable-shared-experts-fusion", engine_version="0.5.23")
    assert "shared_expert_fusion" not in fused.deployment and "--disable-shared-experts-fusion" in kinds(fused, "rewritten")
    mega = from_command(base + " --moe-a2a-backend megamoe", engine_version="0.5.23")
    assert "--enable-waterfill" not in kinds(mega, "rewritten")
