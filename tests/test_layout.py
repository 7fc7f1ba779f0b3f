"""The package's layout as a promise: the model's files are plain PyTorch, imports run one way between the roles and
never in a circle, no function, class or module grows past the house caps, the decoding interface is dispatched on
by type (never probed with `hasattr`), and no block of code is written twice.

Read from the source with `ast` (nothing is imported), so a violation names the file and line. Each check is a
function over source text, shown failing on a small fixture before it is run over the project.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "transformer"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "bundled" not in p.parts)
PROJECT = MODULES + sorted((ROOT / "scripts").glob("*.py")) + sorted((ROOT / "tests").glob("*.py"))
# The house caps (shared/STYLE.md: aims near 40 / 120 / 300 lines, caps 60 / 200 / 400): a unit past its cap holds two
# concepts. A function or class counts from its `def`/`class` line to its last; a module counts all its lines.
CAPS = {ast.FunctionDef: 60, ast.AsyncFunctionDef: 60, ast.ClassDef: 200}
MODULE_CAP = 400

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
    "interop": SHARED | {"transformer.model", "transformer.data", "transformer.decoding", "transformer.checkpoint"},
    "training": SHARED
    | {
        "transformer.model",
        "transformer.data",
        "transformer.decoding",
        "transformer.checkpoint",
        "transformer.evaluation",
    },
    "serving": SHARED
    | {"transformer.api", "transformer.decoding", "transformer.data", "transformer.model", "transformer.documents"},
    "documents": {"transformer.errors", "transformer.fileio"},  # knows no model: a SentenceTranslator is handed in
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


def oversized(source: str, name: str = "<fixture>") -> list[str]:
    """'name:line what (n lines)' for each function, class or module of `source` past its cap."""
    found = []
    lines = len(source.splitlines())
    if lines > MODULE_CAP:
        found.append(f"{name}:1 module ({lines} lines)")
    for node in ast.walk(ast.parse(source)):
        cap = CAPS.get(type(node))
        size = node.end_lineno - node.lineno + 1 if cap else 0
        if cap and size > cap:
            found.append(f"{name}:{node.lineno} {node.name} ({size} lines)")
    return found


def _function(lines: int) -> str:
    return "def f():\n" + "    x = 1\n" * (lines - 1)


def _class(lines: int) -> str:
    return "class C:\n" + "".join(f"    x{i} = {i}\n" for i in range(lines - 1))


@pytest.mark.parametrize(
    "source, flagged",
    [
        (_function(60), False),
        (_function(61), True),
        (_class(200), False),
        (_class(201), True),
        ("x = 1\n" * 400, False),
        ("x = 1\n" * 401, True),
    ],
)
def test_the_size_check_flags_a_unit_one_line_past_its_cap(source, flagged):
    assert bool(oversized(source)) == flagged


def test_no_function_class_or_module_past_its_cap():
    found = [
        hit for path in PROJECT for hit in oversized(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert not found


def import_graph(files: dict[str, str]) -> dict[str, set[str]]:
    """{module: the modules of `files` it imports} for `files` {dotted module name: source}; `from a import b`
    names the module a.b where it is one of `files`, else a. Function-local and TYPE_CHECKING imports count."""
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, source in files.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module for a in node.names
                ]
            else:
                continue
            graph[name].update(target for target in targets if target in files and target != name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph`: each strongly connected group of two or more modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_circle_check_finds_a_circle_through_a_local_import():
    files = {
        "pkg.a": "from pkg.b import run\n",
        "pkg.b": "def run():\n    from pkg.c import helper\n",
        "pkg.c": "import pkg.a\n",
        "pkg.d": "from pkg import a\n",
    }
    assert circles(import_graph(files)) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert circles(import_graph(files | {"pkg.c": "import os\n"})) == []


def test_no_import_circles_in_the_package():
    files = {_module_name(path): path.read_text(encoding="utf-8") for path in MODULES}
    assert not circles(import_graph(files))


def interface_members() -> set[str]:
    """The names that decoding/interface.py's Protocols declare: methods and attributes of the decoding interface."""
    tree = ast.parse((PACKAGE / "decoding" / "interface.py").read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
    return names


def attribute_probes(source: str, members: set[str], name: str = "<fixture>") -> list[str]:
    """'name:line hasattr(..., "member")' for each `hasattr`/`getattr` with a literal name among `members`: a
    dispatch on the decoding interface that should be `isinstance` on its Protocol."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("hasattr", "getattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in members
        ):
            found.append(f"{name}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
    return found


def test_the_probe_check_flags_hasattr_on_an_interface_method():
    members = interface_members()
    assert {"encode", "decode_step", "init_cache", "rerank_beams", "mask", "select"} <= members
    assert attribute_probes('if hasattr(model, "init_cache"):\n    pass\n', members)
    assert attribute_probes('step = getattr(control, "select", None)\n', members)
    assert not attribute_probes("if isinstance(model, CachingModel):\n    pass\n", members)
    assert not attribute_probes('hasattr(module, "table")\n', members)


def test_the_decoding_interface_is_dispatched_on_by_type():
    members = interface_members()
    found = [
        hit
        for path in MODULES
        for hit in attribute_probes(path.read_text(encoding="utf-8"), members, str(path.relative_to(ROOT)))
    ]
    assert not found


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, stripped text) of the lines that are code: not blank, not comments, not imports, not inside a
    docstring (a docstring's lines are prose), not a function's signature (the formatter puts a long one a
    parameter a line, and searches that take the same settings name them alike: an interface, not code twice)."""
    source = path.read_text(encoding="utf-8")
    skipped = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            skipped.update(range(node.lineno, node.body[0].lineno))
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            skipped.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = []
    for number, text in enumerate(source.splitlines(), start=1):
        text = text.strip()
        if text and not text.startswith(("#", "import ", "from ")) and number not in skipped:
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
