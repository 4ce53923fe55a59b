"""Build the VQA datasets the load test, the benchmarks and the evaluation use, as JSONL.

Each line: {"id", "image" (a data URL), "question", "choices"?, "answer", "answer_type", "metric"}.
- easy-vqa: the `easy-vqa` package's real images, questions and answers (shapes, colours, yes/no);
- charts: synthetic bar charts drawn here with known values (ChartQA-style numeric answers).

    python -m harness.datasets          # writes bench/data/easy-vqa.jsonl and charts.jsonl
"""

from __future__ import annotations

import argparse
import base64
import io
import random
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from .easy_vqa import (
    COLOURS as EASY_VQA_COLOURS,
)
from .easy_vqa import (
    QA,
    SHAPES,
    BalancedYesNo,
    display_question,
    facts_by_image,
    held_out_images,
)
from .jsonl import write_jsonl
from .paths import DATASETS

COLOURS = {
    "red": (220, 50, 47),
    "blue": (38, 139, 210),
    "green": (133, 153, 0),
    "orange": (203, 75, 22),
    "purple": (108, 113, 196),
    "gray": (147, 161, 161),
}


def _data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def sample_png_data_url(
    size: tuple[int, int] = (32, 32), colour: tuple[int, int, int] = (200, 30, 30)
) -> str:
    """A small solid-colour PNG as a data URL (a valid image for requests whose content does not matter)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, "PNG")
    return _data_url(buffer.getvalue())


def easy_vqa_records(split: str = "test", limit: int | None = None, seed: int = 0) -> Iterator[dict]:
    """easy-vqa questions with their images; yes/no questions scored as yes/no, the rest exactly.
    ``split``: test, train, or validation (the train images the demo models never saw: for choosing
    recipes and fitting thresholds, never the test split)."""
    import easy_vqa

    if split not in ("test", "train", "validation"):
        raise ValueError(f"easy-vqa split must be test, train or validation, got {split!r}")
    questions, answers, image_ids = (
        easy_vqa.get_test_questions() if split == "test" else easy_vqa.get_train_questions()
    )
    paths = easy_vqa.get_test_image_paths() if split == "test" else easy_vqa.get_train_image_paths()
    order = list(range(len(questions)))
    if split == "validation":
        held_out = held_out_images(image_ids)
        order = [index for index in order if image_ids[index] in held_out]
    random.Random(seed).shuffle(order)
    for index in order[:limit]:
        answer = answers[index]
        yes_no = answer in ("yes", "no")
        yield {
            "id": f"easy-vqa-{split}-{index}",
            "image": _data_url(Path(paths[image_ids[index]]).read_bytes()),
            "question": display_question(questions[index]),
            "answer": answer,
            "answer_type": "yes_no" if yes_no else "text",
            "metric": "yes_no" if yes_no else "exact",
        }


def easy_vqa_balanced_records(split: str = "test", limit: int = 500, seed: int = 0) -> Iterator[dict]:
    """Yes/no questions on easy-vqa's images, balanced the way the demo models are trained: for each
    question form and the colour or shape it names, as many yes as no (the question text alone gets
    about half right). What each image shows is read off its own easy-vqa answers."""
    import easy_vqa

    if split not in ("test", "validation"):
        raise ValueError(f"balanced easy-vqa split must be test or validation, got {split!r}")
    questions, answers, image_ids = (
        easy_vqa.get_test_questions() if split == "test" else easy_vqa.get_train_questions()
    )
    paths = easy_vqa.get_test_image_paths() if split == "test" else easy_vqa.get_train_image_paths()
    facts = facts_by_image(QA(i, q, a) for q, a, i in zip(questions, answers, image_ids, strict=True))
    questions_of = BalancedYesNo(facts, facts if split == "test" else held_out_images(image_ids))
    rng = random.Random(seed)
    for index in range(limit):
        qa = questions_of.draw(rng)
        yield {
            "id": f"easy-vqa-balanced-{split}-{index}",
            "image": _data_url(Path(paths[qa.image_id]).read_bytes()),
            "question": display_question(qa.question),
            "answer": qa.answer,
            "answer_type": "yes_no",
            "metric": "yes_no",
        }


def easy_vqa_either_or_records(
    split: str = "validation", limit: int = 200, seed: int = 0, *, with_choices: bool = False
) -> Iterator[dict]:
    """easy-vqa's colour and shape questions asked either/or: "Is the shape red or blue?", "Is the
    shape a circle or a triangle?", the right option and another drawn at random, in a random order.
    ``with_choices``: the two options are also sent as the request's ``choices`` (the option-letter
    prompt, scored by option); without, the question alone names them (scored by the option's text)."""
    rng = random.Random(seed)
    for record in easy_vqa_records(split, None, seed):
        if limit <= 0:
            return
        gold = record["answer"]
        vocabulary = EASY_VQA_COLOURS if gold in EASY_VQA_COLOURS else SHAPES if gold in SHAPES else None
        if vocabulary is None:
            continue
        choices = [gold, rng.choice([word for word in vocabulary if word != gold])]
        rng.shuffle(choices)
        article = "a " if vocabulary is SHAPES else ""
        question = f"Is the shape {article}{choices[0]} or {article}{choices[1]}?"
        extra = {"choices": choices, "answer_type": "choice", "metric": "option"} if with_choices else {}
        asked = {
            "id": record["id"] + "-either-or",
            "question": question,
            "answer_type": None,
            "metric": "exact",
        }
        yield record | asked | extra
        limit -= 1


def draw_bar_chart(values: dict[str, int], size: tuple[int, int] = (320, 240)) -> bytes:
    """A bar chart, each bar labelled with its colour name under it and its value above it."""
    from PIL import Image, ImageDraw

    width, height = size
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    top, bottom = 30, height - 30
    peak = max(values.values())
    slot = width // len(values)
    for i, (name, value) in enumerate(values.items()):
        x0, x1 = i * slot + slot // 5, (i + 1) * slot - slot // 5
        y0 = bottom - round((bottom - top) * value / peak)
        draw.rectangle([x0, y0, x1, bottom], fill=COLOURS[name])
        draw.text((x0, y0 - 14), str(value), fill="black")
        draw.text((x0, bottom + 6), name, fill="black")
    draw.line([0, bottom, width, bottom], fill="black")
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def chart_records(count: int = 300, seed: int = 0) -> Iterator[dict]:
    """Bar charts with known values and questions about them: a bar's value, a difference, a count,
    the tallest bar (ChartQA's kinds of question)."""
    rng = random.Random(seed)
    for index in range(count):
        names = rng.sample(sorted(COLOURS), rng.randint(3, 5))
        values = {name: rng.randint(5, 95) for name in names}
        png = draw_bar_chart(values)
        a, b = rng.sample(names, 2)
        threshold = rng.choice([20, 40, 50, 60])
        kind = index % 4
        if kind == 0:
            question, answer, answer_type = f"What is the value of the {a} bar?", str(values[a]), "number"
        elif kind == 1:
            question, answer, answer_type = (
                f"What is the difference between the {a} and the {b} bar?",
                str(abs(values[a] - values[b])),
                "number",
            )
        elif kind == 2:
            question, answer, answer_type = (
                f"How many bars are above {threshold}?",
                str(sum(v > threshold for v in values.values())),
                "number",
            )
        else:
            question, answer, answer_type = "Which bar is the tallest?", max(values, key=values.get), "text"
        yield {
            "id": f"charts-{index}",
            "image": _data_url(png),
            "question": question,
            "answer": answer,
            "answer_type": answer_type,
            "metric": "relaxed" if answer_type == "number" else "exact",
        }


def dataset_file(name: str, build: Callable[[], Iterable[dict]]) -> Path:
    """``bench/data/<name>``, written from ``build()`` when missing (the records are seeded, so the
    file is the same wherever it is built)."""
    path = DATASETS / name
    if not path.exists():
        DATASETS.mkdir(parents=True, exist_ok=True)
        write_jsonl(build(), path)
    return path


def ensure_datasets(limit: int = 1000) -> dict[str, Path]:
    """The emulated benches' datasets under bench/data, built when missing."""
    return {
        "easy-vqa": dataset_file("easy-vqa.jsonl", lambda: easy_vqa_records("test", limit)),
        "charts": dataset_file("charts.jsonl", lambda: chart_records(min(limit, 300))),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit", type=int, default=1000, help="easy-vqa questions to keep (default 1000)")
    parser.add_argument("--charts", type=int, default=300, help="synthetic charts to draw (default 300)")
    parser.add_argument("--out", type=Path, default=DATASETS)
    args = parser.parse_args(argv)
    n_vqa = write_jsonl(easy_vqa_records("test", args.limit), args.out / "easy-vqa.jsonl")
    n_charts = write_jsonl(chart_records(args.charts), args.out / "charts.jsonl")
    print(
        f"{args.out}: easy-vqa.jsonl ({n_vqa} questions), charts.jsonl ({n_charts} charts)", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
