"""mai-batch on a hostile input (batch/lines.py, batch/images.py, the limits in batch/inputs.py and
batch/source.py): every line past a limit is an error line naming the limit, never a traceback, a hang
or memory without bound; lines are split in linear time; a record's image is read only from a regular
file under the image root, of bounded size."""

import asyncio
import io
import json
import os
import shutil
import threading
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batch.actor_start import StartClock
from batch.answerer import RowAnswerer, RowJob
from batch.inputs import (
    CHAT_URL,
    InputFormat,
    InputFormatError,
    LineError,
    RecordSettings,
    Request,
    first_format,
    line_too_long,
    parse_line,
    record_request,
    row_id_of,
    scan_lines,
)
from batch.lines import Overlong, numbered_raw_lines
from batch.packing import unpacked
from batch.source import line_blocks, numbered_lines
from serve_app.config import Limits

from ..images import image_bytes

OPENAI, RECORDS = InputFormat.OPENAI, InputFormat.RECORDS
LIMITS = Limits()


def openai_text(custom_id: str = "q1", content: object = "Is it red?") -> str:
    body = {"model": "mai", "messages": [{"role": "user", "content": content}]}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT_URL, "body": body})


def record_text(image: str, record_id: str = "r1") -> str:
    return json.dumps(
        {"id": record_id, "image": image, "question": "Is it red?", "answer": "yes", "metric": "exact"}
    )


def parsed(text: str, fmt: InputFormat, base: Path, **settings) -> Request | LineError:
    return parse_line(
        text, 3, fmt, base=base, settings=RecordSettings(**settings), duplicates={}, limits=LIMITS
    )


# --- JSON past the server's limits -----------------------------------------------------------------


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("fmt", [OPENAI, RECORDS])
@pytest.mark.parametrize(
    "text",
    [
        nested(1000),
        '{"custom_id": "q1", "body": ' + "[" * 1000 + "1" + "]" * 1000 + "}",
        '{"id": "r1", "image": ' + "{" * 1000,  # unclosed as well
    ],
    ids=["array", "inside-a-line", "unclosed"],
)
def test_a_line_nested_1000_deep_is_an_error_naming_the_depth_limit(tmp_path, fmt, text):
    error = parsed(text, fmt, tmp_path)
    assert isinstance(error, LineError) and error.code == "invalid_json"
    assert error.message.startswith("line 3: ")
    assert f"{LIMITS.max_json_depth} levels deep" in error.message
    assert row_id_of(text, fmt) is None
    with pytest.raises(InputFormatError, match="levels deep"):
        first_format(3, text)


def test_the_depth_limit_is_the_configs(tmp_path):
    text = openai_text(content=json.loads(nested(10)))
    assert isinstance(parsed(text, OPENAI, tmp_path), Request)
    error = parse_line(
        text,
        1,
        OPENAI,
        base=tmp_path,
        settings=RecordSettings(),
        duplicates={},
        limits=Limits(max_json_depth=8),
    )
    assert isinstance(error, LineError) and "more than 8 levels deep" in error.message


@pytest.mark.parametrize(
    ("value", "names"),
    [("1" * 70, f"over {LIMITS.max_json_number_digits}"), ("9" * 5000, "characters, over")],
)
def test_a_number_past_the_digit_limit_is_an_error_naming_it(tmp_path, value, names):
    error = parsed(openai_text().replace('"Is it red?"', value), OPENAI, tmp_path)
    assert isinstance(error, LineError) and error.code == "invalid_json" and names in error.message


def test_a_line_with_too_many_keys_is_an_error_naming_the_limit(tmp_path):
    many = {f"k{i}": i for i in range(LIMITS.max_json_keys + 1)}
    error = parsed(json.dumps({"custom_id": "q1", "body": many}), OPENAI, tmp_path)
    assert isinstance(error, LineError) and f"more than {LIMITS.max_json_keys} keys" in error.message


def test_the_depth_check_is_linear_in_the_line():
    """1 MB of escaped quotes after 40 brackets: a backtracking scan takes hours, a linear one
    milliseconds (the bound is a guard, not a benchmark)."""
    text = "[" * 40 + '"' + '\\"' * 500_000
    started = time.perf_counter()
    error = parse_line(
        text, 1, OPENAI, base=Path("."), settings=RecordSettings(), duplicates={}, limits=LIMITS
    )
    assert time.perf_counter() - started < 2.0
    assert isinstance(error, LineError) and error.code == "invalid_json"


def test_the_scan_of_ids_counts_a_deep_line_and_names_a_deep_first_one():
    lines = [(1, openai_text("a")), (2, nested(1000)), (3, openai_text("b"))]
    scan = scan_lines(lines)
    assert scan.fmt is OPENAI and scan.rows == 3 and scan.duplicates == {}
    with pytest.raises(InputFormatError, match=f"line 2 is neither.*{LIMITS.max_json_depth} levels deep"):
        scan_lines(lines[1:2] + lines[:1])


# --- lines past --max-line-bytes ---------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8, 64])
def test_a_line_past_the_limit_is_its_size_and_its_neighbours_stay_whole(chunk):
    data = b"short\n" + b"x" * 30 + b"\r\n" + b"exactly10!\nlast-is-long-too"
    assert list(numbered_raw_lines(io.BytesIO(data), 10, chunk)) == [
        (1, b"short"),
        (2, Overlong(31, 10)),  # its \r counts: only \n ends a line
        (3, b"exactly10!"),
        (4, Overlong(16, 10)),
    ]


@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=10),
    limit=st.integers(1, 20),
    chunk=st.integers(1, 9),
)
def test_every_line_is_read_whole_or_named_by_its_size(sizes, limit, chunk):
    data = b"".join(b"y" * size + b"\n" for size in sizes)
    read = list(numbered_raw_lines(io.BytesIO(data), limit, chunk))
    assert read == [
        (n, b"y" * size if size <= limit else Overlong(size, limit)) for n, size in enumerate(sizes, start=1)
    ]


class Endless:
    """A stream of one line of ``size`` bytes and its newline, made as it is read (no copy of it is
    ever whole)."""

    def __init__(self, size: int):
        self.left, self.ended = size, False

    def read(self, n: int) -> bytes:
        if self.left:
            n = min(n, self.left)
            self.left -= n
            return b"z" * n
        if not self.ended:
            self.ended = True
            return b"\n"
        return b""


def test_a_line_past_the_limit_is_never_held_whole():
    limit, chunk = 1 << 20, 64 << 10
    tracemalloc.start()
    try:
        read = list(numbered_raw_lines(Endless(64 << 20), limit, chunk))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert read == [(1, Overlong(64 << 20, limit))]
    assert peak < limit + 8 * chunk  # the pieces up to the limit, a chunk or two: not 64 MiB


def test_lines_are_split_in_linear_time():
    """An 8 MiB line in 1 KiB chunks: copying the remainder for every chunk moves ~34 GB."""
    data = b"w" * (8 << 20) + b"\nnext\n"
    started = time.perf_counter()
    read = list(numbered_raw_lines(io.BytesIO(data), 16 << 20, 1024))
    assert time.perf_counter() - started < 2.0
    assert [(n, len(raw)) for n, raw in read] == [(1, 8 << 20), (2, 4)]


def test_a_block_row_past_the_limit_has_no_text_and_its_size():
    data = io.BytesIO(b'{"a": 1}\n' + b"v" * 2000 + b"\n\n" + b'{"b": 2}\n')
    (block,) = line_blocks(data, skip=frozenset({4}), rows_per_block=8, max_line_bytes=1024)
    assert block.to_pydict() == {"line": [1, 2], "text": ['{"a": 1}', None], "size": [8, 2000]}


def test_the_driver_reads_a_line_past_the_limit_as_overlong(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(openai_text("a").encode() + b"\n" + b" " * 5000 + b"\n" + openai_text("b").encode())
    lines = list(numbered_lines(str(path), 1024))
    assert lines[1] == (2, Overlong(5000, 1024)) and len(lines) == 3
    scan = scan_lines(lines)
    assert scan.rows == 3 and scan.duplicates == {}
    with pytest.raises(InputFormatError, match="line 2 has 5000 bytes, over the limit of 1024"):
        scan_lines(lines[1:])


def test_a_line_too_long_is_an_error_naming_the_limit():
    error = line_too_long(7, Overlong(20_000_000, 16 << 20))
    assert error.code == "line_too_long"
    assert error.message == f"line 7 has 20000000 bytes, over the limit of {16 << 20} (--max-line-bytes)"


def test_the_answerer_writes_a_row_without_text_as_the_line_too_long_error():
    answerer = RowAnswerer.__new__(RowAnswerer)  # no Ray: a row past the limit never reaches a model
    answerer.job = RowJob(fmt=OPENAI, base=".", max_line_bytes=1024)
    answerer.config = SimpleNamespace(limits=LIMITS)
    answerer.ingress, answerer.node, answerer._slots = object(), "node-a", asyncio.Semaphore(1)
    answerer.clock = StartClock()
    answerer.begin()
    [group] = answerer({"line": [5], "text": [None], "size": [4096]})
    columns = unpacked(group)
    row = json.loads(columns["output"][0])
    assert row["id"] == "batch_req_5" and row["response"] is None and row["custom_id"] is None
    assert row["error"] == {
        "code": "line_too_long",
        "message": "line 5 has 4096 bytes, over the limit of 1024 (--max-line-bytes)",
    }
    assert columns["status"] == [400]


# --- a record's image path ---------------------------------------------------------------------------


@pytest.fixture
def dataset(tmp_path) -> Path:
    """The input's folder, with images/1.png, beside a folder outside it holding secret.png."""
    base = tmp_path / "data"
    (base / "images").mkdir(parents=True)
    (base / "images" / "1.png").write_bytes(image_bytes("PNG"))
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.png").write_bytes(image_bytes("PNG"))
    return base


def test_an_image_under_the_inputs_folder_is_read_even_through_a_symlink(dataset):
    (dataset / "link.png").symlink_to(dataset / "images" / "1.png")
    for image in ("images/1.png", "link.png", str(dataset / "images" / "1.png")):
        assert isinstance(parsed(record_text(image), RECORDS, dataset), Request)


@pytest.mark.parametrize("image", ["../outside/secret.png", "{outside}/secret.png", "escape.png"])
def test_an_image_out_of_the_root_is_refused_naming_the_root(dataset, image):
    (dataset / "escape.png").symlink_to(dataset.parent / "outside" / "secret.png")
    image = image.format(outside=dataset.parent / "outside")
    error = parsed(record_text(image), RECORDS, dataset)
    assert isinstance(error, LineError) and error.code == "image_outside_root" and error.param == "image"
    assert f"{image!r} is outside the image root {str(dataset)!r} (--image-root)" in error.message


def test_an_image_root_lets_in_what_it_holds_and_only_that(dataset):
    root = str(dataset.parent)
    assert isinstance(
        parsed(record_text("../outside/secret.png"), RECORDS, dataset, image_root=root), Request
    )
    error = parsed(record_text("/etc/hostname"), RECORDS, dataset, image_root=root)
    assert isinstance(error, LineError) and error.code == "image_outside_root"


def test_an_image_past_max_image_bytes_is_refused_naming_the_limit(dataset):
    size = (dataset / "images" / "1.png").stat().st_size
    error = record_request(
        record_text("images/1.png"), 2, dataset, RecordSettings(), Limits(max_image_bytes=size - 1)
    )
    assert isinstance(error, LineError) and error.code == "image_too_large"
    assert f"has {size} bytes, over the limit of {size - 1} (limits.max_image_bytes)" in error.message
    assert isinstance(
        record_request(
            record_text("images/1.png"), 2, dataset, RecordSettings(), Limits(max_image_bytes=size)
        ),
        Request,
    )


def in_time(call, seconds: float = 10.0):
    """``call()``'s result, failing (not hanging) when it blocks."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked"
    return result[0]


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_an_image_that_is_no_regular_file_is_refused_without_blocking(dataset, kind):
    if kind == "fifo":
        os.mkfifo(dataset / "pipe.png")
        image, settings = "pipe.png", {}
    elif kind == "folder":
        image, settings = "images", {}
    else:
        image, settings = "/dev/zero", {"image_root": "/dev"}
    error = in_time(lambda: parsed(record_text(image), RECORDS, dataset, **settings))
    assert isinstance(error, LineError) and error.code == "image_not_a_file"
    assert "is not a regular file" in error.message


def test_a_fifo_swapped_in_after_the_check_is_opened_without_blocking_and_refused(dataset, monkeypatch):
    os.mkfifo(dataset / "pipe.png")
    regular = os.stat(dataset / "images" / "1.png")
    real_stat = os.stat
    monkeypatch.setattr(
        os,
        "stat",
        lambda path, *a, **k: regular if str(path).endswith("pipe.png") else real_stat(path, *a, **k),
    )
    error = in_time(lambda: parsed(record_text("pipe.png"), RECORDS, dataset))
    assert isinstance(error, LineError) and error.code == "image_not_a_file"


def test_a_folder_swapped_for_a_link_after_the_check_is_refused(dataset, monkeypatch):
    """The path resolved inside the root when it was checked; by the open, a folder on its way leads
    out of it (simulated: the check sees the path as it was)."""
    outside = dataset.parent / "elsewhere"
    outside.mkdir()
    shutil.copy(dataset / "images" / "1.png", outside / "1.png")
    (dataset / "sub").symlink_to(outside)
    real = os.path.realpath
    monkeypatch.setattr(
        os.path, "realpath", lambda p, *a, **k: str(p) if str(p).endswith("sub/1.png") else real(p, *a, **k)
    )
    error = parsed(record_text("sub/1.png"), RECORDS, dataset)
    assert isinstance(error, LineError) and error.code == "image_outside_root"


@pytest.mark.parametrize("image", ["missing/9.png", "images/1.png\x00.txt"])
def test_an_image_that_cannot_be_read_is_an_image_error(dataset, image):
    error = parsed(record_text(image), RECORDS, dataset)
    assert isinstance(error, LineError) and error.code == "invalid_image" and error.param == "image"
