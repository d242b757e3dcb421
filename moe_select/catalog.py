"""The catalog: every capability file (facts) and rule file (policy) read once, cross-checked, hashed.

Bundled files ship inside the package (``moe_select.backends``, ``moe_select.rules``) and are shown
as ``backends/<name>.yaml`` and ``rules/<name>.yaml``; operator rule directories are shown by path.
"""
from __future__ import annotations

import difflib
import importlib.metadata as md
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from .capability import A2ACapability, CommonFacts, RunnerCapability
from .errors import InputError, Issue
from .policy import Rule, RuleFile
from .yamlio import MarkedDict, decode_text, load_text, read_input, validate

RULES_ENV = "MOE_SELECT_RULES"
#: Files read from an operator rules directory (JSON is YAML).
RULE_GLOBS = ("*.yaml", "*.yml", "*.json")
ADAPTER_ENTRY_POINTS = "moe_select.adapters"


def _pkg_dir(pkg: str) -> Path:
    import importlib

    return Path(importlib.import_module(pkg).__file__).parent  # type: ignore[arg-type]


def bundled_dirs() -> tuple[Path, Path]:
    """``(backends dir, rules dir)`` of this install."""
    return _pkg_dir("moe_select.backends"), _pkg_dir("moe_select.rules")


@dataclass
class Catalog:
    """Facts and policy, validated. ``files`` maps each file's display name to its sha256."""

    runners: dict[str, RunnerCapability]
    a2a: dict[str, A2ACapability]
    common: CommonFacts
    rules: list[Rule]
    files: dict[str, str] = field(default_factory=dict)
    rule_files: list[str] = field(default_factory=list)
    overridden: dict[str, str] = field(default_factory=dict)  # rule id -> the bundled location replaced
    #: Operator rule directories and files, absolute, in the order they were layered (plans store them so
    #: that ``resolve`` rebuilds the same catalog from any working directory).
    rule_sources: list[str] = field(default_factory=list)
    #: The bundled rules before any operator layer (lint compares outcomes with and without overrides).
    bundled_rules: list[Rule] = field(default_factory=list)
    #: Rule id -> the bundled rule an operator rule replaced.
    replaced: dict[str, Rule] = field(default_factory=dict)
    #: Display name -> path of every rule file read (lint reads their comments).
    rule_paths: dict[str, Path] = field(default_factory=dict)

    def adapter(self, runner: str, quant: str | None = None) -> str | None:
        """The module that implements ``runner`` (for ``quant``, when given) here: its capability file's
        ``module`` (unless ``adapter_formats`` leaves ``quant`` out), else a plugin registered under the
        ``moe_select.adapters`` entry-point group, else None (plan-only)."""
        cap = self.runners[runner]
        if cap.module and (quant is None or cap.implements(quant)):
            return cap.module
        return plugin_adapters().get(runner)

    def packages(self) -> list[tuple[str, str]]:
        """Every (distribution, module) pair named by a capability file."""
        seen: dict[str, str] = {}
        for cap in [*self.runners.values(), *self.a2a.values()]:
            for p in cap.packages:
                seen.setdefault(p.name, p.module)
        if any(c.jit for c in self.runners.values()):
            seen.setdefault("flashinfer-jit-cache", "flashinfer_jit_cache")
        return sorted(seen.items())


def plugin_adapters() -> dict[str, str]:
    """Runner name -> module of installed plugins (entry points in group ``moe_select.adapters``)."""
    try:
        eps = md.entry_points(group=ADAPTER_ENTRY_POINTS)
    except TypeError:  # pragma: no cover - Python < 3.10 API
        eps = md.entry_points().get(ADAPTER_ENTRY_POINTS, [])  # type: ignore[attr-defined]
    return {ep.name: ep.value for ep in eps}


def _read(path: Path, display: str, files: dict[str, str]) -> object:
    """Load one rule or capability file through :func:`moe_select.yamlio.read_input` (regular files only,
    size-bounded, read once) and record the sha256 of the bytes parsed in ``files``. Raises InputError."""
    raw, files[display] = read_input(path, display, "rule or capability file")
    data = load_text(decode_text(raw, display), display)
    if not isinstance(data, MarkedDict):
        raise InputError(Issue(display, 0, "", "the file must hold a mapping"))
    return data


def _load_rule_file(path: Path, display: str, files: dict[str, str]) -> RuleFile:
    return validate(RuleFile, _read(path, display, files), display)


def rule_dirs_from_env() -> list[Path]:
    """Operator rule directories named by ``$MOE_SELECT_RULES`` (``os.pathsep``-separated)."""
    val = os.environ.get(RULES_ENV, "")
    return [Path(p) for p in val.split(os.pathsep) if p]


def load_catalog(rules_dirs: Sequence[str | Path] = (), *, use_env: bool = True,
                 backends_dir: Path | None = None, bundled_rules: bool = True) -> Catalog:
    """Read and cross-check the bundled capability and rule files, then each operator rule directory
    or file (``rules_dirs``, then ``$MOE_SELECT_RULES`` when ``use_env``). Raises :class:`InputError` listing
    every problem with file, line and field."""
    bdir, rdir = bundled_dirs()
    bdir = backends_dir or bdir
    files: dict[str, str] = {}
    issues: list[Issue] = []

    def collect(fn, *args):
        try:
            return fn(*args)
        except InputError as exc:
            issues.extend(exc.issues)
            return None

    runners: dict[str, RunnerCapability] = {}
    failed: set[str] = set()  # runner files that did not load: rules naming them are not reported again
    for path in sorted(bdir.glob("*.yaml")):
        if path.stem == "common":
            continue
        display = f"backends/{path.name}"
        cap = collect(lambda p, d: validate(RunnerCapability, _read(p, d, files), d), path, display)
        if cap is None:
            failed.add(path.stem)
        else:
            if cap.runner != path.stem:
                issues.append(Issue(display, cap._lines.get("runner", 0), "runner", f"runner {cap.runner!r} must match the file name {path.stem!r}"))
            runners[cap.runner] = cap
    a2a: dict[str, A2ACapability] = {}
    for path in sorted((bdir / "a2a").glob("*.yaml")):
        display = f"backends/a2a/{path.name}"
        cap = collect(lambda p, d: validate(A2ACapability, _read(p, d, files), d), path, display)
        if cap is not None:
            if cap.a2a != path.stem:
                issues.append(Issue(display, cap._lines.get("a2a", 0), "a2a", f"a2a {cap.a2a!r} must match the file name {path.stem!r}"))
            a2a[cap.a2a] = cap
    common = collect(lambda p, d: validate(CommonFacts, _read(p, d, files), d), bdir / "common.yaml", "backends/common.yaml")

    rules: list[Rule] = []
    rule_files: list[str] = []
    rule_paths: dict[str, Path] = {}
    bundled: list[Rule] = []
    replaced: dict[str, Rule] = {}
    overridden: dict[str, str] = {}
    layers: list[tuple[str, list[tuple[Path, str]]]] = []
    if bundled_rules:
        layers.append(("bundled", [(p, f"rules/{p.name}") for p in sorted(rdir.glob("*.yaml"))]))
    dirs = [Path(d) for d in rules_dirs] + (rule_dirs_from_env() if use_env else [])
    rule_sources: list[str] = []
    for given in dirs:
        d = given.absolute()  # shown and stored absolute: a plan must resolve from any working directory
        if d.is_file():
            layers.append((str(d), [(d, str(d))]))
        elif d.is_dir():
            layers.append((str(d), [(p, str(p)) for p in sorted(f for g in RULE_GLOBS for f in d.glob(g))]))
        else:
            issues.append(Issue(str(given), 0, "", "rules file or directory not found"))
            continue
        rule_sources.append(str(d))
    for layer, paths in layers:
        layer_rules: list[Rule] = []
        for path, display in paths:
            rf = collect(_load_rule_file, path, display, files)
            if rf is None:
                continue
            rule_files.append(display)
            rule_paths[display] = path
            layer_rules.extend(rf.rules)
        seen: dict[str, Rule] = {}
        for r in layer_rules:
            if r.id in seen:
                issues.append(Issue(r._file, r._line, "id", f"duplicate rule id {r.id!r} (first at {seen[r.id].where()})"))
            seen[r.id] = r
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

    for r in rules:
        for name in r.runners:
            if name not in runners and name not in failed:
                close = difflib.get_close_matches(name, list(runners), n=1)
                field_ = r.action
                issues.append(Issue(r._file, r._lines.get(field_, r._line), f"{field_}",
                                    f"rule {r.id!r} names unknown runner {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")))
    if issues:
        raise InputError(issues)
    assert common is not None
    return Catalog(runners=runners, a2a=a2a, common=common, rules=rules, files=files,
                   rule_files=rule_files, overridden=overridden, rule_sources=rule_sources, bundled_rules=bundled,
                   replaced=replaced, rule_paths=rule_paths)


_cache: dict[tuple, Catalog] = {}
_lock = threading.Lock()


def default_catalog(rules_dirs: Iterable[str | Path] = ()) -> Catalog:
    """:func:`load_catalog` cached per (rule dirs, $MOE_SELECT_RULES), for repeated calls in one process."""
    key = (tuple(str(d) for d in rules_dirs), os.environ.get(RULES_ENV, ""))
    with _lock:
        if key not in _cache:
            _cache[key] = load_catalog(list(rules_dirs))
        return _cache[key]
