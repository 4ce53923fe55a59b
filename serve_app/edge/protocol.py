"""The HTTP API's request models: what a client may send, validated by pydantic.

- ``POST /v1/chat/completions`` (OpenAI-compatible; ``model`` picks the policy): ``ChatRequest``;
- ``POST /v1/mai/answer`` (native: image, question, choices, answer_type, policy, options): ``AnswerRequest``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, model_validator

from ..cache.keys import CacheMode
from ..config import Destination
from ..core.answers import AnswerKind
from ..core.contracts import Policy, Seed, Temperature, TopLogprobs, TopP
from ..core.decision import TASK_PATTERN
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

# What a request sent under a name that goes in the next release: each one a reply's ``Warning``
# header (code 299), read once where the body is read (``MAIExtra.warnings``, ``AnswerRequest.warnings``)
# and carried with the request from there (``routing.Passthrough``, ``routing.ToCascade``, ``jobs.Job``).
Warnings = tuple[str, ...]
NEXT_RELEASE = "the old name goes in the next release"


def renamed(old: str, new: str) -> str:
    """The warning of a request field sent under its old name."""
    return f"{old} is renamed {new}; {NEXT_RELEASE}"


def eager_reasoning_warning(options: RequestOptions | None, prefix: str) -> Warnings:
    """The warning of ``eager_reasoning`` when ``options`` (at ``prefix``) sent it: a plan's other name."""
    if options is None or options.eager_reasoning is None:
        return ()
    return (f"{prefix}eager_reasoning is deprecated: send {prefix}plan: eager | sequential; {NEXT_RELEASE}",)


# A client's task tag (``mai.task``): refines the question class the server's statistics count under.
TASK_TAG = Field(
    None,
    pattern=TASK_PATTERN,
    description="a task tag such as chartqa: 1 to 32 lower-case letters, digits or . _ -",
)


class RequestOptions(BaseModel):
    """Per-request cascade options a client may set; the rest is server configuration.
    ``eager_reasoning`` is another name for a plan, deprecated (honoured for one release, with a
    warning): ``true`` forces ``eager``, ``false`` ``sequential`` (a ``plan`` sent beside it wins)."""

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


# What the request lets the answer cache do (docs/cache.md); unset: its Cache-Control header decides.
CACHE_MODE = Field(None, description="use, refresh, no-store or off; unset: the Cache-Control header")


class MAIExtra(BaseModel):
    """The ``mai`` object a chat request may carry. ``route`` is ``destination``'s old name, served as
    it for one release (``destination`` holds either; ``routing.destination`` refuses both differing)."""

    model_config = ConfigDict(extra="forbid")
    choices: list[str] | None = Field(None, min_length=2, max_length=26)
    answer_type: AnswerKind | None = None
    options: RequestOptions | None = None
    # mai only: where the request goes (``config.Destination``).
    destination: Destination | None = None
    route: Destination | None = Field(None, exclude=True, description="mai.destination's old name")
    task: str | None = TASK_TAG
    cache: CacheMode | None = CACHE_MODE

    @model_validator(mode="after")
    def _old_name(self) -> MAIExtra:
        if self.route is not None and self.destination is None:
            self.destination = self.route  # served as if it said mai.destination
        return self

    @property
    def warnings(self) -> Warnings:
        """What the object sent under an old name."""
        route = (renamed("mai.route", "mai.destination"),) if self.route is not None else ()
        return route + eager_reasoning_warning(self.options, "mai.options.")


class MAIFields(BaseModel):
    """What a chat request for ``mai`` says to MAI itself, read before anything else: its ``mai``
    object (whether the request may run the cascade, and how). The rest of the body is read by the
    schema of where it goes: ``ChatRequest`` for the cascade, the model's own for the large model."""

    model_config = ConfigDict(extra="allow")
    mai: MAIExtra | None = None


# The chat request fields a cascade policy honours (docs/api.md, "Parameters").
HONOURED = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "stream",
        "stream_options",
        "mai",
        "user",
        "n",
        "temperature",
        "top_p",
        "seed",
        "logprobs",
        "top_logprobs",
    }
)
# Honoured only at these values (the cascade answers with one choice).
HONOURED_VALUES: Mapping[str, Any] = {"n": 1}


# Every chat parameter named in OpenAI's and vLLM's chat APIs: an unhonoured one is counted by its name,
# any other name as ``unhonoured:other`` (a client's field names never become a metric's label values).
KNOWN_PARAMETERS = HONOURED | frozenset(
    {
        "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "metadata",
        "modalities", "parallel_tool_calls", "prediction", "presence_penalty", "reasoning_effort",
        "response_format", "service_tier", "stop", "store", "tool_choice", "tools", "web_search_options",
        "top_k", "min_p", "min_tokens", "repetition_penalty", "structured_outputs", "guided_json",
        "guided_regex", "guided_choice", "guided_grammar", "chat_template", "chat_template_kwargs",
        "priority", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
        "include_stop_str_in_output", "add_generation_prompt", "continue_final_message",
        "echo", "best_of", "use_beam_search", "length_penalty", "stop_token_ids", "bad_words",
        "truncate_prompt_tokens", "prompt_logprobs", "allowed_token_ids", "mm_processor_kwargs",
        "documents", "request_id", "kv_transfer_params", "vllm_xargs", "cache_salt",
        "return_tokens_as_token_ids", "return_token_ids",
    }
)  # fmt: skip


class ChatRequest(BaseModel):
    """The OpenAI chat request fields MAI reads. Other fields are the model's (a request for a model id
    passes to it unchanged); a cascade policy refuses those it does not honour (``HONOURED``)."""

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
    temperature: Temperature | None = None
    top_p: TopP | None = None
    seed: Seed | None = None
    logprobs: bool | None = None
    top_logprobs: TopLogprobs | None = None
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
    cache: CacheMode | None = CACHE_MODE

    @property
    def warnings(self) -> Warnings:
        """What the request sent under an old name."""
        return eager_reasoning_warning(self.options, "options.")

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


def unhonoured_parameters(request: ChatRequest) -> list[str]:
    """The request's parameters a cascade policy would not honour, by name."""
    names = []
    for name, value in request.model_dump(exclude_unset=True, exclude_none=True).items():
        if name not in HONOURED or (name in HONOURED_VALUES and value != HONOURED_VALUES[name]):
            names.append(name)
    return sorted(names)


def unhonoured_causes(names: list[str]) -> tuple[str, ...]:
    """``unhonoured:<name>`` per parameter, a name outside ``KNOWN_PARAMETERS`` counted as ``other``."""
    return tuple(sorted({f"unhonoured:{name if name in KNOWN_PARAMETERS else 'other'}" for name in names}))
