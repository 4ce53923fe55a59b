"""The locks, hashed (requirements/hash_lock.py): each lock's ``-hashed.txt`` is the lock with one sha256
for every pin (the GPU image's for its platform); the Makefile installs pip and setuptools first, then
the hashed files with --require-hashes, and the project with --no-index (nothing fetched) and without
build isolation, keeping the hash-free lock as its constraints: nothing it installs is unpinned or
unhashed; each check fails on an input crafted to break it. Offline: the hashes themselves are checked
against the real files by `pip download --require-hashes` (docs/gpu-serving.md), not here."""

import importlib.util
import re
import shlex
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


hash_lock = load_module("hash_lock", ROOT / "requirements" / "hash_lock.py")
LOCKS = hash_lock.LOCKS
MAKEFILE = (ROOT / "Makefile").read_text()
CPU_LOCK = (ROOT / "requirements" / "cpu-lock.txt").read_text()
CPU_HASHED = (ROOT / "requirements" / "cpu-lock-hashed.txt").read_text()
SHA = "0123456789abcdef" * 4


@pytest.mark.parametrize("lock", LOCKS, ids=lambda lock: lock.name)
def test_each_hashed_file_is_its_lock_with_a_sha256_for_every_pin(lock):
    hashed_path = hash_lock.hashed_path(lock)
    assert hashed_path.name == lock.name.replace(".txt", "-hashed.txt")
    text = hashed_path.read_text()
    assert hash_lock.check(lock.read_text(), text, lock.name) == []
    comments, pins = hash_lock.parse_lock(lock.read_text())
    hashed = hash_lock.parse_hashed(text)
    assert len(hashed) == len(pins) >= 2
    assert {hash_lock.canonical(name): version for name, version in pins} == {
        name: version for name, (version, _) in hashed.items()
    }
    assert all(len(hashes) == 1 and re.fullmatch("[0-9a-f]{64}", hashes[0]) for _, hashes in hashed.values())
    assert text.startswith("\n".join(comments) + "\n")  # the lock's own comments come first


@pytest.mark.parametrize("lock", LOCKS, ids=lambda lock: lock.name)
def test_the_locks_themselves_stay_name_version_lists_without_hashes(lock):
    """cpu-lock.txt is also pip's constraints for `pip install -e`: a hash there turns on pip's
    hash-checking mode, which refuses an editable install; other readers take each line as name==version."""
    text = lock.read_text()
    assert "--hash" not in text
    comments, pins = hash_lock.parse_lock(text)
    assert comments and text.splitlines()[: len(comments)] == comments  # the comments stay on top
    assert all(line.startswith("#") or "==" in line for line in text.splitlines())


def test_the_cli_checks_every_hashed_file_offline(capsys):
    assert hash_lock.main(["--check"]) == 0
    assert hash_lock.main(["--check", str(ROOT / "requirements" / "cpu-lock.txt")]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("lock_change", "hashed_change", "message"),
    [
        (
            lambda t: t.replace("\nray==2.60.0\n", "\nray==2.61.0\n"),
            None,
            "ray is 2.60.0, the lock pins 2.61.0",
        ),
        (lambda t: t + "zzz-new==1.0\n", None, "zzz-new==1.0 has no line"),
        (lambda t: t.replace("\nsix==1.17.0\n", "\n"), None, "six is not in cpu-lock.txt"),
        (
            None,
            lambda t: re.sub(r"(six==1.17.0) \\\n\s+--hash=sha256:\w+", r"\1", t),
            "six==1.17.0 has no --hash",
        ),
        (None, lambda t: t.replace("# The verified CPU", "# A CPU", 1), "its header is not cpu-lock.txt's"),
    ],
)
def test_a_hashed_file_that_is_not_its_lock_fails(lock_change, hashed_change, message):
    lock = lock_change(CPU_LOCK) if lock_change else CPU_LOCK
    hashed = hashed_change(CPU_HASHED) if hashed_change else CPU_HASHED
    assert (lock, hashed) != (CPU_LOCK, CPU_HASHED)
    [problem] = hash_lock.check(lock, hashed, "cpu-lock.txt")
    assert message in problem and "run `python requirements/hash_lock.py`" in problem


def test_a_lock_line_other_than_name_version_is_refused():
    with pytest.raises(ValueError, match="line 2: 'torch>=2.14' is not name==version"):
        hash_lock.parse_lock("# comment\ntorch>=2.14\n")
    assert hash_lock.parse_lock("# a\n\nhf_transfer==0.1.9\n") == (["# a"], [("hf_transfer", "0.1.9")])


def report_item(name, version, url, sha256=SHA):
    hashes = {"sha256": sha256} if sha256 else {}
    return {
        "metadata": {"name": name, "version": version},
        "download_info": {"url": url, "archive_info": {"hashes": hashes} if hashes else {}},
    }


REPORT = {
    "pip_version": "26.3",
    "install": [
        report_item(
            "Hf-Transfer", "0.1.9", "https://x/hf_transfer-0.1.9-cp38-abi3-manylinux_2_17_x86_64.whl"
        ),
        report_item("zss", "1.2.0", "https://x/zss-1.2.0.tar.gz", sha256="f" * 64),  # an sdist
        report_item(
            "six", "1.17.0", "file:///opt/six-1.17.0-py2.py3-none-any.whl#sha256=" + SHA, sha256=None
        ),
    ],
}


def test_the_report_gives_each_file_and_its_hash():
    files = hash_lock.files_from_report(REPORT)
    assert files["hf-transfer"]["file"] == "hf_transfer-0.1.9-cp38-abi3-manylinux_2_17_x86_64.whl"
    assert files["zss"] == {
        "version": "1.2.0",
        "file": "zss-1.2.0.tar.gz",
        "url": "https://x/zss-1.2.0.tar.gz",
        "sha256": "f" * 64,
    }
    assert files["six"]["file"] == "six-1.17.0-py2.py3-none-any.whl" and files["six"]["sha256"] is None


def test_the_hashed_file_is_rendered_from_the_report_and_checks_against_its_lock():
    lock_text = "# Lock.\nhf_transfer==0.1.9\nzss==1.2.0\n"
    comments, pins = hash_lock.parse_lock(lock_text)
    files = hash_lock.files_from_report({"install": REPORT["install"][:2]})
    text = hash_lock.render(Path("x-lock.txt"), comments, pins, files, "26.3")
    assert text.startswith("# Lock.\n#\n# requirements/x-lock.txt with the sha256")
    assert "pip 26.3, https://pypi.org/simple" in text and "glibc >= 2.17" in text
    assert f"hf_transfer==0.1.9 \\\n    --hash=sha256:{SHA}\n" in text
    assert f"zss==1.2.0 \\\n    --hash=sha256:{'f' * 64}\n" in text
    assert hash_lock.check(lock_text, text, "x-lock.txt") == []
    with pytest.raises(ValueError, match="zss==1.3.0 resolved to 1.2.0"):
        hash_lock.render(Path("x-lock.txt"), comments, [("zss", "1.3.0")], files, "26.3")


@pytest.mark.parametrize(
    ("filenames", "floor"),
    [
        (["a-1-cp311-abi3-manylinux_2_34_x86_64.whl", "b-1-py3-none-any.whl", "c-1.tar.gz"], 34),
        (["d-1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl"], 17),
        (["e-1-cp311-cp311-manylinux1_x86_64.whl", "f-1-cp311-cp311-manylinux2010_x86_64.whl"], 12),
        (["b-1-py3-none-any.whl"], None),
    ],
)
def test_the_glibc_floor_is_the_newest_any_wheel_needs(filenames, floor):
    assert hash_lock.glibc_floor(filenames) == floor


def test_the_pip_command_resolves_on_pypi_without_this_machines_configuration():
    command = hash_lock.pip_command(Path("lock.txt"), Path("r.json"))
    for flag in ["--isolated", "--dry-run", "--no-deps", "--ignore-installed"]:
        assert flag in command
    assert command[command.index("--index-url") + 1] == "https://pypi.org/simple"
    assert command[command.index("--report") + 1] == "r.json" and command[-2:] == ["-r", "lock.txt"]
    assert "--platform" not in command  # the CPU locks: this machine's platform


def test_the_gpu_lock_is_hashed_for_the_images_platform():
    lock = ROOT / "requirements" / "gpu-constraints.txt"
    assert lock in LOCKS and hash_lock.target_of(lock) == hash_lock.IMAGE
    command = hash_lock.pip_command(lock, Path("r.json"), hash_lock.target_of(lock))
    assert "--only-binary=:all:" in command and command[command.index("--python-version") + 1] == "3.11"
    platforms = [command[i + 1] for i, flag in enumerate(command) if flag == "--platform"]
    assert platforms[0] == "manylinux_2_35_x86_64" and "manylinux_2_36_x86_64" not in platforms
    header = hash_lock.hashed_path(lock).read_text()
    assert "wheels for manylinux_2_35_x86_64" in header and "k8s/Dockerfile installs this file" in header


def recipe(target):
    """The Makefile's recipe lines of a target (tab-indented lines after ``target:``)."""
    lines = MAKEFILE.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        body.append(line.strip())
    return lines[start], body


VENVS = {
    "$(VENV)/.installed": ["build-lock.txt", "cpu-lock.txt", "dev-lock.txt"],
    "$(LMMS_VENV)/.installed": ["build-lock.txt", "lmms-eval-lock.txt"],
}


@pytest.mark.parametrize(("target", "locks"), VENVS.items())
def test_the_makefile_installs_each_lock_from_its_hashed_file_with_require_hashes(target, locks):
    head, body = recipe(target)
    for lock in locks:  # a change to a lock or its hashed file reinstalls
        assert (
            f"requirements/{lock}" in head and f"requirements/{lock.replace('.txt', '-hashed.txt')}" in head
        )
    # before the venv: each hashed file is its lock
    assert body[0] == "$(PYTHON) requirements/hash_lock.py --check " + " ".join(
        f"requirements/{x}" for x in locks
    )
    installs = [line for line in body if " install " in line]
    # pip and setuptools first, as the venv's own pip would otherwise install the rest
    assert installs[0].endswith("install --no-deps --require-hashes -r requirements/build-lock-hashed.txt")
    hashed = {match for line in installs for match in re.findall(r"-r (requirements/\S+)", line)}
    assert hashed == {f"requirements/{lock.replace('.txt', '-hashed.txt')}" for lock in locks}
    assert not any(f"-r requirements/{lock}" in line for lock in locks for line in body)  # never unhashed


def _pip_installs() -> list[list[str]]:
    """Every pip install of the Makefile's recipes ($(PIP), $(LMMS_PIP) or pip itself), as its words
    after ``install``."""
    return [
        shlex.split(line.split(" install ", 1)[1])
        for line in MAKEFILE.splitlines()
        if line.startswith("\t") and re.search(r"(\$\(\w*PIP\)|\bpip) install ", line)
    ]


def test_the_makefile_installs_nothing_unpinned_or_unhashed():
    installs = _pip_installs()
    assert len(installs) == 5  # two venvs: pip and setuptools, their locks, and the project in .venv
    for words in installs:
        if "--require-hashes" in words:
            # only hashed files, as they are (no dependency pip would pick itself)
            assert "--no-deps" in words
            files = [words[i + 1] for i, word in enumerate(words) if word == "-r"]
            assert files and all(file.endswith("-hashed.txt") for file in files), words
            assert [word for word in words if not word.startswith("-") and word not in files] == [], words
        else:
            # the project alone: pip may fetch nothing (--no-index), so every requirement of the extras
            # is one the hashed locks installed, and it builds with their setuptools
            assert "--no-index" in words and "--no-build-isolation" in words, words
            assert words[-2:] == ["-e", ".[cpu,dev,eval]"], words
        assert "--upgrade" not in words and "-U" not in words, words
    # whatever pip builds (the project, lmms-eval's sdists) builds with the hashed setuptools
    assert sum("--no-build-isolation" in words for words in installs) == 2


def test_the_build_system_pins_the_hashed_setuptools():
    lock = dict(hash_lock.parse_lock((ROOT / "requirements" / "build-lock.txt").read_text())[1])
    assert set(lock) == {"pip", "setuptools"}
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    assert build == {
        "requires": [f"setuptools=={lock['setuptools']}"],
        "build-backend": "setuptools.build_meta",
    }


def test_the_editable_install_is_constrained_by_the_hash_free_lock():
    _, body = recipe("$(VENV)/.installed")
    [editable] = [line for line in body if " -e " in line]
    assert (
        "install --no-index --no-build-isolation -c requirements/cpu-lock.txt -e '.[cpu,dev,eval]'"
        in editable
    )


def test_the_docs_say_what_is_hashed_and_how_to_regenerate_it():
    doc = (ROOT / "docs" / "gpu-serving.md").read_text()
    for text in [
        "requirements/cpu-lock-hashed.txt",
        "requirements/lmms-eval-lock-hashed.txt",
        "requirements/build-lock-hashed.txt",
        "requirements/dev-lock-hashed.txt",
        "requirements/gpu-constraints-hashed.txt",
        "--no-build-isolation",
        "--no-index",
        "python requirements/hash_lock.py",
        "--require-hashes",
        "requirements/gpu-constraints.txt",
        "docker buildx imagetools inspect",
    ]:
        assert text in doc, text
