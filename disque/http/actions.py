"""The dashboard's actions: log in as one of the node's ACL users, then
pause or resume a queue, redrive a dead-letter queue, purge a queue or
delete a job as that user (docs/dashboard.md "Actions").

A login is an ``AUTH user password`` and an action is the matching command
(PAUSE, QREDRIVE, QPURGE, DELJOB), both run through ``Node.call`` on the
session's ``ClientState``, as a RESP client's would be: the command table
checks the user's commands and queues, counts, and feeds MONITOR and the
slow log, and a refusal is the command's own ``-NOPERM``. Only users with a
password may log in: on a node where no user has one, actions are off.

Against requests made from other sites: actions and logout are POSTs that
carry the session's CSRF token in a header, every POST must be JSON (a
form cannot send that cross-site without a preflight, which is never
granted) and come from the page's own origin (``Origin``,
``Sec-Fetch-Site``), and the session cookie is HttpOnly and SameSite=Strict
(Secure, with the ``__Host-`` prefix, over TLS). Over plain HTTP only
loopback peers may log in or act, so a password or session cookie never
crosses a network in clear. Failed logins are limited per address
(``sessions.LoginLimiter``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Container, Mapping
from typing import TYPE_CHECKING, Any

import hiredis
from aiohttp import web

from disque.commands.access import is_loopback
from disque.config.users import DEFAULT_USER
from disque.context.clients import ClientState
from disque.context.log import logger
from disque.http.sessions import LoginLimiter, Session, SessionStore, credentials_of
from disque.serving.commands import SLICE_BUDGET_NS
from disque.protocol.argsplit import quote_arg
from disque.protocol.resp import OK

if TYPE_CHECKING:
    from disque.config import Config
    from disque.http.observed import DashboardServer
    from disque.queues.queue import Queue

ROUTE_SESSION = "/api/session"
ROUTE_LOGIN = "/api/login"
ROUTE_LOGOUT = "/api/logout"
ROUTE_ACTION = "/api/action/{name}"

CSRF_HEADER = "X-CSRF-Token"
JSON_TYPE = "application/json"
COOKIE_NAME = "disque-session-%d"  # per port: cookies are shared by every port of a host
SECURE_COOKIE_PREFIX = "__Host-"   # the browser keeps it only if Secure, Path=/ and host-only
SAME_ORIGIN = "same-origin"
RESPONSE_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
MAX_BODY = 64 * 1024  # a POST's JSON (aiohttp refuses larger with 413)

AUTH = b"AUTH"
PAUSE = b"PAUSE"
QREDRIVE = b"QREDRIVE"
QPURGE = b"QPURGE"
DELJOB = b"DELJOB"
BCAST = b"BCAST"
PAUSE_NONE = b"none"
PAUSE_MODES = {"in": b"in", "out": b"out", "all": b"all"}
REFUSALS = ("NOPERM", "NOAUTH")  # reply prefixes that mean the user may not do it
# The name the page shows for a byte it cannot decode (dashboard.queue_name_text).
ESCAPED_BYTE = re.compile(rb"\\x([0-9a-f]{2})")

LOGIN_DISABLED = ("Actions are disabled: no user of this node has a password. Set requirepass, "
                  "or add an ACL user with a password (ACL SETUSER <name> on ><password> ...), "
                  "and log in as that user.")
PLAIN_HTTP_REMOTE = ("Log in over HTTPS (set tls-port) or from this machine (an SSH tunnel): "
                     "over plain HTTP the password and the session would cross the network "
                     "in clear.")
LOGIN_FAILED = "Invalid user name or password, or the user is off or has no password."
TOO_MANY_FAILURES = "Too many failed logins from this address: try again in %d s."
NOT_LOGGED_IN = "Not logged in, or the session expired: log in again."
BAD_CSRF = "Missing or wrong CSRF token (X-CSRF-Token)."
CROSS_ORIGIN = "Refused: the request does not come from this dashboard's page."
NOT_JSON = "Expected a JSON object (Content-Type: application/json)."
USER_GONE = ("The session's user changed its password, or was turned off or deleted: "
             "logged out.")
CREDENTIALS_CHANGED = ("Dashboard: the session of user '%s' from %s ended: the user's password "
                       "changed, or it was turned off or deleted")
NO_SUCH_ACTION = "No such action: %s."


class ActionError(Exception):
    """A request the dashboard refuses before running anything: HTTP status and text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _text_field(body: dict[str, Any], name: str) -> bytes:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise ActionError(400, "'%s' must be a non-empty string." % name)
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise ActionError(400, "'%s' is not valid text." % name) from None


def queue_named(body: dict[str, Any], queues: Container[bytes]) -> bytes:
    """The queue the page names in ``body["queue"]``, as it shows names: a
    name that is not UTF-8 is shown with ``\\xNN`` for its odd bytes. When
    both readings of such a text are ``queues``, the page cannot tell
    which one is meant, and the action is refused."""
    name = _text_field(body, "queue")
    if b"\\x" not in name:
        return name
    raw = ESCAPED_BYTE.sub(lambda match: bytes.fromhex(match[1].decode()), name)
    if raw not in queues or raw.decode("utf-8", "backslashreplace").encode() != name:
        return name
    if name in queues:
        raise ActionError(409, "Two queues here are shown as this name: use redis-cli.")
    return raw


def pause_argv(body: dict[str, Any], queues: Mapping[bytes, Queue]) -> list[bytes]:
    """PAUSE <queue> in|out|all BCAST: paused on every node, as an operator would."""
    text = body.get("mode", "all")
    mode = PAUSE_MODES.get(text) if isinstance(text, str) else None
    if mode is None:
        raise ActionError(400, "'mode' must be one of: %s." % ", ".join(PAUSE_MODES))
    return [PAUSE, queue_named(body, queues), mode, BCAST]


def resume_argv(body: dict[str, Any], queues: Mapping[bytes, Queue]) -> list[bytes]:
    """PAUSE <queue> none BCAST."""
    return [PAUSE, queue_named(body, queues), PAUSE_NONE, BCAST]


def redrive_argv(body: dict[str, Any], queues: Mapping[bytes, Queue]) -> list[bytes]:
    """QREDRIVE <dead-letter queue>: every dead letter queued here."""
    return [QREDRIVE, queue_named(body, queues)]


def purge_argv(body: dict[str, Any], queues: Mapping[bytes, Queue]) -> list[bytes]:
    """QPURGE <queue>."""
    return [QPURGE, queue_named(body, queues)]


def deljob_argv(body: dict[str, Any], queues: Mapping[bytes, Queue]) -> list[bytes]:
    """DELJOB <id>."""
    return [DELJOB, _text_field(body, "job")]


ACTIONS = {"pause": pause_argv, "resume": resume_argv, "redrive": redrive_argv,
           "purge": purge_argv, "deljob": deljob_argv}


def passwords_set(config: Config) -> bool:
    """Some user can log in with a password: requirepass, or an enabled user with one."""
    return bool(config.requirepass) or any(
        user.enabled and not user.nopass and bool(user.passwords)
        for user in config.users.values())


def reply_value(reply: bytes) -> object:
    """A command's reply as Python: int, bytes, or a ``hiredis.ReplyError``."""
    reader = hiredis.Reader()
    reader.feed(reply)
    return reader.gets()


def _peer(request: web.Request) -> str:
    return request.remote or ""


def _address(request: web.Request) -> str:
    """``ip:port`` of the peer, as a client's address is shown (MONITOR, the log)."""
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    port = peer[1] if isinstance(peer, tuple) and len(peer) >= 2 else 0
    return "%s:%d" % (_peer(request), port)


def _json(document: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response(document, status=status, headers=RESPONSE_HEADERS)


def _refused(error: ActionError) -> web.Response:
    return _json({"error": str(error)}, error.status)


class DashboardActions:
    """The login, logout and action handlers, with the sessions they share."""

    def __init__(self, server: DashboardServer, sessions: SessionStore | None = None,
                 limiter: LoginLimiter | None = None) -> None:
        self.server = server
        self.sessions = sessions if sessions is not None else SessionStore()
        self.limiter = limiter if limiter is not None else LoginLimiter()

    # ------------------------------------------------------------ helpers

    def cookie_name(self, request: web.Request) -> str:
        """This port's session cookie (``__Host-`` prefixed over TLS)."""
        name = COOKIE_NAME % self.server.config.metrics_port
        return SECURE_COOKIE_PREFIX + name if request.secure else name

    def _session(self, request: web.Request) -> Session | None:
        return self._live_session(request)[0]

    def _live_session(self, request: web.Request) -> tuple[Session | None, bool]:
        """The request's live session, and whether one just ended because
        its user's password changed, or it was turned off or deleted."""
        token = request.cookies.get(self.cookie_name(request))
        session = self.sessions.get(token)
        if session is None:
            return None, False
        if session.credentials != credentials_of(session.client, self.server.config):
            self.sessions.end(token)
            logger.info(CREDENTIALS_CHANGED, session.user_name, _address(request))
            return None, True
        return session, False

    def _logins_refused(self, request: web.Request) -> str | None:
        """Why no one can log in from this request, or None."""
        if not passwords_set(self.server.config):
            return LOGIN_DISABLED
        if not request.secure and not is_loopback(_peer(request)):
            return PLAIN_HTTP_REMOTE
        return None

    async def checked_post(self, request: web.Request) -> dict[str, Any]:
        """The JSON body of a POST from the dashboard's own page; raises ActionError."""
        if request.headers.get("Sec-Fetch-Site", SAME_ORIGIN) != SAME_ORIGIN:
            raise ActionError(403, CROSS_ORIGIN)
        origin = request.headers.get("Origin")
        if origin is not None and origin != "%s://%s" % (request.scheme, request.host):
            raise ActionError(403, CROSS_ORIGIN)
        if not request.secure and not is_loopback(_peer(request)):
            raise ActionError(403, PLAIN_HTTP_REMOTE)
        if request.content_type != JSON_TYPE:
            raise ActionError(415, NOT_JSON)
        try:
            body = await request.json()
        except ValueError:
            raise ActionError(400, NOT_JSON) from None
        if not isinstance(body, dict):
            raise ActionError(400, NOT_JSON)
        return body

    def authorized(self, request: web.Request) -> Session:
        """The request's session, its CSRF token checked; raises ActionError."""
        session, revoked = self._live_session(request)
        if session is None:
            raise ActionError(401, USER_GONE if revoked else NOT_LOGGED_IN)
        if not session.csrf_matches(request.headers.get(CSRF_HEADER)):
            raise ActionError(403, BAD_CSRF)
        return session

    async def run(self, client: ClientState, argv: list[bytes]) -> bytes:
        """One command through the node's command table, as ``client``. A long
        one (QPURGE of a long queue, DELJOB of many copies) goes on in steps
        of about SLICE_BUDGET_NS as a client connection runs it: other
        clients are served between them, and each step's AOF records are on
        disk as appendfsync asks before the next step and before the reply."""
        server = self.server
        node = server.node
        client.streams_replies = True
        reply = node.call(client, argv)
        assert reply is not None  # neither AUTH nor an action's command blocks
        parts = [reply]
        while client.stream is not None:
            begin = node.perf_ns()
            while not node.stream_step(client, parts):
                if node.perf_ns() - begin > SLICE_BUDGET_NS:
                    break
            await self._on_disk()
        if len(parts) == 1:  # spec: persistence.md, the AOF is written before the reply leaves
            server.flush_aof()
        server.arm_timer()
        return b"".join(parts)

    def _on_disk(self) -> asyncio.Future[None]:
        """Resolved once the records written so far are on disk as appendfsync asks."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done() -> None:
            if not future.done():
                future.set_result(None)
        self.server.flush_aof_then(done)
        return future

    # ----------------------------------------------------------- handlers

    async def session(self, request: web.Request) -> web.StreamResponse:
        """Who is logged in (with the CSRF token the page sends back), or why
        no one can log in."""
        session = self._session(request)
        return _json({
            "user": None if session is None else session.user_name,
            "csrf_token": None if session is None else session.csrf_token,
            "login_refused": self._logins_refused(request),
        })

    async def login(self, request: web.Request) -> web.StreamResponse:
        """``{"user", "password"}``: AUTH as that user; a session on success."""
        try:
            body = await self.checked_post(request)
        except ActionError as exc:
            return _refused(exc)
        refused = self._logins_refused(request)
        if refused is not None:
            return _json({"error": refused}, 403)
        peer = _peer(request)
        wait = self.limiter.wait(peer)
        if wait > 0:
            seconds = int(wait) + 1
            headers = dict(RESPONSE_HEADERS, **{"Retry-After": str(seconds)})
            return web.json_response({"error": TOO_MANY_FAILURES % seconds}, status=429,
                                     headers=headers)
        name = body.get("user") or DEFAULT_USER.decode()
        password = body.get("password")
        try:
            if not isinstance(name, str) or not isinstance(password, str):
                raise UnicodeError
            argv = [AUTH, name.encode(), password.encode()]
        except UnicodeError:
            return _json({"error": LOGIN_FAILED}, 400)
        server = self.server
        client = ClientState(server.next_client_id(), _address(request), server.node.state.now)
        client.local = is_loopback(peer)
        reply = await self.run(client, argv)
        # A user that takes any password (nopass) is no login: the page acts with rights.
        if reply != OK or (client.user is not None and client.user.nopass):
            self.limiter.failed(peer)
            return _json({"error": LOGIN_FAILED}, 401)
        self.limiter.succeeded(peer)
        self.sessions.end(request.cookies.get(self.cookie_name(request)))
        token, session = self.sessions.create(client, name,
                                              credentials_of(client, server.config))
        logger.info("Dashboard: user '%s' logged in from %s", name, client.addr)
        response = _json({"user": name, "csrf_token": session.csrf_token})
        response.set_cookie(self.cookie_name(request), token, path="/", httponly=True,
                            secure=request.secure, samesite="Strict")
        return response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        """End the session and clear its cookie."""
        try:
            await self.checked_post(request)
            self.authorized(request)
        except ActionError as exc:
            return _refused(exc)
        name = self.cookie_name(request)
        self.sessions.end(request.cookies.get(name))
        response = _json({"user": None})
        response.del_cookie(name, path="/", secure=request.secure, httponly=True,
                            samesite="Strict")
        return response

    async def act(self, request: web.Request) -> web.StreamResponse:
        """Run one action as the session's user: ``{"result": ...}`` with the
        command's reply, or ``{"error": ...}`` (403 when the user may not)."""
        try:
            body = await self.checked_post(request)
            session = self.authorized(request)
            action = request.match_info["name"]
            make_argv = ACTIONS.get(action)
            if make_argv is None:
                raise ActionError(404, NO_SUCH_ACTION % action)
            argv = make_argv(body, self.server.node.state.queues.by_name)
        except ActionError as exc:
            return _refused(exc)
        client = session.client
        client.addr = _address(request)
        value = reply_value(await self.run(client, argv))
        if client.close_after_reply:  # commands.access: the user was deleted or turned off
            self.sessions.end(request.cookies.get(self.cookie_name(request)))
            return _json({"error": USER_GONE}, 401)
        result = value.decode() if isinstance(value, bytes) else value
        logger.info("Dashboard: user '%s' from %s ran %s: %s", session.user_name, client.addr,
                    " ".join(quote_arg(arg) for arg in argv), result)
        if isinstance(value, hiredis.ReplyError):
            text = str(value)
            return _json({"error": text}, 403 if text.startswith(REFUSALS) else 400)
        return _json({"result": result})


def add_routes(app: web.Application, server: DashboardServer) -> DashboardActions:
    """Serve the actions from ``app`` (the metrics-port application); the
    handlers, whose sessions the views behind a login share."""
    actions = DashboardActions(server)
    app.router.add_get(ROUTE_SESSION, actions.session)
    app.router.add_post(ROUTE_LOGIN, actions.login)
    app.router.add_post(ROUTE_LOGOUT, actions.logout)
    app.router.add_post(ROUTE_ACTION, actions.act)
    return actions
