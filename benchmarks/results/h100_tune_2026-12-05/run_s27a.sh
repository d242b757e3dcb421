#!/bin/bash
# session 27 call 1. H200: the seven GU_DOT buckets (landed from an H100 A/B) against the files before them (f658662^),
# interleaved, at the 16 bf16/fp8_channel points of 2048/8192 tokens. H100: a tile tune for the H100 (all layers, formats
# bf16/fp8_channel/fp8_block, every token count, --tma --gu-dot).
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv >> $OUT/setup.txt
git log --oneline -1 >> $OUT/setup.txt 2>&1
DEV=$(python3 -c "import torch;print(torch.cuda.get_device_name(0))")
echo "device: $DEV" >> $OUT/setup.txt
if [[ "$DEV" == *H200* ]]; then
  for i in 1 2; do
    for v in new old; do
      left=$(( 560 - $(date +%s) + T0 ))
      [ $left -lt 60 ] && break
      cp .device/${v}h200/*.json backends/triton_configs/
      b=$(( left > 250 ? 115 : left - 40 ))
      timeout $(( b + 30 )) python3 benchmarks/moe_layer.py --quants fp8_channel,bf16 --runners triton --tokens 2048,8192 \
        --models Qwen3-30B-A3B,Qwen3-235B-A22B,Mixtral-8x7B,DeepSeek-V3 --budget-s $b --out $OUT/layer_${v}_$i.json > $OUT/layer_${v}_$i.txt 2>&1
      echo "$v $i $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
    done
  done
  cp .device/newh200/*.json backends/triton_configs/
  python3 .device/compare.py $OUT new old > $OUT/compare.txt 2>&1
  cat $OUT/setup.txt $OUT/compare.txt
else
  left=$(( 570 - $(date +%s) + T0 ))
  timeout $(( left )) python3 benchmarks/tune_triton_moe.py --out $OUT/tune --budget-s $(( left - 20 )) --tma --gu-dot > $OUT/tune.txt 2>&1
  echo "tune rc $? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
  ls $OUT/tune/triton_configs >> $OUT/setup.txt 2>&1
  cat $OUT/setup.txt; tail -30 $OUT/tune.txt
fi
