"""The half of a side-by-side measurement that runs inside one checkout's own process, its ``serve_app``
imported from that checkout (``side_by_side.py`` starts it there). It counts the project modules the
cascade request (``cascade_request.py``) runs through, and times blocks of that request through one
in-process ingress over scripted models answering at once: what a request costs in the product's own
code, with no proxy, Ray or engine around it. Each timed request asks about an image of its own, a new
question to the answer cache (a miss, which runs the cascade), as a stream of new questions does; one
body again and again would be answered from the cache after its first run.

It imports only this folder's measuring modules (loaded from their files, as an earlier checkout has
none of them) and, through them, the checkout's ``serve_app`` and ``harness.paths``.

Commands arrive one JSON object a line on stdin, each answered by one JSON line on the stdout the
process started with (whatever else prints goes to stderr): ``{"count": true}`` -> the modules run
(``code_path.modules_run``) and where ``serve_app`` was imported from; ``{"time": n}`` -> the seconds
each of ``n`` requests took, one after another. The end of stdin ends the process."""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import os
import sys
import time
from typing import Any

from .cascade_request import EXPECTED_ROUTE, disagreeing_replica, request_body
from .code_path import chat_completions, modules_run
from .in_process import json_request


def counted() -> dict[str, Any]:
    """``modules_run`` of the cascade request in this checkout, with the file ``serve_app`` came from."""
    import serve_app
    from harness.paths import ROOT

    return {**modules_run(disagreeing_replica, request_body(), root=ROOT), "serve_app": serve_app.__file__}


async def _replica() -> Any:
    return disagreeing_replica()  # built in the event loop, as a replica is


# The timed requests' images, each its own (image 0 is the counted request's).
IMAGES = itertools.count(1)


async def timed(ingress: Any, requests: int) -> list[float]:
    """The seconds each of ``requests`` requests took through ``ingress``, one at a time: from the
    handler's call to its reply, the request object made before the clock starts (the proxy's work).
    Each is the cascade request about an image no request before it sent (``IMAGES``)."""
    seconds = []
    for _ in range(requests):
        request = json_request(request_body(image=next(IMAGES)))
        started = time.perf_counter()
        reply = await chat_completions(ingress, request)
        seconds.append(time.perf_counter() - started)
        route = json.loads(reply.body).get("mai", {}).get("route") if reply.status_code == 200 else None
        if route != EXPECTED_ROUTE:
            raise RuntimeError(f"a timed request took route {route} (status {reply.status_code})")
    return seconds


def serve() -> None:
    """Answer commands from stdin until it ends (see the module's docstring)."""
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the product's own prints cannot break the replies
    loop = asyncio.new_event_loop()
    ingress = None
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("count"):
            answer: Any = counted()
        else:
            if ingress is None:
                ingress = loop.run_until_complete(_replica())
            gc.collect()  # each block starts from the same heap, in both checkouts
            answer = loop.run_until_complete(timed(ingress, int(command["time"])))
        replies.write(json.dumps(answer) + "\n")
        replies.flush()
    loop.close()
