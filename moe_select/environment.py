"""The environment: machine facts that decide what can run (arch, packages, toolchain), collected once.

Two sources, never mixed inside one report: *declared* (the deployment's ``packages``, ``nvcc``,
``cuda``, ``prebuilt``, when planning for another machine; a fact left out is assumed present and the
report says so) or *detected* (this machine, for ``arch: auto`` and for ``resolve``).
Detection here imports no torch: GPUs come from ``nvidia-smi``, packages from their installed metadata
(``importlib.metadata``, nothing is imported), nvcc from ``nvcc --version``. ``resolve`` re-detects the
arch through torch.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .errors import MoeSelectError
from .vocab import arch_of_capability

if TYPE_CHECKING:
    from .capability import PackageMarkers


class Environment(BaseModel):
    """Machine facts. ``packages`` maps a distribution name to its version (None: not installed);
    a name not in the map is unknown. ``detected`` says whether these were read from this machine.
    ``provenance`` says where each fact came from; ``packages.<name>`` there: a distribution detection found for
    package ``name`` that is not it (a look-alike, issue 21), and why (:meth:`lookalike`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    detected: bool
    arch: str | None = None
    gpu: str | None = None
    packages: dict[str, str | None] = {}
    nvcc: str | None = None
    cuda: str | None = None
    #: JIT package (distribution) -> True when its kernels are prebuilt (no build at the first call),
    #: False when the first call would build, None when not known.
    prebuilt: dict[str, bool | None] = {}
    provenance: dict[str, str] = {}

    def package(self, name: str, module: str | None = None) -> tuple[str, str | None]:
        """``("present", version)``, ``("absent", None)`` or ``("assumed", None)`` for a distribution
        (also looked up by its import name, ``-``/``_`` and case forgiven)."""
        keys = {normalize_package_name(name)} | ({normalize_package_name(module)} if module else set())
        for k, v in self.packages.items():
            if normalize_package_name(k) in keys:
                return ("absent", None) if v is None else ("present", v)
        return ("absent", None) if self.detected else ("assumed", None)

    def lookalike(self, name: str) -> str | None:
        """Why what detection found for package ``name`` is not it (a look-alike), or None."""
        return self.provenance.get(f"packages.{name}")

    def lookalikes(self) -> dict[str, str]:
        """Package -> why the distribution detection found for it is not it (issue 21)."""
        return {k.split(".", 1)[1]: v for k, v in sorted(self.provenance.items()) if k.startswith("packages.")}


def normalize_package_name(name: str) -> str:
    """A distribution or module name in one form (PEP 503: runs of ``-``, ``_``, ``.`` are one separator; case folded)."""
    return re.sub(r"[-_.]+", "_", name).lower()



def declared(*, packages: dict[str, str | None] | None, nvcc: str | None, cuda: str | None,
             prebuilt: dict[str, bool] | None, where: str) -> Environment:
    """Environment of another machine, from a deployment's declared facts (``where``: its file)."""
    prov = {}
    for key, val in (("packages", packages), ("nvcc", nvcc), ("cuda", cuda), ("prebuilt", prebuilt)):
        prov[key] = f"declared in {where}" if val is not None else "not declared: assumed present/adequate"
    return Environment(detected=False, packages=dict(packages or {}), nvcc=nvcc, cuda=cuda,
                       prebuilt=dict(prebuilt or {}), provenance=prov)


class DetectionError(MoeSelectError):
    """This machine's GPU could not be detected for ``arch: auto`` (a tool failed, hung, or reported what
    is no architecture). Planning refuses rather than plan for the wrong machine."""


#: Seconds ``nvidia-smi`` may take before detection gives up (it answers in well under a second on a
#: healthy machine; a hung driver makes it hang).
SMI_TIMEOUT_S = 5.0
#: amdkfd's topology: one folder per node, ``properties`` holds ``gfx_target_version`` (0 on CPU
#: nodes). Linux drivers/gpu/drm/amd/amdkfd/kfd_topology.c (node_show); what rocminfo reads too.
KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
#: The NVIDIA driver's control device: present wherever an NVIDIA driver is loaded.
NVIDIACTL = Path("/dev/nvidiactl")


def detect_gpu(*, timeout_s: float = SMI_TIMEOUT_S, kfd_nodes: Path = KFD_NODES,
               env: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """``(arch, product name)`` of GPU 0 without importing torch; ``("cpu", None)`` when the machine has
    no GPU, or when ``CUDA_VISIBLE_DEVICES`` hides every GPU (``""``, ``"-1"``: torch then sees none either).
    ``env``: the environment the GPUs are seen from (a launch line's, which the engine will run with); default
    this process's (``os.environ``). Its ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` are read.
    NVIDIA: ``nvidia-smi --query-gpu=name,compute_cap`` (driver >= 510), limited to the GPUs a set
    ``CUDA_VISIBLE_DEVICES`` names (indices or UUIDs: :func:`_visible_gpus`). AMD: the amdkfd topology
    in sysfs (``gfx_target_version`` 90402 -> gfx942). Raises :class:`DetectionError` when nvidia-smi
    exits non-zero, hangs past ``timeout_s`` seconds or prints what cannot be read, or when an NVIDIA driver
    is loaded but nvidia-smi is missing. A GPU of an architecture no vocabulary declares (compute capability
    13.0 -> ``sm130``, ``gfx1201``) is returned as it is: the selector judges it."""
    import shutil
    import subprocess

    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    chosen = visible_entries(visible) if visible is not None else None
    if chosen == []:  # CUDA_VISIBLE_DEVICES="" (or starting with an invalid entry): CUDA, and so torch, sees no GPU
        return "cpu", None
    smi = shutil.which("nvidia-smi")
    if smi:
        fields = "index,uuid,name,compute_cap" if chosen else "name,compute_cap"
        cmd = [smi, f"--query-gpu={fields}", "--format=csv,noheader"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=timeout_s)
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
        gpus: list[tuple[str, str]] = []
        ids: list[tuple[str, str]] = []  # (index, uuid) of each GPU, when CUDA_VISIBLE_DEVICES chooses among them
        for line in lines:
            try:
                head, cap = [x.strip() for x in line.rsplit(",", 1)]
                if chosen:
                    index, uuid, name = [x.strip() for x in head.split(",", 2)]
                    ids.append((index, uuid))
                else:
                    name = head
                major, minor = cap.split(".")
                gpus.append((name, arch_of_capability(int(major), int(minor))))
            except ValueError:
                expected = "index, uuid, name, X.Y" if chosen else "name, X.Y"
                raise DetectionError(f"cannot read nvidia-smi's answer {line[:120]!r} (expected '{expected}'): give gpu/arch "
                                     "to plan explicitly") from None
        if chosen:
            gpus = _visible_gpus(gpus, ids, chosen, str(visible), env.get("CUDA_DEVICE_ORDER"))
        kinds = sorted(set(gpus))
        if len(kinds) > 1:  # one plan serves one kind of GPU: never the first one silently
            listed = ", ".join(f"{n} ({a}) x{gpus.count((n, a))}" for n, a in kinds)
            raise DetectionError(f"this machine has GPUs of different kinds ({listed}): give gpu/arch of the ones the "
                                 "deployment runs on to plan explicitly")
        name, arch = gpus[0]
        return _known(arch, name), name
    amd = _amd_gfx(kfd_nodes)
    if amd is not None:
        return _known(amd, None), None
    if NVIDIACTL.exists():
        raise DetectionError(f"an NVIDIA driver is loaded ({NVIDIACTL} exists) but nvidia-smi is not on PATH: cannot tell "
                             "this machine's GPU; put nvidia-smi on PATH, or give gpu/arch to plan explicitly")
    return "cpu", None


def visible_entries(value: str) -> list[str]:
    """The GPUs ``CUDA_VISIBLE_DEVICES=value`` makes visible, as written: indices (``"1"``) and UUIDs (``"GPU-8f..."``,
    a prefix is enough), up to the first entry CUDA cannot read (CUDA ignores it and every entry after it, so
    ``""`` and ``"-1"`` hide every GPU: an empty list). ``MIG-`` entries are kept as written (their GPU is
    looked up by the UUID in them, which nvidia-smi does not list: :func:`_visible_gpus` refuses them)."""
    out: list[str] = []
    for entry in (e.strip() for e in value.split(",")):
        if entry.isdigit() or entry.startswith(("GPU-", "MIG-")):
            out.append(entry)
        else:
            break
    return out


def _visible_gpus(gpus: list[tuple[str, str]], ids: list[tuple[str, str]], chosen: list[str],
                  value: str, order: str | None = None) -> list[tuple[str, str]]:
    """``(name, arch)`` of the GPUs ``CUDA_VISIBLE_DEVICES`` (``value``, read as ``chosen``) leaves visible, from
    nvidia-smi's list (``gpus``, and ``ids``: each one's ``(index, uuid)``). Indices are nvidia-smi's (PCI bus
    order); CUDA numbers GPUs fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (``order``), so an index on a machine of
    mixed GPUs without that order is refused, as are MIG entries and entries that match no GPU
    (:class:`DetectionError`): detection never guesses which GPU the engine will get."""
    kinds = set(gpus)
    out: list[tuple[str, str]] = []
    for entry in chosen:
        if entry.startswith("MIG-"):
            raise DetectionError(f"CUDA_VISIBLE_DEVICES={value!r} names a MIG instance ({entry[:40]}): detection does not "
                                 "read MIG instances; give gpu/arch to plan explicitly")
        if entry.isdigit():
            if len(kinds) > 1 and order != "PCI_BUS_ID":
                raise DetectionError(f"CUDA_VISIBLE_DEVICES={value!r} chooses GPUs by index on a machine with GPUs of "
                                     "different kinds, and CUDA numbers them fastest first unless CUDA_DEVICE_ORDER="
                                     "PCI_BUS_ID (nvidia-smi's order): set that, choose them by UUID, or give gpu/arch "
                                     "to plan explicitly")
            hits = [i for i, (index, _) in enumerate(ids) if index == entry]
        else:
            hits = [i for i, (_, uuid) in enumerate(ids) if uuid.startswith(entry)]
        if len(hits) != 1:
            raise DetectionError(f"CUDA_VISIBLE_DEVICES={value!r}: {entry[:60]!r} matches "
                                 f"{'no GPU' if not hits else 'several GPUs'} nvidia-smi lists ({len(ids)} GPU(s)); give "
                                 "gpu/arch to plan explicitly")
        out.append(gpus[hits[0]])
    return out


def _known(arch: str, name: str | None) -> str:
    """``arch`` as a base arch name (:func:`moe_select.vocab.normalize_arch`): an architecture no vocabulary
    declares (a new GPU, compute capability 13.0 -> sm130) is returned, for the selector to judge. Raises
    :class:`DetectionError` only when what the tool reported is no architecture name at all."""
    from .vocab import normalize_arch

    try:
        return normalize_arch(arch)
    except ValueError:
        what = f"{name} ({arch[:40]!r})" if name else repr(arch[:40])
        raise DetectionError(f"this machine's GPU reported {what}, which is no architecture name: give gpu/arch to "
                             "plan explicitly") from None


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
    import shutil
    import subprocess

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


@dataclass(frozen=True)
class Found:
    """What detection found of one package: its ``version`` (``"unknown"``: the module is there without a version;
    None: absent, or only a look-alike is there) and, when a distribution or module was found that is not the
    package, ``lookalike``: which one and why (issue 21)."""

    version: str | None
    lookalike: str | None = None


#: METADATA fields that name a project's home, authors and maintainers (core metadata 2.x): where
#: ``PackageMarkers.metadata`` is looked for.
MARKER_FIELDS = ("Home-page", "Download-URL", "Project-URL", "Author", "Author-email", "Maintainer", "Maintainer-email")


def _marker_hit(markers: "PackageMarkers", dist: Any, module: str | None, path: list[str] | None) -> str | None:
    """The marker ``dist`` carries (``"RECORD lists ..."``, ``"METADATA names ..."``, ``"... next to the module"``),
    or None. Reads the distribution's RECORD and METADATA, and the module's folder when the RECORD lists no file
    of the module (an editable install); imports nothing."""
    from fnmatch import fnmatchcase

    files = [str(f).replace("\\", "/") for f in (dist.files or [])]
    for pattern in markers.files:
        hit = next((f for f in files if fnmatchcase(f, pattern)), None)
        if hit is not None:
            return f"its RECORD lists {hit}"
    meta = dist.metadata
    texts = [v for key in MARKER_FIELDS for v in (meta.get_all(key) or [])]
    for want in markers.metadata:
        hit = next((t for t in texts if want.lower() in t.lower()), None)
        if hit is not None:
            return f"its METADATA names {want}"
    if module and not any(f == f"{module}.py" or f.startswith(f"{module}/") for f in files):
        return _folder_hit(markers, module, path)
    return None


def _module_folder(module: str, path: list[str] | None) -> Path | None:
    """The folder that holds top-level ``module`` (its package folder's or file's parent), found without importing
    it; None when it is not found."""
    import importlib.machinery
    import importlib.util

    try:
        spec = (importlib.machinery.PathFinder.find_spec(module, path) if path is not None
                else importlib.util.find_spec(module))
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if locations:
        return Path(locations[0]).parent
    return Path(spec.origin).parent if spec.origin and spec.origin not in ("built-in", "frozen") else None


def _folder_hit(markers: "PackageMarkers", module: str, path: list[str] | None) -> str | None:
    """The marker file found next to ``module`` on disk (``markers.files`` matched in the folder holding it), or
    None."""
    folder = _module_folder(module, path)
    if folder is None:
        return None
    for pattern in markers.files:
        hit = next(iter(folder.glob(pattern)), None)
        if hit is not None:
            return f"{hit.relative_to(folder).as_posix()} lies next to the module ({folder})"
    return None


def _why_not(markers: "PackageMarkers") -> str:
    bits = []
    if markers.files:
        bits.append(f"lists none of {', '.join(markers.files)}")
    if markers.metadata:
        bits.append(f"names none of {', '.join(markers.metadata)} (home page, URLs, authors)")
    return " and ".join(bits)


def inspect_package(name: str, module: str | None, markers: "PackageMarkers | None" = None, *,
                    path: list[str] | None = None) -> Found:
    """Detect distribution ``name`` (import name ``module``) as installed, without importing anything.

    Without ``markers``: its version, else ``"unknown"`` when only the module can be found, else absent. With
    ``markers`` (``backends/packages.yaml``), each distribution found for it (``name``, then
    ``markers.distributions``, then the distribution that installed ``module``) must carry one of the real
    package's markers (:class:`~moe_select.capability.PackageMarkers`): the first that does gives the version
    (``"unknown"`` for an owner the row does not name); a module found without a distribution is judged by the
    files next to it. What carries none is a look-alike: absent, and ``Found.lookalike`` says which distribution
    (version, folder) was found and why it is not the package. ``path``: the folders to search (default
    ``sys.path``)."""
    import importlib.metadata as md

    def find(dist_name: str) -> Any:
        try:
            if path is None:
                return md.distribution(dist_name)
            return next(iter(md.distributions(name=dist_name, path=path)), None)
        except (md.PackageNotFoundError, ValueError):
            return None

    if markers is None:
        dist = find(name)
        if dist is not None:
            return Found(dist.version)
        if module and _module_folder(module, path) is not None:
            return Found("unknown")
        return Found(None)

    names = {normalize_package_name(n) for n in (name, *markers.distributions)}

    def candidates() -> Iterator[tuple[Any, bool]]:
        """(distribution, whether the row names it: its version is then the package's), the named ones first; the
        module's owners are looked for only when no named one is the package and the module is there."""
        for dist_name in [name, *markers.distributions]:
            dist = find(dist_name)
            if dist is not None:
                yield dist, True
        if module and _module_folder(module, path) is not None:
            for owner in _owners(module, path):
                yield owner, normalize_package_name(owner.metadata["Name"] or "") in names

    seen: list[str] = []
    first = None
    for dist, named in candidates():
        label = f"{dist.metadata['Name']} {dist.version}"
        if label in seen:
            continue
        seen.append(label)
        first = first or dist
        if _marker_hit(markers, dist, module, path) is not None:
            return Found(dist.version if named else "unknown")
    if seen:
        where = _dist_folder(first)
        return Found(None, f"found distribution {', '.join(seen)}" + (f" ({where})" if where else "")
                     + f", which is not {name}: its RECORD and METADATA {_why_not(markers)}"
                     + (f" ({markers.lookalikes})" if markers.lookalikes else "") + " [" + markers.where() + "]")
    if module:
        folder = _module_folder(module, path)
        if folder is not None:
            if _folder_hit(markers, module, path) is not None:
                return Found("unknown")
            return Found(None, f"found module {module} in {folder} without a distribution, which is not {name}: none of "
                         f"{', '.join(markers.files) or 'its marker files'} lies next to it"
                         + (f" ({markers.lookalikes})" if markers.lookalikes else "") + " [" + markers.where() + "]")
    return Found(None)


def _owners(module: str, path: list[str] | None) -> list[Any]:
    """The installed distributions whose RECORD (or top_level.txt) provides top-level ``module``."""
    import importlib.metadata as md

    out = []
    for dist in (md.distributions(path=path) if path is not None else md.distributions()):
        top = (dist.read_text("top_level.txt") or "").split()
        files = [str(f).replace("\\", "/") for f in (dist.files or [])]
        if module in top or any(f.startswith(f"{module}/") or f == f"{module}.py" for f in files):
            out.append(dist)
    return out


def _dist_folder(dist: Any) -> str | None:
    """The folder holding ``dist``'s metadata (``*.dist-info`` / ``*.egg-info``), when it says."""
    where = getattr(dist, "_path", None)
    return str(where) if where is not None else None


def detect_package(name: str, module: str | None, markers: "PackageMarkers | None" = None, *,
                   path: list[str] | None = None) -> str | None:
    """Installed version of distribution ``name`` (or ``"unknown"`` when only module ``module`` is
    importable without metadata), None when absent or only a look-alike is installed
    (:func:`inspect_package`). Imports nothing."""
    return inspect_package(name, module, markers, path=path).version


def detect(packages: Iterable[tuple[str, str | None]], *, arch: tuple[str, str | None] | None = None,
           need_nvcc: bool = True, jit: Iterable[tuple[str, str | None]] = (),
           markers: Mapping[str, "PackageMarkers"] | None = None, env: Mapping[str, str] | None = None) -> Environment:
    """Detect this machine. ``packages``: (distribution, module) pairs of interest (from the catalog).
    ``arch``: an already-detected ``(arch, gpu)`` (resolve passes torch's view). ``jit``: (JIT package,
    torch-free detection module) pairs from the capability files' ``jit`` facts; each module's
    ``detect_prebuilt(arch)`` decides ``prebuilt[package]`` (a module that fails to load or raises
    leaves it None: not known). ``markers``: distribution -> what tells it from a look-alike
    (``Catalog.package_markers``): a look-alike is absent, and ``provenance["packages.<name>"]`` says which
    distribution was found and why it is not the package (:func:`inspect_package`). ``env``: the environment
    the GPUs are seen from (:func:`detect_gpu`; default ``os.environ``). Raises :class:`DetectionError` when
    the GPU cannot be told."""
    import importlib

    env = os.environ if env is None else env
    a, gpu = arch if arch is not None else detect_gpu(env=env)
    pk: dict[str, str | None] = {}
    lookalikes: dict[str, str] = {}
    for name, module in packages:
        found = inspect_package(name, module, (markers or {}).get(name))
        pk[name] = found.version
        if found.lookalike:
            lookalikes[f"packages.{name}"] = found.lookalike
    prebuilt: dict[str, bool | None] = {}
    for package, module in jit:
        if module is None:
            prebuilt[package] = None
            continue
        try:
            prebuilt[package] = bool(importlib.import_module(module).detect_prebuilt(a))
        except Exception:  # noqa: BLE001 - a broken detector means "not known", never a crash of planning
            prebuilt[package] = None
    visible = env.get("CUDA_VISIBLE_DEVICES")
    how = "nvidia-smi / amdkfd" + (f", CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "")
    prov = {"arch": "detected (torch.cuda)" if arch else f"detected ({how})", "packages": "detected (importlib.metadata)",
            "nvcc": "detected (nvcc --version)", "prebuilt": "detected (each JIT package's detect_prebuilt)", **lookalikes}
    return Environment(detected=True, arch=a, gpu=gpu, packages=pk, nvcc=detect_nvcc() if need_nvcc else None,
                       prebuilt=prebuilt, provenance=prov)
