"""Run vLLM's real ModelConfig._verify_quantization and real
override_quantization_method bodies (extracted from the wheel) on stub
checkpoints.  Usage: python vllm_sim.py 0.28.0|0.34.0"""
import ast
import copy
import json
import os
import sys
import types
import typing
import logging
import glob
from collections.abc import Mapping
sys.path.insert(0, os.path.dirname(__file__))
from extract import classes_in, build_class, func_src, outcome, parse

V = sys.argv[1]
ROOT = f"{os.environ.get('ALLOW_SRC', '/tmp/allow')}/vllm-{V}/vllm"
Q = f"{ROOT}/model_executor/layers/quantization"
CAP = int(os.environ.get("CAP", "90"))
PLATFORM = os.environ.get("PLATFORM", "cuda")


class _Cap:
    def __init__(self, v): self.v = v
    def to_int(self): return self.v


class Platform:
    supported_quantization = []
    def is_cpu(self): return PLATFORM == "cpu"
    def is_cuda(self): return PLATFORM == "cuda"
    def is_rocm(self): return PLATFORM == "rocm"
    def is_cuda_alike(self): return PLATFORM in ("cuda", "rocm")
    def is_xpu(self): return False
    def get_device_capability(self): return _Cap(CAP)
    def verify_quantization(self, q): pass


G = {"current_platform": Platform(), "logger": logging.getLogger("x"),
     "Mapping": Mapping, "Any": typing.Any, "re": __import__("re"), "abstractmethod": (lambda f: f),
     "scalar_types": type("ST", (), {"__getattr__": lambda self, n: n})()}
G["QuantizationMethods"] = str
G["envs"] = types.SimpleNamespace(VLLM_BATCH_INVARIANT=False)

# QuantizationMethods literal
init = parse(f"{Q}/__init__.py")
lit = None
for n in init.body:
    if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "QuantizationMethods":
        lit = [e.value for e in n.value.slice.elts]
    if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "DEPRECATED_QUANTIZATION_METHODS":
        deprecated = [e.value for e in n.value.elts]
QM_LITERAL = typing.Literal[tuple(lit)]
QUANTIZATION_METHODS = list(lit)

try:
    exec(func_src(f"{Q}/utils/gptq_utils.py", "normalize_and_validate_gptq_desc_act"), G)
except KeyError:
    pass

# class registry
files = glob.glob(f"{Q}/**/*.py", recursive=True) + glob.glob(f"{ROOT}/models/deepseek_v4*/quant_config.py") + glob.glob(f"{ROOT}/model_executor/models/deepseek_v4*.py")
REG = {}
for f in files:
    for cname, (bases, meths) in classes_in(f).items():
        REG.setdefault(cname, []).append((f, bases, meths))

BUILT = {}


def get_class(cname, prefer_file=None):
    key = (cname, prefer_file)
    if key in BUILT:
        return BUILT[key]
    cands = REG[cname]
    if prefer_file:
        cands = [c for c in cands if c[0] == prefer_file]
    assert len(cands) == 1, (cname, [c[0] for c in cands])
    f, bases, meths = cands[0]
    bnames = []
    for b in bases:
        if b in ("ABC", "Generic") or b.startswith("Generic["):
            continue
        if b in REG:
            same = [c for c in REG[b] if c[0] == f]
            bc = get_class(b, same[0][0] if same else None)
            G[b] = bc
            bnames.append(b)
    tmpname = f"{cname}__{abs(hash(f))}"
    cls = build_class(cname, bnames, meths, G, rename=tmpname)
    G[cname] = cls  # for self-references inside bodies
    BUILT[key] = cls
    return cls


# fake module for imports done inside function bodies
def fake_module(name, **attrs):
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        m = ".".join(parts[:i])
        sys.modules.setdefault(m, types.ModuleType(m))
    mod = sys.modules[name]
    for k, v in attrs.items():
        setattr(mod, k, v)


if "AutoAWQConfig" in REG:
    fake_module("vllm.model_executor.layers.quantization.auto_awq", AutoAWQConfig=get_class("AutoAWQConfig"))
else:
    fake_module("vllm.model_executor.layers.quantization.awq", AWQConfig=get_class("AWQConfig"))

# method_to_config from get_quantization_config
gqc = [n for n in init.body if isinstance(n, ast.FunctionDef) and n.name == "get_quantization_config"][0]
mtc = None
for n in ast.walk(gqc):
    if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "method_to_config":
        mtc = n.value
    if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "method_to_config":
        mtc = n.value
METHOD_TO_CONFIG = {}
for k, v in zip(mtc.keys, mtc.values):
    name = v.id
    if name == "deepseek_config":
        # 0.34: CUDA/ROCm -> models/deepseek_v41, else models/deepseek_v4
        sub = "deepseek_v41" if PLATFORM in ("cuda", "rocm") else "deepseek_v4"
        METHOD_TO_CONFIG[k.value] = get_class("DeepseekV4FP8Config", f"{ROOT}/models/{sub}/quant_config.py")
    elif name == "DeepseekV4FP8Config":
        _p = f"{ROOT}/models/deepseek_v4/quant_config.py"
        METHOD_TO_CONFIG[k.value] = get_class(name, _p if os.path.exists(_p) else None)
    else:
        METHOD_TO_CONFIG[k.value] = get_class(name)
for q in QUANTIZATION_METHODS:  # online shorthands: setdefault(..., OnlineQuantizationConfig)
    METHOD_TO_CONFIG.setdefault(q, get_class("OnlineQuantizationConfig"))


def get_quantization_config(q):
    if q not in QUANTIZATION_METHODS:
        raise ValueError(f"Invalid quantization method: {q}")
    return METHOD_TO_CONFIG[q]


# older releases (before AutoAWQ / AutoGPTQ, 0.23.0 and earlier): the marlin-compatibility checks read
# utils/marlin_utils.py's support tables; its functions and constant tables run as written
G["ScalarType"] = str
_mu = f"{Q}/utils/marlin_utils.py"
if os.path.exists(_mu):
    _t = parse(_mu)
    for _n in _t.body:
        if isinstance(_n, ast.Assign) and all(isinstance(t_, ast.Name) and t_.id.isupper() for t_ in _n.targets):
            try:
                exec(ast.unparse(_n), G)
            except Exception:
                pass
        if isinstance(_n, ast.FunctionDef) and _n.name in ("query_marlin_supported_quant_types",
                "_query_cpu_marlin_supported_quant_types", "_check_marlin_supported", "check_marlin_supported"):
            from extract import _strip
            exec(ast.unparse(_strip(_n)), G)
G["me_quant"] = types.SimpleNamespace(
    QUANTIZATION_METHODS=QUANTIZATION_METHODS, QuantizationMethods=QM_LITERAL,
    get_quantization_config=get_quantization_config,
    DEPRECATED_QUANTIZATION_METHODS=deprecated)
G["cast"] = typing.cast
G["get_args"] = typing.get_args
exec(func_src(f"{ROOT}/config/model.py", "_verify_quantization", cls="ModelConfig"), G)
verify = G["_verify_quantization"]


def normalize(cfg):  # ModelArchConfigConvertor._normalize_quantization_config (non-modelopt part)
    cfg = copy.deepcopy(cfg)
    cfg["quant_method"] = cfg.get("quant_method", "").lower().replace("compressed_tensors", "compressed-tensors")
    return cfg


def run(cfg, user, model_type="qwen3_moe"):
    if isinstance(user, str):
        user = user.lower()  # validate_quantization_before
    self = types.SimpleNamespace(
        quantization=user,
        model_arch_config=types.SimpleNamespace(quantization_config=normalize(cfg)),
        hf_config=types.SimpleNamespace(model_type=model_type, quantization_config=cfg),
        allow_deprecated_quantization=False)
    return outcome(verify, self, (("does not match", "mismatch"), ("Unknown quantization", "unknown"),
                                  ("deprecated", "deprecated")))


CKPTS = json.load(open(os.path.join(os.path.dirname(__file__), "ckpts_vllm.json")))
USERS = [None] + QUANTIZATION_METHODS + ["marlin"]

if __name__ == "__main__":
    print(f"# vLLM {V} platform={PLATFORM} cap={CAP}")
    print("# choices:", " ".join(QUANTIZATION_METHODS))
    for ck in CKPTS:
        res = {u: run(ck["cfg"], u, ck.get("model_type", "qwen3_moe")) for u in USERS}
        ok = {str(u): r[3:] for u, r in res.items() if r.startswith("ok")}
        other = sorted({r for r in res.values() if not r.startswith("ok")})
        print(f"{ck['name']}: PASS {ok}  | others: {other}")
