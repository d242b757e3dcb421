"""Vocabulary files (``vocabulary.yaml``): the names facts and rules may use, as data.

``backends/vocabulary.yaml`` (bundled) declares the architectures (vendor, bf16 support, GPU product
names), the families of architectures (each mirroring an upstream function, cited), the activations,
routing methods and engines. A plugin package (entry-point group ``moe_select.backends``) or an operator
capability folder (``--backends DIR``) may ship its own ``vocabulary.yaml`` that *adds* names; a name
declared twice (an arch, a product, a family, an activation, a routing method) is an error naming both
places, and only the bundled file declares engines (the selector checks exactly those).

:func:`merge` combines the files of one catalog into one :class:`Vocabulary` (the catalog keeps it, and
:func:`moe_select.vocab.use` makes it the active one); :func:`name_issues` finds the names a fact or
rule file uses that no vocabulary declares (catalog loading and ``moe-select check`` report them with
file:line and a did-you-mean). :mod:`moe_select.vocab` answers questions with it (:func:`~moe_select.vocab.arch_in`,
:func:`~moe_select.vocab.gpu_arch`, :func:`~moe_select.vocab.has_bf16`).
"""
from __future__ import annotations

import difflib
import threading
import typing
from pathlib import Path
from typing import Any, Iterable, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from .errors import InputError, Issue
from .located import Located
from .vocab_names import (ALL_ENGINES, GATED_ACTIVATIONS, NAME_PATTERN, WEIGHT_ON_INPUT_ROUTINGS, VocabRef, capability,
                    is_arch, normalize_arch_error, range_floor, vendor_of)

SCHEMA_VERSION = 3
#: File name of a vocabulary in a capability folder (bundled ``backends/``, a plugin's package, an operator's).
FILE_NAME = "vocabulary.yaml"
#: Sources a vocabulary entry may cite: what a fact may cite (``owner/repo@version:path[:symbol]``, a PR or
#: issue, ``this project: ...``), or a vendor's public page (``https://...``: the product tables).
SOURCE_PATTERN = (r"^(\(reported\) )?[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(@[A-Za-z0-9_.+-]+:[^\s:]+(:[A-Za-z0-9_.]+)?|#\d+)"
                  r"|^this project: |^https://\S+")


#: NVIDIA generations by name -> the arch names facts use (CUDA compute capabilities: Volta 7.0, Turing 7.5, Ampere 8.0
#: and 8.6, Ada 8.9, Hopper 9.0; NVIDIA's CUDA GPUs table); only for the hint of an unknown arch name.
_GENERATIONS = {"volta": "sm70", "turing": "sm75", "ampere": "sm8x (sm80, sm86)", "ada": "sm89",
                "lovelace": "sm89", "hopper": "sm9x (sm90)"}


class ArchEntry(Located):
    """One architecture: ``name`` (a base arch name: ``sm90``, ``gfx942``, ``cpu``), ``vendor`` (must agree
    with the name), ``bf16`` (False where the GPU computes no bfloat16: plans there compute weight-only
    formats in fp16), ``products`` (GPU product names, upper case as :func:`moe_select.vocab.product_key`
    writes them) and ``source``. NVIDIA compute capability is the name's (``sm75`` is 7.5)."""

    name: str = Field(min_length=1, max_length=16)
    vendor: Literal["nvidia", "amd", "cpu"]
    bf16: bool = True
    products: list[str] = []
    source: str = Field(pattern=SOURCE_PATTERN)
    #: Memory of one device of each product in GiB, as its vendor states it (a ``[min, max]`` range where one product
    #: name covers boards of several sizes); read by engine defaults that depend on it (an engine's decode CUDA-graph
    #: batch). A product not listed has no known memory.
    memory_gib: dict[str, float | list[float]] = {}
    #: Where the memory sizes come from (required with ``memory_gib``).
    memory_source: str | None = Field(default=None, pattern=SOURCE_PATTERN)

    @field_validator("name")
    @classmethod
    def _base_name(cls, v: str) -> str:
        if not is_arch(v):
            raise ValueError(normalize_arch_error(v))
        return v

    @field_validator("products")
    @classmethod
    def _products(cls, v: list[str]) -> list[str]:
        from .vocab_names import product_key

        for p in v:
            if product_key(p) != p or not p:
                raise ValueError(f"product {p[:40]!r}: write it as {product_key(p)!r} (upper case, spaces, no vendor prefix)")
        return v

    @model_validator(mode="after")
    def _vendor(self) -> "ArchEntry":
        if vendor_of(self.name) != self.vendor:
            raise ValueError(f"{self.name} is a {vendor_of(self.name)} name, not {self.vendor}")
        if self.memory_gib and self.memory_source is None:
            raise ValueError("memory_gib needs memory_source (where the sizes come from)")
        for product, gib in self.memory_gib.items():
            if product not in self.products:
                raise ValueError(f"memory_gib: {product!r} is not one of this arch's products ({', '.join(self.products)})")
            lo, hi = (gib[0], gib[-1]) if isinstance(gib, list) else (gib, gib)
            if (isinstance(gib, list) and len(gib) != 2) or not 0 < lo <= hi:
                raise ValueError(f"memory_gib: {product}: give a positive size, or [min, max] with min <= max")
        return self

    def memory(self, product: str) -> tuple[float, float] | None:
        """``(min, max)`` GiB of one device of ``product``, or None when not listed."""
        gib = self.memory_gib.get(product)
        if gib is None:
            return None
        return (gib[0], gib[1]) if isinstance(gib, list) else (gib, gib)


class Family(Located):
    """A family of architectures, as an upstream function tests for one: ``members`` (arch names: vLLM's
    ``on_gfx9()`` is gfx90a, gfx942, gfx950), ``majors`` (NVIDIA compute-capability majors: SGLang's
    ``is_sm100_supported()`` holds for every 10.x, declared or not) or ``vendor`` (every GPU arch of one vendor,
    declared or not: vLLM's ``is_rocm()`` holds for any AMD GPU, gfx1151 as much as gfx942). ``source`` cites the
    function."""

    name: str = Field(pattern=NAME_PATTERN, max_length=32)
    members: list[str] | None = Field(default=None, min_length=1)
    majors: list[int] | None = Field(default=None, min_length=1)
    vendor: Literal["nvidia", "amd"] | None = None
    why: str | None = None
    source: str = Field(pattern=SOURCE_PATTERN)

    @field_validator("name")
    @classmethod
    def _not_an_arch(cls, v: str) -> str:
        try:
            from .vocab_names import normalize_arch

            normalize_arch(v)
        except ValueError:
            return v
        raise ValueError(f"family {v!r} reads as an architecture name: give a family a name that is none (e.g. sm10x, gfx9)")

    @field_validator("members")
    @classmethod
    def _members(cls, v: list[str] | None) -> list[str] | None:
        for m in v or []:
            if not is_arch(m):
                raise ValueError(normalize_arch_error(m))
        return v

    @field_validator("majors")
    @classmethod
    def _majors(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and not all(1 <= m <= 99 for m in v):
            raise ValueError(f"majors are NVIDIA compute-capability major versions (1-99), got {v}")
        return v

    @model_validator(mode="after")
    def _one_way(self) -> "Family":
        if sum(x is not None for x in (self.members, self.majors, self.vendor)) != 1:
            raise ValueError("give one of members (arch names), majors (compute-capability majors) or vendor (every "
                             "arch of nvidia or amd)")
        return self

    def contains(self, arch: str) -> bool:
        """True when base arch ``arch`` (declared or not) belongs to this family."""
        if self.vendor is not None:
            return vendor_of(arch) == self.vendor
        if self.members is not None:
            return arch in self.members
        cap = capability(arch)
        return cap is not None and cap[0] in (self.majors or [])

    def describe(self) -> str:
        """``sm10x (compute capability 10.x)``, ``gfx9 (gfx90a, gfx942, gfx950)`` or ``rocm (every amd GPU)``."""
        if self.vendor is not None:
            return f"{self.name} (every {self.vendor} GPU)"
        if self.members is not None:
            return f"{self.name} ({', '.join(self.members)})"
        return f"{self.name} (compute capability {' or '.join(f'{m}.x' for m in self.majors or [])})"


class ActivationEntry(Located):
    """An activation: ``gated`` (w13 holds a gate and an up half) and ``source``."""

    name: str = Field(pattern=NAME_PATTERN, max_length=64)
    gated: bool
    source: str = Field(pattern=SOURCE_PATTERN)


class RoutingEntry(Located):
    """A routing method: ``weight_on_input`` (its weight multiplies the expert's input: llama4) and ``source``."""

    name: str = Field(pattern=NAME_PATTERN, max_length=64)
    weight_on_input: bool = False
    source: str = Field(pattern=SOURCE_PATTERN)


class EngineEntry(Located):
    """A serving engine whose facts can differ (bundled file only)."""

    name: str = Field(pattern=NAME_PATTERN, max_length=64)
    source: str = Field(pattern=SOURCE_PATTERN)


class Vocabulary(Located):
    """A ``vocabulary.yaml`` file, or the merge of a catalog's files (:func:`merge`)."""

    schema_version: Literal[3]
    archs: list[ArchEntry] = []
    families: list[Family] = []
    activations: list[ActivationEntry] = []
    routings: list[RoutingEntry] = []
    engines: list[EngineEntry] = []


class VocabularyIndex:
    """Lookups over one :class:`Vocabulary`: name -> entry for ``archs``, ``families``, ``activations``,
    ``routings``, ``engines``, and ``products`` (product name -> arch)."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        self.archs = {a.name: a for a in vocabulary.archs}
        self.families = {f.name: f for f in vocabulary.families}
        self.activations = {a.name: a for a in vocabulary.activations}
        self.routings = {r.name: r for r in vocabulary.routings}
        self.engines = {e.name: e for e in vocabulary.engines}
        self.products = {p: a.name for a in vocabulary.archs for p in a.products}
        #: product name -> (min, max) GiB of one device, where the vocabulary says
        self.memory = {p: m for a in vocabulary.archs for p in a.products if (m := a.memory(p)) is not None}

    def arch_spec_problem(self, spec: str) -> str | None:
        """Why ``spec`` cannot name architectures in a fact or rule (not a declared arch or family, nor a
        range ``sm<XY>+``), with a did-you-mean; None when it can."""
        if spec in self.archs or spec in self.families:
            return None
        if spec.endswith("+"):
            if range_floor(spec) is not None:
                return None
            return (f"{spec!r} is not a range: a range is an NVIDIA arch and + (sm75+: compute capability 7.5 and newer); "
                    "AMD targets have no order: list them or name a family")
        try:
            from .vocab_names import normalize_arch

            base = normalize_arch(spec)
        except ValueError:
            base = None
        if base is not None and base != spec:
            return f"{spec!r}: write the base architecture {base!r} (a compile-target suffix names no other GPU)"
        if base is not None:
            return (f"architecture {spec!r} is not declared in a vocabulary"
                    + (_did_you_mean(spec, self.archs) or _did_you_mean(spec, self.families))
                    + ": declare it (backends/vocabulary.yaml, or a plugin's or --backends folder's vocabulary.yaml)"
                    + (f", or use the range {spec}+" if spec.startswith("sm") else ""))
        from .vocab_names import product_key

        if (arch := self.products.get(product_key(spec))) is not None:   # a product where an arch belongs (break55)
            return f"{spec!r} is a GPU product, not an arch: write its arch {arch!r}"
        gen = _GENERATIONS.get(spec.lower())
        if gen is not None:   # an NVIDIA generation's name (a new operator's trial wrote archs: [hopper])
            return f"unknown arch or family {spec!r}: NVIDIA's {spec} is {gen}"
        return f"unknown arch or family {spec!r}" + _did_you_mean(spec, [*self.archs, *self.families])

    def name_problem(self, kind: str, name: str) -> str | None:
        """Why ``name`` is not a declared ``kind`` (``arch``, ``activation``, ``routing``), or None."""
        if kind == "arch":
            return self.arch_spec_problem(name)
        table = self.activations if kind == "activation" else self.routings
        if name in table:
            return None
        return (f"unknown {kind} {name!r}" + _did_you_mean(name, table)
                + f"; declared: {', '.join(table)} (declare a new one in a vocabulary.yaml)")


def _did_you_mean(name: str, names: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


_lock = threading.Lock()
_indexes: dict[int, tuple[Vocabulary, VocabularyIndex]] = {}
_bundled: list[VocabularyIndex] = []


def index_of(vocabulary: Vocabulary) -> VocabularyIndex:
    """The (cached) :class:`VocabularyIndex` of ``vocabulary``."""
    with _lock:
        hit = _indexes.get(id(vocabulary))
        if hit is not None and hit[0] is vocabulary:
            return hit[1]
        if len(_indexes) > 32:  # catalogs of a long-lived process: keep the map small
            _indexes.clear()
        idx = VocabularyIndex(vocabulary)
        _indexes[id(vocabulary)] = (vocabulary, idx)
        return idx


def bundled_path() -> Path:
    """``vocabulary.yaml`` of the installed ``moe_select.backends``."""
    import importlib

    return Path(importlib.import_module("moe_select.backends").__file__ or ".").parent / FILE_NAME


def bundled_index() -> VocabularyIndex:
    """The bundled vocabulary, read and validated once per process (when no catalog made one active).
    Raises :class:`InputError` when the bundled file does not load (a broken install)."""
    if _bundled:
        return _bundled[0]
    from .yamlio import load_file, validate

    path = bundled_path()
    display = f"backends/{FILE_NAME}"
    vocab = validate(Vocabulary, load_file(path, display, kind="vocabulary file"), display)
    issues = check_bundled(vocab)
    if issues:
        raise InputError(issues)
    idx = index_of(vocab)
    with _lock:
        if not _bundled:
            _bundled.append(idx)
    return _bundled[0]


def check_bundled(vocab: Vocabulary) -> list[Issue]:
    """The bundled file's own promises: its engines are exactly :data:`moe_select.vocab.ALL_ENGINES` (the serving
    engines and ``moe_select``, this install), its gated activations and weight-on-input routings are the ones this
    project's code implements."""
    out = []
    names = tuple(e.name for e in vocab.engines)
    if names != ALL_ENGINES:
        out.append(Issue(vocab._file, vocab._lines.get("engines", vocab._line), "engines",
                         f"engines {list(names)} must be the engines the selector checks: {list(ALL_ENGINES)}"))
    gated = tuple(a.name for a in vocab.activations if a.gated)
    if gated != GATED_ACTIVATIONS:
        out.append(Issue(vocab._file, vocab._lines.get("activations", vocab._line), "activations",
                         f"gated activations {list(gated)} differ from what the code implements: {list(GATED_ACTIVATIONS)}"))
    on_input = tuple(r.name for r in vocab.routings if r.weight_on_input)
    if on_input != WEIGHT_ON_INPUT_ROUTINGS:
        out.append(Issue(vocab._file, vocab._lines.get("routings", vocab._line), "routings",
                         f"weight-on-input routings {list(on_input)} differ from what the code implements: "
                         f"{list(WEIGHT_ON_INPUT_ROUTINGS)}"))
    return out


def merge(files: list[Vocabulary]) -> tuple[Vocabulary, list[Issue]]:
    """One vocabulary from the files of a catalog, in order (bundled first), and the issues: a name
    declared twice (arch, product, family, activation, routing), engines outside the first file, family
    members that are not declared archs (a family of majors needs none). The entries keep their marks."""
    issues: list[Issue] = []
    seen: dict[tuple[str, str], Located] = {}
    out: dict[str, list[Any]] = {"archs": [], "families": [], "activations": [], "routings": [], "engines": []}
    for n, f in enumerate(files):
        if n and f.engines:
            issues.append(Issue(f._file, f._lines.get("engines", f._line), "engines",
                                "only the bundled vocabulary declares engines (the selector checks exactly those): "
                                "drop engines from this file"))
        for key in out:
            for entry in getattr(f, key):
                kind = key[:-1] if key != "families" else "family"
                names = [(kind, entry.name)]
                if key == "archs":
                    names += [("product", p) for p in entry.products]
                clash = next(((k, nm) for k, nm in names if (k, nm) in seen), None)
                # a product that extends one declared on another arch ("H100 NVL" after "H100") would silently change
                # what that name means: gpu: H100 NVL is read as H100 (a memory / form-factor suffix) before this file
                longer = next(((p, old) for k, p in names if k == "product" for (kk, old) in seen
                               if kk == "product" and p.startswith(old + " ")
                               and getattr(seen[("product", old)], "name", None) != getattr(entry, "name", None)), None)
                if clash is None and longer is not None:
                    first = seen[("product", longer[1])]
                    issues.append(Issue(entry._file, entry._lines.get("products", entry._line), key,
                                        f"product {longer[0]!r} extends {longer[1]!r} (declared at {first.where()}), which "
                                        f"already names it (a suffix is read as the board's memory or form factor): a "
                                        "vocabulary file adds names, it does not change what one means"))
                    continue
                if clash is not None:
                    first = seen[clash]
                    issues.append(Issue(entry._file, entry._line, key, f"{clash[0]} {clash[1]!r} is already declared at "
                                        f"{first.where()}: a vocabulary file adds names, it does not redeclare them"))
                    continue
                for k in names:
                    seen[k] = entry
                out[key].append(entry)
    merged = Vocabulary.model_construct(schema_version=3, archs=out["archs"], families=out["families"],
                                        activations=out["activations"], routings=out["routings"], engines=out["engines"])
    if files:
        merged._file, merged._line = files[0]._file, files[0]._line
    archs = {a.name for a in out["archs"]}
    for fam in out["families"]:
        for m in fam.members or []:
            if m not in archs:
                issues.append(Issue(fam._file, fam._lines.get("members", fam._line), "members",
                                    f"family {fam.name}: member {m!r} is not a declared arch" + _did_you_mean(m, archs)))
        if fam.name in archs:
            issues.append(Issue(fam._file, fam._line, "name", f"family {fam.name!r} has the name of an arch"))
    return merged, issues


# ------------------------------------------------------------------------------ names used by files
_FIELD_KINDS: dict[type, list[tuple[str, str]]] = {}


def _kind_of(tp: Any) -> str | None:
    """The :class:`~moe_select.vocab.VocabRef` kind inside a field type (``list[Arch]``, ``Routing | ...``)."""
    for meta in getattr(tp, "__metadata__", ()):
        if isinstance(meta, VocabRef):
            return meta.kind
    for arg in typing.get_args(tp):
        kind = _kind_of(arg)
        if kind is not None:
            return kind
    return None


def _fields(cls: type) -> list[tuple[str, str]]:
    if cls not in _FIELD_KINDS:
        found = []
        for name, info in getattr(cls, "model_fields", {}).items():
            kind = next((m.kind for m in info.metadata if isinstance(m, VocabRef)), None) or _kind_of(info.annotation)
            if kind is not None:
                found.append((name, kind))
        _FIELD_KINDS[cls] = found
    return _FIELD_KINDS[cls]


def name_issues(obj: Any, index: VocabularyIndex, path: str = "") -> list[Issue]:
    """Every arch specifier, activation and routing name in ``obj`` (a fact or rule file's model, or a list
    or dict of them) that ``index`` does not declare, each an :class:`Issue` at the file:line of the model
    that holds it, the field path from ``obj`` (``support[0].archs``, ``rules[2].when.arch``) and the reason
    (:meth:`VocabularyIndex.name_problem`). ``path``: the prefix of the field paths (ending in ``.``)."""
    out: list[Issue] = []
    if isinstance(obj, BaseModel):
        for name, kind in _fields(type(obj)):
            value = getattr(obj, name)
            values = value if isinstance(value, list) else [] if value is None or value == "any" else [value]
            for v in values:
                problem = index.name_problem(kind, v) if isinstance(v, str) else None
                if problem:
                    located = isinstance(obj, Located)
                    out.append(Issue(obj._file if located else "<input>",  # type: ignore[attr-defined]
                                     obj._lines.get(name, obj._line) if located else 0,  # type: ignore[attr-defined]
                                     f"{path}{name}", problem))
        for name in type(obj).model_fields:
            value = getattr(obj, name)
            if isinstance(value, BaseModel):
                out += name_issues(value, index, f"{path}{name}.")
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    out += name_issues(item, index, f"{path}{name}[{i}].")
            elif isinstance(value, dict):
                for k, item in value.items():
                    out += name_issues(item, index, f"{path}{name}.{k}.")
    elif isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            out += name_issues(item, index, f"{path}[{i}].")
    elif isinstance(obj, dict):
        for k, item in obj.items():
            out += name_issues(item, index, f"{path}{k}.")
    return out
