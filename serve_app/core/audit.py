"""Audits: a sampled share of the answers the cascade gave at an early exit, checked against what a
reference policy (the paper's Full RT by default) answers to the same question, and the running count
of how often the two disagree, per question class and route.

An audit measures disagreement with the reference, not error against the truth: where the reference
is the weaker answerer (on the demo pair the small model's own reasoning beats Full RT), a
disagreement may be the early exit being right.

Pure: which request is audited, the statistics and their merging. The edge runs the audits.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .audit_alerts import alert_evidence
from .audit_settings import AuditSettings
from .draws import uniform
from .intervals import exact_lower_bound, wilson_interval
from .routes import EARLY_EXITS, Route
from .trace import Tokens, nested_tokens
from .windows import Key, LatestWindow

__all__ = ["EARLY_EXITS", "AuditBook", "AuditSettings", "MergedAudits", "is_sampled"]

# Said in the stats of a class a single-model plan answers: its alert is reported, never acted on.
SINGLE_PLAN_NOTE = (
    "a single-model plan answers this class (a calibrated table chose it on labels); audits measure "
    "agreement with the reference, which may be the weaker answerer here, so an alert is reported and "
    "the plan is not switched: recalibrate to change it"
)


def is_sampled(draw_id: str, settings: AuditSettings, secret: bytes = b"") -> bool:
    """Whether the answer whose draw hashes ``draw_id`` falls in the audited share (serve_app/core/
    draws.py): with ``settings.seed``, a seeded hash of the request id, so a rerun with the same ids
    audits the same requests; without, a keyed hash under the replica's ``secret`` of a number the
    replica chose (``draws.DrawIds``)."""
    if settings.rate <= 0 or settings.rate >= 1:
        return settings.rate >= 1
    return uniform("", settings.seed, secret, draw_id) < settings.rate


@dataclass
class _Counts:
    """A class's counts since start."""

    requests: int = 0
    routes: Counter = field(default_factory=Counter)
    audited: int = 0  # also the number of audits appended to the window: the last one's ``seq``
    disagreed: int = 0
    by_route: dict[str, list[int]] = field(default_factory=dict)  # route -> [audited, disagreed]
    plans: Counter = field(default_factory=Counter)  # the cascade plans its requests ran
    tokens: Counter = field(default_factory=Counter)  # its requests' tokens per model (trace.py: Tokens)
    repairs: Counter = field(default_factory=Counter)  # its answers asked for again: answered, failed


@dataclass
class _Class(_Counts):
    recent: deque = field(default_factory=deque)  # the last ``window`` audits: (at, disagreed, route)

    def data(self, recent: Iterable[tuple[float, bool, str]]) -> dict[str, Any]:
        """The class's counts as data, ``recent`` its window's entries (all, or those not yet reported)."""
        return {
            "requests": self.requests,
            "routes": dict(self.routes),
            "plans": dict(self.plans),
            "tokens": dict(self.tokens),
            "repairs": dict(self.repairs),
            "audited": self.audited,
            "disagreed": self.disagreed,
            "by_route": {route: list(pair) for route, pair in self.by_route.items()},
            "recent": [list(item) for item in recent],
        }


class _Statistics:
    """What the ``GET /v1/mai/stats`` body reads, of one book or of all replicas merged: the classes'
    counts, the tokens, the audits not run, and each class's window (``_window``)."""

    classes: Mapping[str, _Counts]
    served_tokens: int
    audit_tokens: int
    not_run: Counter
    destinations: Counter  # requests per destination, and "<destination>:<reason>" per reason

    def _window(self, cls: str) -> tuple[int, int]:
        """The audits in ``cls``'s window, and how many of them disagreed."""
        raise NotImplementedError

    def class_body(self, cls: str, settings: AuditSettings) -> dict[str, Any]:
        """``cls``'s entry in the ``GET /v1/mai/stats`` body (``classes.<cls>``)."""
        entry = self.classes[cls]
        recent, disagreed_recent = self._window(cls)
        upper = wilson_interval(disagreed_recent, recent)[1]
        lower = exact_lower_bound(disagreed_recent, recent)
        evidence = alert_evidence(
            disagreed_recent, recent, settings.max_disagreement, settings.alert_min_samples
        )
        return {
            "requests": entry.requests,
            "routes": dict(sorted(entry.routes.items())),
            "plans": dict(sorted(entry.plans.items())),
            "tokens": nested_tokens(entry.tokens),
            "repairs": dict(sorted(entry.repairs.items())),
            "audit": {
                "audited": entry.audited,
                "disagreed": entry.disagreed,
                "window": {"audited": recent, "disagreed": disagreed_recent},
                "rate": round(disagreed_recent / recent, 4) if recent else None,
                "lower_95": round(lower, 4),
                "upper_95": round(upper, 4),
                "alert": evidence is not None,
                "alert_evidence": evidence,  # why it fires; it rests on window.audited samples
                "note": SINGLE_PLAN_NOTE if Route.SINGLE in entry.by_route else None,
                "by_route": {
                    route: {"audited": audited, "disagreed": disagreed}
                    for route, (audited, disagreed) in sorted(entry.by_route.items())
                },
            },
        }

    def destinations_body(self) -> dict[str, Any]:
        """``destinations`` in the ``GET /v1/mai/stats`` body: per destination (``cascade``,
        ``passthrough``), its requests, their share of all counted, and each reason's count (a request
        passed through for two parameters counts under each)."""
        total = sum(count for name, count in self.destinations.items() if ":" not in name)
        body: dict[str, Any] = {}
        for name in ("cascade", "passthrough"):
            requests = self.destinations.get(name, 0)
            reasons = {
                key.partition(":")[2]: count
                for key, count in sorted(self.destinations.items())
                if key.startswith(f"{name}:")
            }
            share = round(requests / total, 4) if total else None
            body[name] = {"requests": requests, "share": share, "reasons": reasons}
        return body

    def snapshot(self, settings: AuditSettings) -> dict[str, Any]:
        """The ``GET /v1/mai/stats`` body."""
        share = self.audit_tokens / self.served_tokens if self.served_tokens else 0.0
        return {
            "destinations": self.destinations_body(),
            "classes": {cls: self.class_body(cls, settings) for cls in sorted(self.classes)},
            "audit": {
                "rate": settings.rate,
                "reference": settings.reference.value,
                "max_disagreement": settings.max_disagreement,
                "alert_min_samples": settings.alert_min_samples,
                "window": settings.window,
                "max_in_flight": settings.max_in_flight,
                "report_interval_s": settings.report_interval_s,
                "extra_token_share": round(share, 4),
                "not_run": dict(sorted(self.not_run.items())),
                "measures": "disagreement with the reference policy, not error against the truth",
            },
        }


class AuditBook(_Statistics):
    """The statistics of one ingress replica, or of all merged: requests per class and route, audits
    and disagreements since start and over the last ``window`` audits of each class, audits not run
    (shed, full, cancelled, failed, ...), and what audits cost in tokens against served work.

    A replica reports what changed since the holder's last acknowledgement (serve_app/edge/
    stats_reporter.py): its counts of the classes that changed and the audits appended to their windows
    since (``audited`` counts them, so the i-th of a window of n is audit ``audited - n + i + 1``).
    The stats holder keeps all replicas' statistics merged (``MergedAudits``): a replica's death loses
    what it counted since its last report, the holder's death nothing the replicas still hold.
    ``state()`` and ``merged`` are the whole books and their exact merge, the reference the holder's
    merged view is tested against."""

    def __init__(self, window: int):
        self.window = window
        self.classes: dict[str, _Class] = {}
        self.served_tokens = 0
        self.audit_tokens = 0
        self.not_run: Counter = Counter()  # reason -> audits sampled but not run to the end
        self.destinations: Counter = Counter()

    def record_destination(self, destination: str, reasons: tuple[str, ...]) -> None:
        """A request went to ``destination`` (``cascade`` or ``passthrough``) for ``reasons``."""
        self.destinations[destination] += 1
        self.destinations.update(f"{destination}:{reason}" for reason in reasons)

    def record_request(
        self,
        cls: str,
        route: str,
        tokens: int,
        plan: str | None = None,
        tokens_by_model: Tokens | None = None,
        repair: str | None = None,
    ) -> None:
        """A served request: ``tokens`` in all, per model (``Trace.tokens()``); its ``repair``'s end."""
        entry = self._class(cls)
        entry.repairs.update([repair] if repair is not None else [])
        entry.requests += 1
        entry.routes[route] += 1
        if plan is not None:
            entry.plans[plan] += 1
        entry.tokens.update(tokens_by_model.counts() if tokens_by_model is not None else {})
        self.served_tokens += tokens

    def record_audit(self, cls: str, route: str, disagreed: bool, tokens: int, at: float) -> None:
        entry = self._class(cls)
        entry.audited += 1
        entry.disagreed += disagreed
        counts = entry.by_route.setdefault(route, [0, 0])
        counts[0] += 1
        counts[1] += disagreed
        entry.recent.append((at, disagreed, route))
        self.audit_tokens += tokens

    def record_not_run(self, reason: str, tokens: int = 0) -> None:
        """An audit sampled but not run to the end: ``shed`` (the large model was busy), ``cancelled``
        (a served request needed the model), ``failed`` (the reference policy failed)."""
        self.not_run[reason] += 1
        self.audit_tokens += tokens

    def _class(self, cls: str) -> _Class:
        if cls not in self.classes:
            self.classes[cls] = _Class(recent=deque(maxlen=self.window))
        return self.classes[cls]

    def state(self) -> dict[str, Any]:
        """Everything counted, as plain data (what a replica reports)."""
        return {
            "classes": {cls: entry.data(entry.recent) for cls, entry in self.classes.items()},
            "served_tokens": self.served_tokens,
            "audit_tokens": self.audit_tokens,
            "not_run": dict(self.not_run),
            "destinations": dict(self.destinations),
        }

    @classmethod
    def merged(cls, states: Iterable[Mapping[str, Any]], window: int) -> AuditBook:
        """One book from several replicas' states: counts summed, each class's window the latest
        ``window`` audits of all replicas by time."""
        book = cls(window)
        recent: dict[str, list[tuple[float, bool, str]]] = {}
        for state in states:
            for name, entry in state["classes"].items():
                merged = book._class(name)
                merged.requests += entry["requests"]
                merged.routes.update(entry["routes"])
                merged.plans.update(entry.get("plans", {}))
                merged.tokens.update(entry.get("tokens", {}))
                merged.repairs.update(entry.get("repairs", {}))
                merged.audited += entry["audited"]
                merged.disagreed += entry["disagreed"]
                for route, (audited, disagreed) in entry["by_route"].items():
                    counts = merged.by_route.setdefault(route, [0, 0])
                    counts[0] += audited
                    counts[1] += disagreed
                recent.setdefault(name, []).extend((at, bool(d), route) for at, d, route in entry["recent"])
            book.served_tokens += state["served_tokens"]
            book.audit_tokens += state["audit_tokens"]
            book.not_run.update(state["not_run"])
            book.destinations.update(state.get("destinations", {}))
        for name, outcomes in recent.items():
            book.classes[name].recent.extend(sorted(outcomes, key=lambda item: item[0]))
        return book

    def exit_bounds(self, cls: str) -> dict[str, float]:
        """Per early-exit route of ``cls``: the 95 % upper bound of its audits' disagreement over the
        class's window (a route with no audit in the window is absent)."""
        entry = self.classes.get(cls)
        counts: dict[str, list[int]] = {}
        for _, disagreed, route in entry.recent if entry is not None else ():
            pair = counts.setdefault(route, [0, 0])
            pair[0] += 1
            pair[1] += disagreed
        return {route: wilson_interval(d, n)[1] for route, (n, d) in counts.items()}

    def _window(self, cls: str) -> tuple[int, int]:
        recent = self.classes[cls].recent
        return len(recent), sum(disagreed for _, disagreed, _ in recent)


class _MergedAuditClass(_Counts):
    """A class's counts summed over the replicas, its window of all replicas' latest audits
    ``(disagreed, route)``, and the window's counts, kept as audits enter and leave it."""

    def __init__(self, window: int):
        super().__init__()
        self.window: LatestWindow[tuple[bool, str]] = LatestWindow(window)
        self.window_disagreed = 0
        self.window_routes: dict[str, list[int]] = {}  # route -> [audited, disagreed] in the window

    def _count(self, item: tuple[bool, str], sign: int) -> None:
        disagreed, route = item
        self.window_disagreed += sign * disagreed
        pair = self.window_routes.setdefault(route, [0, 0])
        pair[0] += sign
        pair[1] += sign * disagreed
        if not pair[0]:
            del self.window_routes[route]


class MergedAudits(_Statistics):
    """Every replica's audit statistics as one book, kept up to date report by report (the stats
    holder's, serve_app/fleet/stats_holder.py): each count the sum of the replicas' latest counts (a
    report moves it by the difference from that replica's previous one), each class's window the
    latest ``window`` audits of all replicas (``windows.LatestWindow``, by ``(at, rank, seq)``) with
    its counts updated as an audit enters or leaves it. For the same reports it reads as
    ``AuditBook.merged`` of the replicas' states in rank order, without rebuilding anything."""

    def __init__(self, window: int):
        self.window = window
        self.classes: dict[str, _MergedAuditClass] = {}
        self.served_tokens = 0
        self.audit_tokens = 0
        self.not_run: Counter = Counter()
        self.destinations: Counter = Counter()

    def _class(self, cls: str) -> _MergedAuditClass:
        if cls not in self.classes:
            self.classes[cls] = _MergedAuditClass(self.window)
        return self.classes[cls]

    def count(self, cls: str, new: Mapping[str, Any], old: Mapping[str, Any] | None) -> None:
        """A replica's counts of ``cls`` went from ``old`` (None: none reported) to ``new``, both as
        ``AuditBook.state()`` gives a class's (``recent`` not read)."""
        entry = self._class(cls)
        old = old or {}
        entry.requests += new["requests"] - old.get("requests", 0)
        entry.audited += new["audited"] - old.get("audited", 0)
        entry.disagreed += new["disagreed"] - old.get("disagreed", 0)
        _move(entry.routes, new["routes"], old.get("routes", {}))
        _move(entry.plans, new.get("plans", {}), old.get("plans", {}))
        _move(entry.tokens, new.get("tokens", {}), old.get("tokens", {}))
        _move(entry.repairs, new.get("repairs", {}), old.get("repairs", {}))
        for route in new["by_route"].keys() | old.get("by_route", {}).keys():
            now, before = new["by_route"].get(route, (0, 0)), old.get("by_route", {}).get(route, (0, 0))
            if tuple(now) != tuple(before):
                counts = entry.by_route.setdefault(route, [0, 0])
                counts[0] += now[0] - before[0]
                counts[1] += now[1] - before[1]
                if counts == [0, 0]:
                    del entry.by_route[route]

    def count_totals(self, new: Mapping[str, Any], old: Mapping[str, Any] | None) -> None:
        """A replica's totals went from ``old`` to ``new`` (an older release's has no ``destinations``)."""
        old = old or {}
        self.served_tokens += new["served_tokens"] - old.get("served_tokens", 0)
        self.audit_tokens += new["audit_tokens"] - old.get("audit_tokens", 0)
        _move(self.not_run, new["not_run"], old.get("not_run", {}))
        _move(self.destinations, new.get("destinations", {}), old.get("destinations", {}))

    def add_audit(self, cls: str, key: Key, disagreed: bool, route: str) -> None:
        """One audit of a replica's window, at ``key`` ``(at, rank, seq)``."""
        entry = self._class(cls)
        item = (bool(disagreed), route)
        kept, evicted = entry.window.add(key, item)
        if kept:
            entry._count(item, 1)
        if evicted is not None:
            entry._count(evicted, -1)

    def exit_bounds(self, cls: str) -> dict[str, float]:
        """As ``AuditBook.exit_bounds``: per early-exit route, the 95 % upper bound over the window."""
        entry = self.classes.get(cls)
        routes = entry.window_routes if entry is not None else {}
        return {route: wilson_interval(d, n)[1] for route, (n, d) in routes.items()}

    def _window(self, cls: str) -> tuple[int, int]:
        entry = self.classes[cls]
        return len(entry.window), entry.window_disagreed


def _move(counter: Counter, new: Mapping[str, int], old: Mapping[str, int]) -> None:
    """Add ``new - old`` to ``counter``, key by key; a count that falls to 0 leaves it."""
    for key in new.keys() | old.keys():
        change = new.get(key, 0) - old.get(key, 0)
        if change:
            counter[key] += change
            if not counter[key]:
                del counter[key]
