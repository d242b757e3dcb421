"""Extract selected methods/functions from wheel sources (by AST) and exec them
in a stub namespace, so the real code of _verify_quantization and the
override_quantization_method chain runs without torch."""
import ast
import textwrap

KEEP_METHODS = {
    "override_quantization_method", "_modelopt_override_quantization_method",
    "get_name", "get_min_capability", "is_moe_wna16_compatible",
    "_extract_modelopt_quant_algo", "_is_quark_mxfp4_ocp",
    "is_awq_marlin_compatible", "is_gptq_marlin_compatible",
    "is_petit_nvfp4_compatible",
}


def _strip(fn):
    fn = ast.fix_missing_locations(fn)
    fn.returns = None
    for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs:
        a.annotation = None
    if fn.args.vararg:
        fn.args.vararg.annotation = None
    if fn.args.kwarg:
        fn.args.kwarg.annotation = None
    return fn


def parse(path):
    return ast.parse(open(path).read())


def classes_in(path):
    """{class_name: (bases, [method source])}"""
    t = parse(path)
    out = {}
    for node in t.body:
        if isinstance(node, ast.ClassDef):
            meths = []
            for n in node.body:
                if isinstance(n, ast.FunctionDef) and n.name in KEEP_METHODS:
                    meths.append(ast.unparse(_strip(n)))
                elif isinstance(n, ast.Assign) and any(
                    isinstance(t_, ast.Name) and t_.id == "TYPE_MAP" for t_ in n.targets
                ):
                    meths.append(ast.unparse(n))
            out[node.name] = ([ast.unparse(b) for b in node.bases], meths)
    return out


def build_class(name, bases, meths, ns, rename=None):
    body = "\n".join(meths) if meths else "pass"
    src = f"class {rename or name}({', '.join(bases) or 'object'}):\n" + textwrap.indent(body, "    ")
    exec(src, ns)
    return ns[rename or name]


def func_src(path, fname, cls=None):
    t = parse(path)
    for node in ast.walk(t):
        if cls and isinstance(node, ast.ClassDef) and node.name == cls:
            for n in node.body:
                if isinstance(n, ast.FunctionDef) and n.name == fname:
                    return ast.unparse(_strip(n))
        if not cls and isinstance(node, ast.FunctionDef) and node.name == fname:
            return ast.unparse(_strip(node))
    raise KeyError((path, cls, fname))


def outcome(verify, self, markers=(("does not match", "mismatch"), ("Unknown quantization", "unknown"))) -> str:
    """``ok:<method>`` where the engine's ``verify(self)`` passes (the method it ends up using), else ``RAISE:<kind>``:
    the first of ``markers`` (message fragment, kind) the ValueError's message holds, or its first 60 characters."""
    try:
        verify(self)
        return "ok:" + str(self.quantization)
    except ValueError as e:
        m = str(e)
        return "RAISE:" + next((kind for frag, kind in markers if frag in m), m[:60])
