"""The layering of the packages (README, "Layout"): imports run one way, and the MAI core is
framework-free. Read from the sources' syntax trees, imports inside functions included."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Each package and the project packages it may import; everything else of the project is off limits.
MAY_IMPORT = {
    "deployments": set(),
    "serve_app": {"deployments"},
    "training": {"deployments", "serve_app"},
    "evaluation": {"deployments", "serve_app", "training"},
    "loadtest": {"deployments", "serve_app", "training", "evaluation"},
}
CORE = ("cascade", "prompts", "answers")  # serve_app's algorithm: testable without any framework
FRAMEWORKS = {"ray", "vllm", "fastapi", "starlette", "httpx", "torch", "transformers"}


def imported_modules(source: str, package: str) -> set[str]:
    """Dotted names of every module ``source`` (a module of ``package``) imports. The packages are
    flat, so a relative import names a sibling module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.ImportFrom):
            names.update(
                [f"{package}.{node.module}"] if node.module else [f"{package}.{a.name}" for a in node.names]
            )
    return names


def modules_of(package: str) -> dict[str, set[str]]:
    return {path.stem: imported_modules(path.read_text(), package) for path in (ROOT / package).glob("*.py")}


def test_the_checker_sees_every_kind_of_import():
    source = (
        "import ray.serve\nfrom serve_app import jobs\nfrom .prompts import x\n"
        "def f():\n    from training.tiny import y\n"
    )
    assert imported_modules(source, "serve_app") == {
        "ray.serve",
        "serve_app",
        "serve_app.prompts",
        "training.tiny",
    }


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_imports_run_one_way(package):
    allowed = MAY_IMPORT[package] | {package}
    wrong = {
        f"{package}/{module}.py imports {name}"
        for module, names in modules_of(package).items()
        for name in names
        if name.split(".")[0] in MAY_IMPORT and name.split(".")[0] not in allowed
    }
    assert not wrong, sorted(wrong)


def test_the_mai_core_imports_no_framework():
    graph = modules_of("serve_app")
    seen, todo = set(), list(CORE)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for name in graph[module]:
            if name.startswith("serve_app."):
                todo.append(name.split(".")[1])
            assert name.split(".")[0] not in FRAMEWORKS, (
                f"serve_app/{module}.py (used by the core) imports {name}"
            )
            assert not name.startswith("deployments"), (
                f"serve_app/{module}.py (used by the core) imports {name}"
            )
    assert set(CORE) <= seen
