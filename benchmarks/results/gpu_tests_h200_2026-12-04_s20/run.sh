#!/bin/bash
# session 20 call 5: every GPU test of the triton runner (MIN_M, the sort, PREQUANT, TMA, fp4, ...) at the session's tree
T0=$(date +%s)
O=/tmp/o13; mkdir -p $O
source .device/setup.sh > $O/setup.txt 2>&1
echo "setup $(( $(date +%s) - T0 )) s" >> $O/setup.txt
timeout 420 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton_moe.py -rfE --durations=15 > $O/gpu_triton.txt 2>&1
echo "triton tests $(( $(date +%s) - T0 )) s rc $?" >> $O/setup.txt
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_runners.py -x -rfE > $O/gpu_runners.txt 2>&1
echo "runner tests $(( $(date +%s) - T0 )) s" >> $O/setup.txt
tar czf $OUT/run13.tgz -C $O .
tail -25 $O/gpu_triton.txt; tail -5 $O/gpu_runners.txt; cat $O/setup.txt | tail -3
