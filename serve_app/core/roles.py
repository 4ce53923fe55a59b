"""The cascade's two model roles: ``small`` answers first and reasons, ``large`` answers and reads the
reasoning. Every map keyed by model (clients, prompt layouts, token counts, scaling demand, the
config's ``small:`` and ``large:`` sections) uses these names, defined once here. The policies
``small`` and ``large`` (one model answering alone) share the strings but are not roles."""

from __future__ import annotations

SMALL, LARGE = "small", "large"
ROLES = (SMALL, LARGE)

# The model tier: every deployment the ingress calls, by its name (the roles' models, the attention
# scorer, the statistics holder, the key ledger), and the prefix of its Serve deployment's name, by
# which ``mai-batch --attach`` finds it in a running application. Bound once: serve_app.app.model_tier.
TIER = {
    SMALL: f"{SMALL}:",
    LARGE: f"{LARGE}:",
    "scorer": "AttentionScorer",
    "stats": "StatsHolder",
    "ledger": "KeyLedger",
}
