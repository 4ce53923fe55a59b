"""Whether a command names what exists, without running it.

A command's first word (after variable assignments, ``until``/``do``-style keywords and wrappers such
as ``flock LOCK``) must be a make target's ``make``, a console script of pyproject.toml, a Python
interpreter, an executable of the project's environment (``.venv/bin``), a shell builtin, a function
the same doc defines, or a tool from outside the environment (``EXTERNAL``: kubectl, docker, curl,
...). Then, by kind:

- ``make``: every target is one of the Makefile's.
- a console script, ``python -m`` a project module, ``python`` a script of the repository: the module
  or file exists, and every option and subcommand is one of its argparse parser's (read by
  ``tests/cli_parsers.py``, in a subprocess, without running the command); ``--config`` names a file
  (as given or under configs/). ``python -m loadtest.bench``: every ``--only`` scenario exists and
  every ``--param`` is a parameter of one of them, checked by the bench's own functions.
- ``python -m`` another module: importable in the environment (not checked for another environment's
  interpreter, such as ``.venv-lmms/bin/python``).
- ``pip install``: every extra of ``.[extra,...]`` is one of pyproject.toml's.
- ``locust``: every option is locust's or one its locustfile adds (the locustfile loaded as locust
  loads it, in a process of its own).

And whatever the kind, every word that is a path into the repository (its first folder is one of the
repository's) exists, but for what commands build (``GENERATED``); a path an option writes to
(``OUTPUT_OPTIONS``) may be new, but not under bench/results/, where every JSON file is a committed
result (a new one fails the result-file tests of ``make test``). Words with variables, placeholders
(``<HOST>``), globs, URLs or absolute paths are not paths checked here.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.doc_commands import Command

KEYWORDS = frozenset({"until", "while", "if", "then", "do", "else", "elif", "!", "time"})
SKIPPED = frozenset({"done", "fi", "esac", "{", "}", "(", ")"})
WRAPPERS = {"flock": 1, "timeout": 1, "nohup": 0, "env": 0, "sudo": 0, "exec": 0}
SHELL = frozenset(
    {"export", "unset", "cd", "echo", "source", ".", "set", "sleep", "true", "false", "wait", "kill", "test"}
)
# Tools from outside the Python environment: their options are theirs; the files they name are checked.
EXTERNAL = frozenset(
    {
        "apt-get", "awk", "base64", "cat", "chmod", "cp", "curl", "cut", "date", "diff", "dmesg",
        "docker", "find", "free", "git", "grep", "head", "helm", "jq", "kubectl", "ls", "lsof",
        "mkdir", "mktemp", "mv", "nproc", "nvidia-smi", "openssl", "rm", "sed", "sort", "ss", "tail",
        "tar", "tee", "touch", "wc", "wget",
    }
)  # fmt: skip
PYTHONS = re.compile(r"^python(3(\.\d+)?)?$")
ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
OUTPUT_OPTIONS = frozenset(
    {"--out", "--output", "-o", "--json-file", "--json", "--output_path", "--local-dir"}
)
# Built by make or by the commands themselves, never committed.
GENERATED = ("bench/data/", "models/tiny-", ".venv", "build/")
NOT_PATHS = re.compile(r"[$<>*?{}\[\]]|://|^[/~-]")
EXTRAS = re.compile(r"^\.\[(?P<extras>[\w,-]+)\]$")


@dataclass
class Project:
    """What commands may name: the repository's Makefile targets, console scripts, extras, packages,
    and the environment's executables."""

    root: Path
    bin: Path
    targets: frozenset[str] = field(init=False)
    scripts: dict[str, str] = field(init=False)
    extras: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        makefile = (self.root / "Makefile").read_text()
        rules = re.findall(r"^([\w.-]+(?:[ \t]+[\w.-]+)*)[ \t]*:(?!=)", makefile, re.M)
        self.targets = frozenset(name for rule in rules for name in rule.split() if not name.startswith("."))
        pyproject = tomllib.loads((self.root / "pyproject.toml").read_text())["project"]
        self.scripts = dict(pyproject["scripts"])
        self.extras = frozenset(pyproject["optional-dependencies"])

    def executables(self) -> frozenset[str]:
        return frozenset(path.name for path in self.bin.iterdir()) if self.bin.is_dir() else frozenset()

    def heads(self, commands: Iterable[Command] = ()) -> frozenset[str]:
        """The first words that make a code span a command: the kinds above, and the first word of any
        command in the docs' shell blocks."""
        named = {command.words[0] for command in commands if command.words}
        return frozenset({"make", "pip", "python", "python3"} | set(self.scripts) | EXTERNAL | named) | (
            self.executables()
        )

    def project_module(self, module: str) -> bool:
        top = module.split(".")[0]
        return (self.root / top / "__init__.py").is_file() or (self.root / f"{top}.py").is_file()

    def module_file(self, module: str) -> Path | None:
        """The file ``python -m module`` runs (a package's ``__main__``), if the repository has it."""
        base = self.root / module.replace(".", "/")
        for path in (base.with_suffix(".py"), base / "__main__.py"):
            if path.is_file():
                return path
        return None


@dataclass(frozen=True)
class Invocation:
    """A command's first word resolved: what kind of thing it runs, and its arguments."""

    kind: str  # make, cli, module, python, pip, locust, tool, none
    name: str
    args: tuple[str, ...]
    target: str | None = None  # a parser to read (tests/cli_parsers.py), for a project command
    own_environment: bool = True  # run by the project's environment, not another one
    problem: str | None = None


def resolve(words: Iterable[str], project: Project, functions: frozenset[str] = frozenset()) -> Invocation:
    rest = list(words)
    while rest and (ASSIGNMENT.match(rest[0]) or rest[0] in KEYWORDS or rest[0] in SKIPPED):
        rest.pop(0)
    while rest and rest[0] in WRAPPERS:
        skipped = WRAPPERS[rest.pop(0)]  # the wrapper's own argument (flock's lock, timeout's seconds)
        rest = rest[skipped:]
    if not rest:
        return Invocation("none", "", ())
    head, args = rest[0], tuple(rest[1:])
    if head.endswith("()") or head in functions or head in SHELL:
        return Invocation("none", head, args)
    own, problem = True, None
    if "/" in head:
        folder, _, name = head.rpartition("/")
        if folder in (".venv/bin", "./.venv/bin"):
            if project.bin.is_dir() and not (project.bin / name).exists():
                problem = f"{head}: no such executable in the environment"
        elif folder.endswith("bin"):
            own = False  # another environment's (.venv-lmms, one the doc makes in /tmp)
        else:
            exists = (project.root / head).is_file()
            return Invocation("tool", head, args, problem=None if exists else f"{head}: no such file")
        head = name
    if PYTHONS.match(head):
        return _python(args, project, own, problem)
    if head == "make":
        return Invocation("make", head, args, problem=problem)
    if head in project.scripts:
        module, _, function = project.scripts[head].partition(":")
        return Invocation("cli", head, args, f"entry:{module}:{function}", own, problem)
    if head in ("pip", "pip3"):
        return Invocation("pip", head, args, own_environment=own, problem=problem)
    if head == "locust":
        return Invocation("locust", head, args, problem=problem)
    if head in EXTERNAL or head in project.executables() or not own:
        return Invocation("tool", head, args, own_environment=own, problem=problem)
    return Invocation(
        "none",
        head,
        args,
        problem=f"{head}: no make target, console script, module, file or tool of the environment",
    )


def _python(args: tuple[str, ...], project: Project, own: bool, problem: str | None) -> Invocation:
    index = 0
    while index < len(args) and args[index] in ("-u", "-B", "-O", "-E", "-I", "-X", "-W"):
        index += 2 if args[index] in ("-X", "-W") else 1
    if index >= len(args) or args[index] == "-c":
        return Invocation("python", "python -c", (), problem=problem)
    if args[index] == "-m" and index + 1 < len(args):
        module, rest = args[index + 1], args[index + 2 :]
        if module == "pip":
            return Invocation("pip", "pip", rest, own_environment=own, problem=problem)
        if project.project_module(module):
            if project.module_file(module) is None:
                return Invocation("module", module, rest, problem=f"python -m {module}: no such module")
            return Invocation("module", module, rest, f"module:{module}", own, problem)
        if own and importlib.util.find_spec(module.split(".")[0]) is None:
            problem = f"python -m {module}: not installed in the environment"
        return Invocation("tool", f"python -m {module}", rest, own_environment=own, problem=problem)
    script, rest = args[index], args[index + 1 :]
    path = project.root / script
    if not path.is_file():
        return Invocation("python", script, rest, problem=f"{script}: no such file")
    return Invocation("python", script, rest, f"path:{script}", own, problem)


Parsers = Callable[[str], dict[str, Any]]


def check(
    command: Command,
    project: Project,
    parsers: Parsers,
    locust_options: Callable[[str], frozenset[str]],
    functions: frozenset[str] = frozenset(),
) -> list[str]:
    """What ``command`` names that does not exist, one line each."""
    invocation = resolve(command.words, project, functions)
    problems = [invocation.problem] if invocation.problem else []
    args = invocation.args
    if invocation.kind == "make":
        problems += [
            f"make {target}: no such target in the Makefile"
            for target in args
            if not target.startswith("-") and "=" not in target and target not in project.targets
        ]
    elif invocation.kind == "pip":
        for word in args:
            if match := EXTRAS.match(word):
                problems += [
                    f"{word}: pyproject.toml has no extra {extra!r}"
                    for extra in match["extras"].split(",")
                    if extra not in project.extras
                ]
    elif invocation.kind == "locust" and "-f" in args and args.index("-f") + 1 < len(args):
        known = locust_options(args[args.index("-f") + 1])
        problems += [
            f"{option}: no option of locust with this locustfile"
            for option in _options(args)
            if option not in known
        ]
    if invocation.target and not invocation.problem:
        problems += _against_parser(invocation, parsers(invocation.target))
        problems += _config_problems(args, project)
        if invocation.name == "loadtest.bench":
            problems += _bench_problems(args)
    return problems + _path_problems(args, project)


def _options(args: Iterable[str]) -> list[str]:
    found = []
    for word in args:
        if word == "--":
            break
        if word.startswith("-") and len(word) > 1 and not re.match(r"^-\d", word):
            found.append(word.partition("=")[0])
    return found


def _against_parser(invocation: Invocation, parser: dict[str, Any]) -> list[str]:
    name, args = invocation.name, list(invocation.args)
    if "error" in parser:
        if parser["error"] == "builds no argparse parser":
            return [f"{option}: {name} takes no options" for option in _options(args)]
        return [f"{name}: its parser could not be read ({parser['error']})"]
    problems, current, place, descended = [], parser, 0, False
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            break
        if word.startswith("-") and len(word) > 1 and not re.match(r"^-\d", word):
            option, equals, _ = word.partition("=")
            if option not in current["options"]:
                problems.append(f"{option}: no option of {name}{_subcommand(current)}")
                continue
            nargs = current["options"][option]
            if equals or nargs == 0:
                continue
            if isinstance(nargs, int):
                i += nargs
            elif nargs == "?":
                i += 1 if i < len(args) and not args[i].startswith("-") else 0
            else:
                while i < len(args) and not args[i].startswith("-"):
                    i += 1
            continue
        if current["subcommands"] and not descended:
            if word not in current["subcommands"]:
                known = ", ".join(current["subcommands"])
                problems.append(f"{word}: no subcommand of {name} (it has {known})")
                break
            current, place = current["subcommands"][word], 0
            current = dict(current, name=word)
            descended = not current["subcommands"]
            continue
        positionals = current["positionals"]
        if place < len(positionals):
            choices = positionals[place]["choices"]
            if choices and word not in choices:
                problems.append(f"{word}: not one of {name}'s {', '.join(choices)}")
            if positionals[place]["nargs"] not in ("*", "+"):
                place += 1
    return problems


def _subcommand(current: dict[str, Any]) -> str:
    return f" {current['name']}" if "name" in current else ""


def _config_problems(args: tuple[str, ...], project: Project) -> list[str]:
    values = [args[i + 1] for i, word in enumerate(args[:-1]) if word == "--config"]
    values += [word.split("=", 1)[1] for word in args if word.startswith("--config=")]
    return [
        f"--config {value}: no such file (nor configs/{value})"
        for value in values
        if not NOT_PATHS.search(value)
        and not (project.root / value).is_file()
        and not (project.root / "configs" / value).is_file()
    ]


def _bench_problems(args: tuple[str, ...]) -> list[str]:
    """``python -m loadtest.bench``'s scenarios and parameters, checked by the bench's own functions."""
    from loadtest.bench.cli import check_served, config_name, parse_overrides
    from loadtest.bench.scenarios import SCENARIOS

    def values(option: str) -> list[str]:
        found = [args[i + 1] for i, word in enumerate(args[:-1]) if word == option]
        return found + [word.split("=", 1)[1] for word in args if word.startswith(f"{option}=")]

    only = values("--only")
    names = [name.strip() for text in only for name in text.split(",") if name.strip()]
    if not only:
        names = [name for name, scenario in SCENARIOS.items() if scenario.in_full_run]
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown:
        return [f"--only {name}: no such scenario of python -m loadtest.bench" for name in unknown]
    chosen = [SCENARIOS[name] for name in names]
    params = [value for value in values("--param") if "<" not in value]  # a placeholder's value: any
    try:
        parse_overrides(params, chosen)
        configs, urls = values("--config"), values("--url")
        config = config_name(configs[-1]) if configs and "<" not in configs[-1] else None
        if configs and config is None:  # a placeholder: any config, for the scenarios that take one
            if fixed := [scenario.name for scenario in chosen if not scenario.takes_config]:
                return [f"--config: {', '.join(fixed)} deploy their own config"]
        check_served(config, urls[-1] if urls else None, chosen)
    except ValueError as error:
        return [str(error)]
    return []


def _path_problems(args: tuple[str, ...], project: Project) -> list[str]:
    problems = []
    for index, word in enumerate(args):
        previous = args[index - 1] if index else ""
        option, equals, value = word.partition("=")
        candidate = value if equals else word
        output = previous in OUTPUT_OPTIONS or (equals and option in OUTPUT_OPTIONS)
        if problem := _path_problem(candidate, project, output):
            problems.append(problem)
    return problems


def _path_problem(word: str, project: Project, output: bool) -> str | None:
    path = word.removeprefix("./")
    if "/" not in path or NOT_PATHS.search(path) or path.startswith(GENERATED):
        return None
    if not (project.root / path.split("/")[0]).exists():
        return None  # not in the repository: the user's files, or what a command writes (data/, out/)
    if output:
        if not path.startswith("bench/results/"):
            return None
        written = project.root / path
        if written.exists() or written.with_suffix(written.suffix + ".json").exists():
            return None
        return (
            f"{word}: written under bench/results/, where every JSON file must be a committed result "
            "naming its command (make test fails on any other)"
        )
    if not (project.root / path).exists():
        return f"{word}: no such file or folder"
    return None
