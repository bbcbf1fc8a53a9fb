"""Imports run one way: the core (`rubricrl/`) at the bottom, then `grading/`, then the stages in pipeline order
(`synthesis/`, `ruft/`, `rurl/`), then `reports/`. A module may import its own layer and those below, never one
above (imports inside functions count too). Only the entry point, `rubricrl/cli.py`, knows every stage. Read
from the source with `ast`: nothing is imported to check it. And no module outgrows a read: 400 lines at most."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["rubricrl", "grading", "synthesis", "ruft", "rurl", "reports"]
ENTRY_POINT = ROOT / "rubricrl" / "cli.py"


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
        if path == ENTRY_POINT:
            continue
        for package, line in imported_packages(path):
            if LAYERS.index(package) > LAYERS.index(layer):
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {package}")
    assert not upward, "\n".join(upward)


def test_the_walk_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import json\n\ndef f():\n    from ruft.select import select\n    import rurl.train\n")
    assert imported_packages(source) == {("ruft", 4), ("rurl", 5)}


MAX_LINES = 400


def test_no_module_is_over_400_lines():
    folders = [*LAYERS, "experiments", "benches"]
    long = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for folder in folders
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert not long, f"split these by idea (at most {MAX_LINES} lines a module):\n" + "\n".join(long)
