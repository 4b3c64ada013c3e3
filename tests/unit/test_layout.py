"""The package's shape, checked: no import circle, no workbench import hidden inside a
function, modules and functions of a readable size (docs/architecture.md). The layer order
itself is import-linter's contract in pyproject.toml (scripts/lint.sh)."""

import ast
from pathlib import Path

import workbench

PACKAGE = Path(workbench.__file__).parent
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    out = {}
    for file in sorted(PACKAGE.rglob("*.py")):
        if "shipped" in file.relative_to(PACKAGE).parts:
            continue  # the data's own build scripts
        parts = file.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    return out


def _imports(tree: ast.Module, modules: dict[str, Path]) -> set[str]:
    """The workbench modules a module imports at its top level."""
    found = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module in modules:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names
                         if f"{node.module}.{a.name}" in modules)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
    return found


def test_no_import_circle() -> None:
    modules = _modules()
    graph = {m: _imports(ast.parse(f.read_text()), modules) - {m} for m, f in modules.items()}
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            raise AssertionError("import circle: " + " -> ".join(path[path.index(m):] + [m]))
        if m in done:
            return
        for n in sorted(graph[m]):
            visit(n, [*path, m])
        done.add(m)

    for m in sorted(graph):
        visit(m, [])


def test_every_workbench_import_is_at_module_level() -> None:
    hidden = []
    for name, file in _modules().items():
        tree = ast.parse(file.read_text())
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in top and (
                    node.level or (node.module or "").startswith("workbench")):
                hidden.append(f"{name}:{node.lineno}")
    assert hidden == []


def test_modules_and_functions_stay_readable() -> None:
    long_modules, long_functions = [], []
    for name, file in _modules().items():
        text = file.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(f"{name} ({len(text.splitlines())} lines)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long_functions.append(f"{name}.{node.name} ({size} lines)")
    assert long_modules == [] and long_functions == []
