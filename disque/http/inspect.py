"""Looking inside queues and jobs wherever the cluster holds them, and the
actions on what that shows, for a logged-in user who may (docs/dashboard.md
"Looking inside a queue", "Finding a job", "Failed jobs").

Each view asks this node's core directly and the other nodes over the bus
(``cluster/inspection.py``: QUEUEPEEK, JOBPEEK, REDRIVE), and waits at most
ANSWER_TIMEOUT_S for their answers: a node that does not answer in time
is listed as such. Whether the user may see or change a queue's jobs is
this node's decision, by its users and with the command's rights (QPEEK
for a queue's jobs, SHOW for a job, QREDRIVE, DELJOB), as
``commands.access`` decides for a RESP client: before asking, for a queue;
before showing, for a job, whose queue only the answers tell.

What the page gets of a job is text for ``textContent``, never markup:
bodies, header names and values and reasons are arbitrary bytes, cut to a
preview by the node holding them, made ``printable`` here: UTF-8 where
valid, every other byte and every control or direction-changing character
as ``\\xNN`` (``\\uNNNN``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from aiohttp import web

from disque.cluster.inspection import BODY_SIZE, MAX_PEEK
from disque.cluster.membership import HANDSHAKE, ClusterNode
from disque.commands.access import check_on_queue
from disque.context.log import logger
from disque.http.actions import (DELJOB, QREDRIVE, RESPONSE_HEADERS, ActionError,
                                 DashboardActions, queue_named, reply_value)
from disque.http.sessions import Session
from disque.jobs.ids import is_valid_job_id
from disque.jobs.replies import DEAD_SUFFIX

if TYPE_CHECKING:
    from disque.http.observed import DashboardServer
    from disque.state.nodestate import NodeState

ROUTE_QUEUE = "/api/queue"
ROUTE_JOB = "/api/job"
ROUTE_REDRIVE = "/api/cluster/redrive"
ROUTE_DELETE = "/api/cluster/deljob"

# The commands whose rights each view and action needs (ACL permission units).
PEEK_RIGHT = "qpeek"
SHOW_RIGHT = "show"
REDRIVE_RIGHT = "qredrive"
DELETE_RIGHT = "deljob"

ANSWER_TIMEOUT_S = 2.0
MAX_WAITING = 256  # requests awaiting an answer at once; more are refused (503)
NO_ANSWER = object()  # what ``Answers.wait`` gives when the time is up
BUSY = "Too many views waiting for other nodes: try again in a moment."
BAD_JOB_ID = "'id' must be a job ID (D-...)."
NO_SUCH_NODE = "No such node, or no link to it: %s."
# What printable escapes: C0 and C1 controls but tab and newline, and the
# characters that reorder or hide text (bidirectional overrides, zero widths).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e"
                          "\u2066-\u2069\ufeff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    return "\\x%02x" % code if code < 0x100 else "\\u%04x" % code


def printable(data: bytes) -> tuple[str, bool]:
    """``data`` as text that shows every byte: UTF-8 where valid, ``\\xNN``
    for other bytes and controls; and whether anything had to be escaped."""
    try:
        text = data.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        text = data.decode("utf-8", "backslashreplace")
        valid = False
    shown = _UNPRINTABLE.sub(_escape, text)
    return shown, not valid or shown != text


def _value_json(value: object) -> object:
    """A field of a job's record for JSON: bytes as printable text."""
    if type(value) is bytes:
        return printable(value)[0]
    if type(value) is list:
        return [_value_json(item) for item in value]
    if value is None or type(value) in (int, float, bool):
        return value
    return None


def job_json(record: object) -> dict[str, Any] | None:
    """A job's record (SHOW's array, its body cut, ``body-size`` added) for
    the page; None when it is not one. The body becomes ``{"text",
    "binary", "size", "truncated"}``."""
    if type(record) is not list or len(record) % 2:
        return None
    job: dict[str, Any] = {}
    for key, value in zip(record[0::2], record[1::2]):
        if type(key) is not bytes:
            return None
        job[key.decode("ascii", "replace")] = value if key == b"body" else _value_json(value)
    body = job.get("body")
    size = job.pop(BODY_SIZE.decode(), None)
    if type(job.get("id")) is not str or not isinstance(body, (bytes, type(None))):
        return None
    text, binary = printable(body or b"")
    length = len(body or b"")
    job["body"] = {"text": text, "binary": binary,
                   "size": size if type(size) is int else length,
                   "truncated": type(size) is int and size > length}
    return job


def record_queue(record: object) -> bytes:
    """The queue a job's record names, as bytes (b"" when it names none)."""
    if type(record) is list:
        for i in range(0, len(record) - 1, 2):
            if record[i] == b"queue":
                queue = record[i + 1]
                return queue if type(queue) is bytes else b""
    return b""


class Copy(NamedTuple):
    """One node's copy of a job: the page's entry, and the job's queue."""

    entry: dict[str, Any]
    queue: bytes


class Answers:
    """The requests waiting for another node's answer: the core's
    ``AnswerListener``, set on the node's ``Inspection``."""

    def __init__(self) -> None:
        self.waiting: dict[tuple[bytes, int], asyncio.Future[object]] = {}

    def answered(self, node_id: bytes, request: int, value: object) -> None:
        """An ANSWER arrived: to whoever waits for it (an answer too late, or
        to a request never made, is dropped)."""
        future = self.waiting.pop((node_id, request), None)
        if future is not None and not future.done():
            future.set_result(value)

    def expect(self, node_id: bytes, request: int) -> asyncio.Future[object]:
        """A future for the answer of ``node_id`` to ``request``."""
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self.waiting[(node_id, request)] = future
        return future

    async def wait(self, node_id: bytes, future: asyncio.Future[object],
                   request: int) -> object:
        """The answer, or NO_ANSWER after ANSWER_TIMEOUT_S."""
        try:
            return await asyncio.wait_for(future, ANSWER_TIMEOUT_S)
        except asyncio.TimeoutError:
            return NO_ANSWER
        finally:
            self.waiting.pop((node_id, request), None)


def _node_entry(node: ClusterNode, own_id: bytes) -> dict[str, Any]:
    return {"node": node.id.decode("ascii", "replace"),
            "address": "%s:%d" % (node.ip, node.port), "myself": node.id == own_id}


class Inspector:
    """The views behind a login that look inside queues and jobs, and the
    actions taken from them, with the answers they wait for."""

    def __init__(self, server: DashboardServer, actions: DashboardActions) -> None:
        self.server = server
        self.actions = actions
        self.answers = Answers()
        server.node.state.inspection.listener = self.answers

    @property
    def state(self) -> NodeState:
        """The node's parts."""
        return self.server.node.state

    # ------------------------------------------------------------ helpers

    def _peers(self) -> list[ClusterNode]:
        """The other nodes of the cluster (out of handshake): each is asked,
        and one this node has no link to is reported as not answering (a copy
        may be there)."""
        return [node for node in self.state.membership.others() if not node.flags & HANDSHAKE]

    async def _ask_peers(self, ask: Callable[[bytes], int],
                         nodes: list[ClusterNode]) -> list[tuple[ClusterNode, object]]:
        """Ask each of ``nodes`` (``ask`` sends and gives the request's
        number); their answers, NO_ANSWER where none came in time."""
        answers = self.answers
        if len(answers.waiting) + len(nodes) > MAX_WAITING:
            raise ActionError(503, BUSY)
        pending = []
        unreachable: list[tuple[ClusterNode, object]] = []
        for node in nodes:
            request = ask(node.id) if node.link else 0
            if request:
                pending.append((node, request, answers.expect(node.id, request)))
            else:
                unreachable.append((node, NO_ANSWER))
        values = await asyncio.gather(*[answers.wait(node.id, future, request)
                                        for node, request, future in pending])
        return [(node, value) for (node, _, _), value in zip(pending, values)] + unreachable

    def _known_queue_names(self) -> set[bytes]:
        """The queues of this node and of the peers' summaries (names the
        page may show)."""
        state = self.state
        names = set(state.queues.by_name)
        for summary in state.peerstats.summaries.values():
            names.update(share[0] for share in summary.queues)
        return names

    def _refusal(self, session: Session, command: str, queue: bytes) -> None:
        """Raise 403 when the session's user may not run ``command`` on ``queue``."""
        denied = check_on_queue(self.state, session.client, command, queue)
        if denied is not None:
            raise ActionError(403, str(reply_value(denied)))

    def _job_id(self, text: object) -> bytes:
        if not isinstance(text, str) or not text.isascii():
            raise ActionError(400, BAD_JOB_ID)
        job_id = text.strip().encode()
        if not is_valid_job_id(job_id):
            raise ActionError(400, BAD_JOB_ID)
        return job_id

    async def _copies(self, job_id: bytes) -> tuple[list[Copy], list[dict[str, Any]]]:
        """Every copy of the job the cluster answers with (this node's first),
        and the nodes that did not answer in time."""
        state = self.state
        own_id = state.id
        records: list[tuple[ClusterNode, object]] = [
            (state.membership.myself, state.inspection.job_peek(job_id))]
        silent: list[dict[str, Any]] = []
        answers = await self._ask_peers(lambda node_id: state.inspection.ask_job(node_id, job_id),
                                        self._peers())
        for node, value in answers:
            if value is NO_ANSWER:
                silent.append(_node_entry(node, own_id))
            else:
                records.append((node, value))
        copies = []
        for node, record in records:
            job = job_json(record)
            if job is not None and job["id"] == job_id.decode():
                copies.append(Copy(dict(_node_entry(node, own_id), job=job),
                                   record_queue(record)))
        return copies, silent

    def _check_copies(self, session: Session, command: str, copies: list[Copy]) -> None:
        """Raise 403 unless the user may run ``command`` on the queue of every copy."""
        for copy in copies:
            self._refusal(session, command, copy.queue)

    # ----------------------------------------------------------- handlers

    async def queue(self, request: web.Request) -> web.StreamResponse:
        """GET /api/queue?name=<queue>: the queue's first jobs on each node
        that has it, with their length there."""
        try:
            session = self.actions.authorized(request)
            name = queue_named({"queue": request.query.get("name")}, self._known_queue_names())
            self._refusal(session, PEEK_RIGHT, name)
            state = self.state
            own_id = state.id
            nodes: list[dict[str, Any]] = []
            length, records = state.inspection.queue_peek(name, MAX_PEEK)
            answers = await self._ask_peers(
                lambda node_id: state.inspection.ask_queue(node_id, name, MAX_PEEK),
                self._peers())
        except ActionError as exc:
            return _refused(exc)
        values = [(state.membership.myself, [length, records])] + answers
        for node, value in values:
            entry = _node_entry(node, own_id)
            if value is NO_ANSWER:
                nodes.append(dict(entry, answered=False, length=None, jobs=[]))
                continue
            if (type(value) is not list or len(value) != 2 or type(value[0]) is not int
                    or type(value[1]) is not list):
                continue
            jobs = [job for job in map(job_json, value[1]) if job is not None]
            if value[0] or jobs:
                nodes.append(dict(entry, answered=True, length=value[0], jobs=jobs))
        return _json({"queue": printable(name)[0], "dead_letter_queue": name.endswith(DEAD_SUFFIX),
                      "shown_per_node": MAX_PEEK, "nodes": nodes})

    async def job(self, request: web.Request) -> web.StreamResponse:
        """GET /api/job?id=<job ID>: every copy the cluster holds, from any node."""
        try:
            session = self.actions.authorized(request)
            job_id = self._job_id(request.query.get("id"))
            copies, silent = await self._copies(job_id)
            self._check_copies(session, SHOW_RIGHT, copies)
        except ActionError as exc:
            return _refused(exc)
        return _json({"id": job_id.decode(), "copies": [copy.entry for copy in copies],
                      "unanswered": silent})

    async def redrive(self, request: web.Request) -> web.StreamResponse:
        """POST {"queue", "node"}: QREDRIVE on that node (this one when not
        given): the dead letters it queues there go back to their queues."""
        actions = self.actions
        try:
            body = await actions.checked_post(request)
            session = actions.authorized(request)
            name = queue_named(body, self._known_queue_names())
            node = self._node_named(body.get("node"))
            if node is not None:
                self._refusal(session, REDRIVE_RIGHT, name)
                state = self.state
                user = session.user_name.encode()
                answers = await self._ask_peers(
                    lambda node_id: state.inspection.ask_redrive(node_id, name, user), [node])
        except ActionError as exc:
            return _refused(exc)
        if node is None:
            return await self._run_here(request, session, [QREDRIVE, name])
        value = answers[0][1] if answers else NO_ANSWER
        if type(value) is not int:
            return _json({"error": "Node %s did not answer." % node.id[:8].decode()}, 504)
        logger.info("Dashboard: user '%s' from %s redrove %d dead letters of '%s' on node %s",
                    session.user_name, request.remote, value, printable(name[:200])[0],
                    node.id[:8].decode())
        return _json({"result": value})

    async def delete(self, request: web.Request) -> web.StreamResponse:
        """POST {"job"}: the job deleted on every node that answers with a
        copy: DELJOB here, and the DELJOB message to the other holders."""
        actions = self.actions
        try:
            body = await actions.checked_post(request)
            session = actions.authorized(request)
            job_id = self._job_id(body.get("job"))
            copies, silent = await self._copies(job_id)
            self._check_copies(session, DELETE_RIGHT, copies)
        except ActionError as exc:
            return _refused(exc)
        if silent:
            return _json({"error": "Not deleted: %d nodes did not answer, and may hold a copy."
                          % len(silent)}, 504)
        deleted = 0
        others: list[bytes] = []
        for copy in copies:
            if copy.entry["myself"]:
                reply = reply_value(await actions.run(session.client, [DELJOB, job_id]))
                if type(reply) is not int:
                    return _json({"error": str(reply)}, 403)
                deleted += reply
            else:
                others.append(copy.entry["node"].encode())
        self.state.inspection.delete_copies(job_id, others)
        logger.info("Dashboard: user '%s' from %s deleted job %s on %d nodes", session.user_name,
                    request.remote, job_id.decode(), deleted + len(others))
        return _json({"result": deleted + len(others)})

    def _node_named(self, text: object) -> ClusterNode | None:
        """The other node ``text`` names (None: this node, or none named)."""
        if text is None or text == "":
            return None
        state = self.state
        node_id = text.encode() if isinstance(text, str) and text.isascii() else b""
        if node_id == state.id:
            return None
        for node in self._peers():
            if node.id == node_id:
                return node
        raise ActionError(404, NO_SUCH_NODE % str(text)[:40])

    async def _run_here(self, request: web.Request, session: Session,
                        argv: list[bytes]) -> web.StreamResponse:
        """An action's command run here, as ``DashboardActions.act`` runs it."""
        value = reply_value(await self.actions.run(session.client, argv))
        logger.info("Dashboard: user '%s' from %s ran %s: %s", session.user_name,
                    request.remote, argv[0].decode(), value)
        if isinstance(value, int):
            return _json({"result": value})
        return _json({"error": str(value)}, 403 if str(value).startswith("NOPERM") else 400)


def _json(document: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response(document, status=status, headers=RESPONSE_HEADERS)


def _refused(error: ActionError) -> web.Response:
    return _json({"error": str(error)}, error.status)


def add_routes(app: web.Application, server: DashboardServer, actions: DashboardActions) -> None:
    """Serve the views and their actions from ``app``, sharing ``actions``' sessions."""
    inspector = Inspector(server, actions)
    app.router.add_get(ROUTE_QUEUE, inspector.queue)
    app.router.add_get(ROUTE_JOB, inspector.job)
    app.router.add_post(ROUTE_REDRIVE, inspector.redrive)
    app.router.add_post(ROUTE_DELETE, inspector.delete)
