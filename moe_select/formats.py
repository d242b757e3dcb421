"""The quantization formats of expert weights: one table of data, ``backends/formats.yaml``, read and
validated once per process (:func:`table`). A row says what a format stores (the element dtype and bits,
the packing along K), the scale tensors ``prepare_weights`` takes (names, shapes, dtypes, elements per
scale value), its parameters and their defaults (block and group shapes), the activation precision it
fixes, whether an engine can make it online from a 16-bit checkpoint and whether moe-select's harness can
generate test weights of it. Everything that needs such a fact reads the row (vocabulary, model-config
reading, planning constraints, the memory estimates, runners' checks, ``verify`` and ``moe-select run``);
the tolerance of a runner's output against the float64 reference (:func:`tolerance`) is computed here from
the activation precision.

A name without a row (``quant: int4_w4a4``: a deployment may name any well-formed format) is judged by
the selector (planned unverified); nothing that reads the table may fail with a KeyError on it:
:func:`lookup` gives None and :func:`missing_row` the refusal's words (no scales, no tolerance), which
``verify`` and ``moe-select run`` give as ``no_adapter``.

Adding a format: its row in ``backends/formats.yaml``, the capability files of the runners that run it,
and tests (README, "Hand-edited files to add"). The rows are bundled only: a plugin's folder cannot add a
format yet (facts and rules name formats of this table, :data:`Quant`).

Sources of the layouts: each row's ``source`` (OCP Microscaling Formats v1.0 for MXFP4/MXFP8, NVIDIA
ModelOpt NVFP4, DeepSeek-V3's ``quantization_config``, AutoAWQ/AutoGPTQ packing in
:mod:`moe_select.quant_int`).
"""
from __future__ import annotations

import difflib
import threading
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Sequence, get_args

from pydantic import AfterValidator, Field, GetJsonSchemaHandler, field_validator, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from .located import Located

#: ``arch_in(arch, specs) -> bool`` (:func:`moe_select.vocab.arch_in`), registered by :mod:`moe_select.vocab` when it
#: is imported: vocab builds on this module's format table, so this module does not import it (no import circle).
ARCH_IN: Any = None

#: Precision of the activations a runner feeds its GEMMs (structured; capability files use these names).
Precision = Literal["float32", "bf16", "fp16", "fp8_tensor", "fp8_token", "fp8_group", "mxfp8", "nvfp4", "int8_token",
                    "mxfp4"]
PRECISIONS: tuple[str, ...] = get_args(Precision)

#: Unit roundoff of each precision's element (2^-p for p significand bits): bf16 8, fp16 11, e4m3 4
#: (fp8 and mxfp8 elements), e2m1 2; int8 with a per-token absmax scale: half a step of 127 levels.
UNIT_ROUNDOFF: dict[str, float] = {
    "float32": 2.0**-24, "bf16": 2.0**-8, "fp16": 2.0**-11, "fp8_tensor": 2.0**-4, "fp8_token": 2.0**-4,
    "fp8_group": 2.0**-4, "mxfp8": 2.0**-4, "nvfp4": 2.0**-2, "int8_token": 1 / 254,
    "mxfp4": 2.0**-2,  # e2m1 with an e8m0 scale per 32 (an all-to-all's FP4 dispatch: backends/a2a/)
}


#: Output dtype names ``tolerance`` takes, torch's spelling included.
_OUTPUT = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "float32": "float32"}


def tolerance(precision: str, output: str = "bf16") -> float:
    """Tolerance on ``rel_error = max|out - ref| / max|ref|`` against the float64 reference for a runner
    whose GEMM inputs are in ``precision`` (a plan's ``activation_precision``) and whose output dtype is
    ``output`` (``bf16``/``bfloat16``, ``fp16``/``float16`` or ``float32``). The one table of tolerances:
    ``verify``, ``moe-select run``, the launcher, the benchmarks and the tests all read it. The weights
    are dequantized exactly for the reference, so only the runner's arithmetic counts.

    16-bit activations: 4 roundings in that dtype (input, h, gated activation, output), ``4u``: bf16
    1.6e-2 (measured on an H200 at five layer shapes: 3.6e-3 to 9.5e-3), fp16 2.0e-3. Quantized
    activations: their two quantizations (input and gated activation), whose per-element errors dot
    products average, ``2u``, plus the output's 16-bit roundings ``4u_out``: fp8 0.14 (measured 3.7e-2
    to 6.0e-2), int8 2.3e-2. float32 compute: sums of up to ~10^4 terms, 1e-4, plus ``4u_out`` when the
    output is 16-bit. Raises ``KeyError`` for an unknown precision or output name."""
    out = _OUTPUT[output]
    out_u = 0.0 if out == "float32" else 4 * UNIT_ROUNDOFF[out]
    if precision == "float32":
        return 1e-4 + out_u
    if precision in ("bf16", "fp16"):
        return max(4 * UNIT_ROUNDOFF[precision], out_u)
    return 2 * UNIT_ROUNDOFF[precision] + out_u


#: File name of the table in the bundled capability folder (``backends/``, installed as ``moe_select.backends``).
FILE_NAME = "formats.yaml"
SCHEMA_VERSION = 1
#: Bits of each stored element dtype a row may name (torch's names).
DTYPE_BITS: dict[str, int] = {"bfloat16": 16, "float16": 16, "float32": 32, "float8_e4m3fn": 8, "uint8": 8, "int8": 8,
                              "int32": 32}
#: Parameters a row may give defaults for: ``block`` (``[bn, bk]``, or elements along K) and ``group_size``.
PARAM_NAMES = ("block", "group_size")
NO_ROW = "no format row: no scales, no tolerance"


def _known_dtype(v: str) -> str:
    """``v`` when it is a dtype of :data:`DTYPE_BITS`; raises ValueError naming the known ones (pydantic validators)."""
    if v not in DTYPE_BITS:
        raise ValueError(f"dtype {v!r} is not one of {', '.join(DTYPE_BITS)}")
    return v


#: A dtype name of :data:`DTYPE_BITS` (a pydantic field type)
KnownDtype = Annotated[str, AfterValidator(_known_dtype)]


#: A checkpoint's serialization of its experts' weights (``quant_params.layout``): the quantization method that wrote
#: it (``quant_method`` / ModelOpt's ``hf_quant_config.json``), which decides the MoE method an engine builds.
CheckpointLayout = Literal["awq", "gptq", "compressed-tensors", "mxfp4", "quark", "fp8", "modelopt"]


class Scale(Located):
    """One scale tensor of a format: ``name`` (``prepare_weights`` takes ``w13_<name>`` and ``w2_<name>``),
    ``shape`` (its layout, in the symbols of ``w [E, N, K]``), ``dtype`` (torch's name), ``per`` (weight
    elements per scale value: the memory estimate counts ``dtype bytes / per`` per weight element; None:
    one per output row or per tensor, not counted) and ``optional`` (a runner may be given none: zero
    points)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=32)
    shape: str = Field(min_length=3, pattern=r"^\[.*\]$")
    dtype: KnownDtype
    per: int | None = Field(default=None, ge=1)
    optional: bool = False



class FormatParams(Located):
    """A format's parameters and their defaults (a checkpoint's ``quantization_config`` or a deployment's
    ``quant_config`` gives its own): ``block`` (``[bn, bk]`` for two-dimensional blocks, or elements
    along K sharing one scale), ``group_size`` (elements along K sharing one scale, weight-only int) and ``layout``
    (the checkpoint serialization a deployment that states none is planned for, where one is far the most common
    and the engines build other runners for the others: MXFP4's own ``quant_method: mxfp4``, not compressed-tensors;
    the plan shows it as a default)."""

    block: list[int] | int | None = None
    group_size: int | None = Field(default=None, ge=1)
    layout: CheckpointLayout | None = None

    @field_validator("block")
    @classmethod
    def _block(cls, v: list[int] | int | None) -> list[int] | int | None:
        if isinstance(v, list) and (len(v) != 2 or min(v) < 1):
            raise ValueError(f"block is [bn, bk] (two positive numbers) or an element count, got {v}")
        if isinstance(v, int) and v < 1:
            raise ValueError(f"block must be positive, got {v}")
        return v


#: Engines a format's ``online`` column may name (the serving engines: moe-select's own adapters load no checkpoint).
OnlineEngine = Literal["sglang", "vllm", "trtllm"]


class OnlineWay(Located):
    """One fact of a format's ``online`` column: whether serving engine ``engine`` makes the format at load from a
    16-bit (bf16/fp16) checkpoint (or from the quantized formats ``from`` names), at the engine versions ``version`` (a PEP 440 specifier of the engine's own
    package; empty: every version), with the flag ``how``. ``makes: false`` is a refusal on evidence (``why`` says
    what the engine does instead: a flag that does not quantize the experts, a check that raises).
    ``arch`` (arch names, families, ranges, as facts write them) and ``activation_scale`` (an NVFP4
    deployment's ``quant_config.activation_scale``) restrict the fact; ``note`` is shown with the verdict (what the
    engine does besides: padding)."""

    engine: OnlineEngine
    version: str = ""
    how: str = Field(min_length=1)
    #: The checkpoint formats (names of this file's rows) the engine converts with ``how``; absent: a 16-bit
    #: (unquantized) checkpoint only. SGLang's ``--quantization modelopt_fp4`` also converts an FP8 checkpoint's
    #: experts to NVFP4 (sgl-project/sglang PR #33115), a fact of its own row with ``from: [fp8_tensor, ...]``.
    from_formats: list[str] | None = Field(default=None, alias="from", min_length=1)
    #: With ``from``: the checkpoint serializations (``quant_params.layout``) the fact takes; None: any. SGLang's
    #: modelopt_fp4 takes quant_method fp8 checkpoints only (a ModelOpt FP8 one is overridden back to modelopt_fp8, a
    #: compressed-tensors one raises 'does not match').
    from_layout: list[CheckpointLayout] | None = Field(default=None, min_length=1)
    makes: bool = True
    why: str | None = None
    arch: list[str] | None = None
    activation_scale: Literal["per_tensor", "per_token"] | None = None
    note: str | None = None
    source: str = Field(min_length=1)

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            SpecifierSet(v)
        except InvalidSpecifier:
            raise ValueError(f"{v[:60]!r} is not a PEP 440 specifier (e.g. \">=0.25.0\", \"<0.31.0\")") from None
        return v

    @model_validator(mode="after")
    def _why(self) -> "OnlineWay":
        if not self.makes and not self.why:
            raise ValueError(f"{self.engine} {self.how}: makes: false needs why (what the engine does instead)")
        return self

    def takes(self, checkpoint: str | None, layout: str | None = None) -> bool:
        """Whether this fact speaks of a checkpoint in format ``checkpoint`` (None: a 16-bit one) serialized as
        ``layout`` (None: not known, not judged): one of :attr:`from_formats` (and of :attr:`from_layout` where it says),
        or, where the fact names none, a format whose row is not quantized (or has no row)."""
        if self.from_formats is not None:
            return checkpoint in self.from_formats and (layout is None or self.from_layout is None
                                                        or layout in self.from_layout)
        if checkpoint is None:
            return True
        row = lookup(checkpoint)
        return row is None or not row.quantized

    def holds(self, version: str | None, arch: str | None, activation_scale: str | None) -> bool | None:
        """Whether this fact speaks for a deployment at the engine ``version`` (None: not known), on ``arch``
        and with ``activation_scale``: True / False, or None when only the unknown version decides."""
        if self.arch is not None and arch is not None:
            if ARCH_IN is None:
                raise RuntimeError("moe_select.vocab registers the arch matcher (formats.ARCH_IN) when it is imported; "
                                   "import it before judging online facts")
            if not ARCH_IN(arch, self.arch):
                return False
        if self.activation_scale is not None and (activation_scale or "per_tensor") != self.activation_scale:
            return False
        if not self.version:
            return True
        if version is None:
            return None
        from packaging.specifiers import SpecifierSet

        return SpecifierSet(self.version).contains(version, prereleases=True)

    def text(self) -> str:
        """e.g. ``vllm >=0.25.0 --quantization fp8_per_block``, with the arch and activation scale it needs."""
        extra = ", ".join(x for x in ((f"arch {'/'.join(self.arch)}" if self.arch else ""),
                                      (f"activation_scale {self.activation_scale}" if self.activation_scale else "")) if x)
        return (" ".join(x for x in (self.engine, self.version, self.how) if x) + (f" ({extra})" if extra else "")
                + (f" from a {'/'.join(self.from_formats)} checkpoint" if self.from_formats else ""))


class Format(Located):
    """One row of ``backends/formats.yaml`` (the file's comment documents each column).

    ``params`` in the file is :attr:`parameters` (:class:`FormatParams`). Derived: :attr:`pack_k` (elements
    per stored element along K), :attr:`stored_bytes` (bytes per weight element including its scales),
    :attr:`params` (the parameter defaults as a dict), :attr:`scale_names`, :attr:`quantized`."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=64)
    summary: str = Field(min_length=1)
    source: str = Field(min_length=1)
    dtype: KnownDtype
    bits: Literal[4, 8, 16]
    activation: Precision | None = None
    scales: list[Scale] = []
    parameters: FormatParams = Field(default_factory=lambda: FormatParams(), alias="params")
    #: The ``online`` column: :class:`OnlineWay` facts per engine, or a bare ``true`` / ``false`` (an engine makes it
    #: at load / none does, no engine named: a plugin's or an older file's row). :attr:`online` says either.
    ways: list[OnlineWay] | bool = Field(default=False, alias="online")
    generated: bool = False


    @model_validator(mode="after")
    def _consistent(self) -> "Format":
        stored = DTYPE_BITS[self.dtype]
        if stored % self.bits or stored // self.bits > 2:
            raise ValueError(f"{self.name}: {self.bits}-bit elements do not pack into {self.dtype} (one or two per element)")
        names = [s.name for s in self.scales]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: a scale name appears twice in {names}")
        if self.ways and self.scales == []:
            raise ValueError(f"{self.name}: online quantization makes a quantized format; a format without scales is the checkpoint's own")
        return self

    @property
    def online(self) -> bool:
        """True when some engine makes this format at load from a 16-bit checkpoint (a ``makes`` fact of the
        ``online`` column, or ``online: true``)."""
        return self.ways is True or (isinstance(self.ways, list) and any(w.makes and w.takes(None) for w in self.ways))

    @property
    def online_ways(self) -> list[OnlineWay]:
        """The ``online`` column's facts (none for a bare ``true`` / ``false``)."""
        return self.ways if isinstance(self.ways, list) else []

    @property
    def pack_k(self) -> int:
        """Elements per stored element along K: 2 for 4-bit elements in a byte (mxfp4, nvfp4, int4_w4a16), else 1."""
        return DTYPE_BITS[self.dtype] // self.bits

    @property
    def stored_bytes(self) -> float:
        """Bytes per weight element as stored, scales included (``bits/8`` plus ``dtype bytes / per`` of each
        scale with a ``per``; per-row and per-tensor scales are not counted): the memory estimates'."""
        return self.bits / 8 + sum(DTYPE_BITS[s.dtype] / 8 / s.per for s in self.scales if s.per)

    @property
    def params(self) -> dict[str, object]:
        """The parameter defaults given: ``{"block": [bn, bk] or n, "group_size": g}`` (either may be absent)."""
        return self.parameters.model_dump(exclude_none=True)

    @property
    def scale_names(self) -> tuple[str, ...]:
        """``prepare_weights`` keyword suffixes of the scales (``scale``, ``global_scale``, ``zeros``)."""
        return tuple(s.name for s in self.scales)

    @property
    def quantized(self) -> bool:
        """True for a format with scales (bf16 and fp16 are a checkpoint's unquantized weights)."""
        return bool(self.scales)


class FormatsFile(Located):
    """``backends/formats.yaml``: ``schema_version`` and ``formats`` (one :class:`Format` per name)."""

    schema_version: Literal[1]
    formats: list[Format] = Field(min_length=1)

    @field_validator("formats")
    @classmethod
    def _unique(cls, v: list[Format]) -> list[Format]:
        seen: dict[str, Format] = {}
        for f in v:
            if f.name in seen:
                raise ValueError(f"format {f.name!r} has two rows: {seen[f.name].where()} and {f.where()}")
            seen[f.name] = f
        for f in v:
            for w in f.online_ways:
                bad = [n for n in w.from_formats or () if n not in seen or n == f.name]
                if bad:
                    raise ValueError(f"{w.where()}: online fact {w.engine} {w.how!r} of {f.name}: from names "
                                     f"{', '.join(bad)}, not another format of this file ({', '.join(seen)})")
        return v


_lock = threading.Lock()
_table: list[dict[str, Format]] = []


def bundled_path() -> Path:
    """``formats.yaml`` of the installed ``moe_select.backends``."""
    import importlib

    return Path(importlib.import_module("moe_select.backends").__file__ or ".").parent / FILE_NAME


def load_table(path: str | Path, display: str | None = None) -> dict[str, Format]:
    """The rows of the formats file at ``path``, name -> :class:`Format`, in file order. Raises
    :class:`InputError` naming file:line and field for a file that does not read or validate (an unknown
    column, a dtype that is no torch dtype, a name given twice, ...)."""
    from .yamlio import load_file, validate

    shown = display or str(path)
    data = load_file(path, shown, kind="formats file")
    doc = validate(FormatsFile, data, shown)
    return {f.name: f for f in doc.formats}


def use(rows: dict[str, Format]) -> None:
    """Make ``rows`` the table :func:`table` answers with: the catalog's (:func:`moe_select.catalog.load_catalog`
    validates the file once; a catalog read from the on-disk cache brings its rows already validated, so a
    planning process never parses or validates the table). An empty ``rows`` is ignored."""
    if rows:
        with _lock:
            _table[:] = [rows]


def table() -> dict[str, Format]:
    """The table: the one the last catalog loaded made active (:func:`use`), else the bundled
    ``backends/formats.yaml``, read and validated at the first call of the process (about 25 ms: the
    models' validators are built then), then kept. Raises :class:`InputError` when the bundled file does
    not load (a broken install)."""
    if _table:
        return _table[0]
    with _lock:
        if not _table:
            _table.append(load_table(bundled_path(), f"backends/{FILE_NAME}"))
    return _table[0]


def names() -> tuple[str, ...]:
    """Every format with a row, in the file's order."""
    return tuple(table())


def lookup(name: str) -> Format | None:
    """The row of format ``name``, or None for a name this moe-select does not know (a deployment may name
    any well-formed format: the selector judges it; nothing that reads the table may fail with a KeyError)."""
    return table().get(name)


def missing_row(name: str) -> str | None:
    """Why nothing here can build or check weights of format ``name`` (``verify``, ``moe-select run``: the
    detail of their ``no_adapter`` refusal), or None when it has a row. Names the closest format."""
    if lookup(name) is not None:
        return None
    close = difflib.get_close_matches(name, names(), n=1)
    return (f"{NO_ROW} for quant {name!r} in backends/{FILE_NAME}: moe-select cannot make or dequantize its weights "
            "nor bound its error" + (f" (did you mean {close[0]!r}?)" if close else ""))


def __getattr__(name: str) -> Any:
    """``FORMATS`` (name -> row) and ``QUANTS`` (the names): the table, read at first use."""
    if name == "FORMATS":
        return table()
    if name == "QUANTS":
        return names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _known_format(v: str) -> str:
    if v not in table():
        from .yamlio import shorten

        close = difflib.get_close_matches(v, names(), n=1) if len(v) <= 200 else []
        raise ValueError(f"{shorten(v)} is not one of {', '.join(names())}" + (f" (did you mean {close[0]!r}?)" if close else "")
                         + f" (the formats of backends/{FILE_NAME})")
    return v


class _FormatNames:
    """JSON Schema of :data:`Quant`: a string, one of the table's names (read when a schema is generated)."""

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        out = handler(core_schema)
        out["enum"] = list(names())
        return out

    def __repr__(self) -> str:
        return "_FormatNames()"


#: A format named by a fact or rule: one with a row in the table (a capability file's ``formats``, a
#: rule's ``when.quant``). A deployment may name any well-formed format (:data:`moe_select.vocab.QuantName`).
Quant = Annotated[str, AfterValidator(_known_format), _FormatNames()]

def block_shape(quant: str, params: dict[str, object] | None = None) -> tuple[int, int] | None:
    """``(bn, bk)`` of a format scaled in two-dimensional blocks (fp8_block: the checkpoint's
    ``weight_block_size`` from ``params``, else the row's default, 128x128), None for other formats and for a
    name without a row. Raises ValueError when ``params`` gives a block that is not ``[bn, bk]``."""
    f = lookup(quant)
    if f is None or not isinstance(f.parameters.block, list):
        return None
    block = (params or {}).get("block") or f.parameters.block
    if not isinstance(block, (list, tuple)) or len(block) != 2:
        raise ValueError(f"{quant} needs a [bn, bk] block, got {block!r}")
    return int(block[0]), int(block[1])


def group_size(quant: str, params: dict[str, object] | None = None) -> int | None:
    """Elements along K that share one scale: the weight-only int formats' group, the FP4/MXFP8 block;
    None for formats without groups along K, and for a weight-only int format with ``group_size`` -1 (per
    output channel, as AutoAWQ/AutoGPTQ write it: one scale over all of K, so no group constrains the split),
    and for a name that is no format (:func:`lookup`)."""
    f = lookup(quant)
    if f is None:
        return None
    if f.parameters.group_size is not None:
        g = (params or {}).get("group_size") or f.parameters.group_size
        return g if isinstance(g, int) and g > 0 else None
    block = f.parameters.block
    return block if isinstance(block, int) else None


def per_channel(quant: str, params: dict[str, object] | None = None) -> bool | None:
    """Whether a weight-only int format's checkpoint has one scale per output channel (``group_size`` -1, as
    AutoAWQ/AutoGPTQ write it and compressed-tensors' ``strategy: channel`` is read): True; False for a grouped one (a
    group size given, or the format's default); None for a format without a group size and for a name that is no
    format (:func:`lookup`)."""
    f = lookup(quant)
    if f is None or f.parameters.group_size is None:
        return None
    return (params or {}).get("group_size") == -1


def online_verdict(fmt: Format, engine: str, version: str | None, arch: str | None,
                   activation_scale: str | None, checkpoint: str | None = None,
                   layout: str | None = None) -> tuple[str, list[OnlineWay]]:
    """What the ``online`` column of ``fmt`` says of serving engine ``engine`` at ``version`` (None: not known) on
    ``arch`` with ``activation_scale``: ``("makes", ways)`` when some fact that holds makes the format at load (the
    ways that do), ``("refuses", ways)`` when none makes it and a ``makes: false`` fact holds (a refusal on
    evidence), ``("version", ways)`` when only the unknown version decides (the ways whose version range it is),
    ``("none", [])`` when no fact names this engine at all (or a bare ``online: true`` names none). ``checkpoint``: the
    format converted (None: a 16-bit checkpoint), ``layout`` its serialization (None: not judged); only the facts that
    take it (:meth:`OnlineWay.takes`) speak."""
    ways = [w for w in fmt.online_ways if w.engine == engine and w.takes(checkpoint, layout)]
    held = [(w, w.holds(version, arch, activation_scale)) for w in ways]
    makes = [w for w, h in held if w.makes and h is True]
    if makes:
        return "makes", makes
    refuses = [w for w, h in held if not w.makes and h is True]
    if refuses:
        return "refuses", refuses
    maybe = [w for w, h in held if w.makes and h is None]
    if maybe:
        return "version", maybe
    return "none", []


def online_clause(fmt: Format, engine: str, version: str | None, arch: str | None,
                  activation_scale: str | None, checkpoint: str | None = None,
                  layout: str | None = None) -> tuple[bool, str, str]:
    """What ``fmt``'s ``online`` column says of serving engine ``engine`` at ``version`` (None: not known):
    ``(makes, words, where)``: whether the engine makes the format at load from a ``checkpoint`` checkpoint (None:
    a 16-bit one; a version not
    known that decides counts as making it, and the words say so), the words (the flag, the version read at, the
    upstream sources; or the evidence it does not), and ``file:line`` of the facts read (of the column where no fact
    names the engine). :func:`online_judgement` and the selector's narrowing of ``engine: any`` read it."""
    at = f"{engine} {version}" if version else engine
    verdict, ways = online_verdict(fmt, engine, version, arch, activation_scale, checkpoint, layout)
    where = ", ".join(w.where() for w in ways) or fmt.where("online")
    if verdict == "makes":
        return True, (f"{at} makes it with {' or '.join(w.how for w in ways)} [{'; '.join(w.source for w in ways)}]"
                      + "".join(f" ({w.note})" for w in ways if w.note)), where
    if verdict == "version":
        return True, (f"{engine} makes it with {' or '.join(w.text() for w in ways)}, its version not known "
                      f"[{'; '.join(w.source for w in ways)}]"), where
    if verdict == "refuses":
        return False, f"{at} does not: " + "; ".join(f"{w.how}: {w.why} [{w.source}]" for w in ways), where
    others = [w.text() for w in fmt.online_ways if w.engine == engine and w.makes and w.takes(checkpoint, layout)]
    converted = checkpoint is not None and (row := lookup(checkpoint)) is not None and row.quantized
    here = (f"from a {checkpoint} checkpoint, " if converted else "") + f"arch {arch}" + (f", activation_scale {activation_scale or 'per_tensor'}" if fmt.name == "nvfp4" else "")
    return False, (f"{at} ({here}): no fact says it makes it" + (f"; its facts: {', '.join(others)}" if others else "")), where


def online_engines(fmt: Format, engines: Sequence[str], versions: Mapping[str, str | None], arch: str | None,
                   activation_scale: str | None, checkpoint: str | None = None, layout: str | None = None) -> list[str]:
    """The engines of ``engines`` that make ``fmt`` at load from a ``checkpoint`` checkpoint (None: a 16-bit one) at
    ``versions`` (engine -> version, None: not known; one whose unknown version decides is counted), per
    :func:`online_clause`."""
    return [e for e in engines if online_clause(fmt, e, versions.get(e), arch, activation_scale, checkpoint, layout)[0]]


def online_judgement(fmt: Format, checkpoint: str, engines: Sequence[str], versions: Mapping[str, str | None],
                     arch: str | None, activation_scale: str | None, layout: str | None = None) -> tuple[bool, str]:
    """Whether serving ``fmt`` from a 16-bit checkpoint (format ``checkpoint``) is planned for ``engines`` (the
    deployment's engine, or each serving engine for ``engine: any``) at ``versions`` (engine -> version, None: not
    known), and the words: ``(True, note)`` when some engine makes it at load (the note names each engine's flag, the
    version it was read at and the source, and the engines that do not), ``(False, reason)`` when none does (each
    engine's evidence, or that no fact names it). A version that is not known and decides is stated in the note.
    A quantized ``checkpoint`` (serialized as ``layout``) is judged by the facts whose ``from`` takes it (an FP8
    checkpoint converted to NVFP4), a 16-bit one by the others (:meth:`OnlineWay.takes`)."""
    said, makers = [], []
    row = lookup(checkpoint)
    quantized = row is not None and row.quantized
    for e in engines:
        makes, words, _ = online_clause(fmt, e, versions.get(e), arch, activation_scale, checkpoint, layout)
        said.append(words)
        if makes:
            makers.append(e)
    head = f"quant {fmt.name} for {'a' if quantized else 'an unquantized'} ({checkpoint}) checkpoint: "
    where = f"backends/{FILE_NAME}, {fmt.name}'s online column"
    if makers:
        return True, head + f"online quantization at load ({where}): " + "; ".join(said)
    return False, head + f"no engine makes {fmt.name} at load ({where}): " + "; ".join(said) + f"; use a checkpoint in {fmt.name}"
