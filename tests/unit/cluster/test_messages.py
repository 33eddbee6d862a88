"""Bus message validation (disque/cluster/messages.py).

A frame's header passes through ``header_problem`` and each of its
messages through ``body_problem`` before a handler sees it (``problem``
below checks a message that carries both), so each header field and body field
of any type must be rejected cleanly, including values msgpack can decode
but Python cannot hash.
"""

from __future__ import annotations

import pytest

from disque.cluster import messages as m

SENDER = b"357e57931d14b67cd18a9f63b0982d265df88424"
JOB_ID = b"D-357e5793-X6qaUhTfkSeJMRcVbf2Z61TI-05a1"


def problem(msg) -> str | None:
    return m.header_problem(msg) or m.body_problem(msg)


def gotjob(**changes) -> dict:
    msg = {m.VERSION: 1, m.TYPE: m.GOTJOB, m.SENDER: SENDER, m.PORT: 7711, m.FLAGS: 0,
           m.ID: JOB_ID}
    msg.update(changes)
    return msg


def test_a_well_formed_message_passes():
    assert problem(gotjob()) is None
    assert problem(gotjob(bport=17711, mflags=1)) is None


@pytest.mark.parametrize("changes, expected", [
    ({m.VERSION: 2}, "unsupported bus protocol version 2"),
    ({m.TYPE: "NOPE"}, "unknown message type 'NOPE'"),
    ({m.TYPE: {"a": 1}}, "unknown message type {'a': 1}"),
    ({m.SENDER: {"a": 1}}, "bad sender"),
    ({m.SENDER: [1]}, "bad sender"),
    ({m.SENDER: b"z" * 40}, "bad sender"),
    ({m.SENDER: SENDER.decode()}, "bad sender"),
    ({m.PORT: -1}, "bad port"),
    ({m.PORT: 65536}, "bad port"),
    ({m.PORT: True}, "bad port"),
    ({m.PORT: "7711"}, "bad port"),
    ({m.FLAGS: 1.5}, "bad flags"),
    ({m.MFLAGS: None}, "bad flags"),
    ({m.BPORT: 1 << 16}, "bad bus port"),
    ({m.BPORT: -5}, "bad bus port"),
    ({m.TPORT: 1 << 16}, "bad TLS port"),
    ({m.TPORT: "7711"}, "bad TLS port"),
    ({m.ID: b"x" * 40}, "bad id"),
    ({m.ID: {"a": 1}}, "bad id"),
])
def test_each_bad_field_is_named(changes, expected):
    assert problem(gotjob(**changes)) == expected


def test_body_schemas_of_every_type_are_checked():
    base = {m.VERSION: 1, m.SENDER: SENDER, m.PORT: 7711}
    for kind, schema in m.BODY_SCHEMAS.items():
        msg = dict(base, type=kind)
        expected = "bad %s" % next(iter(schema)) if schema else None  # STATSWANT has no field
        assert problem(msg) == expected, kind


def test_not_a_map():
    assert problem([1, 2]) == "not a map"


def test_header_and_body_are_checked_separately():
    header = {m.VERSION: 1, m.SENDER: SENDER, m.PORT: 7711, m.FLAGS: 0}
    body = {m.TYPE: m.GOTJOB, m.ID: JOB_ID}
    assert m.header_problem(header) is None and m.body_problem(body) is None
    assert m.header_problem(body) == "unsupported bus protocol version None"
    assert m.body_problem(header) == "unknown message type None"
    assert m.header_problem(dict(header, sender=b"z" * 40)) == "bad sender"
    assert m.body_problem(dict(body, mflags="x")) == "bad flags"
    assert m.body_problem(None) == m.header_problem(None) == "not a map"


VALID_FIELD = {"job id": JOB_ID, "node id": SENDER, list: [], int: 0, bytes: b"q"}
INVALID_FIELD = {"job id": b"x" * 40, "node id": b"z" * 40, list: {}, int: "0", bytes: 1}


@pytest.mark.parametrize("kind", sorted(m.BODY_SCHEMAS))
def test_every_field_of_every_type_is_checked(kind):
    """Types with a dedicated validator (the per-job ones) reject exactly
    what their schema rejects."""
    schema = m.BODY_SCHEMAS[kind]
    body = {m.TYPE: kind, **{key: VALID_FIELD[what] for key, what in schema.items()}}
    assert m.body_problem(body) is None
    for key, what in schema.items():
        assert m.body_problem(dict(body, **{key: INVALID_FIELD[what]})) == "bad %s" % key
        assert m.body_problem(dict(body, **{key: {"a": 1}})) == "bad %s" % key
