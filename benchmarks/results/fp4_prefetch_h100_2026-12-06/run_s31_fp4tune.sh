#!/bin/bash
# s31 call 4 (H100): the FP4 tile tune with PREFETCH candidates (--prefetch) at 64 / 128 / 256 tokens on the MXFP4 and
# NVFP4 layers, merged into the H100 files; then the layer, new files against the files before, interleaved
set -u
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv >> $OUT/setup.txt
DEV=$(python3 -c "import torch;print(torch.cuda.get_device_name(0))"); echo "device $DEV" >> $OUT/setup.txt
timeout 330 python3 benchmarks/tune_triton_moe.py --fp4 --models gpt-oss-20b gpt-oss-120b Qwen3-30B-A3B --tokens 64 128 256 \
  --prefetch --out $OUT/tune --budget-s 300 --jobs 12 > $OUT/tune.txt 2>&1
echo "tune rc $? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
python3 benchmarks/merge_configs.py $OUT/tune/triton_configs --note "s31 H100 tune --fp4 --prefetch" >> $OUT/setup.txt 2>&1
mkdir -p $OUT/newh100fp4; cp backends/triton_configs/*format=mxfp4*H100* backends/triton_configs/*format=nvfp4*H100* $OUT/newh100fp4/
for i in 1 2; do for v in new old; do
  L=$(( 575 - $(date +%s) + T0 )); [ $L -lt 40 ] && break
  if [ $v = new ]; then cp $OUT/newh100fp4/*.json backends/triton_configs/; else cp .device/oldh100fp4/*.json backends/triton_configs/; fi
  timeout $L python3 benchmarks/w4a16_layer.py --layers gpt-oss-20b,Qwen3-30B-A3B-NVFP4,gpt-oss-120b --tokens 64,128,256 \
    --variants "" --runners triton --budget-s $(( L > 120 ? 60 : L - 30 )) --out $OUT/w4_${v}_$i.json > $OUT/w4_${v}_$i.txt 2>&1
  echo "$v $i $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
done; done
tar czf $OUT/files.tgz -C $OUT tune/triton_configs tune/tune_log.json newh100fp4 && rm -rf $OUT/tune/triton_configs $OUT/tune/tune_log.json $OUT/newh100fp4
cat $OUT/setup.txt; tail -25 $OUT/tune.txt; for f in $OUT/w4_*_*.txt; do echo "== $f"; grep -E "^\| [a-zA-Z]" $f | grep -v "^| layer"; done
