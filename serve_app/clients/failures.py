"""The engines' failures, sorted once: what Ray Serve or an LLMServer reports, as the cascade's declared
``EngineError`` family (``core.contracts``). The VLM client, the passthrough and the attention scorer's
calls all go through here; nothing else of ours names a Ray exception."""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..core.contracts import (
    ConstraintRejectedError,
    EngineError,
    EngineUnavailableError,
    InputRejectedError,
)

logger = logging.getLogger("ray.serve")

_CONTEXT = ("context length", "maximum context", "too long", "max_model_len", "exceeds the model")
_IMAGE = ("processor", "image", "aspect ratio", "pixel", "height", "width")
# What a refusal of a request's structured outputs (its grammar) says, in vLLM's words.
_GRAMMAR = ("structured output", "structured_output", "grammar", "regex", "xgrammar", "guidance")


def input_error_code(message: str) -> str:
    """The kind of input a model's 4xx message refuses: ``context_length_exceeded``, ``invalid_image``,
    else ``invalid_request``."""
    text = message.lower()
    if any(words in text for words in _CONTEXT):
        return "context_length_exceeded"
    if any(words in text for words in _IMAGE):
        return "invalid_image"
    return "invalid_request"


def error_response_failure(
    error: Mapping[str, Any], model_id: str, *, constrained: bool = False
) -> EngineError:
    """An engine's error in plain values (``deployments.model_server``: ``code``, ``message``): a 4xx
    refuses the input (``InputRejectedError``, with the status kept), or, for a call that asked for
    structured outputs (``constrained``) and names them, the grammar (``ConstraintRejectedError``);
    anything else is the engine failing."""
    status = int(error.get("code") or 500)
    message = str(error.get("message") or "no message")
    if constrained and 400 <= status < 500 and any(words in message.lower() for words in _GRAMMAR):
        # The engine's words (they may quote the regex) go to the log; the trace and a reply get an id.
        error_id = uuid.uuid4().hex[:16]
        logger.warning("MAI grammar refused %s: %s: %s", error_id, model_id, message)
        return ConstraintRejectedError(
            f"{model_id} refused the answer's form (error id {error_id}; the detail is in the server log)"
        )
    if 400 <= status < 500:
        return InputRejectedError(f"{model_id}: {message}", input_error_code(message), status)
    return engine_failure(f"{model_id} failed the request", f"{status}: {message}")


def engine_failure(public: str, detail: str, cause: BaseException | None = None) -> EngineUnavailableError:
    """An engine failure as the client sees it: ``public`` and an error id, nothing of the engine's
    own words (a ``RayTaskError`` carries process ids, node addresses and traceback frames); the
    ``detail`` (and ``cause``'s traceback) go to the log under the same id."""
    error_id = uuid.uuid4().hex[:16]
    logger.warning("MAI engine failure %s: %s: %s", error_id, public, detail, exc_info=cause)
    return EngineUnavailableError(f"{public} (error id {error_id}; the detail is in the server log)")


def transport_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a deployment handle raises when the replica behind it cannot answer: it died,
    was unreachable, refused the call under load (``BackPressureError``), or raised inside."""
    from ray.exceptions import RayError
    from ray.serve.exceptions import RayServeException

    return (RayError, RayServeException)


def engine_server_errors() -> tuple[type[BaseException], ...]:
    """What vLLM raises through the handle when the engine itself failed a request: its server errors
    (``GenerationError``, a generation that finished with ``error``), not the input's. Read off the
    loaded modules: an instance of one means vLLM's exceptions are loaded, and a process that never
    loaded them (an ingress that only runs the cascade) does not pay for them on its first error."""
    server_error = getattr(sys.modules.get("vllm.exceptions"), "VLLMServerError", None)
    return (server_error,) if server_error is not None else ()


@contextmanager
def engine_call(model_id: str) -> Iterator[None]:
    """Inside: a transport failure of a call to ``model_id``, or the engine failing the request,
    becomes ``EngineUnavailableError``. Anything else (a bug of ours) passes unchanged."""
    try:
        yield
    except transport_errors() as exc:
        raise engine_failure(f"{model_id} is unavailable", type(exc).__name__, exc) from exc
    except engine_server_errors() as exc:
        raise engine_failure(f"{model_id} failed the request", type(exc).__name__, exc) from exc
