#!/bin/bash
# session 20 call 3: the layer with the MIN_M tile files (new) against the tree before MIN_M (old, fc5f4f1), same call
T0=$(date +%s)
O=/tmp/o11; mkdir -p $O
source .device/setup.sh > $O/setup.txt 2>&1
echo "setup $(( $(date +%s) - T0 )) s" >> $O/setup.txt
OLD=$PWD/.old
cat > /tmp/whoami.py <<'PY'
import moe_select.backends.triton_moe_kernels as K
print("tree:", K.__file__, "MIN_M" if hasattr(K, "_moe_tile") else "before MIN_M")
PY
M=Qwen3-30B-A3B,Qwen3-235B-A22B,DeepSeek-V3
timeout 240 python3 benchmarks/moe_layer.py --quants fp8_channel,bf16 --runners triton \
  --tokens 2048,4096,8192 --models $M --budget-s 200 --out $O/layer_new.json > $O/layer_new.txt 2>&1
echo "layer_new $(( $(date +%s) - T0 )) s" >> $O/setup.txt
python3 .device/run_old.py $OLD /tmp/whoami.py >> $O/setup.txt 2>&1
python3 /tmp/whoami.py >> $O/setup.txt 2>&1
PYTHONPATH=$OLD:$PYTHONPATH python3 /tmp/whoami.py >> $O/setup.txt 2>&1
timeout 240 python3 .device/run_old.py $OLD $OLD/benchmarks/moe_layer.py --quants fp8_channel,bf16 --runners triton \
  --tokens 2048,4096,8192 --models $M --budget-s 200 --out $O/layer_old.json > $O/layer_old.txt 2>&1
echo "layer_old $(( $(date +%s) - T0 )) s" >> $O/setup.txt
python3 - <<'PY' > $O/compare.txt 2>&1
import json
def rows(p):
    d = json.load(open(p)); out = {}
    for r in d.get("rows", d.get("results", [])):
        if r.get("runner") != "triton" or "graph_us" not in r and "replay_us" not in r: continue
        out[(r.get("model"), r.get("quant"), r.get("tokens"))] = r
    return out, d
try:
    n, dn = rows("/tmp/o11/layer_new.json"); o, do = rows("/tmp/o11/layer_old.json")
    print(list(dn.keys())[:10])
    for k in n:
        if k in o:
            a = o[k].get("graph_us", o[k].get("replay_us")); b = n[k].get("graph_us", n[k].get("replay_us"))
            print(k, a, b, round(b / a, 3))
except Exception as e:
    print("compare failed", e)
PY
echo "end $(( $(date +%s) - T0 )) s" >> $O/setup.txt
tar czf $OUT/run11.tgz -C $O .
cat $O/compare.txt; tail -30 $O/layer_new.txt
