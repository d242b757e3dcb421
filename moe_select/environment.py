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

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .errors import MoeSelectError
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


class DetectionError(MoeSelectError):
    """This machine's GPU could not be detected for ``arch: auto`` (a tool failed, hung, or reported a
    GPU that moe-select has no facts for). Planning refuses rather than plan for the wrong machine."""


#: Seconds ``nvidia-smi`` may take before detection gives up (it answers in well under a second on a
#: healthy machine; a hung driver makes it hang).
SMI_TIMEOUT_S = 5.0
#: amdkfd's topology: one folder per node, ``properties`` holds ``gfx_target_version`` (0 on CPU
#: nodes). Linux drivers/gpu/drm/amd/amdkfd/kfd_topology.c (node_show); what rocminfo reads too.
KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")


def detect_gpu(*, timeout_s: float = SMI_TIMEOUT_S, kfd_nodes: Path = KFD_NODES) -> tuple[str, str | None]:
    """``(arch, product name)`` of GPU 0 without importing torch; ``("cpu", None)`` when the machine has
    no GPU. NVIDIA: ``nvidia-smi --query-gpu=name,compute_cap`` (driver >= 510). AMD: the amdkfd topology
    in sysfs (``gfx_target_version`` 90402 -> gfx942). Raises :class:`DetectionError` when nvidia-smi
    exits non-zero, hangs past ``timeout_s`` seconds or prints what cannot be read, when an NVIDIA driver
    is loaded but nvidia-smi is missing, or when the GPU's arch is not one moe-select has facts for."""
    smi = shutil.which("nvidia-smi")
    if smi:
        cmd = [smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise DetectionError(f"nvidia-smi did not answer within {timeout_s:g} s (a hung driver?): cannot tell this "
                                 "machine's GPU; fix the driver, or give gpu/arch to plan explicitly") from None
        except OSError as exc:
            raise DetectionError(f"nvidia-smi ({smi}) could not run: {exc}; give gpu/arch to plan explicitly") from None
        said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        if proc.returncode != 0:
            raise DetectionError(f"nvidia-smi exited with code {proc.returncode}"
                                 + (f" ({said[0][:200]})" if said else "") + ": cannot tell this machine's GPU; fix the "
                                 "driver, or give gpu/arch to plan explicitly")
        lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
        if not lines:
            raise DetectionError("nvidia-smi listed no GPU although it ran: give gpu/arch to plan explicitly")
        try:
            name, cap = [x.strip() for x in lines[0].rsplit(",", 1)]
            major, minor = cap.split(".")
            arch = arch_of_capability(int(major), int(minor))
        except ValueError:
            raise DetectionError(f"cannot read nvidia-smi's answer {lines[0][:120]!r} (expected 'name, X.Y'): give gpu/arch "
                                 "to plan explicitly") from None
        return _known(arch, name), name
    amd = _amd_gfx(kfd_nodes)
    if amd is not None:
        return _known(amd, None), None
    if os.path.exists("/dev/nvidiactl"):
        raise DetectionError("an NVIDIA driver is loaded (/dev/nvidiactl exists) but nvidia-smi is not on PATH: cannot tell "
                             "this machine's GPU; put nvidia-smi on PATH, or give gpu/arch to plan explicitly")
    return "cpu", None


def _known(arch: str, name: str | None) -> str:
    from .vocab import ARCHS

    if arch not in ARCHS:
        what = f"{name} ({arch})" if name else arch
        raise DetectionError(f"this machine's GPU is {what}, an architecture moe-select has no facts for (known: "
                             f"{', '.join(a for a in ARCHS if a != 'cpu')})")
    return arch


def _amd_gfx(nodes: Path) -> str | None:
    """gfx target of the first AMD GPU node in the amdkfd topology (``gfx_target_version`` major*10000 +
    minor*100 + stepping; minor and stepping are hex digits in the name: 90010 -> gfx90a), or None."""
    try:
        folders = sorted(nodes.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0)
    except OSError:
        return None
    for node in folders:
        try:
            props = (node / "properties").read_text()
        except OSError:
            continue
        m = re.search(r"^gfx_target_version\s+(\d+)\s*$", props, re.M)
        if m and int(m.group(1)) > 0:
            v = int(m.group(1))
            return f"gfx{v // 10000}{(v // 100) % 100:x}{v % 100:x}"
    return None


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
