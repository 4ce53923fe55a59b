// The trace as a timeline: one bar per stage on a shared time axis (a stage's start offset and its
// latency), the two calls of stage 1 side by side in time, and each check between stages with the
// two answers, their confidences and the verdict.

import { el, seconds, tone } from "./dom.js";

// The stages each kind of check compares: the check's row follows the last of them.
const CHECKED = {
  short: ["short_small", "short_large"],
  reasoned: ["reason_small", "stage2_small", "short_large"],
  confident_large: ["short_small", "short_large"],
};

/** The stages, each with its start: the trace's `start_s`; a trace without it (an older server) has
 * its stages laid one after another, and says so in their title. */
function withStarts(stages) {
  if (stages.every((stage) => typeof stage.start_s === "number")) return stages;
  let at = 0;
  return stages.map((stage) => {
    const placed = { ...stage, start_s: at, error: stage.error ?? "placed one after another: this trace has no start times" };
    at += stage.latency_s ?? 0;
    return placed;
  });
}

function end(stage) {
  return (stage.start_s ?? 0) + (stage.latency_s ?? 0);
}

function place(node, from, to, total) {
  const left = Math.min((100 * from) / total, 99.4);
  node.style.left = `${left}%`;
  node.style.width = `${Math.min(Math.max((100 * (to - from)) / total, 0.6), 100 - left)}%`;
}

function tokens(stage) {
  const cached = stage.cached_tokens ? `, ${stage.cached_tokens} cached` : "";
  return `${stage.prompt_tokens} in${cached} · ${stage.completion_tokens} out`;
}

function answerText(answer, confidence) {
  if (answer === null || answer === undefined) return "no answer read";
  const sure = confidence === null || confidence === undefined ? "" : ` (${confidence.toFixed(2)})`;
  return `“${answer}”${sure}`;
}

function stageRow(stage, total, transfer) {
  const bar = el(
    "div",
    {
      class: `bar ${tone(stage.model)} status-${stage.status}`,
      "data-mai": "stage",
      "data-stage": stage.name,
      title: stage.error ?? stage.output ?? "",
    },
    el("span", { class: "bar-label" }, seconds(stage.latency_s)),
  );
  place(bar, stage.start_s ?? 0, end(stage), total);
  const said = stage.status === "ok" ? answerText(stage.answer, stage.confidence) : [stage.status, stage.error].filter(Boolean).join(": ");
  const detail = [`${stage.model} · ${stage.prompt_kind} · ${tokens(stage)} · ${seconds(stage.latency_s)}`, said];
  if (stage.name === "transfer_large" && transfer) {
    detail.push(`read ${transfer.tokens_after} of ${transfer.tokens_before} ${transfer.unit} of the reasoning (${transfer.selector})`);
  }
  if (stage.replica) detail.push(`replica ${stage.replica}`);
  return el(
    "div",
    { class: "row" },
    el("div", { class: "row-name" }, el("strong", {}, stage.name), ...detail.map((line) => el("span", { class: "muted" }, line))),
    el("div", { class: "track" }, bar),
  );
}

// Whose answers a check holds, in its order (serve_app/core/cascade.py: _verified, _confident_large).
const CHECK_SIDES = {
  short: ["small", "large"],
  reasoned: ["small reasoned", "large"],
  confident_large: ["large", "small"],
};

function verdictOf(check) {
  if (check.check === "confident_large") {
    if (check.accepted) return `the large answer is confident enough (≥ ${check.min_confidence}): accepted`;
    return `not settled by the large answer alone (threshold ${check.min_confidence})`;
  }
  if (check.accepted) return "agree";
  if (check.matched) return `agree, but not both confident enough (min_confidence ${check.min_confidence})`;
  return "disagree";
}

function checkRow(check, at, total) {
  const sides = CHECK_SIDES[check.check] ?? check.answers.map((_, i) => `answer ${i + 1}`);
  const pair = check.answers
    .map((answer, i) => `${sides[i]} ${answerText(answer, check.confidences[i])}${check.valid?.[i] === false ? " (not valid for the question)" : ""}`)
    .join(" vs ");
  const outcome = check.accepted ? "agree" : "disagree";
  const marker = el("div", { class: `check-mark ${check.accepted ? "accepted" : "rejected"}` });
  marker.style.left = `${(100 * at) / total}%`;
  const label = el("span", { class: `check-text ${outcome}${at > total / 2 ? " before" : ""}` }, check.accepted ? "the cascade stops here" : "goes on");
  label.style.left = `${(100 * at) / total}%`;
  return el(
    "div",
    { class: "row check", "data-mai": "check", "data-check": check.check },
    el(
      "div",
      { class: "row-name" },
      el("strong", {}, `check: ${check.check}`),
      el("span", { class: "muted" }, pair),
      el("span", { class: `verdict ${outcome}` }, verdictOf(check)),
    ),
    el("div", { class: "track" }, marker, label),
  );
}

function axis(total) {
  const ticks = el("div", { class: "track axis" });
  for (const share of [0, 0.25, 0.5, 0.75, 1]) {
    const tick = el("span", { class: "tick" }, seconds(share * total));
    tick.style.left = `${100 * share}%`;
    ticks.append(tick);
  }
  return el("div", { class: "row" }, el("div", { class: "row-name muted" }, "seconds since the cascade started"), ticks);
}

/** Render `trace` (the reply's `trace`) into `container`. */
export function renderTrace(container, trace) {
  const stages = withStarts(trace.stages ?? []);
  if (!stages.length) {
    container.replaceChildren(el("p", { class: "muted" }, "No stage ran: the request ended before any model was called."));
    return;
  }
  const total = Math.max(trace.latency_s ?? 0, ...stages.map(end), 1e-3);
  const rows = stages.map((stage) => ({ node: stageRow(stage, total, trace.transfer), name: stage.name }));
  for (const check of trace.checks ?? []) {
    const compared = CHECKED[check.check] ?? [];
    let after = -1;
    let at = 0;
    rows.forEach((row, i) => {
      if (compared.includes(row.name)) after = i;
    });
    while (after >= 0 && after + 1 < rows.length && rows[after + 1].name.startsWith("check:")) after += 1;
    for (const stage of stages) if (compared.includes(stage.name)) at = Math.max(at, end(stage));
    const row = { node: checkRow(check, at, total), name: `check:${check.check}` };
    if (after < 0) rows.push(row);
    else rows.splice(after + 1, 0, row);
  }
  container.replaceChildren(...rows.map((row) => row.node), axis(total));
}

// A trace id as the server writes it (serve_app/telemetry/spans.py: 32 lowercase hex digits).
const TRACE_ID = /^[0-9a-f]{32}$/;
// Where the operator's tracing system shows a trace: the server's `telemetry.trace_url`
// (`/console/settings.json`), with `{trace_id}` in it; empty when it has none.
let traceUrl = "";

/** The server's link to a trace (`trace_url` of `/console/settings.json`, checked by the server: an
 * absolute URL holding `{trace_id}`), or "" for none. */
export function setTraceUrl(template) {
  traceUrl = typeof template === "string" && template.includes("{trace_id}") ? template : "";
}

/** The link to `traceId` from the server's template, or null when the template is missing or does not
 * make an absolute URL with a host (a `javascript:` or `data:` address has none). */
function traceLink(traceId) {
  if (!traceUrl) return null;
  const href = traceUrl.replaceAll("{trace_id}", traceId);
  try {
    return new URL(href).host ? href : null;
  } catch {
    return null;
  }
}

/** Under the timeline, the request's trace id in the operator's tracing system (`trace.trace_id`, set
 * when the server traces and sampled the request): a link that opens the trace in a new tab when the
 * server has a `telemetry.trace_url`, else text to copy into its search; nothing, and `container`
 * hidden, when there is none. */
export function renderTraceId(container, traceId) {
  const shown = typeof traceId === "string" && TRACE_ID.test(traceId);
  const href = shown ? traceLink(traceId) : null;
  const id = () => el("code", { class: "trace-id", "data-mai": "trace-id", title: href ? "open this request's trace in the server's tracing system (a new tab)" : "this request's trace in the server's tracing system" }, traceId);
  container.replaceChildren(
    ...(shown
      ? [
          el("span", { class: "muted" }, "Trace id "),
          href ? el("a", { href, rel: "noopener noreferrer", target: "_blank", "data-mai": "trace-link" }, id()) : id(),
        ]
      : []),
  );
  container.hidden = !shown;
}

/** One bar for a reply that carries no trace (a passthrough), timed by the page itself. */
export function renderUntraced(container, { model, seconds: took, usage }) {
  const bar = el(
    "div",
    { class: "bar tone-passthrough", "data-mai": "stage", "data-stage": "passthrough" },
    el("span", { class: "bar-label" }, seconds(took)),
  );
  place(bar, 0, took, took || 1e-3);
  container.replaceChildren(
    el(
      "div",
      { class: "row" },
      el("div", { class: "row-name" }, el("strong", {}, "passthrough"), el("span", { class: "muted" }, `${model}${usage ? ` · ${usage.prompt_tokens} in · ${usage.completion_tokens} out` : ""} · ${seconds(took)}`), el("span", { class: "muted" }, "timed by this page: a passthrough reply carries no trace")),
      el("div", { class: "track" }, bar),
    ),
    axis(took || 1e-3),
  );
}
