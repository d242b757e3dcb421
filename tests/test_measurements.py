"""moe_select.measurements (issue 25): the measurement file's model, its fingerprint, loading with typed errors,
and the key-mismatch functions."""
from __future__ import annotations

import json

import pytest

from moe_select.errors import InputError
from moe_select.measurements import (INTERVAL, KIND, TIE_RULE, LayerKey, MachineKey, Measurements, Point,
                                     layer_key_mismatch, load_measurements, machine_key_mismatch, overlap)


def layer(**kw):
    return LayerKey(**{"num_experts": 8, "hidden_size": 64, "intermediate_size": 32, "top_k": 2, "activation": "silu",
                       "format": "bf16", "tp": 1, "ep": 1, "a2a": "none", **kw})


def machine(**kw):
    return MachineKey(**{"gpu": "NVIDIA H200", "arch": "sm90", "driver": "570.86", "cuda": "13.0", "torch": "2.11.0",
                         "triton": "3.6.0", "packages": {"flashinfer-python": "0.6.4"}, "moe_select": "0.1.0",
                         "tile_configs": None, "cuda_graph": True, **kw})


def point(runner="triton", tokens=1, median=10.0, half=0.1, **kw):
    return Point(**{"runner": runner, "tokens": tokens, "samples": 20, "median_us": median, "p10_us": median * 0.9,
                    "p90_us": median * 1.1, "ci_low_us": median - half, "ci_high_us": median + half, "stopped": "narrow", **kw})


def sample() -> Measurements:
    return Measurements.model_validate({
        "kind": KIND, "schema": 1, "layer": layer().model_dump(), "machine": machine().model_dump(),
        "method": {"timing": "cuda_graph_replay", "interval": INTERVAL, "target_rel_half_width": 0.02, "budget_s_per_point": 1.0,
                   "tie_rule": TIE_RULE, "drift_threshold": 0.1},
        "created": "2026-12-01T10:00:00Z", "duration_s": 12.5,
        "points": [point().model_dump(), point("torch_grouped_mm", 1, 12.0).model_dump(), point("triton", 64, 30.0).model_dump()],
        "skipped": {"flashinfer_cutlass": "verify: differs"}})


def test_round_trip_through_a_file(tmp_path):
    m = sample()
    f = tmp_path / "tune.json"
    f.write_text(m.to_json())
    assert json.loads(f.read_text())["schema"] == 1  # the JSON key is schema, not the attribute's name
    (back,) = load_measurements(f)
    assert back == m and back.fingerprint() == m.fingerprint()
    assert back.runners() == ["torch_grouped_mm", "triton"] and back.token_counts() == [1, 64]
    assert back.table()[1]["torch_grouped_mm"].median_us == 12.0


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, path + (i,))
    else:
        yield path, obj


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.0001
    if value is None:
        return "x"
    if value == "narrow":
        return "budget"
    if value == "cuda_graph_replay":
        return "eager"
    if value.endswith("Z"):
        return value.replace("10:00:00", "10:00:01")
    return value + "x"


def test_fingerprint_changes_with_every_field():
    base = sample()
    d0 = base.to_dict()
    seen = 0
    for path, value in _leaves(d0):
        if path in (("kind",), ("schema",)):
            continue  # a single allowed value each
        d = json.loads(json.dumps(d0))
        cur = d
        for k in path[:-1]:
            cur = cur[k]
        cur[path[-1]] = {"quant": "bf16"} if path == ("deployment",) else _changed(value)
        if path[-1] in ("median_us",):  # keep the point's order invariants: move the whole point
            p = cur
            for k in ("p10_us", "p90_us", "ci_low_us", "ci_high_us"):
                p[k] = p[k] * 1.0001
        other = Measurements.from_dict(d)
        assert other.fingerprint() != base.fingerprint(), path
        seen += 1
    assert seen > 40
    assert len(base.fingerprint()) == 64 and base.fingerprint() == sample().fingerprint()


def test_bad_field_names_file_line_and_field(tmp_path):
    d = sample().to_dict()
    d["points"][1]["median_us"] = "fast"
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d, indent=1))
    with pytest.raises(InputError) as e:
        load_measurements(f)
    (issue,) = e.value.issues
    line = next(i for i, text in enumerate(f.read_text().splitlines(), 1) if '"fast"' in text)
    assert (issue.file, issue.line, issue.field) == (str(f), line, "points[1].median_us"), issue


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["layer"].pop("top_k"), "layer.top_k"),
    (lambda d: d["machine"].update(cuda_graph="yes"), "machine.cuda_graph"),
    (lambda d: d.update(created="yesterday"), "created"),
    (lambda d: d.update(created="2026-12-01T10:00:00+02:00"), "created"),
    (lambda d: d["method"].update(timing="wall"), "method.timing"),
    (lambda d: d["points"][0].update(stopped="tired"), "points[0].stopped"),
    (lambda d: d["points"][0].update(ci_low_us=10.5), "points[0]"),  # above the median
    (lambda d: d["points"].append(dict(d["points"][0])), ""),  # the same runner and tokens twice
    (lambda d: d.update(extra=1), "extra"),
])
def test_invalid_values_are_refused_naming_the_field(tmp_path, edit, field):
    d = sample().to_dict()
    edit(d)
    f = tmp_path / "m.json"
    f.write_text(json.dumps(d, indent=1))
    with pytest.raises(InputError) as e:
        load_measurements(f)
    assert all(i.file == str(f) for i in e.value.issues)
    assert any(i.field.startswith(field) for i in e.value.issues), e.value.issues


def test_not_a_measurement_file(tmp_path):
    f = tmp_path / "plan.json"
    f.write_text(json.dumps({"kind": "plan", "x": 1}))
    with pytest.raises(InputError, match="kind") as e:
        load_measurements(f)
    assert e.value.issues[0].field == "kind" and e.value.issues[0].line == 1
    g = tmp_path / "list.json"
    g.write_text("[1, 2]")
    with pytest.raises(InputError, match="JSON object"):
        load_measurements(g)
    with pytest.raises(InputError, match="no such file"):
        load_measurements(tmp_path / "missing.json")


def test_a_folder_loads_every_json_file_and_reports_each_bad_one(tmp_path):
    a, b = sample(), sample().model_copy(update={"duration_s": 3.0})
    (tmp_path / "a.json").write_text(a.to_json())
    (tmp_path / "b.json").write_text(b.to_json())
    (tmp_path / "notes.txt").write_text("not read")
    assert [m.duration_s for m in load_measurements(tmp_path)] == [12.5, 3.0]
    (tmp_path / "c.json").write_text("{")
    (tmp_path / "d.json").write_text(json.dumps({**a.to_dict(), "duration_s": -1}))
    with pytest.raises(InputError) as e:
        load_measurements(tmp_path)
    assert {i.file for i in e.value.issues} == {str(tmp_path / "c.json"), str(tmp_path / "d.json")}
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no \\*.json"):
        load_measurements(empty)


def test_mismatch_functions_name_the_fields():
    m = sample()
    assert layer_key_mismatch(m, layer()) == [] and machine_key_mismatch(m, machine()) == []
    assert layer_key_mismatch(m, layer(top_k=4, format="fp8_block")) == ["top_k", "format"]
    assert machine_key_mismatch(m, machine(gpu="NVIDIA H100 80GB HBM3", driver="580.1")) == ["gpu", "driver"]
    assert machine_key_mismatch(m, machine(packages={"flashinfer-python": "0.6.5"})) == ["packages"]
    assert machine_key_mismatch(m, machine(packages={})) == ["packages"]
    assert machine_key_mismatch(m, machine(cuda_graph=False, tile_configs="ab" * 32)) == ["tile_configs", "cuda_graph"]


def test_overlap_is_the_tie_rule():
    assert overlap(point(median=10, half=1), point(median=11.5, half=1))
    assert not overlap(point(median=10, half=0.5), point(median=11.5, half=0.5))
    assert point(median=10, half=0.2).rel_half_width == pytest.approx(0.02)


def test_layer_key_of_a_deployment_is_per_rank():
    import moe_select
    from moe_select.measurements import layer_key

    r = moe_select.explain({"arch": "cpu", "quant": "bf16", "tp": 4, "ep": 2, "engine": "moe_select", "model": {
        "num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 96, "activation": "silu",
        "routing": "renormalize"}})
    assert layer_key(r.deployment) == layer(num_experts=4, intermediate_size=48, tp=4, ep=2)
