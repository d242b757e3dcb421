"""An eleventh new user's trial (2026-12-05, launch lines of the newest releases: vLLM 0.34.0, SGLang 0.5.23), fixed as
kinds; each read in the PyPI wheels' Python sources.

- vLLM's AITER MXFP4 experts support the device only under VLLM_ROCM_USE_AITER (AiterExperts._supports_current_device,
  AiterW4A16ExpertsMonolithic: rocm_aiter_ops.is_enabled()): gpt-oss on an MI300X without it was planned supported on
  aiter; without it vLLM's MXFP4 oracle runs its OAI triton_kernels experts, which the AMD rule now prefers after
  aiter and triton.
- An SGLang launch line without --attn-dp-size / --enable-dp-attention is attention-DP 1 (SGLang's default): dp was left
  unstated, and FlashInfer MegaMoE (dp == tp asserted) was planned for a line SGLang refuses.
"""
from __future__ import annotations

import moe_select
from moe_select.launch_line import from_command
from report_helpers import cand

from conftest import CONFIGS

GPT_OSS = str(CONFIGS / "openai__gpt-oss-120b")
DSV31_NVFP4 = str(CONFIGS / "nvidia__DeepSeek-V3.1-NVFP4")


def test_vllm_aiter_mxfp4_needs_the_aiter_switch():
    dep = {"gpu": "MI300X", "engine": "vllm", "engine_version": "0.34.0", "model_config": GPT_OSS, "tp": 2}
    off = moe_select.explain({**dep, "vendor_library": False})
    assert {r.code for r in cand(off, "aiter").reasons} == {"engine_unsupported"}, cand(off, "aiter").reasons
    assert off.plan is not None and off.plan.runner == "triton_kernel"
    on = moe_select.explain({**dep, "vendor_library": True})
    assert on.plan is not None and on.plan.runner == "aiter" and not cand(on, "aiter").reasons
    unstated = moe_select.explain(dep)      # the switch not stated: the refusal under it leaves aiter unverified
    assert unstated.plan is not None and unstated.plan.runner == "aiter" and unstated.plan.evidence == "unverified"


def test_sglang_line_without_attention_dp_is_dp_1():
    line = (f"python -m sglang.launch_server --model-path {DSV31_NVFP4} --tp 4 --quantization modelopt_fp4 "
            "--moe-a2a-backend flashinfer_megamoe")
    launch = from_command(line, engine_version="0.5.23")
    assert launch.deployment["dp"] == 1
    r = launch.explain(deployment={"gpu": "GB200"})
    assert r.plan is None and "parallelism_unsupported" in {x.code for x in cand(r, "flashinfer_megamoe").reasons}
    ok = from_command(line + " --attn-dp-size 4", engine_version="0.5.23")
    assert ok.deployment["dp"] == 4
    assert ok.explain(deployment={"gpu": "GB200"}).plan is not None
