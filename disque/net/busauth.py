"""Authentication of the cluster bus with a shared secret (docs/security.md).

With ``cluster-secret`` (or ``cluster-secret-file``) set, a bus link is
usable only once both ends proved they know the secret, and every frame
afterwards carries a MAC checked before it is decoded. Without a secret
none of this runs and the bus is byte for byte the original's.

The handshake (the side that accepted the connection is A, the side that
opened it is I; ``|`` is concatenation)::

    A -> I  CHALLENGE  MAGIC | version | nonce_a (32)
    I -> A  HELLO      MAGIC | version | nonce_i (32) | n (1) | proof_1 ... proof_n
    A -> I  ACCEPT     MAGIC | version | index (1) | proof_a

    proof_k = HMAC(key_k, "disque bus initiator" | nonce_a | nonce_i)
    proof_a = HMAC(key, "disque bus acceptor" | nonce_a | nonce_i)

``key_k`` are I's keys (its secret, then the old secret it still accepts
during a roll), each stretched with PBKDF2 so a proof seen by a fake peer
is slow to guess a weak secret from. A checks the proofs in order against
its own keys; the first that matches is the link's ``key`` (``index``
says which). A rejects by closing the connection. Session keys, one per
direction, come from ``key`` and both nonces (HKDF-SHA256). A frame is
then ``length | payload | MAC``: the length prefix counts the payload only;
the MAC is the first 16 bytes of HMAC-SHA256(direction key, sequence |
length | payload), the sequence counting that direction's frames from 0,
so a dropped, replayed, reordered or altered frame fails.

MAGIC starts with 0xFF: a node without a secret reads it as a 4 GB length
and drops the link at once.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import struct
from collections.abc import Container
from typing import TYPE_CHECKING

from disque.config.values import encode

if TYPE_CHECKING:
    from disque.config import Config

MAGIC = b"\xffDQB"
VERSION = 1
NONCE_LEN = 32
PROOF_LEN = 32
MAC_LEN = 16
MAX_KEYS = 2  # the secret and, during a roll, the old one
CHALLENGE_LEN = len(MAGIC) + 1 + NONCE_LEN
HELLO_FIXED_LEN = len(MAGIC) + 1 + NONCE_LEN + 1
ACCEPT_LEN = len(MAGIC) + 1 + 1 + PROOF_LEN
INITIATOR_LABEL = b"disque bus initiator"
ACCEPTOR_LABEL = b"disque bus acceptor"
KEY_I2A_INFO = b"disque bus frames initiator to acceptor"
KEY_A2I_INFO = b"disque bus frames acceptor to initiator"
KDF_SALT = b"disque cluster-secret v1"
KDF_ITERATIONS = 100_000  # about 30 ms per secret, once at start or CONFIG SET
SHORT_SECRET = 16  # bytes; shorter secrets get a warning
SHA256_BLOCK = 64
_SEQUENCE = struct.Struct(">Q")


class BusAuthError(Exception):
    """A handshake that failed: wrong secret, wrong version or garbage."""


class SecretConfigError(Exception):
    """The secret directives cannot be used (unreadable file, both forms set)."""


def stretch(secret: bytes) -> bytes:
    """The key a secret stands for in the handshake."""
    return hashlib.pbkdf2_hmac("sha256", secret, KDF_SALT, KDF_ITERATIONS)


class BusKeys:
    """The stretched secrets of this node: the one it proves with first,
    then one more it still accepts while a secret is rolled. (A plain class:
    a dataclass costs a node about 1 ms at start-up to generate its methods.)"""

    __slots__ = ("keys", "warnings")

    def __init__(self, keys: tuple[bytes, ...], warnings: tuple[str, ...] = ()) -> None:
        self.keys = keys
        self.warnings = warnings


def read_secret_file(path: str) -> tuple[list[bytes], list[str]]:
    """The secrets in ``path`` (first line the secret, an optional second line
    the old one; blank lines and surrounding whitespace ignored) and warnings
    about the file's permissions."""
    warnings = []
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            data = f.read(64 * 1024)
    except OSError as exc:
        raise SecretConfigError("Can't read cluster-secret-file %s: %s" % (
            path, exc.strerror or exc)) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        warnings.append("cluster-secret-file %s can be read by other users (mode %o): make it "
                        "readable by its owner only (chmod 600)" % (path, mode & 0o777))
    lines = [line.strip() for line in data.splitlines()]
    found = [line for line in lines if line]
    if not found:
        raise SecretConfigError("cluster-secret-file %s holds no secret" % path)
    if len(found) > MAX_KEYS:
        raise SecretConfigError("cluster-secret-file %s holds %d secrets: at most %d (the "
                                "secret, then the old one during a roll)" % (
                                    path, len(found), MAX_KEYS))
    return found, warnings


def load_keys(secret: bytes, old_secret: bytes, secret_file: str) -> BusKeys | None:
    """The node's bus keys from its directives (None: the bus is not authenticated)."""
    warnings: list[str] = []
    if secret_file:
        if secret:
            raise SecretConfigError("Set cluster-secret or cluster-secret-file, not both")
        found, warnings = read_secret_file(secret_file)
    else:
        found = [secret] if secret else []
    if not found:
        if old_secret:
            raise SecretConfigError("cluster-secret-old is set without cluster-secret")
        return None
    if old_secret:
        if len(found) == MAX_KEYS:
            raise SecretConfigError("cluster-secret-old is set and cluster-secret-file already "
                                    "holds an old secret")
        found.append(old_secret)
    if any(len(s) < SHORT_SECRET for s in found):
        warnings.append("The cluster secret is shorter than %d bytes: use a long random one "
                        "(e.g. openssl rand -hex 32)" % SHORT_SECRET)
    unique = list(dict.fromkeys(found))
    return BusKeys(tuple(stretch(s) for s in unique), tuple(warnings))


def keys_from_config(config: Config) -> BusKeys | None:
    """``load_keys`` with the values of the secret directives."""
    return load_keys(encode(config.cluster_secret), encode(config.cluster_secret_old),
                     config.cluster_secret_file)


def _hkdf(key: bytes, salt: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) for one 32-byte output."""
    prk = hmac.digest(salt, key, "sha256")
    return hmac.digest(prk, info + b"\x01", "sha256")


class FrameMac:
    """HMAC-SHA256 with one key, computed as RFC 2104 defines it from two
    precomputed SHA-256 states: ``hmac.HMAC.copy`` goes through Python-level
    wrappers, these are all C calls (0.75 vs 1.2 µs for a 300-byte frame)."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        block = key.ljust(SHA256_BLOCK, b"\0")  # keys are 32 bytes: never hashed first
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))

    def digest(self, sequence: int, frame: bytes | memoryview) -> bytes:
        """The truncated MAC of ``frame`` as the ``sequence``-th frame."""
        inner = self._inner.copy()
        inner.update(_SEQUENCE.pack(sequence))
        inner.update(frame)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()[:MAC_LEN]


class Session:
    """The MAC keys and frame sequences of one authenticated link."""

    __slots__ = ("key", "_send", "_recv", "_send_seq", "_recv_seq")
    mac_len = MAC_LEN  # the bytes after each frame

    def __init__(self, key: bytes, nonce_a: bytes, nonce_i: bytes, initiator: bool) -> None:
        self.key = key  # the stretched secret the link was opened with
        salt = nonce_a + nonce_i
        i2a = FrameMac(_hkdf(key, salt, KEY_I2A_INFO))
        a2i = FrameMac(_hkdf(key, salt, KEY_A2I_INFO))
        self._send, self._recv = (i2a, a2i) if initiator else (a2i, i2a)
        self._send_seq = 0
        self._recv_seq = 0

    def seal(self, frame: bytes) -> bytes:
        """The MAC to send after ``frame`` (its length prefix and payload)."""
        mac = self._send.digest(self._send_seq, frame)
        self._send_seq += 1
        return mac

    def check(self, buffer: bytearray, start: int, end: int) -> bool:
        """True when ``buffer[end:end + MAC_LEN]`` is the MAC of the next frame,
        ``buffer[start:end]``."""
        # A temporary view: released before the buffer is resized.
        mac = self._recv.digest(self._recv_seq, memoryview(buffer)[start:end])
        self._recv_seq += 1
        return hmac.compare_digest(mac, buffer[end:end + MAC_LEN])


def _proof(key: bytes, label: bytes, nonce_a: bytes, nonce_i: bytes) -> bytes:
    return hmac.digest(key, label + nonce_a + nonce_i, "sha256")


def _check_preamble(data: bytes | bytearray) -> None:
    if data[:len(MAGIC)] != MAGIC:
        raise BusAuthError("the peer does not speak the authenticated bus (no cluster secret?)")
    if data[len(MAGIC)] != VERSION:
        raise BusAuthError("bus handshake version %d, expected %d" % (data[len(MAGIC)], VERSION))


class Handshake:
    """One end of a link's handshake, fed what the peer sent.

    ``feed`` consumes complete handshake messages from the front of the
    buffer and gives back what to send; ``session`` is set once the peer
    proved it knows a secret this node accepts. Nonces come from
    ``secrets.token_bytes`` unless given (tests).

    An acceptor is given the nonces of this node's own handshakes under way
    as initiator (``own_nonces``): a HELLO carrying one is this node's own,
    reflected back to it by a peer that relays between its two ends (it
    would otherwise pass, and the node would talk to itself through the
    relay, which reads along).
    """

    def __init__(self, keys: BusKeys, initiator: bool, nonce: bytes | None = None,
                 own_nonces: Container[bytes] = ()) -> None:
        self.keys = keys.keys
        self.initiator = initiator
        self.nonce = nonce if nonce is not None else secrets.token_bytes(NONCE_LEN)
        self.own_nonces = own_nonces
        self.peer_nonce = b""
        self.session: Session | None = None

    def start(self) -> bytes:
        """What this end sends first: the acceptor's challenge (nothing for the initiator)."""
        if self.initiator:
            return b""
        return MAGIC + bytes((VERSION,)) + self.nonce

    def feed(self, data: bytearray) -> tuple[int, bytes]:
        """(bytes consumed, bytes to send); raises BusAuthError."""
        if self.session is not None:
            return 0, b""
        if self.initiator:
            return self._feed_initiator(data)
        return self._feed_acceptor(data)

    def _feed_initiator(self, data: bytearray) -> tuple[int, bytes]:
        if not self.peer_nonce:
            if len(data) < CHALLENGE_LEN:
                self._early_check(data)
                return 0, b""
            _check_preamble(data)
            self.peer_nonce = bytes(data[len(MAGIC) + 1:CHALLENGE_LEN])
            proofs = [_proof(k, INITIATOR_LABEL, self.peer_nonce, self.nonce) for k in self.keys]
            hello = (MAGIC + bytes((VERSION,)) + self.nonce + bytes((len(proofs),))
                     + b"".join(proofs))
            consumed, more = self._feed_initiator_accept(data, CHALLENGE_LEN)
            return consumed, hello + more
        return self._feed_initiator_accept(data, 0)

    def _feed_initiator_accept(self, data: bytearray, start: int) -> tuple[int, bytes]:
        if len(data) - start < ACCEPT_LEN:
            self._early_check(data[start:])
            return start, b""
        message = bytes(data[start:start + ACCEPT_LEN])
        _check_preamble(message)
        index = message[len(MAGIC) + 1]
        if index >= len(self.keys):
            raise BusAuthError("the peer picked secret %d of %d" % (index, len(self.keys)))
        key = self.keys[index]
        expected = _proof(key, ACCEPTOR_LABEL, self.peer_nonce, self.nonce)
        if not hmac.compare_digest(expected, message[len(MAGIC) + 2:]):
            raise BusAuthError("the peer does not know the cluster secret")
        self.session = Session(key, self.peer_nonce, self.nonce, initiator=True)
        return start + ACCEPT_LEN, b""

    def _feed_acceptor(self, data: bytearray) -> tuple[int, bytes]:
        if len(data) < HELLO_FIXED_LEN:
            self._early_check(data)
            return 0, b""
        _check_preamble(data)
        count = data[HELLO_FIXED_LEN - 1]
        if not 1 <= count <= MAX_KEYS:
            raise BusAuthError("the peer offers %d proofs" % count)
        size = HELLO_FIXED_LEN + count * PROOF_LEN
        if len(data) < size:
            return 0, b""
        message = bytes(data[:size])
        self.peer_nonce = message[len(MAGIC) + 1:len(MAGIC) + 1 + NONCE_LEN]
        if self.peer_nonce in self.own_nonces:
            raise BusAuthError("the peer reflected this node's own handshake")
        for index in range(count):
            offered = message[HELLO_FIXED_LEN + index * PROOF_LEN:
                              HELLO_FIXED_LEN + (index + 1) * PROOF_LEN]
            for key in self.keys:
                expected = _proof(key, INITIATOR_LABEL, self.nonce, self.peer_nonce)
                if hmac.compare_digest(expected, offered):
                    self.session = Session(key, self.nonce, self.peer_nonce, initiator=False)
                    accept = (MAGIC + bytes((VERSION, index))
                              + _proof(key, ACCEPTOR_LABEL, self.nonce, self.peer_nonce))
                    return size, accept
        raise BusAuthError("the peer does not know the cluster secret")

    @staticmethod
    def _early_check(data: bytes | bytearray) -> None:
        """Refuse a peer whose first bytes already show it speaks something else."""
        prefix = bytes(data[:len(MAGIC) + 1])
        expected = (MAGIC + bytes((VERSION,)))[:len(prefix)]
        if prefix[:len(MAGIC)] != expected[:len(MAGIC)]:
            raise BusAuthError("the peer does not speak the authenticated bus (no cluster "
                               "secret?)")
        if prefix != expected:
            raise BusAuthError("bus handshake version %d, expected %d" % (prefix[-1], VERSION))
