from .stack import server  # noqa: F401  (the session's real stack)

LAST = "test_shuts_down_cleanly_on_sigint"  # it stops the session's server


def pytest_collection_modifyitems(items):
    """The test that stops the shared server runs right after the other end-to-end tests, whatever the
    order of their files (and before any other folder's tests start a Ray of their own)."""
    stops = [item for item in items if item.originalname == LAST]
    if not stops:
        return
    items.remove(stops[0])
    end_to_end = [i for i, item in enumerate(items) if item.path.parent.name == "e2e"]
    items.insert(end_to_end[-1] + 1 if end_to_end else len(items), stops[0])
