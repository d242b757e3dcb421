"""The vocabulary's name syntax, without the data: architecture name patterns and normalisation, compute-capability
order, the field types of facts, rules and deployments (:data:`Arch`, :data:`Activation`, ...), the engines, phases and
a2a modes, and GPU product-name keys. :mod:`moe_select.vocabulary` (the data files) builds on this module and
:mod:`moe_select.vocab` re-exports it beside the active vocabulary (see that module's documentation), so that
the data model never imports the module that reads it."""
from __future__ import annotations

import re
from typing import Annotated, Callable, Literal

from pydantic import AfterValidator, WithJsonSchema

from .yamlio import shorten


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
_INPUT_RE = re.compile(r"^(?:(cpu)|sm_?([1-9][0-9]{1,2})[af]?|(gfx[0-9][0-9a-f]{2,3})(?::[a-z0-9_-]+[+-])*)\Z")
_RANGE_RE = re.compile(r"^sm([1-9][0-9]{1,2})\+\Z")


def normalize_arch(text: str) -> str:
    """The base architecture name of ``text``: lower-cased and stripped; nvcc's ``sm_90`` -> ``sm90``;
    ``sm90a`` -> ``sm90`` and ``sm100f`` -> ``sm100`` (a CUDA compile target's ``a``/``f`` suffix names the
    target's feature set, not another GPU: the GPU is the base arch); ``gfx90a`` is kept (``a`` is a hex
    digit of the LLVM target there); ``gfx942:sramecc+:xnack-`` -> ``gfx942`` (the target features rocminfo and
    torch's gcnArchName append name no other GPU). Raises ``ValueError`` naming the accepted forms for anything else
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


#: The arch of a GPU product name, or None (:func:`moe_select.vocab.gpu_arch`, set by that module when it loads: it
#: builds on this one, which therefore cannot import it).
GPU_ARCH: "Callable[[str], str | None] | None" = None


def _gpu_named(v: str) -> str | None:
    """The arch of the GPU product ``v`` names (a rule or fact that wrote a product where an arch belongs: a fleet
    trial, break55, wrote arch: [H100] and was told 'h100', then 'sm100'), or None."""
    if GPU_ARCH is None:
        return None
    try:
        return GPU_ARCH(v)
    except Exception:   # noqa: BLE001 (no vocabulary loadable: no product hint, the message stands)
        return None


def _arch_spec(v: str) -> str:
    if not _SPEC_RE.match(v):
        if (arch := _gpu_named(v)) is not None:
            raise ValueError(f"{shorten(v)} is a GPU product, not an arch: write its arch {arch!r} (or a family such as "
                             f"{arch[:-1]}x, or a range such as {arch}+)" if arch.startswith("sm") else
                             f"{shorten(v)} is a GPU product, not an arch: write its arch {arch!r}")
        # a letter O for a zero, capitals, spaces: say the spelling meant (an eighth new user's trial)
        fixed = v.strip().lower().replace(" ", "").replace("_", "")
        fixed = fixed[:2] + fixed[2:].replace("o", "0") if fixed.startswith(("sm", "gfx")) else fixed
        hint = (f" (did you mean {fixed!r}?)" if fixed != v and _SPEC_RE.match(fixed) and fixed.startswith(("sm", "gfx", "cpu"))
                else "")
        raise ValueError(f"{shorten(v)} is not an arch, family or range{hint} (write e.g. sm90, gfx942, cpu, a family "
                         "such as sm10x or gfx9, or a range such as sm80+)")
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
GATED_ACTIVATIONS = ("silu", "gelu", "swiglu_oai", "silu_clamped", "situ", "swiglu_oai_split")
#: Clamped variants of a gated activation and the activation each clamps: ``silu_clamped`` is SiLU with the gate
#: clamped above and the up half clamped to [-limit, limit] at the model's ``swiglu_limit`` (DeepSeek-V4). A runner
#: whose facts name the base but not the variant is unverified for it (an upstream check that takes the base
#: activation says nothing of the limit), never refused by the base list's exhaustiveness.
CLAMPED_ACTIVATIONS = {"silu_clamped": "silu"}
#: Routing methods whose weight multiplies the expert's input, not its output (implemented by this project's
#: runners and reference; equal to the bundled vocabulary's ``weight_on_input`` flags, tested).
WEIGHT_ON_INPUT_ROUTINGS = ("llama4",)

def product_key(name: str) -> str:
    """A GPU product name in the form the products table is keyed by: upper case, ``-``/``_`` as spaces,
    runs of spaces collapsed, vendor prefixes (``NVIDIA``, ``Tesla``, ``AMD Instinct``, ``AMD``) dropped."""
    key = " ".join(name.upper().replace("-", " ").replace("_", " ").split())
    for prefix in ("NVIDIA ", "TESLA ", "AMD INSTINCT ", "AMD "):
        key = key.removeprefix(prefix)
    return key
