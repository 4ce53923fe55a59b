"""The key ledger every ingress replica shares: one Serve deployment holding each API key's quota
windows and usage (serve_app/core/usage.py), as the statistics holder holds the audits'. A replica
asks it to admit each request and tells it what the request used; one replica, so a quota is one
count however many ingress replicas there are."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from ray import serve

from ..core.usage import Bill, Ledger, Quota


class KeyLedger:
    """The ledger over its own clock; what the deployment serves, and what a lone replica holds."""

    def __init__(self) -> None:
        self.ledger = Ledger()

    def admit(self, key: str, requests_per_minute: int | None, tokens_per_minute: int | None) -> dict | None:
        refusal = self.ledger.admit(key, Quota(requests_per_minute, tokens_per_minute), time.monotonic())
        return None if refusal is None else asdict(refusal)

    def record(self, key: str, bill: dict[str, Any]) -> None:
        self.ledger.record(key, Bill(**bill), time.monotonic())

    def snapshot(self) -> dict[str, Any]:
        return self.ledger.snapshot(time.monotonic())


# One replica: a quota is one count. No CPU of its own: it only adds and compares.
KeyLedgerDeployment = serve.deployment(
    name="KeyLedger", num_replicas=1, max_ongoing_requests=10_000, ray_actor_options={"num_cpus": 0}
)(KeyLedger)
