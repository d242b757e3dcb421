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
from typing import TYPE_CHECKING, Any, Collection, Iterable

from .formats import Quant  # noqa: F401  (one table of formats; re-exported; QUANTS: __getattr__)
from .vocab_names import (  # noqa: F401  (the name syntax, re-exported: one import for callers)
    A2AMode, A2A_MODES, ALL_ENGINES, ARCH_PATTERN, ARCH_SPEC_PATTERN, Activation, Arch, ArchInput, ArchName,
    ENGINES, Engine, GATED_ACTIVATIONS, INSTALL_ENGINE, NAME_PATTERN, PHASES_OF, Phase, QuantName, Routing, Runner,
    VocabRef, WEIGHT_ON_INPUT_ROUTINGS, _ARCH_RE, _INPUT_RE, _NAME_RE, _RANGE_RE, _SPEC_RE, _arch_input,
    _arch_name, _arch_spec, _name, arch_of_capability, capability, is_arch, normalize_arch, normalize_arch_error,
    product_key, range_floor, vendor_of,
)

if TYPE_CHECKING:
    from .vocabulary import Vocabulary, VocabularyIndex


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




def gpu_arch(name: str, vocabulary: "Vocabulary | VocabularyIndex | None" = None) -> str | None:
    """Architecture of a GPU product name (case, ``-``/``_`` and vendor prefixes forgiven: 'h200',
    'RTX-PRO-6000', 'Tesla T4', 'AMD Instinct MI250X'; memory/form-factor suffixes too: 'H100 80GB HBM3',
    'A100-SXM4-80GB'), or None for a product no vocabulary declares (give ``arch:`` then)."""
    products = _index(vocabulary).products
    product = _product_of(name, products)
    return products[product] if product is not None else None


def _product_of(name: str, products: "Collection[str]") -> str | None:
    """The declared product ``name`` names (exactly, or with a memory / form-factor suffix), or None."""
    key = product_key(name)
    if key in products:
        return key
    return next((gpu for gpu in sorted(products, key=len, reverse=True) if key.startswith(gpu + " ")), None)


_MEMORY_SUFFIX = re.compile(r"(?:^| )(\d{1,4})GB(?: |$)")


def gpu_memory_gib(name: str, vocabulary: "Vocabulary | VocabularyIndex | None" = None) -> tuple[tuple[float, float], str] | None:
    """``((min, max) GiB, how)`` of one device of the GPU product ``name``: the size the name states (``'A100-SXM4-80GB'``,
    ``'H100 80GB HBM3'``), else the vocabulary's ``memory_gib`` of the product (a range where the name covers several
    boards); None where neither says. ``how`` says which."""
    key = product_key(name)
    m = _MEMORY_SUFFIX.search(key)
    product = _product_of(name, _index(vocabulary).products)
    if m is not None and product is not None:
        gib = float(m.group(1))
        return (gib, gib), f"{gib:g} GB as the name {name!r} states"
    if product is None:
        return None
    memory = _index(vocabulary).memory.get(product)
    if memory is None:
        return None
    lo, hi = memory
    return memory, f"{product}: {lo:g}" + (f" .. {hi:g}" if hi != lo else "") + " GiB (backends/vocabulary.yaml memory_gib)"


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


def _register_arch_matcher() -> None:
    """Give :mod:`moe_select.formats` (which this module builds on, so it cannot import it) the arch matcher its
    online-quantization facts read."""
    from . import formats, vocab_names

    formats.ARCH_IN = arch_in
    vocab_names.GPU_ARCH = gpu_arch


_register_arch_matcher()
