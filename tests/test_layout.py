"""The house: rooms small enough to live in, and floors that only look down.

Drawn from the code itself (Python's own ast over every source file the checkout holds):
no module over MAX_LINES; the import graph of the project's own modules (every import, those
inside functions too) has no circle, not even counting those under `if TYPE_CHECKING:`; each
folder imports only from the floors below it (STYLE.md, "A layout that shows the architecture"),
and inside infra the config's rules stand above its models and validation above the rules;
the Kubernetes objects render without CDK; what runs outside the app (the training image,
the gates' Lambda functions) imports nothing beyond its own folder.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import tomllib
from pathlib import Path

from tests.conftest import ROOT

MAX_LINES = 600
# Source files the limit holds: Python modules, and the shell scripts nodes and tools run.
LIMITED = (".py", ".sh")

# Each folder imports only from a lower floor (peers on one floor not from each other).
FLOORS = {
    "training": 0,  # the sample job: its image holds only this folder
    "infra": 1,  # what the stacks build on: the config model, naming, catalogue, readiness gates
    "addons": 2,  # one module per add-on behind one contract
    "manifests": 2,  # Kubernetes objects as plain data
    "stacks": 3,  # one module per deployable stack
    "app": 4,  # composes the stacks
    "cli": 5,  # what operators run: the top floor
    "tests": 6,
}
# Folders whose code runs somewhere with only that folder, importing its neighbours flat
# (`from model_shape import ...`, `import chain`): the training image, the gates' Lambdas.
STANDALONE = ("training", "infra/handlers")
CDK = ("aws_cdk", "constructs", "cdk_nag", "jsii")
# Inside infra, the config's own floors (STYLE.md, "Rules sit above the models they read"), type
# hints counted: the models, then the rules that span fields (each takes the whole Settings and
# reads the models), then validation, which runs the rules. A module stands on the floor of the
# longest name here it falls under; it imports from its own floor or below.
CONFIG_FLOORS = {
    "infra.config": 0,  # the models: the values and each field's own check
    "infra.checks": 1, "infra.admission": 1, "infra.prerequisites": 1, "infra.field_paths": 1,  # the rules
    "infra.validation": 2,  # load_settings: parses, then runs the rules
}


def _sources(root: Path = ROOT) -> list[str]:
    """Every file git holds or would add (tracked, or untracked and not ignored) that exists."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    return sorted(p for p in set(listed) if (root / p).is_file())


def _module_name(path: str) -> str:
    name = path.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, type_checking: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, but those only a type checker runs (unless
    `type_checking`: then those too)."""
    found = []

    def visit(node):
        if isinstance(node, ast.If) and _type_checking(node) and not type_checking:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


class House:
    """The import graph of the Python modules under `root`: module -> the project modules its
    imports run (`edges`), and the top-level names of other distributions it imports (`outside`)."""

    def __init__(self, root: Path = ROOT, type_checking: bool = False):
        self.root = root
        self.paths = {_module_name(p): p for p in _sources(root) if p.endswith(".py")}
        self.tops = {m.split(".")[0] for m in self.paths}
        self.edges: dict[str, set[str]] = {m: set() for m in self.paths}
        self.outside: dict[str, set[str]] = {m: set() for m in self.paths}
        for module, path in self.paths.items():
            for node in _imports(ast.parse((root / path).read_text(), path), type_checking):
                for target in self._targets(module, path, node):
                    if target is None:
                        continue
                    if target in self.paths:
                        self.edges[module] |= self._with_packages(module, target)
                    else:
                        self.outside[module].add(target.split(".")[0])

    def _targets(self, module: str, path: str, node):
        if isinstance(node, ast.Import):
            return [self._resolve(path, alias.name) for alias in node.names]
        if node.level:
            package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = self._resolve(path, node.module)
        # `from package import module` imports that module; `from module import name`, the module.
        return [f"{base}.{a.name}" if f"{base}.{a.name}" in self.paths else base for a in node.names]

    def _resolve(self, path: str, name: str) -> str:
        """A flat import of a neighbour, as a standalone folder's code makes, names that neighbour."""
        folder = path.rsplit("/", 1)[0] if "/" in path else ""
        top = name.split(".")[0]
        if folder and top not in self.tops and (self.root / folder / f"{top}.py").is_file():
            return _module_name(f"{folder}/{top}.py")
        return name

    def _with_packages(self, importer: str, target: str) -> set[str]:
        """The module and every package above it that importing it runs, but the importer's own."""
        own = {".".join(importer.split(".")[:i]) for i in range(1, importer.count(".") + 2)}
        parts = target.split(".")
        above = {".".join(parts[:i]) for i in range(1, len(parts))}
        return {t for t in {target, *above} if t in self.paths and t not in own}

    def cycles(self) -> list[list[str]]:
        """Each strongly connected part of the graph with more than one module (Tarjan)."""
        index, low, stack, on, parts, counter = {}, {}, [], set(), [], [0]

        def connect(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in sorted(self.edges[v]):
                if w not in index:
                    connect(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                part = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    part.append(w)
                    if w == v:
                        break
                if len(part) > 1:
                    parts.append(sorted(part))

        for v in sorted(self.edges):
            if v not in index:
                connect(v)
        return parts

    def reachable(self, start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += self.edges[m]
        return seen


@functools.cache
def _project() -> House:
    return House()


def _folder(module: str) -> str:
    return module.split(".")[0]


def test_no_module_or_script_is_longer_than_a_room_to_live_in():
    long = {p: n for p in _sources() if p.endswith(LIMITED) and (n := len((ROOT / p).read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_graph_sees_every_kind_of_import_and_only_what_runs(tmp_path):
    files = {
        "pkg/__init__.py": "from pkg import a\n",  # a package importing its own module
        "pkg/a.py": "def f():\n    from pkg import b\n",  # inside a function
        "pkg/b.py": "from . import c\nimport json\n",  # relative; another distribution's
        "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\nelse:\n    import other\n",
        "pkg/d.py": "from other.sub.m import name\n",  # runs other/__init__.py and other/sub/__init__.py too
        "other/__init__.py": "", "other/sub/__init__.py": "", "other/sub/m.py": "name = 1\n",
        "flat/x.py": "try:\n    from y import z\nexcept ImportError:\n    pass\n", "flat/y.py": "z = 1\n",  # a neighbour, flat
    }
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    house = House(tmp_path)
    assert {m: sorted(e) for m, e in house.edges.items() if e} == {
        "pkg": ["pkg.a"], "pkg.a": ["pkg.b"], "pkg.b": ["pkg.c"], "pkg.c": ["other"],
        "pkg.d": ["other", "other.sub", "other.sub.m"], "flat.x": ["flat.y"],
    }
    assert house.outside["pkg.b"] == {"json"} and house.cycles() == []
    # Counting what only a type checker runs, pkg.c's import of pkg.a closes a circle.
    assert House(tmp_path, type_checking=True).cycles() == [["pkg.a", "pkg.b", "pkg.c"]]
    (tmp_path / "other/sub/m.py").write_text("def f():\n    import pkg.d\n")
    assert House(tmp_path).cycles() == [["other.sub.m", "pkg.d"]]


def test_the_import_graph_has_no_circle():
    house = _project()
    assert house.cycles() == []


def test_counting_type_only_imports_the_graph_has_no_circle_either():
    # STYLE.md: "A model that calls a rule that takes the model's type is a circle, even when
    # only type hints close it".
    assert House(type_checking=True).cycles() == []


def test_each_folder_imports_only_from_the_floors_below_it():
    house = _project()
    upward = sorted(
        f"{m} imports {t}"
        for m, targets in house.edges.items()
        for t in targets
        if _folder(m) != _folder(t) and FLOORS[_folder(t)] >= FLOORS[_folder(m)]
    )
    assert upward == []
    assert set(map(_folder, house.paths)) == set(FLOORS)  # a new top-level folder takes a floor here


def _config_floor(module: str) -> int | None:
    over = [name for name in CONFIG_FLOORS if module == name or module.startswith(name + ".")]
    return CONFIG_FLOORS[max(over, key=len)] if over else None


def test_the_rules_sit_above_the_models_they_read_and_validation_above_the_rules():
    house = House(type_checking=True)
    assert set(CONFIG_FLOORS) <= set(house.paths)  # each name here is a module or package
    upward = sorted(
        f"{m} imports {t}"
        for m, targets in house.edges.items()
        if _config_floor(m) is not None
        for t in targets
        if _config_floor(t) is not None and _config_floor(t) > _config_floor(m)
    )
    assert upward == []


def test_what_runs_outside_the_app_imports_nothing_beyond_its_own_folder():
    house = _project()
    strays = sorted(
        f"{m} imports {t}"
        for folder in STANDALONE
        for m, path in house.paths.items()
        if path.startswith(folder + "/")
        for t in house.edges[m]
        if not house.paths[t].startswith(folder + "/")
    )
    assert strays == []


def test_the_kubernetes_objects_render_without_cdk():
    house = _project()
    # Everything a manifests module reaches, at any depth and inside functions, imports no CDK.
    reached = set().union(*(house.reachable(m) for m in house.paths if _folder(m) == "manifests"))
    assert {m: sorted(house.outside[m] & set(CDK)) for m in reached if house.outside[m] & set(CDK)} == {}
    assert any(house.outside[m] & set(CDK) for m in house.paths)  # the check can see a CDK import


def test_every_package_is_installed_and_says_what_it_holds():
    house = _project()
    packages = sorted(m for m, p in house.paths.items() if p.endswith("__init__.py") and _folder(m) != "tests")
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert sorted(listed) == packages
    assert [m for m in packages if not ast.get_docstring(ast.parse((ROOT / house.paths[m]).read_text()))] == []
