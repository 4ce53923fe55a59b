"""Vendors, verbatim, how lmms-eval builds the question text of the six tasks of the paper's datasets
(POPE, ChartQA, InfoVQA, MMBench, MMMU, RealWorldQA) and of the two-image task lmms_eval_bench runs
(LLaVA-Interleave Bench's in-domain task, evaluation/lmms_eval_pairs.py): their ``doc_to_text``
functions, the helpers those call, and the prompt settings of the tasks' YAML files (the two-image
task's YAML file also as its text, which evaluation/lmms_eval_pairs.py rewrites).

``python -m tests.lmms_eval_vendor PATH`` prints the module ``tests/lmms_eval_prompts.py`` from an
lmms-eval wheel or an unpacked package (the folder holding ``lmms_eval/``). The unit tests feed the
vendored functions documents (tests/unit/test_lmms_eval_prompts.py); an integration test downloads the
wheel of ``VERSION`` and checks the committed module equals what this script makes of it
(tests/integration/test_lmms_eval_vendored.py).
"""

from __future__ import annotations

import ast
import sys
import textwrap
import zipfile
from pathlib import Path

import yaml

VERSION = "0.7.3"
TASKS = "lmms_eval/tasks/"

# file -> the functions taken from it, in an order where each is defined before it is called.
FUNCTIONS: dict[str, tuple[str, ...]] = {
    "pope/utils.py": ("pope_doc_to_text",),
    "chartqa/utils.py": ("chartqa_doc_to_text",),
    "infovqa/utils.py": ("infovqa_doc_to_text",),
    "mmbench/en_utils.py": ("mmbench_doc_to_text",),
    "mmmu/utils.py": (
        "replace_images_tokens",
        "parse_options",
        "construct_prompt",
        "mmmu_doc_to_text",
        "mmmu_doc_to_text_qwen3vl",
    ),
    "realworldqa/utils.py": ("realworldqa_doc_to_text",),
    "llava_interleave_bench/utils.py": ("doc_to_text",),
}
CONSTANTS: dict[str, tuple[str, ...]] = {"realworldqa/utils.py": ("REPLACE_PROMPT",)}
METHOD = ("mmbench/mmbench_evals.py", "MMBench_Evaluator", "create_options_prompt")
# name in the vendored module -> the YAML file it is read from; the tasks' own files, as lmms-eval
# reads them (lines with "!function" dropped).
YAMLS: dict[str, str] = {
    "POPE_YAML": "pope/pope.yaml",
    "CHARTQA_YAML": "chartqa/chartqa.yaml",
    "INFOVQA_YAML": "infovqa/_default_template_infovqa_yaml",
    "MMBENCH_EN_YAML": "mmbench/_default_template_mmbench_en_yaml",
    "MMBENCH_YAML": "mmbench/mmbench.yaml",
    "MMMU_VAL_YAML": "mmmu/mmmu_val.yaml",
    "MMMU_TEMPLATE_YAML": "mmmu/_default_template_yaml",
    "REALWORLDQA_YAML": "realworldqa/realworldqa.yaml",
    "INTERLEAVE_IN_DOMAIN_YAML": "llava_interleave_bench/in_domain.yaml",
}
# name in the vendored module -> a YAML file kept as its text, as it is in lmms-eval.
TEXTS: dict[str, str] = {"INTERLEAVE_IN_DOMAIN_TEXT": "llava_interleave_bench/in_domain.yaml"}

HEADER = '''"""How lmms-eval {version} builds the question text of POPE, ChartQA, InfoVQA, MMBench, MMMU,
RealWorldQA and LLaVA-Interleave Bench (in-domain), vendored verbatim by tests/lmms_eval_vendor.py: do
not edit, regenerate.

The functions are copied as they are in lmms-eval; ``config`` and ``mmbench_evaluator`` are the module
globals they read, built from the tasks' own YAML files as lmms-eval builds them.
"""

# ruff: noqa
# mypy: ignore-errors

import ast

import pandas as pd

VERSION = {version!r}
'''


def read_sources(path: Path) -> dict[str, str]:
    """The files this module reads, from an lmms-eval wheel or an unpacked package, by their path
    under ``lmms_eval/tasks/``."""
    wanted = {*FUNCTIONS, *CONSTANTS, METHOD[0], *YAMLS.values(), *TEXTS.values()}
    if path.is_file():
        with zipfile.ZipFile(path) as wheel:
            return {name: wheel.read(TASKS + name).decode() for name in wanted}
    return {name: (path / TASKS / name).read_text() for name in wanted}


def _definitions(source: str) -> dict[str, ast.AST]:
    return {
        node.name if not isinstance(node, ast.Assign) else node.targets[0].id: node  # type: ignore[attr-defined]
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef | ast.ClassDef)
        or (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name))
    }


def _segment(source: str, node: ast.AST) -> str:
    segment = ast.get_source_segment(source, node, padded=True)
    assert segment is not None
    return textwrap.dedent(segment)


def _yaml(text: str) -> dict:
    return yaml.safe_load("".join(line for line in text.splitlines(True) if "!function" not in line))


def vendored_module(sources: dict[str, str]) -> str:
    parts = [HEADER.format(version=VERSION)]
    for name, file in YAMLS.items():
        parts.append(f"# {TASKS}{file}\n{name} = {_yaml(sources[file])!r}\n")
    for name, file in TEXTS.items():
        parts.append(f"# {TASKS}{file}, its text\n{name} = {sources[file]!r}\n")
    for file, names in CONSTANTS.items():
        definitions = _definitions(sources[file])
        parts += [f"# {TASKS}{file}\n{_segment(sources[file], definitions[name])}\n" for name in names]
    file, cls, method = METHOD
    [node] = [
        child
        for child in definitions_of_class(sources[file], cls)
        if isinstance(child, ast.FunctionDef) and child.name == method
    ]
    parts.append(
        f"# {TASKS}{file}: {cls}, the constructor reduced to the prompt it keeps\n"
        f"class {cls}:\n    def __init__(self, sys_prompt):\n        self.sys_prompt = sys_prompt\n\n"
        + textwrap.indent(_segment(sources[file], node), "    ")
        + "\n"
    )
    parts.append(
        "# lmms_eval/tasks/mmbench/en_utils.py and mmmu/utils.py: their module globals\n"
        'mmbench_evaluator = MMBench_Evaluator(sys_prompt=MMBENCH_YAML["metadata"]["sys_prompt"])\n'
        "config = MMMU_TEMPLATE_YAML\n"
    )
    for file, names in FUNCTIONS.items():
        definitions = _definitions(sources[file])
        parts += [f"# {TASKS}{file}\n{_segment(sources[file], definitions[name])}\n" for name in names]
    return "\n\n".join(part.rstrip("\n") for part in parts) + "\n"


def definitions_of_class(source: str, cls: str) -> list[ast.stmt]:
    node = _definitions(source)[cls]
    assert isinstance(node, ast.ClassDef)
    return node.body


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.lmms_eval_vendor LMMS_EVAL_WHEEL_OR_PACKAGE_DIR")
    sys.stdout.write(vendored_module(read_sources(Path(sys.argv[1]))))


if __name__ == "__main__":
    main()
