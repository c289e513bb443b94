"""The package's shape: no import cycle, also none hidden in a function-level import or behind ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str, known: set[str], *, type_only: bool = False) -> set[str]:
    """The package's modules that ``path`` imports at run time (anywhere in it; annotations-only imports aside).

    ``type_only``: instead, the modules it imports only for type checking (under ``if TYPE_CHECKING:``).
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    checking: list[ast.stmt] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            checking.extend(node.body)
            node.body = []
    if type_only:
        tree = ast.Module(body=checking, type_ignores=[])
    out: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            # ``from package import module`` depends on that module (a package's own ``__init__`` runs for
            # any of its modules anyway); ``from module import name`` on the module
            names = [f"{base}.{alias.name}" for alias in node.names]
            modules = [n for n in names if n in known]
            targets = modules if len(modules) == len(names) else [base, *modules]
        out |= {t for t in targets if t in known and t != name}
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle() -> None:
    """No two modules import each other, directly or around a loop, at module or function level."""
    paths = {_module_name(p): p for p in (SRC / "turnout").rglob("*.py")}
    known = set(paths)
    graph = {name: _imports(path, name, known) for name, path in paths.items()}
    assert _cycles(graph) == []


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen: set[str] = set()
    todo = [start]
    while todo:
        v = todo.pop()
        if v == goal:
            return True
        if v not in seen:
            seen.add(v)
            todo.extend(graph[v])
    return False


def _back_references(graph: dict[str, set[str]], type_only: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The type-only imports ``(a, b)`` where ``b`` imports ``a`` back, at run time or for type checking."""
    both = {v: graph[v] | type_only[v] for v in graph}
    return {(a, b) for a, targets in type_only.items() for b in targets if _reaches(both, b, a)}


def test_no_type_only_import_points_back_up_the_layering() -> None:
    """An import under ``TYPE_CHECKING`` never closes a loop: a lower module does not name a higher one's types."""
    paths = {_module_name(p): p for p in (SRC / "turnout").rglob("*.py")}
    known = set(paths)
    graph = {name: _imports(path, name, known) for name, path in paths.items()}
    type_only = {name: _imports(path, name, known, type_only=True) for name, path in paths.items()}
    assert _back_references(graph, type_only) == set()


def test_the_walk_does_not_know_the_reliable_provider() -> None:
    """One direction: the reliable provider and its stream start walks; the walk and its context name neither."""
    paths = {_module_name(p): p for p in (SRC / "turnout").rglob("*.py")}
    known = set(paths)
    higher = {"turnout.walk.reliable", "turnout.walk.reliable_stream"}
    for low in ("turnout.walk.walk", "turnout.walk.context"):
        names = _imports(paths[low], low, known) | _imports(paths[low], low, known, type_only=True)
        assert names & higher == set(), low


def _walk_named_providers(source: str) -> list[str]:
    """Parameters and attributes named ``walk`` whose annotation is a ``ReliableProvider``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        named: tuple[str, ast.expr | None] | None = None
        if isinstance(node, ast.arg):
            named = node.arg, node.annotation
        elif isinstance(node, ast.AnnAssign):
            named = ast.unparse(node.target).removeprefix("self."), node.annotation
        if named is not None and named[0] == "walk" and "ReliableProvider" in ast.unparse(named[1] or ast.Constant("")):
            found.append(f"line {node.lineno}")
    return found


def test_walk_names_only_the_per_call_walk() -> None:
    """``walk`` means one thing: the per-call :class:`~turnout.walk.walk.Walk`, never the route's reliable provider."""
    for path in sorted((SRC / "turnout").rglob("*.py")):
        assert _walk_named_providers(path.read_text(encoding="utf-8")) == [], path.relative_to(SRC)
    assert _walk_named_providers("def f(walk: ReliableProvider) -> None: ...") == ["line 1"]


def test_the_back_reference_check_sees_a_type_only_loop() -> None:
    """The check itself: a type-only import of a module that imports the importer back is found."""
    graph = {"low": set(), "high": {"low"}, "side": set()}
    type_only = {"low": {"high"}, "high": set(), "side": {"low"}}
    assert _back_references(graph, type_only) == {("low", "high")}


def test_the_cycle_check_sees_a_function_level_import() -> None:
    """The check itself: a loop closed by an import inside a function is found."""
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert _cycles(graph) == [["a", "b"]]


#: The longest a function of the package may be, in lines (its signature, docstring and body).
MAX_FUNCTION_LINES = 60


def _long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """``(name, lines)`` of every function (nested ones and methods too) longer than ``limit`` lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append((node.name, lines))
    return found


def test_no_function_is_over_sixty_lines() -> None:
    """Every function of the package reads in one screenful: none is longer than 60 lines."""
    long = {
        f"{path.relative_to(SRC)}:{name}": lines
        for path in sorted((SRC / "turnout").rglob("*.py"))
        for name, lines in _long_functions(path.read_text(encoding="utf-8"), MAX_FUNCTION_LINES)
    }
    assert long == {}


def test_the_length_check_sees_a_long_method() -> None:
    """The check itself: a method one line over the limit is found, one at the limit is not."""
    body = "".join(f"        x{n} = {n}\n" for n in range(4))
    source = f"class A:\n    def at(self):\n{body}\n    async def over(self):\n{body}        return 0\n"
    assert _long_functions(source, 5) == [("over", 6)]


#: The package's layers, lowest first: a module imports only from its own layer's package or a lower layer.
LAYERS: dict[str, int] = {
    "core": 0,  # value types, the error tree, attempt records, the provider contract, what a failure means
    "config": 1,
    "state": 1,
    "ledger": 2,
    "providers": 2,
    "walk": 3,
    "reply": 3,
    "sim": 3,
    "call": 4,
    "observability": 5,
    "runtime": 5,
    "factory": 5,
    "client": 6,
    "gateway": 7,
    "turnout": 7,  # the package's public names
    "cli": 8,
    "__main__": 9,
}

#: The most modules the package's root may hold (the rest live in the packages of their layer).
MAX_ROOT_MODULES = 10


def _layer_of(module: str) -> str:
    """The layer a module belongs to: its subpackage, or the root module itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _upward_imports(graph: dict[str, set[str]], layers: dict[str, int]) -> set[tuple[str, str]]:
    """The imports ``(a, b)`` across layers where ``b``'s layer is not below ``a``'s."""
    return {
        (a, b)
        for a, targets in graph.items()
        for b in targets
        if _layer_of(a) != _layer_of(b) and layers[_layer_of(b)] >= layers[_layer_of(a)]
    }


def test_every_module_imports_only_downward() -> None:
    """The layers read from the layout: core, config and state, ledger and providers, walk, call, client, gateway."""
    paths = {_module_name(p): p for p in (SRC / "turnout").rglob("*.py")}
    known = set(paths)
    assert {_layer_of(name) for name in paths} == set(LAYERS)
    graph = {name: _imports(p, name, known) | _imports(p, name, known, type_only=True) for name, p in paths.items()}
    assert _upward_imports(graph, LAYERS) == set()


def test_the_layer_check_sees_an_upward_import() -> None:
    """The check itself: a core module that imports the walk is found; the walk importing core is not."""
    graph = {"turnout.core.a": {"turnout.walk.b"}, "turnout.walk.b": {"turnout.core.c"}, "turnout.core.c": set()}
    assert _upward_imports(graph, LAYERS) == {("turnout.core.a", "turnout.walk.b")}


def test_the_package_root_holds_few_modules() -> None:
    """The root holds the public face (client, reply, call, factory); everything else sits in its layer's package."""
    root = sorted(p.name for p in (SRC / "turnout").glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root


#: Methods that change a list or set in place.
GROWERS = ("append", "extend", "insert", "clear", "add", "pop")


def _walk_writes(source: str) -> list[str]:
    """Assignments to a walk's attributes (or into them), and ``attempts`` grown, outside the walk's own methods.

    A walk is any expression whose last name ends in ``walk`` (``walk``, ``side_walk``, ``self._walk``).
    """

    def is_walk(node: ast.expr) -> bool:
        text = ast.unparse(node)
        return text.rsplit(".", 1)[-1].endswith("walk") and text != "self"

    def owner(target: ast.expr) -> ast.expr | None:
        while isinstance(target, ast.Subscript):
            target = target.value
        if isinstance(target, ast.Attribute):
            inner = target.value
            while isinstance(inner, ast.Subscript | ast.Attribute) and not is_walk(inner):
                inner = inner.value
            return inner if is_walk(inner) else None
        return None

    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [
                t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])
            ]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in GROWERS:
            targets = [node.func.value] if isinstance(node.func.value, ast.Attribute) else []
        for target in targets:
            if isinstance(target, ast.Attribute | ast.Subscript) and owner(target) is not None:
                found.append((node.lineno, f"line {node.lineno}: {ast.unparse(target)}"))
    return [text for _, text in sorted(found)]


def test_one_walk_alone_changes_its_state() -> None:
    """Only the walk module writes a walk's state; callers ask it (``take_failure``, ``lose``, ``join``, ``amend``)."""
    writes = {
        str(path.relative_to(SRC)): found
        for path in sorted((SRC / "turnout").rglob("*.py"))
        if path.name != "walk.py" or path.parent.name != "walk"
        if (found := _walk_writes(path.read_text(encoding="utf-8")))
    }
    assert writes == {}


def test_the_walk_write_check_sees_a_caller_write() -> None:
    """The check itself: a caller setting ``walk.probing``, growing ``side_walk.attempts`` or a slot of it is found."""
    source = (
        "walk.probing = False\nside_walk.attempts.extend(x)\nself._walk.attempts[0] = a\nself._walk = w\nn = walk.x\n"
    )
    assert _walk_writes(source) == [
        "line 1: walk.probing",
        "line 2: side_walk.attempts",
        "line 3: self._walk.attempts[0]",
    ]
