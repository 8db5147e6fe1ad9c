"""The import graph of ``dyna/`` and ``envs/``: no circles, kinds apart, layers kept.

The graph is read from the source with :mod:`ast`, never by importing it, and counts every
way one module can load another:

* ``import a.b`` and ``from a import b`` anywhere in a file: at module level, inside
  functions and methods, and under ``if TYPE_CHECKING:`` (a type-only import is still a
  dependency a reader has to follow);
* ``from pkg import name`` where ``pkg`` is a package whose ``__init__`` resolves ``name``
  lazily through a ``_LAZY`` table (``dyna.experiment``): an edge to the module that
  defines ``name``;
* string constants that name a module of the tree, alone or as ``"module:attribute"``: the
  experiment-kind registry, the backend registry, the CLI's command modules,
  ``importlib.import_module("...")`` calls.

Implicit imports of parent packages (``import a.b.c`` runs ``a/__init__`` and
``a/b/__init__``) are not edges: every module would depend on its parents.

The rules (docs/architecture.md, "Layers", and docs/experiment-kinds.md, "Adding an
experiment kind"):

1. no import circle anywhere in ``dyna/`` and ``envs/``;
2. the experiment machinery (``dyna.experiment`` outside ``dyna.experiment.kinds.*``)
   imports no kind; only the kind registry names kinds, and only by its strings;
3. no kind imports another kind; every registered kind lives in
   ``dyna.experiment.kinds.<name>``;
4. the layer rules: ``envs`` imports nothing of ``dyna`` but ``dyna.errors``;
   ``dyna.buffer``, ``dyna.index``, ``dyna.competence`` and ``dyna.model`` import no agent,
   loop or experiment code; nothing outside ``dyna.experiment`` imports it (except the
   top-level CLI, which only collects the command modules); only ``dyna.experiment``
   knows about worker processes (``multiprocessing``, ``ProcessPoolExecutor``, ``ray``)
   and plots (``matplotlib``); and no module imports one of a higher layer
   (:data:`LAYERS`);
5. the I/O boundary ``dyna.fileio`` imports the standard library, ``filelock`` and, of
   ``dyna``, only ``dyna.errors`` and ``dyna._lazy`` (:data:`FILEIO_MAY_IMPORT`).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("dyna", "envs")
KINDS_PACKAGE = "dyna.experiment.kinds"


def _module_files(repo: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under the walked packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((repo / pkg).rglob("*.py")):
            parts = list(path.relative_to(repo).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _known(name: str, modules) -> str | None:
    """The longest prefix of a dotted name that is a module of the tree."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in modules:
            return candidate
    return None


def _lazy_table(tree: ast.Module) -> dict[str, str]:
    """A package ``__init__``'s ``_LAZY = {name: submodule}`` table, if it has one."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets):
            value = ast.literal_eval(node.value)
            return {str(k): str(v) for k, v in value.items()}
    return {}


def build_graph(repo: Path = REPO) -> dict[str, dict[str, set[str]]]:
    """``module -> {imported module -> set of how}`` (``"import"`` or ``"string"``)."""
    modules = _module_files(repo)
    trees = {name: ast.parse(path.read_text(), filename=str(path))
             for name, path in modules.items()}
    lazy = {name: _lazy_table(tree) for name, tree in trees.items()
            if modules[name].name == "__init__.py"}
    graph: dict[str, dict[str, set[str]]] = {name: {} for name in modules}

    def add(src: str, target: str | None, how: str) -> None:
        if target is not None and target != src:
            graph[src].setdefault(target, set()).add(how)

    for name, tree in trees.items():
        is_pkg = modules[name].name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        for sub in lazy.get(name, {}).values():
            add(name, _known(f"{name}.{sub}", modules), "string")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(name, _known(alias.name, modules), "import")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                for alias in node.names:
                    full = f"{mod}.{alias.name}"
                    if full in modules:
                        add(name, full, "import")
                    elif mod in lazy and alias.name in lazy[mod]:
                        add(name, _known(f"{mod}.{lazy[mod][alias.name]}", modules), "import")
                    else:
                        add(name, _known(mod, modules), "import")
        for text in _module_strings(tree):
            add(name, text if text in modules else None, "string")
    return graph


def _module_strings(tree: ast.Module) -> list[str]:
    """Strings that name a module to load: ``"module:attribute"`` anywhere, the argument of
    ``importlib.import_module(...)``, and entries of module-level registries (list, tuple,
    set or dict literals). Other strings (a logger's name, a message) are not edges."""
    found = []

    def looks(text) -> str | None:
        if not isinstance(text, str):
            return None
        mod = text.partition(":")[0]
        ok = mod.startswith(tuple(p + "." for p in PACKAGES)) and \
            mod.replace(".", "").replace("_", "").isalnum()
        return mod if ok else None

    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and ":" in node.value and looks(node.value):
            found.append(looks(node.value))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else \
                func.id if isinstance(func, ast.Name) else ""
            if fname in ("import_module", "__import__") and looks(node.args[0].value):
                found.append(looks(node.args[0].value))
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
            items = value.elts
        elif isinstance(value, ast.Dict):
            items = list(value.values) + [k for k in value.keys if k is not None]
        else:
            continue
        for item in items:
            if isinstance(item, ast.Constant) and looks(item.value):
                found.append(looks(item.value))
    return found


def find_cycles(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def cycle_path(graph, component: list[str]) -> list[str]:
    """One concrete circle through a component, for a readable failure message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    return paths[v] + [start]
                if w in members and w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return component


def kind_of_module(name: str) -> str | None:
    """The kind a module belongs to (``dyna.experiment.kinds.<kind>...``), else None."""
    if name.startswith(KINDS_PACKAGE + "."):
        return name[len(KINDS_PACKAGE) + 1:].split(".")[0]
    return None


def is_machinery(name: str) -> bool:
    return (name == "dyna.experiment" or name.startswith("dyna.experiment.")) and \
        kind_of_module(name) is None


def _registered_kinds(repo: Path = REPO) -> dict[str, str]:
    """The kind registry's literal ``KINDS`` table: kind name -> ``"module:attribute"``."""
    modules = _module_files(repo)
    for name, path in modules.items():
        if not is_machinery(name):
            continue
        for node in ast.parse(path.read_text()).body:
            target = node.target if isinstance(node, ast.AnnAssign) else \
                (node.targets[0] if isinstance(node, ast.Assign) else None)
            if isinstance(target, ast.Name) and target.id == "KINDS":
                return {str(k): str(v) for k, v in ast.literal_eval(node.value).items()}
    return {}


#: Layers, lowest first (longest module prefix wins). A module may import its own layer and
#: the ones below, never one above: the data flow of docs/architecture.md ("Layers"), from
#: the environments and the core up to the loops, the loop agents, the experiments and the
#: CLIs.
LAYERS = (
    ("dyna", "dyna.errors", "dyna.fileio", "dyna.rng", "dyna.redact", "dyna.kernel_cache"),
    ("envs",),
    ("dyna.model", "dyna.planning", "dyna.index", "dyna.competence", "dyna.buffer",
     "dyna.escalation", "dyna.agents", "dyna.agents.tabular"),
    ("dyna.store",),
    ("dyna.experience",),
    ("dyna.loops",),
    ("dyna.agents.loop_agents", "dyna.agents.baselines", "dyna.agents.llm"),
    ("dyna.mcp_server", "dyna.experiment"),
    ("dyna.cli",),
)


#: What ``dyna.fileio`` may import of ``dyna``, and of third-party packages.
FILEIO_MAY_IMPORT = ("dyna.fileio", "dyna.errors", "dyna._lazy")
FILEIO_THIRD_PARTY = ("filelock",)


def layer_of(name: str) -> int:
    """Layer index of a module: its longest prefix in :data:`LAYERS`; ``*.cli`` modules
    (command-line front ends of any layer) sit in the top layer."""
    if name.endswith(".cli") or name == "dyna.cli":
        return len(LAYERS) - 1
    best, rank = -1, 0
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    return rank


def layer_violations(graph) -> list[str]:
    """Breaks of the layer rules (rule 4 of the module docstring), as readable lines."""
    bad = []
    for src, targets in sorted(graph.items()):
        for dst in sorted(targets):
            if layer_of(dst) > layer_of(src):
                bad.append(f"{src} (layer {layer_of(src)}) -> {dst} (layer {layer_of(dst)}): "
                           "a lower layer imports a higher one")
    core = ("dyna.buffer", "dyna.index", "dyna.competence", "dyna.model")
    higher = ("dyna.agents", "dyna.loops", "dyna.experiment")
    for src, targets in sorted(graph.items()):
        for dst in sorted(targets):
            if src.split(".")[0] == "envs" and dst.startswith("dyna") and dst != "dyna.errors":
                bad.append(f"{src} -> {dst}: envs imports only dyna.errors of dyna")
            if src in core and dst.startswith(higher):
                bad.append(f"{src} -> {dst}: the experience core imports no agent, loop "
                           "or experiment code")
            if dst.startswith("dyna.experiment") and not src.startswith("dyna.experiment") \
                    and src != "dyna.cli":
                bad.append(f"{src} -> {dst}: only the top-level CLI imports dyna.experiment")
            if src.startswith("dyna.fileio") and not dst.startswith(FILEIO_MAY_IMPORT):
                bad.append(f"{src} -> {dst}: the I/O boundary imports only "
                           f"{', '.join(FILEIO_MAY_IMPORT[1:])} of dyna")
    return bad


def third_party_violations(repo: Path = REPO) -> list[str]:
    """Imports of process pools and plotting outside ``dyna.experiment``, and of a
    third-party package but ``filelock`` in ``dyna.fileio``."""
    bad = []
    owned = ("multiprocessing", "ray", "matplotlib")
    for name, path in sorted(_module_files(repo).items()):
        if name.startswith("dyna.fileio"):
            bad += [f"{name} imports {mod}: the I/O boundary imports the standard library "
                    "and filelock only" for mod in _imported_names(path)
                    if mod.split(".")[0] not in (*sys.stdlib_module_names, "dyna",
                                                 *FILEIO_THIRD_PARTY)]
        if name.startswith("dyna.experiment"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
                if node.module == "concurrent.futures":  # threads are fine, processes not
                    names += [f"concurrent.futures.{a.name}" for a in node.names
                              if a.name == "ProcessPoolExecutor"]
            else:
                names = []
            for mod in names:
                if mod.split(".")[0] in owned or mod.endswith("ProcessPoolExecutor"):
                    bad.append(f"{name} imports {mod}: only dyna.experiment runs processes "
                               "and draws plots")
    return bad


def _imported_names(path: Path) -> list[str]:
    """The absolute modules a file imports (``import a.b``, ``from a.b import c``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.append(node.module or "")
    return out


# --------------------------------------------------------------------------- the graph tool

def test_graph_sees_every_kind_of_edge(tmp_path):
    """The walker counts function-level, TYPE_CHECKING, lazy and string edges (the ways the
    old circles hid) and finds the circle they make."""
    pkg = tmp_path / "dyna"
    (pkg / "sub").mkdir(parents=True)
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text('_LAZY = {"thing": "b"}\n')
    (pkg / "a.py").write_text("def f():\n    from dyna.sub import thing\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dyna import c\n")
    (pkg / "c.py").write_text('REGISTRY = {"x": "dyna.a:f"}\n')
    (pkg / "d.py").write_text("from . import c\nfrom .sub import b\n")
    graph = build_graph(tmp_path)
    assert graph["dyna.a"] == {"dyna.sub.b": {"import"}}
    assert graph["dyna.sub.b"] == {"dyna.c": {"import"}}
    assert graph["dyna.c"] == {"dyna.a": {"string"}}
    assert graph["dyna.sub"] == {"dyna.sub.b": {"string"}}
    assert graph["dyna.d"] == {"dyna.c": {"import"}, "dyna.sub.b": {"import"}}
    cycles = find_cycles(graph)
    assert cycles == [["dyna.a", "dyna.c", "dyna.sub.b"]]
    assert cycle_path(graph, cycles[0]) == ["dyna.a", "dyna.sub.b", "dyna.c", "dyna.a"]


# --------------------------------------------------------------------------- the rules

@pytest.fixture(scope="module")
def graph():
    return build_graph()


def test_no_import_circle(graph):
    cycles = find_cycles(graph)
    assert not cycles, "import circles:\n" + "\n".join(
        f"{' -> '.join(cycle_path(graph, c))}  (circle of {len(c)}: {', '.join(c)})"
        for c in cycles)


def test_machinery_imports_no_kind(graph):
    bad = []
    for src, targets in sorted(graph.items()):
        if not is_machinery(src):
            continue
        for dst, how in sorted(targets.items()):
            if kind_of_module(dst) is None:
                continue
            if src == "dyna.experiment.registry" and how == {"string"}:
                continue  # the registry finds kinds by name, imported on first use
            bad.append(f"{src} -> {dst} ({', '.join(sorted(how))})")
    assert not bad, "the experiment machinery imports a kind:\n" + "\n".join(bad)


def test_no_kind_imports_another(graph):
    bad = [f"{src} -> {dst}" for src, targets in sorted(graph.items())
           for dst in sorted(targets)
           if kind_of_module(src) and kind_of_module(dst)
           and kind_of_module(src) != kind_of_module(dst)]
    assert not bad, "a kind imports another kind:\n" + "\n".join(bad)


def test_every_registered_kind_is_its_own_package():
    kinds = _registered_kinds()
    assert set(kinds) >= {"tabular", "escalation", "agent_tasks"}, kinds
    modules = _module_files()
    bad = {name: target for name, target in kinds.items()
           if target.partition(":")[0] != f"{KINDS_PACKAGE}.{name}"
           or target.partition(":")[0] not in modules}
    assert not bad, f"kinds registered outside {KINDS_PACKAGE}.<name>: {bad}"


def test_layer_rules(graph):
    bad = layer_violations(graph) + third_party_violations()
    assert not bad, "\n".join(bad)


def test_layer_rules_catch_each_break():
    """Each rule flags a made-up edge that breaks it, and lets the legal reverse pass."""
    fake = {
        "dyna.buffer": {"dyna.loops.memory": {"import"}},        # core -> loops
        "envs.maze": {"dyna.agents.tabular": {"import"}},        # envs -> agents
        "dyna.loops.skills": {"dyna.experiment.runner": {"import"}},
        "dyna.agents.loop_agents": {"dyna.loops": {"import"}},   # legal: upward use of loops
        "dyna.store.cli": {"dyna.experience": {"import"}},       # legal: a CLI front end
        "dyna.fileio.atomic": {"dyna.redact": {"import"},        # the I/O boundary -> redact
                               "dyna.errors": {"import"}},       # legal
    }
    bad = layer_violations(fake)
    assert len([b for b in bad if b.startswith("dyna.buffer ")]) == 2
    assert len([b for b in bad if b.startswith("envs.maze ")]) == 2
    assert len([b for b in bad if b.startswith("dyna.loops.skills ")]) == 2
    assert [b for b in bad if b.startswith("dyna.fileio")] == [
        "dyna.fileio.atomic -> dyna.redact: the I/O boundary imports only dyna.errors, "
        "dyna._lazy of dyna"]
    assert not [b for b in bad if b.startswith(("dyna.agents.loop_agents", "dyna.store.cli"))]
