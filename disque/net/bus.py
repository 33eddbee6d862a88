"""The cluster bus over TCP: framed msgpack messages between nodes.

spec: cluster-bus.md §1. Every node opens its own outbound link to every
other node and sends all its messages there; inbound connections only
ever carry a PONG back. A frame is a 4-byte big-endian length followed by
a msgpack array: the sender's header map (``Node.bus_header``), then the
message maps. The messages queued for one peer during a loop turn travel
in a few frames, so a burst of jobs costs one length prefix, one header,
one decode call and one dispatch per frame instead of one per message.
The node core sees decoded frames (``receive_frame``) and link events
(``link_up`` / ``link_down``); it never touches a socket. The byte work
per message (packing, the per-peer queues, framing, decoding) is
``disque.cluster.wire``'s, compiled with the core; each link's reads and
writes are its ``BusConnection``'s (``disque.net.buslink``); this module
owns the links: the listener, opening, renaming and closing outbound
links, the flush at the end of a loop turn, the configuration links share
and the counters INFO bus shows.

A link's first frames agree on the bus format both ends use
(``disque.net.busformat``): a node speaks the previous format to a peer
that knows only that one, and refuses a peer with which it shares none.

With a cluster secret, a link first runs the handshake of
``disque.net.busauth`` and every frame then carries a MAC checked
before the frame is decoded; an outbound link is reported up to the core
only once the peer proved it knows the secret. With ``tls-cluster yes`` the
links run over TLS, each end presenting its certificate. A link must finish
its handshake (the secret's, or for a plain inbound link its first frame)
within ``handshake_timeout``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
import time
from typing import TYPE_CHECKING, Any, Callable, cast

from disque.cluster.transport import BusTransport, Link
from disque.cluster.wire import BUS_FORMATS, PeerOutput, Wire
from disque.net import loop_host, loop_hosts
from disque.net.buslink import BusConnection, BusNode
from disque.commands.access import PROTECTED_MODE_BUS, is_loopback, protected_mode_refuses_bus
from disque.config.errors import ConfigSetError
from disque.context.log import LogThrottle, logger

if TYPE_CHECKING:
    from disque.config import Config
    from disque.net.busauth import BusKeys


# The largest frame is the largest job a client may add (proto-max-bulk-len)
# plus this much for the header and the job's other fields; a larger one is
# refused and the link closed.
FRAME_OVERHEAD = 1024 * 1024
DEFAULT_MAX_BULK_LEN = 512 * 1024 * 1024  # proto-max-bulk-len's default
CONNECT_TIMEOUT_S = 5.0
ERROR_LOG_INTERVAL_MS = 1000  # protocol errors are logged at most this often
# A link finishes its handshake within cluster-node-timeout (at start), bounded to these.
HANDSHAKE_TIMEOUT_MIN_S = 1.0
HANDSHAKE_TIMEOUT_MAX_S = 5.0
# Messages queued for one peer that are sent at once instead of at the end of
# the loop turn: the peer starts on them while this node handles the rest of
# the turn (ADDJOB REPLICATE 3 with 50 clients: 7 k -> 10 k jobs/s), yet a
# frame still carries enough messages to keep the syscalls per job low.
EARLY_FLUSH = 16
# The directives of the cluster secret: with none of them set the bus is the
# original's, and ``disque.net.busauth`` (hashlib, hmac) is never loaded.
SECRET_DIRECTIVES = ("cluster-secret", "cluster-secret-old", "cluster-secret-file")


class BusConfigError(Exception):
    """The cluster secret or tls-cluster cannot be used; the message says why."""


def keys_from_config(config: Config) -> BusKeys | None:
    """The cluster secret's keys, None without one (``busauth.keys_from_config``,
    loaded only when a secret directive is set). Raises BusConfigError."""
    if not any(getattr(config, name.replace("-", "_")) for name in SECRET_DIRECTIVES):
        return None
    from disque.net import busauth
    try:
        return busauth.keys_from_config(config)
    except busauth.SecretConfigError as exc:
        raise BusConfigError(str(exc)) from None


def frame_cap(proto_max_bulk_len: int) -> int:
    """The largest bus frame accepted."""
    return proto_max_bulk_len + FRAME_OVERHEAD


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class ClusterBus(BusTransport):
    """Listener plus one outbound link per known node."""

    wire: Wire

    def __init__(self, node: BusNode, loop: asyncio.AbstractEventLoop,
                 after_bus: Callable[[], None] | None = None,
                 before_write: Callable[[], None] | None = None) -> None:
        self.node = node
        self.loop = loop
        self.outbound: dict[bytes, BusConnection] = {}
        # A connection being made: its task, and the node ID it is for
        # (a one-item list, which follows the node through a rename).
        self.pending: dict[bytes, tuple[asyncio.Task[None], list[bytes]]] = {}
        self.inbound: set[BusConnection] = set()
        self.servers: list[asyncio.AbstractServer] = []
        self._after_bus = after_bus
        self.before_write = before_write  # e.g. flush the AOF before messages leave
        self._header: dict | None = None
        self._packed_header = b""
        # Packing and the per-peer queues, compiled with the core: the node's
        # messages reach them without a call into this module (``Outbox``).
        self.wire = Wire(self.outbound, self._flush_soon, self.flush_output, EARLY_FLUSH)
        self.keys: BusKeys | None = None  # the cluster secret's keys; None: plain bus
        self.own_nonces: set[bytes] = set()  # of the handshakes this node runs as initiator
        self.server_tls: ssl.SSLContext | None = None  # tls-cluster: the listener's context
        self.client_tls: ssl.SSLContext | None = None  # and the one outbound links present
        self.max_frame = frame_cap(DEFAULT_MAX_BULK_LEN)  # configure() sets both from the config
        self.handshake_timeout = HANDSHAKE_TIMEOUT_MAX_S
        # Counted for INFO bus: links and frames refused.
        self.auth_failures = 0
        self.mac_failures = 0
        self.frames_too_large = 0
        self.messages_too_large = 0
        self.handshake_timeouts = 0
        self.frames_sent = 0  # and frames written (the messages they carried: wire.messages)
        self.rejected_connections = 0  # links refused by protected mode, either way
        self.formats: tuple[int, ...] = BUS_FORMATS  # the bus formats this node speaks
        self.format_refusals = 0  # links with a peer that shares no bus format
        self._error_log = LogThrottle(ERROR_LOG_INTERVAL_MS)
        self._refusal_log = LogThrottle(ERROR_LOG_INTERVAL_MS)
        self._format_log = LogThrottle(ERROR_LOG_INTERVAL_MS)
        self.config: Config | None = None  # protected mode's settings, from configure()

    async def listen(self, hosts: list[str] | None, port: int, backlog: int) -> None:
        """Accept connections from peers (on every address when ``hosts`` is empty)."""
        tls: dict[str, Any] = {}  # the TLS arguments, none for a plain bus
        if self.server_tls is not None:
            tls = {"ssl": self.server_tls, "ssl_handshake_timeout": self.handshake_timeout}
        self.servers.append(await self.loop.create_server(
            lambda: BusConnection(self, None), loop_hosts(hosts or []), port, backlog=backlog,
            reuse_address=True, **tls))

    def configure(self, config: Config) -> list[str]:
        """Take the frame cap, the handshake timeout, the cluster secret and
        tls-cluster from ``config`` before the listener opens; return warnings
        for the log. Raises BusConfigError."""
        warnings: list[str] = []
        self.config = config
        self.max_frame = frame_cap(config.proto_max_bulk_len)
        self.handshake_timeout = min(max(config.cluster_node_timeout / 1000,
                                         HANDSHAKE_TIMEOUT_MIN_S), HANDSHAKE_TIMEOUT_MAX_S)
        self.keys = keys_from_config(config)
        if self.keys is not None:
            warnings.extend(self.keys.warnings)
        elif not all(_is_loopback(host) for host in config.bind or ["*"]) and config.protected_mode:
            warnings.append("The cluster bus listens beyond loopback (bind %s), but %s."
                            % (" ".join(config.bind) or "*", PROTECTED_MODE_BUS))
        elif not all(_is_loopback(host) for host in config.bind or ["*"]):
            warnings.append("The cluster bus listens beyond loopback (bind %s) without a "
                            "cluster secret: anyone who reaches its port can join the cluster "
                            "and read or delete jobs. Set cluster-secret-file "
                            "(docs/security.md)." % (" ".join(config.bind) or "*"))
        if config.tls_cluster:
            from disque.net import tls  # loaded only by a node that uses TLS
            try:
                self.server_tls = tls.server_context(config, auth_clients="yes")
                self.client_tls = tls.client_context(config)
            except tls.TlsConfigError as exc:
                raise BusConfigError(str(exc)) from None
        for name in SECRET_DIRECTIVES:
            config.on_change(name, lambda old, new: self._secret_changed(config))
        return warnings

    def _secret_changed(self, config: Config) -> None:
        """CONFIG SET of a secret directive: reload (a bad value is refused)."""
        try:
            keys = keys_from_config(config)
        except BusConfigError as exc:
            raise ConfigSetError("ERR %s" % exc) from None
        for warning in keys.warnings if keys is not None else ():
            logger.warning(warning)
        self.set_keys(keys)
        logger.info("Cluster secret changed: bus links %s",
                    "require it" if keys is not None else "are no longer authenticated")

    def refuses(self, host: str) -> bool:
        """Protected mode keeps a link with ``host`` out (no cluster secret, not
        loopback); decided when the link is made (``commands.access``)."""
        config = self.config
        return config is not None and protected_mode_refuses_bus(
            config, is_loopback(host), self.keys is not None)

    def refused(self, host: str, direction: str) -> None:
        """Count a link protected mode refused; logged at most once a second, so
        that a peer retrying (or a stranger scanning) cannot fill the log."""
        self.rejected_connections += 1
        held = self._refusal_log.admit(time.monotonic_ns() // 1_000_000)
        if held >= 0:
            logger.warning("Bus link %s %s refused: %s%s", direction, host, PROTECTED_MODE_BUS,
                           " (%d more since the last report)" % held if held else "")

    def set_keys(self, keys: BusKeys | None) -> None:
        """Use new secrets (CONFIG SET): links opened with a secret no longer
        accepted, or opened without one, are closed and open again."""
        self.keys = keys
        for conn in list(self.outbound.values()) + list(self.inbound):
            if keys is None:
                keep = conn.session is None and conn.handshake is None
            else:
                keep = conn.session is not None and conn.session.key in keys.keys
            if not keep:
                conn.close()
        for node_id in list(self.pending):  # handshakes under way with the old secrets
            self.pending.pop(node_id)[0].cancel()
            self.node.link_down(node_id)

    def _flush_soon(self) -> None:
        """The first messages of this loop turn are queued: write them at its end."""
        self.loop.call_soon(self._flush_dirty)

    def flush_output(self, output: PeerOutput) -> None:
        """Write a queue out now (its frame is full enough, or a frame of the
        format agreement must follow it), the AOF first."""
        if self.before_write is not None:
            self.before_write()
        if output.handle is not None:
            cast(BusConnection, output.handle).flush()

    def _flush_dirty(self) -> None:
        dirty = self.wire.take_dirty()
        if self.before_write is not None:
            self.before_write()
        for output in dirty:
            if output.handle is not None:  # else closed since: nothing to write
                cast(BusConnection, output.handle).flush()

    def server_after_bus(self) -> None:
        if self._after_bus is not None:
            self._after_bus()

    # --------------------------------------------------- BusTransport API

    def connect(self, node_id: bytes, ip: str, port: int) -> None:
        if node_id in self.outbound or node_id in self.pending:
            return
        holder = [node_id]  # follows the node through a rename while connecting
        task = self.loop.create_task(self._connect(holder, ip, port))
        self.pending[node_id] = (task, holder)

    async def _connect(self, holder: list[bytes], ip: str, port: int) -> None:
        tls: dict[str, Any] = {}  # the TLS arguments, none for a plain bus
        if self.client_tls is not None:
            tls = {"ssl": self.client_tls, "server_hostname": ip,
                   "ssl_handshake_timeout": self.handshake_timeout}
        conn: BusConnection | None = None
        try:
            if self.refuses(ip):  # a node learnt by gossip, or met before protected mode
                self.refused(ip, "to")
                raise ConnectionError("refused by protected mode")
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the
            # connection when it is cancelled (set_keys, CLUSTER FORGET) just as
            # the connection completes, and a link made with a dropped secret
            # would come up.
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                made: tuple[asyncio.Transport, BusConnection] = await self.loop.create_connection(
                    lambda: BusConnection(self, holder[0]), loop_host(ip), port, **tls)
            conn = made[1]
            if conn.ready is not None and not await conn.ready:
                raise ConnectionError("the bus handshake did not complete")
            if conn.closed:  # refused by the peer before this task resumed
                raise ConnectionError("the link closed at once")
        except (OSError, asyncio.TimeoutError) as exc:
            if conn is not None:
                conn.close()
            node_id = holder[0]
            self.pending.pop(node_id, None)
            logger.debug("Bus connection to %s:%d failed: %s", ip, port, exc)
            self.node.link_down(node_id)
            self.server_after_bus()
            return
        except asyncio.CancelledError:
            if conn is not None:
                conn.close()  # dropped (CLUSTER FORGET) while the handshake ran
            raise
        node_id = holder[0]
        self.pending.pop(node_id, None)
        link = conn.link
        assert link is not None  # the connection is made
        conn.node_id = node_id
        link.node_id = node_id
        self.outbound[node_id] = conn
        self.node.link_up(node_id, link)
        self.server_after_bus()

    def send(self, node_id: bytes, msg: dict) -> None:
        # The node's Outbox calls the wire itself; this serves other callers.
        # A queue of waiting messages means the link was usable when it was
        # started; if it closed since, flush drops it.
        self.wire.send(node_id, msg)

    def reply(self, link: Link, msg: dict) -> None:
        conn = cast("BusConnection | None", link.handle)  # this bus's links carry its connections
        if conn is not None:
            conn.write(self.wire.pack(msg))

    def close(self, node_id: bytes) -> None:
        pending = self.pending.pop(node_id, None)
        if pending is not None:
            pending[0].cancel()
        conn = self.outbound.pop(node_id, None)
        if conn is not None:
            conn.node_id = None
            conn.close()

    def rename(self, old_id: bytes, new_id: bytes) -> None:
        pending = self.pending.pop(old_id, None)
        if pending is not None:
            pending[1][0] = new_id
            self.pending[new_id] = pending
        conn = self.outbound.pop(old_id, None)
        if conn is not None:
            assert conn.link is not None  # an outbound link is made before it is listed
            conn.node_id = new_id
            conn.link.node_id = new_id
            self.outbound[new_id] = conn

    # ------------------------------------------------------------- helpers

    def packed_header(self) -> bytes:
        """This node's header, packed again only when it changed."""
        header = self.node.bus_header()
        if header is not self._header:
            self._packed_header = self.wire.pack_value(header)
            self._header = header
        return self._packed_header

    def connection_closed(self, conn: BusConnection) -> None:
        node_id = conn.node_id
        if node_id is not None and self.outbound.get(node_id) is conn:
            del self.outbound[node_id]
            self.node.link_down(node_id)

    def protocol_error(self, conn: BusConnection, what: str) -> None:
        """Close a link that broke the protocol; logged at most once a second,
        so that a peer retrying (or a rogue flooding) cannot fill the log."""
        held = self._error_log.admit(time.monotonic_ns() // 1_000_000)
        if held >= 0:
            logger.warning("Bus protocol error from %s: %s; closing the link%s",
                           conn.peer_ip(), what,
                           " (%d more since the last report)" % held if held else "")
        conn.close()

    def format_refused(self, conn: BusConnection, why: str, drain: bool) -> None:
        """Close a link whose peer shares no bus format with this node; counted,
        and logged at most once a second (the peer dials again and again)."""
        self.format_refusals += 1
        held = self._format_log.admit(time.monotonic_ns() // 1_000_000)
        if held >= 0:
            logger.warning("Bus link %s %s refused: %s, so the two versions cannot "
                           "talk (docs/operations.md, \"Upgrading a cluster\")%s",
                           "to" if conn.outbound else "from", conn.peer_ip(), why,
                           " (%d more since the last report)" % held if held else "")
        conn.close(drain)

    def link_formats(self) -> tuple[dict[int, int], int]:
        """The open links by the format they send, once agreed, and how many
        of them have a peer that named no formats (a version from before the
        agreement)."""
        counts: dict[int, int] = {}
        unnamed = 0
        for conn in list(self.outbound.values()) + list(self.inbound):
            agreed = conn.link_format
            if conn.closed or agreed.pending:
                continue
            counts[agreed.sending] = counts.get(agreed.sending, 0) + 1
            unnamed += not agreed.versioned
        return counts, unnamed

    def shutdown(self) -> None:
        """Close every link and listener."""
        for server in self.servers:
            server.close()
        for task, _ in self.pending.values():
            task.cancel()
        for conn in list(self.outbound.values()) + list(self.inbound):
            conn.close()
