"""The model server and its plain-value call: ``complete(body, call) -> reply``, which every model
deployment serves, and ModelServer, ray.serve.llm's LLMServer serving it.

**The call.** The ingress (and each mai-batch actor, which builds one) sends a cascade call as a
JSON-ready dict, the body, beside the call itself as a typed value (``affinity.ModelCall``: the
stage-affinity router reads it off the handle call, the emulated engine scripts its reply by it), and
reads a dict back, so it never loads vLLM's request and reply types: ray.serve.llm's
``openai_api_models`` imports vLLM's protocol, seconds of a replica's start. The model's replica has
vLLM loaded anyway: it validates the body into ray.serve.llm's ``ChatCompletionRequest`` (whose
``request_id``, the call's ``str``, vLLM logs), runs its own ``chat``, and returns one of

- ``{"response": {...}}``: the ``ChatCompletionResponse``, as JSON;
- ``{"error": {"code": int, "message": str, "type": str}}``: the engine refused or failed the request
  (its ``ErrorResponse``, or ``VLLMServerError``, a generation the engine failed, as a 500);
- ``{"invalid": str}``: a body ``ChatCompletionRequest`` (or vLLM's checks across its fields) refuses.
  Cascade bodies are the ingress's own, built from parts it checked: a refusal is the ingress's bug
  (a 500), which the ingress's own checks must have caught;

each with ``"replica"``: the unique id of the replica that served it (None outside Serve), for the
trace. The body is a ``ChatBody``: a dict that also shows its ``messages`` as an attribute, where
ray.serve.llm's prefix-cache router reads a request's text (``prefix_cache_routing``).

A passthrough keeps ray.serve.llm's ``chat`` and its types (``serve_app/edge/passthrough.py``): it
forwards what a client sent, and streams, and carries no ``ModelCall``. The cascade never needs those
types; the ingress loads them for passthroughs off its event loop (a server's as it starts, a batch
actor's with its first one).

**The server.** The deployments' ``LLMConfig`` names ``ModelServer`` as ``server_cls``
(``deployments/vlm.py``); everything else (engine, placement, health, ``chat`` for passthroughs) is
LLMServer's, unchanged, but for one check at the start of a GPU model's replica: the NVIDIA driver
(``deployments/driver.py``), before ray.serve.llm's engine start downloads the weights
(``VLLMEngine.start``: its node initialisation) and initialises CUDA. ``ModelServer`` is made when it
is first named (``from deployments.model_server import ModelServer``, or Serve loading
``deployments.model_server:ModelServer``): importing LLMServer loads vLLM and torch, which the ingress
and the emulated engine, importing the call from here, do not.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from .affinity import ModelCall
from .driver import require_driver, visible_driver
from .trace_context import log_trace_ids, trace_headers

logger = logging.getLogger("ray.serve")


class ChatBody(dict):
    """A cascade call's body: plain values, and ``messages`` readable as an attribute too."""

    @property
    def messages(self) -> Any:
        return self["messages"]


def reply_of(item: Any) -> dict[str, Any]:
    """The plain reply of what a chat call yielded first: a response, or an ``ErrorResponse``."""
    error = getattr(item, "error", None)
    if error is not None and not hasattr(item, "choices"):
        return {"error": _error_fields(error)}
    if isinstance(item, list | str):  # a stream's chunks: never for a non-streaming request
        return {"error": {"code": 500, "message": "the engine streamed a non-streaming request", "type": ""}}
    return {"response": item.model_dump(mode="json")}


def _error_fields(error: Any) -> dict[str, Any]:
    return {
        "code": int(getattr(error, "code", 500) or 500),
        "message": str(getattr(error, "message", None) or error),
        "type": str(getattr(error, "type", "") or ""),
    }


async def complete_plainly(chat: Callable[[Any], Any], body: dict[str, Any]) -> dict[str, Any]:
    """Run ``chat`` (an LLMServer's, or the emulated engine's) on ``body`` and return its plain reply."""
    from pydantic import ValidationError
    from ray.serve.llm.openai_api_models import ChatCompletionRequest
    from vllm.exceptions import VLLMClientError, VLLMServerError

    try:
        request = ChatCompletionRequest.model_validate(dict(body))
    except (ValidationError, VLLMClientError) as exc:  # vLLM's checks across fields raise its own
        return {"invalid": str(exc)}
    stream = None
    try:
        stream = chat(request)
        if inspect.isawaitable(stream):  # LLMServer.chat is a coroutine that returns the generator
            stream = await stream
        async for item in stream:
            return reply_of(item)
    except VLLMServerError as exc:
        return {"error": {"code": 500, "message": str(exc), "type": type(exc).__name__}}
    finally:
        if stream is not None and hasattr(stream, "aclose"):
            await stream.aclose()
    return {"error": {"code": 500, "message": "the engine returned no response", "type": ""}}


def this_replica() -> str | None:
    """The unique id of the Serve replica running this code, or None outside one."""
    from ray import serve
    from ray.serve.exceptions import RayServeException

    try:
        return serve.get_replica_context().replica_id.unique_id
    except RayServeException:
        return None


class PlainChat:
    """``complete``, the plain-value call, on any deployment with an LLMServer's ``chat``."""

    def engine_chat(self, call: ModelCall | None) -> Callable[[Any], Any]:
        """The chat that serves ``call``: the deployment's own ``chat``, which reads the call from the
        request (vLLM logs its ``request_id``); an engine that answers by the call (the emulated one)
        returns one that has it."""
        return self.chat  # type: ignore[attr-defined]

    async def complete(self, body: dict[str, Any], call: ModelCall | None = None) -> dict[str, Any]:
        """One cascade call: a chat body and the call in, its plain reply out, naming this replica."""
        reply = await complete_plainly(self.engine_chat(call), body)
        return {**reply, "replica": this_replica()}


def check_replica_driver(llm_config: Any, probe: Callable[[], str | None] = visible_driver) -> None:
    """A GPU model's replica refuses to start on a driver the stack cannot run (DriverTooOld, naming
    the driver found and the one needed); a CPU model's checks nothing."""
    accelerator = getattr(llm_config, "accelerator_config", None)
    if getattr(accelerator, "kind", None) != "gpu":
        return
    model = llm_config.model_id
    try:
        found = require_driver(probe)
    except Exception as exc:
        logger.error("%s: %s", model, exc)
        raise
    if found is None:
        logger.warning("%s: no NVIDIA driver visible to the replica; the driver was not checked", model)
    else:
        logger.info("%s: NVIDIA driver %s", model, found)


def _model_server() -> type:
    from ray.serve.llm.deployment import LLMServer

    class ModelServer(PlainChat, LLMServer):
        """ray.serve.llm's LLMServer with the cascade's plain-value call and the driver check."""

        async def start(self) -> None:
            """The driver check, then LLMServer's start (the engine: weights downloaded, CUDA, warm-up)."""
            check_replica_driver(self._llm_config)
            log_trace_ids()
            await super().start()

        def engine_chat(self, call: ModelCall | None) -> Callable[[Any], Any]:
            """LLMServer's ``chat``, given the call's trace context as vLLM reads it (its request spans
            join the trace) when this replica traces."""
            headers = trace_headers()
            if not headers:
                return self.chat
            from ray.llm._internal.serve.core.protocol import RawRequestInfo

            info = RawRequestInfo(headers=headers)
            return lambda request: self.chat(request, raw_request_info=info)

    ModelServer.__qualname__ = "ModelServer"  # pickled by reference: found as this module's attribute
    return ModelServer


def __getattr__(name: str) -> Any:
    """``ModelServer``, made once, when first named (the module's docstring says why)."""
    if name != "ModelServer":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    server = globals()["ModelServer"] = _model_server()
    return server
