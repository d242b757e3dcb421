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

    model_config = ConfigDict(extra="forbid", frozen=True)

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
        keys = {_norm(name)} | ({_norm(module)} if module else set())
        for k, v in self.packages.items():
            if _norm(k) in keys:
                return ("absent", None) if v is None else ("present", v)
        return ("absent", None) if self.detected else ("assumed", None)


def _norm(name: str) -> str:
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


def detect_flashinfer_prebuilt() -> bool:
    """True when FlashInfer's kernels are prebuilt: the ``flashinfer-jit-cache`` distribution is
    installed (FlashInfer >= 0.5 ships JIT modules there; without it the first call JIT-compiles)."""
    return detect_package("flashinfer-jit-cache", "flashinfer_jit_cache") is not None


def detect(packages: Iterable[tuple[str, str | None]], *, arch: tuple[str, str | None] | None = None,
           need_nvcc: bool = True) -> Environment:
    """Detect this machine. ``packages``: (distribution, module) pairs of interest (from the catalog).
    ``arch``: an already-detected ``(arch, gpu)`` (resolve passes torch's view)."""
    a, gpu = arch if arch is not None else detect_gpu()
    pk = {name: detect_package(name, module) for name, module in packages}
    prov = {"arch": "detected (torch.cuda)" if arch else "detected (nvidia-smi)", "packages": "detected (importlib.metadata)",
            "nvcc": "detected (nvcc --version)", "flashinfer_prebuilt": "detected (flashinfer-jit-cache installed?)"}
    return Environment(detected=True, arch=a, gpu=gpu, packages=pk, nvcc=detect_nvcc() if need_nvcc else None,
                       flashinfer_prebuilt=detect_flashinfer_prebuilt(), provenance=prov)
