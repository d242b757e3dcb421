"""Issue 19, typed seams: the understood model is a ModelShape (its JSON in a plan unchanged: a mapping without
the unset fields), ``resolve`` returns ``MoeRunner``, and every bundled adapter's ``register`` takes a typed
``Registrar``, so that mypy (CI) checks each class it registers against ``ExpertCore``/``TokenDispatcher``."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import moe_select
from moe_select.deployment import Understood
from moe_select.shape import ModelShape

ROOT = Path(__file__).resolve().parent.parent
SHAPE = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "routing": "deepseek_v3",
         "n_group": 4, "topk_group": 2}


def test_understood_model_is_a_shape_and_the_plan_json_keeps_its_mapping():
    plan = moe_select.plan({"arch": "cpu", "engine": "moe_select", "quant": "bf16", "model": SHAPE})
    assert isinstance(plan.deployment.model, ModelShape)
    assert plan.deployment.model.n_group == 4 and plan.deployment.model.swiglu_limit is None
    written = json.loads(plan.to_json())["deployment"]["model"]
    # the mapping as before issue 19: every given or defaulted field, no nulls for the unset optional ones
    assert written == {**SHAPE, "activation": "silu", "num_shared_experts": 0}
    again = Understood.model_validate(json.loads(plan.to_json())["deployment"])
    assert again.model == plan.deployment.model


def test_resolve_is_annotated_with_the_runner():
    from moe_select import resolver

    assert resolver.resolve.__annotations__["return"] == "MoeRunner"
    assert resolver.resolve_layers.__annotations__["return"] == "dict[str, MoeRunner]"


def test_every_bundled_adapter_registers_through_a_typed_registrar():
    """An untyped ``register(registry)`` would make mypy skip the check of what it registers."""
    found = []
    for path in sorted((ROOT / "backends").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name == "register":
                ann = node.args.args[0].annotation
                found.append((path.relative_to(ROOT).as_posix(), ast.unparse(ann) if ann is not None else None))
    assert len(found) >= 6, found
    assert all(ann == "Registrar" for _, ann in found), found
