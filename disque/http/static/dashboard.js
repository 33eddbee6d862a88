// The live dashboard: polls api/stats and redraws. Every text from the server
// (queue names are arbitrary bytes from clients) goes in through textContent
// or setAttribute, never as markup. Logged in, it runs actions as the user:
// POSTs of JSON that carry the session's CSRF token in a header.
"use strict";

const STATS_URL = "api/stats";
const SESSION_URL = "api/session";
const LOGIN_URL = "api/login";
const LOGOUT_URL = "api/logout";
const ACTION_URL = "api/action/";
const CSRF_HEADER = "X-CSRF-Token";
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

let shownQueueNames = "";

// The queue names the action form offers: redrawn only when they change, so
// that an open suggestion list stays open.
function renderQueueNames(queues) {
  const names = queues.shown.map((q) => q.name);
  const key = JSON.stringify(names);
  if (key === shownQueueNames) return;
  shownQueueNames = key;
  byId("queue-names").replaceChildren(...names.map((name) => {
    const option = document.createElement("option");
    option.value = name;
    return option;
  }));
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
    renderQueueNames(stats.queues);
    setStatus("live", "live");
    if (!sessionKnown) loadSession();
    setText("updated", "updated " + new Date(stats.time_ms).toLocaleTimeString());
  } catch (error) {
    setStatus("disconnected", "disconnected");
  }
}

// ---------------------------------------------------------------- actions

let csrfToken = null;
let sessionKnown = false;

// What a successful action did, from the command's reply.
const ACTION_DONE = {
  pause: (target, result) => target + ": paused " + result + " on every node",
  resume: (target) => target + ": resumed on every node",
  redrive: (target, result) => target + ": " + plural(result, "dead letter") + " redriven",
  purge: (target, result) => target + ": " + plural(result, "job") + " purged",
  deljob: (target, result) => target + (result ? ": deleted" : ": no such job on this node"),
};
const ACTION_CONFIRM = {
  purge: (target) => "Delete every job queued in " + target +
                     " on this node, and their copies on other nodes?",
  deljob: (target) => "Delete job " + target + " and its copies on other nodes?",
};

function showAccount(session) {
  const user = session.user;
  const refused = user === null ? session.login_refused : null;
  csrfToken = session.csrf_token;
  sessionKnown = true;
  setText("account-user", user === null ? "" : "logged in as " + user);
  byId("login-open").hidden = user !== null || refused !== null;
  byId("logout").hidden = user === null;
  byId("actions").hidden = user === null && refused === null;
  byId("actions-off").hidden = refused === null;
  setText("actions-off", refused || "");
  byId("action-forms").hidden = user === null;
  setText("actions-as", user === null ? "" : "as " + user);
  document.body.classList.toggle("acting", user !== null);
}

async function loadSession() {
  try {
    const response = await fetch(SESSION_URL, {cache: "no-store"});
    if (response.ok) showAccount(await response.json());
  } catch (error) {
    // The node is unreachable: the poll says so, and asks again once it answers.
  }
}

// POST a JSON body; resolves to [HTTP status, the JSON answer].
async function post(url, body) {
  const headers = {"Content-Type": "application/json"};
  if (csrfToken) headers[CSRF_HEADER] = csrfToken;
  const response = await fetch(url, {method: "POST", headers: headers, cache: "no-store",
                                     body: JSON.stringify(body)});
  let answer;
  try {
    answer = await response.json();
  } catch (error) {
    answer = {error: "HTTP " + response.status};
  }
  return [response.status, answer];
}

function setResult(state, text) {
  const result = byId("action-result");
  result.dataset.state = state;
  result.textContent = text;
}

async function runAction(action) {
  const forJob = action === "deljob";
  // Queue names are taken as typed: spaces may be part of one.
  const target = forJob ? byId("action-job").value.trim() : byId("action-queue").value;
  if (!target) {
    setResult("error", forJob ? "Enter a job ID." : "Enter a queue name.");
    return;
  }
  const question = ACTION_CONFIRM[action];
  if (question && !window.confirm(question(target))) return;
  const body = forJob ? {job: target} : {queue: target};
  if (action === "pause") body.mode = byId("pause-mode").value;
  setResult("running", "…");
  try {
    const [status, answer] = await post(ACTION_URL + action, body);
    if (answer.error === undefined) {
      setResult("ok", ACTION_DONE[action](target, answer.result));
    } else {
      setResult("error", (status === 403 ? "Refused: " : "Failed: ") + answer.error);
      if (status === 401) await loadSession();
    }
  } catch (error) {
    setResult("error", "Failed: the node did not answer.");
  }
  refresh();
}

async function logIn(event) {
  event.preventDefault();
  const password = byId("login-password");
  setText("login-error", "");
  try {
    const [status, answer] = await post(LOGIN_URL, {user: byId("login-user").value,
                                                    password: password.value});
    if (status !== 200) {
      setText("login-error", answer.error);
      return;
    }
    password.value = "";
    byId("login-dialog").close();
    setResult("", "");
    showAccount({user: answer.user, csrf_token: answer.csrf_token, login_refused: null});
  } catch (error) {
    setText("login-error", "The node did not answer.");
  }
}

async function logOut() {
  try {
    await post(LOGOUT_URL, {});
  } finally {
    await loadSession();
  }
}

function setUpActions() {
  byId("login-open").addEventListener("click", () => {
    setText("login-error", "");
    byId("login-dialog").showModal();
  });
  byId("login-cancel").addEventListener("click", () => byId("login-dialog").close());
  byId("login-form").addEventListener("submit", logIn);
  byId("logout").addEventListener("click", logOut);
  for (const form of document.querySelectorAll(".action-form")) {
    form.addEventListener("submit", (event) => event.preventDefault());
  }
  for (const button of document.querySelectorAll("button[data-action]")) {
    button.addEventListener("click", () => runAction(button.dataset.action));
  }
  // Logged in, a click on a queue's row names it in the action form.
  byId("queues").tBodies[0].addEventListener("click", (event) => {
    const row = event.target.closest("tr[data-queue]");
    if (row === null || byId("action-forms").hidden) return;
    const input = byId("action-queue");
    input.value = row.dataset.queue;
    input.focus();
  });
}

async function poll() {
  if (document.visibilityState !== "hidden") await refresh();
  setTimeout(poll, POLL_MS);
}

setUpActions();
loadSession();
poll();
