"""The layout keeps its shape: data flows one way, pure code stays pure, files stay small.

See docs/architecture.md. These read the source (ast) and start fresh interpreters; they do
not need Django's test database.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("config", "portal", "scheduling", "accounting", "simulation")
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = path
    return mods


MODULES = _modules()


def _resolve(target: str) -> str | None:
    """The project module an import names (`a.b.c` → `a.b` when c is a name in it)."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _imports(path: Path) -> list[tuple[str, ast.AST, bool]]:
    """(project module, node, inside a function) for every import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [f"{child.module}.{a.name}" for a in child.names] + [child.module]
            for name in names:
                module = _resolve(name)
                if module is not None:
                    found.append((module, child, in_function))
            visit(child, inner)

    visit(tree, False)
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for target, _, _ in _imports(path):
            # A package's own submodules import it implicitly; that is not an edge back.
            if target != module and not module.startswith(target + "."):
                graph[module].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
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


def test_the_project_has_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    # So that the test above cannot pass by never finding anything.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_only_the_engine_imports_backends():
    offenders = [
        f"{module} imports {target}"
        for module, edges in _graph().items()
        if not module.startswith(("scheduling.backends", "scheduling.engine"))
        for target in edges
        if target.startswith("scheduling.backends")
    ]
    assert offenders == []


# Pages and APIs: scheduling's and the other apps' (which may import their own app's modules).
INTERFACES = (
    "scheduling.views",
    "scheduling.api",
    "accounting.views",
    "accounting.views_dashboard",
    "accounting.api",
    "simulation.views",
    "portal.views",
    "portal.api",
)
# What a page or an API may import from scheduling: writes through services, reads through
# selectors and presenters, input through forms and serializers, the pure modules, and the port.
INTERFACE_MAY_IMPORT = (
    "scheduling.services",
    "scheduling.selectors",
    "scheduling.presenters",
    "scheduling.forms",
    "scheduling.serializers",
    "scheduling.decisions",
    "scheduling.spec",
    "scheduling.descriptor",
    "scheduling.sites",
    "scheduling.usage",
)


def _named_imports(path: Path) -> list[tuple[str, str, int]]:
    """(project module, the name imported, line) for every import in the file; `from scheduling
    import services` names scheduling.services, not the package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            pairs = [(a.name, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            pairs = [(f"{node.module}.{a.name}", a.name) for a in node.names]
        else:
            continue
        for name, alias in pairs:
            module = _resolve(name)
            if module is not None:
                found.append((module, name if module == name else alias, node.lineno))
    return found


def test_pages_and_apis_import_only_services_selectors_presenters_forms_and_serializers():
    offenders = [
        f"{module}:{line} imports {name} from {target}"
        for module, path in MODULES.items()
        if module.startswith(INTERFACES)
        for target, name, line in _named_imports(path)
        if target.startswith("scheduling") and not target.startswith(INTERFACE_MAY_IMPORT)
    ]
    assert offenders == []


# The apps whose pages and APIs query no model of their own: they read through the app's
# selectors and write through its services. accounting joins once its pages do too.
APPS_WITHOUT_MODELS_IN_PAGES = ("portal", "scheduling", "simulation", "accounting")


def _own_models_in_pages(imports: dict[str, list[tuple[str, str, int]]]) -> list[str]:
    """`imports`: each module's (project module, name, line) imports."""
    found = []
    for module, named in imports.items():
        app = module.split(".")[0]
        if app not in APPS_WITHOUT_MODELS_IN_PAGES or not module.startswith(INTERFACES):
            continue
        models = f"{app}.models"
        found += [
            f"{module}:{line} imports {name} from {target}"
            for target, name, line in named
            if target == models or target.startswith(models + ".")
        ]
    return found


def test_pages_and_apis_import_no_model_of_their_own_app():
    pages = {m: _named_imports(path) for m, path in MODULES.items() if m.startswith(INTERFACES)}
    assert _own_models_in_pages(pages) == []


def test_the_own_models_rule_finds_a_page_that_imports_them():
    # So that the test above cannot pass by never finding anything.
    assert _own_models_in_pages(
        {
            "portal.views": [("portal.models", "Project", 3), ("portal.selectors", "x", 4)],
            "simulation.views": [("portal.models", "Project", 5)],
            "scheduling.views.tasks": [("scheduling.models.tasks", "Task", 6)],
            "portal.selectors": [("portal.models", "Project", 7)],
        }
    ) == [
        "portal.views:3 imports Project from portal.models",
        "scheduling.views.tasks:6 imports Task from scheduling.models.tasks",
    ]


def _engine_importers(graph: dict[str, set[str]]) -> list[str]:
    """Modules outside the engine, the Celery tasks module and the app configs that import
    the engine: its one way in is a message (scheduling/outbox.py) to its Celery tasks."""
    allowed = ("scheduling.tasks",)
    return [
        f"{module} imports {target}"
        for module, edges in graph.items()
        if not module.startswith("scheduling.engine")
        and module not in allowed
        and not module.endswith(".apps")
        for target in edges
        if (target == "scheduling.engine" or target.startswith("scheduling.engine."))
        and (module, target) not in SYNCHRONOUS_DOORS
    ]


# The one edge from the portal into the engine that is not a message: live sandboxes answer a
# create or an exec within milliseconds, which a Celery round trip would not allow, so the
# sandbox service calls the engine's synchronous door directly (docs/sandboxes.md).
SYNCHRONOUS_DOORS = {("scheduling.services.sandboxes", "scheduling.engine.sandboxes")}


# What another app may import of scheduling: the port, the tables, and the pure modules.
SCHEDULING_FOR_OTHERS = (
    "scheduling.usage",
    "scheduling.models",
    "scheduling.decisions",
    "scheduling.sites",
    "scheduling.spec",
    "scheduling.descriptor",
)


def _reaching_into_scheduling(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{module} imports {target}"
        for module, edges in graph.items()
        if not module.startswith("scheduling")
        for target in edges
        if target.startswith("scheduling.")  # (the package itself is loaded by any of them)
        and not any(target == ok or target.startswith(ok + ".") for ok in SCHEDULING_FOR_OTHERS)
    ]


def test_only_the_engine_its_celery_tasks_and_app_configs_import_the_engine():
    assert _engine_importers(_graph()) == []


def test_other_apps_import_only_the_usage_port_the_models_and_pure_modules_of_scheduling():
    assert _reaching_into_scheduling(_graph()) == []


def test_the_usage_port_does_not_import_the_engine():
    graph = _graph()
    reached, todo = set(), ["scheduling.usage"]
    while todo:  # everything it loads, transitively
        for target in graph[todo.pop()] - reached:
            reached.add(target)
            todo.append(target)
    assert sorted(m for m in reached if m.startswith("scheduling.engine")) == []


def test_the_layout_rules_find_a_module_that_breaks_them():
    # So that the three tests above cannot pass by never finding anything.
    graph = {
        "scheduling.services.tasks": {"scheduling.engine.settle"},
        "scheduling.services.sandboxes": {"scheduling.engine.sandboxes"},
        "scheduling.services.sandbox_input": {"scheduling.engine.sandboxes"},
        "scheduling.tasks": {"scheduling.engine"},
        "scheduling.apps": {"scheduling.engine.settle"},
        "scheduling.engine.settle": {"scheduling.engine.registry"},
        "accounting.meter": {"scheduling.selectors.access", "scheduling.usage"},
        "accounting.views": {"scheduling.models", "scheduling.decisions.levels"},
    }
    assert _engine_importers(graph) == [
        "scheduling.services.tasks imports scheduling.engine.settle",
        "scheduling.services.sandbox_input imports scheduling.engine.sandboxes",
    ]
    assert _reaching_into_scheduling(graph) == [
        "accounting.meter imports scheduling.selectors.access"
    ]


PURE = ("scheduling.decisions", "scheduling.sites", "scheduling.spec", "simulation.simulator")


@pytest.mark.parametrize(
    "package", ["scheduling.decisions", "scheduling.sites", "simulation.simulator"]
)
def test_pure_code_imports_only_pure_code(package):
    pure = PURE
    offenders = [
        f"{module} imports {target}"
        for module, edges in _graph().items()
        if module.startswith(package)
        for target in edges
        if not target.startswith(pure)
    ]
    assert offenders == []


def test_importing_the_decisions_the_site_and_the_simulator_loads_no_django():
    modules = [m for m in MODULES if m.startswith(PURE)]
    code = (
        f"import sys; import {', '.join(modules)};"
        " print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'celery')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def test_project_modules_are_imported_at_the_top_except_in_app_start_up():
    # Imports hidden in function bodies are how the old import circle stayed invisible; only
    # an AppConfig.ready() (the composition root) and TYPE_CHECKING blocks may have them.
    hidden = [
        f"{module}:{node.lineno} imports {target}"
        for module, path in MODULES.items()
        if not module.endswith(".apps")
        for target, node, in_function in _imports(path)
        if in_function
    ]
    assert hidden == []


# Beside the packages: the tests, the benchmarks and the command line client.
ALSO_KEPT_SHORT = ("tests", "bench", "clients")


def test_no_file_is_over_500_lines():
    paths = [
        *MODULES.values(),
        *(path for folder in ALSO_KEPT_SHORT for path in (ROOT / folder).rglob("*.py")),
    ]
    long = [
        f"{path.relative_to(ROOT)} ({path.read_text().count(chr(10))} lines)"
        for path in paths
        if path.read_text().count("\n") > MAX_LINES
    ]
    assert long == []


def test_every_setting_of_the_parts_is_imported_into_the_settings():
    # Django reads config.settings alone: a setting a part defines but the settings module
    # does not import would be silently ignored.
    settings = ast.parse((ROOT / "config" / "settings.py").read_text())
    imported = {
        (node.module, alias.name)
        for node in ast.walk(settings)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    missing = [
        f"{part.stem}.{target.id}"
        for part in sorted((ROOT / "config").glob("settings_*.py"))
        for node in ast.parse(part.read_text()).body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
        and target.id.isupper()
        and (f"config.{part.stem}", target.id) not in imported
    ]
    assert missing == []


def test_asking_whether_a_backend_runs_here_loads_no_backend():
    # Models and checks ask it (scheduling/host.py): only the engine loads backends, at run
    # time too, not only in the imports the tests above read.
    code = (
        "import sys, django; django.setup(); from django.conf import settings;"
        " from scheduling import checks, host;"
        " before = {m for m in sys.modules if m.startswith('scheduling.backends.')};"
        " local = [a for a in settings.COMPUTE_BACKENDS if host.is_local(a)];"
        " after = {m for m in sys.modules if m.startswith('scheduling.backends.')};"
        " print(local, sorted(after - before))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "['local'] []"


# The command line (clients/): a package of its own, held to the same rules.
CLIENT = ROOT / "clients" / "switchyard_cli"


def _client_problems(package: Path) -> list[str]:
    """Import cycles (imports inside functions count), imports hidden in function bodies and
    files over 500 lines, in the command line's package."""
    modules = {
        ".".join(p.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): p
        for p in package.rglob("*.py")
    }

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    problems = []
    for module, path in modules.items():
        text = path.read_text()
        if text.count("\n") > MAX_LINES:
            problems.append(f"{module} ({text.count(chr(10))} lines)")
        tree = ast.parse(text, filename=str(path))
        functions = [
            n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        inside = {id(n) for f in functions for n in ast.walk(f) if n is not f}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            else:
                continue
            for target in sorted({t for t in map(resolve, names) if t}):
                if target != module and not module.startswith(target + "."):
                    graph[module].add(target)
                if id(node) in inside:
                    problems.append(f"{module}:{node.lineno} imports {target} in a function")
    return problems + [f"cycle: {' ↔ '.join(c)}" for c in _cycles(graph)]


def test_the_command_line_has_no_cycles_no_hidden_imports_and_no_long_files():
    assert _client_problems(CLIENT) == []
