#!/bin/bash
# session 27 call 5 (H100): FP4 buckets 2, 4, 8, 128 for the H100 files (the W4A16 layer between buckets was slower than
# the default at 8 and 128 tokens on gpt-oss-20b); the layer before and after merging them, same call.
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
cp .device/h100fp4/*.json backends/triton_configs/
timeout 100 python3 benchmarks/w4a16_layer.py --runners triton --variants "" --tokens 1,2,4,8,16,32,64,128,256 --budget-s 70 --out $OUT/w4_before.json > $OUT/w4_before.txt 2>&1
echo "before rc $? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
left=$(( 470 - $(date +%s) + T0 ))
timeout $(( left - 100 )) python3 benchmarks/tune_triton_moe.py --out $OUT/tune --fp4 --tokens 2 4 8 128 --budget-s $(( left - 110 )) > $OUT/tune.txt 2>&1
echo "tune rc $? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
python3 benchmarks/merge_configs.py $OUT/tune/triton_configs --note "tune_triton_moe.py --fp4 --tokens 2 4 8 128 (H100)" >> $OUT/setup.txt 2>&1
rm -rf $OUT/tune/triton_configs
left=$(( 560 - $(date +%s) + T0 ))
timeout $(( left )) python3 benchmarks/w4a16_layer.py --runners triton --variants "" --tokens 1,2,4,8,16,32,64,128,256 --budget-s $(( left - 25 )) --out $OUT/w4_after.json > $OUT/w4_after.txt 2>&1
echo "after rc $? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
cat $OUT/setup.txt; tail -22 $OUT/tune.txt | grep -v "^ *%\|tt\." 
