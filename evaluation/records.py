"""The evaluation dataset format: JSONL, one question a line, validated.

    {"id": "chartqa-17", "image": "images/17.png" | "data:image/png;base64,...", "question": "...",
     "choices": ["...", "..."]?, "answer": "42" | ["42", "forty-two"], "answer_type": "number"?,
     "metric": "relaxed"}

``image`` is a data URL or a path (relative paths are read from the dataset file's folder);
two optional fields make the question a follow-up with several images:

    "images": ["images/17b.png", ...],  # more images of the question's own turn, after ``image``
    "turns": [{"role": "user", "text": "...", "images": ["images/16.png"]},
              {"role": "assistant", "text": "..."}, ...]  # the conversation before the question

``turns`` alternate from a user turn to an assistant turn (the question is the next user turn); only
user turns carry images (paths or data URLs, like ``image``). Bounded: at most ``MAX_TURNS`` turns,
``MAX_TURN_IMAGES`` images a turn (the question's ``image`` included) and ``MAX_RECORD_IMAGES`` in all.
``answer_type`` (choice, yes_no, number, text) is sent to the server so the cascade verifies with the
right matcher, and inferred from the question when absent; ``metric`` is one of ``scoring.SCORING_METRICS``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from harness.jsonl import write_jsonl
from serve_app.core.answers import AnswerKind
from serve_app.edge.errors import describe_validation_error
from serve_app.edge.images import sniff_format

from .scoring import SCORING_METRICS


class DatasetError(ValueError):
    """A dataset file that cannot be used, with the line at fault."""


MAX_TURNS = 16  # turns before the question (the server's default limits.max_context_turns)
MAX_TURN_IMAGES = 8  # images of one turn, the question's ``image`` and ``images`` together
MAX_RECORD_IMAGES = 16  # images of a record in all


class RecordTurn(BaseModel):
    """A turn of the conversation before a record's question: a user turn (its images, then its text)
    or an assistant turn (text only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["user", "assistant"]
    text: str = ""
    images: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, max_length=MAX_TURN_IMAGES
    )

    @field_validator("images")
    @classmethod
    def _images_in_user_turns(cls, images: list[str], info: ValidationInfo) -> list[str]:
        if images and info.data.get("role") == "assistant":
            raise ValueError("an assistant turn carries no images: images go in user turns")
        return images

    @model_validator(mode="after")
    def _not_empty(self) -> RecordTurn:
        if not self.text and not self.images:
            raise ValueError(f"a {self.role} turn needs text" + (" or images" if self.role == "user" else ""))
        return self

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The turn as a record writes it: no empty ``text`` or ``images``."""
        return {key: value for key, value in handler(self).items() if value or key == "role"}


class EvalRecord(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    id: str = Field(min_length=1)
    image: str = Field(min_length=1)
    question: str = Field(min_length=1)
    choices: list[str] | None = Field(None, min_length=2, max_length=26)
    answer: str | list[str]
    answer_type: AnswerKind | None = None
    metric: Literal[SCORING_METRICS]  # type: ignore[valid-type]
    images: list[Annotated[str, Field(min_length=1)]] | None = Field(None, max_length=MAX_TURN_IMAGES - 1)
    turns: list[RecordTurn] | None = Field(None, max_length=MAX_TURNS)

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value

    @field_validator("answer", mode="before")
    @classmethod
    def _answer_as_text(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, list):
            return [
                str(item) if isinstance(item, int | float) and not isinstance(item, bool) else item
                for item in value
            ]
        return value

    @field_validator("turns")
    @classmethod
    def _turns_alternate(cls, turns: list[RecordTurn] | None) -> list[RecordTurn] | None:
        roles = [turn.role for turn in turns or ()]
        if roles != ["user" if i % 2 == 0 else "assistant" for i in range(len(roles))] or len(roles) % 2:
            raise ValueError(
                "turns must alternate user and assistant, from a user turn to an assistant turn (the "
                f"question is the next user turn); got {', '.join(roles) or 'none'}"
            )
        return turns

    @model_validator(mode="after")
    def _images_in_all(self) -> EvalRecord:
        count = sum(1 for _ in image_fields(self))
        if count > MAX_RECORD_IMAGES:
            raise ValueError(
                f"the record has {count} images (image, images, turns' images); at most {MAX_RECORD_IMAGES}"
            )
        return self

    @model_validator(mode="after")
    def _choices_for_option_metric(self) -> EvalRecord:
        if self.answer_type == "choice" and not self.choices and not _lists_choices(self.question):
            raise ValueError(
                "answer_type 'choice' needs choices (or options listed in the question as A. ..., B. ...)"
            )
        if isinstance(self.answer, list) and not self.answer:
            raise ValueError("answer is an empty list")
        return self


def image_fields(record: EvalRecord) -> Iterator[tuple[str, str]]:
    """Every image a record names, as (its field, its path or data URL), in the order its request
    carries them: the turns' (``turns[0].images[0]``, ...), then the question's (``image``,
    ``images[0]``, ...)."""
    for number, turn in enumerate(record.turns or ()):
        for index, image in enumerate(turn.images):
            yield f"turns[{number}].images[{index}]", image
    yield "image", record.image
    for index, image in enumerate(record.images or ()):
        yield f"images[{index}]", image


def _lists_choices(question: str) -> bool:
    from serve_app.core.question_parsing import split_choices

    return bool(split_choices(question)[1])


def load_records(path: Path) -> list[EvalRecord]:
    """Every record of a JSONL file; a ``DatasetError`` names the first bad line and what is wrong,
    and duplicate ids are refused (results are keyed by id)."""
    if not path.exists():
        raise DatasetError(f"{path}: no such dataset file")
    records: list[EvalRecord] = []
    seen: dict[str, int] = {}
    with path.open() as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                record = EvalRecord.model_validate(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{number}: not JSON ({exc.msg})") from None
            except ValidationError as exc:
                message, _ = describe_validation_error(exc)
                raise DatasetError(f"{path}:{number}: {message}") from None
            if record.id in seen:
                raise DatasetError(
                    f"{path}:{number}: id {record.id!r} already used on line {seen[record.id]}"
                )
            seen[record.id] = number
            records.append(record)
    if not records:
        raise DatasetError(f"{path}: the dataset has no records")
    return records


def image_data_url(image: str, base: Path) -> str:
    """A record's image as a data URL: data URLs as they are, paths read and encoded."""
    if image.startswith("data:"):
        return image
    path = Path(image) if Path(image).is_absolute() else base / image
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"image {image!r}: {exc.strerror or exc}") from None
    kind = sniff_format(data)
    if kind is None:
        raise DatasetError(f"image {image!r} is not PNG, JPEG, GIF or WebP")
    return f"data:image/{kind.lower()};base64," + base64.b64encode(data).decode("ascii")


def image_data_urls(record: EvalRecord, base: Path) -> dict[str, str]:
    """Every image of a record as a data URL, by its field (``image_fields``): what ``chat_body``
    sends."""
    return {field: image_data_url(image, base) for field, image in image_fields(record)}


def write_records(records: Iterable[dict], path: Path) -> int:
    """Validate and write records as JSONL; returns how many."""
    return write_jsonl(
        (EvalRecord.model_validate(record).model_dump(mode="json", exclude_none=True) for record in records),
        path,
    )
