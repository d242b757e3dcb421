"""W4A16 layers of issue 24 on one GPU: the ``triton`` runner's MXFP4 / NVFP4 paths against the roofline floor.

Run on the GPU machine in one call (about 6-8 minutes on an H200; ``--budget-s`` stops starting new work):

    python benchmarks/w4a16_layer.py --out $OUT/w4a16_layer.json [--runs] [--budget-s 500]

(``--smoke``: a tiny layer on the CPU through Triton's interpreter, to check the script; set TRITON_INTERPRET=1.)

For the MoE layers of the issue's four checkpoints (``examples/model_configs``: gpt-oss-20b and gpt-oss-120b in
mxfp4 with their expert biases and clamped SwiGLU, NVIDIA's Qwen3-30B-A3B-NVFP4 and DeepSeek-V3.1-NVFP4 (its
NVFP4 layers) in nvfp4), one rank (tp = ep = 1):

- plan: ``moe_select.plan`` for this machine, ``engine: moe_select`` (this install's adapters, as ``moe-select
  run``), CUDA graphs on, the checkpoint read from its config; the plan's runner and rule are recorded (the
  rows time the ``triton`` runner whatever the rules choose; ``runner: triton`` is asked explicitly).
- weights: random packed e2m1 codes (every byte value) with random scales (e8m0 exponents / e4m3 scales and a
  global scale) sized so that the layer's stages stay O(1); gpt-oss's biases ~N(0, 0.2^2).
- inputs: 4 sets per token count (bf16 hidden states ~N(0, 1), router logits ~N(0, 1) routed with the model's
  own method: renormalised top-k, DeepSeek's grouped top-k with its groups and scaling factor), rotated so that
  weights are not served from L2, as benchmarks/moe_layer.py does (its ``bench_runner``: eager with a
  synchronisation before each call, then CUDA-graph replay with the inputs copied in outside the timed region;
  the replay is checked bit-equal to eager).
- floor (the issue's): ``bytes / copy bandwidth`` with bytes = the touched experts' packed weights (half a byte
  per element) and block scales (one byte per 32 / 16 elements), plus the activations (bf16 in and out,
  ``T x H x 2 x 2``); the copy bandwidth measured in this run (device-to-device copy of 2 GiB, bytes read plus
  written, moe_layer.py's ``ceilings``). ``frac = floor / graph time``; targets: within 2x at 1 token (frac >=
  0.5), frac >= 0.8 at 32-256 tokens. The flops floor (``2 T K 3 I H`` at the measured bf16 peak) is recorded too.
- error: rel_error of the first tokens (up to 8) against the float64 reference (``reference_moe`` on the weights
  dequantized by ``reference_dequantize``), with the one table's tolerance for bf16 activations.
- variants (``--variants``, at 1, 32 and 256 tokens): ``swap_ab`` (the transposed tile for ``BLOCK_M`` <= 32, with the
  portable decode, the only one it runs; GEMV buckets skipped)
  and ``portable`` (the bit-field decode of the canonical layout instead of the PTX decode of the shuffled one);
  ``prefetch`` (``PREFETCH`` on every MMA tile: the next K tile's packed codes and scales loaded one iteration ahead;
  GEMV buckets skipped); ``gemv`` (at 1, 8 and 32 tokens: the
  kernels' GEMV mode forced, ``triton_moe_kernels.gemv_config`` at every bucket: no MMA, ``BLOCK_M`` ``min(4,
  pow2(T))``, split-K where the programs are few) and ``mma`` (at the same counts: the MMA tiles forced where a
  table picks GEMV, ``default_config(..., gemv=False)``; files are kept as they are; the default is MMA: GEMV is
  opt-in until this variant has measured it); ``torch_native`` (the only other
  runner with an adapter here for these formats: eager only, it cannot be captured) at 1 and 32 tokens on layers
  of at most 1e9 weights; ``direct`` (after the others): the DIRECT buckets (``triton_moe_kernels.fp4_direct_gemm``:
  two GEMV launches over the unsorted slots, the top-k sum fused) searched at 1 token, a coordinate search over
  the tuner's DIRECT candidates (``tune_triton_moe.direct_search``: PREFETCH, SPLIT_SLOTS), the whole layer timed each
  time (rows ``direct``), then the best pair at :data:`DIRECT_TOKENS` (rows ``direct_best``; the pair in the JSON's
  ``direct_best``); ``gluon:R1xW1:R2xW2`` (at 1 token): the Gluon GEMV in the 1-token bucket (:func:`gluon_gemm`).
- ``--runs``: also ``moe-select run --device cuda --tokens 64`` for the four checkpoints (and DeepSeek-V3.1-NVFP4's
  bf16 ``mtp`` layer, ``--layer mtp``) first, each log saved next to the JSON (``run_<model>[_mtp].log``), exit
  codes in the JSON; ``--runs --layers ""`` runs only those.

Writes JSON (default ``$OUT/w4a16_layer.json``) and prints a Markdown table.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "examples" / "model_configs"
#: layer -> (checkpoint folder, format)
LAYERS = {
    "gpt-oss-20b": ("openai__gpt-oss-20b", "mxfp4"),
    "gpt-oss-120b": ("openai__gpt-oss-120b", "mxfp4"),
    "Qwen3-30B-A3B-NVFP4": ("nvidia__Qwen3-30B-A3B-NVFP4", "nvfp4"),
    "DeepSeek-V3.1-NVFP4": ("nvidia__DeepSeek-V3.1-NVFP4", "nvfp4"),
}
TOKENS = (1, 8, 32, 64, 128, 256, 2048)
VARIANT_TOKENS = (1, 32, 256)
#: Token counts of the variants that switch between the GEMV mode and the MMA tiles (few rows per expert).
GEMV_VARIANT_TOKENS = (1, 8, 32)
#: Token counts of the ``gluon:R1xW1:R2xW2`` variants: the 1-token bucket at ``BLOCK_M`` 1 with the Gluon GEMV
#: (``R`` rows per thread, ``W`` warps) in the first and second GEMM, ``-`` for the ``tl`` GEMV of the tuned bucket (or
#: of ``gemv_config`` where the tuned one is not a GEMV at ``BLOCK_M`` 1).
GLUON_VARIANT_TOKENS = (1,)
GROUP = {"mxfp4": 32, "nvfp4": 16}
REF_TOKENS = 8
#: The ``direct`` variant's search (``--variants direct``): the tuner's (``tune_triton_moe.direct_search``, a
#: coordinate search over ``direct_candidates``, the whole layer timed each time) at :data:`DIRECT_SEARCH_TOKENS`; the
#: best pair is then timed at :data:`DIRECT_TOKENS`.
DIRECT_SEARCH_TOKENS = 1
DIRECT_TOKENS = (1, 2, 4, 8)


def _moe_layer():
    """benchmarks/moe_layer.py (its Clock, ceilings and bench_runner), loaded by path."""
    spec = importlib.util.spec_from_file_location("moe_layer_bench", ROOT / "benchmarks" / "moe_layer.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def random_weights(spec, dev, seed: int, biases: bool) -> dict:
    """prepare_weights' keyword arguments: random packed codes and scales (module doc)."""
    g = torch.Generator(device=dev).manual_seed(seed)
    e, h, i, q = spec.num_local_experts, spec.hidden_size, spec.intermediate_size, spec.quant
    out = {}
    for name, (n, k) in (("w13", (spec.w13_rows, h)), ("w2", (h, i))):
        out[name] = torch.randint(0, 256, (e, n, k // 2), generator=g, device=dev, dtype=torch.int32).to(torch.uint8)
        target = 1.0 / (2.9 * k ** 0.5)
        if q == "mxfp4":
            base = 127 + round(math.log2(target))
            out[f"{name}_scale"] = torch.randint(base - 3, base + 3, (e, n, k // 32), generator=g, device=dev,
                                                 dtype=torch.int32).to(torch.uint8)
        else:
            out[f"{name}_scale"] = (torch.rand(e, n, k // 16, generator=g, device=dev) * 3.75 + 0.25).to(torch.float8_e4m3fn)
            out[f"{name}_global_scale"] = (torch.rand(e, generator=g, device=dev) + 0.5) * target / 3
    if biases:
        out["w13_bias"] = torch.randn(e, spec.w13_rows, generator=g, device=dev) * 0.2
        out["w2_bias"] = torch.randn(e, h, generator=g, device=dev) * 0.2
    return out


def inputs(model: dict, t: int, dev, seed: int):
    from moe_select.routing import route

    g = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(t, model["hidden_size"], generator=g, device=dev).to(torch.bfloat16)
    logits = torch.randn(t, model["num_experts"], generator=g, device=dev)
    bias = torch.randn(model["num_experts"], generator=g, device=dev) * 0.1 if model["routing"] == "deepseek_v3" else None
    w, ids = route(logits, model["routing"], model["top_k"], n_group=model.get("n_group"), topk_group=model.get("topk_group"),
                   routed_scaling_factor=model.get("routed_scaling_factor"), correction_bias=bias)
    return x, ids.to(torch.int32), w.float()


def floor(spec, quant: str, t: int, ids_sets, ceil: dict) -> dict:
    """The issue's floor (module doc) for ``t`` tokens, experts touched averaged over the input sets."""
    e_touched = statistics.mean(len(torch.unique(ids[ids >= 0])) for ids in ids_sets)
    elems = spec.w13_rows * spec.hidden_size + spec.hidden_size * spec.intermediate_size
    per_expert = elems / 2 + elems / GROUP[quant]
    nbytes = e_touched * per_expert + t * spec.hidden_size * 2 * 2
    flops = 2 * t * spec.top_k * (spec.w13_rows + spec.intermediate_size) * spec.hidden_size
    return {"bytes": nbytes, "experts_touched": e_touched, "floor_us": nbytes / (ceil["copy_GBps"] * 1e9) * 1e6,
            "flops_floor_us": flops / (ceil["bf16_TFLOPs"] * 1e12) * 1e6}


def ref_error(spec, kw: dict, x, ids, w, out) -> float:
    from moe_select.reference import QuantizedExperts, reference_dequantize, reference_moe, rel_error

    class DeviceExperts(QuantizedExperts):          # float64 dequantization on the weights' device
        def __getitem__(self, e: int) -> torch.Tensor:
            return reference_dequantize(self.q[e:e + 1], {k: v[e:e + 1] for k, v in self.scales.items()}, self.quant,
                                        device=self.q.device)[0]

    q = spec.quant
    n = min(REF_TOKENS, x.shape[0])
    s13 = {k[4:]: v for k, v in kw.items() if k.startswith("w13_") and k != "w13_bias"}
    s2 = {k[3:]: v for k, v in kw.items() if k.startswith("w2_") and k != "w2_bias"}
    ref = reference_moe(x[:n], ids[:n], w[:n], DeviceExperts(kw["w13"], s13, q), DeviceExperts(kw["w2"], s2, q),
                        spec.activation, swiglu_limit=spec.swiglu_limit, device=x.device, w13_bias=kw.get("w13_bias"),
                        w2_bias=kw.get("w2_bias"))
    return rel_error(out[:n], ref)


def portable_weights(pw):
    """The prepared weights in the canonical layout the portable decode reads (prepare_weights stores the PTX
    decode's shuffled layout on a GPU): the variant ``portable`` times the same weights decoded portably."""
    import dataclasses

    from moe_select.backends import triton_moe_kernels as K

    from moe_select.runner import PreparedWeights

    w = pw.data
    if not getattr(w, "fp4_shuffled", False):
        return pw
    back = K.fp4_kernel_e8m0 if pw.owner.spec.quant == "mxfp4" else K.fp4_kernel_e4m3
    sc = {"s13": back(w.s13, inverse=True), "s2": back(w.s2, inverse=True)}
    return PreparedWeights(pw.owner, dataclasses.replace(w, w13=K.fp4_unshuffle(w.w13), w2=K.fp4_unshuffle(w.w2),
                                                         fp4_shuffled=False, **sc))


def gluon_gemm(spec: str, base: dict) -> dict:
    """A GEMM config of the ``gluon:...`` variants: ``"RxW"`` the Gluon GEMV (``GLUON``, backends/triton_moe_gluon.py)
    at ``R`` rows per thread and ``W`` warps (``BLOCK_N = R * W``); ``"-"`` ``base`` as it is (the ``tl`` GEMV)."""
    if spec == "-":
        return base
    r, w = (int(v) for v in spec.split("x"))
    return {"BLOCK_N": r * w, "BLOCK_K": base["BLOCK_K"], "GROUP_M": 1, "num_warps": w, "num_stages": 1, "GEMV": True,
            "GLUON": True}


def set_variant(core, variant: str, saved: dict) -> None:
    """Switch the resolved triton core to a variant (tile options or decode); ``saved`` restores the default."""
    if not saved:
        saved["table"] = json.loads(json.dumps(core._table))
        saved["asm"] = core.fp4_asm
    core._table = json.loads(json.dumps(saved["table"]))
    core.fp4_asm = saved["asm"]
    if variant == "swap_ab":       # with the portable decode, the only one SWAP_AB runs (the core refuses the PTX one)
        core.fp4_asm = False
        for c in core._table.values():
            if c["BLOCK_M"] <= 32 and not any(c[g].get("GEMV") for g in ("gemm1", "gemm2")):
                c["gemm1"]["SWAP_AB"] = c["gemm2"]["SWAP_AB"] = True
    elif variant == "portable":
        core.fp4_asm = False
    elif variant == "prefetch":    # the MMA tiles' register double buffer of packed codes and scales (not GEMV / DIRECT)
        for c in core._table.values():
            if not c.get("DIRECT"):
                for g in ("gemm1", "gemm2"):
                    if not c[g].get("GEMV"):
                        c[g]["PREFETCH"] = True
    elif variant in ("gemv", "mma"):
        from moe_select.backends import triton_moe_kernels as K

        s = core.spec
        make = K.gemv_config if variant == "gemv" else functools.partial(K.default_config, gemv=False)
        for b in list(core._table):
            c = core._table[b]
            if variant == "gemv" or c["gemm1"].get("GEMV"):
                core._table[b] = make(s.num_local_experts, s.w13_rows, s.hidden_size, s.quant, int(b), s.top_k,
                                      gated=s.gated)
    elif variant.startswith("gluon:"):
        from moe_select.backends import triton_moe_kernels as K

        s = core.spec
        b = K.token_bucket(1, tuple(sorted(int(k) for k in core._table)))
        b = next(k for k in core._table if int(k) == b)          # (the saved table's keys are strings)
        c = core._table[b]
        if not (c["BLOCK_M"] == 1 and c["gemm1"].get("GEMV") and not c.get("DIRECT")):
            c = {**K.gemv_config(s.num_local_experts, s.w13_rows, s.hidden_size, s.quant, 1, s.top_k, gated=s.gated),
                 "BLOCK_M": 1}
        core._table[b] = {"BLOCK_M": 1, **{g: gluon_gemm(spec_, c[g]) for g, spec_ in
                                             zip(("gemm1", "gemm2"), variant.split(":")[1:3], strict=True)}}
    elif variant not in ("default", "direct"):          # direct: direct_search, after the others
        raise ValueError(f"unknown variant {variant!r} (swap_ab, portable, prefetch, gemv, mma, direct, gluon:RxW:RxW)")
    core._table = {int(k): v for k, v in core._table.items()}


def not_applicable(core, variant: str, tokens: int) -> str | None:
    """Why ``variant`` (after :func:`set_variant`) does not apply to the tile of ``tokens``' bucket, or None: ``swap_ab``
    is an option of MMA tiles of ``BLOCK_M`` <= 32 (a GEMV tile has no MMA; the core refuses both together), and the
    ``portable`` decode cannot run a Gluon GEMV bucket (``GLUON`` takes the PTX decode only). Such a point is listed as
    skipped with this reason, not timed as a failure."""
    c = core.config_for(tokens)
    gemms = [c[g] for g in ("gemm1", "gemm2") if g in c]
    if variant == "swap_ab" and not all(g.get("SWAP_AB") for g in gemms):
        return "swap_ab: the bucket's tile is a GEMV tile or has BLOCK_M above 32 (no transposed MMA tile there)"
    if variant == "portable" and any(g.get("GLUON") for g in gemms):
        return "portable: the bucket's Gluon GEMV runs the PTX decode only"
    if variant == "prefetch" and not any(g.get("PREFETCH") and not g.get("GEMV") for g in gemms):
        return "prefetch: the bucket's tiles are GEMV tiles (PREFETCH on the MMA tiles only)"
    return None


def run_layer(name: str, args, ml, ceil: dict, clock, dev, result: dict, t_start: float) -> None:
    import moe_select
    from moe_select.formats import tolerance
    from moe_select.layer import LayerSpec

    folder, quant = LAYERS[name]
    dep = {"arch": "auto", "model_config": str(CONFIGS / folder), "engine": "moe_select", "require_adapter": True,
           "tp": 1, "cuda_graph": True}
    if args.smoke:
        dep = {"arch": "sm90", "engine": "moe_select", "quant": quant, "tp": 1, "cuda_graph": True,
               "model": {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 64,
                         "activation": "swiglu_oai" if quant == "mxfp4" else "silu", "routing": "renormalize",
                         **({"swiglu_limit": 7.0} if quant == "mxfp4" else {})}}
    report = moe_select.explain(dep)
    chosen = report.plan.runner if report.plan else None
    rule = report.plan.chosen_by.rule if report.plan and report.plan.chosen_by else None
    result["rules_choose"][name] = {"runner": chosen, "rule": rule, "evidence": report.plan.evidence if report.plan else None}
    plan = moe_select.plan({**dep, "runner": "triton"})
    model = plan.deployment.model
    model = model.as_dict() if hasattr(model, "as_dict") else dict(model)   # the model's fields as a dict.as_dict()
    spec = LayerSpec.from_plan(plan)
    if args.smoke:
        from moe_select.backends.triton_moe import TritonMoeCore
        from moe_select.runner import MoeRunner
        from moe_select.backends.a2a.dispatch_none import NoDispatch

        runner = MoeRunner(plan, spec, TritonMoeCore(spec, dev), NoDispatch(spec), dev)
    else:
        runner = moe_select.resolve(plan, device=dev)
    kw = random_weights(spec, dev, seed=1, biases=model["activation"] == "swiglu_oai")
    t0 = time.perf_counter()
    pw = runner.prepare_weights(kw["w13"], kw["w2"], **{k: v for k, v in kw.items() if k not in ("w13", "w2")})
    prep_s = time.perf_counter() - t0
    print(f"{name} {quant}: plan {chosen} (rule {rule}); timing {runner!r}; tiles {runner.core.config_source}; "
          f"prepare_weights (compiles) {prep_s:.1f} s", flush=True)
    tol = tolerance(plan.activation_precision)
    saved: dict = {}
    tokens = tuple(int(x) for x in args.tokens.split(",") if x)
    tokens = (1, 8) if args.smoke else tuple(sorted(set(tokens) | {t for v in args.variants.split(",") if v in ("gemv", "mma")
                                                                    for t in GEMV_VARIANT_TOKENS}))
    pw_default = pw
    for variant in ["default", *[v for v in args.variants.split(",") if v and v != "direct"]]:
        set_variant(runner.core, variant, saved)
        pw = portable_weights(pw_default) if variant in ("portable", "swap_ab") else pw_default
        for t in tokens:
            if variant != "default" and t not in (GEMV_VARIANT_TOKENS if variant in ("gemv", "mma") else
                                                  GLUON_VARIANT_TOKENS if variant.startswith("gluon:") else VARIANT_TOKENS):
                continue
            if time.time() - t_start > args.budget_s:
                result["skipped"].append({"layer": name, "variant": variant, "tokens": t, "why": "time budget"})
                continue
            if (why := not_applicable(runner.core, variant, t)) is not None:
                result["skipped"].append({"layer": name, "variant": variant, "tokens": t, "why": why})
                print(f"skipped {name} {variant} T={t}: {why}", flush=True)
                continue
            try:
                sets = [inputs(model, t, dev, seed=100 * t + j) for j in range(ml.SETS)]
                eager, gus, same, out0 = ml.bench_runner(runner, pw, sets, clock, args.reps, dev.type == "cuda")
                err = ref_error(spec, kw, *sets[0], out0)
            except Exception as exc:  # noqa: BLE001 - one failure must not lose the other rows
                result["failed"].append({"layer": name, "variant": variant, "tokens": t, "error": f"{type(exc).__name__}: {exc}"[:1500]})
                print(f"FAILED {name} {variant} T={t}: {type(exc).__name__}: {exc}", flush=True)
                continue
            roof = floor(spec, quant, t, [s[1] for s in sets], ceil)
            best = gus if gus is not None else eager
            row = {"layer": name, "quant": quant, "variant": variant, "runner": "triton", "tokens": t, "eager_us": eager,
                   "spec": {"E": spec.num_local_experts, "N13": spec.w13_rows, "H": spec.hidden_size, "top_k": spec.top_k},
                   "graph_us": gus, "graph_equals_eager": same, "rel_error": err, "tolerance": tol, **roof,
                   "frac_of_floor": roof["floor_us"] / best, "config": runner.core.config_for(t),
                   "config_source": runner.core.config_source, "prepare_s": prep_s}
            result["rows"].append(row)
            print(f"{name:20s} {variant:9s} T={t:5d} eager {eager:9.1f} us graph {gus if gus is None else round(gus, 1)!s:>9} us "
                  f"floor {roof['floor_us']:8.1f} us frac {row['frac_of_floor']:.2f} err {err:.2e} same {same}", flush=True)
    set_variant(runner.core, "default", saved)
    if "direct" in args.variants.split(","):
        direct_search(name, quant, runner, pw_default, spec, kw, model, tol, ml, clock, ceil, dev, result, args,
                      t_start)
        set_variant(runner.core, "default", saved)
    del runner, pw
    if not args.smoke and spec.num_experts * 3 * spec.hidden_size * spec.intermediate_size <= 1e9 and "torch_native" in args.runners:
        native(name, dep, model, kw, ml, clock, dev, result, args, t_start)
    del kw
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def direct_search(name, quant, runner, pw, spec, kw, model, tol, ml, clock, ceil, dev, result, args, t_start) -> None:
    """The ``direct`` variant: the tuner's DIRECT candidates searched at :data:`DIRECT_SEARCH_TOKENS` (module doc), a row
    per timing (variant ``direct``), then the best pair at :data:`DIRECT_TOKENS` (variant ``direct_best``); the best
    pair is recorded in ``result["direct_best"][name]``."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tune_triton_moe as tune

    def timed(cfg, t, variant):
        runner.core._table = {b: json.loads(json.dumps(cfg)) for b in runner.core._table}
        if time.time() - t_start > args.budget_s:
            result["skipped"].append({"layer": name, "variant": variant, "tokens": t, "why": "time budget"})
            return None
        try:
            sets = [inputs(model, t, dev, seed=100 * t + j) for j in range(ml.SETS)]
            eager, gus, same, out0 = ml.bench_runner(runner, pw, sets, clock, args.reps, dev.type == "cuda")
            err = ref_error(spec, kw, *sets[0], out0)
        except Exception as exc:  # noqa: BLE001 - one failure must not lose the other rows
            result["failed"].append({"layer": name, "variant": variant, "tokens": t, "config": cfg,
                                     "error": f"{type(exc).__name__}: {exc}"[:1500]})
            print(f"FAILED {name} {variant} T={t} {cfg}: {type(exc).__name__}: {exc}", flush=True)
            return None
        roof = floor(spec, quant, t, [s[1] for s in sets], ceil)
        best = gus if gus is not None else eager
        row = {"layer": name, "quant": quant, "variant": variant, "runner": "triton", "tokens": t, "eager_us": eager,
               "graph_us": gus, "graph_equals_eager": same, "rel_error": err, "tolerance": tol, **roof,
               "frac_of_floor": roof["floor_us"] / best, "config": cfg, "config_source": "direct search"}
        result["rows"].append(row)
        print(f"{name:20s} {variant:11s} T={t:5d} graph {best:8.1f} us frac {row['frac_of_floor']:.2f} err {err:.2e} "
              f"same {same} g1 {cfg['gemm1']} g2 {cfg['gemm2']}", flush=True)
        return best

    t = DIRECT_SEARCH_TOKENS
    found = tune.direct_search(lambda cfg: timed(cfg, t, "direct"), GROUP[quant], args.smoke)
    if found is None:
        return
    g1, g2, best_us, _ = found
    cfg = {"BLOCK_M": 1, "DIRECT": True, "gemm1": g1, "gemm2": g2}
    result.setdefault("direct_best", {})[name] = {"config": cfg, "us": best_us, "tokens": t}
    for tt in ((1, 2) if args.smoke else DIRECT_TOKENS):
        timed(cfg, tt, "direct_best")


def direct_files(result: dict, out_dir: Path) -> list[str]:
    """Tile files holding one bucket, ``"1"`` = the layer's best DIRECT pair of ``result`` (a JSON this script wrote
    with ``--variants direct``), for each layer where that pair's 1-token graph time beat the ``default`` row's in
    the same run; named and keyed as the tuner's (``triton_moe_kernels.config_file_name``), for
    ``benchmarks/merge_configs.py`` to merge into the committed files. Returns the names written."""
    from moe_select.backends import triton_moe_kernels as K

    written = []
    for name, best in result.get("direct_best", {}).items():
        default = [r for r in result["rows"] if r["layer"] == name and r["variant"] == "default" and r["tokens"] == 1]
        direct = [r for r in result["rows"] if r["layer"] == name and r["variant"] == "direct_best" and r["tokens"] == 1]
        if not default or not direct or not direct[0]["graph_us"] or direct[0]["graph_us"] >= default[0]["graph_us"]:
            continue
        spec = default[0]["spec"]
        key = {"E": spec["E"], "N": spec["N13"], "K": spec["H"], "format": default[0]["quant"], "block_shape": None,
               "device": result["machine"]}
        fname = K.config_file_name(key["E"], key["N"], key["K"], key["format"], key["device"])
        body = {"format_version": K.CONFIG_FORMAT_VERSION, "key": key,
                "tuned": {"script": "benchmarks/w4a16_layer.py --variants direct", "date": result["date"],
                          "torch": result["torch"], "triton": result["triton"], "top_k": spec["top_k"], "model": name,
                          "method": "the whole layer's CUDA-graph replay, 4 input sets rotated (moe_layer.py "
                                    "bench_runner); coordinate search at 1 token (w4a16_layer.py module doc); kept "
                                    f"because it beat the default tiles' {default[0]['graph_us']:.1f} us in the same run"},
                "configs": {"1": {**best["config"], "us": round(direct[0]["graph_us"], 2)}}}
        (out_dir / fname).write_text(json.dumps(body, indent=1) + "\n")
        K.load_config_file.cache_clear()
        K.load_config_file(str(out_dir / fname))            # read back: a malformed file is an error here
        written.append(fname)
    return written


def native(name, dep, model, kw, ml, clock, dev, result, args, t_start) -> None:
    """torch_native (eager: it cannot be captured) at 1 and 32 tokens on the same weights."""
    import moe_select
    from moe_select.layer import LayerSpec

    plan = moe_select.plan({**dep, "runner": "torch_native", "cuda_graph": False})
    runner = moe_select.resolve(plan, device=dev)
    spec = LayerSpec.from_plan(plan)
    pw = runner.prepare_weights(kw["w13"], kw["w2"], **{k: v for k, v in kw.items() if k not in ("w13", "w2")})
    for t in (1, 32):
        if time.time() - t_start > args.budget_s:
            continue
        sets = [inputs(model, t, dev, seed=100 * t + j) for j in range(ml.SETS)]
        eager, _, _, out0 = ml.bench_runner(runner, pw, sets, clock, args.reps, False)
        roof = floor(spec, spec.quant, t, [s[1] for s in sets], result["ceilings"])
        result["rows"].append({"layer": name, "quant": spec.quant, "variant": "default", "runner": "torch_native", "tokens": t,
                               "eager_us": eager, "graph_us": None, "rel_error": ref_error(spec, kw, *sets[0], out0),
                               **roof, "frac_of_floor": roof["floor_us"] / eager})
        print(f"{name:20s} torch_native T={t:5d} eager {eager:9.1f} us floor {roof['floor_us']:8.1f} us", flush=True)
    del runner, pw


def runs(out_dir: Path, result: dict, budget_end: float) -> None:
    """``moe-select run --device cuda`` for the four checkpoints (+ DeepSeek-V3.1-NVFP4's mtp layer)."""
    todo = [(name, folder, None) for name, (folder, _) in LAYERS.items()] + [("DeepSeek-V3.1-NVFP4", "nvidia__DeepSeek-V3.1-NVFP4", "mtp")]
    for name, folder, layer in todo:
        if time.time() > budget_end:
            result["runs"].append({"layer": name, "kind": layer or "main", "skipped": "time budget"})
            continue
        argv = [sys.executable, "-m", "moe_select.cli", "run", "--model-config", str(CONFIGS / folder), "--device", "cuda",
                "--tokens", "64"] + (["--layer", layer] if layer else [])
        t0 = time.time()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=max(30, budget_end - time.time() + 60))
        log = out_dir / f"run_{name}{'_' + layer if layer else ''}.log"
        log.write_text(f"$ moe-select {' '.join(argv[3:])}\n{proc.stdout}\n{proc.stderr}")
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("moe-select:", "runner:", "graph:", "max relative", "layer kind"))]
        result["runs"].append({"layer": name, "kind": layer or "main", "rc": proc.returncode, "wall_s": round(time.time() - t0, 1),
                               "log": log.name, "summary": lines})
        print(f"run {name} {layer or 'main'}: rc {proc.returncode} ({time.time() - t0:.0f} s)\n  " + "\n  ".join(lines), flush=True)


def print_table(result: dict) -> None:
    c = result["ceilings"]
    print(f"\n## {result['machine']}, torch {result['torch']}, triton {result['triton']}, {result['date']}: copy "
          f"{c['copy_GBps']:.0f} GB/s, bf16 {c['bf16_TFLOPs']:.0f} TFLOP/s")
    print("| layer | format | tokens | runner | variant | floor us | eager us | graph us (frac) | target | met | rel err (tol) |")
    print("|---|---|---:|---|---|---:|---:|---:|---:|---|---|")
    for r in result["rows"]:
        t = r["tokens"]
        want = 0.5 if t == 1 else 0.8 if 32 <= t <= 256 else None
        g = r["graph_us"] if r["graph_us"] is not None else r["eager_us"]
        met = "-" if want is None or r["variant"] != "default" else ("yes" if r["frac_of_floor"] >= want else "no")
        print(f"| {r['layer']} | {r['quant']} | {t} | {r['runner']} | {r['variant']} | {r['floor_us']:.1f} | {r['eager_us']:.1f} | "
              f"{g:.1f} ({r['frac_of_floor']:.2f}) | {want if want else '-'} | {met} | {r['rel_error']:.1e} "
              f"({r.get('tolerance', 0):.1e}) |")
    for k, v in result["rules_choose"].items():
        print(f"rules choose {v['runner']} ({v['rule']}, {v['evidence']}) for {k}")
    triton_rows = [r for r in result["rows"] if r["runner"] == "triton"]
    for layer in dict.fromkeys(r["layer"] for r in triton_rows):
        print(f"tiles of {layer}: {', '.join(sorted({r['config_source'] for r in triton_rows if r['layer'] == layer}))}")
    for r in result["runs"]:
        print(f"run: {r}")
    for s in result["skipped"] + result["failed"]:
        print(f"skipped/failed: {s}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "w4a16_layer.json"))
    ap.add_argument("--budget-s", type=float, default=500.0, help="stop starting new measurements after this")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--layers", default=",".join(LAYERS), help="comma-separated subset, in this order")
    ap.add_argument("--variants", default="swap_ab,portable",
                    help="comma-separated: swap_ab, portable, gemv, mma, direct (or empty)")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)),
                    help="token counts of the default rows (the variants keep their own counts among these and theirs)")
    ap.add_argument("--runners", default="triton,torch_native")
    ap.add_argument("--runs", action="store_true", help="also moe-select run --device cuda on the four checkpoints")
    ap.add_argument("--smoke", action="store_true", help="tiny layers on the CPU (TRITON_INTERPRET=1): checks the script")
    ap.add_argument("--direct-files", metavar="DIR", help="with --from-json: write the DIRECT buckets that won there "
                    "as one-bucket tile files into DIR (for benchmarks/merge_configs.py); no measurement")
    ap.add_argument("--from-json", metavar="F", help="a JSON this script wrote (for --direct-files)")
    args = ap.parse_args(argv)
    if args.direct_files:
        if not args.from_json:
            ap.error("--direct-files needs --from-json")
        Path(args.direct_files).mkdir(parents=True, exist_ok=True)
        names = direct_files(json.loads(Path(args.from_json).read_text()), Path(args.direct_files))
        print("\n".join(names) if names else "no DIRECT bucket beat the default tiles")
        return 0
    t_start = time.time()
    dev = torch.device("cpu" if args.smoke else "cuda")
    ml = _moe_layer()
    clock = ml.Clock(dev)
    ceil = ml.ceilings(dev, clock)
    import triton

    result = {"script": "benchmarks/w4a16_layer.py", "argv": sys.argv[1:] if argv is None else argv,
              "machine": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu", "torch": torch.__version__,
              "triton": triton.__version__, "date": time.strftime("%Y-%m-%d"), "ceilings": ceil, "rows": [],
              "rules_choose": {}, "runs": [], "skipped": [], "failed": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save():
        result["elapsed_s"] = round(time.time() - t_start, 1)
        out.write_text(json.dumps(result, indent=1, default=str))

    print(f"machine {result['machine']}: copy {ceil['copy_GBps']:.0f} GB/s, bf16 {ceil['bf16_TFLOPs']:.0f} TFLOP/s", flush=True)
    layers = [n for n in args.layers.split(",") if n]
    if args.runs and not args.smoke:
        runs(out.parent, result, t_start + args.budget_s * (0.45 if layers else 1.0))
        save()
    for name in layers:
        if time.time() - t_start > args.budget_s:
            result["skipped"].append({"layer": name, "why": "time budget"})
            continue
        try:
            run_layer(name, args, ml, ceil, clock, dev, result, t_start)
        except Exception as exc:  # noqa: BLE001
            result["failed"].append({"layer": name, "error": f"{type(exc).__name__}: {exc}"[:2000]})
            print(f"FAILED {name}: {type(exc).__name__}: {exc}", flush=True)
        save()
    save()
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
