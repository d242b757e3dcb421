"""The command-line side of launch lines (issue 22): ``explain``/``plan`` ``--from-command``, ``--env``,
``--shell-env``, ``--engine-version`` and ``plan --emit``. :mod:`moe_select.cli` calls into here.

``--from-command`` takes the line as argv after ``--`` (``--from-command -- vllm serve M -tp 8``), as one
quoted string, as ``@FILE`` or as ``-`` (stdin). Deployment flags given besides override what the line says
(the provenance says both). The environment: the line's assignments, then ``--env FILE``, then the shell
only with ``--shell-env`` or when the plan is for this machine (no ``--gpu``/``--arch``, or ``arch auto``).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from .errors import InputError


def add_cli_flags(p: argparse.ArgumentParser, *, emit: bool = False) -> None:
    """Add the launch-line flags to ``explain`` (and, with ``emit``, ``plan``)."""
    g = p.add_argument_group("launch line (issue 22: read an engine's own launch command)")
    g.add_argument("--from-command", dest="from_command", nargs="?", const="--", default=None, metavar="LINE|@FILE|-",
                   help="the engine's launch line: a quoted string, @FILE, - (stdin), or nothing and the argv after --")
    g.add_argument("launch_argv", nargs="*", help=argparse.SUPPRESS)
    g.add_argument("--env", dest="env_file", metavar="FILE", help="VAR=value lines the engine also sees (after the line's own)")
    g.add_argument("--shell-env", dest="shell_env", action="store_true", help="the shell's environment is the engine's too")
    g.add_argument("--engine-version", dest="engine_version", metavar="V", help="the engine's version (PEP 440) the flags are judged at")
    if emit:
        g.add_argument("--emit", choices=["sglang", "vllm", "trtllm"],
                       help="write the plan as this engine's launch (flags, environment, TensorRT-LLM YAML) instead of the plan JSON")


def cli_launch(args: argparse.Namespace) -> Any:
    """The :class:`~moe_select.launch_line.Launch` of ``args`` (None without ``--from-command``), kept on
    ``args.launch``. Raises :class:`InputError` for positional words without ``--from-command`` and for
    everything :func:`~moe_select.launch_line.from_command` refuses."""
    from .launch_line import LINE, from_command, read_env_file, read_source

    spec = getattr(args, "from_command", None)
    extra = list(getattr(args, "launch_argv", None) or [])
    if spec is None:
        if extra:
            given = list(getattr(args, "given_argv", None) or [])
            at = given.index(extra[0]) if extra[0] in given else -1
            before = given[at - 1] if at > 0 else ""
            if before.startswith("--") and extra[0].lower() in ("true", "false", "yes", "no", "on", "off", "1", "0"):
                # a value after a switch (--vendor-library false): the switch takes none (a new user's trial)
                name = before[2:].split("=")[0]
                raise InputError(f"unexpected word {extra[0]!r} after {before}: it is a switch and takes no value; write "
                                 f"--{name} or --no-{name}", file="<command line>", field=name.replace("-", "_"))
            raise InputError(f"unexpected words {' '.join(extra)[:60]!r}"
                             + (f" (after {before})" if before else "")
                             + ": give --from-command -- <the engine's launch line> to read an engine's launch, or fix the "
                             "word", file="<command line>", field="from_command")
        return None
    if getattr(args, "deployment", None):
        raise InputError("give --deployment or --from-command, not both", file="<command line>", field="from_command")
    if spec == "--":
        if not extra:
            raise InputError("--from-command: give the line (quoted), @FILE, - or the argv after --", file="<command line>",
                             field="from_command")
        line: Any = extra
        where = LINE
        base = Path.cwd()
    else:
        if extra:
            raise InputError(f"--from-command {spec[:40]!r} and words after it: give one launch line", file="<command line>",
                             field="from_command")
        line, where = read_source(spec)
        # relative paths of a line read from a file are the working directory's, as the shell that runs the file reads
        # them (not the file's folder: a new user's eleventh trial)
        base = Path.cwd()
    env: dict[str, str] = {}
    shell: dict[str, str] = {}
    this_machine = getattr(args, "arch", None) in (None, "auto") and getattr(args, "gpu", None) is None
    if getattr(args, "shell_env", False) or this_machine:
        shell.update(os.environ)
    if getattr(args, "env_file", None):
        env.update(read_env_file(args.env_file))
    launch = from_command(line, env, engine_version=getattr(args, "engine_version", None), base_dir=base,
                          model_config=getattr(args, "model_config", None), where=where, shell=shell)
    args.launch = launch
    return launch


def _declared(report: Any, engine: str) -> str | None:
    """The version of ``engine`` the report's deployment declares or this machine has (``engine_version``, ``packages``,
    detection: the report's environment), or None: an emitted line is written for it (not for the newest release the
    facts assume)."""
    from .catalog import default_catalog

    pkg = default_catalog().engine_package(engine)
    if pkg is None:
        return None
    state, found = report.environment.package(pkg.name, pkg.module)
    return found if state == "present" and found not in (None, "unknown") else None


def emit_text(args: argparse.Namespace, report: Any) -> str:
    """The emitted launch script of ``report``'s plan (``plan --emit``), told what the engine picks itself (the report's
    ``engine_choices``). Raises :class:`~moe_select.launch_emit.EmitError`."""
    from .launch_emit import emit

    choice = next((c for c in report.engine_choices if c.engine == args.emit), None)
    # what the engine picks with no runner option: its prediction for runner auto (for an asked runner the prediction
    # is the asked one, which presumes the option)
    auto = report.deployment.runner == "auto" and choice is not None
    return emit(report.plan, args.emit, engine_version=getattr(args, "engine_version", None) or _declared(report, args.emit),
                launch=getattr(args, "launch", None), predicted=choice.runner if auto and choice is not None else None).script()
