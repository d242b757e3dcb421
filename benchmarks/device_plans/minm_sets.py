"""Build the two tile-file sets of the MIN_M A/B that the twenty-ninth session prepared for the next H200 (issue 26).

    python benchmarks/device_plans/minm_sets.py .device

The 2026-12-06 H200 tune (``tune_triton_moe.py --tma --gu-dot --tokens 2048 8192``; its log is committed as
``benchmarks/results/h200_tune_2026-12-06/tune/tune_log.json.gz``) was slower than the tiles before it at five
128-expert buckets whose old tiles had ``MIN_M`` (short tiles for padded blocks), which the separable tune does not
search; the committed files keep the old tiles there. This writes ``DEST/curh200/`` (the committed H200 files) and
``DEST/minmh200/`` (the same, with the tune's tiles at those buckets plus the old tiles' ``MIN_M`` per GEMM), for
``benchmarks/device_plans/h200_next.sh minm``. Every written file is read back with ``load_config_file``. Needs no GPU.
"""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
LOG = ROOT / "benchmarks" / "results" / "h200_tune_2026-12-06" / "tune" / "tune_log.json.gz"
CONFIGS = ROOT / "backends" / "triton_configs"
#: The commit before the merge of 2026-12-06 (the tiles the A/B kept).
BEFORE = "673764a"
LAYERS = ("E=128,N=1536,K=2048", "E=128,N=3072,K=4096")
FORMATS = ("bf16", "fp8_channel")


def main(dest: Path) -> int:
    from moe_select.backends.triton_moe_kernels import load_config_file
    from tune_triton_moe import files_from_log

    cur, minm = dest / "curh200", dest / "minmh200"
    for d in (cur, minm):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "tune_log.json"
        log.write_bytes(gzip.decompress(LOG.read_bytes()))
        files_from_log(log, Path(tmp) / "tune")
        tuned = {p.name: json.loads(p.read_text()) for p in (Path(tmp) / "tune" / "triton_configs").glob("*.json")}
    changed = 0
    for path in sorted(CONFIGS.glob("*device=NVIDIA_H200.json")):
        shutil.copy(path, cur / path.name)
        doc = json.loads(path.read_text())
        if path.name.startswith(LAYERS) and any(f"format={f}," in path.name for f in FORMATS) and path.name in tuned:
            old = json.loads(subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE}:{path.relative_to(ROOT)}"],
                                            capture_output=True, text=True, check=True).stdout)
            for tok in ("2048", "8192"):
                tile = json.loads(json.dumps(tuned[path.name]["configs"][tok]))
                if doc["configs"][tok] != old["configs"][tok]:
                    continue                       # the tune's tile was taken there: not part of this A/B
                added = {g: old["configs"][tok][g]["MIN_M"] for g in ("gemm1", "gemm2")
                         if old["configs"][tok][g].get("MIN_M", 0) and old["configs"][tok][g]["MIN_M"] < tile["BLOCK_M"]}
                if not added:
                    continue
                for g, m in added.items():
                    tile[g]["MIN_M"] = m
                doc["configs"][tok] = tile
                changed += 1
                print(f"{path.name} {tok}: the tune's tile with MIN_M {added}")
        (minm / path.name).write_text(json.dumps(doc, indent=1) + "\n")
        load_config_file(str(minm / path.name))
    print(f"{changed} buckets changed; sets in {cur} and {minm}")
    return 0 if changed else 1


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1] if len(sys.argv) > 1 else ".device")))
