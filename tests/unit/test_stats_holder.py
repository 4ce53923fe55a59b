"""The stats holder's incremental merge (serve_app/fleet/stats_holder.py) and the replicas' reports
(serve_app/edge/stats_reporter.py), against the exact merge of the replicas' whole books
(``AuditBook.merged``, ``PlanBook.merged``): the same body, bounds, estimates to the bit, allowed and
chosen plans, tokens per model, through lost replies and holder restarts; and the replicas' overload
levels as the holder last heard them."""

import asyncio
import dataclasses
import logging
import pickle
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from serve_app.core.audit import AuditBook, AuditSettings
from serve_app.core.decision import fleet_overload
from serve_app.core.plan_choice import (
    AdaptiveSettings,
    allowed_plans,
    choose_plan,
    explore_draw,
    reference_plan,
)
from serve_app.core.plan_stats import Observation, PlanBook, estimates_of
from serve_app.core.plans import Plan
from serve_app.core.roles import ROLES
from serve_app.core.routes import COMPLETED, EARLY_EXITS
from serve_app.core.trace import STATS_TOKEN_FIELDS, Tokens
from serve_app.edge.learning import PlanController
from serve_app.edge.stats_reporter import StatsReporter
from serve_app.fleet.stats_holder import StatsHolder, stats_body

from .ingress_replica import report_to

CLASSES = ["yes_no", "choice", "text/chartqa"]
# As a trace names them: the routes of completed runs, of them the early exits an audit checks, the plans.
ROUTES = [route.value for route in COMPLETED]
EARLY = [route.value for route in EARLY_EXITS]
PLANS = [plan.value for plan in Plan]
# A time: a replica's clock moves to it unless it is past it already (it never goes back); few times,
# so ties within and across replicas are common.
TIME = st.integers(0, 8).map(float)
SECONDS = st.one_of(st.none(), st.floats(0, 1e4, allow_nan=False), st.sampled_from([0.1, 0.2, 0.3, 1e-310]))
TOKENS = st.one_of(st.none(), st.integers(0, 5000))
REPLICA = st.integers(0, 3)  # modulo the replicas drawn
LEVELS = ["normal", "shed", "relax"]
# A request's tokens per model, as ``Trace.tokens()`` gives them (zeros and cached tokens too).
TOKENS_BY_MODEL = st.fixed_dictionaries(
    {
        model: st.fixed_dictionaries(
            {
                "prompt_tokens": st.integers(0, 3000),
                "cached_tokens": TOKENS,
                "completion_tokens": st.integers(0, 300),
            }
        ).map(lambda tokens: {kind: count or 0 for kind, count in tokens.items()})
        for model in ROLES
    }
)
CLASS = st.integers(0, 2)  # modulo the classes drawn
AUDIT = st.tuples(st.just("audit"), REPLICA, CLASS, st.sampled_from(EARLY), st.booleans(), TIME)
OBSERVE = st.tuples(
    st.just("observe"),
    REPLICA,
    CLASS,
    st.sampled_from(PLANS),
    st.sampled_from(ROUTES),
    st.tuples(SECONDS, SECONDS, SECONDS, SECONDS, TOKENS, TOKENS, SECONDS),
    TIME,
)
EVENTS = st.lists(
    st.one_of(
        st.tuples(
            st.just("request"),
            REPLICA,
            CLASS,
            st.sampled_from(ROUTES),
            st.sampled_from([None, *PLANS]),
            TOKENS_BY_MODEL,
        ),
        AUDIT,
        AUDIT,  # twice as likely as the others: windows fill up
        OBSERVE,
        OBSERVE,
        st.tuples(st.just("not_run"), REPLICA, st.sampled_from(["shed", "failed"])),
        st.tuples(st.just("level"), REPLICA, st.sampled_from(LEVELS)),  # its overload level moves
        st.tuples(st.just("report"), REPLICA, st.booleans()),  # True: the reply is lost
        st.tuples(st.just("restart")),
    ),
    min_size=10,
    max_size=100,
)


class Lost(Exception):
    """The holder applied the report; its reply never reached the replica."""


class Replica:
    def __init__(self, name: str, audit_window: int, plan_window: int):
        self.name, self.clock, self.level = name, 0.0, "normal"
        self.audits, self.plans = AuditBook(audit_window), PlanBook(plan_window)
        self.reporter = StatsReporter(self.audits, self.plans, lambda: self.level)
        self.tokens: Counter = Counter()  # (class, model, kind) -> its requests' tokens, tallied here


@dataclasses.dataclass
class Reported:
    """A replica as the holder last applied its report."""

    audits: dict
    plans: dict
    level: str
    tokens: Counter


def exchange(holder: StatsHolder, replica: Replica, reported: dict, *, lose: bool = False):
    """One report of ``replica``; ``reported`` keeps the books as the holder last applied them."""

    async def send(report):
        reply = holder.report(replica.name, report)
        if not reply.get("resend"):
            reported[replica.name] = Reported(
                replica.audits.state(), replica.plans.state(), replica.level, Counter(replica.tokens)
            )
            if lose:
                raise Lost()
        return reply

    try:
        return asyncio.run(replica.reporter.exchange(send))
    except Lost:
        return None


def bits(estimates) -> str:
    """Every field, floats by their shortest repr: equal strings, equal bits."""
    return repr(dataclasses.astuple(estimates))


def check_the_same_view(holder: StatsHolder, reported: dict, reply, audit: AuditSettings, adaptive):
    audits = AuditBook.merged([replica.audits for replica in reported.values()], audit.window)
    plans = PlanBook.merged([replica.plans for replica in reported.values()], adaptive.window)
    overload = fleet_overload(False, [replica.level for replica in reported.values()])
    body = holder.snapshot()
    assert body == stats_body(audits, plans, audit, adaptive, overload=overload)
    tallied = sum((replica.tokens for replica in reported.values()), Counter())
    for cls, entry in body["classes"].items():  # the tokens as the replicas tallied them, not as reported
        assert entry["tokens"] == {m: {k: tallied[cls, m, k] for k in STATS_TOKEN_FIELDS} for m in ROLES}
    assert set(holder.audits.classes) == set(audits.classes)
    assert set(holder.plans.classes) == set(plans.classes)
    controller = PlanController(adaptive, audit, AuditBook(audit.window), shared=True)
    if reply is not None:
        controller.update(reply)
    reference = reference_plan(audit.reference)
    for cls in CLASSES:
        bounds = audits.exit_bounds(cls)
        assert holder.audits.exit_bounds(cls) == bounds
        estimates = plans.estimates(cls)
        assert bits(holder.plans.estimates(cls)) == bits(estimates)
        allowed = allowed_plans(
            adaptive, cls, reference=reference, exit_bounds=bounds, max_disagreement=audit.max_disagreement
        )
        if reply is None:
            continue
        assert reply["exit_bounds"].get(cls, {}) == bounds
        assert controller.allowed(cls) == allowed
        if cls in plans.classes:  # the holder's estimates; else the replica's own book's
            assert bits(controller.estimates(cls)) == bits(estimates)
            for request in ("a", "b", "c", "d"):
                draw = explore_draw(request, adaptive.seed)
                chosen = choose_plan(adaptive, cls, estimates, list(allowed), draw=draw)
                assert controller.choose(cls, request) == chosen


@settings(max_examples=200, deadline=None)
@given(
    EVENTS,
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(1, 8),
    st.integers(1, 8),
    st.sampled_from([0.05, 0.4, 0.7]),
    st.integers(1, 3),
)
def test_the_holder_gives_the_exact_merge_of_what_was_reported(
    events, replicas, classes, audit_window, plan_window, max_disagreement, min_samples
):
    audit = AuditSettings(rate=1.0, window=audit_window, max_disagreement=max_disagreement)
    adaptive = AdaptiveSettings(
        mode="learn", window=plan_window, min_samples=min_samples, explore=0.3, seed=0
    )  # seeded: the controller's explore draws are the ones the check recomputes
    fleet = [Replica(f"r{index}", audit_window, plan_window) for index in range(replicas)]
    holder = StatsHolder(audit, adaptive)
    reported: dict = {}  # name -> what the holder applied last (``Reported``), in its rank order
    for event in events:
        kind = event[0]
        if kind == "restart":  # the holder dies and Serve starts another: it knows nobody
            holder, reported = StatsHolder(audit, adaptive), {}
            continue
        replica = fleet[event[1] % replicas]
        if kind in ("request", "audit", "observe"):
            event = (*event[:2], CLASSES[event[2] % classes], *event[3:])
        if kind == "request":
            _, _, cls, route, plan, by_model = event
            repair = "answered" if route == "transfer" else None  # some requests' answers were repaired
            tokens = Tokens(by_model)
            replica.audits.record_request(
                cls, route, tokens=7, plan=plan, tokens_by_model=tokens, repair=repair
            )
            replica.tokens.update({(cls, m, k): by_model[m][k] for m in ROLES for k in STATS_TOKEN_FIELDS})
        elif kind == "audit":
            _, _, cls, route, disagreed, at = event
            replica.clock = max(replica.clock, at)
            replica.audits.record_audit(cls, route, disagreed, tokens=3, at=replica.clock)
        elif kind == "observe":
            _, _, cls, plan, route, (stage1, small, large, reasoning, transfer, ltok, ttok), at = event
            replica.clock = max(replica.clock, at)
            observation = Observation(
                replica.clock, plan, route, stage1, large, reasoning, transfer, ltok, ttok, small
            )
            replica.plans.record(cls, observation)
        elif kind == "not_run":
            replica.audits.record_not_run(event[2], tokens=2)
        elif kind == "level":
            replica.level = event[2]
        else:
            reply = exchange(holder, replica, reported, lose=event[2])
            check_the_same_view(holder, reported, reply, audit, adaptive)
    for replica in fleet:  # at the end every replica reports once more
        reply = exchange(holder, replica, reported)
        check_the_same_view(holder, reported, reply, audit, adaptive)


# ---------------------------------------------------------------------------------------------------


def audited_replica(name: str, audits: int, *, window: int = 1000, at: float = 0.0) -> Replica:
    replica = Replica(name, window, 500)
    for index in range(audits):
        replica.audits.record_request("yes_no", "agree_short", tokens=5, plan="sequential")
        replica.audits.record_audit("yes_no", "agree_short", index % 4 == 0, tokens=5, at=at + index)
        replica.plans.record("yes_no", Observation(at + index, "sequential", "agree_short", stage1_s=0.25))
    return replica


def test_a_holder_that_restarted_asks_for_everything_and_gets_it_in_the_same_exchange():
    audit, adaptive = AuditSettings(rate=1.0, window=50), AdaptiveSettings(window=20)
    holder, replica, calls = StatsHolder(audit, adaptive), audited_replica("a", 30), []

    async def send(report):
        calls.append(report)
        return holder.report("a", report)

    asyncio.run(replica.reporter.exchange(send))
    replica.audits.record_audit("yes_no", "agree_short", True, tokens=5, at=40.0)
    holder = StatsHolder(audit, adaptive)  # restarted: it knows nobody
    reply = asyncio.run(replica.reporter.exchange(send))
    assert [report["full"] for report in calls] == [True, False, True]
    assert len(calls[1]["audits"]["yes_no"]["recent"]) == 1  # only the new audit, refused
    assert (
        len(calls[2]["audits"]["yes_no"]["recent"]) == 31 and len(calls[2]["plans"]["yes_no"]["rows"]) == 30
    )
    assert reply["acked"] == {"audits": {"yes_no": 31}, "plans": {"yes_no": 30}}
    merged = AuditBook.merged([replica.audits.state()], 50)
    assert (
        holder.snapshot()["classes"]["yes_no"]["audit"]
        == merged.snapshot(audit)["classes"]["yes_no"]["audit"]
    )


def test_a_report_whose_reply_was_lost_is_sent_again_and_counts_once():
    audit = AuditSettings(rate=1.0, window=50)
    holder, replica = StatsHolder(audit), audited_replica("a", 10)
    report_to(holder, "a", replica.reporter)
    replica.audits.record_request("yes_no", "transfer", tokens=5)
    replica.audits.record_audit("yes_no", "agree_short", True, tokens=5, at=20.0)

    async def lost(report):
        holder.report("a", report)
        raise ConnectionError("the reply never came")

    try:
        asyncio.run(replica.reporter.exchange(lost))
    except ConnectionError:
        pass
    report = replica.reporter.report()  # the same change again: it was never acknowledged
    assert len(report["audits"]["yes_no"]["recent"]) == 1
    reply = holder.report("a", report)
    replica.reporter.acknowledged(reply)
    body = holder.snapshot()["classes"]["yes_no"]
    assert (
        body["requests"] == 11 and body["audit"]["audited"] == 11 and body["audit"]["window"]["audited"] == 11
    )
    assert body == AuditBook.merged([replica.audits.state()], 50).snapshot(audit)["classes"]["yes_no"] | {
        "plan": body["plan"]
    }
    # An old report delivered late changes no count.
    stale = dict(report, number=1, audits={"yes_no": dict(report["audits"]["yes_no"], requests=3)})
    holder.report("a", stale)
    assert holder.snapshot()["classes"]["yes_no"]["requests"] == 11


def test_an_audit_older_than_a_full_window_is_dropped():
    audit = AuditSettings(rate=1.0, window=4)
    holder = StatsHolder(audit)
    late, early = audited_replica("late", 4, window=4, at=100.0), audited_replica("early", 3, window=4)
    report_to(holder, "late", late.reporter)
    report_to(holder, "early", early.reporter)  # every audit of it older than the window's oldest
    entry = holder.audits.classes["yes_no"]
    assert len(entry.window) == 4 and all(key[0] >= 100.0 for key, _ in entry.window.entries)
    assert entry.audited == 7  # counted since start all the same
    merged = AuditBook.merged([late.audits.state(), early.audits.state()], 4)
    assert holder.audits.snapshot(audit) == merged.snapshot(audit)


def test_a_report_carries_what_changed_not_the_windows():
    holder, replica = StatsHolder(AuditSettings(rate=1.0, window=1000)), audited_replica("a", 1000)
    replica.audits.record_request("choice", "agree_short", tokens=5)
    first = replica.reporter.report()
    replica.reporter.acknowledged(holder.report("a", first))
    quiet = replica.reporter.report()  # nothing new
    assert quiet["audits"] == {} and quiet["plans"] == {}
    replica.reporter.acknowledged(holder.report("a", quiet))
    replica.audits.record_request("yes_no", "agree_short", tokens=5)
    replica.audits.record_audit("yes_no", "agree_short", False, tokens=5, at=2000.0)
    replica.plans.record("yes_no", Observation(2000.0, "eager", "agree_short", stage1_s=0.5))
    one = replica.reporter.report()
    assert set(one["audits"]) == {"yes_no"} and len(one["audits"]["yes_no"]["recent"]) == 1
    assert len(one["plans"]["yes_no"]["rows"]) == 1
    assert len(pickle.dumps(one)) < len(pickle.dumps(first)) / 50 and len(pickle.dumps(quiet)) < 400
    reply = holder.report("a", one)
    assert reply["estimates"]["yes_no"] == dataclasses.asdict(estimates_of(replica.plans.classes["yes_no"]))


def test_the_holder_warns_once_per_alert_and_again_after_the_class_recovered():
    # The first alert rests on the exact lower bound (4 of 4 disagreed), the second on the rate over a
    # full window of alert_min_samples audits (4 of 10, 40 % > 30 %).
    audit = AuditSettings(rate=1.0, window=10, max_disagreement=0.3, alert_min_samples=10)
    holder, replica = StatsHolder(audit), Replica("a", 10, 10)
    log, records = logging.getLogger("ray.serve"), []
    handler = logging.Handler()
    handler.emit = records.append
    log.addHandler(handler)
    try:
        for index in range(30):  # disagreeing, then agreeing, then disagreeing again
            disagreed = index < 10 or index >= 25
            replica.audits.record_audit("yes_no", "agree_short", disagreed, tokens=1, at=float(index))
            report_to(holder, "a", replica.reporter)
    finally:
        log.removeHandler(handler)
    warnings = [record.getMessage() for record in records if "MAI audit alert" in record.getMessage()]
    assert len(warnings) == 2 and all("class yes_no" in line for line in warnings)
    assert "lower bound" in warnings[0] and "over 10 >= 10 audits" in warnings[1]


def test_the_estimates_of_one_book_and_of_the_running_sums_agree_on_odd_values():
    holder, replica = StatsHolder(AuditSettings(), AdaptiveSettings(window=3)), Replica("a", 5, 3)
    book = replica.plans
    for index, value in enumerate([0.1, 0.2, 0.3, 1e-310, 1e16, 1.0, float("inf"), 2.0, 3.0, 4.0]):
        book.record(
            "x", Observation(float(index), Plan.REASON_FIRST.value, "agree_reasoned", reasoning_s=value)
        )
        report_to(holder, "a", replica.reporter)
        assert bits(holder.plans.estimates("x")) == bits(book.estimates("x"))


def test_ties_of_time_go_as_a_stable_sort_of_the_replicas_in_the_order_they_first_reported():
    holder = StatsHolder(AuditSettings(rate=1.0, window=1), AdaptiveSettings(window=1))
    a, b = Replica("a", 1, 1), Replica("b", 1, 1)
    a.audits.record_audit("yes_no", "agree_short", True, tokens=1, at=5.0)
    b.audits.record_audit("yes_no", "agree_reasoned", False, tokens=1, at=5.0)
    a.plans.record("yes_no", Observation(5.0, "sequential", "agree_short", stage1_s=1.0))
    b.plans.record("yes_no", Observation(5.0, "sequential", "transfer", stage1_s=2.0))
    report_to(holder, "b", b.reporter)  # b reported first: a's entries sort after b's at the same time
    report_to(holder, "a", a.reporter)
    audits = AuditBook.merged([b.audits.state(), a.audits.state()], 1)
    plans = PlanBook.merged([b.plans.state(), a.plans.state()], 1)
    assert holder.audits.exit_bounds("yes_no") == audits.exit_bounds("yes_no")
    assert list(holder.audits.exit_bounds("yes_no")) == ["agree_short"]  # a's, the later in the sort
    assert holder.plans.estimates("yes_no") == plans.estimates("yes_no")
    assert holder.plans.estimates("yes_no").stage1_s == 1.0


def levels(holder: StatsHolder) -> tuple[str, dict]:
    overload = holder.snapshot()["overload"]
    return overload["level"], overload["replicas"]


def test_the_overload_level_is_the_highest_of_the_replicas_heard_from_within_three_intervals():
    now = [0.0]
    holder = StatsHolder(AuditSettings(report_interval_s=5.0), overload_enabled=True, clock=lambda: now[0])
    assert holder.snapshot()["overload"] == {
        "enabled": True,
        "level": "normal",
        "replicas": {"normal": 0, "shed": 0, "relax": 0},
    }
    a, b, c = (Replica(name, 10, 10) for name in "abc")
    a.level, b.level = "relax", "shed"
    report_to(holder, "a", a.reporter)
    now[0] = 10.0
    report_to(holder, "b", b.reporter)
    report_to(holder, "c", c.reporter)
    assert levels(holder) == ("relax", {"normal": 1, "shed": 1, "relax": 1})
    now[0] = 15.0  # a's report is three intervals old: it still counts
    assert levels(holder) == ("relax", {"normal": 1, "shed": 1, "relax": 1})
    now[0] = 15.5  # older than that: a is gone from the view (its counts stay)
    assert levels(holder) == ("shed", {"normal": 1, "shed": 1, "relax": 0})
    a.level = "normal"
    quiet = a.reporter.report()  # nothing else changed: the level travels all the same
    assert quiet["audits"] == {} and quiet["overload"] == "normal"
    a.reporter.acknowledged(holder.report("a", quiet))
    assert levels(holder) == ("shed", {"normal": 2, "shed": 1, "relax": 0})
    now[0] = 100.0
    assert levels(holder) == ("normal", {"normal": 0, "shed": 0, "relax": 0})


def test_a_late_report_moves_no_level_and_overload_off_says_so():
    now = [0.0]
    holder = StatsHolder(AuditSettings(), clock=lambda: now[0])
    replica = Replica("a", 10, 10)
    replica.level = "shed"
    late = replica.reporter.report()
    replica.reporter.full = True  # the late one was never acknowledged: the next is full again
    replica.level = "normal"
    report_to(holder, "a", replica.reporter)
    holder.report("a", late)  # older than the one applied
    assert holder.snapshot()["overload"] == {
        "enabled": False,
        "level": "normal",
        "replicas": {"normal": 1, "shed": 0, "relax": 0},
    }
