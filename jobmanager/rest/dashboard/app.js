// Sluice's web dashboard: plain JavaScript over the JobManager's REST API (docs/monitoring.md).
// Routes: #/ (cluster overview, jobs, TaskManagers), #/jobs/<id>, #/taskmanagers,
// #/taskmanagers/<id> (its log). Every view refreshes every 2 s; a section is rebuilt only when
// its data changed. Text from the cluster (job names, tracebacks, logs) only ever goes into
// textContent: never parsed as HTML.
"use strict";

const REFRESH_MS = 2000;
const SVG_NS = "http://www.w3.org/2000/svg";
const rendered = new Map(); // section id -> JSON of the data it shows
let timer = null;
let generation = 0; // bumped by navigation: a late answer for an old route is dropped

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttrs(node, attrs);
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function setAttrs(node, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
}

async function api(path, asText) {
  const response = await fetch(path, { headers: { Accept: asText ? "text/plain" : "application/json" } });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (body.errors) message = body.errors.join("; ");
    } catch (_) {
      /* not JSON */
    }
    throw new Error(`${path}: ${message}`);
  }
  return asText ? response.text() : response.json();
}

// -- formatting -------------------------------------------------------------------------------
function fmtTime(ms) {
  if (!ms || ms < 0) return "–";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function fmtDuration(ms) {
  if (ms === null || ms === undefined || ms < 0) return "–";
  if (ms < 1000) return `${ms} ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function fmtBytes(n) {
  if (!n) return "0 B";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function fmtNumber(n) {
  return typeof n === "number" ? n.toLocaleString("en-US", { maximumFractionDigits: 1 }) : "–";
}

function stateBadge(state) {
  return el("span", { class: `state state-${String(state).toLowerCase()}`, text: state });
}

function table(id, headers, rows, empty) {
  const body = el("tbody", {}, rows);
  if (!rows.length) body.append(el("tr", { class: "empty" }, el("td", { colspan: headers.length, text: empty })));
  return el("table", { id, class: "grid" }, el("thead", {}, el("tr", {}, headers.map((h) => el("th", { text: h })))), body);
}

// Replace section `id` inside `parent` with build(data) unless it shows the same data already.
function section(parent, id, data, build) {
  const key = JSON.stringify(data);
  const existing = document.getElementById(id);
  if (existing && existing.parentNode === parent && rendered.get(id) === key) return;
  const node = build(data);
  node.id = id;
  rendered.set(id, key);
  if (existing && existing.parentNode === parent) parent.replaceChild(node, existing);
  else parent.append(node);
}

function frame(route, title) {
  const view = document.getElementById("view");
  if (view.dataset.route !== route) {
    view.replaceChildren(el("h1", { id: "page-title", text: title }));
    view.dataset.route = route;
    rendered.clear();
  }
  return view;
}

function showError(err) {
  const banner = document.getElementById("error-banner");
  if (err) {
    banner.textContent = String(err.message || err);
    banner.hidden = false;
  } else {
    banner.hidden = true;
  }
}

// -- overview ---------------------------------------------------------------------------------
async function renderOverview(gen) {
  const [overview, jobs, tms] = await Promise.all([api("/overview"), api("/jobs/overview"), api("/taskmanagers")]);
  if (gen !== generation) return;
  const view = frame("overview", "Cluster overview");
  document.getElementById("version").textContent = overview["sluice-version"] || "";
  section(view, "overview", overview, (o) =>
    el(
      "div",
      { class: "cards" },
      card("taskmanagers", "TaskManagers", o.taskmanagers),
      card("slots-total", "Slots", o["slots-total"]),
      card("slots-available", "Slots free", o["slots-available"]),
      card("jobs-running", "Jobs running", o["jobs-running"]),
      card("jobs-finished", "Finished", o["jobs-finished"]),
      card("jobs-cancelled", "Cancelled", o["jobs-cancelled"]),
      card("jobs-failed", "Failed", o["jobs-failed"]),
    ),
  );
  section(view, "jobs-section", jobs.jobs, (list) => el("section", {}, el("h2", { text: "Jobs" }), jobsTable(list)));
  section(view, "taskmanagers-section", tms.taskmanagers, (list) =>
    el("section", {}, el("h2", { text: "TaskManagers" }), taskmanagersTable(list)),
  );
}

function card(field, label, value) {
  return el("div", { class: "card", "data-field": field }, el("div", { class: "card-value", text: value }), el("div", { class: "card-label", text: label }));
}

function jobsTable(list) {
  const rows = list.map((j) =>
    el(
      "tr",
      { "data-job-id": j.jid, "data-state": j.state },
      el("td", {}, el("a", { class: "job-link job-name", href: `#/jobs/${encodeURIComponent(j.jid)}`, text: j.name || j.jid })),
      el("td", {}, stateBadge(j.state)),
      el("td", { class: "mono", text: j.jid }),
      el("td", { text: fmtTime(j["start-time"]) }),
      el("td", { text: fmtDuration(j.duration) }),
      el("td", { class: "num", text: `${j.tasks.running}/${j.tasks.total}` }),
    ),
  );
  return table("jobs", ["Name", "State", "Job id", "Started", "Duration", "Tasks running"], rows, "No jobs yet.");
}

function taskmanagersTable(list) {
  const rows = list.map((tm) =>
    el(
      "tr",
      { "data-taskmanager-id": tm.id },
      el("td", {}, el("a", { class: "taskmanager-link", href: `#/taskmanagers/${encodeURIComponent(tm.id)}`, text: tm.id })),
      el("td", { class: "mono", text: tm.address }),
      el("td", { class: "num", text: tm.slotsNumber }),
      el("td", { class: "num", text: tm.freeSlots }),
      el("td", { text: `${(tm.timeSinceLastHeartbeat / 1000).toFixed(1)} s ago` }),
    ),
  );
  return table("taskmanagers", ["TaskManager", "Address", "Slots", "Free slots", "Last heartbeat"], rows, "No TaskManager registered.");
}

async function renderTaskManagers(gen) {
  const tms = await api("/taskmanagers");
  if (gen !== generation) return;
  const view = frame("taskmanagers", "TaskManagers");
  section(view, "taskmanagers-section", tms.taskmanagers, (list) => el("section", {}, taskmanagersTable(list)));
}

// -- a TaskManager's log ----------------------------------------------------------------------
async function renderLog(gen, id) {
  const view = frame(`log:${id}`, `Log of TaskManager ${id}`);
  let text;
  try {
    text = await api(`/taskmanagers/${encodeURIComponent(id)}/log?lines=500`, true);
  } catch (err) {
    text = null;
    if (gen !== generation) return;
    section(view, "taskmanager-log-section", String(err.message), (message) =>
      el("section", {}, el("p", { class: "error", id: "taskmanager-log-error", text: message })),
    );
    return;
  }
  if (gen !== generation) return;
  const pre = document.getElementById("taskmanager-log");
  const atBottom = !pre || pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  section(view, "taskmanager-log-section", text, (t) =>
    el("section", {}, el("p", { class: "muted", text: "The last 500 lines of its log file." }), el("pre", { id: "taskmanager-log", class: "log", text: t })),
  );
  const now = document.getElementById("taskmanager-log");
  if (now && atBottom) now.scrollTop = now.scrollHeight;
}

// -- a job ------------------------------------------------------------------------------------
async function renderJob(gen, id) {
  const base = `/jobs/${encodeURIComponent(id)}`;
  const [job, checkpoints, exceptions] = await Promise.all([api(base), api(`${base}/checkpoints`), api(`${base}/exceptions`)]);
  const details = await Promise.all(job.vertices.map((v) => api(`${base}/vertices/${encodeURIComponent(v.id)}`)));
  if (gen !== generation) return;
  const view = frame(`job:${id}`, job.name || id);
  section(view, "job-header", job, jobHeader);
  section(view, "job-graph-section", { plan: job.plan, vertices: job.vertices.map((v) => [v.id, v.name, v.parallelism, v.status, v.metrics["backpressure-level"]]) }, () =>
    el("section", {}, el("h2", { text: "Job graph" }), graphView(job)),
  );
  section(view, "vertices-section", job.vertices, (list) => el("section", {}, el("h2", { text: "Tasks (chains)" }), verticesTable(list)));
  section(view, "subtasks-section", details, (list) => el("section", {}, el("h2", { text: "Subtasks" }), subtasksTable(list)));
  section(view, "checkpoints-section", checkpoints, (c) => el("section", {}, el("h2", { text: "Checkpoints" }), checkpointsView(c)));
  section(view, "exceptions-section", exceptions, (e) => el("section", {}, el("h2", { text: "Exceptions" }), exceptionsView(e)));
}

function jobHeader(job) {
  return el(
    "div",
    { class: "job-header", "data-job-id": job.jid },
    el("dl", { class: "facts" },
      fact("State", stateBadge(job.state), "job-state"),
      fact("Job id", job.jid),
      fact("Started", fmtTime(job["start-time"])),
      fact("Duration", fmtDuration(job.duration)),
      fact("Restarts", job.restarts),
      fact("Completed checkpoints", job.metrics.numberOfCompletedCheckpoints),
    ),
    job.message ? el("p", { class: "muted", id: "job-message", text: job.message }) : null,
  );
}

function fact(label, value, id) {
  return el("div", { class: "fact", id }, el("dt", { text: label }), el("dd", {}, value));
}

// Layered left-to-right layout: a node's column is its longest path from a source.
function graphView(job) {
  const nodes = job.plan.nodes;
  const byId = new Map(job.vertices.map((v) => [v.id, v]));
  const depth = new Map(nodes.map((n) => [n.id, 0]));
  for (let pass = 0; pass < nodes.length; pass++) {
    for (const e of job.plan.edges) depth.set(e.target, Math.max(depth.get(e.target) || 0, (depth.get(e.source) || 0) + 1));
  }
  const columns = new Map();
  const pos = new Map();
  const W = 230, H = 70, GX = 110, GY = 40, PAD = 20;
  for (const n of nodes) {
    const d = depth.get(n.id) || 0;
    const row = columns.get(d) || 0;
    columns.set(d, row + 1);
    pos.set(n.id, { x: PAD + d * (W + GX), y: PAD + row * (H + GY) });
  }
  const width = PAD * 2 + (Math.max(0, ...depth.values()) + 1) * (W + GX) - GX;
  const height = PAD * 2 + Math.max(1, ...columns.values()) * (H + GY) - GY;
  const root = svg("svg", { id: "job-graph", class: "job-graph", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "job graph" });
  root.append(
    svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto-start-reverse" }, svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow-head" }))),
  );
  for (const e of job.plan.edges) {
    const a = pos.get(e.source), b = pos.get(e.target);
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
    const label = e.partitioning + (e.keys && e.keys.length ? ` (${e.keys.join(", ")})` : "") + (e["side-output"] ? ` [${e["side-output"]}]` : "");
    root.append(
      svg(
        "g",
        { class: "graph-edge", "data-source": e.source, "data-target": e.target, "data-partitioning": e.partitioning },
        svg("path", { d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`, class: "edge-line", "marker-end": "url(#arrow)" }),
        svg("text", { x: mx, y: (y1 + y2) / 2 - 6, class: "edge-label", "text-anchor": "middle", text: label }),
      ),
    );
  }
  for (const n of nodes) {
    const p = pos.get(n.id);
    const v = byId.get(n.id);
    const level = v ? v.metrics["backpressure-level"] : "ok";
    const name = n.description || n.id;
    const shown = name.length > 32 ? `${name.slice(0, 31)}…` : name;
    root.append(
      svg(
        "g",
        { class: `graph-node bp-${level}`, "data-chain-id": n.id, "data-backpressure": level, "data-status": v ? v.status : "", transform: `translate(${p.x},${p.y})` },
        svg("title", { text: `${name}\nparallelism ${n.parallelism}\nback pressure ${level}` }),
        svg("rect", { width: W, height: H, rx: 8, ry: 8, class: "node-box" }),
        svg("text", { x: 12, y: 26, class: "node-name", text: shown }),
        svg("text", { x: 12, y: 50, class: "node-info", text: `parallelism ${n.parallelism} · ${v ? v.status : ""} · bp ${level}` }),
      ),
    );
  }
  return el("div", { class: "graph-wrap" }, root);
}

function verticesTable(list) {
  const rows = list.map((v) =>
    el(
      "tr",
      { "data-vertex-id": v.id, "data-backpressure": v.metrics["backpressure-level"] },
      el("td", { class: "vertex-name", text: v.name }),
      el("td", {}, stateBadge(v.status)),
      el("td", { class: "num", text: v.parallelism }),
      el("td", { class: "num", text: fmtNumber(v.metrics["read-records"]) }),
      el("td", { class: "num", text: fmtNumber(v.metrics["write-records"]) }),
      el("td", { class: "num", text: fmtNumber(v.metrics["read-records-per-second"]) }),
      el("td", { class: "num", text: fmtNumber(v.metrics["write-records-per-second"]) }),
      el("td", { class: "num", text: fmtNumber(v.metrics["busy-ms-per-second-max"]) }),
      el("td", { class: "num", text: fmtNumber(v.metrics["backpressured-ms-per-second-max"]) }),
      el("td", {}, el("span", { class: `bp-badge bp-${v.metrics["backpressure-level"]}`, text: v.metrics["backpressure-level"] })),
    ),
  );
  return table("vertices", ["Chain", "Status", "Parallelism", "Records in", "Records out", "In/s", "Out/s", "Busy ms/s (max)", "Back-pressured ms/s (max)", "Back pressure"], rows, "No tasks.");
}

function subtasksTable(details) {
  const rows = [];
  for (const d of details) {
    for (const s of d.subtasks) {
      const m = s.metrics;
      rows.push(
        el(
          "tr",
          { "data-vertex-id": d.id, "data-subtask": s.subtask, "data-state": s.status },
          el("td", { class: "vertex-name", text: `${d.name} (${s.subtask + 1}/${d.parallelism})` }),
          el("td", {}, stateBadge(s.status)),
          el("td", { class: "mono", text: s["taskmanager-id"] || s.endpoint || "–" }),
          el("td", { class: "num", text: s.attempt }),
          el("td", { class: "num records-in", text: fmtNumber(m["read-records"]) }),
          el("td", { class: "num records-out", text: fmtNumber(m["write-records"]) }),
          el("td", { class: "num", text: fmtNumber(m["read-records-per-second"]) }),
          el("td", { class: "num", text: fmtNumber(m["write-records-per-second"]) }),
          el("td", { class: "num", text: fmtNumber(m["busy-ms-per-second"]) }),
          el("td", { class: "num", text: fmtNumber(m["backpressured-ms-per-second"]) }),
          el("td", { class: "num", text: fmtNumber(m["idle-ms-per-second"]) }),
        ),
      );
    }
  }
  return table("subtasks", ["Subtask", "State", "TaskManager", "Attempt", "Records in", "Records out", "In/s", "Out/s", "Busy ms/s", "Back-pressured ms/s", "Idle ms/s"], rows, "No subtasks.");
}

function checkpointsView(c) {
  const counts = c.counts;
  const summary = el("p", { id: "checkpoint-counts", class: "muted", text: `${counts.completed} completed, ${counts.failed} failed, ${counts.in_progress} in progress` + (c.latest.restored ? `; restored from checkpoint ${c.latest.restored.id}` : "") });
  const rows = c.history.map((h) =>
    el(
      "tr",
      { "data-checkpoint-id": h.id, "data-status": h.status },
      el("td", { class: "num", text: h.id + (h.is_savepoint ? " (savepoint)" : "") }),
      el("td", {}, stateBadge(h.status)),
      el("td", { text: fmtTime(h.trigger_timestamp) }),
      el("td", { class: "num", text: fmtDuration(h.end_to_end_duration) }),
      el("td", { class: "num", text: fmtBytes(h.state_size) }),
      el("td", { class: "num", text: `${h.num_acknowledged_subtasks}/${h.num_subtasks}` }),
      el("td", { class: "failure", text: h.failure_message || "" }),
    ),
  );
  return el("div", {}, summary, table("checkpoints", ["Id", "Status", "Triggered", "Duration", "Size", "Acks", "Failure"], rows, "No checkpoint yet."));
}

function exceptionsView(e) {
  const entries = e.exceptionHistory.entries;
  if (!entries.length) return el("div", { id: "exceptions" }, el("p", { class: "muted", text: e["root-exception"] || "No exceptions." }));
  return el(
    "div",
    { id: "exceptions" },
    entries.map((x, i) =>
      el(
        "details",
        { class: "exception", open: i === 0, "data-attempt": x.attempt },
        el("summary", {}, el("span", { class: "exception-cause", text: x.cause || x.exceptionName }), el("span", { class: "exception-meta muted", text: ` — ${fmtTime(x.timestamp)}, attempt ${x.attempt}${x.taskName ? `, ${x.taskName}` : ""}${x.restarted ? ", restarted" : ", not restarted"}` })),
        el("pre", { class: "traceback", text: x.stacktrace || x.cause }),
      ),
    ),
  );
}

// -- routing ----------------------------------------------------------------------------------
async function refresh() {
  clearTimeout(timer);
  const gen = generation;
  const route = (location.hash || "#/").slice(1);
  const parts = route.split("/").filter(Boolean).map(decodeURIComponent);
  try {
    if (parts[0] === "jobs" && parts[1]) await renderJob(gen, parts[1]);
    else if (parts[0] === "taskmanagers" && parts[1]) await renderLog(gen, parts[1]);
    else if (parts[0] === "taskmanagers") await renderTaskManagers(gen);
    else await renderOverview(gen);
    if (gen === generation) {
      showError(null);
      document.getElementById("refresh-status").textContent = `updated ${new Date().toLocaleTimeString()}`;
    }
  } catch (err) {
    if (gen === generation) showError(err);
  }
  if (gen === generation) timer = setTimeout(refresh, REFRESH_MS);
}

window.addEventListener("hashchange", () => {
  generation++;
  refresh();
});
document.addEventListener("DOMContentLoaded", refresh);
