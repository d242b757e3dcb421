#!/bin/bash
# s30 call 2: triton against deep_gemm in one run at fp8_block 2048 / 4096 / 8192 on the four layers (rule
# hopper-fp8-large-batches: deep_gemm from 4096 tokens), and the 8-expert layer's bf16 at 2048 / 4096 / 8192 with
# triton, torch_grouped_mm and deep_gemm (rule hopper-16bit-and-fp8-rowwise-few-experts: torch_grouped_mm, timed 2026-11-30)
set -u
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv >> $OUT/setup.txt
DEV=$(python3 -c "import torch;print(torch.cuda.get_device_name(0))"); echo "device $DEV setup $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
rm -rf /tmp/dgsrc; cp -r .device/dgsrc /tmp/dgsrc
if [ ! -f /tmp/dgsrc/deep_gemm/_C.so ]; then
  timeout 240 bash benchmarks/deep_gemm_from_source.sh build /tmp/dgsrc > $OUT/dg_build.txt 2>&1; cp /tmp/dgsrc/deep_gemm/_C.so $OUT/dg_C.so
fi
echo "dg ready $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
export PYTHONPATH=/tmp/dgsrc:${PYTHONPATH:-}
python3 -c "import deep_gemm; print('deep_gemm', deep_gemm.__file__)" >> $OUT/setup.txt 2>&1
LEFT=$(( 300 - $(date +%s) + T0 ))
timeout $LEFT python3 benchmarks/moe_layer.py --quants fp8_block,fp8_channel --runners triton,deep_gemm --tokens 4096,8192 \
  --models DeepSeek-V3 --budget-s $(( LEFT - 30 )) \
  --out $OUT/layer_block.json > $OUT/layer_block.txt 2>&1
echo "layer_block $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
LEFT=$(( 560 - $(date +%s) + T0 ))
timeout $LEFT python3 benchmarks/moe_layer.py --quants bf16 --runners triton,torch_grouped_mm,deep_gemm --tokens 2048,4096,8192 \
  --models Mixtral-8x7B --budget-s $(( LEFT - 30 )) --out $OUT/layer_mixtral_bf16.json > $OUT/layer_mixtral_bf16.txt 2>&1
echo "layer_mixtral_bf16 $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
cat $OUT/setup.txt; grep -v "^$" $OUT/layer_block.txt | tail -30; grep -v "^$" $OUT/layer_mixtral_bf16.txt | tail -12
