"""Names read from files and flags are checked whole: a trailing newline is not part of a name.

Python's ``$`` also matches just before a string's final ``\\n``, so ``re.match(r"^[a-z]...$", "gelu_new\\n")`` accepted
the name with its newline (found while writing tests/test_mutants_model_config.py). A JSON ``"gelu_new\\n"`` or a
quoted YAML ``"torch\\n"`` is easy to write by accident; the name would then be kept (an unknown activation judged as
its own) or compared as a different key. Every name check of this kind now matches the whole string
(``re.fullmatch`` / ``\\Z``); these tests give each one a name with and without the newline.
"""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from moe_select.conditions import When
from moe_select.deployment import deployment_from_dict
from moe_select.errors import InputError
from moe_select.model_config import read_model_config
from moe_select.vocab_names import normalize_arch, range_floor

from test_mutants_c import BASE, _checkpoint


def _d(tmp_path, name: str):
    (tmp_path / name).mkdir()
    return tmp_path / name


def _activation(tmp_path, act: str) -> str:
    folder = _checkpoint(tmp_path, {**BASE, "model_type": "x", "hidden_act": act})
    return read_model_config(folder).shape["activation"]


def test_an_unknown_activation_is_kept_but_not_with_a_trailing_newline(tmp_path):
    assert _activation(_d(tmp_path, "a"), "my_act") == "my_act"
    with pytest.raises(InputError) as e:
        _activation(_d(tmp_path, "b"), "my_act\n")
    assert [(i.field, i.message.split(" is not")[1][:23]) for i in e.value.issues] == [
        ("hidden_act", " an activation name (re")]


def test_an_architectures_entry_with_a_trailing_newline_is_no_class_name(tmp_path):
    folder = _checkpoint(_d(tmp_path, "a"), {**BASE, "model_type": "x", "architectures": ["MixtralForCausalLM"]})
    assert read_model_config(folder).shape["architecture"] == "MixtralForCausalLM"
    folder = _checkpoint(_d(tmp_path, "b"), {**BASE, "model_type": "x", "architectures": ["MixtralForCausalLM\n"]})
    with pytest.raises(InputError) as e:
        read_model_config(folder)
    assert [i.field for i in e.value.issues] == ["architectures"]
    assert "architectures must be a list of model class names" in e.value.issues[0].message


@pytest.mark.parametrize("values", [{"packages": {"torch\n": "2.13.0"}}, {"dispatch_precision": {"main\n": "fp8_group"}}])
def test_deployment_names_with_a_trailing_newline_are_refused(values):
    good = {k: {key.strip(): v for key, v in m.items()} for k, m in values.items()}
    deployment_from_dict({"gpu": "H200", **good})          # the same name without the newline is taken
    with pytest.raises(InputError) as e:
        deployment_from_dict({"gpu": "H200", **values})
    assert [i.field.split(".")[0] for i in e.value.issues] == list(values)


@pytest.mark.parametrize("field, name", [("architecture", "NemotronHForCausalLM"), ("a2a", "deepep")])
def test_rule_condition_names_with_a_trailing_newline_are_refused(field, name):
    assert getattr(When(**{field: [name]}), field) == [name]
    with pytest.raises(ValidationError):
        When(**{field: [name + "\n"]})


def test_an_arch_range_with_a_trailing_newline_has_no_floor():
    assert range_floor("sm90+") == (9, 0)
    assert range_floor("sm90+\n") is None
    assert normalize_arch(" sm90\n") == "sm90"   # an arch input is stripped first (documented): still read
