"""The house's rules that no linter states: no import circle between any two modules of
saber (type-only imports counted), no module over 450 lines, no folder over 15 modules.
import-linter's contracts keep the layers; these keep what lies inside them."""

from __future__ import annotations

from pathlib import Path

import grimp

SRC = Path(__file__).resolve().parents[1] / "src" / "saber"
MAX_LINES = 450
MAX_MODULES = 15


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.find_modules_directly_imported_by(module):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_circle_between_modules() -> None:
    # Imports under `if TYPE_CHECKING:` are in the graph (grimp's default).
    graph = grimp.build_graph("saber", include_external_packages=False)
    assert _cycles(graph) == []


def test_the_probe_finds_a_circle() -> None:
    # The test above would pass on a broken probe.
    graph = grimp.ImportGraph()
    for name in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(name)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.z", imported="a.x")
    assert _cycles(graph) == [["a.x", "a.y"]]


def test_no_module_over_450_lines_and_no_folder_over_15_modules() -> None:
    long = {
        str(p.relative_to(SRC)): n
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
    crowded = {
        str(d.relative_to(SRC)): n
        for d in [SRC, *(p for p in SRC.rglob("*") if p.is_dir())]
        if (n := len(list(d.glob("*.py")))) > MAX_MODULES
    }
    assert crowded == {}
