#!/bin/bash
# session 18 call 2: moe-select run (runner auto) under the new rules, deep_gemm built against this torch
T0=$(date +%s)
source .device/setup.sh > $OUT/setup2.txt 2>&1
timeout 200 bash benchmarks/deep_gemm_from_source.sh build $PWD/.dgsrc > $OUT/dg_build2.txt 2>&1
echo "build $(( $(date +%s) - T0 )) s" >> $OUT/setup2.txt
export PYTHONPATH=$PWD/.dgsrc:$PYTHONPATH
for t in 4096 1024; do
  echo "## Qwen3-30B-A3B-FP8, runner auto, --tokens $t" >> $OUT/run_auto.txt
  timeout 120 moe-select run --model-config examples/model_configs/Qwen__Qwen3-30B-A3B-FP8 --tokens $t --device cuda >> $OUT/run_auto.txt 2>&1
  echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/run_auto.txt
done
LEFT=$(( 480 - ($(date +%s) - T0) ))
timeout $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_deep_gemm_adapter.py > $OUT/dg_tests.txt 2>&1
echo "rc=$? end $(( $(date +%s) - T0 )) s" >> $OUT/setup2.txt
