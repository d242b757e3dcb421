"""Session 26: H100-named copies of the H200 tile files (old) and the same with GU_DOT (+TMA) on gemm1 at the 2048 and
8192 buckets (new; 8192 also BLOCK_N 128, 8 warps, 4 stages: the profile's best), for an A/B on whatever card this is."""
import copy
import json
from pathlib import Path

import torch


from moe_select.backends import triton_moe_kernels as K

dev = torch.cuda.get_device_name(0)
tag = dev.replace(" ", "_")
src = Path("backends/triton_configs")
for v in ("old", "new"):
    Path(f".device/{v}h100").mkdir(exist_ok=True)
n = 0
for f in sorted(src.glob("*device=NVIDIA_H200.json")):
    d = json.loads(f.read_text())
    d["key"]["device"] = dev
    name = f.name.replace("device=NVIDIA_H200", f"device={tag}")
    (Path(".device/oldh100") / name).write_text(json.dumps(d, indent=1))
    new = copy.deepcopy(d)
    if d["key"]["format"] in K.GU_DOT_FORMATS:
        for b, c in new["configs"].items():
            g1 = c["gemm1"]
            if int(b) >= 2048 and not g1.get("SPLIT") and not g1.get("GEMV") and c.get("BLOCK_M", 0) >= 64:
                g1["TMA"] = True
                g1["GU_DOT"] = True
                if int(b) >= 8192 and c.get("BLOCK_M") == 128:
                    g1.update(BLOCK_N=128, num_warps=8, num_stages=4)
                n += 1
    (Path(".device/newh100") / name).write_text(json.dumps(new, indent=1))
print(dev, "files", len(list(Path(".device/newh100").glob("*.json"))), "buckets changed", n)
