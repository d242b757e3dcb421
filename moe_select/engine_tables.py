"""The engines' launch vocabularies as data (``backends/engines/*.yaml``), validated with file:line errors.

- ``sglang.yaml``, ``vllm.yaml``, ``trtllm.yaml`` (:class:`EngineTable`): how each engine is launched
  (``launchers``), how it parses its command line (``parser``), its flags (:class:`FlagEntry`), the
  environment variables that change its MoE choice (:class:`EnvEntry`) and, for TensorRT-LLM, the keys of its
  ``--extra_llm_api_options`` YAML (``config_keys``), and the quantization method names it refuses for a kind of
  checkpoint (``quant_mismatch``: :class:`QuantMismatch`). Every entry says what it *means* for the MoE choice
  (:data:`Meaning`: a closed list that :mod:`moe_select.launch_line` maps onto a deployment), the engine
  version or ref it was checked at, its source (the engine's argument definition at a commit, or the PR
  that added, renamed or removed it), and, where it changed, ``since`` / ``deprecated`` / ``removed`` /
  ``ignored`` (:class:`Change`: the PR or code that says so, the date, the version where a source names one).
- ``names.yaml`` (:class:`NamesTable`): this project's runner and all-to-all names against each engine's, the names an
  engine dispatches on the checkpoint format (:class:`FormatName`: vLLM's ``triton`` on MXFP4), TensorRT-LLM's
  ``moe_config.backend: AUTO`` resolution (:class:`TrtllmAuto`) and retired backend names (:class:`Retired`); generated
  into the README (:func:`names_block`, by ``moe-select matrix --write``).

Raises :class:`~moe_select.errors.InputError` (file:line, field) for a file that does not validate: an
unknown key, a meaning outside :data:`Meaning`, a source that is no citation, a flag name given twice.
"""
from __future__ import annotations

import functools
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .conditions import IntRange, When
from .errors import InputError, Issue
from .located import Located
from .releases import Releases, _load, _pep440_version, engines_dir, release_date, releases  # noqa: F401 (re-exported)

SCHEMA_VERSION = 1
ENGINES = ("sglang", "vllm", "trtllm")

#: What a flag, variable or config key means for the MoE choice; :mod:`moe_select.launch_line` maps each.
Meaning = Literal[
    "model", "config_file", "extra_options",
    "tp", "dp", "ep", "ep_switch", "pp", "pcp", "dp_local", "moe_dp", "moe_tp", "dp_attention", "nnodes",
    # attention data parallelism given as its size (one flag, not a switch beside dp): the deployment's dp
    "attn_dp",
    "runner", "a2a", "a2a_mode", "quant", "shared_expert_fusion_off", "eplb", "eplb_config", "dbo", "waterfill",
    # LoRA adapters served: a switch, or a list of adapters that turns it on (the deployment's lora)
    "lora",
    # a boolean variable that, set, makes the engine run the all-to-all its entry's ``a2a`` names, whatever was given
    "a2a_switch",
    "cuda_graph_off", "cuda_graph_backend", "cuda_graph_phases", "cuda_graph_max_bs", "cuda_graph_bs", "cuda_graph_config", "compilation_config",
    "chunked_prefill", "max_batched_tokens", "max_running", "spec_algo", "spec_draft_tokens", "spec_tokens", "spec_config",
    "disagg_mode", "kv_transfer_config", "kernel_config", "server_role", "moe_config", "trt_backend",
    # an all-to-all buffer's per-rank token capacity (a variable an a2a file's ``capacity`` names): a2a_capacity
    "a2a_capacity",
    # an NVFP4 activation-scale switch (a boolean variable: true is per-token, false per-tensor; quant_config.activation_scale)
    "activation_scale",
    # the experts' activation precision asked of the engine (quant_config.activation_precision); the entry's ``values``
    # map each engine value to a precision name (null: the engine's default, nothing asked)
    "activation_precision",
    # the precision an all-to-all sends the MoE activations in (the deployment's dispatch_precision); ``values`` map each
    # engine value to a precision name (null: auto), ``layers`` says which MoE layer kinds it sets, ``a2a`` which all-to-alls
    "dispatch_precision",
    # removed switches and ignored variables, read for what they used to mean (the entry's ``replacement`` names
    # today's spelling): tp-wide expert parallelism, an all-to-all backend, a runner
    "ep_equals_tp", "retired_a2a", "retired_runner",
    # the engine's switch for the GPU vendor's kernel library (a boolean variable: the deployment's vendor_library)
    "vendor_library",
    # a boolean variable that turns the engine's shared-expert fusion on or off (the deployment's shared_expert_fusion)
    "shared_expert_fusion",
    # the speculative draft's MoE runner and all-to-all (the deployment's layer_runners / layer_a2a of the checkpoint's
    # MTP layer kind; a note where the checkpoint has none)
    "draft_runner", "draft_a2a",
    # a switch that lets the engine load a quantization method it deprecated (vLLM's --allow-deprecated-quantization;
    # names.yaml's quant choices row says which names and releases need it)
    "allow_deprecated_quant",
    # understood: it bears on the MoE layer, but no deployment field holds it (a note says so)
    "moe_read",
    # understood: it does not concern the MoE choice
    "not_moe",
]
#: How a flag takes its value: ``switch`` (none), ``bool_optional`` (``--x`` / ``--no-x``), ``bool`` (a YAML
#: boolean), ``value``/``int``/``file``/``json`` (one token), ``list`` (one or more tokens, up to the next flag).
Takes = Literal["switch", "bool_optional", "bool", "value", "int", "file", "json", "list"]
#: A citation: ``owner/repo@ref:path[:symbol]`` (ref: a commit, or a release tag such as ``v0.5.23``),
#: ``owner/repo#N``, or ``this project: ...``; more may follow.
CITATION = re.compile(r"^([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(@([0-9a-f]{7,40}|v\d+(\.\d+)*(\.post\d+|rc\d+)?):[^\s:;]+(:[A-Za-z0-9_.]+)?|#\d+)"
                      r"|this project: )")
_KEYED = re.compile(r"^([a-z_]+):([A-Za-z0-9_.]+)\Z")


_FLAG = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


class Change(Located):
    """When a flag or variable was added, deprecated, removed or became ignored: ``by`` (the PR, or the code
    that says so), ``date`` (the PR's merge date), ``version`` (PEP 440; only where a source names it) and
    ``announced`` (the version is the one the deprecation message announced, not a release checked) with ``why``,
    one line saying why no release was checked (required with ``announced``: issue 21, a version that may have
    shipped since is re-read, not carried)."""

    by: str
    date: str | None = Field(default=None, pattern=r"^\d{4}-\d{2}-\d{2}$")
    version: str | None = None
    announced: bool = False
    why: str | None = None

    @model_validator(mode="after")
    def _announced_says_why(self) -> "Change":
        if self.announced and not (self.why or "").strip():
            raise ValueError("announced: true needs a why (one line: why the release was not checked)")
        if self.why is not None and ("\n" in self.why or not self.why.strip()):
            raise ValueError("why must be one non-empty line")
        return self

    @field_validator("by")
    @classmethod
    def _cited(cls, v: str) -> str:
        if not CITATION.match(v):
            raise ValueError(f"{v[:60]!r} is not a citation (owner/repo@commit:path[:symbol] or owner/repo#N)")
        return v

    @field_validator("version")
    @classmethod
    def _pep440(cls, v: str | None) -> str | None:
        return None if v is None else _pep440_version(v)

    @property
    def read_here(self) -> bool:
        """True for a change this project read in the releases themselves (``by`` "this project: ..."), not one an
        upstream PR or commit made."""
        return self.by.startswith("this project:")

    def verb(self, what: str) -> str:
        """``removed by`` / ``deprecated by``, or ``... in`` for a change :attr:`read_here` (whose :meth:`text` leads
        with the release), so the wording never names this project as the one who made it (break51)."""
        return f"{what} {'in' if self.read_here else 'by'}"

    def made_at(self, version: str | None, engine: str) -> bool | None:
        """Whether ``engine`` release ``version`` (None or unparsable: the tables' newest) has this change: by version
        where the change names one, else by date (the release's date, backends/engines/releases.yaml, after the change's
        merge date: a release of the merge day may have been cut before it); None where neither is known."""
        from packaging.version import InvalidVersion, Version

        def ver(text: str | None) -> Version | None:
            try:
                return None if text is None else Version(text)
            except InvalidVersion:
                return None
        v = ver(version)
        if v is None:
            return True
        cv = ver(self.version)
        if cv is not None:
            return v >= cv
        released = release_date(engine, version) if version is not None else None
        if self.date is not None and released is not None:   # a release of the merge day is judged without it
            return released > self.date
        return None

    def text(self) -> str:
        """``vllm-project/vllm#33535 (2026-02-02, v0.15.0)``; a change this project read in the releases themselves
        (``by`` "this project: ...") reads ``v0.5.20 (this project read: ...)``, so "removed by" never names this
        project as the remover (a new user's trial, break51)."""
        bits = [b for b in (self.date, f"v{self.version}" + (" as announced" if self.announced else "") if self.version else None) if b]
        if self.read_here and bits:
            return f"{', '.join(bits)} (this project read: {self.by.removeprefix('this project:').strip()})"
        return self.by + (f" ({', '.join(bits)})" if bits else "")


class _Entry(Located):
    means: Meaning
    checked: str = Field(min_length=1)
    source: str
    since: Change | None = None
    deprecated: Change | None = None
    removed: Change | None = None
    ignored: Change | None = None
    replacement: str | None = None
    note: str | None = None
    #: The engine's values and what each means here, for a flag or variable whose values are the engine's names
    #: (``means: activation_precision``: a precision name of :data:`moe_select.formats.Precision`; null: the
    #: engine's default). A value the engine takes but this map lacks is read as unknown (a finding), never guessed.
    values: dict[str, str | None] | None = None
    #: How the engine reads the raw value before ``values`` looks it up (issue 21): ``exact`` (a choice of its parser),
    #: ``lower`` (lower-cased first), ``env_bool`` (SGLang's EnvBool: true/1/yes/y is ``"1"``, false/0/no/n ``"0"``, any
    #: other value raises), ``bool_env_var`` (SGLang's get_bool_env_var: true/1 is ``"1"``, false/0 ``"0"``, any other
    #: value is read as false with a warning), ``int_bool`` (vLLM's ``bool(int(v))``: 0 is ``"0"``, another integer
    #: ``"1"``, a non-integer raises).
    parse: Literal["exact", "lower", "env_bool", "bool_env_var", "int_bool"] = "exact"
    #: A value ``values`` lacks after ``parse``: ``refused`` (the engine raises: an engine_error finding) or ``ignored``
    #: (the engine keeps its own choice: a finding says so); ``unknown_refused_since``: the release from which the
    #: engine raises for it instead (``unknown: ignored`` only).
    unknown: Literal["refused", "ignored"] = "refused"
    unknown_refused_since: Change | None = None
    #: From ``removed``, the engine raises at startup when the variable (or flag) is given at all, instead of ignoring it
    #: (vLLM's removed_environment_variables): the reader reports it as an engine error.
    removed_raises: bool = False
    #: ``means: dispatch_precision`` only. ``layers``: the MoE layer kinds the value sets: ``all`` (every kind, draft/MTP
    #: layers included: read as the scalar ``dispatch_precision``) or ``main`` (the main layers; a layer of another kind
    #: keeps the engine's own choice: read as ``{main: X}``). ``a2a``: our all-to-all backends (backends/a2a/*.yaml) whose
    #: dispatch it sets, ``a2a_modes`` the modes (None: any); with another all-to-all it is not read (``other_a2a:
    #: ignored``, a note) or the engine raises at startup (``raises``, an engine_error finding). ``auto_decides``: an
    #: explicit null value here still decides (the sources after it are not read), as a variable whose presence the engine
    #: tests first. ``a2a`` also on ``means: dbo`` (our all-to-all backends vLLM's dual-batch overlap runs over, compared
    #: with the deployment's a2a) and ``means: waterfill`` (the engine's values SGLang's Waterfill runs over, the first the
    #: one it overrides another to).
    layers: Literal["main", "all"] | None = None
    a2a: list[str] | None = None
    a2a_modes: list[Literal["normal", "low_latency"]] | None = None
    other_a2a: Literal["ignored", "raises"] = "ignored"
    auto_decides: bool = False
    #: ``means: activation_precision`` only: the runners (our names; ``auto``: the launch names none, the engine picks)
    #: and checkpoint formats the engine reads it for; elsewhere it is not read (a note), and ``plan --emit`` does not
    #: write it (None: every runner / format).
    runners: list[str] | None = None
    formats: list[str] | None = None
    #: ``means: activation_precision`` with ``runners: [auto]`` only: the runners (our names) the engine's own pick can
    #: be under it (the variable's comment says on which GPUs): ``plan --emit`` writes the variable, and no runner
    #: option, for a plan of one of them (None: never).
    picks: list[str] | None = None

    @model_validator(mode="after")
    def _values_fit_meaning(self) -> "_Entry":
        valued = ("activation_precision", "dispatch_precision")
        if self.means in valued:
            from .formats import PRECISIONS

            if not self.values:
                raise ValueError(f"means: {self.means} needs values (the engine's value -> a precision name, or null)")
            bad = [v for v in self.values.values() if v is not None and v not in PRECISIONS]
            if bad:
                raise ValueError(f"values: {bad[0]!r} is not a precision name ({', '.join(PRECISIONS)})")
            if self.parse in ("env_bool", "bool_env_var", "int_bool") and not set(self.values) <= {"0", "1"}:
                raise ValueError(f"parse: {self.parse} reads the value as \"0\" or \"1\": values can name only those "
                                 f"(got {', '.join(repr(k) for k in self.values if k not in ('0', '1'))})")
            if self.parse == "lower" and any(k != k.lower() for k in self.values):
                raise ValueError("parse: lower reads the value lower-cased: values' keys must be lower case")
        elif self.values is not None:
            raise ValueError(f"values maps the engine's names for means: {' or '.join(valued)} only (this entry means {self.means})")
        elif self.parse != "exact" or self.unknown != "refused":
            raise ValueError(f"parse and unknown say how values reads the engine's value: means {' or '.join(valued)} only")
        if self.unknown_refused_since is not None and self.unknown != "ignored":
            raise ValueError("unknown_refused_since: the release from which an ignored unknown value is refused (unknown: ignored only)")
        scoped = {k: getattr(self, k) for k in ("layers", "a2a", "a2a_modes") if getattr(self, k) is not None}
        if self.other_a2a != "ignored":
            scoped["other_a2a"] = self.other_a2a
        if self.auto_decides:
            scoped["auto_decides"] = True
        if self.means == "dispatch_precision":
            missing = [k for k in ("layers", "a2a") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"means: dispatch_precision needs {' and '.join(missing)} (which MoE layer kinds it sets: main or all; "
                                 "which of our all-to-all backends read it)")
            if not self.a2a:
                raise ValueError("a2a: name at least one all-to-all backend (backends/a2a/<name>.yaml) that reads it")
            for name in self.a2a:
                if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
                    raise ValueError(f"a2a: {name[:40]!r} is not an all-to-all backend name (lower case, digits, _)")
        elif self.means in ("dbo", "waterfill", "a2a_switch") and set(scoped) == {"a2a"}:
            pass    # the all-to-alls dual-batch overlap or Waterfill runs over (the field's doc says in whose names)
        elif scoped:
            raise ValueError(f"{', '.join(scoped)}: for means: dispatch_precision only (this entry means {self.means})")
        read_for = [k for k in ("runners", "formats") if getattr(self, k) is not None]
        if read_for and self.means != "activation_precision":
            raise ValueError(f"{', '.join(read_for)}: for means: activation_precision only (this entry means {self.means})")
        if any(not v for v in (self.runners, self.formats) if v is not None):
            raise ValueError("runners / formats: name at least one (leave the key out for every runner / format)")
        return self

    def engine_value(self, raw: str) -> tuple[str | None, str | None]:
        """``(key, how)``: the key of :attr:`values` that ``raw`` is as the engine reads it (:attr:`parse`), or None where
        the engine takes no such value; ``how`` says how a value not written as the key was read (else None)."""
        value = raw.strip()
        if self.parse == "exact":
            key = value
        elif self.parse == "lower":
            key = value.lower()
        elif self.parse == "int_bool":
            try:
                key = "1" if int(value) != 0 else "0"
            except ValueError:
                return None, None
        else:
            low = value.lower()
            true, false = (("true", "1", "yes", "y"), ("false", "0", "no", "n")) if self.parse == "env_bool" else (("true", "1"), ("false", "0"))
            if low in true:
                key = "1"
            elif low in false:
                key = "0"
            elif self.parse == "bool_env_var":
                return "0", f"{value[:40]!r} is neither true/1 nor false/0: read as false (the engine warns)"
            else:
                return None, None
        if key not in (self.values or {}):
            return None, None
        return key, (None if key == value else f"{value[:40]!r} read as {key!r}")

    def live_at(self, version: str | None, engine: str) -> bool:
        """Whether ``engine`` release ``version`` (None: the tables' newest) honours this entry: added by then, not
        removed or ignored by then (:meth:`Change.made_at`; an undecided removal or ignoring counts as made). The
        launch-line reader's findings (:func:`moe_select.launch_line._changes`) say why where it does not."""
        return ((self.since is None or self.since.made_at(version, engine) is not False)
                and (self.removed is None or self.removed.made_at(version, engine) is False)
                and (self.ignored is None or self.ignored.made_at(version, engine) is False))


class FlagEntry(_Entry):
    """One flag (or config key) and its aliases; ``names[0]`` is how moe-select writes it."""

    names: list[str] = Field(min_length=1)
    takes: Takes
    #: A mapping value's keys, every one the engine's releases read take (the union), where the engine builds the value
    #: as a model that forbids any other (TensorRT-LLM's ``moe_config``: a pydantic model with extra keys forbidden): a
    #: key outside it is an engine error at startup, cited by ``keys_source``. None: the value's keys are not checked.
    keys: list[str] | None = None
    keys_source: str | None = None

    @model_validator(mode="after")
    def _keys_cited(self) -> "FlagEntry":
        if (self.keys is None) != (self.keys_source is None):
            raise ValueError("keys and keys_source come together (the value's keys and where the engine forbids others)")
        return self

    @property
    def name(self) -> str:
        """The canonical spelling."""
        return self.names[0]


class EnvEntry(_Entry):
    """One environment variable the engine reads for its MoE choice."""

    name: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")


class Launcher(Located):
    """A command that starts the engine (``argv`` as written) and how it takes the model (a flag, or the first
    positional argument)."""

    argv: list[str] = Field(min_length=1)
    model: str


class ImageEnv(Located):
    """Environment variables an engine's container image sets (its Dockerfile's ``ENV``): a ``docker run`` line of an
    image whose repository (the last path component) is ``repository`` and whose tag contains ``tag_contains`` starts
    the engine with them, unless the line's ``-e`` gives another value."""

    repository: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    tag_contains: str | None = None
    env: dict[str, str] = Field(min_length=1)
    source: str = Field(pattern=CITATION.pattern)


class QuantMismatch(Located):
    """Quantization method names (``--quantization``) the engine refuses at startup for a checkpoint of one kind: it
    compares the method named with the checkpoint's own ``quant_method`` ('does not match') unless an override maps one
    to the other, and the overrides of a family read only their own ``quant_method``. ``checkpoint``: ``awq`` or
    ``gptq`` (a weight-only int checkpoint's layout), ``fp8`` (a ``quant_method: fp8`` checkpoint), ``fp8_ct`` (a
    compressed-tensors FP8 checkpoint) or ``mxfp4`` (a ``quant_method: mxfp4`` checkpoint in gpt-oss's layout; under
    vLLM only a ``gpt_oss`` model's, the one its Mxfp4Config override claims). Either ``refuses`` (a block-list: these names raise) or ``accepts`` (an
    allow-list: every name but these raises, read where the whole check was: ``_verify_quantization`` and every
    ``override_quantization_method`` of the release; a name an override claims only under a condition of the checkpoint
    is listed, so nothing is refused on a condition not read), at the engine ``releases`` (``[first, last]``; absent:
    every release; an undeclared version is judged at the newest release whose quantization names were read,
    backends/engines/names.yaml ``read_up_to``). ``error``: the engine's message where it is not the 'does not match'
    one (an override that raises for a name, e.g. vLLM's humming on gpt-oss)."""

    checkpoint: Literal["awq", "gptq", "fp8", "fp8_ct", "mxfp4"]
    refuses: list[str] = []
    accepts: list[str] = []
    #: ``[first, last]``: the engine releases the entry speaks of, both included (PEP 440 versions, not a specifier set:
    #: a plan from the cached catalog imports no packaging.specifiers); empty: every release.
    releases: list[str] = []
    error: str | None = None
    source: str = Field(pattern=CITATION.pattern)

    @field_validator("releases")
    @classmethod
    def _two_versions(cls, v: list[str]) -> list[str]:
        if v and len(v) != 2:
            raise ValueError("releases is [first, last] (both included), or left out for every release")
        return [_pep440_version(x) for x in v]

    @model_validator(mode="after")
    def _one_list(self) -> "QuantMismatch":
        if bool(self.refuses) == bool(self.accepts):
            raise ValueError("give refuses (the names that raise) or accepts (the only names that do not), one of them")
        return self

    def holds_at(self, version: str | None, newest: str | None) -> bool:
        """Whether the entry speaks of the engine release ``version`` (None: ``newest``, the newest release read; with
        neither, only an entry of every release holds)."""
        if not self.releases:
            return True
        from packaging.version import InvalidVersion, Version

        at = version or newest
        try:
            # a post-release, release candidate or local build is its release's (0.5.15.post1 is 0.5.15: a review,
            # 2026-12-06, found it between two ranges)
            if at is None:
                return False
            base = Version(at).release
            return Version(self.releases[0]).release <= base <= Version(self.releases[1]).release
        except InvalidVersion:
            return False

    def refuses_name(self, value: str) -> bool:
        """Whether the engine raises for the method ``value`` (lower-cased) on this kind of checkpoint."""
        v = value.lower()
        return v in self.refuses if self.refuses else v not in self.accepts


class DraftDefault(Located):
    """What the engine gives a speculative draft's MoE layers for a target of one runner or all-to-all (our names), at
    the engine releases ``version`` (a PEP 440 specifier of the engine's own package; absent: every release): the
    draft's ``runner`` and / or ``a2a``."""

    main_runner: str | None = None
    main_a2a: str | None = None
    runner: str | None = None
    a2a: str | None = None
    version: str | None = None
    source: str = Field(pattern=CITATION.pattern)

    @model_validator(mode="after")
    def _said(self) -> "DraftDefault":
        if (self.main_runner is None) == (self.main_a2a is None) or (self.runner is None and self.a2a is None):
            raise ValueError("a draft default names one target key (main_runner or main_a2a) and what the draft gets "
                             "(runner and / or a2a)")
        return self


class DraftOwnRunner(Located):
    """A window of engine releases (``version``, a PEP 440 specifier of the engine's own package) in which a runner
    named for the speculative draft alone (vLLM's ``--speculative-config`` ``moe_backend``) is read: taken, or read and
    ``ignored`` (why: the draft runs the target's runner whatever it names). Releases in no window of the engine's list
    do not have the key."""

    version: str
    ignored: str | None = None
    source: str = Field(pattern=CITATION.pattern)

    @field_validator("version")
    @classmethod
    def _spec(cls, v: str) -> str:
        return _checked_spec(v)


class DraftRules(Located):
    """How the engine plans a speculative draft's (MTP / NextN) MoE layers when the launch names nothing for them:
    ``inherits`` the target's runner and / or all-to-all (``runner``, ``a2a``), except where a ``defaults`` entry
    holds (:class:`DraftDefault`). ``resolved``: the draft inherits the target's resolved runner, the engine's own auto
    choice included (SGLang); false: only a runner the launch names, a model-wide setting, while under auto each layer
    kind resolves its own (vLLM's ``--moe-backend``, TensorRT-LLM's ``moe_config.backend``). ``own_runner``: the
    release windows of a draft-only runner key of the speculative config, ``own_runner_key``, that is not a flag of the
    flags table (:class:`DraftOwnRunner`, in release order). Read by :mod:`moe_select.deployment` for the checkpoint's ``mtp`` layer kind, by
    :mod:`moe_select.launch_line` and :mod:`moe_select.launch_emit` for that key."""

    inherits: list[Literal["runner", "a2a"]] = Field(min_length=1)
    resolved: bool = True
    source: str = Field(pattern=CITATION.pattern)
    defaults: list[DraftDefault] = []
    own_runner: list[DraftOwnRunner] = []
    #: The key of the speculative config (``means: spec_config``) that names the draft's own runner.
    own_runner_key: str | None = None

    @model_validator(mode="after")
    def _key(self) -> "DraftRules":
        if bool(self.own_runner) != (self.own_runner_key is not None):
            raise ValueError("own_runner and own_runner_key come together (the speculative config's key and the "
                             "releases that read it)")
        return self

    def own_runner_at(self, version: str | None) -> DraftOwnRunner | None:
        """The ``own_runner`` window holding engine ``version`` (None: not declared, judged at the newest window, the
        list's last); None where no window holds it (the release has no such key) or the engine has none."""
        from .versions import satisfies

        if not self.own_runner:
            return None
        if version is None:
            return self.own_runner[-1]
        for w in self.own_runner:
            try:
                if satisfies(version, w.version):
                    return w
            except ValueError:
                return None
        return None


_SPEC_CLAUSE = re.compile(r"^\s*(~=|===|==|!=|<=|>=|<|>)\s*[0-9][0-9A-Za-z.*+!-]*\s*$")


def _checked_spec(v: str) -> str:
    """``v`` where it is a PEP 440 specifier of engine releases; raises ValueError. The clauses' form only: importing
    packaging.specifiers here would cost every process that reads the tables (a cached catalog plans without it,
    benchmarks/README.md "Planning latency")."""
    if not all(_SPEC_CLAUSE.match(c) for c in v.split(",")):
        raise ValueError(f"version {v!r} is not a PEP 440 specifier (e.g. '>=0.5.13,<0.5.23')")
    return v


class GraphDefaultRow(Located):
    """One branch of an engine's own decode CUDA-graph batch limit: ``max_bs`` where the GPU's memory (GiB, the
    vocabulary's ``memory_gib``) is at least ``memory_min`` and below ``memory_below``, and the tensor-parallel size
    is within ``tp`` (None: any)."""

    memory_min: float | None = Field(default=None, ge=0)
    memory_below: float | None = Field(default=None, gt=0)
    tp: IntRange | None = None
    max_bs: int = Field(ge=1)

    def covers(self, memory: tuple[float, float], tp: int) -> bool:
        """Whether the branch holds for every GPU memory in the range ``memory`` (a product name may cover boards of
        several sizes) at tensor-parallel size ``tp``."""
        lo, hi = memory
        return ((self.memory_min is None or lo >= self.memory_min)
                and (self.memory_below is None or hi < self.memory_below)
                and (self.tp is None or self.tp.contains(tp)))


class GraphDefault(Located):
    """The decode CUDA-graph batch limit the engine sets itself when no flag gives one (the flag whose ``means`` is
    ``cuda_graph_max_bs``), for the engine releases ``version`` (a PEP 440 specifier of the engine's package; a
    deployment without ``engine_version`` is read at the newest release the table was checked at): the first of
    ``rows`` that holds (:class:`GraphDefaultRow`). Read by :mod:`moe_select.capacity` as the decode need of an
    all-to-all buffer when the deployment gives none."""

    version: str
    rows: list[GraphDefaultRow] = Field(min_length=1)
    checked: str = Field(min_length=1)
    source: str = Field(pattern=CITATION.pattern)

    @field_validator("version")
    @classmethod
    def _spec(cls, v: str) -> str:
        return _checked_spec(v)

    def max_bs(self, memory: tuple[float, float], tp: int) -> "GraphDefaultRow | None":
        """The row that decides for a GPU of ``memory`` GiB (a range) at ``tp``, or None where none holds for the
        whole range (the engine's branch is not known)."""
        return next((r for r in self.rows if r.covers(memory, tp)), None)


class EngineTable(Located):
    """One engine's launch vocabulary (see the module docstring)."""

    schema_version: Literal[1]
    engine: Literal["sglang", "vllm", "trtllm"]
    checked_at: str
    parser: Literal["argparse", "vllm_argparse", "click"]
    launchers: list[Launcher] = Field(min_length=1)
    sources: dict[str, str] = {}
    flags: list[FlagEntry]
    env: list[EnvEntry] = []
    config_keys: list[FlagEntry] = []
    #: What the engine's own container images set in the environment (:class:`ImageEnv`).
    images: list[ImageEnv] = []
    #: Method names the engine refuses for a kind of checkpoint (:class:`QuantMismatch`).
    quant_mismatch: list[QuantMismatch] = []
    #: From this release (``version``; None: never) every ``bool_optional`` flag named ``--enable-X`` also parses as
    #: ``--disable-X``, and ``--disable-X`` as ``--enable-X``, with the value inverted (the parser pairs them).
    inverse_enable_disable: Change | None = None
    #: The speculative draft's MoE runner and all-to-all where the launch names none for it (:class:`DraftRules`).
    draft: DraftRules | None = None
    #: The decode CUDA-graph batch limit the engine sets itself, per release range (:class:`GraphDefault`).
    graph_defaults: list[GraphDefault] = []

    @field_validator("sources")
    @classmethod
    def _sources_cited(cls, v: dict[str, str]) -> dict[str, str]:
        for key, cite in v.items():
            if not CITATION.match(cite):
                raise ValueError(f"sources.{key}: {cite[:60]!r} is not a citation (owner/repo@commit:path)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "EngineTable":
        seen: dict[str, str] = {}
        for entry in [*self.flags, *self.config_keys, *self.env]:
            names = entry.names if isinstance(entry, FlagEntry) else [entry.name] if isinstance(entry, EnvEntry) else []
            for n in names:
                if isinstance(entry, FlagEntry) and entry in self.flags and not _FLAG.match(n):
                    raise ValueError(f"{n!r} is not a flag name (--name or -x)")
                if n in seen:
                    raise ValueError(f"{n} is given twice (at {seen[n]} and {entry.where()})")
                seen[n] = entry.where()
            m = _KEYED.match(entry.source)
            if m and m.group(1) not in self.sources:
                raise ValueError(f"{entry.where()}: source {entry.source!r} names {m.group(1)!r}, which sources: does not declare "
                                 f"(it declares {', '.join(self.sources) or 'none'})")
            if not m and not CITATION.match(entry.source):
                raise ValueError(f"{entry.where()}: source {entry.source[:60]!r} is not a citation (key:symbol of sources:, "
                                 "owner/repo@commit:path[:symbol] or owner/repo#N)")
        return self

    def flag_at(self, means: str, version: str | None) -> "FlagEntry | None":
        """The first flag of ``means`` that release ``version`` (None: the newest) honours (:meth:`_Entry.live_at`),
        or None."""
        return next((e for e in self.flags if e.means == means and e.live_at(version, self.engine)), None)

    def cite(self, entry: _Entry) -> str:
        """The full citation of ``entry`` (a ``key:symbol`` source expanded through ``sources``)."""
        m = _KEYED.match(entry.source)
        return f"{self.sources[m.group(1)]}:{m.group(2)}" if m else entry.source


class RunnerName(Located):
    """Our runner name and each engine's (None: the engine has no name for it). ``kernel``: another runner of ours
    that runs the same kernels under another engine's integration (e.g. TensorRT-LLM's own backend over a kernel
    library that another runner calls directly), for the reader; each has its own facts."""

    ours: str
    sglang: str | None
    vllm: str | None
    trtllm: str | None
    kernel: str | None = None
    source: str = Field(pattern=CITATION.pattern)


class FormatName(Located):
    """An engine's runner name that means another runner of ours for some checkpoint formats: the engine dispatches its
    own backend name on the format (vLLM's ``--moe-backend triton`` runs a different kernel package on an MXFP4
    checkpoint than on the others: backends/engines/names.yaml ``by_format``). For a deployment whose format is one of ``formats``,
    ``engine``'s ``name`` is our ``ours``: a launch line reads it so, a plan of ``ours`` is written with it, and the
    runner whose row gives ``engine`` that ``name`` has no ``engine`` name for those formats."""

    engine: Literal["sglang", "vllm", "trtllm"]
    name: str = Field(min_length=1)
    formats: list[str] = Field(min_length=1)
    #: None with ``raises``: the engine has no backend of that name for these formats and raises at startup (vLLM's
    #: ``--moe-backend triton`` on NVFP4: map_nvfp4_backend's ValueError); a launch line naming it is an engine error.
    ours: str | None = None
    raises: str | None = None
    source: str = Field(pattern=CITATION.pattern)

    @model_validator(mode="after")
    def _ours_or_raises(self) -> "FormatName":
        if (self.ours is None) == (self.raises is None):
            raise ValueError("give ours (the runner the name means on these formats) or raises (the engine's error), one")
        return self

    @field_validator("formats")
    @classmethod
    def _formats_known(cls, v: list[str]) -> list[str]:
        from .formats import names as format_names

        known = format_names()
        bad = [f for f in v if f not in known]
        if bad:
            raise ValueError(f"{', '.join(bad)} is no format of backends/formats.yaml ({', '.join(known)})")
        return v


class AutoRow(Located):
    """One branch of TensorRT-LLM's ``moe_config.backend: AUTO``: ``when`` (in words), the ``backend`` it resolves
    to, and the bundled rule that states it (None: moe-select cannot state the condition, e.g. an architecture).
    ``match``: the branch's condition as deployment facts (a ``when`` of rule files) where it is narrower than its
    rule's (the rule names the backend for more deployments than AUTO does); the engine prediction reads it instead of
    the rule's ``when``, and a row with ``match`` and no rule is stated too."""

    when: str = Field(min_length=1)
    backend: str = Field(pattern=r"^[A-Z_]+$")
    rule: str | None = None
    match: "When | None" = None


class TrtllmAuto(Located):
    """TensorRT-LLM's AUTO resolution as data: ``rows`` in the order TensorRT-LLM tries them (the first whose
    condition holds names the backend), then ``fallback``, the backend every other family degrades to."""

    rows: list[AutoRow] = Field(min_length=1)
    fallback: str = Field(pattern=r"^[A-Z_]+$")
    source: str = Field(pattern=CITATION.pattern)


class Retired(Located):
    """An engine's backend name that can no longer be selected (the engine raises for it at startup); ``since``: the
    first release known to refuse it (PEP 440; a declared older release takes it), None: every release read."""

    engine: Literal["sglang", "vllm", "trtllm"]
    name: str
    why: str = Field(min_length=1)
    source: str = Field(pattern=CITATION.pattern)
    since: str | None = None


class RunnerAlias(Located):
    """A runner-option value that is an all-to-all: the engine rewrites ``name`` to ``--moe-a2a-backend`` ``a2a`` with its
    runner at auto, from release ``since`` (PEP 440), and raises when another all-to-all than none or ``a2a`` is given."""

    engine: Literal["sglang", "vllm", "trtllm"]
    name: str
    a2a: str
    since: str
    source: str = Field(pattern=CITATION.pattern)


class OlderName(Located):
    """The spelling an engine's releases before ``below`` take for a row (renamed since): the launch writer writes it
    for a declared engine version below ``below``."""

    below: str
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")

    @field_validator("below")
    @classmethod
    def _pep440(cls, v: str) -> str:
        return _pep440_version(v)


class A2AName(Located):
    """Our all-to-all backend (and mode; None: any) and each engine's spelling (SGLang's with its --deepep-mode)."""

    ours: str
    mode: str | None = None
    sglang: str | None
    sglang_mode: str | None = None
    vllm: str | None
    #: Other spellings of that engine read as this row (earlier releases' names, aliases), never written: a launch
    #: line of an older release names them (backends/engines/names.yaml says which and since when).
    vllm_read: list[str] = []
    #: vLLM's spelling in releases before a version (renamed since), written for a declared version below it.
    vllm_before: list[OlderName] = []
    #: The first vLLM release (PEP 440) whose option takes ``vllm`` for this row (None: every release that has the row's
    #: backend): a declared older release reads that name by the other rows (their ``vllm_before``), or refuses it, and a
    #: plan is not written with it there.
    vllm_since: str | None = None
    source: str = Field(pattern=CITATION.pattern)

    @field_validator("vllm_since")
    @classmethod
    def _since_version(cls, v: str | None) -> str | None:
        return None if v is None else _pep440_version(v)

    @property
    def vllm_first(self) -> str | None:
        """The first vLLM release whose option takes ``vllm`` for this row: ``vllm_since``, else the newest bound of
        ``vllm_before`` (below it the older spelling), else None (every release that has the row's backend)."""
        from packaging.version import Version

        if self.vllm_since is not None:
            return self.vllm_since
        return max((o.below for o in self.vllm_before), key=Version, default=None)

    def vllm_at(self, version: str | None) -> str | None:
        """``vllm`` where a declared ``version`` (None: the newest) takes it for this row, else None."""
        from packaging.version import InvalidVersion, Version

        if self.vllm is None or self.vllm_since is None or version is None:
            return self.vllm
        try:
            return self.vllm if Version(version) >= Version(self.vllm_since) else None
        except InvalidVersion:
            return self.vllm


class Choices(Located):
    """What one engine's runner (``of: runner``) or all-to-all (``of: a2a``) option accepts, read after ``normalize``
    (``exact``: as written, argparse choices or a Literal; ``lower_underscore``: vLLM's
    ``KernelConfig._normalize_moe_backend``, lower-cased with ``-`` read as ``_``). Accepted: the engine's names of the rows (runners, ``by_format``, ``retired``; a2a: ``vllm_read``
    and ``vllm_before`` too) and ``also`` (names the engine takes that this table maps to nothing). ``closed``: the
    engine refuses any other value at startup (its parser's choices, with ``source``), so a launch line naming one is
    refused, with the names it takes; open: another value is planned as written and judged (a note)."""

    engine: Literal["sglang", "vllm", "trtllm"]
    of: Literal["runner", "a2a", "quant"]
    normalize: Literal["exact", "lower_underscore", "lower"] = "exact"
    closed: bool
    also: list[str] = []
    source: str = Field(pattern=CITATION.pattern)
    note: str | None = None
    #: The first release that takes a value (PEP 440), where it is known: a declared older version refuses it (a launch
    #: line naming it is refused, and a plan is not written with it); ``since_source`` says where that was read.
    since: dict[str, str] = {}
    since_source: str | None = None
    #: The first release whose option no longer takes a value (PEP 440): a declared version from it refuses the value.
    removed: dict[str, str] = {}
    #: Before a value's ``since``, the value the engine reaches the same runner by (``auto``, where older releases pick
    #: that runner themselves), cited by ``earlier_source``: a plan is written with it there, and says so.
    earlier: dict[str, str] = {}
    earlier_source: str | None = Field(None, pattern=CITATION.pattern)
    #: The newest release whose values were read (PEP 440): a declared release up to it refuses a value the row does
    #: not take (the selector's unknown-runner check); a newer one may have added it.
    read_up_to: str | None = None
    #: ``of: quant`` only: the releases where the engine raises at startup for a value it deprecated unless the launch
    #: allows deprecated values (vLLM's DEPRECATED_QUANTIZATION_METHODS and --allow-deprecated-quantization, a flag of
    #: ``means: allow_deprecated_quant``): ``[first, end]`` (PEP 440; ``end``, the first release that no longer
    #: raises, may be left out), cited by ``deprecated_source``. Versions, not specifier sets: a plan from the cached
    #: catalog imports no packaging.specifiers.
    deprecated: dict[str, list[str]] = {}
    deprecated_source: str | None = Field(None, pattern=CITATION.pattern)

    @model_validator(mode="after")
    def _earlier_has_since(self) -> "Choices":
        for value in self.earlier:
            if value not in self.since:
                raise ValueError(f"earlier names {value!r}, which has no since (the release it first ships in)")
        if self.earlier and self.earlier_source is None:
            raise ValueError("earlier needs earlier_source (where the older releases' way to that runner was read)")
        return self

    @model_validator(mode="after")
    def _deprecated_cited(self) -> "Choices":
        from .versions import newer

        if self.deprecated and (self.of != "quant" or self.deprecated_source is None):
            raise ValueError("deprecated is read for of: quant only, with deprecated_source (where the list was read)")
        for value, bounds in self.deprecated.items():
            if not 1 <= len(bounds) <= 2:
                raise ValueError(f"deprecated: {value}: give [first] or [first, end] (PEP 440 releases), got {bounds}")
            for b in bounds:
                _pep440_version(b)
            if len(bounds) == 2 and not newer(bounds[1], bounds[0]):
                raise ValueError(f"deprecated: {value}: {bounds[0]} is not older than {bounds[1]}")
        return self

    def deprecated_at(self, value: str, version: str | None) -> str | None:
        """The releases (``first .. end``, as text) where ``value`` is deprecated when they hold the declared
        ``version`` (the engine raises unless deprecated values are allowed), else None (none declared, or not a
        PEP 440 version, or a pre-release: not read)."""
        from packaging.version import InvalidVersion, Version

        bounds = self.deprecated.get(self.norm(value))
        if bounds is None or version is None:
            return None
        try:
            v = Version(version)
            if v.is_prerelease or v.is_devrelease or v < Version(bounds[0]) or (len(bounds) == 2 and v >= Version(bounds[1])):
                return None
        except InvalidVersion:
            return None
        return f"from {bounds[0]}" + (f" until {bounds[1]}" if len(bounds) == 2 else "")

    def beyond_read(self, version: str | None) -> bool:
        """Whether the declared ``version`` is newer than ``read_up_to`` (a release whose values were not read: one it
        lacks may be new there, so it is not refused)."""
        from packaging.version import InvalidVersion, Version

        if version is None or self.read_up_to is None:
            return False
        try:
            return Version(version) > Version(self.read_up_to)
        except InvalidVersion:
            return False

    @field_validator("read_up_to")
    @classmethod
    def _read_version(cls, v: str | None) -> str | None:
        return None if v is None else _pep440_version(v)

    @field_validator("since", "removed")
    @classmethod
    def _since_versions(cls, v: dict[str, str]) -> dict[str, str]:
        for version in v.values():
            _pep440_version(version)
        return v

    def first_release(self, value: str, version: str | None) -> str | None:
        """The release ``value`` first ships in when ``version`` (declared) is older than it; else None."""
        return self._bound(self.since, value, version, before=True)

    def removed_in(self, value: str, version: str | None) -> str | None:
        """The release that removed ``value`` when ``version`` (declared) is that one or newer; else None."""
        return self._bound(self.removed, value, version, before=False)

    def _bound(self, table: dict[str, str], value: str, version: str | None, *, before: bool) -> str | None:
        """``table``'s release for ``value`` when the declared ``version`` lies before it (``before``) or at or after
        it; None where either is unknown or not a PEP 440 version."""
        from packaging.version import InvalidVersion, Version

        bound = table.get(self.norm(value))
        if bound is None or version is None:
            return None
        try:
            v, b = Version(version), Version(bound)
            # a pre-release may already take a value whose bound was read in final releases (SGLang 0.5.0rc2 lists
            # mxfp4, first in 0.5.1 among the finals): not judged; a bound that is itself a pre-release (TensorRT-LLM's
            # rcs) was read among pre-releases, and compares
            if (v.is_prerelease or v.is_devrelease) and not (b.is_prerelease or b.is_devrelease):
                return None
            return bound if (v < b) is before else None
        except InvalidVersion:
            return None

    def norm(self, value: str) -> str:
        """``value`` as the engine reads it (``normalize``)."""
        if self.normalize == "lower_underscore":
            return value.lower().replace("-", "_")
        if self.normalize == "lower":
            return value.lower()
        return value


class NamesTable(Located):
    """``backends/engines/names.yaml``."""

    schema_version: Literal[1]
    runners: list[RunnerName]
    #: Names whose runner depends on the checkpoint format (:class:`FormatName`).
    by_format: list[FormatName] = []
    a2a: list[A2AName]
    trtllm_auto: TrtllmAuto | None = None
    retired: list[Retired] = []
    #: Runner-option values the engine reads as an all-to-all (:class:`RunnerAlias`).
    runner_aliases: list[RunnerAlias] = []
    #: What each engine's runner and all-to-all options accept (:class:`Choices`); an option without a row is open.
    choices: list[Choices] = []

    def runner_alias(self, engine: str, name: str) -> RunnerAlias | None:
        """The :class:`RunnerAlias` of ``engine``'s runner value ``name``, or None."""
        return next((a for a in self.runner_aliases if a.engine == engine and a.name == name), None)

    def choices_of(self, engine: str, of: str) -> Choices | None:
        """The :class:`Choices` row of ``engine``'s runner or all-to-all option (``of``), or None."""
        return next((c for c in self.choices if c.engine == engine and c.of == of), None)

    def accepted(self, engine: str, of: str) -> list[str]:
        """The names ``engine``'s ``of`` option takes as this table knows them (normalized as its :class:`Choices`
        row says; without a row, as written): the rows' names and the row's ``also``."""
        c = self.choices_of(engine, of)
        if of == "runner":
            got = [getattr(r, engine) for r in self.runners] + [f.name for f in self.by_format if f.engine == engine] \
                + [r.name for r in self.retired if r.engine == engine]
        elif of == "quant":   # the method names are the row's own (no table of ours maps them)
            got = []
        elif engine == "sglang":
            got = [a.sglang for a in self.a2a]
        elif engine == "vllm":
            got = [a.vllm for a in self.a2a] + [n for a in self.a2a for n in a.vllm_read] \
                + [o.name for a in self.a2a for o in a.vllm_before]
        else:
            got = []
        got += c.also if c else []
        out: list[str] = []
        for n in got:
            if n is not None and (c.norm(n) if c else n) not in out:
                out.append(c.norm(n) if c else n)
        return out

    @model_validator(mode="after")
    def _consistent(self) -> "NamesTable":
        ours = {r.ours for r in self.runners}
        for engine in ENGINES:
            seen: dict[str, str] = {}
            for r in self.runners:
                name = getattr(r, engine)
                if name is None:
                    continue
                key = name.upper() if engine == "trtllm" else name
                if key in seen:
                    raise ValueError(f"{r.where()}: {engine} name {name!r} is both {seen[key]} and {r.ours}: one row per name")
                seen[key] = r.ours
        for r in self.runners:
            if r.kernel is not None and r.kernel not in ours:
                raise ValueError(f"{r.where()}: kernel {r.kernel!r} is no runner of this table")
        for i, f in enumerate(self.by_format):
            if f.ours is not None and f.ours not in ours:
                raise ValueError(f"{f.where()}: ours {f.ours!r} is no runner of this table")
            for g in self.by_format[:i]:
                if (g.engine, g.name) == (f.engine, f.name) and set(g.formats) & set(f.formats):
                    raise ValueError(f"{f.where()}: {f.engine} name {f.name!r} on {', '.join(sorted(set(g.formats) & set(f.formats)))} "
                                     f"is given at {g.where()} too: one runner per name and format")
                if f.ours is not None and (g.engine, g.ours) == (f.engine, f.ours) and set(g.formats) & set(f.formats):
                    raise ValueError(f"{f.where()}: {f.ours} on {', '.join(sorted(set(g.formats) & set(f.formats)))} has a {f.engine} "
                                     f"name at {g.where()} too: one name per runner and format")
        for c in self.choices:
            if sum(d.engine == c.engine and d.of == c.of for d in self.choices) > 1:
                raise ValueError(f"{c.where()}: {c.engine} {c.of} has more than one choices row")
            takes = self.accepted(c.engine, c.of)
            for what in ("since", "removed", "deprecated"):
                stray = [v for v in getattr(c, what) if c.norm(v) not in takes]
                if stray:
                    raise ValueError(f"{c.where()}: {what} names {', '.join(stray)}, which the option does not take (not in "
                                     "also nor a row's name)")
        if self.trtllm_auto is not None:
            backends = {r.trtllm.upper() for r in self.runners if r.trtllm}
            for row in [*self.trtllm_auto.rows]:
                if row.backend not in backends:
                    raise ValueError(f"{row.where()}: AUTO resolves to {row.backend}, which no row's trtllm names")
            if self.trtllm_auto.fallback not in backends:
                raise ValueError(f"{self.trtllm_auto.where()}: fallback {self.trtllm_auto.fallback} is no row's trtllm name")
        return self

    def retired_name(self, engine: str, theirs: str, version: str | None = None) -> Retired | None:
        """The retired-name row of ``engine``'s ``theirs`` (case-insensitive for TensorRT-LLM), or None; at a declared
        ``version`` older than the row's ``since``, None (that release still takes the name)."""
        from .versions import newer

        for r in self.retired:
            if r.engine == engine and (r.name == theirs or (engine == "trtllm" and r.name.upper() == theirs.upper())):
                if version is not None and r.since is not None and newer(r.since, version):
                    return None
                return r
        return None

    def format_name(self, engine: str, name: str | None, quant: str | None) -> FormatName | None:
        """The :class:`FormatName` that gives ``engine``'s ``name`` another meaning for checkpoint format ``quant``, or None
        (``quant`` None: no format known, none applies)."""
        if name is None or quant is None:
            return None
        return next((f for f in self.by_format if f.engine == engine and f.name == name and quant in f.formats), None)

    def runner_for(self, engine: str, ours: str, quant: str | None = None) -> tuple[bool, str | None]:
        """``(known, name)``: whether the table has a row for ``ours``, and the engine's name for it (None: it has none)
        for checkpoint format ``quant`` (None: the format-independent name of the runners table)."""
        if quant is not None:
            scoped = next((f for f in self.by_format if f.engine == engine and f.ours == ours and quant in f.formats), None)
            if scoped is not None:
                return True, scoped.name
        for row in self.runners:
            if row.ours == ours:
                name = getattr(row, engine)
                other = self.format_name(engine, name, quant)
                return True, (None if other is not None and other.ours != ours else name)
        return False, None

    def runner_from(self, engine: str, theirs: str, quant: str | None = None) -> str | None:
        """Our runner name for the engine's ``theirs`` (case-insensitive for TensorRT-LLM) on checkpoint format ``quant``
        (None: the format-independent reading of the runners table), or None."""
        scoped = self.format_name(engine, theirs, quant)
        if scoped is not None:
            return scoped.ours
        for row in self.runners:
            name = getattr(row, engine)
            if name is not None and (name == theirs or (engine == "trtllm" and name.upper() == theirs.upper())):
                return row.ours
        return None


@functools.lru_cache(maxsize=None)
def table(engine: str) -> EngineTable:
    """The validated table of ``engine`` (``sglang``, ``vllm``, ``trtllm``), read once per process.
    Raises :class:`InputError` (file:line) for a table that does not validate, :class:`KeyError` for another name."""
    if engine not in ENGINES:
        raise KeyError(engine)
    t = _load(engines_dir() / f"{engine}.yaml", EngineTable)
    if t.engine != engine:
        raise InputError(Issue(f"backends/engines/{engine}.yaml", t._line, "engine", f"says {t.engine}, not {engine}"))
    return t


@functools.lru_cache(maxsize=None)
def names() -> NamesTable:
    """The validated ``names.yaml``."""
    return _load(engines_dir() / "names.yaml", NamesTable)


#: The README's generated names block lies between these lines (``moe-select matrix --write`` replaces it, ``--check``
#: compares it): :func:`names_markdown` of ``names.yaml``.
NAMES_BEGIN = ("<!-- BEGIN moe-select names: generated from backends/engines/names.yaml by `moe-select matrix --write`, "
               "checked by `--check` -->")
NAMES_END = "<!-- END moe-select names -->"


def names_markdown(t: NamesTable | None = None) -> list[str]:
    """``names.yaml`` as Markdown lines: the runner names per engine, TensorRT-LLM's AUTO resolution, the retired
    names (what the README's generated block holds)."""
    t = t or names()
    code = lambda v: f"`{v}`" if v else "-"  # noqa: E731
    out = ["| ours | SGLang `--moe-runner-backend` | vLLM `--moe-backend` | TensorRT-LLM `moe_config.backend` | same kernels as |",
           "|---|---|---|---|---|"]
    for r in t.runners:
        out.append(f"| `{r.ours}` | {code(r.sglang)} | {code(r.vllm)} | {code(r.trtllm)} | {code(r.kernel)} |")
    if t.by_format:
        label = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM"}
        out += ["", "By checkpoint format (the engine dispatches its own name on the format): "
                + "; ".join(f"{label[f.engine]} `{f.name}` on {', '.join(f.formats)} is "
                    + (f"`{f.ours}`" if f.ours is not None else "refused at startup") for f in t.by_format) + "."]
    if t.trtllm_auto is not None:
        by_name = {(r.trtllm or "").upper(): r.ours for r in t.runners if r.trtllm}
        out += ["", "TensorRT-LLM's `moe_config.backend: AUTO` (the first row that holds; a backend that cannot serve the layer "
                f"degrades to {t.trtllm_auto.fallback}):", "",
                "| when | backend | runner | bundled rule |", "|---|---|---|---|"]
        for row in t.trtllm_auto.rows:
            out.append(f"| {row.when} | `{row.backend}` | `{by_name[row.backend]}` | "
                       + (f"`{row.rule}`" if row.rule else "none: moe-select cannot state it") + " |")
    if t.retired:
        out += ["", "Retired (the engine raises for them): " + "; ".join(f"{r.engine} `{r.name}` ({r.why})" for r in t.retired) + "."]
    return out


def names_block(t: NamesTable | None = None) -> str:
    """The README's generated names block, markers included."""
    return "\n".join([NAMES_BEGIN, *names_markdown(t), NAMES_END])
