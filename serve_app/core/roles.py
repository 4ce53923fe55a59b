"""The cascade's two model roles: ``small`` answers first and reasons, ``large`` answers and reads the
reasoning. Every map keyed by model (clients, prompt layouts, token counts, scaling demand, the
config's ``small:`` and ``large:`` sections) uses these names, defined once here. The policies and the
plans ``small`` and ``large`` (one model answering alone) share the strings but are not roles."""

from __future__ import annotations

SMALL, LARGE = "small", "large"
ROLES = (SMALL, LARGE)
