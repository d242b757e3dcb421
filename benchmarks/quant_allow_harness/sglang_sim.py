"""Run SGLang's real ModelConfig._verify_quantization and real
override_quantization_method bodies (extracted from the wheel) on stub
checkpoints.  Usage: python sglang_sim.py 0.5.13|0.5.23  (CUDA, sm90 by default)"""
import ast
import copy
import json
import os
import sys
import types
import typing
import logging
import glob
import re
sys.path.insert(0, os.path.dirname(__file__))
from extract import classes_in, build_class, func_src, outcome, parse

V = sys.argv[1]
ROOT = f"{os.environ.get('ALLOW_SRC', '/tmp/allow')}/sglang-{V}/sglang/srt"
Q = f"{ROOT}/layers/quantization"
CAP = int(os.environ.get("CAP", "90"))
HIP = os.environ.get("HIP", "0") == "1"


class L(logging.Logger):
    def info_once(self, *a, **k): pass


G = {"logger": L("x"), "Any": typing.Any, "Dict": typing.Dict, "Optional": typing.Optional,
     "re": re, "abstractmethod": (lambda f: f),
     "scalar_types": type("ST", (), {"__getattr__": lambda self, n: n})(),
     "_is_cuda": not HIP, "_is_hip": HIP, "_is_npu": False,
     "get_device_capability": lambda *a, **k: (CAP // 10, CAP % 10)}

# marlin helpers (real code)
mu = f"{Q}/marlin_utils.py"
for fn in ("query_marlin_supported_quant_types", "_check_marlin_supported", "check_marlin_supported"):
    exec(func_src(mu, fn), G)
for n in parse(mu).body:
    if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") in (
            "MARLIN_SUPPORTED_GROUP_SIZES", "FP4_MARLIN_SUPPORTED_GROUP_SIZES"):
        exec(ast.unparse(n), G)
exec(func_src(f"{Q}/gptq/gptq.py", "check_marlin_format"), G)
mo = f"{ROOT}/layers/modelopt_utils.py"
if os.path.exists(mo):
    for n in parse(mo).body:
        if isinstance(n, ast.AnnAssign) and n.target.id == "_MODELOPT_QUANT_ALGO_TO_METHOD":
            exec(f"_MODELOPT_QUANT_ALGO_TO_METHOD = {ast.unparse(n.value)}", G)
    try:
        exec(func_src(mo, "canonicalize_modelopt_quant_algo"), G)
    except KeyError:
        pass

files = glob.glob(f"{Q}/**/*.py", recursive=True)
REG = {}
for f in files:
    for cname, (bases, meths) in classes_in(f).items():
        REG.setdefault(cname, []).append((f, bases, meths))
BUILT = {}


def get_class(cname):
    if cname in BUILT:
        return BUILT[cname]
    cands = REG[cname]
    assert len(cands) == 1, (cname, [c[0] for c in cands])
    f, bases, meths = cands[0]
    bnames = []
    for b in bases:
        if b in REG:
            G[b] = get_class(b)
            bnames.append(b)
    cls = build_class(cname, bnames, meths, G)
    BUILT[cname] = cls
    G[cname] = cls
    return cls


# QUANTIZATION_METHODS: BASE dict literal + the CUDA (or HIP) `mxfp4` update
init = parse(f"{Q}/__init__.py")
QM = {}
for n in init.body:
    if isinstance(n, ast.AnnAssign) and n.target.id == "BASE_QUANTIZATION_METHODS":
        for k, v in zip(n.value.keys, n.value.values):
            QM[k.value] = get_class(v.id)
QM["mxfp4"] = get_class("Mxfp4Config")  # is_cuda() branch
G["AWQConfig"] = get_class("AWQConfig")


def fake_module(name, **attrs):
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    for k, v in attrs.items():
        setattr(sys.modules[name], k, v)


REQ = None
for n in parse(f"{ROOT}/configs/model_config.py").body:
    if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "REQUANTIZATION_METHODS":
        REQ = ast.literal_eval(n.value)
fake_module("sglang.srt.configs.model_config", REQUANTIZATION_METHODS=REQ or [])
fake_module("sglang.srt.layers.deep_gemm_wrapper", DEEPGEMM_SCALE_UE8M0=False)
fake_module("sglang.srt.layers", deep_gemm_wrapper=sys.modules["sglang.srt.layers.deep_gemm_wrapper"])

G.update(QUANTIZATION_METHODS=QM, REQUANTIZATION_METHODS=REQ or [],
         is_hip=lambda: HIP, is_sm100_supported=lambda: False,
         get_platform=lambda: types.SimpleNamespace(is_sm100=False),
         is_qwen3_5_mtp_draft=lambda c: False)
exec(func_src(f"{ROOT}/configs/model_config.py", "_verify_quantization", cls="ModelConfig"), G)
verify = G["_verify_quantization"]

# argparse choices
src, var = f"{ROOT}/arg_groups/choices.py", "QUANTIZATION_CHOICES"
if not os.path.exists(src):
    src = f"{ROOT}/server_args.py"
CHOICES = None
for n in parse(src).body:
    if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == var:
        CHOICES = ast.literal_eval(n.value)


def run(cfg, user, draft=False):
    if user is not None and user not in CHOICES:
        return "RAISE:argparse"
    if user == "unquant":  # ServerArgs / serving_hook: unquant -> None before ModelConfig
        user = None
    cfg = copy.deepcopy(cfg)
    self = types.SimpleNamespace(quantization=user, _parse_quant_hf_config=lambda: cfg,
                                 _find_quant_modelslim_config=lambda: None,
                                 is_draft_model=draft, is_draft_quantization_explicit=False,
                                 hf_config=None)
    return outcome(verify, self)


CKPTS = json.load(open(os.path.join(os.path.dirname(__file__), "ckpts_vllm.json")))
USERS = [None] + CHOICES

if __name__ == "__main__":
    print(f"# SGLang {V} cuda={not HIP} cap={CAP} REQUANTIZATION_METHODS={REQ}")
    print("# QUANTIZATION_CHOICES:", " ".join(CHOICES))
    print("# QUANTIZATION_METHODS (registry, CUDA):", " ".join(QM))
    for ck in CKPTS:
        res = {u: run(ck["cfg"], u) for u in USERS}
        ok = {str(u): r[3:] for u, r in res.items() if r.startswith("ok")}
        other = {}
        for u, r in res.items():
            if not r.startswith("ok"):
                other.setdefault(r, []).append(str(u))
        other = {k: (v if k != "RAISE:mismatch" else len(v)) for k, v in other.items()}
        print(f"{ck['name']}: PASS {ok}  | others: {other}")
