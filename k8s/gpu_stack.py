"""The GPU stack, read from package metadata alone: what `pip install '.[gpu]'` resolves to on the serving
image's Python and platform, and whether it, pyproject's pins and k8s/Dockerfile agree on one CUDA major.

    python k8s/gpu_stack.py            # resolve on PyPI, (re)write the resolution and constraints, check
    python k8s/gpu_stack.py --check    # resolve on PyPI and check; the committed files are left alone
    python k8s/gpu_stack.py --offline  # check the committed files against pyproject.toml and the Dockerfile

No wheel is downloaded and no GPU is needed: pip's dry run reads each wheel's metadata (`--report`). The
checks, each a pure function of the report's summary, pyproject.toml and the Dockerfile:

- torch's and vLLM's own requirements name exactly one CUDA major, each at least one (a name such as
  nvidia-nccl-cu13, an extra such as nvidia-cutlass-dsl[cu13], or the resolved cuda-toolkit / cuda-bindings);
- the base image's CUDA major (`FROM rayproject/ray:2.60.0-py311-cu130`, build arguments at their
  defaults, a digest allowed: k8s/gpu_image.py) is that one, its Python is the one resolved for, and
  its Ray is the gpu extra's;
- the Dockerfile installs pip and setuptools, then every package of the resolution, each from its hashed
  file (--no-deps --require-hashes), then the gpu extra with nothing fetched (--no-index) and
  requirements/gpu-constraints.txt as pip's constraints; that file is every package of the committed
  resolution at its version (k8s/gpu_image.py), and requirements/gpu-constraints-hashed.txt is it with
  the sha256 of each file pip installs on the image's platform (requirements/hash_lock.py, which
  `python k8s/gpu_stack.py` runs after writing the constraints);
- the gpu extra pins torch and torchvision (and torchaudio, if it names it) to exactly what vLLM requires;
- the gpu extra's Ray is the cpu extra's;
- the summary was resolved from the gpu extra as it stands, and resolved each pin to its version;
- no resolved package is named for another CUDA major, except those in TOLERATED (each with its reason);
- the driver minimum the replicas check (deployments/driver.py) is for that CUDA major, and FlashInfer's
  kernel packages are in the image at flashinfer-python's version or not served at it (k8s/gpu_runtime.py).

Beside the checks it reports what Ray's llm extra would ask for (k8s/ray_llm_pins.py): the image runs
ray[serve] with the gpu extra's vLLM, not ray[llm]'s pin (docs/gpu-serving.md says why). The summary keeps
that report (``ray_llm_extra``), and a check holds it to what Ray's requirements give.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_image import (
    CONSTRAINTS_PATH,
    check_constraints,
    check_image_install,
    constraints_text,
    expand,
    split_digest,
)
from gpu_runtime import check_driver_minimum, check_flashinfer_kernels, flashinfer_kernels, pip_index_versions
from gpu_runtime import report_lines as runtime_lines
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from ray_llm_pins import check_ray_llm_extra, ray_llm_extra, report_lines  # k8s/, beside this file

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "requirements") not in sys.path:  # requirements/hash_lock.py, a script like this one
    sys.path.append(str(ROOT / "requirements"))
import hash_lock  # noqa: E402

PYPROJECT = ROOT / "pyproject.toml"
DOCKERFILE = ROOT / "k8s" / "Dockerfile"
REPORT = ROOT / "requirements" / "gpu-resolution.json"
CONSTRAINTS = ROOT / CONSTRAINTS_PATH
INDEX = "https://pypi.org/simple"
# Ray's CUDA images are built FROM nvidia/cuda:<version>-devel-ubuntu22.04 (Ray's
# docker/base-deps/cuda.wanda.yaml): glibc 2.35, so a wheel tagged up to manylinux_2_35 installs there.
# One list for the resolution here and the hashes of its files (requirements/hash_lock.py's IMAGE).
GLIBC_MINOR = hash_lock.IMAGE_GLIBC_MINOR
PLATFORMS = list(hash_lock.IMAGE_PLATFORMS)
STACK = ("torch", "vllm")
TORCH_FAMILY = ("torch", "torchvision", "torchaudio")
REQUIRED_TORCH_PINS = ("torch", "torchvision")
# Packages whose own version is the CUDA version they are for.
CUDA_VERSIONED = ("cuda-toolkit", "cuda-bindings", "cuda-python")
TOLERATED = {
    "nvidia-cutlass-dsl-libs-cu12": "nvidia-cutlass-dsl 4.8.0 requires it whatever its extras; its [cu13] "
    "extra, which vLLM asks for, adds nvidia-cutlass-dsl-libs-cu13",
}
_SUFFIX = re.compile(r"-cu(?:da)?(\d+)x?$")  # nvidia-nccl-cu13, nixl-cu13, cupy-cuda12x
_EXTRA = re.compile(r"^cu(\d+)$")  # nvidia-cutlass-dsl[cu13]
_TAG = re.compile(r"^(?P<image>[\w./-]+):(?P<ray>\d+\.\d+\.\d+)-py3(?P<py>\d+)-cu(?P<cuda>\d{3})$")


@dataclass(frozen=True)
class BaseImage:
    """The Dockerfile's FROM image, read off a Ray image tag: ``<image>:<ray>-py3XX-cuXYZ[@sha256:...]``."""

    tag: str
    ray: str
    python: str  # "3.11"
    cuda: str  # "13.0"
    digest: str | None = None  # "sha256:...", when the FROM line (or its build argument) pins one

    @property
    def cuda_major(self) -> int:
        return int(self.cuda.split(".")[0])


@dataclass(frozen=True)
class CudaEvidence:
    """One requirement of torch or vLLM that names a CUDA major."""

    package: str
    requirement: str
    majors: frozenset[int]


def base_image(dockerfile: str) -> BaseImage:
    froms = re.findall(r"^FROM\s+(\S+)", dockerfile, re.M)
    if len(froms) != 1:
        raise ValueError(f"k8s/Dockerfile: expected one FROM line, found {len(froms)}: {froms}")
    image, digest = split_digest(expand(froms[0], dockerfile))
    match = _TAG.match(image)
    if match is None:
        raise ValueError(
            f"k8s/Dockerfile: FROM {froms[0]} is not <image>:<ray>-py3XX-cuXYZ "
            "(e.g. rayproject/ray:2.60.0-py311-cu130)"
        )
    cuda = match["cuda"]
    return BaseImage(image, match["ray"], f"3.{match['py']}", f"{int(cuda[:-1])}.{cuda[-1]}", digest)


def exact_pins(requirements: list[str]) -> dict[str, str]:
    """name -> version for each requirement pinned with ``==`` (others are left out)."""
    pins: dict[str, str] = {}
    for text in requirements:
        requirement = Requirement(text)
        specs = list(requirement.specifier)
        if len(specs) == 1 and specs[0].operator == "==":
            pins[canonicalize_name(requirement.name)] = specs[0].version
    return pins


def gpu_requirements(pyproject: Mapping[str, Any]) -> list[str]:
    """What `pip install '.[gpu]'` asks for: the project's dependencies and its gpu extra."""
    project = pyproject["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["gpu"]]


def target_environment(python: str) -> dict[str, str]:
    """The marker environment of the serving image (Linux x86-64, CPython ``python``), no extra."""
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }


def active(requirement: Requirement, python: str) -> bool:
    return requirement.marker is None or requirement.marker.evaluate(target_environment(python))


def name_major(name: str) -> int | None:
    match = _SUFFIX.search(canonicalize_name(name))
    return int(match[1]) if match else None


def cuda_majors(requirement: Requirement, resolved: Mapping[str, str]) -> frozenset[int]:
    """The CUDA majors a requirement names: its name's suffix, its extras, or (cuda-toolkit and the
    like, whose version is the CUDA version) the major of the version it resolved to."""
    name = canonicalize_name(requirement.name)
    majors = {major} if (major := name_major(name)) is not None else set()
    majors |= {int(match[1]) for extra in requirement.extras if (match := _EXTRA.match(extra))}
    if name in CUDA_VERSIONED and name in resolved:
        majors.add(int(resolved[name].split(".")[0]))
    return frozenset(majors)


def cuda_evidence(summary: Mapping[str, Any]) -> list[CudaEvidence]:
    evidence = []
    for package in STACK:
        for text in summary["requires_dist"][package]:
            requirement = Requirement(text)
            if active(requirement, summary["python"]):
                majors = cuda_majors(requirement, summary["packages"])
                if majors:
                    evidence.append(CudaEvidence(package, text, majors))
    return evidence


def stack_majors(summary: Mapping[str, Any]) -> set[int]:
    return {major for item in cuda_evidence(summary) for major in item.majors}


def summarize(report: Mapping[str, Any], requirements: list[str], python: str) -> dict[str, Any]:
    """The committed form of pip's report: what was asked, for what, and what it resolved to."""
    packages: dict[str, str] = {}
    requires = {}
    ray_requires: list[str] = []
    for item in report["install"]:
        name = canonicalize_name(item["metadata"]["name"])
        packages[name] = item["metadata"]["version"]
        if name in STACK:
            requires[name] = list(item["metadata"].get("requires_dist") or [])
        if name == "ray":
            ray_requires = list(item["metadata"].get("requires_dist") or [])
    missing = [name for name in STACK if name not in requires]
    if missing:
        raise ValueError(f"pip's report resolved no {', '.join(missing)}")
    return {
        "command": "python k8s/gpu_stack.py",
        "pip": report.get("pip_version"),
        "index": INDEX,
        "python": python,
        "platforms": PLATFORMS,
        "requirements": requirements,
        "packages": dict(sorted(packages.items())),
        "requires_dist": requires,
        "ray_llm_extra": ray_llm_extra(ray_requires, packages, target_environment(python)),
    }


def check_one_cuda_major(summary: Mapping[str, Any]) -> list[str]:
    evidence = cuda_evidence(summary)
    problems = [
        f"{package} {summary['packages'][package]} names no CUDA major in its requirements (a CPU build?)"
        for package in STACK
        if not any(item.package == package for item in evidence)
    ]
    majors = stack_majors(summary)
    if len(majors) > 1:
        found = "; ".join(f"{item.package}: {item.requirement} -> {sorted(item.majors)}" for item in evidence)
        problems.append(f"torch and vLLM require more than one CUDA major {sorted(majors)}: {found}")
    return problems


def check_base_image(summary: Mapping[str, Any], base: BaseImage, gpu_pins: Mapping[str, str]) -> list[str]:
    problems = []
    majors = stack_majors(summary)
    if len(majors) == 1 and base.cuda_major not in majors:
        problems.append(
            f"k8s/Dockerfile's base image {base.tag} is CUDA {base.cuda} (major {base.cuda_major}), "
            f"but torch and vLLM require CUDA major {majors.pop()}"
        )
    if base.python != summary["python"]:
        problems.append(
            f"k8s/Dockerfile's base image {base.tag} runs Python {base.python}, "
            f"the resolution is for Python {summary['python']}"
        )
    if base.ray != gpu_pins.get("ray"):
        problems.append(
            f"k8s/Dockerfile's base image {base.tag} is Ray {base.ray}, "
            f"the gpu extra pins ray=={gpu_pins.get('ray')}"
        )
    return problems


def check_torch_pins(summary: Mapping[str, Any], gpu_pins: Mapping[str, str]) -> list[str]:
    vllm = f"vllm {summary['packages']['vllm']}"
    wanted = {
        name: version
        for name, version in exact_pins(
            [
                text
                for text in summary["requires_dist"]["vllm"]
                if active(Requirement(text), summary["python"])
            ]
        ).items()
        if name in TORCH_FAMILY
    }
    problems = []
    for name in REQUIRED_TORCH_PINS:
        if name not in gpu_pins:
            problems.append(f"the gpu extra does not pin {name}; {vllm} requires {name}=={wanted.get(name)}")
    for name in TORCH_FAMILY:
        if name in gpu_pins and gpu_pins[name] != wanted.get(name):
            problems.append(
                f"the gpu extra pins {name}=={gpu_pins[name]}, {vllm} requires {name}=={wanted.get(name)}"
            )
    return problems


def check_ray_pins(pyproject: Mapping[str, Any]) -> list[str]:
    extras = pyproject["project"]["optional-dependencies"]
    gpu, cpu = exact_pins(extras["gpu"]).get("ray"), exact_pins(extras["cpu"]).get("ray")
    return (
        [] if gpu is not None and gpu == cpu else [f"the gpu extra pins ray=={gpu}, the cpu extra ray=={cpu}"]
    )


def check_summary_current(summary: Mapping[str, Any], pyproject: Mapping[str, Any]) -> list[str]:
    requirements = gpu_requirements(pyproject)
    if summary["requirements"] != requirements:
        return [
            f"{REPORT.relative_to(ROOT)} was resolved from {summary['requirements']}, the gpu extra now asks "
            f"for {requirements}: run `python k8s/gpu_stack.py`"
        ]
    return [
        f"{REPORT.relative_to(ROOT)} resolved {name} to {summary['packages'].get(name)}, the pin is {version}"
        for name, version in exact_pins(requirements).items()
        if summary["packages"].get(name) != version
    ]


def check_other_majors(summary: Mapping[str, Any]) -> list[str]:
    majors = stack_majors(summary)
    if len(majors) != 1:
        return []  # check_one_cuda_major says why
    [major] = majors
    return [
        f"{name} {version} is for CUDA {name_major(name)}, the stack is CUDA {major}"
        for name, version in summary["packages"].items()
        if name_major(name) not in (None, major) and name not in TOLERATED
    ]


def check_all(summary: Mapping[str, Any], pyproject: Mapping[str, Any], dockerfile: str) -> list[str]:
    gpu_pins = exact_pins(pyproject["project"]["optional-dependencies"]["gpu"])
    problems = check_summary_current(summary, pyproject) + check_one_cuda_major(summary)
    problems += check_image_install(dockerfile)
    try:
        problems += check_base_image(summary, base_image(dockerfile), gpu_pins)
    except ValueError as error:
        problems.append(str(error))
    return (
        problems
        + check_torch_pins(summary, gpu_pins)
        + check_ray_pins(pyproject)
        + check_other_majors(summary)
        + check_ray_llm_extra(summary)
        + check_driver_minimum(stack_majors(summary), dockerfile)
        + check_flashinfer_kernels(summary, INDEX)
    )


def check_hashed(constraints: Path) -> list[str]:
    """requirements/gpu-constraints-hashed.txt is the constraints' pins, each with its sha256."""
    hashed = hash_lock.hashed_path(constraints)
    if not constraints.exists():
        return []  # check_constraints says so
    if not hashed.exists():
        return [f"{hashed.name} is missing: run `python k8s/gpu_stack.py`"]
    return [
        f"{hashed.name}: {problem}"
        for problem in hash_lock.check(constraints.read_text(), hashed.read_text(), constraints.name)
    ]


def pip_command(requirements: list[str], python: str, report: Path) -> list[str]:
    # --isolated: this machine's pip configuration (extra indexes, find-links, constraints) stays out;
    # the answer is PyPI's metadata for the image's platform, whoever runs it. Where an index serves
    # no metadata file (PEP 658), pip downloads the wheel to read it: --no-cache-dir keeps those
    # gigabytes off the disk, and --resume-retries lets a cut download go on where it stopped.
    platforms = [option for platform in PLATFORMS for option in ("--platform", platform)]
    return [
        sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "install", "--quiet",
        "--dry-run", "--ignore-installed", "--only-binary=:all:", "--no-cache-dir", "--resume-retries", "20",
        "--index-url", INDEX,
        "--python-version", python, *platforms, "--report", str(report), *requirements,
    ]  # fmt: skip


def resolve(requirements: list[str], python: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        subprocess.run(pip_command(requirements, python, report), check=True, timeout=900)
        summary = summarize(json.loads(report.read_text()), requirements, python)
    # FlashInfer's kernel packages: what the index serves for the flashinfer-python resolved (gpu_runtime.py)
    summary["flashinfer_kernels"] = flashinfer_kernels(
        summary["packages"], lambda n: pip_index_versions(n, INDEX)
    )
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check", action="store_true", help="resolve and check; leave the committed file alone"
    )
    mode.add_argument("--offline", action="store_true", help="check the committed file; no network")
    args = parser.parse_args(argv)
    pyproject = tomllib.loads(PYPROJECT.read_text())
    dockerfile = DOCKERFILE.read_text()
    if args.offline:
        summary = json.loads(REPORT.read_text())
    else:
        summary = resolve(gpu_requirements(pyproject), base_image(dockerfile).python)
        if args.check:
            committed = json.loads(REPORT.read_text())["packages"] if REPORT.exists() else {}
            for name in sorted(set(committed) | set(summary["packages"])):
                if committed.get(name) != summary["packages"].get(name):
                    print(
                        f"note: {name} {committed.get(name)} -> {summary['packages'].get(name)}",
                        file=sys.stderr,
                    )
        else:
            REPORT.write_text(json.dumps(summary, indent=1) + "\n")
            CONSTRAINTS.write_text(constraints_text(summary))
            hashed = hash_lock.write_hashed(CONSTRAINTS)  # the same pins, each file's sha256 for the image
            print(
                f"wrote {REPORT.relative_to(ROOT)}, {CONSTRAINTS_PATH} and {hashed.relative_to(ROOT)}",
                file=sys.stderr,
            )
    problems = check_all(summary, pyproject, dockerfile)
    # the committed constraints are the committed resolution (after a rewrite, both are new)
    committed = json.loads(REPORT.read_text()) if REPORT.exists() else summary
    problems += check_constraints(committed, CONSTRAINTS.read_text() if CONSTRAINTS.exists() else None)
    problems += check_hashed(CONSTRAINTS)
    for problem in problems:
        print(f"gpu stack: {problem}", file=sys.stderr)
    if not problems:
        base = base_image(dockerfile)
        print(
            f"gpu stack: CUDA {sorted(stack_majors(summary))} for torch {summary['packages']['torch']} and "
            f"vllm {summary['packages']['vllm']}, base image {base.tag}"
            f"{'@' + base.digest if base.digest else ' (by tag, no digest)'}, "
            f"{len(summary['packages'])} packages in {CONSTRAINTS_PATH}: consistent",
            file=sys.stderr,
        )
    for line in report_lines(summary["ray_llm_extra"]) if "ray_llm_extra" in summary else []:
        print(f"gpu stack: {line}", file=sys.stderr)
    for line in runtime_lines(summary.get("flashinfer_kernels"), INDEX):
        print(f"gpu stack: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
