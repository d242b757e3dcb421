#!/bin/bash
# s30 call 1: DeepGEMM built in the background (its _C.so comes back in $OUT for the next call); the MIN_M A/B (minm
# against cur, interleaved twice: bf16 / fp8_channel, 2048 / 8192, the two 128-expert layers); then triton, deep_gemm and
# torch_grouped_mm in one run at fp8_channel 4096 / 8192 on the layers of up to 128 experts (rule
# hopper-fp8-channel-largest-batches)
set -u
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv >> $OUT/setup.txt
DEV=$(python3 -c "import torch;print(torch.cuda.get_device_name(0))"); echo "device $DEV setup $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
H200=1; [[ "$DEV" != *H200* ]] && H200=0
rm -rf /tmp/dgsrc; cp -r .device/dgsrc /tmp/dgsrc
if [ ! -f /tmp/dgsrc/deep_gemm/_C.so ]; then
  ( timeout 240 bash benchmarks/deep_gemm_from_source.sh build /tmp/dgsrc > $OUT/dg_build.txt 2>&1; cp /tmp/dgsrc/deep_gemm/_C.so $OUT/dg_C.so ) &
fi
for i in 1 2; do for v in minm cur; do
  [ $H200 = 0 ] && break
  L=$(( 330 - $(date +%s) + T0 )); [ $L -lt 40 ] && break
  cp .device/${v}h200/*.json backends/triton_configs/
  timeout $(( L )) python3 benchmarks/moe_layer.py --quants bf16,fp8_channel --runners triton --tokens 2048,8192 \
    --models Qwen3-30B-A3B,Qwen3-235B-A22B --budget-s 50 --out $OUT/layer_${v}_$i.json > $OUT/layer_${v}_$i.txt 2>&1
  echo "$v $i $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
done; done
cp .device/curh200/*.json backends/triton_configs/
python3 .device/compare.py $OUT minm cur > $OUT/compare.txt 2>&1
wait
echo "dg built $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
export PYTHONPATH=/tmp/dgsrc:${PYTHONPATH:-}
python3 -c "import deep_gemm; print('deep_gemm', deep_gemm.__file__)" >> $OUT/setup.txt 2>&1
LEFT=$(( 560 - $(date +%s) + T0 ))
[ $H200 = 0 ] && LEFT=$(( LEFT / 2 ))
timeout $LEFT python3 benchmarks/moe_layer.py --quants fp8_channel --runners triton,deep_gemm,torch_grouped_mm \
  --tokens 4096,8192 --models Qwen3-30B-A3B,Qwen3-235B-A22B,Mixtral-8x7B --budget-s $(( LEFT - 40 )) \
  --out $OUT/layer_dg.json > $OUT/layer_dg.txt 2>&1
if [ $H200 = 0 ]; then   # an H100 (no MIN_M A/B: H200 files): fp8_block too, the rule hopper-fp8-large-batches
  LEFT=$(( 570 - $(date +%s) + T0 ))
  [ $LEFT -gt 60 ] && timeout $LEFT python3 benchmarks/moe_layer.py --quants fp8_block --runners triton,deep_gemm \
    --tokens 2048,4096,8192 --models Qwen3-30B-A3B,Qwen3-235B-A22B,Mixtral-8x7B --budget-s $(( LEFT - 30 )) \
    --out $OUT/layer_dg_block.json > $OUT/layer_dg_block.txt 2>&1
fi
echo "layer_dg $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
cat $OUT/setup.txt $OUT/compare.txt; grep -v "^$" $OUT/layer_dg.txt | tail -25
