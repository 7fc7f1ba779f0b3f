"""The package's layout as a promise: the model's files are plain PyTorch, imports run one way between the roles,
no function or class grows past the house limits, and no block of code is written twice.

Read from the source with `ast` (nothing is imported), so a violation names the file and line.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "transformer"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "bundled" not in p.parts)

# What each role may import of the package (besides itself): the import order of transformer/__init__.py.
SHARED = {
    "transformer.config",
    "transformer.errors",
    "transformer.fileio",
    "transformer.paths",
    "transformer.typecheck",
    "transformer.precision",
    "transformer.devices",
    "transformer.progress",
}
ALLOWED = {
    "model": {"transformer.config"},
    "data": SHARED,
    "decoding": SHARED | {"transformer.model", "transformer.data", "transformer.checkpoint"},
    "training": SHARED
    | {
        "transformer.model",
        "transformer.data",
        "transformer.decoding",
        "transformer.checkpoint",
        "transformer.evaluation",
    },
    "serving": SHARED | {"transformer.api", "transformer.decoding", "transformer.data", "transformer.model"},
}
# The stdlib names the model's files may import besides torch and math: annotations only.
ANNOTATIONS = {"__future__", "collections.abc", "typing"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the file, function-local ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names] if node.module == "transformer" else []
            found += [(node.lineno, name) for name in names or [node.module]]
    return found


def _within(name: str, prefixes: set[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


# The paper's files: besides torch, math and the config they import only one another (not the decoding cache).
PAPER = ("attention", "embeddings", "layers", "transformer")


@pytest.mark.parametrize("name", PAPER)
def test_the_models_files_import_only_torch_math_and_the_config(name):
    allowed = {"torch", "math", "transformer.config"} | {f"transformer.model.{n}" for n in PAPER} | ANNOTATIONS
    for line, imported in _imports(PACKAGE / "model" / f"{name}.py"):
        assert _within(imported, allowed), f"{name}.py:{line} imports {imported}"


def test_the_model_package_imports_only_torch_math_the_config_and_itself():
    for path in sorted((PACKAGE / "model").glob("*.py")):
        for line, name in _imports(path):
            ok = _within(name, {"torch", "math", "transformer.config", "transformer.model"} | ANNOTATIONS)
            assert ok, f"{path.name}:{line} imports {name}"


@pytest.mark.parametrize("role", sorted(ALLOWED))
def test_imports_run_one_way_between_the_roles(role):
    for path in sorted((PACKAGE / role).rglob("*.py")):
        for line, name in _imports(path):
            if _within(name, {"transformer"}) and not _within(name, {f"transformer.{role}"}):
                assert _within(name, ALLOWED[role]), f"{path.relative_to(PACKAGE)}:{line} imports {name}"


def test_shared_modules_import_no_role():
    for path in MODULES:
        if not _within(_module_name(path), SHARED):
            continue
        for line, imported in _imports(path):
            shared = _within(imported, SHARED)
            assert not _within(imported, {"transformer"}) or shared, f"{path.relative_to(PACKAGE)}:{line} {imported}"


def test_the_library_imports_neither_the_commands_nor_the_benchmarks():
    for path in MODULES:
        module = _module_name(path)
        if _within(module, {"transformer.commands", "transformer.benchmarks", "transformer.__main__"}):
            continue
        for line, name in _imports(path):
            bad = _within(name, {"transformer.commands", "transformer.benchmarks"})
            assert not bad, f"{path.relative_to(PACKAGE)}:{line} imports {name}"


def test_only_the_commands_and_the_benchmarks_import_the_server():
    """The HTTP server is an optional extra (FastAPI, uvicorn): the core never imports it."""
    for path in MODULES:
        module = _module_name(path)
        if _within(module, {"transformer.serving", "transformer.commands", "transformer.benchmarks"}):
            continue
        for line, name in _imports(path):
            assert not _within(name, {"transformer.serving"}), f"{path.relative_to(PACKAGE)}:{line} imports {name}"


def test_no_function_over_40_lines_and_no_class_over_120():
    too_long = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            limit = {ast.FunctionDef: 40, ast.AsyncFunctionDef: 40, ast.ClassDef: 120}.get(type(node))
            if limit and node.end_lineno - node.lineno + 1 > limit:
                too_long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    assert not too_long


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, stripped text) of the lines that are code: not blank, not comments, not imports, not inside a
    docstring (a docstring's lines are prose)."""
    source = path.read_text(encoding="utf-8")
    prose = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            prose.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = []
    for number, text in enumerate(source.splitlines(), start=1):
        text = text.strip()
        if text and not text.startswith(("#", "import ", "from ")) and number not in prose:
            lines.append((number, text))
    return lines


def test_no_block_of_six_code_lines_is_written_twice():
    seen: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for path in MODULES:
        lines = _code_lines(path)
        for i in range(len(lines) - 5):
            window = tuple(text for _, text in lines[i : i + 6])
            seen[window].append(f"{path.relative_to(PACKAGE)}:{lines[i][0]}")
    repeated = {places[0]: places[1:] for places in seen.values() if len(places) > 1}
    assert not repeated
