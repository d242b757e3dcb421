#!/bin/bash
# s29: the per-bucket best of the H200 tune (.device/besth200) against the files before (.device/oldh200), interleaved twice
set -u
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
DEV=$(python3 -c "import torch;print(torch.cuda.get_device_name(0))"); echo "device $DEV" >> $OUT/setup.txt
if [[ "$DEV" != *H200* ]]; then cat $OUT/setup.txt; exit 3; fi
for i in 1 2; do for v in best old; do
  L=$(( 540 - $(date +%s) + T0 )); [ $L -lt 60 ] && break
  cp .device/${v}h200/*.json backends/triton_configs/
  b=$(( L > 200 ? 95 : L - 40 ))
  timeout $(( b + 30 )) python3 benchmarks/moe_layer.py --quants fp8_channel,bf16,fp8_block --runners triton --tokens 2048,8192 \
    --models Qwen3-30B-A3B,Qwen3-235B-A22B,Mixtral-8x7B,DeepSeek-V3,gpt-oss-20b --budget-s $b --out $OUT/layer_${v}_$i.json > $OUT/layer_${v}_$i.txt 2>&1
  echo "$v $i $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
done; done
python3 .device/compare.py $OUT best old > $OUT/compare.txt 2>&1
cat $OUT/setup.txt | tail -5; cat $OUT/compare.txt
