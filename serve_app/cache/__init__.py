"""The answer cache: identical requests in flight share one run, and final deterministic answers are
reused (docs/cache.md): settings.py (the config section), keys.py (what makes two requests the same
question), stores.py (in process, Redis), reuse.py (the request path's side)."""
