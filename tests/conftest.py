import os

# Ray 2.60 turns token authentication on for local clusters; the tests' local clusters run without it.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
