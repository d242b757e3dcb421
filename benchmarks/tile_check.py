"""Time the runner's tiles as they are and with options changed, GEMM by GEMM, in one run (issues 24 and 26).

    python benchmarks/tile_check.py [--models Qwen3-30B-A3B ...] [--formats bf16 fp8_channel fp8_block]
        [--tokens 2048 8192] [--set '{"TMA": true}' ...] [--out F.json] [--files DIR] [--budget-s 300]

For each layer (``tune_triton_moe.MODELS``), format and token count it takes the configuration the runner picks on this
GPU (the committed tuned file for the device, else the default heuristic: ``triton_moe_kernels.get_config``; DIRECT
buckets are skipped) and times each of its GEMMs (``tune_triton_moe.Timer``: CUDA-graph replay over 4 input sets,
median) as it is and with each ``--set`` (a JSON object merged into the GEMM's config; ``"SPLIT_K": 1`` removes a
split; at least one). Prints a table (µs per GEMM per setting, and the gain of the best), writes the rows
as JSON (``--out``, after each point), and with ``--files DIR`` one-bucket tile files (``DIR/<name>``) for the buckets
where a setting beat the tile as it is by more than :data:`MIN_GAIN`, for ``benchmarks/merge_configs.py DIR``;
``--files DIR --from-json F`` writes them from a JSON this script wrote, without a GPU (the device machine returns no
file whose name holds ``=`` or ``,``). The options it is meant for change no value (TMA, PREFETCH, the GEMV mode's
tile and split: the same sums in the same order, or a float32 split-K sum), so only the time is compared; a setting
that changes the result is the caller's to check (the GPU tests). Needs a CUDA GPU. (Its first run, as
``persistent_check.py`` at commit 57720d6 timing a PERSISTENT option since removed, is
``results/persistent_h200_2026-12-03``.)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune_triton_moe as T  # noqa: E402

#: The smallest gain (relative, per GEMM) that makes ``--files`` keep a setting: below it, run-to-run noise
MIN_GAIN = 0.03

def apply(base: dict, override: dict) -> dict:
    """``base`` (a GEMM config) with ``override`` merged in; ``SPLIT_K`` 1 and false flags are dropped."""
    c = {**base, **override}
    if c.get("SPLIT_K", 1) <= 1:
        c.pop("SPLIT_K", None)
    return {k: v for k, v in c.items() if v is not False and k != "us"}


def check_point(bench: T.Bench, t: int, timer: T.Timer, device_name: str, sets: list[dict]) -> dict:
    """One (layer, format, tokens): the runner's config and each GEMM's µs as it is (first) and per ``sets``."""
    K = T._K()
    cfg, source = K.get_config(bench.e, bench.n13, bench.h, bench.fmt, t, bench.k, device_name=device_name,
                               block_shape=bench.block, gated=bench.spec.gated)
    cfg = json.loads(json.dumps(cfg))
    if cfg.get("DIRECT"):
        return {"layer": bench.name, "format": bench.fmt, "tokens": t, "skipped": "a DIRECT bucket"}
    sets_ = bench.inputs(t, 1000 + t, T.N_SETS)
    stages = [T.Stage(bench, x, ids, tw, cfg["BLOCK_M"]) for x, ids, tw in sets_]
    for st in stages:
        st.sort()
        st.gemm("gemm1", apply(cfg["gemm1"], {}))        # the second GEMM's real input
    row: dict = {"layer": bench.name, "format": bench.fmt, "tokens": t, "BLOCK_M": cfg["BLOCK_M"], "source": str(source)}
    for kind in ("gemm1", "gemm2"):
        base = apply(cfg[kind], {})
        us: list[float | None] = []
        for i, override in enumerate([{}, *sets]):
            c = apply(base, override)
            try:
                us.append(round(timer([lambda st=st, c=c, kind=kind: st.gemm(kind, c) for st in stages]), 2))
            except Exception as exc:  # noqa: BLE001 - a setting that fails here is reported, the others still timed
                us.append(None)
                row.setdefault("errors", []).append(f"{kind} set {i} {override}: {type(exc).__name__}: {exc}"[:300])
        row[kind] = {"config": base, "us": us}
    return row


def best_setting(r: dict, kind: str) -> tuple[int, float]:
    """The fastest setting (index into ``[as is, *sets]``) of one GEMM of row ``r`` and its gain over the tile as it is
    (0 and 0.0: none faster, or the tile as it is failed)."""
    us = r[kind]["us"]
    if us[0] is None:
        return 0, 0.0
    i = min((j for j, v in enumerate(us) if v is not None), key=lambda j: us[j])
    return i, us[0] / us[i] - 1.0


def write_files(rows: list[dict], sets: list[dict], out_dir: Path, device_name: str, stamp: dict) -> list[str]:
    """One-bucket tile files (``out_dir/<name>``) for the points where a setting won by more than :data:`MIN_GAIN` in at
    least one GEMM (the other GEMM as it was; a point whose other GEMM failed as it is gets none); returns their
    names."""
    K = T._K()
    by_file: dict[str, dict] = {}
    for r in rows:
        if "gemm1" not in r:
            continue
        picks, times = {}, []
        for kind in ("gemm1", "gemm2"):
            i, gain = best_setting(r, kind)
            i = i if gain > MIN_GAIN else 0
            picks[kind] = apply(r[kind]["config"], ([{}] + sets)[i])
            times.append(r[kind]["us"][i])
        if picks["gemm1"] == r["gemm1"]["config"] and picks["gemm2"] == r["gemm2"]["config"]:
            continue
        if None in times:        # a GEMM whose tile as it is failed: no time to record for the bucket, no file
            continue
        us = sum(times)
        e, k, h, i_, act = T.MODELS[r["layer"]]
        n13 = i_ if act == "relu2" else 2 * i_
        block = list(T.BLOCK) if r["format"] == "fp8_block" else None
        name = K.config_file_name(e, n13, h, r["format"], device_name, tuple(block) if block else None)
        body = by_file.setdefault(name, {
            "format_version": K.CONFIG_FORMAT_VERSION,
            "key": {"E": e, "N": n13, "K": h, "format": r["format"], "block_shape": block, "device": device_name},
            "tuned": {"script": "benchmarks/tile_check.py", **stamp, "top_k": k, "activation": act, "model": r["layer"]},
            "configs": {}})
        body["configs"][str(r["tokens"])] = {"BLOCK_M": r["BLOCK_M"], **picks, "us": round(us, 2)}
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, body in by_file.items():
        (out_dir / name).write_text(json.dumps(body, indent=1) + "\n")
    return sorted(by_file)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["Qwen3-30B-A3B", "Qwen3-235B-A22B", "DeepSeek-V3", "Mixtral-8x7B"])
    ap.add_argument("--formats", nargs="+", default=["bf16", "fp8_channel", "fp8_block"])
    ap.add_argument("--tokens", nargs="+", type=int, default=[2048, 8192])
    ap.add_argument("--set", action="append", type=json.loads, dest="sets", metavar="JSON",
                    help="a JSON object merged into each GEMM config (repeatable; at least one to time)")
    ap.add_argument("--out", help="the rows as JSON")
    ap.add_argument("--files", metavar="DIR", help="one-bucket tile files of the winners, for merge_configs.py DIR")
    ap.add_argument("--budget-s", type=float, default=300.0, help="stop starting new points after this many seconds")
    ap.add_argument("--from-json", metavar="F", help="with --files: write the files from this JSON (no GPU)")
    args = ap.parse_args(argv)
    sets = args.sets or []
    if any(not isinstance(s, dict) for s in sets):
        ap.error("--set takes JSON objects")
    if not sets and not args.from_json:
        ap.error("give at least one --set")
    if args.from_json:
        if not args.files:
            ap.error("--from-json needs --files")
        data = json.loads(Path(args.from_json).read_text())
        names = write_files(data["rows"], data["sets"], Path(args.files), data["machine"],
                            {k: data[k] for k in ("date", "torch", "triton")})
        print(f"wrote {len(names)} tile files to {args.files}: {', '.join(names) or 'none'}")
        return 0
    if not torch.cuda.is_available():
        print("tile_check.py needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    device_name = torch.cuda.get_device_name(dev)
    stamp = {"date": T._now(), "torch": torch.__version__, "triton": T._triton_version()}
    timer = T.Timer(dev)
    rows: list[dict] = []
    t0 = time.monotonic()
    print("sets: " + "  ".join(f"S{i + 1} {json.dumps(s)}" for i, s in enumerate(sets)))
    print(f"{'layer':16s} {'format':12s} {'tokens':>6s} {'gemm':5s} {'as is':>9s} "
          + " ".join(f"{'S' + str(i + 1):>9s}" for i in range(len(sets))) + f" {'best':>5s} {'gain':>6s}")

    def save() -> None:
        if args.out:
            Path(args.out).write_text(json.dumps({"machine": device_name, **stamp, "sets": sets, "rows": rows},
                                                 indent=1) + "\n")

    for name in args.models:
        for fmt in args.formats:
            if time.monotonic() - t0 > args.budget_s:
                rows.append({"layer": name, "format": fmt, "skipped": "time budget"})
                continue
            bench = T.Bench(name, T.MODELS[name], fmt, dev, T.BLOCK)
            for t in args.tokens:
                r = check_point(bench, t, timer, device_name, sets)
                rows.append(r)
                for kind in ("gemm1", "gemm2"):
                    if kind not in r:
                        continue
                    i, gain = best_setting(r, kind)
                    cells = " ".join(f"{v:9.1f}" if v is not None else f"{'-':>9s}" for v in r[kind]["us"])
                    best = "as is" if i == 0 else f"S{i}"
                    print(f"{name:16s} {fmt:12s} {t:6d} {kind:5s} {cells} {best:>5s} {gain * 100:5.1f}%", flush=True)
                save()               # after each point: a run stopped from outside keeps what it measured
            del bench
            torch.cuda.empty_cache()
    save()
    if args.files:
        names = write_files(rows, sets, Path(args.files), device_name, stamp)
        print(f"wrote {len(names)} tile files to {args.files}: {', '.join(names) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
