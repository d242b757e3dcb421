"""Read a Hugging Face checkpoint config (``config.json``, ModelOpt's ``hf_quant_config.json``) into
the MoE layer shape and the expert-weight quantization format.

Field names per model family (checked against the configs of Qwen1.5-MoE, Qwen3-MoE, OLMoE, Granite-MoE,
Mixtral, DeepSeek-V3/R1, Llama-4 and gpt-oss): experts from ``n_routed_experts`` / ``num_experts`` /
``num_local_experts``; expert width from ``moe_intermediate_size`` else ``intermediate_size``; Llama-4
nests its text model in ``text_config``. Routing follows the model's router code in transformers:
DeepSeek-V3 (``scoring_func: sigmoid`` with ``topk_method: noaux_tc`` or expert groups) -> deepseek_v3;
sigmoid scoring without groups (MiniMax-M2: ``scoring_func: sigmoid``, ``use_routing_bias``) ->
sigmoid_topk; Llama-4 -> llama4; PhiMoE -> sparsemixer; Qwen-MoE/OLMoE/DeepSeek-V2 with
``norm_topk_prob: false`` -> softmax_topk, with true -> renormalize; Mixtral, Granite-MoE and gpt-oss
(top-k then softmax over the k) -> renormalize.

Quantization sources: ``config.json``'s ``quantization_config``, its ``compression_config`` (what
compressed-tensors <= 0.6 wrote) and ModelOpt's ``hf_quant_config.json``, read in the order of the deployment's
engine (:data:`QUANT_SOURCE_ORDER`: SGLang and vLLM try ``quantization_config`` first, TensorRT-LLM
``hf_quant_config.json``; they differ, see there); sources that disagree are noted (``ModelInfo.notes``) with
each file:line.

DeepSeek-V4 (issue 21, field round 4: one format name, two checkpoint layouts): an FP8 checkpoint
(``quantization_config.quant_method: fp8``, ``weight_block_size [128, 128]``) of a DeepSeek-V4 model
(:data:`DSV4_ARCHITECTURES`, or ``model_type: deepseek_v4``) keeps its routed experts in MXFP4 when the top-level
``expert_dtype`` is ``fp4`` or absent (DeepSeek-V4-Flash), and in block FP8 when it is ``fp8`` (Flash-Base):
vLLM's ``DeepseekV4FP8Config`` (vllm-project/vllm@023da1fc828e, vllm/model_executor/models/deepseek_v4.py: reads
``hf_config.expert_dtype``, default ``fp4``; ``get_quant_method`` gives the FP4 experts ``Mxfp4MoEMethod``, the
method of gpt-oss's MXFP4) and SGLang's ``ModelConfig.is_fp4_experts`` (sgl-project/sglang@001adf564fd3,
python/sglang/srt/configs/model_config.py: on for ``is_deepseek_v4`` unless ``SGLANG_DSV4_FP4_EXPERTS`` or the
routed experts' safetensors dtype says otherwise; ``Fp8MoEMethod.create_fp8_moe_weight_`` at
sgl-project/sglang@00563d368df9 makes them ``[E, 2*I, H/2]`` int8 with one scale per 32 along K). The elements,
scales and packing are MXFP4's, so the format is ``mxfp4``; what differs from gpt-oss's checkpoints is the
engine's loading path (SGLang: ``Fp8Config`` with ``is_fp4_experts``, not ``Mxfp4Config``), which the runner facts
tell apart by the checkpoint's architecture (``when.architecture``; an inline ``model`` states it as
``model.architecture``). A scoring function the routings above do not cover (DeepSeek-V4's ``sqrtsoftplus``) is
read as ``custom`` (the engine computes the top-k), not by ``norm_topk_prob``.

Weight-only NVFP4 (issue 21, field round 4): NVFP4 weights and scales without activation scales, the same
format as NVFP4 (W4A4) checkpoints, are a checkpoint kind, ``quant_params`` ``weight_only: true``: ModelOpt's
``quant_algo: W4A16_NVFP4`` (vLLM's ``QUANT_ALGOS``, vllm-project/vllm@00155cdecca7,
vllm/model_executor/layers/quantization/modelopt.py: "4-bit float weights, fp16/bf16 activations") and a
compressed-tensors group of 4-bit float weights with no ``input_activations`` (vLLM's ``_is_fp4a16_nvfp4``;
SGLang's ``CompressedTensorsW4A16Nvfp4MoE``, sgl-project/sglang@257f3a078fff). Engines run it only with a
weight-only kernel: vLLM's ``ModelOptNvFp4FusedMoE`` selects with no activation key, which every W4A4 backend's
``_supports_quant_scheme`` rejects; SGLang's scheme always builds one weight-only runner (the rule and the facts
in backends/ and rules/ name it). The
selector counts, for such a deployment, only support rows that run the format with 16-bit activations.

Quantization parameters (``ModelInfo.quant_params``): FP8 ``weight_block_size`` (any ``[bn, bk]``), the
weight-only int formats' ``group_size`` (AWQ ``group_size``/``q_group_size``, GPTQ ``group_size``,
compressed-tensors ``weights.group_size``; -1, or compressed-tensors ``strategy: channel``, is kept as
``group_size: -1``: per output channel, no group along K), bits, AWQ/GPTQ layout, symmetry and act-order.

Layer kinds (``ModelInfo.layer_kinds``): which decoder layers have MoE experts (DeepSeek
``first_k_dense_replace``/``moe_layer_freq``, Qwen ``mlp_only_layers``/``decoder_sparse_step``, Llama-4
``interleave_moe_layer_step``/``moe_layers``), the multi-token-prediction layers after them
(``num_nextn_predict_layers``), and the MoE layers a quantization config leaves unquantized (ModelOpt
``exclude_modules`` globs, compressed-tensors ``ignore`` names and ``re:`` patterns, ``modules_to_not_convert``
names matched by whole dotted segments). Layers whose experts differ form separate kinds.
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError, Issue
from .shape import MAX_EXPERTS, MAX_WIDTH
from .vocab import ENGINES
from .yamlio import MAX_INT_DIGITS, MarkedDict, decode_text, load_text, read_input, shorten

_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk")
_RENORMALIZING = {"mixtral", "granitemoe", "gpt_oss", "granitemoeshared"}
_W4A16_NVFP4_NOTE = ("{where} W4A16_NVFP4: weight-only NVFP4 (NVFP4 weights and scales, no activation scales); runners "
                      "that quantize activations to FP4 cannot run it (weight_only)")
#: Model types whose configs give the experts' width as ``moe_intermediate_size`` (transformers' Qwen2MoeConfig,
#: Qwen3MoeConfig, Qwen3NextConfig, Qwen3VLMoeTextConfig, DeepseekV2Config, DeepseekV3Config, Glm4MoeConfig): their
#: ``intermediate_size`` is the dense MLP's, never the experts' fallback.
MOE_WIDTH_MODEL_TYPES = frozenset({"qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_vl_moe_text", "qwen3_vl_moe", "deepseek_v2",
                                   "deepseek_v3", "glm4_moe"})
#: DeepSeek-V4's model classes (SGLang's ``is_deepseek_v4``, sgl-project/sglang@001adf564fd3,
#: python/sglang/srt/configs/model_config.py): an FP8 checkpoint of one of them keeps FP4 routed experts (module doc).
DSV4_ARCHITECTURES = ("DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN")



@dataclass
class ModelInfo:
    """What a checkpoint config says: ``shape`` (dict of ModelShape fields), ``quant`` and where each
    value was read (``provenance``: field -> ``file:line (key)``). ``files`` maps the display name of
    every file read (``config.json``, ``hf_quant_config.json``) to the sha256 of the bytes parsed, and an
    ``hf_quant_config.json`` looked for and not found to :data:`ABSENT`."""

    path: str
    model_type: str
    shape: dict[str, Any]
    quant: str
    dtype: str | None
    provenance: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    #: Parameters of the format: ``block`` ([bn, bk] or an element count), ``group_size``, ``bits``,
    #: ``layout`` (awq, gptq, compressed-tensors), ``symmetric``, ``act_order``, ``weight_only`` (NVFP4 without
    #: activation scales: module doc, "Weight-only NVFP4").
    quant_params: dict[str, Any] = field(default_factory=dict)
    #: Distinct MoE layer kinds, main first: ``{"kind", "layers": [indices], "quant", "quant_params", "why"}``.
    layer_kinds: list[dict[str, Any]] = field(default_factory=list)


def _at(cfg: MarkedDict, key: str) -> str:
    return f"{cfg.file}:{cfg.key_lines.get(key, cfg.line)} ({key})"


def _issue(cfg: Any, key: Any, msg: str, prefix: str = "") -> InputError:
    """An InputError at ``key`` of ``cfg`` (its line; the mapping's own line when the key is absent),
    naming the key as ``prefix + key``."""
    line = cfg.key_lines.get(key, cfg.line) if isinstance(cfg, MarkedDict) and key is not None else getattr(cfg, "line", 0)
    name = "" if key is None else key if isinstance(key, str) and len(key) <= 80 else shorten(key)
    return InputError(Issue(getattr(cfg, "file", "config.json"), line, (prefix + name) if name else prefix.rstrip("."), msg))


def _what(v: Any) -> str:
    """``a string 'x'``, ``the number 2.5``, ``true``, ``a list``: how a wrong value is named in errors."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return f"the number {shorten(v)}"
    if isinstance(v, str):
        return f"the string {shorten(v)}"
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    return type(v).__name__


def _present(cfg: MarkedDict, key: str) -> bool:
    """``key`` is given with a value (HF writes null for unset keys: null counts as absent)."""
    return cfg.get(key) is not None


def _int(cfg: MarkedDict, key: str, lo: int, hi: int, prefix: str = "", why: str = "") -> int:
    """``cfg[key]`` as an integer in ``[lo, hi]``; bool, float, string or out of range -> InputError."""
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise _issue(cfg, key, f"{key} must be an integer, got {_what(v)}", prefix)
    if v < lo:
        raise _issue(cfg, key, f"{key} {v} must be {'positive' if lo == 1 else f'at least {lo}'}", prefix)
    if v > hi:
        raise _issue(cfg, key, f"{key} {shorten(v)} is larger than {hi}{why}", prefix)
    return v


def _number(cfg: MarkedDict, key: str, prefix: str = "") -> float:
    """``cfg[key]`` as a finite positive number; bool, string, NaN, infinite or <= 0 -> InputError."""
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _issue(cfg, key, f"{key} must be a number, got {_what(v)}", prefix)
    if not math.isfinite(v) or v <= 0:
        raise _issue(cfg, key, f"{key} must be a finite positive number, got {shorten(v)}", prefix)
    return float(v)


def _str(cfg: MarkedDict, key: str, prefix: str = "") -> str | None:
    """``cfg[key]`` when it is a string, None when absent or null; anything else -> InputError."""
    v = cfg.get(key)
    if v is not None and not isinstance(v, str):
        raise _issue(cfg, key, f"{key} must be a string, got {_what(v)}", prefix)
    return v


def _mapping(cfg: MarkedDict, key: str, prefix: str = "", what: str = "") -> MarkedDict | None:
    """``cfg[key]`` when it is a mapping, None when absent or null; anything else -> InputError."""
    v = cfg.get(key)
    if v is not None and not isinstance(v, MarkedDict):
        raise _issue(cfg, key, f"{key} must be a mapping{what}, got {_what(v)}", prefix)
    return v


def _display(path: Any, limit: int = 300) -> str:
    """A path as errors show it: as is when printable and short; else escaped (a control character in
    a ``model_config`` value never reaches the terminal raw) and cut to ``limit`` characters."""
    s = str(path)
    if s.isprintable() and len(s) <= limit:
        return s
    text = repr(s)[1:-1]
    return text if len(text) <= limit else text[:limit] + "…"


#: ``ModelInfo.files`` value of a file the reader looked for and did not find (``hf_quant_config.json``).
ABSENT = "absent"


def resolve_config_path(path: str | Path) -> tuple[Path, Path | None]:
    """``(config.json, hf_quant_config.json or None)`` for a checkpoint folder or a config.json path.

    An ``hf_quant_config.json`` that exists in any form (a FIFO, a dangling link) is returned, so that
    reading it refuses it: it is never silently taken as absent (the format would change). Raises
    :class:`InputError` for a path that is missing, or neither a regular file nor a folder."""
    p = Path(path)

    def mode(q: Path) -> int | None:  # the file type (following links); None when absent
        try:
            return os.stat(q).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as exc:  # name too long, too many links, permission, NUL in the path
            raise InputError(Issue(_display(q), 0, "model_config",
                                   f"cannot read: {getattr(exc, 'strerror', None) or exc}")) from None

    m = mode(p)
    if m is not None and stat.S_ISDIR(m):
        cfg = p / "config.json"
        if mode(cfg) is None and not cfg.is_symlink():
            raise InputError(Issue(_display(p), 0, "model_config", "the folder has no config.json"))
    elif m is not None and stat.S_ISREG(m):
        cfg = p
    elif m is not None:
        raise InputError(Issue(_display(p), 0, "model_config", "not a regular file or a folder"))
    else:
        raise InputError(Issue(_display(p), 0, "model_config", "no such file or folder"))
    quant = cfg.parent / "hf_quant_config.json"
    return cfg, (quant if mode(quant) is not None or quant.is_symlink() else None)


#: Where a checkpoint states its quantization: ``config.json`` keys (``text_config.`` ones nested in the
#: text model's config) and ModelOpt's separate file.
QUANT_SOURCES = ("quantization_config", "compression_config", "hf_quant_config.json",
                 "text_config.quantization_config", "text_config.compression_config")

#: The order each engine reads :data:`QUANT_SOURCES` in: the first one present is the checkpoint's quantization for
#: that engine (``engine: any`` plans SGLang's order and notes where another engine reads otherwise).
#:
#: - SGLang, ``ModelConfig._parse_quant_hf_config`` (sgl-project/sglang@001adf564fd3,
#:   python/sglang/srt/configs/model_config.py): ``quantization_config``, else ``compression_config``, else
#:   ``hf_quant_config.json`` only when both are absent. It reads the top-level config only; the ``text_config.``
#:   keys are this reader's fallback, as vLLM reads them.
#: - vLLM, ``get_config`` (vllm-project/vllm@0036026e7171, vllm/transformers_utils/config.py) loads
#:   ``hf_quant_config.json`` into ``quantization_config`` when config.json has no ``quantization_config``; then
#:   ``ModelConfig._parse_quant_hf_config``/``_verify_quantization`` (vllm-project/vllm@0052a5b81898,
#:   vllm/config/model.py): ``quantization_config``, else ``compression_config``, then the same keys of ``text_config``.
#:   So vLLM differs from SGLang in one case: with ``compression_config`` and ``hf_quant_config.json`` (and no
#:   ``quantization_config``) vLLM reads ``hf_quant_config.json``, SGLang ``compression_config``.
#: - TensorRT-LLM, ``ModelConfig.from_pretrained`` (NVIDIA/TensorRT-LLM@008e0af8980f,
#:   tensorrt_llm/_torch/model_config.py): ``hf_quant_config.json`` first ("the file is authoritative"; config.json's
#:   ``quantization_config`` only when the file sets no ``quant_algo``), else ``quantization_config`` (the text
#:   config's attributes are mirrored onto the top level); ``compression_config`` is not read.
QUANT_SOURCE_ORDER: dict[str, tuple[str, ...]] = {
    "sglang": ("quantization_config", "compression_config", "hf_quant_config.json", "text_config.quantization_config",
               "text_config.compression_config"),
    "vllm": ("quantization_config", "hf_quant_config.json", "compression_config", "text_config.quantization_config",
             "text_config.compression_config"),
    "trtllm": ("hf_quant_config.json", "quantization_config", "text_config.quantization_config"),
}


@dataclass
class _Reading:
    """One quantization source as read: ``quant`` and ``params`` (or ``error``: the InputError reading it
    raised), ``where`` (``file:line (key)``, the key that names the format), the ``mapping`` whose exclusion
    lists apply, and ``notes`` about it (per-channel groups)."""

    source: str
    where: str
    mapping: MarkedDict
    quant: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    error: InputError | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """``fp8_block (block [128, 128])``, ``int4_w4a16 (group_size -1)``, ``mxfp4``, or the error's message."""
        if self.error is not None:
            return f"an unsupported or invalid format ({self.error.issues[0].message})"
        extra = ", ".join(f"{k} {shorten(v)}" for k, v in self.params.items() if k in ("block", "group_size"))
        return f"{self.quant} ({extra})" if extra else str(self.quant)

    def key(self) -> str:
        """What two readings must share to agree: the format and its block/group with the format's defaults
        filled in (ModelOpt's inline NVFP4 without ``group_size`` agrees with its file's ``group_size: 16``)."""
        if self.error is not None or self.quant is None:
            return self.describe()
        from .formats import lookup

        row = lookup(self.quant)
        full = {**(row.params if row is not None else {}), **self.params}
        return json.dumps([self.quant, {k: full[k] for k in ("block", "group_size", "weight_only") if k in full}],
                          sort_keys=True)


def _quant_from_compressed_tensors(q: MarkedDict, params: dict[str, Any], pre: str, notes: list[str]) -> str:
    """The format of a compressed-tensors config ``q`` (read at the keys under ``pre``, e.g.
    ``compression_config.``): one known format over every config group, or InputError. Integer weights with
    ``strategy: channel`` set ``group_size`` -1 (one scale per output channel)."""
    groups = _mapping(q, "config_groups", pre)
    if not groups:
        raise _issue(q, "config_groups", "compressed-tensors config without config_groups", pre)
    fmt = _str(q, "format", pre)
    formats = set()
    weight_only: set[bool] = set()
    for name, g in groups.items():
        gname = name if isinstance(name, str) and len(name) <= 80 else shorten(name)
        gpre = f"{pre}config_groups.{gname}."
        if not isinstance(g, MarkedDict):
            raise _issue(groups, name, f"a config group must be a mapping, got {_what(g)}", pre + "config_groups.")
        w = _mapping(g, "weights", gpre) or MarkedDict()
        a = _mapping(g, "input_activations", gpre)
        if _present(w, "num_bits"):
            _int(w, "num_bits", 1, 64, gpre + "weights.")
        typ, strategy = _str(w, "type", gpre + "weights."), _str(w, "strategy", gpre + "weights.")
        bits = w.get("num_bits")
        if strategy == "group" and _present(w, "group_size") and w.get("group_size") is not None:
            params["group_size"] = _int(w, "group_size", 1, MAX_WIDTH, gpre + "weights.")
        elif strategy == "channel" and typ == "int" and not a:
            params["group_size"] = -1
            # null (llm-compressor's channel strategy) or -1: engines that read None where they expect -1 tell them apart
            params["group_size_unset"] = w.get("group_size") is None
            notes.append(f"{w.file}:{w.key_lines.get('strategy', w.line)} ({gpre}weights.strategy channel): per output "
                         "channel, one scale per output row over all of K (group_size -1): no group constraint")
        bs = w.get("block_structure")
        if isinstance(bs, list) and len(bs) == 2 and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in bs):
            params["block"] = [int(b) for b in bs]
        if typ == "int":
            params["layout"], params["bits"] = "compressed-tensors", bits
            if isinstance(w.get("symmetric"), bool):
                params["symmetric"] = w["symmetric"]
        elif typ == "float" and bits == 8:
            # FP8: vLLM's compressed-tensors FP8 MoE method keeps the block check its Fp8Config method relaxes from
            # 0.29.0 (backends/common.yaml, block-scaled FP8), so the serialization is stated
            params["layout"] = "compressed-tensors"
        if fmt == "mxfp4-pack-quantized" or (fmt != "nvfp4-pack-quantized" and bits == 4 and typ == "float"
                                             and strategy == "group" and w.get("group_size") == 32):
            # MXFP4 (e2m1, an e8m0 scale per 32): vLLM's _is_mxfp4 (4-bit float weights, group strategy, group 32,
            # symmetric) picks CompressedTensorsW4A4Mxfp4MoEMethod, not the NVFP4 method (field round 36). The layout
            # is stated: that method builds fewer runners than the native mxfp4 one (backends/common.yaml methods)
            formats.add("mxfp4")
            params["layout"] = "compressed-tensors"
        elif fmt == "nvfp4-pack-quantized" or (bits == 4 and typ == "float"):
            formats.add("nvfp4")
            # No input_activations: weight-only NVFP4 (llm-compressor's NVFP4A16; module doc, "Weight-only NVFP4")
            weight_only.add(not a)
            if not a:
                notes.append(f"{g.file}:{g.line} ({gpre.rstrip('.')}): 4-bit float weights with no input_activations: "
                             "weight-only NVFP4 (NVFP4A16), no activation scales; runners that quantize activations "
                             "to FP4 cannot run it (weight_only)")
        elif bits == 8 and typ == "float":
            formats.add({"channel": "fp8_channel", "tensor": "fp8_tensor", "block": "fp8_block"}.get(strategy or "", f"?{strategy}"))
        elif bits == 8 and typ == "int":
            formats.add("int8_w8a8" if a else "int8_w8a16")
        elif bits == 4 and typ == "int" and not a:
            formats.add("int4_w4a16")
        else:
            raise _issue(g, "weights", f"compressed-tensors group {shorten(name)}: weights num_bits={bits} type={shorten(typ)} "
                         f"strategy={shorten(strategy)} (activations {'quantized' if a else 'not quantized'}) is not a "
                         "supported format", gpre)
    bad = [f for f in formats if f.startswith("?")]
    if bad or len(formats) != 1:
        raise _issue(q, "config_groups", f"compressed-tensors groups give formats {sorted(formats)}; expected exactly one "
                     "known format", pre)
    if len(weight_only) > 1:
        raise _issue(q, "config_groups", "compressed-tensors groups mix weight-only NVFP4 (no input_activations) and "
                     "NVFP4 with FP4 activations; expected one kind", pre)
    if weight_only == {True}:
        params["weight_only"] = True
    return formats.pop()


def _hf_quant_mapping(hfq: Any) -> MarkedDict:
    """The ``quantization`` mapping of an ``hf_quant_config.json`` (InputError when the file is no object or
    lacks it)."""
    if not isinstance(hfq, MarkedDict):
        raise _issue(hfq, None, f"hf_quant_config.json must hold a JSON object, got {_what(hfq)}")
    q = _mapping(hfq, "quantization")
    if q is None:
        raise _issue(hfq, "quantization", "hf_quant_config.json has no quantization mapping (ModelOpt writes "
                     "quantization.quant_algo)")
    return q


def _read_hf_quant(q: MarkedDict, r: _Reading) -> str:
    """ModelOpt's ``hf_quant_config.json`` ``quantization`` mapping ``q``: ``quant_algo`` (and ``group_size``)."""
    algo = _str(q, "quant_algo", "quantization.")
    r.params["layout"] = "modelopt"
    table = {"NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4", "FP8": "fp8_tensor", "MXFP8": "mxfp8", "W4A16_AWQ": "int4_w4a16"}
    if algo == "W4A16_NVFP4":
        r.params["weight_only"] = True
        r.notes.append(_W4A16_NVFP4_NOTE.format(where=_at(q, "quant_algo")))
    if algo not in table:
        raise _issue(q, "quant_algo", f"ModelOpt quant_algo {shorten(algo)} is not a supported format "
                     f"(known: {', '.join(table)})", "quantization.")
    if _present(q, "group_size"):
        g = _int(q, "group_size", 1, MAX_WIDTH, "quantization.")
        if table[algo] == "nvfp4" and g != 16:
            raise _issue(q, "group_size", f"NVFP4 with group_size {g}: NVFP4 blocks are 16 elements", "quantization.")
        r.params["block" if table[algo] == "nvfp4" else "group_size"] = g
    return table[algo]


def _dsv4(cfg: MarkedDict) -> str | None:
    """How ``cfg`` is a DeepSeek-V4 config (``architectures[0] DeepseekV4ForCausalLM``, ``model_type
    deepseek_v4``: vLLM's ``DeepseekV4FP8Config.override_quantization_method`` keys on the model type), else None."""
    archs = cfg.get("architectures")
    first = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    if first in DSV4_ARCHITECTURES:
        return f"architectures[0] {first}"
    return "model_type deepseek_v4" if cfg.get("model_type") == "deepseek_v4" else None


def _dsv4_fp4_experts(cfg: MarkedDict, r: _Reading) -> bool:
    """True when ``cfg`` is a DeepSeek-V4 config (:data:`DSV4_ARCHITECTURES` or ``model_type: deepseek_v4``)
    whose routed experts are FP4 (top-level ``expert_dtype`` ``fp4``, or absent: both engines' default), read
    from an FP8 ``quantization_config`` (module doc, "DeepSeek-V4"); ``r.where`` and ``r.notes`` then say so.
    ``expert_dtype: fp8`` (DeepSeek-V4-Flash-Base): False, the experts are block FP8. Another value ->
    InputError (vLLM's ``DeepseekV4FP8Config.expert_dtype`` raises ValueError for it)."""
    who = _dsv4(cfg)
    if who is None:
        return False
    dtype = _str(cfg, "expert_dtype")
    if dtype == "fp8":
        return False
    if dtype not in (None, "fp4"):
        raise _issue(cfg, "expert_dtype", f"DeepSeek-V4 expert_dtype {shorten(dtype)} is not fp4 or fp8 (the values "
                     "vLLM's DeepseekV4FP8Config and SGLang's is_fp4_experts know)")
    if dtype == "fp4":
        r.where = _at(cfg, "expert_dtype")
        said = f"{r.where} says fp4"
    else:
        said = (f"{cfg.file} gives no expert_dtype: fp4, both engines' default (vLLM's DeepseekV4FP8Config reads a "
                "missing expert_dtype as fp4; SGLang's is_fp4_experts is on for DeepSeek-V4 unless "
                "SGLANG_DSV4_FP4_EXPERTS or the safetensors header of a routed expert (F8_E4M3) says FP8, which "
                "moe-select does not read)")
    r.notes.append(f"DeepSeek-V4 checkpoint ({who}): its routed experts are MXFP4 (packed e2m1, an e8m0 scale per 32 "
                   f"along K) inside an FP8 checkpoint whose quantization_config ({r.mapping.file}:"
                   f"{r.mapping.key_lines.get('quant_method', r.mapping.line)}) describes the other linear layers; "
                   f"{said}. Planned mxfp4; SGLang loads these experts through Fp8Config (is_fp4_experts), not "
                   "Mxfp4Config, so runner facts that hold for gpt-oss-style MXFP4 checkpoints only do not apply "
                   "(facts scoped by architecture)")
    return True


def _read_quant_mapping(q: MarkedDict, pre: str, r: _Reading, model: MarkedDict | None = None) -> str:
    """A ``quantization_config`` (or ``compression_config``) mapping ``q`` whose keys are named ``pre + key``:
    its ``quant_method`` and the format's parameters into ``r.params``. ``model``: the top-level config.json
    mapping (DeepSeek-V4's ``architectures`` and ``expert_dtype``, :func:`_dsv4_fp4_experts`). Raises InputError."""
    params = r.params
    method = _str(q, "quant_method", pre)
    # DeepSeek-V4: vLLM reads quant_method fp8 (or its own name deepseek_v4_fp8) of a deepseek_v4 model as
    # DeepseekV4FP8Config, whose expert_dtype picks MXFP4 or block-FP8 experts.
    dsv4 = method in ("fp8", "deepseek_v4_fp8") and model is not None and _dsv4(model) is not None
    if dsv4 and model is not None and _dsv4_fp4_experts(model, r):
        return "mxfp4"
    if method == "fp8" or dsv4:
        if not _present(q, "weight_block_size"):
            return "fp8_tensor"
        block = q["weight_block_size"]
        if not (isinstance(block, list) and len(block) == 2
                and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            raise _issue(q, "weight_block_size", f"weight_block_size must be a list of two positive integers, got "
                         f"{_what(block) if not isinstance(block, list) else shorten(block)}", pre)
        params["block"] = [int(block[0]), int(block[1])]
        params["layout"] = "fp8"   # Fp8Config's serialization (backends/common.yaml: vLLM refines its blocks from 0.29.0)
        return "fp8_block"
    if method == "mxfp4":
        params["layout"] = "mxfp4"   # MXFP4's own serialization (gpt-oss), not compressed-tensors (backends/common.yaml)
        return "mxfp4"
    if method == "compressed-tensors":
        return _quant_from_compressed_tensors(q, params, pre, r.notes)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        key = "bits" if _present(q, "bits") or not _present(q, "w_bit") else "w_bit"
        bits = _int(q, key, 1, 64, pre) if _present(q, key) else None
        gkey = next((k for k in ("group_size", "q_group_size") if _present(q, k)), None)
        if gkey is not None:
            g = q[gkey]
            if not (isinstance(g, int) and not isinstance(g, bool) and (g == -1 or 0 < g <= MAX_WIDTH)):
                raise _issue(q, gkey, f"{gkey} must be a positive integer or -1 (per channel), got {_what(g)}", pre)
            # -1: one scale per output channel over all of K (AutoAWQ/AutoGPTQ); kept as -1, never the format's
            # default group (formats.group_size gives None: no group along K constrains the split).
            params["group_size"] = g
            if g == -1:
                r.notes.append(f"{q.file}:{q.key_lines.get(gkey, q.line)} ({pre}{gkey} -1): per output channel, one "
                               "scale per output row over all of K: no group constraint")
        params["bits"] = bits
        params["layout"] = "awq" if method.startswith("awq") else "gptq"
        for k, pname in (("sym", "symmetric"), ("desc_act", "act_order"), ("zero_point", "zero_point")):
            if _present(q, k) and isinstance(q[k], bool):
                params[pname] = q[k]
        if bits == 4:
            return "int4_w4a16"
        if bits == 8 and method.startswith("gptq"):
            return "int8_w8a16"
        raise _issue(q, key, f"{method} with {bits} bits is not a supported format", pre)
    if method == "modelopt":
        algo = _str(q, "quant_algo", pre)
        params["layout"] = "modelopt"   # ModelOpt's serialization: the engines' ModelOpt methods, not compressed-tensors'
        if algo == "NVFP4":
            return "nvfp4"
        if algo == "W4A16_NVFP4":
            params["weight_only"] = True
            r.notes.append(_W4A16_NVFP4_NOTE.format(where=f"{q.file}:{q.key_lines.get('quant_algo', q.line)} ({pre}quant_algo)"))
            return "nvfp4"
        if algo == "FP8":
            return "fp8_tensor"
        raise _issue(q, "quant_algo", f"ModelOpt quant_algo {shorten(algo)} is not a supported format", pre)
    if method == "quark":
        return _quant_from_quark(q, pre, r)
    raise _issue(q, "quant_method", f"quantization method {shorten(method)} is not a supported format "
                 "(known: fp8, mxfp4, compressed-tensors, awq, gptq, modelopt, quark)", pre)


def _quant_from_quark(q: MarkedDict, pre: str, r: _Reading) -> str:
    """AMD Quark's ``quantization_config`` (``quant_method: quark``): the format of ``global_quant_config.weight``, as
    vLLM's QuarkConfig picks the MoE method from it (vllm-project/vllm@v0.24.0:vllm/model_executor/layers/quantization/
    quark/quark_moe.py:QuarkMoEMethod.get_moe_method; quark.py _is_w_ocp_mx_a_x, _is_fp8_w8a8): ``fp4`` ``per_group``
    of 32 (OCP MX) -> mxfp4 (QuarkOCP_MX_MoEMethod, through the MXFP4 oracle; W4A16, W4A8 or W4A4 by
    ``input_tensors``, said in a note); ``fp8_e4m3`` ``per_tensor`` / ``per_channel`` with per-tensor FP8 inputs ->
    fp8_tensor / fp8_channel (QuarkW8A8Fp8MoEMethod). ``layout`` is ``quark``. Per-layer ``layer_quant_config`` entries
    are not read (a note). Anything else: InputError naming the key. (The eighth and ninth new users' trials: a Quark
    MXFP4 checkpoint was invalid input.)"""
    gpre = f"{pre}global_quant_config."
    g = _mapping(q, "global_quant_config", pre)
    if not g:
        raise _issue(q, "global_quant_config", "a Quark config without global_quant_config: the experts' format is not given", pre)
    w = g.get("weight")
    if isinstance(w, list):
        raise _issue(g, "weight", "a Quark weight given as a list (two-level, e.g. W4A8 fp8_e4m3 + int4) is not a supported "
                     "format", gpre)
    w = _mapping(g, "weight", gpre) or MarkedDict()
    i = g.get("input_tensors")
    i = i if isinstance(i, MarkedDict) else None
    dtype, scheme = _str(w, "dtype", gpre + "weight."), _str(w, "qscheme", gpre + "weight.")
    idtype = _str(i, "dtype", gpre + "input_tensors.") if i is not None else None
    r.params["layout"] = "quark"
    where = f"{w.file}:{w.key_lines.get('dtype', w.line)} ({gpre}weight.dtype)"
    layer = q.get("layer_quant_config")
    if isinstance(layer, MarkedDict) and layer:
        r.notes.append(f"{q.file}:{q.key_lines.get('layer_quant_config', q.line)} ({pre}layer_quant_config): "
                       f"{len(layer)} per-layer entries not read: the global config's format is planned for the experts")
    if dtype == "fp4" and scheme == "per_group" and w.get("group_size") == 32:
        acts = {None: "16-bit activations (W4A16)", "fp4": "MXFP4 activations (W4A4)",
                "fp8_e4m3": "FP8 activations (W4A8)"}.get(idtype, f"{idtype} activations")
        r.notes.append(f"{where}: Quark OCP MXFP4 weights, {acts} (QuarkOCP_MX_MoEMethod: the MXFP4 oracle's kernels)")
        return "mxfp4"
    if dtype == "fp8_e4m3" and scheme in ("per_tensor", "per_channel") and idtype == "fp8_e4m3":
        return "fp8_tensor" if scheme == "per_tensor" else "fp8_channel"
    raise _issue(w, "dtype", f"Quark weight dtype {shorten(dtype)} qscheme {shorten(scheme)}"
                 f"{'' if w.get('group_size') is None else ' group_size ' + shorten(w.get('group_size'))} (input "
                 f"{shorten(idtype)}) is not a supported format (fp4 per_group 32: mxfp4; fp8_e4m3 per_tensor or "
                 "per_channel with fp8_e4m3 inputs: fp8_tensor / fp8_channel)", gpre + "weight.")


def _quant_readings(cfg: MarkedDict, text: MarkedDict, hfq: Any) -> dict[str, _Reading]:
    """Every quantization source present (:data:`QUANT_SOURCES` order), each read; a source whose format is
    wrong or unsupported keeps its InputError in ``error`` (raised only if it is the one planned). A key whose
    value is not a mapping is an InputError at once; null and ``{}`` count as absent."""
    out: dict[str, _Reading] = {}
    for name in QUANT_SOURCES:
        if name == "hf_quant_config.json":
            if hfq is None:
                continue
            q = _hf_quant_mapping(hfq)
            r = _Reading(name, _at(q, "quant_algo"), q)
            try:
                r.quant = _read_hf_quant(q, r)
            except InputError as exc:
                r.error = exc
            out[name] = r
            continue
        holder_name, _, key = name.rpartition(".")
        holder = text if holder_name == "text_config" else cfg
        if holder_name == "text_config" and text is cfg:
            continue
        pre = f"{name}."
        m = _mapping(holder, key, holder_name + "." if holder_name else "")
        if not m:
            continue
        # quantization_config keeps its usual provenance ("config.json:40 (quant_method)"); the others say which key
        where = _at(m, "quant_method") if key == "quantization_config" else \
            f"{m.file}:{m.key_lines.get('quant_method', m.line)} ({pre}quant_method)"
        r = _Reading(name, where, m)
        try:
            r.quant = _read_quant_mapping(m, pre, r, cfg)
        except InputError as exc:
            r.error = exc
        out[name] = r
    return out


def _engine_source(engine: str, readings: dict[str, _Reading]) -> str | None:
    """The source ``engine`` reads (:data:`QUANT_SOURCE_ORDER`), None when it reads none of those present.
    TensorRT-LLM passes over an ``hf_quant_config.json`` without a ``quant_algo`` when config.json has a
    ``quantization_config``."""
    for name in QUANT_SOURCE_ORDER[engine]:
        r = readings.get(name)
        if r is None:
            continue
        if engine == "trtllm" and name == "hf_quant_config.json" and r.mapping.get("quant_algo") is None \
                and any(k in readings for k in ("quantization_config", "text_config.quantization_config")):
            continue
        return name
    return None


#: Where each engine casts a float32 checkpoint under its default ``--dtype auto`` (the experts then run in 16 bits)
FLOAT32_CAST_SOURCES = {
    "vllm": "vllm/config/model.py:_resolve_auto_dtype at v0.24.0 (float32 -> the platform's first supported dtype: "
            "bfloat16 on CUDA GPUs of compute capability 8.0 and later, float16 before)",
    "sglang": "python/sglang/srt/configs/model_config.py:_get_and_verify_dtype at v0.5.23 (float32 -> float16, "
              "bfloat16 for Gemma models)",
}


def _float32_cast(cfg: MarkedDict, src: MarkedDict, engine: str, prov: dict[str, str], notes: list[str]) -> str:
    """A float32 checkpoint (``torch_dtype`` float32, no quantization source): the 16-bit format ``engine`` casts it
    to at load under ``--dtype auto`` (:data:`FLOAT32_CAST_SOURCES`; ``any``: SGLang's, with vLLM's in the note).
    Raises InputError for TensorRT-LLM, whose cast is not in these facts."""
    where = _at(src, "torch_dtype")
    if engine == "trtllm":
        raise _issue(src, "torch_dtype", "torch_dtype float32 with no quantization_config: TensorRT-LLM's cast of a "
                     "float32 checkpoint is not in moe-select's facts (vLLM and SGLang cast it to 16 bits at load); "
                     "plan the 16-bit checkpoint the engine is given (torch_dtype bfloat16 or float16)")
    gemma = (_str(cfg, "model_type") or "").startswith("gemma")
    casts = {"vllm": "bf16", "sglang": "bf16" if gemma else "fp16"}
    planned = engine if engine in casts else "sglang"
    quant = casts[planned]
    prov["quant"] = f"{where} (float32, cast to {quant} at load)"
    said = "; ".join(f"{e} casts it to {casts[e]} ({FLOAT32_CAST_SOURCES[e]})" for e in casts
                     if engine not in casts or e == engine)
    who = "" if engine in casts else " (engine any plans SGLang's)"
    notes.append(f"{where}: a float32 checkpoint; the experts run in the 16-bit dtype the engine casts to under "
                 f"--dtype auto, planned as {quant}{who}: {said}. An explicit --dtype changes it: plan that "
                 "checkpoint's 16-bit form instead")
    return quant


def _dtype_quant(cfg: MarkedDict, text: MarkedDict, prov: dict[str, str], engine: str = "any",
                 notes: list[str] | None = None) -> str:
    """No quantization source: bf16 or fp16 from ``torch_dtype`` (absent: bf16; float32: the engine's cast,
    :func:`_float32_cast`, with a note), else InputError."""
    dtype = _str(text, "torch_dtype", "text_config." if text is not cfg else "") or _str(cfg, "torch_dtype")
    src = text if "torch_dtype" in text else cfg
    if dtype in ("bfloat16", "float16"):
        prov["quant"] = _at(src, "torch_dtype")
        return "bf16" if dtype == "bfloat16" else "fp16"
    if dtype is None:
        prov["quant"] = f"{cfg.file} (no quantization_config and no torch_dtype: unquantized, taken as bf16)"
        return "bf16"
    if dtype in ("float32", "float"):
        return _float32_cast(cfg, src, engine, prov, notes if notes is not None else [])
    raise _issue(src, "torch_dtype", f"torch_dtype {shorten(dtype)} with no quantization_config: expert weights in "
                 f"{shorten(dtype)} are not a supported format (bf16, fp16; float32 as the engine casts it)")


def _quant_of(cfg: MarkedDict, text: MarkedDict, hfq: Any, engine: str, prov: dict[str, str], params: dict[str, Any],
              notes: list[str]) -> tuple[str, MarkedDict | None]:
    """The checkpoint's expert format as ``engine`` reads it (:data:`QUANT_SOURCE_ORDER`; ``any``: SGLang's
    order), its parameters into ``params``, ``prov["quant"]`` the ``file:line (key)`` read, and ``notes``: sources
    that disagree (each with its file:line, what each engine reads), a source an engine does not read at all,
    per-channel groups. Returns the format and the mapping whose exclusion lists apply. Raises the InputError of
    the source planned when its format is wrong or unsupported."""
    readings = _quant_readings(cfg, text, hfq)
    planned = engine if engine in QUANT_SOURCE_ORDER else "sglang"
    chosen_name = _engine_source(planned, readings)
    if chosen_name is None and readings:  # TensorRT-LLM reads none of them (compression_config): the weights' format
        chosen_name = _engine_source("sglang", readings)
    if chosen_name is None:
        empty = [k for k in ("quantization_config", "compression_config") if isinstance(cfg.get(k), dict) and not cfg[k]]
        for k in empty:    # {} counts as absent: said, not silent
            notes.append(f"{cfg.file}:{cfg.key_lines.get(k, cfg.line)} ({k} {{}}): an empty mapping, read as no "
                         "quantization (the format comes from torch_dtype)")
        return _dtype_quant(cfg, text, prov, engine, notes), None
    chosen = readings[chosen_name]
    if chosen.error is not None:
        raise chosen.error
    assert chosen.quant is not None
    params.update(chosen.params)
    prov["quant"] = chosen.where
    notes.extend(chosen.notes)
    engines = [planned] if engine in QUANT_SOURCE_ORDER else list(ENGINES)
    if len({r.key() for r in readings.values()}) > 1:
        who = engine if engine in QUANT_SOURCE_ORDER else "sglang (engine any plans in SGLang's order)"
        order = ", then ".join(n for n in QUANT_SOURCE_ORDER[planned] if n in readings)
        others = []
        for e in ENGINES:
            name = _engine_source(e, readings)
            if e != planned and name != chosen_name:
                others.append(f"{e} reads {readings[name].where} ({readings[name].describe()})" if name
                              else f"{e} reads none of them")
        notes.append("quantization sources disagree: " + "; ".join(f"{r.where} says {r.describe()}" for r in readings.values())
                     + f". Planned {chosen.describe()} from {chosen.where}, as {who} reads them ({order})"
                     + (f"; {'; '.join(others)}" if others else ""))
    for e in engines:
        if _engine_source(e, readings) is None:
            notes.append(f"{e} does not read {chosen.source} ({chosen.where}): its loader reads hf_quant_config.json or "
                         "quantization_config only and would build these experts unquantized; planned "
                         f"{chosen.describe()}, the weights' format (rename the key to quantization_config)")
    return chosen.quant, chosen.mapping


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[^\s"{}\[\],:]+')


def _token_line(text: str, token: str) -> int:
    """Line of the first occurrence of ``token`` outside JSON strings (1-based; 0 when not found)."""
    for m in _JSON_TOKEN.finditer(text):
        if m.group() == token:
            return text.count("\n", 0, m.start()) + 1
    return 0


class _NotJSON(ValueError):
    def __init__(self, token: str, msg: str):
        super().__init__(msg)
        self.token, self.msg = token, msg


def _json_constant(name: str) -> Any:
    raise _NotJSON(name, f"{name} is not a JSON number (non-finite numbers are refused)")


def _json_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise _NotJSON(text, f"{shorten(text)} overflows a float (non-finite numbers are refused)")
    return v


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _NotJSON(text, f"an integer of {len(text.lstrip('-'))} digits: longer than the {MAX_INT_DIGITS}-digit bound")
    return int(text)


def _load_json(path: Path, name: str, files: dict[str, str]) -> Any:
    """Strict JSON (what Hugging Face writes), read once through :func:`~moe_select.yamlio.read_input`
    (regular files of at most 4 MiB) and parsed twice from those bytes: by ``json`` for strictness
    (JSON syntax, no NaN/Infinity, no float that overflows, no integer over
    :data:`~moe_select.yamlio.MAX_INT_DIGITS` digits) and by the bounded marked loader for lines and
    bounds (depth, size, duplicate keys). Records the sha256 in ``files[name]``. Raises InputError."""
    raw, files[name] = read_input(path, name, "model config")
    text = decode_text(raw, name)
    try:
        json.loads(text, parse_constant=_json_constant, parse_float=_json_float, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        raise InputError(Issue(name, exc.lineno, "", f"not valid JSON: {exc.msg} (column {exc.colno})")) from None
    except _NotJSON as exc:
        raise InputError(Issue(name, _token_line(text, exc.token), "", f"not valid JSON: {exc.msg}")) from None
    except RecursionError:
        pass  # nested too deep for json: the bounded loader below refuses it with the line
    return load_text(text, name)


def read_model_config(path: str | Path, display: str | None = None, engine: str = "any") -> ModelInfo:
    """Parse a checkpoint folder or config.json (and its ``hf_quant_config.json``).

    The quantization is read from the source ``engine`` reads first (``quantization_config``,
    ``compression_config``, ``hf_quant_config.json``; :data:`QUANT_SOURCE_ORDER`, with each engine's upstream
    code at a commit); ``engine`` ``any`` (or an unknown name) reads in SGLang's order. Sources that disagree,
    and a source an engine does not read, are reported in ``notes`` with each file:line, never refused.

    Every value used is checked for its type and range: integers are integers (not bool, float or
    string), experts in ``[1, MAX_EXPERTS]``, hidden size and expert width in ``[1, MAX_WIDTH]``, top-k
    at most the number of experts, floats finite and positive, ``text_config``,
    ``quantization_config`` and hf_quant_config's ``quantization`` mappings, ``weight_block_size`` a
    list of two positive integers. Raises :class:`InputError` naming file:line and key when a value is
    wrong, the config is not a MoE model, or its quantization is unknown or unsupported; never another
    exception for any file content."""
    cfg_path, hfq_path = resolve_config_path(path)
    name = display or _display(cfg_path, 4096)
    files: dict[str, str] = {}
    cfg = _load_json(cfg_path, name, files)
    if not isinstance(cfg, MarkedDict):
        raise InputError(Issue(name, getattr(cfg, "line", 0), "", f"{cfg_path.name} does not hold a JSON object"))
    hfq = _load_json(hfq_path, str(Path(name).parent / hfq_path.name), files) if hfq_path else None
    if hfq_path is not None and hfq is not None and not isinstance(hfq, MarkedDict):  # a JSON scalar or list: no marks
        raise InputError(Issue(str(Path(name).parent / hfq_path.name), getattr(hfq, "line", 0), "",
                               f"hf_quant_config.json must hold a JSON object, got {_what(hfq)}"))
    if hfq_path is None:  # its absence decides the format too: a plan must see it appear
        files[str(Path(name).parent / "hf_quant_config.json")] = ABSENT
    text = _mapping(cfg, "text_config", what=" (the text model's config)") or cfg
    tp = "text_config." if text is not cfg else ""
    model_type = _str(cfg, "model_type") or _str(text, "model_type", tp) or "?"
    prov: dict[str, str] = {}
    shape: dict[str, Any] = {}
    at: dict[str, tuple[MarkedDict, str]] = {}  # shape field -> (mapping, key) it was read from

    def take(field_: str, key: str, value: Any) -> None:
        shape[field_], prov[field_], at[field_] = value, _at(text, key), (text, key)

    key = next((k for k in _EXPERT_KEYS if _present(text, k)), None)
    if key is None:
        raise _issue(text, None, f"not a MoE config: none of {', '.join(_EXPERT_KEYS)} is given", tp)
    take("num_experts", key, _int(text, key, 1, MAX_EXPERTS, tp))
    key = next((k for k in _TOP_K_KEYS if _present(text, k)), None)
    if key is None:
        raise _issue(text, None, f"no {' or '.join(_TOP_K_KEYS)}: cannot tell top_k", tp)
    take("top_k", key, _int(text, key, 1, MAX_EXPERTS, tp))
    if shape["top_k"] > shape["num_experts"]:
        raise _issue(text, key, f"{key} {shape['top_k']} exceeds the number of experts {shape['num_experts']} "
                     f"({prov['num_experts']})", tp)
    if not _present(text, "hidden_size"):
        raise _issue(text, "hidden_size", "no hidden_size: cannot tell the layer's width", tp)
    take("hidden_size", "hidden_size", _int(text, "hidden_size", 1, MAX_WIDTH, tp))
    ikey = "moe_intermediate_size" if _present(text, "moe_intermediate_size") else "intermediate_size"
    mt = _str(text, "model_type", tp) or model_type
    if ikey == "intermediate_size" and mt in MOE_WIDTH_MODEL_TYPES:
        # these configs give the experts' width as moe_intermediate_size and intermediate_size is the dense MLP's (a
        # ninth new user's trial: a Qwen3-MoE config without the key was planned at 6144 for 768)
        raise _issue(text, "moe_intermediate_size", f"no moe_intermediate_size: a {mt} config gives the experts' width "
                     f"there (the engines read config.moe_intermediate_size; transformers' config class fills a default "
                     f"when it is absent), and its intermediate_size is the dense MLP's, not the experts': add "
                     f"moe_intermediate_size, or give the shape inline", tp)
    if not _present(text, ikey):
        raise _issue(text, None, "no moe_intermediate_size or intermediate_size: cannot tell the experts' width", tp)
    take("moe_intermediate_size", ikey, _int(text, ikey, 1, MAX_WIDTH, tp))

    if model_type == "gpt_oss" or mt == "gpt_oss":
        shape["activation"], prov["activation"] = "swiglu_oai", f"{name} (model_type gpt_oss: clamped SwiGLU, alpha 1.702)"
        if _present(text, "swiglu_limit"):
            take("swiglu_limit", "swiglu_limit", _number(text, "swiglu_limit", tp))
    else:
        act = _str(text, "hidden_act", tp) or "silu"
        # "situ": Kimi K3's SiTU (its config.json; the betas activation_situ_beta / activation_situ_linear_beta
        # are the kernel's constants, not read here: no adapter of this install computes situ).
        table = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu", "relu2": "relu2",
                 "situ": "situ", "swigluoai": "swiglu_oai_split"}
        if act == "swigluoai":
            # MiniMax-M3 (hidden_act "swigluoai", swiglu_limit, swiglu_alpha, swiglu_beta): vLLM's MiniMaxM3MoE builds
            # FusedMoE(activation="swigluoai_uninterleave", swiglu_limit=..., swiglu_alpha=..., swiglu_beta=...) on a
            # packed [all gates; all ups] w13 (vllm-project/vllm@v0.24.0:vllm/models/minimax_m3/nvidia/model.py):
            # swiglu_oai_split. The limit is required (vLLM asserts it); the shape carries no alpha or beta, so a
            # config whose values are not the activation's (1.702, 1.0) is refused rather than judged as another.
            if not _present(text, "swiglu_limit"):
                raise _issue(text, "hidden_act", "hidden_act swigluoai (MiniMax-M3's clamped SwiGLU-OAI) without "
                             "swiglu_limit: the clamp is required (vLLM asserts SWIGLUOAI_UNINTERLEAVE's clamp_limit)", tp)
            take("swiglu_limit", "swiglu_limit", _number(text, "swiglu_limit", tp))
            for key, want in (("swiglu_alpha", 1.702), ("swiglu_beta", 1.0)):
                if _present(text, key) and _number(text, key, tp) != want:
                    raise _issue(text, key, f"{key} {_number(text, key, tp)}: swiglu_oai_split is defined with {key} "
                                 f"{want} (MiniMax-M3's); another value is not representable here", tp)
            shape["activation"] = "swiglu_oai_split"
            prov["activation"] = (f"{_at(text, 'hidden_act')}; {prov['swiglu_limit']} (MiniMax-M3's clamped SwiGLU-OAI "
                                  "on split gate/up halves: swiglu_oai_split)")
        elif act in table:
            shape["activation"] = table[act]
            prov["activation"] = _at(text, "hidden_act") if _present(text, "hidden_act") else f"{name} (no hidden_act: silu)"
            # A SwiGLU clamp (DeepSeek-V4: vLLM's DeepseekV4MoE hands config.swiglu_limit to FusedMoE and its MLP uses
            # SiluAndMulWithClamp, vllm-project/vllm@023da1fc828e deepseek_v4.py): silu_clamped, the limit carried
            # typed as gpt-oss's is. null is no clamp (vLLM builds SiluAndMul for swiglu_limit None).
            if _present(text, "swiglu_limit"):
                if shape["activation"] != "silu":
                    raise _issue(text, "swiglu_limit", f"swiglu_limit with hidden_act {shorten(act)}: no clamped "
                                 "variant of it is known (read: silu with swiglu_limit, as silu_clamped)", tp)
                take("swiglu_limit", "swiglu_limit", _number(text, "swiglu_limit", tp))
                shape["activation"] = "silu_clamped"
                prov["activation"] = (f"{prov['activation']}; {prov['swiglu_limit']} (SiLU with gate and up clamped at "
                                      f"swiglu_limit {shape['swiglu_limit']}: silu_clamped)")
        elif re.fullmatch(r"[a-z][a-z0-9_]{0,63}", act):
            # An activation no vocabulary declares (issue 18): kept under its own name, for the selector to judge.
            shape["activation"] = act
            prov["activation"] = (f"{_at(text, 'hidden_act')} (an activation this moe-select does not know: read as "
                                  f"{', '.join(table)}; kept as {act} and judged)")
        else:
            raise _issue(text, "hidden_act", f"hidden_act {shorten(act)} is not an activation name (read: "
                         f"{', '.join(table)}; another lower-case name is kept and judged)", tp)

    scoring, topk_method = _str(text, "scoring_func", tp), _str(text, "topk_method", tp)
    grouped = topk_method in ("noaux_tc", "group_limited_greedy") or _present(text, "n_group")
    if scoring == "sigmoid" and grouped:
        shape["routing"], prov["routing"] = "deepseek_v3", _at(text, "scoring_func")
        for k in ("n_group", "topk_group"):
            if _present(text, k):
                take(k, k, _int(text, k, 1, shape["num_experts"], tp, " (the number of experts)"))
        if "n_group" in shape and shape["num_experts"] % shape["n_group"]:
            raise _issue(text, "n_group", f"n_group {shape['n_group']} does not divide the number of experts "
                         f"{shape['num_experts']} ({prov['num_experts']})", tp)
        if "topk_group" in shape and shape["topk_group"] > shape.get("n_group", 1):
            raise _issue(text, "topk_group", f"topk_group {shape['topk_group']} exceeds n_group {shape.get('n_group', 1)}", tp)
        if _present(text, "routed_scaling_factor"):
            take("routed_scaling_factor", "routed_scaling_factor", _number(text, "routed_scaling_factor", tp))
    elif scoring == "sigmoid":  # no expert groups: MiniMax-M2 style (sigmoid + correction bias, renormalised)
        shape["routing"], prov["routing"] = "sigmoid_topk", _at(text, "scoring_func")
    elif scoring is not None and scoring != "softmax":
        # A scoring function none of the routings implements (DeepSeek-V4's sqrtsoftplus): the engine's own top-k.
        shape["routing"] = "custom"
        prov["routing"] = (f"{_at(text, 'scoring_func')} (scoring_func {shorten(scoring)}: no routing of this moe-select "
                           "scores so; the engine computes the top-k (custom))")
    elif model_type == "phimoe" or mt == "phimoe":
        shape["routing"], prov["routing"] = "sparsemixer", f"{name} (model_type phimoe: sparsemixer top-2)"
    elif model_type == "llama4" or mt.startswith("llama4"):
        shape["routing"], prov["routing"] = "llama4", f"{name} (model_type llama4: top-k logits, then sigmoid)"
    elif mt in _RENORMALIZING or model_type in _RENORMALIZING:
        shape["routing"], prov["routing"] = "renormalize", f"{name} (model_type {mt}: top-k, then softmax over the k)"
    elif "norm_topk_prob" in text:
        norm = text["norm_topk_prob"]
        if not isinstance(norm, bool):
            raise _issue(text, "norm_topk_prob", f"norm_topk_prob must be true or false, got {_what(norm)}", tp)
        shape["routing"] = "renormalize" if norm else "softmax_topk"
        prov["routing"] = _at(text, "norm_topk_prob")
    else:
        raise _issue(text, "model_type", f"model_type {shorten(mt)}: routing not known (set model.routing in the deployment)", tp)

    if _present(text, "n_shared_experts") and _int(text, "n_shared_experts", 0, MAX_EXPERTS, tp):
        shared, prov["num_shared_experts"] = text["n_shared_experts"], _at(text, "n_shared_experts")
        at["num_shared_experts"] = (text, "n_shared_experts")
    elif _present(text, "shared_expert_intermediate_size") and _int(text, "shared_expert_intermediate_size", 0, MAX_WIDTH, tp):
        shared, prov["num_shared_experts"] = 1, _at(text, "shared_expert_intermediate_size")
    elif model_type == "llama4":
        shared, prov["num_shared_experts"] = 1, f"{name} (model_type llama4: one shared expert)"
    else:
        shared, prov["num_shared_experts"] = 0, f"{name} (no shared-expert key)"
    shape["num_shared_experts"] = shared
    _widths(text, tp, shape, prov)
    _architecture(cfg, shape, prov)
    params: dict[str, Any] = {}
    notes: list[str] = []
    quant, excl = _quant_of(cfg, text, hfq, engine, prov, params, notes)
    dtype = _str(text, "torch_dtype", tp) or _str(cfg, "torch_dtype")
    _check_shape(shape, at, text, tp)
    kinds = _layer_kinds(text, excl, quant, params, dtype)
    return ModelInfo(name, model_type, shape, quant, dtype, prov, notes=notes, files=files, quant_params=params,
                     layer_kinds=kinds)


def _architecture(cfg: MarkedDict, shape: dict[str, Any], prov: dict[str, str]) -> None:
    """The model class, ``architectures[0]`` of config.json (issue 21: facts that hold for some model architectures
    only read it). Absent: not set. Raises :class:`InputError` (file:line) for a value that is not a list whose first
    element is a class name."""
    if "architectures" not in cfg or cfg["architectures"] is None:
        return
    archs = cfg["architectures"]
    first = archs[0] if isinstance(archs, list) and archs else None
    if not isinstance(first, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,127}", first):
        raise _issue(cfg, "architectures", f"architectures must be a list of model class names, got {_what(archs)}")
    shape["architecture"], prov["architecture"] = first, _at(cfg, "architectures")


def _pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _widths(text: MarkedDict, tp: str, shape: dict[str, Any], prov: dict[str, str]) -> None:
    """The shared experts' and the dense MLP layers' intermediate sizes (split over tp even with EP), and the attention
    heads (split over tp: an engine refuses a tp that does not divide them)."""
    if _present(text, "num_attention_heads"):
        shape["num_attention_heads"] = _int(text, "num_attention_heads", 1, MAX_WIDTH, tp)
        prov["num_attention_heads"] = _at(text, "num_attention_heads")
    if _present(text, "shared_expert_intermediate_size"):
        v = _int(text, "shared_expert_intermediate_size", 0, MAX_WIDTH, tp)
        if v:
            shape["shared_expert_intermediate_size"] = v
            prov["shared_expert_intermediate_size"] = _at(text, "shared_expert_intermediate_size")
    elif shape.get("num_shared_experts"):
        shape["shared_expert_intermediate_size"] = shape["num_shared_experts"] * shape["moe_intermediate_size"]
        prov["shared_expert_intermediate_size"] = f"{prov.get('num_shared_experts')} x moe_intermediate_size"
    dense_key = None
    if _pos_int(text.get("first_k_dense_replace")) or (isinstance(text.get("mlp_only_layers"), list) and text["mlp_only_layers"]) \
            or (_pos_int(text.get("decoder_sparse_step")) and text["decoder_sparse_step"] > 1):
        dense_key = "intermediate_size" if "moe_intermediate_size" in text else None
    elif _pos_int(text.get("interleave_moe_layer_step")) and text["interleave_moe_layer_step"] > 1:
        dense_key = "intermediate_size_mlp"
    if dense_key and _present(text, dense_key):
        shape["dense_intermediate_size"] = _int(text, dense_key, 1, MAX_WIDTH, tp)
        prov["dense_intermediate_size"] = _at(text, dense_key)


def _int_list(v: Any) -> list[int] | None:
    return [x for x in v if isinstance(x, int) and not isinstance(x, bool)] if isinstance(v, list) else None


def moe_layer_indices(text: MarkedDict) -> list[int]:
    """Indices of the main model's decoder layers that have MoE experts (module doc); [] when the
    config does not say how many layers it has."""
    n = text.get("num_hidden_layers")
    if not isinstance(n, int) or not _pos_int(n) or n > 100_000:
        return []
    if isinstance(text.get("first_k_dense_replace"), int) and not isinstance(text.get("first_k_dense_replace"), bool):
        k: int = text["first_k_dense_replace"]
        freq: int = text["moe_layer_freq"] if _pos_int(text.get("moe_layer_freq")) else 1
        return [i for i in range(n) if i >= k and i % freq == 0]
    if "decoder_sparse_step" in text or "mlp_only_layers" in text:
        only = set(_int_list(text.get("mlp_only_layers")) or [])
        step: int = text["decoder_sparse_step"] if _pos_int(text.get("decoder_sparse_step")) else 1
        return [i for i in range(n) if i not in only and (i + 1) % step == 0]
    moe_layers = _int_list(text.get("moe_layers"))
    if moe_layers is not None:
        return sorted(i for i in set(moe_layers) if 0 <= i < n)
    if _pos_int(text.get("interleave_moe_layer_step")):
        s: int = text["interleave_moe_layer_step"]
        return list(range(s - 1, n, s))
    return list(range(n))


_EXPERT_PATHS = ("mlp.experts", "block_sparse_moe.experts", "feed_forward.experts")
_LAYER_PREFIXES = ("model.layers", "language_model.model.layers", "model.language_model.layers")
_PROJ = ("gate_proj", "up_proj", "down_proj", "w1", "w2", "w3")


#: What follows ``<prefix>.<layer>.`` in an expert module name: the experts, the first expert, its projections.
_EXPERT_TAILS = tuple(t for path in _EXPERT_PATHS for t in [path, f"{path}.0"] + [f"{path}.0.{proj}" for proj in _PROJ])


def _expert_modules(i: int) -> list[str]:
    """Module names the experts of decoder layer ``i`` go by in checkpoints (per family): every
    ``<prefix>.<i>.<tail>`` of :data:`_LAYER_PREFIXES` x :data:`_EXPERT_TAILS`."""
    return [f"{pre}.{i}.{tail}" for pre in _LAYER_PREFIXES for tail in _EXPERT_TAILS]


def _runs(name: str) -> set[str]:
    """Every run of whole dotted segments of ``name`` (``a.b.c`` -> a, b, c, a.b, b.c, a.b.c)."""
    seg = name.split(".")
    return {".".join(seg[i:j]) for i in range(len(seg)) for j in range(i + 1, len(seg) + 1)}


class _Exclusions:
    """The exclusion patterns of a quantization config, matched against expert module names in time
    linear in the names (a config may list tens of thousands of modules): ``globs`` (ModelOpt
    ``exclude_modules``; without wildcards they are exact names), compressed-tensors ``ignore`` (exact
    names, or ``re:`` regexes), ``modules_to_not_convert`` (whole dotted segments, so ``gate`` never
    matches ``gate_proj``)."""

    MAX_PATTERNS = 1000  # wildcard globs and regexes tried one by one

    def __init__(self, globs: list[str], ignore: list[str], segments: list[str]):
        self.exact = {g for g in globs if not any(c in g for c in "*?[")} | {p for p in ignore if not p.startswith("re:")}
        self.segments = set(segments)
        self.wild = [g for g in globs if any(c in g for c in "*?[")][: self.MAX_PATTERNS]
        self.regex = []
        for p in [p for p in ignore if p.startswith("re:")][: self.MAX_PATTERNS]:
            try:
                self.regex.append(re.compile(p[3:]))
            except re.error:
                continue

    def __bool__(self) -> bool:
        return bool(self.exact or self.segments or self.wild or self.regex)

    def covers(self, names: list[str], segments: bool = True) -> bool:
        """True when a pattern matches one of ``names`` (``segments=False``: leaving ``segments`` out)."""
        import fnmatch

        for n in names:
            if n in self.exact or (segments and self.segments and _runs(n) & self.segments):
                return True
            if any(fnmatch.fnmatchcase(n, g) for g in self.wild) or any(rx.match(n) for rx in self.regex):
                return True
        return False

    def covered_layers(self, layers: list[int]) -> set[int]:
        """The layers of ``layers`` whose experts ``covers`` (``covers(_expert_modules(i))``), without
        testing every name of every layer against ``segments``: a run of whole segments of
        ``<prefix>.<i>.<tail>`` lies in the prefix, in the tail (then it holds for every layer), or
        spans ``<i>`` (a suffix of the prefix, the layer, a prefix of the tail); each entry of
        ``segments`` is split at each of its segments once, so the work grows with the entries, not
        with entries x layers x names."""
        every, indices = False, set[str]()
        if self.segments:
            pres, tails = [p.split(".") for p in _LAYER_PREFIXES], [t.split(".") for t in _EXPERT_TAILS]
            inside = {r for p in (*_LAYER_PREFIXES, *_EXPERT_TAILS) for r in _runs(p)}
            ends = {tuple(p[j:]) for p in pres for j in range(len(p) + 1)}
            starts = {tuple(t[:j]) for t in tails for j in range(len(t) + 1)}
            for entry in self.segments:
                if entry in inside:
                    every = True
                    break
                parts = entry.split(".")
                indices.update(parts[k] for k in range(len(parts)) if tuple(parts[:k]) in ends and tuple(parts[k + 1:]) in starts)
        if every:
            return set(layers)
        out = {i for i in layers if str(i) in indices}
        if self.exact or self.wild or self.regex:
            out |= {i for i in layers if i not in out and self.covers(_expert_modules(i), segments=False)}
        return out


def _string_list(holder: Any, key: str) -> list[str]:
    v = holder.get(key) if isinstance(holder, MarkedDict) else None
    return [p for p in v if isinstance(p, str)] if isinstance(v, list) else []


def _layer_kinds(text: MarkedDict, q: MarkedDict | None, quant: str, params: dict[str, Any],
                 dtype: str | None) -> list[dict[str, Any]]:
    """The distinct MoE layer kinds (module doc): the main kind, then layers the quantization leaves out. ``q``:
    the quantization mapping read (:func:`_quant_of`), whose ``exclude_modules``, ``ignore`` and
    ``modules_to_not_convert`` apply; a source the engine does not read excludes nothing."""
    layers = moe_layer_indices(text)
    n: int = text["num_hidden_layers"] if _pos_int(text.get("num_hidden_layers")) else 0
    nextn = text.get("num_nextn_predict_layers")
    mtp = list(range(n, n + nextn)) if isinstance(nextn, int) and _pos_int(nextn) and nextn <= 64 and layers else []
    rules = _Exclusions(_string_list(q, "exclude_modules"), _string_list(q, "ignore"), _string_list(q, "modules_to_not_convert"))
    plain = "fp16" if dtype == "float16" else "bf16"
    excluded: set[int] = set()
    if quant not in ("bf16", "fp16") and rules:
        excluded = rules.covered_layers(layers + mtp)
    main = [i for i in layers if i not in excluded] + [i for i in mtp if i not in excluded]
    kinds = [{"kind": "main", "layers": main, "quant": quant, "quant_params": dict(params), "why": "the checkpoint's format"}]
    if in_main := [i for i in mtp if i not in excluded]:
        # MTP (NextN) layers in the main format are planned with the main layers, and on their own where a deployment
        # names a runner or all-to-all for them (moe_select/deployment.py; a fleet trial, break55: DeepSeek-V3's one
        # NextN layer was 'not in this checkpoint' for layer_runners.mtp)
        kinds[0]["mtp"] = in_main
    skipped_main = sorted(excluded & set(layers))
    skipped_mtp = sorted(excluded & set(mtp))
    if skipped_main:
        kinds.append({"kind": "unquantized", "layers": skipped_main, "quant": plain, "quant_params": {},
                      "why": "the quantization config leaves these layers' experts unquantized"})
    if skipped_mtp:
        kinds.append({"kind": "mtp", "layers": skipped_mtp, "quant": plain, "quant_params": {},
                      "why": "multi-token-prediction layers the quantization config leaves unquantized"})
    return kinds



def _check_shape(shape: dict[str, Any], at: dict[str, tuple[MarkedDict, str]], text: MarkedDict, tp: str) -> None:
    """The shape read must be a valid ``ModelShape`` (the deployment validates it again): any remaining
    disagreement is reported at the config key it came from, never as a ValidationError."""
    from pydantic import ValidationError

    from .shape import ModelShape

    try:
        ModelShape.model_validate(shape)
    except ValidationError as exc:
        issues = []
        for err in exc.errors(include_url=False):
            loc = err.get("loc") or ()
            holder, key = at.get(str(loc[0]), (text, None)) if loc else (text, None)
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            issues.append(_issue(holder, key, f"{loc[0] if loc else 'model'}: {msg}", tp if holder is text else "").issues[0])
        raise InputError(issues) from None
