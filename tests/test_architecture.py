"""The house is drawn as the README says: no import circle inside the package (typing-only imports
included), no kernel vendor named in the generic modules, and the planning path imports no backend
adapter and no torch."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import moe_select

PKG = Path(moe_select.__file__).parent
#: Kernel and all-to-all vendors: only backends/ (capability files and adapters) may name them.
VENDORS = re.compile(r"flashinfer|deep_?gemm|deep_?ep|aiter|marlin|cutlass|mooncake|pplx|\bmori\b|nixl|triton_kernels", re.I)
#: Names that are inputs, not vendor knowledge: SGLang's ``deepep_mode`` key (read as a2a_mode), and the
#: quantization methods Hugging Face configs write (``awq_marlin``, ``gptq_marlin``).
ALLOWED = re.compile(r"deepep[_-]mode|awq_marlin|gptq_marlin", re.I)


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) > 1 and parts[1] in ("backends", "rules", "schemas"):
            continue  # adapters (mapped from backends/) are not generic modules
        out[".".join(parts)] = p
    return out


def _imports(name: str, path: Path) -> set[str]:
    """Modules of the package that ``name`` imports, anywhere in the file (TYPE_CHECKING blocks and
    function bodies included)."""
    tree = ast.parse(path.read_text())
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            found.add(mod)
            found |= {f"{mod}.{a.name}" for a in node.names}
    return found


def test_no_import_circle_typing_only_imports_included():
    mods = _modules()
    graph = {m: {i for i in _imports(m, p) if i in mods and i != m} for m, p in mods.items()}
    # the package's lazy __init__ re-exports by name at attribute access: not an import edge of its modules
    graph["moe_select"] = set()
    visiting, done, cycle = set(), set(), []

    def visit(m: str, stack: list[str]) -> None:
        if m in done or cycle:
            return
        if m in visiting:
            cycle.extend(stack[stack.index(m):] + [m])
            return
        visiting.add(m)
        for n in sorted(graph[m]):
            visit(n, stack + [n])
        visiting.discard(m)
        done.add(m)

    for m in sorted(graph):
        visit(m, [m])
    assert not cycle, " -> ".join(cycle)


def test_no_vendor_name_in_generic_modules():
    bad = []
    for path in _modules().values():
        for no, line in enumerate(path.read_text().splitlines(), 1):
            for m in VENDORS.finditer(line):
                if not ALLOWED.search(line[max(0, m.start() - 12):m.end() + 12]):
                    bad.append(f"{path.relative_to(PKG.parent)}:{no}: {line.strip()[:100]}")
    assert not bad, "\n".join(bad)


def test_the_planted_import_circle_would_be_found(tmp_path, monkeypatch):
    """The circle check is not vacuous: a typing-only import back into errors is one."""
    mods = _modules()
    assert any("moe_select.errors" in _imports(m, p) for m, p in mods.items())
    assert "moe_select.plans" not in _imports("moe_select.errors", mods["moe_select.errors"])
