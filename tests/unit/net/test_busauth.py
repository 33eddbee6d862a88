"""The bus handshake and frame MACs of disque.net.busauth, without sockets:
both ends agree on a session only when they share a secret, and a frame
altered, replayed or reordered fails its MAC."""

from __future__ import annotations

import functools
import hmac
import os
import struct

import pytest

from disque.net import busauth
from disque.net.busauth import (
    CHALLENGE_LEN,
    MAC_LEN,
    BusAuthError,
    BusKeys,
    Handshake,
    SecretConfigError,
    load_keys,
)
from disque.config import Config

SECRET = b"an old secret that is long enough"
NEW_SECRET = b"a new secret, also long enough!!"
OTHER = b"someone else's long secret text.."


@functools.cache
def stretched(secret: bytes) -> bytes:
    return busauth.stretch(secret)  # 30 ms each: once per secret


def keys(*secrets: bytes) -> BusKeys:
    return BusKeys(tuple(stretched(s) for s in secrets))


def handshake(initiator_keys: BusKeys, acceptor_keys: BusKeys):
    """Run the three messages; return both ends (their sessions set on success)."""
    initiator = Handshake(initiator_keys, initiator=True)
    acceptor = Handshake(acceptor_keys, initiator=False)
    challenge = bytearray(acceptor.start())
    assert len(challenge) == CHALLENGE_LEN and initiator.start() == b""
    consumed, hello = initiator.feed(challenge)
    assert consumed == CHALLENGE_LEN and initiator.session is None
    consumed, accept = acceptor.feed(bytearray(hello))
    assert consumed == len(hello)
    consumed, nothing = initiator.feed(bytearray(accept))
    assert consumed == len(accept) and nothing == b""
    return initiator, acceptor


def sealed(session, payload: bytes) -> bytearray:
    data = struct.pack(">I", len(payload)) + payload
    return bytearray(data + session.seal(data))


def checks(session, frame: bytearray) -> bool:
    return session.check(frame, 0, len(frame) - MAC_LEN)


def test_the_same_secret_opens_a_session_both_ways():
    initiator, acceptor = handshake(keys(SECRET), keys(SECRET))
    assert initiator.session.key == acceptor.session.key == stretched(SECRET)
    for sender, receiver in ((initiator, acceptor), (acceptor, initiator)):
        for n in range(3):
            assert checks(receiver.session, sealed(sender.session, b"frame %d" % n))


def test_a_wrong_secret_is_refused_by_either_end():
    initiator = Handshake(keys(OTHER), initiator=True)
    acceptor = Handshake(keys(SECRET), initiator=False)
    _, hello = initiator.feed(bytearray(acceptor.start()))
    with pytest.raises(BusAuthError, match="does not know the cluster secret"):
        acceptor.feed(bytearray(hello))
    assert acceptor.session is None
    # A fake acceptor that cannot prove the secret: the initiator refuses it.
    initiator = Handshake(keys(SECRET), initiator=True)
    fake = Handshake(keys(OTHER), initiator=False)
    _, hello = initiator.feed(bytearray(fake.start()))
    forged = busauth.MAGIC + bytes((busauth.VERSION, 0)) + os.urandom(busauth.PROOF_LEN)
    with pytest.raises(BusAuthError, match="does not know the cluster secret"):
        initiator.feed(bytearray(forged))
    assert initiator.session is None


def test_a_plain_peer_is_refused_from_its_first_bytes():
    acceptor = Handshake(keys(SECRET), initiator=False)
    with pytest.raises(BusAuthError, match="no cluster secret"):
        acceptor.feed(bytearray(b"\x00\x00\x00\x30"))  # a plain frame's length
    initiator = Handshake(keys(SECRET), initiator=True)
    with pytest.raises(BusAuthError, match="version 9"):
        initiator.feed(bytearray(busauth.MAGIC + b"\x09"))
    partial = Handshake(keys(SECRET), initiator=False)
    assert partial.feed(bytearray(busauth.MAGIC)) == (0, b"")  # waits for more
    with pytest.raises(BusAuthError, match="offers 3 proofs"):
        hello = busauth.MAGIC + bytes((busauth.VERSION,)) + bytes(busauth.NONCE_LEN) + b"\x03"
        partial.feed(bytearray(hello))


def two_frames():
    """A fresh session and the first two frames its initiator sealed."""
    initiator, acceptor = handshake(keys(SECRET), keys(SECRET))
    return acceptor.session, sealed(initiator.session, b"first"), sealed(initiator.session,
                                                                        b"second")


@pytest.mark.parametrize("byte", [0, 3, 4, 8, -MAC_LEN, -1])
def test_a_tampered_frame_fails(byte):
    session, first, _ = two_frames()
    first[byte] ^= 1
    assert not checks(session, first)


def test_a_replayed_reordered_or_foreign_frame_fails():
    session, first, second = two_frames()
    assert checks(session, first)
    assert not checks(session, first)  # replayed
    session, first, second = two_frames()
    assert not checks(session, second)  # reordered (or first dropped)
    _, first, _ = two_frames()
    session, _, _ = two_frames()
    assert not checks(session, first)  # from another session of the same secret


def test_a_frame_sealed_for_one_direction_fails_in_the_other():
    initiator, acceptor = handshake(keys(SECRET), keys(SECRET))
    reflected = sealed(initiator.session, b"ping")
    assert not checks(initiator.session, reflected)


@pytest.mark.parametrize("initiator_secrets, acceptor_secrets, used", [
    ((NEW_SECRET, SECRET), (SECRET,), SECRET),              # rolled node -> not yet rolled
    ((SECRET,), (NEW_SECRET, SECRET), SECRET),              # not yet rolled -> rolled
    ((NEW_SECRET, SECRET), (NEW_SECRET, SECRET), NEW_SECRET),  # both rolled: the new one
    ((NEW_SECRET,), (NEW_SECRET, SECRET), NEW_SECRET),      # old one dropped on one side
])
def test_old_and_new_secrets_during_a_roll(initiator_secrets, acceptor_secrets, used):
    initiator, acceptor = handshake(keys(*initiator_secrets), keys(*acceptor_secrets))
    assert initiator.session.key == acceptor.session.key == stretched(used)
    assert checks(acceptor.session, sealed(initiator.session, b"x"))


def test_once_the_old_secret_is_dropped_a_node_with_only_it_is_refused():
    initiator = Handshake(keys(SECRET), initiator=True)
    acceptor = Handshake(keys(NEW_SECRET), initiator=False)
    _, hello = initiator.feed(bytearray(acceptor.start()))
    with pytest.raises(BusAuthError):
        acceptor.feed(bytearray(hello))


def test_keys_from_the_directives(tmp_path, caplog):
    assert load_keys(b"", b"", "") is None
    assert load_keys(SECRET, b"", "").keys == (busauth.stretch(SECRET),)
    rolled = load_keys(NEW_SECRET, SECRET, "")
    assert rolled.keys == (busauth.stretch(NEW_SECRET), busauth.stretch(SECRET))
    assert not rolled.warnings
    assert "shorter than 16 bytes" in load_keys(b"short", b"", "").warnings[0]
    with pytest.raises(SecretConfigError, match="without cluster-secret"):
        load_keys(b"", SECRET, "")

    path = tmp_path / "secret"
    path.write_bytes(NEW_SECRET + b"\n" + SECRET + b"\n")
    os.chmod(path, 0o600)
    from_file = load_keys(b"", b"", str(path))
    assert from_file.keys == rolled.keys and not from_file.warnings
    os.chmod(path, 0o640)
    assert "chmod 600" in load_keys(b"", b"", str(path)).warnings[0]
    with pytest.raises(SecretConfigError, match="not both"):
        load_keys(SECRET, b"", str(path))
    with pytest.raises(SecretConfigError, match="already holds an old secret"):
        load_keys(b"", OTHER, str(path))
    path.write_bytes(b"\n\n")
    with pytest.raises(SecretConfigError, match="holds no secret"):
        load_keys(b"", b"", str(path))
    with pytest.raises(SecretConfigError, match="Can't read"):
        load_keys(b"", b"", str(tmp_path / "missing"))

    config = Config()
    config.cluster_secret = SECRET.decode()
    assert busauth.keys_from_config(config).keys == (busauth.stretch(SECRET),)


def test_the_frame_mac_is_truncated_hmac_sha256():
    key = bytes(range(32))
    frame = b"\x00\x00\x00\x05hello"
    expected = hmac.new(key, struct.pack(">Q", 7) + frame, "sha256").digest()[:MAC_LEN]
    assert busauth.FrameMac(key).digest(7, frame) == expected
    assert busauth.FrameMac(key).digest(7, memoryview(bytearray(frame))) == expected


def test_a_handshake_reflected_back_to_its_own_node_is_refused():
    """A relay that makes a node's outbound end handshake with its own
    listener: the HELLO carries a nonce of the node's own, and is refused."""
    own_nonces: set[bytes] = set()
    outbound = Handshake(keys(SECRET), initiator=True)
    own_nonces.add(outbound.nonce)
    listener = Handshake(keys(SECRET), initiator=False, own_nonces=own_nonces)
    _, hello = outbound.feed(bytearray(listener.start()))  # relayed both ways
    with pytest.raises(BusAuthError, match="reflected"):
        listener.feed(bytearray(hello))
    # The same exchange between two nodes passes (the check is what refused it).
    assert handshake(keys(SECRET), keys(SECRET))[1].session is not None
