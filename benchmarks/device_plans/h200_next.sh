#!/bin/bash
# Run on 2026-12-06 (twenty-ninth session): tune, ab and w4, then .device/run_s29ab.sh (the per-bucket best against the
# files before); results/h200_tune_2026-12-06, benchmarks/README.md "The H200 tune with GU_DOT at 2048-8192 tokens". Next
# on an H200: `minm` below (prepared, never run: no machine came). The same-run triton / deep_gemm A/B at 4096 / 8192 ran
# on an H100 on 2026-12-06 (results/h100_dg_2026-12-06/run_s30a.sh, run_s30b.sh; the rules follow it); on an H200 the
# same two scripts would confirm it there (stage DeepGEMM first with deep_gemm_from_source.sh).
#   minm: the tune's tiles at the five 128-expert buckets the A/B kept (their old tiles had MIN_M), with that MIN_M,
#         against the committed files, interleaved twice; build the sets first with
#           python benchmarks/device_plans/minm_sets.py .device
#         (writes .device/curh200 and .device/minmh200); merge the buckets that win with merge_configs.py.
# The next H200 calls of issue 26 (written 2026-12-05, twenty-eighth session, when no device was lent). Run on the device
# from the repository root with `.device/` carried (a copy of ../shared/device plus the sets below); each mode fits one
# ten-minute call and writes under $OUT. Only on an H200: on another card it stops (an H100 tune is in the files already).
#
#   tune: tune_triton_moe.py --tma --gu-dot at 2048 and 8192 tokens (bf16, fp8_channel, fp8_block, the five layers):
#         the H100 tune chose GU_DOT in 18 of 20 bf16/fp8_channel buckets there, the H200 files hold it at 7 points
#         (benchmarks/README.md, "Tile files for the H100"). Its log comes back (files with '=' or ',' in their names do
#         not); rebuild the files here with
#           python benchmarks/tune_triton_moe.py --out DIR --files-from-log $OUT/tune_log.json
#         and merge them bucket by bucket with benchmarks/merge_configs.py DIR/triton_configs.
#   ab:   the layer with the merged files (.device/newh200/) against the files before (.device/oldh200/), interleaved
#         twice, at 2048/8192 tokens (bf16, fp8_channel, fp8_block); then compare.py. Build the two sets before the call:
#           mkdir -p .device/oldh200 .device/newh200
#           for f in backends/triton_configs/*NVIDIA_H200.json; do cp $f .device/newh200/; git show HEAD~N:$f > .device/oldh200/$(basename $f); done
#         (HEAD~N: the commit before the merge) and copy benchmarks/results/h100_tune_2026-12-05/compare.py to .device/.
#   w4:   issue 24's W4A16 layers (DeepSeek-V3.1-NVFP4 and gpt-oss at 1-256 tokens) with the current files: the fraction
#         of the H200 floor per token count (w4a16_layer.py).
set -u
MODE=${1:?usage: h200_next.sh tune|ab|w4|minm}
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv >> $OUT/setup.txt
DEV=$(python3 -c "import torch;print(torch.cuda.get_device_name(0))")
echo "device: $DEV mode: $MODE" >> $OUT/setup.txt
if [[ "$DEV" != *H200* ]]; then echo "not an H200: nothing run" >> $OUT/setup.txt; cat $OUT/setup.txt; exit 3; fi
left() { echo $(( 570 - $(date +%s) + T0 )); }
# interleave NEW OLD QUANTS MODELS BUDGET: the triton layer at 2048 / 8192 tokens with the tile files of .device/NEWh200
# then .device/OLDh200, twice, each run up to BUDGET s (less when the call's time runs short); then NEW's files back
# and compare.py NEW OLD
interleave() {
  for i in 1 2; do
    for v in $1 $2; do
      L=$(left); [ $L -lt 60 ] && break
      cp .device/${v}h200/*.json backends/triton_configs/
      b=$(( L > $5 + 140 ? $5 : L - 40 ))
      timeout $(( b + 30 )) python3 benchmarks/moe_layer.py --quants $3 --runners triton --tokens 2048,8192 \
        --models $4 --budget-s $b --out $OUT/layer_${v}_$i.json > $OUT/layer_${v}_$i.txt 2>&1
      echo "$v $i $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
    done
  done
  cp .device/$1h200/*.json backends/triton_configs/
  python3 .device/compare.py $OUT $1 $2 > $OUT/compare.txt 2>&1
  cat $OUT/setup.txt $OUT/compare.txt
}
case $MODE in
  tune)
    L=$(left)
    timeout $L python3 benchmarks/tune_triton_moe.py --out $OUT/tune --budget-s $(( L - 20 )) --tma --gu-dot --tokens 2048 8192 > $OUT/tune.txt 2>&1
    echo "tune rc $? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
    cp $OUT/tune/*.json $OUT/ 2>/dev/null; ls $OUT/tune $OUT/tune/triton_configs >> $OUT/setup.txt 2>&1
    cat $OUT/setup.txt; tail -30 $OUT/tune.txt ;;
  ab)
    interleave new old fp8_channel,bf16,fp8_block Qwen3-30B-A3B,Qwen3-235B-A22B,Mixtral-8x7B,DeepSeek-V3 110 ;;
  w4)
    L=$(left)
    timeout $L python3 benchmarks/w4a16_layer.py --budget-s $(( L - 30 )) --out $OUT/w4.json > $OUT/w4.txt 2>&1
    echo "w4 rc $? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
    cat $OUT/setup.txt; tail -40 $OUT/w4.txt ;;
  minm)
    interleave minm cur bf16,fp8_channel Qwen3-30B-A3B,Qwen3-235B-A22B 55 ;;
  *) echo "unknown mode $MODE"; exit 2 ;;
esac
