#!/bin/bash
# session 20 call 4: MIN_M GPU tests; the fp8_channel layer points with MIN_M 64 (graph == eager); the GPU tests
T0=$(date +%s)
O=/tmp/o12; mkdir -p $O
source .device/setup.sh > $O/setup.txt 2>&1
echo "setup $(( $(date +%s) - T0 )) s" >> $O/setup.txt
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton_moe.py -k "min_m" -rA > $O/gpu_min_m.txt 2>&1
echo "min_m tests $(( $(date +%s) - T0 )) s" >> $O/setup.txt
timeout 150 python3 benchmarks/moe_layer.py --quants fp8_channel --runners triton \
  --tokens 2048,4096,8192 --models Qwen3-30B-A3B,Qwen3-235B-A22B --budget-s 120 --out $O/layer_fp8.json > $O/layer_fp8.txt 2>&1
echo "layer $(( $(date +%s) - T0 )) s" >> $O/setup.txt
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton_moe.py tests/test_gpu_runners.py -x > $O/gpu_all.txt 2>&1
echo "gpu tests $(( $(date +%s) - T0 )) s" >> $O/setup.txt
tar czf $OUT/run12.tgz -C $O .
tail -5 $O/gpu_min_m.txt; grep -E "^\| Qwen" $O/layer_fp8.txt; tail -5 $O/gpu_all.txt; cat $O/setup.txt | tail -4
