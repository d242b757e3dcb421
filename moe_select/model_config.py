"""Read a Hugging Face checkpoint config (``config.json``, ModelOpt's ``hf_quant_config.json``) into
the MoE layer shape and the expert-weight quantization format.

Field names per model family (checked against the configs of Qwen1.5-MoE, Qwen3-MoE, OLMoE, Granite-MoE,
Mixtral, DeepSeek-V3/R1, Llama-4 and gpt-oss): experts from ``n_routed_experts`` / ``num_experts`` /
``num_local_experts``; expert width from ``moe_intermediate_size`` else ``intermediate_size``; Llama-4
nests its text model in ``text_config``. Routing follows the model's router code in transformers:
DeepSeek-V3 (``scoring_func: sigmoid``, ``topk_method: noaux_tc``) -> deepseek_v3; Llama-4 -> llama4;
Qwen-MoE/OLMoE with ``norm_topk_prob: false`` -> softmax_topk, with true -> renormalize; Mixtral,
Granite-MoE and gpt-oss (top-k then softmax over the k) -> renormalize.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError, Issue
from .yamlio import MarkedDict, load_file

_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
_RENORMALIZING = {"mixtral", "granitemoe", "gpt_oss", "granitemoeshared"}


@dataclass
class ModelInfo:
    """What a checkpoint config says: ``shape`` (dict of ModelShape fields), ``quant`` and where each
    value was read (``provenance``: field -> ``file:line (key)``)."""

    path: str
    model_type: str
    shape: dict[str, Any]
    quant: str
    dtype: str | None
    provenance: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: sha256 of every file read (absolute path -> hex digest): plans carry them, resolve re-checks them.
    files: dict[str, str] = field(default_factory=dict)


def _at(cfg: MarkedDict, key: str) -> str:
    return f"{cfg.file}:{cfg.key_lines.get(key, cfg.line)} ({key})"


def _issue(cfg: Any, key: str | None, msg: str) -> InputError:
    line = cfg.key_lines.get(key, cfg.line) if isinstance(cfg, MarkedDict) and key else getattr(cfg, "line", 0)
    return InputError(Issue(getattr(cfg, "file", "config.json"), line, key or "", msg))


def resolve_config_path(path: str | Path) -> tuple[Path, Path | None]:
    """``(config.json, hf_quant_config.json or None)`` for a checkpoint folder or a config.json path."""
    p = Path(path)
    if p.is_dir():
        cfg = p / "config.json"
        if not cfg.is_file():
            raise InputError(Issue(str(p), 0, "model_config", "the folder has no config.json"))
    elif p.is_file():
        cfg = p
    elif p.exists():
        raise InputError(Issue(str(p), 0, "model_config", "not a regular file or a folder"))
    else:
        raise InputError(Issue(str(p), 0, "model_config", "no such file or folder"))
    quant = cfg.parent / "hf_quant_config.json"
    return cfg, (quant if quant.is_file() else None)


def _quant_from_compressed_tensors(q: MarkedDict) -> str:
    groups = q.get("config_groups") or {}
    if not isinstance(groups, dict) or not groups:
        raise _issue(q, "config_groups", "compressed-tensors config without config_groups")
    formats = set()
    for name, g in groups.items():
        w, a = (g or {}).get("weights") or {}, (g or {}).get("input_activations")
        bits, typ, strategy = w.get("num_bits"), w.get("type"), w.get("strategy")
        fmt = q.get("format")
        if fmt == "nvfp4-pack-quantized" or (bits == 4 and typ == "float"):
            formats.add("nvfp4")
        elif bits == 8 and typ == "float":
            formats.add({"channel": "fp8_channel", "tensor": "fp8_tensor", "block": "fp8_block"}.get(strategy, f"?{strategy}"))
        elif bits == 8 and typ == "int":
            formats.add("int8_w8a8" if a else "int8_w8a16")
        elif bits == 4 and typ == "int" and not a:
            formats.add("int4_w4a16")
        else:
            raise _issue(g, "weights", f"compressed-tensors group {name!r}: weights num_bits={bits} type={typ} "
                         f"strategy={strategy} (activations {'quantized' if a else 'not quantized'}) is not a supported format")
    bad = [f for f in formats if f.startswith("?")]
    if bad or len(formats) != 1:
        raise _issue(q, "config_groups", f"compressed-tensors groups give formats {sorted(formats)}; expected exactly one known format")
    return formats.pop()


def _quant_of(cfg: MarkedDict, text: MarkedDict, hfq: MarkedDict | None, prov: dict[str, str]) -> str:
    if hfq is not None:
        q = hfq.get("quantization") or {}
        algo = q.get("quant_algo")
        table = {"NVFP4": "nvfp4", "FP8": "fp8_tensor", "MXFP8": "mxfp8", "W4A16_AWQ": "int4_w4a16"}
        if algo not in table:
            raise _issue(q if isinstance(q, MarkedDict) else hfq, "quant_algo",
                         f"ModelOpt quant_algo {algo!r} is not a supported format (known: {', '.join(table)})")
        prov["quant"] = _at(q, "quant_algo") if isinstance(q, MarkedDict) else hfq.file
        return table[algo]
    q = cfg.get("quantization_config") or text.get("quantization_config")
    if not q:
        dtype = text.get("torch_dtype") or cfg.get("torch_dtype")
        src = text if "torch_dtype" in text else cfg
        if dtype in ("bfloat16", "float16"):
            prov["quant"] = _at(src, "torch_dtype")
            return "bf16" if dtype == "bfloat16" else "fp16"
        if dtype is None:
            prov["quant"] = f"{cfg.file} (no quantization_config and no torch_dtype: unquantized, taken as bf16)"
            return "bf16"
        raise _issue(src, "torch_dtype", f"torch_dtype {dtype!r} with no quantization_config: expert weights in "
                     f"{dtype} are not a supported format (bf16, fp16)")
    holder = cfg if "quantization_config" in cfg else text
    method = q.get("quant_method")
    prov["quant"] = _at(q, "quant_method") if isinstance(q, MarkedDict) else _at(holder, "quantization_config")
    if method == "fp8":
        block = q.get("weight_block_size")
        if block is None:
            return "fp8_tensor"
        if list(block) == [128, 128]:
            return "fp8_block"
        raise _issue(q, "weight_block_size", f"fp8 with weight_block_size {list(block)}: only [128, 128] blocks are a known format")
    if method == "mxfp4":
        return "mxfp4"
    if method == "compressed-tensors":
        return _quant_from_compressed_tensors(q)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = q.get("bits", q.get("w_bit"))
        if bits == 4:
            return "int4_w4a16"
        if bits == 8 and method.startswith("gptq"):
            return "int8_w8a16"
        raise _issue(q, "bits", f"{method} with {bits} bits is not a supported format")
    if method == "modelopt":
        algo = q.get("quant_algo")
        if algo == "NVFP4":
            return "nvfp4"
        if algo == "FP8":
            return "fp8_tensor"
        raise _issue(q, "quant_algo", f"ModelOpt quant_algo {algo!r} is not a supported format")
    raise _issue(q, "quant_method", f"quantization method {method!r} is not a supported format "
                 "(known: fp8, mxfp4, compressed-tensors, awq, gptq, modelopt)")


def _load_json(path: Path, name: str) -> Any:
    """Strict JSON (what Hugging Face writes), read through the marked loader for line numbers."""
    import json

    try:
        text = path.read_text(encoding="utf-8")
        json.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(Issue(name, 0, "", f"cannot read: {exc}")) from None
    except json.JSONDecodeError as exc:
        raise InputError(Issue(name, exc.lineno, "", f"not valid JSON: {exc.msg} (column {exc.colno})")) from None
    return load_file(path, name)


def read_model_config(path: str | Path, display: str | None = None) -> ModelInfo:
    """Parse a checkpoint folder or config.json. Raises :class:`InputError` (file:line, key) when the
    config is not a MoE model or its quantization is unknown or unsupported."""
    cfg_path, hfq_path = resolve_config_path(path)
    name = display or str(cfg_path)
    cfg = _load_json(cfg_path, name)
    if not isinstance(cfg, MarkedDict):
        raise InputError(Issue(name, 0, "", f"{cfg_path.name} does not hold a JSON object"))
    hfq = _load_json(hfq_path, str(Path(name).parent / hfq_path.name)) if hfq_path else None
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), MarkedDict) else cfg
    model_type = str(cfg.get("model_type", text.get("model_type", "?")))
    prov: dict[str, str] = {}
    shape: dict[str, Any] = {}

    key = next((k for k in _EXPERT_KEYS if isinstance(text.get(k), int) and text.get(k) > 0), None)
    if key is None:
        raise _issue(text, None, f"not a MoE config: none of {', '.join(_EXPERT_KEYS)} is a positive integer")
    shape["num_experts"], prov["num_experts"] = text[key], _at(text, key)
    for k in ("num_experts_per_tok", "experts_per_token", "moe_topk"):
        if isinstance(text.get(k), int):
            shape["top_k"], prov["top_k"] = text[k], _at(text, k)
            break
    else:
        raise _issue(text, None, "no num_experts_per_tok: cannot tell top_k")
    shape["hidden_size"], prov["hidden_size"] = text["hidden_size"], _at(text, "hidden_size")
    ikey = "moe_intermediate_size" if isinstance(text.get("moe_intermediate_size"), int) else "intermediate_size"
    if not isinstance(text.get(ikey), int):
        raise _issue(text, None, "no moe_intermediate_size or intermediate_size")
    shape["moe_intermediate_size"], prov["moe_intermediate_size"] = text[ikey], _at(text, ikey)

    mt = str(text.get("model_type", model_type))
    if model_type == "gpt_oss" or mt == "gpt_oss":
        shape["activation"], prov["activation"] = "swiglu_oai", f"{name} (model_type gpt_oss: clamped SwiGLU, alpha 1.702)"
        if isinstance(text.get("swiglu_limit"), (int, float)):
            shape["swiglu_limit"], prov["swiglu_limit"] = float(text["swiglu_limit"]), _at(text, "swiglu_limit")
    else:
        act = text.get("hidden_act", "silu")
        table = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu", "relu2": "relu2"}
        if act not in table:
            raise _issue(text, "hidden_act", f"hidden_act {act!r} is not a supported MoE activation ({', '.join(table)})")
        shape["activation"] = table[act]
        prov["activation"] = _at(text, "hidden_act") if "hidden_act" in text else f"{name} (no hidden_act: silu)"

    if text.get("scoring_func") == "sigmoid" and text.get("topk_method") in ("noaux_tc", "group_limited_greedy", None):
        shape["routing"], prov["routing"] = "deepseek_v3", _at(text, "scoring_func")
        for k in ("n_group", "topk_group"):
            if isinstance(text.get(k), int):
                shape[k], prov[k] = text[k], _at(text, k)
        if isinstance(text.get("routed_scaling_factor"), (int, float)):
            shape["routed_scaling_factor"] = float(text["routed_scaling_factor"])
            prov["routed_scaling_factor"] = _at(text, "routed_scaling_factor")
    elif text.get("scoring_func") == "sigmoid":
        shape["routing"], prov["routing"] = "sigmoid_topk", _at(text, "scoring_func")
    elif model_type == "llama4" or mt.startswith("llama4"):
        shape["routing"], prov["routing"] = "llama4", f"{name} (model_type llama4: top-k logits, then sigmoid)"
    elif mt in _RENORMALIZING or model_type in _RENORMALIZING:
        shape["routing"], prov["routing"] = "renormalize", f"{name} (model_type {mt}: top-k, then softmax over the k)"
    elif "norm_topk_prob" in text:
        shape["routing"] = "renormalize" if text["norm_topk_prob"] else "softmax_topk"
        prov["routing"] = _at(text, "norm_topk_prob")
    else:
        raise _issue(text, "model_type", f"model_type {mt!r}: routing not known (set model.routing in the deployment)")

    if text.get("n_shared_experts"):
        shared, prov["num_shared_experts"] = text["n_shared_experts"], _at(text, "n_shared_experts")
    elif text.get("shared_expert_intermediate_size"):
        shared, prov["num_shared_experts"] = 1, _at(text, "shared_expert_intermediate_size")
    elif model_type == "llama4":
        shared, prov["num_shared_experts"] = 1, f"{name} (model_type llama4: one shared expert)"
    else:
        shared, prov["num_shared_experts"] = 0, f"{name} (no shared-expert key)"
    shape["num_shared_experts"] = int(shared)
    quant = _quant_of(cfg, text, hfq, prov)
    dtype = text.get("torch_dtype") or cfg.get("torch_dtype")
    files = {str(f.resolve()): _sha256(f) for f in (cfg_path, hfq_path) if f is not None}
    return ModelInfo(name, model_type, shape, quant, dtype, prov, files=files)


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()
