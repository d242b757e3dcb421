"""Read an engine's launch line as the engine reads it, and turn it into a deployment (issue 22).

``from_command(argv, env)`` takes a launch line (a string as documentation writes it, or an argv list) and
returns a :class:`Launch`: the engine, its flags as understood (each with what it means for the MoE choice
and the source of that meaning, from the tables in ``backends/engines/``), the flags that do not concern the
MoE choice, the unknown ones (with a did-you-mean: tables lag releases, so never fatal), the deprecated,
removed and silently ignored ones (with the release and the new spelling), flags newer than the declared
engine version, what the engine itself would refuse at startup, and the deployment dict
(:attr:`Launch.deployment`, each value with provenance ``launch line: --flag value``) that
:func:`moe_select.explain` plans. Torch-free.

**Text.** ``\\`` + newline continuations are joined; ``#`` comments, blank lines and ``export VAR=value``
lines (also ``VAR=value`` lines) are read as the shell would; exactly one command remains. Tokens are split
with :func:`shlex.split` (POSIX rules). Leading ``VAR=value`` words set the command's environment; ``env``,
``nohup``, ``exec`` are stripped; ``torchrun [opts] -m MODULE`` is read as ``python -m MODULE`` (torchrun's
options dropped, a note says so); ``docker run [opts] IMAGE CMD...`` is read as ``CMD...`` (``-e/--env
VAR=value`` kept as environment; the image's default command cannot be read and is refused); a trailing
``| ...``, ``&`` and redirections are dropped. Anything else before the engine is refused naming the token.

**Environment** (:func:`merge_env`): the line's own assignments win, then an ``--env FILE`` (``VAR=value``
lines), then the shell, which is read only when asked (``shell=True``: the CLI does for ``arch: auto``).

**Parsing.** SGLang: argparse (exact names, ``--flag=value``, a unique prefix of a long option is taken as
it: argparse's ``allow_abbrev``); vLLM: FlexibleArgumentParser (``_`` = ``-`` in names, dotted
``--json-arg.key value`` merged into the JSON argument, ``--config FILE.yaml`` keys inserted before the
command line's flags, ``-O3`` the optimization level); TensorRT-LLM: click (exact names, no abbreviation)
plus the ``--extra_llm_api_options``/``--config`` YAML, whose keys overwrite the options.

**Parallelism** (the MoE layer's group is the deployment's ``tp``, its EP size ``ep``, ``moe_tp = tp/ep``):
SGLang ``--tp-size``/``--ep-size`` (every all-to-all backend but ``none`` makes the engine set ep = tp: a
finding says so when the line asked otherwise), ``--moe-dp-size`` > 1 cannot be expressed (refused);
vLLM ``-ep`` is a switch: the MoE group is tp x dp x pcp ranks and EP is all of it
(vllm-project/vllm#26732's example: ``--data-parallel-size 2 --enable-expert-parallel``); TensorRT-LLM
``moe_tensor_parallel_size`` x ``moe_expert_parallel_size`` = ``tensor_parallel_size`` (else refused).

Errors: :class:`~moe_select.errors.InputError` (exit 2), naming the token, for an unbalanced quote, an
unknown launcher, a flag without its value, a value of the wrong type, a config file that is missing or
not a mapping, a launch moe-select's deployment cannot express, and a model neither local nor cached.
"""
from __future__ import annotations

import difflib
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .engine_tables import ENGINES, Change, EngineTable, EnvEntry, FlagEntry, names, table
from .errors import InputError, Issue

#: Where a launch line read from a string or the command line is said to come from in messages.
LINE = "<launch line>"
#: Environment variable prefixes that belong to an engine: one not in its table is reported unknown.
ENGINE_ENV_PREFIXES = {"sglang": ("SGLANG_", "SGL_"), "vllm": ("VLLM_",), "trtllm": ("TRTLLM_", "TLLM_")}
#: The images whose entrypoint is vLLM's OpenAI server (``docker run IMAGE --model ...``: the words after the image
#: are the server's arguments), by the image name's last path component (no registry, organisation, tag or digest):
#: vllm/vllm-openai's Dockerfile stage ``vllm-openai`` (ENTRYPOINT vllm serve, python3 -m
#: vllm.entrypoints.openai.api_server before) and its ROCm build.
VLLM_IMAGES = frozenset({"vllm-openai", "vllm-openai-rocm"})

#: docker run options that take a value (the next word unless written --opt=value); others are switches.
DOCKER_VALUE_OPTS = {"-e", "--env", "--env-file", "-v", "--volume", "--mount", "--gpus", "--shm-size", "--ipc", "--network",
                     "--net", "-p", "--publish", "--name", "--entrypoint", "--runtime", "-w", "--workdir", "--ulimit",
                     "-u", "--user", "--device", "--cap-add", "--security-opt", "--label", "-l", "--memory", "-m",
                     "--cpus", "--pid", "--add-host", "--hostname", "-h", "--platform", "--pull", "--restart",
                     "--log-driver", "--log-opt", "--group-add", "--tmpfs", "--cpuset-cpus", "--stop-signal"}
#: torchrun options that take a value.
TORCHRUN_VALUE_OPTS = {"--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank", "--node_rank", "--master-addr",
                       "--master_addr", "--master-port", "--master_port", "--rdzv-backend", "--rdzv_backend",
                       "--rdzv-endpoint", "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--max-restarts", "--max_restarts",
                       "--log-dir", "--log_dir"}
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_NEGATIVE = re.compile(r"^-\d+(\.\d+)?$")
#: Where the engines print "unrecognized arguments" for a flag their parser does not have.
UNRECOGNIZED = {"sglang": "launch_server.py: error: unrecognized arguments", "vllm": "vllm: error: unrecognized arguments",
                "trtllm": "Error: No such option"}


@dataclass
class Finding:
    """One thing said about the line. ``kind``: ``understood`` (a flag that bears on the MoE choice),
    ``not_moe``, ``unknown`` (no table entry: reported, never fatal), ``deprecated``, ``removed``, ``ignored``
    (the engine reads it no more), ``newer`` (newer than the declared engine version), ``engine_error`` (the
    engine itself refuses this at startup), ``rewritten`` (the engine changes what was asked), ``note``."""

    kind: str
    token: str
    message: str
    source: str | None = None

    def render(self) -> str:
        return f"{self.kind}: {self.token}: {self.message}" + (f" [{self.source}]" if self.source else "")


@dataclass
class Read:
    """A flag (or key, or variable) as understood: the entry, the value, and how it was written."""

    entry: FlagEntry | EnvEntry
    value: Any
    written: str


@dataclass
class Launch:
    """A launch line as understood (see the module docstring)."""

    engine: str
    launcher: list[str]
    engine_version: str | None
    argv: list[str]
    env: dict[str, str]
    env_from: dict[str, str]
    model: str | None = None
    model_written: str | None = None
    values: dict[str, Read] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    #: Flags kept as written that moe-select does not set (not MoE, unknown): an emitted launch keeps them.
    kept: list[list[str]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    config_file: str | None = None
    #: The config file's line of each top-level key (errors and readings name ``file:line``).
    config_lines: dict[str, int] = field(default_factory=dict)
    #: Files the launch text writes with here-documents before its command (name -> content): a config flag naming
    #: one reads it from here, not from disk (plan --emit trtllm's script reads back).
    here_docs: dict[str, str] = field(default_factory=dict)
    deployment: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, str] = field(default_factory=dict)
    #: A ``docker run`` line's container: ``{"gpus": its --gpus value or None, "env": its -e variables}``; None else.
    container: dict[str, Any] | None = None
    #: vLLM's optimization level as written (``-O0``, ``--optimization-level 0``): level 0 turns CUDA graphs off where
    #: the compilation config does not set ``cudagraph_mode`` (read as the deployment's ``cuda_graph``).
    opt_level: tuple[str, str] | None = None
    #: CUDA graphs turned off by a flag kept as written (vLLM's -O0, a compilation config's cudagraph_mode NONE): an
    #: emitted launch keeps that flag and adds no switch of its own.
    graph_off_kept: bool = False
    #: Earlier occurrences of a flag given again (argparse keeps the last value, but checks each value against the
    #: option's choices as it reads it): each is checked as the last one is (:func:`_check_shadowed`).
    shadowed: list[Read] = field(default_factory=list)
    #: The checkpoint config read for ``deployment["model_config"]`` (:meth:`model_info`), with the path it was read at.
    _info: tuple[str, Any] | None = field(default=None, repr=False)

    def model_info(self) -> Any:
        """The checkpoint's config as this engine reads it (:func:`moe_select.model_config.read_model_config` of
        ``deployment["model_config"]``), read once per path; raises what that raises (:class:`InputError`)."""
        from .model_config import read_model_config

        path = str(self.deployment["model_config"])
        if self._info is None or self._info[0] != path:
            self._info = (path, read_model_config(path, engine=self.engine))
        return self._info[1]

    def detection_refusal(self, shell: Mapping[str, str]) -> str | None:
        """Why ``arch: auto`` cannot detect the GPUs this line's engine sees from here (None: it can): a container
        sees the GPUs of its ``--gpus`` and none of this shell's variables, so detection from the shell is right only
        for ``--gpus all`` while the shell (``shell``) hides no GPU; otherwise the container's view is not this
        machine's as detected, and the plan needs its GPU given (gpu/arch)."""
        if self.container is None:
            return None
        gpus = self.container.get("gpus")
        if gpus is None:
            return "a docker run line without --gpus: its container sees no GPU unless a runtime gives it some"
        if gpus != "all":
            return (f"a docker run line with --gpus {gpus}: its container numbers the GPUs it gets from 0, which "
                    "detection here cannot map")
        if "CUDA_VISIBLE_DEVICES" in shell and "CUDA_VISIBLE_DEVICES" not in self.container.get("env", {}):
            return (f"this shell's CUDA_VISIBLE_DEVICES={shell['CUDA_VISIBLE_DEVICES']} does not reach the container "
                    "(docker run --gpus all): it sees every GPU")
        return None

    def found(self, kind: str) -> list[Finding]:
        """The findings of one kind."""
        return [f for f in self.findings if f.kind == kind]

    def marked(self, file: str = LINE) -> Any:
        """The deployment as a :class:`~moe_select.yamlio.MarkedDict` whose keys carry their provenance."""
        from .yamlio import MarkedDict

        data = MarkedDict(self.deployment)
        data.file = file
        for k in self.deployment:
            data.key_sources[k] = self.provenance.get(k, "launch line")
        return data

    def explain(self, **kwargs: Any) -> Any:
        """:func:`moe_select.explain` of :attr:`deployment` (with the given overrides of deployment keys under
        ``deployment=`` and keyword arguments of explain)."""
        from .deployment import Deployment
        from .selector import explain
        from .yamlio import validate

        extra = kwargs.pop("deployment", {}) or {}
        data = self.marked()
        for k, v in extra.items():
            data[k] = v
            data.key_sources[k] = "python (deployment=)"
        kwargs.setdefault("engine_env", dict(self.env))
        dep = validate(Deployment, data, LINE)
        self.check_detection(dep, os.environ)
        return explain(dep, **kwargs)

    def check_detection(self, deployment: Any, shell: Mapping[str, str]) -> None:
        """Raise :class:`InputError` (field ``arch``) when ``deployment`` is planned for this machine (``arch: auto``,
        or neither gpu nor arch) and :meth:`detection_refusal` says detection cannot see this line's GPUs."""
        if not deployment.for_this_machine:
            return
        why = self.detection_refusal(shell)
        if why:
            raise InputError(Issue(LINE, 0, "arch", f"{why}; give the GPU the engine runs on (--gpu or --arch)"))

    def misspelt(self) -> list[tuple[str, str, str]]:
        """``(token, flag, meaning)`` for each flag of the line the engine's table lacks whose closest table flag decides
        the plan (not ``not_moe``): a likely misspelling (a fleet trial, break55: ``--tensor-paralel-size 4`` was kept
        as written and the deployment planned at tp 1). The table lists the flags that matter, not every flag of the
        engine, so this is no proof the engine refuses it: ``--strict`` refuses such a line, else a warning."""
        t = table(self.engine)
        out: list[tuple[str, str, str]] = []
        for f in self.findings:
            m = re.search(r"did you mean (\S+?)(?: or |\?)", f.message) if f.kind == "unknown" else None
            entry = next((e for e in t.flags if m and m.group(1) in e.names), None)
            # a typo: at most two edits away (a review found real engine flags near table ones, an all-to-all's config
            # file and LoRA options, which difflib's did-you-mean names but no typo makes)
            if m and entry is not None and entry.means not in ("not_moe",) and _edits(f.token, m.group(1)) <= 2:
                out.append((f.token, m.group(1), entry.means))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the ``launch`` key of ``explain --json``)."""
        return {"engine": self.engine, "launcher": self.launcher, "engine_version": self.engine_version,
                "misspelt": [{"token": tok, "flag": flag, "means": means} for tok, flag, means in self.misspelt()],
                "table_checked_at": table(self.engine).checked_at, "model": self.model, "env": self.env_from,
                "understood": {k: {"value": r.value, "written": r.written, "source": _cite(self.engine, r.entry)}
                               for k, r in self.values.items()},
                "findings": [f.__dict__ for f in self.findings], "deployment": self.deployment, "provenance": self.provenance}

    def render_text(self) -> str:
        """The launch section of ``explain``."""
        t = table(self.engine)
        lines = [f"Launch line: {self.engine} ({' '.join(self.launcher)})" + (f", engine version {self.engine_version}" if self.engine_version
                 else ", engine version not declared (judged at the tables' newest: give --engine-version)"),
                 f"  tables checked at {t.checked_at}"]
        if self.model:
            lines.append(f"  model: {self.model_written} -> {self.model}")
        for k in sorted(self.deployment):
            lines.append(f"  {k:<22} {self.deployment[k]!s:<16} {self.provenance.get(k, '')}")
        order = ("engine_error", "removed", "ignored", "rewritten", "newer", "deprecated", "unknown", "understood", "note", "not_moe")
        for kind in order:
            group = self.found(kind)
            if not group:
                continue
            if kind == "not_moe":
                lines.append(f"  do not concern the MoE choice: {', '.join(f.token for f in group)}")
                continue
            lines.append(f"  {kind}:")
            lines += [f"    {f.token}: {f.message}" + (f" [{f.source}]" if f.source else "") for f in group]
        return "\n".join(lines)


def _cite(engine: str, entry: FlagEntry | EnvEntry) -> str:
    return table(engine).cite(entry)


# ------------------------------------------------------------------------------------------ text -> argv
def read_source(spec: str, *, stdin: Any = None) -> tuple[str, str]:
    """The text of a launch line given as ``@FILE`` (read it), ``-`` (read stdin) or the line itself; returns
    ``(text, where)``. Raises :class:`InputError` for a file that cannot be read."""
    if spec == "-":
        import sys

        return (stdin or sys.stdin).read(), "<stdin>"
    if spec.startswith("@"):
        from .yamlio import decode_text, read_input

        path = spec[1:]
        if not path:
            raise InputError("--from-command @: give a file after @", file=LINE, field="from_command")
        raw, _ = read_input(path, path, "launch-line file")
        return decode_text(raw, path), path
    return spec, LINE


def _unbalanced(line: str) -> str | None:
    """The quote that never closes in ``line`` (POSIX shell rules) and where, or None."""
    quote, start, i = None, 0, 0
    while i < len(line):
        c = line[i]
        if quote is None:
            if c == "\\":
                i += 2
                continue
            if c in "'\"":
                quote, start = c, i
        elif c == quote:
            quote = None
        elif quote == '"' and c == "\\":
            i += 2
            continue
        i += 1
    if quote is None:
        return None
    return f"unbalanced {quote} quote at column {start + 1}: {line[start:start + 40]!r}"


#: A here-document that writes a file (``cat > FILE <<'EOF'`` or ``cat <<EOF > FILE``), as plan --emit trtllm writes
#: its options file: group 1 or 4 the file, 3 the terminator (2 its quote).
_HEREDOC = re.compile(r"""^\s*cat\s+(?:>\s*(\S+)\s+)?<<-?\s*(['"]?)(\w+)\2(?:\s*>\s*(\S+))?\s*$""")


def _here_docs(text: str, docs: dict[str, str] | None, expands: set[str] | None = None) -> str:
    """``text`` with its file-writing here-documents blanked (lines kept, so later lines keep their numbers) and their
    content put in ``docs`` (file name -> text): a launch script that writes its config file before the command (plan
    --emit trtllm's) reads back (a fleet trial, break55: 'a second command moe_config:'); ``<<-`` strips the body's leading
    tabs, and the names of bodies under an unquoted terminator (the shell expands their variables) go to ``expands``.
    Without ``docs``: as given."""
    if docs is None:
        return text
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _HEREDOC.match(lines[i])
        name = (m.group(1) or m.group(4)) if m else None
        if m is None or name is None:
            out.append(lines[i])
            i += 1
            continue
        dash = "<<-" in lines[i]
        end = next((j for j in range(i + 1, len(lines))
                    if (lines[j].lstrip("\t") if dash else lines[j]).rstrip("\r") == m.group(3)), None)
        if end is None:
            out.append(lines[i])
            i += 1
            continue
        body = [ln.lstrip("\t") if dash else ln for ln in lines[i + 1:end]]
        # an unquoted terminator: the shell expands $VAR in the body (marked for split_text, which knows the variables)
        key = os.path.normpath(name.strip("'\""))
        docs[key] = "\n".join(body) + "\n"
        if not m.group(2) and expands is not None:
            expands.add(key)
        out += [""] * (end - i + 1)
        i = end + 1
    return "\n".join(out)


def split_text(text: str, where: str = LINE, docs: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The command's words and the environment the text sets (``export`` lines, ``VAR=value`` lines), as a
    shell reads a documentation snippet; ``docs`` (given): filled with the files the text writes by here-documents
    (:func:`_here_docs`). Raises :class:`InputError` for an unbalanced quote (naming it) and for more than one command
    (naming the second)."""
    expands: set[str] = set()
    text = _here_docs(text, docs, expands)
    joined = re.sub(r"\\[ \t]*\r?\n", " ", text)
    env: dict[str, str] = {}
    command: list[str] | None = None
    for n, raw in enumerate(joined.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        bad = _unbalanced(line)
        if bad:
            raise InputError(Issue(where, n, "", bad))
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:  # pragma: no cover - _unbalanced finds these first
            raise InputError(Issue(where, n, "", f"cannot split the line: {exc}")) from None
        if not words:
            continue
        if words[0] == "export" or all(_ASSIGN.match(w) for w in words):  # export and VAR=value lines set shell variables
            for w in words[1:] if words[0] == "export" else words:
                m = _ASSIGN.match(w)
                if m:  # a value may use a variable set before it (X=${DIR}/f.yaml), as the shell expands it
                    env[m.group(1)] = expand(m.group(2), env)
            continue
        if command is not None:
            raise InputError(Issue(where, n, "", f"a second command {words[0]!r}: give one launch line (the engine's)"))
        command = words
    if command is None:
        raise InputError(Issue(where, 0, "", "no command in the launch line"))
    for k in expands:
        if docs is not None and k in docs:
            docs[k] = expand(docs[k], env)
    return [expand(w, env) for w in command], env


def expand(word: str, env: Mapping[str, str]) -> str:
    """``$VAR`` and ``${VAR}`` of ``word`` replaced by what the launch text set (an unset one is left as written;
    quoting is not tracked: a single-quoted ``$`` is expanded too)."""
    return re.sub(r"\$(\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))",
                  lambda m: env.get(m.group(2) or m.group(3), m.group(0)), word)


def _strip_wrappers(words: list[str], env: dict[str, str], findings: list[Finding], where: str,
                    docker: dict[str, Any] | None = None, outer: Mapping[str, str] | None = None) -> list[str]:
    """``words`` without leading assignments, ``env``/``nohup``/``exec``, ``docker run ... IMAGE``,
    ``torchrun [opts]`` and trailing pipes, ``&`` and redirections (see the module docstring). ``docker``: filled
    for a ``docker run`` line: ``gpus`` (its ``--gpus`` value, None without one), ``env`` (its ``-e`` variables) and
    ``passed`` (the ``-e NAME`` ones, whose value is the host's: the line's assignments, else ``outer``, the shell's or
    ``--env`` file's environment given to :func:`from_command`)."""
    out = list(words)
    for i, w in enumerate(out):
        if w in ("|", "||", "&&", ";"):
            if w in ("&&", ";", "||"):
                raise InputError(Issue(where, 0, "", f"{w!r} joins a second command: give one launch line (the engine's)"))
            findings.append(Finding("note", " ".join(out[i:])[:60], "the pipe after the command is not read"))
            out = out[:i]
            break
    while out and (out[-1] == "&" or re.match(r"^\d?>>?(&\d)?$", out[-1]) or (len(out) > 1 and re.match(r"^\d?>>?$", out[-2]))):
        out.pop()
    while out:
        w = out[0]
        m = _ASSIGN.match(w)
        if m:
            env[m.group(1)] = expand(m.group(2), env)
            out.pop(0)
        elif w in ("env", "nohup", "exec"):
            out.pop(0)
        elif w == "docker" and len(out) > 1 and out[1] == "run":
            i = 2
            seen: dict[str, Any] = {"gpus": None, "env": {}, "passed": {}}
            line_host = dict(env)    # the shell's variables: the container gets only those -e/--env passes
            host = {**(outer or {}), **line_host}
            env.clear()
            while i < len(out) and out[i].startswith("-"):
                opt, eq, val = out[i].partition("=")
                if opt in DOCKER_VALUE_OPTS and not eq:
                    val = out[i + 1] if i + 1 < len(out) else ""
                    i += 1
                if opt in ("-e", "--env"):
                    m2 = _ASSIGN.match(val)
                    if m2:
                        env[m2.group(1)] = m2.group(2)
                        seen["env"][m2.group(1)] = m2.group(2)
                    elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", val) and val in host:   # -e VAR: the shell's value
                        env[val] = seen["env"][val] = host[val]
                        seen["passed"][val] = "the line's assignment" if val in line_host else "the host environment given"
                    elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", val):     # -e VAR with no host environment read
                        findings.append(Finding("note", f"{opt} {val}", f"docker passes the host's {val}, whose value "
                                                "moe-select was not given: read as not set (give --shell-env to read the "
                                                "shell's environment, --env FILE, or write -e {val}=VALUE)".replace("{val}", val)))
                elif opt == "--env-file":
                    findings.append(Finding("note", f"--env-file {val}", "docker's variables file is not read: give its "
                                            "variables with -e (or --env) to have them read"))
                elif opt == "--gpus":
                    seen["gpus"] = val.strip("'\"")
                i += 1
            dropped = sorted(set(line_host) - set(env))
            if dropped:
                findings.append(Finding("note", ", ".join(dropped), "set in the shell that runs docker: docker run passes a "
                                        "variable to the container only with -e/--env (or --env-file), so the engine does "
                                        "not see it: not read"))
            if docker is not None:
                seen["image"] = out[i] if i < len(out) else ""
                docker.update(seen)
            if i + 1 >= len(out):
                raise InputError(Issue(where, 0, "", f"docker run {out[i] if i < len(out) else ''}: the image's default command "
                                       "is not in the line; give the command after the image (e.g. python3 -m sglang.launch_server ...)"))
            findings.append(Finding("note", f"docker run ... {out[i]}", "the container's command is read; docker's options are not (its -e variables are)"))
            cmd = out[i + 1].rsplit("/", 1)[-1]
            is_command = cmd == "vllm" or bool(re.match(r"^(python(3(\.\d+)?)?|bash|sh|env)$", cmd))
            if (out[i + 1].startswith("-") or not is_command) and _image_repo_tag(out[i])[0] in VLLM_IMAGES:
                # (a ninth new user's trial: the model path right after the image, as vllm serve's positional
                # argument, was refused as an unknown launcher)
                # The vLLM images' entrypoint serves: the words after the image are its arguments.
                findings.append(Finding("note", f"docker run ... {out[i]} {out[i + 1]}",
                                        "the image's entrypoint is vLLM's server (vllm serve; python3 -m "
                                        "vllm.entrypoints.openai.api_server in older images): its arguments are read as "
                                        "vllm serve's [vllm-project/vllm@0000977eaf87:docker/Dockerfile (vllm-openai "
                                        "ENTRYPOINT)]"))
                out = ["vllm", "serve"] + out[i + 1:]
            else:
                out = out[i + 1:]
        elif w.rsplit("/", 1)[-1] in ("mpirun", "mpiexec", "srun", "trtllm-llmapi-launch"):
            # a multi-node launcher (a ninth new user's trial: `mpirun ... trtllm-serve` was refused): its options are
            # not read; the engine's command starts at the first word a launcher of the tables begins with
            base = w.rsplit("/", 1)[-1]
            starts = {la.argv[0].rsplit("/", 1)[-1] for e in ENGINES for la in table(e).launchers}
            j = next((k for k in range(1, len(out)) if out[k].rsplit("/", 1)[-1] in starts | {"trtllm-llmapi-launch"}
                      or re.match(r"^python(3(\.\d+)?)?$", out[k].rsplit("/", 1)[-1])), None)
            if j is None:
                raise InputError(Issue(where, 0, "", f"{base}: no engine command follows it (moe-select reads "
                                       f"{base} ... trtllm-serve / vllm serve / python -m ...)"))
            findings.append(Finding("note", " ".join(out[:j])[:60], f"{base}'s own options are not read: the engine's "
                                    "command after it is"))
            out = out[j:]
        elif w == "torchrun" or w.endswith("/torchrun"):
            i = 1
            while i < len(out) and out[i].startswith("-") and out[i] != "-m":
                opt, eq, _ = out[i].partition("=")
                if opt in TORCHRUN_VALUE_OPTS and not eq:
                    i += 1
                i += 1
            if i + 1 < len(out) and out[i] == "-m":
                findings.append(Finding("note", "torchrun", "torchrun's own options are not read: the engine starts its own ranks"))
                out = ["python", *out[i:]]
            else:
                raise InputError(Issue(where, 0, "", f"torchrun {out[i] if i < len(out) else ''}: moe-select reads a torchrun that runs "
                                       "an engine module (torchrun ... -m sglang.launch_server ...); give the engine's own launch line"))
        else:
            break
    return out


def _launcher(words: list[str], where: str) -> tuple[str, list[str], list[str], str]:
    """``(engine, launcher as written, the engine's arguments, how it takes the model)``. Raises
    :class:`InputError` naming the first word for an unknown launcher."""
    def norm(w: str) -> str:
        base = w.rsplit("/", 1)[-1]
        return "python" if re.match(r"^python(3(\.\d+)?)?$", base) else base

    best: tuple[int, str, Any] | None = None
    for engine in ENGINES:
        for la in table(engine).launchers:
            want = [norm(a) for a in la.argv]
            if [norm(w) for w in words[:len(want)]] == want and (best is None or len(want) > best[0]):
                best = (len(want), engine, la)
    if best is None:
        first = " ".join(words[:3])
        known = "; ".join(" ".join(la.argv) for e in ENGINES for la in table(e).launchers if not la.argv[0].startswith("python3"))
        raise InputError(Issue(where, 0, "launcher", f"unknown engine launcher {first!r}: moe-select reads {known}"))
    n, engine, la = best
    return engine, words[:n], words[n:], la.model


# ---------------------------------------------------------------------------------------- environment
def read_env_file(path: str) -> dict[str, str]:
    """``VAR=value`` lines of an ``--env`` file (``export`` allowed, ``#`` comments, shell quoting).
    Raises :class:`InputError` (file:line) for a line that is no assignment."""
    from .yamlio import decode_text, read_input

    raw, _ = read_input(path, path, "environment file")
    out: dict[str, str] = {}
    for n, line in enumerate(decode_text(raw, path).splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        bad = _unbalanced(line)
        if bad:
            raise InputError(Issue(path, n, "", bad))
        words = shlex.split(line, comments=True)
        if words and words[0] == "export":
            words = words[1:]
        for w in words:
            m = _ASSIGN.match(w)
            if not m:
                raise InputError(Issue(path, n, "", f"{w[:40]!r} is not VAR=value"))
            out[m.group(1)] = m.group(2)
    return out


def _image_repo_tag(image: str) -> tuple[str, str]:
    """``(repository, tag)`` of a docker image reference as written (``registry:port/org/repo:tag@digest``): the
    repository is the last path component, the tag '' when none is given."""
    repo, _, tag = image.split("@", 1)[0].rpartition("/")[2].partition(":")
    return repo, tag


#: The engines' own release images, by the image reference's last path component (and, for TensorRT-LLM's generic
#: ``release``, a path part that names the engine): their tags name the engine's release (``lmsysorg/sglang:v0.4.6``,
#: ``vllm/vllm-openai:v0.11.0``, ``nvcr.io/nvidia/tensorrt-llm/release:1.0.0rc4``), with a CUDA suffix at times.
RELEASE_IMAGES = {"sglang": ("sglang", None), "vllm": ("vllm-openai", None), "trtllm": ("release", "tensorrt-llm")}
_TAG_VERSION = re.compile(r"^v?(\d+\.\d+(?:\.\d+)*(?:(?:\.post|rc|a|b)\d+)*)(?:[-_+].*)?$")


def image_version(engine: str, image: str | None) -> str | None:
    """The engine release a ``docker run`` line's image tag names (``v0.4.6-cu124`` -> ``0.4.6``), for the engine's own
    release images (:data:`RELEASE_IMAGES`); None for another image, no tag, or a tag that names no version (``latest``,
    ``nightly``, a digest)."""
    if not image or engine not in RELEASE_IMAGES:
        return None
    repo, tag = _image_repo_tag(image)
    name, part = RELEASE_IMAGES[engine]
    if repo != name or (part is not None and part not in image.split("@", 1)[0].split("/")):
        return None
    m = _TAG_VERSION.match(tag)
    return m.group(1) if m and _ver(m.group(1)) is not None else None


def _image_env(engine: str, image: str | None, line_env: Mapping[str, str], findings: list[Finding]) -> dict[str, str]:
    """The variables ``engine``'s container ``image`` (a ``docker run`` line's, as written) sets in its environment (the
    engine table's ``images``), with a note for each; the line's ``-e`` values win (the caller merges them over)."""
    if not image:
        return {}
    repo, tag = _image_repo_tag(image)
    out: dict[str, str] = {}
    for row in table(engine).images:
        if row.repository == repo and (row.tag_contains is None or row.tag_contains in tag):
            for k, v in row.env.items():
                out[k] = v
                said = f"-e {k}={line_env[k]} wins" if k in line_env else "read"
                findings.append(Finding("note", f"{k}={v}", f"set by the image {image} ({said})", row.source))
    return out


def merge_env(line_env: Mapping[str, str], file_env: Mapping[str, str] | None = None, shell: Mapping[str, str] | None = None
              ) -> tuple[dict[str, str], dict[str, str]]:
    """The environment the engine sees, and where each value came from: the line's own assignments win, then
    the ``--env`` file, then ``shell`` (only when given: the shell is read for ``arch: auto`` or when asked)."""
    env: dict[str, str] = {}
    where: dict[str, str] = {}
    for values, src in ((shell or {}, "shell"), (file_env or {}, "--env file"), (line_env, "launch line")):
        for k, v in values.items():
            env[k], where[k] = v, src
    return env, where


# ------------------------------------------------------------------------------------------ versions
def _ver(text: str | None) -> Any:
    from packaging.version import InvalidVersion, Version

    if text is None:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _changes(entry: FlagEntry | EnvEntry, written: str, version: str | None, engine: str) -> tuple[list[Finding], bool]:
    """The findings of an entry's changes at ``version`` (None: the tables' newest), and whether the engine
    still honours it (False when removed or ignored there)."""
    from .engine_tables import release_date

    v = _ver(version)
    out: list[Finding] = []
    live = True
    released = release_date(engine, version) if v is not None else None

    def at_or_after(c: Change) -> bool | None:
        return c.made_at(version, engine)

    def by_date(c: Change) -> str:
        """How a date-only change was judged, for the finding (empty where its version decided)."""
        return "" if _ver(c.version) is not None or released is None or c.date is None else \
            f" ({engine} {version} was released {released}: judged by the dates, backends/engines/releases.yaml)"

    repl = entry.replacement
    if repl and v is not None:                  # a replacement the declared release lacks is no advice
        other = _replacement_since(engine, repl)
        if other is not None and at_or_after(other) is False:
            repl = None
    new = f"; write {repl}" if repl else ""
    if entry.since is not None and v is not None:
        if at_or_after(entry.since) is False:
            out.append(Finding("newer", written, f"added in {entry.since.text()}, newer than the declared {engine} {version}"
                               f"{by_date(entry.since)}: {engine} {version} does not have it", entry.since.by))
            live = False
    if entry.removed is not None:
        r = at_or_after(entry.removed)
        if r is not False:
            when = entry.removed.text() + by_date(entry.removed) + (
                "" if r else f" (no release recorded; judged removed at {engine} {version})" if v is not None else "")
            kind = "removed"
            out.append(Finding(kind, written, f"{entry.removed.verb('removed')} {when}{new}", entry.removed.by))
            live = False
    if live and entry.ignored is not None:
        r = at_or_after(entry.ignored)
        if r is not False:
            out.append(Finding("ignored", written, f"no longer read (ignored since {entry.ignored.text()}): setting it changes nothing"
                               + (f" ({entry.note})" if entry.note else "") + new, entry.ignored.by))
            live = False
    if live and entry.deprecated is not None and at_or_after(entry.deprecated) is not False:
        out.append(Finding("deprecated", written, f"{entry.deprecated.verb('deprecated')} {entry.deprecated.text()}"
                           f"{by_date(entry.deprecated)}{new}", entry.deprecated.by))
    return out, live


def _live_note(e: FlagEntry | EnvEntry, launch: Launch) -> str:
    """The understood finding's text of an entry read at the launch's release: its table note, except for a retired
    runner variable the engine still reads there (its note says what happens once it is ignored: a field round 41 line
    set such a variable at a release whose MoE oracle still chose by it, and was told it got the automatic choice)."""
    if e.means == "retired_runner" and e.ignored is not None:
        at = f"{launch.engine} {launch.engine_version}" if launch.engine_version else "the newest release checked"
        return (f"still read at {at} (ignored from {e.ignored.text()}): the engine's own MoE backend choice follows it; "
                f"moe-select plans without it: name the runner it selects (--runner; today "
                f"{e.replacement or 'the runner flag'})")
    return e.note or e.means


def _replacement_since(engine: str, replacement: str) -> Change | None:
    """When ``engine``'s table says ``replacement`` (a flag or variable the table names as the newer way, possibly
    ``--flag value``) was added, or None."""
    from .engine_tables import table

    name = replacement.split()[0].split("=")[0]
    t = table(engine)
    for e in [*t.flags, *t.env]:
        if name in getattr(e, "names", [getattr(e, "name", None)]):
            return e.since
    return None


# ------------------------------------------------------------------------------------------ parsing
def _all_names(t: EngineTable) -> list[str]:
    return [n for e in t.flags for n in e.names]


def _lookup(t: EngineTable, name: str, version: str | None = None) -> tuple[FlagEntry | None, bool, str | None]:
    """``(entry, negated, how)`` for a flag name as the engine's parser finds it at ``version`` (None: the newest): exact
    (vLLM: ``_`` as ``-``), ``--no-X`` of a bool_optional flag, ``--disable-X`` of a bool_optional ``--enable-X`` (and the
    reverse) from the table's ``inverse_enable_disable`` release, or (argparse) a unique prefix of a long option among
    those declared at ``version`` (``how`` says so); ``(None, False, how)`` where such a prefix matches several of them
    (argparse's 'ambiguous option'), else ``(None, False, None)``."""
    key = name
    if t.parser == "vllm_argparse" and key.startswith("--"):
        key = key.replace("_", "-")
    for e in t.flags:
        if key in e.names:
            return e, False, None
    if key.startswith("--no-"):
        for e in t.flags:
            if e.takes == "bool_optional" and "--" + key[5:] in e.names:
                return e, True, None
    inverse = t.inverse_enable_disable
    if inverse is not None and inverse.made_at(version, t.engine) is not False:
        hit = _inverse_pair(t, key)
        if hit is not None:
            paired, prefix, other = hit
            return paired, True, (f"{other}{key[len(prefix):]} inverted: {t.engine}'s parser pairs --enable-X with --disable-X "
                                  f"from {inverse.text()}")
    if t.parser != "click" and key.startswith("--"):
        hits = {e.name: e for e in t.flags for n in e.names if n.startswith("--") and n.startswith(key)}
        # argparse matches the prefix against the options the release declares: a flag the table dates later (or
        # earlier, removed) is not among them at ``version``
        hits = {n: e for n, e in hits.items() if _declared_at(e, version, t.engine)} if len(hits) > 1 else hits
        if len(hits) == 1:
            e = next(iter(hits.values()))
            return e, False, (f"an abbreviation of {e.name} (argparse reads a unique prefix of a long option; a flag this table "
                              "lacks could make it ambiguous)")
        if len(hits) > 1:
            return None, False, f"ambiguous option: {name} could match {', '.join(sorted(hits))}"
    return None, False, None


def _declared_at(e: FlagEntry, version: str | None, engine: str) -> bool:
    """Whether the engine's parser declares flag ``e`` at ``version`` (None: the newest): added by then (``since``) and
    not yet removed (``removed``); a release the table cannot place is taken as declaring it."""
    since, removed = e.since, e.removed
    return (since is None or since.made_at(version, engine) is not False) and \
        (removed is None or removed.made_at(version, engine) is not True)


def _inverse_pair(t: EngineTable, key: str) -> tuple[FlagEntry, str, str] | None:
    """``(entry, prefix, other)`` where ``key`` is the ``--disable-X`` of a bool_optional ``--enable-X`` of ``t`` (or the
    reverse): the entry, ``key``'s prefix and the entry's; None otherwise."""
    for prefix, other in (("--disable-", "--enable-"), ("--enable-", "--disable-")):
        if key.startswith(prefix):
            pair = next((f for f in t.flags if f.takes == "bool_optional" and other + key[len(prefix):] in f.names), None)
            if pair is not None:
                return pair, prefix, other
    return None


def _inverse_before(t: EngineTable, name: str, version: str | None) -> tuple[str, str] | None:
    """``(why, source)`` where the declared release ``version`` refuses ``name``, the ``--disable-X`` of a bool_optional
    ``--enable-X`` (or the reverse) that the table's ``inverse_enable_disable`` release first pairs, ``version`` being
    older (its parser then has no such option: 'unrecognized arguments' at startup); None otherwise."""
    inverse = t.inverse_enable_disable
    if inverse is None or inverse.made_at(version, t.engine) is not False:
        return None
    key = name.replace("_", "-") if t.parser == "vllm_argparse" else name
    hit = _inverse_pair(t, key)
    if hit is None:
        return None
    pair, prefix, other = hit
    rest = key[len(prefix):]
    return (f"{t.engine} {version} has no {name} ({UNRECOGNIZED.get(t.engine, 'unrecognized arguments')}): its parser "
            f"pairs {other}{rest} with {prefix}{rest} from {inverse.text()}; write --no-{pair.name[2:]} (or leave out "
            f"{pair.name})", inverse.by)


def _parser_refusal(t: EngineTable, name: str, version: str | None) -> str:
    """What the engine's parser says to a flag its release lacks: argparse (SGLang) reads a prefix of longer flags the
    release has as an ambiguous abbreviation (``ambiguous option``, exit 2: SGLang 0.5.20's --cuda-graph-max-bs, a prefix
    of --cuda-graph-max-bs-decode), else 'unrecognized arguments'."""
    if t.parser == "argparse":
        longer = sorted({n for e in t.flags for n in e.names if n.startswith(name + "-")
                         and (e.since is None or e.since.made_at(version, t.engine) is not False)
                         and (e.removed is None or e.removed.made_at(version, t.engine) is False)})
        if len(longer) >= 2:   # a unique prefix is read as that flag (argparse's allow_abbrev)
            return f"error: ambiguous option: {name} could match {', '.join(longer)}"
    return UNRECOGNIZED[t.engine]


def _live_replacement(t: EngineTable, entry: FlagEntry, version: str | None) -> FlagEntry | None:
    """The table entry of ``entry``'s ``replacement`` where it has the same meaning and is the flag release ``version``
    takes for it (what plan --emit writes in place of a removed flag: launch_emit._replacement_words calls it too), else
    None."""
    if entry.removed is None or not entry.replacement or entry.takes in ("switch", "bool_optional"):
        return None
    live = t.flag_at(entry.means, version)
    return live if live is not None and entry.replacement in live.names else None


def _other_engines_flag(name: str, engine: str) -> str:
    """Where ``name`` is another engine's flag whose meaning ``engine`` has a flag for: `` (sglang's flag for tp; vllm
    writes --tensor-parallel-size or -tp)``; else ''. (A ninth new user's trial: ``--tp-size`` under vLLM was told
    "did you mean --block-size or --dtype?")."""
    for other in ENGINES:
        if other == engine:
            continue
        hit = next((e for e in table(other).flags if name in e.names and e.means not in ("not_moe", "moe_read")), None)
        if hit is None:
            continue
        mine = next((e for e in table(engine).flags if e.means == hit.means and not e.removed), None)
        if mine is not None:
            return f" ({other}'s flag for {hit.means}; {engine} writes {' or '.join(mine.names)})"
    return ""


def _edits(a: str, b: str) -> int:
    """The Levenshtein distance of ``a`` and ``b`` (insertions, deletions, substitutions)."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def _did_you_mean(name: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(options), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


#: Flag meanings that are parallel sizes: at least 1 (a 0 was read as the default 1 before: a new user's trial found
#: `-tp 0` planned and emitted as `--tensor-parallel-size 1`)
_SIZES = ("tp", "dp", "pp", "pcp", "ep", "attn_dp", "moe_dp")   # not vLLM's -dpl (0: a node with no local DP ranks)


def _size_refused(means: str, value: Any) -> str | None:
    """Why ``value`` of a flag or key of ``means`` is refused as a parallel size (:data:`_SIZES`: at least 1), or None."""
    if means in _SIZES and isinstance(value, int) and not isinstance(value, bool) and value < 1:
        return f"a parallel size is at least 1, got {value}"
    return None


def _convert(entry: FlagEntry, raw: str, written: str, where: str) -> Any:
    if entry.takes == "int":
        try:
            value = int(raw)
        except ValueError:
            raise InputError(Issue(where, 0, written, f"{written} takes an integer, got {raw[:40]!r}")) from None
        if (why := _size_refused(entry.means, value)) is not None:
            raise InputError(Issue(where, 0, written, f"{written}: {why} (the engine refuses it; leave the flag out for "
                                   "its default)"))
        return value
    if entry.takes == "json":
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            if entry.means == "compilation_config" and raw.strip().isdigit():
                return {"level": int(raw)}
            raise InputError(Issue(where, 0, written, f"{written} takes JSON, got {raw[:60]!r}")) from None
    return raw


def _config_file(path: str, flag: str, where: str, base: Path | None,
                 docs: Mapping[str, str] | None = None) -> tuple[dict[str, Any], str, dict[str, int]]:
    """A YAML config file of the launch (``--config``, ``--extra_llm_api_options``): (its mapping, its path, the line
    of each top-level key). Raises :class:`InputError` naming the flag for a missing file or one that is not a
    mapping."""
    from .yamlio import MarkedDict, load_file, load_text

    p = Path(path)
    if not p.is_absolute() and base is not None:
        p = base / p
    if docs is not None and os.path.normpath(path) in docs:   # written by the launch text's own here-document
        data = load_text(docs[os.path.normpath(path)], str(path), engine_yaml=True)
    elif not p.is_file():
        raise InputError(Issue(where, 0, flag, f"{flag} {path}: no such file (give the YAML file the launch reads)"))
    else:
        data = load_file(p, str(path), kind=f"{flag} file", engine_yaml=True)   # YAML 1.1, as the engine reads it
    if not isinstance(data, MarkedDict):
        raise InputError(Issue(str(path), getattr(data, "line", 0), flag, f"{flag} {path}: the file holds a "
                               f"{type(data).__name__ if data is not None else 'nothing'}, not a mapping of settings"))
    lines = {str(k): int(data.key_lines.get(k, data.line)) for k in data}
    for k, v in data.items():   # a mapping value's keys too ("moe_config.backend"), for provenance naming their line
        if isinstance(v, MarkedDict):
            lines.update({f"{k}.{s}": int(v.key_lines.get(s, v.line)) for s in v})
    return _plain(data), str(p), lines


def _sub_written(launch: "Launch", read: "Read", sub: str) -> str:
    """Where ``read``'s key ``sub`` was written: the config file's line of that key where the value came from the file
    (``extra.yaml:2: moe_config.backend``), else ``read``'s own provenance with ``.sub``."""
    m = re.match(r"^(.*):(\d+): (\S+)$", read.written)
    line = launch.config_lines.get(f"{m.group(3)}.{sub}") if m else None
    return f"{m.group(1)}:{line}: {m.group(3)}.{sub}" if m and line else f"{read.written}.{sub}"


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


def _config_to_args(t: EngineTable, cfg: Mapping[str, Any]) -> list[str]:
    """The command-line words of a ``--config`` YAML, as the engine inserts them (vLLM:
    FlexibleArgumentParser.load_config_file; SGLang reads the same keys, ``_`` or ``-``)."""
    out: list[str] = []
    for key, value in cfg.items():
        flag = "--" + key.replace("_", "-") if t.engine == "sglang" else "--" + key
        if isinstance(value, bool):
            if value:
                out.append(flag)
            elif t.engine == "vllm":
                out.append("--no-" + key)
        elif isinstance(value, list):
            if value:
                out += [flag, *(json.dumps(v) if isinstance(v, (dict, list)) else str(v) for v in value)]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        elif value is not None:
            out += [flag, str(value)]
    return out


def _parse_args(launch: Launch, args: list[str], model_style: str, where: str, base: Path | None) -> None:
    """Read ``args`` as the engine's parser does into ``launch.values`` / ``findings`` / ``kept``."""
    t = table(launch.engine)
    engine, version = launch.engine, launch.engine_version
    # Config files first: their keys come before the command line's flags (the line wins).
    for i, w in enumerate(args):
        name, eq, val = w.partition("=")
        entry, _, _ = _lookup(t, name) if name.startswith("-") else (None, False, None)
        if entry is not None and entry.means in ("config_file", "extra_options"):
            path = val if eq else (args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else None)
            if path is None:
                raise InputError(Issue(where, 0, name, f"{name} without its value (give the YAML file)"))
            cfg, full, lines = _config_file(path, name, where, base, launch.here_docs)
            launch.config, launch.config_file, launch.config_lines = cfg, full, lines
            launch.values[entry.means] = Read(entry, full, f"{name} {path}")
            drop = {i} if eq else {i, i + 1}
            rest = [a for j, a in enumerate(args) if j not in drop]
            if entry.means == "config_file":
                args = _config_to_args(t, cfg) + rest
                if engine == "vllm" and launch.argv[:0] == [] and model_style == "positional" and "model" in cfg:
                    launch.model, launch.model_written = str(cfg["model"]), f"{name} {path} (model)"
            else:
                args = rest
            break
    dotted: dict[str, dict[str, Any]] = {}
    i = 0
    positional_done = model_style != "positional"
    # vLLM's api_server module parses with make_arg_parser (vllm/entrypoints/openai/cli_args.py), which declares an
    # optional positional ``model_tag``: one positional word is taken (not read as the model, which --model gives) and
    # a second one is refused, as vllm-project/vllm#27389's error shows (only the path is "unrecognized").
    model_tag_free = engine == "vllm" and model_style != "positional"
    while i < len(args):
        w = args[i]
        if w == "--":
            i += 1
            continue
        if not w.startswith("-") or _NEGATIVE.match(w) or w == "-":
            if not positional_done:
                launch.model, launch.model_written = w, w
                positional_done = True
            elif model_tag_free:
                model_tag_free = False
                launch.findings.append(Finding("note", w, "taken as the api_server parser's optional positional model_tag "
                                               "(the model is --model's)"))
            else:
                launch.findings.append(Finding("engine_error", w, f"an extra positional argument: {UNRECOGNIZED[engine]}: {w}"))
            i += 1
            continue
        name, eq, inline = w.partition("=")
        # vLLM: -O3 / -O 3 is the optimization level; dotted JSON arguments merge into the JSON flag.
        if engine == "vllm" and ((re.match(r"^-O(=?\d|$)", name) and not name.startswith("--"))
                                 or name == "--optimization-level"):
            long = name == "--optimization-level"
            level = (inline if long else name[2:].lstrip("=") or inline) or (args[i + 1] if i + 1 < len(args) else "")
            step = 2 if (name == "-O" or long) and not eq else 1
            written = w if step == 1 else f"{w} {level}"
            launch.opt_level = (level, written)
            launch.findings.append(Finding("not_moe", written, "the optimization level" + (
                " (0: no CUDA graphs where the compilation config sets no cudagraph_mode: read as cuda_graph false)"
                if level == "0" else "")))
            launch.kept.append(args[i:i + step])
            i += step
            continue
        if engine == "vllm" and "." in name:
            head, _, path = name.partition(".")
            entry, _, _ = _lookup(t, head)
            raw = inline if eq else (args[i + 1] if i + 1 < len(args) else None)
            if raw is None:
                raise InputError(Issue(where, 0, name, f"{name} without its value"))
            step = 1 if eq else 2
            if entry is None:
                launch.findings.append(Finding("unknown", name, f"not in the vLLM table{_did_you_mean(head.replace('_', '-'), _all_names(t))}; "
                                               "kept as written"))
                launch.kept.append(args[i:i + step])
                i += step
                continue
            append = path.endswith("+")
            keys = path.rstrip("+").split(".")
            try:
                value: Any = json.loads(raw)
            except json.JSONDecodeError:
                value = raw.split(",") if append else raw
            node = dotted.setdefault(entry.name, {})
            for k in keys[:-1]:
                node = node.setdefault(k, {})
            node[keys[-1]] = (node.get(keys[-1], []) + (value if isinstance(value, list) else [value])) if append else value
            launch.values[entry.means] = Read(entry, dotted[entry.name], f"{entry.name}.{'.'.join(keys)}")
            i += step
            continue
        if t.parser != "click" and not name.startswith("--") and len(name) > 2 and not eq and _lookup(t, name)[0] is None:
            short = _lookup(t, name[:2])[0]
            if short is not None and short.takes not in ("switch", "bool_optional", "list"):
                # argparse: a single-dash option's value may follow it in the same word (-qfp8 is -q fp8)
                name, eq, inline = name[:2], "=", name[2:]
        entry, negated, how = _lookup(t, name, version)
        if entry is None:
            dashed = name.replace("_", "-")
            paired = _inverse_before(t, name, version)
            if how is not None:   # without an entry, _lookup says only why a prefix matched none: ambiguity
                # argparse exits: "error: ambiguous option: --quant could match --quantization, --quantization-config"
                launch.findings.append(Finding("engine_error", name, f"{how} ({engine}'s argparse exits at startup; write "
                                               "the whole name)"))
            elif engine == "sglang" and dashed != name and _lookup(t, dashed)[0] is not None:
                launch.findings.append(Finding("engine_error", name, f"SGLang reads exact names ({UNRECOGNIZED[engine]}: {name}); "
                                               f"write {dashed}", "sgl-project/sglang#12818"))
            elif paired is not None:
                # the table knows the flag's pair and the release that first reads this spelling: the parser of the
                # declared release refuses it (a new user's eleventh trial: --disable-expert-parallel at vLLM 0.32.0)
                launch.findings.append(Finding("engine_error", name, *paired))
            else:
                launch.findings.append(Finding("unknown", name, f"not in the {engine} table (checked at {t.checked_at})"
                                               f"{_other_engines_flag(name, engine) or _did_you_mean(name, _all_names(t))}; "
                                               "kept as written, not read"))
            step = 1 if eq or i + 1 >= len(args) or args[i + 1].startswith("-") else 2
            launch.kept.append(args[i:i + step])
            i += step
            continue
        written = name
        if how:
            launch.findings.append(Finding("note", name, how))
        if entry.takes in ("switch", "bool_optional"):
            if eq:
                raise InputError(Issue(where, 0, name, f"{name} is a switch and takes no value (got ={inline[:40]})"))
            value = not negated
            step = 1
        elif entry.takes == "list":
            j = i + 1
            vals = [inline] if eq else []
            while not eq and j < len(args) and (not args[j].startswith("-") or _NEGATIVE.match(args[j])):
                vals.append(args[j])
                j += 1
            if not vals:
                raise InputError(Issue(where, 0, name, f"{name} without its value"))
            value = [int(v) if v.isdigit() else v for v in vals]
            step = 1 if eq else j - i
            written = f"{name} {' '.join(vals)}"
        else:
            if eq:
                raw = inline
                step = 1
            elif i + 1 < len(args) and (not args[i + 1].startswith("-") or _NEGATIVE.match(args[i + 1])
                                        or (entry.takes == "json" and args[i + 1].startswith("{"))):
                raw = args[i + 1]
                step = 2
            else:
                raise InputError(Issue(where, 0, name, f"{name} without its value"
                                       + (f" (the next word {args[i + 1]!r} is a flag)" if i + 1 < len(args) else "")))
            value = _convert(entry, raw, name, where)
            written = f"{name} {raw}" if len(raw) < 60 else f"{name} {raw[:57]}..."
        found, live = _changes(entry, written, version, engine)
        for f in found:
            if f.kind in ("removed", "newer"):  # a flag the declared release's parser does not have: it exits at startup
                f = Finding("engine_error", f.token, f.message + f" ({_parser_refusal(t, name, version)})", f.source)
            launch.findings.append(f)
        repl = None if live else _live_replacement(t, entry, version)
        if repl is not None and entry.means not in ("not_moe", "model") and entry.means not in launch.values:
            # a removed flag whose replacement of the same meaning the release has: plan --emit writes the line with the
            # replacement and this value, so the plan reads the value too (a fleet trial, break55: the emitted line's
            # --cuda-graph-max-bs-decode 128 read back as another decode budget than the line it came from)
            launch.values[entry.means] = Read(repl, value, written)
            launch.findings.append(Finding("note", written, f"its value planned as {repl.name}'s, as plan --emit writes "
                                           f"the line ({repl.name} {raw})",
                                           _cite(engine, repl)))
        if entry.means == "not_moe":
            launch.findings.append(Finding("not_moe", name, entry.note or "", None))
            launch.kept.append(args[i:i + step])
        elif entry.means == "model":
            launch.model, launch.model_written = str(value), written
        elif live:
            # one key per flag where several flags share a meaning (dispatch_precision: one per all-to-all)
            key = f"{entry.means}:{entry.name}" if entry.means == "dispatch_precision" else entry.means
            if key in launch.values and entry.means not in ("config_file", "extra_options"):
                launch.findings.append(Finding("note", written, f"given again: the last one wins (was {launch.values[key].written})"))
                launch.shadowed.append(launch.values[key])
            launch.values[key] = Read(entry, value, written)
            launch.findings.append(Finding("understood", written, (entry.note or entry.means), _cite(engine, entry)))
        i += step
    for flag, value in dotted.items():  # merged over a JSON flag given whole (vLLM: the dotted ones come last)
        entry = next(e for e in t.flags if e.name == flag)
        prev = launch.values.get(entry.means)
        merged = {**(prev.value if prev is not None and isinstance(prev.value, dict) else {}), **value}
        launch.values[entry.means] = Read(entry, merged, prev.written if prev is not None and prev.value is not value else flag)
        launch.findings.append(Finding("understood", flag, f"{entry.means} {json.dumps(value)}", _cite(engine, entry)))
    if model_style == "positional" and launch.model is None:
        raise InputError(Issue(where, 0, "model", f"{' '.join(launch.launcher)} takes the model as its first argument; none given"))


def _read_trtllm_yaml(launch: Launch) -> None:
    """The ``--extra_llm_api_options`` keys as TensorRT-LLM reads them: they overwrite the options."""
    t = table("trtllm")
    keys = {n: e for e in t.config_keys for n in e.names}
    name = Path(launch.config_file or "config").name
    for key, value in launch.config.items():
        e = keys.get(key)
        line = launch.config_lines.get(key, 0)
        written = f"{key}: {json.dumps(value)}"[:80]
        if e is None:
            launch.findings.append(Finding("unknown", key, f"not a key of the TensorRT-LLM table{_did_you_mean(key, keys)} "
                                           "(TensorRT-LLM's LLM API refuses keys it does not have)"))
            continue
        found, live = _changes(e, written, launch.engine_version, "trtllm")
        launch.findings += found
        if e.keys is not None and isinstance(value, dict):
            for sub in value:
                if str(sub) not in e.keys:
                    launch.findings.append(Finding(
                        "engine_error", f"{key}.{sub}",
                        f"{key} has no key {sub!r}{_did_you_mean(str(sub), e.keys)}: TensorRT-LLM builds {key} as a model "
                        "that forbids other keys and fails at startup ('Extra inputs are not permitted')", e.keys_source))
        if e.means == "not_moe":
            launch.findings.append(Finding("not_moe", key, ""))
            continue
        if e.takes == "int" and not (isinstance(value, int) and not isinstance(value, bool)) and value is not None:
            raise InputError(Issue(launch.config_file or LINE, line, key, f"{key} takes an integer, got {value!r}"))
        if e.takes == "int" and (why := _size_refused(e.means, value)) is not None:
            raise InputError(Issue(launch.config_file or LINE, line, key, f"{key}: {why} (leave the key out for its default)"))
        if e.takes == "bool" and not isinstance(value, bool):
            raise InputError(Issue(launch.config_file or LINE, line, key, f"{key} takes true or false, got {value!r}"))
        if live:
            if e.means in launch.values:
                launch.findings.append(Finding("note", written, f"overwrites {launch.values[e.means].written} (the YAML wins over the options)"))
            launch.values[e.means] = Read(e, value, f"{name}:{line}: {key}" if line else f"{name}: {key}")
            launch.findings.append(Finding("understood", written, e.note or e.means, _cite("trtllm", e)))


#: Meanings an engine variable can carry in place of a flag (vLLM's ``VLLM_ALL2ALL_BACKEND`` before it was removed):
#: read into the deployment like the flag, which wins when both are given.
ENV_CHOICES = ("a2a", "runner")


def _read_env(launch: Launch, where: str) -> None:
    t = table(launch.engine)
    known = {e.name: e for e in t.env}
    for name, value in launch.env.items():
        e = known.get(name)
        written = f"{name}={value}"
        if e is None and launch.engine == "sglang" and name.startswith("SGL_") and "SGLANG_" + name[4:] in known:
            # SGLang's environ renames every SGL_ variable to its SGLANG_ name at import (_convert_SGL_to_SGLANG, from the
            # 0.5.4 wheel; read 2026-12-04), and earlier releases read some under the old name (a new user's trial: one
            # was reported as a typo of its SGLANG_ name): the old name is the same variable
            e = known["SGLANG_" + name[4:]]
            launch.findings.append(Finding("note", name, f"read as {e.name}: SGLang renames SGL_ variables to SGLANG_ ones "
                                           "at import (from 0.5.4), and earlier releases read some under the old name",
                                           "sgl-project/sglang@v0.5.4:python/sglang/srt/environ.py:_convert_SGL_to_SGLANG"))
        if e is not None:
            found, live = _changes(e, written, launch.engine_version, launch.engine)
            if e.removed_raises:   # the engine refuses to start with it set (its removed-variables table)
                found = [Finding("engine_error", f.token, f.message + f" ({launch.engine} raises at startup when it is set)", f.source)
                         if f.kind == "removed" else f for f in found]
            launch.findings += found
            if live:
                launch.values[f"env:{name}"] = Read(e, value, written)
                launch.findings.append(Finding("understood", written, _live_note(e, launch), _cite(launch.engine, e)))
                if e.means in ENV_CHOICES:  # a variable the engine still reads in place of a flag: it decides unless the flag is given
                    if e.means in launch.values:
                        launch.findings.append(Finding("note", written, f"{launch.values[e.means].written} is given too: the flag wins"))
                    else:
                        launch.values[e.means] = Read(e, value, written)
        elif name.startswith(ENGINE_ENV_PREFIXES[launch.engine]):
            launch.findings.append(Finding("unknown", name, f"a {launch.engine} variable not in its table{_did_you_mean(name, known)}; not read"))
        elif name == "CUDA_VISIBLE_DEVICES":
            from .environment import visible_entries

            seen = visible_entries(value)  # as CUDA reads it: up to the first entry it cannot read
            launch.findings.append(Finding("note", written, f"{len(seen)} GPU(s) visible"
                                           + (" (CUDA ignores the entries from the first one it cannot read)"
                                              if len(seen) < len([d for d in value.split(',') if d.strip()]) else "")
                                           + "; the parallel sizes are read from the flags; arch auto detects the "
                                           "GPUs this value leaves the engine"))


# ------------------------------------------------------------------------------------------ meaning
def _hf_cache_dirs(env: Mapping[str, str]) -> list[Path]:
    if env.get("HF_HUB_CACHE"):
        return [Path(env["HF_HUB_CACHE"]).expanduser()]
    if env.get("HF_HOME"):
        return [Path(env["HF_HOME"]).expanduser() / "hub"]
    base = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return [base / "huggingface" / "hub"]


def resolve_model(model: str, written: str, env: Mapping[str, str], base: Path | None, where: str) -> tuple[str, str]:
    """The model config folder of ``model``: a local folder (or its config.json) as it is, a Hugging Face name
    looked up in the local cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ``~/.cache/huggingface/hub``; the
    snapshot ``refs/main`` names, else the only one; offline). Returns ``(path, how)``. Raises
    :class:`InputError` naming the token and what to give when it is neither."""
    p = Path(model).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    if p.is_dir() or (p.is_file() and p.name == "config.json"):
        return str(p), "a local folder"
    looked: list[str] = []
    if re.match(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$", model) and not p.exists():
        for hub in _hf_cache_dirs(env):
            repo = hub / ("models--" + model.replace("/", "--"))
            looked.append(str(repo))
            snaps = repo / "snapshots"
            if not snaps.is_dir():
                continue
            ref = repo / "refs" / "main"
            rev = ref.read_text().strip() if ref.is_file() else None
            cands = [snaps / rev] if rev and (snaps / rev).is_dir() else sorted(d for d in snaps.iterdir() if d.is_dir())
            cands = [c for c in cands if (c / "config.json").is_file()]
            if len(cands) == 1:
                return str(cands[0]), f"the Hugging Face cache ({cands[0]})"
            if len(cands) > 1:
                raise InputError(Issue(where, 0, "model", f"{written}: {len(cands)} cached snapshots of {model} and no refs/main "
                                       f"({snaps}): give --model-config with the one the engine loads"))
    raise InputError(Issue(where, 0, "model", f"{written}: {model!r} is not a local folder"
                           + (f" and not in the Hugging Face cache (looked in {', '.join(looked)})" if looked else "")
                           + ": give --model-config PATH (a checkpoint folder or its config.json)"
                           + (f", or fetch its config first (huggingface-cli download {model} config.json)" if looked else "")))


def _runner_ours(engine: str, theirs: str) -> tuple[str, str | None]:
    """Our runner name for the engine's ``theirs`` and a note when it is not a names-table row."""
    if theirs.lower() == "auto":
        return "auto", None
    ours = names().runner_from(engine, theirs)
    if ours is not None:
        return ours, None
    low = re.sub(r"[^a-z0-9_]", "_", theirs.lower())
    if any(r.ours == low for r in names().runners):  # the same spelling names another kernel of ours
        return f"{engine}_{low}", (f"{engine}'s {theirs} is not our {low} (backends/engines/names.yaml): planned as "
                                   f"{engine}_{low}, a runner no capability file describes (judged, unverified)")
    scoped = [f for f in names().by_format if f.engine == engine and f.name == theirs]
    if scoped:   # a name of ours on some formats only (_format_runner reads the checkpoint's)
        on = "; ".join(f"{', '.join(f.formats)}: {f.ours or 'refused at startup'}" for f in scoped)
        return low, (f"{engine}'s {theirs} is our runner on some checkpoint formats only (backends/engines/names.yaml "
                     f"by_format: {on}); on another format planned as {low} (judged; a capability file may describe it)")
    return low, f"{theirs} has no row in backends/engines/names.yaml: planned as {low} (judged; a capability file may describe it)"


#: The meanings whose values :func:`_chosen` checks, and which of its choice lists each is.
_CHOICE_OF = {"runner": "runner", "draft_runner": "runner", "a2a": "a2a", "draft_a2a": "a2a", "quant": "quant"}


def _check_shadowed(launch: Launch, where: str) -> None:
    """Each earlier occurrence of a runner, all-to-all or quantization option given again, checked against the engine's
    values as the last one is (:func:`_chosen`: an :class:`InputError` for a closed list's stranger, an engine_error
    finding for a value of another release). SGLang's and vLLM's argparse check every occurrence's value against the
    option's ``choices`` as it consumes it (CPython Lib/argparse.py ``_get_values`` -> ``_check_value``), so an invalid
    earlier value stops the engine although a valid one follows."""
    if launch.engine not in ("sglang", "vllm"):    # trtllm-serve's options (click) convert the last value only
        return
    for r in launch.shadowed:
        of = _CHOICE_OF.get(r.entry.means)
        if launch.engine == "vllm" and of == "quant":
            # vLLM's --quantization is typed QuantizationMethods | str: argparse gets a metavar, not choices
            # (vllm-project/vllm@v0.34.0:vllm/engine/arg_utils.py:literal_to_kwargs), so only the last value is checked
            continue
        if of is not None and isinstance(r.value, str):
            _chosen(launch.engine, of, r.value, r.written, where, launch.engine_version, launch.findings)


def _chosen(engine: str, of: str, theirs: str, written: str, where: str, version: str | None,
            findings: list[Finding]) -> str:
    """``theirs`` (the value of ``engine``'s runner, all-to-all or quantization method option, ``of``, as ``written``)
    as the engine reads it (its :class:`~moe_select.engine_tables.Choices` row's normalization where that is vLLM's
    lower-casing). Raises :class:`InputError` (the option as written) when the row says the option's values are closed
    and this is none of them: the engine refuses it at startup; at a declared ``version`` newer than the row's
    ``read_up_to`` that is a note instead (that release's values were not read). A value of a later release than
    ``version`` (the declared one), or one it removed: an ``engine_error`` finding in ``findings`` (the line describes
    a deployment other releases run, so it is planned, and explain exits 1; README "Launch lines")."""
    c = names().choices_of(engine, of)
    if c is None:
        return theirs
    takes = names().accepted(engine, of)
    article, what, flag = {"runner": ("a", "runner", "--runner"), "a2a": ("an", "all-to-all", "--a2a"),
                           "quant": ("a", "quantization method", "--quant")}[of]
    if c.closed and c.norm(theirs) not in takes and c.beyond_read(version):
        # a release newer than the one whose values were read may take it: planned as written, judged
        findings.append(Finding("note", written, f"{theirs!r} is not {article} {what} value {engine} takes up to "
                                f"{c.read_up_to} (the newest release read; {c.since_source or c.source}): {engine} "
                                f"{version} may take it (planned as written, judged)"))
        return c.norm(theirs)
    if c.closed and c.norm(theirs) not in takes:
        # retired names are known (the engine names them in its refusal) but no longer taken: not offered
        live = [n for n in takes if of != "runner" or names().retired_name(engine, n) is None]
        retired = [n for n in takes if n not in live]
        # at a declared release, the values it takes (the others' names are no help there)
        live = [n for n in live if c.first_release(n, version) is None and c.removed_in(n, version) is None] or live
        close = next((m for m in (_did_you_mean(v, live) for v in (c.norm(theirs), theirs.lower(), theirs.upper())) if m), "")
        raise InputError(Issue(where, 0, written, f"{theirs!r} is not {article} {what} value {engine} takes: it refuses it "
                               f"at startup{close}; it takes {', '.join(live)}"
                               + (f" (no longer: {', '.join(retired)})" if retired else "") + f" [{c.source}]"
                               + (f" ({c.note})" if c.note else "") + f". If a plugin or a newer {engine} adds {theirs!r}, "
                               f"leave the option out of the line and " + ("give the format with --quant" if of == "quant"
                                                                           else f"name the {what} with {flag}")))
    first, gone = c.first_release(theirs, version), c.removed_in(theirs, version)
    said = (f"{theirs!r} first shipped in {engine} {first}: {engine} {version} (the declared version) refuses it at "
            "startup; declare the version that runs, or leave the option out") if first is not None else (
            f"{theirs!r} was removed in {engine} {gone}: {engine} {version} (the declared version) refuses it at startup; "
            "declare the version that runs, or name another value") if gone is not None else None
    if said is not None:
        findings.append(Finding("engine_error", written, said, c.since_source or c.source))
    return c.norm(theirs)


def _a2a_ours(engine: str, theirs: str, mode: str | None, version: str | None = None,
              written: str = "", findings: list[Finding] | None = None) -> tuple[str, str | None, str | None]:
    """``(our a2a, our mode or None, note)`` for the engine's name (and SGLang's --deepep-mode) at the declared ``version``
    (None: the newest). vLLM: a row's name counts from its ``vllm_since``, an older spelling (``vllm_before``) below its
    bound; a name that only rows of other releases give: that release's parser refuses it at startup, an
    ``engine_error`` in ``findings`` (vLLM's caller gives them; the line describes a deployment other releases run:
    planned as that row's, explain exits 1)."""
    v = _ver(version)
    for row in names().a2a:
        if engine == "sglang" and row.sglang == theirs and (row.mode is None or row.sglang_mode == (mode or "auto")):
            return row.ours, row.mode if row.mode not in (None,) else mode, None
        first = row.vllm_first
        if engine == "vllm" and ((row.vllm == theirs and (v is None or first is None or v >= _ver(first)))
                                 or theirs in row.vllm_read):
            return row.ours, row.mode, None
    if engine == "vllm":
        for row in names().a2a:
            if any(o.name == theirs and (v is None or v < _ver(o.below)) for o in row.vllm_before):
                return row.ours, row.mode, None
        other = [f"{r.vllm} from {r.vllm_first}" for r in names().a2a if r.vllm == theirs and r.vllm_first] + \
                [f"{o.name} before {o.below}" for r in names().a2a for o in r.vllm_before if o.name == theirs]
        if other:
            said = (f"{theirs!r}: vllm {version} (the declared version) takes no such --all2all-backend value "
                    f"({'; '.join(other)}): it refuses it at startup; declare the version that runs, or name its value")
            assert findings is not None, "vLLM's a2a names are read with the launch's findings"
            row = next(r for r in names().a2a if (r.vllm == theirs and r.vllm_first)
                       or any(o.name == theirs for o in r.vllm_before))
            findings.append(Finding("engine_error", written or theirs, said, row.source))
            return row.ours, row.mode, None
    low = re.sub(r"[^a-z0-9_]", "_", theirs.lower())
    return low, mode, f"{theirs} has no row in backends/engines/names.yaml: planned as {low} (judged)"


def _set(launch: Launch, key: str, value: Any, how: str) -> None:
    launch.deployment[key] = value
    launch.provenance[key] = f"launch line: {how}"


def _num(launch: Launch, means: str) -> int | None:
    r = launch.values.get(means)
    return None if r is None or r.value is None else int(r.value)


def _w(launch: Launch, *means: str) -> str:
    return " ".join(launch.values[m].written for m in means if m in launch.values)


def _retired_switch(launch: Launch, switch: str, means: str) -> None:
    """A live retired switch (meaning ``switch``) whose table replacement is ``FLAG VALUE``: the launch's ``means`` is
    that value, over a flag given beside it (SGLang's ServerArgs.__post_init__ sets it after parsing), which is then
    reported rewritten."""
    v = launch.values
    old = v.get(switch)
    words = (old.entry.replacement or "").split() if old is not None else []
    if old is None or not old.value or len(words) < 2:
        return
    value = words[-1]
    if means in v and str(v[means].value) != value:
        launch.findings.append(Finding("rewritten", v[means].written, f"{old.written} sets it to {value} at startup "
                                       "(ServerArgs.__post_init__): the value written is not what runs", old.entry.source))
    v[means] = Read(old.entry, value, old.written)


def _map(launch: Launch, where: str) -> None:
    """The deployment the launch asks for (engine semantics in the module docstring)."""
    e, v = launch.engine, launch.values
    _set(launch, "engine", e, " ".join(launch.launcher))
    # --- parallelism
    tp = _num(launch, "tp") or 1
    ep = _num(launch, "ep")
    if e == "sglang":
        # Retired switches, live at the declared release (removed ones never reach here: _changes): an all-to-all switch
        # stood for its table's replacement ("--moe-a2a-backend VALUE": that value), the EP switch for --ep-size <tp>
        # (SGLang's ServerArgs set ep_size = tp_size for both before sgl-project/sglang#10770)
        # The switch wins over the explicit flag: ServerArgs.__post_init__ sets the value from it after parsing
        # (a helper read the 0.5.2 wheel, 2026-12-04), so the flag given beside it is overwritten at startup.
        _retired_switch(launch, "retired_a2a", "a2a")
        _retired_switch(launch, "retired_runner", "runner")    # --enable-<backend>-moe: the runner its replacement names
        if v.get("ep_equals_tp") is not None and v["ep_equals_tp"].value:
            if ep is not None and ep != tp:
                launch.findings.append(Finding("rewritten", v["ep"].written, f"{v['ep_equals_tp'].written} sets ep = tp ({tp}) "
                                               "at startup (ServerArgs.__post_init__): the ep written is not what runs",
                                               v["ep_equals_tp"].entry.source))
            ep = tp
            v["ep"] = Read(v["ep_equals_tp"].entry, tp, v["ep_equals_tp"].written)
        moe_dp = _num(launch, "moe_dp") or 1
        if moe_dp > 1:
            raise InputError(Issue(where, 0, v["moe_dp"].written, f"{v['moe_dp'].written}: SGLang's MoE data parallelism splits "
                                   "the MoE group into moe_dp groups (moe_tp = tp / ep / moe_dp); moe-select's deployment has "
                                   "no such dimension (moe_tp = tp / ep): this launch cannot be expressed"))
        _set(launch, "tp", tp, _w(launch, "tp") or "SGLang's default tp 1")
        attn_dp = _num(launch, "attn_dp") or 1
        if attn_dp > 1:
            # 0.5.22 on: --attn-dp-size is the attention-DP width (--enable-dp-attention beside it adds nothing);
            # handle_data_parallelism raises for replicas beside it and asserts tp % attn_dp == 0
            src = "sgl-project/sglang@v0.5.23:python/sglang/srt/arg_groups/parallel_hook.py:handle_data_parallelism"
            if (_num(launch, "dp") or 1) > 1:
                raise InputError(Issue(where, 0, _w(launch, "dp"), f"{_w(launch, 'dp')} with {_w(launch, 'attn_dp')}: SGLang raises "
                                       "at startup ('data-parallel replicas combined with attention data parallelism are not "
                                       f"supported') [{src}]; give one of them"))
            if tp % attn_dp:
                raise InputError(Issue(where, 0, _w(launch, "attn_dp"), f"{_w(launch, 'tp') or 'tp 1'} {_w(launch, 'attn_dp')}: "
                                       f"SGLang asserts tp_size % attn_dp_size == 0 at startup ({tp} % {attn_dp} = "
                                       f"{tp % attn_dp}) [{src}]; give an attention-DP size that divides tp"))
            _set(launch, "dp", attn_dp, _w(launch, "attn_dp"))
        elif "dp_attention" in v:
            dp = _num(launch, "dp") or 1
            if tp % dp:   # SGLang asserts it (parallel_hook.handle_data_parallelism; ServerArgs before the arg groups)
                raise InputError(Issue(where, 0, _w(launch, "dp"), f"{_w(launch, 'tp') or 'tp 1'} {_w(launch, 'dp')} with "
                                       f"{_w(launch, 'dp_attention')}: SGLang asserts tp_size % dp_size == 0 at startup "
                                       f"({tp} % {dp} = {tp % dp}) [sgl-project/sglang@008b79d2358b:python/sglang/srt/"
                                       "arg_groups/parallel_hook.py:handle_data_parallelism]; give a dp that divides tp"))
            _set(launch, "dp", dp, f"{_w(launch, 'dp_attention', 'dp')}")
        else:
            # the line is the whole server: no attention-DP flag is SGLang's default, attn_dp_size 1 (a new user's trial:
            # dp was left unstated, and a fact that needs dp == tp planned a line SGLang refuses)
            if (_num(launch, "dp") or 1) > 1:
                launch.findings.append(Finding("note", _w(launch, "dp"), "data-parallel replicas without attention data "
                                               "parallelism (--enable-dp-attention; from 0.5.22 --attn-dp-size): each replica "
                                               "is its own MoE group of tp ranks, planned once; written back as given"))
                # no plan field holds the replicas: plan --emit writes the flag back as the line gave it (a new user's
                # trial found a 2-replica launch emitted as one)
                launch.kept.append(v["dp"].written.split())
            _set(launch, "dp", 1, "SGLang's default: no attention data parallelism (--attn-dp-size / --enable-dp-attention "
                                  "not in the line)")
        a2a_theirs = v["a2a"].value if "a2a" in v else None
        a2a_theirs = _sglang_a2a_spellings(launch, a2a_theirs)
        wf = v.get("waterfill")
        if wf is not None and wf.value:
            # SGLang's Waterfill overrides the all-to-all (and so ep) and enforces shared-expert fusion
            allowed = wf.entry.a2a or []
            if allowed and str(a2a_theirs or "none") not in allowed:
                launch.findings.append(Finding("rewritten", wf.written, f"SGLang overrides --moe-a2a-backend "
                                               f"{a2a_theirs or 'none'} to {allowed[0]}: Waterfill runs over "
                                               f"{' or '.join(allowed)} only", _cite("sglang", wf.entry)))
                a2a_theirs = allowed[0]
                launch.values["a2a"] = Read(wf.entry, a2a_theirs, wf.written)
            if v.get("shared_expert_fusion_off") is not None and v["shared_expert_fusion_off"].value:
                launch.findings.append(Finding("rewritten", _w(launch, "shared_expert_fusion_off"), "SGLang enforces "
                                               "shared-expert fusion under --enable-waterfill", _cite("sglang", wf.entry)))
                del launch.values["shared_expert_fusion_off"]
        if a2a_theirs is not None:
            a2a_theirs = _chosen("sglang", "a2a", str(a2a_theirs), _w(launch, "a2a"), where, launch.engine_version,
                                 launch.findings)
            mode = v["a2a_mode"].value if "a2a_mode" in v else None
            ours, ours_mode, note = _a2a_ours("sglang", a2a_theirs, mode)
            _set(launch, "a2a", ours, _w(launch, "a2a"))
            if mode is not None:
                _set(launch, "a2a_mode", mode, _w(launch, "a2a_mode"))
            if note:
                launch.findings.append(Finding("note", _w(launch, "a2a"), note))
            if ours != "none" and a2a_theirs not in _SGLANG_A2A_KEEPS_EP:
                if ep is not None and ep != tp:
                    launch.findings.append(Finding("rewritten", _w(launch, "ep"), f"SGLang sets ep = tp ({tp}) for every all-to-all "
                                                   f"backend but none ({_w(launch, 'a2a')}): the {ep} asked for is not what runs",
                                                   "sgl-project/sglang#24884"))
                _set(launch, "ep", tp, f"{_w(launch, 'a2a')} (SGLang sets ep = tp for every all-to-all backend but none)")
            elif ep is not None:
                _set(launch, "ep", ep, _w(launch, "ep"))
        elif ep is not None:
            _set(launch, "ep", ep, _w(launch, "ep"))
    elif e == "vllm":
        dp = _num(launch, "dp") or 1
        pcp = _num(launch, "pcp") or 1
        group = tp * dp * pcp
        how = " ".join(x for x in (_w(launch, "tp"), _w(launch, "dp"), _w(launch, "pcp")) if x) or "vLLM's default tp 1"
        _set(launch, "tp", group, f"{how} (vLLM's MoE group: tp x dp x pcp = {tp} x {dp} x {pcp})" if group != tp else how)
        if dp > 1:
            _set(launch, "dp", dp, f"{_w(launch, 'dp')} (data-parallel attention)")
        elif "dp" not in v:      # the line is the whole server: no --data-parallel-size is vLLM's default, 1
            _set(launch, "dp", 1, "vLLM's default --data-parallel-size 1 (not in the line)")
        if v.get("ep_switch") is not None and v["ep_switch"].value:
            _set(launch, "ep", group, f"{_w(launch, 'ep_switch')} (a switch: EP = tp x dp x pcp = {group})")
        if "a2a" in v:
            ours, mode, note = _a2a_ours("vllm", _chosen("vllm", "a2a", str(v["a2a"].value), _w(launch, "a2a"), where,
                                                         launch.engine_version, launch.findings), None, launch.engine_version,
                                         _w(launch, "a2a"), launch.findings)
            if "ep" not in launch.deployment and ours != "none":
                launch.findings.append(Finding("note", _w(launch, "a2a"), "vLLM uses an all-to-all only with --enable-expert-parallel: not read"))
            else:
                _set(launch, "a2a", ours, _w(launch, "a2a"))
                if mode is not None:
                    _set(launch, "a2a_mode", mode, _w(launch, "a2a"))
            if note:
                launch.findings.append(Finding("note", _w(launch, "a2a"), note))
        _dbo(launch)
    else:  # trtllm
        backend = v["trt_backend"].value if "trt_backend" in v else None
        if backend is not None and str(backend) != "pytorch":
            raise InputError(Issue(where, 0, _w(launch, "trt_backend"), "moe-select plans "
                                   "TensorRT-LLM's PyTorch backend (its moe_config.backend modules); the "
                                   f"{backend} backend builds its MoE another way, which no capability file describes: "
                                   "this launch cannot be planned (drop the flag for the default pytorch backend)"))
        moe_tp = _num(launch, "moe_tp")
        how_tp = _w(launch, "tp") or "TensorRT-LLM's default tp 1"
        _set(launch, "tp", tp, how_tp)
        if ep is not None and moe_tp is not None and ep * moe_tp != tp:
            raise InputError(Issue(where, 0, _w(launch, "moe_tp"), f"{_w(launch, 'ep')} x {_w(launch, 'moe_tp')} = {ep * moe_tp} is not "
                                   f"tensor_parallel_size {tp}: TensorRT-LLM needs moe_tp x moe_ep = tp; this launch cannot be expressed"))
        if ep is None and moe_tp is not None:
            if tp % moe_tp:
                raise InputError(Issue(where, 0, _w(launch, "moe_tp"), f"moe_tensor_parallel_size {moe_tp} does not divide tp {tp}"))
            _set(launch, "ep", tp // moe_tp, f"{_w(launch, 'moe_tp')} (moe_ep = tp / moe_tp)")
        elif ep is not None:
            _set(launch, "ep", ep, _w(launch, "ep") + (f" {_w(launch, 'moe_tp')}" if moe_tp is not None else ""))
        if v.get("dp_attention") is not None and v["dp_attention"].value:
            _set(launch, "dp", tp, f"{_w(launch, 'dp_attention')} (attention data parallel over the tp ranks)")
        if (ep or 1) > 1:
            launch.findings.append(Finding("note", "moe_expert_parallel_size", "TensorRT-LLM picks its all-to-all itself (not a launch "
                                           "option): planned with a2a none"))
    # --- runner
    runner_theirs: tuple[str, str] | None = None
    kc = v["kernel_config"].value if "kernel_config" in v and isinstance(v["kernel_config"].value, dict) else {}
    if "runner" in v and not (kc.get("moe_backend") and str(v["runner"].value).lower() == "auto"):
        runner_theirs = (str(v["runner"].value), _w(launch, "runner"))
    elif kc.get("moe_backend"):   # vLLM: --moe-backend left at auto keeps the kernel config's
        runner_theirs = (str(kc["moe_backend"]), f"{v['kernel_config'].written}.moe_backend")
    elif e == "trtllm" and isinstance(v.get("moe_config") and v["moe_config"].value, dict) and v["moe_config"].value.get("backend"):
        runner_theirs = (str(v["moe_config"].value["backend"]), _sub_written(launch, v["moe_config"], "backend"))
    if runner_theirs is not None:
        gone = names().retired_name(e, runner_theirs[0], launch.engine_version)
        if gone is not None:  # the engine raises for it at startup (issue 20: TensorRT-LLM's WIDEEP)
            launch.findings.append(Finding("engine_error", runner_theirs[1], f"{runner_theirs[0]}: {gone.why}; {e} raises for it "
                                           "at startup (planned as runner: auto)", gone.source))
            runner_theirs = None
    if runner_theirs is not None:
        runner_theirs = (_chosen(e, "runner", runner_theirs[0], runner_theirs[1], where, launch.engine_version,
                                 launch.findings), runner_theirs[1])
        ours, note = _runner_ours(e, runner_theirs[0])
        if ours != "auto":
            _set(launch, "runner", ours, runner_theirs[1])
        if note:
            launch.findings.append(Finding("note", runner_theirs[1], note))
    # --- the speculative draft's MoE runner and all-to-all (layer_runners / layer_a2a of the MTP layer kind; _draft_layers
    # checks the checkpoint has one once its config is read)
    if "draft_runner" in v:
        _draft_runner(launch, str(v["draft_runner"].value), _w(launch, "draft_runner"), where, "the draft's MoE layers")
    if "draft_a2a" in v:
        theirs = _chosen(e, "a2a", str(v["draft_a2a"].value), _w(launch, "draft_a2a"), where, launch.engine_version,
                         launch.findings)
        ours, _, note = _a2a_ours(e, theirs, None)
        _set(launch, "layer_a2a", {**(launch.deployment.get("layer_a2a") or {}), "mtp": ours},
             f"{_w(launch, 'draft_a2a')} (the draft's MoE layers)")
        if note:
            launch.findings.append(Finding("note", _w(launch, "draft_a2a"), note))
    # A draft-only runner key of the speculative config (the engine table's draft.own_runner: vLLM's
    # SpeculativeConfig.moe_backend, from 0.28.0: the draft's kernel config takes it in place of --moe-backend; a trial,
    # break54, saw it ignored and the target's runner planned). A release that reads and ignores it (own_runner's
    # ignored) is read as given: moe_select/deployment.py plans the target's runner for the draft there, with a note.
    sc = v.get("spec_config")
    rules = table(e).draft
    key = rules.own_runner_key if rules is not None else None
    if (rules is not None and key is not None and sc is not None and isinstance(sc.value, dict)
            and sc.value.get(key) not in (None, "", "auto")):
        written = f"{sc.written} {key}"
        own = rules.own_runner_at(launch.engine_version)
        if own is None:
            first = rules.own_runner[0]
            launch.findings.append(Finding("note", written, f"{e} {launch.engine_version} does not read the speculative "
                                           f"config's {key} (releases {' | '.join(w.version for w in rules.own_runner)} "
                                           "do): not read (the draft runs the target's runner)", first.source))
        else:
            _draft_runner(launch, str(sc.value[key]), written, where, f"the draft's MoE layers; {own.source}")
    # --- quantization (an engine's method name; only online quantization changes the checkpoint's format)
    if e == "sglang" and "quant" in v and str(v["quant"].value) == "nvfp4_online":
        # NVFP4 made at load with per-token FP32 activation scales (sgl-project/sglang#28354; the table's note)
        _set(launch, "quant", "nvfp4", f"{_w(launch, 'quant')} (NVFP4 made at load)")
        _set(launch, "quant_config", {"activation_scale": "per_token"}, f"{_w(launch, 'quant')} (per-token FP32 activation scales)")
    # any other method: read with the checkpoint's format (_online_quant, once the model config is known)
    # --- CUDA graphs
    if v.get("cuda_graph_off") is not None and v["cuda_graph_off"].value:
        _set(launch, "cuda_graph", False, _w(launch, "cuda_graph_off"))
    # SGLang's decode-phase graph backend, as a flag or in its per-phase config: disabled is no decode capture
    phases = v.get("cuda_graph_phases")
    decode = phases.value.get("decode") if phases is not None and isinstance(phases.value, dict) else None
    for r, backend in ((v.get("cuda_graph_backend"), v["cuda_graph_backend"].value if "cuda_graph_backend" in v else None),
                       (phases, decode.get("backend") if isinstance(decode, dict) else None)):
        if r is not None and str(backend).lower() == "disabled":
            _set(launch, "cuda_graph", False, f"{r.written} (the decode phase's CUDA-graph backend disabled)")
    cc = v.get("compilation_config")
    cc_value = cc.value if cc is not None and isinstance(cc.value, dict) else {}
    if cc is not None and str(cc_value.get("cudagraph_mode", "")).upper() == "NONE":
        _set(launch, "cuda_graph", False, f"{cc.written} (cudagraph_mode NONE)")
        launch.graph_off_kept = True
    # vLLM -O0: its optimization level 0 defaults cudagraph_mode to NONE (0.14.1 on: OPTIMIZATION_LEVEL_00; 0.11.0: any
    # compilation level but PIECEWISE), where the compilation config sets none (a new user's tenth trial)
    if e == "vllm" and launch.opt_level is not None and launch.opt_level[0] == "0" and "cuda_graph" not in launch.deployment \
            and "cudagraph_mode" not in cc_value:
        _set(launch, "cuda_graph", False, f"{launch.opt_level[1]} (vLLM's optimization level 0: cudagraph_mode NONE)")
        launch.graph_off_kept = True
    cg = v.get("cuda_graph_config")
    if cg is not None:
        if cg.value is None:
            _set(launch, "cuda_graph", False, f"{cg.written}: null")
        elif isinstance(cg.value, dict):
            _set(launch, "cuda_graph", True, cg.written)
        else:   # YAML 1.1 reads `off` / `no` as false: LlmArgs takes a CudaGraphConfig mapping or null only
            launch.findings.append(Finding(
                "engine_error", f"{cg.written}: {cg.value!r}",
                "TensorRT-LLM's cuda_graph_config takes a mapping (CudaGraphConfig: max_batch_size, batch_sizes, "
                "enable_padding) or null (no CUDA graphs); any other value fails LlmArgs' validation at startup",
                f"backends/engines/trtllm.yaml ({cg.entry.source})"))
    # --- phase
    phase = None
    if "disagg_mode" in v and v["disagg_mode"].value in ("prefill", "decode"):
        phase = v["disagg_mode"].value
        _set(launch, "phase", phase, _w(launch, "disagg_mode"))
    kvt = v.get("kv_transfer_config")
    if kvt is not None and isinstance(kvt.value, dict):
        role = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "both"}.get(str(kvt.value.get("kv_role")))
        if role:
            phase = role
            _set(launch, "phase", role, f"{kvt.written} (kv_role {kvt.value.get('kv_role')})")
    if "server_role" in v:
        role = {"CONTEXT": "prefill", "GENERATION": "decode"}.get(str(v["server_role"].value).upper())
        if role:
            phase = role
            _set(launch, "phase", role, _w(launch, "server_role"))
    # --- tokens one rank passes to the MoE layer
    _tokens(launch, phase or "both")
    # --- a speculative draft: a line states whether the engine builds one (the checkpoint's MTP layers planned or not)
    spec = [m for m in ("spec_algo", "spec_config", "spec_tokens") if m in v]
    _set(launch, "speculative", bool(spec), f"{_w(launch, *spec)} (a speculative draft: the checkpoint's MTP layers, if "
         "any, are planned)" if spec else "no speculative-decoding flag (no draft: the checkpoint's MTP layers are not built)")
    # --- nodes
    nn = _num(launch, "nnodes")
    if nn is not None and nn > 1:
        launch.findings.append(Finding("note", _w(launch, "nnodes"), f"{nn} nodes: an all-to-all crosses nodes (internode); no capability "
                                       "fact reads it yet"))
    if v.get("shared_expert_fusion_off") is not None and v["shared_expert_fusion_off"].value:
        _set(launch, "shared_expert_fusion", False, _w(launch, "shared_expert_fusion_off"))
    if "eplb" in v and v["eplb"].value:    # expert-parallel load balancing: some kernels refuse it (their facts say which)
        _set(launch, "eplb", True, _w(launch, "eplb"))
    if "lora" in v and v["lora"].value not in (None, False, "", []):   # LoRA adapters: the engines' MoE LoRA path
        _set(launch, "lora", True, _w(launch, "lora"))
    for m in ("eplb_config", "moe_read", "spec_algo", "dp_local", "pp", "trt_backend"):
        if m in v:
            launch.findings.append(Finding("note", v[m].written, "read; no deployment field holds it (planned without it)"))
    _capacity(launch)


def _capacity(launch: Launch) -> None:
    """``a2a_capacity`` from the engine variable that the launched all-to-all's ``capacity`` fact names (issue 23);
    a capacity variable of another all-to-all is a note (it sizes a buffer this launch does not build)."""
    from .catalog import default_catalog

    set_vars = {r.entry.name: r for k, r in launch.values.items() if k.startswith("env:") and r.entry.means == "a2a_capacity"}
    if not set_vars:
        return
    a2a = default_catalog().a2a.get(str(launch.deployment.get("a2a", "none")))
    mine = {c.variable for c in (a2a.capacity if a2a is not None else [])
            if c.when is None or c.when.engine is None or launch.engine in c.when.engine}
    for name, r in set_vars.items():
        if name not in mine:
            launch.findings.append(Finding("note", r.written, f"sizes the buffer of another all-to-all than this launch's "
                                           f"({launch.deployment.get('a2a', 'none')}): no effect"))
            continue
        try:
            value = int(str(r.value))
        except ValueError:
            raise InputError(Issue(LINE, 0, name, f"{r.written}: {name} is a number of tokens per rank")) from None
        _set(launch, "a2a_capacity", value, f"{r.written} ({launch.env_from.get(name, 'environment')})")


def _graph_batch(launch: Launch) -> tuple[int | None, str]:
    """The decode CUDA-graph batch per rank the line sets (the capture limit, else the largest captured size, else
    the running-request limit) and how it was written; ``(None, "")`` when the line sets none."""
    v = launch.values
    if "cuda_graph_max_bs" in v:
        return int(v["cuda_graph_max_bs"].value), _w(launch, "cuda_graph_max_bs")
    if "cuda_graph_bs" in v:
        sizes = v["cuda_graph_bs"].value
        try:
            return max(int(x) for x in (sizes if isinstance(sizes, list) else [sizes])), _w(launch, "cuda_graph_bs")
        except (TypeError, ValueError):
            raise InputError(Issue(LINE, 0, _w(launch, "cuda_graph_bs"), f"{_w(launch, 'cuda_graph_bs')}: the capture "
                                   "sizes are integers, as the engine's parser reads them")) from None
    if isinstance(v.get("cuda_graph_config") and v["cuda_graph_config"].value, dict):
        cfg = v["cuda_graph_config"].value
        if cfg.get("max_batch_size"):
            return int(cfg["max_batch_size"]), _sub_written(launch, v["cuda_graph_config"], "max_batch_size")
        if cfg.get("batch_sizes"):
            return max(cfg["batch_sizes"]), _sub_written(launch, v["cuda_graph_config"], "batch_sizes")
    elif isinstance(v.get("compilation_config") and v["compilation_config"].value, dict):
        cfg = v["compilation_config"].value
        if cfg.get("max_cudagraph_capture_size"):
            return int(cfg["max_cudagraph_capture_size"]), f"{v['compilation_config'].written} (max_cudagraph_capture_size)"
        if cfg.get("cudagraph_capture_sizes"):
            return max(cfg["cudagraph_capture_sizes"]), f"{v['compilation_config'].written} (cudagraph_capture_sizes)"
    if "max_running" in v:
        return int(v["max_running"].value), _w(launch, "max_running")
    return None, ""


#: SGLang all-to-all values that do not set ep = tp (not in _A2A_EP_SPANNING_BACKENDS, sgl-project/sglang@v0.5.23:
#: python/sglang/srt/arg_groups/overrides.py; the same set in the 0.5.19 .. 0.5.22 wheels): the NPU's tensor-parallel MoE.
_SGLANG_A2A_KEEPS_EP = ("ascend_tp",)


def _dbo(launch: Launch) -> None:
    """vLLM's ``--enable-dbo`` over an all-to-all it does not take: an engine error (the 0.29.0 .. 0.34.0 wheels assert it
    at startup); where only ROCm would run it (allgather_reducescatter from 0.33.0, the line's GPU unknown here), a note."""
    r = launch.values.get("dbo")
    if r is None or not r.value:
        return
    a2a = launch.deployment.get("a2a", "none")
    allowed = r.entry.a2a or []
    if a2a in allowed:
        return
    theirs = str(launch.values["a2a"].value) if "a2a" in launch.values else "allgather_reducescatter"
    rocm = theirs == "allgather_reducescatter" and (launch.engine_version is None or _ver(launch.engine_version) >= _ver("0.33.0"))
    said = (f"vLLM's dual-batch overlap runs over the all-to-alls {', '.join(allowed)} only on CUDA GPUs "
            f"(VllmConfig.__post_init__ asserts it at startup); this line's all-to-all is {theirs}"
            + (" (vLLM's default)" if "a2a" not in launch.values else "")
            + ("; on ROCm from 0.33.0 allgather_reducescatter is taken too" if rocm else ""))
    launch.findings.append(Finding("note" if rocm else "engine_error", r.written, said, _cite("vllm", r.entry)))


def _tokens(launch: Launch, phase: str) -> None:
    """``max_tokens_per_rank`` from the capture limit (decode) or the prefill budget (prefill, both), and
    ``decode_tokens_per_rank`` (the decode graph batch x tokens per request) of a deployment that also prefills."""
    v = launch.values
    draft = 1
    sc = v.get("spec_config")
    if "spec_draft_tokens" in v:
        draft = int(v["spec_draft_tokens"].value)
    elif "spec_tokens" in v:   # vLLM's num_speculative_tokens shorthand: the draft's tokens beside the one decoded
        draft = 1 + int(v["spec_tokens"].value)
    elif sc is not None and isinstance(sc.value, dict):
        n = sc.value.get("num_speculative_tokens", sc.value.get("max_draft_len", sc.value.get("num_nextn_predict_layers")))
        draft = 1 + int(n) if isinstance(n, int) else 1
    how_draft = (f" x {draft} tokens per request ({_w(launch, 'spec_draft_tokens') or _w(launch, 'spec_tokens') or (sc.written if sc else '')})"
                 if draft > 1 else "")
    bs, how = _graph_batch(launch)
    if phase == "decode":
        if bs is not None:
            _set(launch, "max_tokens_per_rank", bs * draft, f"{how}{how_draft}")
        return
    if bs is not None and phase == "both":
        _set(launch, "decode_tokens_per_rank", bs * draft, f"{how}{how_draft}")
    budget = None
    for m in ("chunked_prefill", "max_batched_tokens"):
        if m in v and int(v[m].value) > 0:
            budget, how = int(v[m].value), _w(launch, m)
            break
    mc = v.get("moe_config")
    if mc is not None and isinstance(mc.value, dict) and isinstance(mc.value.get("max_num_tokens"), int):
        if budget is None or mc.value["max_num_tokens"] < budget:
            budget, how = mc.value["max_num_tokens"], f"{mc.written}.max_num_tokens (the MoE chunk)"
    if budget is not None:
        dp = launch.deployment.get("dp")
        if launch.engine == "sglang" and dp and dp > 1 and "chunked_prefill" in v and launch.deployment.get("a2a", "none") != "none":
            budget, how = max(1, budget // dp), f"{how} / dp {dp} (SGLang divides the chunk by dp under DP attention)"
        _set(launch, "max_tokens_per_rank", budget, how)


# ------------------------------------------------------------------------------------------ entry point
def from_command(argv: str | Sequence[str], env: Mapping[str, str] | None = None, *, engine_version: str | None = None,
                 base_dir: str | Path | None = None, model_config: str | None = None, where: str = LINE,
                 shell: Mapping[str, str] | None = None) -> Launch:
    """Read a launch line (a string, or argv words) into a :class:`Launch` (see the module docstring).

    ``env``: the environment besides the line's own assignments (an ``--env`` file's), and ``shell`` the shell's when
    the caller reads it (:func:`merge_env`: the line's assignments win, then ``env``, then ``shell``; each value says
    which it came from). ``engine_version``: the engine's
    version (PEP 440) that flags are judged at (None: the tables' newest). ``base_dir``: what relative config
    and model paths resolve against. ``model_config``: a model config folder given instead of the line's model
    (no lookup). Raises :class:`InputError` (module docstring)."""
    if engine_version is not None and _ver(engine_version) is None:
        raise InputError(Issue(where, 0, "engine_version", f"{engine_version!r} is not a PEP 440 version (e.g. 0.11.1)"))
    findings: list[Finding] = []
    line_env: dict[str, str] = {}
    docs: dict[str, str] = {}
    if isinstance(argv, str):
        words, line_env = split_text(argv, where, docs)
    else:
        words = list(argv)
        if not words:
            raise InputError(Issue(where, 0, "", "no command in the launch line"))
    docker: dict[str, Any] = {}
    outer = {**(shell or {}), **(env or {})}
    words = _strip_wrappers(words, line_env, findings, where, docker, outer=outer)
    if not words:
        raise InputError(Issue(where, 0, "", "no command in the launch line"))
    engine, launcher, args, model_style = _launcher(words, where)
    tagged = image_version(engine, docker.get("image"))
    if tagged is not None:
        if engine_version is None:
            engine_version = tagged
            findings.append(Finding("note", f"{engine} {tagged}", f"the engine version, from the image tag of "
                                    f"{docker.get('image')} (give --engine-version to judge another)", "docker run"))
        elif _ver(engine_version) != _ver(tagged):
            findings.append(Finding("note", f"{engine} {engine_version}", f"the engine version given, over {tagged} that "
                                    f"the image tag of {docker.get('image')} names", "docker run"))
    image_env = _image_env(engine, docker.get("image"), line_env, findings)
    # a container sees its image's variables and those docker run -e passes, none of the host's others
    full_env, env_from = merge_env({**image_env, **line_env}, None if docker else env, None if docker else shell)
    for k in image_env:
        if k not in line_env:
            env_from[k] = f"image {docker.get('image')}"
    for k, how in (docker.get("passed") or {}).items():
        env_from[k] = f"docker run -e {k}: {how}"
    if docker and env:
        known = {e.name for e in table(engine).env}
        kept_out = sorted(k for k in env if k in known and k not in line_env)
        if kept_out:
            findings.append(Finding("note", ", ".join(kept_out), "in the host environment given (the shell or --env file), "
                                    "but docker run passes a variable to the container only with -e/--env: not read"))
    launch = Launch(engine=engine, launcher=launcher, engine_version=engine_version, argv=args, env=full_env, env_from=env_from,
                    findings=findings, container=docker or None, here_docs=docs)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    _parse_args(launch, args, model_style, where, base)
    _check_shadowed(launch, where)
    if engine == "trtllm" and launch.config:
        _read_trtllm_yaml(launch)
    _read_env(launch, where)
    _map(launch, where)
    if engine_version is not None:  # the selector judges the engine's facts at it too (issue 20)
        if tagged is not None and engine_version == tagged:
            _set(launch, "engine_version", engine_version, f"the image tag of {docker.get('image')}")
        else:   # moe-select's own flag, not the line's (a new user's tenth trial: labelled "launch line")
            launch.deployment["engine_version"] = engine_version
            launch.provenance["engine_version"] = f"command line (--engine-version {engine_version})"
    if model_config is not None:
        _set(launch, "model_config", model_config, f"given instead of the line's model ({launch.model_written or 'none'})")
    else:
        if launch.model is None:
            raise InputError(Issue(where, 0, "model", f"no model in the launch line ({' '.join(launcher)} {model_style})"))
        # the model is looked up on this host: its environment (HF_HOME, ...) over a container's
        path, how = resolve_model(launch.model, launch.model_written or launch.model, {**full_env, **(env or {})}, base, where)
        _set(launch, "model_config", path, f"{launch.model_written} ({how})")
    _format_runner(launch)
    _quant_name(launch, where)
    _online_quant(launch)
    _draft_layers(launch)
    _activation_scale(launch)
    _env_switches(launch)
    _activation_precision(launch)
    _dispatch_precision(launch)
    return launch


#: How SGLang's EnvBool reads a boolean variable (environ.py EnvBool.parse, read in the v0.5.23 wheel).
ENV_TRUE, ENV_FALSE = ("true", "1", "yes", "y"), ("false", "0", "no", "n")


def _draft_runner(launch: Launch, value: str, written: str, where: str, why: str) -> None:
    """The speculative draft's runner ``value`` as the line ``written`` gives it (a draft-runner flag, or vLLM's
    speculative config): checked against the engine's choices, read into ``layer_runners.mtp`` (its provenance says
    ``why``) unless it is the engine's auto, with the note of a name read another way."""
    theirs = _chosen(launch.engine, "runner", value, written, where, launch.engine_version, launch.findings)
    ours, note = _runner_ours(launch.engine, theirs)
    if ours != "auto":
        _set(launch, "layer_runners", {**(launch.deployment.get("layer_runners") or {}), "mtp": ours}, f"{written} ({why})")
    if note:
        launch.findings.append(Finding("note", written, note))


def _sglang_a2a_spellings(launch: Launch, a2a_theirs: Any) -> Any:
    """SGLang's other spellings of an all-to-all, read as ``--moe-a2a-backend`` (a trial, break54, saw them planned as a
    plain runner at ep 1): a set variable of ``means: a2a_switch``, which overrides any all-to-all to the one its table
    entry names, and a runner value the table's choices row aliases to an all-to-all (``runner_aliases``: the engine
    rewrites it to that all-to-all with the runner at auto, from the release it names; a given all-to-all other than none
    or that one raises). Returns the all-to-all the engine runs (and updates ``launch.values``)."""
    from .versions import at_least

    v = launch.values
    a2a_entry = next(e for e in table("sglang").flags if e.means == "a2a" and not e.removed)
    for key, r in list(v.items()):
        if not (key.startswith("env:") and r.entry.means == "a2a_switch" and r.entry.a2a):
            continue
        to = r.entry.a2a[0]
        if _env_bool(launch, r) and str(a2a_theirs or "none") != to:
            launch.findings.append(Finding("rewritten", r.written, f"SGLang sets --moe-a2a-backend {to} when "
                                           f"{r.entry.name} is set (over {a2a_theirs or 'none'})", _cite("sglang", r.entry)))
            a2a_theirs = to
            v["a2a"] = Read(a2a_entry, a2a_theirs, r.written)
    runner = v.get("runner")
    alias = names().runner_alias("sglang", str(runner.value)) if runner is not None else None
    version = launch.engine_version
    if runner is not None and alias is not None and (version is None or at_least(version, alias.since)):
        if str(a2a_theirs or "none") in ("none", alias.a2a):
            launch.findings.append(Finding("rewritten", runner.written, f"SGLang reads --moe-runner-backend {runner.value} "
                                           f"as --moe-a2a-backend {alias.a2a} with the runner at auto (from {alias.since})",
                                           alias.source))
            a2a_theirs = alias.a2a
            v["a2a"] = Read(a2a_entry, a2a_theirs, runner.written)
            del v["runner"]
        else:
            launch.findings.append(Finding("engine_error", runner.written, f"SGLang raises for --moe-runner-backend {runner.value} "
                                           f"with --moe-a2a-backend {a2a_theirs}: the alias takes none or {alias.a2a} only",
                                           alias.source))
    return a2a_theirs


def _env_bool(launch: Launch, r: Read) -> bool | None:
    """A boolean variable as SGLang's EnvBool reads it (:data:`ENV_TRUE`, :data:`ENV_FALSE`); None, with an
    engine_error finding, for a value that is neither (the engine raises ValueError when it reads it)."""
    value = str(r.value).strip().lower()
    if value not in ENV_TRUE + ENV_FALSE:
        launch.findings.append(Finding("engine_error", r.written, f"{r.value!r} is not a boolean ({', '.join(ENV_TRUE + ENV_FALSE)}): "
                                       f"{launch.engine} raises ValueError when it reads it (not read)", _cite(launch.engine, r.entry)))
        return None
    return value in ENV_TRUE


def _activation_scale(launch: Launch) -> None:
    """A variable that turns per-token NVFP4 activation scales on (``means: activation_scale``, SGLang's
    per-token activation variable, named in backends/engines/sglang.yaml): ``quant_config.activation_scale: per_token`` for a serialized
    NVFP4 checkpoint that quantizes its activations, the only one SGLang reads it for (ModelOptFp4Config); a note for
    another checkpoint (not read there), a false value (the default, per-tensor), or a launch that already says."""
    for key, r in launch.values.items():
        if not key.startswith("env:") or r.entry.means != "activation_scale":
            continue
        value = _env_bool(launch, r)
        if value is None:
            continue
        if not value:
            launch.findings.append(Finding("note", r.written, "false: per-tensor activation scales (the default)"))
            continue
        if "quant_config" in launch.deployment:
            launch.findings.append(Finding("note", r.written, f"{launch.provenance['quant_config']} already says per-token"))
            continue
        if "model_config" not in launch.deployment:
            continue
        info = launch.model_info()
        if info.quant != "nvfp4" or info.quant_params.get("weight_only"):
            what = "a weight-only nvfp4" if info.quant == "nvfp4" else f"a {info.quant}"
            launch.findings.append(Finding("note", r.written, f"read for serialized NVFP4 (W4A4) checkpoints only; {what} checkpoint: "
                                           "not read", _cite(launch.engine, r.entry)))
            continue
        _set(launch, "quant_config", {"activation_scale": "per_token"}, f"{r.written} (set by the {launch.env_from.get(key[4:], 'environment')}; "
             "per-token FP32 activation scales)")


def _env_switches(launch: Launch) -> None:
    """The engine's boolean switches read from the environment: the vendor-library switch (``means: vendor_library``)
    as the deployment's ``vendor_library``, and a shared-expert fusion switch (``means: shared_expert_fusion``) as its
    ``shared_expert_fusion``; a value that is no boolean is an engine_error finding (the engine raises when it reads
    it)."""
    for key, r in launch.values.items():
        if not key.startswith("env:") or r.entry.means not in ("vendor_library", "shared_expert_fusion"):
            continue
        # vLLM reads its switches as value.lower() in ('true', '1'), any other value off, never an error
        # (vllm-project/vllm@055e47c28003:vllm/foundation/system/envs.py); SGLang as an EnvBool
        value = str(r.value).lower() in ("true", "1") if launch.engine == "vllm" else _env_bool(launch, r)
        if value is None:
            continue
        _set(launch, r.entry.means, value, f"{r.written} (set by the {launch.env_from.get(key[4:], 'environment')})")


def _activation_precision(launch: Launch) -> None:
    """A flag or variable that asks the engine for an activation precision (``means: activation_precision``, e.g.
    an engine's MXFP4 precision flag in backends/engines/): ``quant_config.activation_precision`` from the entry's ``values``
    map (the engine's default, null there: nothing asked, a note); a value the map lacks: an ``engine_error`` finding
    (the engine's parser refuses it), not read."""
    for r in [r for r in launch.values.values() if r.entry.means == "activation_precision"]:
        names = r.entry.values or {}
        value, how = r.entry.engine_value(str(r.value))
        if value is None:
            launch.findings.append(Finding("engine_error", r.written, f"{str(r.value).strip()[:40]!r} is not one of "
                                           f"{', '.join(names)} as {launch.engine} reads it: it refuses it (not read)",
                                           _cite(launch.engine, r.entry)))
            continue
        if names[value] is None:
            launch.findings.append(Finding("note", r.written, f"{value}: the engine's default activation precision (nothing asked)"))
            continue
        scope = _precision_scope(launch, r.entry)
        if scope is not None:
            launch.findings.append(Finding("note", r.written, f"not read: {scope}", _cite(launch.engine, r.entry)))
            continue
        qc = dict(launch.deployment.get("quant_config") or {})
        qc["activation_precision"] = names[value]
        readers = [n for n in r.entry.runners or [] if n != "auto"]
        if readers:  # read by those runners only: a runner the engine or the plan picks otherwise runs its default
            qc["activation_precision_runners"] = readers
        _set(launch, "quant_config", qc, f"{r.written} (activation_precision {names[value]}"
             + (f", asked of {' and '.join(readers)} only" if readers else "") + (f"; {how}" if how else "") + ")")


def _precision_scope(launch: Launch, entry: Any) -> str | None:
    """Why the engine does not read the activation-precision ``entry`` in this launch (its ``runners`` / ``formats``
    scope: the line names another runner, or the checkpoint is in another format), or None where it does."""
    runner = launch.values.get("runner")
    theirs = str(runner.value).strip() if runner is not None and runner.value is not None else "auto"
    if entry.runners is not None and theirs not in entry.runners:
        return (f"{launch.engine} reads it with {' or '.join(entry.runners)} only"
                + (" (when it picks the MoE runner itself)" if "auto" in entry.runners else "") + f"; the line's runner is {theirs}")
    if entry.formats is not None and "model_config" in launch.deployment:
        info = launch.model_info()
        if info.quant not in entry.formats:
            return f"{launch.engine} reads it for {', '.join(entry.formats)} checkpoints only; this one is {info.quant}"
    return None


def _dispatch_precision(launch: Launch) -> None:
    """The flags and variables that set the all-to-all's dispatch precision (``means: dispatch_precision``, e.g. an
    engine's dispatcher output dtype flag in backends/engines/): ``dispatch_precision`` from the entry's ``values`` map, a scalar where the entry
    sets every MoE layer kind (``layers: all``), ``{main: X}`` where it sets the main layers. Read in the engine's order: a
    flag before a variable, a variable before a deprecated one (table order within each); the first non-auto value decides
    (an explicit auto decides too where ``auto_decides``), and a later source that says otherwise is a note naming both.
    A value the engine refuses is an ``engine_error`` finding, one it ignores an ``ignored`` finding; a source for another
    all-to-all (or mode) than the launch's is a note, or an ``engine_error`` where the engine raises for it (``other_a2a``)."""
    t = table(launch.engine)
    order = {id(e): i for i, e in enumerate([*t.flags, *t.env])}
    reads = sorted((r for r in launch.values.values() if r.entry.means == "dispatch_precision"),
                   key=lambda r: (isinstance(r.entry, EnvEntry), r.entry.deprecated is not None, order.get(id(r.entry), 0)))
    a2a, mode = str(launch.deployment.get("a2a", "none")), launch.deployment.get("a2a_mode")
    v = _ver(launch.engine_version)
    decided: tuple[Read, str | None] | None = None
    for r in reads:
        e, src = r.entry, _cite(launch.engine, r.entry)
        names = e.values or {}
        key, how = e.engine_value(str(r.value))
        if key is None:
            since = e.unknown_refused_since
            refused = e.unknown == "refused" or (since is not None and (v is None or _ver(since.version) is None
                                                                          or v >= _ver(since.version)))
            if refused:
                launch.findings.append(Finding("engine_error", r.written, f"{str(r.value)[:40]!r} is not one of {', '.join(names)}: "
                                               f"{launch.engine} refuses it" + (f" (from {since.text()})" if since else "")
                                               + " (not read)", src))
                continue
            launch.findings.append(Finding("ignored", r.written, f"{str(r.value)[:40]!r} is not one of {', '.join(names)}: "
                                           f"{launch.engine} ignores it and chooses itself (auto)", src))
            if not e.auto_decides:
                continue
            key = next(k for k, p in names.items() if p is None)
        if how:
            launch.findings.append(Finding("note", r.written, how, src))
        want = names[key]
        if a2a not in (e.a2a or []) or (e.a2a_modes and mode in ("normal", "low_latency") and mode not in e.a2a_modes):
            here = f"a2a {a2a}" + (f" ({mode})" if mode else "")
            sets = ", ".join(e.a2a or []) + (f" ({', '.join(e.a2a_modes)})" if e.a2a_modes else "")
            if e.other_a2a == "raises" and want is not None:
                launch.findings.append(Finding("engine_error", r.written, f"sets the dispatch of {sets} only: {launch.engine} raises "
                                               f"for it with {here} at startup", src))
            else:
                launch.findings.append(Finding("note", r.written, f"sets the dispatch of {sets} only: no effect with {here} (not read)"))
            continue
        if decided is None:
            if want is None and not e.auto_decides:
                launch.findings.append(Finding("note", r.written, f"{key}: auto (the engine chooses per layer from its weights)"))
                continue
            decided = (r, want)
            continue
        first, said = decided
        launch.findings.append(Finding("note", r.written, f"not read: {first.written} decides ({launch.engine} reads it first)"
                                       + (f"; this one says {want or 'auto'}, that one {said or 'auto'}" if want != said else ""), src))
    if decided is None:
        return
    r, said = decided
    if said is None:
        return
    value: str | dict[str, str] = said if r.entry.layers == "all" else {"main": said}
    _set(launch, "dispatch_precision", value, f"{r.written} (" + ("every MoE layer kind" if r.entry.layers == "all" else
         "the main MoE layers; other kinds: the engine's choice") + ")")


def online_flag(how: str, engine: str) -> tuple[str, str] | None:
    """``(flag, value)`` of an online fact's ``how`` (backends/formats.yaml, e.g. ``--quantization fp8_per_block``; words
    after the value say more and are not part of the flag) where the flag is a name of ``engine``'s ``means: quant``
    entry; None where it is not (the fact does not name the quantization method flag)."""
    words = how.split()
    if len(words) < 2:
        return None
    quant_names = {n for e in table(engine).flags if e.means == "quant" for n in e.names}
    return (words[0], words[1]) if words[0] in quant_names else None


def _draft_layers(launch: Launch) -> None:
    """The draft's MoE runner / all-to-all read from the line (``layer_runners.mtp`` / ``layer_a2a.mtp``) plan the
    checkpoint's MTP layer kind: where the checkpoint has none (a draft of another model, or no config given), they are
    taken back out, with a note (the deployment would refuse a layer kind the checkpoint lacks)."""
    keys = [k for k in ("layer_runners", "layer_a2a") if "mtp" in (launch.deployment.get(k) or {})]
    if not keys:
        return
    has_mtp = False
    if "model_config" in launch.deployment:
        try:
            info = launch.model_info()
        except Exception:   # the deployment check reports a config that does not read
            return
        has_mtp = any(k["kind"] == "mtp" or k.get("mtp") for k in info.layer_kinds)
    if has_mtp:
        return
    for k in keys:
        rest = {n: r for n, r in launch.deployment[k].items() if n != "mtp"}
        if rest:
            launch.deployment[k] = rest
        else:
            del launch.deployment[k]
            launch.provenance.pop(k, None)
        launch.findings.append(Finding("note", _w(launch, "draft_runner" if k == "layer_runners" else "draft_a2a"),
                                       "the draft's MoE layers: " + ("the checkpoint has no MTP layers (a draft of another "
                                       "model is not planned)" if "model_config" in launch.deployment else
                                       "planned with the checkpoint's MTP layers only (give the model config)")))


def _quant_name(launch: Launch, where: str) -> None:
    """The quantization method flag's value checked against the engine's names (backends/engines/names.yaml ``choices``
    ``of: quant``): :class:`InputError` for a name no release read takes (the engine refuses it at startup), an
    ``engine_error`` finding for one the declared release does not take yet or any more, or one it deprecated without
    the switch that allows it (vLLM >= 0.14.0 raises 'The quantization method ... is deprecated' unless
    --allow-deprecated-quantization). The value is kept as the engine reads it (vLLM lower-cases it). vLLM: on a
    quantized checkpoint the names are not judged (its override loop runs before the name check and may take any
    name; a mismatch is quant_mismatch's), and 'None' / '' mean no method (a note; the flag is dropped)."""
    r = launch.values.get("quant")
    if r is None:
        return
    e = launch.engine
    if e == "vllm":
        if str(r.value).strip().lower() in ("", "none"):
            # optional_type(str) (0.13.0 on; nullable_str before 0.9.0) reads them as no method: the checkpoint's own
            launch.findings.append(Finding("note", r.written, "vLLM reads this as no quantization method: the format is "
                                           "the checkpoint's"))
            del launch.values["quant"]
            return
        if "model_config" in launch.deployment:
            from .formats import lookup

            ckpt = launch.model_info().quant
            row = lookup(ckpt) if ckpt else None
            if row is not None and row.quantized:
                # the checkpoint's override loop runs first and may replace the name, or the methods 'do not match'
                # (vllm.yaml quant_mismatch): the names are not judged here (names.yaml, the vLLM quant row's comment)
                return
    value = _chosen(e, "quant", str(r.value), r.written, where, launch.engine_version, launch.findings)
    if value != r.value:
        launch.values["quant"] = Read(r.entry, value, r.written)
    c = names().choices_of(e, "quant")
    spec = c.deprecated_at(value, launch.engine_version) if c is not None else None
    allow = launch.values.get("allow_deprecated_quant")
    if spec is None or (allow is not None and allow.value):
        return
    launch.findings.append(Finding("engine_error", r.written, f"{value!r} is deprecated in {e} {launch.engine_version} "
                                   f"(the declared version; deprecated {spec}): {e} raises at startup ('The quantization "
                                   "method ... is deprecated') unless the line gives --allow-deprecated-quantization",
                                   c.deprecated_source if c is not None else None))


#: vLLM model types whose FP8 checkpoints any --quantization name resolves to deepseek_v4_fp8
#: (DeepseekV4FP8Config.override_quantization_method: deepseek_v4 in 0.28.0; the text and v41 variants in 0.34.0, read by a
#: helper in the wheels, 2026-12-06): no 'does not match' there.
_VLLM_DSV4_FP8_TYPES = ("deepseek_v4", "deepseek_v4_text", "deepseek_v41", "deepseek_v41_text")


def _online_quant(launch: Launch) -> None:
    """The quantization method flag (``means: quant``) read through backends/formats.yaml's ``online`` column (issue 21):
    on a 16-bit checkpoint, a value that an online fact of this engine names is the format the engine makes at load, so
    ``quant`` is that format (the facts that make it first; a value only ``makes: false`` facts name is read as the format
    they refuse, so the deployment check refuses it on their evidence), with ``quant_config.activation_scale`` per_token
    where the fact says so. At a declared engine version where a ``makes: false`` fact holds, a finding says it
    (``engine_error`` where the fact says the engine raises; the format is still read: the flag of another fact makes it,
    as an emitted launch writes). A quantized checkpoint, or a value no online fact names: a note (the format is the
    checkpoint's). Nothing where the line sets no method, or already read it (nvfp4_online)."""
    r = launch.values.get("quant")
    if r is None or "quant" in launch.deployment:
        return
    value, e = str(r.value), launch.engine
    from .formats import lookup
    from .formats import table as formats

    ckpt, layout, model_type = None, None, None
    if "model_config" in launch.deployment:
        info = launch.model_info()
        ckpt, layout, model_type = info.quant, info.quant_params.get("layout"), info.model_type
    row = lookup(ckpt) if ckpt is not None else None
    # the online facts of this engine naming this value that speak of this checkpoint (a 16-bit one, or a quantized
    # format their from names: SGLang's modelopt_fp4 on an FP8 checkpoint)
    named = [(f, w) for f in formats().values() for w in f.online_ways
             if w.engine == e and w.takes(ckpt, layout) and (fv := online_flag(w.how, e)) is not None and fv[1] == value]
    if row is None or (row.quantized and not named):
        # the rows speak of AWQ / GPTQ checkpoints and of quant_method fp8 / compressed-tensors FP8 ones: a ModelOpt FP8
        # checkpoint is overridden to the engine's ModelOpt method whatever is named (vLLM ModelOptFp8Config, SGLang
        # _modelopt_override_quantization_method), and vLLM's DeepSeek-V4 FP8 override takes any name on a deepseek_v4
        # model (DeepseekV4FP8Config.override_quantization_method): no engine error there (a review, 2026-12-05)
        fp8 = ckpt is not None and ckpt.startswith("fp8")
        kind = layout if layout in ("awq", "gptq") else "fp8" if fp8 and layout == "fp8" else \
            "fp8_ct" if fp8 and layout == "compressed-tensors" else "mxfp4" if ckpt == "mxfp4" and layout == "mxfp4" \
            else None
        if e == "vllm" and (model_type in _VLLM_DSV4_FP8_TYPES or (kind == "mxfp4" and model_type != "gpt_oss")):
            kind = None
        c = names().choices_of(e, "quant")
        rows = [m for m in table(e).quant_mismatch if m.checkpoint == kind
                and m.holds_at(launch.engine_version, c.read_up_to if c is not None else None)]
        # an allow-list of the release first (the whole check read), then the block-lists
        clash = next((m for m in sorted(rows, key=lambda m: not m.accepts) if m.refuses_name(value)), None)
        if clash is not None:  # the engine compares the method named with the checkpoint's and raises at startup
            at = launch.engine_version or (f"{c.read_up_to}, the newest read" if c is not None else "the newest read")
            takes = (f"; at {e} {at} this checkpoint takes only {', '.join(clash.accepts)}" if clash.accepts else "")
            said = clash.error or "Quantization method specified in the model config ... does not match"
            launch.findings.append(Finding("engine_error", r.written, f"{value} is not this checkpoint's method ({kind} "
                                           f"checkpoint: {ckpt}): {e} raises at startup (\"{said}\"){takes}; leave the flag "
                                           f"out (the checkpoint names its method) or name one of its own", clash.source))
            return
        launch.findings.append(Finding("note", r.written, f"the format is read from the checkpoint ({ckpt or 'not read'}: "
                                       "moe-select's quant: auto); give --quant for online quantization of an unquantized checkpoint"))
        return
    made = list(dict.fromkeys(f.name for f, w in named if w.makes))
    fmts = made or list(dict.fromkeys(f.name for f, _ in named))
    if len(fmts) != 1:
        launch.findings.append(Finding("note", r.written, f"on a {ckpt} checkpoint: " + (
            f"the online facts of {e} name {value} for {', '.join(fmts)} (backends/formats.yaml, online): not read, give --quant"
            if fmts else f"no online fact of {e} names {value} (backends/formats.yaml, online): planned as the checkpoint's "
            f"{ckpt}; give --quant for online quantization")))
        return
    fmt = lookup(fmts[0])
    assert fmt is not None
    ways = [w for f, w in named if f.name == fmt.name and w.makes == bool(made)]
    _set(launch, "quant", fmt.name, f"{r.written} ({e}'s online quantization of the {ckpt} checkpoint to {fmt.name}: "
         f"{', '.join(w.where() for w in ways)})")
    scales = {w.activation_scale for w in ways}
    if scales == {"per_token"}:
        qc = dict(launch.deployment.get("quant_config") or {})
        qc["activation_scale"] = "per_token"
        _set(launch, "quant_config", qc, f"{r.written} (per-token FP32 activation scales: {ways[0].where()})")
    if launch.engine_version is None:  # the deployment check judges the format at the version the selector assumes
        return
    # this flag at the declared version (another flag making the format does not make this one work)
    held = [w for w in ways if w.holds(launch.engine_version, None, "per_token" if scales == {"per_token"} else None) is True]
    held += [w for w in fmt.online_ways if w.engine == e and not w.makes and w not in ways and w.takes(ckpt, layout) and (fv := online_flag(w.how, e))
             is not None and fv[1] == value and w.holds(launch.engine_version, None, None) is True]
    if any(w.makes for w in held):
        return
    for w in (w for w in held if not w.makes):
        raises = "raise" in (w.why or "").lower()  # the fact's own words: the engine raises (else it runs otherwise)
        launch.findings.append(Finding("engine_error" if raises else "note", r.written, f"on a {ckpt} checkpoint at {e} "
                                       f"{launch.engine_version}: {w.why} (backends/formats.yaml:{w.where().rsplit(':', 1)[-1]})",
                                       w.source))


def _format_runner(launch: Launch) -> None:
    """A runner name the engine dispatches on the checkpoint format (``names.yaml`` ``by_format``: one engine name may run another of
    our runners on some formats): the checkpoint's format, read as the engine reads it, picks our runner. Raises
    :class:`InputError` (file:line) for a model config that cannot be read: the name cannot be read without it."""
    r = launch.values.get("runner")
    if r is None or "runner" not in launch.deployment or "model_config" not in launch.deployment:
        return
    theirs = str(r.value)
    if not any(f.engine == launch.engine and f.name == theirs for f in names().by_format):
        return
    quant = launch.model_info().quant
    scoped = names().format_name(launch.engine, theirs, quant)
    if scoped is None:
        return
    if scoped.ours is None:   # the engine has no backend of that name for this format: it raises at startup
        launch.findings.append(Finding("engine_error", r.written, f"{launch.engine} has no {theirs} MoE backend for a {quant} "
                                       f"checkpoint and raises at startup ('{scoped.raises}'); leave the option out or name "
                                       f"one of the format's backends", scoped.source))
        # the plan is for the line without it (the engine's own choice), not for a runner of ours the name means
        # elsewhere: plan --emit would otherwise write another backend in its place (a review, 2026-12-06)
        _set(launch, "runner", "auto", f"{r.written} refused on a {quant} checkpoint: the engine's own choice")
        return
    _set(launch, "runner", scoped.ours, f"{r.written} ({launch.engine}'s {theirs} on a {quant} checkpoint)")
    launch.findings.append(Finding("note", r.written, f"{launch.engine} runs {theirs} as {scoped.ours} on a {quant} checkpoint "
                                   f"(backends/engines/names.yaml by_format): planned as {scoped.ours}", scoped.source))
