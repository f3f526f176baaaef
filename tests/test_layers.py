"""The layering README's architecture section states, read from the source's imports.

backend/ runs without Chainlit or the UI, backend/store/ without the chat and its
presenter, and serving/ (the launcher) has no import circles; what varies between model
families and between upload kinds is named only in their registries, backend/families.py
and backend/upload_kinds.py (issue 51).
"""

from __future__ import annotations

import ast
from pathlib import Path

from backend.families import FAMILIES
from backend.upload_kinds import KINDS

ROOT = Path(__file__).resolve().parent.parent


def imports_of(path: Path) -> set[str]:
    """The modules ``path`` imports anywhere in it (type-only imports included),
    as dotted names; relative imports resolved against its package."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def modules(folder: str) -> dict[str, set[str]]:
    """Each module under ``folder`` (dotted name) with what it imports."""
    return {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): imports_of(p)
        for p in sorted((ROOT / folder).rglob("*.py"))
    }


def reaching(imported: set[str], prefixes: tuple[str, ...]) -> set[str]:
    return {m for m in imported if any(m == p or m.startswith(p + ".") for p in prefixes)}


def test_imports_of_reads_absolute_relative_and_nested_imports() -> None:
    """The reader the other tests rely on finds every kind of import (a check on it)."""
    found = imports_of(ROOT / "tests" / "test_layers.py")
    assert {"ast", "pathlib.Path", "__future__.annotations"} <= found
    assert reaching(imports_of(ROOT / "app.py"), ("chainlit",))


def test_backend_never_imports_chainlit_or_the_ui() -> None:
    wrong = {
        name: sorted(reaching(imported, ("chainlit", "ui", "app")))
        for name, imported in modules("backend").items()
    }
    assert {name: found for name, found in wrong.items() if found} == {}


def test_the_store_does_not_import_the_chat_or_its_presenter() -> None:
    above = ("backend.chat", "backend.presenter", "backend.turn_runner")
    wrong = {
        name: sorted(reaching(imported, above))
        for name, imported in modules("backend/store").items()
    }
    assert {name: found for name, found in wrong.items() if found} == {}


def test_benchmarks_and_the_product_import_nothing_from_the_tests() -> None:
    wrong = {
        name: sorted(reaching(imported, ("tests",)))
        for folder in ("bench", "backend", "ui", "serving")
        for name, imported in modules(folder).items()
    }
    assert {name: found for name, found in wrong.items() if found} == {}


def test_serving_has_no_import_circles() -> None:
    graph = {
        name: {m for m in reaching(imported, ("serving",)) if m in modules("serving")} - {name}
        for name, imported in modules("serving").items()
    }
    state: dict[str, str] = {}

    def circle_from(name: str, path: list[str]) -> list[str] | None:
        state[name] = "open"
        for other in sorted(graph[name]):
            if state.get(other) == "open":
                return [*path, name, other]
            if other not in state and (found := circle_from(other, [*path, name])):
                return found
        state[name] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            assert circle_from(start, []) is None


PRODUCT = ("app.py", "launch.sh", "backend", "ui", "serving", "bench", "public")
"""Everything that is not a test: the app, its launcher, runtime, tooling, benchmarks, page
code and style."""


def product_files(suffixes: tuple[str, ...] = (".py", ".js", ".sh", ".css")) -> dict[str, str]:
    """Each product file's text by its path from the repository root."""
    found: dict[str, str] = {}
    for name in PRODUCT:
        top = ROOT / name
        paths = [top] if top.is_file() else sorted(top.rglob("*"))
        for path in paths:
            if path.suffix in suffixes and path.is_file():
                found[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    return found


def test_only_the_family_registry_names_a_familys_markers() -> None:
    markers = {m for f in FAMILIES.values() for m in (f.markers.open, f.markers.close)}
    named = {
        (path, marker)
        for path, text in product_files().items()
        for marker in markers
        if marker in text and path != "backend/families.py"
    }
    assert named == set()


def test_only_the_upload_kind_registry_names_a_kinds_media_types() -> None:
    types = {media_type for kind in KINDS for media_type in kind.types}
    named = {
        (path, media_type)
        for path, text in product_files().items()
        for media_type in types
        if media_type in text and path != "backend/upload_kinds.py"
    }
    assert named == set()
