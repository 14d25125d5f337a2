"""Import rules (docs/architecture.md): ``services/`` never imports ``cookbook/`` (the client side), and
a service uses another service only through its public modules (``services/common`` is shared by all).

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
