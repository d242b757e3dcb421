"""Regression tests for the hostile inputs of issue 7 (items 2 and 3): input -> exit code -> the reason,
naming file:line and key.

Each case writes its files into a fresh folder and runs the product as a user does: the command line
in-process (``moe_select.cli.main``) for deployments (``explain --deployment F --json``), rule and
capability files (``check F``, ``explain --rules DIR``) and model configs (``explain --model-config
DIR``), and ``moe_select.resolver.load_plan`` for plans. Every case runs under an alarm
(``HANG_SECONDS``): a read that blocks (a FIFO) fails the test instead of hanging it. ``CASES`` is also
the hostile part of ``benchmarks/fuzz_inputs.py``'s corpus.
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: ``$MOE_SELECT_TEST_TIME_SCALE`` multiplies the hang bound: the mutation run (benchmarks/mutation.py) sets it,
#: since mutmut's trampolines and call recording slow every call of the mutated module.
TIME_SCALE = float(os.environ.get("MOE_SELECT_TEST_TIME_SCALE", "1"))
#: A case that takes longer than this is a hang (the alarm interrupts a blocked read or a core spinning on one
#: input). It is a guard, not a speed target: the worst admitted files (49,000 wrong items, 49,900 nodes) take
#: about 0.5 s on the 2-core VM uncontended and 2.3 s on a loaded CI machine (2026-12-02, where a 2 s bound here
#: failed CI); their goal of 1 s is measured by benchmarks/fuzz_inputs.py, which prints each case's time.
HANG_SECONDS = 30 * TIME_SCALE
SHAPE = "model: {num_experts: 8, top_k: 2, hidden_size: 64, moe_intermediate_size: 32}\n"
DEPLOYMENT = "gpu: H200\nquant: bf16\n" + SHAPE


def bomb(levels: int = 9, width: int = 9, indent: str = "") -> str:
    """The nested-alias bomb of issue 7: ``levels`` lines, each a list of ``width`` aliases to the line
    above (9 x 9: 9**9 = 387 million strings once expanded, from nine short lines). Expanded sizes:
    a0 10 nodes, a1 91, a2 820, a3 7381, a4 66430."""
    lines = [f'{indent}a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"{indent}a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def no_hang(seconds: float = HANG_SECONDS):
    """Fail (TimeoutError) instead of hanging when the body blocks, e.g. opening a FIFO for reading."""
    if not hasattr(signal, "setitimer"):  # pragma: no cover - not POSIX
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run(argv: list[str]) -> tuple[int, str, str]:
    """``moe-select ARGV`` in-process: (exit code, stdout, stderr)."""
    from moe_select.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), no_hang():
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def plan_exit(path: Path) -> tuple[int, str, str]:
    """``load_plan(path)`` as an exit code: 0 loaded, 2 InputError (the CLI's mapping)."""
    from moe_select.errors import InputError
    from moe_select.resolver import load_plan

    try:
        with no_hang():
            load_plan(path)
    except InputError as exc:
        return 2, "", "invalid input:\n" + "\n".join(f"  {i}" for i in exc.issues)
    return 0, "", ""


def model_folder(d: Path, config: Any = None, *, seed: str = "Qwen__Qwen3-30B-A3B", hfq: Any = None,
                 raw: str | None = None) -> Path:
    """A checkpoint folder: ``config`` (a dict: JSON-dumped; or edited from ``seed``), or ``raw`` text."""
    m = d / "model"
    m.mkdir(exist_ok=True)
    if raw is not None:
        (m / "config.json").write_text(raw)
    else:
        (m / "config.json").write_text(json.dumps(config, indent=2))
    if hfq is not None:
        (m / "hf_quant_config.json").write_text(hfq if isinstance(hfq, str) else json.dumps(hfq, indent=2))
    return m


def seed_config(name: str = "Qwen__Qwen3-30B-A3B", **changes: Any) -> dict:
    """A real config (examples/model_configs) with ``changes`` applied (a value ``...`` deletes the key)."""
    root = FIXTURES.parent.parent / "examples" / "model_configs" / name / "config.json"
    cfg = json.loads(root.read_text())
    for k, v in changes.items():
        if v is ...:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line containing ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@dataclass
class Case:
    """One hostile input. ``build(d)`` writes it into folder ``d`` and returns (argv or a plan path,
    the regex the stderr must match, with ``{d}`` standing for the folder)."""

    name: str
    kind: str  # deployment, rules, capability, model, plan
    build: Callable[[Path], tuple[Any, str]]
    exit: int = 2


def _write(d: Path, name: str, text: str | bytes) -> Path:
    f = d / name
    if isinstance(text, bytes):
        f.write_bytes(text)
    else:
        f.write_text(text)
    return f


def _fifo(d: Path, name: str) -> Path:
    f = d / name
    os.mkfifo(f)
    return f


def _big(d: Path, name: str, size: int = 100 * 1024 * 1024) -> Path:
    f = d / name
    with open(f, "wb") as fh:  # sparse: 100 MB on the file system's word, no disk used
        fh.truncate(size)
    return f


def _explain(f: Path) -> list[str]:
    return ["explain", "--deployment", str(f), "--json"]


def _explain_rules(rules: Path) -> list[str]:
    return ["explain", "--rules", str(rules), "--gpu", "H200", "--quant", "bf16", "--model",
            "num_experts=8,top_k=2,hidden_size=64,moe_intermediate_size=32", "--json"]


def _model(m: Path) -> list[str]:
    return ["explain", "--gpu", "H200", "--model-config", str(m), "--json"]


def _cfg_case(name: str, config: Any, expect: str, *, seed: str = "Qwen__Qwen3-30B-A3B", hfq: Any = None,
              raw: str | None = None) -> Case:
    """A model-config case; ``expect`` is the regex after ``{d}/model/config.json:``."""
    def build(d: Path) -> tuple[Any, str]:
        m = model_folder(d, config, seed=seed, hfq=hfq, raw=raw)
        return _model(m), re.escape(str(m)) + "/" + expect
    return Case(name, "model", build)


QWEN = seed_config()
QWEN_FP8 = seed_config("Qwen__Qwen3-30B-A3B-FP8")
L_HIDDEN = line_of(json.dumps(QWEN, indent=2), '"hidden_size"')
L_TOPK = line_of(json.dumps(QWEN, indent=2), '"num_experts_per_tok"')
L_EXPERTS = line_of(json.dumps(QWEN, indent=2), '"num_experts"')


def _fp8(block: Any) -> dict:
    cfg = json.loads(json.dumps(QWEN_FP8))
    cfg["quantization_config"]["weight_block_size"] = block
    return cfg


def _fp8_ignore(n: int) -> dict:
    """The FP8 config with a compressed-tensors-style ``ignore`` list of ``n`` layer names."""
    cfg = json.loads(json.dumps(QWEN_FP8))
    cfg["quantization_config"]["ignore"] = [f"model.layers.{i}.mlp.gate" for i in range(n)]
    return cfg


L_BLOCK = line_of(json.dumps(QWEN_FP8, indent=2), '"weight_block_size"')
NVFP4 = FIXTURES / "models" / "nvidia__Qwen3-30B-A3B-NVFP4"
NVFP4_CONFIG = json.loads((NVFP4 / "config.json").read_text())


@functools.lru_cache(maxsize=1)
def _fresh_plan() -> str:
    """A plan made now (H200, bf16, a small shape: tp 8, ep 8, moe_tp 1), as ``moe-select plan`` writes it."""
    import moe_select

    return moe_select.plan(DEPLOYMENT_DICT).to_json()


DEPLOYMENT_DICT = {"gpu": "H200", "quant": "bf16", "tp": 8, "ep": 8,
                   "model": {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32}}


def _plan_with(d: Path, **deployment: Any) -> tuple[Path, str]:
    """A fresh plan (:func:`_fresh_plan`) with ``deployment`` keys changed, written to ``d/plan.json``; returns the
    file and its text."""
    data = json.loads(_fresh_plan())
    data["deployment"].update(deployment)
    text = json.dumps(data, indent=2)
    return _write(d, "plan.json", text), text


def _plan_case(field: str, value: Any, says: str) -> Case:
    """A plan whose ``deployment.<field>`` is ``value``: refused naming that field's line (load_plan, so resolve)."""
    def build(d: Path) -> tuple[Any, str]:
        f, text = _plan_with(d, **{field: value})
        line = text[:text.index(f'"{field}":', text.index('"deployment": {'))].count("\n") + 1
        return f, rf"{{d}}/plan\.json:{line}: deployment\.{field}: {says}"
    return Case(f"plan with deployment.{field}: {value}", "plan", build)


#: ``(field, value, message regex)``: the plan cases of issue 17 row 1 (the fresh plan has tp 8, ep 8, moe_tp 1).
PLAN_BOUNDS = [
    ("tp", 2**63, r"Input should be less than or equal to 4096"),
    ("tp", 2**24, r"Input should be less than or equal to 4096"),
    ("tp", 0, r"Input should be greater than or equal to 1"),
    ("tp", -4, r"Input should be greater than or equal to 1"),
    ("ep", 2**63, r"Input should be less than or equal to 4096"),
    ("ep", -1, r"Input should be greater than or equal to 1"),
    ("dp", 0, r"Input should be greater than or equal to 1"),
    ("dp", 10**30, r"Input should be less than or equal to 4096"),
    ("max_tokens_per_rank", 0, r"Input should be greater than or equal to 1"),
    ("max_tokens_per_rank", 2**63, r"Input should be less than or equal to 1048576"),
    ("moe_tp", 3, r"moe_tp must be tp / ep = 1 \(tp 8, ep 8\)"),
]


CASES: list[Case] = [
    # --- item 2: resource exhaustion ------------------------------------------------------------------
    Case("alias bomb in a deployment", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + bomb())),
        r"{d}/d\.yaml:8: a4\[6\]: the file expands to more than 50000 nodes \(aliases repeat what their anchor holds\): refused")),
    Case("alias bomb as a deployment value", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", bomb() + "gpu: *a8\n")),
        r"{d}/d\.yaml:\d+: a\d\[\d\]: the file expands to more than 50000 nodes")),
    Case("alias bomb in a rule file (check)", "rules", lambda d: (
        ["check", str(_write(d, "r.yaml", "schema_version: 1\nrules: []\n" + bomb()))],
        r"{d}/r\.yaml:7: a4\[6\]: the file expands to more than 50000 nodes")),
    Case("alias bomb in a rules directory (explain --rules)", "rules", lambda d: (
        _explain_rules(_write(d, "r.yaml", "schema_version: 1\nrules: []\n" + bomb()).parent),
        r"{d}/r\.yaml:7: a4\[6\]: the file expands to more than 50000 nodes")),
    Case("alias bomb in a capability file (check)", "capability", lambda d: (
        ["check", str(_write(d, "c.yaml", "schema_version: 1\nrunner: x\n" + bomb()))],
        r"{d}/c\.yaml:7: a4\[6\]: the file expands to more than 50000 nodes")),
    Case("alias bomb in a plan", "plan", lambda d: (
        _write(d, "plan.json", '{"schema_version": 1,\n' + bomb().replace("\n", ",\n").rstrip(",\n") + "\n}\n"),
        r"{d}/plan\.json:6: a4\[6\]: the file expands to more than 50000 nodes")),
    Case("recursive alias", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "packages: &p {a: *p}\n")),
        r"{d}/d\.yaml:4: packages\.a: alias \*p is inside its own anchor \(a recursive structure\): refused")),
    Case("deep nesting (100 levels)", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "packages: " + "[" * 100 + "]" * 100 + "\n")),
        r"{d}/d\.yaml:4: packages(\[0\])+.*: nested deeper than 64 levels: refused")),
    Case("deep nesting (5000 levels)", "deployment", lambda d: (  # libyaml stops at 1000 levels itself
        _explain(_write(d, "d.yaml", DEPLOYMENT + "packages: " + "[" * 5000 + "]" * 5000 + "\n")),
        r"{d}/d\.yaml:4: (packages(\[0\])+.*: nested deeper than 64 levels: refused|not valid YAML: .*exceeded maximum nesting depth)")),
    Case("deep nesting through aliases", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "x0: &x0 " + "[" * 40 + "]" * 40 + "\nx1: &x1 " + "[" * 30 + "*x0" + "]" * 30 + "\n")),
        r"{d}/d\.yaml:5: x1(\[0\])+: nested deeper than 64 levels once aliases are expanded: refused")),
    Case("more than 1000 aliases", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "x: &x 1\npackages: [" + ", ".join(["*x"] * 1001) + "]\n")),
        r"{d}/d\.yaml:5: packages\[1000\]: more than 1000 aliases in one file: refused")),
    Case("a 100k-character string", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "runner: " + "x" * 100_000 + "\n")),
        r"{d}/d\.yaml:4: runner: a scalar of 100000 characters: longer than the 65536-character bound")),
    Case("a 5000-digit integer", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "tp: " + "9" * 5000 + "\n")),
        r"{d}/d\.yaml:4: tp: an integer of 5000 digits: longer than the 100-digit bound")),
    Case("FIFO as deployment", "deployment", lambda d: (
        _explain(_fifo(d, "d.yaml")),
        r"{d}/d\.yaml: the deployment file is a FIFO \(named pipe\), not a regular file: refused")),
    Case("FIFO as rule file (check)", "rules", lambda d: (
        ["check", str(_fifo(d, "r.yaml"))],
        r"{d}/r\.yaml: the rule or capability file is a FIFO \(named pipe\), not a regular file: refused")),
    Case("FIFO in a rules directory (explain --rules)", "rules", lambda d: (
        _explain_rules(_fifo(d, "r.yaml").parent),
        r"{d}/r\.yaml: the rule or capability file is a FIFO \(named pipe\), not a regular file: refused")),
    Case("FIFO as model config", "model", lambda d: (
        _model(_fifo(d, "config.json")), r"{d}/config\.json: model_config: not a regular file or a folder")),
    Case("FIFO as config.json in a checkpoint folder", "model", lambda d: (
        _model(_fifo(d, "config.json").parent),
        r"{d}/config\.json: the model config is a FIFO \(named pipe\), not a regular file: refused")),
    Case("FIFO as hf_quant_config.json", "model", lambda d: (
        _model(_fifo(model_folder(d, NVFP4_CONFIG), "hf_quant_config.json").parent),
        r"{d}/model/hf_quant_config\.json: the model config is a FIFO \(named pipe\), not a regular file: refused")),
    Case("FIFO as plan", "plan", lambda d: (
        _fifo(d, "plan.json"), r"{d}/plan\.json: the plan file is a FIFO \(named pipe\), not a regular file: refused")),
    Case("/dev/zero as deployment", "deployment", lambda d: (
        _explain(Path("/dev/zero")), r"/dev/zero: the deployment file is a character device, not a regular file: refused")),
    Case("/dev/zero as rule file (check)", "rules", lambda d: (
        ["check", "/dev/zero"], r"/dev/zero: the rule or capability file is a character device, not a regular file: refused")),
    Case("/dev/zero as model config", "model", lambda d: (
        _model(Path("/dev/zero")), r"/dev/zero: model_config: not a regular file or a folder")),
    Case("/dev/zero as plan", "plan", lambda d: (
        Path("/dev/zero"), r"/dev/zero: the plan file is a character device, not a regular file: refused")),
    Case("100 MB deployment", "deployment", lambda d: (
        _explain(_big(d, "d.yaml")),
        r"{d}/d\.yaml: the deployment file is 104857600 bytes: larger than the 4 MiB bound on input files")),
    Case("100 MB rule file (check)", "rules", lambda d: (
        ["check", str(_big(d, "r.yaml"))],
        r"{d}/r\.yaml: the rule or capability file is 104857600 bytes: larger than the 4 MiB bound on input files")),
    Case("100 MB config.json", "model", lambda d: (
        _model(_big(d, "config.json").parent),
        r"{d}/config\.json: the model config is 104857600 bytes: larger than the 4 MiB bound on input files")),
    Case("100 MB plan", "plan", lambda d: (
        _big(d, "plan.json"), r"{d}/plan\.json: the plan file is 104857600 bytes: larger than the 4 MiB bound")),
    Case("echoed values are truncated (a 10000-character quant)", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", "gpu: H200\nquant: " + "q" * 10_000 + "\n" + SHAPE)),
        r"{d}/d\.yaml:2: quant: 'q{80}…' is not a name \(")),  # well-formed unknown formats are judged (issue 18)
    Case("echoed keys are truncated (a 1000-character unknown key)", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "k" * 1000 + ": 1\n")),  # libyaml's limit on a plain key: 1024
        r"{d}/d\.yaml:4: k{80}…: unknown key 'k{80}…'; allowed here: ")),
    Case("4 MiB of comments (under the size bound: planned)", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + ("# " + "c" * 78 + "\n") * (4 * 1024 * 1024 // 81 - 10))),
        r"^$"), exit=0),
    Case("49,900 nodes (under the node bound)", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "packages: [" + ", ".join(["1"] * 49_900) + "]\n")),
        r"{d}/d\.yaml:4: packages: Input should be a valid dictionary")),
    Case("50,000 nodes (over the node bound)", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "packages: [" + ", ".join(["1"] * 50_000) + "]\n")),
        r"{d}/d\.yaml:4: packages\[\d+\]: the file expands to more than 50000 nodes")),
    Case("37,800 nodes through aliases (under the node bound)", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + bomb(4) + "packages: [*a3, *a3, *a3, *a3]\n")),
        r"{d}/d\.yaml:8: packages: Input should be a valid dictionary")),
    Case("49,000 wrong items (under the node bound): 50 issues, then a count", "rules", lambda d: (
        ["check", str(_write(d, "r.yaml", "schema_version: 1\nrules:\n  - id: x\n    when: {tp: [" + ", ".join(['"x"'] * 49_000)
                              + "]}\n    prefer: [triton]\n"))],
        r"{d}/r\.yaml: \.\.\. and about 4895\d more issues \(only the first 50 are listed\)\n$")),
    Case("10,001 keys in one mapping", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "packages: {" + ", ".join(f"p{i}: '1'" for i in range(10_001)) + "}\n")),
        r"{d}/d\.yaml:4: packages: more than 10000 keys in one mapping: refused")),
    Case("5,000 wrong items: the first 50 issues, then a count", "rules", lambda d: (
        ["check", str(_write(d, "r.yaml", "schema_version: 1\nrules:\n  - id: x\n    when: {tp: [" + ", ".join(['"x"'] * 5000)
                              + "]}\n    prefer: [triton]\n"))],
        r"{d}/r\.yaml:4: rules\[0\]\.when\.tp\[49\]: .*\n  {d}/r\.yaml: \.\.\. and about 495\d more issues \(only the first 50 are listed\)\n$")),
    Case("not UTF-8", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT.encode() + b"runner: \xff\xfe\n")),
        r"{d}/d\.yaml:4: not UTF-8 text: byte 0xff at column 9")),
    Case("a control character", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "runner: a\x1bb\n")),
        r"{d}/d\.yaml:4: not valid YAML: control character U\+001B at column 10")),
    Case("an unsupported tag", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "runner: !!python/object/apply:os.system [true]\n")),
        r"{d}/d\.yaml:4: runner: tag 'tag:yaml.org,2002:python/object/apply:os.system' is not supported")),

    # --- item 3: leading zeros --------------------------------------------------------------------------
    Case("tp: 08", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "tp: 08\n")),
        r"{d}/d\.yaml:4: tp: leading zero in 08: write 8 \(YAML 1\.1 reads a leading zero as octal, YAML 1\.2 as decimal")),
    Case("tp: 010", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", DEPLOYMENT + "tp: 010\n")),
        r"{d}/d\.yaml:4: tp: leading zero in 010: write 10 ")),
    Case("model.top_k: 02", "deployment", lambda d: (
        _explain(_write(d, "d.yaml", "gpu: H200\nquant: bf16\nmodel:\n  num_experts: 8\n  top_k: 02\n  hidden_size: 64\n"
                                     "  moe_intermediate_size: 32\n")),
        r"{d}/d\.yaml:5: model\.top_k: leading zero in 02: write 2 ")),
    Case("leading zero in a rule file", "rules", lambda d: (
        ["check", str(_write(d, "r.yaml", "schema_version: 1\nrules:\n  - id: x\n    when: {tp: [08]}\n    prefer: [triton]\n"))],
        r"{d}/r\.yaml:4: rules\[0\]\.when\.tp\[0\]: leading zero in 08: write 8 ")),

    # --- item 3: model configs ---------------------------------------------------------------------------
    _cfg_case("config without hidden_size", seed_config(hidden_size=...), r"config\.json:1: hidden_size: no hidden_size"),
    _cfg_case("num_experts_per_tok above num_experts", seed_config(num_experts_per_tok=300),
              rf"config\.json:{L_TOPK}: num_experts_per_tok: num_experts_per_tok 300 exceeds the number of experts 128 "
              rf"\(.*config\.json:{L_EXPERTS} \(num_experts\)\)"),
    _cfg_case("negative hidden_size", seed_config(hidden_size=-2048),
              rf"config\.json:{L_HIDDEN}: hidden_size: hidden_size -2048 must be positive"),
    _cfg_case("zero num_experts", seed_config(num_experts=0),
              rf"config\.json:{L_EXPERTS}: num_experts: num_experts 0 must be positive"),
    _cfg_case("float hidden_size", seed_config(hidden_size=2048.0),
              rf"config\.json:{L_HIDDEN}: hidden_size: hidden_size must be an integer, got the number 2048\.0"),
    _cfg_case("bool hidden_size", seed_config(hidden_size=True),
              rf"config\.json:{L_HIDDEN}: hidden_size: hidden_size must be an integer, got true"),
    _cfg_case("bool num_experts", seed_config(num_experts=True),
              rf"config\.json:{L_EXPERTS}: num_experts: num_experts must be an integer, got true"),
    _cfg_case("string hidden_size", seed_config(hidden_size="2048"),
              rf"config\.json:{L_HIDDEN}: hidden_size: hidden_size must be an integer, got the string '2048'"),
    _cfg_case("huge hidden_size", seed_config(hidden_size=10**30),
              rf"config\.json:{L_HIDDEN}: hidden_size: hidden_size 1000000000000000000000000000000 is larger than 1048576"),
    _cfg_case("5000-digit hidden_size", None,
              rf"config\.json:{L_HIDDEN}: not valid JSON: an integer of 5000 digits: longer than the 100-digit bound",
              raw=json.dumps(seed_config(hidden_size=7), indent=2).replace('"hidden_size": 7', '"hidden_size": ' + "9" * 5000)),
    _cfg_case("NaN", None, rf"config\.json:{L_HIDDEN}: not valid JSON: NaN is not a JSON number \(non-finite numbers are refused\)",
              raw=json.dumps(seed_config(hidden_size=7), indent=2).replace('"hidden_size": 7', '"hidden_size": NaN')),
    _cfg_case("Infinity", None, rf"config\.json:{L_HIDDEN}: not valid JSON: Infinity is not a JSON number",
              raw=json.dumps(seed_config(hidden_size=7), indent=2).replace('"hidden_size": 7', '"hidden_size": Infinity')),
    _cfg_case("-Infinity in an unused key", None, r"config\.json:\d+: not valid JSON: -Infinity is not a JSON number",
              raw=json.dumps(seed_config(rope_theta=7), indent=2).replace('"rope_theta": 7', '"rope_theta": -Infinity')),
    _cfg_case("a float that overflows", None, r"config\.json:\d+: not valid JSON: '1e400' overflows a float",
              raw=json.dumps(seed_config(rope_theta=7), indent=2).replace('"rope_theta": 7', '"rope_theta": 1e400')),
    _cfg_case("quantization_config not a mapping", seed_config(quantization_config="fp8"),
              r"config\.json:\d+: quantization_config: quantization_config must be a mapping, got the string 'fp8'"),
    _cfg_case("quantization_config a list", seed_config(quantization_config=[1]),
              r"config\.json:\d+: quantization_config: quantization_config must be a mapping, got a list"),
    _cfg_case("weight_block_size one number", _fp8([128]),
              rf"config\.json:{L_BLOCK}: quantization_config\.weight_block_size: weight_block_size must be a list of two "
              r"positive integers, got \[128\]"),
    _cfg_case("weight_block_size a string", _fp8("128x128"),
              rf"config\.json:{L_BLOCK}: quantization_config\.weight_block_size: weight_block_size must be a list of two "
              r"positive integers, got the string '128x128'"),
    _cfg_case("weight_block_size an integer", _fp8(128),
              rf"config\.json:{L_BLOCK}: quantization_config\.weight_block_size: .* got the number 128"),
    _cfg_case("weight_block_size with a string", _fp8([128, "128"]),
              rf"config\.json:{L_BLOCK}: quantization_config\.weight_block_size: .* got \[128, '128'\]"),
    _cfg_case("weight_block_size of floats", _fp8([128.0, 128.0]),
              rf"config\.json:{L_BLOCK}: quantization_config\.weight_block_size: .* got \[128\.0, 128\.0\]"),
    _cfg_case("weight_block_size of bools", _fp8([True, True]),
              rf"config\.json:{L_BLOCK}: quantization_config\.weight_block_size: .* got \[True, True\]"),
    _cfg_case("weight_block_size negative", _fp8([128, -128]),
              rf"config\.json:{L_BLOCK}: quantization_config\.weight_block_size: .* got \[128, -128\]"),
    _cfg_case("text_config not a mapping", seed_config(text_config=[1, 2]),
              r"config\.json:\d+: text_config: text_config must be a mapping \(the text model's config\), got a list"),
    _cfg_case("text_config without hidden_size", seed_config(text_config={"num_local_experts": 16, "num_experts_per_tok": 1}),
              r"config\.json:\d+: text_config\.hidden_size: no hidden_size"),
    _cfg_case("hf_quant_config.json: quantization not a mapping", NVFP4_CONFIG,
              r"hf_quant_config\.json:\d+: quantization: quantization must be a mapping, got the string 'NVFP4'",
              hfq={"producer": {"name": "modelopt"}, "quantization": "NVFP4"}),
    _cfg_case("hf_quant_config.json: not an object", NVFP4_CONFIG,
              r"hf_quant_config\.json:1: hf_quant_config\.json must hold a JSON object, got a list", hfq=[1]),
    _cfg_case("hf_quant_config.json: quant_algo a list", NVFP4_CONFIG,
              r"hf_quant_config\.json:\d+: quantization\.quant_algo: quant_algo must be a string, got a list",
              hfq={"quantization": {"quant_algo": ["NVFP4"]}}),
    _cfg_case("quant_method a list", seed_config(quantization_config={"quant_method": ["fp8"]}),
              r"config\.json:\d+: quantization_config\.quant_method: quant_method must be a string, got a list"),
    _cfg_case("hidden_act a list", seed_config(hidden_act=["silu"]),
              r"config\.json:\d+: hidden_act: hidden_act must be a string, got a list"),
    _cfg_case("norm_topk_prob a string", seed_config(norm_topk_prob="false"),
              r"config\.json:\d+: norm_topk_prob: norm_topk_prob must be true or false, got the string 'false'"),
    _cfg_case("n_group not dividing the experts", seed_config("deepseek-ai__DeepSeek-V3", n_group=7),
              r"config\.json:\d+: n_group: n_group 7 does not divide the number of experts 256"),
    _cfg_case("routed_scaling_factor negative", seed_config("deepseek-ai__DeepSeek-V3", routed_scaling_factor=-2.5),
              r"config\.json:\d+: routed_scaling_factor: routed_scaling_factor must be a finite positive number, got -2\.5"),
    _cfg_case("n_shared_experts a float", seed_config("deepseek-ai__DeepSeek-V3", n_shared_experts=1.5),
              r"config\.json:\d+: n_shared_experts: n_shared_experts must be an integer, got the number 1\.5"),
    _cfg_case("compressed-tensors group not a mapping",
              seed_config(quantization_config={"quant_method": "compressed-tensors", "config_groups": {"group_0": 8}}),
              r"config\.json:\d+: quantization_config\.config_groups\.group_0: a config group must be a mapping, got the number 8"),
    Case("a config.json with an ignore list of 45,000 layers (under the node bound: planned)", "model", lambda d: (
        _model(model_folder(d, _fp8_ignore(45_000))), r"^$"), exit=0),
    Case("a control character in a model_config path is escaped", "model", lambda d: (
        _explain(_write(d, "d.yaml", 'gpu: H200\nmodel_config: "a\\e[2Jb"\n')),
        r"{d}/a\\x1b\[2Jb: model_config: no such file or folder \(model_config at {d}/d\.yaml:2\)")),
    Case("a 5000-character model_config path", "model", lambda d: (
        _explain(_write(d, "d.yaml", "gpu: H200\nmodel_config: " + "y" * 5000 + "\n")),
        r"{d}/y+…: model_config: cannot read: File name too long \(model_config at {d}/d\.yaml:2\)")),
    _cfg_case("config.json is a list", [1, 2], r"config\.json:1: config\.json does not hold a JSON object"),
    _cfg_case("duplicate key", None, r"config\.json:\d+: hidden_size: duplicate key \(first given on line \d+\)",
              raw=json.dumps(QWEN, indent=2).replace('"hidden_size": 2048,', '"hidden_size": 2048,\n  "hidden_size": 4096,')),

    # --- issue 17 row 1: a plan's deployment has the bounds of a deployment file (tp 2**63 spun resolve forever) --------
    *[_plan_case(field, value, says) for field, value, says in PLAN_BOUNDS],
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input(case: Case, tmp_path: Path):
    target, pattern = case.build(tmp_path)
    rc, _, err = plan_exit(target) if isinstance(target, Path) else run(target)
    assert rc == case.exit, f"exit {rc}:\n{err[:3000]}"
    assert case.exit == 0 or err.startswith("invalid input:\n  "), err[:3000]
    regex = pattern.replace("{d}", re.escape(str(tmp_path)))
    assert re.search(regex, err), f"no match for {regex!r} in:\n{err[:3000]}"
    # bounded echoes: no line over 600 characters besides the temporary folder's path, whose length is the machine's
    assert all(len(line.replace(str(tmp_path), "")) < 600 for line in err.splitlines()), max(err.splitlines(), key=len)[:600]


def test_billion_laughs_is_refused_without_expanding_it():
    """Nine lines that expand to 387 million strings: refused while composing, each alias counted by its anchor's
    measured size, never expanded. An alias returns its anchor's node without composing anything, so counting composer
    calls cannot tell expansion apart (found by the session-7 break-it review: a composer that deep-copied each alias
    made the same 54 calls). What tells: the memory the refusal takes (about 18 KB traced at its peak on the 2-core VM,
    2026-12-02; a composer that expands takes megabytes on its way to the 50,000 nodes it counts to) and, in a file under
    the bound, an alias loading as the very object its anchor loads as. The time it takes (milliseconds) is
    benchmarks/fuzz_inputs.py's to measure; no_hang fails the test instead of hanging it."""
    import tracemalloc

    from moe_select.errors import InputError
    from moe_select.yamlio import load_text

    text = bomb()
    assert len(text.splitlines()) <= 10
    load_text("warm: 1\n", "warm.yaml")  # the loader's one-time set-up is not the bomb's
    tracemalloc.start()
    try:
        with no_hang(), pytest.raises(InputError, match="expands to more than 50000 nodes"):
            load_text(text, "bomb.yaml")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"{peak} bytes traced at the peak: aliases were expanded"
    small = load_text(bomb(levels=4), "small.yaml")  # a3 expands to 7381 nodes: under the bound, it loads
    assert small["a3"][0] is small["a2"] and small["a3"][8] is small["a2"], "an alias loaded as a copy of its anchor"


def test_leading_zeros_and_yaml_1_2_scalars():
    """A leading zero is refused; everything else keeps YAML 1.2 core semantics (README)."""
    from moe_select.errors import InputError
    from moe_select.yamlio import load_text

    for text in ("08", "010", "-07", "00", "+01"):
        with pytest.raises(InputError, match=f"leading zero in {re.escape(text)}: write {int(text)} "):
            load_text(f"tp: {text}\n", "d.yaml")
    data = load_text("a: 0\nb: -0\nc: +8\nd: 1e3\ne: 0x8\nf: yes\ng: 1_000\nh: 2001-12-14\ni: '08'\nj: .inf\nk: ~\nl: =\n"
                     "m: 1:30\nn: 0o10\n", "d.yaml")
    assert data == {"a": 0, "b": 0, "c": 8, "d": 1000.0, "e": "0x8", "f": "yes", "g": "1_000", "h": "2001-12-14", "i": "08",
                    "j": float("inf"), "k": None, "l": "=", "m": "1:30", "n": "0o10"}
    assert type(data["d"]) is float and type(data["c"]) is int


def test_read_input_hashes_the_bytes_it_returns(tmp_path: Path):
    import hashlib

    from moe_select.yamlio import read_input

    f = _write(tmp_path, "x.yaml", b"a: 1\n")
    raw, digest = read_input(f)
    assert raw == b"a: 1\n" and digest == hashlib.sha256(raw).hexdigest()


def test_model_info_lists_every_file_read():
    from moe_select.model_config import read_model_config

    info = read_model_config(NVFP4)
    names = {Path(k).name: v for k, v in info.files.items()}
    assert sorted(names) == ["config.json", "hf_quant_config.json"]
    import hashlib

    assert names["hf_quant_config.json"] == hashlib.sha256((NVFP4 / "hf_quant_config.json").read_bytes()).hexdigest()


def test_dangling_hf_quant_config_is_refused_not_ignored(tmp_path: Path):
    """A missing hf_quant_config.json blob (a dangling link, as in a half-downloaded HF cache) would
    silently change the format to the config's own: refused."""
    m = model_folder(tmp_path, NVFP4_CONFIG)
    (m / "hf_quant_config.json").symlink_to(tmp_path / "missing-blob")
    rc, _, err = run(_model(m))
    assert rc == 2 and "hf_quant_config.json: model config not found (a link to a missing file)" in err
