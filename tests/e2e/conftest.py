from .stack import server  # noqa: F401  (the session's real stack)
