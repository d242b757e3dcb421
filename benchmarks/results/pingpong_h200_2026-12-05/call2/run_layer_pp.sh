#!/bin/bash
# session 23 call 2: the layer with the PINGPONG tile files (new) against the tree before them (old, d7003e3), one call;
# then deep_gemm (built from source meanwhile) and triton again at 4096/8192 fp8_channel (the rules' token bound)
T0=$(date +%s)
source .device/setup.sh > $OUT/setup.txt 2>&1
echo "setup $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >> $OUT/setup.txt
( timeout 200 bash benchmarks/deep_gemm_from_source.sh build $PWD/.device/dgsrc > $OUT/dg_build.txt 2>&1 ) &
BPID=$!
OLD=$PWD/.device/old
cat > /tmp/whoami.py <<'PY'
import moe_select.backends.triton_moe_kernels as K, glob, os
f = [p for p in glob.glob(os.path.join(os.path.dirname(K.__file__), "triton_configs", "*fp8_channel*H200.json")) if "N=1536" in p][0]
print("tree:", K.__file__, "PINGPONG in 30B fp8_channel file:", "PINGPONG" in open(f).read())
PY
M=Qwen3-30B-A3B,Qwen3-235B-A22B
python3 /tmp/whoami.py >> $OUT/setup.txt 2>&1
timeout 150 python3 benchmarks/moe_layer.py --quants fp8_channel,bf16 --runners triton \
  --tokens 2048,4096,8192 --models $M --budget-s 120 --out $OUT/layer_new.json > $OUT/layer_new.txt 2>&1
echo "layer_new $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
python3 .device/run_old.py $OLD /tmp/whoami.py >> $OUT/setup.txt 2>&1
timeout 150 python3 .device/run_old.py $OLD $OLD/benchmarks/moe_layer.py --quants fp8_channel,bf16 --runners triton \
  --tokens 2048,4096,8192 --models $M --budget-s 120 --out $OUT/layer_old.json > $OUT/layer_old.txt 2>&1
echo "layer_old $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
wait $BPID
echo "dg build $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
export PYTHONPATH=$PWD/.device/dgsrc:$PYTHONPATH
python3 -c "import deep_gemm; print(deep_gemm.__file__)" >> $OUT/setup.txt 2>&1
LEFT=$(( 540 - ($(date +%s) - T0) ))
timeout $LEFT python3 benchmarks/moe_layer.py --quants fp8_channel --runners triton,deep_gemm \
  --tokens 4096,8192 --models $M --budget-s $(( LEFT - 30 )) --out $OUT/layer_dg.json > $OUT/layer_dg.txt 2>&1
echo "layer_dg $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
python3 - <<'PY' > $OUT/compare.txt 2>&1
import json, os
O = os.environ["OUT"]
def rows(p, runner="triton"):
    try:
        d = json.load(open(p))
    except Exception as e:
        print("no", p, e); return {}
    return {(r["model"], r["quant"], r["tokens"]): r for r in d["rows"] if r.get("runner") == runner and r.get("graph_us")}
n, o, n2, dg = rows(f"{O}/layer_new.json"), rows(f"{O}/layer_old.json"), rows(f"{O}/layer_dg.json"), rows(f"{O}/layer_dg.json", "deep_gemm")
print("point old new new/old frac_old frac_new eq_new err_new | triton(dg run) deep_gemm")
for k in o:
    if k in n:
        a, b = o[k]["graph_us"], n[k]["graph_us"]
        print(k, round(a, 1), round(b, 1), round(b / a, 3), round(o[k]["frac_of_floor"], 3), round(n[k]["frac_of_floor"], 3),
              n[k]["graph_equals_eager"], round(n[k]["rel_error"], 4), "|", n2.get(k, {}).get("graph_us"), dg.get(k, {}).get("graph_us"))
PY
echo "end $(( $(date +%s) - T0 )) s" >> $OUT/setup.txt
cat $OUT/setup.txt $OUT/compare.txt; tail -5 $OUT/dg_build.txt
