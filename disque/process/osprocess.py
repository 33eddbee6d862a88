"""What the server asks of the operating system besides sockets: detaching
from the terminal, telling systemd it is ready, durable file writes and
the file descriptor limit."""

from __future__ import annotations

import os
import resource
import socket

from disque.context.log import logger

RESERVED_FDS = 32  # descriptors kept for listeners, the AOF, the bus and logs


def notify_systemd(state: str) -> bool:
    """Send ``state`` (e.g. READY=1) to $NOTIFY_SOCKET; False if there is none."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address[0] == "@":
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError as exc:
        logger.warning("Can't notify systemd (%s): %s", state.split("=")[0], exc)
        return False
    return True


def daemonize() -> None:
    """Detach from the terminal like the original (fork, setsid, stdio to /dev/null)."""
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


def atomic_write(path: str, data: str) -> None:
    """Write a file so that a crash leaves either the old or the new content."""
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dirfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def raise_fd_limit(maxclients: int) -> int:
    """Make room for ``maxclients`` descriptors; return how many clients fit."""
    wanted = maxclients + RESERVED_FDS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return maxclients
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        target = soft
    return max(1, target - RESERVED_FDS)
