#!/bin/bash
# session 25 call 3: GU_DOT (the gated first GEMM's gate and up tiles as one TMA box and one wgmma) on the GPU: its tests,
# then gemm_profile's gemm1.gu.* against gemm1.tma.* (the same tiles with two accumulators), same GPU, same run
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source .device/setup.sh > $OUT/setup.txt 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> $OUT/setup.txt
timeout 170 python3 -m pytest -q -m gpu tests/test_triton_moe.py -p no:cacheprovider -k "gu_dot or tma_equals" \
  > $OUT/gpu_tests_gu.txt 2>&1
echo "tests rc $? at $(el) s" >> $OUT/setup.txt
left=$(( 560 - $(el) ))
timeout $left python3 benchmarks/gemm_profile.py --out $OUT/gu_profile.json --budget-s $(( left - 70 )) \
  --only "gemm1,gemm1.tma,gemm1.gu.*,gemm1.tma.*" --points Qwen3-30B-A3B:fp8_channel:8192 Qwen3-30B-A3B:bf16:8192 \
  Qwen3-30B-A3B:fp8_channel:2048 Qwen3-235B-A22B:fp8_channel:8192 Qwen3-30B-A3B:bf16:2048 \
  Qwen3-235B-A22B:bf16:8192 Qwen3-235B-A22B:fp8_channel:2048 Mixtral-8x7B:fp8_channel:2048 DeepSeek-V3:fp8_channel:2048 \
  > $OUT/gu_profile.txt 2>&1
echo "profile rc $? at $(el) s" >> $OUT/setup.txt
tail -4 $OUT/gpu_tests_gu.txt; tail -3 $OUT/setup.txt; grep -E "tokens|gemm1" $OUT/gu_profile.txt | head -80
