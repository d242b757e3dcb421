#!/bin/bash
# session 27 call 2 (H100): the H100 tile files from call 1's tune: their GPU tests, then the layer at 2048/8192 tokens
# with the default heuristic (no H100 file) against the tuned files, interleaved.
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv >> $OUT/setup.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_triton_moe.py -k "tuned_config_files" > $OUT/gpu_tests.txt 2>&1
echo "tests rc $? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
for v in tuned default; do
  left=$(( 560 - $(date +%s) + T0 ))
  [ $left -lt 60 ] && break
  if [ $v = default ]; then rm -f backends/triton_configs/*H100*.json; else cp .device/h100files/*.json backends/triton_configs/; fi
  b=$(( left > 330 ? left / 2 - 30 : left - 40 ))
  timeout $(( b + 40 )) python3 benchmarks/moe_layer.py --quants fp8_channel,bf16,fp8_block --runners triton --tokens 2048,8192 \
    --models Qwen3-30B-A3B,Qwen3-235B-A22B,Mixtral-8x7B,DeepSeek-V3 --budget-s $b --out $OUT/layer_${v}_1.json > $OUT/layer_${v}_1.txt 2>&1
  echo "$v $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
done
python3 .device/compare.py $OUT tuned default > $OUT/compare.txt 2>&1
cat $OUT/setup.txt; tail -3 $OUT/gpu_tests.txt; cat $OUT/compare.txt
