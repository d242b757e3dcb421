#!/bin/bash
# s31 call 2: Nsight Compute over one forward of the W4A16 (MXFP4 / NVFP4) layers at 1-256 tokens (issue 24)
# GPU's own tile files; then the same points timed (moe_layer.py, CUDA-graph replay) for the record
set -u
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv >> $OUT/setup.txt
SECT="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats --section SchedulerStats --metrics lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum"
for p in gpt-oss-20b:w4a16:32 gpt-oss-20b:w4a16:256 Qwen3-30B-A3B-NVFP4:w4a16:32 Qwen3-30B-A3B-NVFP4:w4a16:256 gpt-oss-20b:w4a16:1 DeepSeek-V3.1-NVFP4:w4a16:256; do
  L=$(( 540 - $(date +%s) + T0 )); [ $L -lt 40 ] && break
  f=$(echo $p | tr ':' '_')
  timeout $L ncu --profile-from-start off --clock-control none $SECT python3 benchmarks/ncu_layer.py $p > $OUT/ncu_$f.txt 2>&1
  echo "$p rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
done
cat $OUT/setup.txt
for f in $OUT/ncu_*.txt; do echo "== $f"; grep -E "^  [_a-zA-Z].*\(|Duration|point|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|lts__t_bytes.sum|dram__bytes_read.sum" $f | head -60; done
