#!/bin/sh
# written by moe-select plan --emit sglang
# the plan: runner deep_gemm, a2a deepep (low_latency), tp 8, ep 8, dp 8, phase decode
# --attn-dp-size: the spelling of sglang 0.5.22 on (older releases take --enable-dp-attention --dp-size 8); declare --engine-version to have it written for yours
# --cuda-graph-max-bs-decode: the spelling of sglang 0.5.14 on (older releases take --cuda-graph-max-bs); declare --engine-version to have it written for yours
python3 -m sglang.launch_server \
    --model-path <repo>/examples/model_configs/Qwen__Qwen3-30B-A3B-FP8 \
    --tp-size 8 \
    --ep-size 8 \
    --attn-dp-size 8 \
    --moe-runner-backend deep_gemm \
    --moe-a2a-backend deepep \
    --deepep-mode low_latency \
    --disaggregation-mode decode \
    --cuda-graph-max-bs-decode 128
