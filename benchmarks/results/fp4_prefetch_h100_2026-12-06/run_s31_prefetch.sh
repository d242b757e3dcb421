#!/bin/bash
# s31 call 3: PREFETCH on the packed-FP4 MMA tiles (next K tile's codes and scales loaded ahead) against the same tiles
# without it, in one process per run (w4a16_layer.py --variants prefetch: default rows then prefetch rows), two runs
set -u
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv >> $OUT/setup.txt
for i in 1 2; do
  L=$(( 560 - $(date +%s) + T0 )); [ $L -lt 60 ] && break
  B=$(( i == 1 ? L / 2 - 20 : L - 30 ))
  timeout $(( B + 25 )) python3 benchmarks/w4a16_layer.py --layers gpt-oss-20b,Qwen3-30B-A3B-NVFP4,gpt-oss-120b,DeepSeek-V3.1-NVFP4 \
    --tokens 32,256 --variants prefetch --runners triton --budget-s $B --out $OUT/w4_prefetch_$i.json > $OUT/w4_prefetch_$i.txt 2>&1
  echo "run $i rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
done
cat $OUT/setup.txt; for i in 1 2; do grep -E "^\| [a-zA-Z]" $OUT/w4_prefetch_$i.txt | grep -v "^| layer"; grep -i "fail\|error" $OUT/w4_prefetch_$i.txt | head -5; done
