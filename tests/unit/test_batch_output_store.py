"""An output named by a URI (batch/output_store.py): staged on the local disk by the URI's digest,
uploaded whole (a file with its summary, or a records folder), and fetched back when a job resumes
where no staging copy is (another machine)."""

import pytest

from batch.output_store import fetch, is_uri, staged, upload


def test_a_uri_is_staged_under_its_digest_by_its_name(tmp_path):
    one, other = staged("s3://bucket/run/out.jsonl", tmp_path), staged("s3://bucket/b/out.jsonl", tmp_path)
    assert one.local.name == "out.jsonl" and one.local.parent.parent == tmp_path
    assert one.local != other.local and staged("s3://bucket/run/out.jsonl", tmp_path) == one
    assert is_uri("gs://b/x") and not is_uri("out/x.jsonl")


def test_an_output_file_and_its_summary_are_uploaded_whole_and_replace_the_old(tmp_path):
    remote = tmp_path / "remote" / "deep"
    out = staged(f"file://{remote}/out.jsonl", tmp_path / "staging")
    out.local.parent.mkdir(parents=True)
    out.local.write_text('{"a": 1}\n')
    assert upload(out) == [f"file://{remote}/out.jsonl"]
    assert (remote / "out.jsonl").read_text() == '{"a": 1}\n'
    out.local.write_text('{"a": 1}\n{"a": 2}\n')
    out.sibling(".summary.json")[0].write_text("{}")
    assert upload(out) == [f"file://{remote}/out.jsonl", f"file://{remote}/out.jsonl.summary.json"]
    assert (remote / "out.jsonl").read_text().count("\n") == 2 and (
        remote / "out.jsonl.summary.json"
    ).exists()


def test_a_records_folder_is_uploaded_and_fetched_back_where_no_staging_copy_is(tmp_path):
    uri = f"file://{tmp_path}/remote/records"
    first = staged(uri, tmp_path / "machine-a")
    (first.local / "predictions").mkdir(parents=True)
    (first.local / "predictions" / "mai.jsonl").write_text('{"id": "q1"}\n')
    (first.local / "manifest.json").write_text("{}")
    upload(first)
    second = staged(uri, tmp_path / "machine-b")
    assert fetch(second) is True
    assert (second.local / "predictions" / "mai.jsonl").read_text() == '{"id": "q1"}\n'
    assert fetch(second) is False  # a staging copy exists: it is the newer one


def test_a_new_output_fetches_nothing(tmp_path):
    out = staged(f"file://{tmp_path}/nothing/out.jsonl", tmp_path / "staging")
    assert fetch(out) is False and not out.local.exists()


def test_an_output_that_cannot_be_written_names_its_uri(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a file where the output's folder would be
    out = staged(f"file://{blocker}/out.jsonl", tmp_path / "staging")
    out.local.parent.mkdir(parents=True)
    out.local.write_text("{}\n")
    with pytest.raises(OSError, match=str(blocker)):
        upload(out)
