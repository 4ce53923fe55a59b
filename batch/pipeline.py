"""The Ray Data pipeline of a batch job: the input's lines read (batch/source.py) and answered by a pool
of actors (batch/answerer.py), every answered row handed on to the driver as its own block.

How a row's line reaches the driver within moments of its answer, in Ray Data 2.60:
- the actor's ``__call__`` is a plain generator yielding rows as they finish (batch/row_stream.py);
- a map task's outputs pass through a ``BlockOutputBuffer`` that joins them until they pass
  ``DataContext.target_max_block_size`` (128 MiB by default) or the task ends
  (``ray/data/_internal/output_buffer.py``, ``has_next``; the map_batches planner sets that size,
  ``ray/data/_internal/planner/plan_udf_map_op.py``, ``plan_udf_map_op``). With ``STREAMED_BLOCK_BYTES``
  every yield is past it and leaves as a block of its own (cut into one-row blocks: ``next``);
- the task's streaming generator pauses once ``2 * _max_num_blocks_in_streaming_gen_buffer`` objects
  wait for the executor (``actor_pool_map_operator.py``, ``_apply_default_actor_task_remote_args``: 2
  blocks by default); ``BLOCKS_WAITING`` lets an actor's calls keep handing rows on;
- the task is a streaming generator (``map_operator._map_task`` yields each block as it is built), so
  the executor gets it at once;
- the driver reads with ``iter_batches(batch_size=None, prefetch_batches=0)``: with any prefetch, a
  block is handed on only once the next one has come (``ray/data/_internal/block_batching/
  iter_batches.py``, ``prefetch_batches_locally`` takes the next bundle before it yields the current
  one), so a job's last-but-one line would wait for its slowest row.
The size is the dataset's (Ray Data copies the current context into a dataset when it is made), so the
read's blocks are one row each too. So every row that crosses Ray Data is a packed row of lines
(batch/packing.py): the read's rows are blocks of up to ``rows_per_actor`` lines, an actor's call takes
one (``batch_size=1``), several calls side by side (``BLOCKS_PER_ACTOR``), and hands on each group of
finished rows as one packed row.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

ACTOR_NUM_CPUS = 0.01
BLOCKS_PER_ACTOR = 4
STREAMED_BLOCK_BYTES = 1  # every block past the target: each group of finished rows its own block
BLOCKS_WAITING = 64  # a map task's blocks the driver has not taken yet, before the task pauses


def answered_rows(
    source: Any,
    answerer_args: tuple[Any, ...],
    *,
    actors: int,
    rows_per_actor: int,
) -> Any:
    """The dataset of answered rows: ``source`` (a ``NumberedLines``) read and answered by ``actors``
    actors, each calling ``RowAnswerer(*answerer_args)`` on ``rows_per_actor`` rows at a time."""
    import ray

    from .answerer import RowAnswerer

    with _streamed_blocks():
        rows = ray.data.read_datasource(source, num_cpus=0)
        return rows.map_batches(
            RowAnswerer,
            fn_constructor_args=answerer_args,
            batch_size=1,  # a packed row of up to ``rows_per_actor`` lines (batch/source.py)
            # Calls answered side by side in each actor, their rows sharing the actor's slots, each in a
            # thread of Ray Data's (true multi-threading: the calls only hand rows to the actor's loop).
            compute=ray.data.ActorPoolStrategy(
                size=actors,
                max_tasks_in_flight_per_actor=BLOCKS_PER_ACTOR,
                max_concurrent_calls_per_actor=BLOCKS_PER_ACTOR,
                enable_true_multi_threading=True,
            ),
            # The actors wait on the models: a sliver of a CPU each, so that SPREAD places them on the
            # nodes in turn (an actor asking for nothing is placed where the driver is).
            num_cpus=ACTOR_NUM_CPUS,
            scheduling_strategy="SPREAD",
        )


@contextmanager
def _streamed_blocks() -> Iterator[None]:
    """Datasets made inside get one-row blocks; the process's own context is left as it was."""
    import ray

    context = ray.data.DataContext.get_current()
    before = (
        context.target_max_block_size,
        context.enable_progress_bars,
        context._max_num_blocks_in_streaming_gen_buffer,
    )
    context.target_max_block_size, context.enable_progress_bars = STREAMED_BLOCK_BYTES, False
    # A map task pauses once this many of its blocks wait for the driver to take them (Ray Data's
    # default: 2); an actor whose calls all paused would leave its slots idle while rows wait.
    context._max_num_blocks_in_streaming_gen_buffer = BLOCKS_WAITING
    try:
        yield
    finally:
        (
            context.target_max_block_size,
            context.enable_progress_bars,
            context._max_num_blocks_in_streaming_gen_buffer,
        ) = before
