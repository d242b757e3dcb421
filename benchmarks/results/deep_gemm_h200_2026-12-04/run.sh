#!/bin/bash
# session 18 call 1: profile Qwen3-30B-A3B steps (build DeepGEMM meanwhile), then triton vs deep_gemm same run
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
echo "setup $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >> $OUT/setup.txt
( /usr/bin/time -v timeout 200 bash benchmarks/deep_gemm_from_source.sh build $PWD/.dgsrc > $OUT/dg_build.txt 2>&1 ) &
BPID=$!
timeout 100 python3 benchmarks/gemm_profile.py --out $OUT/profile.json --budget-s 80 \
  --points Qwen3-30B-A3B:fp8_channel:32 Qwen3-30B-A3B:fp8_channel:2048 Qwen3-30B-A3B:fp8_block:2048 \
  Qwen3-235B-A22B:fp8_block:2048 Qwen3-30B-A3B:fp8_channel:1 > $OUT/profile.txt 2>&1
echo "profile $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
wait $BPID
echo "build $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
export PYTHONPATH=$PWD/.dgsrc:$PYTHONPATH
python3 -c "import deep_gemm; print(deep_gemm.__file__)" >> $OUT/setup.txt 2>&1
LEFT=$(( 560 - ($(date +%s) - T0) ))
timeout $((LEFT + 20)) python3 benchmarks/moe_layer.py --quants fp8_block,fp8_channel,bf16 --runners triton,deep_gemm \
  --tokens 2048,4096,8192 --models Qwen3-30B-A3B,Qwen3-235B-A22B,DeepSeek-V3,Mixtral-8x7B --variants default \
  --budget-s $LEFT --out $OUT/layer_same_run.json > $OUT/layer_same_run.txt 2>&1
echo "end $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
