"""The house as docs/structure.md draws it: allowed imports only, no circle, no hidden import,
no file over 300 lines (read with `ast`: nothing is imported), and no dead code (vulture)."""
from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOPS = ("services", "kv_store", "scheduler", "compute_worker", "bench", "deploy")
MAX_LINES = 300


def _package_map() -> dict[str, tuple[str, ...]]:
    rows = {}
    for line in (ROOT / "docs" / "structure.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`[\w.]+`", cells[0]):
            rows[cells[0].strip("`")] = tuple(re.findall(r"`([\w.]+)`", cells[2]))
    return rows


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for top in TOPS:
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            if "gen" in rel.parts or ".venv" in rel.parts:
                continue
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


def _imports(path: pathlib.Path, modules: dict) -> set[str]:
    """Project modules `path` imports, anywhere in it except under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                     else node.module for a in node.names]
        for name in names:
            if name.split(".")[0] in TOPS and not name.startswith("services.runtime.gen"):
                while name not in modules and "." in name:
                    name = name.rsplit(".", 1)[0]
                found.add(name)
    return found


def _owner(module: str, rows) -> str:
    return max((p for p in rows if module == p or module.startswith(p + ".")), key=len,
               default=module)  # `services` itself: an empty namespace


def test_every_package_imports_only_what_the_map_allows():
    rows, modules = _package_map(), _modules()
    assert {"services.runtime", "kv_store", "services.cli"} <= set(rows)
    bad = []
    for module, path in sorted(modules.items()):
        mine = _owner(module, rows)
        allowed = rows.get(mine, ())
        for target in sorted(_imports(path, modules)):
            theirs = _owner(target, rows)
            if theirs == mine or theirs.startswith(mine + "."):
                continue
            if not any(target == a or target.startswith(a + ".") for a in allowed):
                bad.append(f"{module} ({mine}) imports {target}")
    assert not bad, "imports docs/structure.md forbids:\n" + "\n".join(bad)


def test_the_import_graph_has_no_circle():
    modules = _modules()
    graph = {m: _imports(p, modules) - {m} for m, p in modules.items()}
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                circles.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_no_project_code_is_imported_by_a_string():
    hidden = [f"{m}: {line.strip()}" for m, p in _modules().items()
              for line in p.read_text().splitlines()
              if re.search(r"import_module\(|__import__\(", line)]
    assert not hidden, hidden


def test_no_file_over_300_lines():
    long = {m: n for m, p in _modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_no_dead_code_beyond_the_allow_list():
    import subprocess
    import sys

    found = subprocess.run(
        [sys.executable, "-m", "vulture", *TOPS, "vulture_allowlist.py", "--min-confidence", "60",
         "--exclude", "*/gen/*"], cwd=ROOT, capture_output=True, text=True)
    assert found.returncode == 0 and not found.stdout, found.stdout + found.stderr
