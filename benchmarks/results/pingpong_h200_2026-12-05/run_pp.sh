#!/bin/bash
# session 22 call 1: WGMMA PINGPONG GPU tests, then the second GEMM's forms by gemm_profile
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.log 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
timeout 150 python3 -m pytest -q -m gpu tests/test_triton_wgmma.py -rA -p no:cacheprovider -k pingpong > $OUT/gpu_tests_pp.txt 2>&1
RC=$?
echo "tests rc $RC at $(( $(date +%s) - T0 )) s" >> $OUT/gpu.txt
tail -22 $OUT/gpu_tests_pp.txt
L=gemm2,gemm2.wgmma.n256_s4_w8
if [ $RC -ne 124 ]; then for v in n128_s4 n128_s5 n128_s6 n64_s6 n256_s4 n256_s5; do L="$L,gemm2.wgmma.pp_$v"; done; fi
timeout 380 python3 benchmarks/gemm_profile.py --out $OUT/pp_profile.json --budget-s 330 --only $L --points \
  Qwen3-30B-A3B:fp8_channel:8192 Qwen3-30B-A3B:bf16:8192 Qwen3-30B-A3B:fp8_channel:2048 Qwen3-30B-A3B:bf16:2048 \
  Qwen3-235B-A22B:fp8_channel:8192 Qwen3-235B-A22B:bf16:8192 Qwen3-235B-A22B:bf16:2048 Qwen3-235B-A22B:fp8_channel:2048 \
  DeepSeek-V3:bf16:2048 DeepSeek-V3:fp8_channel:2048 Mixtral-8x7B:fp8_channel:2048 DeepSeek-V3:fp8_channel:8192 \
  > $OUT/pp_profile.txt 2>&1
echo "end $(( $(date +%s) - T0 )) s" >> $OUT/gpu.txt
grep -v "^$" $OUT/pp_profile.txt | tail -100
