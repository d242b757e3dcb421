"""Instructions per weight in the ``triton`` runner's GEMM main loops, from the sm90 SASS, without a GPU.

    python benchmarks/sass_loop.py --points gpt-oss-20b:mxfp4:1 Qwen3-30B-A3B:bf16:8192 [--gemm 1 2] [--out F.json]

Per point (layer of ``benchmarks/tune_triton_moe.py``'s MODELS, format, tokens) it builds the layer on the ``meta``
device with the tile configuration the runner uses on an H200 (the committed tuned file for ``NVIDIA H200``, else the
default heuristic; ``--config`` overrides it with a JSON object), compiles the forward's GEMMs for sm90 with Triton's
own binder (the same specialisation as a real launch) and its bundled ``ptxas``, disassembles the cubin with
``nvdisasm``, and reads the main loop: the instructions between the target of the kernel's longest backward branch and
that branch. It prints, per GEMM, the instructions of one loop iteration, the weight values one thread handles per
iteration (``BLOCK_N x BLOCK_K`` (x2 gated) / threads), instructions per weight value, and the opcode histogram.

What it is for: a weight-streaming GEMM (1-256 tokens) reads its weights at the copy bandwidth only if the SM issues
what one weight costs fast enough. One H200 SM has 4 schedulers at one warp instruction per cycle each (128 thread
instructions a cycle); at the measured 4.2 TB/s over 132 SMs at 1.98 GHz that is 16 bytes a cycle per SM, so a format
of ``b`` bytes per weight allows ``128 * b / 16`` thread instructions per weight value (bf16: 16, fp8: 8, 4-bit: 4)
before the issue rate, not memory, bounds the loop. The count is static (one iteration of the SASS, no stalls), so it
is a lower bound on the time, not a measurement of it. Needs Triton (for its ptxas and nvdisasm); no GPU.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune_triton_moe as T  # noqa: E402

#: Thread instructions an H200 SM issues per byte of weights read at the copy bandwidth (module doc)
ISSUE_PER_BYTE = 128 / 16
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8_tensor": 1.0, "fp8_channel": 1.0, "fp8_block": 1.0,
                "int8_w8a16": 1.0, "int4_w4a16": 0.5, "mxfp4": 0.5, "nvfp4": 0.5}


def _tools() -> tuple[Path, Path]:
    import triton

    b = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    return b / "ptxas", b / "nvdisasm"


def compile_sm90(kernel, args: tuple, kwargs: dict) -> dict:
    """Compile one launch of ``kernel`` (the kernels module's ``_Kernel`` wrapper, or a Triton or Gluon JIT function)
    for sm90: ``{"cubin", "ptx", "regs", "spill", "kwargs"}`` (ptxas -v)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    jit = getattr(kernel, "jit", kernel)
    source = ASTSource
    if jit.is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource

        source = GluonASTSource
    kwargs = {**kwargs, "debug": False}
    bound, spec, options = create_function_from_signature(jit.signature, jit.params, backend)(*args, **kwargs)
    options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound, spec, options)
    ck = triton.compile(source(jit, signature, constexprs, attrs), target=target, options=options.__dict__)
    ptxas, _ = _tools()
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ck.asm["ptx"])
    r = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", f.name, "-o", os.devnull], capture_output=True, text=True)
    os.unlink(f.name)
    return {"cubin": ck.asm["cubin"], "ptx": ck.asm["ptx"], "regs": int(re.search(r"Used (\d+) registers", r.stderr).group(1)),
            "spill": int(re.search(r"(\d+) bytes spill stores", r.stderr).group(1)), "kwargs": kwargs}


def main_loop(cubin: bytes) -> list[str]:
    """The opcodes (predicate stripped, modifiers kept) of the longest backward-branch loop of ``cubin``'s SASS."""
    _, nvdisasm = _tools()
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin", delete=False) as f:
        f.write(cubin)
    out = subprocess.run([str(nvdisasm), "-c", f.name], capture_output=True, text=True, check=True).stdout
    os.unlink(f.name)
    ins, labels, pending = [], {}, []
    for line in out.splitlines():
        lab = re.match(r"^(\.L_x_\d+):", line)
        if lab:
            pending.append(lab.group(1))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            addr = int(m.group(1), 16)
            labels.update({name: addr for name in pending})
            pending = []
            ins.append((addr, m.group(2).strip()))
    best: tuple[int, int] | None = None
    for addr, text in ins:
        b = re.search(r"\bBRA\s+`\((\.L_x_\d+)\)", text)
        tgt = labels.get(b.group(1)) if b else None
        if tgt is not None and tgt < addr and (best is None or addr - tgt > best[1] - best[0]):
            best = (tgt, addr)
    if best is None:
        return []
    loop = [t for a, t in ins if best[0] <= a <= best[1]]
    return [re.sub(r"^@!?U?P[T0-9]+\s+", "", t).split()[0] for t in loop]


def profile(name: str, fmt: str, tokens: int, config: dict | None = None) -> list[dict]:
    """Each GEMM of one forward at ``tokens``: its config, registers, loop instructions and instructions per weight."""
    from moe_select.backends import triton_moe_kernels as K
    from moe_select.backends.triton_moe import TritonMoeCore
    from moe_select.layer import LayerSpec

    e, k, h, i, act = T.MODELS[name]
    spec = LayerSpec(num_experts=e, top_k=k, hidden_size=h, intermediate_size=i, activation=act, quant=fmt)
    meta = torch.device("meta")
    block = T.BLOCK if fmt == "fp8_block" else None
    core = TritonMoeCore(spec, meta, block_shape=block, warmup=False)
    cfg = config
    if cfg is None:
        cfg, _ = K.get_config(e, spec.w13_rows, h, fmt, tokens, k, device_name="NVIDIA H200", block_shape=block,
                              gated=spec.gated)
    core.config_for = lambda t, cfg=cfg: cfg
    w13, w2, scales = _meta_weights(spec, fmt, block)
    pw = core.prepare_weights(w13, w2, **scales)
    done: list[dict] = []
    launch = K._Kernel.launch
    K._Kernel.launch = lambda self, grid, device, *a, warmup=False, **kw: done.append(
        compile_sm90(self, a, kw) if self.__name__ in ("_moe_gemm_kernel", "_fp4_direct_kernel") else {})
    try:
        x = torch.empty(tokens, h, dtype=torch.bfloat16, device=meta)
        core.forward(x, torch.empty(tokens, k, dtype=torch.int32, device=meta), torch.empty(tokens, k, device=meta), pw)
    finally:
        K._Kernel.launch = launch
    rows = []
    # the GEMMs in launch order; a split-K GEMV's reduction launch (SPLIT_MODE 2) streams no weights: left out
    for g, d in enumerate([d for d in done if d and d["kwargs"].get("SPLIT_MODE", 0) != 2]):
        kw = d["kwargs"]
        ops = main_loop(d["cubin"])
        threads = 32 * kw["num_warps"]
        per_thread = kw["BLOCK_N"] * kw["BLOCK_K"] * (2 if kw["GATED"] else 1) / threads
        hist = collections.Counter(op.split(".")[0] for op in ops)
        budget = ISSUE_PER_BYTE * WEIGHT_BYTES[fmt]
        rows.append({"layer": name, "format": fmt, "tokens": tokens, "gemm": g + 1, "config": cfg[f"gemm{g + 1}"],
                     "BLOCK_M": kw.get("BLOCK_M", 1), "regs": d["regs"], "spill": d["spill"], "loop_instructions": len(ops),
                     "weights_per_thread": per_thread, "per_weight": round(len(ops) / per_thread, 2) if per_thread else None,
                     "budget_per_weight": budget, "opcodes": dict(hist.most_common())})
    return rows


def _meta_weights(spec, fmt: str, block) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Weights of ``spec`` in ``fmt`` on the meta device (shapes and dtypes as prepare_weights takes them)."""
    meta = torch.device("meta")
    e, n13, h, i = spec.num_experts, spec.w13_rows, spec.hidden_size, spec.intermediate_size
    if fmt in ("mxfp4", "nvfp4"):
        g = 32 if fmt == "mxfp4" else 16
        sdt = torch.uint8 if fmt == "mxfp4" else torch.float8_e4m3fn
        sc = {"w13_scale": torch.empty(e, n13, h // g, dtype=sdt, device=meta),
              "w2_scale": torch.empty(e, h, i // g, dtype=sdt, device=meta)}
        if fmt == "nvfp4":
            sc |= {"w13_global_scale": torch.empty(e, device=meta), "w2_global_scale": torch.empty(e, device=meta)}
        return (torch.empty(e, n13, h // 2, dtype=torch.uint8, device=meta),
                torch.empty(e, h, i // 2, dtype=torch.uint8, device=meta), sc)
    wdt = torch.bfloat16 if fmt in ("bf16", "fp16") else torch.float8_e4m3fn
    w13, w2 = torch.empty(e, n13, h, dtype=wdt, device=meta), torch.empty(e, h, i, dtype=wdt, device=meta)
    if fmt == "fp8_channel":
        return w13, w2, {"w13_scale": torch.empty(e, n13, device=meta), "w2_scale": torch.empty(e, h, device=meta)}
    if fmt == "fp8_block":
        bn, bk = block
        return w13, w2, {"w13_scale": torch.empty(e, -(-n13 // bn), -(-h // bk), device=meta),
                         "w2_scale": torch.empty(e, -(-h // bn), -(-i // bk), device=meta)}
    if fmt == "fp8_tensor":
        return w13, w2, {"w13_scale": torch.empty(e, device=meta), "w2_scale": torch.empty(e, device=meta)}
    return w13, w2, {}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--points", nargs="+", required=True, help="LAYER:FORMAT:TOKENS")
    p.add_argument("--config", help="a tile configuration (JSON object) instead of the H200's")
    p.add_argument("--out", help="JSON output file")
    args = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        p.error("compiles for sm90: run without TRITON_INTERPRET")
    rows = []
    for spec in args.points:
        name, fmt, tokens = spec.split(":")
        rows += profile(name, fmt, int(tokens), json.loads(args.config) if args.config else None)
    print(f"{'layer':16} {'format':11} {'tokens':>6} {'gemm':>4} {'BM':>3} {'BN':>4} {'BK':>4} {'regs':>4} {'loop':>5} "
          f"{'w/thr':>6} {'ins/w':>6} {'budget':>6}  top opcodes")
    for r in rows:
        c = r["config"]
        top = " ".join(f"{k}:{v}" for k, v in list(r["opcodes"].items())[:8])
        print(f"{r['layer']:16} {r['format']:11} {r['tokens']:>6} {r['gemm']:>4} {r['BLOCK_M']:>3} {c['BLOCK_N']:>4} "
              f"{c['BLOCK_K']:>4} {r['regs']:>4} {r['loop_instructions']:>5} {r['weights_per_thread']:>6.0f} "
              f"{r['per_weight']:>6} {r['budget_per_weight']:>6.1f}  {top}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
