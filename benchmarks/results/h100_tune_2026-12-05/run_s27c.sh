#!/bin/bash
# session 27 call 4 (H100): the H100 FP4 tile files from call 3's tune: their GPU tests, then the W4A16 layer with the
# default heuristic (no H100 file) against the tuned files.
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_triton_w4a16.py -k "fp4_tuned_config_files" > $OUT/gpu_tests.txt 2>&1
echo "tests rc $? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
for v in tuned default; do
  left=$(( 520 - $(date +%s) + T0 ))
  [ $left -lt 60 ] && break
  if [ $v = default ]; then rm -f backends/triton_configs/*fp4*H100*.json; else cp .device/h100fp4/*.json backends/triton_configs/; fi
  b=$(( left > 330 ? left / 2 - 30 : left - 40 ))
  timeout $(( b + 40 )) python3 benchmarks/w4a16_layer.py --runners triton --variants "" --budget-s $b --out $OUT/w4_${v}.json > $OUT/w4_${v}.txt 2>&1
  echo "$v rc $? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
done
cat $OUT/setup.txt; tail -3 $OUT/gpu_tests.txt; tail -25 $OUT/w4_tuned.txt; tail -25 $OUT/w4_default.txt
