"""The phrased evaluation set (evaluation.phrasings): records mai-eval loads, on the split's images
only, and the report's accuracy and validity per form, seen and held-out templates apart."""

import json
from collections import Counter

import pytest

from evaluation import phrasings
from evaluation.phrasings import fits, phrased_records, phrasing_report, policy_answers, template_records
from evaluation.records import load_records, write_records
from harness.datasets import sample_png_data_url
from harness.easy_vqa import COLOURS, SHAPES, ImageFacts, held_out_images
from harness.jsonl import write_jsonl
from harness.phrasings import BY_NAME, FORMS, TEMPLATES, answer
from serve_app.core.question_parsing import either_or_choices, infer_kind

FACTS = {i: ImageFacts(COLOURS[i % 8], SHAPES[i % 3]) for i in range(60)}
IMAGE = sample_png_data_url()


def build(per_template=3, seed=0, split="validation"):
    return list(
        template_records(
            FACTS, sorted(FACTS), lambda image: IMAGE, split, per_template=per_template, seed=seed
        )
    )


def test_the_set_asks_every_template_and_validates_as_mai_eval_records(tmp_path):
    records = build()
    assert Counter(r["template"] for r in records) == {t.name: 3 for t in TEMPLATES}
    path = tmp_path / "phrased.jsonl"
    assert write_records(records, path) == len(records)
    loaded = load_records(path)  # validates every line and refuses duplicate ids
    assert [r.id for r in loaded] == [r["id"] for r in records]
    for record, kept in zip(records, loaded, strict=True):
        dumped = kept.model_dump()
        # The extra fields survive the format; no answer_type: the server infers it, as for a person.
        assert {k: dumped[k] for k in ("form", "template", "held_out", "wanted_kind")} == {
            k: record[k] for k in ("form", "template", "held_out", "wanted_kind")
        }
        assert kept.answer_type is None and record["held_out"] is BY_NAME[record["template"]].held_out


def test_records_answer_what_their_image_shows():
    for record in build(per_template=5):
        template = BY_NAME[record["template"]]
        if record["form"] == "either_or":
            # The server reads the options off the question; the answer is one of them.
            assert either_or_choices(record["question"]) == tuple(record["options"])
            assert record["answer"] in record["options"]
        if record["form"] == "count":
            assert record["answer"] == "1" and record["metric"] == "relaxed"
        if record["form"] == "yes_no":
            assert record["answer"] in ("yes", "no") and record["metric"] == "yes_no"
        assert template.form == record["form"]


def test_the_images_and_answers_are_the_facts_of_the_images_drawn():
    seen = []
    records = list(
        template_records(
            FACTS, sorted(FACTS), lambda image: seen.append(image) or IMAGE, "validation", per_template=4
        )
    )
    for image, record in zip(seen, records, strict=True):
        template = BY_NAME[record["template"]]
        facts = FACTS[image]
        if template.form in ("colour", "shape"):
            assert record["answer"] == (facts.colour if template.form == "colour" else facts.shape)
        if template.form == "either_or":
            assert record["answer"] == (facts.colour if template.asks == ("colour",) else facts.shape)
    for template in TEMPLATES:  # per template, different images
        assert len({i for i, r in zip(seen, records, strict=True) if r["template"] == template.name}) == 4


def test_the_set_is_seeded_per_split():
    assert build() == build()
    assert build(seed=1) != build()
    assert [r["question"] for r in build(split="test")] != [r["question"] for r in build()]
    with pytest.raises(ValueError, match="fewer than per_template"):
        build(per_template=61)


@pytest.mark.parametrize("split", ["validation", "test"])
def test_the_split_decides_the_images(split, monkeypatch):
    """Validation records show only the committed validation images (train images the models never
    see); test records only test images."""
    import easy_vqa

    asked = []
    monkeypatch.setattr("evaluation.records.image_data_url", lambda image, base: asked.append(image) or IMAGE)
    records = phrased_records(split, per_template=2)
    assert len(records) == 2 * len(TEMPLATES) == len(asked)
    paths = easy_vqa.get_train_image_paths() if split == "validation" else easy_vqa.get_test_image_paths()
    images = {str(path): image for image, path in paths.items()}
    assert set(asked) <= set(images)  # the split's own images
    if split == "validation":
        assert {images[path] for path in asked} <= held_out_images()
    with pytest.raises(ValueError, match="validation or test"):
        phrased_records("train")


def record(record_id, form, answer, *, held_out=False, options=None):
    kinds = {"yes_no": "yes_no", "colour": "text", "shape": "text", "either_or": "choice", "count": "number"}
    metric = {"yes_no": "yes_no", "count": "relaxed"}.get(form, "exact")
    row = {"id": record_id, "form": form, "template": f"t-{form}-{held_out}", "held_out": held_out}
    row |= {"answer": answer, "metric": metric, "wanted_kind": kinds[form], "question": "?", "image": IMAGE}
    return row | ({"options": options} if options else {})


def test_the_report_gives_accuracy_and_validity_per_form_and_split():
    records = [
        record("a", "yes_no", "yes"),
        record("b", "yes_no", "no"),
        record("c", "yes_no", "yes", held_out=True),
        record("d", "either_or", "red", options=["red", "brown"]),
        record("e", "either_or", "circle", held_out=True, options=["triangle", "circle"]),
        record("f", "count", "1"),
        record("g", "count", "1", held_out=True),
        record("h", "colour", "blue"),
    ]
    answers = {
        "a": "Yes",  # right, valid
        "b": "triangle",  # wrong, not yes or no: not valid, not fitting
        "c": "no",  # wrong, valid
        "d": "red",  # right: the option's text
        "e": "a triangle",  # wrong, but an option
        "f": "yes",  # wrong, no number
        "g": "1",  # right
        "h": "a triangle",  # wrong, valid text, but no colour
    }
    report = phrasing_report(records, answers)
    assert report["all"]["questions"] == 8 and report["all"]["accuracy"] == 37.5  # a, d, g
    assert report["all"]["valid"] == 75.0  # all but b and f
    assert report["all"]["fitting"] == 62.5  # all but b, f and h
    assert report["split"]["seen"]["accuracy"] == 40.0 and report["split"]["held_out"][
        "accuracy"
    ] == pytest.approx(33.3)
    yes_no_seen = report["by_form"]["yes_no"]["seen"]
    assert (yes_no_seen["questions"], yes_no_seen["accuracy"], yes_no_seen["valid"]) == (2, 50.0, 50.0)
    assert report["by_form"]["yes_no"]["held_out"]["accuracy"] == 0.0
    assert report["by_form"]["count"]["seen"]["valid"] == 0.0
    assert report["by_form"]["either_or"]["held_out"]["fitting"] == 100.0
    assert set(report["by_form"]) == {"yes_no", "either_or", "count", "colour"}
    assert report["by_template"]["t-yes_no-False"]["questions"] == 2
    missing = phrasing_report(records, {})
    assert missing["all"]["accuracy"] == 0.0 and missing["all"]["valid"] == 0.0
    assert missing["all"]["answered"] == 0


def test_fitting_answers_are_the_forms_own():
    assert fits("Red.", record("x", "colour", "red")) and not fits("circle", record("x", "colour", "red"))
    assert fits("a circle", record("x", "shape", "circle")) and not fits(
        "yes", record("x", "shape", "circle")
    )
    assert fits("2", record("x", "count", "1")) and not fits("one", record("x", "count", "1"))
    assert not fits(None, record("x", "yes_no", "yes"))


def test_the_report_command_reads_a_mai_eval_folder(tmp_path, capsys):
    records = build(per_template=1)
    data = tmp_path / "phrased.jsonl"
    write_records(records, data)
    out = tmp_path / "run"
    (out / "predictions").mkdir(parents=True)
    (out / "manifest.json").write_text(json.dumps({"dataset": str(data)}))
    truth = {r["id"]: r["answer"] for r in records}
    rows = [{"id": i, "status": 200, "answer": "no"} for i in truth]
    rows += [{"id": i, "status": 200, "answer": a} for i, a in truth.items()]  # the latest row wins
    write_jsonl(rows, out / "predictions" / "mai.jsonl")
    write_jsonl([{"id": i, "status": 503} for i in truth], out / "predictions" / "mai-small.jsonl")
    assert policy_answers(out)["mai-small"] == dict.fromkeys(truth)
    (out / "results.json").write_text(
        json.dumps({"policies": {"mai": {"latency_mean_s": 0.4321, "latency_p50_s": 0.25}}})
    )
    assert phrasings.main(["report", str(out)]) == 0
    written = json.loads((out / "phrasings.json").read_text())
    assert written["policies"]["mai"]["all"]["accuracy"] == 100.0
    assert written["policies"]["mai-small"]["all"]["valid"] == 0.0
    assert set(written["policies"]["mai"]["by_form"]) == set(FORMS)
    assert written["meta"]["command"] == f"python -m evaluation.phrasings report {out}"
    assert written["policies"]["mai"]["time_per_request"] == {"mean_s": 0.432, "p50_s": 0.25}
    assert written["policies"]["mai-small"]["time_per_request"] is None
    printed = capsys.readouterr().out
    assert "| mai | 100.0 % | 100.0 % |" in printed and "| 100.0 % | 0.432 |" in printed


def test_the_report_refuses_a_set_that_is_not_phrased(tmp_path):
    data = tmp_path / "plain.jsonl"
    write_jsonl([{"id": "1", "image": IMAGE, "question": "?", "answer": "x", "metric": "exact"}], data)
    (tmp_path / "manifest.json").write_text(json.dumps({"dataset": str(data)}))
    with pytest.raises(SystemExit):
        phrasings.main(["report", str(tmp_path)])


def test_every_record_asks_in_the_kind_the_server_infers_or_names_its_options():
    """A person's question reaches the server without a kind: what it infers is the form's, for every
    template ("Count the shapes." is read by its verb: a number). Contracted negatives ("Isn't ...?")
    are yes/no."""
    mismatched = set()
    for rec in build(per_template=2):
        inferred = infer_kind(rec["question"])
        if inferred != rec["wanted_kind"]:
            mismatched.add(rec["template"])
    assert mismatched == set()
    assert answer(BY_NAME["count-imperative"], FACTS[0], {}) == "1"
