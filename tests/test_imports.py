"""Imports run one way: the core (`rubricrl/`) at the bottom, then `grading/` and the checks on it (`checks/`), then
the stages in pipeline order (`synthesis/`, `ruft/`, `rurl/`), the reward for other engines (`engines/`), then
`reports/`, and the entry point on top (`commands/`), the one folder that knows every other. A module may import its
own layer and those below, never one above (imports inside functions count too), and no two modules import each
other, however indirectly. Read from the source with `ast`: nothing is imported to check it. And no module outgrows
a read: 600 lines at most, which a module reaches only when it holds two ideas, and no function passes 100."""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["rubricrl", "grading", "checks", "synthesis", "ruft", "rurl", "engines", "reports", "commands"]


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(top-level package, line) of every import in the file that names one of LAYERS."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module]
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
            else []
        )
        found |= {(name.split(".")[0], node.lineno) for name in names if name.split(".")[0] in LAYERS}
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_no_module_imports_a_layer_above_its_own(layer):
    upward = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        for package, line in imported_packages(path):
            if LAYERS.index(package) > LAYERS.index(layer):
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {package}")
    assert not upward, "\n".join(upward)


def test_the_walk_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import json\n\ndef f():\n    from ruft.select import select\n    import rurl.train\n")
    assert imported_packages(source) == {("ruft", 4), ("rurl", 5)}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The project modules the file imports, anywhere in it: `from a.b import c` names the module `a.b.c` when there
    is one, else `a.b` (a package's `__init__`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names
            }
    return found & modules


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan), as a sorted list: every module in it reaches
    every other through imports."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1 or module in graph.get(module, ()):
                cycles.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycles():
    paths = {module_name(path): path for layer in LAYERS for path in (ROOT / layer).rglob("*.py")}
    graph = {module: imported_modules(path, set(paths)) - {module} for module, path in paths.items()}
    cycles = import_cycles(graph)
    assert not cycles, "modules that import each other:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_an_indirect_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_cycles(graph) == [["a", "b", "c"]]


MAX_LINES = 600


def python_files() -> list[Path]:
    """Every Python file of the package folders, the experiments and the benchmarks."""
    return [path for folder in [*LAYERS, "experiments", "benches"] for path in sorted((ROOT / folder).rglob("*.py"))]


def test_no_module_is_over_600_lines():
    long = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for path in python_files()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert not long, f"split these by idea (at most {MAX_LINES} lines a module):\n" + "\n".join(long)


MAX_FUNCTION_LINES = 100


def test_no_function_is_over_100_lines():
    """A function reads on one screen: past 100 lines it holds steps that want names of their own."""
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
        for path in python_files()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"split these (at most {MAX_FUNCTION_LINES} lines a function):\n" + "\n".join(long)
