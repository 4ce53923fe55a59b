// The live view: `/v1/mai/stats` read every few seconds (never faster than the replicas report to the
// stats holder), per question class its requests, route shares, plan and why, audit disagreement with
// its 95 % bound, tokens per model; the overload level; requests per second from successive counts;
// the answer cache's hits, coalesced and misses, with its hit rate since the last reading; for an admin
// key, every key's usage.

import { call } from "./api.js";
import { count, el, hook, percent, svg, tone } from "./dom.js";

const HISTORY = 60; // the readings a sparkline keeps
const MIN_INTERVAL_S = 2;
const DEFAULT_INTERVAL_S = 5;
let previous = null; // { at, total, byClass }
let cachePrevious = null; // the last reading's cache events
const rates = { total: [], byClass: new Map() };
const cards = new Map(); // class -> its card's parts

function push(series, value) {
  series.push(value);
  if (series.length > HISTORY) series.shift();
}

function sparkline(target, series) {
  if (series.length < 2) return;
  const width = 120;
  const height = 24;
  const top = Math.max(...series, 1e-9);
  const step = width / (series.length - 1);
  const points = series.map((value, i) => `${(i * step).toFixed(1)},${(height - 2 - ((height - 4) * value) / top).toFixed(1)}`);
  target.replaceChildren(svg("polyline", { points: points.join(" "), fill: "none", class: "spark-line" }));
}

function card(name) {
  if (cards.has(name)) return cards.get(name);
  const parts = {
    requests: el("strong", {}),
    rps: el("span", { class: "muted" }),
    spark: svg("svg", { class: "spark", viewBox: "0 0 120 24", preserveAspectRatio: "none" }),
    shares: el("div", { class: "shares" }),
    legend: el("div", { class: "legend" }),
    plan: el("p", {}),
    audit: el("p", {}),
    tokens: el("p", { class: "muted" }),
  };
  parts.node = el(
    "article",
    { class: "class-card", "data-mai": "class", "data-class": name },
    el("header", {}, el("h3", {}, name), el("span", {}, parts.requests, " requests "), parts.rps, parts.spark),
    parts.shares,
    parts.legend,
    parts.plan,
    parts.audit,
    parts.tokens,
  );
  cards.set(name, parts);
  hook("classes").append(parts.node);
  return parts;
}

function routeShares(parts, routes, requests) {
  const entries = Object.entries(routes).sort((a, b) => b[1] - a[1]);
  parts.shares.replaceChildren(
    ...entries.map(([route, n]) => {
      const segment = el("span", { class: `share ${tone(route)}`, title: `${route}: ${n}` });
      segment.style.width = `${(100 * n) / Math.max(requests, 1)}%`;
      return segment;
    }),
  );
  parts.legend.replaceChildren(
    ...entries.map(([route, n]) => el("span", { class: "legend-item" }, el("span", { class: `swatch ${tone(route)}` }), `${route} ${percent(n / Math.max(requests, 1))}`)),
  );
}

function auditText(audit, settings) {
  if (!audit || !audit.window.audited) return `no audit yet (audits sample ${percent(settings.rate, 1)} of early exits against ${settings.reference})`;
  const w = audit.window;
  const alert = audit.alert ? ` · ALERT (${audit.alert_evidence})` : "";
  const few = !audit.alert && w.audited < settings.alert_min_samples ? ` · ${w.audited} of the ${settings.alert_min_samples} audits an alert on the rate needs` : "";
  return `audits: ${w.disagreed} of the last ${w.audited} disagreed with ${settings.reference} (${percent(audit.rate, 1)}; 95 % interval ${percent(audit.lower_95, 1)}–${percent(audit.upper_95, 1)})${alert}${few}`;
}

function tokensText(tokens) {
  if (!tokens) return "";
  return Object.entries(tokens)
    .map(([model, t]) => `${model}: ${count(t.prompt_tokens)} prompt · ${count(t.completion_tokens)} completion tokens`)
    .join("  |  ");
}

function forget(name) {
  cards.get(name)?.node.remove();
  cards.delete(name);
  rates.byClass.delete(name);
}

/** Whether the counts went back since the last reading (the statistics holder restarted): no rate is
 * read across it. */
function wentBack(classes, total) {
  if (!previous) return false;
  if (total < previous.total) return true;
  return Object.entries(classes).some(([name, entry]) => entry.requests < (previous.byClass[name] ?? 0));
}

/** Every key's usage (only an admin key's reading carries it): requests, 429s, errors, early exits,
 * escalations, tokens per model, and the last minute's requests and tokens. */
function usageTable(usage) {
  const block = hook("usage-block");
  block.hidden = !usage;
  if (!usage) return;
  const head = ["key", "requests", "429s", "errors", "early exits", "escalations", "tokens", "last minute"];
  const rows = Object.entries(usage).map(([name, u]) =>
    el(
      "tr",
      { "data-key": name },
      el("th", {}, name),
      ...[u.requests, u.refused, u.errors, u.early_exits, u.escalations].map((n) => el("td", {}, count(n))),
      el("td", {}, Object.entries(u.tokens).map(([model, n]) => `${model} ${count(n)}`).join(" · ") || "–"),
      el("td", {}, `${count(u.last_minute.requests)} req · ${count(u.last_minute.tokens)} tok`),
    ),
  );
  hook("usage").replaceChildren(el("tr", {}, ...head.map((h) => el("th", {}, h))), ...rows);
}

/** The answer cache: reused answers (hits and coalesced) over the requests it saw since the last reading,
 * and its counts since start; "off" when the server has none. */
function cacheText(cache) {
  const shown = hook("cache");
  const detail = hook("cache-detail");
  if (!cache || !cache.enabled) {
    shown.textContent = "off";
    detail.textContent = "";
    return;
  }
  const e = cache.events ?? {};
  const seen = (x) => (x.hit ?? 0) + (x.coalesced ?? 0) + (x.miss ?? 0) + (x.bypass ?? 0);
  const reused = (x) => (x.hit ?? 0) + (x.coalesced ?? 0);
  const back = cachePrevious && seen(e) < seen(cachePrevious);
  const base = cachePrevious && !back ? cachePrevious : null;
  const asked = seen(e) - (base ? seen(base) : 0);
  shown.textContent = asked ? `${percent((reused(e) - (base ? reused(base) : 0)) / asked)} reused` : "no request since the last reading";
  const errors = (e.store_error ?? 0) ? ` · ${count(e.store_error)} store errors` : "";
  detail.textContent = `${count(e.hit ?? 0)} hits · ${count(e.coalesced ?? 0)} coalesced · ${count(e.miss ?? 0)} misses since start (${cache.store})${errors}`;
  cachePrevious = e;
}

function render(body, at) {
  usageTable(body.usage);
  cacheText(body.cache);
  const classes = body.classes ?? {};
  const total = Object.values(classes).reduce((sum, entry) => sum + entry.requests, 0);
  const overload = body.overload;
  hook("overload").textContent = overload ? (overload.enabled ? overload.level : "off") : "–";
  hook("overload").className = overload ? tone(`level-${overload.level}`) : "";
  hook("audit-share").textContent = percent(body.audit?.extra_token_share, 1);
  if (wentBack(classes, total)) previous = null;
  for (const name of [...cards.keys()]) if (!(name in classes)) forget(name);
  const elapsed = previous ? Math.max(at - previous.at, 1e-3) : null;
  if (previous) {
    const rate = (total - previous.total) / elapsed;
    push(rates.total, rate);
    hook("rps").textContent = rate.toFixed(2);
    sparkline(hook("rps-spark"), rates.total);
  }
  for (const [name, entry] of Object.entries(classes)) {
    const parts = card(name);
    parts.requests.textContent = count(entry.requests);
    if (previous) {
      const series = rates.byClass.get(name) ?? [];
      push(series, (entry.requests - (previous.byClass[name] ?? 0)) / elapsed);
      rates.byClass.set(name, series);
      parts.rps.textContent = `${series[series.length - 1].toFixed(2)}/s`;
      sparkline(parts.spark, series);
    }
    routeShares(parts, entry.routes ?? {}, entry.requests);
    const plan = entry.plan;
    parts.plan.textContent = plan ? `plan ${plan.plan}: ${plan.reason}` : "plan: not chosen yet";
    parts.audit.textContent = auditText(entry.audit, body.audit);
    parts.audit.className = entry.audit?.alert ? "alert" : "";
    parts.tokens.textContent = tokensText(entry.tokens);
  }
  previous = { at, total, byClass: Object.fromEntries(Object.entries(classes).map(([n, e]) => [n, e.requests])) };
}

/** Seconds between two readings: the replicas' report interval, never under MIN_INTERVAL_S. */
function every(intervalS) {
  return Number.isFinite(intervalS) ? Math.max(intervalS, MIN_INTERVAL_S) : DEFAULT_INTERVAL_S;
}

/** Read the statistics every report interval, for ever; a failed read says why and tries again. */
export function startLive(intervalS) {
  const status = hook("live-status");
  let seconds = every(intervalS);
  async function tick() {
    try {
      const { data } = await call("v1/mai/stats");
      const at = performance.now() / 1000;
      render(data, at);
      const reported = data.audit?.report_interval_s;
      seconds = every(reported ?? intervalS);
      const classes = Object.keys(data.classes ?? {}).length;
      status.textContent = `${classes ? "" : "No cascade request answered yet. "}Updated ${new Date().toLocaleTimeString()}, every ${seconds} s (the replicas report every ${reported ?? intervalS} s).`;
      status.classList.remove("error");
    } catch (error) {
      status.textContent = `Statistics not read: ${error.message}`;
      status.classList.add("error");
    } finally {
      setTimeout(tick, seconds * 1000);
    }
  }
  tick();
}
