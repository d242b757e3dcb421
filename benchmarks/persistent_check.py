"""PERSISTENT tiles against one program per tile, at the tiles the runner uses now (issue 26).

    python benchmarks/persistent_check.py [--models Qwen3-30B-A3B ...] [--formats bf16 fp8_channel fp8_block]
        [--tokens 2048 8192] [--out F.json] [--files DIR] [--budget-s 300]

For each layer (``tune_triton_moe.MODELS``), format and token count it takes the configuration the runner picks on this
GPU (the committed tuned file for the device, else the default heuristic: ``triton_moe_kernels.get_config``), and
times each of its GEMMs (``tune_triton_moe.Timer``: CUDA-graph replay over 4 input sets, median) as it is and with
``PERSISTENT`` 1 and 2 (at most that many programs per SM, each looping over the output tiles in one flattened loop:
``triton_moe_kernels.moe_gemm``). Prints a table (µs per GEMM, and the gain of the best setting), writes the rows as
JSON (``--out``), and with ``--files DIR`` one-bucket tile files (``DIR/<name>``) for the buckets where a PERSISTENT
setting beat the tile as it is by more than :data:`MIN_GAIN`, for ``benchmarks/merge_configs.py DIR``;
``--files DIR --from-json F`` writes them from a JSON this script wrote, without a GPU (the device machine returns no
file whose name holds ``=`` or ``,``).
Same values either way (tests/test_triton_moe.py: PERSISTENT is bit for bit the one-program-per-tile result), so only
the time is compared. Needs a CUDA GPU.
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

#: The smallest gain (relative, per GEMM) that makes ``--files`` keep a PERSISTENT setting: below it, run-to-run noise
MIN_GAIN = 0.03
SETTINGS = (0, 1, 2)


def check_point(bench: T.Bench, t: int, timer: T.Timer, device_name: str) -> dict:
    """One (layer, format, tokens): the runner's config and each GEMM's µs per PERSISTENT setting."""
    K = T._K()
    cfg, source = K.get_config(bench.e, bench.n13, bench.h, bench.fmt, t, bench.k, device_name=device_name,
                               block_shape=bench.block, gated=bench.spec.gated)
    cfg = json.loads(json.dumps(cfg))
    if cfg.get("DIRECT") or cfg["gemm1"].get("GEMV"):
        return {"layer": bench.name, "format": bench.fmt, "tokens": t, "skipped": "GEMV or DIRECT tiles"}
    sets = bench.inputs(t, 1000 + t, T.N_SETS)
    stages = [T.Stage(bench, x, ids, tw, cfg["BLOCK_M"]) for x, ids, tw in sets]
    for st in stages:
        st.sort()
        st.gemm("gemm1", {k: v for k, v in cfg["gemm1"].items() if k != "us"})   # the second GEMM's real input
    row: dict = {"layer": bench.name, "format": bench.fmt, "tokens": t, "BLOCK_M": cfg["BLOCK_M"], "source": str(source)}
    for kind in ("gemm1", "gemm2"):
        base = {k: v for k, v in cfg[kind].items() if k not in ("us", "PERSISTENT")}
        us: dict[int, float | None] = {}
        for per in SETTINGS:
            c = {**base, **({"PERSISTENT": per} if per else {})}
            try:
                us[per] = round(timer([lambda st=st, c=c, kind=kind: st.gemm(kind, c) for st in stages]), 2)
            except Exception as exc:  # noqa: BLE001 - a setting that fails here is reported, the others still timed
                us[per] = None
                row.setdefault("errors", []).append(f"{kind} PERSISTENT {per}: {type(exc).__name__}: {exc}"[:300])
        row[kind] = {"config": base, "us": us}
    return row


def best_setting(r: dict, kind: str) -> tuple[int, float]:
    """The fastest PERSISTENT setting of one GEMM of row ``r`` and its gain over the tile as it is (0: none)."""
    us = {int(p): v for p, v in r[kind]["us"].items() if v is not None}     # int keys (from JSON: strings)
    if 0 not in us:
        return 0, 0.0
    p = min(us, key=lambda k: us[k])
    return p, us[0] / us[p] - 1.0


def write_files(rows: list[dict], out_dir: Path, device_name: str, stamp: dict) -> list[str]:
    """One-bucket tile files (``out_dir/<name>``) for the points where PERSISTENT won by more than
    :data:`MIN_GAIN` in at least one GEMM (the other GEMM as it was); returns their names."""
    K = T._K()
    by_file: dict[str, dict] = {}
    for r in rows:
        if "gemm1" not in r:
            continue
        picks = {}
        for kind in ("gemm1", "gemm2"):
            p, gain = best_setting(r, kind)
            picks[kind] = {**r[kind]["config"], **({"PERSISTENT": p} if p and gain > MIN_GAIN else {})}
        if picks["gemm1"] == r["gemm1"]["config"] and picks["gemm2"] == r["gemm2"]["config"]:
            continue
        e, k, h, i, act = T.MODELS[r["layer"]]
        n13 = i if act == "relu2" else 2 * i
        block = list(T.BLOCK) if r["format"] == "fp8_block" else None
        name = K.config_file_name(e, n13, h, r["format"], device_name, tuple(block) if block else None)
        body = by_file.setdefault(name, {
            "format_version": K.CONFIG_FORMAT_VERSION,
            "key": {"E": e, "N": n13, "K": h, "format": r["format"], "block_shape": block, "device": device_name},
            "tuned": {"script": "benchmarks/persistent_check.py", **stamp, "top_k": k, "activation": act,
                      "model": r["layer"]},
            "configs": {}})
        us = sum(r[kind]["us"].get(p, r[kind]["us"].get(str(p))) for kind, p in
                 (("gemm1", picks["gemm1"].get("PERSISTENT", 0)), ("gemm2", picks["gemm2"].get("PERSISTENT", 0))))
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
    ap.add_argument("--out", help="the rows as JSON")
    ap.add_argument("--files", metavar="DIR", help="one-bucket tile files of the winners, for merge_configs.py DIR")
    ap.add_argument("--budget-s", type=float, default=300.0, help="stop starting new points after this many seconds")
    ap.add_argument("--from-json", metavar="F", help="with --files: write the files from this JSON (no GPU)")
    args = ap.parse_args(argv)
    if args.from_json:
        if not args.files:
            ap.error("--from-json needs --files")
        data = json.loads(Path(args.from_json).read_text())
        names = write_files(data["rows"], Path(args.files), data["machine"],
                            {k: data[k] for k in ("date", "torch", "triton")})
        print(f"wrote {len(names)} tile files to {args.files}: {', '.join(names) or 'none'}")
        return 0
    if not torch.cuda.is_available():
        print("persistent_check.py needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    device_name = torch.cuda.get_device_name(dev)
    stamp = {"date": T._now(), "torch": torch.__version__, "triton": T._triton_version()}
    timer = T.Timer(dev)
    rows: list[dict] = []
    t0 = time.monotonic()
    print(f"{'layer':16s} {'format':12s} {'tokens':>6s} {'gemm':5s} {'as is':>9s} {'P1':>9s} {'P2':>9s} {'gain':>6s}")
    for name in args.models:
        for fmt in args.formats:
            if time.monotonic() - t0 > args.budget_s:
                rows.append({"layer": name, "format": fmt, "skipped": "time budget"})
                continue
            bench = T.Bench(name, T.MODELS[name], fmt, dev, T.BLOCK)
            for t in args.tokens:
                r = check_point(bench, t, timer, device_name)
                rows.append(r)
                for kind in ("gemm1", "gemm2"):
                    if kind not in r:
                        continue
                    us = r[kind]["us"]
                    p, gain = best_setting(r, kind)
                    cells = " ".join(f"{us[s]:9.1f}" if us.get(s) is not None else f"{'-':>9s}" for s in SETTINGS)
                    print(f"{name:16s} {fmt:12s} {t:6d} {kind:5s} {cells} {gain * 100:5.1f}%", flush=True)
                if args.out:         # after each point: a run stopped from outside keeps what it measured
                    Path(args.out).write_text(json.dumps({"machine": device_name, **stamp, "settings": list(SETTINGS),
                                                          "rows": rows}, indent=1) + "\n")
            del bench
            torch.cuda.empty_cache()
    result = {"machine": device_name, **stamp, "settings": list(SETTINGS), "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    if args.files:
        names = write_files(rows, Path(args.files), device_name, stamp)
        print(f"wrote {len(names)} tile files to {args.files}: {', '.join(names) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
