"""The vocabulary: architecture names, families and ranges, GPU product names, activations, routing
methods, engines, phases and a2a modes. The names themselves are data (``backends/vocabulary.yaml``, and
a plugin's or operator folder's own ``vocabulary.yaml``; :mod:`moe_select.vocabulary` reads them); this
module holds what the code needs of them: the name syntax, normalisation, compute-capability order, arch
membership (:func:`arch_in`), bf16 support (:func:`has_bf16`) and product lookup (:func:`gpu_arch`).

The vocabulary is *open* for deployments: a well-formed name this moe-select has never heard of (``arch:
sm130``, ``arch: gfx1201``, ``activation: geglu``, ``quant: mxfp6``) is accepted and judged by the selector,
never refused as invalid input. Facts and rules are *closed*: every arch, family, activation, routing and
engine they name must be declared in a vocabulary file (``moe-select check`` and catalog loading report
a typo with file:line and a did-you-mean). Quantization formats live in :mod:`moe_select.formats`
(re-exported here); runner and all-to-all backend names are the capability files' names.

**Architecture names.** ``cpu``; NVIDIA ``sm<major><minor>`` (``sm75`` is compute capability 7.5, ``sm90``
9.0, ``sm121`` 12.1: the last digit is the minor version); AMD ``gfx`` + 3-4 hex digits (``gfx90a``,
``gfx942``, ``gfx1201``: the LLVM target name). :func:`normalize_arch` reads what a deployment may write:
any case, nvcc's ``sm_90``, and the ``a``/``f`` suffixes of CUDA compile targets (``sm90a``, ``sm100f``),
which it drops: a suffix names a compile target's feature set (arch-specific ``a``, family-portable ``f``;
CUDA C++ Programming Guide, "Feature Availability"), not another GPU; the deployment's GPU is the base arch.
Facts and rules write the base name.

**Arch specifiers** (facts' ``archs``, a2a ``archs``, ``when.arch`` of facts and rules): a declared arch
name (``sm90``), a declared family (``sm10x``, ``gfx9``: :mod:`moe_select.vocabulary`, each citing the
upstream function it mirrors), or an open range ``sm<XY>+``: every NVIDIA arch of compute capability at
least X.Y, future ones included (vLLM's ``Platform.has_device_capability(75)`` is ``sm75+``).
"""
from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Annotated, Any, Iterable, Literal

from pydantic import AfterValidator, WithJsonSchema

from .formats import Quant  # noqa: F401  (one table of formats; re-exported; QUANTS: __getattr__)
from .yamlio import shorten

if TYPE_CHECKING:
    from .vocabulary import Vocabulary, VocabularyIndex

#: A base architecture name as facts, rules and plans write it (lower case, no compile-target suffix).
ARCH_PATTERN = r"^(cpu|sm[1-9][0-9]{1,2}|gfx[0-9][0-9a-f]{2,3})$"
#: An architecture specifier of a fact or rule: an arch or family name, or ``sm<XY>+`` (a range).
ARCH_SPEC_PATTERN = r"^[a-z][a-z0-9_]{0,63}\+?$"
#: A name of the open vocabulary (activation, routing, format, runner, a2a backend) in a deployment.
NAME_PATTERN = r"^[a-z][a-z0-9_]*$"

_ARCH_RE = re.compile(ARCH_PATTERN)
_SPEC_RE = re.compile(ARCH_SPEC_PATTERN)
_NAME_RE = re.compile(NAME_PATTERN)
#: What a deployment may write: any case, ``sm_90``, ``sm90a``/``sm100f`` (compile-target suffixes).
_INPUT_RE = re.compile(r"^(?:(cpu)|sm_?([1-9][0-9]{1,2})[af]?|(gfx[0-9][0-9a-f]{2,3}))$")
_RANGE_RE = re.compile(r"^sm([1-9][0-9]{1,2})\+$")


def normalize_arch(text: str) -> str:
    """The base architecture name of ``text``: lower-cased and stripped; nvcc's ``sm_90`` -> ``sm90``;
    ``sm90a`` -> ``sm90`` and ``sm100f`` -> ``sm100`` (a CUDA compile target's ``a``/``f`` suffix names the
    target's feature set, not another GPU: the GPU is the base arch); ``gfx90a`` is kept (``a`` is a hex
    digit of the LLVM target there). Raises ``ValueError`` naming the accepted forms for anything else
    (``sm9``, ``gfx9``, ``h100``, a family or a range)."""
    if not isinstance(text, str):
        raise ValueError(f"an arch is a string, not {type(text).__name__}")
    t = text.strip().lower()
    m = _INPUT_RE.match(t)
    if m is None:
        raise ValueError(f"{shorten(text)} is not an architecture name: write cpu, sm<major><minor> (sm75, sm90, sm121; "
                         "nvcc's sm_90a is read as sm90) or gfx<target> (gfx90a, gfx942, gfx1201)")
    if m.group(1):
        return "cpu"
    if m.group(2):
        return f"sm{m.group(2)}"
    return m.group(3)


def is_arch(name: str) -> bool:
    """True when ``name`` is a base architecture name as facts and plans write it (:data:`ARCH_PATTERN`)."""
    return bool(_ARCH_RE.match(name))


def vendor_of(arch: str) -> Literal["nvidia", "amd", "cpu"] | None:
    """``nvidia`` (``sm..``), ``amd`` (``gfx..``), ``cpu``, or None for a name that is no architecture."""
    if not is_arch(arch):
        return None
    return "cpu" if arch == "cpu" else "nvidia" if arch.startswith("sm") else "amd"


def capability(arch: str) -> tuple[int, int] | None:
    """NVIDIA compute capability ``(major, minor)`` of a base arch name: ``sm121`` -> (12, 1), ``sm90`` ->
    (9, 0), ``sm75`` -> (7, 5) (the last digit is the minor version, as nvcc's ``sm_XY``); None for AMD,
    cpu and anything that is not an arch name."""
    if not is_arch(arch) or not arch.startswith("sm"):
        return None
    digits = arch[2:]
    return int(digits[:-1]), int(digits[-1])


def arch_of_capability(major: int, minor: int) -> str:
    """``sm<major><minor>`` for an NVIDIA compute capability, e.g. (9, 0) -> 'sm90', (13, 0) -> 'sm130'."""
    return f"sm{major}{minor}"


def range_floor(spec: str) -> tuple[int, int] | None:
    """The lowest compute capability of a range specifier ``sm<XY>+`` (``sm75+`` -> (7, 5)), else None."""
    m = _RANGE_RE.match(spec)
    return capability(f"sm{m.group(1)}") if m else None


# --------------------------------------------------------------------------------------------- types
class VocabRef:
    """Marks a field type whose names must be declared in the vocabulary (checked when the catalog loads,
    :func:`moe_select.vocabulary.name_issues`): ``kind`` is ``arch`` (arch/family/range specifiers),
    ``activation`` or ``routing``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"VocabRef({self.kind!r})"


def _arch_spec(v: str) -> str:
    if not _SPEC_RE.match(v):
        raise ValueError(f"{shorten(v)} is not an arch, family or range (write e.g. sm90, gfx942, cpu, a family such as "
                         "sm10x or gfx9, or a range such as sm80+)")
    return v


def _name(v: str) -> str:
    if not _NAME_RE.match(v) or len(v) > 64:
        raise ValueError(f"{shorten(v)} is not a name (lower-case letters, digits and _, starting with a letter; at most 64)")
    return v


def _arch_name(v: str) -> str:
    if not _ARCH_RE.match(v):
        raise ValueError(normalize_arch_error(v))
    return v


def normalize_arch_error(v: str) -> str:
    """The message for ``v`` where a base arch name is required (plans, vocabulary entries)."""
    try:
        base = normalize_arch(v)
    except ValueError as exc:
        return str(exc)
    return f"write the base architecture name {base!r}, not {v!r} (lower case, no compile-target suffix)"


def _arch_input(v: str) -> str:
    if v != "auto":
        normalize_arch(v)  # raises ValueError with the accepted forms
    return v


#: An arch specifier of a fact or rule (module doc): pattern-checked here, declared-checked at catalog load.
Arch = Annotated[str, AfterValidator(_arch_spec), VocabRef("arch"),
                 WithJsonSchema({"type": "string", "pattern": ARCH_SPEC_PATTERN, "maxLength": 65})]
#: A base architecture name (:data:`ARCH_PATTERN`), declared or not: what a plan and an understood deployment hold.
ArchName = Annotated[str, AfterValidator(_arch_name), WithJsonSchema({"type": "string", "pattern": ARCH_PATTERN})]
#: What a deployment may write for ``arch``: ``auto`` or anything :func:`normalize_arch` reads.
ArchInput = Annotated[str, AfterValidator(_arch_input),
                      WithJsonSchema({"type": "string", "pattern": r"^(auto|[cC][pP][uU]|[sS][mM]_?[1-9][0-9]{1,2}[aAfF]?"
                                                  r"|[gG][fF][xX][0-9][0-9a-fA-F]{2,3})$"})]
#: An activation name: any well-formed name in a deployment; declared-checked in facts and rules.
Activation = Annotated[str, AfterValidator(_name), VocabRef("activation"),
                       WithJsonSchema({"type": "string", "pattern": NAME_PATTERN, "maxLength": 64})]
#: A routing-method name: any well-formed name in a deployment; declared-checked in facts and rules.
Routing = Annotated[str, AfterValidator(_name), VocabRef("routing"),
                    WithJsonSchema({"type": "string", "pattern": NAME_PATTERN, "maxLength": 64})]
#: A quantization format named by a deployment: a format of :mod:`moe_select.formats` or any well-formed
#: name (judged by the selector: no fact runs it). Facts and rules use :data:`Quant` (the formats table).
QuantName = Annotated[str, AfterValidator(_name), WithJsonSchema({"type": "string", "pattern": NAME_PATTERN, "maxLength": 64})]

#: Engines whose facts can differ: the serving engines, and ``moe_select``, this install itself (its own adapters,
#: ``backends/<runner>.py``, and dispatchers, ``backends/a2a/dispatch_<name>.py``, as ``resolve`` builds them and
#: ``moe-select run`` runs them). ``backends/vocabulary.yaml`` declares the same names with their sources
#: (checked equal when it loads), and a plugin cannot add one.
Engine = Literal["sglang", "vllm", "trtllm", "moe_select"]
#: This install as an engine: what its adapters run (``engine: moe_select``; ``moe-select run`` and
#: ``require_adapter`` plan for it). A fact scoped ``when: {engine: [moe_select]}`` describes this install's code.
INSTALL_ENGINE = "moe_select"
#: Every engine a fact may name (:data:`Engine`).
ALL_ENGINES: tuple[str, ...] = Engine.__args__  # type: ignore[attr-defined]
#: The serving engines: what ``engine: any`` (the default) checks, each one; never :data:`INSTALL_ENGINE`.
ENGINES: tuple[str, ...] = tuple(e for e in ALL_ENGINES if e != INSTALL_ENGINE)

#: What a deployment runs: prefill workers, decode workers, or both (no PD disaggregation).
Phase = Literal["prefill", "decode", "both"]
PHASES_OF = {"prefill": ("prefill",), "decode": ("decode",), "both": ("prefill", "decode")}

#: Modes of an all-to-all backend (SGLang's names; each a2a capability file says which it has). ``auto``
#: picks per phase as the a2a capability file says (usually normal for prefill, low_latency for decode).
A2AMode = Literal["normal", "low_latency", "auto"]
A2A_MODES = ("normal", "low_latency")

Runner = str  # runner names are the capability files' names; validated against the catalog

#: Activations whose w13 holds a gate and an up half ([E, 2*I, H]); relu2 is not gated ([E, I, H]). What this
#: project's kernels and reference implement; equal to the bundled vocabulary's ``gated`` flags (tested).
GATED_ACTIVATIONS = ("silu", "gelu", "swiglu_oai")
#: Routing methods whose weight multiplies the expert's input, not its output (implemented by this project's
#: runners and reference; equal to the bundled vocabulary's ``weight_on_input`` flags, tested).
WEIGHT_ON_INPUT_ROUTINGS = ("llama4",)


# ------------------------------------------------------------------------------ the active vocabulary
_active: Any = None  # the VocabularyIndex in use (module doc of moe_select.vocabulary)


def use(vocabulary: "Vocabulary | None") -> None:
    """Make ``vocabulary`` (a catalog's merged vocabulary: bundled, plugins, operator folders) the one that
    :func:`arch_in`, :func:`gpu_arch` and the other lookups read when not given one. The catalog calls it
    each time it is loaded or returned from its caches; None restores the bundled vocabulary."""
    global _active
    from .vocabulary import index_of

    _active = index_of(vocabulary) if vocabulary is not None else None


def active() -> "VocabularyIndex":
    """The vocabulary in use: the last catalog's (:func:`use`), else the bundled one (read once)."""
    if _active is not None:
        return _active
    from .vocabulary import bundled_index

    return bundled_index()


def _index(vocabulary: "Vocabulary | VocabularyIndex | None") -> "VocabularyIndex":
    if vocabulary is None:
        return active()
    from .vocabulary import Vocabulary, index_of

    return index_of(vocabulary) if isinstance(vocabulary, Vocabulary) else vocabulary


def arch_in(arch: str, specs: Iterable[str], vocabulary: "Vocabulary | VocabularyIndex | None" = None) -> bool:
    """True when base arch ``arch`` (declared or not) is named by one of ``specs``: the same name; a family
    that contains it (members, or compute-capability majors: ``sm10x`` holds every sm10<minor>); or a range
    ``sm<XY>+`` (NVIDIA compute capability at least X.Y: ``sm75+`` holds sm75, sm90 and sm130, not sm70 nor
    gfx942). ``vocabulary``: whose families (default: :func:`active`). Never raises: an unknown specifier
    names nothing."""
    idx = None
    for spec in specs:
        if spec == arch:
            return True
        if spec.endswith("+"):
            floor, cap = range_floor(spec), capability(arch)
            if floor is not None and cap is not None and cap >= floor:
                return True
            continue
        if idx is None:
            idx = _index(vocabulary)
        family = idx.families.get(spec)
        if family is not None and family.contains(arch):
            return True
    return False


def has_bf16(arch: str, vocabulary: "Vocabulary | VocabularyIndex | None" = None) -> bool:
    """Whether GPUs of ``arch`` compute in bfloat16: a declared arch's ``bf16`` (False for sm70 and sm75,
    whose tensor cores have no bf16); an undeclared NVIDIA arch when its compute capability is at least 8.0
    (vLLM's ``CudaPlatformBase.check_if_supports_dtype`` refuses bf16 below 8.0); an undeclared AMD arch and
    cpu: True (no evidence otherwise). A weight-only plan there computes in fp16."""
    entry = _index(vocabulary).archs.get(arch)
    if entry is not None:
        return bool(entry.bf16)
    cap = capability(arch)
    return cap is None or cap >= (8, 0)


def product_key(name: str) -> str:
    """A GPU product name in the form the products table is keyed by: upper case, ``-``/``_`` as spaces,
    runs of spaces collapsed, vendor prefixes (``NVIDIA``, ``Tesla``, ``AMD Instinct``, ``AMD``) dropped."""
    key = " ".join(name.upper().replace("-", " ").replace("_", " ").split())
    for prefix in ("NVIDIA ", "TESLA ", "AMD INSTINCT ", "AMD "):
        key = key.removeprefix(prefix)
    return key


def gpu_arch(name: str, vocabulary: "Vocabulary | VocabularyIndex | None" = None) -> str | None:
    """Architecture of a GPU product name (case, ``-``/``_`` and vendor prefixes forgiven: 'h200',
    'RTX-PRO-6000', 'Tesla T4', 'AMD Instinct MI250X'; memory/form-factor suffixes too: 'H100 80GB HBM3',
    'A100-SXM4-80GB'), or None for a product no vocabulary declares (give ``arch:`` then)."""
    products = _index(vocabulary).products
    key = product_key(name)
    if key in products:
        return products[key]
    for gpu in sorted(products, key=len, reverse=True):
        if key.startswith(gpu + " "):
            return products[gpu]
    return None


def close_products(name: str, vocabulary: "Vocabulary | VocabularyIndex | None" = None, n: int = 3) -> list[str]:
    """Declared product names close to ``name`` (for a did-you-mean)."""
    return difflib.get_close_matches(product_key(name), list(_index(vocabulary).products), n=n, cutoff=0.5)


def declared_archs(vocabulary: "Vocabulary | VocabularyIndex | None" = None) -> tuple[str, ...]:
    """The declared architecture names, in vocabulary order (cpu, NVIDIA by capability, AMD)."""
    return tuple(_index(vocabulary).archs)


def weight_on_input(routing: str, vocabulary: "Vocabulary | VocabularyIndex | None" = None) -> bool:
    """True when a declared routing method applies its weight to the expert's input (``llama4``)."""
    entry = _index(vocabulary).routings.get(routing)
    return bool(entry is not None and entry.weight_on_input)


def __getattr__(name: str) -> Any:
    """Lazy views of the active vocabulary kept for callers of the closed-vocabulary module: ``ARCHS``
    (declared arch names), ``NVIDIA_ARCHS``, ``GPUS`` (product -> arch), ``ACTIVATIONS``, ``ROUTINGS``, and
    ``QUANTS`` (the formats with a row, :func:`moe_select.formats.names`: the table is read at first use)."""
    if name == "QUANTS":
        from .formats import names

        return names()
    if name == "ARCHS":
        return declared_archs()
    if name == "NVIDIA_ARCHS":
        return tuple(a for a in declared_archs() if a.startswith("sm"))
    if name == "GPUS":
        return dict(active().products)
    if name == "ACTIVATIONS":
        return tuple(active().activations)
    if name == "ROUTINGS":
        return tuple(active().routings)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
