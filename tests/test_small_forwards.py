"""A prefer rule's ``small_forwards`` (issue 26): forwards up to ``max_tokens`` run another runner, the plan gets token
ranges without a measurement table, and ``resolve`` builds one core per range (as for a measured plan, issue 25).

On the CPU: a small bf16 layer (8 experts, top-2, H 64, I 32) where torch_native and torch_grouped_mm both run; an
operator rule prefers torch_native and gives forwards up to 64 tokens to torch_grouped_mm."""
from __future__ import annotations

import pytest

import moe_select
from moe_select.errors import InputError

SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu",
         "routing": "renormalize"}
DEP = {"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True}
RULE = """schema_version: 1
rules:
  - id: cpu-split
    when: {arch: [cpu]}
    prefer: [torch_native]
    small_forwards: {max_tokens: 64, prefer: [SMALL_RUNNERS]}
"""


def rules(tmp_path, small: str = "torch_grouped_mm", extra: str = ""):
    d = tmp_path / "ops"
    d.mkdir(parents=True, exist_ok=True)
    (d / "split.yaml").write_text(RULE.replace("SMALL_RUNNERS", small) + extra, encoding="utf-8")
    return d


def test_the_largest_forward_past_the_bound_gets_two_ranges(tmp_path):
    d = rules(tmp_path)
    report = moe_select.explain({**DEP, "max_tokens_per_rank": 4096}, rules_dirs=[d])
    p = report.plan
    assert p.runner == "torch_native" and p.chosen_by.how == "rule" and p.chosen_by.rule == "cpu-split"
    assert [(r.max_tokens, r.runner) for r in p.ranges] == [(64, "torch_grouped_mm"), (None, "torch_native")]
    assert [r.runner for r in p.range_runners] == ["torch_grouped_mm", "torch_native"]
    assert p.measurements is None and "torch_grouped_mm" not in p.alternatives
    text = report.render_text()
    assert "token ranges: <= 64: torch_grouped_mm; above: torch_native (rule cpu-split: small_forwards)" in text
    assert any(n.startswith("token ranges (rule cpu-split, ") and "split.yaml:6" in n for n in p.notes), p.notes
    assert "by token range: <= 64 torch_grouped_mm, above torch_native" in report.summary()
    plain = moe_select.explain({**DEP, "max_tokens_per_rank": 4096}, rules_dirs=[rules(tmp_path / "b", "triton")]).plan
    assert plain.ranges == [] and plain.fingerprint != p.fingerprint


def test_a_largest_forward_within_the_bound_runs_the_small_runner(tmp_path):
    d = rules(tmp_path)
    for t in (1, 64):
        p = moe_select.explain({**DEP, "max_tokens_per_rank": t}, rules_dirs=[d]).plan
        assert p.runner == "torch_grouped_mm" and p.ranges == [], (t, p.runner)
        assert p.chosen_by.rule == "cpu-split" and p.chosen_by.source.endswith("split.yaml:6"), p.chosen_by
    assert moe_select.explain({**DEP, "max_tokens_per_rank": 65}, rules_dirs=[d]).plan.runner == "torch_native"


def test_no_eligible_small_runner_leaves_one_range(tmp_path):
    """triton is refused on a CPU (no interpreter): the rule's choice stands for every forward, and says nothing of
    ranges; an explicit runner ignores small_forwards."""
    p = moe_select.explain({**DEP, "max_tokens_per_rank": 4096}, rules_dirs=[rules(tmp_path / "b", "triton")]).plan
    assert p.runner == "torch_native" and p.ranges == []
    q = moe_select.explain({**DEP, "max_tokens_per_rank": 4096, "runner": "torch_native"}, rules_dirs=[rules(tmp_path)]).plan
    assert q.ranges == [] and q.chosen_by.how == "explicit"


@pytest.mark.parametrize("body, where, what", [
    ("  - id: bad\n    when: {arch: [cpu]}\n    disable: [torch_native]\n    reason: x\n"
     "    small_forwards: {max_tokens: 8, prefer: [triton]}\n", ":3: rules[0]", "small_forwards goes with a prefer list"),
    ("  - id: bad\n    when: {arch: [cpu]}\n    prefer: measured\n    small_forwards: {max_tokens: 8, prefer: [triton]}\n",
     ":3: rules[0]", "small_forwards goes with a prefer list"),
    ("  - id: bad\n    when: {arch: [cpu]}\n    prefer: [torch_native]\n    small_forwards: {max_tokens: 8, prefer: [tritn]}\n",
     ":6: small_forwards.prefer", "names unknown runner 'tritn' (did you mean 'triton'?)"),
    ("  - id: bad\n    when: {arch: [cpu]}\n    prefer: [torch_native]\n    small_forwards: {max_tokens: 0, prefer: [triton]}\n",
     ":6: rules[0].small_forwards.max_tokens", "greater than 0"),
])
def test_bad_small_forwards_name_the_file_line_and_field(tmp_path, body, where, what):
    d = tmp_path / "ops"
    d.mkdir()
    (d / "bad.yaml").write_text("schema_version: 1\nrules:\n" + body, encoding="utf-8")
    with pytest.raises(InputError) as exc:
        moe_select.explain(DEP, rules_dirs=[d])
    text = str(exc.value)
    assert f"bad.yaml{where}" in text and what in text, text


def test_resolve_builds_a_core_per_range_and_runs_each_forward_on_its_range(tmp_path, monkeypatch):
    import torch

    from moe_select.formats import tolerance
    from moe_select.reference import QuantizedExperts, reference_moe, rel_error

    p = moe_select.plan({**DEP, "max_tokens_per_rank": 4096}, rules_dirs=[rules(tmp_path)])
    runner = moe_select.resolve(p, verify=True)       # verify checks each range's runner against float64
    assert runner.range_runners == ("torch_grouped_mm", "torch_native")
    assert [runner.runner_for(t) for t in (1, 64, 65, 4096)] == ["torch_grouped_mm", "torch_grouped_mm",
                                                                 "torch_native", "torch_native"]
    calls: list[str] = []
    for name, core in zip(runner.range_runners, runner._cores):
        fwd = core.forward
        monkeypatch.setattr(core, "forward", lambda *a, _f=fwd, _n=name, **k: (calls.append(_n), _f(*a, **k))[1])
    g = torch.Generator().manual_seed(11)
    w13 = (torch.randn(8, 64, 64, generator=g) / 8).to(torch.bfloat16)
    w2 = (torch.randn(8, 64, 32, generator=g) / 6).to(torch.bfloat16)
    prepared = runner.prepare_weights(w13, w2)
    for t, want in ((5, "torch_grouped_mm"), (100, "torch_native")):
        x = torch.randn(t, 64, generator=g).to(torch.bfloat16)
        ids = torch.rand(t, 8, generator=g).argsort(dim=1)[:, :2].to(torch.int32)
        wts = torch.rand(t, 2, generator=g) + 0.1
        wts = (wts / wts.sum(dim=1, keepdim=True)).float()
        calls.clear()
        out = runner.run(x, ids, wts, prepared)
        ref = reference_moe(x, ids, wts, QuantizedExperts(w13, {}, "bf16"), QuantizedExperts(w2, {}, "bf16"), "silu")
        assert calls == [want] and rel_error(out, ref) <= tolerance("bf16", "bfloat16")
