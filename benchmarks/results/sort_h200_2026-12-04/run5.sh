#!/bin/bash
# session 19 call 1: the sort's block-expert scatter and the fused per-token amax + PREQUANT (token_quant), old vs new
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
echo "setup $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >> $OUT/setup.txt
OLD=$PWD/.old
M=Qwen3-30B-A3B,Qwen3-235B-A22B,DeepSeek-V3,Mixtral-8x7B
timeout 90 env PYTHONPATH=$OLD:$PYTHONPATH python3 $OLD/benchmarks/align_threshold.py --json $OUT/align_old.json > $OUT/align_old.txt 2>&1
echo "align_old $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
timeout 90 python3 benchmarks/align_threshold.py --json $OUT/align_new.json > $OUT/align_new.txt 2>&1
echo "align_new $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
for R in a b; do
  timeout 150 env PYTHONPATH=$OLD:$PYTHONPATH python3 $OLD/benchmarks/moe_layer.py --quants fp8_channel,bf16 --runners triton \
    --tokens 1,32,256 --models $M --budget-s 110 --out $OUT/layer_old_$R.json > $OUT/layer_old_$R.txt 2>&1
  echo "layer_old_$R $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
  timeout 150 python3 benchmarks/moe_layer.py --quants fp8_channel,bf16 --runners triton \
    --tokens 1,32,256 --models $M --budget-s 110 --out $OUT/layer_new_$R.json > $OUT/layer_new_$R.txt 2>&1
  echo "layer_new_$R $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
  [ $(( $(date +%s) - T0 )) -gt 330 ] && break
done
LEFT=$(( 560 - ($(date +%s) - T0) ))
[ $LEFT -gt 30 ] && timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton_moe.py -k "sort or prequant or token or edge or tma" > $OUT/gpu_tests.txt 2>&1
echo "end $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
