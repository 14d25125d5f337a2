"""Import rules (docs/architecture.md): ``services/`` never imports ``cookbook/`` (the client side), a
service uses another service only through its public modules (``services/common`` is shared by all), and
neither ``services/`` nor ``cookbook/`` has an import circle, between modules or between folders (the
task library's subpackages: sources -> preparation -> grading -> the schema, docs/tasks.md "Layout").

Every ``import``/``from ... import`` in every file is checked, also those inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SERVICES = REPO / "services"

# Modules of a service that other services may import.
PUBLIC = {
    "sandbox": {"client",         # the sandbox manager's async client
                "docker_images"},  # the Docker backend's image for a Harbor task (prepare_sandbox.py builds it ahead)
    "tasks": {"task"},            # the Harbor task library (load_task, load_dataset)
    "models": {"loading"},        # the one loader of base models' weights (the backend's every load_model)
}
# Reach-ins that remain (file, imported module): the list must stay exact, so an entry goes once fixed.
KNOWN: set[tuple[str, str]] = set()


def imported_modules(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def violations(root: Path = SERVICES) -> tuple[list[str], set[tuple[str, str]]]:
    """(imports of cookbook, cross-service imports of non-public modules)."""
    cookbook, cross = [], set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        own = path.relative_to(root).parts[0]
        for mod in imported_modules(path):
            parts = mod.split(".")
            if parts[0] == "cookbook":
                cookbook.append(f"{rel} imports {mod}")
            elif parts[0] == "services" and len(parts) > 1 and parts[1] not in (own, "common"):
                if len(parts) < 3 or parts[2] not in PUBLIC.get(parts[1], set()):
                    cross.add((rel, mod))
    return cookbook, cross


def test_services_never_import_cookbook():
    cookbook, _ = violations()
    assert not cookbook, "services/ must not import cookbook/ (it is the client side):\n" + "\n".join(cookbook)


def test_services_use_each_other_only_through_public_modules():
    _, cross = violations()
    new = sorted(cross - KNOWN)
    assert not new, ("a service imports another service's internals (use its public modules "
                     f"{PUBLIC} or services/common):\n" + "\n".join(f"{f} imports {m}" for f, m in new))
    fixed = sorted(KNOWN - cross)
    assert not fixed, f"no longer imported, remove from KNOWN: {fixed}"


def test_the_check_sees_imports_inside_functions(tmp_path):
    svc = tmp_path / "services"
    (svc / "sandbox").mkdir(parents=True)
    (svc / "sandbox" / "x.py").write_text("def f():\n    from cookbook.agent import SWEAgent\n"
                                          "    import services.tasks.verifier\n    from services.tasks.task import "
                                          "Task\n")
    cookbook, cross = violations(svc)
    assert cookbook == ["services/sandbox/x.py imports cookbook.agent"]
    assert cross == {("services/sandbox/x.py", "services.tasks.verifier")}


# ------------------------------------------------------------------------------ no import circles
def module_graph(pkg_root: Path, pkg: str = "cookbook") -> dict[str, set[str]]:
    """Module -> the modules of ``pkg`` it imports (absolute and relative imports, also inside functions;
    ``from . import x`` counts as importing ``pkg.x`` when that is a module)."""
    mods = {}
    for path in sorted(pkg_root.rglob("*.py")):
        rel = path.relative_to(pkg_root.parent).with_suffix("")
        parts = list(rel.parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        mods[".".join(parts)] = (path, is_pkg)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, (path, is_pkg) in mods.items():
        here = mod.split(".") if is_pkg else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (here[: len(here) - node.level + 1] if node.level else [])
                base_mod = ".".join(base + ([node.module] if node.module else []))
                targets = [base_mod] + [f"{base_mod}.{a.name}" for a in node.names]
            for t in targets:
                while t and t not in mods:   # a name inside a module: the module itself
                    t = t.rpartition(".")[0]
                if t and t != mod and t.split(".")[0] == pkg:
                    graph[mod].add(t)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), sorted: an import circle each."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _parents_only(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Without the edges from a package's __init__ to its own submodules (re-exports) and from a submodule to
    its parent packages: Python resolves those without a circle."""
    return {m: {t for t in ts if not t.startswith(m + ".") and not m.startswith(t + ".")} for m, ts in graph.items()}


def folder_graph(graph: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    """``graph`` with every module named by its first ``depth`` name parts (its folder at that depth, or the
    module itself when it is shallower): folder -> the folders it imports. Edges between a package and what it
    contains are left out (Python resolves those without a circle)."""
    out: dict[str, set[str]] = {}
    for mod, targets in graph.items():
        a = ".".join(mod.split(".")[:depth])
        out.setdefault(a, set())
        for t in targets:
            b = ".".join(t.split(".")[:depth])
            out.setdefault(b, set())
            if a != b and not a.startswith(b + ".") and not b.startswith(a + "."):
                out[a].add(b)
    return out


def folder_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles between folders, at every depth (``services.sandbox`` <-> ``services.tasks``, and
    ``services.tasks.grading`` <-> ``services.tasks.preparation``, ...)."""
    deepest = max((m.count(".") + 1 for m in graph), default=1)
    return sorted({tuple(c) for d in range(2, deepest) for c in import_cycles(folder_graph(graph, d))})


# Folder circles that remain (each a sorted tuple); the list must stay exact, so an entry goes once fixed.
KNOWN_FOLDER_CYCLES = {
    # sandbox/backends/__init__.py (the backend registry) and docker_backend.py import local/backend.py, which
    # imports backends/base.py: not a circle of modules, one of folders (the sandbox manager's, not issue 42's)
    "services": {("services.sandbox.backends", "services.sandbox.local")},
    "cookbook": set(),
}


def _circles(pkg: str) -> str:
    graph = module_graph(REPO / pkg, pkg)
    modules = [" <-> ".join(c) for c in import_cycles(_parents_only(graph))]
    found = {tuple(c) for c in folder_cycles(graph)}
    folders = [" <-> ".join(c) + " (folders)" for c in sorted(found - KNOWN_FOLDER_CYCLES[pkg])]
    fixed = [f"no longer a circle, remove from KNOWN_FOLDER_CYCLES: {c}"
             for c in sorted(KNOWN_FOLDER_CYCLES[pkg] - found)]
    return "\n".join(modules + folders + fixed)


def test_no_import_circles_in_cookbook():
    circles = _circles("cookbook")
    assert not circles, "import circles in cookbook/ (data flows one way: CLI -> recipe -> loop -> rollout -> " \
                        "agent):\n" + circles


def test_no_import_circles_in_services():
    circles = _circles("services")
    assert not circles, "import circles in services/ (services.tasks: cli -> sources -> preparation -> grading -> " \
                        "task.py / task_toml.py; tasks -> sandbox, never back):\n" + circles


def test_the_folder_check_sees_a_circle_between_subpackages(tmp_path):
    pkg = tmp_path / "services"
    for d in ("tasks/grading", "tasks/preparation", "sandbox"):
        (pkg / d).mkdir(parents=True, exist_ok=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "tasks" / "__init__.py").write_text("")
    (pkg / "tasks" / "task.py").write_text("")
    (pkg / "tasks" / "grading" / "verifier.py").write_text("from ..task import x\nfrom ..preparation import manifest\n")
    (pkg / "tasks" / "preparation" / "manifest.py").write_text("")
    (pkg / "tasks" / "preparation" / "prepare.py").write_text("from ..grading.verifier import verify\n")
    (pkg / "tasks" / "harbor.py").write_text("from services.sandbox import client\n")
    (pkg / "sandbox" / "client.py").write_text("def f():\n    from services.tasks.task import load_task\n")
    graph = module_graph(pkg, "services")
    assert import_cycles(_parents_only(graph)) == []          # no circle between modules ...
    assert folder_cycles(graph) == [("services.sandbox", "services.tasks"),               # ... but between folders
                                    ("services.tasks.grading", "services.tasks.preparation")]


def test_the_circle_check_sees_a_circle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "cookbook"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from .b import f\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .a import g\n")
    (pkg / "c.py").write_text("from cookbook.sub import a\n")
    assert import_cycles(_parents_only(module_graph(pkg))) == [["cookbook.sub.a", "cookbook.sub.b"]]
