"""Client text is read in linear time: no pattern the server or mai-batch applies can backtrack.

Two checks that complement each other: a ReDoS checker (regexploit) reads every regex written in the
packages' source, inline ones included, and finds nested or adjacent repeats that can try the ways
to split a run between them; and every compiled pattern of the modules that read client text, and
the functions that read it whole, run on worst-case text within a bound a backtracking pattern
misses by orders of magnitude (a linear one takes milliseconds).
"""

import ast
import importlib
import pkgutil
import re
import time
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("serve_app", "batch", "evaluation", "deployments", "harness")
# The modules whose patterns see client text (questions, answers, bodies, ids, dataset lines).
READERS = ("serve_app.core", "serve_app.edge", "batch", "evaluation")
N = 20_000  # characters of worst-case text per pattern call
BOUND_S = 0.5  # for every call on one pattern; linear ones take a few milliseconds


def redos_findings(paths):
    """(file, line, pattern, example) for every regex regexploit finds backtracking in ``paths``."""
    from regexploit.ast.sre import SreOpParser
    from regexploit.languages.python_node_visitor import PythonNodeVisitor
    from regexploit.redos import find

    findings = []
    for path in paths:
        visitor = PythonNodeVisitor()
        visitor.visit(ast.parse(path.read_bytes()))
        for found in visitor.patterns:
            try:
                parsed = SreOpParser().parse_sre(found.pattern, found.flags)
            except re.error:
                continue  # a string that is no regex
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for redos in find(parsed):
                    findings.append((path.name, found.lineno, found.pattern, redos.example()))
    return findings


def test_no_backtracking_regex_in_the_packages():
    paths = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    assert len(paths) > 100
    assert redos_findings(paths) == []


def test_the_checker_finds_a_backtracking_regex(tmp_path):
    (tmp_path / "bad.py").write_text('import re\nNUMBER = re.compile(r"^\\s*[+-]?\\s*[$]?\\s*\\d+$")\n')
    findings = redos_findings([tmp_path / "bad.py"])
    assert [(line, pattern) for _, line, pattern, _ in findings][:1] == [(2, r"^\s*[+-]?\s*[$]?\s*\d+$")]


def module_patterns():
    """Every compiled pattern a module of ``READERS`` holds at its top level, by name."""
    patterns = {}
    for name in READERS:
        package = importlib.import_module(name)
        modules = [package]
        if hasattr(package, "__path__"):
            modules += [
                importlib.import_module(info.name)
                for info in pkgutil.walk_packages(package.__path__, name + ".")
                if not info.name.endswith(("cli", "__main__"))
            ]
        for module in modules:
            for attribute, value in vars(module).items():
                for index, pattern in enumerate(_patterns_in(value)):
                    patterns.setdefault(f"{module.__name__}.{attribute}[{index}]", pattern)
    return patterns


def _patterns_in(value, depth=0):
    """The patterns ``value`` is or holds (in tuples, lists, dicts, two levels down)."""
    if isinstance(value, re.Pattern):
        return [value]
    if depth < 2 and isinstance(value, tuple | list):
        return [pattern for item in value for pattern in _patterns_in(item, depth + 1)]
    if depth < 2 and isinstance(value, dict):
        return [pattern for item in value.values() for pattern in _patterns_in(item, depth + 1)]
    return []


def worst_cases(pattern: re.Pattern) -> list:
    """Runs of one character (space, letter, digit, punctuation, quote, backslash, bracket), bare, and
    between a prefix and a character that makes the match fail at the very end."""
    texts = []
    for char in ' a0.,-["\\\n(:A%':
        run = char * N
        texts += [run, run + "\x00", "0" + run + "!", "[[" + run + "]", ".0" + run + "0"]
    if isinstance(pattern.pattern, bytes):
        return [text.encode() for text in texts]
    return texts


PATTERNS = module_patterns()


def test_the_readers_hold_patterns():
    assert len(PATTERNS) > 20 and "serve_app.core.answers._NUMBER[0]" in PATTERNS


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_every_pattern_is_linear_on_worst_case_text(name):
    pattern = PATTERNS[name]
    texts = worst_cases(pattern)

    def read_all() -> None:
        for text in texts:
            pattern.search(text)
            pattern.match(text)
            for _ in pattern.finditer(text):
                pass

    elapsed = timed(read_all)
    assert elapsed < BOUND_S, f"{name} ({pattern.pattern!r}) took {elapsed:.2f} s on worst-case text"


def timed(call, *args, tries: int = 3):
    """The fewest seconds ``call(*args)`` took in ``tries`` calls, whether it returned or refused its
    input: a backtracking pattern is slow every time, a machine busy with other work only sometimes."""
    fastest = float("inf")
    for _ in range(tries):
        started = time.perf_counter()
        try:
            call(*args)
        except ValueError:  # a refusal (QuestionFormatError, ...) is an answer too
            pass
        fastest = min(fastest, time.perf_counter() - started)
        if fastest < BOUND_S / 10:
            break
    return fastest


def test_a_hostile_body_costs_milliseconds_per_megabyte():
    from serve_app.config import Limits
    from serve_app.edge.body import parse_json
    from serve_app.edge.errors import RequestError

    limits = Limits()
    bodies = {
        "unterminated string after brackets": b"[" * 40 + b'"' + b'\\"' * (8 * 1024 * 1024),
        "brackets": b"[" * (16 * 1024 * 1024),
        "pairs": b"[" + b"[]," * (5 * 1024 * 1024) + b"[]]",
        "digits": b"[" + b"1" * (16 * 1024 * 1024) + b"]",
        "escapes in a string": b'{"a": "' + b"\\\\" * (8 * 1024 * 1024) + b'"}',
        "deep then flat": b"[" * 32 + b"0," * (2 * 1024 * 1024) + b"0" + b"]" * 32,
        "quotes": b'"ab' * (5 * 1024 * 1024),
    }
    for name, body in bodies.items():
        started = time.perf_counter()
        try:
            parse_json(body, limits)
        except RequestError:
            pass
        assert time.perf_counter() - started < 2.0, name


def test_question_readers_are_linear_on_long_text():
    from serve_app.core.answers import extract_answer, parse_number

    assert timed(parse_number, "1e999999999") < BOUND_S and parse_number("1e999999999") is None
    assert parse_number("2.5e3") == (2500.0, False) and parse_number("1e" + "9" * 5000) is None
    from serve_app.core.question_parsing import asks_open_generation, read_question

    text_runs = [" " * 8000, "a " * 4000, "Is it red or " * 600 + "?", "(A) " * 2000, "A. x\n" * 1600]
    for text in text_runs:
        assert timed(read_question, text, None, None, "data:,") < BOUND_S
        assert timed(parse_number, ".0" + text + "0") < BOUND_S
        assert timed(extract_answer, "[[" + text) < BOUND_S
    long = ("why " + " " * 1000 + ".\n") * 16_000  # passed through before the question's length check
    assert timed(asks_open_generation, long) < 2.0
    from serve_app.core.instructions import imperative_kind

    verbs = ["can you " * 2000, "please tell me " + " " * 8000, "Tell" + " me" * 4000, "count " * 4000]
    for text in verbs:
        assert timed(imperative_kind, text) < BOUND_S
        assert timed(asks_open_generation, "tell " + text) < BOUND_S
