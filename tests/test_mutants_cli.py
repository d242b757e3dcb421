"""Tests that kill the mutants of moe_select/cli.py that the sampled device run of 2026-12-02 (eighth session;
mutmut 3.8.1, seed 19, 50 of cli's 2205 mutants, tree c581f8e; benchmarks/results/mutation_sampled_h200_2026-12-02_s8.json)
left: 18 survived, 4 reached no test. Six more came from the local sampled run of the same session (seed 19, 50
per module, tree 352b298; benchmarks/results/mutation_sampled_local_2026-12-02_s8.json): x__run_args__mutmut_28 and
_73, x_cmd_run__mutmut_22, _75, _89 and _113 (numbered at 352b298; the tests for them are at the end). Each test names
the mutants it kills (``cli.x_function__mutmut_N``, numbered at c581f8e unless said); the expectations are written by
hand from the inputs and argparse's documented behaviour.

Equivalent, so not tested (the reason in one line each):

- x__add_measurements_flag__mutmut_9 (``default=[]`` left out of ``--measurements``): the one reader,
  ``_explain``, takes ``getattr(args, "measurements", None) or None``, the same None for ``[]`` and for None.
- x__tune_args__mutmut_105 (``default=None`` left out of tune's ``--device``): argparse's default of an option
  is None already.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from moe_select import cli
from moe_select.errors import InputError, MoeSelectError

from test_edges17_cli import OTHER, _sticky

MODEL = "num_experts=8,top_k=2,hidden_size=64,moe_intermediate_size=32"


def _args(*argv: str):
    return cli.build_parser("explain").parse_args(["explain", *argv])


def _help(capsys, monkeypatch, command: str) -> str:
    """``moe-select COMMAND --help``'s text on a wide terminal (argparse wraps no line); asserts exit 0."""
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


# ------------------------------------------------------------------------------------------- help and flag types
def test_explain_help_shows_each_flags_text_and_metavar(capsys, monkeypatch):
    """x__add_deployment_flags__mutmut_9 / _124 / _183 / _370, x__add_measurements_flag__mutmut_22: the help
    of --deployment, --max-tokens-per-rank and --a2a, --rules' metavar DIR, --measurements' help (a wide
    terminal, so argparse wraps no line)."""
    out = _help(capsys, monkeypatch, "explain")
    for text in ("deployment file (YAML or JSON)",
                 "most tokens one rank passes to the MoE layer in one forward (default per phase)",
                 "none, or an all-to-all backend of the capability files (moe-select matrix lists them)",
                 "--rules DIR",
                 "measurement tables of moe-select tune (repeatable): where one applies (layer and machine keys)"):
        assert text in out, text
    assert "XX" not in out


def test_an_empty_model_flag_names_what_to_give(capsys):
    """x__add_deployment_flags__mutmut_92: ``--model ""`` -> argparse's exit 2 naming the flag and "K=V"."""
    with pytest.raises(SystemExit) as e:
        cli.main(["explain", "--arch", "cpu", "--model", ""])
    assert e.value.code == 2
    assert "argument --model: is empty: give the model shape as K=V,..." in capsys.readouterr().err


def test_dp_is_an_integer_flag(capsys):
    """x__add_deployment_flags__mutmut_160 (``type=int`` left out of --dp): argparse refuses a word, and a
    number arrives as an int."""
    with pytest.raises(SystemExit) as e:
        _args("--dp", "two")
    assert e.value.code == 2
    assert "argument --dp: invalid int value: 'two'" in capsys.readouterr().err
    assert _args("--dp", "2").dp == 2


def test_tune_takes_device_cuda():
    """x__tune_args__mutmut_111 (the choice ``cuda`` misspelt): ``tune --device cuda`` parses."""
    args = cli.build_parser("tune").parse_args(["tune", "--device", "cuda"])
    assert args.device == "cuda"


# ------------------------------------------------------------------------------------------------- _deployment
def test_dispatch_precision_per_layer_kind_reaches_the_deployment():
    """x__add_deployment_flags__mutmut_259 (the flag's dest renamed: the value never read) and
    x__dispatch_flag__mutmut_5 (split on another separator): two layer kinds, each with its precision."""
    dep, _ = cli._deployment(_args("--arch", "sm90", "--quant", "bf16", "--model", MODEL, "--dispatch-precision",
                                   "main=nvfp4, mtp=bf16"))
    assert dep.dispatch_precision == {"main": "nvfp4", "mtp": "bf16"}
    dep, _ = cli._deployment(_args("--arch", "sm90", "--quant", "bf16", "--model", MODEL, "--dispatch-precision", "bf16"))
    assert dep.dispatch_precision == "bf16"


def test_a_package_without_a_version_names_the_packages_field():
    """x__deployment__mutmut_106: ``--package flashinfer-python`` -> the issue's field is ``packages``."""
    with pytest.raises(InputError) as e:
        cli._deployment(_args("--arch", "cpu", "--model", MODEL, "--package", "flashinfer-python"))
    (issue,) = e.value.issues
    assert (issue.file, issue.field) == ("<flags>", "packages")
    assert "use NAME=VERSION or NAME=none" in issue.message


def test_a_deployment_file_that_is_a_list_names_its_line(tmp_path):
    """x__deployment__mutmut_183: a deployment file whose document is a list starting on line 3 -> line 3."""
    f = tmp_path / "dep.yaml"
    f.write_text("# a deployment\n\n- arch: cpu\n- quant: bf16\n")
    with pytest.raises(InputError) as e:
        cli._deployment(_args("--deployment", str(f)))
    (issue,) = e.value.issues
    assert (issue.file, issue.line, issue.message) == (str(f), 3, "a deployment file holds a mapping")


def test_a2a_mode_flag_overrides_the_files_deepep_mode(tmp_path):
    """x__deployment__mutmut_198 (the file's ``deepep_mode`` kept beside the flag): the flag's mode wins."""
    f = tmp_path / "dep.yaml"
    f.write_text(f"arch: sm90\nquant: bf16\nep: 8\na2a: deepep\ndeepep_mode: normal\nmodel: {{{MODEL.replace('=', ': ').replace(',', ', ')}}}\n")
    dep, _ = cli._deployment(_args("--deployment", str(f)))
    assert dep.a2a_mode == "normal"
    dep, _ = cli._deployment(_args("--deployment", str(f), "--a2a-mode", "low_latency"))
    assert dep.a2a_mode == "low_latency"


def test_activation_precision_joins_the_files_quant_config(tmp_path):
    """x__deployment__mutmut_271 (the file's quant_config key sources replaced by ``dict(None)``): the flag
    adds one key to the file's quant_config, whose other keys stay, with their lines and sources."""
    f = tmp_path / "dep.yaml"
    f.write_text(f"arch: sm90\nquant: mxfp4\nmodel: {{{MODEL.replace('=', ': ').replace(',', ', ')}}}\n"
                 "quant_config:\n  group_size: 32\n")
    args = _args("--deployment", str(f), "--activation-precision", "bf16")
    dep, _ = cli._deployment(args)
    qc = dep.quant_config
    got = qc if isinstance(qc, dict) else qc.model_dump()
    assert got.get("activation_precision") == "bf16" and got.get("group_size") == 32, got


# ------------------------------------------------------------------------------------------ _render_distributed
def test_render_distributed_prints_each_ranks_experts_and_intermediate():
    """x__render_distributed__mutmut_34 / _37 / _62 (no tests reached them): each rank's expert range and
    intermediate slice in the table, and TOO LARGE when the error is over the tolerance."""
    rank = {"rank": 1, "ep_rank": 1, "tp_rank": 0, "experts": "4..7", "intermediate": "0..31", "token_range": "0..15",
            "resolve_s": 0.25, "build_s": 0.5, "forward_s": 0.0123}
    r = {"nproc": 2, "tp": 1, "ep": 2, "a2a": "none", "token_layout": "replicated", "tokens": 16, "dtype": "bfloat16",
         "ranks": [None, rank], "max_rel_error": 0.5, "tolerance": 0.0156, "ok": False, "wall_s": 3.0}
    text = cli._render_distributed(r)
    row = text.splitlines()[2]
    assert row.split() == ["1", "1", "0", "4..7", "0..31", "0..15", "0.25", "0.50", "12.3"], row
    assert text.splitlines()[-1] == ("max relative error vs float64 reference: 5.00e-01 (tolerance 0.0156): TOO LARGE; "
                                     "wall 3.0 s")


# ------------------------------------------------------------------------------------------ matrix, write_atomically
def test_matrix_write_and_check_together_name_the_check_field(capsys):
    """x_cmd_matrix__mutmut_13: ``matrix --write --check`` -> exit 2, field ``check``."""
    assert cli.main(["matrix", "--write", "--check"]) == 2
    assert "<command line>: check: --write and --check exclude each other" in capsys.readouterr().err


def test_write_into_a_missing_folder_names_the_output_field(tmp_path):
    """x_write_atomically__mutmut_99: the issue's field is ``output``."""
    with pytest.raises(InputError) as e:
        cli.write_atomically(tmp_path / "no" / "plan.json", "{}")
    (issue,) = e.value.issues
    assert issue.field == "output" and "does not exist" in issue.message


@pytest.mark.skipif(not (hasattr(os, "geteuid") and os.geteuid() == 0 and hasattr(os, "mkfifo")),
                    reason="gives a FIFO to another user (os.chown): run as root, POSIX")
def test_another_users_fifo_in_a_sticky_folder_is_named_a_fifo(tmp_path):
    """x_write_atomically__mutmut_42: the refusal calls a FIFO "a FIFO" and names protected_fifos."""
    fifo = _sticky(tmp_path) / "plan.json"
    os.mkfifo(fifo)
    os.chown(fifo, OTHER, OTHER)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    with pytest.raises(MoeSelectError) as e:
        cli.write_atomically(Path(fifo), "{}")
    assert f"{fifo} is a FIFO owned by uid {OTHER}" in str(e.value) and "protected_fifos" in str(e.value)


# ------------------------------------------------------------------------------------------------- run
def test_run_help_shows_tokens_and_allow_jit_text(capsys, monkeypatch):
    """x__run_args__mutmut_28 (--tokens' help left out) and _73 (--allow-jit's help upper-cased): both texts in
    ``run --help`` (a wide terminal, so argparse wraps no line)."""
    out = _help(capsys, monkeypatch, "run")
    for text in ("tokens to route (the float64 reference checks at most 256 of them)",
                 "let a runner build its kernels at the first call (minutes); default: refuse, and with runner auto "
                 "prefer the next eligible runner that needs no build"):
        assert text in out, text


def test_run_json_without_nproc_names_the_command_line_and_json(capsys):
    """x_cmd_run__mutmut_22 (the issue's file None): ``run --json`` of one process -> exit 2, the issue on
    ``<command line>``, field ``json``."""
    assert cli.main(["run", "--model-config", "some-checkpoint", "--json"]) == 2
    assert capsys.readouterr().err == ("invalid input:\n  <command line>: json: --json prints the result of a --nproc run "
                                       "(N > 1); a single-process run prints text\n")


def test_run_nproc_with_a_flag_it_cannot_honour_names_the_nproc_field(capsys):
    """x_cmd_run__mutmut_75: ``run --nproc 2 --quant fp8`` -> exit 2, field ``nproc``, the flag named."""
    assert cli.main(["run", "--model-config", "some-checkpoint", "--nproc", "2", "--quant", "fp8"]) == 2
    assert capsys.readouterr().err == ("invalid input:\n  <command line>: nproc: --nproc runs on the CPU with the "
                                       "checkpoint's format, runner auto and the bundled rules: --quant cannot be "
                                       "honoured with it\n")


def test_run_nproc_with_another_tp_names_the_tp_field(capsys):
    """x_cmd_run__mutmut_89: ``run --nproc 2 --tp 4`` -> exit 2, field ``tp`` (lower case, as the flag)."""
    assert cli.main(["run", "--model-config", "some-checkpoint", "--nproc", "2", "--tp", "4"]) == 2
    assert capsys.readouterr().err == ("invalid input:\n  <command line>: tp: --nproc 2 runs one rank per process: tp "
                                       "must equal nproc (got --tp 4)\n")


class _Stream:
    """A stream that records what is written and when it is flushed."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def write(self, s: str) -> int:
        self.events.append(s)
        return len(s)

    def flush(self) -> None:
        self.events.append("<flush>")


@pytest.mark.parametrize("json_flag", [False, True])
def test_run_nproc_flushes_each_progress_line_as_it_is_said(monkeypatch, json_flag):
    """x_cmd_run__mutmut_113 (``flush=True`` left out of ``say``): each progress line of ``run --nproc`` is
    flushed when it is said, while the ranks still run (stdout with text, stderr with --json), so a pipe shows
    it at once. run_distributed is replaced by one that says two lines and checks the stream after each."""
    import moe_select.harness.launch as launch

    out, err = _Stream(), _Stream()
    monkeypatch.setattr(cli.sys, "stdout", out)
    monkeypatch.setattr(cli.sys, "stderr", err)
    progress = err if json_flag else out

    def fake(*, say, **kwargs):
        for line in ("moe-select: using torch_native", "ranks: 2 processes"):
            say(line)
            assert progress.events[-3:] == [line, "\n", "<flush>"], progress.events
        return {"ok": True}

    monkeypatch.setattr(launch, "run_distributed", fake)
    monkeypatch.setattr(cli, "_render_distributed", lambda r: "rendered")
    rc = cli.main(["run", "--model-config", "some-checkpoint", "--nproc", "2", *(["--json"] if json_flag else [])])
    assert rc == 0
    assert progress.events[:6] == ["moe-select: using torch_native", "\n", "<flush>", "ranks: 2 processes", "\n",
                                   "<flush>"]
