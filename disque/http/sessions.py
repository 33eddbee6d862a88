"""Who is logged in to the dashboard, and who failed to log in lately.

A session is what a login earns: a random token in an HttpOnly cookie,
a CSRF token the page sends back in a header with each action, and the
``ClientState`` the actions run as (it holds the ACL user, so ACL changes
apply at once). Sessions end on logout, after IDLE_TIMEOUT_S without use
and LIFETIME_S after the login, whichever comes first, and when what the
login proved no longer holds (``credentials_of``: the user's password
changed, or it was turned off or deleted).

``LoginLimiter`` slows password guessing: an address that failed
MAX_FAILURES logins within FAILURE_WINDOW_S is refused until the oldest
of those failures is that old.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from disque.config.users import DEFAULT_USER

if TYPE_CHECKING:
    from disque.config import Config
    from disque.context.clients import ClientState

IDLE_TIMEOUT_S = 15 * 60
LIFETIME_S = 8 * 60 * 60
MAX_SESSIONS = 1024          # the oldest session ends when a login would make one more
TOKEN_BYTES = 32             # session and CSRF tokens: 256 random bits each
MAX_FAILURES = 5             # failed logins an address may make within FAILURE_WINDOW_S
FAILURE_WINDOW_S = 60.0
MAX_TRACKED_ADDRESSES = 10_000  # addresses whose failures are remembered (oldest forgotten)


def credentials_of(client: ClientState, config: Config) -> tuple[object, ...]:
    """What the client's login proved, as it stands now: its user's
    credentials version (``User.credentials``, which ACL SETUSER bumps when
    the passwords change or the user is turned off) and whether it was
    deleted; for the default user, its version and requirepass."""
    user = client.user
    if user is None:
        return (DEFAULT_USER, config.users[DEFAULT_USER].credentials, config.requirepass)
    return (user.name, user.credentials, user.removed)


def _token_key(token: str) -> bytes:
    """What sessions are found by: a digest, so that looking a guess up in
    the table does not time a comparison with a real token."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


class Session:
    """One login: the client its actions run as, what the login proved
    (``credentials_of``) and its CSRF token."""

    __slots__ = ("client", "user_name", "credentials", "csrf_token", "created", "last_used")

    def __init__(self, client: ClientState, user_name: str, credentials: tuple[object, ...],
                 now: float) -> None:
        self.client = client
        self.user_name = user_name
        self.credentials = credentials
        self.csrf_token = secrets.token_urlsafe(TOKEN_BYTES)
        self.created = now
        self.last_used = now

    def csrf_matches(self, token: str | None) -> bool:
        """``token`` is this session's CSRF token (compared in constant time)."""
        return token is not None and hmac.compare_digest(token.encode("utf-8", "surrogateescape"),
                                                         self.csrf_token.encode())


class SessionStore:
    """The open sessions by token, and their expiry."""

    def __init__(self, timer: Callable[[], float] = time.monotonic,
                 idle_timeout: float = IDLE_TIMEOUT_S, lifetime: float = LIFETIME_S,
                 limit: int = MAX_SESSIONS) -> None:
        self.timer = timer
        self.idle_timeout = idle_timeout
        self.lifetime = lifetime
        self.limit = limit
        self.sessions: dict[bytes, Session] = {}  # by _token_key, oldest login first

    def create(self, client: ClientState, user_name: str,
               credentials: tuple[object, ...]) -> tuple[str, Session]:
        """A new session for ``client`` (``credentials``: what its login
        proved): its cookie token, and the session."""
        self._drop_expired()
        while len(self.sessions) >= self.limit:
            del self.sessions[next(iter(self.sessions))]
        token = secrets.token_urlsafe(TOKEN_BYTES)
        session = Session(client, user_name, credentials, self.timer())
        self.sessions[_token_key(token)] = session
        return token, session

    def get(self, token: str | None) -> Session | None:
        """The live session of ``token``, now marked used; None when there
        is none (never was, logged out or expired)."""
        if not token:
            return None
        key = _token_key(token)
        session = self.sessions.get(key)
        if session is None:
            return None
        now = self.timer()
        if self._expired(session, now):
            del self.sessions[key]
            return None
        session.last_used = now
        return session

    def end(self, token: str | None) -> None:
        """Log the session out (nothing when there is none)."""
        if token:
            self.sessions.pop(_token_key(token), None)

    def _expired(self, session: Session, now: float) -> bool:
        return (now - session.last_used >= self.idle_timeout
                or now - session.created >= self.lifetime)

    def _drop_expired(self) -> None:
        now = self.timer()
        for key in [key for key, session in self.sessions.items()
                    if self._expired(session, now)]:
            del self.sessions[key]


class LoginLimiter:
    """Recent failed logins per client address."""

    def __init__(self, timer: Callable[[], float] = time.monotonic,
                 max_failures: int = MAX_FAILURES, window: float = FAILURE_WINDOW_S,
                 max_addresses: int = MAX_TRACKED_ADDRESSES) -> None:
        self.timer = timer
        self.max_failures = max_failures
        self.window = window
        self.max_addresses = max_addresses
        self.failures: dict[str, deque[float]] = {}  # oldest first

    def wait(self, address: str) -> float:
        """Seconds before ``address`` may try again (0: now)."""
        times = self.failures.get(address)
        if times is None or len(times) < self.max_failures:
            return 0.0
        return max(0.0, times[0] + self.window - self.timer())

    def failed(self, address: str) -> None:
        """``address`` gave a wrong user name or password."""
        times = self.failures.pop(address, None)
        if times is None:
            times = deque(maxlen=self.max_failures)
            if len(self.failures) >= self.max_addresses:
                del self.failures[next(iter(self.failures))]
        times.append(self.timer())
        self.failures[address] = times  # re-inserted: the dict stays in order of last failure

    def succeeded(self, address: str) -> None:
        """``address`` logged in: its failures are forgotten."""
        self.failures.pop(address, None)
