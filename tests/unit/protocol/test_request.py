"""Tests for disque/protocol/request*.py: request parsing (spec: commands.md §0,
reference-transcripts.md §1.5). Every test runs against both backends, the
server's (hiredis and the Python parser) and the Python parser alone: they
must give the same commands and the same error texts."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disque.protocol.request import (
    ARG_OVERHEAD,
    DEFAULT_MAX_BULK_LEN,
    MAX_INLINE_SIZE,
    MAX_MULTIBULK_COUNT,
    ProtocolError,
    RequestParser,
)
from disque.protocol.request_hiredis import HiredisRequestParser
from disque.protocol.request_python import BIG_BULK, PythonRequestParser

pytestmark = pytest.mark.parametrize("make", [HiredisRequestParser, PythonRequestParser],
                                     ids=["hiredis", "python"])


def parse(data: bytes, parser: RequestParser) -> list:
    commands: list = []
    parser.feed(data, commands)
    return commands


def protocol_error(data: bytes, parser: RequestParser) -> tuple[str, list]:
    """Feed ``data``; it must raise ProtocolError. Returns (message, commands before it)."""
    commands: list = []
    with pytest.raises(ProtocolError) as info:
        parser.feed(data, commands)
    return str(info.value), commands


def multibulk(*args: bytes) -> bytes:
    out = b"*%d\r\n" % len(args)
    for arg in args:
        out += b"$%d\r\n%b\r\n" % (len(arg), arg)
    return out


# ------------------------------------------------------------ protocol errors

class TestProtocolErrors:
    """Every protocol error text of commands.md §0, exactly."""

    @pytest.mark.parametrize("data", [
        b"*x\r\n", b"*\r\n", b"*01\r\n", b"*+1\r\n", b"*1x\r\n", b"* 1\r\n",
        b"*%d\r\n" % (MAX_MULTIBULK_COUNT + 1), b"*99999999999999999999999\r\n",
    ])
    def test_invalid_multibulk_length(self, make, data):
        message, _ = protocol_error(data, make())
        assert message == "Protocol error: invalid multibulk length"

    def test_largest_multibulk_count_is_accepted(self, make):
        parser = make()
        assert parse(b"*%d\r\n$1\r\na\r\n" % MAX_MULTIBULK_COUNT, parser) == []
        assert parser.buffered() == 0  # the header and one argument are consumed

    def test_too_many_elements_rejected_even_when_complete(self, make):
        data = b"*%d\r\n" % (MAX_MULTIBULK_COUNT + 1) + b"$0\r\n\r\n" * (MAX_MULTIBULK_COUNT + 1)
        message, _ = protocol_error(data, make())
        assert message == "Protocol error: invalid multibulk length"

    @pytest.mark.parametrize("data", [
        b"*1\r\n$-3\r\n", b"*1\r\n$-1\r\n", b"*1\r\n$x\r\n", b"*1\r\n$\r\n", b"*1\r\n$04\r\n",
        b"*1\r\n$+4\r\n", b"*1\r\n$%d\r\n" % (DEFAULT_MAX_BULK_LEN + 1),
    ])
    def test_invalid_bulk_length(self, make, data):
        message, _ = protocol_error(data, make())
        assert message == "Protocol error: invalid bulk length"

    def test_bulk_length_limit_is_configurable(self, make):
        parser = make(max_bulk_len=10)
        assert parse(multibulk(b"a" * 10), parser) == [[b"a" * 10]]
        message, _ = protocol_error(multibulk(b"a" * 11), parser)
        assert message == "Protocol error: invalid bulk length"

    @pytest.mark.parametrize("pipelined", [False, True])
    def test_bulk_length_limit_set_on_an_open_connection(self, make, pipelined):
        """CONFIG SET proto-max-bulk-len sets it on every client's parser: a
        command alone in its read and one in a pipeline both obey the new value."""
        parser = make()
        assert parse(multibulk(b"a" * 11), parser) == [[b"a" * 11]]
        parser.max_bulk_len = 10
        assert parser.max_bulk_len == 10
        before = multibulk(b"PING") if pipelined else b""
        assert parse(before + multibulk(b"a" * 10), parser) == [[b"PING"]] * pipelined + [
            [b"a" * 10]]
        message, _ = protocol_error(before + multibulk(b"a" * 11), parser)
        assert message == "Protocol error: invalid bulk length"

    def test_huge_bulk_rejected_before_buffering(self, make):
        parser = make(max_bulk_len=1024)
        message, _ = protocol_error(b"*1\r\n$1025\r\n", parser)
        assert message == "Protocol error: invalid bulk length"
        # With the default limit the header alone is rejected: nothing is kept.
        message, _ = protocol_error(b"*2\r\n$4\r\nPING\r\n$%d\r\n" % (DEFAULT_MAX_BULK_LEN + 1),
                                    make())
        assert message == "Protocol error: invalid bulk length"

    def test_large_accepted_bulk_is_buffered_until_complete(self, make):
        parser = make()
        commands: list = []
        parser.feed(b"*1\r\n$100000\r\n", commands)
        for _ in range(99):
            parser.feed(b"x" * 1000, commands)
        assert commands == []
        assert parser.buffered() > 0
        parser.feed(b"x" * 1000 + b"\r\n", commands)
        assert commands == [[b"x" * 100000]]
        assert parser.buffered() == 0

    @pytest.mark.parametrize("data, char", [
        (b"*1\r\nPING\r\n", "P"), (b"*2\r\n$1\r\na\r\n:1\r\n", ":"),
        (b"*1\r\n*1\r\n$1\r\na\r\n", "*"),
        (b"*1\r\n+OK\r\n", "+"),
    ])
    def test_expected_dollar(self, make, data, char):
        message, _ = protocol_error(data, make())
        assert message == "Protocol error: expected '$', got '%s'" % char

    def test_too_big_mbulk_count_string(self, make):
        message, _ = protocol_error(b"*" + b"1" * (MAX_INLINE_SIZE + 1), make())
        assert message == "Protocol error: too big mbulk count string"

    def test_long_but_allowed_count_line_is_kept(self, make):
        parser = make()
        assert parse(b"*" + b"1" * 100, parser) == []

    def test_too_big_bulk_count_string(self, make):
        message, _ = protocol_error(b"*1\r\n$" + b"1" * (MAX_INLINE_SIZE + 1), make())
        assert message == "Protocol error: too big bulk count string"

    def test_too_big_inline_request(self, make):
        message, _ = protocol_error(b"A" * (MAX_INLINE_SIZE + 1), make())
        assert message == "Protocol error: too big inline request"

    def test_too_big_inline_request_across_reads(self, make):
        parser = make()
        commands: list = []
        parser.feed(b"A" * MAX_INLINE_SIZE, commands)
        with pytest.raises(ProtocolError, match="too big inline request"):
            parser.feed(b"A" * 10, commands)

    @pytest.mark.parametrize("line", [
        b'PING "unbalanced\r\n', b"PING 'x\r\n", b'SET "a"b\r\n', b"SET 'a'b\r\n", b'"\r\n',
    ])
    def test_unbalanced_quotes(self, make, line):
        message, _ = protocol_error(line, make())
        assert message == "Protocol error: unbalanced quotes in request"

    def test_commands_before_the_error_are_returned(self, make):
        data = b"PING\r\n" + multibulk(b"ECHO", b"x") + b"*x\r\n"
        message, commands = protocol_error(data, make())
        assert message == "Protocol error: invalid multibulk length"
        assert commands == [[b"PING"], [b"ECHO", b"x"]]


# --------------------------------------------------------------- inline form

class TestInline:
    def test_simple(self, make):
        assert parse(b"PING\r\n", make()) == [[b"PING"]]
        assert parse(b"ADDJOB inlq inlinebody 0\r\n", make()) == [
            [b"ADDJOB", b"inlq", b"inlinebody", b"0"]]

    def test_bare_newline_terminator(self, make):
        assert parse(b"PING\nPING x\n", make()) == [[b"PING"], [b"PING", b"x"]]

    def test_extra_whitespace(self, make):
        assert parse(b"  PING \t  a   b  \r\n", make()) == [[b"PING", b"a", b"b"]]

    def test_double_quotes_and_escapes(self, make):
        assert parse(b'SET "hello world" "a\\nb\\tc\\x41\\"q"\r\n', make()) == [
            [b"SET", b"hello world", b"a\nb\tcA\"q"]]

    def test_single_quotes(self, make):
        assert parse(b"SET 'it\\'s' 'a\\nb'\r\n", make()) == [[b"SET", b"it's", b"a\\nb"]]

    def test_empty_quoted_argument(self, make):
        assert parse(b'ADDJOB "" "" 0\r\n', make()) == [[b"ADDJOB", b"", b"", b"0"]]

    def test_incomplete_line_waits(self, make):
        parser = make()
        assert parse(b"PIN", parser) == []
        assert parser.buffered() == 3
        assert parse(b"G\r\n", parser) == [[b"PING"]]

    def test_empty_lines_ignored(self, make):
        assert parse(b"\r\n", make()) == []
        assert parse(b"\r\n\n   \r\nPING\r\n", make()) == [[b"PING"]]


class TestIgnoredAndMixed:
    def test_empty_and_null_multibulk_ignored(self, make):
        assert parse(b"*0\r\n", make()) == []
        assert parse(b"*-1\r\n", make()) == []
        assert parse(b"*0\r\n*-1\r\n" + multibulk(b"PING"), make()) == [[b"PING"]]

    def test_mixed_inline_and_multibulk_pipeline(self, make):
        data = b"PING\r\nPING\r\n*1\r\n$4\r\nPING\r\n"
        assert parse(data, make()) == [[b"PING"]] * 3
        data = multibulk(b"A") + b"B c\r\n" + multibulk(b"D", b"e f") + b"\r\nG\r\n"
        assert parse(data, make()) == [[b"A"], [b"B", b"c"], [b"D", b"e f"], [b"G"]]

    @pytest.mark.parametrize("count", [1, 9, 10, 99, 100, 300])
    def test_one_command_per_read_whatever_its_count_width(self, make, count):
        """The one-command-per-read path tells a count's width by where its
        CR is; three digits and more take the slower test, with the same result."""
        args = [b"A%d" % i for i in range(count)]
        parser = make()
        for _ in range(3):  # the parser's state stays clean between reads
            assert parse(multibulk(*args), parser) == [args]

    def test_empty_multibulk_followed_by_incomplete_command(self, make):
        # The empty command must not be mistaken for the parser's own sentinel.
        parser = make()
        assert parse(b"*0\r\n*1\r\n$10\r\nPI", parser) == []
        assert parse(b"NGPONGPO\r\n", parser) == [[b"PINGPONGPO"]]

    @pytest.mark.parametrize("element, char", [
        (b"+OK\r\n", "+"), (b"(123\r\n", "("), (b"=8\r\ntxt:abcd\r\n", "="), (b",1.5\r\n", ","),
        (b"#t\r\n", "#"), (b"_\r\n", "_"), (b"~1\r\n$1\r\na\r\n", "~"),
    ])
    def test_reply_only_element_types_are_refused(self, make, element, char):
        # hiredis (a reply parser) reads these; a request must not contain them.
        data = multibulk(b"PING") + b"*2\r\n$4\r\nECHO\r\n" + element + multibulk(b"PING")
        message, commands = protocol_error(data, make())
        assert message == "Protocol error: expected '$', got '%s'" % char
        assert commands == [[b"PING"]]
        # Alone in its read, the command takes the one-command path first.
        message, commands = protocol_error(b"*2\r\n$4\r\nECHO\r\n" + element, make())
        assert message == "Protocol error: expected '$', got '%s'" % char
        assert commands == []

    def test_one_command_per_read_path_keeps_the_reader_usable(self, make):
        parser = make()
        assert parse(multibulk(b"PING"), parser) == [[b"PING"]]
        assert parse(b"*2\r\n$4\r\nQLEN\r\n$1\r\nq\r\n", parser) == [[b"QLEN", b"q"]]
        assert parse(b"*1\r\n$4\r\nPI", parser) == []  # cut: not a whole command
        assert parse(b"NG\r\n", parser) == [[b"PING"]]
        assert parse(b"*0\r\n", parser) == []
        assert parse(multibulk(b"PING"), parser) == [[b"PING"]]

    def test_set_and_push_headers_are_inline_commands(self, make):
        data = multibulk(b"PING") + b"~1\r\n$4\r\nPING\r\n>1\r\n$1\r\nx\r\n"
        assert parse(data, make()) == [
            [b"PING"], [b"~1"], [b"$4"], [b"PING"], [b">1"], [b"$1"], [b"x"]]

    def test_binary_arguments(self, make):
        arg = bytes(range(256))
        assert parse(multibulk(b"ECHO", arg, b"\r\n", b""), make()) == [
            [b"ECHO", arg, b"\r\n", b""]]

    def test_long_pipeline_cut_mid_command_is_linear(self, make):
        # A read ending inside a command must not make the parser re-parse the
        # whole pipeline once per command.
        parser = make()
        data = multibulk(b"PING") * 20000 + b"*1\r\n$4\r\nPI"
        commands = parse(data, parser)
        assert len(commands) == 20000
        assert parse(b"NG\r\n", parser) == [[b"PING"]]

    def test_every_split_point_of_a_small_stream(self, make):
        data = (b"PING\r\n" + multibulk(b"SET", b"k\r\n", b"") + b"*0\r\n\r\n"
                + b'ECHO "a b"\r\n' + multibulk(b"X" * 20))
        expected = parse(data, make())
        assert len(expected) == 4
        for cut in range(len(data) + 1):
            parser = make()
            assert parse(data[:cut], parser) + parse(data[cut:], parser) == expected, cut


# ------------------------------------------------------------ property tests

_inline_word = st.binary(min_size=1, max_size=8).filter(
    lambda w: all(c > 32 and c not in b"\"'*" and c < 127 for c in w))


@st.composite
def _command_stream(draw):
    pieces = []
    expected = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["bulk", "bulk", "inline", "empty", "blank"]))
        if kind == "bulk":
            args = draw(st.lists(st.binary(max_size=40) | st.sampled_from([b"\r\n", b"\r", b"\n",
                                                                           b"*0\r\n", b"$"]),
                                 min_size=1, max_size=5))
            pieces.append(multibulk(*args))
            expected.append(args)
        elif kind == "inline":
            words = draw(st.lists(_inline_word, min_size=1, max_size=4))
            pieces.append(b" ".join(words) + draw(st.sampled_from([b"\r\n", b"\n"])))
            expected.append(words)
        elif kind == "empty":
            pieces.append(draw(st.sampled_from([b"*0\r\n", b"*-1\r\n"])))
        else:
            pieces.append(b"\r\n")
    return b"".join(pieces), expected


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out = []
    prev = 0
    for p in points + [len(data)]:
        out.append(data[prev:p])
        prev = p
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_command_stream(), st.lists(st.integers(min_value=0), max_size=10))
def test_split_stream_yields_same_commands(make, stream, cuts):
    data, expected = stream
    parser = make()
    commands: list = []
    for chunk in _chunks(data, cuts):
        parser.feed(chunk, commands)
    assert commands == expected
    assert parser.buffered() == 0


_garbage_alphabet = st.sampled_from(list(b"*$\r\n-+:0123456789 \"'\\xaPING") + [0, 255])


@settings(max_examples=150, deadline=None)
@given(st.lists(_garbage_alphabet, max_size=80).map(bytes) | st.binary(max_size=80),
       st.lists(st.integers(min_value=0), max_size=6))
def test_garbage_yields_commands_or_protocol_error(make, data, cuts):
    def run(chunks):
        parser = make()
        commands: list = []
        try:
            for chunk in chunks:
                parser.feed(chunk, commands)
        except ProtocolError as exc:
            return commands, str(exc)
        return commands, None

    whole = run([data])
    split = run(_chunks(data, cuts))
    for commands, _ in (whole, split):
        for cmd in commands:
            assert cmd and all(type(arg) is bytes for arg in cmd)
    # The same bytes mean the same commands and the same error, however they arrive.
    assert whole == split


def test_held_counts_the_unfinished_request_only(make):
    """client-query-buffer-limit's measure: unparsed bytes plus the arguments
    already taken from the command being assembled; 0 once it completes."""
    parser = make()
    assert parse(multibulk(b"PING"), parser) == [[b"PING"]] and parser.held() == 0
    head = b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$100\r\n" + b"x" * 50
    assert parse(head, parser) == []
    assert parser.held() >= 50
    assert parse(b"x" * 50 + b"\r\n", parser) == [[b"ADDJOB", b"q", b"x" * 100]]
    assert parser.held() == 0
    # Many small arguments: each one taken so far counts, with its overhead.
    many = b"*1000\r\n" + b"$10\r\n0123456789\r\n" * 500
    assert parse(many, parser) == []
    assert parser.held() >= 500 * (10 + ARG_OVERHEAD)
    assert parse(b"$10\r\n0123456789\r\n" * 500, parser) == [[b"0123456789"] * 1000]
    assert parser.held() == 0


def _feed_in_reads(data: bytes, parser: RequestParser, read: int) -> list:
    commands: list = []
    for at in range(0, len(data), read):
        parser.feed(data[at:at + read], commands)
    return commands


@pytest.mark.parametrize("read", [7, 4096, 256 * 1024])
@pytest.mark.parametrize("size", [1_000_003, BIG_BULK, BIG_BULK + 5])
def test_a_large_bulk_fed_in_reads_keeps_its_bytes_and_what_follows_it(make, read, size):
    """A bulk argument larger than a read, whose bytes look like headers
    ('*', '$', CRLF, a 7-digit count), is taken whole and exact, the
    arguments after it complete its command, and the commands in the same
    read after it are parsed too (below BIG_BULK and from it on, where the
    argument is read in place)."""
    body = (b"*1234567\r\n$3\r\nabc\r\n*\r\n$" * 50_000)[:size]
    stream = (multibulk(b"ADDJOB", b"q", body, b"0", b"REPLICATE", b"1")
              + multibulk(b"PING") + b"PING\r\n" + multibulk(b"ADDJOB", b"q", body[:5000], b"0"))
    parser = make()
    commands = _feed_in_reads(stream, parser, read)
    assert [len(cmd) for cmd in commands] == [6, 1, 1, 4]
    assert commands[0] == [b"ADDJOB", b"q", body, b"0", b"REPLICATE", b"1"]
    assert commands[1:3] == [[b"PING"], [b"PING"]]
    assert commands[3] == [b"ADDJOB", b"q", body[:5000], b"0"]
    assert parser.held() == 0 and parser.buffered() == 0


def test_a_large_bulk_that_ends_a_command_and_one_cut_after_it(make):
    """The bulk is the last argument; the next command is cut within the read
    that completes the bulk, and a second large bulk follows."""
    body = b"$5\r\n*9999999\r\n" * 70_000
    stream = multibulk(b"ADDJOB", b"q", b"0", body) * 2 + multibulk(b"PING")
    parser = make()
    first = multibulk(b"ADDJOB", b"q", b"0", body)
    # The read that completes the first bulk also carries the second's header.
    commands = _feed_in_reads(stream[:100], parser, 100)
    commands += _feed_in_reads(stream[100:len(first) + 30], parser, 256 * 1024)
    assert commands == [[b"ADDJOB", b"q", b"0", body]]
    assert parser.held() >= 30
    commands += _feed_in_reads(stream[len(first) + 30:], parser, 256 * 1024)
    assert commands == [[b"ADDJOB", b"q", b"0", body]] * 2 + [[b"PING"]]
    assert parser.held() == 0


def test_a_protocol_error_after_a_large_bulk_is_reported(make):
    """What follows a large bulk is still checked: a bad header after it is the
    same protocol error as when the whole command arrives in one read."""
    body = b"x" * 300_000
    stream = multibulk(b"ADDJOB", b"q", body, b"0")
    stream = stream[:stream.index(body) + len(body) + 2] + b"!1\r\n0\r\n"
    parser = make()
    commands: list = []
    parser.feed(stream[:1000], commands)
    message, before = protocol_error(stream[1000:], parser)
    assert message == "Protocol error: expected '$', got '!'" and before == [] == commands
    assert protocol_error(stream, make()) == (message, [])


def test_a_big_bulk_is_read_in_place_without_a_copy_at_the_end(make):
    """From BIG_BULK on, the argument's buffer is allocated once when its
    header arrives and each read is copied into place: the whole command
    costs one argument's memory, and the read that completes it allocates
    nothing of its size (a copy of hundreds of MB in one loop turn holds
    every client) yet hands the command a bytes argument."""
    size = 20_000_000
    body = b"*$\r\n" * (size // 4)
    stream = multibulk(b"ADDJOB", b"q", body, b"0") + multibulk(b"PING")
    last = len(stream) - 40_000
    head, tail = stream[:last], stream[last:]
    parser = make()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        commands = _feed_in_reads(head, parser, 256 * 1024)
        before, peak = tracemalloc.get_traced_memory()
        assert commands == []
        assert peak - start < size + 1_000_000, peak - start
        tracemalloc.reset_peak()
        parser.feed(tail, commands)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert commands == [[b"ADDJOB", b"q", body, b"0"], [b"PING"]]
    assert peak - before < 1_000_000, peak - before
    assert type(commands[0][2]) is bytes


def test_a_big_bulk_in_reads_cut_inside_its_crlf(make):
    """Reads that end between the argument's last byte and its CRLF, or
    between the CR and the LF, complete it at the right byte; held() and
    buffered() count what arrived of it."""
    body = bytes(range(256)) * (BIG_BULK // 256 + 3)
    stream = multibulk(b"ADDJOB", b"q", body, b"0") + multibulk(b"PING")
    end = stream.index(body) + len(body)
    for cut in (end - 1, end, end + 1, end + 2):
        parser = make()
        commands: list = []
        parser.feed(stream[:end - 100_000], commands)
        assert parser.buffered() == end - 100_000 - stream.index(body)
        assert parser.held() >= parser.buffered()
        parser.feed(stream[end - 100_000:cut], commands)
        parser.feed(stream[cut:], commands)
        assert commands == [[b"ADDJOB", b"q", body, b"0"], [b"PING"]], cut
        assert parser.held() == 0 == parser.buffered()


@pytest.mark.parametrize("size", [300_000, BIG_BULK + 5])
def test_a_cut_bulk_completed_by_a_read_that_ends_after_it(make, size):
    """The read that completes a cut bulk argument ends right after its CRLF,
    with arguments of the command still to come: the command stays held
    (and counted) until they arrive."""
    body = (b"$3\r\n*1\r\n" * (size // 8 + 1))[:size]
    stream = multibulk(b"ADDJOB", b"q", body, b"0") + multibulk(b"PING")
    end = stream.index(body) + size + 2
    parser = make()
    commands = parse(stream[:1000], parser) + parse(stream[1000:end], parser)
    assert commands == [] and parser.held() >= size
    commands += parse(stream[end:], parser)
    assert commands == [[b"ADDJOB", b"q", body, b"0"], [b"PING"]]
    assert parser.held() == 0 == parser.buffered()
