"""The package's architecture, as the folder list promises it (README "Project layout"):
one home per concern and no import circles. Read from the source (``ast``), so an import inside
a function counts as much as one at the top of a module: a lazy import still couples the two.
Only imports under ``if TYPE_CHECKING:`` are left out: they name types for annotations and are
never executed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import trainscape

SRC = Path(trainscape.__file__).resolve().parent
PACKAGE = "trainscape"

def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        out[".".join(parts)] = (path, is_pkg)
    return out


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if (isinstance(child, ast.If) and isinstance(child.test, ast.Name)
                    and child.test.id == "TYPE_CHECKING"):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def import_graph() -> dict[str, set[str]]:
    """module -> package modules it imports anywhere in its text."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, (path, is_pkg) in mods.items():
        package = name if is_pkg else name.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    target = f"{base}.{node.module}" if node.module else base
                elif (node.module or "").split(".")[0] == PACKAGE:
                    target = node.module
                else:
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    graph[name].add(sub if sub in mods else target)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in mods)
    for name in graph:
        graph[name] = {t for t in graph[name] if t in mods and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[tuple[str, ...]] = set()
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.add(tuple(sorted(comp)))
    return found


def test_circle_finder_finds_a_planted_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == {("a", "b", "c")}
    assert circles({"a": {"b"}, "b": set()}) == set()


def test_no_import_circles():
    """No module reaches, through any chain of imports, back to itself."""
    assert circles(import_graph()) == set()


def test_the_named_circles_of_the_past_stay_gone():
    """layout <-> model.network, the DLRM scorer <-> its C glue and the scenario schema's
    models <-> load and models -> checks -> pack -> models were circles once; the schema never
    imports the design-space package (the package root hands the builder in)."""
    graph = import_graph()
    assert "trainscape.model.network" not in graph["trainscape.layout"]
    assert "trainscape.dlrm.incremental" not in graph["trainscape.native.dlrm"]
    assert "trainscape.spec.load" not in graph["trainscape.spec.models"]
    assert "trainscape.spec.models" not in graph["trainscape.spec.pack"]
    into_space = {(m, t) for m, targets in graph.items() if m.startswith("trainscape.spec")
                  for t in targets if t.split(".")[:2] == ["trainscape", "space"]}
    assert into_space == set()


def test_type_checking_imports_are_not_edges(tmp_path):
    """The one exception to "every import counts" is an import only a type checker runs."""
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n"
                     "else:\n    import b\nimport c\n")
    names = {a.name for n in _runtime_nodes(tree) if isinstance(n, ast.Import) for a in n.names}
    assert names == {"b", "c"}


def test_command_line_code_lives_in_one_package():
    """click is imported only under ``trainscape/cli``: one home for the command line."""
    outside = []
    for name, (path, _) in _modules().items():
        if name == "trainscape.cli" or name.startswith("trainscape.cli."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and
                     not node.level else [])
            if any(n.split(".")[0] == "click" for n in names):
                outside.append(name)
    assert outside == []


def test_native_extensions_are_loaded_in_one_package():
    """Only ``trainscape/native`` imports the compiled extensions."""
    loaders = set()
    for name, (path, _) in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in ("_llm", "_dlrm"):
                loaders.add(name)
    assert loaders == {"trainscape.native.llm", "trainscape.native.dlrm"}


def test_readme_layout_names_every_subpackage():
    readme = (SRC.parents[1] / "README.md").read_text()
    layout = readme[readme.index("## Project layout"):]
    subpackages = sorted(p.parent.name for p in SRC.glob("*/__init__.py"))
    assert [p for p in subpackages if f"  {p}/" not in layout] == []


def test_every_relative_import_names_a_module_of_the_package():
    """``from .x import y`` inside a function fails only when it runs: a module moved to another
    package must not leave such an import pointing at its old neighbours."""
    mods = _modules()
    builders = "".join(p.read_text() for p in (SRC / "native").glob("build_*.py"))
    cffi_modules = set(re.findall(r'"(trainscape\.native\._\w+)"', builders))
    assert cffi_modules == {"trainscape.native._llm", "trainscape.native._dlrm"}
    missing = []
    for name, (path, is_pkg) in mods.items():
        package = name if is_pkg else name.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level and node.module:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}"
                if target not in mods and target not in cffi_modules:
                    missing.append(f"{name}: from {'.' * node.level}{node.module}")
    assert missing == []
