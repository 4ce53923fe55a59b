"""The layering of the packages (CONTRIBUTING.md, "Layout"): imports run one way, between the
top-level packages and between serve_app's layers, and the MAI core is framework-free. Read from
the sources' syntax trees, imports inside functions included."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Each top-level package and the project packages it may import; the rest of the project is off limits.
MAY_IMPORT = {
    "deployments": set(),
    "serve_app": {"deployments"},
    "harness": {"deployments", "serve_app"},
    "training": {"deployments", "serve_app", "harness"},
    "evaluation": {"deployments", "serve_app", "harness"},
    "batch": {"deployments", "serve_app", "harness", "evaluation"},
    "loadtest": {"deployments", "serve_app", "harness", "evaluation", "batch"},
}
# serve_app's layers, top to bottom: each may import the layers below it, never one above.
SERVE_APP_LAYERS = (
    "app",
    "edge",
    "fleet",
    "engine_config",
    "clients",
    "config",
    "cache",
    "telemetry",
    "core",
)
FRAMEWORKS = {"ray", "vllm", "fastapi", "starlette", "httpx", "torch", "transformers"}


def module_name(path: Path) -> str:
    """The dotted name of the module at ``path`` (a file under ROOT)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Dotted names of every module ``source`` (the module named ``module``) imports, relative
    imports resolved against its package."""
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module or "")
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            if node.module:
                names.add(".".join([*base, node.module]))
            else:
                names.update(".".join([*base, alias.name]) for alias in node.names)
    return names


def project_modules(package: str) -> dict[str, set[str]]:
    """module name -> the modules it imports, for every module of ``package``."""
    return {
        module_name(path): imported_modules(
            path.read_text(), module_name(path), is_package=path.name == "__init__.py"
        )
        for path in (ROOT / package).rglob("*.py")
    }


def layer_of(module: str) -> str:
    """The serve_app layer of ``module`` (serve_app.edge.jobs -> edge, serve_app.config -> config)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "app"


def test_the_checker_resolves_every_kind_of_import():
    source = (
        "import ray.serve\nfrom serve_app.edge import jobs\nfrom .prompts import x\n"
        "from ..config import AppConfig\nfrom . import trace\n"
        "def f():\n    from harness.paths import ROOT\n"
    )
    assert imported_modules(source, "serve_app.core.cascade") == {
        "ray.serve",
        "serve_app.edge",
        "serve_app.core.prompts",
        "serve_app.config",
        "serve_app.core.trace",
        "harness.paths",
    }
    assert layer_of("serve_app.edge.jobs") == "edge"
    assert layer_of("serve_app.config") == "config"


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_imports_run_one_way_between_packages(package):
    allowed = MAY_IMPORT[package] | {package}
    wrong = {
        f"{module} imports {name}"
        for module, names in project_modules(package).items()
        for name in names
        if name.split(".")[0] in MAY_IMPORT and name.split(".")[0] not in allowed
    }
    assert not wrong, sorted(wrong)


def test_serve_app_layers_import_only_downwards():
    wrong = []
    for module, names in project_modules("serve_app").items():
        if module == "serve_app":
            continue
        rank = SERVE_APP_LAYERS.index(layer_of(module))
        for name in names:
            if name.startswith("serve_app.") and SERVE_APP_LAYERS.index(layer_of(name)) < rank:
                wrong.append(f"{module} ({layer_of(module)}) imports {name} ({layer_of(name)})")
    assert not wrong, wrong


def test_serve_app_has_no_module_outside_its_layers():
    top = {module.split(".")[1] for module in project_modules("serve_app") if module != "serve_app"}
    assert top == set(SERVE_APP_LAYERS)


def test_the_mai_core_imports_no_framework_and_nothing_above_it():
    wrong = [
        f"{module} imports {name}"
        for module, names in project_modules("serve_app/core").items()
        for name in names
        if name.split(".")[0] in FRAMEWORKS | {"deployments", "harness"}
        or (name.startswith("serve_app.") and not name.startswith("serve_app.core"))
    ]
    assert not wrong, wrong


MAX_MODULE_LINES = 400


def test_no_module_of_the_project_passes_400_lines():
    """Small modules with one concern each: no module of a top-level package (tests apart) is longer
    than MAX_MODULE_LINES."""
    long = {
        str(path.relative_to(ROOT)): lines
        for package in MAY_IMPORT
        for path in sorted((ROOT / package).rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (module -> modules it imports), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return path[path.index(module) :] + [module]
        if module in done:
            return None
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            found = visit(imported)
            if found:
                return found
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module)
        if found:
            return found
    return None


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_no_two_modules_import_each_other(package):
    """No import cycle among a package's modules, however deep, imports inside functions and under
    TYPE_CHECKING included: each module's concern sits above or below another's, never both."""
    graph = project_modules(package)
    internal = {module: {name for name in names if name in graph} for module, names in graph.items()}
    assert _cycle(internal) is None, f"import cycle: {' -> '.join(_cycle(internal) or [])}"


def layout_block() -> str:
    """The layout drawn in CONTRIBUTING.md: the text block of its "Layout" section."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    return section.split("```text", 1)[1].split("```", 1)[0]


def test_the_layout_in_contributing_names_every_module_and_only_modules_that_exist():
    block = layout_block()
    named = set(re.findall(r"([A-Za-z_][\w/]*\.py)\b", block))
    names = {Path(name).name for name in named}
    product = [
        path
        for package in ("serve_app", "deployments")
        for path in (ROOT / package).rglob("*.py")
        if path.name != "__init__.py"
    ]
    unnamed = sorted(path.relative_to(ROOT).as_posix() for path in product if path.name not in names)
    assert not unnamed, f"CONTRIBUTING.md's layout does not name {unnamed}"
    existing = {path.name for path in ROOT.rglob("*.py") if ".venv" not in path.parts}
    gone = sorted(name for name in names if name not in existing)
    assert not gone, f"CONTRIBUTING.md's layout names modules that do not exist: {gone}"
