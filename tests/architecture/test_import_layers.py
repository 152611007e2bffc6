"""The tree is the architecture: imports point down, and nothing imports in a circle.

Every import statement counts, wherever it stands (module level, inside a function, under
`if TYPE_CHECKING:`), because each one is a dependency a reader has to follow.  Two rules:

- Rooms are ranked (RANKS below, the README's "Where things are"); a module may import its own
  room and lower-ranked rooms only.  `protocols/` never imports `gateway/`; `ledger_backend/`
  imports neither; `spark_bridge/` uses `ledger_backend/` and `protocols/` but no server code.
- No strongly connected component of more than one module anywhere in `gateway/`, `protocols/`,
  `ledger_backend/` or `spark_bridge/`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "protocols", "ledger_backend", "spark_bridge")

# Higher imports lower, never the other way.  Rooms of equal rank do not import each other.
RANKS: dict[str, int] = {
    "ledger_backend": 0,
    "protocols.kafka": 1,
    "protocols.rocketmq": 2,  # re-frames Kafka record batches for pull responses
    "spark_bridge": 3,
    "gateway.config": 3,
    "gateway.listeners": 3,  # what the TCP listeners share (the accept loop)
    "gateway.topics": 4,
    "gateway.cluster": 4,
    "gateway.security": 4,
    "gateway.coordinator": 5,
    "gateway.delivery": 6,  # per-record delivery (share groups, SimpleConsumer) for both fronts
    "gateway.replication": 6,  # geo-replication to other clusters (a Kafka client of its own)
    "gateway.kafka": 7,
    "gateway.rocketmq": 7,
    "gateway.admin": 7,
    "gateway.process": 8,
    "gateway.cli": 9,
}
# Modules that are the package itself or its entry point sit at the top.
TOP = {"gateway", "gateway.__main__", "protocols"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported project module, line) for every import statement in the file."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # `from pkg import mod` imports the module pkg.mod when there is one.
            targets = [f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in known else stem
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target, node.lineno


def room_of(module: str) -> str | None:
    best = None
    for room in RANKS:
        if module == room or module.startswith(room + "."):
            if best is None or len(room) > len(best):
                best = room
    return best


def import_graph() -> dict[str, set[str]]:
    known = project_modules()
    return {name: {t for t, _ in imports_of(name, path, known)} for name, path in known.items()}


def test_imports_point_down() -> None:
    known = project_modules()
    wrong = []
    for name, path in known.items():
        if name in TOP:
            continue
        here = room_of(name)
        assert here is not None, f"{name} belongs to no room: add it to RANKS"
        for target, line in imports_of(name, path, known):
            there = room_of(target)
            if target in TOP or there is None:
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {target} (no room)")
            elif there != here and RANKS[there] >= RANKS[here]:
                wrong.append(f"{path.relative_to(REPO)}:{line} ({here}) imports {target} ({there})")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively; components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
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
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circles() -> None:
    circles = strongly_connected(import_graph())
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_checker_sees_a_circle_and_an_upward_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert room_of("gateway.topics.partition_log") == "gateway.topics"
    assert RANKS[room_of("gateway.kafka.listener") or ""] > RANKS["gateway.topics"]


def test_gateway_keeps_no_loose_modules() -> None:
    loose = sorted(p.name for p in (REPO / "gateway").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"]
