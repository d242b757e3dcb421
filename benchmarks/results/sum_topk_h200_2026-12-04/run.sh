#!/bin/bash
# session 20 call 1: SUM_TOPK (the top-k sum in the second GEMM's epilogue) against gemm2 + topk_sum
T0=$(date +%s)
O=/tmp/o9; mkdir -p $O
source .device/setup.sh > $O/setup.txt 2>&1
echo "setup $(( $(date +%s) - T0 )) s" >> $O/setup.txt
P=""
for L in Qwen3-30B-A3B Qwen3-235B-A22B Mixtral-8x7B DeepSeek-V3; do
  for F in fp8_channel bf16 fp8_block; do
    for TK in 2048 8192; do P="$P $L:$F:$TK"; done
  done
done
P="Qwen3-30B-A3B:fp8_channel:256 Qwen3-30B-A3B:bf16:256 $P"
timeout 520 python3 benchmarks/gemm_profile.py --out $O/sum_topk.json --budget-s 470 \
  --only gemm2,combine,gemm2+combine,gemm2.sum_topk --points $P > $O/sum_topk.txt 2>&1
echo "end $(( $(date +%s) - T0 )) s" >> $O/setup.txt
tar czf $OUT/run9.tgz -C $O .
grep -v "^$" $O/sum_topk.txt | tail -80
