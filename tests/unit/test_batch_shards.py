"""A job's input as shards (batch/shards.py): a file, a folder of .jsonl files or a glob, locally or
by a filesystem URI, sorted, and an input that names no file refused naming it."""

from pathlib import Path

import pytest

from batch.shards import NoInputError, shards_of


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    for name in ("part-2.jsonl", "part-10.jsonl", "part-1.jsonl", "notes.txt", "sub/deep.jsonl"):
        (data / name).write_text('{"a": 1}\n')
    return data


def names(shards) -> list[str]:
    return [path.rpartition("/")[2] for path in shards.paths]


def test_a_folder_is_its_jsonl_files_sorted_by_path_not_its_subfolders(folder):
    shards = shards_of(str(folder))
    assert names(shards) == ["part-1.jsonl", "part-10.jsonl", "part-2.jsonl"]
    assert shards.folder() == str(folder)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("part-?.jsonl", ["part-1.jsonl", "part-2.jsonl"]),
        ("part-[1].jsonl", ["part-1.jsonl"]),
        ("*", ["notes.txt", "part-1.jsonl", "part-10.jsonl", "part-2.jsonl"]),
        ("**/*.jsonl", ["part-1.jsonl", "part-10.jsonl", "part-2.jsonl", "deep.jsonl"]),
        ("sub/*.jsonl", ["deep.jsonl"]),
    ],
)
def test_a_glob_is_the_files_it_matches(folder, pattern, expected):
    shards = shards_of(f"{folder}/{pattern}")
    # relative image paths are read from the folder before the glob's first pattern
    base = folder / "sub" if pattern.startswith("sub/") else folder
    assert names(shards) == expected and shards.folder() == str(base)


def test_a_file_uri_reads_through_pyarrows_filesystem(folder):
    assert names(shards_of(f"file://{folder}")) == ["part-1.jsonl", "part-10.jsonl", "part-2.jsonl"]
    assert names(shards_of(f"file://{folder}/part-1*.jsonl")) == ["part-1.jsonl", "part-10.jsonl"]
    one = shards_of(f"file://{folder}/part-2.jsonl")
    assert names(one) == ["part-2.jsonl"] and one.folder() == str(folder)
    with one.open(one.paths[0]) as stream:
        assert stream.read() == b'{"a": 1}\n'


@pytest.mark.parametrize("given", ["missing.jsonl", "sub/none/*.jsonl", "*.csv", "empty"])
def test_an_input_that_names_no_file_is_refused_saying_why(folder, given):
    (folder / "empty").mkdir()
    with pytest.raises(NoInputError, match="no such file|matches no file|no .jsonl file"):
        shards_of(str(folder / given))


def test_a_shard_that_cannot_be_read_names_itself(folder):
    shards = shards_of(str(folder))
    (folder / "part-1.jsonl").unlink()
    with pytest.raises(OSError, match="part-1.jsonl"):
        shards.open(shards.paths[0])
