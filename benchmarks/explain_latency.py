"""Latency of planning: `moe-select explain` over every startup case (tests/cases/startup_cases.yaml).

Prints a table: per case, the in-process selection time (median of 20, catalog cached as in a long-lived
engine process), the first call in a fresh interpreter (catalog load included), and the whole CLI call
(interpreter start included). Run: `python benchmarks/explain_latency.py`. No GPU needed.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "cases" / "startup_cases.yaml"


def main() -> None:
    import moe_select

    cases = yaml.safe_load(CASES.read_text())["cases"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            dep = dict(case["deployment"])
            if "model_config" in dep:
                dep["model_config"] = str((CASES.parent / dep["model_config"]).resolve())
            f = Path(tmp) / f"{case['id']}.yaml"
            f.write_text(yaml.safe_dump(dep))
            moe_select.explain(f)  # warm the catalog cache
            times = []
            for _ in range(20):
                t = time.perf_counter()
                moe_select.explain(f)
                times.append(time.perf_counter() - t)
            code = ("import time; t = time.perf_counter(); import moe_select, sys; "
                    f"moe_select.explain({str(f)!r}); print(time.perf_counter() - t); "
                    "assert 'torch' not in sys.modules")
            first = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "moe_select", "explain", "-d", str(f), "--json"], capture_output=True)
            cli = time.perf_counter() - t
            rows.append((case["id"], statistics.median(times) * 1e3, first * 1e3, cli * 1e3))
    w = max(len(r[0]) for r in rows)
    print(f"{'case':<{w}}  {'selection ms':>12}  {'first call ms':>13}  {'CLI ms':>7}")
    for r in rows:
        print(f"{r[0]:<{w}}  {r[1]:>12.1f}  {r[2]:>13.1f}  {r[3]:>7.0f}")


if __name__ == "__main__":
    main()
