#!/bin/bash
# session 23 call 3: the PINGPONG tile files (new) and the files before them (old) interleaved in one call, 2 runs each
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >> $OUT/setup.txt
for i in 1 2; do
  for v in new old; do
    cp .device/${v}cfg/*.json backends/triton_configs/
    timeout 120 python3 benchmarks/moe_layer.py --quants fp8_channel,bf16 --runners triton --tokens 2048,8192 \
      --models Qwen3-30B-A3B,Qwen3-235B-A22B --budget-s 100 --out $OUT/layer_${v}_$i.json > $OUT/layer_${v}_$i.txt 2>&1
    echo "$v $i $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
    nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $OUT/setup.txt
  done
done
cp .device/newcfg/*.json backends/triton_configs/
python3 - <<'PY' > $OUT/compare.txt 2>&1
import json, os
O = os.environ["OUT"]
def rows(p):
    try:
        d = json.load(open(p))
    except Exception as e:
        print("no", p, e); return {}
    return {(r["model"], r["quant"], r["tokens"]): r["graph_us"] for r in d["rows"] if r.get("runner") == "triton" and r.get("graph_us")}
R = {(v, i): rows(f"{O}/layer_{v}_{i}.json") for v in ("new", "old") for i in (1, 2)}
for k in R[("new", 1)]:
    n = [R[("new", i)].get(k) for i in (1, 2)]; o = [R[("old", i)].get(k) for i in (1, 2)]
    print(k, "new", [round(x, 1) for x in n if x], "old", [round(x, 1) for x in o if x],
          "new/old", round(min(x for x in n if x) / min(x for x in o if x), 3))
PY
cat $OUT/setup.txt $OUT/compare.txt
