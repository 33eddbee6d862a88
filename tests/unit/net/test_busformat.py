"""The bus format a link agrees on as it opens (disque/net/busformat.py):
the highest both ends speak, format 1 with a version from before the
agreement, and a refusal when they share none. The state machines of both
ends are driven here by hand; the loopback tests at the end run them
through the real bus."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct

import msgpack
import pytest

from disque.cluster.wire import BUS_FORMATS
from disque.net.busformat import FormatRefused, LinkFormat
from tests.unit.net.test_bus_links import (A_ID, B_ID, bus_port, linked, make_bus, run, until)

HEADER = {"v": 1, "sender": b"a" * 40, "port": 7711, "flags": 0}


def agree(initiator: LinkFormat, acceptor: LinkFormat) -> list[dict]:
    """Run the agreement to its end; the fields of each frame sent, in order."""
    sent = [initiator.hello()]
    reply = acceptor.on_frame({**HEADER, **sent[-1]})
    assert reply is not None
    sent.append(reply)
    switch = initiator.on_frame({**HEADER, **reply})
    assert switch is not None
    sent.append(switch)
    assert acceptor.on_frame({**HEADER, **switch}) is None
    return sent


def test_two_nodes_of_this_version_agree_on_its_highest_format() -> None:
    initiator, acceptor = LinkFormat(True), LinkFormat(False)
    assert initiator.pending and acceptor.pending
    top = max(BUS_FORMATS)
    assert agree(initiator, acceptor) == [{"formats": list(BUS_FORMATS)},
                                          {"formats": list(BUS_FORMATS), "format": top},
                                          {"format": top}]
    for end in (initiator, acceptor):
        assert (end.sending, end.reading, end.versioned, end.pending) == (top, top, True, False)


def test_the_highest_common_format_is_used_each_way_from_its_own_frame() -> None:
    initiator, acceptor = LinkFormat(True, (1, 2)), LinkFormat(False, (1, 2, 3))
    reply = acceptor.on_frame({**HEADER, **initiator.hello()})
    assert reply == {"formats": [1, 2, 3], "format": 2}
    # The acceptor writes format 2 from now on; it reads format 1 until the
    # initiator's switch, which follows whatever the initiator sent meanwhile.
    assert (acceptor.sending, acceptor.reading, acceptor.pending) == (2, 1, True)
    assert acceptor.on_frame(HEADER) is None and acceptor.reading == 1
    assert initiator.on_frame({**HEADER, **reply}) == {"format": 2}
    assert (initiator.sending, initiator.reading, initiator.pending) == (2, 2, False)
    assert acceptor.on_frame({**HEADER, "format": 2}) is None
    assert (acceptor.reading, acceptor.pending) == (2, False)


def test_a_peer_from_before_the_agreement_is_spoken_to_in_format_1() -> None:
    # Its first frame names no formats: it accepted the link (its PONG) or opened it.
    for initiator in (True, False):
        end = LinkFormat(initiator, (1, 2))
        assert end.on_frame({**HEADER}) is None
        assert (end.sending, end.reading, end.versioned, end.pending) == (1, 1, False, False)


def test_a_peer_sharing_no_format_is_refused_and_told_ours() -> None:
    acceptor = LinkFormat(False, (1,))
    with pytest.raises(FormatRefused) as refused:
        acceptor.on_frame({**HEADER, "formats": [7, 8]})
    assert refused.value.reason == "it speaks bus formats 7, 8, this node 1"
    assert refused.value.reply == {"formats": [1]}  # so that the initiator can say why too
    initiator = LinkFormat(True, (1,))
    with pytest.raises(FormatRefused, match="it speaks bus formats 7, this node 1") as refused:
        initiator.on_frame({**HEADER, "formats": [7]})
    assert refused.value.reply is None


def test_a_version_without_format_1_refuses_a_peer_that_names_none() -> None:
    with pytest.raises(FormatRefused, match="it speaks bus formats 1, this node 2, 3"):
        LinkFormat(False, (2, 3)).on_frame(HEADER)


@pytest.mark.parametrize("formats", ["1", [b"1"], [1.0], {"1": 1}, []])
def test_formats_that_are_not_a_list_of_integers_share_none(formats) -> None:
    with pytest.raises(FormatRefused, match="it speaks bus formats"):
        LinkFormat(False, (1,)).on_frame({**HEADER, "formats": formats})


def test_a_peer_that_breaks_the_agreement_is_refused() -> None:
    initiator = LinkFormat(True, (1, 2))
    with pytest.raises(FormatRefused, match="it chose bus format 1, not 2"):
        initiator.on_frame({**HEADER, "formats": [1, 2], "format": 1})
    acceptor = LinkFormat(False, (1, 2))
    acceptor.on_frame({**HEADER, "formats": [1, 2]})
    with pytest.raises(FormatRefused, match="it switched to bus format 3, not the agreed 2"):
        acceptor.on_frame({**HEADER, "format": 3})


def test_a_first_frame_without_a_header_map_counts_as_one_naming_no_formats() -> None:
    end = LinkFormat(False, (1,))
    assert end.on_frame(None) is None and not end.pending and not end.versioned


# ------------------------------------------------- through the real bus


def test_linked_buses_settle_on_a_common_format_and_count_it():
    async def test(loop):
        a, b = await linked(loop, None, None)
        await until(lambda: not b.outbound[A_ID].link_format.pending
                    and a.inbound and not next(iter(a.inbound)).link_format.pending,
                    "both ends agreed")
        top = max(BUS_FORMATS)
        assert a.link_formats() == ({top: 1}, 0) and b.link_formats() == ({top: 1}, 0)
        assert a.format_refusals == b.format_refusals == 0
        a.shutdown()
        b.shutdown()
    run(test)


def test_a_node_of_an_unknown_format_is_refused_on_both_sides(caplog):
    async def test(loop):
        a = await make_bus(loop, A_ID, None)
        a.formats = (7,)  # a later version that no longer speaks format 1
        b = await make_bus(loop, B_ID, None)
        with caplog.at_level(logging.WARNING, logger="disque"):
            b.connect(A_ID, "127.0.0.1", bus_port(a))
            await until(lambda: a.format_refusals and b.format_refusals, "both refused")
        assert b.node.down == [A_ID] or not b.outbound
        ours = ", ".join(map(str, BUS_FORMATS))
        assert ("Bus link from 127.0.0.1 refused: it speaks bus formats %s, this node 7" % ours
                in caplog.text)
        assert ("Bus link to 127.0.0.1 refused: it speaks bus formats 7, this node %s" % ours
                in caplog.text)
        a.shutdown()
        b.shutdown()
    run(test)


def hello_frame(fields: dict) -> bytes:
    payload = msgpack.packb([{**HEADER, **fields}])
    return struct.pack(">I", len(payload)) + payload


def test_refusals_are_counted_each_and_logged_at_most_once_a_second(caplog):
    """A peer announcing only a format from the future, as raw bytes: it reads
    the node's formats back, then the link closes; its retries are counted,
    not each logged."""
    async def test(loop):
        a = await make_bus(loop, A_ID, None)
        with caplog.at_level(logging.WARNING, logger="disque"):
            for attempt in range(3):
                sock = socket.create_connection(("127.0.0.1", bus_port(a)))
                sock.setblocking(False)
                await loop.sock_sendall(sock, hello_frame({"formats": [99]}))
                received = b""
                while chunk := await asyncio.wait_for(loop.sock_recv(sock, 4096), 5):
                    received += chunk
                sock.close()
                size = struct.unpack(">I", received[:4])[0]
                assert len(received) == 4 + size  # the hello, then the close
                reply = msgpack.unpackb(received[4:], raw=False)
                assert reply[0]["formats"] == list(BUS_FORMATS) and "format" not in reply[0]
        assert a.format_refusals == 3 and a.node.frames == []
        lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert lines == ["Bus link from 127.0.0.1 refused: it speaks bus formats 99, this node "
                         "%s, so the two versions cannot talk (docs/operations.md, \"Upgrading "
                         "a cluster\")" % ", ".join(map(str, BUS_FORMATS))]
        a.shutdown()
    run(test)
