"""The HTTP API's request models: what a client may send, validated by pydantic.

- ``POST /v1/chat/completions`` (OpenAI-compatible; ``model`` picks the policy): ``ChatRequest``;
- ``POST /v1/mai/answer`` (native: image, question, choices, answer_type, policy, options): ``AnswerRequest``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat

from ..core.answers import AnswerKind
from ..core.decision import TASK_PATTERN
from ..core.options import INT64_MAX, INT64_MIN, Policy
from ..core.plans import PlanName
from ..core.prompts import TransferForm

# OpenAI model name -> cascade policy.
POLICY_OF_MODEL: dict[str, Policy] = {
    "mai": Policy.CASCADE,
    "mai-small": Policy.SMALL,
    "mai-large": Policy.LARGE,
    "mai-small-reason": Policy.SMALL_REASON,
    "mai-large-reason": Policy.LARGE_REASON,
    "mai-transfer": Policy.TRANSFER,
    "mai-small-explain": Policy.SMALL_EXPLAIN,
    "mai-large-explain": Policy.LARGE_EXPLAIN,
}
MODEL_OF_POLICY = {policy: name for name, policy in POLICY_OF_MODEL.items()}

# A client's task tag (``mai.task``): refines the question class the server's statistics count under.
TASK_TAG = Field(
    None,
    pattern=TASK_PATTERN,
    description="a task tag such as chartqa: 1 to 32 lower-case letters, digits or . _ -",
)


class RequestOptions(BaseModel):
    """Per-request cascade options a client may set; the rest is server configuration.
    ``eager_reasoning`` is another name for a plan: ``true`` forces ``eager``, ``false``
    ``sequential`` (a ``plan`` sent beside it wins)."""

    model_config = ConfigDict(extra="forbid")
    stage2_answer: Literal["inline", "two_stage"] | None = None
    eager_reasoning: bool | None = Field(None, exclude=True)
    plan: PlanName | None = None
    transfer_form: TransferForm | None = None
    transfer_selector: str | None = None
    on_large_failure: Literal["error", "small"] | None = None
    min_confidence: StrictFloat | None = None
    confident_large: StrictFloat | None = None
    structured_answers: bool | None = None


class ImageURL(BaseModel):
    model_config = ConfigDict(extra="allow")
    url: str


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "image_url"]
    text: str | None = None
    image_url: ImageURL | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None


class MAIExtra(BaseModel):
    """The ``mai`` object a chat request may carry."""

    model_config = ConfigDict(extra="forbid")
    choices: list[str] | None = Field(None, min_length=2, max_length=26)
    answer_type: AnswerKind | None = None
    options: RequestOptions | None = None
    # mai only: auto (the cascade when MAI fits the request, else the large model unchanged), or forced.
    route: Literal["auto", "cascade", "passthrough"] | None = None
    task: str | None = TASK_TAG


class MAIFields(BaseModel):
    """What a chat request for ``mai`` says to MAI itself, read before anything else: its ``mai``
    object (whether the request may run the cascade, and how). The rest of the body is read by the
    schema of where it goes: ``ChatRequest`` for the cascade, the model's own for the large model."""

    model_config = ConfigDict(extra="allow")
    mai: MAIExtra | None = None


class ChatRequest(BaseModel):
    """The OpenAI chat request fields MAI reads. Other fields are the model's (a request for a model id
    passes to it unchanged); a cascade policy refuses those it does not honour (``routing.HONOURED``)."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(
        ..., json_schema_extra={"enum": list(POLICY_OF_MODEL)}, description="the policy; others get 404"
    )
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)  # what vLLM's request takes
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    mai: MAIExtra | None = None

    def decoding(self) -> dict[str, Any]:
        """The sampling and logprobs fields the request sets (a cascade policy's ``Decoding``)."""
        names = ("temperature", "top_p", "seed", "logprobs", "top_logprobs")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


class AnswerRequest(BaseModel):
    """``POST /v1/mai/answer``."""

    model_config = ConfigDict(extra="forbid")
    image: str = Field(..., description="a data URL (data:image/png;base64,...) or bare base64")
    question: str
    choices: list[str] | None = Field(None, min_length=2, max_length=26)
    answer_type: AnswerKind | None = None
    policy: Policy = Policy.CASCADE
    options: RequestOptions | None = None
    max_tokens: int | None = None
    task: str | None = TASK_TAG

    @property
    def model(self) -> str:
        """The model name its policy is served as (what a key's ``models`` name)."""
        return MODEL_OF_POLICY[self.policy]


def openapi_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` declaring ``model`` as an operation's JSON body (its ``$defs`` inlined), for
    endpoints that read and validate the raw body themselves so that every error is ours."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(definitions[node["$ref"].rsplit("/", 1)[-1]])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    return {"requestBody": {"required": True, "content": {"application/json": {"schema": inline(schema)}}}}
