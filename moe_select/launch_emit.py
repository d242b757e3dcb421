"""Write a plan as an engine's launch (issue 22): ``moe-select plan --emit sglang|vllm|trtllm``.

:func:`emit` returns the MoE flags, environment and (TensorRT-LLM) the ``--extra_llm_api_options`` YAML that
make the engine run the plan: the runner and all-to-all in the engine's own names (``backends/engines/names.yaml``),
the parallel sizes as the engine spells them, CUDA graphs off when the plan says so, the phase, the
token budget and the shared-expert fusion when the deployment gave them. With the :class:`~moe_select.launch_line.Launch` the plan came
from, the user's other flags are kept as written. Every flag written is checked against the engine's table at
the declared version (absent there, or removed by then: refused); a flag whose table entry records no release
is written with a comment saying so.

Raises :class:`EmitError` (exit 1, naming what the engine lacks) where the engine cannot express the plan: the
plan does not hold for that engine, the engine has no name for the runner or the all-to-all, vLLM's EP
(a switch: EP = tp x dp x pcp) cannot give ep = E with 1 < E < tp, shared-expert fusion is asked where the engine
has no switch for it, or a flag is missing at the version.
Reading the emitted launch back (:func:`moe_select.launch_line.from_command`) gives the same plan.
"""
from __future__ import annotations

import json

import shlex
from dataclasses import dataclass, field
from typing import Any

from .engine_tables import EnvEntry, FlagEntry, names, table
from .errors import MoeSelectError
from .vocab import arch_in

#: File name of the TensorRT-LLM YAML an emitted launch writes (a here-document in the script).
TRTLLM_YAML = "moe-select-llm-api.yaml"


#: The KV connector of an emitted disaggregated vLLM launch is the deployment's choice, not the MoE plan's: a placeholder
#: that vLLM refuses until it is replaced (the comment beside it says so), never a guess.
KV_CONNECTOR_PLACEHOLDER = "<your kv_connector>"


class EmitError(MoeSelectError):
    """The engine cannot express the plan (the message says what it lacks)."""


@dataclass
class Emitted:
    """An emitted launch: ``argv`` (the engine command), ``env`` (variables to set), ``yaml`` (TensorRT-LLM's
    options file, or None) and ``comments`` (what the reader should know)."""

    engine: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    yaml: dict[str, Any] | None = None
    comments: list[str] = field(default_factory=list)
    #: How many words of ``argv`` are the launcher and the model (written on the first line).
    head: int = 1

    def script(self) -> str:
        """A shell script: comments, the YAML as a here-document, then the command (one flag per line)."""
        import yaml as pyyaml

        lines = ["#!/bin/sh", f"# written by moe-select plan --emit {self.engine}"]
        lines += [f"# {c}" for c in self.comments]
        if self.yaml is not None:
            lines += [f"cat > {TRTLLM_YAML} <<'EOF'", pyyaml.safe_dump(self.yaml, sort_keys=True).rstrip(), "EOF"]
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        words: list[str] = []
        i = 0
        argv = self.argv
        head = argv[:self.head]
        i = self.head
        words.append(" ".join(shlex.quote(w) for w in head))
        while i < len(argv):
            j = i + 1
            while j < len(argv) and not argv[j].startswith("-"):
                j += 1
            words.append(" ".join(shlex.quote(w) for w in argv[i:j]))
            i = j
        cmd = (env + " " if env else "") + " \\\n    ".join(words)
        return "\n".join(lines + [cmd]) + "\n"


#: How to declare the engine release a launch is written for (a flag, or the deployment that was planned).
_NEWER = "declare a newer engine version: --engine-version, or the deployment's engine_version or packages"


def prov_default(provenance: dict, key: str) -> bool:
    """Whether ``key`` of a plan's deployment took a default (its provenance starts with ``default``)."""
    return str(provenance.get(key, "default")).startswith("default")


def _flag(engine: str, means: str, version: str | None, comments: list[str]) -> str:
    """The canonical spelling of the flag of ``means``, checked at ``version``: the first entry that release has (a
    flag renamed between releases is written as the declared one spells it), else the first not removed (an
    :class:`EmitError` where it is newer than the release)."""
    from .engine_tables import release_date
    from .launch_line import _ver

    t = table(engine)
    entry: FlagEntry | None = table(engine).flag_at(means, version) \
        or next((e for e in t.flags if e.means == means and e.removed is None), None)
    if entry is not None and version is None and entry.since is not None and entry.since.version is not None:
        older = [e.name for e in t.flags if e.means == means and e is not entry]
        if older:   # the newest releases' spelling: say what the older ones take (as _release_name does)
            comments.append(f"{entry.name}: the spelling of {engine} {entry.since.version} on (older releases take "
                            f"{' or '.join(older)}); declare --engine-version to have it written for yours")
    if entry is None:
        raise EmitError(f"{engine}'s table has no flag for {means}: moe-select cannot write this plan as a {engine} launch")
    if entry.since is not None and version is not None:
        has = entry.since.made_at(version, engine)
        if has is False and _ver(entry.since.version) is not None:
            raise EmitError(f"{entry.name} was added in {entry.since.text()}: {engine} {version} does not have it, and the plan needs it "
                            f"({_NEWER}, or plan without it)")
        if has is False:
            raise EmitError(f"{entry.name} was added by {entry.since.text()}, after {engine} {version} was released "
                            f"({release_date(engine, version)}: backends/engines/releases.yaml): {engine} {version} does not "
                            f"have it, and the plan needs it ({_NEWER}, or plan without it)")
        if has is None:
            comments.append(f"{entry.name}: added by {entry.since.text()}; no release is recorded for it: check that {engine} {version} has it")
    return entry.name


#: Meanings a launch line's flags are read for but that no plan field holds and no emitter writes: an emitted launch
#: keeps them as the line gave them (the README: emit keeps the user's other flags).
PASS_THROUGH = ("max_running", "eplb_config", "spec_algo", "spec_draft_tokens", "spec_config", "dp_local", "pp", "nnodes",
                "compilation_config", "cuda_graph_bs", "cuda_graph_max_bs", "trt_backend", "kernel_config",
                "allow_deprecated_quant")


def _eplb_words(engine: str, d: Any, launch: Any, version: str | None, comments: list[str]) -> list[str]:
    """The engine's expert-parallel load-balancing switch where the deployment asks it (``eplb``); off, the line's own
    spelling of it as it gave it (``--no-enable-eplb``), else nothing (the engines' default is off)."""
    if d.eplb:
        return [_flag(engine, "eplb", version, comments)]
    r = launch.values.get("eplb") if launch is not None else None
    return r.written.split() if r is not None and r.written.startswith("-") else []


def _lora_words(engine: str, d: Any, launch: Any, version: str | None, comments: list[str]) -> list[str]:
    """LoRA adapters where the deployment serves them (``lora``): the line's own LoRA flag as it gave it (SGLang's
    ``--lora-paths`` with its adapters), else the engine's switch; off, the line's own spelling of off
    (``--no-enable-lora``), else nothing (the engines' default is off). The adapters' other flags (vLLM's
    ``--lora-modules``, ``--max-lora-rank``) are not read and stay as the line gave them."""
    r = launch.values.get("lora") if launch is not None else None
    if d.lora:
        if r is not None and r.written.startswith("-") and r.value not in (None, False, "", []):
            return r.written.split()
        return [_flag(engine, "lora", version, comments)]
    return r.written.split() if r is not None and r.written.startswith("-") else []


def _passed_through(launch: Any, argv: list[str]) -> list[str]:
    """The command-line flags of ``launch`` read for a :data:`PASS_THROUGH` meaning, as the line gave them (a flag the
    emitted words already hold is not repeated; a setting read from a config file stays in that file's content)."""
    out: list[str] = []
    for r in launch.values.values():
        flag = r.written.split()[0] if r.written else ""
        given = next((e for e in table(launch.engine).flags if flag.partition("=")[0] in e.names), None)
        if given is not None and given is not r.entry and given.replacement in r.entry.names:
            # a removed flag read as its live replacement (launch_line._live_replacement): written under the replacement
            # (only then: a line's --no-X is read under X's entry and stays as written)
            flag = r.entry.name
        if r.entry.means not in PASS_THROUGH or not flag.startswith("-") or flag in argv or flag in out:
            continue
        if r.entry.takes == "switch":
            out.append(flag)
        elif r.entry.takes == "bool_optional":               # as the line gave it: --x, --no-x or its inverse spelling
            out.append(flag)
        elif isinstance(r.value, list):                     # nargs flags: one word per value, as the line gave them
            out += [flag, *(str(x) for x in r.value)]
        elif isinstance(r.value, dict):
            out += [flag, json.dumps(r.value)]
        else:
            out += [flag, str(r.value)]
    return out


def _replacement_words(engine: str, token: str, version: str | None, argv: list[str]) -> list[str]:
    """``[replacement, value...]`` for a launch line's ``token`` (``--flag value``) whose table entry is removed and
    names a ``replacement`` flag of the same meaning, live at ``version`` and not already in ``argv``; else ``[]``."""
    words = token.split()
    if not words or not words[0].startswith("-"):
        return []
    from .launch_line import _live_replacement

    flag, _, inline = words[0].partition("=")
    entry = next((e for e in table(engine).flags if flag in e.names), None)
    live = _live_replacement(table(engine), entry, version) if entry is not None else None
    if live is None or entry is None or not entry.replacement or entry.replacement in argv:
        return []
    values = ([inline] if inline else []) + words[1:]
    return [entry.replacement, *values] if values else []


def _precision_env(engine: str, precision: str, version: str | None, runner: str, predicted: str | None) -> str | None:
    """The variable of ``engine``'s table that asks activation ``precision`` (``means: activation_precision``, value "1")
    and that the declared release reads, where it applies to the plan's ``runner``: read under the engine's own pick
    (``runners: [auto]``) only for a runner the variable ``picks`` and that the engine's own prediction (``predicted``,
    None where the tables cannot predict it) does not contradict; else None."""
    for e in table(engine).env:
        if e.means != "activation_precision" or (e.values or {}).get("1") != precision or not e.live_at(version, engine):
            continue
        if e.runners is not None and not (runner in e.runners or ("auto" in e.runners and runner in (e.picks or [])
                                                                  and predicted in (None, runner))):
            continue
        return e.name
    return None


def _env_read_at(engine: str, means: str, version: str | None) -> str | None:
    """The variable of ``engine``'s table that sets ``means`` and that the declared release reads
    (:meth:`~moe_select.engine_tables._Entry.live_at`), or None."""
    return next((e.name for e in table(engine).env if e.means == means and e.live_at(version, engine)), None)


def _a2a_row(ours: str, mode: str | None) -> Any:
    """The names.yaml row of our all-to-all ``ours`` in ``mode`` (else its row without a mode), or None."""
    rows = [r for r in names().a2a if r.ours == ours]
    return next((r for r in rows if r.mode == mode), None) or next((r for r in rows if r.mode is None), None)


def _draft_words(plan: Any, version: str | None, comments: list[str]) -> list[str]:
    """SGLang's flags of the speculative draft's (MTP) MoE runner and all-to-all (``means: draft_runner`` /
    ``draft_a2a`` of its table), written where the plan's ``mtp`` layer kind differs from the main layers' (the engine's
    draft rule otherwise: backends/engines/sglang.yaml ``draft``)."""
    words: list[str] = []
    for k in plan.layers:
        if k.deployment.layer_kind != "mtp":
            continue
        if k.runner != plan.runner:
            ok, theirs = names().runner_for("sglang", k.runner, k.quant)
            if ok and theirs:
                words += [_flag("sglang", "draft_runner", version, comments), theirs]
        a2a = str(k.deployment.a2a)
        if a2a != str(plan.a2a):
            row = _a2a_row(a2a, None)
            value = "none" if a2a == "none" else (row.sglang if row is not None else None)
            if value:
                words += [_flag("sglang", "draft_a2a", version, comments), str(value)]
    return words


def _draft_own_runner(engine: str, plan: Any, argv: list[str], version: str | None, comments: list[str]) -> list[str]:
    """``argv`` with the plan's speculative-draft (MTP) runner written where it differs from the main layers', for an
    engine whose runner setting is model-wide and whose speculative config names a draft's own runner (the table's
    ``draft.own_runner_key``: vLLM's ``moe_backend``, otherwise the draft runs the target's ``--moe-backend``), so the
    line's speculative config (``means: spec_config``) gets that key. Raises :class:`EmitError` where the release has
    no such key or ignores it (``draft.own_runner``; a trial, break54: the emitted line ran the draft on a runner the
    plan refuses for it)."""
    import json

    rules = table(engine).draft
    k = next((k for k in plan.layers if k.deployment.layer_kind == "mtp" and k.runner != plan.runner), None)
    if k is None or rules is None or rules.own_runner_key is None:
        return argv
    key = rules.own_runner_key
    own = rules.own_runner_at(version)
    if own is None or own.ignored is not None:
        why = (f"{own.ignored} ({own.source})" if own is not None else
               f"its speculative config has no {key} (releases {' | '.join(w.version for w in rules.own_runner)} have: "
               f"{rules.own_runner[0].source})")
        raise EmitError(f"{engine} {version} runs the speculative draft's MoE layers on the target's runner "
                        f"({plan.runner}), and the plan gives them {k.runner}: {why}; plan with layer_runners: "
                        f"{{mtp: {plan.runner}}} to see whether the target's runner serves them")
    ok, theirs = names().runner_for(engine, k.runner, k.quant)
    if not ok or not theirs:
        raise EmitError(f"{engine} has no runner name for the draft's runner {k.runner}")
    flags = {n for f in table(engine).flags if f.means == "spec_config" for n in f.names}
    out = list(argv)
    for i, word in enumerate(out):
        flag, eq, value = word.partition("=")
        if flag not in flags:
            continue
        text = value if eq else (out[i + 1] if i + 1 < len(out) else "")
        try:
            cfg = json.loads(text)
        except ValueError:
            break
        if not isinstance(cfg, dict):
            break
        cfg[key] = theirs
        new = json.dumps(cfg, separators=(",", ":"))
        if eq:
            out[i] = f"{flag}={new}"
        else:
            out[i + 1] = new
        comments.append(f"the draft's MoE layers run {theirs} (the plan's mtp runner): {key} in {flag} ({own.source})")
        return out
    comments.append(f"the plan's mtp layers run {theirs}: give the speculative config \"{key}\": \"{theirs}\" "
                    f"(otherwise {engine} runs them on the target's runner, {plan.runner})")
    return out


def _a2a_words(engine: str, value: str, version: str | None, comments: list[str]) -> tuple[list[str], dict[str, str]]:
    """``engine``'s words and variables for all-to-all ``value``: its a2a flag and the value; at a release older than
    that flag (its ``since``), the way that release took it, with a comment: the retired switch whose table replacement
    is ``FLAG value`` (meaning ``retired_a2a``), else the variable the release reads for it (an env entry meaning
    ``a2a``); else :class:`EmitError`."""
    try:
        return [_flag(engine, "a2a", version, comments), value], {}
    except EmitError:
        old = next((e for e in table(engine).flags if e.means == "retired_a2a"
                    and (e.replacement or "").split()[-1:] == [value]), None)
        if old is not None:
            comments.append(f"{old.name}: {engine} {version} predates its all-to-all flag "
                            f"({old.deprecated.text() if old.deprecated else old.source}); it took {value} as {old.name}")
            return [old.name], {}
        var = _env_read_at(engine, "a2a", version)
        if var is None:
            raise
        comments.append(f"{var}={value}: {engine} {version} predates its all-to-all flag; it reads the all-to-all from {var}")
        return [], {var: value}


def _released(engine: str, of: str, value: str, version: str | None, comments: list[str]) -> str:
    """``value`` (the engine's name for a runner or all-to-all); when the declared ``version`` is older than the first
    release that takes it (backends/engines/names.yaml ``choices`` ``since``), the value those releases reach the same
    runner by (``earlier``, with a comment), else :class:`EmitError`."""
    c = names().choices_of(engine, of)
    first = c.first_release(value, version) if c is not None else None
    if c is not None and first is not None and value in c.earlier:
        comments.append(f"{value} first shipped in {engine} {first}: {engine} {version} reaches it as {c.earlier[value]} "
                        f"[{c.earlier_source}]")
        return c.earlier[value]
    if c is not None and first is not None:
        raise EmitError(f"{value} first shipped in {engine} {first}: {engine} {version} does not take it "
                        f"[{c.since_source or c.source}] ({_NEWER}, or plan for that release)")
    return value


def _release_name(name: str, before: list, version: str | None, comments: list[str], what: str) -> str:
    """``name``, or the spelling ``before`` (:class:`~.engine_tables.OlderName` rows of backends/engines/names.yaml) gives
    the releases below which ``version`` lies (the lowest such bound). With no version declared: ``name`` (the newest
    releases'), and a comment naming the older spellings."""
    from .launch_line import _ver

    v = _ver(version)
    rows = sorted(before, key=lambda b: _ver(b.below))
    if v is None:
        if rows:
            older = "; ".join(f"releases before {b.below} take {b.name}" for b in rows)
            comments.append(f"{what} {name}: the newest releases' spelling ({older}); declare --engine-version to have it "
                            f"written for yours")
        return name
    return next((b.name for b in rows if v < _ver(b.below)), name)


def _runner_words(engine: str, theirs: str, version: str | None, comments: list[str], runner: str,
                  predicted: str | None, auto_only: str | None = None) -> list[str]:
    """The runner option and value for ``engine`` at ``version``; where that release has neither (an
    :class:`EmitError` of :func:`_flag` / :func:`_released`) but the engine picks the plan's ``runner`` itself
    (``predicted``), none, with a comment; else the error. ``auto_only``: why the engine's quantization method wants
    the option left at auto (the plan's ``runner_option_auto``): none written, with a comment."""
    if auto_only is not None:
        comments.append(f"no runner option written: {engine} builds {runner} itself here, the option left at auto (a "
                        f"named runner fails at load or is ignored: {auto_only})")
        return []
    try:
        return [_flag(engine, "runner", version, comments), _released(engine, "runner", theirs, version, comments)]
    except EmitError as exc:
        if predicted is None or predicted != runner:
            raise EmitError(f"{exc}" + (f"; {engine} {version} would pick {predicted} itself here, not the plan's {runner}"
                                        if predicted else "")) from None
        why = exc.args[0].split(" (declare")[0].replace(", and the plan needs it", "")
        comments.append(f"no runner option written: {why}; {engine} picks {theirs} itself for this deployment by the engine "
                        "prediction (its selection as read at the tables' commit): check that its startup log names it")
        return []


def _vendor_switch(plan: Any, engine: str, comments: list[str]) -> dict[str, str]:
    """The engine's vendor-library variable (``means: vendor_library`` in backends/engines/<engine>.yaml) as the plan
    needs it: the deployment's value where it states one; where it does not and a fact refuses the plan's runner at one
    value (the plan's unknowns' ``refuses_at``), the other value, with a comment; else nothing (the engine's default)."""
    var = next((v.name for v in table(engine).env if v.means == "vendor_library"), None)
    if var is None:
        return {}
    d = plan.deployment
    if d.vendor_library is not None:
        return {var: "1" if d.vendor_library else "0"}
    bad = {u.refuses_at["vendor_library"] for u in plan.unknowns
           if u.refuses_at and "vendor_library" in u.refuses_at and u.backend in (None, plan.runner)}
    if len(bad) != 1:
        return {}
    on = not bad.pop()
    comments.append(f"{var}={int(on)}: the deployment does not state vendor_library, and a fact refuses {plan.runner} "
                    f"with it {'off' if on else 'on'} (the plan's unknowns)")
    return {var: "1" if on else "0"}


def _fusion_words(plan: Any, engine: str, version: str | None, comments: list[str]) -> tuple[list[str], dict[str, str]]:
    """``(flag words, variables)`` for the deployment's ``shared_expert_fusion`` where it states it (a default is this
    project's, off, and writes nothing: the engine decides as it would). SGLang: fusion off is its
    ``means: shared_expert_fusion_off`` switch (``--disable-shared-experts-fusion``); on has no switch (SGLang fuses
    where its model code and runner allow, and turns it off itself for some runners and all-to-alls: the engine
    prediction's resolutions), so a comment says so. vLLM: its ``means: shared_expert_fusion`` variable, read on ROCm
    with the vendor library's fused MoE only, on a ``gfx`` plan where the declared release reads it; fusion off elsewhere
    is what vLLM does.
    Raises :class:`EmitError` where the deployment asks fusion on and the engine has no way to be asked (writing the
    launch would drop the request)."""
    d = plan.deployment
    if prov_default(d.provenance, "shared_expert_fusion"):
        return [], {}
    on = bool(d.shared_expert_fusion)
    if engine == "sglang":
        if not on:
            return [_flag("sglang", "shared_expert_fusion_off", version, comments)], {}
        comments.append("shared_expert_fusion on: SGLang has no switch that turns it on; it fuses the shared experts where "
                        "its model code and MoE runner allow (its startup log says which) and turns the fusion off itself "
                        "for some runners and all-to-alls (explain's engine prediction lists those resolutions)")
        return [], {}
    var = _env_read_at(engine, "shared_expert_fusion", version)
    if var is not None and arch_in(str(plan.arch), ["rocm"]):
        comments.append(f"{var}={int(on)}: the deployment's shared_expert_fusion ({table(engine).cite(next(e for e in table(engine).env if e.name == var))})")
        return [], {var: "1" if on else "0"}
    if on:
        where = (f"{var}, read on ROCm with the vendor library's fused MoE only, is not read on {plan.arch}" if var is not None
                 else f"its table (backends/engines/{engine}.yaml) has no flag or variable for it"
                 + (f" that {engine} {version} reads" if version else ""))
        raise EmitError(f"the deployment asks shared-expert fusion on, and {engine} cannot be asked for it: {where}; "
                        f"moe-select cannot write this plan as a {engine} launch (plan with shared_expert_fusion false)")
    return [], {}


def _asked_of_runner(plan: Any, d: Any, comments: list[str]) -> str | None:
    """The activation precision the deployment ``d`` asks of the plan's runner (``quant_config.activation_precision``),
    or None; where ``activation_precision_runners`` names other runners, None and a comment saying it is not written
    (the engine reads that request for those runners only: :func:`moe_select.selector.asked_precision`)."""
    from .selector import asked_precision

    asked = asked_precision(d, plan.runner)
    if asked is None and d.quant_params.get("activation_precision"):
        comments.append(f"activation_precision {d.quant_params['activation_precision']} is asked of "
                        f"{' and '.join(d.quant_params['activation_precision_runners'])} only; the plan's runner "
                        f"{plan.runner} runs its own ({plan.activation_precision}): no precision flag written")
    return asked


def _precision_flag(engine: str, precision: str, version: str | None, comments: list[str], *, runner: str,
                    quant: str) -> list[str]:
    """``[flag, value]`` asking ``engine`` for activation ``precision`` (``quant_config.activation_precision``): the
    table entry ``means: activation_precision`` whose ``values`` map an engine value to it. Raises :class:`EmitError`
    where the engine's table has none (the engine cannot be asked: writing the launch would drop the request)."""
    t = table(engine)
    scoped: list[str] = []
    for entry in t.flags:
        if entry.means == "activation_precision" and entry.removed is None:
            value = next((k for k, v in (entry.values or {}).items() if v == precision), None)
            if value is None:
                continue
            if entry.runners is not None and runner not in entry.runners or entry.formats is not None and quant not in entry.formats:
                scoped.append(f"{entry.name} is read with runner {' or '.join(entry.runners or ['any'])} on "
                              f"{', '.join(entry.formats or ['any format'])} only")
                continue
            return [_flag(engine, "activation_precision", version, comments), value]
    raise EmitError(f"{engine} has no flag asking runner {runner} on {quant} for activation precision {precision} "
                    f"(quant_config.activation_precision)" + (f": {'; '.join(scoped)}" if scoped else "")
                    + f": moe-select cannot write this plan as a {engine} launch")


def _online_words(plan: Any, engine: str, version: str | None, comments: list[str]) -> list[str]:
    """``[flag, value]`` making the plan's format at load from the 16-bit checkpoint, or the quantized one
    ``quant_params.online_from`` names (``quant_params.online``, issue 21):
    the ``online`` fact of backends/formats.yaml that makes it for ``engine`` at ``version`` (None: not known, a comment
    says which releases the flag needs), preferring a flag no ``makes: false`` fact of the engine names (vLLM's
    fp8_per_tensor over fp8, which raises from 0.31.0). Nothing for a plan of the checkpoint's own format. Raises
    :class:`EmitError` where no fact makes it (the launch would serve the 16-bit weights) or names no method flag."""
    d = plan.deployment
    if not d.quant_params.get("online"):
        return []
    from .formats import lookup, online_clause, online_verdict
    from .launch_line import online_flag

    fmt = lookup(plan.quant)
    scale = (str(d.quant_params.get("activation_scale") or "per_tensor")
             if plan.quant == "nvfp4" and not d.quant_params.get("weight_only") else None)
    if fmt is None:
        raise EmitError(f"{plan.quant} is made at load, and backends/formats.yaml has no row for it: no fact says which {engine} "
                        f"flag makes it; moe-select cannot write this plan as a {engine} launch")
    src = d.quant_params.get("online_from")  # a quantized checkpoint converted at load (FP8 -> NVFP4), else 16-bit
    verdict, ways = online_verdict(fmt, engine, version, plan.arch, scale, src)
    flagged = [(w, fv[1]) for w in ways if (fv := online_flag(w.how, engine)) is not None]
    if verdict not in ("makes", "version") or not flagged:
        _, words, where = online_clause(fmt, engine, version, plan.arch, scale, src)
        raise EmitError(f"{plan.quant} is made at load from the {src or '16-bit'} checkpoint, and {words} ({where})"
                        + ("" if verdict not in ("makes", "version") else f"; no fact names {engine}'s quantization flag")
                        + f": moe-select cannot write this plan as a {engine} launch")
    refused = {fv[1] for w in fmt.online_ways if w.engine == engine and not w.makes and w.takes(src)
               and (fv := online_flag(w.how, engine)) is not None}
    pick, value = next((x for x in flagged if x[1] not in refused), flagged[0])
    flag = _flag(engine, "quant", version, comments)
    comments.append(f"{plan.quant} made at load from the {src or '16-bit'} checkpoint: {flag} {value}"
                    + (f" (its version not known: the flag needs {engine} {pick.version})" if verdict == "version" else "")
                    + (f"; {pick.note}" if pick.note else "") + f" (backends/formats.yaml:{pick.where().rsplit(':', 1)[-1]}; {pick.source})")
    return [flag, value]


def _dispatch_words(plan: Any, engine: str, version: str | None, comments: list[str]) -> tuple[list[str], dict[str, str]]:
    """``(flag words, variables)`` asking ``engine`` for the plan's ``dispatch_precision`` (each MoE layer kind's): the
    first table entry ``means: dispatch_precision`` (flags before variables, deprecated ones never) that reads the plan's
    all-to-all and mode, is live at ``version``, has a value for the main layers' precision and can say the other kinds'
    (``layers: all``: every kind the same; ``layers: main``: the other kinds auto). Nothing where every kind is auto.
    Raises :class:`EmitError` naming what no entry can say (writing the launch would drop the request)."""
    from .launch_line import _changes

    main = str(plan.deployment.dispatch_precision)
    kinds = {k.deployment.layer_kind: str(k.deployment.dispatch_precision) for k in plan.layers}
    if main == "auto" and all(p == "auto" for p in kinds.values()):
        return [], {}
    asked = ", ".join([f"main {main}"] + [f"{k} {p}" for k, p in kinds.items()])
    t = table(engine)
    why: list[str] = []
    entries: list[FlagEntry | EnvEntry] = [*t.flags, *t.env]
    for entry in entries:
        if entry.means != "dispatch_precision" or entry.deprecated is not None:
            continue
        label = entry.name
        if plan.a2a not in (entry.a2a or []) or (entry.a2a_modes and plan.a2a_mode not in entry.a2a_modes):
            continue
        found, live = _changes(entry, label, version, engine)
        if not live:
            why.append(f"{label}: " + "; ".join(f.message for f in found))
            continue
        value = next((k for k, p in (entry.values or {}).items() if p == main), None) if main != "auto" else None
        if value is None:
            why.append(f"{label} has no value for {main} (it takes {', '.join(entry.values or {})})")
            continue
        other = {k: p for k, p in kinds.items() if p != (main if entry.layers == "all" else "auto")}
        if other:
            why.append(f"{label} sets " + ("every MoE layer kind alike" if entry.layers == "all" else "the main layers only (the other kinds: "
                       "the engine's choice)") + f": it cannot say {', '.join(f'{k} {p}' for k, p in other.items())}")
            continue
        if entry.since is not None and entry.since.version is None and version is not None:
            comments.append(f"{label}: added by {entry.since.text()}; no release is recorded for it: check that {engine} {version} has it")
        comments.append(f"dispatch_precision ({asked}): {label} {value} ({table(engine).cite(entry)})")
        return ([entry.name, value], {}) if isinstance(entry, FlagEntry) else ([], {entry.name: value})
    raise EmitError(f"{engine} cannot be asked for dispatch_precision {asked} over a2a {plan.a2a}"
                    + (f" ({plan.a2a_mode})" if plan.a2a_mode else "") + ": "
                    + ("; ".join(why) if why else f"its table has no flag or variable setting the dispatch of {plan.a2a}")
                    + f"; moe-select cannot write this plan as a {engine} launch")


def emit(plan: Any, engine: str, *, engine_version: str | None = None, launch: Any = None, model: str | None = None,
         predicted: str | None = None) -> Emitted:
    """The launch of ``plan`` for ``engine`` (``sglang``, ``vllm``, ``trtllm``). ``launch``: the
    :class:`~moe_select.launch_line.Launch` the plan came from (its other flags and its model are kept);
    ``model``: the model to write (default: the launch's, else the plan's model config folder); ``predicted``: the
    runner the engine picks itself for this deployment (the report's ``engine_choices``): where the declared release
    has no runner option or value for the plan's runner and the engine picks it anyway, the line leaves the option
    out (a comment says why). Raises :class:`EmitError` where the engine cannot express the plan (module docstring)."""
    if engine not in ("sglang", "vllm", "trtllm"):
        raise EmitError(f"--emit {engine}: moe-select writes sglang, vllm or trtllm launches")
    if engine not in plan.engines:
        raise EmitError(f"the plan ({plan.runner}) holds for {', '.join(plan.engines) or 'no engine'}, not {engine}: plan with --engine {engine}")
    if launch is not None and launch.engine != engine:
        raise EmitError(f"the plan came from a {launch.engine} launch line; --emit {engine} would drop its flags: emit {launch.engine}, "
                        f"or plan {engine} from a deployment")
    d = plan.deployment
    dispatch_env: dict[str, str] = {}
    comments: list[str] = [f"the plan: runner {plan.runner}, a2a {plan.a2a}" + (f" ({plan.a2a_mode})" if plan.a2a_mode else "")
                           + f", tp {d.tp}, ep {d.ep}" + (f", dp {d.dp}" if d.dp else "") + f", phase {d.phase}"]
    if plan.evidence != "supported":
        # a reader of the script alone must see that it rests on no fact (a new user's trial: the warning went to stderr only)
        comments.append(f"UNVERIFIED: no fact says this runs ({plan.evidence}); what is not checked:")
        comments += [f"  - {u.detail}" + (f" (settle: {u.settle})" if u.settle else "") for u in plan.unknowns]
    # CUDA graphs off in the plan: written only where the deployment asked it; a default the facts gave (a2a mode, cpu,
    # prefill) is the engine's own behaviour there, and writing the switch would turn off more than the MoE layer's
    # capture (a new user's trial: vLLM got --enforce-eager from another engine's all-to-all mode fact)
    graph_off = not plan.cuda_graph and not prov_default(d.provenance, "cuda_graph") \
        and not (launch is not None and launch.graph_off_kept)   # the line's own -O0 / cudagraph_mode NONE, kept
    if not plan.cuda_graph and not graph_off:
        comments.append(f"CUDA graphs off in the plan by default ({d.provenance.get('cuda_graph')}): no switch written, the "
                        f"engine decides its own capture")
    known, theirs = names().runner_for(engine, plan.runner, plan.quant)
    if not known and engine in plan.runner_option_values:   # an operator's runner: its capability file's engines.options
        theirs = plan.runner_option_values[engine]
        comments.append(f"{engine}'s runner option value {theirs} for {plan.runner}: from its capability file (engines.options), "
                        f"no row of backends/engines/names.yaml names it: a build of {engine} that registers it")
    if theirs is None and not known and launch is not None and launch.engine == engine:
        # a value the engine takes (its choices) that no row maps to a runner of ours, asked for by the line itself (vLLM's
        # --moe-backend batched_triton): written back as the line gave it (break51: a line that planned could not be
        # emitted again)
        r = launch.values.get("runner")
        c = names().choices_of(engine, "runner")
        if r is not None and str(r.value) == plan.runner and c is not None and str(r.value) in c.also:
            theirs = str(r.value)
            comments.append(f"{engine}'s runner value {theirs} written as the line gave it: no row of "
                            "backends/engines/names.yaml maps it to a runner of moe-select, so the plan rests on no fact of it")
    if theirs is None:
        general = names().runner_for(engine, plan.runner)[1]
        shadow = names().format_name(engine, general, plan.quant)
        raise EmitError(f"{engine} has no name for the runner {plan.runner}" + ("" if known else " (no row in backends/engines/names.yaml)")
                        + (f" on {plan.quant} checkpoints: its {general!r} runs {shadow.ours} there ({shadow.source})"
                           if shadow and shadow.ours else "")
                        + ": it cannot run this plan; "
                        + (f"the plan is already for {engine}, whose own choice here no runner of moe-select stands for "
                           "(explain's engine prediction names it)" if d.engine == engine
                           else f"plan with --engine {engine} to get a runner it has"))
    scoped = names().format_name(engine, theirs, plan.quant)
    if scoped is not None and scoped.ours is not None:
        comments.append(f"{engine}'s {theirs} runs {scoped.ours} on {plan.quant} checkpoints ({scoped.source})")
    mdl = model or (launch.model if launch is not None else None) or d.model_config_path
    if mdl is None:
        raise EmitError("the plan has no model config path (a model: shape): give the model to launch")
    version = engine_version or (launch.engine_version if launch is not None else None)
    draft_words = _draft_words(plan, version, comments) if engine == "sglang" else []
    if plan.layers:
        comments.append("the plan's other MoE layer kinds (" + ", ".join(f"{k.deployment.layer_kind}: {k.runner}" for k in plan.layers)
                        + ("): the draft's flags written (--speculative-moe-*)" if draft_words else
                           "): vLLM runs the draft's on --moe-backend unless the speculative config names its own"
                           if engine == "vllm" else
                           ") run as the engine decides for them: this launch sets the main layers' runner"))
    prov = d.provenance
    argv: list[str]
    yaml_doc: dict[str, Any] | None = None
    precision_env: dict[str, str] = {}
    a2a_row = None
    if plan.a2a != "none" or (d.ep > 1 and engine == "vllm"):
        a2a_row = _a2a_row(plan.a2a, plan.a2a_mode)
        if engine == "vllm" and a2a_row is not None and a2a_row.vllm is not None and a2a_row.vllm_at(version) is None:
            # a name vLLM takes only from a later release (names.yaml vllm_since): not for this one
            comments.append(f"vLLM's --all2all-backend {a2a_row.vllm} (a2a {plan.a2a}"
                            + (f" {a2a_row.mode}" if a2a_row.mode else "") + f") comes in {a2a_row.vllm_since}: vllm {version} "
                            "does not take it")
            a2a_row = None
        if a2a_row is None and engine == "vllm" and len(plan.a2a_modes) == 1:
            a2a_row = next((r for r in names().a2a if r.ours == plan.a2a and r.mode == plan.a2a_modes[0]), None)
    if engine == "sglang":
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", mdl, _flag("sglang", "tp", version, comments), str(d.tp)]
        if d.ep > 1:
            argv += [_flag("sglang", "ep", version, comments), str(d.ep)]
        attn_dp_asked = launch is not None and any(m in launch.values for m in ("attn_dp", "dp_attention"))
        if d.dp and d.dp > 1 and launch is not None and not attn_dp_asked and "dp" in launch.values:
            # the line's replicas (--dp-size without attention DP, kept as written) and a plan with attention DP: both
            # would be --dp-size (argparse keeps the last), so the launch cannot say both
            raise EmitError(f"the line's {launch.values['dp'].written} is data-parallel replicas, and the plan has attention "
                            f"data parallelism {d.dp}: SGLang takes one --dp-size (and raises for replicas beside "
                            "--attn-dp-size); plan without dp, or drop the replicas from the line")
        if d.dp and (d.dp > 1 or attn_dp_asked):
            # dp 1 is no attention data parallelism: nothing written unless the line itself enabled it (a new user's
            # trial found --enable-dp-attention --dp-size 1 added to every line)
            # attention data parallelism: --attn-dp-size N where the declared release has it (0.5.22 on, the newest when
            # none is declared; SGLang's own deprecation message asks for it, and the old pair is slated for removal),
            # else --enable-dp-attention --dp-size N (0.5.22 and 0.5.23 still rewrite that pair to it, with a warning)
            attn = table("sglang").flag_at("attn_dp", version)
            if attn is not None:
                argv += [_flag("sglang", "attn_dp", version, comments), str(d.dp)]
                if version is None and attn.since is not None:
                    comments.append(f"{attn.name}: the spelling of sglang {attn.since.version} on (older releases take "
                                    f"{_flag('sglang', 'dp_attention', version, [])} {_flag('sglang', 'dp', version, [])} "
                                    f"{d.dp}); declare --engine-version to have it written for yours")
            else:
                argv += [_flag("sglang", "dp_attention", version, comments), _flag("sglang", "dp", version, comments), str(d.dp)]
        argv += _runner_words("sglang", theirs, version, comments, plan.runner, predicted, plan.runner_option_auto.get("sglang"))
        argv += draft_words
        argv += _online_words(plan, "sglang", version, comments)
        argv += _eplb_words("sglang", d, launch, version, comments)
        argv += _lora_words("sglang", d, launch, version, comments)
        fusion_words, fusion_env = _fusion_words(plan, "sglang", version, comments)
        argv += fusion_words
        if asked := _asked_of_runner(plan, d, comments):
            argv += _precision_flag("sglang", asked, version, comments, runner=plan.runner, quant=plan.quant)
        if plan.a2a != "none":
            if a2a_row is None or a2a_row.sglang is None:
                raise EmitError(f"SGLang has no --moe-a2a-backend for {plan.a2a}" + (f" ({plan.a2a_mode})" if plan.a2a_mode else ""))
            words, a2a_env = _a2a_words("sglang", _released("sglang", "a2a", a2a_row.sglang, version, comments), version, comments)
            argv += words
            if plan.a2a_mode and plan.a2a_mode != "auto" and a2a_row.sglang_mode:
                argv += [_flag("sglang", "a2a_mode", version, comments), plan.a2a_mode]
            words, dispatch_env = _dispatch_words(plan, "sglang", version, comments)
            dispatch_env = {**a2a_env, **dispatch_env}
            argv += words
        if graph_off:
            argv.append(_flag("sglang", "cuda_graph_off", version, comments))
        if d.phase in ("prefill", "decode"):
            argv += [_flag("sglang", "disagg_mode", version, comments), d.phase]
        if not prov.get("max_tokens_per_rank", "default").startswith("default"):
            if d.phase == "decode":
                argv += [_flag("sglang", "cuda_graph_max_bs", version, comments), str(d.max_tokens_per_rank)]
            else:
                chunk = d.max_tokens_per_rank * (d.dp if d.dp and plan.a2a != "none" else 1)
                argv += [_flag("sglang", "chunked_prefill", version, comments), str(chunk)]
    elif engine == "vllm":
        auto_only = plan.runner_option_auto.get("vllm")
        if asked := _asked_of_runner(plan, d, comments):
            try:
                _precision_flag("vllm", asked, version, comments, runner=plan.runner, quant=plan.quant)
            except EmitError:
                # vLLM's MXFP4 precision variables (read only where vLLM picks the backend itself): written, with no
                # --moe-backend, where the release reads them and vLLM's own pick is the plan's runner (break51: a line
                # that set one planned and could not be emitted again)
                var = _precision_env("vllm", asked, version, plan.runner, predicted)
                if var is None:
                    raise
                precision_env[var] = "1"
                auto_only = (f"{var}=1 asks activation precision {asked}, and vLLM reads it only where it picks the MoE "
                             f"backend itself ({plan.runner} by the engine prediction)")
        dp = d.dp or 1
        if dp > 1 and d.ep == d.tp * dp:
            # the deployment's tp is vLLM's tensor-parallel size beside dp (ep = tp x dp): the other reading the facts
            # accept (backends/common.yaml, ep one_of [tp, tp_dp]; a new user's trial found explain and --emit disagree)
            vllm_tp = d.tp
            comments.append(f"tp {d.tp} read as vLLM's tensor-parallel size beside data-parallel size {dp}: the MoE group "
                            f"and EP are tp x dp = {d.ep}")
        else:
            if d.tp % dp:
                raise EmitError(f"vLLM's MoE group is tp x dp: dp {dp} does not divide the plan's tp {d.tp} (and ep {d.ep} is "
                                f"not tp x dp = {d.tp * dp}, the other reading)")
            if d.ep not in (1, d.tp):
                raise EmitError(f"vLLM's --enable-expert-parallel is a switch (EP = tp x dp x pcp = {d.tp}): it cannot give ep {d.ep}; "
                                f"plan with ep 1 or ep {d.tp}" + (f", or ep {d.tp * dp} with tp as vLLM's tensor-parallel size"
                                                                  if dp > 1 else
                                                                  f", or state dp {d.ep // d.tp} (ep {d.ep} = tp {d.tp} x dp "
                                                                  f"{d.ep // d.tp}: vLLM's -tp {d.tp} -dp {d.ep // d.tp} "
                                                                  "--enable-expert-parallel)"
                                                                  if d.ep > d.tp and d.ep % d.tp == 0 else ""))
            vllm_tp = d.tp // dp
        line_tp = launch.values.get("tp") if launch is not None and launch.engine == "vllm" else None
        if line_tp is not None and line_tp.value is not None and int(line_tp.value) != vllm_tp:
            # a dp given beside the line (--dp) regroups the same MoE group: say so rather than rewrite it silently
            # (a new user's trial, break51: -tp 4 -dp 2 with --dp 4 was emitted as -tp 2 -dp 4 without a word)
            comments.append(f"the line's {line_tp.written} written as {vllm_tp}: the MoE group (tp x dp = {vllm_tp * dp}) is "
                            f"kept with data-parallel size {dp}, so each replica's tensor-parallel size changes")
        argv = ["vllm", "serve", mdl, _flag("vllm", "tp", version, comments), str(vllm_tp)]
        if dp > 1:
            argv += [_flag("vllm", "dp", version, comments), str(dp)]
        if d.ep > 1:
            argv.append(_flag("vllm", "ep_switch", version, comments))
        argv += _runner_words("vllm", theirs, version, comments, plan.runner, predicted, auto_only)
        argv += _online_words(plan, "vllm", version, comments)
        argv += _eplb_words("vllm", d, launch, version, comments)
        argv += _lora_words("vllm", d, launch, version, comments)
        fusion_words, fusion_env = _fusion_words(plan, "vllm", version, comments)
        argv += fusion_words
        if d.ep > 1:
            if a2a_row is None or a2a_row.vllm is None:
                raise EmitError(f"vLLM has no --all2all-backend for {plan.a2a}" + (f" ({plan.a2a_mode})" if plan.a2a_mode else "")
                                + ": plan it with an a2a that the names table (backends/engines/names.yaml) gives vLLM a name for")
            words, a2a_env = _a2a_words("vllm", _release_name(a2a_row.vllm, a2a_row.vllm_before, version, comments,
                                                              "vLLM's --all2all-backend"), version, comments)
            argv += words
            words, dispatch_env = _dispatch_words(plan, "vllm", version, comments)
            dispatch_env = {**a2a_env, **dispatch_env}
            argv += words
        elif plan.a2a != "none":
            raise EmitError(f"vLLM runs an all-to-all ({plan.a2a}) only with expert parallelism: the plan has ep 1")
        if graph_off:
            argv.append(_flag("vllm", "cuda_graph_off", version, comments))
        if d.phase in ("prefill", "decode"):
            role = {"prefill": "kv_producer", "decode": "kv_consumer"}[d.phase]
            comments.append(f"a {d.phase} worker: its --kv-transfer-config (connector, kv_role {role}) is the deployment's to give: "
                            f"replace {KV_CONNECTOR_PLACEHOLDER}")
            argv += [_flag("vllm", "kv_transfer_config", version, comments), json.dumps({"kv_connector": KV_CONNECTOR_PLACEHOLDER, "kv_role": role})]
        if not prov.get("max_tokens_per_rank", "default").startswith("default"):
            if d.phase == "decode":
                argv += [_flag("vllm", "cuda_graph_max_bs", version, comments), str(d.max_tokens_per_rank)]
            else:
                argv += [_flag("vllm", "max_batched_tokens", version, comments), str(d.max_tokens_per_rank)]
    else:
        if asked := _asked_of_runner(plan, d, comments):
            _precision_flag("trtllm", asked, version, comments, runner=plan.runner, quant=plan.quant)
        if plan.a2a != "none":
            raise EmitError(f"TensorRT-LLM picks its all-to-all itself: a plan with a2a {plan.a2a} cannot be written as its launch")
        fusion_words, fusion_env = _fusion_words(plan, "trtllm", version, comments)
        if d.lora:
            raise EmitError("the deployment serves LoRA adapters (lora), and moe-select does not write TensorRT-LLM's "
                            "LoRA settings (lora_config): plan without it, or write it yourself")
        if d.eplb:
            raise EmitError("the deployment asks expert-parallel load balancing (eplb), and moe-select does not write "
                            "TensorRT-LLM's load balancer (moe_config.load_balancer): plan without it, or write it yourself")
        argv = ["trtllm-serve", mdl, _flag("trtllm", "extra_options", version, comments), TRTLLM_YAML]
        yaml_doc = {"tensor_parallel_size": d.tp, "moe_expert_parallel_size": d.ep, "moe_tensor_parallel_size": d.tp // d.ep,
                    "moe_config": {"backend": theirs}}
        if d.dp:
            yaml_doc["enable_attention_dp"] = True
        if graph_off:
            yaml_doc["cuda_graph_config"] = None
        elif not prov.get("max_tokens_per_rank", "default").startswith("default") and d.phase == "decode":
            yaml_doc["cuda_graph_config"] = {"max_batch_size": d.max_tokens_per_rank}
        if not prov.get("max_tokens_per_rank", "default").startswith("default") and d.phase != "decode":
            yaml_doc["max_num_tokens"] = d.max_tokens_per_rank
        if d.phase in ("prefill", "decode"):
            argv += ["--server_role", {"prefill": "CONTEXT", "decode": "GENERATION"}[d.phase]]
    if launch is not None:
        q = launch.values.get("quant")
        qflag = q.written.split()[0] if q is not None and q.written else ""
        if (q is not None and qflag.startswith("-") and qflag not in argv and not d.quant_params.get("online")
                and not any(f.kind == "engine_error" and f.token == q.written for f in launch.findings)):
            # the checkpoint's quantization method as the line names it (AWQ: awq, awq_marlin or moe_wna16 pick different
            # MoE methods): kept, as the user's other flags are (a new user's trial found it dropped)
            argv += [qflag, str(q.value)]
            comments.append(f"{qflag} {q.value} kept as the line gave it (the plan reads the format, {plan.quant}, from the "
                            f"checkpoint)")
        for words in launch.kept:
            argv += words
        for tok, flag, means in launch.misspelt():
            comments.append(f"{tok} kept as the line gave it: not in the {engine} table, close to {flag} ({means}), which "
                            "the plan did not read from it; if misspelt, the engine refuses the line")
        argv += _passed_through(launch, argv)
        if launch.config and engine == "trtllm" and yaml_doc is not None:
            # the line's moe_config keys kept, but not one TensorRT-LLM's model of it forbids (the reader's engine
            # error names it: written, the launch would fail at startup)
            allowed = next((e.keys for e in table("trtllm").config_keys if "moe_config" in e.names), None)
            theirs_mc = dict(launch.config.get("moe_config") or {})
            dropped = [k for k in theirs_mc if allowed is not None and str(k) not in allowed]
            yaml_doc = {**{k: v for k, v in launch.config.items()}, **yaml_doc,
                        "moe_config": {**{k: v for k, v in theirs_mc.items() if k not in dropped}, **yaml_doc["moe_config"]}}
        # the line's own assignments, and the values docker run -e passes into the container (-e NAME=value, or -e NAME
        # with the value the line or the host gave: a new user's trial found an exported, passed value dropped); the
        # image's own variables are the image's
        env = {k: v for k, v in launch.env.items()
               if launch.env_from.get(k) == "launch line" or str(launch.env_from.get(k, "")).startswith("docker run -e")}
        if launch.container is not None:
            comments.append("the line's docker run wrapper (image, --gpus, mounts, ports) is not written: run this command "
                            "in that container, or put it back in front")
    else:
        env = {}
    env.update(dispatch_env)
    env.update(fusion_env)
    env.update(precision_env)
    for k, v in _vendor_switch(plan, engine, comments).items():
        env.setdefault(k, v)
    argv = _draft_own_runner(engine, plan, argv, version, comments)
    if launch is not None:  # what the line asked and the engine refuses is not written: never dropped silently
        written = " ".join(argv + [f"{k}={v}" for k, v in env.items()])
        for f in launch.findings:
            if f.kind == "engine_error" and f.token not in written:
                repl = _replacement_words(engine, f.token, version, argv)
                if repl:
                    # a removed flag whose table entry names its replacement, live at this release and of the same
                    # meaning: written as that, with the line's value (break51: the decode-graph cap was dropped to a
                    # comment while the message named --cuda-graph-max-bs-decode)
                    argv += repl
                    comments.append(f"{f.token} from the launch line written as {' '.join(repl)} ({f.message})")
                    continue
                comments.append(f"not written: {f.token} from the launch line ({f.message})")
    return Emitted(engine=engine, argv=argv, env=env, yaml=yaml_doc, comments=comments, head={"sglang": 3, "vllm": 3, "trtllm": 2}[engine])
