"""Break-it review of 2026-12-02 (session 6): defects found in the day's commits, each pinned by a test that failed
before its fix. CPU only.

- benchmarks/mutation.py ``--copy`` (a0e1fda lists untracked files): a ``--workdir`` inside the checkout that git
  does not ignore held the module trees as untracked files, so each new tree copied the trees made before it (and
  files mutmut was writing in them); and a copy with untracked files was labelled with the bare commit, as if it
  held that commit's files only.
"""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("mutation_tool_s6",
                                              Path(__file__).resolve().parents[1] / "benchmarks" / "mutation.py")
assert SPEC is not None and SPEC.loader is not None
mutation = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(mutation)


def _git_repo(tmp_path: Path):
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("needs git")
    repo = tmp_path / "repo"
    repo.mkdir()

    def run(*a: str) -> None:
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *a],
                       check=True, capture_output=True)

    run("init", "-q")
    (repo / ".gitignore").write_text("build/\n")
    (repo / "tracked.py").write_text("x = 1\n")
    run("add", ".gitignore", "tracked.py")
    run("commit", "-q", "-m", "one")
    return repo, run


def test_copy_leaves_out_a_workdir_inside_the_checkout(tmp_path, monkeypatch):
    """A work folder inside the checkout, not ignored: its trees (untracked files) are not copied into the next
    module's tree. Before the fix checkout_files listed ``work/catalog/moe_select/catalog.py`` and
    ``work/catalog/mutants/x.py`` (the git branch ignored ``exclude``; the branch without git honoured it)."""
    repo, _ = _git_repo(tmp_path)
    work = repo / "work"
    (work / "catalog" / "moe_select").mkdir(parents=True)
    (work / "catalog" / "moe_select" / "catalog.py").write_text("")
    (work / "catalog" / "mutants").mkdir()
    (work / "catalog" / "mutants" / "x.py").write_text("")
    (repo / "new_test.py").write_text("")               # untracked, outside the work folder: copied
    monkeypatch.setattr(mutation, "REPO", repo)
    assert mutation.checkout_files(work.resolve()) == [".gitignore", "new_test.py", "tracked.py"]


def test_a_copy_with_untracked_files_is_not_labelled_as_the_bare_commit(tmp_path, monkeypatch):
    """The label of a ``--copy`` tree says ``+changes`` when untracked files (which the copy takes) are there, and
    not for untracked files under the work folder only or ignored ones. Before the fix ``git status
    --untracked-files=no`` saw nothing and the label was the bare commit."""
    repo, _ = _git_repo(tmp_path)
    monkeypatch.setattr(mutation, "REPO", repo)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    work = repo / "work"
    (work / "m").mkdir(parents=True)
    (work / "m" / "tree_file.py").write_text("")        # under the work folder: not what the copy takes
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_text("")           # ignored
    assert mutation.source_label(work / "m", True, None, work.resolve()) == head
    (repo / "tests_new.py").write_text("")              # untracked, copied
    assert mutation.source_label(work / "m", True, None, work.resolve()) == head + "+changes"
    assert mutation.source_label(work / "m", True, "abc123", work.resolve()) == "abc123"   # --commit given


# --------------------------------------------------------------------------- detection with engine_env (9a55428)
SMALL = {"arch": "auto", "quant": "bf16",
         "model": {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32}}


def _fake_smi(tmp_path: Path, monkeypatch, body: str) -> None:
    """tests/test_edges.py's fake nvidia-smi (which clears CUDA_VISIBLE_DEVICES), with CUDA_DEVICE_ORDER cleared too."""
    import test_edges

    test_edges._fake_smi(tmp_path, monkeypatch, body)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


def test_engine_env_without_cuda_visible_devices_keeps_this_processs_gpus(tmp_path, monkeypatch):
    """``explain(engine_env=...)`` for the engine-choice prediction (a variable of the engine, no
    CUDA_VISIBLE_DEVICES): arch auto still sees the GPUs this process's CUDA_VISIBLE_DEVICES leaves (the engine
    started from here inherits it). Before the fix detection read engine_env alone: all three GPUs of a mixed
    machine (DetectionError "different kinds") instead of this process's H100, and a GPU where this process hides
    every one. The engine's own CUDA_VISIBLE_DEVICES still wins."""
    import moe_select

    from test_edges import MIXED

    _fake_smi(tmp_path, monkeypatch, MIXED)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa")            # this process: the H100
    rep = moe_select.explain(SMALL, engine_env={"VLLM_USE_DEEP_GEMM": "1"})
    assert (rep.environment.arch, rep.environment.gpu) == ("sm90", "NVIDIA H100 80GB HBM3")
    assert "CUDA_VISIBLE_DEVICES='GPU-aaaa'" in rep.environment.provenance["arch"]
    rep = moe_select.explain(SMALL, engine_env={"CUDA_VISIBLE_DEVICES": "GPU-bbbb"})   # the engine's own value
    assert rep.environment.arch == "sm80"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")                    # this process hides every GPU
    assert moe_select.explain(SMALL, engine_env={}).environment.arch == "cpu"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")                   # by index: the order is inherited too
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert moe_select.explain(SMALL, engine_env={"X": "1"}).environment.arch == "sm80"


# --------------------------------------------------------------------------- PREQUANT's claims (5b2356c), interpreter
_PREQUANT_CASES = r'''
import sys, torch
sys.path.insert(0, "tests")
import test_triton_moe as T
from moe_select.backends import triton_moe_kernels as K
assert K.interpreting()
cases = [  # quant, act_quant, input dtype, ep, rank, top_k, on_input, H, I (H 80 / I 40: EVEN_K false)
    ("fp8_channel", "token", torch.float16, 2, 1, 2, False, 80, 40),
    ("fp8_tensor", "tensor", torch.float32, 2, 0, 2, False, 80, 40),
    ("fp8_tensor", "token", torch.bfloat16, 1, 0, 1, True, 64, 48),
    ("fp8_channel", "tensor", torch.float32, 1, 0, 1, True, 80, 48),
]
for quant, aq, dt, ep, rank, k, on_input, h, i in cases:
    seed = 11 + rank + h
    spec = T.spec_of(quant, k=k, h=h, i=i, e=8, ep=ep, rank=rank)
    layer = T.Layer(spec, seed)
    core, pw = T.core_for(spec, layer, act_quant=aq, apply_router_weight_on_input=on_input)
    x, ids, w = T.routing(spec, 9, seed, dtype=dt)
    base = core.config_for(9)
    outs = {}
    for on in (False, True):
        core.config_for = lambda t, on=on: T._with_flag(base, "PREQUANT", on)
        outs[on] = core.forward(x, ids, w, pw)
    assert outs[True].dtype == dt, (outs[True].dtype, dt)
    assert torch.equal(outs[True], outs[False]), f"PREQUANT changed the output: {quant} {aq} {dt} ep {ep} rank {rank}"
    T.check(spec, layer, x, ids, w, outs[True], f"PREQUANT {quant} {aq}", seed, on_input=on_input, act_quant=aq)
    empty = core.forward(x[:0], ids[:0], w[:0], pw)                  # zero tokens
    assert empty.shape == (0, h) and empty.dtype == dt
print("ok", len(cases))
'''


def test_prequant_is_bit_identical_for_any_input_dtype_ep_rank_weight_on_input_and_uneven_k():
    """PREQUANT's claims the day's tests did not reach (they ran bf16 inputs, one rank, the weight in the
    epilogue, H 64): fp16 and float32 inputs, expert-parallel ranks (expert_offset), routing weight on the input,
    K tails (H 80, I 40: EVEN_K false), per-token and per-tensor scales, zero tokens: the output equals the
    in-loop quantization's bit for bit and is within the tolerance of the float64 reference. Triton's
    interpreter in a subprocess (a few seconds)."""
    import importlib.util
    import os
    import sys

    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("numpy") is None:
        pytest.skip("triton (and numpy) not installed")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", _PREQUANT_CASES], cwd=root, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok 4"), r.stdout[-2000:] + r.stderr[-4000:]
