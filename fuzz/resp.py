"""Fuzz target ``resp``: the client request parser (disque/protocol/request*.py,
``RequestParser.feed``).

The input is a client's byte stream, its first byte choosing how the
stream is cut into reads and the parser's bulk length limit. The only
error allowed is ProtocolError, and the server's parser must agree with
itself and with the Python parser alone: the same commands (and the same
error) whether the stream arrives in one read or cut in pieces, and from
either backend, and every command it returns parses back to itself once
encoded as a multibulk request. ``python -m fuzz.resp --runs N``.
"""

from __future__ import annotations

import sys

from fuzz.common import Target, main

SMALL_BULK_LIMIT = 64  # the parser variant with a low proto-max-bulk-len
DICTIONARY = [b"*1\r\n", b"*2\r\n", b"*3\r\n", b"$0\r\n", b"$1\r\n", b"$3\r\n", b"\r\n", b"\n",
              b"*-1\r\n", b"$-1\r\n", b"*1048577\r\n", b"$536870913\r\n", b"PING", b"ADDJOB",
              b'"', b"'", b"\\x", b"+OK\r\n", b":1\r\n", b"*0\r\n", b"$65\r\n", b"*1234567\r\n"]


def _seeds() -> list[bytes]:
    return [
        b"*1\r\n$4\r\nPING\r\n",
        b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$5\r\nhello\r\n$1\r\n0\r\n",
        b"\x07*2\r\n$6\r\nGETJOB\r\n$4\r\nFROM\r\n*1\r\n$4\r\nQLEN\r\n",
        b"\x02PING\r\nADDJOB q \"a b\\x41\" 0\r\nGETJOB FROM 'q'\n\r\n",
        b"\x81*3\r\n$3\r\nSET\r\n$70\r\n" + b"x" * 70 + b"\r\n$1\r\n1\r\n",
        b"\x05" + b"*2\r\n$1\r\na\r\n$1\r\nb\r\n" * 20,
        b"\x03*1\r\n$4\r\nPI",
        b"*1234567\r\n$1\r\nx\r\n",
        b"*1\r\n:1\r\n",
        b"*2\r\n*1\r\n$1\r\na\r\n$1\r\nb\r\n",
        b"\x00\"unbalanced\r\n",
        b"*3\r\n$1\r\na\r\n+status\r\n$1\r\nb\r\n",
    ]


def build() -> Target:
    """The RESP request parser as a fuzz target."""
    from disque.protocol.request import ProtocolError, RequestParser
    from disque.protocol.request_hiredis import HiredisRequestParser
    from disque.protocol.request_python import PythonRequestParser
    from disque.protocol.resp import encode

    def parse(parser: RequestParser, data: bytes, cuts: list[int]) -> tuple[list, str | None]:
        commands: list = []
        start = 0
        try:
            for end in cuts + [len(data)]:
                if end > start:
                    parser.feed(data[start:end], commands)
                    start = end
        except ProtocolError as exc:
            return commands, str(exc)
        return commands, None

    def one_input(data: bytes) -> None:
        if not data:
            return
        mode, stream = data[0], data[1:]
        max_bulk_len = SMALL_BULK_LIMIT if mode & 0x80 else 512 * 1024 * 1024
        whole, error = parse(HiredisRequestParser(max_bulk_len), stream, [])
        step = 1 + (mode & 0x0F)
        cuts = list(range(step, len(stream), step)) if mode & 0x40 == 0 else (
            [len(stream) // 2] if len(stream) > 1 else [])
        pieces, pieces_error = parse(HiredisRequestParser(max_bulk_len), stream, cuts)
        for command in whole:
            if type(command) is not list or not command or any(type(a) is not bytes
                                                              for a in command):
                raise AssertionError("not a command: %r" % (command,))
        if (whole, error) != (pieces, pieces_error):
            raise AssertionError("one read gives %r %r, reads of %r give %r %r"
                                 % (whole, error, cuts, pieces, pieces_error))
        python = parse(PythonRequestParser(max_bulk_len), stream, cuts)
        if python != (whole, error):
            raise AssertionError("hiredis backend gives %r %r, the Python parser %r %r"
                                 % (whole, error, *python))
        if whole:
            encoded = encode(whole).split(b"\r\n", 1)[1]
            again, again_error = parse(HiredisRequestParser(1 << 62), encoded, [])
            if (again, again_error) != (whole, None):
                raise AssertionError("%r encoded parses back as %r %r"
                                     % (whole, again, again_error))

    return Target("resp", one_input, _seeds, max_len=4096, dictionary=DICTIONARY)


if __name__ == "__main__":
    sys.exit(main(build))
