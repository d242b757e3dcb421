"""Measurement files of ``moe-select tune`` (issue 25): what was timed, where, how, and with what uncertainty.

A :class:`Measurements` file holds, for one MoE layer on one rank (:class:`LayerKey`) on one machine
(:class:`MachineKey`), one :class:`Point` per (runner, token count): the median time per call, its spread
(10th and 90th percentiles of the samples) and the 95 % interval of the median, the number of samples and why
the point stopped (``narrow``: the interval reached the target width; ``budget``: its time budget was spent;
``cannot_win``: its interval lay wholly above the best runner's by more than the margin). ``method`` says how
it was timed and the numbers used (interval, width target, budget, tie rule, drift threshold).

A measurement applies only where both keys match (:func:`layer_key_mismatch`, :func:`machine_key_mismatch`
name the fields that differ). :meth:`Measurements.fingerprint` is the sha256 of the canonical JSON of the whole
file (every field), so a plan can embed the table and its hash.

This module imports no torch (``explain`` reads it); :func:`this_machine` imports torch when called.
The JSON form uses the key ``schema`` for the file format's version (the attribute is ``schema_version``:
pydantic's ``BaseModel.schema`` is taken); :meth:`Measurements.to_dict` / :meth:`Measurements.to_json` write
it, :meth:`Measurements.from_dict` and :func:`load_measurements` read it.
"""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .errors import InputError, Issue

#: The ``kind`` of a measurement file.
KIND = "moe-select-measurements"
#: The file format's version (``schema`` in the JSON).
SCHEMA = 1

#: The interval of the median every point carries (``method.interval``): distribution-free, from order statistics.
#: The fewest samples a point's interval is taken from (with 6, the order-statistic interval is [min, max], 96.9 %).
MIN_INTERVAL_SAMPLES = 6
INTERVAL = ("95 % interval of the median from order statistics (distribution-free): the sorted samples' ranks "
            "l and n+1-l, l the largest rank with P(Binomial(n, 1/2) < l) <= 2.5 %; needs n >= 6 samples")
#: Two runners tie at a token count when their 95 % intervals overlap (``method.tie_rule``).
TIE_RULE = ("two runners tie at a token count when their 95 % intervals of the median overlap; a tie goes to the "
            "runner the rules would choose among them (the rules' order), else to the first by name; ties are reported")
#: Default target of a point's relative half-width ((ci_high - ci_low) / 2 / median).
TARGET_REL_HALF_WIDTH = 0.02
#: Default relative change of a median that ``tune --check`` calls a drift.
DRIFT_THRESHOLD = 0.10
#: Why a point stopped.
Stopped = Literal["narrow", "budget", "cannot_win"]


class LayerKey(BaseModel):
    """The MoE layer on one rank, as the runners see it: ``num_experts`` on this rank, ``hidden_size``,
    ``intermediate_size`` per rank (after the layer's tensor parallelism, ``moe_tp``), ``top_k``,
    ``activation``, ``format`` (the quant format as ``backends/formats.yaml`` names it), ``tp``, ``ep`` and
    the all-to-all backend ``a2a``. Every field can change which runner is fastest."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    num_experts: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    intermediate_size: int = Field(ge=1)
    top_k: int = Field(ge=1)
    activation: str
    format: str
    tp: int = Field(ge=1)
    ep: int = Field(ge=1)
    a2a: str


class MachineKey(BaseModel):
    """The machine and software the times were taken on: ``gpu`` (the device name as torch reports it;
    ``cpu`` on the CPU), ``arch`` (``sm90``, ``gfx942``, ``cpu``), the ``driver``, ``cuda``, ``torch`` and
    ``triton`` versions (None where absent), ``packages`` (the kernel packages the candidates need: name ->
    version, None when absent), ``moe_select`` (this project's version), ``tile_configs`` (sha256 of the tuned
    Triton tile files in use, None when none) and ``cuda_graph`` (whether the times are CUDA-graph replays)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    gpu: str
    arch: str
    driver: str | None
    cuda: str | None
    torch: str | None
    triton: str | None
    packages: dict[str, str | None] = {}
    moe_select: str
    tile_configs: str | None
    cuda_graph: bool


class Point(BaseModel):
    """One runner at one token count: ``samples`` per-call times (microseconds) summarised by their
    ``median_us``, 10th and 90th percentiles (``p10_us``, ``p90_us``) and the 95 % interval of the median
    (``ci_low_us``, ``ci_high_us``; :data:`INTERVAL`), and why the point ``stopped``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    runner: str
    tokens: int = Field(ge=1)
    #: At least :data:`MIN_INTERVAL_SAMPLES`: fewer give no 95 % interval of the median (:data:`INTERVAL`).
    samples: int = Field(ge=MIN_INTERVAL_SAMPLES)
    median_us: float = Field(gt=0)
    p10_us: float = Field(gt=0)
    p90_us: float = Field(gt=0)
    ci_low_us: float = Field(gt=0)
    ci_high_us: float = Field(gt=0)
    stopped: Stopped

    @model_validator(mode="after")
    def _ordered(self) -> "Point":
        if not self.ci_low_us <= self.median_us <= self.ci_high_us:
            raise ValueError(f"ci_low_us <= median_us <= ci_high_us must hold, got {self.ci_low_us} <= {self.median_us} "
                             f"<= {self.ci_high_us}")
        if not self.p10_us <= self.median_us <= self.p90_us:
            raise ValueError(f"p10_us <= median_us <= p90_us must hold, got {self.p10_us} <= {self.median_us} <= {self.p90_us}")
        return self

    @property
    def rel_half_width(self) -> float:
        """Half the interval's width over the median."""
        return (self.ci_high_us - self.ci_low_us) / 2 / self.median_us


class Method(BaseModel):
    """How the points were timed: ``timing`` (``cuda_graph_replay``: one captured forward replayed per sample,
    inputs copied in outside the timed region; ``eager``: one call per sample), the ``interval`` of the median,
    ``target_rel_half_width``, ``budget_s_per_point``, the ``tie_rule`` and the ``drift_threshold`` of
    ``tune --check``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    timing: Literal["cuda_graph_replay", "eager"]
    interval: str
    target_rel_half_width: float = Field(gt=0)
    budget_s_per_point: float = Field(gt=0)
    tie_rule: str
    drift_threshold: float = Field(gt=0)


class Measurements(BaseModel):
    """A measurement file (module docstring). ``skipped``: candidates not timed and why (a failed
    verification, a build error), runner -> reason. ``deployment``: the deployment tune was given (its keys as
    written, without defaults), so that ``tune --check`` can build the same runners again; None when not recorded."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    kind: Literal["moe-select-measurements"]
    schema_version: Literal[1] = Field(alias="schema")
    layer: LayerKey
    machine: MachineKey
    method: Method
    created: str
    duration_s: float = Field(ge=0)
    points: list[Point]
    skipped: dict[str, str] = {}
    deployment: dict[str, Any] | None = None

    @field_validator("created")
    @classmethod
    def _iso_utc(cls, v: str) -> str:
        try:
            t = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{v!r} is not an ISO 8601 time (e.g. 2026-12-01T10:00:00Z)") from None
        if t.utcoffset() is None or t.utcoffset() != timezone.utc.utcoffset(None):
            raise ValueError(f"{v!r} is not in UTC (end it with Z or +00:00)")
        return v

    @model_validator(mode="after")
    def _unique_points(self) -> "Measurements":
        seen: set[tuple[str, int]] = set()
        for p in self.points:
            if (p.runner, p.tokens) in seen:
                raise ValueError(f"two points for runner {p.runner} at {p.tokens} tokens")
            seen.add((p.runner, p.tokens))
        return self

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``schema`` for :attr:`schema_version`)."""
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self) -> str:
        """The file's text: indented JSON with a final newline."""
        return json.dumps(self.to_dict(), indent=1) + "\n"

    @classmethod
    def from_dict(cls, data: Any, file: str = "<measurements>") -> "Measurements":
        """Validate ``data`` (the JSON form, marked or plain); raise :class:`InputError` naming ``file``, line and field."""
        from .yamlio import validate

        out: Measurements = validate(cls, data, file)
        return out

    def fingerprint(self) -> str:
        """sha256 (hex) of the canonical JSON of every field (sorted keys, no whitespace): changes with any value."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        return hashlib.sha256(blob).hexdigest()

    def runners(self) -> list[str]:
        """The runners with at least one point, sorted by name."""
        return sorted({p.runner for p in self.points})

    def token_counts(self) -> list[int]:
        """The measured token counts, ascending."""
        return sorted({p.tokens for p in self.points})

    def table(self) -> dict[int, dict[str, Point]]:
        """tokens -> runner -> point."""
        out: dict[int, dict[str, Point]] = {}
        for p in sorted(self.points, key=lambda q: (q.tokens, q.runner)):
            out.setdefault(p.tokens, {})[p.runner] = p
        return out


def overlap(a: Point, b: Point) -> bool:
    """Whether the 95 % intervals of ``a`` and ``b`` overlap (a tie, :data:`TIE_RULE`)."""
    return a.ci_low_us <= b.ci_high_us and b.ci_low_us <= a.ci_high_us


def load_measurements(path: str | Path) -> list[Measurements]:
    """The measurement files at ``path``: one file, or every ``*.json`` in a folder (sorted by name; none is an
    error). Raises :class:`InputError` naming the file, line and field of every problem (a missing path, a file
    that is not JSON, a field of the wrong type or value)."""
    from .yamlio import MarkedDict, load_file

    p = Path(path)
    if p.is_dir():
        files = sorted(q for q in p.glob("*.json") if q.is_file())
        if not files:
            raise InputError(Issue(str(p), 0, "", "no *.json measurement files in this folder"))
    elif p.exists():
        files = [p]
    else:
        raise InputError(Issue(str(p), 0, "", "no such file or folder (give a measurement file or a folder of them)"))
    out, issues = [], []
    for f in files:
        try:
            data = load_file(f, kind="measurement file")
            if not isinstance(data, MarkedDict):
                raise InputError(Issue(str(f), getattr(data, "line", 0), "", "a measurement file holds a JSON object"))
            if data.get("kind") != KIND:
                raise InputError(Issue(str(f), data.key_lines.get("kind", 0), "kind",
                                       f"is {data.get('kind')!r}: a measurement file's kind is {KIND!r} (moe-select tune writes it)"))
            out.append(Measurements.from_dict(data, str(f)))
        except InputError as exc:
            issues.extend(exc.issues)
    if issues:
        raise InputError(issues)
    return out


def layer_key_mismatch(m: Measurements, key: LayerKey) -> list[str]:
    """The names of the :class:`LayerKey` fields whose values differ between ``m.layer`` and ``key`` (empty: a match)."""
    return [f for f in LayerKey.model_fields if getattr(m.layer, f) != getattr(key, f)]


def machine_key_mismatch(m: Measurements, key: MachineKey) -> list[str]:
    """The names of the :class:`MachineKey` fields whose values differ between ``m.machine`` and ``key`` (empty: a
    match). ``packages`` is named when any package's version differs or a package is in one key only."""
    return [f for f in MachineKey.model_fields if getattr(m.machine, f) != getattr(key, f)]


def layer_key(u: Any) -> LayerKey:
    """The :class:`LayerKey` of a deployment as understood (:class:`~moe_select.deployment.Understood`, or a plan's
    ``deployment``): experts per rank ``num_experts / ep``, the intermediate size per rank
    ``moe_intermediate_size / (tp / ep)`` (as :meth:`moe_select.layer.LayerSpec.from_plan` splits it), the
    format ``quant``, and ``tp``, ``ep``, ``a2a``. Raises :class:`InputError` (field ``ep``) where ``ep`` does not
    divide ``tp`` or the experts, or ``tp / ep`` the intermediate size: no runner of this install splits so."""
    m = u.model
    if u.ep < 1 or u.tp % u.ep or m.num_experts % u.ep or m.moe_intermediate_size % (u.tp // u.ep):
        raise InputError(f"tp {u.tp}, ep {u.ep}: ep must divide tp and num_experts {m.num_experts}, and tp/ep must divide "
                         f"moe_intermediate_size {m.moe_intermediate_size}", file="<deployment>", field="ep")
    return LayerKey(num_experts=m.num_experts // u.ep, hidden_size=m.hidden_size,
                    intermediate_size=m.moe_intermediate_size // (u.tp // u.ep), top_k=m.top_k, activation=m.activation,
                    format=u.quant, tp=u.tp, ep=u.ep, a2a=u.a2a)


def utc_now() -> str:
    """The current time as ISO 8601 UTC with a ``Z`` (seconds)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def this_machine(*, cuda_graph: bool, packages: dict[str, str | None] | None = None, tile_configs: str | None = None,
                 device: Any = None) -> MachineKey:
    """The :class:`MachineKey` of this machine (imports torch): ``device``'s name and arch (default: the current
    CUDA device when there is one, else the CPU), the NVIDIA driver (``nvidia-smi``'s, None when it cannot be
    read), torch's CUDA and torch's and Triton's versions. ``packages``: the kernel packages the candidates
    need, name -> version (the caller detects them); ``tile_configs``: see :func:`tile_configs_digest`."""
    import torch

    from . import __version__

    dev = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda":
        gpu = torch.cuda.get_device_name(dev)
        props = torch.cuda.get_device_properties(dev)
        hip = getattr(torch.version, "hip", None)
        arch = (getattr(props, "gcnArchName", "").split(":")[0] or "gfx") if hip else f"sm{props.major}{props.minor}"
    else:
        gpu, arch = "cpu", "cpu"
    try:
        import triton

        triton_v: str | None = str(triton.__version__)
    except ImportError:
        triton_v = None
    return MachineKey(gpu=gpu, arch=arch, driver=_driver() if dev.type == "cuda" else None,
                      cuda=getattr(torch.version, "hip", None) or torch.version.cuda, torch=str(torch.__version__),
                      triton=triton_v, packages=dict(sorted((packages or {}).items())), moe_select=__version__,
                      tile_configs=tile_configs, cuda_graph=cuda_graph)


def _driver() -> str | None:
    """The NVIDIA driver version (``nvidia-smi --query-gpu=driver_version``), or None."""
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.stdout.strip().splitlines()
    return first[0].strip() if out.returncode == 0 and first else None


def tile_configs_digest(files: list[Path]) -> str | None:
    """sha256 (hex) over the tuned Triton tile files ``files`` (one ``"<name> <sha256>\\n"`` line each, sorted by
    name), None when there are none."""
    if not files:
        return None
    lines = "".join(f"{f.name} {hashlib.sha256(f.read_bytes()).hexdigest()}\n" for f in sorted(files, key=lambda q: q.name))
    return hashlib.sha256(lines.encode()).hexdigest()


def tile_configs_of_cores(cores: Iterable[Any]) -> str | None:
    """:func:`tile_configs_digest` of the tuned Triton tile files the built expert ``cores`` read (a core's
    ``config_source`` other than ``default``, found in its ``config_dir`` or the runner's bundled folder), None when
    none does. One definition for ``tune`` (recording a table) and ``resolve`` (checking one)."""
    files = []
    for core in cores:
        src = getattr(core, "config_source", None)
        if src and src != "default":
            from moe_select.backends.triton_moe_kernels import CONFIG_DIR  # type: ignore[import-not-found, unused-ignore]

            f = Path(getattr(core, "config_dir", None) or CONFIG_DIR) / src
            if f.is_file():
                files.append(f)
    return tile_configs_digest(files)
