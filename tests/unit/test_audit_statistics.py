"""Audit sampling and its statistics (serve_app/core/audit.py), their intervals (intervals.py) and alerts
(audit_alerts.py): pure, without Ray."""

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from serve_app.core.audit import AuditBook, AuditSettings, is_sampled
from serve_app.core.audit_alerts import alerts
from serve_app.core.decision import class_of
from serve_app.core.intervals import exact_lower_bound, wilson_interval
from serve_app.core.trace import Tokens


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"rate": 1.5}, "rate"),
        ({"rate": -0.1}, "rate"),
        ({"reference": "oracle"}, "reference"),
        ({"window": -1}, "window"),
        ({"window": 0}, "window"),
        ({"max_disagreement": 0}, "max_disagreement"),
        ({"rate": 0.1, "extra": 1}, "extra"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(settings, key):
    with pytest.raises(ValidationError) as error:
        AuditSettings.model_validate(settings)
    assert error.value.errors()[0]["loc"][0] == key


def test_sampling_with_a_configured_seed_is_a_seeded_share_of_request_ids():
    ids = [f"request-{i}" for i in range(20_000)]
    settings = AuditSettings(rate=0.3, seed=0)
    sampled = [i for i in ids if is_sampled(i, settings)]
    assert abs(len(sampled) / len(ids) - 0.3) < 0.015
    assert sampled == [i for i in ids if is_sampled(i, settings)]  # the same ids every time
    reseeded = [i for i in ids if is_sampled(i, AuditSettings(rate=0.3, seed=1))]
    assert reseeded != sampled
    assert not any(is_sampled(i, AuditSettings(rate=0.0)) for i in ids[:1000])
    assert all(is_sampled(i, AuditSettings(rate=1.0)) for i in ids[:1000])


def test_sampling_without_a_seed_is_keyed_by_the_replicas_secret():
    """The default (no seed): a keyed hash under a secret the client never sees, so the ids a client
    picks tell it nothing of its draws; without the secret there is no draw (no silent public hash)."""
    assert AuditSettings().seed is None
    settings = AuditSettings(rate=0.3)
    ids = [str(number) for number in range(20_000)]
    secret, other = b"k" * 32, b"j" * 32
    sampled = [i for i in ids if is_sampled(i, settings, secret)]
    assert abs(len(sampled) / len(ids) - 0.3) < 0.015
    assert sampled == [i for i in ids if is_sampled(i, settings, secret)]  # pure: the secret is an input
    assert sampled != [i for i in ids if is_sampled(i, settings, other)]
    # Not the seeded hash of any seed a client could guess from the docs.
    assert sampled != [i for i in ids if is_sampled(i, AuditSettings(rate=0.3, seed=0))]
    with pytest.raises(ValueError, match="secret"):
        is_sampled("r1", settings)
    seeded = AuditSettings(rate=0.3, seed=7)  # a configured seed draws as before this change
    digest = hashlib.sha256(b"7:request-1").digest()
    assert is_sampled("request-1", seeded) == (int.from_bytes(digest[:8], "big") / 2**64 < 0.3)


def test_wilson_interval():
    low, high = wilson_interval(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    assert round(wilson_interval(0, 10)[1], 4) == 0.2775
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_the_snapshot_counts_per_class_and_route_over_the_window():
    settings = AuditSettings(rate=1.0, window=4, max_disagreement=0.05)
    book = AuditBook(settings.window)
    for index, route in enumerate(("agree_short", "agree_short", "transfer")):
        by_model = {
            "small": {"prompt_tokens": 40, "cached_tokens": 8, "completion_tokens": 2 + index},
            "large": {"prompt_tokens": 50, "cached_tokens": 0, "completion_tokens": 0},
        }
        book.record_request(class_of("yes_no"), route, tokens=100, tokens_by_model=Tokens(by_model))
    book.record_request(class_of("text", "chartqa"), "agree_short", tokens=100)
    for disagreed in (True, True, False, False, False, False):  # the first two fall out of the window
        book.record_audit("yes_no", "agree_short", disagreed, tokens=50, at=len(book.classes))
    snapshot = book.snapshot(settings)

    yes_no = snapshot["classes"]["yes_no"]
    assert yes_no["requests"] == 3 and yes_no["routes"] == {"agree_short": 2, "transfer": 1}
    assert yes_no["tokens"] == {
        "small": {"prompt_tokens": 120, "completion_tokens": 9},  # cached tokens are not counted here
        "large": {"prompt_tokens": 150, "completion_tokens": 0},
    }
    no_tokens = {"prompt_tokens": 0, "completion_tokens": 0}
    assert snapshot["classes"]["text/chartqa"]["tokens"] == {"small": no_tokens, "large": no_tokens}
    audit = yes_no["audit"]
    assert (audit["audited"], audit["disagreed"]) == (6, 2)
    assert audit["window"] == {"audited": 4, "disagreed": 0} and audit["rate"] == 0.0
    assert audit["upper_95"] == round(wilson_interval(0, 4)[1], 4)  # 4 audits bound little...
    assert not audit["alert"] and audit["alert_evidence"] is None  # ...and show no disagreement
    assert audit["by_route"] == {"agree_short": {"audited": 6, "disagreed": 2}}
    assert snapshot["classes"]["text/chartqa"]["audit"]["rate"] is None
    assert not snapshot["classes"]["text/chartqa"]["audit"]["alert"]
    assert snapshot["audit"]["extra_token_share"] == round(300 / 400, 4)
    assert snapshot["audit"]["reference"] == "transfer" and snapshot["audit"]["report_interval_s"] == 5.0
    assert list(alerts(snapshot)) == []


@pytest.mark.parametrize(
    ("disagreed", "audited", "alert"),
    [
        (1, 1, False),  # one disagreeing audit is no evidence: its exact lower bound is 2.5 %
        (2, 2, True),  # two of two: the exact lower bound is 15.8 %
        (3, 4, True),
        (1, 10, False),
        (2, 29, False),  # rate 6.9 % but under alert_min_samples, lower bound 0.8 %
        (3, 30, True),  # rate 10 % over 30 audits: the minimum is reached
        (1, 30, False),  # rate 3.3 %: within the allowance
        (50, 1000, False),  # rate 5 %: not over it
    ],
)
def test_an_alert_fires_only_with_evidence(disagreed, audited, alert):
    settings = AuditSettings(rate=1.0, window=1000, max_disagreement=0.05, alert_min_samples=30)
    book = AuditBook(settings.window)
    for index in range(audited):
        book.record_audit("yes_no", "agree_short", index < disagreed, tokens=1, at=index)
    snapshot = book.snapshot(settings)
    audit = snapshot["classes"]["yes_no"]["audit"]
    assert audit["alert"] is alert and (audit["alert_evidence"] is not None) is alert
    assert audit["lower_95"] == round(exact_lower_bound(disagreed, audited), 4)
    assert snapshot["audit"]["alert_min_samples"] == 30
    lines = list(alerts(snapshot))
    assert len(lines) == int(alert)
    if alert:
        [(cls, line)] = lines
        assert cls == "yes_no" and f"{disagreed} of the last {audited} audits" in line
        assert "max_disagreement 0.05" in line and audit["alert_evidence"] in line


def test_the_exact_lower_bound_matches_clopper_pearson():
    # Published Clopper-Pearson lower limits (two-sided 95 %).
    for (disagreed, audited), expected in {
        (0, 5): 0.0,
        (1, 1): 0.025,
        (2, 2): 0.1581,
        (1, 10): 0.0025,
        (5, 100): 0.0164,
        (50, 1000): 0.0373,
    }.items():
        assert round(exact_lower_bound(disagreed, audited), 4) == expected
    assert exact_lower_bound(900, 5000) > 0.16  # large windows stay in floating range


def test_a_class_well_within_its_bound_raises_no_alert():
    settings = AuditSettings(rate=1.0, window=1000, max_disagreement=0.05)
    book = AuditBook(settings.window)
    for index in range(1000):
        book.record_audit("choice", "agree_short", index % 100 == 0, tokens=1, at=index)
    audit = book.snapshot(settings)["classes"]["choice"]["audit"]
    assert audit["rate"] == 0.01 and audit["upper_95"] < 0.05 and not audit["alert"]
    assert list(alerts(book.snapshot(settings))) == []


EVENTS = st.lists(
    st.tuples(
        st.integers(0, 2),  # the replica
        st.sampled_from(["yes_no", "choice", "text/chartqa"]),
        st.sampled_from(["agree_short", "agree_reasoned", "transfer"]),
        st.booleans(),  # an audit (True) or a served request
        st.booleans(),  # disagreed
        st.booleans(),  # the replica reports after this event
    ),
    max_size=60,
)


@given(EVENTS, st.integers(1, 8))
def test_the_holder_merging_replicas_reports_gives_one_books_statistics(events, window):
    """Every replica reports its whole state: merged, the reports give what one book that saw every
    event gives, windows included. A replica's death loses what it counted after its last report."""
    settings = AuditSettings(rate=1.0, window=window)
    replicas = [AuditBook(window) for _ in range(3)]
    reports: dict[int, dict] = {}
    whole = AuditBook(window)
    for at, (replica, cls, route, is_audit, disagreed, report) in enumerate(events):
        for book in (replicas[replica], whole):
            if is_audit:
                book.record_audit(cls, route, disagreed, tokens=3, at=at)
            else:
                by_model = {
                    "small": {"prompt_tokens": at, "completion_tokens": 1},
                    "large": {"prompt_tokens": 3},
                }
                repair = "answered" if disagreed else None  # a request event's flag: repaired
                book.record_request(cls, route, tokens=10, tokens_by_model=Tokens(by_model), repair=repair)
        if report:
            reports[replica] = replicas[replica].state()
    final = {index: replica.state() for index, replica in enumerate(replicas)}
    assert AuditBook.merged(final.values(), window).snapshot(settings) == whole.snapshot(settings)
    repaired = sum(e["repairs"].get("answered", 0) for e in whole.snapshot(settings)["classes"].values())
    assert repaired == sum(1 for event in events if not event[3] and event[4])

    # Replica 0 dies: the holder keeps its last report; what it counted after that is lost.
    last_report = max((at for at, event in enumerate(events) if event[0] == 0 and event[5]), default=-1)
    unreported = sum(1 for at, e in enumerate(events) if e[0] == 0 and not e[3] and at > last_report)
    empty = AuditBook(window).state()
    after_death = AuditBook.merged([reports.get(0, empty), final[1], final[2]], window).snapshot(settings)
    served = sum(entry["requests"] for entry in after_death["classes"].values())
    assert served == sum(1 for event in events if not event[3]) - unreported


def test_the_state_is_plain_data():
    book = AuditBook(5)
    tokens = Tokens({"large": {"completion_tokens": 4}})
    book.record_request("yes_no", "agree_short", 10, tokens_by_model=tokens)
    book.record_audit("yes_no", "agree_short", True, 5, at=1.5)
    book.record_not_run("shed")
    state = json.loads(json.dumps(book.state()))
    merged = AuditBook.merged([state], 5).snapshot(AuditSettings())
    assert merged == book.snapshot(AuditSettings()) and merged["audit"]["not_run"] == {"shed": 1}
    assert merged["classes"]["yes_no"]["tokens"]["large"] == {"prompt_tokens": 0, "completion_tokens": 4}


@pytest.mark.parametrize(
    ("audit", "key"),
    [({"rate": 2}, "rate"), ({"reference": "oracle"}, "reference"), ({"window": -5}, "window")],
)
def test_the_server_config_refuses_bad_audit_settings_naming_the_key(audit, key):
    from serve_app.config import load_app_config

    models = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}
    with pytest.raises(ValidationError) as error:
        load_app_config(models | {"cascade": {"audit": audit}})
    assert error.value.errors()[0]["loc"] == ("cascade", "audit", key)


def test_mai_eval_stats_prints_the_servers_statistics_as_a_table(monkeypatch, capsys):
    import httpx

    from evaluation.cli import main

    book = AuditBook(10)
    book.record_request("yes_no/pope", "agree_short", 10)
    book.record_audit("yes_no/pope", "agree_short", True, 5, at=1.0)
    book.record_audit("yes_no/pope", "agree_short", True, 5, at=2.0)  # two of two: evidence
    book.record_not_run("shed")
    seen = {}

    def get(url, headers, timeout):
        seen["url"], seen["headers"] = url, headers
        return httpx.Response(200, json=book.snapshot(AuditSettings(rate=0.05)))

    monkeypatch.setattr(httpx, "get", get)
    assert main(["stats", "--url", "http://host:8000/", "--api-key", "k1"]) == 0
    out = capsys.readouterr().out
    assert seen == {"url": "http://host:8000/v1/mai/stats", "headers": {"Authorization": "Bearer k1"}}
    assert "| yes_no/pope | all | 1 | 2 | 2 | 100.0 % |" in out and "ALERT" in out
    assert "not error against the truth" in out and "audits not run: shed 1" in out

    monkeypatch.setattr(httpx, "get", lambda url, headers, timeout: httpx.Response(401, text="no key"))
    assert main(["stats", "--url", "http://host:8000"]) == 2
