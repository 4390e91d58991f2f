"""How the package is built, measured from its source: modules per package, import cycles
between modules, functions over the length limit, and the modules directly under ``converter/``.

    python scripts/architecture_report.py [--json]

Exit 1 when a limit is broken (an import cycle, a function over ``MAX_FUNCTION_LINES`` lines
outside generated code, more than ``MAX_TOP_LEVEL_MODULES`` modules directly under
``converter/``).  ``tests/test_architecture.py`` runs the same measures.

Every import counts, also those inside functions (the package imports lazily, so most of its
edges are there): a cycle through a lazy import is still two modules that need each other.
"""

from __future__ import annotations

import ast
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "converter"
MAX_FUNCTION_LINES = 80
MAX_TOP_LEVEL_MODULES = 6


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, generated code left out."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        if "_generated" in path.parts:
            continue
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _resolve(name: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    base = package.split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(found: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from pkg import mod`` counts as ``pkg.mod``;
    importing ``pkg.mod`` does not count as importing ``pkg``'s ``__init__``, which Python runs
    first but which imports nothing back in this package)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in found.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, path, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in found else base for a in node.names]
            for target in targets:
                if "._generated" in target:  # generated code is outside the measure
                    continue
                while target and target not in found:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def long_functions(found: dict[str, Path], limit: int = MAX_FUNCTION_LINES) -> list[tuple[int, str]]:
    """(lines, 'path:line name') of every function longer than ``limit`` lines, longest first."""
    out = []
    for path in found.values():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    out.append((length, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return sorted(out, reverse=True)


def longest_function(found: dict[str, Path]) -> tuple[int, str]:
    return (long_functions(found, 0) or [(0, "")])[0]


def top_level_modules(package: Path = PACKAGE) -> list[str]:
    return sorted(p.name for p in package.glob("*.py"))


def report() -> dict:
    found = modules()
    per_package: dict[str, int] = defaultdict(int)
    for name in found:
        parts = name.split(".")
        per_package[".".join(parts[:2]) if len(parts) > 2 or found[name].name == "__init__.py" else parts[0]] += 1
    length, where = longest_function(found)
    return {
        "modules": len(found),
        "modules_per_package": dict(sorted(per_package.items())),
        "top_level_modules": top_level_modules(),
        "import_cycles": cycles(import_graph(found)),
        "longest_function": {"lines": length, "where": where},
        "functions_over_limit": [{"lines": n, "where": w} for n, w in long_functions(found)],
    }


def broken_limits(data: dict) -> list[str]:
    problems = [f"import cycle: {' <-> '.join(c)}" for c in data["import_cycles"]]
    problems += [f"function over {MAX_FUNCTION_LINES} lines: {f['where']} ({f['lines']})"
                 for f in data["functions_over_limit"]]
    if len(data["top_level_modules"]) > MAX_TOP_LEVEL_MODULES:
        problems.append(f"{len(data['top_level_modules'])} modules directly under converter/ "
                        f"(at most {MAX_TOP_LEVEL_MODULES})")
    return problems


def main(argv: list[str]) -> int:
    data = report()
    if "--json" in argv:
        print(json.dumps(data, indent=2))
    else:
        print(f"modules: {data['modules']}")
        for package, count in data["modules_per_package"].items():
            print(f"  {package:32} {count}")
        print(f"top-level modules ({len(data['top_level_modules'])}): {', '.join(data['top_level_modules'])}")
        print(f"import cycles: {len(data['import_cycles'])}")
        for cycle in data["import_cycles"]:
            print(f"  {' <-> '.join(cycle)}")
        print(f"longest function: {data['longest_function']['lines']} lines ({data['longest_function']['where']})")
        print(f"functions over {MAX_FUNCTION_LINES} lines: {len(data['functions_over_limit'])}")
        for f in data["functions_over_limit"]:
            print(f"  {f['lines']:4}  {f['where']}")
    problems = broken_limits(data)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
