"""FlashInfer's JIT state, for planning: is the CUTLASS fused-MoE module for an arch prebuilt (no JIT
build of tens of minutes at the first call)? Torch-free and imports nothing of FlashInfer; named by
``jit.detect`` in ``flashinfer_cutlass.yaml`` and called by :func:`moe_select.environment.detect`.
Follows flashinfer-python 0.6.4's own lookup (flashinfer-ai/flashinfer@v0.6.4:flashinfer/jit/env.py,
flashinfer/jit/core.py ``JitSpec.is_aot``/``is_compiled``)."""
from __future__ import annotations

import glob
import importlib.util
import os
from pathlib import Path

from moe_select.environment import detect_gpu, detect_package

#: FlashInfer's CUTLASS fused-MoE JIT module per arch: ``fused_moe_<backend>`` where the backend is
#: chosen from the compute capability (flashinfer-ai/flashinfer@v0.6.4:flashinfer/fused_moe/core.py:
#: get_cutlass_fused_moe_module).
MOE_BACKEND = {"sm89": "89", "sm90": "90", "sm100": "100", "sm110": "100", "sm103": "103", "sm120": "120", "sm121": "120"}


def detect_prebuilt(arch: str | None = None) -> bool:
    """True when FlashInfer's CUTLASS fused-MoE module for ``arch`` (default: GPU 0, via nvidia-smi)
    loads without compiling:

    1. ``flashinfer-jit-cache`` installed with a version that starts with flashinfer-python's (FlashInfer
       refuses a mismatch at import: False) and holds ``fused_moe_<backend>/fused_moe_<backend>.so``;
    2. without it, the AOT directory inside the package, ``flashinfer/data/aot/fused_moe_<backend>/...so``;
    3. in both cases, a module this machine already JIT-built, under ``$FLASHINFER_WORKSPACE_BASE`` (default
       ``~``) ``/.cache/flashinfer/<version>/<archs>/cached_ops/fused_moe_<backend>/...so``.
    An arch without a CUTLASS MoE module (cpu, AMD) gives False."""
    backend = MOE_BACKEND.get(arch if arch is not None else detect_gpu()[0])
    fi_version = detect_package("flashinfer-python", None)
    if backend is None or fi_version is None:
        return False
    name = f"fused_moe_{backend}"
    rel = Path(name) / f"{name}.so"

    def origin_dir(module: str) -> Path | None:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        return Path(spec.origin).parent if spec is not None and spec.origin else None

    cache_version = detect_package("flashinfer-jit-cache", "flashinfer_jit_cache")
    if cache_version is not None:
        if cache_version != "unknown" and not cache_version.startswith(fi_version):
            return False  # FlashInfer raises at import on this mismatch
        cache = origin_dir("flashinfer_jit_cache")
        if cache is not None and any(p.is_file() for p in cache.rglob(str(rel))):
            return True
    else:
        pkg = origin_dir("flashinfer")
        if pkg is not None and (pkg / "data" / "aot" / rel).is_file():
            return True
    base = os.environ.get("FLASHINFER_WORKSPACE_BASE") or os.path.expanduser("~")
    pattern = os.path.join(glob.escape(base), ".cache", "flashinfer", glob.escape(fi_version), "*", "cached_ops", str(rel))
    return bool(glob.glob(pattern))
