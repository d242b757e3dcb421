"""The catalog: every capability file (facts) and rule file (policy) read once, cross-checked, hashed.

Capability sources, in order: the bundled ``backends/`` (shown as ``backends/<name>.yaml``), then plugin
packages (entry-point group ``moe_select.backends``: the entry point names a package whose folder holds
runner files, ``a2a/*.yaml`` and optionally ``rules/*.yaml``; located without importing it), then
operator capability folders (``--backends DIR`` or ``$MOE_SELECT_BACKENDS``). Every file is shown with
its origin and hashed into the plan's fingerprint. A runner or a2a name defined twice is an error.

Adapter modules are named by capability files (``module:``) or by the entry-point group
``moe_select.adapters`` (runner -> module, for a bundled plan-only runner). Entry points are read once,
when the catalog is loaded. Trust rule: only modules named by an installed entry point or by a capability
file the operator passed are ever imported, and only by ``resolve``.
"""
from __future__ import annotations

import difflib
import importlib.util
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, TypeVar

from pydantic import BaseModel

from .capability import (A2ACapability, CommonFacts, KnownPackage, PackageMarkers, PackageNeedFact, PackageTable,
                         RunnerCapability)
from .catalog_cache import Inputs, cache_dir, load_cached
from .conditions import Conditional
from .entrypoints import entry_points
from .environment import normalize_package_name
from .errors import InputError, Issue
from .formats import Format
from .policy import Rule, RuleFile, duplicate_rule_ids
from .versions import remember, satisfies
from .vocabulary import FILE_NAME as VOCABULARY_FILE
from .vocabulary import Vocabulary, check_bundled, index_of, merge, name_issues
from .yamlio import MarkedDict, decode_text, load_text, read_input, shorten, validate

if TYPE_CHECKING:
    import importlib.metadata as md

RULES_ENV = "MOE_SELECT_RULES"
BACKENDS_ENV = "MOE_SELECT_BACKENDS"
#: Files read from an operator rules directory (JSON is YAML).
RULE_GLOBS = ("*.yaml", "*.yml", "*.json")
ADAPTER_ENTRY_POINTS = "moe_select.adapters"
BACKEND_ENTRY_POINTS = "moe_select.backends"
#: Files of a capability folder that are not runner files (``vocabulary.yaml``: :mod:`moe_select.vocabulary`).
SPECIAL_FILES = ("common.yaml", "packages.yaml", "vocabulary.yaml", "formats.yaml")

T = TypeVar("T")


def _pkg_dir(pkg: str) -> Path:
    import importlib

    return Path(importlib.import_module(pkg).__file__).parent  # type: ignore[arg-type]


def bundled_dirs() -> tuple[Path, Path]:
    """``(backends dir, rules dir)`` of this install."""
    return _pkg_dir("moe_select.backends"), _pkg_dir("moe_select.rules")


@dataclass
class Catalog:
    """Facts and policy, validated. ``files`` maps each file's display name to its sha256; ``origins``
    says where a non-bundled capability file came from (plugin distribution or operator folder)."""

    runners: dict[str, RunnerCapability]
    a2a: dict[str, A2ACapability]
    common: CommonFacts
    rules: list[Rule]
    packages_table: dict[str, KnownPackage] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    rule_files: list[str] = field(default_factory=list)
    overridden: dict[str, str] = field(default_factory=dict)  # rule id -> the bundled location replaced
    #: Operator rule directories and files, absolute, in the order they were layered (plans store them so
    #: that ``resolve`` rebuilds the same catalog from any working directory).
    rule_sources: list[str] = field(default_factory=list)
    #: Operator capability folders, absolute (``--backends``, ``$MOE_SELECT_BACKENDS``); plans store them.
    backend_sources: list[str] = field(default_factory=list)
    #: The bundled rules before any operator layer (lint compares outcomes with and without overrides).
    bundled_rules: list[Rule] = field(default_factory=list)
    #: Rule id -> the bundled rule an operator rule replaced.
    replaced: dict[str, Rule] = field(default_factory=dict)
    #: Display name -> path of every rule file read (lint reads their comments).
    rule_paths: dict[str, Path] = field(default_factory=dict)
    #: Display name -> origin of capability and rule files that are not bundled.
    origins: dict[str, str] = field(default_factory=dict)
    #: Display name of an operator's runner or a2a file -> the bundled file (file:line) it replaces.
    replaced_files: dict[str, str] = field(default_factory=dict)
    #: Runner -> adapter module from installed plugins (entry-point group ``moe_select.adapters``).
    plugins: dict[str, str] = field(default_factory=dict)
    #: ``(version, specifier) -> satisfied``, computed when the catalog was validated, for every specifier its
    #: files name and every version its package table assumes (``checked_up_to``): a process that plans
    #: from the cached catalog decides them without :mod:`packaging.specifiers` (:func:`moe_select.versions.remember`).
    version_verdicts: dict[tuple[str, str], bool] = field(default_factory=dict)
    #: The names facts and rules may use: the bundled ``vocabulary.yaml`` merged with those of plugins and
    #: operator capability folders (:func:`moe_select.vocabulary.merge`); :func:`moe_select.vocab.use` makes
    #: it the one :func:`~moe_select.vocab.arch_in` and :func:`~moe_select.vocab.gpu_arch` read.
    vocabulary: Vocabulary | None = None
    #: The formats table (``backends/formats.yaml``, :mod:`moe_select.formats`), validated with the catalog
    #: and cached with it; :func:`moe_select.formats.use` makes it the one :func:`~moe_select.formats.lookup` reads.
    formats: dict[str, Format] = field(default_factory=dict)

    def adapter(self, runner: str, quant: str | None = None, activation: str | None = None) -> str | None:
        """The module that implements ``runner`` (for ``quant``/``activation`` when given) here: its
        capability file's ``module`` (unless ``adapter`` leaves them out), else an installed plugin's,
        else None (plan-only)."""
        cap = self.runners[runner]
        if cap.module and (quant is None or cap.implements(quant, activation)):
            return cap.module
        return self.plugins.get(runner)

    def packages(self) -> list[tuple[str, str]]:
        """Every (distribution, module) pair the capability files name, and the JIT facts' prebuilt
        packages: what detection looks at."""
        names: set[str] = set()
        for facts in [*(c.packages for c in self.runners.values()), *(c.packages for c in self.a2a.values())]:
            names.update(p.name for p in facts)
        for runner in self.runners.values():
            if runner.jit is not None:
                names.add(runner.jit.package)
                if runner.jit.prebuilt_package:
                    names.add(runner.jit.prebuilt_package)
        names.update(p.name for p in self.packages_table.values() if p.engine is not None)  # the engines themselves
        return sorted((n, self.packages_table[n].module if n in self.packages_table else n.replace("-", "_")) for n in names)

    def package_markers(self) -> dict[str, PackageMarkers]:
        """Distribution -> the markers that tell it from a look-alike (issue 21), for the rows that have them: what
        detection reads besides the (distribution, module) pairs of :meth:`packages`."""
        return {p.name: p.markers for p in self.packages_table.values() if p.markers is not None}

    def engine_package(self, engine: str | None) -> KnownPackage | None:
        """The known-packages row of the distribution that is serving engine ``engine`` (an engine name: ``vllm``,
        ``sglang``, ``trtllm``, whose distribution is ``tensorrt-llm``): its version is the deployment's
        ``engine_version`` (None: no row names that engine)."""
        return next((p for p in self.packages_table.values() if p.engine == engine), None) if engine else None


def _entry_points(group: str) -> list[md.EntryPoint]:
    return entry_points(group)  # importlib.metadata's answer, without its cost when no plugin is installed


def plugin_adapters() -> dict[str, str]:
    """Runner name -> module of installed plugins (entry points in group ``moe_select.adapters``).
    Reads the installed distributions' metadata: the catalog calls it once per load."""
    return {ep.name: ep.value for ep in _entry_points(ADAPTER_ENTRY_POINTS)}


def plugin_backend_dirs() -> list[tuple[Path, str]]:
    """``(folder, origin)`` of every installed plugin package that ships capability files (entry points in
    group ``moe_select.backends``: the value names a package, located with ``importlib.util.find_spec``
    without running it). A plugin whose package cannot be found is reported as an error by the catalog."""
    out = []
    for ep in _entry_points(BACKEND_ENTRY_POINTS):
        dist = getattr(getattr(ep, "dist", None), "name", None) or "?"
        origin = f"plugin {dist} (entry point {ep.name} = {ep.value})"
        try:
            spec = importlib.util.find_spec(ep.value)
        except (ImportError, ValueError):
            spec = None
        folder = None
        if spec is not None and spec.submodule_search_locations:
            folder = Path(list(spec.submodule_search_locations)[0])
        out.append((folder if folder is not None else Path(f"<missing package {ep.value}>"), origin))
    return out


def _import_relative(folder: Path) -> str:
    """The display prefix of a plugin package's files: its path below the ``sys.path`` entry it was found on
    (``acme_moe/``), the same on every host whatever the install prefix (a plan's ``files`` are keyed by it: a trial,
    break53, resolved a plan where the byte-identical plugin sat in another virtual environment and was refused,
    every plugin file 'gone' and 'new'); the absolute folder where no ``sys.path`` entry holds it."""
    import sys

    where = folder.resolve()
    found: list[Path] = []
    for entry in sys.path:
        try:
            rel = where.relative_to(Path(entry or ".").resolve())
        except (ValueError, OSError):
            continue
        if rel.parts:
            found.append(rel)
    # the nearest entry (the site folder the package was found on, not a parent such as the working directory)
    return f"{min(found, key=lambda r: len(r.parts)).as_posix()}/" if found else f"{folder}/"


def env_paths(name: str, what: str) -> list[Path]:
    """The paths ``$name`` lists (``os.pathsep``-separated; ``what`` they are, for the message), ``[]`` when it
    is not set. Raises :class:`InputError` naming the variable when it is set but empty, or lists an empty
    entry (``a::b``, a trailing ``:``): in a search path that means the current folder, and it was silently
    skipped (issue 17)."""
    val = os.environ.get(name)
    if val is None:
        return []
    parts = val.split(os.pathsep)
    if val == "":
        raise InputError(Issue(f"${name}", 0, "", f"is set but empty: unset it, or name {what}"))
    if "" in parts:
        raise InputError(Issue(f"${name}", 0, "", f"{shorten(val)} has an empty entry (entry {parts.index('') + 1} of "
                               f"{len(parts)}, separated by {os.pathsep!r}): remove it, or write . for the current folder"))
    return [Path(p) for p in parts]


def path_list(value: Iterable[str | Path] | str | Path, name: str) -> tuple[str, ...]:
    """The folders or files ``value`` names (``rules_dirs`` / ``backends_dirs`` of the Python API: a list or tuple of
    paths), as strings. Raises :class:`InputError` naming ``name`` for a single path given as a string or Path (it
    would be read as its characters), a non-path entry, or an empty one (read as the current folder otherwise, which
    the command line refuses too)."""
    if isinstance(value, (str, bytes, os.PathLike)):
        raise InputError(Issue(f"<{name}>", 0, name, f"{shorten(str(value))!s}: give a list of folders or files "
                               f"([{str(value)!r}]), not one path as a string"))
    out = []
    for n, d in enumerate(value, 1):
        if not isinstance(d, (str, os.PathLike)):
            raise InputError(Issue(f"<{name}>", 0, f"{name}[{n}]", f"{shorten(repr(d))} is not a path"))
        if str(d) == "":
            raise InputError(Issue(f"<{name}>", 0, f"{name}[{n}]", "is empty: name a folder or file (write . for the "
                                   "current folder)"))
        out.append(str(d))
    return tuple(out)


def backend_dirs_from_env() -> list[Path]:
    """Operator capability folders named by ``$MOE_SELECT_BACKENDS`` (``os.pathsep``-separated). Raises
    :class:`InputError` when it is set but empty or has an empty entry (:func:`env_paths`)."""
    return env_paths(BACKENDS_ENV, "one or more capability folders")


def _read(path: Path, display: str, files: dict[str, str]) -> MarkedDict:
    """Load one rule or capability file through :func:`moe_select.yamlio.read_input` (regular files only,
    size-bounded, read once) and record the sha256 of the bytes parsed in ``files``. Raises InputError."""
    raw, files[display] = read_input(path, display, "rule or capability file")
    data = load_text(decode_text(raw, display), display)
    if not isinstance(data, MarkedDict):
        raise InputError(Issue(display, 0, "", "the file must hold a mapping"))
    return data


def rule_dirs_from_env() -> list[Path]:
    """Operator rule directories named by ``$MOE_SELECT_RULES`` (``os.pathsep``-separated). Raises
    :class:`InputError` when it is set but empty or has an empty entry (:func:`env_paths`)."""
    return env_paths(RULES_ENV, "one or more rules folders or files")


class _Loader:
    """Collects files, issues and hashes while a catalog loads."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.issues: list[Issue] = []
        self.origins: dict[str, str] = {}
        self.replaced: dict[str, str] = {}

    def get(self, fn: Callable[..., T], *args: object) -> T | None:
        try:
            return fn(*args)
        except InputError as exc:
            self.issues.extend(exc.issues)
            return None

    def model(self, model: type[T], path: Path, display: str) -> T | None:
        return self.get(lambda: validate(model, _read(path, display, self.files), display))  # type: ignore[arg-type]


def _replaces(ld: _Loader, display: str, kind: str, name: str, old: Any, line: int, operator: bool) -> bool:
    """Whether an operator's file ``display`` of ``kind`` (``runner`` or ``a2a``, also the issue's field) ``name``
    replaces the bundled file ``old`` (recorded in ``ld.replaced`` and the file's origin, shown by ``explain``); else
    the issue why not: a plugin adds files and replaces none, and two operator folders may not both replace one file."""
    if operator and old.where().startswith("backends/"):
        ld.origins[display] = f"{ld.origins.get(display, '')} (replaces {old.where()})".strip()
        ld.replaced[display] = old.where()
        return True
    first = old.where(kind)   # the line of its runner: / a2a: key, not of the mapping's first key
    same_folder = Path(first.rsplit(":", 1)[0]).parent == Path(display).parent
    why = ((": two files of one operator folder give it: keep one" if same_folder
            else ": two operator folders give it: keep one") if operator
           else ": a plugin adds runners, it does not replace them" if kind == "runner" else "")
    ld.issues.append(Issue(display, line, kind, f"{kind} {name!r} is already defined by {first}{why}"))
    return False


def _unread_files(ld: _Loader, folder: Path, prefix: str, bundled_dir: Path | None) -> None:
    """Issues for what an operator's capability folder (``--backends``, ``$MOE_SELECT_BACKENDS``) holds that would
    silently not be read (a new operator's trial: a corrected ``hpc_ops.yml`` left the bundled fact in force): a runner or
    a2a file named ``*.yml`` (one whose text has a top-level ``runner:`` or ``a2a:`` key; hidden files are skipped), and
    engines' tables (``engines/*.yaml``, ``names.yaml``, ``resolution.yaml``: bundled only) that differ from the bundled
    ones (a copy of the whole bundled folder keeps its identical copy; other files there are not read). A plugin package's
    other files are its own (not looked at)."""
    import re

    for sub, key in (("", "runner"), ("a2a/", "a2a")):
        for path in sorted((folder / sub).glob("*")) if (folder / sub).is_dir() else []:
            if path.name.startswith(".") or not path.is_file() or path.suffix.lower() not in (".yml", ".yaml") \
                    or path.suffix == ".yaml":
                continue
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if re.search(rf"^{key}:", text, re.MULTILINE):
                ld.issues.append(Issue(f"{prefix}{sub}{path.name}", 0, "", f"{key} capability files are read as *.yaml "
                                       f"only (this one is not read): rename it {path.stem}.yaml"))
    tables = [folder / "names.yaml", folder / "resolution.yaml", *sorted((folder / "engines").glob("*.yaml"))]
    for path in tables:
        rel = path.relative_to(folder)
        if not path.is_file() or (rel.parts[0] == "engines" and bundled_dir is not None
                                  and same_as_bundled(path, bundled_dir / "engines" / path.name)):
            continue    # a copy of the bundled folder: its identical tables are the bundled ones
        ld.issues.append(Issue(f"{prefix}{rel}", 0, "", "the engines' tables (backends/engines/: names, flags, resolution) "
                               "are bundled only: a capability folder cannot add or change them (this file differs from "
                               f"the installed backends/engines/{path.name}, or has no counterpart there: a copy of another "
                               "release?); remove it (a new runner's engine option value: its file's engines.options)"))


def _capability_dir(ld: _Loader, folder: Path, prefix: str, origin: str | None, runners: dict[str, RunnerCapability],
                    a2a: dict[str, A2ACapability], failed: set[str], operator: bool = False,
                    bundled_dir: Path | None = None) -> None:
    """Load the runner files and ``a2a/*.yaml`` of one capability folder into ``runners``/``a2a``. A plugin's or
    operator's folder (``origin`` given) holding ``formats.yaml`` or ``packages.yaml`` is an issue: format rows and
    the package table are bundled only. An operator's folder (``operator``: ``--backends``, ``$MOE_SELECT_BACKENDS``)
    may replace a bundled runner or a2a file by a file of the same name (an operator's correction of a bundled fact,
    said in the file's origin; a ninth new user's trial found no way to version-bound a bundled fact); its
    ``common.yaml`` is read by :func:`load_catalog` (added to the bundled one). A file that is a byte-for-byte copy of
    the bundled one (``bundled_dir``: a copy of the whole bundled folder, then one file edited) is the bundled one."""
    if operator:
        _unread_files(ld, folder, prefix, bundled_dir)
    for path in sorted(folder.glob("*.yaml")):
        if operator and bundled_dir is not None and same_as_bundled(path, bundled_dir / path.name):
            continue       # a copy of the bundled file (a copied folder): the bundled one stands
        if path.name in ("formats.yaml", "packages.yaml") and origin:
            what = ("format rows are bundled only (backends/formats.yaml): a plugin or --backends folder cannot add or change "
                    "a format yet" if path.name == "formats.yaml" else "the package table is bundled only "
                    "(backends/packages.yaml): a plugin or --backends folder cannot add or change a package row yet")
            ld.issues.append(Issue(f"{prefix}{path.name}", 0, "", f"{what}; remove this file"))
        if path.name in SPECIAL_FILES:
            continue
        display = f"{prefix}{path.name}"
        if origin:
            ld.origins[display] = origin
        cap = ld.model(RunnerCapability, path, display)
        if cap is None:
            failed.add(path.stem)
            continue
        if cap.runner != path.stem:
            ld.issues.append(Issue(display, cap._lines.get("runner", 0), "runner",
                                   f"runner {shorten(cap.runner)} must match the file name {shorten(path.stem)}"))
        if cap.runner in runners and not _replaces(ld, display, "runner", cap.runner, runners[cap.runner], cap._lines.get("runner", cap._line),
                                                   operator):
            continue
        runners[cap.runner] = cap
    for path in sorted((folder / "a2a").glob("*.yaml")):
        display = f"{prefix}a2a/{path.name}"
        if operator and bundled_dir is not None and same_as_bundled(path, bundled_dir / "a2a" / path.name):
            continue
        if origin:
            ld.origins[display] = origin
        acap = ld.model(A2ACapability, path, display)
        if acap is None:
            continue
        if acap.a2a != path.stem:
            ld.issues.append(Issue(display, acap._lines.get("a2a", 0), "a2a",
                                   f"a2a {shorten(acap.a2a)} must match the file name {shorten(path.stem)}"))
        if acap.a2a in a2a and not _replaces(ld, display, "a2a", acap.a2a, a2a[acap.a2a], acap._lines.get("a2a", acap._line),
                                             operator):
            continue
        a2a[acap.a2a] = acap


def load_catalog(rules_dirs: Sequence[str | Path] = (), *, use_env: bool = True, backends_dir: Path | None = None,
                 bundled_rules: bool = True, backends_dirs: Sequence[str | Path] = (), plugins: bool = True) -> Catalog:
    """Read and cross-check the capability files (bundled ``backends_dir``; installed plugins when
    ``plugins``; ``backends_dirs`` and ``$MOE_SELECT_BACKENDS`` when ``use_env``) and the rule files
    (bundled, then each operator directory or file of ``rules_dirs``, then ``$MOE_SELECT_RULES`` when
    ``use_env``). Raises :class:`InputError` listing every problem with file, line and field."""
    rules_dirs, backends_dirs = path_list(rules_dirs, "rules_dirs"), path_list(backends_dirs, "backends_dirs")
    bdir, rdir = bundled_dirs()
    bdir = backends_dir or bdir
    ld = _Loader()
    runners: dict[str, RunnerCapability] = {}
    a2a: dict[str, A2ACapability] = {}
    failed: set[str] = set()  # runner files that did not load: rules naming them are not reported again
    formats_rows = _formats_table(ld, bdir)  # first: capability and rule files name formats of this table
    _capability_dir(ld, bdir, "backends/", None, runners, a2a, failed)
    common = ld.model(CommonFacts, bdir / "common.yaml", "backends/common.yaml")
    table = ld.model(PackageTable, bdir / "packages.yaml", "backends/packages.yaml")
    vocab_files: list[Vocabulary] = []
    bundled_vocab = ld.model(Vocabulary, bdir / VOCABULARY_FILE, f"backends/{VOCABULARY_FILE}")
    if bundled_vocab is not None:
        ld.issues.extend(check_bundled(bundled_vocab))
        vocab_files.append(bundled_vocab)

    plugin_rule_dirs: list[tuple[Path, str]] = []
    if plugins:
        for folder, origin in plugin_backend_dirs():
            if not folder.is_dir():
                ld.issues.append(Issue(origin, 0, "", f"the plugin's package was not found ({folder})"))
                continue
            shown = _import_relative(folder)
            _capability_dir(ld, folder, shown, origin, runners, a2a, failed)
            _vocabulary_file(ld, folder, shown, origin, vocab_files)
            if (folder / "rules").is_dir():
                plugin_rule_dirs.append((folder / "rules", origin))
    backend_sources: list[str] = []
    for given in [Path(d) for d in backends_dirs] + (backend_dirs_from_env() if use_env else []):
        folder = given.absolute()
        if not folder.is_dir():
            ld.issues.append(Issue(str(given), 0, "", "a capability folder is a directory (runner files, a2a/*.yaml); "
                                   "this is a file" if folder.exists() else "capability folder not found"))
            continue
        backend_sources.append(str(folder))
        _capability_dir(ld, folder, f"{folder}/", f"operator capability folder {folder}", runners, a2a, failed, operator=True,
                        bundled_dir=bdir)
        _vocabulary_file(ld, folder, f"{folder}/", f"operator capability folder {folder}", vocab_files, bdir)
        if (folder / "common.yaml").is_file() and common is not None \
                and not same_as_bundled(folder / "common.yaml", bdir / "common.yaml"):
            # an operator's constraints every runner obeys and engine methods: added to the bundled ones (each keeps its
            # file:line); was silently not read
            display = f"{folder}/common.yaml"
            ld.origins[display] = f"operator capability folder {folder} (added to backends/common.yaml)"
            extra = ld.model(CommonFacts, folder / "common.yaml", display)
            if extra is not None:
                common = common.model_copy(update={"constraints": [*common.constraints, *extra.constraints],
                                                   "methods": [*common.methods, *extra.methods]})

    rules: list[Rule] = []
    rule_files: list[str] = []
    rule_paths: dict[str, Path] = {}
    bundled: list[Rule] = []
    replaced: dict[str, Rule] = {}
    overridden: dict[str, str] = {}
    layers: list[tuple[str, list[tuple[Path, str]]]] = []
    if bundled_rules:
        layers.append(("bundled", [(p, f"rules/{p.name}") for p in sorted(rdir.glob("*.yaml"))]))
    for folder, origin in plugin_rule_dirs:
        shown = _import_relative(folder)
        paths = [(p, f"{shown}{p.name}") for p in sorted(folder.glob("*.yaml"))]
        ld.origins.update({d: origin for _, d in paths})
        layers.append((str(folder), paths))
    rule_sources: list[str] = []
    seen_sources: set[str] = set()
    for given in [Path(d) for d in rules_dirs] + (rule_dirs_from_env() if use_env else []):
        d = given.absolute()  # shown and stored absolute: a plan must resolve from any working directory
        if str(d) in seen_sources:  # named twice (--rules and $MOE_SELECT_RULES): one layer
            continue
        seen_sources.add(str(d))
        try:
            is_file, is_dir, exists = d.is_file(), d.is_dir(), d.exists()
        except OSError as exc:  # a path the OS refuses (too long, ...)
            ld.issues.append(Issue(shorten(str(given))[1:-1], 0, "", f"rules path cannot be read: {exc.strerror or exc}"))
            continue
        if is_file:
            layers.append((str(d), [(d, str(d))]))
        elif is_dir:
            found = sorted(f for g in RULE_GLOBS for f in d.glob(g))
            if not found:  # an operator's rules that would silently not apply (r.YAML, a nested folder)
                ld.issues.append(Issue(str(given), 0, "", f"no {', '.join(RULE_GLOBS)} files in this rules directory"))
                continue
            layers.append((str(d), [(p, str(p)) for p in found]))
        else:
            ld.issues.append(Issue(str(given), 0, "", "not a regular rules file or directory" if exists else "rules file or directory not found"))
            continue
        rule_sources.append(str(d))
    every_rule: list[Rule] = []  # of every layer, replaced ones included: each is checked for undeclared names
    for layer, paths in layers:
        layer_rules: list[Rule] = []
        for path, display in paths:
            rf = ld.model(RuleFile, path, display)
            if rf is None:
                continue
            rule_files.append(display)
            rule_paths[display] = path
            layer_rules.extend(rf.rules)
        every_rule.extend(layer_rules)
        ld.issues.extend(duplicate_rule_ids(layer_rules))
        if layer == "bundled":
            rules = list(layer_rules)
            bundled = list(layer_rules)
            continue
        index = {r.id: i for i, r in enumerate(rules)}
        new = []
        for r in layer_rules:
            if r.id in index:
                overridden[r.id] = rules[index[r.id]].where()
                replaced.setdefault(r.id, rules[index[r.id]])
                rules[index[r.id]] = r
            else:
                new.append(r)
        rules = new + rules

    known = {p.name: p for p in (table.packages if table else [])}
    _cross_check(ld, runners, a2a, rules, known, failed, table is not None, common)
    vocabulary, vocab_issues = merge(vocab_files)
    ld.issues.extend(vocab_issues)
    if bundled_vocab is not None:  # names facts and rules use that no vocabulary declares (a typo: sm09, silu_)
        idx = index_of(vocabulary)
        for owner in [*runners.values(), *a2a.values(), *([common] if common is not None else []), *every_rule]:
            ld.issues.extend(name_issues(owner, idx))
    if ld.issues:
        raise InputError(ld.issues)
    assert common is not None
    from . import formats, vocab

    vocab.use(vocabulary)
    formats.use(formats_rows)
    assumed = {name: p.checked_up_to for name, p in known.items() if p.checked_up_to}
    return Catalog(runners=runners, a2a=a2a, common=common, rules=rules, packages_table=known, files=ld.files,
                   rule_files=rule_files, overridden=overridden, rule_sources=rule_sources,
                   backend_sources=backend_sources, bundled_rules=bundled, replaced=replaced, rule_paths=rule_paths,
                   origins=ld.origins, replaced_files=ld.replaced, plugins=plugin_adapters() if plugins else {},
                   vocabulary=vocabulary,
                   formats=formats_rows,
                   version_verdicts=_version_verdicts(assumed, [*_specifiers([runners, a2a, common, rules]),
                                                                *_oracle_specifiers()]))


def _version_verdicts(assumed: dict[str, str], specs: list[tuple[str, str]]) -> dict[tuple[str, str], bool]:
    """``(version, spec) -> satisfied`` for every specifier the files name against the version each package is
    assumed at (the newest checked) and every version an engine release pins (backends/engines/pins.yaml, read for
    package needs): a process that plans from the cached catalog decides them without :mod:`packaging.specifiers`."""
    from .releases import pins

    pinned: dict[str, set[str]] = {}
    for rels in pins().engines.values():
        for row in rels.values():
            for name, version in row.items():
                pinned.setdefault(name, set()).add(version)
    out = {}
    for name, spec in specs:
        for version in ({assumed[name]} if name in assumed else set()) | pinned.get(name, set()):
            out[version, spec] = satisfies(version, spec)
    return out


def _oracle_specifiers() -> list[tuple[str, str]]:
    """(engine distribution, specifier) of the engine oracles', their environment rules' and the hooks' engine
    version gates (backends/engines/resolution.yaml ``requires``): the selector checks them too, so a cached catalog carries
    their verdicts at the assumed versions like the capability files' (no ``packaging`` import when planning)."""
    from .engine_choice import resolution, runner_option_specifiers

    return [*((k, v) for o in resolution().oracles for e in o.env for k, v in (e.requires or {}).items()),
            *((k, v) for o in resolution().oracles for k, v in (o.requires or {}).items()),
            *((k, v) for h in resolution().hooks for k, v in (h.requires or {}).items()),
            *runner_option_specifiers()]


def _formats_table(ld: _Loader, bdir: Path) -> dict[str, Format]:
    """The formats table of the bundled capability folder ``bdir`` (``formats.yaml``; the installed one when
    ``bdir`` has none), validated and made active (:func:`moe_select.formats.use`) before the files that
    name formats are validated. An invalid table is an issue (file:line, field) and the bundled table is used."""
    from . import formats

    path = bdir / formats.FILE_NAME
    if not path.is_file():
        path = formats.bundled_path()
    doc = ld.model(formats.FormatsFile, path, f"backends/{formats.FILE_NAME}")
    rows = {f.name: f for f in doc.formats} if doc is not None else {}
    formats.use(rows)
    return rows


def same_as_bundled(path: Path, bundled: Path) -> bool:
    """Whether an operator folder's ``path`` holds the same bytes as the bundled file ``bundled`` (a copy of the bundled
    folder: read once, from the bundled file)."""
    try:
        return bundled.is_file() and path.read_bytes() == bundled.read_bytes()
    except OSError:
        return False


def _vocabulary_file(ld: _Loader, folder: Path, prefix: str, origin: str, files: list[Vocabulary],
                     bundled: Path | None = None) -> None:
    """Load ``vocabulary.yaml`` of a plugin's or operator's capability folder into ``files`` when it has one (an
    operator's copy of the bundled file, ``bundled``, is the bundled one: not read twice)."""
    path = folder / VOCABULARY_FILE
    if not path.is_file() or (bundled is not None and same_as_bundled(path, bundled / VOCABULARY_FILE)):
        return
    display = f"{prefix}{VOCABULARY_FILE}"
    ld.origins[display] = origin
    found = ld.model(Vocabulary, path, display)
    if found is not None:
        files.append(found)


def _facts(obj: object, kind: type | tuple[type, ...]) -> Iterable[Any]:
    """Every model of ``kind`` in ``obj`` (models, lists, dicts of them), depth first."""
    if isinstance(obj, kind):
        yield obj
    if isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _facts(item, kind)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _facts(item, kind)
    elif isinstance(obj, BaseModel):
        for name in type(obj).model_fields:
            yield from _facts(getattr(obj, name), kind)


def _gated(obj: object) -> Iterable[Any]:
    """Every fact in ``obj`` that carries a ``requires`` (a package version gate)."""
    return (f for f in _facts(obj, (Conditional, PackageNeedFact)) if f.requires)


def _specifiers(obj: object) -> Iterable[tuple[str, str]]:
    """Every (package, PEP 440 specifier) in ``obj`` (models, lists, dicts of them): ``requires`` items and
    package needs with a ``version``."""
    for fact in _gated(obj):
        yield from fact.requires.items()
    for need in _facts(obj, PackageNeedFact):
        if need.version:
            yield need.name, need.version


def _did_you_mean(name: str, names: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _cross_check(ld: _Loader, runners: dict[str, RunnerCapability], a2a: dict[str, A2ACapability], rules: list[Rule],
                 known: dict[str, KnownPackage], failed: set[str], have_table: bool,
                 common: CommonFacts | None = None) -> None:
    """Names that must exist: runners and a2a backends named by rules, a2a restrictions of runner files,
    packages named by capability files (in the known-packages table)."""
    from .engine_tables import ENGINES, names

    # engines.options stands for a names.yaml row of that engine: not both (which one would be written?), and never a value
    # that is another runner's there (the engine would run that one: a review wrote {sglang: triton}) or its auto
    t = names()
    given: dict[tuple[str, str], str] = {}
    for cap in sorted(runners.values(), key=lambda c: c.runner):
        if cap.engines is None or not cap.engines.options:
            continue
        line = cap.engines._lines.get("options", cap.engines._line)
        for eng, value in cap.engines.options.items():
            engine = str(eng)
            ch = t.choices_of(engine, "runner")
            taken = {getattr(r, engine, None): r.ours for r in t.runners} | {
                f.name: f.ours for f in t.by_format if f.engine == engine and f.ours is not None}   # (not a refusal row)
            why = None
            if engine not in ENGINES:
                why = f"{engine} has no runner option"
            elif any(r.ours == cap.runner and getattr(r, engine, None) for r in t.runners):
                why = f"backends/engines/names.yaml already names {cap.runner} in {engine}: leave it out"
            elif value.lower() == "auto" or (ch is not None and value in ch.also):
                why = f"{value!r} is a value {engine} takes for its own choice or another runner, not {cap.runner}"
            elif value in taken:
                why = f"{value!r} is {engine}'s name for {taken[value]} (backends/engines/names.yaml): {engine} would run that"
            elif (engine, value) in given:
                why = f"{value!r} is also {given[(engine, value)]}'s {engine} value"
            if why is not None:
                ld.issues.append(Issue(cap._file, line, f"engines.options.{engine}", why))
            given[(engine, value)] = cap.runner
    for r in rules:
        named: list[tuple[str, str, str]] = [(name, r.action, r.action) for name in r.runners]
        if r.small_forwards is not None:
            named += [(name, "small_forwards", "small_forwards.prefer") for name in r.small_forwards.prefer]
        for name, key, where in named:
            if name not in runners and name not in failed:
                ld.issues.append(Issue(r._file, r._lines.get(key, r._line), where,
                                       f"rule {r.id!r} names unknown runner {shorten(name)}" + _did_you_mean(name, runners)))
        for name in r.when.a2a or []:
            if name not in a2a:
                ld.issues.append(Issue(r._file, r.when._lines.get("a2a", r._line), "when.a2a",
                                       f"rule {r.id!r} names unknown a2a backend {name!r}" + _did_you_mean(name, a2a)))
    for cap in runners.values():
        for fact in cap.a2a:
            for name in fact.values:
                if name not in a2a:
                    ld.issues.append(Issue(cap._file, fact._line, "a2a", f"unknown a2a backend {name!r}" + _did_you_mean(name, a2a)))
    if not have_table:
        return
    owners: list[RunnerCapability | A2ACapability] = [*runners.values(), *a2a.values()]
    for owner in owners:
        for p in owner.packages:
            if p.name not in known:
                ld.issues.append(Issue(owner._file, p._line, "packages", f"package {shorten(p.name)} is not in the known-packages "
                                       "table (backends/packages.yaml): add it there with its import name and how engines ship it"
                                       + _did_you_mean(p.name, known)))
    for runner in runners.values():
        jit = runner.jit
        for pkg in ([jit.package, jit.prebuilt_package] if jit is not None else []):
            if pkg and pkg not in known and jit is not None:
                ld.issues.append(Issue(runner._file, jit._line, "jit", f"package {shorten(pkg)} is not in the known-packages table"))
    # a version gate's package (requires: {name: specifier}) is a known distribution or its import name: a misspelt one
    # would be read as 'not declared, assumed' and the gate would never decide (a new user's trial)
    spellings = {normalize_package_name(n): p.name for p in known.values() for n in (p.name, p.module)}
    for fact in _gated([*owners, common] if common is not None else owners):
        for name in fact.requires:
            if normalize_package_name(name) not in spellings:
                ld.issues.append(Issue(fact._file, fact._lines.get("requires", fact._line), f"requires.{name}",
                                       f"unknown package {shorten(name)} in a version gate" + _did_you_mean(name, known)
                                       + " (backends/packages.yaml names the packages facts may gate on)"))


_cache: dict[tuple, Catalog] = {}
_lock = threading.Lock()


def default_catalog(rules_dirs: Iterable[str | Path] = (), backends_dirs: Iterable[str | Path] = ()) -> Catalog:
    """:func:`load_catalog` cached per (rule dirs, backend dirs, the two environment variables), for
    repeated calls in one process; a new process reads a catalog validated before from the on-disk
    cache (:mod:`moe_select.catalog_cache`) when no input changed since. Raises :class:`InputError` for an
    empty ``$MOE_SELECT_RULES``, ``$MOE_SELECT_BACKENDS`` or ``$MOE_SELECT_CACHE_DIR`` every time, whether
    or not the catalog is in memory already."""
    rd, bd = path_list(rules_dirs, "rules_dirs"), path_list(backends_dirs, "backends_dirs")
    key = (rd, bd, os.environ.get(RULES_ENV), os.environ.get(BACKENDS_ENV))  # None (unset) is not "" (an error)
    cache_dir()  # an empty $MOE_SELECT_CACHE_DIR: refused in every call, not only in those that read the cache
    with _lock:
        if key not in _cache:
            _cache[key] = cached_load_catalog(rd, bd)
        catalog = _cache[key]
    from . import formats, vocab

    vocab.use(catalog.vocabulary)  # the names this catalog declares are the ones lookups read
    formats.use(catalog.formats)
    return catalog


def cached_load_catalog(rules_dirs: Sequence[str | Path] = (), backends_dirs: Sequence[str | Path] = ()) -> Catalog:
    """``load_catalog(rules_dirs, backends_dirs=backends_dirs)``, or the catalog of exactly the same inputs
    (every file's contents, the folders' entries, plugins, environment variables, moe_select's code) that
    an earlier process validated, from the on-disk cache (:mod:`moe_select.catalog_cache`). Raises what
    :func:`load_catalog` raises."""
    rd, bd = path_list(rules_dirs, "rules_dirs"), path_list(backends_dirs, "backends_dirs")
    catalog = load_cached(lambda: _inputs(rd, bd), lambda: load_catalog(list(rd), backends_dirs=list(bd)), Catalog)
    remember(catalog.version_verdicts)
    from . import formats, vocab

    vocab.use(catalog.vocabulary)
    formats.use(catalog.formats)
    return catalog


def _inputs(rules_dirs: Sequence[str], backends_dirs: Sequence[str]) -> Inputs:
    """What :func:`load_catalog` (``use_env``, plugins, bundled rules) reads besides file contents: the
    on-disk cache's key (:mod:`moe_select.catalog_cache`) covers it."""
    bdir, rdir = bundled_dirs()
    return Inputs(backends_dir=bdir, rules_dir=rdir, plugins=plugin_backend_dirs(), adapters=plugin_adapters(),
                  backends=[Path(d) for d in backends_dirs] + backend_dirs_from_env(),
                  rules=[Path(d) for d in rules_dirs] + rule_dirs_from_env(),
                  env=(os.environ.get(RULES_ENV, ""), os.environ.get(BACKENDS_ENV, "")))
