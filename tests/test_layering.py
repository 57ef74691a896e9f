"""Imports flow one way (commands -> comparison -> training -> evaluation -> text -> run -> model
-> strategies -> model parts -> data -> foundations): read every module's imports with `ast` and
check them against a table of layers. Folders are floors: each sub-package is one layer, and a
module may import its own layer or any layer below, never one above. No two modules import each
other (no cycles at all), the longest chain of imports (in-function ones counted) is at most MAX_FLOORS imports,
the top folder holds at most TOP_MODULES modules, and in-function imports are for optional or
heavy dependencies only (the cli package is exempt: it imports the library inside each command,
so that parsing and argument errors do not load torch). util/errors.py, at the bottom, imports
nothing of learntok. docs/architecture.md lists every module of the tree on the floor this table
gives it."""

import ast
import re
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "learntok"

# Bottom to top. A module name or a package prefix ("learntok.data" covers learntok.data.*). Each
# floor is one folder of the tree (the package's top folder holds the facade and __main__ only).
LAYERS: list[tuple[str, list[str]]] = [
    ("foundations", ["learntok.util"]),
    ("data", ["learntok.data"]),
    ("model parts", ["learntok.nn"]),
    ("boundary strategies", ["learntok.boundaries"]),
    ("model", ["learntok.model"]),
    # a run composes the component configs below it (model, strategies, objective, data)
    ("run", ["learntok.run"]),
    ("text", ["learntok.text"]),
    ("evaluation", ["learntok.evaluation"]),
    ("training", ["learntok.train"]),
    ("comparison", ["learntok.compare"]),
    # transformers' classes around the model (the `hf` extra), above the library they wrap
    ("integrations", ["learntok.hf"]),
    ("commands", ["learntok.cli", "learntok.__main__"]),
]

# The sub-packages, bottom to top: the tree shows the layers.
FOLDERS = [entries[0] for _, entries in LAYERS[:-1]] + ["learntok.cli"]
TOP_MODULES = 6  # at most this many modules in the top folder (the facade and __main__ today)
MAX_FLOORS = 13  # the longest chain of imports, in imports (modules - 1), the commands' in-function ones counted

# Imports allowed inside functions: optional or heavy dependencies, and torch APIs that older
# supported torch versions lack (imported only on the path that uses them).
LAZY_OK = (
    "matplotlib",
    "pyarrow",
    "tokenizers",
    "lm_eval",
    "torch.distributed.fsdp",
    "torch.distributed.checkpoint",
    "torch.nn.attention.varlen",
    "pydoc_data",
    "torch.utils.tensorboard",
    "wandb",
    "huggingface_hub",
)
LAZY_EXEMPT = ("learntok.cli", "learntok.__main__")  # they load the library (torch) only in a command


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# learntok/pretrained/ holds the shipped checkpoints: data, with transformers' one-line remote-code
# stubs beside each (not modules of the package)
MODULES = {
    module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "pretrained" not in p.relative_to(PACKAGE).parts[:1]
}


def layer_of(name: str) -> int:
    """Index of the most specific table entry that covers module `name`."""
    best, best_len = None, -1
    for i, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            if (name == entry or name.startswith(entry + ".")) and len(entry) > best_len:
                best, best_len = i, len(entry)
    if best is None:
        raise AssertionError(f"{name} is in no layer of tests/test_layering.py: add it to LAYERS")
    return best


def imports(name: str) -> list[tuple[str, list[str], int, bool]]:
    """(imported module, names taken from it, line, inside a function) for every import."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((a.name, [], child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module, [a.name for a in child.names], child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return found


def internal_targets(module: str, names: list[str]) -> list[str]:
    """The learntok modules an import statement loads: `from learntok.data import corpora`
    names the submodule."""
    subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
    if module == "learntok":  # the package root: submodules (or its version)
        return subs
    return subs or [module]


def edges() -> dict[str, set[str]]:
    graph = {name: set() for name in MODULES}
    for name in MODULES:
        for module, names, _, _ in imports(name):
            if module.startswith("learntok"):
                graph[name].update(t for t in internal_targets(module, names) if t != name)
    return graph


def test_every_module_has_a_layer():
    for name in MODULES:
        if name != "learntok":
            layer_of(name)


def layer_table_faults(layers: list[tuple[str, list[str]]], modules) -> list[str]:
    """What is wrong with a table of layers: an entry listed twice, or one that names no module."""
    entries = [entry for _, names in layers for entry in names]
    twice = sorted({entry for entry in entries if entries.count(entry) > 1})
    stale = [e for e in entries if not any(m == e or m.startswith(e + ".") for m in modules)]
    return [f"{e} is listed more than once" for e in twice] + [f"{e} names no module" for e in stale]


def test_the_layer_table_lists_each_entry_once_and_only_real_modules():
    faults = layer_table_faults(LAYERS, MODULES)
    assert not faults, "\n".join(faults)


@pytest.mark.parametrize(
    "extra, fault",
    [
        ("learntok.util", "learntok.util is listed more than once"),
        ("learntok.gone", "learntok.gone names no module"),
    ],
)
def test_the_layer_table_check_can_fail(extra, fault):
    assert fault in layer_table_faults([*LAYERS, ("more", [extra])], MODULES)


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
PAGE_ROW = re.compile(r"^\| `(?P<path>[\w/]+\.py)` \| (?P<layer>[\w ]+?) \|")


def page_faults(page: str, modules: dict[str, Path]) -> list[str]:
    """Where docs/architecture.md's table of every module ("| `path` | layer | ... |") differs
    from the tree: a module it lacks, a row for no module, or a module on another floor than
    LAYERS puts it (the package's facade, `__init__.py`, is above every floor)."""
    rows = {m["path"]: m["layer"] for m in map(PAGE_ROW.match, page.splitlines()) if m}
    paths = {str(path.relative_to(PACKAGE)).replace("\\", "/"): name for name, path in modules.items()}
    faults = [f"learntok/{p} is not in the table of docs/architecture.md" for p in sorted(set(paths) - set(rows))]
    faults += [
        f"docs/architecture.md lists learntok/{p}, which is not a module" for p in sorted(set(rows) - set(paths))
    ]
    for path in sorted(set(rows) & set(paths)):
        name = paths[path]
        floor = "facade" if name == "learntok" else LAYERS[layer_of(name)][0]
        if rows[path] != floor:
            faults.append(f"docs/architecture.md puts learntok/{path} in {rows[path]!r}, the layers in {floor!r}")
    return faults


def test_the_architecture_page_lists_every_module_on_its_floor():
    faults = page_faults(ARCHITECTURE.read_text(encoding="utf-8"), MODULES)
    assert not faults, "\n".join(faults)


def test_the_architecture_page_check_can_fail():
    page = ARCHITECTURE.read_text(encoding="utf-8")
    assert "learntok/new.py is not in the table" in "\n".join(
        page_faults(page, {**MODULES, "learntok.new": PACKAGE / "new.py"})
    )
    moved = page.replace("| `util/files.py` | foundations |", "| `util/files.py` | training |")
    assert "learntok/util/files.py in 'training'" in "\n".join(page_faults(moved, MODULES))
    assert "lists learntok/cli/__init__.py, which is not" in "\n".join(
        page_faults(page, {k: v for k, v in MODULES.items() if k != "learntok.cli"})
    )


def test_no_module_imports_a_layer_above_it():
    wrong = []
    for name, targets in edges().items():
        if name == "learntok":  # the public API re-exports from every layer
            continue
        for target in targets:
            if layer_of(target) > layer_of(name):
                wrong.append(f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})")
    assert not wrong, "\n".join(wrong)


def folder_floor(name: str) -> float:
    """The floor of module `name`'s folder: its sub-package's index in FOLDERS; the top folder's
    __main__ is above them all."""
    for i, folder in enumerate(FOLDERS):
        if name == folder or name.startswith(folder + "."):
            return i
    return len(FOLDERS)


def test_each_folder_is_one_layer():
    for folder in FOLDERS:
        layers = {LAYERS[layer_of(name)][0] for name in MODULES if name == folder or name.startswith(folder + ".")}
        assert len(layers) == 1, f"{folder} spans the layers {sorted(layers)}: split it into folders"


def test_no_folder_imports_a_folder_above_it():
    wrong = [
        f"{name} imports {target}"
        for name, targets in edges().items()
        if name != "learntok"
        for target in targets
        if folder_floor(target) > folder_floor(name)
    ]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    graph = edges()
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_in_function_imports_are_for_optional_dependencies_only():
    wrong = [
        f"{MODULES[name].relative_to(PACKAGE.parent)}:{line}: import {module}"
        for name in MODULES
        if not (name + ".").startswith(tuple(e + "." for e in LAZY_EXEMPT))
        for module, _, line, lazy in imports(name)
        if lazy and not module.startswith(LAZY_OK)
    ]
    assert not wrong, "move these to the top of their module:\n" + "\n".join(wrong)


def test_no_private_names_cross_modules():
    wrong = [
        f"{name} imports {n} from {module}"
        for name in MODULES
        for module, names, _, _ in imports(name)
        if module.startswith("learntok")
        for n in names
        if n.startswith("_") and n != "__version__"
    ]
    assert not wrong, "make these public or move them:\n" + "\n".join(wrong)


def test_the_package_root_gives_modules_only_its_version():
    # `from learntok import boundary_quality` names a submodule; anything else would be the facade
    wrong = [
        f"{name} imports {n} from learntok"
        for name in MODULES
        for module, names, _, _ in imports(name)
        if module == "learntok"
        for n in names
        if n != "__version__" and f"learntok.{n}" not in MODULES
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    "source, message",
    [
        ("def f():\n    import json\n", "import json"),
        ("def f():\n    from learntok.run.checkpoint import load_run\n", "import learntok.run.checkpoint"),
    ],
)
def test_the_lazy_import_check_can_fail(tmp_path, monkeypatch, source, message):
    (tmp_path / "bad.py").write_text(source)
    monkeypatch.setitem(MODULES, "learntok.bad", tmp_path / "bad.py")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path)
    with pytest.raises(AssertionError, match=message):
        test_in_function_imports_are_for_optional_dependencies_only()


def test_the_layer_check_can_fail(monkeypatch):
    # the model importing a checkpoint (which imports the model) is caught
    real = imports
    monkeypatch.setattr(
        sys.modules[__name__],
        "imports",
        lambda name: (
            real(name)
            + ([("learntok.run.checkpoint", ["load_run"], 1, False)] if name == "learntok.model.aunet" else [])
        ),
    )
    with pytest.raises(AssertionError, match="learntok.model.aunet .* imports learntok.run.checkpoint"):
        test_no_module_imports_a_layer_above_it()
    with pytest.raises(AssertionError, match="import cycle"):
        test_no_import_cycles()
    with pytest.raises(AssertionError, match="learntok.model.aunet imports learntok.run.checkpoint"):
        test_no_folder_imports_a_folder_above_it()


def test_errors_imports_nothing_of_learntok_and_nothing_heavy():
    # every module takes its error classes from learntok.util.errors, so it stays at the very bottom
    wrong = [m for m, _, _, _ in imports("learntok.util.errors") if m.split(".")[0] in ("learntok", "torch", "numpy")]
    assert not wrong, "learntok/util/errors.py imports " + ", ".join(wrong)


def test_every_error_class_is_defined_in_errors_and_imported_from_there():
    import builtins

    from learntok.util import errors as errors

    ours = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, BaseException)}
    exceptions = ours | {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
    wrong = [
        f"{name} imports {n} from {module}"
        for name in MODULES
        for module, names, _, _ in imports(name)
        if module.startswith("learntok") and module != "learntok.util.errors"
        for n in names
        if n in ours
    ]
    wrong += [
        f"{name} defines {node.name}"
        for name in MODULES
        if name != "learntok.util.errors"
        for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) in exceptions for b in node.bases)
    ]
    assert not wrong, "error classes live in learntok/util/errors.py:\n" + "\n".join(wrong)


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest chain of imports in `graph` (module -> modules it imports), top first."""
    depth: dict[str, int] = {}

    def of(name: str) -> int:
        if name not in depth:
            depth[name] = 1 + max((of(m) for m in graph[name]), default=0)
        return depth[name]

    node = max(graph, key=of)
    chain = [node]
    while graph[node]:
        node = max(graph[node], key=of)
        chain.append(node)
    return chain


def test_the_import_chain_is_at_most_max_floors_deep():
    """Every import counted, the command line's in-function ones too: the path a command takes
    from `learntok` to the bottom of the library."""
    chain = longest_chain(edges())
    assert len(chain) - 1 <= MAX_FLOORS, f"{len(chain) - 1} imports deep: " + " -> ".join(chain)


def test_the_chain_check_can_fail():
    graph = {f"m{i}": {f"m{i + 1}"} for i in range(MAX_FLOORS + 1)} | {f"m{MAX_FLOORS + 1}": set()}
    assert len(longest_chain(graph)) - 1 == MAX_FLOORS + 1


def test_the_top_folder_holds_few_modules():
    top = [name for name, path in MODULES.items() if path.parent == PACKAGE]
    assert len(top) <= TOP_MODULES, f"{len(top)} modules in learntok/: {sorted(top)}"
