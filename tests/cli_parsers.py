"""The argparse parsers of the project's command lines, read without running them.

    python -m tests.cli_parsers entry:evaluation.cli:main module:loadtest.bench path:k8s/render.py

prints, as JSON, each target's parser: its options (and how many values each takes), its
positionals' choices and its subcommands, recursively; or why none was read. A target is a console
script's entry point (``entry:MODULE:FUNCTION``), a module run with ``python -m`` (``module:NAME``) or
a script (``path:FILE``, under the repository). Each is run as it would be run, with
``ArgumentParser.parse_known_args`` replaced by a stop that hands back the parser: what runs is the
code before the arguments are parsed (imports, the parser built), never the command itself. A target
whose source builds no ``ArgumentParser`` is not run at all.

``read_parsers`` runs this module for the doc-command tests; ``locust_options_of`` reads the options
locust takes with a locustfile, in a process of its own too.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import runpy
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__("parser read")
        self.parser = parser


def _stop(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
    raise _Parsed(self)


def describe(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """A parser as data: option -> nargs (0 for a flag, 1 for one value, or ?, *, +, N), its
    positionals in order (nargs, choices) and its subcommands."""
    options: dict[str, Any] = {}
    positionals: list[dict[str, Any]] = []
    subcommands: dict[str, Any] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            subcommands |= {name: describe(sub) for name, sub in action.choices.items()}
        elif action.option_strings:
            nargs = 1 if action.nargs is None else action.nargs
            options |= {option: nargs for option in action.option_strings}
        else:
            choices = None if action.choices is None else [str(choice) for choice in action.choices]
            positionals.append({"nargs": action.nargs, "choices": choices})
    return {"options": options, "positionals": positionals, "subcommands": subcommands}


def source_files(target: str) -> list[Path]:
    """The files whose source says whether ``target`` builds a parser: the entry point's module, the
    script, or the module run (a package's ``__main__`` and the modules it imports from the package)."""
    kind, _, name = target.partition(":")
    if kind == "path":
        return [ROOT / name]
    module = name.split(":")[0]
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return []
    origin = Path(spec.origin)
    if kind == "module" and spec.submodule_search_locations:
        main = origin.parent / "__main__.py"
        files = [main]
        for node in ast.walk(ast.parse(main.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                files.append(origin.parent / f"{node.module.replace('.', '/')}.py")
        return files
    return [origin]


def read_parser(target: str) -> dict[str, Any]:
    if not any(
        path.is_file() and "ArgumentParser" in path.read_text(errors="replace")
        for path in source_files(target)
    ):
        return {"error": "builds no argparse parser"}
    kind, _, name = target.partition(":")
    argv, path = sys.argv, list(sys.path)
    try:
        if kind == "entry":
            module, _, function = name.partition(":")
            sys.argv = [module]
            getattr(importlib.import_module(module), function)()
        elif kind == "module":
            sys.argv = [name]
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        else:
            script = ROOT / name
            sys.argv = [str(script)]
            sys.path.insert(0, str(script.parent))
            runpy.run_path(str(script), run_name="__main__")
    except _Parsed as parsed:
        return describe(parsed.parser)
    except BaseException as error:  # a target that fails is reported, not raised
        return {"error": f"{type(error).__name__}: {error}"[:300]}
    finally:
        sys.argv, sys.path[:] = argv, path
    return {"error": "ran to the end without parsing its arguments"}


def main(targets: list[str]) -> int:
    argparse.ArgumentParser.parse_known_args = _stop  # type: ignore[method-assign]
    argparse.ArgumentParser.parse_known_intermixed_args = _stop  # type: ignore[method-assign]
    out = sys.stdout
    sys.stdout = sys.stderr  # whatever a target prints on import stays out of the JSON
    described = {target: read_parser(target) for target in targets}
    out.write(json.dumps(described))
    return 0


def read_parsers(targets: Iterable[str], root: Path, python: Path) -> dict[str, dict[str, Any]]:
    """Every target's parser, read in one subprocess running this module."""
    targets = sorted(set(targets))
    if not targets:
        return {}
    done = subprocess.run(
        [str(python), "-m", "tests.cli_parsers", *targets],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout)


_LOCUST_OPTIONS = """
import json, sys
from locust.argument_parser import get_parser
from locust.util.load_locustfile import load_locustfile
load_locustfile(sys.argv[1])
print(json.dumps([option for action in get_parser()._actions for option in action.option_strings]))
"""


def locust_options_of(locustfile: str, root: Path, python: Path) -> frozenset[str]:
    """The options locust takes with ``locustfile`` (locust's and the ones the locustfile adds), read
    by loading it as locust does, in a process of its own (locust patches the standard library)."""
    done = subprocess.run(
        [str(python), "-c", _LOCUST_OPTIONS, locustfile],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return frozenset(json.loads(done.stdout.splitlines()[-1]))


def python_of(root: Path) -> Path:
    """The project environment's interpreter (.venv), else this one."""
    venv = root / ".venv" / "bin" / "python"
    return venv if venv.exists() else Path(sys.executable)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
