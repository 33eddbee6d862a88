// The live dashboard: polls api/stats and redraws the cluster. Every text from
// the server (queue names, job bodies, headers and reasons are arbitrary bytes
// from clients) goes in through textContent or setAttribute, never as markup.
// Logged in, it looks inside queues and jobs on any node and runs actions as
// the user: requests that carry the session's CSRF token in a header.
"use strict";

const STATS_URL = "api/stats";
const SESSION_URL = "api/session";
const LOGIN_URL = "api/login";
const LOGOUT_URL = "api/logout";
const ACTION_URL = "api/action/";
const QUEUE_URL = "api/queue";
const JOB_URL = "api/job";
const REDRIVE_URL = "api/cluster/redrive";
const DELETE_URL = "api/cluster/deljob";
const CSRF_HEADER = "X-CSRF-Token";
const POLL_MS = 1000;
const SPARK_WIDTH = 120;
const SPARK_HEIGHT = 22;
const THROUGHPUT_WIDTH = 300;
const THROUGHPUT_HEIGHT = 28;
const SVG_NS = "http://www.w3.org/2000/svg";
const NO_VALUE = "–";
const SHORT_ID = 8;
// Fields of a job shown first, in this order; any other field SHOW gives
// follows them, so a field the node adds is shown without a page change.
const JOB_FIELDS = ["queue", "state", "dead-reason", "nack-reason", "origin-queue", "deadletter",
                    "maxdeliver", "nacks", "additional-deliveries", "priority", "repl", "ttl",
                    "ctime", "delay", "retry", "next-requeue-within", "next-awake-within",
                    "nodes-delivered", "nodes-confirmed", "dedupid"];
const JOB_HIDDEN = new Set(["id", "body", "headers"]);
const REASONS = ["dead-reason", "nack-reason"];

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

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function button(text, onClick, className) {
  const node = element("button", text, className);
  node.type = "button";
  node.addEventListener("click", onClick);
  return node;
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

function formatValue(value) {
  if (value === null || value === undefined) return NO_VALUE;
  if (Array.isArray(value)) return value.length ? value.map(formatValue).join(", ") : "(none)";
  return String(value);
}

// Node IDs are long: the page shows their first characters, and the whole ID as a tooltip.
let addresses = {};

function shortNode(id) {
  return id.slice(0, SHORT_ID);
}

function nodeLabel(id) {
  return shortNode(id) + (addresses[id] ? " (" + addresses[id] + ")" : "");
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
  const cluster = stats.cluster;
  setText("jobs-registered", formatCount(cluster.registered));
  setText("jobs-here", formatCount(stats.jobs.registered) + " on this node · " +
          plural(cluster.nodes_with_figures, "node") + " reporting");
  for (const name of ["added", "delivered", "acked", "nacked"]) {
    setText("rate-" + name, formatRate(cluster.rates[name]));
  }
  byId("throughput-spark").replaceChildren(
    sparkline([cluster.history.added, cluster.history.delivered], THROUGHPUT_WIDTH, THROUGHPUT_HEIGHT));
  setText("dead-letter-jobs", formatCount(cluster.dead_letter_jobs));
  setText("dead-lettered", formatCount(stats.queues.dead_letter_jobs) + " on this node · " +
          formatCount(stats.jobs.counters.dead_lettered) + " dead-lettered here since start");
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
  addresses = {};
  const rows = nodes.map((n) => {
    addresses[n.id] = n.address;
    const tr = document.createElement("tr");
    tr.dataset.node = n.id;
    const id = cell(n.id.slice(0, 12) + (n.myself ? " (this node)" : ""), "id");
    id.title = n.id;
    const state = document.createElement("td");
    const badge = element("span", n.state, "badge");
    badge.dataset.state = n.state;
    state.append(badge);
    state.className = "state";
    const f = n.figures || {};
    const figures = [cell(formatCount(f.registered), "num jobs"), cell(f.memory_human || NO_VALUE, "num memory"),
                     cell(formatCount(f.ops_per_sec), "num ops"), cell(formatRate(f.rate_added), "num added"),
                     cell(formatCount(f.queues), "num queues"), cell(formatCount(f.dead_letter_jobs), "num dead")];
    if (n.figures && f.age_s > 3) tr.title = "figures from " + f.age_s + " s ago";
    if (!n.figures && !n.myself) tr.title = "no figures from this node yet";
    tr.append(id, cell(n.address, "address"), state, cell(n.connected ? "connected" : "disconnected"),
              ...figures, cell(n.flags.join(", ")), cell(String(n.priority), "num"));
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

// Each node's share of a queue: "0a1b2c3d 5 · 4e5f6a7b 2".
function sharesCell(shares) {
  const td = element("td", undefined, "shares");
  for (const share of shares) {
    const span = element("span", shortNode(share.node) + " " + formatCount(share.length), "share");
    span.title = nodeLabel(share.node);
    span.dataset.node = share.node;
    td.append(span);
  }
  return td;
}

function renderQueues(stats) {
  const queues = stats.queues;
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
    tr.append(name, cell(formatCount(q.length), "num length"), sharesCell(q.shares),
              cell(formatRate(q.rate_in), "num rate-in"), cell(formatRate(q.rate_out), "num rate-out"),
              spark, dead, cell(formatCount(q.blocked_clients), "num"),
              cell(q.paused === "none" ? "" : q.paused));
    return tr;
  });
  byId("queues").tBodies[0].replaceChildren(...rows);
  byId("queues-empty").hidden = rows.length > 0;
  setText("queues-note", queues.listed > rows.length
    ? "(the " + rows.length + " longest of " + formatCount(queues.listed) + ")" : "");
}

function renderFailed(stats) {
  const dead = stats.queues.shown.filter((q) => q.dead_letter_queue);
  const rows = dead.map((q) => {
    const tr = document.createElement("tr");
    tr.dataset.queue = q.name;
    const look = document.createElement("td");
    if (loggedIn) look.append(button("Jobs and reasons", () => lookInside(q.name)));
    tr.append(cell(q.name, "name"), cell(formatCount(q.length), "num length"), sharesCell(q.shares), look);
    return tr;
  });
  byId("dead-queues").tBodies[0].replaceChildren(...rows);
  byId("dead-queues-empty").hidden = rows.length > 0;
  setText("failed-note", loggedIn || !rows.length ? "" : "(log in to see their jobs and why they failed)");
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
    renderQueues(stats);
    renderFailed(stats);
    renderQueueNames(stats.queues);
    setStatus("live", "live");
    if (!sessionKnown) loadSession();
    setText("updated", "updated " + new Date(stats.time_ms).toLocaleTimeString());
  } catch (error) {
    setStatus("disconnected", "disconnected");
  }
}

// ---------------------------------------------------------------- session

let csrfToken = null;
let sessionKnown = false;
let loggedIn = false;

function showAccount(session) {
  const user = session.user;
  const refused = user === null ? session.login_refused : null;
  csrfToken = session.csrf_token;
  sessionKnown = true;
  loggedIn = user !== null;
  setText("account-user", user === null ? "" : "logged in as " + user);
  byId("login-open").hidden = user !== null || refused !== null;
  byId("logout").hidden = user === null;
  byId("actions").hidden = user === null && refused === null;
  byId("actions-off").hidden = refused === null;
  setText("actions-off", refused || "");
  byId("action-forms").hidden = user === null;
  setText("actions-as", user === null ? "" : "as " + user);
  document.body.classList.toggle("acting", user !== null);
  if (user === null) {
    byId("inspect").hidden = true;
    byId("job-view").hidden = true;
  }
}

async function loadSession() {
  try {
    const response = await fetch(SESSION_URL, {cache: "no-store"});
    if (response.ok) showAccount(await response.json());
  } catch (error) {
    // The node is unreachable: the poll says so, and asks again once it answers.
  }
}

// Resolves to [HTTP status, the JSON answer] of a request carrying the CSRF token.
async function request(url, options) {
  const headers = Object.assign({}, options.headers || {});
  if (csrfToken) headers[CSRF_HEADER] = csrfToken;
  const response = await fetch(url, Object.assign({}, options, {headers: headers, cache: "no-store"}));
  let answer;
  try {
    answer = await response.json();
  } catch (error) {
    answer = {error: "HTTP " + response.status};
  }
  if (response.status === 401) await loadSession();
  return [response.status, answer];
}

function post(url, body) {
  return request(url, {method: "POST", headers: {"Content-Type": "application/json"},
                       body: JSON.stringify(body)});
}

function get(url, params) {
  return request(url + "?" + new URLSearchParams(params).toString(), {method: "GET"});
}

function setResult(state, text) {
  const result = byId("action-result");
  result.dataset.state = state;
  result.textContent = text;
}

function refusal(status, answer) {
  return (status === 403 ? "Refused: " : "Failed: ") + answer.error;
}

// ------------------------------------------------------------ looking inside

let inspected = null;  // the queue shown inside, redrawn after an action

function reasonText(job) {
  return REASONS.filter((name) => job[name] !== undefined && job[name] !== null)
    .map((name) => name.replace("-reason", "") + ": " + job[name]).join(" · ");
}

function bodyPreview(body) {
  const text = body.text.length > 120 ? body.text.slice(0, 120) + "…" : body.text;
  return element("td", text, "body-preview" + (body.binary ? " binary" : ""));
}

function jobRow(job, deadLetters) {
  const tr = document.createElement("tr");
  tr.dataset.job = job.id;
  const id = document.createElement("td");
  id.className = "id";
  id.append(button(job.id, () => findJob(job.id), "link"));
  tr.append(id, cell(job.state, "state"), cell(formatValue(job.priority === undefined ? 5 : job.priority), "num"),
            cell(formatCount(job.nacks), "num"), cell(formatCount(job["additional-deliveries"]), "num"),
            bodyPreview(job.body));
  if (deadLetters) tr.append(cell(reasonText(job), "reason"));
  const act = document.createElement("td");
  act.append(button("Delete", () => deleteJob(job.id), "danger small"));
  tr.append(act);
  return tr;
}

function nodeSection(queue, entry, deadLetters) {
  const section = element("div", undefined, "inspect-node");
  section.dataset.node = entry.node;
  const title = element("h3", "node " + shortNode(entry.node) + " · " + entry.address +
                        (entry.myself ? " (this node)" : ""));
  section.append(title);
  if (!entry.answered) {
    section.append(element("p", "No answer in time: this node's jobs are not shown.", "error"));
    return section;
  }
  const note = element("p", plural(entry.length, "job") + " queued here" +
                       (entry.length > entry.jobs.length ? ", the first " + entry.jobs.length + " shown" : ""),
                       "muted");
  if (deadLetters && entry.length) {
    note.append(" ", button("Redrive them", () => redrive(queue, entry.node)));
  }
  section.append(note);
  if (!entry.jobs.length) return section;
  const table = element("table", undefined, "jobs");
  const head = document.createElement("tr");
  const headers = ["ID", "State", "Priority", "NACKs", "Deliveries", "Body"];
  if (deadLetters) headers.push("Why it failed");
  headers.push("");
  for (const text of headers) head.append(element("th", text));
  table.createTHead().append(head);
  table.createTBody().append(...entry.jobs.map((job) => jobRow(job, deadLetters)));
  section.append(table);
  return section;
}

async function lookInside(name) {
  inspected = name;
  const view = byId("inspect");
  view.hidden = false;
  setText("inspect-queue", name);
  setText("inspect-note", "asking the nodes…");
  const [status, answer] = await get(QUEUE_URL, {name: name});
  if (answer.error !== undefined) {
    setText("inspect-note", refusal(status, answer));
    byId("inspect-nodes").replaceChildren();
    return;
  }
  const total = answer.nodes.reduce((sum, n) => sum + (n.length || 0), 0);
  setText("inspect-note", answer.nodes.length === 0 ? "No node queues jobs in it." : plural(total, "job") + " queued on " +
          plural(answer.nodes.filter((n) => n.length).length, "node") +
          (answer.dead_letter_queue ? " · a dead-letter queue: each job says why it failed" : ""));
  byId("inspect-nodes").replaceChildren(
    ...answer.nodes.map((entry) => nodeSection(answer.queue, entry, answer.dead_letter_queue)));
  view.scrollIntoView({block: "nearest"});
}

function fieldRow(name, value) {
  const tr = document.createElement("tr");
  tr.dataset.field = name;
  tr.append(element("th", name), cell(formatValue(value), "value"));
  if (value === null || value === undefined) tr.classList.add("empty");
  return tr;
}

function renderJob(answer) {
  byId("job-view").hidden = false;
  setText("job-id", answer.id);
  const copies = answer.copies;
  const silent = answer.unanswered.length ? " · " + plural(answer.unanswered.length, "node") +
                 " did not answer" : "";
  setText("job-summary", copies.length
    ? "held by " + plural(copies.length, "node") + silent
    : "no node holds this job" + silent);
  byId("job-copies").tBodies[0].replaceChildren(...copies.map((copy) => {
    const tr = document.createElement("tr");
    tr.dataset.node = copy.node;
    const node = cell(shortNode(copy.node) + (copy.myself ? " (this node)" : ""), "id");
    node.title = copy.node;
    tr.append(node, cell(copy.address), cell(copy.job.state, "state"), cell(copy.job.queue, "name"),
              cell(formatCount(copy.job.nacks), "num"), cell(formatCount(copy.job["additional-deliveries"]), "num"));
    return tr;
  }));
  // The details of the copy queued, if one is, else the first.
  const shown = (copies.find((copy) => copy.job.state === "queued") || copies[0] || {}).job;
  byId("job-delete").hidden = !shown;
  if (!shown) {
    for (const id of ["job-fields", "job-headers"]) byId(id).tBodies[0].replaceChildren();
    setText("job-body", "");
    setText("job-body-note", "");
    return;
  }
  const names = JOB_FIELDS.filter((name) => name in shown)
    .concat(Object.keys(shown).filter((name) => !JOB_FIELDS.includes(name) && !JOB_HIDDEN.has(name)));
  byId("job-fields").tBodies[0].replaceChildren(...names.map((name) => fieldRow(name, shown[name])));
  const headers = shown.headers || [];
  const headerRows = [];
  for (let i = 0; i + 1 < headers.length; i += 2) headerRows.push(fieldRow(headers[i], headers[i + 1]));
  byId("job-headers").tBodies[0].replaceChildren(...headerRows);
  const body = shown.body;
  setText("job-body", body.text);
  setText("job-body-note", "(" + plural(body.size, "byte") + (body.truncated ? ", the first " +
          formatCount(body.text.length) + " characters shown" : "") +
          (body.binary ? "; bytes that are not UTF-8 text shown as \\xNN" : "") + ")");
  byId("job-view").scrollIntoView({block: "nearest"});
}

async function findJob(id) {
  byId("action-job").value = id;
  const [status, answer] = await get(JOB_URL, {id: id});
  if (answer.error !== undefined) {
    setResult("error", refusal(status, answer));
    return;
  }
  setResult("", "");
  renderJob(answer);
}

// ---------------------------------------------------------------- actions

// What a successful action did, from the command's reply.
const ACTION_DONE = {
  pause: (target, result) => target + ": paused " + result + " on every node",
  resume: (target) => target + ": resumed on every node",
  redrive: (target, result) => target + ": " + plural(result, "dead letter") + " redriven",
  purge: (target, result) => target + ": " + plural(result, "job") + " purged",
  deljob: (target, result) => target + (result ? ": deleted on " + plural(result, "node")
                                               : ": no node holds it"),
};
const ACTION_CONFIRM = {
  purge: (target) => "Delete every job queued in " + target +
                     " on this node, and their copies on other nodes?",
  deljob: (target) => "Delete job " + target + " on every node that holds a copy?",
};

async function afterAction(action, target, status, answer) {
  if (answer.error === undefined) {
    setResult("ok", ACTION_DONE[action](target, answer.result));
  } else {
    setResult("error", refusal(status, answer));
  }
  if (inspected !== null && !byId("inspect").hidden) await lookInside(inspected);
  refresh();
}

async function redrive(queue, node) {
  setResult("running", "…");
  try {
    const [status, answer] = await post(REDRIVE_URL, {queue: queue, node: node});
    await afterAction("redrive", queue + " on node " + shortNode(node), status, answer);
  } catch (error) {
    setResult("error", "Failed: the node did not answer.");
  }
}

async function deleteJob(id) {
  if (!window.confirm(ACTION_CONFIRM.deljob(id))) return;
  setResult("running", "…");
  try {
    const [status, answer] = await post(DELETE_URL, {job: id});
    await afterAction("deljob", id, status, answer);
    if (!byId("job-view").hidden && byId("job-id").textContent === id) await findJob(id);
  } catch (error) {
    setResult("error", "Failed: the node did not answer.");
  }
}

async function runAction(action) {
  const forJob = action === "deljob" || action === "find";
  // Queue names are taken as typed: spaces may be part of one.
  const target = forJob ? byId("action-job").value.trim() : byId("action-queue").value;
  if (!target) {
    setResult("error", forJob ? "Enter a job ID." : "Enter a queue name.");
    return;
  }
  if (action === "look") return lookInside(target);
  if (action === "find") return findJob(target);
  if (action === "deljob") return deleteJob(target);
  const question = ACTION_CONFIRM[action];
  if (question && !window.confirm(question(target))) return;
  const body = {queue: target};
  if (action === "pause") body.mode = byId("pause-mode").value;
  setResult("running", "…");
  try {
    const [status, answer] = await post(ACTION_URL + action, body);
    await afterAction(action, target, status, answer);
  } catch (error) {
    setResult("error", "Failed: the node did not answer.");
  }
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
  for (const control of document.querySelectorAll("button[data-action]")) {
    control.addEventListener("click", () => runAction(control.dataset.action));
  }
  byId("inspect-close").addEventListener("click", () => {
    inspected = null;
    byId("inspect").hidden = true;
  });
  byId("job-close").addEventListener("click", () => { byId("job-view").hidden = true; });
  byId("job-delete").addEventListener("click", () => deleteJob(byId("job-id").textContent));
  // Logged in, a click on a queue's row names it in the action form and looks inside.
  byId("queues").tBodies[0].addEventListener("click", (event) => {
    const row = event.target.closest("tr[data-queue]");
    if (row === null || !loggedIn) return;
    byId("action-queue").value = row.dataset.queue;
    lookInside(row.dataset.queue);
  });
}

async function poll() {
  if (document.visibilityState !== "hidden") await refresh();
  setTimeout(poll, POLL_MS);
}

setUpActions();
loadSession();
poll();
