#!/bin/bash
# session 19 call 3: padding of partial tiles at 2048-8192 tokens (gemm_profile's .balanced variants)
T0=$(date +%s)
O=/tmp/o; mkdir -p $O
source .device/setup.sh > $O/setup.txt 2>&1
echo "setup $(( $(date +%s) - T0 )) s" >> $O/setup.txt
timeout 330 python3 benchmarks/gemm_profile.py --out $O/profile_balanced.json --budget-s 280 \
  --points Qwen3-30B-A3B:fp8_channel:2048 Qwen3-30B-A3B:bf16:2048 Qwen3-30B-A3B:fp8_block:2048 \
  Qwen3-235B-A22B:fp8_channel:2048 DeepSeek-V3:fp8_channel:2048 Qwen3-30B-A3B:fp8_channel:8192 \
  Qwen3-235B-A22B:bf16:2048 > $O/profile_balanced.txt 2>&1
echo "end $(( $(date +%s) - T0 )) s" >> $O/setup.txt
tar czf $OUT/run7.tgz -C $O .
cat $O/profile_balanced.txt | grep -v '^ *$' | grep 'tokens\|gemm1 \|gemm2 \|balanced\|sort\|combine\|Error\|error' | head -80
