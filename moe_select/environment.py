"""The environment: machine facts that decide what can run (arch, packages, toolchain), collected once.

Two sources, never mixed inside one report: *declared* (the deployment's ``packages``, ``nvcc``,
``cuda``, ``flashinfer_prebuilt``, when planning for another machine; a fact left out is assumed
present and the report says so) or *detected* (this machine, for ``arch: auto`` and for ``resolve``).
Detection here imports no torch: GPUs come from ``nvidia-smi``, packages from their installed metadata
(``importlib.metadata``, nothing is imported), nvcc from ``nvcc --version``. ``resolve`` re-detects the
arch through torch.
"""
from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import re
import shutil
import subprocess
from typing import Iterable

from pydantic import BaseModel, ConfigDict

from .vocab import arch_of_capability


class Environment(BaseModel):
    """Machine facts. ``packages`` maps a distribution name to its version (None: not installed);
    a name not in the map is unknown. ``detected`` says whether these were read from this machine."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    detected: bool
    arch: str | None = None
    gpu: str | None = None
    packages: dict[str, str | None] = {}
    nvcc: str | None = None
    cuda: str | None = None
    flashinfer_prebuilt: bool | None = None
    provenance: dict[str, str] = {}

    def package(self, name: str, module: str | None = None) -> tuple[str, str | None]:
        """``("present", version)``, ``("absent", None)`` or ``("assumed", None)`` for a distribution
        (also looked up by its import name, ``-``/``_`` and case forgiven)."""
        keys = {normalize_package_name(name)} | ({normalize_package_name(module)} if module else set())
        for k, v in self.packages.items():
            if normalize_package_name(k) in keys:
                return ("absent", None) if v is None else ("present", v)
        return ("absent", None) if self.detected else ("assumed", None)


def normalize_package_name(name: str) -> str:
    """A distribution or module name in one form (PEP 503: runs of ``-``, ``_``, ``.`` are one separator; case folded)."""
    return re.sub(r"[-_.]+", "_", name).lower()



def declared(*, packages: dict[str, str | None] | None, nvcc: str | None, cuda: str | None,
             flashinfer_prebuilt: bool | None, where: str) -> Environment:
    """Environment of another machine, from a deployment's declared facts (``where``: its file)."""
    prov = {}
    for key, val in (("packages", packages), ("nvcc", nvcc), ("cuda", cuda), ("flashinfer_prebuilt", flashinfer_prebuilt)):
        prov[key] = f"declared in {where}" if val is not None else "not declared: assumed present/adequate"
    return Environment(detected=False, packages=dict(packages or {}), nvcc=nvcc, cuda=cuda,
                       flashinfer_prebuilt=flashinfer_prebuilt, provenance=prov)


def detect_gpu() -> tuple[str, str | None]:
    """``(arch, product name)`` of GPU 0 without importing torch; ``("cpu", None)`` when none is seen.

    Reads ``nvidia-smi --query-gpu=name,compute_cap`` (NVIDIA driver >= 510)."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10).stdout.strip().splitlines()
            if out:
                name, cap = [s.strip() for s in out[0].rsplit(",", 1)]
                major, minor = cap.split(".")
                return arch_of_capability(int(major), int(minor)), name
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    return "cpu", None


def detect_nvcc() -> str | None:
    """``release X.Y`` of the nvcc on PATH (or in $CUDA_HOME/bin), or None."""
    candidates = [shutil.which("nvcc")]
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc"))
    for nvcc in filter(None, candidates):
        try:
            out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        m = re.search(r"release (\d+\.\d+)", out)
        if m:
            return m.group(1)
    return None


def detect_package(name: str, module: str | None) -> str | None:
    """Installed version of distribution ``name`` (or ``"unknown"`` when only module ``module`` is
    importable without metadata), None when absent. Imports nothing."""
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        pass
    if module:
        try:
            if importlib.util.find_spec(module) is not None:
                return "unknown"
        except (ImportError, ValueError):
            pass
    return None


#: FlashInfer's CUTLASS fused-MoE JIT module per arch: ``fused_moe_<backend>`` where the backend is
#: chosen from the compute capability in flashinfer/fused_moe/core.py (0.6.4: get_cutlass_fused_moe_module).
_FI_MOE_BACKEND = {"sm89": "89", "sm90": "90", "sm100": "100", "sm110": "100", "sm103": "103", "sm120": "120", "sm121": "120"}


def detect_flashinfer_prebuilt(arch: str | None = None) -> bool:
    """True when FlashInfer's CUTLASS fused-MoE module for ``arch`` (default: GPU 0, via nvidia-smi)
    loads without compiling. Imports nothing (FlashInfer would import torch); follows flashinfer-python
    0.6.4's own lookup (flashinfer/jit/env.py, jit/core.py ``JitSpec.is_aot``/``is_compiled``):

    1. ``flashinfer-jit-cache`` installed with a version that starts with flashinfer-python's (FlashInfer
       refuses a mismatch at import: False) and holds ``fused_moe_<backend>/fused_moe_<backend>.so``;
    2. without it, the AOT directory inside the package, ``flashinfer/data/aot/fused_moe_<backend>/...so``;
    3. in both cases, a module this machine already JIT-built, under ``$FLASHINFER_WORKSPACE_BASE`` (default
       ``~``) ``/.cache/flashinfer/<version>/<archs>/cached_ops/fused_moe_<backend>/...so``.
    An arch without a CUTLASS MoE module (cpu, AMD) gives False."""
    import glob
    from pathlib import Path

    backend = _FI_MOE_BACKEND.get(arch if arch is not None else detect_gpu()[0])
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


def detect(packages: Iterable[tuple[str, str | None]], *, arch: tuple[str, str | None] | None = None,
           need_nvcc: bool = True) -> Environment:
    """Detect this machine. ``packages``: (distribution, module) pairs of interest (from the catalog).
    ``arch``: an already-detected ``(arch, gpu)`` (resolve passes torch's view)."""
    a, gpu = arch if arch is not None else detect_gpu()
    pk = {name: detect_package(name, module) for name, module in packages}
    prov = {"arch": "detected (torch.cuda)" if arch else "detected (nvidia-smi)", "packages": "detected (importlib.metadata)",
            "nvcc": "detected (nvcc --version)", "flashinfer_prebuilt": "detected (flashinfer-jit-cache installed?)"}
    return Environment(detected=True, arch=a, gpu=gpu, packages=pk, nvcc=detect_nvcc() if need_nvcc else None,
                       flashinfer_prebuilt=detect_flashinfer_prebuilt(a), provenance=prov)
