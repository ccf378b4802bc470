"""cli/, live/ and trainers/ import the core through its faces, at most ten of them each.

A face is ``statepool_dagster.core`` itself, ``core.names``, or a sub-package of the core
(its ``__init__``, which lists its public names in ``__all__``); the modules behind a face
are the core's own. The imports are read from the source (``ast``), function bodies too, as
the layout page counts them: ``python tests/project/test_core_faces.py`` prints the figures.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "statepool_dagster"
CORE = "statepool_dagster.core"
FACES = {CORE, f"{CORE}.names"} | {
    f"{CORE}.{folder.name}"
    for folder in (PACKAGE / "core").iterdir()
    if (folder / "__init__.py").exists()
}
OUTSIDE = ("cli", "live", "trainers")
MOST = 10


def _module_exists(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imported(path: Path) -> set[str]:
    """The package's modules a file imports: ``from a import b`` is ``a.b`` when b is one."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            module = ".".join([*base, node.module or ""] if node.level else [node.module or ""])
            module = module.rstrip(".")
            for alias in node.names:
                whole = f"{module}.{alias.name}"
                found.add(whole if _module_exists(whole) else module)
    return found


def core_imports(folder: str) -> dict[str, set[str]]:
    """Each core module the folder's files import, with the files that import it."""
    found: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        for module in imported(path):
            if module == CORE or module.startswith(CORE + "."):
                found.setdefault(module, set()).add(str(path.relative_to(PACKAGE)))
    return found


@pytest.mark.parametrize("folder", OUTSIDE)
def test_the_folder_imports_only_the_cores_faces_and_at_most_ten(folder: str):
    found = core_imports(folder)
    behind = {module: sorted(files) for module, files in found.items() if module not in FACES}
    assert not behind, f"{folder}/ imports modules behind the core's faces: {behind}"
    assert len(found) <= MOST, sorted(found)


def test_the_count_resolves_relative_imports_to_modules():
    assert f"{CORE}.store.layout" not in FACES
    assert f"{CORE}.faces" in imported(PACKAGE / "core" / "store" / "__init__.py")  # ..faces
    assert f"{CORE}.names" in imported(PACKAGE / "live" / "runs.py")  # ..core.names


@pytest.mark.parametrize("face", sorted(FACES))
def test_every_name_a_face_lists_is_there(face: str):
    module = importlib.import_module(face)
    for name in getattr(module, "__all__", ()):
        assert getattr(module, name) is not None, (face, name)


if __name__ == "__main__":
    for folder in OUTSIDE:
        found = core_imports(folder)
        print(f"{folder}/: {len(found)} core modules: {', '.join(sorted(found))}")
    sys.exit(0)
