"""Issue 17, rows 6 and 7: ``plan -o`` through a link in a sticky folder, and empty flag or environment values.
Each test: input -> exit code -> the message (row 5, the catalog cache, is in test_catalog_cache.py)."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from moe_select.cli import main

from conftest import CONFIGS

MODEL = "num_experts=8,top_k=2,hidden_size=64,moe_intermediate_size=32"
PLAN = ["plan", "--arch", "cpu", "--engine", "moe_select", "--quant", "bf16", "--model", MODEL]  # this install (no serving engine runs a CPU plan)
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="gives files to other users (os.lchown): run as root")
OTHER, FOLDER_OWNER = 3001, 2001  # uids of nobody on this machine: "another user" and the sticky folder's owner


def _sticky(tmp_path: Path) -> Path:
    """A /tmp-like folder: sticky, world-writable, owned by another user."""
    d = tmp_path / "shared"
    d.mkdir()
    os.chown(d, FOLDER_OWNER, FOLDER_OWNER)
    os.chmod(d, 0o1777)
    return d


def _victim(tmp_path: Path) -> Path:
    f = tmp_path / "private.json"
    f.write_text("private")
    os.chmod(f, 0o600)
    return f


def _one_line(err: str, says: str) -> str:
    lines = [ln for ln in err.splitlines() if says in ln]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------------------------ row 6: plan -o through a link
@needs_root
def test_a_link_of_another_user_in_a_sticky_folder_is_refused(tmp_path, capsys):
    """Was: the link's target (a 0600 file of the caller) was replaced by the plan and became 0644."""
    victim = _victim(tmp_path)
    link = _sticky(tmp_path) / "plan.json"
    link.symlink_to(victim)
    os.lchown(link, OTHER, OTHER)
    assert main([*PLAN, "-o", str(link)]) == 1
    line = _one_line(capsys.readouterr().err, "cannot write")
    assert line.startswith(f"moe-select: cannot write {link}: {link} is a symbolic link owned by uid {OTHER}")
    assert "protected_symlinks" in line and f"(owned by uid {FOLDER_OWNER})" in line
    assert victim.read_text() == "private" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert link.is_symlink()


@needs_root
def test_a_link_to_a_link_of_another_user_is_refused_at_that_link(tmp_path, capsys):
    victim = _victim(tmp_path)
    shared = _sticky(tmp_path)
    (shared / "inner").symlink_to(victim)
    os.lchown(shared / "inner", OTHER, OTHER)
    outer = tmp_path / "plan.json"  # the caller's own link, in the caller's folder, to the other user's link
    outer.symlink_to(shared / "inner")
    assert main([*PLAN, "-o", str(outer)]) == 1
    assert f"{shared / 'inner'} is a symbolic link owned by uid {OTHER}" in capsys.readouterr().err
    assert victim.read_text() == "private"


@needs_root
@pytest.mark.parametrize("owner", ["caller", "folder owner"])
def test_a_link_the_caller_or_the_folder_owner_owns_is_followed_and_the_file_keeps_its_mode(tmp_path, owner, capsys):
    victim = _victim(tmp_path)
    link = _sticky(tmp_path) / "plan.json"
    link.symlink_to(victim)
    if owner == "folder owner":
        os.lchown(link, FOLDER_OWNER, FOLDER_OWNER)
    assert main([*PLAN, "-o", str(link)]) == 0
    assert link.is_symlink() and json.loads(victim.read_text())["runner"]
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600


def test_an_existing_file_keeps_its_mode(tmp_path, capsys):
    """Was: 0600 became 0644 (0666 & ~umask) when the plan replaced the file."""
    f = _victim(tmp_path)
    assert main([*PLAN, "-o", str(f)]) == 0
    assert json.loads(f.read_text())["runner"] and stat.S_IMODE(f.stat().st_mode) == 0o600
    os.chmod(f, 0o640)
    assert main([*PLAN, "-o", str(f)]) == 0
    assert stat.S_IMODE(f.stat().st_mode) == 0o640


@needs_root
def test_an_existing_file_keeps_its_owner_where_the_caller_may_give_it(tmp_path, capsys):
    f = _victim(tmp_path)
    os.chown(f, FOLDER_OWNER, FOLDER_OWNER)
    assert main([*PLAN, "-o", str(f)]) == 0
    st = f.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (FOLDER_OWNER, FOLDER_OWNER, 0o600)


@needs_root
def test_a_file_of_another_user_in_a_sticky_folder_is_not_replaced(tmp_path, capsys):
    """As protected_regular: another user's file in /tmp is not taken over (its mode would be the plan's)."""
    f = _sticky(tmp_path) / "plan.json"
    f.write_text("theirs")
    os.chown(f, OTHER, OTHER)
    os.chmod(f, 0o666)
    assert main([*PLAN, "-o", str(f)]) == 1
    line = _one_line(capsys.readouterr().err, "cannot write")
    assert f"{f} is a file owned by uid {OTHER}" in line and "protected_regular" in line
    assert f.read_text() == "theirs"


def test_a_file_the_caller_cannot_write_is_left_as_it_is(tmp_path, capsys, monkeypatch):
    f = _victim(tmp_path)
    os.chmod(f, 0o400)
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if Path(p) == f and mode == os.W_OK else True)
    assert main([*PLAN, "-o", str(f)]) == 1
    assert "is not writable by you (mode 0400)" in capsys.readouterr().err and f.read_text() == "private"


def test_a_link_loop_is_an_error_not_a_hang(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.symlink_to(b)
    b.symlink_to(a)
    assert main([*PLAN, "-o", str(a)]) == 1
    assert "more than 40 symbolic links" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ row 7: empty values
EXPLAIN = ["explain", "--gpu", "H100", "--model-config", str(CONFIGS / "Qwen__Qwen3-30B-A3B")]


@pytest.mark.parametrize("argv, flag", [
    ([*EXPLAIN, "--model-config", ""], "--model-config"),   # was: the current folder ("no config.json")
    ([*EXPLAIN, "--rules", ""], "--rules"),                 # was: the current folder as a rules folder
    ([*EXPLAIN, "--backends", ""], "--backends"),           # was: the current folder as a capability folder, silently
    ([*EXPLAIN, "--deployment", ""], "--deployment/-d"),    # was: ignored
    ([*EXPLAIN, "-d", ""], "--deployment/-d"),
    ([*EXPLAIN, "--model", ""], "--model"),                 # was: ignored
    ([*PLAN, "-o", ""], "-o/--output"),                     # was: stdout
    (["check", ""], "paths"),                               # was: the current folder
    (["run", "--model-config", ""], "--model-config"),
    (["run", "--model-config", str(CONFIGS / "Qwen__Qwen3-30B-A3B"), "--rules", ""], "--rules"),
    (["matrix", "--root", ""], "--root"),                   # was: the current folder
    (["schemas", "--dir", ""], "--dir"),                    # was: the installed schemas
])
def test_an_empty_flag_value_exits_2_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert f"error: argument {flag}: is empty: give " in capsys.readouterr().err


@pytest.mark.parametrize("name, value, says", [
    ("MOE_SELECT_RULES", "", "is set but empty"),                 # was: ignored
    ("MOE_SELECT_BACKENDS", "", "is set but empty"),              # was: ignored
    ("MOE_SELECT_CACHE_DIR", "", "is set but empty"),             # was: the default cache folder
    ("MOE_SELECT_CACHE_DIR", "  ", "is set but empty"),
    ("MOE_SELECT_RULES", f"{CONFIGS}{os.pathsep}", "has an empty entry (entry 2 of 2"),  # was: skipped
    ("MOE_SELECT_BACKENDS", f"{os.pathsep}{CONFIGS}", "has an empty entry (entry 1 of 2"),
])
@pytest.mark.parametrize("command", ["explain", "plan", "check"])
def test_an_empty_environment_variable_exits_2_naming_it(name, value, says, command, monkeypatch, capsys):
    monkeypatch.setenv(name, value)
    argv = {"explain": EXPLAIN, "plan": [*PLAN, "-o", "-"], "check": ["check"]}[command]
    if command == "check" and name == "MOE_SELECT_CACHE_DIR":
        pytest.skip("check reads every file itself: no catalog cache")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("invalid input:") and f"${name}: " in err and says in err
