"""mai-batch's input side (batch/inputs.py, batch/source.py): the format a line is in, the request a line
stands for or the error naming its fault, the one pass over the ids (rows, duplicates), and the lines
numbered as the dataset numbers them."""

import base64
import io
import json
import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from batch.inputs import (
    CHAT_URL,
    InputFormat,
    InputFormatError,
    LineError,
    RecordSettings,
    Request,
    first_format,
    openai_request,
    parse_line,
    record_request,
    scan_lines,
)
from batch.lines import numbered_raw_lines
from batch.outputs import line_of, openai_error_line, openai_reply_line
from batch.source import numbered_lines
from evaluation.records import EvalRecord
from evaluation.requests import chat_body, request_id

from ..images import data_url, image_bytes

OPENAI, RECORDS = InputFormat.OPENAI, InputFormat.RECORDS
SERVED_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")  # what the ingress takes as x-request-id


def openai_line(custom_id="q1", **fields) -> dict:
    body = {"model": "mai", "messages": [{"role": "user", "content": "Is it red?"}]}
    return {"custom_id": custom_id, "method": "POST", "url": CHAT_URL, "body": body} | fields


def record_line(**fields) -> dict:
    record = {
        "id": "r1",
        "image": "images/1.png",
        "question": "Is it red?",
        "answer": "yes",
        "metric": "exact",
    }
    return record | fields


def image_url_of(body: dict) -> str:
    (part,) = [p for p in body["messages"][0]["content"] if p["type"] == "image_url"]
    return part["image_url"]["url"]


# --- first_format ------------------------------------------------------------------------------------


def test_the_format_is_read_from_a_line_of_either_kind():
    assert first_format(1, json.dumps(openai_line())) is OPENAI
    assert first_format(1, json.dumps({"body": {}})) is OPENAI  # a bad request line is still a request line
    assert first_format(1, json.dumps(record_line())) is RECORDS


@pytest.mark.parametrize(
    "text",
    ["{not json", "[1, 2]", '"a string"', "", json.dumps({"id": "r1", "question": "q"}), '{"prompt": "x"}'],
)
def test_a_line_of_neither_kind_has_no_format(text):
    with pytest.raises(InputFormatError, match="line 1 is neither"):
        first_format(1, text)


# --- openai_request ----------------------------------------------------------------------------------


def test_a_good_openai_line_is_its_body_under_its_custom_id():
    line = openai_line("q-7", body={"model": "mai-large", "messages": [], "max_tokens": 9})
    request = openai_request(json.dumps(line), 3)
    assert isinstance(request, Request)
    assert request.row_id == "q-7" and request.body == line["body"] and request.record is None
    assert request.request_id == request_id("mai-large", "q-7", source="batch")


def test_method_and_url_default_to_a_chat_completion_post():
    request = openai_request(json.dumps({"custom_id": "q1", "body": {"model": "mai"}}), 1)
    assert isinstance(request, Request) and request.body == {"model": "mai"}


@pytest.mark.parametrize(
    ("line", "param", "code", "names"),
    [
        ("{not json", None, "invalid_json", "line 7: the request body is not valid JSON"),
        ("[1, 2]", None, "invalid_json", "line 7 is not a JSON object"),
        (
            json.dumps({k: v for k, v in openai_line().items() if k != "custom_id"}),
            "custom_id",
            None,
            "custom_id",
        ),
        (json.dumps(openai_line("")), "custom_id", None, "line 7 has no custom_id"),
        (json.dumps(openai_line(5)), "custom_id", None, "line 7 has no custom_id"),
        (json.dumps(openai_line(method="GET")), "method", None, "'GET'"),
        (json.dumps(openai_line(url="/v1/embeddings")), "url", "unsupported_url", "/v1/embeddings"),
        (
            json.dumps({k: v for k, v in openai_line().items() if k != "body"}),
            "body",
            None,
            "line 7 has no body",
        ),
        (json.dumps(openai_line(body="Is it red?")), "body", None, "line 7 has no body"),
        (json.dumps(openai_line(body={"model": "mai", "stream": True})), "stream", None, "stream"),
    ],
    ids=[
        "not-json",
        "not-object",
        "no-id",
        "empty-id",
        "int-id",
        "get",
        "url",
        "no-body",
        "str-body",
        "stream",
    ],
)
def test_a_bad_openai_line_is_an_error_naming_its_fault(line, param, code, names):
    error = openai_request(line, 7)
    assert isinstance(error, LineError)
    assert names in error.message and error.param == param
    assert error.code == (code or "invalid_request")
    assert error.body()["error"] == {
        "message": error.message,
        "type": "invalid_request_error",
        "param": param,
        "code": error.code,
    }


def test_stream_false_is_served():
    assert isinstance(
        openai_request(json.dumps(openai_line(body={"model": "m", "stream": False})), 1), Request
    )


@given(custom_id=st.text(min_size=1), model=st.text(), line=st.integers(1, 10**9))
def test_any_custom_id_comes_back_in_its_output_line(custom_id, model, line):
    request = openai_request(json.dumps(openai_line(custom_id, body={"model": model})), line)
    assert isinstance(request, Request)
    assert SERVED_REQUEST_ID.match(request.request_id)
    for row in (
        openai_reply_line(line, request, 200, {"object": "chat.completion"}),
        openai_error_line(line, request.row_id, LineError("refused")),
    ):
        written = json.loads(json.dumps(row))
        assert written["custom_id"] == custom_id and line_of(written, OPENAI) == line


# --- record_request ----------------------------------------------------------------------------------


def test_a_record_is_the_request_mai_eval_sends_with_its_image_read_from_the_dataset_folder(tmp_path):
    png = image_bytes("PNG", color=(10, 200, 30))
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "1.png").write_bytes(png)
    fields = record_line(choices=["red", "blue"], answer="red", answer_type="choice", metric="option")
    settings = RecordSettings(policy="transfer", options=(("transfer_selector", "attention"),), max_tokens=32)
    request = record_request(json.dumps(fields), 4, tmp_path, settings)
    assert isinstance(request, Request)
    image = "data:image/png;base64," + base64.b64encode(png).decode()
    record = EvalRecord.model_validate(fields)
    expected = chat_body(record, image, "transfer", max_tokens=32, options={"transfer_selector": "attention"})
    assert request.body == expected and image_url_of(request.body) == image
    assert request.row_id == "r1" and request.record == record
    assert request.request_id == request_id("transfer", "r1", source="batch")


def test_a_record_whose_image_is_a_data_url_keeps_it(tmp_path):
    image = data_url("JPEG")
    request = record_request(json.dumps(record_line(image=image)), 1, tmp_path, RecordSettings())
    assert isinstance(request, Request) and image_url_of(request.body) == image
    assert request.body["model"] == "mai"


def test_a_record_without_its_question_is_an_error_naming_the_field(tmp_path):
    fields = {k: v for k, v in record_line(image=data_url()).items() if k != "question"}
    error = record_request(json.dumps(fields), 4, tmp_path, RecordSettings())
    assert isinstance(error, LineError)
    assert error.message.startswith("line 4: ") and "question" in error.message and error.param == "question"


def test_a_record_whose_image_cannot_be_read_is_an_image_error(tmp_path):
    error = record_request(json.dumps(record_line(image="missing/9.png")), 2, tmp_path, RecordSettings())
    assert isinstance(error, LineError)
    assert error.code == "invalid_image" and error.param == "image"
    assert error.message.startswith("line 2: ") and "missing/9.png" in error.message


def test_a_record_whose_file_is_no_image_is_an_image_error(tmp_path):
    (tmp_path / "notes.png").write_text("not an image at all")
    error = record_request(json.dumps(record_line(image="notes.png")), 2, tmp_path, RecordSettings())
    assert isinstance(error, LineError)
    assert error.code == "invalid_image" and "notes.png" in error.message and "PNG" in error.message


def conversation_line(**fields) -> dict:
    turns = [
        {"role": "user", "text": "What is in the chart?", "images": ["images/0.png"]},
        {"role": "assistant", "text": "Sales by month."},
    ]
    return record_line(images=["images/2.png", data_url("JPEG")], turns=turns) | fields


def test_every_image_of_a_conversation_record_is_read_as_its_image_is(tmp_path):
    (tmp_path / "images").mkdir()
    pngs = {name: image_bytes("PNG", color=(10 * n, 200, 30)) for n, name in enumerate(("0", "1", "2"))}
    for name, data in pngs.items():
        (tmp_path / "images" / f"{name}.png").write_bytes(data)
    fields = conversation_line()
    request = record_request(json.dumps(fields), 3, tmp_path, RecordSettings(max_tokens=8))
    assert isinstance(request, Request) and request.record == EvalRecord.model_validate(fields)
    url = {name: "data:image/png;base64," + base64.b64encode(data).decode() for name, data in pngs.items()}
    urls = {"turns[0].images[0]": url["0"], "image": url["1"], "images[0]": url["2"]}
    assert request.body == chat_body(request.record, urls, "mai", max_tokens=8)
    question = request.body["messages"][-1]["content"]
    assert [p["image_url"]["url"] for p in question if p["type"] == "image_url"] == [
        url["1"],
        url["2"],
        fields["images"][1],
    ]
    assert request.body["messages"][0]["content"][0]["image_url"]["url"] == url["0"]
    assert request.record.turns and request.record.images == fields["images"]  # kept for the output


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"images": ["images/2.png", "images/gone.png"]}, "images[1]"),
        (
            {"turns": [{"role": "user", "images": ["images/gone.png"]}, {"role": "assistant", "text": "A"}]},
            "turns[0].images[0]",
        ),
        (
            {
                "turns": [
                    {"role": "user", "text": "first", "images": [data_url()]},
                    {"role": "assistant", "text": "A"},
                    {"role": "user", "text": "then", "images": ["images/0.png", "images/gone.png"]},
                    {"role": "assistant", "text": "B"},
                ]
            },
            "turns[2].images[1]",
        ),
    ],
)
def test_an_unreadable_image_of_a_conversation_record_is_an_error_naming_its_field(tmp_path, fields, param):
    (tmp_path / "images").mkdir()
    for name in ("0", "1", "2"):
        (tmp_path / "images" / f"{name}.png").write_bytes(image_bytes("PNG"))
    error = record_request(json.dumps(conversation_line(**fields)), 5, tmp_path, RecordSettings())
    assert isinstance(error, LineError) and error.code == "invalid_image" and error.param == param
    assert error.message.startswith(f"line 5: {param}: image 'images/gone.png'")


def test_a_conversation_image_out_of_the_root_is_refused_like_the_records_image(tmp_path):
    (tmp_path / "data" / "images").mkdir(parents=True)
    (tmp_path / "data" / "images" / "1.png").write_bytes(image_bytes("PNG"))
    (tmp_path / "secret.png").write_bytes(image_bytes("PNG"))
    fields = record_line(
        turns=[{"role": "user", "images": ["../secret.png"]}, {"role": "assistant", "text": "A"}]
    )
    error = record_request(json.dumps(fields), 1, tmp_path / "data", RecordSettings())
    assert isinstance(error, LineError) and error.code == "image_outside_root"
    assert error.param == "turns[0].images[0]" and "(--image-root)" in error.message
    assert isinstance(
        record_request(json.dumps(fields), 1, tmp_path / "data", RecordSettings(image_root=str(tmp_path))),
        Request,
    )


def test_a_record_with_an_image_in_an_assistant_turn_is_an_error_naming_the_field(tmp_path):
    turns = [{"role": "user", "text": "Q"}, {"role": "assistant", "text": "A", "images": [data_url()]}]
    error = record_request(
        json.dumps(record_line(image=data_url(), turns=turns)), 7, tmp_path, RecordSettings()
    )
    assert isinstance(error, LineError) and error.param == "turns.1.images"
    assert error.message.startswith("line 7: turns.1.images:") and "assistant turn" in error.message


def test_a_record_line_that_is_not_json_is_a_json_error(tmp_path):
    error = record_request('{"id": "r1", ', 6, tmp_path, RecordSettings())
    assert isinstance(error, LineError) and error.code == "invalid_json" and "line 6" in error.message


# --- parse_line --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "param"), [(OPENAI, "custom_id"), (RECORDS, "id")])
def test_a_repeated_id_is_an_error_naming_the_line_it_repeats(tmp_path, fmt, param):
    text = json.dumps(openai_line() if fmt is OPENAI else record_line(image=data_url()))
    kwargs = {"base": tmp_path, "settings": RecordSettings(), "duplicates": {5: 2}}
    error = parse_line(text, 5, fmt, **kwargs)
    assert isinstance(error, LineError)
    assert error.code == "duplicate_id" and error.param == param
    assert "line 5" in error.message and "line 2" in error.message
    assert isinstance(parse_line(text, 2, fmt, **kwargs), Request)  # the first line with the id runs


def test_a_line_is_parsed_in_the_files_format_not_its_own(tmp_path):
    kwargs = {"base": tmp_path, "settings": RecordSettings(), "duplicates": {}}
    assert isinstance(parse_line(json.dumps(openai_line()), 1, RECORDS, **kwargs), LineError)
    assert isinstance(parse_line(json.dumps(record_line(image=data_url())), 1, OPENAI, **kwargs), LineError)


# --- scan_lines --------------------------------------------------------------------------------------


def numbered(*texts: str, start: int = 1) -> list[tuple[int, str]]:
    return list(enumerate(texts, start=start))


def test_the_scan_takes_the_first_lines_format_and_counts_every_row():
    scan = scan_lines(numbered(json.dumps(openai_line("a")), "{broken", json.dumps(record_line())))
    assert scan.fmt is OPENAI and scan.rows == 3 and scan.duplicates == {}


def test_a_given_format_overrides_a_first_line_of_no_format():
    scan = scan_lines(
        numbered("{broken", json.dumps(record_line(id="a")), json.dumps(record_line(id="a"))), RECORDS
    )
    assert scan.fmt is RECORDS and scan.rows == 3 and scan.duplicates == {3: 2}


def test_a_first_line_of_no_format_is_refused_naming_it():
    with pytest.raises(InputFormatError, match="line 3 is neither.*--format"):
        scan_lines(numbered("{broken", json.dumps(openai_line()), start=3))


@pytest.mark.parametrize("fmt", [None, OPENAI, RECORDS])
def test_an_empty_input_is_refused(fmt):
    with pytest.raises(InputFormatError, match="no lines"):
        scan_lines([], fmt)


def test_record_ids_given_as_numbers_and_as_text_are_one_id():
    scan = scan_lines(numbered(json.dumps(record_line(id=7)), json.dumps(record_line(id="7"))))
    assert scan.duplicates == {2: 1}


def test_a_line_refused_for_its_custom_id_takes_no_id_from_a_valid_line():
    lines = numbered(json.dumps(openai_line(5)), json.dumps(openai_line("5")))
    assert isinstance(openai_request(lines[0][1], 1), LineError)
    assert scan_lines(lines).duplicates == {}


def test_the_scan_numbers_the_files_lines_past_blank_ones(tmp_path):
    lines = [json.dumps(openai_line(i)) for i in ("a", "b", "a", "c", "b", "a")]
    path = tmp_path / "in.jsonl"
    path.write_text(f"{lines[0]}\n\n{lines[1]}\r\n   \n{lines[2]}\n{lines[3]}\n{lines[4]}\n\n{lines[5]}")
    scan = scan_lines(numbered_lines(str(path)))
    assert scan.fmt is OPENAI and scan.rows == 6
    assert scan.duplicates == {5: 1, 7: 3, 9: 1}


@given(
    ids=st.lists(st.sampled_from(["a", "b", "c", "é", "7"]) | st.text(min_size=1), min_size=1, max_size=30),
    gaps=st.lists(st.integers(1, 4), min_size=30, max_size=30),
)
def test_the_scan_finds_exactly_the_repeated_ids(ids, gaps):
    numbers = [sum(gaps[: i + 1]) for i in range(len(ids))]
    scan = scan_lines(zip(numbers, [json.dumps(openai_line(i)) for i in ids], strict=True))
    first_number = {}
    for number, row_id in zip(numbers, ids, strict=True):
        first_number.setdefault(row_id, number)
    assert scan.rows == len(ids)
    assert scan.duplicates == {
        n: first_number[i] for n, i in zip(numbers, ids, strict=True) if first_number[i] != n
    }


# --- batch/lines.py, batch/source.py ------------------------------------------------------------------


def lines_of(data: bytes, chunk: int, max_bytes: int = 1 << 20) -> list:
    return list(numbered_raw_lines(io.BytesIO(data), max_bytes, chunk))


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 5, 7, 64])
def test_lines_are_numbered_across_chunk_boundaries(chunk):
    data = b"ab\r\ncdef\n\n\r\nx\ry\nlast"
    assert lines_of(data, chunk) == [
        (1, b"ab"),
        (2, b"cdef"),
        (3, b""),
        (4, b""),
        (5, b"x\ry"),  # a carriage return inside a line stays
        (6, b"last"),
    ]


def test_a_file_ending_in_a_newline_has_no_extra_line():
    assert lines_of(b"a\r\nb\r\n", 2) == [(1, b"a"), (2, b"b")]
    assert lines_of(b"", 2) == []


@given(
    lines=st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\r\n")), min_size=1, max_size=12),
    endings=st.lists(st.sampled_from(["\n", "\r\n"]), min_size=12, max_size=12),
    last_ended=st.booleans(),
    chunk=st.integers(1, 9),
)
def test_any_file_reads_back_as_its_lines(lines, endings, last_ended, chunk):
    assume(last_ended or lines[-1])  # an empty last line without a newline is no line
    ends = endings[: len(lines)]
    if not last_ended:
        ends[-1] = ""
    data = "".join(line + end for line, end in zip(lines, ends, strict=True)).encode()
    assert lines_of(data, chunk) == [(n, line.encode()) for n, line in enumerate(lines, start=1)]


def test_numbered_lines_skip_blank_lines_and_keep_the_numbering(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"one\n\n  \t \ntwo\r\n\r\n\xff three")
    assert list(numbered_lines(str(path))) == [(1, "one"), (4, "two"), (6, "\ufffd three")]


def test_numbered_lines_of_a_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(OSError):
        list(numbered_lines(str(tmp_path / "none.jsonl")))


def test_records_named_by_a_uri_get_their_predictions_folder(tmp_path):
    """mai-eval records read from a filesystem URI (here file://): the manifest names the URI as given
    and the digest of its bytes, as it would for the same file named by its path."""
    from types import SimpleNamespace

    from batch.runner import _prediction_store
    from batch.shards import shards_of
    from harness.provenance import file_sha256

    data = tmp_path / "records.jsonl"
    data.write_text('{"id": "1"}\n{"id": "2"}\n')
    uri = data.resolve().as_uri()
    job = SimpleNamespace(input=uri, output=tmp_path / "out")
    store = _prediction_store(job, SimpleNamespace(rows=2), shards_of(uri))
    assert store.manifest == {"dataset": uri, "dataset_sha256": file_sha256(data), "records": 2}
    by_path = _prediction_store(
        SimpleNamespace(input=str(data), output=tmp_path / "out"),
        SimpleNamespace(rows=2),
        shards_of(str(data)),
    )
    assert by_path.manifest["dataset_sha256"] == store.manifest["dataset_sha256"]
    # Several shards hash as their bytes one after the other: two halves, the whole file's digest.
    halves = tmp_path / "halves"
    halves.mkdir()
    (halves / "a.jsonl").write_text('{"id": "1"}\n')
    (halves / "b.jsonl").write_text('{"id": "2"}\n')
    sharded = _prediction_store(
        SimpleNamespace(input=str(halves), output=tmp_path / "out"),
        SimpleNamespace(rows=2),
        shards_of(str(halves)),
    )
    assert sharded.manifest["dataset_sha256"] == file_sha256(data)
