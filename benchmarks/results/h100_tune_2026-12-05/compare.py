"""Compare moe_layer.py JSON results of A/B variants: python3 compare.py OUTDIR new old (files layer_<v>_<i>.json)."""
import json

import sys
out_dir, variants = sys.argv[1], sys.argv[2:]

def rows(p):
    try:
        d = json.load(open(p))
    except Exception:
        return {}
    return {(r["model"], r["quant"], r["tokens"]): (r["graph_us"], r.get("frac_of_floor"))
            for r in d["rows"] if r.get("runner") == "triton" and r.get("graph_us")}

R = {(v, i): rows(f"{out_dir}/layer_{v}_{i}.json") for v in variants for i in (1, 2, 3)}
keys = sorted(set().union(*[set(r) for r in R.values()]))
a, b = variants[0], variants[1]
for k in keys:
    n = [R[(a, i)][k][0] for i in (1, 2, 3) if k in R[(a, i)]]
    o = [R[(b, i)][k][0] for i in (1, 2, 3) if k in R[(b, i)]]
    fr = [round(R[(v, i)][k][1], 3) for v in variants for i in (1, 2, 3) if k in R[(v, i)] and R[(v, i)][k][1]]
    print(k, a, [round(x, 1) for x in n], b, [round(x, 1) for x in o], "fracs", fr,
          f"{a}/{b}", round(min(n) / min(o), 3) if n and o else None)
