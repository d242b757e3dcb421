"""``moe-select``: explain, plan, check, run, schemas.

Exit codes: 0 planned / clean / within tolerance; 1 refused / lint findings / error above tolerance;
2 invalid input (the message names file, line and field).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import re
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from .errors import InputError, MoeSelectError, ResolveError

DEPLOYMENT_FLAGS = ("gpu", "arch", "quant", "model_config", "engine", "phase", "max_tokens_per_rank", "decode_tokens_per_rank",
                    "tp", "ep", "dp", "a2a", "a2a_mode", "a2a_capacity", "runner", "nvcc", "cuda", "engine_version")


def _given_once(action: type[argparse.Action]) -> type[argparse.Action]:
    """``action`` refusing a second occurrence of its option on one command line (``--tp 8 --tp 4``, ``--cuda-graph
    --no-cuda-graph``): an error naming both, exit 2, as a duplicate key of a deployment file is an error; never the last
    one silently (a new user's trial, 2026-12-04)."""

    class Once(action):  # type: ignore[valid-type,misc]
        def __call__(self, parser, namespace, values, option_string=None):
            seen = getattr(namespace, "_given_once", None)
            if seen is None:
                seen = {}
                namespace._given_once = seen
            if self.dest in seen:
                raise argparse.ArgumentError(self, f"given twice ({seen[self.dest]} and {option_string}): give it once")
            seen[self.dest] = option_string
            super().__call__(parser, namespace, values, option_string)

    Once.__name__ = f"Once{action.__name__}"
    return Once


def _add_deployment_flags(p: argparse.ArgumentParser) -> None:
    from .vocab import ENGINES, INSTALL_ENGINE, PHASES_OF

    g = p.add_argument_group("deployment (a file, flags, or both: flags override the file's keys)")
    add = g.add_argument

    def once(*names: str, **kw: Any) -> Any:
        """``add_argument`` with a single-occurrence action (store, BooleanOptionalAction, store_true)."""
        action = kw.pop("action", None)
        if action is None:
            kw["action"] = _given_once(argparse._StoreAction)
        elif action is argparse.BooleanOptionalAction:
            kw["action"] = _given_once(argparse.BooleanOptionalAction)
        elif action == "store_true":
            kw["action"] = _given_once(argparse._StoreTrueAction)
        else:
            kw["action"] = action
        return add(*names, **kw)

    g.add_argument = once  # type: ignore[method-assign]
    g.add_argument("--deployment", "-d", metavar="FILE", type=_given("a deployment file"), help="deployment file (YAML or JSON)")
    g.add_argument("--gpu", help="GPU product name: H200, B300, RTX PRO 6000, T4, MI300X, ... (unknown: give --arch)")
    g.add_argument("--arch", help="architecture: sm<major><minor> (sm75, sm90, sm121, sm130, ...), gfx<target> (gfx90a, "
                   "gfx942, gfx1201, ...), cpu, or auto (this machine); an undeclared one is judged, not refused")
    g.add_argument("--quant", help="a format with a row in backends/formats.yaml (bf16, fp8_block, mxfp4, int4_w4a16, ...), "
                   "auto (another name is judged: no fact runs it)")
    g.add_argument("--model-config", dest="model_config", metavar="PATH", type=_given("a checkpoint folder or its config.json"), help="Hugging Face checkpoint folder or its config.json")
    g.add_argument("--model", metavar="K=V,...", type=_given("the model shape as K=V,..."), help="model shape, e.g. num_experts=128,top_k=8,hidden_size=2048,moe_intermediate_size=768,activation=silu,routing=renormalize")
    g.add_argument("--engine", help=f"{', '.join(ENGINES)}, or any (default: eligible where at least one of those serving "
                   f"engines runs it), or {INSTALL_ENGINE} (this install's own adapters, what resolve builds)")
    g.add_argument("--phase", help=f"{', '.join(PHASES_OF)} (default both)")
    g.add_argument("--max-tokens-per-rank", dest="max_tokens_per_rank", type=int,
                   help="most tokens one rank passes to the MoE layer in one forward (default per phase)")
    g.add_argument("--decode-tokens-per-rank", dest="decode_tokens_per_rank", type=int,
                   help="tokens one rank passes to the MoE layer in one decode forward: the decode CUDA-graph batch x tokens "
                   "per request (default: max-tokens-per-rank of a decode-only deployment, else not checked)")
    g.add_argument("--tp", type=int)  # range checked by the Deployment model (file:line-style errors)
    g.add_argument("--ep", type=int)
    g.add_argument("--dp", type=int, help="attention data-parallel size (default: not given, and not checked)")
    g.add_argument("--shared-expert-fusion", dest="shared_expert_fusion", action=argparse.BooleanOptionalAction, default=None,
                   help="the shared experts run as extra expert slots of the MoE layer (SGLang's fusion)")
    g.add_argument("--a2a", help="none, or an all-to-all backend of the capability files (moe-select matrix lists them)")
    g.add_argument("--a2a-mode", "--deepep-mode", dest="a2a_mode", help="normal, low_latency, auto")
    g.add_argument("--a2a-capacity", dest="a2a_capacity", type=int,
                   help="the all-to-all buffer's tokens per rank, as the engine's variable sets it (the a2a file's capacity "
                   "names it; default: the engine's default)")
    g.add_argument("--runner", help="auto or a runner name")
    g.add_argument("--activation-precision", dest="activation_precision", metavar="PRECISION",
                   help="the experts' activation precision asked of the engine (quant_config.activation_precision: bf16 for "
                   "W4A16, fp8_token for W4A8, mxfp8, ...; default: each runner's own)")
    g.add_argument("--dispatch-precision", dest="dispatch_precision", metavar="PRECISION|KIND=PRECISION,...",
                   help="the precision the all-to-all sends activations in (auto, a precision for every MoE layer kind, or "
                   "per layer kind: main=nvfp4,mtp=bf16; default auto: the engine's choice per layer)")
    g.add_argument("--cuda-graph", dest="cuda_graph", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--vendor-library", dest="vendor_library", action=argparse.BooleanOptionalAction, default=None,
                   help="the engine's switch for the GPU vendor's kernel library (its variable: backends/engines/<engine>.yaml, means vendor_library; default: not "
                   "given, so facts that depend on it leave their runner unverified)")
    g.add_argument("--require-adapter", dest="require_adapter", action="store_true", default=None,
                   help=f"only what this install's adapters run: plan for engine {INSTALL_ENGINE} (with a serving "
                   f"--engine: refuse, no_adapter, a candidate this install cannot run that way)")
    g.add_argument("--strict", dest="strict", action="store_true", default=None,
                   help="refuse a plan that is only unverified (no fact either way for some part; reason unverified)")
    g.add_argument("--nvcc", help="nvcc version of the target machine, e.g. 12.8")
    g.add_argument("--cuda", help="CUDA runtime version of the target machine")
    g.add_argument("--package", action="append", default=[], metavar="NAME=VERSION",
                   help="declare a package of the target machine (NAME=none: absent); repeatable")
    g.add_argument("--prebuilt", action="append", default=[], metavar="PACKAGE=true|false",
                   help="declare whether a JIT package's kernels are prebuilt on the target machine; repeatable")
    g.add_argument("--rules", action="append", default=[], metavar="DIR", type=_given("a rules folder or file"), help="operator rules directory or file (repeatable; also $MOE_SELECT_RULES)")
    g.add_argument("--backends", action="append", default=[], metavar="DIR", type=_given("a capability folder"),
                   help="operator capability folder (runner files, a2a/*.yaml; repeatable; also $MOE_SELECT_BACKENDS)")


def _model_flag(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    parts = [s.strip() for s in text.split(",")]
    if parts and not parts[-1]:      # one trailing comma is harmless
        parts.pop()
    for part in parts:
        if not part:   # an empty item (a,,b): refused as the README says, never skipped (a ninth new user's trial)
            raise InputError(f"--model: an empty item in {text!r} (two commas in a row, or a leading comma)",
                             file="<flags>", field="model")
        if "=" not in part:
            raise InputError(f"--model: {part!r} is not KEY=VALUE", file="<flags>", field="model")
        k, v = (s.strip() for s in part.split("=", 1))
        if not k or not v:
            raise InputError(f"--model: {part!r} has an empty {'key' if not k else 'value'}", file="<flags>",
                             field=f"model.{k}" if k else "model")
        if k in out:  # as duplicate keys in a deployment file: refused, never the last one silently
            raise InputError(f"--model: {k} is given twice", file="<flags>", field=f"model.{k}")
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def _deployment(args: argparse.Namespace, extra: dict[str, Any] | None = None, *, base_data: dict[str, Any] | None = None,
                base_file: str | None = None):
    """The deployment of ``args`` (a launch line, a ``--deployment`` file, or flags; flags override either) and the
    folder relative paths in it are read from. ``base_data``: a recorded deployment (``tune --check``'s file) that the
    flags override when no launch line or deployment file is given, named ``base_file`` in messages."""
    from .deployment import Deployment
    from .errors import Issue
    from .yamlio import MarkedDict, load_file, validate

    flags: dict[str, Any] = {k: getattr(args, k) for k in DEPLOYMENT_FLAGS if getattr(args, k, None) is not None}
    for k in ("cuda_graph", "vendor_library", "require_adapter", "shared_expert_fusion", "strict"):
        if getattr(args, k, None) is not None:
            flags[k] = getattr(args, k)
    if getattr(args, "prebuilt", None):
        pre: dict[str, Any] = {}
        for item in args.prebuilt:
            name, _, val = item.partition("=")
            if val.strip().lower() not in ("true", "false") or not name.strip():
                raise InputError(f"--prebuilt {item!r}: use PACKAGE=true or PACKAGE=false", file="<flags>", field="prebuilt")
            pre[name.strip()] = val.strip().lower() == "true"
        flags["prebuilt"] = pre
    if getattr(args, "model", None):
        flags["model"] = _model_flag(args.model)
    if getattr(args, "dispatch_precision", None):
        flags["dispatch_precision"] = _dispatch_flag(args.dispatch_precision)
    if getattr(args, "package", None):
        pk: dict[str, Any] = {}
        for item in args.package:
            if "=" not in item:
                raise InputError(f"--package {item!r}: use NAME=VERSION or NAME=none", file="<flags>", field="packages")
            name, ver = (x.strip() for x in item.split("=", 1))
            if not ver:
                raise InputError(f"--package {item!r}: give a version, or NAME=none for not installed", file="<flags>",
                                 field="packages")
            pk[name] = None if ver.lower() in ("none", "null") else ver
        flags["packages"] = pk
    flags.update(extra or {})
    from .launch_cli import cli_launch

    launch = cli_launch(args)  # --from-command: the engine's launch line is the base, flags override it
    used = getattr(args, "_given_once", None) or {}  # dest -> the option string given (--no-cuda-graph for false)

    def flag_of(k: str) -> str:
        return str(used.get(k) or f"--{k.replace('_', '-')}")

    if launch is not None:
        data, file, base = launch.marked(), "<launch line>", Path.cwd()
        for k in flags:
            if k in data:
                data.key_sources[k] = f"command line ({flag_of(k)}), over {data.key_sources[k]}"
    elif args.deployment:
        file = str(args.deployment)
        data = load_file(args.deployment, kind="deployment file")  # read once; the file's keys keep their lines
        if not isinstance(data, MarkedDict):
            raise InputError(Issue(file, getattr(data, "line", 0), "", "a deployment file holds a mapping"))
        base = Path(args.deployment).resolve().parent
        if "a2a_mode" in flags:
            data.pop("deepep_mode", None)  # --a2a-mode overrides the file's deepep_mode (SGLang's name for it)
    elif base_data is not None:
        file = base_file or "<recorded deployment>"
        data, base = MarkedDict(base_data), Path(file).resolve().parent if base_file else Path.cwd()
        data.file = file
        data.key_sources.update({k: f"{file} (recorded deployment)" for k in base_data})
    else:
        if not flags:
            raise InputError("give --deployment FILE or deployment flags (see moe-select explain --help)", file="<flags>")
        data, file, base = MarkedDict(), "<command line>", Path.cwd()
        data.file = file
    for k, v in flags.items():
        data[k] = v
        if not str(data.key_sources.get(k, "")).startswith("command line"):
            data.key_sources[k] = f"command line ({flag_of(k)})"
    # --gpu and --arch name the machine: one given alone replaces the base's other key (a file's gpu: L40S under --arch
    # sm121 is not a contradiction of the user's, it is the file's machine overridden), and the understood key says so
    for k, other in (("arch", "gpu"), ("gpu", "arch")):
        if k in flags and other not in flags and other in data:
            was = data.pop(other)
            data.key_sources[k] = f"{data.key_sources[k]}; replaces the base's {other} {was}"
    if getattr(args, "activation_precision", None):  # one key of quant_config: the file's other keys are kept
        qc = data.get("quant_config")
        if qc is not None and not isinstance(qc, dict):
            raise InputError(Issue(file, data.key_lines.get("quant_config", 0), "quant_config",
                                   "quant_config is not a mapping, so --activation-precision cannot be added to it"))
        merged = MarkedDict(qc or {})
        if isinstance(qc, MarkedDict):  # the file's keys keep their lines
            merged.file, merged.line = qc.file, qc.line
            merged.key_lines, merged.key_sources = dict(qc.key_lines), dict(qc.key_sources)
        else:
            merged.file = file
        merged["activation_precision"] = args.activation_precision
        merged.key_sources["activation_precision"] = "command line (--activation-precision)"
        data["quant_config"] = merged
        if qc is None:
            data.key_sources["quant_config"] = "command line (--activation-precision)"
    return validate(Deployment, data, file), base


def _dispatch_flag(text: str) -> str | dict[str, str]:
    """``--dispatch-precision``: one precision (every MoE layer kind), or ``KIND=PRECISION,...`` (per layer kind)."""
    if "=" not in text:
        return text.strip()
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        kind, sep, value = (x.strip() for x in part.partition("="))
        if not sep or not kind or not value:
            raise InputError(f"--dispatch-precision: {part!r} is not KIND=PRECISION", file="<flags>", field="dispatch_precision")
        if kind in out:
            raise InputError(f"--dispatch-precision: layer kind {kind} is given twice", file="<flags>", field="dispatch_precision")
        out[kind] = value
    return out


def _explain(args: argparse.Namespace, extra: dict[str, Any] | None = None):
    from .selector import explain

    dep, base = _deployment(args, extra)
    launch = getattr(args, "launch", None)
    if launch is not None:
        import os

        launch.check_detection(dep, os.environ)
    return explain(dep, base_dir=base, rules_dirs=args.rules, backends_dirs=getattr(args, "backends", []),
                   engine_env=dict(launch.env) if launch is not None else None,
                   measurements=getattr(args, "measurements", None) or None)


def _add_measurements_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--measurements", action="append", default=[], metavar="FILE|DIR",
                   type=_given("a measurement file or a folder of them"),
                   help="measurement tables of moe-select tune (repeatable): where one applies (layer and machine keys), "
                        "prefer: measured rules choose by it, one runner per token range (with no such rule in the rules: "
                        "before every rule); engine moe_select only")


def cmd_explain(args: argparse.Namespace) -> int:
    """Why this plan, why not the others. ``--json``: the machine-readable report; ``--brief``: its one-line summary."""
    report = _explain(args)
    launch = getattr(args, "launch", None)
    if args.json:
        print(json.dumps({**report.to_dict(), **({"launch": launch.to_dict()} if launch is not None else {})}, indent=2))
    elif getattr(args, "brief", False):
        print(report.summary())
    else:
        if launch is not None:
            print(launch.render_text() + "\n")
        print(report.render_text())
        print()
        print(report.summary())
    _warn_unverified(report)
    if _fails_at_startup(launch, report):
        return 1
    return 0 if report.plan else 1


def _fails_at_startup(launch: Any, report: Any = None, emitting: bool = False) -> bool:
    """True, with one line on stderr, when the launch line as written is refused by the engine at startup (its
    ``engine_error`` findings, or a runner option it names where the engine's quantization method asserts auto: the
    plan's ``runner_option_auto``): the report still plans the deployment it describes, and ``plan --emit`` writes the
    line without them; ``explain`` and ``plan`` exit 1."""
    errors = [f for f in (launch.findings if launch is not None else []) if f.kind == "engine_error"]
    plan = getattr(report, "plan", None)
    if launch is not None and plan is not None and launch.engine in plan.runner_option_auto \
            and str(plan.deployment.provenance.get("runner", "")).startswith("launch line"):
        print(f"moe-select: the launch line names the runner ({plan.deployment.provenance['runner']}), and {launch.engine} "
              f"wants its runner option at auto here (a named runner fails at load or is ignored): "
              f"{plan.runner_option_auto[launch.engine]}; leave the option out (plan --emit writes the line without it)",
              file=sys.stderr)
        return True
    close = launch.misspelt() if launch is not None else []
    if close:
        # (plan --emit writes the line, with a comment on the flag: a warning there, not a refusal)
        strict = bool(getattr(getattr(report, "deployment", None), "strict", False)) and not emitting
        print(f"moe-select: {'--strict: ' if strict else 'warning: '}the launch line gives "
              + "; ".join(f"{tok} (not in the {launch.engine} table; did you mean {flag}, its {means}?)" for tok, flag, means in close)
              + ": if misspelt, the engine's parser refuses it; the plan is made without it"
              + (" (refused under --strict)" if strict else ""), file=sys.stderr)
        if strict:
            return True
    if errors:
        print(f"moe-select: the launch line fails at startup as written ({len(errors)} engine error(s): "
              f"{'; '.join(f.token for f in errors)[:200]}); the plan is for the deployment it describes "
              "(plan --emit writes the line without them)", file=sys.stderr)
    return bool(errors)


def _warn_unverified(report: Any) -> None:
    """One warning line on stderr for a plan whose evidence is ``unverified`` (exit stays 0; ``--strict`` refuses)."""
    p = report.plan
    if p is not None and p.evidence == "unverified":
        n = len(p.unknowns) + sum(len(k.unknowns) for k in p.layers)
        print(f"moe-select: warning: the plan ({p.runner}) is unverified: no fact decides {n} point(s) (explain lists "
              "them); --strict refuses it", file=sys.stderr)


def cmd_plan(args: argparse.Namespace) -> int:
    """Write the plan as JSON (``-o FILE``, default stdout); refuse with every reason."""
    report = _explain(args)
    if report.plan is None:
        print(report.render_text(), file=sys.stderr)
        print(report.summary(), file=sys.stderr)
        return 1
    if getattr(args, "emit", None):
        from .launch_cli import emit_text

        text = emit_text(args, report)
    else:
        text = report.plan.to_json()
    _warn_unverified(report)
    if args.output and args.output != "-":
        write_atomically(Path(args.output), text)
        print(f"{report.summary()}\nplan written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    # the emitted line leaves the engine errors out (its comments say so): only the plan JSON of a failing line exits 1
    emitting = bool(getattr(args, "emit", None))
    return 1 if _fails_at_startup(getattr(args, "launch", None), report, emitting) and not emitting else 0


#: Most symbolic links followed from ``-o``'s path (Linux's MAXSYMLINKS).
MAX_LINKS = 40


def _not_protected(what: str, path: Path, st: Any, folder: Path, kernel: str) -> str | None:
    """Why ``path`` (a link, a file or a FIFO of owner ``st.st_uid``) in ``folder`` must not be followed or
    written, as Linux's ``fs.protected_*`` sysctls decide (``kernel`` names the one), or None: in a folder
    that is sticky and world-writable (``/tmp``), only what the caller or the folder's owner owns."""
    import os
    import stat

    if not hasattr(os, "geteuid"):  # pragma: no cover - not POSIX
        return None
    fst = os.stat(folder)
    if fst.st_mode & (stat.S_ISVTX | stat.S_IWOTH) != stat.S_ISVTX | stat.S_IWOTH or st.st_uid in (fst.st_uid, os.geteuid()):
        return None
    return (f"{path} is {what} owned by uid {st.st_uid} in the sticky, world-writable folder {folder} (owned by uid "
            f"{fst.st_uid}): moe-select follows or replaces it only when you or the folder's owner own it, as the "
            f"kernel's {kernel} does; remove it or write elsewhere")


def _output_target(path: Path) -> Path:
    """``path`` with the symbolic links of its last component followed (the folders' links are the kernel's
    to follow), each only as Linux's ``protected_symlinks`` would: owned by the caller or by the owner of the
    sticky, world-writable folder it is in (issue 17: ``-o`` through another user's link in /tmp replaced
    the link's target). Raises :class:`MoeSelectError` naming the link otherwise, or after
    :data:`MAX_LINKS` links."""
    import os
    import stat

    cur = path
    for _ in range(MAX_LINKS + 1):
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return cur
        except OSError as exc:
            raise MoeSelectError(f"cannot write {path}: {exc.strerror or exc}") from None
        if not stat.S_ISLNK(st.st_mode):
            return cur
        try:
            why = _not_protected("a symbolic link", cur, st, cur.parent, "protected_symlinks")
            link = os.readlink(cur)
        except OSError as exc:
            raise MoeSelectError(f"cannot write {path}: {exc.strerror or exc}") from None
        if why:
            raise MoeSelectError(f"cannot write {path}: {why}")
        cur = Path(link) if os.path.isabs(link) else cur.parent / link  # resolved by the OS, ".." after the link's folder
    raise MoeSelectError(f"cannot write {path}: more than {MAX_LINKS} symbolic links")


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename, so a reader
    (another rank) sees the old file or the new one, never half of one; on a full disk the old file is
    left as it was. An existing file keeps its permission bits (and, where the caller may set them, its
    owner and group); a new one gets ``0666 & ~umask``, as a plain ``open()`` would. A symbolic link keeps
    pointing at the file, which is replaced the same way; a link, file or FIFO in a sticky world-writable
    folder (``/tmp``) is followed or written only when the caller or the folder's owner owns it, as Linux's
    ``protected_symlinks`` / ``protected_regular`` / ``protected_fifos`` decide (whatever the sysctls say
    on this machine). A device or a FIFO (``/dev/null``, ``/dev/stdout``, a pipe) is written to as it is,
    never replaced. Raises :class:`InputError` when ``path`` is a folder or its folder does not exist,
    :class:`MoeSelectError` when a link, file or FIFO is refused as above, when the existing file is not
    writable by the caller, or when the write fails (the message says the old file is unchanged)."""
    import os
    import stat
    import tempfile

    from .errors import Issue

    target = _output_target(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise MoeSelectError(f"cannot write {path}: {exc.strerror or exc}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputError(Issue(str(path), 0, "output", "is a folder: give the plan file's path, e.g. plan.json"))
    folder = target.parent
    if st is not None and (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        kind = ("a file", "protected_regular") if stat.S_ISREG(st.st_mode) else ("a FIFO", "protected_fifos")
        try:
            why = _not_protected(kind[0], target, st, folder, kind[1])
        except OSError as exc:
            raise MoeSelectError(f"cannot write {path}: {exc.strerror or exc}") from None
        if why:
            raise MoeSelectError(f"cannot write {path}: {why}")
    if st is not None and not stat.S_ISREG(st.st_mode):
        try:
            with open(target, "w", encoding="utf-8") as out:
                out.write(text)
        except OSError as exc:
            raise MoeSelectError(f"cannot write {path}: {exc.strerror or exc}") from None
        return
    if st is not None and not os.access(target, os.W_OK):
        raise MoeSelectError(f"cannot write {path}: {target} is not writable by you (mode "
                             f"{stat.S_IMODE(st.st_mode):04o}); {path.name} was left unchanged")
    if not folder.is_dir():
        raise InputError(Issue(str(path), 0, "output", f"the folder {str(folder)!r} does not exist"))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise MoeSelectError(f"cannot write {path}: {exc.strerror or exc}; {path.name} was left unchanged") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            if st is not None:
                try:  # the old file's owner and group, where the caller may give them (root; a group it is in)
                    if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                        os.fchown(f.fileno(), st.st_uid, st.st_gid)
                except (OSError, AttributeError):
                    pass
                os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode) & 0o777)  # after chown, which may clear bits
            else:
                umask = os.umask(0)
                os.umask(umask)
                os.fchmod(f.fileno(), 0o666 & ~umask)  # as a plain open() would create it: other ranks may read it
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise MoeSelectError(f"cannot write {path}: {exc.strerror or exc}; {path.name} was left unchanged") from None


def cmd_check(args: argparse.Namespace) -> int:
    """Lint rule files (and capability files): schema, unknown names, duplicate ids, dead rules."""
    from .lint import check

    findings, catalog = check(args.paths, backends_dirs=args.backends)
    for f in findings:
        print(f)
    n_rules = len(catalog.rules)
    count = {s: sum(f.severity == s for f in findings) for s in ("error", "warning", "note")}
    errors = count["error"]
    print(f"checked {len(catalog.rule_files)} rule files ({n_rules} rules) and {len(catalog.runners)} runner + "
          f"{len(catalog.a2a)} a2a capability files: {errors} error(s), {count['warning']} warning(s), {count['note']} note(s)")
    return 1 if errors else 0


def cmd_matrix(args: argparse.Namespace) -> int:
    """The capability matrix (runner x arch x format x a2a, with engines, versions and sources, and the
    selector's verdict per runner x arch x format x engine with its counts): print it (Markdown, or
    ``--json``), ``--write`` it under ``--root`` (docs/matrix.md, docs/matrix.json and the README's block of
    counts), or ``--check`` that the committed files and the README's counts match the facts (exit 1 naming
    each file that drifts and each count that differs)."""
    from .catalog import load_catalog
    from .matrix import build, drift, names_drift, readme_drift, render_json, render_markdown, write

    ignored = [v for v in ("MOE_SELECT_BACKENDS", "MOE_SELECT_RULES") if os.environ.get(v)]
    if ignored:  # the matrix documents the bundled facts (an eighth new user's trial: the variables went unsaid)
        print(f"moe-select matrix: note: {' and '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} not read: the "
              "matrix describes the bundled capability files and rules (explain and check read operator folders)",
              file=sys.stderr)

    if args.write and args.check:
        raise InputError("--write and --check exclude each other: --check compares the committed files, --write replaces them",
                         file="<command line>", field="check")
    catalog = load_catalog(use_env=False, plugins=False)
    root = Path(args.root)
    if (args.write or args.check) and not (root / "README.md").is_file():
        # the files are the repository's (docs/, the README's blocks): elsewhere --write would create a docs/ that
        # --check then still finds without its README (a fourth new user's trial went round that loop)
        raise InputError(f"{root.resolve()} is not the repository's root (no README.md there): run from the checkout's root or "
                         "give --root", file="<command line>", field="root")
    data = build(catalog)
    if args.write:
        for p in write(catalog, root, data):
            print(f"wrote {p}")
        return 0
    if args.check:
        bad = drift(catalog, root, data)
        for rel in bad:
            if not (root / rel).is_file():
                print(f"{rel}: not found under {root} (run from the repository root, or give --root): "
                      "run moe-select matrix --write to create it")
            else:
                print(f"{rel} differs from the capability files: run moe-select matrix --write")
        counts = readme_drift(data, root) + names_drift(root)
        for line in counts:
            print(f"{line}: run moe-select matrix --write")
        return 1 if bad or counts else 0
    sys.stdout.write(render_json(data) if args.json else render_markdown(data))
    return 0


def cmd_schemas(args: argparse.Namespace) -> int:
    """Write (``--write``) or check (default) the JSON Schemas against the models. With a pydantic older than
    the one whose JSON text the committed files are (:func:`moe_select.schema_gen.text_differs`), neither:
    exit 1 saying so."""
    from .schema_gen import drift, text_differs, write

    target = Path(args.dir) if args.dir else None
    why = text_differs()
    if why:
        print(f"moe-select schemas: {why}", file=sys.stderr)
        return 1
    if args.write:
        for p in write(target):
            print(f"wrote {p}")
        return 0
    bad = drift(target)
    for name in bad:
        print(f"{name} differs from the models: run moe-select schemas --write")
    return 1 if bad else 0


def cmd_run(args: argparse.Namespace) -> int:
    """Plan for this machine, resolve, build one MoE layer of a real model and run it (see run.py)."""
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA device is available on this machine (torch.cuda.is_available() is False)",
                             file="<command line>", field="device")
    if args.json and args.nproc == 1:
        raise InputError("--json prints the result of a --nproc run (N > 1); a single-process run prints text",
                         file="<command line>", field="json")
    if args.nproc > 1:
        from .harness.launch import run_distributed

        ignored = [f"--{k.replace('_', '-')}" for k, default in (("quant", None), ("runner", "auto"), ("rules", []),
                   ("cuda_graph", None), ("repeat", 3), ("device", None), ("layer", None)) if getattr(args, k) != default]
        if ignored:
            raise InputError(f"--nproc runs on the CPU with the checkpoint's format, runner auto and the bundled rules: "
                             f"{', '.join(ignored)} cannot be honoured with it", file="<command line>", field="nproc")

        tp = args.tp or args.nproc
        if tp != args.nproc:
            raise InputError(f"--nproc {args.nproc} runs one rank per process: tp must equal nproc (got --tp {tp})",
                             file="<command line>", field="tp")
        if (args.ep or 1) < 1 or tp % (args.ep or 1):
            raise InputError(f"--ep {args.ep} must divide tp {tp}: each expert is split over tp/ep ranks inside the TP group",
                             file="<command line>", field="ep")

        from .errors import SelectionError
        from .harness.run import print_refusal

        # Progress lines as each step ends: stdout with text, stderr with --json (stdout holds the JSON only).
        def say(line: str) -> None:
            print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

        try:
            result = run_distributed(model_config=args.model_config, tokens=args.tokens, nproc=args.nproc,
                                     tp=tp, ep=args.ep or 1, a2a=args.a2a or "none", seed=args.seed, say=say)
        except SelectionError as exc:  # the same summary, reasons, sources and fixes as a single-process run
            if args.json:
                print(json.dumps({"ok": False, "refused": exc.report.to_dict()}, indent=2, default=str))  # type: ignore[attr-defined]
            else:
                print_refusal(exc.report)
            return 1
        if args.json:
            print(json.dumps(result, indent=2, default=str))
        else:
            print(_render_distributed(result))
        return 0 if result.get("ok") else 1
    from .harness.run import run_layer

    return run_layer(args)


def _render_distributed(r: dict[str, Any]) -> str:
    """Text form of :func:`moe_select.harness.launch.run_distributed`'s result (the plan's line was printed
    before the ranks started, by ``say``)."""
    lines = [f"{r['nproc']} processes (gloo), tp {r['tp']}, ep {r['ep']}, a2a {r['a2a']}, token layout {r['token_layout']}, "
             f"{r['tokens']} tokens, {r['dtype']}",
             "rank  ep_rank  tp_rank  experts      intermediate  tokens      resolve_s  build_s  forward_ms"]

    def half_open(v: Any) -> str:     # [start, end) shards, as the JSON's [start, end] pairs mean them
        return f"[{v[0]}, {v[1]})" if isinstance(v, (list, tuple)) and len(v) == 2 else str(v)

    for k in r.get("ranks", []):
        if k is None:
            continue
        lines.append(f"{k['rank']:>4}  {k['ep_rank']:>7}  {k['tp_rank']:>7}  {half_open(k['experts']):<11}  "
                     f"{half_open(k['intermediate']):<12}  {half_open(k['token_range']):<10}  {k['resolve_s']:>9.2f}  "
                     f"{k['build_s']:>7.2f}  {k['forward_s'] * 1e3:>10.1f}")
    lines.append(f"max relative error vs float64 reference: {r['max_rel_error']:.2e} (tolerance {r['tolerance']:.3g}): "
                 f"{'OK' if r.get('ok') else 'TOO LARGE'}; wall {r['wall_s']:.1f} s")
    return "\n".join(lines)


def _explain_args(e: argparse.ArgumentParser) -> None:
    from .launch_cli import add_cli_flags

    _add_deployment_flags(e)
    add_cli_flags(e)
    out = e.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the report as JSON")
    out.add_argument("--brief", action="store_true",
                     help="print only the one-line summary (the runner and the rule that chose it, or the refusal's "
                          "reason codes); the exit code as without it")
    _add_measurements_flag(e)
    e.set_defaults(fn=cmd_explain)


def _plan_args(pl: argparse.ArgumentParser) -> None:
    from .launch_cli import add_cli_flags

    _add_deployment_flags(pl)
    add_cli_flags(pl, emit=True)
    pl.add_argument("-o", "--output", type=_given("the plan file's path, or - for stdout"), help="plan file (default: stdout)")
    _add_measurements_flag(pl)
    pl.set_defaults(fn=cmd_plan)


def _check_args(c: argparse.ArgumentParser) -> None:
    c.add_argument("paths", nargs="*", type=_given("a rules file or folder"),
                   help="operator rule files or directories; a directory of capability files is linted whole as an "
                        "operator capability folder (as --backends); a capability file alone is validated alone")
    c.add_argument("--backends", action="append", default=[], metavar="DIR", type=_given("a capability folder"),
                   help="an operator capability folder (runner files, a2a/*.yaml), linted with the bundled files")
    c.set_defaults(fn=cmd_check)


def _run_args(r: argparse.ArgumentParser) -> None:
    r.add_argument("--model-config", dest="model_config", required=True, metavar="PATH",
                   type=_given("a checkpoint folder or its config.json"))
    r.add_argument("--tokens", type=_positive, default=16, help="tokens to route (the float64 reference checks at most 256 of them)")
    r.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when a GPU is present")
    r.add_argument("--runner", default="auto")
    r.add_argument("--allow-jit", dest="allow_jit", action="store_true",
                   help="let a runner build its kernels at the first call (minutes); default: refuse, and with runner "
                        "auto prefer the next eligible runner that needs no build")
    r.add_argument("--quant", default=None, help="override the checkpoint's format (online quantization of a bf16 checkpoint)")
    r.add_argument("--tp", type=int, default=None)
    r.add_argument("--ep", type=int, default=None)
    r.add_argument("--a2a", default=None)
    r.add_argument("--nproc", type=_positive, default=1, help="run over N CPU processes (gloo), tp/ep across them")
    r.add_argument("--seed", type=_seed, default=0)
    r.add_argument("--repeat", type=_positive, default=3, help="timed forwards after one warm-up")
    r.add_argument("--cuda-graph", dest="cuda_graph", action=argparse.BooleanOptionalAction, default=None)
    r.add_argument("--layer", default=None, metavar="KIND",
                   help="the MoE layer kind to build: main (default) or one of the checkpoint's other kinds (mtp, ...)")
    r.add_argument("--rules", action="append", default=[], metavar="DIR", type=_given("a rules folder or file"))
    r.add_argument("--json", action="store_true", help="with --nproc: print the result as JSON")
    r.set_defaults(fn=cmd_run)


def cmd_tune(args: argparse.Namespace) -> int:
    """Time every candidate runner on this machine per token count and write the measurements (or ``--check`` a file)."""
    from .tune import cli_tune

    given = any(getattr(args, k, None) not in (None, [], False) for k in (*DEPLOYMENT_FLAGS, "deployment", "model", "from_command",
                                                                          "cuda_graph", "shared_expert_fusion", "package", "prebuilt"))
    return cli_tune(args, _deployment, given, write_atomically)


def _tune_args(t: argparse.ArgumentParser) -> None:
    from .launch_cli import add_cli_flags

    _add_deployment_flags(t)
    add_cli_flags(t)
    g = t.add_argument_group("tune (README, 'Tune')")
    g.add_argument("--tokens", metavar="N,N,...", help="token counts to time (default: powers of two up to max_tokens_per_rank, "
                   "that count, decode_tokens_per_rank and a launch line's CUDA-graph capture sizes)")
    g.add_argument("--budget-s", dest="budget_s", type=float, default=None, help="seconds of sampling per point (default 1)")
    g.add_argument("--target", type=float, default=None, help="relative half-width of each point's 95%% interval of the median "
                   "to reach (default 0.02)")
    g.add_argument("--drift-threshold", dest="drift_threshold", type=float, default=None,
                   help="relative change of a median that --check calls a drift (default 0.10, or the file's)")
    g.add_argument("-o", "--output", type=_given("the measurement file's path, or - for stdout"),
                   help="measurement file (default: stdout, the table on stderr)")
    g.add_argument("--plot", metavar="PNG", type=_given("the plot's path"), help="write a plot (needs matplotlib: the plot extra)")
    g.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when a GPU is present")
    g.add_argument("--allow-jit", dest="allow_jit", action="store_true", help="also time runners whose first call builds kernels")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar on stderr (default: on a terminal only)")
    g.add_argument("--check", metavar="FILE", type=_given("a measurement file"),
                   help="re-measure each runner of FILE at its smallest, middle and largest token count and report drift "
                   "(exit 1 when a median moved more than the threshold; 2 on another machine or layer)")
    g.add_argument("--json", action="store_true", help="with --check: also print the points as JSON")
    t.set_defaults(fn=cmd_tune)


def _matrix_args(mx: argparse.ArgumentParser) -> None:
    mx.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    mx.add_argument("--write", action="store_true", help="write docs/matrix.md, docs/matrix.json and README.md's counts under --root")
    mx.add_argument("--check", action="store_true", help="exit 1 when the committed files or README.md's counts differ from the "
                    "facts (silent, exit 0, when they agree)")
    mx.add_argument("--root", default=".", type=_given("the repository root"), help="the repository root (default: the current folder)")
    mx.set_defaults(fn=cmd_matrix)


def _schemas_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("--write", action="store_true", help="rewrite the schema files from the models (without it: check them, "
                   "silent with exit 0 when they agree, exit 1 naming each file that differs)")
    s.add_argument("--dir", default=None, type=_given("a schemas folder"), help="schemas directory (default: the installed one)")
    s.set_defaults(fn=cmd_schemas)


#: Every subcommand: its help line and what adds its arguments.
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "explain": ("why this plan, why not the others", _explain_args),
    "plan": ("write the plan as JSON", _plan_args),
    "check": ("lint rule files (default: the bundled ones)", _check_args),
    "run": ("build one MoE layer of a real model config on this machine and run it", _run_args),
    "tune": ("time every candidate runner on this machine per token count; --check a measurement file", _tune_args),
    "matrix": ("the capability matrix: print, --write or --check it", _matrix_args),
    "schemas": ("check (default; silent when up to date) or --write the JSON Schemas", _schemas_args),
}


def version_text() -> str:
    """What ``moe-select --version`` prints: the moe-select version, the bundled fact files' version (the
    :func:`~moe_select.plans.facts_digest` of the capability and rule files this install holds, hashed as a
    catalog hashes them) and the ``schema_version`` of each file format this install reads, the plan
    schema version, and the versions of Python and of the planning dependencies. A plan records the first
    three (``written_by``, :class:`~moe_select.plans.WrittenBy`)."""
    import hashlib
    import platform
    from typing import get_args

    import packaging
    import pydantic
    import yaml

    from . import __version__
    from .capability import A2ACapability, CommonFacts, PackageTable, RunnerCapability
    from .catalog import bundled_dirs
    from .plans import PLAN_SCHEMA_VERSION, facts_digest
    from .policy import RuleFile

    bdir, rdir = bundled_dirs()
    paths = {**{f"backends/{p.name}": p for p in bdir.glob("*.yaml")}, **{f"backends/a2a/{p.name}": p for p in bdir.glob("a2a/*.yaml")},
             **{f"rules/{p.name}": p for p in rdir.glob("*.yaml")}}
    files = {name: hashlib.sha256(p.read_bytes()).hexdigest() for name, p in paths.items()}

    def reads(model: type[pydantic.BaseModel]) -> str:
        return "/".join(str(v) for v in get_args(model.model_fields["schema_version"].annotation))

    formats = ", ".join(f"{what} {reads(m)}" for what, m in (("runner", RunnerCapability), ("a2a", A2ACapability),
                                                                ("common", CommonFacts), ("packages", PackageTable), ("rules", RuleFile)))
    return (f"moe-select {__version__}\n"
            f"fact files {facts_digest(files)} ({len(files)} bundled capability and rule files; schema_version read: {formats})\n"
            f"plan schema_version {PLAN_SCHEMA_VERSION}\n"
            f"Python {platform.python_version()}, pydantic {pydantic.VERSION}, PyYAML {yaml.__version__}, packaging {packaging.__version__}")


class _VersionAction(argparse.Action):
    """``--version``: print :func:`version_text` (computed only when asked for) and exit 0."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: str | None = None) -> None:
        print(version_text())
        parser.exit()


class UsageError(SystemExit):
    """argparse's usage error (exit status 2) with its message and the parser's usage kept, so that :func:`main` can
    also print the ``invalid_input`` JSON for ``--json`` (a fleet trial, break55: ``--tp abc`` left stdout empty)."""

    def __init__(self, message: str, usage: str, prog: str) -> None:
        super().__init__(2)
        self.message, self.usage, self.prog = message, usage, prog


class _Parser(argparse.ArgumentParser):
    """The CLI's parser: a usage error prints what argparse prints (usage and message, on stderr) and raises
    :class:`UsageError` (a SystemExit of status 2, as argparse's own)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise UsageError(message, self.format_usage(), self.prog)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argparse parser of every subcommand (:data:`COMMANDS`), or, given ``command`` (one of them), of
    that one only: parsing its arguments gives the same result, without building the other parsers (an
    argparse parser costs about a millisecond: gettext looks for a message catalog at each message)."""
    p = _Parser(prog="moe-select", description="Choose, check and build the MoE kernel backend of a deployment.")
    p.add_argument("--version", action=_VersionAction, help="the moe-select, fact-file and schema versions, and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")  # usage names them all
    for name, (help_line, add_arguments) in COMMANDS.items():
        if command is None or name == command:
            add_arguments(sub.add_parser(name, help=help_line))
    return p


def _int_in(lo: int, hi: int, what: str):
    """argparse type: an integer with ``lo <= value < hi``; ``what`` names the range in the error."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= value < hi:
            raise argparse.ArgumentTypeError(f"{value} is not {what}")
        return value
    return parse


def _given(what: str) -> Callable[[str], str]:
    """argparse type of a path-like flag: the value as given, refused when empty (issue 17: ``--rules ""``
    meant the current folder, ``--deployment ""``, ``--model ""`` and ``-o ""`` were ignored). argparse
    exits 2 naming the flag: ``argument --rules: is empty: give a rules folder or file``."""
    def parse(text: str) -> str:
        if text == "":
            raise argparse.ArgumentTypeError(f"is empty: give {what}")
        return text
    return parse


_positive = _int_in(1, 2**62, "a positive integer")
_seed = _int_in(-(2**62) + 1, 2**62, "inside (-2**62, 2**62)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``moe-select`` console script."""
    import gc

    if argv is None:  # the console script: a closed pipe (| head) ends quietly
        import signal

        if hasattr(signal, "SIGPIPE"):
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    given = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser(given[0] if given and given[0] in COMMANDS else None).parse_args(argv)
    except UsageError as exc:   # (its usage and message are on stderr already)
        if "--json" in given:   # README: exit 2 with the invalid_input JSON on stdout, whatever found the input bad
            m = re.match(r"argument ([^:]+): ", exc.message)
            print(json.dumps({"status": "invalid_input", "issues": [
                {"file": "<command line>", "line": 0, "field": m.group(1) if m else "", "message": exc.message}]}, indent=2))
        raise   # SystemExit(2), as argparse exits
    args.given_argv = given          # the words as typed (messages about a stray word name the word before it)
    short = argv is None and args.command not in ("run", "tune")
    if short:
        # A planning command is a short process that makes no garbage worth collecting: no collections
        # while it imports and plans, and none at exit (gc.freeze: the interpreter's final collection
        # would walk every object pydantic created, ~25 ms). Not for `run` (torch), nor in-process callers.
        gc.disable()
        from .pydantic_plugins import skip_plugin_lookup

        skip_plugin_lookup()
    try:
        return args.fn(args)
    except InputError as exc:
        print("invalid input:", file=sys.stderr)
        for issue in exc.issues:
            print(f"  {issue}", file=sys.stderr)
        if getattr(args, "json", False):  # a JSON reader gets the issues too, not an empty stdout (eighth trial)
            print(json.dumps({"status": "invalid_input", "issues": [
                {"file": i.file, "line": i.line, "field": i.field, "message": i.message} for i in exc.issues]}, indent=2))
        return 2
    except ResolveError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except MoeSelectError as exc:
        text = str(exc)  # a selection refusal's summary already starts with the program's name
        print(text if text.startswith("moe-select: ") else f"moe-select: {text}", file=sys.stderr)
        return 1
    finally:
        if short:
            gc.freeze()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
