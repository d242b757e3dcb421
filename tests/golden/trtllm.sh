#!/bin/sh
# written by moe-select plan --emit trtllm
# the plan: runner trtllm_gen, a2a none, tp 8, ep 8, dp 8, phase both
cat > moe-select-llm-api.yaml <<'EOF'
enable_attention_dp: true
moe_config:
  backend: TRTLLM
moe_expert_parallel_size: 8
moe_tensor_parallel_size: 1
tensor_parallel_size: 8
EOF
trtllm-serve <repo>/examples/model_configs/deepseek-ai__DeepSeek-V3 \
    --extra_llm_api_options moe-select-llm-api.yaml
