from .stack import server  # noqa: F401  (the session's real stack)

LAST = "test_shuts_down_cleanly_on_sigint"  # it stops the session's server
# Modules that serve a stack of their own (another config, a local Ray): after the session's stack.
OWN_STACK = ("test_mixed_pair.py", "test_lifecycle.py", "test_tracing.py", "test_answer_cache.py")


def pytest_collection_modifyitems(items):
    """The test that stops the shared server runs right after the other end-to-end tests, whatever the
    order of their files (and before any other folder's tests start a Ray of their own); the modules
    with a stack of their own run right after it."""
    stops = [item for item in items if item.originalname == LAST][:1]
    own = [item for item in items if item.path.name in OWN_STACK]
    if not stops and not own:
        return
    first = next((i for i, item in enumerate(items) if item.path.parent.name == "e2e"), len(items))
    later = stops + own
    for item in later:
        items.remove(item)
    end_to_end = [i for i, item in enumerate(items) if item.path.parent.name == "e2e"]
    at = end_to_end[-1] + 1 if end_to_end else min(first, len(items))
    items[at:at] = later
