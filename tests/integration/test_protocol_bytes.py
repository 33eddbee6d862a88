"""Reply bytes of a real server against the C server's recorded transcripts.

spec: reference-transcripts.md §1 ("Single node"). Every request of
sections 1.1-1.5 is replayed in the recorded order (the transcript is a
sequence: each test replays the sections its state depends on, starting
from DEBUG FLUSHALL) and the reply is compared byte for byte after masking
only what legitimately differs between two runs: the 24 random characters
of fresh job IDs (learned once, then compared exactly), the node ID and
port, times, TTLs, requeue timers and the INFO values of the process.
Reply types, shapes, key order, string lengths and error texts must be
identical.
"""

from __future__ import annotations

import re
import shlex
import socket
import time

import pytest

from tests.support.process import DisqueProcess, wait_until
from tests.support.teardown import fail_on

# Identities of the recorded C node.
T_NODE = b"357e57931d14b67cd18a9f63b0982d265df88424"
T_PORT = b"7711"
T_CONFIG = b"/srv/disque/n7711/disque.conf"
T_PID = b"25803"

# Job IDs the recorded node generated, named after the job's body.
J_BODY = "D-357e5793-zTdDA906+stSktxhIaAXV2i3-05a1"
J_BODY2 = "D-357e5793-asa+/gSrq07AgFYPz0JFBVNz-05a0"
J_DELAYED = "D-357e5793-yzik5LWSkjLg4PxAQNq1ta0R-0001"
J_ASYNC = "D-357e5793-n4h7OwZREV+oqICfX3ZMzIU8-05a1"
J_X = "D-357e5793-Twfv78mkJE4srNbfn1hX1yqN-05a1"
J_Y = "D-357e5793-HMtbWwpy8jjwcAaQEKM0tKJY-05a1"
J_UNKNOWN = "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001"

TRANSCRIPT_ID = re.compile(rb"D-357e5793-[A-Za-z0-9+/]{24}-([0-9a-f]{4})\Z")
CRLF = b"\r\n"
READ_TIMEOUT = 10.0


# ---------------------------------------------------------------- RESP trees

class Incomplete(Exception):
    """More bytes are needed to finish the reply."""


def parse(buf: bytes, pos: int = 0) -> tuple[tuple, int]:
    """Parse one RESP2 reply at ``pos``; return (node, end).

    Nodes are tuples: ``("+", text)``, ``("-", text)``, ``(":", int)``,
    ``("$", payload-or-None, header)``, ``("*", list-or-None)``.
    """
    eol = buf.find(CRLF, pos)
    if eol < 0:
        raise Incomplete
    kind, line, pos = buf[pos:pos + 1], buf[pos + 1:eol], eol + 2
    if kind in (b"+", b"-"):
        return (kind.decode(), line), pos
    if kind == b":":
        return (":", int(line)), pos
    if kind == b"$":
        size = int(line)
        if size < 0:
            return ("$", None, line), pos
        if len(buf) < pos + size + 2:
            raise Incomplete
        assert buf[pos + size:pos + size + 2] == CRLF, "bulk not terminated by CRLF"
        return ("$", buf[pos:pos + size], line), pos + size + 2
    if kind == b"*":
        count = int(line)
        if count < 0:
            return ("*", None), pos
        items = []
        for _ in range(count):
            item, pos = parse(buf, pos)
            items.append(item)
        return ("*", items), pos
    raise AssertionError("not a RESP2 reply type: %r" % kind)


def render(node: tuple) -> bytes:
    """Encode a (possibly masked) tree back to bytes."""
    kind = node[0]
    if kind in ("+", "-"):
        return kind.encode() + node[1] + CRLF
    if kind == ":":
        return b":%s\r\n" % str(node[1]).encode()
    if kind == "$":
        if node[1] is None:
            return b"$-1\r\n"
        return b"$" + node[2] + CRLF + node[1] + CRLF
    if node[1] is None:
        return b"*-1\r\n"
    return b"*%d\r\n" % len(node[1]) + b"".join(render(item) for item in node[1])


def parse_exact(data: bytes) -> tuple:
    """Parse exactly one reply and check the bytes are its canonical encoding."""
    node, end = parse(data)
    assert end == len(data), "trailing bytes after the reply: %r" % data[end:]
    assert render(node) == data, "non-canonical RESP: %r" % data
    return node


# ------------------------------------------------------------------- masking

def _near(tolerance: int):
    return lambda expected, actual: abs(actual - expected) <= tolerance


def _ctime_is_now(expected: int, actual: int) -> bool:
    # ms x 10^6 (+ tie counter) taken from the wall clock of this run.
    return abs(actual // 1_000_000 - time.time() * 1000) < 120_000


# Integer values of flat key/value arrays (SHOW, JSCAN REPLY all, QSTAT)
# that depend on time: masked when within tolerance of the recorded value.
VARYING_INTS = {
    b"ttl": _near(2),
    b"ctime": _ctime_is_now,
    b"next-requeue-within": _near(3000),  # ±250 ms jitter + elapsed time
    b"next-awake-within": _near(3000),
    b"age": _near(1),
    b"idle": _near(1),
}

# INFO values owned by the process: masked when they have the right form.
VARYING_INFO = {
    b"disque_build_id": rb"[0-9a-f]{16}",
    b"os": rb"\S+ \S+ \S+",
    b"gcc_version": rb"[0-9.]+",
    b"run_id": rb"[0-9a-f]{40}",
    b"uptime_in_seconds": rb"[0-9]+",
    b"executable": rb"/\S+",
    b"connected_clients": rb"[1-9][0-9]*",
    b"client_longest_output_list": rb"[0-9]+",
    b"client_biggest_input_buf": rb"[0-9]+",
    b"used_memory": rb"[1-9][0-9]*",
    b"used_memory_human": rb"[0-9]+(\.[0-9]{2}[KMGT])?B?",
    b"used_memory_rss": rb"[1-9][0-9]*",
    b"used_memory_peak": rb"[1-9][0-9]*",
    b"used_memory_peak_human": rb"[0-9]+(\.[0-9]{2}[KMGT])?B?",
    b"mem_fragmentation_ratio": rb"[0-9]+\.[0-9]{2}",
    b"mem_allocator": rb"\S+",
    b"total_connections_received": rb"[1-9][0-9]*",
    b"total_commands_processed": rb"[1-9][0-9]*",
    b"instantaneous_ops_per_sec": rb"[0-9]+",
    b"total_net_input_bytes": rb"[1-9][0-9]*",
    b"total_net_output_bytes": rb"[0-9]+",
    b"instantaneous_input_kbps": rb"[0-9]+\.[0-9]{2}",
    b"instantaneous_output_kbps": rb"[0-9]+\.[0-9]{2}",
    b"used_cpu_sys": rb"[0-9]+\.[0-9]{2}",
    b"used_cpu_user": rb"[0-9]+\.[0-9]{2}",
    b"used_cpu_sys_children": rb"[0-9]+\.[0-9]{2}",
    b"used_cpu_user_children": rb"[0-9]+\.[0-9]{2}",
}


class Identity:
    """What differs between the recorded node and ours, learned as we go."""

    def __init__(self, node: DisqueProcess, node_id: bytes) -> None:
        self.node_id = node_id
        self.port = str(node.port).encode()
        self.config = str(node.config_path).encode()
        self.pid = str(node.proc.pid).encode()
        self.job_ids: dict[bytes, bytes] = {}  # recorded ID -> ours
        self.fresh_id = re.compile(rb"D-%s-[A-Za-z0-9+/]{24}-([0-9a-f]{4})\Z"
                                   % re.escape(node_id[:8]))

    def request_arg(self, arg: bytes) -> bytes:
        """A request word with recorded job IDs replaced by ours."""
        return self.job_ids.get(arg, arg)

    def learn(self, recorded: bytes, ours: bytes) -> None:
        """Pair a recorded fresh job ID with ours if ours is well formed."""
        rec = TRANSCRIPT_ID.match(recorded)
        mine = self.fresh_id.match(ours)
        if (rec and mine and recorded not in self.job_ids and rec.group(1) == mine.group(1)
                and ours not in self.job_ids.values()):
            self.job_ids[recorded] = ours

    def translate(self, payload: bytes) -> bytes:
        """Rewrite a recorded payload with our identities."""
        for recorded, ours in self.job_ids.items():
            payload = payload.replace(recorded, ours)
        payload = payload.replace(T_NODE, self.node_id)
        if payload == T_PORT:
            return self.port
        return payload.replace(b" :%s " % T_PORT, b" :%s " % self.port)

    def translate_info(self, payload: bytes) -> bytes:
        """INFO text: the fields of our process that are known exactly."""
        return (payload.replace(b"tcp_port:" + T_PORT, b"tcp_port:" + self.port)
                .replace(b"config_file:" + T_CONFIG, b"config_file:" + self.config)
                .replace(b"process_id:" + T_PID, b"process_id:" + self.pid))


def normalize(expected: tuple, actual: tuple, ident: Identity,
              key: bytes | None = None) -> tuple[tuple, tuple]:
    """Walk both trees; return them with recorded identities translated and
    legitimately varying values replaced by the same placeholder."""
    if expected[0] != actual[0]:
        return translate_tree(expected, ident), actual
    kind = expected[0]
    if kind in ("+", "$") and expected[1] is not None and actual[1] is not None:
        ident.learn(expected[1], actual[1])
        if kind == "+":
            return ("+", ident.translate(expected[1])), actual
        payload = ident.translate(expected[1])
        return ("$", payload, str(len(payload)).encode()), actual
    if kind == ":" and key in VARYING_INTS and VARYING_INTS[key](expected[1], actual[1]):
        placeholder = (":", "<%s>" % key.decode())
        return placeholder, placeholder
    if kind == "*" and expected[1] is not None and actual[1] is not None \
            and len(expected[1]) == len(actual[1]):
        exp_items, act_items = [], []
        for i, (e, a) in enumerate(zip(expected[1], actual[1])):
            item_key = None
            if i % 2 and expected[1][i - 1][0] == "$":
                item_key = expected[1][i - 1][1]
            e, a = normalize(e, a, ident, item_key)
            exp_items.append(e)
            act_items.append(a)
        return ("*", exp_items), ("*", act_items)
    return translate_tree(expected, ident), actual


def translate_tree(node: tuple, ident: Identity) -> tuple:
    """Translate identities in a recorded subtree that has no counterpart."""
    kind = node[0]
    if kind == "+":
        return ("+", ident.translate(node[1]))
    if kind == "$" and node[1] is not None:
        payload = ident.translate(node[1])
        return ("$", payload, str(len(payload)).encode())
    if kind == "*" and node[1] is not None:
        return ("*", [translate_tree(item, ident) for item in node[1]])
    return node


def mask_info(text: bytes) -> bytes:
    """Replace process-owned INFO values by ``<key>`` when well formed."""
    lines = []
    for line in text.split(CRLF):
        key, sep, value = line.partition(b":")
        pattern = VARYING_INFO.get(key)
        if sep and pattern is not None and re.fullmatch(pattern, value):
            line = key + b":<" + key + b">"
        lines.append(line)
    return CRLF.join(lines)


def sort_scan_elements(node: tuple) -> tuple:
    """QSCAN/JSCAN return elements in an implementation-defined order."""
    if node[0] == "*" and node[1] and len(node[1]) == 2 and node[1][1][0] == "*":
        cursor, elements = node[1]
        return ("*", [cursor, ("*", sorted(elements[1], key=render))])
    return node


# ---------------------------------------------------------------- the wire

class Wire:
    """One raw client connection that reads exactly one reply per request."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT)
        self.buf = b""

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def send(self, data: bytes) -> None:
        """Send raw bytes."""
        self.sock.sendall(data)

    def request(self, argv: list[bytes]) -> bytes:
        """Send ``argv`` as a multibulk and return the exact reply bytes."""
        self.send(b"*%d\r\n" % len(argv) + b"".join(
            b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in argv))
        return self.read_reply()

    def read_reply(self) -> bytes:
        """Exactly one reply (bytes after it stay buffered)."""
        while True:
            try:
                _, end = parse(self.buf)
            except Incomplete:
                chunk = self.sock.recv(65536)
                assert chunk, "connection closed; got %r" % self.buf
                self.buf += chunk
                continue
            reply, self.buf = self.buf[:end], self.buf[end:]
            return reply

    def read_until_close(self) -> bytes:
        """Everything until the server closes, then ``<EOF>``."""
        out = self.buf
        self.buf = b""
        while True:
            chunk = self.sock.recv(65536)
            if not chunk:
                return out + b"<EOF>"
            out += chunk

    def assert_idle(self) -> None:
        """Nothing unexpected is pending: the next PING's reply comes first."""
        self.send(b"PING\r\n")
        assert self.read_reply() == b"+PONG\r\n"
        assert self.buf == b""


# ------------------------------------------------------------------ steps

class Step:
    """One recorded request and its reply."""

    def __init__(self, command: str, expected: bytes, timeout: float | None = None,
                 kind: str = "") -> None:
        self.command = command
        self.argv = [word.encode() for word in shlex.split(command)]
        self.expected = expected
        self.timeout = timeout  # the request blocks this long before replying
        if not kind and self.argv[0] in (b"QSCAN", b"JSCAN"):
            kind = "scan"
        self.kind = kind

    def __repr__(self) -> str:
        return "Step(%r)" % self.command


def step(command: str, expected: bytes, timeout: float | None = None,
         kind: str = "") -> Step:
    """Shorthand for the transcript tables."""
    return Step(command, expected, timeout, kind)


def job_info(job_id: str, state: bytes, ttl: int, ctime: int, delay: int, retry: int,
             requeue: int, awake: int, body: bytes, nacks: int = 0) -> bytes:
    """The recorded 30-element SHOW reply of a local REPLICATE 1 job."""
    return (b"*30\r\n$2\r\nid\r\n$40\r\n%s\r\n$5\r\nqueue\r\n$1\r\nq\r\n$5\r\nstate\r\n"
            b"$%d\r\n%s\r\n$4\r\nrepl\r\n:1\r\n$3\r\nttl\r\n:%d\r\n$5\r\nctime\r\n:%d\r\n"
            b"$5\r\ndelay\r\n:%d\r\n$5\r\nretry\r\n:%d\r\n$5\r\nnacks\r\n:%d\r\n"
            b"$21\r\nadditional-deliveries\r\n:0\r\n$15\r\nnodes-delivered\r\n*1\r\n$40\r\n"
            b"%s\r\n$15\r\nnodes-confirmed\r\n*0\r\n$19\r\nnext-requeue-within\r\n:%d\r\n"
            b"$17\r\nnext-awake-within\r\n:%d\r\n$4\r\nbody\r\n$%d\r\n%s\r\n") % (
                job_id.encode(), len(state), state, ttl, ctime, delay, retry, nacks, T_NODE,
                requeue, awake, len(body), body)


# The recorded INFO server payload. The transcript's bulk header says $432
# but its payload is 418 bytes (the recorded paths were edited), so the
# length is checked against our own payload only (canonical encoding).
INFO_SERVER = (
    b"# Server\r\ndisque_version:1.0-rc1\r\ndisque_git_sha1:00000000\r\ndisque_git_dirty:0\r\n"
    b"disque_build_id:14c8cca794ebea28\r\nos:Linux 6.18.44-fc-v769 x86_64\r\narch_bits:64\r\n"
    b"multiplexing_api:epoll\r\ngcc_version:12.2.0\r\nprocess_id:25803\r\n"
    b"run_id:824767931ba4ed94fa572d206b768a0eb3bdcfad\r\ntcp_port:7711\r\n"
    b"uptime_in_seconds:1\r\nuptime_in_days:0\r\nhz:10\r\n"
    b"executable:/opt/disque/src/disque-server\r\n"
    b"config_file:/srv/disque/n7711/disque.conf\r\n")

# The recorded default INFO (the transcript's raw line is truncated; this is
# its decoded bulk).
INFO_DEFAULT = INFO_SERVER + (
    b"\r\n# Clients\r\nconnected_clients:1\r\nclient_longest_output_list:0\r\n"
    b"client_biggest_input_buf:0\r\nblocked_clients:0\r\n"
    b"\r\n# Memory\r\nused_memory:773472\r\nused_memory_human:755.34K\r\n"
    b"used_memory_rss:3510272\r\nused_memory_peak:773472\r\nused_memory_peak_human:755.34K\r\n"
    b"mem_fragmentation_ratio:4.54\r\nmem_allocator:jemalloc-4.0.3\r\n"
    b"\r\n# Jobs\r\nregistered_jobs:0\r\n"
    b"\r\n# Queues\r\nregistered_queues:0\r\n"
    b"\r\n# Persistence\r\nloading:0\r\naof_enabled:0\r\naof_state:off\r\n"
    b"aof_rewrite_in_progress:0\r\naof_rewrite_scheduled:0\r\naof_last_rewrite_time_sec:-1\r\n"
    b"aof_current_rewrite_time_sec:-1\r\naof_last_bgrewrite_status:ok\r\n"
    b"aof_last_write_status:ok\r\n"
    b"\r\n# Stats\r\ntotal_connections_received:12\r\ntotal_commands_processed:23\r\n"
    b"instantaneous_ops_per_sec:0\r\ntotal_net_input_bytes:543\r\n"
    b"total_net_output_bytes:1928\r\ninstantaneous_input_kbps:0.01\r\n"
    b"instantaneous_output_kbps:0.00\r\nrejected_connections:0\r\nlatest_fork_usec:0\r\n"
    b"\r\n# CPU\r\nused_cpu_sys:0.00\r\nused_cpu_user:0.00\r\nused_cpu_sys_children:0.00\r\n"
    b"used_cpu_user_children:0.00\r\n")

FLUSH = [step("DEBUG FLUSHALL", b"+OK\r\n")]

# §1.1 Handshake / introspection
SECTION_1_1 = [
    step("PING", b"+PONG\r\n"),
    step("PING hello", b"$5\r\nhello\r\n"),
    # fresh node: own IP is empty until a MEET teaches it
    step("HELLO",
         b"*3\r\n:1\r\n$40\r\n357e57931d14b67cd18a9f63b0982d265df88424\r\n*4\r\n$40\r\n"
         b"357e57931d14b67cd18a9f63b0982d265df88424\r\n$0\r\n\r\n$4\r\n7711\r\n$1\r\n1\r\n"),
    step("CLUSTER MYID", b"$40\r\n357e57931d14b67cd18a9f63b0982d265df88424\r\n"),
    step("CLUSTER NODES",
         b"$68\r\n357e57931d14b67cd18a9f63b0982d265df88424 :7711 myself 0 0 connected\n\r\n"),
    step("CLUSTER INFO",
         b"$150\r\ncluster_state:ok\r\ncluster_known_nodes:1\r\ncluster_reachable_nodes:0\r\n"
         b"cluster_size:1\r\ncluster_stats_messages_sent:0\r\n"
         b"cluster_stats_messages_received:0\r\n\r\n"),
    step("CLUSTER LEAVING", b"+no\r\n"),
    step("TIME", b"*2\r\n$10\r\n1795306206\r\n$6\r\n504032\r\n", kind="time"),
    step("INFO jobs", b"$27\r\n# Jobs\r\nregistered_jobs:0\r\n\r\n"),
    step("INFO queues", b"$31\r\n# Queues\r\nregistered_queues:0\r\n\r\n"),
    step("INFO server", INFO_SERVER, kind="info"),
    # default sections
    step("INFO", INFO_DEFAULT, kind="info"),
    step("CONFIG GET cluster-node-timeout",
         b"*2\r\n$20\r\ncluster-node-timeout\r\n$5\r\n15000\r\n"),
    step("CONFIG GET maxmemory", b"*2\r\n$9\r\nmaxmemory\r\n$10\r\n1073741824\r\n"),
    step("AUTH x", b"-ERR Client sent AUTH, but no password is set\r\n"),
]

# §1.2 Job life cycle
SECTION_1_2 = [
    # default REPLICATE=min(3,cluster size)=1, TTL 86400, RETRY=TTL/10 capped at 300
    step("ADDJOB q body 0", b"+D-357e5793-zTdDA906+stSktxhIaAXV2i3-05a1\r\n"),
    # RETRY 0 -> even TTL suffix
    step("ADDJOB q body2 0 RETRY 0", b"+D-357e5793-asa+/gSrq07AgFYPz0JFBVNz-05a0\r\n"),
    step("ADDJOB q delayed 0 DELAY 30 TTL 60",
         b"+D-357e5793-yzik5LWSkjLg4PxAQNq1ta0R-0001\r\n"),
    step("ADDJOB q asyncbody 0 ASYNC", b"+D-357e5793-n4h7OwZREV+oqICfX3ZMzIU8-05a1\r\n"),
    step("QLEN q", b":3\r\n"),
    step("QPEEK q 2",
         b"*2\r\n*3\r\n$1\r\nq\r\n$40\r\nD-357e5793-zTdDA906+stSktxhIaAXV2i3-05a1\r\n$4\r\n"
         b"body\r\n*3\r\n$1\r\nq\r\n$40\r\nD-357e5793-asa+/gSrq07AgFYPz0JFBVNz-05a0\r\n$5\r\n"
         b"body2\r\n"),
    # negative count = newest first
    step("QPEEK q -1",
         b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\nD-357e5793-n4h7OwZREV+oqICfX3ZMzIU8-05a1\r\n$9\r\n"
         b"asyncbody\r\n"),
    step("QPEEK nosuchq 5", b"*0\r\n"),
    step("QSTAT q",
         b"*20\r\n$4\r\nname\r\n$1\r\nq\r\n$3\r\nlen\r\n:3\r\n$3\r\nage\r\n:0\r\n$4\r\n"
         b"idle\r\n:0\r\n$7\r\nblocked\r\n:0\r\n$11\r\nimport-from\r\n*0\r\n$11\r\n"
         b"import-rate\r\n:0\r\n$7\r\njobs-in\r\n:3\r\n$8\r\njobs-out\r\n:0\r\n$5\r\npause\r\n"
         b"$4\r\nnone\r\n"),
    step("QSTAT nosuchq", b"*-1\r\n"),
    # queued job
    step("SHOW " + J_BODY,
         job_info(J_BODY, b"queued", 86400, 1795306206522000000, 0, 300, 299773, 299273,
                  b"body")),
    # delayed job (state active, next-awake-within set)
    step("SHOW " + J_DELAYED,
         job_info(J_DELAYED, b"active", 60, 1795306206522000002, 30, 6, 29905, 29905,
                  b"delayed")),
    # FIFO by ctime: first job
    step("GETJOB FROM q",
         b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\nD-357e5793-zTdDA906+stSktxhIaAXV2i3-05a1\r\n$4\r\n"
         b"body\r\n"),
    # after GETJOB: state active
    step("SHOW " + J_BODY,
         job_info(J_BODY, b"active", 86400, 1795306206522000000, 0, 300, 299767, 299267,
                  b"body")),
    # returns retry seconds; dequeues if queued
    step("WORKING " + J_BODY, b":300\r\n"),
    step("NACK " + J_BODY, b":1\r\n"),
    # WITHCOUNTERS adds nacks/additional-deliveries key+value pairs
    step("GETJOB WITHCOUNTERS COUNT 5 FROM q",
         b"*3\r\n*7\r\n$1\r\nq\r\n$40\r\nD-357e5793-zTdDA906+stSktxhIaAXV2i3-05a1\r\n$4\r\n"
         b"body\r\n$5\r\nnacks\r\n:1\r\n$21\r\nadditional-deliveries\r\n:0\r\n*7\r\n$1\r\n"
         b"q\r\n$40\r\nD-357e5793-asa+/gSrq07AgFYPz0JFBVNz-05a0\r\n$5\r\nbody2\r\n$5\r\n"
         b"nacks\r\n:0\r\n$21\r\nadditional-deliveries\r\n:0\r\n*7\r\n$1\r\nq\r\n$40\r\n"
         b"D-357e5793-n4h7OwZREV+oqICfX3ZMzIU8-05a1\r\n$9\r\nasyncbody\r\n$5\r\nnacks\r\n"
         b":0\r\n$21\r\nadditional-deliveries\r\n:0\r\n"),
    step("ENQUEUE %s %s" % (J_BODY, J_BODY2), b":1\r\n"),
    step("DEQUEUE " + J_BODY, b":1\r\n"),
    # id1 was DEQUEUEd (active), id2 is RETRY 0 so ENQUEUE refused it
    step("GETJOB NOHANG FROM q otherq", b"*-1\r\n"),
    step("QLEN q", b":0\r\n"),
    # blocks 200 ms then null multibulk
    step("GETJOB TIMEOUT 200 FROM q", b"*-1\r\n", timeout=0.2),
    # count of jobs known and not yet acked
    step("ACKJOB " + J_BODY, b":1\r\n"),
    # single node: ack GC removes immediately
    step("SHOW " + J_BODY, b"$-1\r\n"),
    # again: unknown now
    step("ACKJOB " + J_BODY, b":0\r\n"),
    # well-formed unknown id
    step("ACKJOB " + J_UNKNOWN, b":0\r\n"),
    step("FASTACK %s %s" % (J_BODY2, J_UNKNOWN), b":1\r\n"),
    step("DELJOB " + J_DELAYED, b":1\r\n"),
    step("DELJOB " + J_DELAYED, b":0\r\n"),
    step("ADDJOB q x 0", b"+D-357e5793-Twfv78mkJE4srNbfn1hX1yqN-05a1\r\n"),
    step("ADDJOB q y 0", b"+D-357e5793-HMtbWwpy8jjwcAaQEKM0tKJY-05a1\r\n"),
    step("QSCAN", b"*2\r\n$1\r\n0\r\n*2\r\n$6\r\notherq\r\n$1\r\nq\r\n"),
    step("QSCAN 0 COUNT 10 BUSYLOOP MINLEN 1", b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nq\r\n"),
    step("JSCAN",
         b"*2\r\n$1\r\n0\r\n*3\r\n+D-357e5793-Twfv78mkJE4srNbfn1hX1yqN-05a1\r\n"
         b"+D-357e5793-HMtbWwpy8jjwcAaQEKM0tKJY-05a1\r\n"
         b"+D-357e5793-n4h7OwZREV+oqICfX3ZMzIU8-05a1\r\n"),
    step("JSCAN 0 STATE queued REPLY all BUSYLOOP",
         b"*2\r\n$1\r\n0\r\n*2\r\n"
         + job_info(J_X, b"queued", 86400, 1795306206760000000, 0, 300, 300103, 299603, b"x")
         + job_info(J_Y, b"queued", 86400, 1795306206761000000, 0, 300, 300122, 299622, b"y")),
    step("JSCAN STATE bogus", b"-ERR Invalid job state name\r\n"),
    step("JSCAN REPLY bogus", b"-ERR Invalid REPLY type, try ID or ALL\r\n"),
]

# §1.3 PAUSE
SECTION_1_3 = [
    step("PAUSE q state", b"+none\r\n"),
    step("PAUSE q in", b"+in\r\n"),
    # paused in
    step("ADDJOB q z 0", b"-PAUSED Queue paused in input, try later\r\n"),
    # note: sets OUT only (IN cleared) since flags are rebuilt
    step("PAUSE q out", b"+out\r\n"),
    step("QSTAT q",
         b"*20\r\n$4\r\nname\r\n$1\r\nq\r\n$3\r\nlen\r\n:2\r\n$3\r\nage\r\n:0\r\n$4\r\n"
         b"idle\r\n:0\r\n$7\r\nblocked\r\n:0\r\n$11\r\nimport-from\r\n*0\r\n$11\r\n"
         b"import-rate\r\n:0\r\n$7\r\njobs-in\r\n:7\r\n$8\r\njobs-out\r\n:4\r\n$5\r\npause\r\n"
         b"$3\r\nout\r\n"),
    # paused out + NOHANG
    step("GETJOB NOHANG FROM q", b"*-1\r\n"),
    # paused out: blocks until timeout
    step("GETJOB TIMEOUT 300 FROM q", b"*-1\r\n", timeout=0.3),
    step("PAUSE q all", b"+all\r\n"),
    step("PAUSE q none", b"+none\r\n"),
    # unknown queue
    step("PAUSE newq state", b"+none\r\n"),
    step("PAUSE q bogus", b"-ERR syntax error\r\n"),
    # arity -3
    step("PAUSE q", b"-ERR wrong number of arguments for 'pause' command\r\n"),
]

# §1.4 Bad inputs / errors
SECTION_1_4 = [
    step("FOO", b"-ERR unknown command 'FOO'\r\n"),
    step("foo bar", b"-ERR unknown command 'foo'\r\n"),
    step("ADDJOB", b"-ERR wrong number of arguments for 'addjob' command\r\n"),
    step("ADDJOB q body", b"-ERR wrong number of arguments for 'addjob' command\r\n"),
    step("ADDJOB q body abc", b"-ERR timeout is not an integer or out of range\r\n"),
    step("ADDJOB q body -1", b"-ERR timeout is negative\r\n"),
    step("ADDJOB q body 1.5", b"-ERR timeout is not an integer or out of range\r\n"),
    step("ADDJOB q body 99999999999999999999",
         b"-ERR timeout is not an integer or out of range\r\n"),
    # options are parsed before the timeout
    step("ADDJOB q body abc REPLICATE 0", b"-ERR REPLICATE must be between 1 and 65535\r\n"),
    # cluster of 1
    step("ADDJOB q body 0 REPLICATE 2",
         b"-NOREPL Not enough reachable nodes for the requested replication level\r\n"),
    step("ADDJOB q body 0 REPLICATE 70000", b"-ERR REPLICATE must be between 1 and 65535\r\n"),
    step("ADDJOB q body 0 REPLICATE x", b"-ERR REPLICATE must be between 1 and 65535\r\n"),
    # option missing value -> syntax error
    step("ADDJOB q body 0 REPLICATE", b"-ERR syntax error\r\n"),
    # checked after REPLICATE parse but before reachability (two spaces before REPLICATE)
    step("ADDJOB q body 0 REPLICATE 2 RETRY 0",
         b"-ERR With RETRY set to 0 please explicitly set  REPLICATE to"
         b" 1 (at-most-once delivery)\r\n"),
    step("ADDJOB q body 0 RETRY -1", b"-ERR RETRY time must be a non negative number\r\n"),
    step("ADDJOB q body 0 TTL 0", b"-ERR TTL must be a number > 0\r\n"),
    step("ADDJOB q body 0 TTL -5", b"-ERR TTL must be a number > 0\r\n"),
    step("ADDJOB q body 0 DELAY -1", b"-ERR DELAY time must be a non negative number\r\n"),
    step("ADDJOB q body 0 DELAY 10 TTL 10",
         b"-ERR The specified DELAY is greater than TTL. Job refused si"
         b"nce would never be delivered\r\n"),
    step("ADDJOB q body 0 MAXLEN 0", b"-ERR MAXLEN must be a positive number\r\n"),
    # queue already has jobs
    step("ADDJOB q body 0 MAXLEN 1",
         b"-MAXLEN Queue is already longer than the specified MAXLEN count\r\n"),
    step("ADDJOB q body 0 BOGUS", b"-ERR syntax error\r\n"),
    # empty queue name and body are accepted
    step('ADDJOB "" "" 0', b"+D-357e5793-fdmBQTlrq6SHh6CubrpvL83D-05a1\r\n"),
    step("GETJOB", b"-ERR wrong number of arguments for 'getjob' command\r\n"),
    step("GETJOB q", b"-ERR syntax error\r\n"),
    step("GETJOB FROM", b"-ERR syntax error\r\n"),
    step("GETJOB COUNT 0 FROM q", b"-ERR COUNT must be a number greater than zero\r\n"),
    step("GETJOB COUNT x FROM q", b"-ERR COUNT must be a number greater than zero\r\n"),
    step("GETJOB TIMEOUT -1 FROM q", b"-ERR timeout is negative\r\n"),
    step("GETJOB TIMEOUT abc FROM q", b"-ERR timeout is not an integer or out of range\r\n"),
    # TIMEOUT consumes 'FROM' as its value
    step("GETJOB TIMEOUT FROM q", b"-ERR timeout is not an integer or out of range\r\n"),
    step("GETJOB BOGUS FROM q", b"-ERR syntax error\r\n"),
    # arity -1: zero ids allowed
    step("ACKJOB", b":0\r\n"),
    step("ACKJOB badid", b"-BADID Invalid Job ID format.\r\n"),
    # mass-validated: nothing acked
    step("ACKJOB %s badid" % J_X, b"-BADID Invalid Job ID format.\r\n"),
    # the transcript's raw line is truncated (428 bytes); this is its shape
    step("SHOW " + J_X,
         job_info(J_X, b"queued", 86399, 1795306206760000000, 0, 300, 299600, 299100, b"x")),
    step("FASTACK badid", b"-BADID Invalid Job ID format.\r\n"),
    step("NACK badid", b"-BADID Invalid Job ID format.\r\n"),
    step("NACK " + J_UNKNOWN, b":0\r\n"),
    # queued (not active) job -> 0
    step("NACK " + J_Y, b":0\r\n"),
    step("WORKING " + J_UNKNOWN, b"-NOJOB Job not known in the context of this node.\r\n"),
    step("WORKING badid", b"-BADID Invalid Job ID format.\r\n"),
    step("WORKING", b"-ERR wrong number of arguments for 'working' command\r\n"),
    step("SHOW", b"-ERR wrong number of arguments for 'show' command\r\n"),
    step("SHOW badid", b"-BADID Invalid Job ID format.\r\n"),
    step("SHOW " + J_UNKNOWN, b"$-1\r\n"),
    step("QLEN", b"-ERR wrong number of arguments for 'qlen' command\r\n"),
    step("QPEEK q abc", b"-ERR value is not an integer or out of range\r\n"),
    step("QSTAT", b"-ERR wrong number of arguments for 'qstat' command\r\n"),
    step("QSCAN abc", b"-ERR invalid cursor or option name\r\n"),
    step("QSCAN 0 1", b"-ERR syntax error\r\n"),
    step("HELLO x", b"-ERR wrong number of arguments for 'hello' command\r\n"),
    step("CLUSTER FOO", b"-ERR Wrong CLUSTER subcommand or number of arguments\r\n"),
    step("CLUSTER MEET 127.0.0.1 abc", b"-ERR Invalid TCP port specified: abc\r\n"),
    step("CLUSTER MEET not-an-ip 7000",
         b"-ERR Invalid node address specified: not-an-ip:7000\r\n"),
    step("CLUSTER FORGET abc", b"-ERR Invalid node identifier\r\n"),
    step("CLUSTER LEAVING maybe",
         b"-ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'\r\n"),
    step("CONFIG GET", b"-ERR Wrong number of arguments for CONFIG GET\r\n"),
    step("CONFIG SET nosuchparam 1", b"-ERR Unsupported CONFIG parameter: nosuchparam\r\n"),
    step("CONFIG SET cluster-node-timeout abc",
         b"-ERR Invalid argument 'abc' for CONFIG SET 'cluster-node-timeout'\r\n"),
    step("DEBUG NOSUCH",
         b"-ERR Unknown DEBUG subcommand or wrong number of arguments for 'NOSUCH'\r\n"),
    step("ENQUEUE badid", b"-BADID Invalid Job ID format.\r\n"),
    step("DEQUEUE badid", b"-BADID Invalid Job ID format.\r\n"),
]


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """One server for the module; every test starts with DEBUG FLUSHALL."""
    proc = DisqueProcess(tmp_path_factory.mktemp("protocol") / "node")
    proc.shared = True
    proc.start()
    yield proc
    fail_on(proc.verify())


@pytest.fixture
def ident(node) -> Identity:
    return Identity(node, node.call("CLUSTER", "MYID"))


@pytest.fixture
def wire(node):
    conn = Wire(node.port)
    yield conn
    conn.close()


def run_steps(wire: Wire, ident: Identity, steps: list[Step]) -> None:
    """Replay ``steps`` in order, comparing every reply."""
    for st in steps:
        argv = [ident.request_arg(arg) for arg in st.argv]
        started = time.monotonic()
        actual = wire.request(argv)
        elapsed = time.monotonic() - started
        act_tree = parse_exact(actual)
        if st.kind == "time":
            check_time_reply(actual)
            continue
        if st.kind == "info":
            assert act_tree[0] == "$" and act_tree[1] is not None, (st, actual)
            expected = mask_info(ident.translate_info(st.expected))
            assert mask_info(act_tree[1]) == expected, st
            continue
        exp_tree = parse_exact(st.expected)
        if st.kind == "scan":
            # Pair IDs first (a sort before learning would use recorded IDs).
            for recorded in TRANSCRIPT_ID.finditer(st.expected):
                assert recorded.group(0) in ident.job_ids, "unpaired ID in %r" % st
            exp_tree = sort_scan_elements(translate_tree(exp_tree, ident))
            act_tree = sort_scan_elements(act_tree)
        exp_norm, act_norm = normalize(exp_tree, act_tree, ident)
        assert render(act_norm) == render(exp_norm), st
        if st.timeout is not None:  # the socket's READ_TIMEOUT bounds the wait
            assert elapsed >= st.timeout - 0.01, (st, elapsed)
    wire.assert_idle()


def check_time_reply(actual: bytes) -> None:
    """TIME: two bulk strings, unix seconds (10 digits now) and microseconds."""
    match = re.fullmatch(rb"\*2\r\n\$10\r\n([0-9]{10})\r\n\$([1-6])\r\n([0-9]+)\r\n", actual)
    assert match, actual
    assert abs(int(match.group(1)) - time.time()) < 60
    assert len(match.group(3)) == int(match.group(2))
    assert int(match.group(3)) < 1_000_000
    assert match.group(3) == str(int(match.group(3))).encode()  # no zero padding


# --------------------------------------------------------------- the tests

def test_handshake_and_introspection(wire, ident):
    """§1.1: PING, HELLO, CLUSTER MYID/NODES/INFO/LEAVING, TIME, INFO, CONFIG GET, AUTH."""
    run_steps(wire, ident, FLUSH + SECTION_1_1)


def test_job_life_cycle(wire, ident):
    """§1.2: ADDJOB variants, QPEEK/QSTAT/SHOW, GETJOB, WORKING/NACK/ENQUEUE/DEQUEUE,
    acks, QSCAN/JSCAN."""
    run_steps(wire, ident, FLUSH + SECTION_1_2)
    assert len(ident.job_ids) == 6


def test_pause(wire, ident):
    """§1.3 (after the §1.2 sequence that builds its state)."""
    run_steps(wire, ident, FLUSH + SECTION_1_2 + SECTION_1_3)


def test_bad_inputs_and_errors(wire, ident):
    """§1.4 (after §1.2 and §1.3: the queue q holds the jobs x and y)."""
    run_steps(wire, ident, FLUSH + SECTION_1_2 + SECTION_1_3 + SECTION_1_4)
    # ADDJOB "" "" 0 created a job with an empty queue name and body.
    empty_id = ident.job_ids[b"D-357e5793-fdmBQTlrq6SHh6CubrpvL83D-05a1"]
    assert wire.request([b"GETJOB", b"NOHANG", b"FROM", b""]) == (
        b"*1\r\n*3\r\n$0\r\n\r\n$40\r\n%s\r\n$0\r\n\r\n" % empty_id)


def test_fresh_job_ids_carry_node_prefix_and_ttl_suffix(wire, ident):
    """ID format of §"Reply-format findings" 2: prefix = node ID, suffix = TTL minutes."""
    run_steps(wire, ident, FLUSH)
    cases = [([], b"05a1"), ([b"RETRY", b"0"], b"05a0"), ([b"TTL", b"5"], b"0001"),
             ([b"TTL", b"5", b"RETRY", b"0"], b"0000"), ([b"TTL", b"3600"], b"003d"),
             ([b"TTL", b"7200", b"RETRY", b"0"], b"0078"),
             ([b"TTL", b"9999999"], b"ffff")]
    seen = set()
    for options, suffix in cases:
        reply = wire.request([b"ADDJOB", b"ids", b"b", b"0"] + options)
        assert reply[:1] == b"+" and reply[-2:] == CRLF, reply
        job_id = reply[1:-2]
        assert ident.fresh_id.match(job_id), job_id
        assert job_id.endswith(b"-" + suffix), (options, job_id)
        seen.add(job_id)
    assert len(seen) == len(cases)
    wire.assert_idle()


# §1.5 Wire-level oddities: each raw send on a fresh connection.
RAW_REPLIES = [
    # inline command
    (b"PING\r\n", b"+PONG\r\n"),
    # pipelined inline + RESP
    (b"PING\r\nPING\r\n*1\r\n$4\r\nPING\r\n", b"+PONG\r\n+PONG\r\n+PONG\r\n"),
    # unknown command via RESP
    (b"*1\r\n$4\r\nPINX\r\n", b"-ERR unknown command 'PINX'\r\n"),
    # empty inline line and empty multibulk: ignored, nothing sent back
    (b"\r\n", b""),
    (b"*0\r\n", b""),
]


@pytest.mark.parametrize("request_bytes, expected", RAW_REPLIES,
                         ids=[repr(r) for r, _ in RAW_REPLIES])
def test_raw_send(node, request_bytes, expected):
    """§1.5: exact replies; the connection stays usable afterwards."""
    conn = Wire(node.port)
    try:
        conn.send(request_bytes)
        got = b""
        while len(got) < len(expected):
            got += conn.read_reply()
        assert got == expected
        conn.assert_idle()  # nothing else was sent, and the connection is alive
    finally:
        conn.close()


def test_raw_inline_addjob(node, ident):
    """§1.5: ``ADDJOB inlq inlinebody 0`` typed inline answers a status job ID."""
    conn = Wire(node.port)
    try:
        conn.send(b"ADDJOB inlq inlinebody 0\r\n")
        reply = conn.read_reply()
        assert reply[:1] == b"+" and ident.fresh_id.match(reply[1:-2]), reply
        assert reply.endswith(b"-05a1\r\n")
        conn.assert_idle()
    finally:
        conn.close()


PROTOCOL_ERRORS = [
    # §1.5 recorded
    (b"*x\r\n", b"-ERR Protocol error: invalid multibulk length\r\n<EOF>"),
    (b"*1\r\nPING\r\n", b"-ERR Protocol error: expected '$', got 'P'\r\n<EOF>"),
    (b"*1\r\n$-3\r\n", b"-ERR Protocol error: invalid bulk length\r\n<EOF>"),
    (b'PING "unbalanced\r\n', b"-ERR Protocol error: unbalanced quotes in request\r\n<EOF>"),
    # commands.md §0 limits
    (b"*1048577\r\n", b"-ERR Protocol error: invalid multibulk length\r\n<EOF>"),
    (b"*1\r\n$536870913\r\n", b"-ERR Protocol error: invalid bulk length\r\n<EOF>"),
    (b"*" + b"1" * 70000, b"-ERR Protocol error: too big mbulk count string\r\n<EOF>"),
    (b"*1\r\n$" + b"1" * 70000, b"-ERR Protocol error: too big bulk count string\r\n<EOF>"),
    (b"PING " + b"x" * 70000, b"-ERR Protocol error: too big inline request\r\n<EOF>"),
    # commands before the bad one in the same packet are answered first
    (b"PING\r\n*1\r\n$4\r\nPING\r\n*1\r\n:1\r\n",
     b"+PONG\r\n+PONG\r\n-ERR Protocol error: expected '$', got ':'\r\n<EOF>"),
]


@pytest.mark.parametrize("request_bytes, expected", PROTOCOL_ERRORS,
                         ids=[repr(r[:24]) for r, _ in PROTOCOL_ERRORS])
def test_protocol_error_closes_only_that_connection(node, request_bytes, expected):
    """The error is answered, then the connection is closed; a client that
    was connected meanwhile, even in the middle of a command, is unaffected."""
    bystander = Wire(node.port)
    victim = Wire(node.port)
    try:
        bystander.send(b"*2\r\n$4\r\nPING\r\n$3\r\nab")  # half a command
        victim.send(request_bytes)
        assert victim.read_until_close() == expected
        bystander.send(b"c\r\n")
        assert bystander.read_reply() == b"$3\r\nabc\r\n"
        bystander.assert_idle()
    finally:
        victim.close()
        bystander.close()
    assert node.proc.poll() is None


def test_protocol_error_behind_a_blocked_command_waits_for_the_unblock(node):
    """A blocked client's input is only acted on once it is unblocked: the
    GETJOB reply comes first, then the protocol error, then the close."""
    consumer = Wire(node.port)
    try:
        consumer.send(b"*3\r\n$6\r\nGETJOB\r\n$4\r\nFROM\r\n$3\r\nbpq\r\n*x\r\n")
        wait_until(lambda: b"blocked_clients:1" in node.raw(b"INFO clients\r\n"),
                   message="GETJOB to block")
        job_id = node.call("ADDJOB", "bpq", "body", 0)
        assert consumer.read_until_close() == (
            b"*1\r\n*3\r\n$3\r\nbpq\r\n$40\r\n%s\r\n$4\r\nbody\r\n"
            b"-ERR Protocol error: invalid multibulk length\r\n<EOF>" % job_id)
    finally:
        consumer.close()


def test_request_split_into_single_bytes(node):
    """A multibulk delivered one byte per packet gives the same reply bytes."""
    conn = Wire(node.port)
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        for byte in b"*3\r\n$5\r\nQPEEK\r\n$7\r\nnosuchq\r\n$1\r\n5\r\nPI":
            conn.send(bytes([byte]))
        assert conn.read_reply() == b"*0\r\n"
        conn.send(b"NG\r\n")
        assert conn.read_reply() == b"+PONG\r\n"
    finally:
        conn.close()


def test_quit_replies_ok_then_closes(node):
    """commands.md §0: QUIT (any arguments) answers +OK and closes."""
    conn = Wire(node.port)
    try:
        conn.send(b"*2\r\n$4\r\nquit\r\n$3\r\nnow\r\nPING\r\n")
        assert conn.read_until_close() == b"+OK\r\n<EOF>"
    finally:
        conn.close()
