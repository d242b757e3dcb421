"""Tests that kill the mutants of moe_select/model_config.py that the local sampled run of 2026-12-02 (eighth session;
seed 19, 50 mutants per module, tree 352b298; benchmarks/results/mutation_sampled_local_2026-12-02_s8.json) left
alive: 7 survived. Each test names the mutants it kills (``model_config.x_function__mutmut_N``, numbered at 352b298);
the expectations are written by hand from the inputs (config lines counted in the ``json.dumps(indent=1)`` text that
test_mutants_c's ``_checkpoint`` writes: one key per line, the object's ``{`` on line 1).

Equivalent, so not tested (the reason in one line each):

- x__check_shape__mutmut_5 (``loc = err.get("loc") or ()`` -> ``loc = None``): None reads as the empty loc, and only
  ModelShape's model-level check (loc ``()``) can fail there: read_model_config checks every field it puts in the
  shape to that field's own bounds first (test_mutants_c's docstring gives the field-by-field account).
- x_ǁ_Exclusionsǁcovered_layers__mutmut_14 (``range(len(p) + 1)`` -> ``range(len(p) + 2)`` in ``ends``): the extra
  ``j = len(p) + 1`` adds ``tuple(p[len(p) + 1:]) == ()``, which ``j = len(p)`` already put in the set.

x__issue__mutmut_45 and _48 (``getattr(cfg, "file", "config.json")``'s default left out / written ``XXconfig.jsonXX``)
change only what _issue says of a value without marks; read_model_config hands it marked mappings only (an
hf_quant_config.json that holds no object is refused before, naming that file), so the test calls _issue itself.
"""
from __future__ import annotations

from moe_select.errors import Issue
from moe_select.model_config import _issue, read_model_config

from test_mutants_c import BASE, _checkpoint, _issues, _line

#: MiniMax-M3's MoE keys at a tiny shape: hidden_act swigluoai (vLLM's swigluoai_uninterleave), sigmoid routing.
MINIMAX_M3 = {"model_type": "minimax_m3", "num_experts": 8, "num_experts_per_tok": 2, "hidden_size": 64,
              "moe_intermediate_size": 32, "hidden_act": "swigluoai", "scoring_func": "sigmoid"}


def test_an_unmarked_mapping_is_reported_as_config_json_line_0():
    """x__issue__mutmut_45 (no default: an AttributeError) and _48 (the default ``XXconfig.jsonXX``): a mapping without
    file marks (a plain dict) -> the issue names config.json, line 0, the key with its prefix."""
    err = _issue({"hidden_size": 0}, "hidden_size", "hidden_size 0 must be positive", "text_config.")
    assert err.issues == [Issue("config.json", 0, "text_config.hidden_size", "hidden_size 0 must be positive")]


def test_a_config_without_top_k_names_the_keys_read_at_the_mappings_line(tmp_path):
    """x_read_model_config__mutmut_180 (the prefix None: an AttributeError instead of the issue): no top-k key in a
    text_config (its mapping on line 3) -> the issue sits there under ``text_config``, naming the three keys read."""
    text = {k: v for k, v in BASE.items() if k != "num_experts_per_tok"}
    folder = _checkpoint(tmp_path, {"model_type": "x", "text_config": text})
    assert _line(folder, "text_config") == 3
    assert _issues(read_model_config, folder) == [Issue(
        str(folder / "config.json"), 3, "text_config",
        "no num_experts_per_tok or experts_per_token or moe_topk: cannot tell top_k")]


def test_swigluoai_without_swiglu_limit_is_refused_naming_vllms_assert(tmp_path):
    """x_read_model_config__mutmut_427 (the message's tail in lower case): hidden_act swigluoai (line 7) without
    swiglu_limit -> refused at hidden_act, naming vLLM's SWIGLUOAI_UNINTERLEAVE as it is spelt."""
    folder = _checkpoint(tmp_path, MINIMAX_M3)
    assert _line(folder, "hidden_act") == 7
    assert _issues(read_model_config, folder) == [Issue(
        str(folder / "config.json"), 7, "hidden_act", "hidden_act swigluoai (MiniMax-M3's clamped SwiGLU-OAI) without "
        "swiglu_limit: the clamp is required (vLLM asserts SWIGLUOAI_UNINTERLEAVE's clamp_limit)")]


def test_a_swiglu_alpha_that_is_no_number_is_named_under_text_config(tmp_path):
    """x_read_model_config__mutmut_463 (swiglu_alpha read without the ``text_config.`` prefix): MiniMax-M3's keys under
    text_config with swiglu_alpha the string "1.702" (line 12) -> refused as ``text_config.swiglu_alpha``."""
    folder = _checkpoint(tmp_path, {"model_type": "minimax_m3",
                                    "text_config": {**MINIMAX_M3, "swiglu_limit": 7, "swiglu_alpha": "1.702"}})
    assert _line(folder, "swiglu_alpha") == 12
    assert _issues(read_model_config, folder) == [Issue(
        str(folder / "config.json"), 12, "text_config.swiglu_alpha", "swiglu_alpha must be a number, got the string '1.702'")]
