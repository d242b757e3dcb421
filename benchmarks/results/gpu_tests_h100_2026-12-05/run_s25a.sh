#!/bin/bash
# session 25 call 1: DeepSeek-V3.1-NVFP4's 64/128-token buckets given a full search (issue 24), the layer with and
# without them (old / new / old / new), then the triton runner's GPU tests (FP8 emulation fix d7003e3 not yet run on GPU)
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source .device/setup.sh > $OUT/setup.txt 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> $OUT/setup.txt
git rev-parse HEAD > $OUT/commit.txt 2>/dev/null
F='E=256,N=4096,K=7168,format=nvfp4,device=NVIDIA_H200.json'
mkdir -p /tmp/old /tmp/new
cp "backends/triton_configs/$F" /tmp/old/
timeout 240 python3 benchmarks/tune_triton_moe.py --fp4 --models DeepSeek-V3 --tokens 64 128 --out $OUT/tune \
  --budget-s 225 --jobs 14 > $OUT/tune_stdout.log 2>&1
echo "tune rc $? at $(el) s" >> $OUT/setup.txt
cp /tmp/old/"$F" /tmp/new/ && python3 benchmarks/merge_configs.py $OUT/tune/triton_configs --into /tmp/new \
  --note "tune_triton_moe.py --fp4 --models DeepSeek-V3 --tokens 64 128 (issue 24, full search)" > $OUT/merge.txt 2>&1
cp /tmp/new/"$F" $OUT/merged.json
for i in 1 2; do
  for v in old new; do
    cp /tmp/$v/"$F" backends/triton_configs/
    timeout 70 python3 benchmarks/w4a16_layer.py --layers DeepSeek-V3.1-NVFP4 --tokens 32,64,128,256 --variants "" \
      --runners triton --budget-s 60 --out $OUT/layer_${v}_$i.json > $OUT/layer_${v}_$i.txt 2>&1
    echo "layer $v $i rc $? at $(el) s" >> $OUT/setup.txt
  done
done
cp /tmp/old/"$F" backends/triton_configs/
left=$(( 575 - $(el) ))
if [ $left -gt 30 ]; then
  timeout $left python3 -m pytest -q -m gpu tests/test_triton_moe.py -p no:cacheprovider \
    -k "every_format or real_layer or tma_equals or graph_replay or prequant" --durations=10 > $OUT/gpu_tests.txt 2>&1
  echo "tests rc $? at $(el) s" >> $OUT/setup.txt
fi
tail -3 $OUT/gpu_tests.txt; cat $OUT/merge.txt; cat $OUT/setup.txt | tail -12
