"""Every command the docs and the result files name exists as named, checked without running it.

The commands are every simple command of the shell blocks of README.md, CONTRIBUTING.md and
docs/**/*.md (whatever their example marker: a not-run block must still name what exists), every
code span of their prose that is a command, every result file's ``meta.command`` (bench/results and
experiments) and the command each section of bench/RESULTS.md names for a result not run yet. What
"exists" means for each kind is in ``tests/command_check.py``: make targets, console scripts,
modules, scripts, their options and subcommands (their own argparse parsers), the bench's scenarios
and parameters, pyproject's extras, locust's options, and the repository's files.

A result file whose command no longer exists and measured something no current command measures
keeps its command as run, says so in ``meta.command_note`` and names in ``meta.command_now`` the
current command nearest to it, which must exist.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from tests.cli_parsers import locust_options_of, python_of, read_parsers
from tests.command_check import Project, check, resolve
from tests.doc_commands import (
    Command,
    block_commands,
    result_commands,
    result_files,
    span_commands,
    split_script,
)
from tests.doc_examples import DOC_FILES, ROOT

pytestmark = pytest.mark.tools

PYTHON = python_of(ROOT)
PROJECT = Project(ROOT, PYTHON.parent)
BLOCKS = block_commands()
DOC_COMMANDS = BLOCKS + span_commands(DOC_FILES, PROJECT.heads(BLOCKS))
FUNCTIONS = frozenset(c.words[0][:-2] for c in BLOCKS if c.words[0].endswith("()"))
RESULTS = list(result_files())


def section_commands() -> list[Command]:
    """What bench/RESULTS.md tells to run for each of its sections' results."""
    from loadtest.bench.render import sections

    return [
        Command(f"bench/RESULTS.md, section {section.title!r}", tuple(words))
        for section in sections()
        for _, words in split_script(section.rerun())
    ]


ALL = DOC_COMMANDS + result_commands() + section_commands()


PARSERS: dict[str, dict] = {}


def parser_of(target: str) -> dict:
    """A target's parser; the first call reads every target the commands above need, in one process."""
    if target not in PARSERS:
        wanted = {resolve(command.words, PROJECT, FUNCTIONS).target for command in ALL} | {target}
        PARSERS.update(read_parsers({name for name in wanted if name and name not in PARSERS}, ROOT, PYTHON))
    return PARSERS[target]


@cache
def locust_options(locustfile: str) -> frozenset[str]:
    return locust_options_of(locustfile, ROOT, PYTHON)


def problems_of(commands: list[Command]) -> list[str]:
    return [
        f"{command.where}: `{command.text}`: {problem}"
        for command in commands
        for problem in check(command, PROJECT, parser_of, locust_options, FUNCTIONS)
    ]


def commands_of(where: str, text: str) -> list[Command]:
    return [Command(where, tuple(words)) for _, words in split_script(text)]


def test_the_docs_name_commands_of_every_kind():
    kinds = {resolve(command.words, PROJECT, FUNCTIONS).kind for command in DOC_COMMANDS}
    assert {"make", "cli", "module", "python", "pip", "locust", "tool"} <= kinds
    assert len(DOC_COMMANDS) > 100 and any(command.inline for command in DOC_COMMANDS)


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_command_of_the_docs_names_what_exists(path: Path):
    name = path.relative_to(ROOT).as_posix()
    problems = problems_of([command for command in DOC_COMMANDS if command.where.startswith(f"{name}:")])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "path",
    [path for path, meta in RESULTS if "command" in meta],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_every_result_file_names_a_command_that_exists(path: Path):
    meta, name = dict(RESULTS)[path], path.relative_to(ROOT).as_posix()
    problems = problems_of(commands_of(f"{name}: meta.command", meta["command"]))
    if problems and meta.get("command_note"):
        assert isinstance(meta.get("command_now"), str), f"{name}: a command_note names its command_now"
        problems = problems_of(commands_of(f"{name}: meta.command_now", meta["command_now"]))
    assert not problems, "\n".join(problems)


def test_every_section_of_results_md_names_a_command_that_exists():
    problems = problems_of(section_commands())
    assert not problems, "\n".join(problems)


def test_the_splitter_reads_commands_as_a_shell_does():
    script = "\n".join(
        [
            "IMG=$(base64 -w0 docs/examples/shape.png)   # a comment",
            'make serve && curl -sf "http://x/$IMG" | jq . > out.json 2>/dev/null',
            "mai-eval run data.jsonl \\",
            "    --out eval/x --policies 'mai,mai-large'; until curl x; do sleep 1; done",
            "docker build --build-arg RAY_DIGEST=@sha256:<digest> -t image .",
        ]
    )
    assert [(line, words) for line, words in split_script(script, 10)] == [
        (10, ["base64", "-w0", "docs/examples/shape.png"]),
        (10, ["IMG=$(base64 -w0 docs/examples/shape.png)"]),
        (11, ["make", "serve"]),
        (11, ["curl", "-sf", "http://x/$IMG"]),
        (11, ["jq", "."]),
        (12, ["mai-eval", "run", "data.jsonl", "--out", "eval/x", "--policies", "mai,mai-large"]),
        (13, ["until", "curl", "x"]),
        (13, ["do", "sleep", "1"]),
        (13, ["done"]),
        (14, ["docker", "build", "--build-arg", "RAY_DIGEST=@sha256:<digest>", "-t", "image", "."]),
    ]


def test_the_checker_finds_what_does_not_exist():
    bad = [
        "make no-such-target",
        "huggingface-cli download lmms-lab/ChartQA",
        "python -m loadtest.autoscaling_bench --only real",
        "python -m loadtest.bench --only no_such_scenario",
        "python -m loadtest.bench --only autoscaling --param no_such_parameter=1",
        "python -m loadtest.bench --only autoscaling_real --param questions=many",
        "python -m loadtest.bench --only request_path --config configs/mai-cpu.yaml",
        "mai-eval run data.jsonl --no-such-option 1 --out eval/x",
        "mai-eval evaluate data.jsonl",
        "mai-eval convert no-such-source --out x.jsonl",
        "mai-batch in.jsonl --output out.jsonl --config configs/no-such.yaml",
        "python -m loadtest.fuzz --config no-such.yaml",
        "serve run configs/no-such.yaml",
        "pip install -e '.[gpu,no-such-extra]'",
        "python k8s/no_such_script.py",
        "python k8s/render.py --no-such-option",
        "python -m no_such_module_anywhere",
        ".venv/bin/no-such-executable --help",
        "locust -f loadtest/locustfile.py --no-such-option 1 --json-file bench/results/locust",
    ]
    good = [
        "make test-unit",
        "hf download lmms-lab/ChartQA --repo-type dataset --local-dir data/lmms-lab/ChartQA",
        "python -m loadtest.bench --only autoscaling,real --param repetitions=5",
        "python -m loadtest.bench --only first_run --config mai-cpu.yaml --url http://127.0.0.1:8000",
        "python -m loadtest.bench --only replica_starts --param session=<session>",
        "mai-eval convert lmms-eval chartqa data/x/test-*.parquet --out data/chartqa.jsonl",
        "mai-check-config configs/mai-1gpu.yaml --checkpoint small=configs/checkpoints/qwen3-vl-2b",
        "RAY_ADDRESS=auto flock /tmp/lock .venv/bin/python -m pytest -q tests/unit/test_cascade.py",
        "pip install -e '.[gpu,eval]'",
        "kubectl apply -f k8s/rayservice.yaml",
        "locust -f loadtest/locustfile.py --headless --users 4 --max-requests 10 --json-file out/locust",
    ]
    for text in bad:
        problems = problems_of(commands_of("test", text))
        assert problems, f"no problem found in {text!r}"
    for text in good:
        problems = problems_of(commands_of("test", text))
        assert not problems, problems
    [locust] = problems_of(
        [Command("test", ("locust", "-f", "loadtest/locustfile.py", "--json-file", "bench/results/x"))]
    )
    assert "bench/results/x: written under bench/results/" in locust
