#!/bin/bash
# session 19 call 2: old vs new (one CTA up to 1024 slots on every expert count, token_quant), same run; GPU tests
T0=$(date +%s)
O=/tmp/o; mkdir -p $O
source .device/setup.sh > $O/setup.txt 2>&1
echo "setup $(( $(date +%s) - T0 )) s" >> $O/setup.txt
OLD=$PWD/.old
M=Qwen3-30B-A3B,Qwen3-235B-A22B,DeepSeek-V3,Mixtral-8x7B
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton_moe.py -k "sort or prequant or token or edge" > $O/gpu_tests.txt 2>&1
echo "tests $(( $(date +%s) - T0 )) s" >> $O/setup.txt
for R in a b; do
  timeout 150 env PYTHONPATH=$OLD:$PYTHONPATH python3 $OLD/benchmarks/moe_layer.py --quants fp8_channel,bf16,fp8_block --runners triton \
    --tokens 1,32,128,256 --models $M --budget-s 120 --out $O/layer_old_$R.json > $O/layer_old_$R.txt 2>&1
  echo "layer_old_$R $(( $(date +%s) - T0 )) s" >> $O/setup.txt
  timeout 150 python3 benchmarks/moe_layer.py --quants fp8_channel,bf16,fp8_block --runners triton \
    --tokens 1,32,128,256 --models $M --budget-s 120 --out $O/layer_new_$R.json > $O/layer_new_$R.txt 2>&1
  echo "layer_new_$R $(( $(date +%s) - T0 )) s" >> $O/setup.txt
  [ $(( $(date +%s) - T0 )) -gt 330 ] && break
done
echo "end $(( $(date +%s) - T0 )) s" >> $O/setup.txt
tar czf $OUT/run6.tgz -C $O .
