"""Rows answered side by side and handed on as they finish: the actor's event loop, in a thread of its
own, and the groups of finished rows a batch yields (batch/answerer.py). No Ray.

Why a plain generator over a loop of its own, not an async generator on Ray Data's loop: Ray Data 2.60
unrolls an async generator UDF into a list before any of it goes downstream
(``ray/data/_internal/planner/plan_udf_map_op.py``, ``_generate_transform_fn_for_async_map``:
``return [out async for out in gen]``), so a batch's lines would still wait for its slowest row; a plain
generator's outputs are taken one by one as it yields them (``_TransformingBatchIterator``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar

Result = TypeVar("Result")

# Rows done within this long of one another leave as one block: a line waits at most this much more,
# and Ray Data handles a few blocks a second per actor instead of one per row (on the CPU stack, with
# the engines busy on both cores, a block per row cost the driver and the actor enough to slow a job).
GATHER_S = 0.3


class EventLoopThread:
    """An event loop running in a daemon thread: every row of an actor runs on it, whichever of Ray
    Data's threads called for its batch, so the rows share one set of slots and one ingress replica
    (whose handles' routers live on the loop they were made on)."""

    def __init__(self, name: str = "mai-batch-rows"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, Result]) -> concurrent.futures.Future[Result]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, Result]) -> Result:
        """``coroutine``'s result, waited for by the calling thread."""
        return self.submit(coroutine).result()


def finished(
    futures: Sequence[concurrent.futures.Future[Result]], gather_s: float = 0.0
) -> Iterator[list[tuple[int, Result]]]:
    """Each group of ``futures`` that finished together, as ``(index, result)`` in index order: once one
    is done, those done within ``gather_s`` after it join it (fewer, larger groups; a result waits at
    most that long). A future's exception is raised when its group comes. Closing the generator early
    (Ray Data cancelling the task, an exception) cancels the futures not yet done."""
    index_of = {future: index for index, future in enumerate(futures)}
    pending = set(futures)
    try:
        while pending:
            done, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
            if gather_s > 0 and pending:
                more, pending = concurrent.futures.wait(pending, timeout=gather_s)
                done |= more
            yield sorted(((index_of[future], future.result()) for future in done), key=lambda pair: pair[0])
    finally:
        for future in pending:
            future.cancel()
