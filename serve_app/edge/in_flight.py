"""The load counter: a model client that counts this replica's calls to the model still in flight, the
model's queue as the replica sees it, served calls and audits' calls apart. Audits are shed past a
bound on the served calls (an audit never sheds itself), and the overload guard reads the large
model's served calls."""

from __future__ import annotations

from ..core.contracts import Completion, EngineCall, VLMClient
from ..core.options import GREEDY, Decoding


class InFlight:
    """A model client that counts its calls in flight: served calls in ``count``, audits' in ``audits``."""

    def __init__(self, client: VLMClient):
        self.client = client
        self.count = 0
        self.audits = 0

    async def complete(
        self, messages: list[dict], *, max_tokens: int, call: EngineCall, decoding: Decoding = GREEDY
    ) -> Completion:
        self._add(call, 1)
        try:
            return await self.client.complete(messages, max_tokens=max_tokens, call=call, decoding=decoding)
        finally:
            self._add(call, -1)

    def _add(self, call: EngineCall, change: int) -> None:
        if call.is_audit:
            self.audits += change
        else:
            self.count += change
