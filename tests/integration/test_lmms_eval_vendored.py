"""The vendored prompt builders (tests/lmms_eval_prompts.py) are lmms-eval's own: the wheel of the
pinned version, downloaded from the package index, gives the same module byte for byte."""

import subprocess
import sys
from pathlib import Path

from tests.lmms_eval_vendor import VERSION, read_sources, vendored_module

VENDORED = Path(__file__).resolve().parents[1] / "lmms_eval_prompts.py"


def test_the_vendored_prompt_builders_equal_the_packages(tmp_path):
    download = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    subprocess.run([*download, f"lmms-eval=={VERSION}", "--dest", str(tmp_path)], check=True, timeout=600)
    [wheel] = tmp_path.glob("lmms_eval-*.whl")
    assert vendored_module(read_sources(wheel)) == VENDORED.read_text()
