"""The one request the request_path scenario follows through the code, and the replica that answers it:
a ``mai`` chat request for a yes/no question about a small image, plan ``sequential`` forced, over
scripted models whose short answers disagree (small "yes", large "no") and whose reasoning agrees
(route ``agree_reasoned``).

It imports nothing of the bench but ``in_process`` and ``image_prompts``, and of the product only what
an earlier checkout has too, so that the same request runs against another checkout's ``serve_app``
(``tree_worker.py``)."""

from __future__ import annotations

from typing import Any

from serve_app.core.prompts import PromptKind

from .image_prompts import synthetic_png

QUESTION = "Is there a fan in the image?"
SMALL_REPLIES = {
    PromptKind.SIMPLE: "[[yes]]",
    PromptKind.REASONING: "The image shows a desk and a lamp; nothing with blades turns.\n[[no]]",
}
LARGE_REPLIES = {PromptKind.SIMPLE: "[[no]]"}
EXPECTED_ROUTE = "agree_reasoned"


def disagreeing_replica() -> Any:
    """An in-process ingress whose models disagree in stage 1 and agree once the small one reasons."""
    from .in_process import ScriptedModel, in_process_ingress  # Ray Serve and FastAPI: only to run

    return in_process_ingress(ScriptedModel(SMALL_REPLIES), ScriptedModel(LARGE_REPLIES))


def request_body(plan: str = "sequential", image: int = 0) -> dict[str, Any]:
    """A ``mai`` chat request for a yes/no question about a small image, run with ``plan``; ``image``:
    which one (``synthetic_png``'s index: each its own bytes, so a new question to the answer cache)."""
    content = [
        {"type": "image_url", "image_url": {"url": synthetic_png(64, image)}},
        {"type": "text", "text": QUESTION},
    ]
    return {
        "model": "mai",
        "messages": [{"role": "user", "content": content}],
        "mai": {"options": {"plan": plan}},
    }
