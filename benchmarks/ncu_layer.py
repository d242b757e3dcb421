"""One forward of the ``triton`` runner under Nsight Compute: every kernel of the layer (sort, quantization, both GEMMs,
activation, top-k sum) with its speed-of-light, memory, compute and warp-state sections, at the tile configuration the
runner uses on this GPU (``backends/triton_configs/``).

    ncu --profile-from-start off --clock-control none --section SpeedOfLight ... \\
        python benchmarks/ncu_layer.py Qwen3-30B-A3B:fp8_block:2048

The layer is built and warmed up (every kernel compiled, three forwards) before ``cudaProfilerStart``, so ncu sees one
forward only (eager, not a CUDA graph). Prints the tile configuration of the bucket and the kernels' launch order. Needs
a CUDA GPU; not run in CI. Used for issue 26 (where the large-token GEMMs' time goes: DRAM, L2, tensor pipes or issue).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import moe_layer as L  # noqa: E402

import moe_select  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("point", help="MODEL:FORMAT:TOKENS, e.g. Qwen3-30B-A3B:fp8_block:2048 (models of moe_layer.py), or "
                    "LAYER:w4a16:TOKENS for a W4A16 layer of w4a16_layer.py (gpt-oss-20b, Qwen3-30B-A3B-NVFP4, ...)")
    ap.add_argument("--forwards", type=int, default=1, help="forwards inside the profiled range (default 1)")
    args = ap.parse_args(argv)
    name, quant, tokens = args.point.split(":")
    dev = torch.device("cuda")
    if quant == "w4a16":   # the checkpoint's own layer (MXFP4 / NVFP4), random packed codes and scales
        import w4a16_layer as W
        from moe_select.layer import LayerSpec

        folder, _ = W.LAYERS[name]
        plan = moe_select.plan({"arch": "auto", "model_config": str(W.CONFIGS / folder), "engine": "moe_select",
                                "require_adapter": True, "tp": 1, "cuda_graph": True, "runner": "triton"})
        runner = moe_select.resolve(plan, device=dev)
        model = plan.deployment.model
        model = model.as_dict() if hasattr(model, "as_dict") else dict(model)
        kw = W.random_weights(LayerSpec.from_plan(plan), dev, seed=1, biases=model["activation"] == "swiglu_oai")
        pw = runner.prepare_weights(kw["w13"], kw["w2"], **{k: v for k, v in kw.items() if k not in ("w13", "w2")})
        x, ids, w = W.inputs(model, int(tokens), dev, seed=5)
    else:
        runner = moe_select.resolve(moe_select.plan(L.deployment(name, quant, "triton")), device=dev)
        w13, w2, scales, _ = L.make_weights(name, quant, dev, seed=1)
        pw = runner.prepare_weights(w13, w2, **scales)
        x, ids, w = L.inputs(name, int(tokens), dev, seed=5)
    for _ in range(3):
        runner.run(x, ids, w, pw)
    torch.cuda.synchronize()
    cfg = runner.core.config_for(int(tokens))
    print(json.dumps({"point": args.point, "device": torch.cuda.get_device_name(0), "configs": runner.core.config_source,
                      "tile": cfg}), flush=True)
    torch.cuda.profiler.start()
    for _ in range(args.forwards):
        runner.run(x, ids, w, pw)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
