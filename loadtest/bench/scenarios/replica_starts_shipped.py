"""replica_starts_shipped: ``replica_starts`` on the session of the shipped config's burst
(``--only shipped``), into its own file.

    python -m loadtest.bench --only replica_starts_shipped --param session=/tmp/ray/session_<...>
"""

from __future__ import annotations

import dataclasses

from . import replica_starts

SCENARIO = dataclasses.replace(
    replica_starts.SCENARIO,
    name="replica_starts_shipped",
    title="How long Serve took to start a replica (the shipped config's session)",
    result="autoscaling/replica-starts-shipped.json",
)
