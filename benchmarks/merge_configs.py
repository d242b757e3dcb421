"""Merge tile-configuration files of a partial tune into the committed ones, token bucket by token bucket.

    python benchmarks/merge_configs.py NEW_DIR [--into backends/triton_configs] [--note TEXT]

``tune_triton_moe.py --tokens 2048 8192`` writes files holding only the buckets it measured. Copying them over the
committed files would drop the other buckets (1, 32, 256, ...). This merges instead: for each ``NEW_DIR/*.json`` whose
name is a committed file's, the new file's buckets replace the committed file's same buckets and the rest are kept; the
``tuned`` block records both runs (``merged``: the new run's ``date``, ``torch``, ``triton``, buckets and ``note``;
``phase``: the new run's search phase for its buckets). A
new file with no committed counterpart is copied as it is. Both files are read with ``load_config_file`` first, so a
malformed file is an error naming it, and the merged file is read back the same way before it is written.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def merge(new: dict, old: dict, note: str = "") -> dict:
    """``old`` with ``new``'s buckets (``configs`` keys) in place of its own; ``tuned.merged`` lists the runs merged in.
    Raises ValueError when the two files' ``key`` differ (another layer, format or device)."""
    if new.get("key") != old.get("key"):
        raise ValueError(f"the files describe different layers: key {new.get('key')} vs {old.get('key')}")
    out = json.loads(json.dumps(old))
    out["configs"] = {**old["configs"], **new["configs"]}
    out["configs"] = {k: out["configs"][k] for k in sorted(out["configs"], key=int)}
    t = new.get("tuned", {})
    merged = {k: t[k] for k in ("date", "torch", "triton", "method") if k in t}
    merged["buckets"] = sorted(new["configs"], key=int)
    if note:
        merged["note"] = note
    out.setdefault("tuned", {})
    if isinstance(t.get("phase"), dict):         # the search phase of each bucket, as the tuner records it
        out["tuned"]["phase"] = {**out["tuned"].get("phase", {}), **t["phase"]}
    out["tuned"].setdefault("merged", []).append(merged)
    return out


def main(argv: list[str] | None = None) -> int:
    from moe_select.backends import triton_moe_kernels as K

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("new_dir", type=Path)
    p.add_argument("--into", type=Path, default=Path(K.CONFIG_DIR))
    p.add_argument("--note", default="")
    args = p.parse_args(argv)
    files = sorted(args.new_dir.glob("*.json"))
    if not files:
        p.error(f"{args.new_dir}: no configuration files")
    for f in files:
        K.load_config_file(str(f))
        target = args.into / f.name
        new = json.loads(f.read_text())
        if target.is_file():
            K.load_config_file(str(target))
            out = merge(new, json.loads(target.read_text()), args.note)
            how = f"merged buckets {sorted(new['configs'], key=int)}"
        else:
            out, how = new, "new file"
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(out, indent=1) + "\n")     # as the tuner writes them
        K.load_config_file.cache_clear()
        K.load_config_file(str(tmp))
        tmp.replace(target)
        print(f"{target}: {how}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
