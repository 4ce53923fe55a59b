"""The load counter: a model client that counts this replica's calls to the model still in flight, the
model's queue as the replica sees it. Audits are shed past its bound, and the overload guard reads
the large model's."""

from __future__ import annotations

from ..core.contracts import Completion, EngineCall, VLMClient
from ..core.options import GREEDY, Decoding


class InFlight:
    """A model client that counts its calls in flight: the model's queue as this replica sees it."""

    def __init__(self, client: VLMClient):
        self.client = client
        self.count = 0

    async def complete(
        self, messages: list[dict], *, max_tokens: int, call: EngineCall, decoding: Decoding = GREEDY
    ) -> Completion:
        self.count += 1
        try:
            return await self.client.complete(messages, max_tokens=max_tokens, call=call, decoding=decoding)
        finally:
            self.count -= 1
