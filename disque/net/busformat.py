"""The bus format of a link, agreed when the link opens.

How messages are packed and framed is a numbered bus format
(``disque.cluster.wire.BUS_FORMATS`` lists those this version speaks).
The two ends of a link agree on one in frames without messages, written in
format 1's layout whatever they agree, so that every version reads them::

    initiator -> acceptor   header + formats            its first frame
    acceptor  -> initiator  header + formats + format   its first frame
    initiator -> acceptor   header + format

``formats`` lists the formats the sender speaks; ``format`` is the highest
one both ends speak, which the sender's frames use from its next frame on.
Each direction changes at a frame of its own, so neither end waits for the
other. A version from before the agreement sends no formats, and reads
these frames as frames from the sender without messages (it ignores the
header fields it does not know): a peer whose first frame carries no
formats speaks format 1 alone. A peer that shares no format with this node
is refused; the acceptor first answers with its own formats, so that both
ends can say why.
"""

from __future__ import annotations

from typing import Final

from disque.cluster import messages as m
from disque.cluster.wire import BUS_FORMATS

# The format of a peer that names none: the only one before the agreement.
UNNAMED_FORMAT: Final = 1

# What the link waits for from its peer.
_AWAIT_HELLO: Final = 0  # the peer's first frame: its formats, or none from an earlier version
_AWAIT_SWITCH: Final = 1  # the initiator's frame naming the format of its next frames
_SETTLED: Final = 2


class FormatRefused(Exception):
    """The peer shares no bus format with this node, or broke the agreement.
    ``reply``: the fields of a frame to send before the link is closed."""

    def __init__(self, reason: str, reply: dict | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.reply = reply


def _formats_text(formats: object) -> str:
    """A list of formats as the log shows it."""
    if isinstance(formats, (list, tuple)) and all(type(f) is int for f in formats):
        return ", ".join(str(f) for f in formats) or "none"
    return repr(formats)[:40]


def highest_common(ours: tuple[int, ...], theirs: object) -> int:
    """The highest format in both lists; 0 when none is, or ``theirs`` is not a list of ints."""
    if not isinstance(theirs, list) or not all(type(f) is int for f in theirs):
        return 0
    return max(set(ours).intersection(theirs), default=0)


class LinkFormat:
    """One end of a link's agreement: the format of the frames it sends and
    of those it reads, and what it still waits for from the peer."""

    __slots__ = ("initiator", "ours", "sending", "reading", "versioned", "pending", "_waiting",
                 "_agreed")

    def __init__(self, initiator: bool, ours: tuple[int, ...] = BUS_FORMATS) -> None:
        self.initiator = initiator
        self.ours = ours
        self.sending = UNNAMED_FORMAT  # until agreed: the agreement's own frames are format 1
        self.reading = UNNAMED_FORMAT
        self.versioned = False  # the peer named its formats
        # The peer's next frame may change how the frames after it read: the
        # link reads its frames one at a time (an attribute: read per read).
        self.pending = True
        self._waiting = _AWAIT_HELLO
        self._agreed = 0

    def hello(self) -> dict:
        """The fields the initiator's first frame adds to its header."""
        return {m.FORMATS: list(self.ours)}

    def on_frame(self, header: object) -> dict | None:
        """Take the header of the peer's next frame while ``pending``; the
        fields of a frame to send back, None when there is none. Raises
        FormatRefused."""
        fields = header if type(header) is dict else {}
        if self._waiting == _AWAIT_SWITCH:
            self._switch(fields)
            return None
        self._expect(_SETTLED)
        theirs = fields.get(m.FORMATS)
        self.versioned = theirs is not None
        agreed = highest_common(self.ours, theirs if self.versioned else [UNNAMED_FORMAT])
        if not agreed:
            raise FormatRefused(
                "it speaks bus formats %s, this node %s" % (
                    _formats_text(theirs if self.versioned else [UNNAMED_FORMAT]),
                    _formats_text(self.ours)),
                None if self.initiator or not self.versioned else self.hello())
        self._agreed = agreed
        if not self.versioned:
            return None  # format 1 both ways, as this node started
        if self.initiator:
            chosen = fields.get(m.FORMAT)
            if chosen != agreed:
                raise FormatRefused("it chose bus format %r, not %d, the highest both speak"
                                    % (chosen, agreed))
            self.reading = self.sending = agreed
            return {m.FORMAT: agreed}
        self.sending = agreed
        self._expect(_AWAIT_SWITCH)
        return {m.FORMATS: list(self.ours), m.FORMAT: agreed}

    def _switch(self, fields: dict) -> None:
        """The acceptor's side: the initiator's frame naming its next frames' format."""
        chosen = fields.get(m.FORMAT)
        if chosen is None:
            return  # written before the initiator read this node's hello
        if chosen != self._agreed:
            raise FormatRefused("it switched to bus format %r, not the agreed %d"
                                % (chosen, self._agreed))
        self.reading = self._agreed
        self._expect(_SETTLED)

    def _expect(self, waiting: int) -> None:
        self._waiting = waiting
        self.pending = waiting != _SETTLED
