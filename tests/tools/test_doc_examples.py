"""The docs' examples: every bash/python block says whether and how it runs, and the `unit` ones run
here (from the repository root, with the repository's Python, no server)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_examples import DOC_FILES, ROOT, examples, parse

pytestmark = pytest.mark.unit

VENV_BIN = ROOT / ".venv" / "bin"
PYTHON = VENV_BIN / "python" if (VENV_BIN / "python").exists() else Path(sys.executable)
TIMEOUT_S = 60

UNIT = [block for block in examples() if block.marker == "unit"]


def test_the_docs_exist():
    names = {path.relative_to(ROOT).as_posix() for path in DOC_FILES}
    assert {"README.md", "CONTRIBUTING.md"} <= names
    assert any(name.startswith("docs/") for name in names)


def test_every_example_says_how_it_runs():
    problems = [problem for block in examples() if (problem := block.problem())]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("block", UNIT, ids=lambda block: block.id)
def test_a_unit_example_runs(block, tmp_path):
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    if block.language == "python":
        script = tmp_path / "example.py"
        command = [str(PYTHON), str(script)]
    else:
        script = tmp_path / "example.sh"
        command = ["bash", "-e", "-o", "pipefail", str(script)]
    script.write_text(block.code)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{block.id} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"


def test_the_parser_reads_markers_languages_and_code():
    text = "\n".join(
        [
            "# Title",
            "<!-- example: unit -->",
            "```python",
            "print('hi')",
            "```",
            "",
            "```bash",
            "make serve",
            "```",
            "<!-- example: not-run: needs GPUs -->",
            "```sh",
            "serve run configs/mai.yaml",
            "```",
            "<!-- example: not-run -->",
            "```console",
            "$ ls",
            "```",
            "<!-- example: server: expects ok -->",
            "  ```shell",
            "  curl -sf http://127.0.0.1:8000/healthz",
            "  ```",
            "```yaml",
            "a: 1",
            "```",
            "<!-- example: sometimes -->",
            "~~~python",
            "x = '```'",
            "~~~",
        ]
    )
    found = parse(text, Path("doc.md"))
    assert [(b.line, b.language, b.marker, b.reason) for b in found] == [
        (3, "python", "unit", ""),
        (7, "bash", None, ""),
        (11, "sh", "not-run", "needs GPUs"),
        (15, "console", "not-run", ""),
        (19, "shell", "server", "expects ok"),
        (22, "yaml", None, ""),
        (26, "python", "sometimes", ""),
    ]
    assert found[0].code == "print('hi')\n"
    assert found[4].code == "curl -sf http://127.0.0.1:8000/healthz\n"
    assert found[6].code == "x = '```'\n"
    assert [b.is_example for b in found] == [True, True, True, True, True, False, True]
    problems = [b.problem() for b in found]
    assert problems[0] is None and problems[2] is None and problems[4] is None and problems[5] is None
    assert "no <!-- example" in problems[1]  # the unmarked bash block is reported
    assert "must say why" in problems[3]
    assert "unknown example kind" in problems[6]
    assert found[4].expected == "ok"
    unchecked = parse("<!-- example: server -->\n```bash\ncurl x\n```\n", Path("doc.md"))[0]
    assert "says what it prints" in unchecked.problem()  # a server example asserts what it documents
