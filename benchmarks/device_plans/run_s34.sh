#!/bin/bash
# (kept from .device/, an ignored folder: copy ../shared/device to .device, then this script there; see h200_next.sh for the sets)
# s34: MODE fp4 (issue 24, H200 only): the FP4 tile tune with PREFETCH candidates (--prefetch) at 32-256 tokens on the
# four W4A16 layers, merged into the H200 files, then the layer with the new files against the files before
# (.device/oldh200fp4), interleaved twice. MODE minm (issue 26, H200 only): benchmarks/device_plans/h200_next.sh minm.
# On any other card: half HALF of tests/test_gpu_runners.py -m gpu (.device/gpu_halfN.txt), so the call is not wasted.
set -u
MODE=${1:?usage: run_s34.sh fp4|minm HALF}; HALF=${2:-1}
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv >> $OUT/setup.txt
DEV=$(python3 -c "import torch;print(torch.cuda.get_device_name(0))"); echo "device $DEV mode $MODE" >> $OUT/setup.txt
git rev-parse HEAD >> $OUT/setup.txt 2>&1
if [[ "$DEV" != *H200* ]]; then
  echo "not an H200: GPU runner tests, half $HALF" >> $OUT/setup.txt
  timeout 540 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider $(cat .device/gpu_half$HALF.txt) > $OUT/gpu_runners_half$HALF.txt 2>&1
  echo "pytest rc $? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
  cat $OUT/setup.txt; tail -15 $OUT/gpu_runners_half$HALF.txt; exit 3
fi
case $MODE in
  fp4)
    timeout 300 python3 benchmarks/tune_triton_moe.py --fp4 --models gpt-oss-20b gpt-oss-120b Qwen3-30B-A3B DeepSeek-V3 \
      --tokens 32 64 128 256 --prefetch --out $OUT/tune --budget-s 270 --jobs 12 > $OUT/tune.txt 2>&1
    echo "tune rc $? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
    python3 benchmarks/merge_configs.py $OUT/tune/triton_configs --note "s34 H200 tune --fp4 --prefetch" >> $OUT/setup.txt 2>&1
    mkdir -p $OUT/newh200fp4; cp backends/triton_configs/*format=*fp4*H200* $OUT/newh200fp4/
    for i in 1 2; do for v in new old; do
      L=$(( 575 - $(date +%s) + T0 )); [ $L -lt 40 ] && break
      if [ $v = new ]; then cp $OUT/newh200fp4/*.json backends/triton_configs/; else cp .device/oldh200fp4/*.json backends/triton_configs/; fi
      timeout $L python3 benchmarks/w4a16_layer.py --layers gpt-oss-20b,Qwen3-30B-A3B-NVFP4,gpt-oss-120b,DeepSeek-V3.1-NVFP4 \
        --tokens 32,64,128,256 --variants "" --runners triton --budget-s $(( L > 100 ? 50 : L - 30 )) \
        --out $OUT/w4_${v}_$i.json > $OUT/w4_${v}_$i.txt 2>&1
      echo "$v $i $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
    done; done
    tar czf $OUT/files.tgz -C $OUT tune/triton_configs tune/tune_log.json newh200fp4 && rm -rf $OUT/tune/triton_configs $OUT/tune/tune_log.json $OUT/newh200fp4
    cat $OUT/setup.txt; tail -25 $OUT/tune.txt; for f in $OUT/w4_*_*.txt; do echo "== $f"; grep -E "^\| [a-zA-Z]" $f | grep -v "^| layer"; done ;;
  minm)
    bash benchmarks/device_plans/h200_next.sh minm ;;
esac
