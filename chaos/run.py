"""``python -m chaos.run``: real nodes killed, paused and partitioned under load.

Starts a cluster of disque-server processes (``--nodes``, 5), each in its
own network namespace when run as root (else on loopback, without
partitions), every node with ``appendonly yes``. Producers add jobs with
unique bodies (REPLICATE 1 to 3, RETRY 5 by default) at random nodes; consumers take
them from random nodes and mostly acknowledge them (some are NACKed,
some forgotten like a crashed worker would). Meanwhile the nemesis kills
nodes with SIGKILL and restarts them (their AOF brings their jobs back),
now and then kills every node at once, pauses nodes with SIGSTOP,
partitions the network (routes that drop packets or refuse connections)
and takes a node's link down. After
``--duration`` seconds every fault is undone, producers stop and the
consumers drain the cluster; then the history is judged (chaos.history),
a summary table is printed, and the exit status is 1 if a job was lost,
delivered after its ACK on a calm cluster, or a node logged a bug.

The run's directory (``--dir``, else a temporary one) keeps every node's
config, logs and AOF, and history.txt; it is removed after a passing run
unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import redis

from chaos.cluster import (LoopbackNetwork, NamespaceNetwork, Network, NodeProcess,
                           connected_peers, join)
from chaos.history import (ACK_FAILED, ACKED, FORGOT, NACKED, Delivery, Fault, History, Produced,
                           Verdict)

QUEUES = (b"chaos0", b"chaos1", b"chaos2")
ADD_TIMEOUT_MS = 3000
CLIENT_TIMEOUT_S = 4.0


class Interrupted(Exception):
    """SIGTERM or SIGINT: clean up and stop."""


class Clients:
    """One connection per node for one thread, remade after any error."""

    def __init__(self, nodes: list[NodeProcess]) -> None:
        self.nodes = nodes
        self.conns: dict[int, redis.Redis] = {}

    def get(self, i: int) -> redis.Redis:
        conn = self.conns.get(i)
        if conn is None:
            conn = self.conns[i] = self.nodes[i].client(CLIENT_TIMEOUT_S)
        return conn

    def drop(self, i: int) -> None:
        conn = self.conns.pop(i, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for i in list(self.conns):
            self.drop(i)


class Run:
    """One chaos run: the cluster, the workload, the nemesis, the verdict."""

    def __init__(self, args: argparse.Namespace, network: Network, directory: Path) -> None:
        self.args = args
        self.network = network
        # What can cut nodes off (namespaces only): partitions and links.
        self.cut = network if isinstance(network, NamespaceNetwork) else None
        self.dir = directory
        self.rng = random.Random(args.seed)
        self.history = History()
        self.stop_producing = threading.Event()
        self.draining = threading.Event()
        self.stop_consuming = threading.Event()
        self.stop_nemesis = threading.Event()
        self.lock = threading.Lock()  # node state changes (nemesis vs. the final repair)
        self.counter = 0
        self.tag = "%x" % args.seed
        password = secrets.token_hex(12)
        self.nodes = [NodeProcess(i, directory / ("n%d" % i), network, password,
                                  args.appendfsync, args.node_timeout)
                      for i in range(args.nodes)]
        self.faults = {"kill": 0, "kill-all": 0, "pause": 0, "partition": 0, "link-down": 0}
        self.client_errors = 0
        self.partitioned = False

    # ------------------------------------------------------------ workload

    def _next_body(self, producer: int) -> bytes:
        with self.lock:
            self.counter += 1
            return b"chaos-%s-p%d-%d" % (self.tag.encode(), producer, self.counter)

    def producer(self, index: int) -> None:
        rng = random.Random(self.args.seed * 1000 + index)
        clients = Clients(self.nodes)
        try:
            while not self.stop_producing.is_set():
                i = rng.randrange(len(self.nodes))
                repl = rng.choice((1, 2, 2, 3, 3))
                record = Produced(self._next_body(index), rng.choice(QUEUES), repl,
                                  self.nodes[i].name, time.monotonic())
                self.history.sent(record)
                try:
                    reply = clients.get(i).execute_command(
                        "ADDJOB", record.queue, record.body, ADD_TIMEOUT_MS, "REPLICATE", repl,
                        "RETRY", self.args.retry)
                    record.job_id = reply if isinstance(reply, bytes) else str(reply).encode()
                    record.outcome = "ok"
                except redis.ResponseError as exc:
                    record.outcome = "error"
                    record.error = str(exc)[:80]
                except redis.RedisError as exc:
                    record.outcome = "unknown"
                    record.error = type(exc).__name__
                    clients.drop(i)
                    self.client_errors += 1
                    time.sleep(0.05)
                time.sleep(rng.uniform(0, self.args.pace))
        finally:
            clients.close()

    def consumer(self, index: int) -> None:
        rng = random.Random(self.args.seed * 1000 + 500 + index)
        clients = Clients(self.nodes)
        try:
            while not self.stop_consuming.is_set():
                draining = self.draining.is_set()
                i = rng.randrange(len(self.nodes))
                node = self.nodes[i]
                try:
                    conn = clients.get(i)
                    if draining:
                        reply = conn.execute_command("GETJOB", "NOHANG", "COUNT", 50, "FROM",
                                                     *QUEUES)
                    else:
                        reply = conn.execute_command("GETJOB", "TIMEOUT", 500, "COUNT",
                                                     rng.randint(1, 10), "FROM", *QUEUES)
                except redis.RedisError:
                    clients.drop(i)
                    self.client_errors += 1
                    time.sleep(0.05)
                    continue
                now = time.monotonic()
                for entry in reply or ():
                    _queue, job_id, body = entry[:3]
                    delivery = Delivery(body, job_id, node.name, now)
                    self.history.delivered(delivery)
                    self._handle(clients, i, delivery, rng, draining)
                if draining and not reply:
                    time.sleep(0.05)
        finally:
            clients.close()

    def _handle(self, clients: Clients, i: int, delivery: Delivery, rng: random.Random,
                draining: bool) -> None:
        roll = 1.0 if draining else rng.random()  # draining: always ACKJOB
        if roll < 0.05:
            delivery.action = FORGOT
            return
        verb = "NACK" if roll < 0.1 else "ACKJOB"
        try:
            clients.get(i).execute_command(verb, delivery.job_id)
        except redis.RedisError:
            clients.drop(i)
            delivery.action = ACK_FAILED if verb == "ACKJOB" else NACKED
            return
        if verb == "NACK":
            delivery.action = NACKED
        else:
            delivery.action = ACKED
            delivery.ack_done_at = time.monotonic()

    # -------------------------------------------------------------- nemesis

    def _impaired(self) -> set[int]:
        return {n.index for n in self.nodes if not n.running or n.stopped} | set(
            self.cut.down if self.cut is not None else ())

    def nemesis(self) -> None:
        rng = self.rng
        network = self.cut
        actions = ["kill"] * 4 + ["pause"] * 4 + ["kill-all"]
        if network is not None:
            actions += ["partition", "partition", "link-down"]
        while not self.stop_nemesis.wait(rng.uniform(*self.args.fault_every)):
            action = rng.choice(actions)
            with self.lock:
                if self.stop_nemesis.is_set():
                    return
                impaired = self._impaired()
                healthy = [n.index for n in self.nodes if n.index not in impaired]
                if action == "partition" and network is not None:
                    if self.partitioned:
                        continue
                    order = list(range(len(self.nodes)))
                    rng.shuffle(order)
                    split = rng.randint(1, len(order) - 1)
                    groups = [order[:split], order[split:]]
                    blackhole = rng.random() < 0.5
                    network.partition(groups, blackhole)
                    self.partitioned = True
                    fault = self.history.fault(
                        "partition", tuple(self.nodes[i].name for i in order[:split]),
                        time.monotonic())
                    self._later(rng.uniform(2, 8), self._heal, fault)
                elif action == "kill-all":
                    # Every running node at once (their AOFs keep every job),
                    # each restarted a moment later (the others have their own).
                    victims = [node for node in self.nodes if node.running]
                    if not victims:
                        continue
                    fault = self.history.fault(action, tuple(n.name for n in victims),
                                               time.monotonic())
                    for node in victims:
                        node.kill()
                    ends = [rng.uniform(1, 4) for _ in victims]
                    for node, delay in zip(victims, ends):
                        self._later(delay, self._restart, node,
                                    fault if delay == max(ends) else None)
                else:
                    if len(impaired) >= self.args.max_impaired or not healthy:
                        continue
                    victim = self.nodes[rng.choice(healthy)]
                    fault = self.history.fault(action, (victim.name,), time.monotonic())
                    if action == "kill":
                        victim.kill()
                        self._later(rng.uniform(1, 6), self._restart, victim, fault)
                    elif action == "pause":
                        victim.pause()
                        self._later(rng.uniform(1, 6), self._resume, victim, fault)
                    elif network is not None:
                        network.link_down(victim.index)
                        self._later(rng.uniform(1, 5), self._link_up, victim, fault)
                self.faults[action] += 1
                self._log("fault %s %s" % (action, ",".join(fault.nodes)))

    def _later(self, delay: float, fn: Callable[..., None], *args: object) -> None:
        timer = threading.Timer(delay, self._locked, (fn,) + args)
        timer.daemon = True
        timer.start()

    def _locked(self, fn: Callable[..., None], *args: object) -> None:
        with self.lock:
            if not self.stop_nemesis.is_set():  # else repair() undid every fault
                fn(*args)

    def _end(self, fault: Fault) -> None:
        if fault.end is None:
            fault.end = time.monotonic()

    def _restart(self, node: NodeProcess, fault: Fault | None) -> None:
        if not node.running:
            node.start()
            self._log("restart %s" % node.name)
        if fault is not None:
            self._end(fault)

    def _resume(self, node: NodeProcess, fault: Fault) -> None:
        node.resume()
        self._end(fault)

    def _link_up(self, node: NodeProcess, fault: Fault) -> None:
        if self.cut is not None and node.index in self.cut.down:
            self.cut.link_up(node.index)
        self._end(fault)

    def _heal(self, fault: Fault) -> None:
        if self.cut is not None and self.partitioned:
            self.cut.heal()
            self.partitioned = False
        self._end(fault)

    def repair(self) -> None:
        """Undo every fault: the network whole, every node up and running."""
        self.stop_nemesis.set()
        with self.lock:
            if self.cut is not None:
                self.cut.heal()
                self.partitioned = False
                for i in list(self.cut.down):
                    self.cut.link_up(i)
            for node in self.nodes:
                node.resume()
                if not node.running:
                    node.start()
            now = time.monotonic()
            for fault in self.history.faults:
                if fault.end is None:
                    fault.end = now
        for node in self.nodes:
            node.wait_ready(60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(
                connected_peers(node) == len(self.nodes) - 1 for node in self.nodes):
            time.sleep(0.2)

    def _log(self, text: str) -> None:
        if self.args.verbose:
            print("%7.1f %s" % (time.monotonic() - self.started, text), file=sys.stderr,
                  flush=True)

    # ------------------------------------------------------------------ run

    def run(self) -> int:
        args = self.args
        self.started = time.monotonic()
        for node in self.nodes:
            node.start()
        for node in self.nodes:
            node.wait_ready()
        join(self.nodes)
        setup_s = time.monotonic() - self.started
        producers = [threading.Thread(target=self.producer, args=(k,), daemon=True)
                     for k in range(args.producers)]
        consumers = [threading.Thread(target=self.consumer, args=(k,), daemon=True)
                     for k in range(args.consumers)]
        nemesis = threading.Thread(target=self.nemesis, daemon=True)
        for thread in producers + consumers + [nemesis]:
            thread.start()
        chaos_started = time.monotonic()
        time.sleep(args.duration)
        chaos_s = time.monotonic() - chaos_started
        self.stop_producing.set()
        for thread in producers:
            thread.join(CLIENT_TIMEOUT_S * 3)
        self.repair()
        nemesis.join(10)
        self._log("repaired; draining")
        self.draining.set()
        drain_started = time.monotonic()
        drained = self._drain()
        drain_s = time.monotonic() - drain_started
        self.stop_consuming.set()
        for thread in consumers:
            thread.join(CLIENT_TIMEOUT_S * 3)
        verdict = self.history.judge()
        log_errors = [line for node in self.nodes for line in node.log_errors()]
        statuses = {node.name: node.stop() for node in self.nodes}
        bad_exits = {name: code for name, code in statuses.items() if code not in (0, None)}
        log_errors += [line for node in self.nodes for line in node.log_errors()
                       if line not in log_errors]
        self._write_history()
        print(self._summary(verdict, setup_s, chaos_s, drain_s, drained, log_errors, bad_exits))
        failed = verdict.failed or not drained or bool(log_errors) or bool(bad_exits)
        return 1 if failed else 0

    def _drain(self) -> bool:
        """Until every job acknowledged to a producer is delivered, and the
        queues are empty on every node, for a few seconds in a row."""
        deadline = time.monotonic() + self.args.drain
        quiet_since = None
        while time.monotonic() < deadline:
            with self.history.lock:
                seen = {d.body for d in self.history.deliveries}
            waiting = sum(1 for r in self.history.produced.values()
                          if r.outcome == "ok" and r.body not in seen)
            if waiting == 0 and self._queues_empty():
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= self.args.retry + 2:
                    return True
            else:
                quiet_since = None
            time.sleep(0.5)
        return False

    def _queues_empty(self) -> bool:
        for node in self.nodes:
            try:
                conn = node.client(2.0)
                try:
                    if any(conn.execute_command("QLEN", queue) for queue in QUEUES):
                        return False
                finally:
                    conn.close()
            except redis.RedisError:
                return False
        return True

    def _write_history(self) -> None:
        with open(self.dir / "history.txt", "w") as out:
            base = self.started
            for fault in self.history.faults:
                out.write("fault %s %s %.3f..%s\n" % (
                    fault.kind, ",".join(fault.nodes), fault.start - base,
                    "%.3f" % (fault.end - base) if fault.end is not None else "-"))
            for record in self.history.produced.values():
                out.write("add %s %s repl=%d %s %.3f %s %s\n" % (
                    record.body.decode(), record.queue.decode(), record.repl, record.node,
                    record.sent_at - base, record.outcome,
                    (record.job_id or b"").decode() or record.error))
            for d in self.history.deliveries:
                out.write("got %s %s %s %.3f %s %s\n" % (
                    d.body.decode(errors="replace"), d.job_id.decode(errors="replace"), d.node,
                    d.at - base, d.action or "-",
                    "%.3f" % (d.ack_done_at - base) if d.ack_done_at else "-"))

    def _summary(self, verdict: Verdict, setup_s: float, chaos_s: float, drain_s: float, drained: bool,
                 log_errors: list[str], bad_exits: dict) -> str:
        rows = [
            ("network", "%s, %d nodes, appendonly yes, appendfsync %s" % (
                self.network.kind, len(self.nodes), self.args.appendfsync)),
            ("time", "setup %.1f s, chaos %.0f s, drain %.0f s (%s)" % (
                setup_s, chaos_s, drain_s, "complete" if drained else "INCOMPLETE")),
            ("jobs produced", verdict.produced),
            ("acknowledged", "%d (%d with REPLICATE >= 2)" % (verdict.acknowledged,
                                                               verdict.acknowledged_protected)),
            ("ADDJOB errors", "%d (-NOREPL and the like)" % verdict.add_errors),
            ("ADDJOB no reply", "%d (%d of them delivered anyway)" % (
                verdict.add_unknown, verdict.unknown_delivered)),
            ("delivered jobs", verdict.delivered_jobs),
            ("deliveries", verdict.deliveries),
            ("duplicates", verdict.duplicates),
        ]
        for reason, count in sorted(verdict.duplicate_reasons.items(), key=lambda kv: -kv[1]):
            rows.append(("  " + reason, count))
        rows += [
            ("LOST (REPLICATE >= 2)", len(verdict.lost)),
            ("lost REPLICATE 1", verdict.lost_repl1),
            ("after ACK, calm", len(verdict.after_ack_violations)),
            ("unknown bodies", len(verdict.unknown_bodies)),
            ("faults injected", ", ".join("%s %d" % kv for kv in self.faults.items())),
            ("node restarts", sum(n.starts - 1 for n in self.nodes)),
            ("client errors", self.client_errors),
            ("node log errors", len(log_errors)),
            ("bad exits", ", ".join("%s %s" % kv for kv in bad_exits.items()) or 0),
            ("run directory", self.dir),
        ]
        width = max(len(str(k)) for k, _ in rows)
        lines = ["%-*s  %s" % (width, k, v) for k, v in rows]
        for record in verdict.lost[:20]:
            lines.append("lost: %s repl=%d added at %s id %s" % (
                record.body.decode(), record.repl, record.node,
                (record.job_id or b"?").decode()))
        lines += ["violation: " + v for v in verdict.after_ack_violations[:20]]
        lines += ["unknown body: %r" % b for b in verdict.unknown_bodies[:10]]
        lines += ["log: " + line for line in log_errors[:20]]
        return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m chaos.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=180, help="seconds of chaos (180)")
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--network", choices=("auto", "namespaces", "loopback"), default="auto",
                        help="auto: namespaces when root and possible, else loopback")
    parser.add_argument("--appendfsync", choices=("always", "everysec", "no"),
                        default="everysec")
    parser.add_argument("--node-timeout", type=int, default=3000,
                        help="cluster-node-timeout in ms (3000)")
    parser.add_argument("--max-impaired", type=int, default=2,
                        help="nodes killed, paused or cut off at once, at most (2)")
    parser.add_argument("--fault-every", type=float, nargs=2, default=(1.0, 4.0),
                        metavar=("MIN", "MAX"), help="seconds between faults (1 to 4)")
    parser.add_argument("--retry", type=int, default=5,
                        help="the jobs' RETRY in seconds (5)")
    parser.add_argument("--pace", type=float, default=0.01,
                        help="a producer waits up to this many seconds between jobs")
    parser.add_argument("--drain", type=float, default=120,
                        help="seconds allowed for draining after the chaos")
    parser.add_argument("--seed", type=int, default=None, help="the nemesis' choices")
    parser.add_argument("--dir", type=Path, help="run directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    parser.add_argument("-v", "--verbose", action="store_true", help="log faults to stderr")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.network == "namespaces" and not NamespaceNetwork.available():
        print("network namespaces need root and iproute2", file=sys.stderr)
        return 2
    use_ns = args.network == "namespaces" or (args.network == "auto"
                                              and NamespaceNetwork.available())
    network = NamespaceNetwork(args.nodes) if use_ns else LoopbackNetwork(args.nodes)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="disque-chaos-"))
    directory.mkdir(parents=True, exist_ok=True)
    print("chaos: %d nodes on %s for %.0f s, seed %d, in %s" % (
        args.nodes, network.kind, args.duration, args.seed, directory), flush=True)

    def interrupted(signum: int, frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, interrupted)
    run = None
    status = 1
    try:
        network.setup()
        run = Run(args, network, directory)
        status = run.run()
    except (Interrupted, KeyboardInterrupt) as exc:
        print("chaos: interrupted (%s)" % (exc or "SIGINT"), file=sys.stderr)
        status = 130
    finally:
        if run is not None:
            run.stop_nemesis.set()
            run.stop_producing.set()
            run.stop_consuming.set()
            for node in run.nodes:
                try:
                    node.stop()
                except Exception as exc:  # noqa: BLE001 -- clean up the rest regardless
                    print("chaos: stopping %s: %s" % (node.name, exc), file=sys.stderr)
        network.teardown()
        signal.signal(signal.SIGTERM, previous)
    if status == 0 and not args.keep and args.dir is None:
        shutil.rmtree(directory, ignore_errors=True)
    elif status != 0:
        print("chaos: kept %s" % directory, file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
