#!/bin/bash
# session 26 call 2: GU_DOT at the layer, old vs new tile files (H100-named copies of the H200 files), interleaved
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >> $OUT/setup.txt
python3 .device/mk_gu_cfg.py >> $OUT/setup.txt 2>&1
for i in 1 2; do
  for v in new old; do
    left=$(( 540 - $(date +%s) + T0 ))
    [ $left -lt 60 ] && break
    cp .device/${v}h100/*.json backends/triton_configs/
    b=$(( left > 230 ? 110 : left - 40 ))
    timeout $(( b + 30 )) python3 benchmarks/moe_layer.py --quants fp8_channel,bf16 --runners triton --tokens 2048,8192 \
      --models Qwen3-30B-A3B,Qwen3-235B-A22B,Mixtral-8x7B,DeepSeek-V3 --budget-s $b --out $OUT/layer_${v}_$i.json > $OUT/layer_${v}_$i.txt 2>&1
    echo "$v $i $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
  done
done
python3 - <<'PY' > $OUT/compare.txt 2>&1
import json, os
O = os.environ["OUT"]
def rows(p):
    try:
        d = json.load(open(p))
    except Exception as e:
        return {}
    return {(r["model"], r["quant"], r["tokens"]): (r["graph_us"], r.get("frac_of_floor")) for r in d["rows"] if r.get("runner") == "triton" and r.get("graph_us")}
R = {(v, i): rows(f"{O}/layer_{v}_{i}.json") for v in ("new", "old") for i in (1, 2)}
keys = sorted(set().union(*[set(r) for r in R.values()]))
for k in keys:
    n = [R[("new", i)][k][0] for i in (1, 2) if k in R[("new", i)]]; o = [R[("old", i)][k][0] for i in (1, 2) if k in R[("old", i)]]
    fr = [R[(v, i)][k][1] for v in ("new", "old") for i in (1, 2) if k in R[(v, i)]]
    print(k, "new", [round(x, 1) for x in n], "old", [round(x, 1) for x in o], "frac new,old", fr,
          "new/old", round(min(n) / min(o), 3) if n and o else None)
PY
cat $OUT/setup.txt $OUT/compare.txt
