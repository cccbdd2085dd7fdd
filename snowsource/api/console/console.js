// snowsource console: a client of the daemon's REST API, nothing else.
//
// Rules this file keeps: every text from the API goes into the page with textContent (never
// innerHTML), so an alias or an error message cannot become markup; the bearer token lives in
// this tab's sessionStorage at most and travels only in the Authorization header; the page is
// built once per table and then updated in place, so a refresh never flickers.
"use strict";

(() => {
  const REFRESH_MS = 3000;
  const HISTORY_MS = 5 * 60 * 1000; // the rows/s chart's window
  const ETA_WINDOW_MS = 60 * 1000; // lag samples the ETA is measured over
  const TOKEN_KEY = "snowsource.console.token";
  // start.timestamp's default: a backfill "since 1970" says nothing about its progress.
  const DEFAULT_START = "1970-01-01 00:00:00";

  const $ = (id) => document.getElementById(id);
  const state = {
    name: null, // the connector's name, from GET connectors
    starts: {}, // alias -> configured start.timestamp
    connectorState: null,
    tables: new Map(), // alias -> {node, rows: [[t, emitted]], lags: [[t, lag]], origin}
    busy: false,
    pollFailed: false, // the notice shows a failed refresh, cleared by the next good one
    root: null, // GET /: the version
    timer: null,
  };

  class Unauthorised extends Error {}

  // ------------------------------------------------------------------ API

  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  // One call; relative URLs, so the page also works behind a proxy that adds a path prefix.
  // JSON answers are parsed; others (the Prometheus text of /metrics) come back as text.
  async function api(method, path, body) {
    const headers = { Accept: "application/json, text/plain" };
    const secret = token();
    if (secret) headers.Authorization = `Bearer ${secret}`;
    const init = { method, headers, cache: "no-store", credentials: "omit" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    if (response.status === 401) throw new Unauthorised();
    const text = await response.text();
    const isJson = (response.headers.get("Content-Type") || "").startsWith("application/json");
    if (response.ok && !isJson) return text;
    let payload = null;
    if (text) {
      try {
        payload = JSON.parse(text);
      } catch {
        payload = { message: text };
      }
    }
    if (!response.ok) {
      const message = payload && payload.message ? payload.message : `HTTP ${response.status}`;
      throw new Error(message);
    }
    return payload;
  }

  const connectorPath = (suffix) => `connectors/${encodeURIComponent(state.name)}${suffix}`;

  // ------------------------------------------------------------------ formatting

  function human(seconds) {
    if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }

  // "YYYY-MM-DD HH:MM:SS" in UTC (the offsets' and cursor's format) -> ms since the epoch.
  function parseUtc(text) {
    const m = /^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})$/.exec(text || "");
    if (!m) return null;
    return Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]);
  }

  function setText(node, text) {
    const value = text === null || text === undefined ? "" : String(text);
    if (node.textContent !== value) node.textContent = value;
  }

  function show(node, visible) {
    if (node.hidden === visible) node.hidden = !visible;
  }

  function notice(text, isError) {
    const node = $("notice");
    setText(node, text);
    node.classList.toggle("error", Boolean(isError));
    show(node, Boolean(text));
  }

  // ------------------------------------------------------------------ per-table numbers

  function trim(samples, now, windowMs) {
    while (samples.length > 2 && samples[1][0] < now - windowMs) samples.shift();
  }

  // Rows per second between consecutive polls; a counter that went down was reset by a
  // restart or resume, so the interval counts from zero.
  function rates(samples) {
    const out = [];
    for (let i = 1; i < samples.length; i += 1) {
      const [t0, r0] = samples[i - 1];
      const [t1, r1] = samples[i];
      const seconds = (t1 - t0) / 1000;
      if (seconds <= 0) continue;
      out.push(Math.max(0, (r1 >= r0 ? r1 - r0 : r1) / seconds));
    }
    return out;
  }

  // Backfill progress in time: the cursor's way from where the backfill began to the
  // instance's clock (cursor + lag). Also for a sliced backfill: its "backfill.covered" counts
  // seconds of the span, which says little when most rows sit in its last days.
  function progress(entry, table) {
    if (table.phase === "stream") return 1;
    const cursor = parseUtc(table.cursor && table.cursor.timestamp);
    if (cursor === null || typeof table.lag_seconds !== "number") return null;
    if (entry.origin === null || cursor < entry.origin) entry.origin = cursor;
    const now = cursor + table.lag_seconds * 1000;
    if (now <= entry.origin) return null;
    return (cursor - entry.origin) / (now - entry.origin);
  }

  // Seconds until the lag reaches zero at the rate it shrank over the last minute.
  function eta(entry, table) {
    if (table.phase !== "backfill" || table.state !== "RUNNING") return null;
    const lags = entry.lags;
    if (lags.length < 2) return null;
    const [t0, lag0] = lags[0];
    const [t1, lag1] = lags[lags.length - 1];
    const shrink = (lag0 - lag1) / ((t1 - t0) / 1000);
    if (!(shrink > 0)) return null;
    return lag1 / shrink;
  }

  function offsetText(committed) {
    if (!committed) return "none stored";
    const id = committed.sys_id ? ` / ${committed.sys_id}` : "";
    return `${committed.timestamp}${id} (${committed.phase})`;
  }

  function drawChart(polyline, values) {
    if (values.length < 2) {
      polyline.setAttribute("points", "");
      return;
    }
    // Headroom above the peak, so a steady rate is a line inside the box, not on its edge.
    const top = Math.max(...values, 1) * 1.25;
    const step = 120 / (values.length - 1);
    const points = values.map((v, i) => `${(i * step).toFixed(1)},${(31 - (v / top) * 29).toFixed(1)}`);
    polyline.setAttribute("points", points.join(" "));
  }

  // ------------------------------------------------------------------ rendering

  function part(node, cls) {
    return node.querySelector(`.${cls}`);
  }

  function createTable(alias, table) {
    const node = $("table-template").content.firstElementChild.cloneNode(true);
    node.dataset.alias = alias;
    setText(part(node, "alias"), alias);
    const form = part(node, "rewind");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      rewind(alias, form);
    });
    const configured = state.starts[alias];
    const entry = {
      node,
      rows: [],
      lags: [],
      origin: configured && configured !== DEFAULT_START ? parseUtc(configured) : null,
      partition: table.partition,
    };
    $("tables").appendChild(node);
    return entry;
  }

  function updateTable(entry, table, now) {
    const node = entry.node;
    entry.partition = table.partition;
    setText(part(node, "source"), table.table);
    setText(part(node, "topic"), table.topic);
    // Group mode: the member that runs the table (its counters live there).
    setText(part(node, "worker"), table.worker_id ? ` · on ${table.worker_id}` : "");
    const badge = part(node, "state");
    // A table waiting for a backfill slot shows its place in the queue (SPEC §15.2).
    const queued = table.state === "QUEUED" && table.queue_position;
    setText(badge, queued ? `QUEUED #${table.queue_position}` : table.state);
    badge.dataset.state = table.state || "";
    setText(part(node, "phase"), table.phase || "no offset yet");

    entry.rows.push([now, table.rows_emitted || 0]);
    trim(entry.rows, now, HISTORY_MS);
    if (typeof table.lag_seconds === "number") {
      entry.lags.push([now, table.lag_seconds]);
      trim(entry.lags, now, ETA_WINDOW_MS);
    }
    updateProgress(entry, table);
    updateSlices(part(node, "slices"), table.backfill);
    setText(part(node, "lag"), human(table.lag_seconds));
    setText(part(node, "rows"), (table.rows_emitted || 0).toLocaleString("en"));
    setText(part(node, "offset"), offsetText(table.committed));
    updateChart(entry, now);
    updateFailure(part(node, "failure"), table);
    updateRewindForm(node);
  }

  function updateProgress(entry, table) {
    const done = progress(entry, table);
    const bar = part(entry.node, "progress");
    if (done === null) {
      bar.removeAttribute("value"); // an indeterminate bar
    } else {
      bar.value = done;
    }
    let caption = done === null ? "progress unknown" : `${(done * 100).toFixed(1)} %`;
    if (table.phase === "stream") caption = "backfill done, streaming";
    const remaining = eta(entry, table);
    if (remaining !== null) caption += remaining < 1 ? " · ETA < 1 s" : ` · ETA ${human(remaining)}`;
    setText(part(entry.node, "progress-text"), caption);
  }

  function updateChart(entry, now) {
    const perSecond = rates(entry.rows);
    const latest = perSecond.length ? perSecond[perSecond.length - 1] : null;
    setText(part(entry.node, "rate"), latest === null ? "–" : latest.toFixed(1));
    drawChart(part(entry.node, "line"), perSecond);
    const span = human((now - entry.rows[0][0]) / 1000);
    const peak = perSecond.length ? Math.max(...perSecond) : null;
    setText(
      part(entry.node, "chart-caption"),
      peak === null
        ? "rows/s: the chart fills as this page keeps polling"
        : `rows/s over the last ${span} (this page's samples) · peak ${peak.toFixed(1)}`,
    );
  }

  // A sliced backfill's /status "backfill": its slices, ranges, and rows read ahead.
  function updateSlices(node, backfill) {
    let text = "";
    if (backfill && typeof backfill === "object" && typeof backfill.slices_active === "number") {
      const count = (n) => (typeof n === "number" ? n.toLocaleString("en") : "?");
      text =
        `${backfill.slices_active} slice(s) reading ${count(backfill.ranges)} range(s): ` +
        `${count(backfill.rows_read)} rows read, ${count(backfill.rows_ahead)} of them ` +
        "ahead of the committed offset";
    }
    setText(node, text);
    show(node, Boolean(text));
  }

  function updateFailure(node, table) {
    const failing = Boolean(table.last_error);
    show(node, failing);
    if (!failing) return;
    const parts = [];
    if (table.consecutive_failures) parts.push(`${table.consecutive_failures} consecutive failure(s)`);
    if (table.failing_since) parts.push(`since ${table.failing_since}`);
    const head = table.state === "SKIPPED" ? "skipped: not readable" : "last error";
    setText(part(node, "failure-head"), parts.length ? parts.join(", ") : head);
    setText(part(node, "last-error"), table.last_error);
  }

  function updateRewindForm(node) {
    const stopped = state.connectorState === "STOPPED";
    const button = part(node, "rewind-button");
    const disabled = !stopped || state.busy;
    if (button.disabled !== disabled) button.disabled = disabled;
    show(part(node, "rewind-hint"), !stopped);
  }

  function render(status, root) {
    const now = Date.now();
    const connector = status.connector || {};
    state.connectorState = connector.state || null;
    setText($("connector-name"), status.name);
    const badge = $("connector-state");
    setText(badge, connector.state);
    badge.dataset.state = connector.state || "";
    show(badge, Boolean(connector.state));
    const meta = [connector.worker_id, root && root.version ? `v${root.version}` : null];
    setText($("connector-meta"), meta.filter(Boolean).join(" · "));
    updateButtons();

    const tables = status.tables || {};
    const aliases = Object.keys(tables).sort();
    for (const alias of aliases) {
      let entry = state.tables.get(alias);
      if (!entry) {
        entry = createTable(alias, tables[alias]);
        state.tables.set(alias, entry);
      }
      updateTable(entry, tables[alias], now);
    }
    for (const [alias, entry] of state.tables) {
      if (!(alias in tables)) {
        entry.node.remove();
        state.tables.delete(alias);
      }
    }
    show($("no-tables"), aliases.length === 0);
    setText($("refreshed"), `refreshed ${new Date(now).toISOString().slice(11, 19)} UTC`);
  }

  // The unlabelled gauges of /metrics this page shows; a daemon without one leaves it out.
  const GAUGES = {
    snowsource_ready: "ready",
    snowsource_servicenow_concurrency_limit: "concurrency limit",
    snowsource_servicenow_sessions_open: "sessions open",
    snowsource_servicenow_requests_in_flight: "requests in flight",
  };

  function gauges(text) {
    const found = {};
    for (const line of (text || "").split("\n")) {
      const m = /^([a-z_]+) (\S+)$/.exec(line);
      if (m && m[1] in GAUGES) found[m[1]] = Number(m[2]);
    }
    return found;
  }

  // The ServiceNow session pool as /status reports it, else its gauges from /metrics.
  function poolText(servicenow, found) {
    if (servicenow && typeof servicenow === "object") {
      const s = servicenow;
      const parts = [`concurrency limit ${s.concurrency_limit} of ${s.max_concurrent_requests}`];
      parts.push(`sessions open ${s.sessions_open}`, `requests in flight ${s.requests_in_flight}`);
      if (s.requests_waiting) parts.push(`waiting ${s.requests_waiting}`);
      if (s.paused_seconds > 0) parts.push(`paused by Retry-After ${Math.ceil(s.paused_seconds)} s`);
      const b = s.rate_budget;
      if (b && b.per_hour !== null) {
        let text = `rate budget ${Math.round(b.per_hour)}/h`;
        if (b.limit_per_hour) text += ` (rule ${b.limit_per_hour}/h, ${b.used_in_window} used)`;
        if (b.waited_seconds > 0) text += `, waited ${Math.round(b.waited_seconds)} s`;
        parts.push(text);
      }
      return `ServiceNow: ${parts.join(" · ")}`;
    }
    const pool = Object.keys(GAUGES)
      .filter((name) => name !== "snowsource_ready" && name in found)
      .map((name) => `${GAUGES[name]} ${found[name]}`);
    return pool.length ? `ServiceNow: ${pool.join(" · ")}` : "";
  }

  function updateProcess(found, servicenow) {
    const ready = $("ready");
    const known = "snowsource_ready" in found;
    setText(ready, known ? (found.snowsource_ready === 1 ? "ready" : "not ready") : "");
    ready.dataset.state = known ? (found.snowsource_ready === 1 ? "READY" : "NOT_READY") : "";
    show(ready, known);
    const pool = poolText(servicenow, found);
    setText($("pool"), pool);
    show($("pool"), Boolean(pool));
  }

  function updateButtons() {
    const s = state.connectorState;
    const set = (id, enabled) => {
      const node = $(id);
      if (node.disabled === enabled) node.disabled = !enabled;
    };
    set("action-stop", !state.busy && s !== null && s !== "STOPPED");
    set("action-resume", !state.busy && (s === "STOPPED" || s === "PAUSED"));
    set("action-restart", !state.busy && s !== null && s !== "STOPPED" && s !== "PAUSED");
  }

  // ------------------------------------------------------------------ actions

  const ACTIONS = {
    stop: ["PUT", "/stop", "stopped: every table's final offset is written"],
    resume: ["PUT", "/resume", "resumed: every table restarts from its stored offset"],
    restart: ["POST", "/restart", "restarted: every table restarts from its stored offset"],
  };

  async function act(name) {
    const [method, suffix, done] = ACTIONS[name];
    state.busy = true;
    updateButtons();
    notice(`${name}…`, false);
    try {
      await api(method, connectorPath(suffix));
      notice(done, false);
    } catch (error) {
      handleError(error, `${name} refused`);
    } finally {
      state.busy = false;
      await refresh();
    }
  }

  async function rewind(alias, form) {
    const entry = state.tables.get(alias);
    const message = part(form, "rewind-message");
    const timestamp = part(form, "rewind-at").value.trim();
    if (!entry || !entry.partition) return;
    // The recipe of docs/offsets.md: the table's partition, the new timestamp, an empty sys_id.
    const body = {
      offsets: [
        {
          partition: entry.partition,
          offset: {
            version: "1",
            timestamp,
            sys_id: "",
            phase: "backfill",
            fingerprint: entry.partition.query_fingerprint,
          },
        },
      ],
    };
    state.busy = true;
    try {
      const answer = await api("PATCH", connectorPath("/offsets"), body);
      setText(message, answer && answer.message ? answer.message : "offset changed");
      message.className = "rewind-message ok";
    } catch (error) {
      if (error instanceof Unauthorised) {
        askToken(true);
        return;
      }
      setText(message, error.message);
      message.className = "rewind-message error";
    } finally {
      state.busy = false;
      show(message, true);
    }
    await refresh();
  }

  // ------------------------------------------------------------------ auth and the loop

  function askToken(wrong) {
    // A refused token is worth nothing: not kept, not sent again.
    if (wrong) sessionStorage.removeItem(TOKEN_KEY);
    state.name = null;
    show($("main"), false);
    show($("login"), true);
    const message = $("login-message");
    setText(message, wrong ? "unauthorised: the token was not accepted" : "");
    show(message, wrong);
    show($("forget-token"), Boolean(token()));
    $("token").focus();
  }

  function handleError(error, context) {
    if (error instanceof Unauthorised) {
      askToken(Boolean(token()));
      return;
    }
    notice(`${context}: ${error.message}`, true);
  }

  async function discover() {
    const names = await api("GET", "connectors");
    state.name = Array.isArray(names) && names.length ? names[0] : null;
    if (state.name === null) throw new Error("the daemon lists no connector");
    const info = await api("GET", connectorPath(""));
    const config = (info && info.config) || {};
    for (const [key, value] of Object.entries(config)) {
      const m = /^snow\.tables\.(.+)\.start\.timestamp$/.exec(key);
      if (m) state.starts[m[1]] = value;
    }
    // "./" from /console is the API's root, GET / (version).
    state.root = await api("GET", "./").catch(() => null);
  }

  async function refresh() {
    clearTimeout(state.timer);
    try {
      if (state.name === null) await discover();
      const [status, metricsText] = await Promise.all([
        api("GET", connectorPath("/status")),
        api("GET", "metrics").catch((error) => {
          if (error instanceof Unauthorised) throw error;
          return ""; // the status alone still makes a page
        }),
      ]);
      show($("login"), false);
      show($("main"), true);
      show($("forget-token"), Boolean(token()));
      if (state.pollFailed) notice("", false);
      state.pollFailed = false;
      render(status, state.root);
      updateProcess(gauges(metricsText), status.servicenow);
    } catch (error) {
      if (error instanceof Unauthorised) {
        askToken(Boolean(token()));
        return; // polling resumes once a token is entered
      }
      state.pollFailed = true;
      notice(`cannot read the status: ${error.message}`, true);
    }
    state.timer = setTimeout(refresh, REFRESH_MS);
  }

  function start() {
    $("login-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const value = $("token").value.trim();
      if (!value) return;
      sessionStorage.setItem(TOKEN_KEY, value);
      $("token").value = "";
      refresh();
    });
    $("forget-token").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      askToken(false);
    });
    for (const button of document.querySelectorAll("[data-action]")) {
      button.addEventListener("click", () => act(button.dataset.action));
    }
    refresh();
  }

  document.addEventListener("DOMContentLoaded", start);
})();
