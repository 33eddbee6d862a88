// The live dashboard: polls api/stats and redraws. Every text from the server
// (queue names are arbitrary bytes from clients) goes in through textContent
// or setAttribute, never as markup.
"use strict";

const STATS_URL = "api/stats";
const POLL_MS = 1000;
const SPARK_WIDTH = 120;
const SPARK_HEIGHT = 22;
const THROUGHPUT_WIDTH = 300;
const THROUGHPUT_HEIGHT = 28;
const SVG_NS = "http://www.w3.org/2000/svg";
const NO_VALUE = "–";

function byId(id) {
  return document.getElementById(id);
}

function setText(id, text) {
  byId(id).textContent = text;
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function formatCount(n) {
  return n === null || n === undefined ? NO_VALUE : n.toLocaleString("en-US");
}

function plural(n, noun) {
  return formatCount(n) + " " + noun + (n === 1 ? "" : "s");
}

function formatRate(rate) {
  if (rate === null || rate === undefined) return NO_VALUE;
  return rate >= 100 ? Math.round(rate).toLocaleString("en-US") : rate.toFixed(1);
}

function formatDuration(seconds) {
  const days = Math.floor(seconds / 86400);
  const hours = Math.floor((seconds % 86400) / 3600);
  const minutes = Math.floor((seconds % 3600) / 60);
  if (days) return days + "d " + hours + "h";
  if (hours) return hours + "h " + minutes + "m";
  return minutes + "m " + (seconds % 60) + "s";
}

// series: lists of values drawn as lines on one scale, the first one filled below.
function sparkline(series, width, height) {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", "0 0 " + width + " " + height);
  svg.setAttribute("preserveAspectRatio", "none");
  const longest = Math.max(...series.map((values) => values.length));
  if (longest < 2) return svg;
  const max = Math.max(1, ...series.flat());
  const step = width / (longest - 1);
  series.forEach((values, index) => {
    const offset = longest - values.length;
    const points = values.map((v, i) =>
      ((i + offset) * step).toFixed(1) + "," + (height - 1 - (v / max) * (height - 2)).toFixed(1));
    if (index === 0) {
      const area = document.createElementNS(SVG_NS, "polygon");
      area.setAttribute("points", (offset * step).toFixed(1) + "," + height + " " + points.join(" ") +
                        " " + width + "," + height);
      svg.append(area);
    }
    const line = document.createElementNS(SVG_NS, "polyline");
    line.setAttribute("points", points.join(" "));
    if (index > 0) line.setAttribute("class", "second");
    svg.append(line);
  });
  return svg;
}

function renderSummary(stats) {
  const node = stats.node;
  setText("node-id", "node " + node.id.slice(0, 8) + " · port " + node.port + " · v" + node.version +
          " · up " + formatDuration(node.uptime_s));
  const jobs = stats.jobs;
  setText("jobs-registered", formatCount(jobs.registered));
  setText("queues-total", "in " + plural(stats.queues.total, "queue"));
  setText("rate-added", formatRate(jobs.rates.added));
  for (const name of ["added", "delivered", "acked", "nacked"]) {
    setText("rate-" + name, formatRate(jobs.rates[name]));
  }
  byId("throughput-spark").replaceChildren(
    sparkline([jobs.history.added, jobs.history.delivered], THROUGHPUT_WIDTH, THROUGHPUT_HEIGHT));
  setText("dead-letter-jobs", formatCount(stats.queues.dead_letter_jobs));
  setText("dead-lettered", formatCount(jobs.counters.dead_lettered) + " dead-lettered since start");
  setText("clients", formatCount(node.ops_per_sec) + " commands/s · " +
          plural(node.connected_clients, "client") + ", " + node.blocked_clients + " blocked");
  const memory = stats.memory;
  setText("memory-used", memory.used_human);
  setText("memory-detail", (memory.maxmemory_human ? "of " + memory.maxmemory_human + " maxmemory · "
                                                   : "no maxmemory · ") + "peak " + memory.peak_human);
  const bar = byId("memory-bar");
  bar.hidden = !memory.maxmemory;
  bar.value = memory.maxmemory ? Math.min(1, memory.used / memory.maxmemory) : 0;
  const aof = stats.aof;
  setText("aof-state", aof.loading ? "loading" : aof.enabled ? "on" : "off");
  setText("aof-detail", aof.enabled
    ? aof.size_human + " · fsync " + aof.fsync + (aof.rewrite_in_progress ? " · rewriting" : "") +
      (aof.last_write_status === "ok" ? "" : " · write error")
    : "appendonly no");
}

function renderNodes(nodes) {
  const rows = nodes.map((n) => {
    const tr = document.createElement("tr");
    tr.dataset.node = n.id;
    const id = cell(n.id.slice(0, 12) + (n.myself ? " (this node)" : ""), "id");
    id.title = n.id;
    const state = document.createElement("td");
    const badge = document.createElement("span");
    badge.className = "badge";
    badge.dataset.state = n.state;
    badge.textContent = n.state;
    state.append(badge);
    state.className = "state";
    tr.append(id, cell(n.address, "address"), state, cell(n.connected ? "connected" : "disconnected"),
              cell(n.flags.join(", ")), cell(String(n.priority), "num"));
    return tr;
  });
  byId("nodes").tBodies[0].replaceChildren(...rows);
  setText("nodes-count", "(" + nodes.length + ")");
}

function renderQueues(queues) {
  const rows = queues.shown.map((q) => {
    const tr = document.createElement("tr");
    tr.dataset.queue = q.name;
    if (q.dead_letter_queue) tr.className = "dead";
    const name = cell(q.name, "name");
    name.title = q.name;
    const spark = document.createElement("td");
    spark.append(sparkline([q.history], SPARK_WIDTH, SPARK_HEIGHT));
    const dead = cell(formatCount(q.dead_letters), "num dead-letters");
    if (q.dead_letters) dead.classList.add("has-dead");
    tr.append(name, cell(formatCount(q.length), "num length"), cell(formatRate(q.rate_in), "num rate-in"),
              cell(formatRate(q.rate_out), "num rate-out"), spark, dead,
              cell(formatCount(q.blocked_clients), "num"), cell(q.paused === "none" ? "" : q.paused));
    return tr;
  });
  byId("queues").tBodies[0].replaceChildren(...rows);
  byId("queues-empty").hidden = rows.length > 0;
  setText("queues-note", queues.total > rows.length
    ? "(the " + rows.length + " longest of " + formatCount(queues.total) + ")" : "");
}

function setStatus(state, text) {
  const status = byId("status");
  status.dataset.state = state;
  status.textContent = text;
}

async function refresh() {
  try {
    const response = await fetch(STATS_URL, {cache: "no-store"});
    if (!response.ok) throw new Error("HTTP " + response.status);
    const stats = await response.json();
    renderSummary(stats);
    renderNodes(stats.nodes);
    renderQueues(stats.queues);
    setStatus("live", "live");
    setText("updated", "updated " + new Date(stats.time_ms).toLocaleTimeString());
  } catch (error) {
    setStatus("disconnected", "disconnected");
  }
}

async function poll() {
  if (document.visibilityState !== "hidden") await refresh();
  setTimeout(poll, POLL_MS);
}

poll();
