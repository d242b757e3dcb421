#!/bin/bash
# session 20 call 2: MIN_M (short tiles for the padded blocks) against the runner's tiles
T0=$(date +%s)
O=/tmp/o10; mkdir -p $O
source .device/setup.sh > $O/setup.txt 2>&1
echo "setup $(( $(date +%s) - T0 )) s" >> $O/setup.txt
P="Qwen3-30B-A3B:fp8_channel:2048 Qwen3-30B-A3B:bf16:2048 Qwen3-30B-A3B:fp8_block:2048 Qwen3-235B-A22B:fp8_channel:2048 Qwen3-235B-A22B:fp8_block:2048 Qwen3-235B-A22B:bf16:2048 DeepSeek-V3:fp8_channel:2048 DeepSeek-V3:bf16:2048 DeepSeek-V3:fp8_block:2048 Qwen3-30B-A3B:fp8_channel:8192 Qwen3-30B-A3B:bf16:8192 Qwen3-235B-A22B:bf16:8192 Qwen3-235B-A22B:fp8_channel:8192 Qwen3-30B-A3B:fp8_block:8192 DeepSeek-V3:bf16:8192"
ONLY=gemm1,gemm2,gemm1.min_m16,gemm2.min_m16,gemm1.min_m32,gemm2.min_m32,gemm1.min_m64,gemm2.min_m64
timeout 540 python3 benchmarks/gemm_profile.py --out $O/min_m.json --budget-s 480 --only $ONLY --points $P > $O/min_m.txt 2>&1
echo "end $(( $(date +%s) - T0 )) s" >> $O/setup.txt
tar czf $OUT/run10.tgz -C $O .
grep -v "^$" $O/min_m.txt | tail -90
