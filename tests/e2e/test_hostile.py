"""A hostile caller against the real CPU stack (loadtest/hostile.py): every crafted request gets its
4xx within the bound, the listener the image parts point at sees no connection, bodies sent a byte at
a time end at the body deadline (408) or are refused per address (429), task tags make no class past
the bound, a reused request id does not steer the audit sample, and a normal request beside the flood
is still answered, in time near its usual."""

from loadtest.hostile import run

from .stack import BASE


def test_a_hostile_caller_gets_4xx_in_bounded_time_and_moves_nothing(server):
    report = run(BASE, body_timeout_s=30.0, tags=24, reused=24)
    assert report["failed_cases"] == []
    assert report["listener_requests"] == []  # no engine fetched a URL a client named
    assert not report["readyz_names_models"]
    slow = report["slow_senders"]
    assert set(slow["by_status"]) <= {"408", "429"} and slow["by_status"].get("429", 0) >= 8
    latency = report["normal_latency"]
    alone, beside = latency["alone"]["median_s"], latency["beside_hostile"]["median_s"]
    assert beside <= max(3 * alone, alone + 2.0), latency
    flood = report["tag_flood"]
    # No list of tasks in mai-cpu.yaml: every tag pools into one class per kind.
    assert flood["answered"] == flood["tags_sent"] and flood["classes_created"] <= 1, flood
    reused = report["reused_request_id"]
    # The server's sample does not follow the client's id: not every answer it could audit is sampled.
    assert reused["auditable"] < 10 or reused["sampled"] < reused["auditable"], reused
