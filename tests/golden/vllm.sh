#!/bin/sh
# written by moe-select plan --emit vllm
# the plan: runner deep_gemm, a2a deepep (normal), tp 8, ep 8, dp 2, phase both
# CUDA graphs off in the plan by default (default (off: a2a deepep normal mode, used for decode, cannot be captured [backends/a2a/deepep.yaml:21]; SGLang disables CUDA graphs there too)): no switch written, the engine decides its own capture
vllm serve <repo>/examples/model_configs/Qwen__Qwen3-30B-A3B-FP8 \
    --tensor-parallel-size 4 \
    --data-parallel-size 2 \
    --enable-expert-parallel \
    --moe-backend deep_gemm \
    --all2all-backend deepep_high_throughput \
    --max-num-batched-tokens 8192
