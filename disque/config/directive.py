"""The ``Directive`` descriptor and builders for its common kinds.

A directive's parsing, validation, rendering and rewrite rule sit
together in one descriptor, so each path (file, CONFIG SET/GET/REWRITE)
reads them from the same place.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Final

from disque.config.errors import InvalidValue
from disque.config.values import (
    LLONG_MAX,
    ascii_lower,
    file_int,
    format_memory,
    memory_value,
    parse_yes_no,
    quoted,
    quoted_if_set,
    strict_int,
    yes_no_text,
)

if TYPE_CHECKING:
    from disque.config.fields import Settings


class Directive:
    """One directive: how it is parsed from a file, set, shown and rewritten.

    ``flags`` holds F (config file / command line), S (CONFIG SET),
    G (CONFIG GET) and R (CONFIG REWRITE). ``parse`` turns the file's
    arguments into the value (else InvalidValue), ``parse_set`` CONFIG SET's
    text; ``show`` renders it for CONFIG GET and ``write`` for REWRITE (None:
    left out), ``write_always`` even at the default; ``applied`` marks a
    directive the loader acts on instead of storing its value (``Loader``'s
    actions: ``dir``, ``include``, ``rename-command``, ``user``);
    ``write_lines`` gives REWRITE's lines, one each, for a directive that may
    appear many times (``user``), read from the settings its action fills. A plain class, never changed
    once built: as a dataclass, every start generated and compiled its
    methods (about 1 ms).
    """

    def __init__(self, name: str, default: Any, flags: str,
                 parse: Callable[[list[str]], Any], nargs: tuple[int, int] = (1, 1),
                 parse_set: Callable[[str], Any] | None = None,
                 show: Callable[[Any], str] = str, write: Callable[[Any], str | None] = str,
                 write_always: bool = False, applied: bool = False,
                 write_lines: Callable[[Settings], list[str]] | None = None) -> None:
        self.name: Final = name
        self.default: Final = default
        self.flags: Final = flags
        self.parse: Final = parse
        self.nargs: Final = nargs
        self.parse_set: Final = parse_set
        self.show: Final = show
        self.write: Final = write
        self.write_always: Final = write_always
        self.applied: Final = applied
        self.write_lines: Final = write_lines

    @property
    def attr(self) -> str:
        """The Config attribute holding the value."""
        return self.name.replace("-", "_")

    @property
    def stored(self) -> bool:
        """True when the value lives in a Config attribute."""
        return not self.applied


def single_argument(args: list[str]) -> str:
    """The parser of directives whose one argument is the value as written."""
    return args[0]


def integer(name: str, default: int, flags: str, reason: str, *, low: int = 0,
            high: int = LLONG_MAX, set_low: int | None = None,
            set_words: dict[str, int] | None = None) -> Directive:
    """An integer in [low, high] (CONFIG SET: [set_low, high], plus optional word aliases)."""
    set_min = low if set_low is None else set_low

    def parse_set(text: str) -> int:
        if set_words and ascii_lower(text) in set_words:
            return set_words[ascii_lower(text)]
        value = strict_int(text)
        if not set_min <= value <= high:
            raise InvalidValue()
        return value

    return Directive(name, default, flags, lambda args: file_int(args[0], low, high, reason),
                     parse_set=parse_set if "S" in flags else None)


def memory(name: str, default: int, flags: str, reason: str, *, low: int,
           set_low: int | None = None, set_units: bool = True) -> Directive:
    """A byte count with units; CONFIG SET takes a plain integer when not ``set_units``."""
    set_min = low if set_low is None else set_low

    def parse(args: list[str]) -> int:
        value = memory_value(args[0])
        if value < low:
            raise InvalidValue(reason)
        return value

    def parse_set(text: str) -> int:
        value = memory_value(text) if set_units else strict_int(text)
        if value < set_min:
            raise InvalidValue()
        return value

    return Directive(name, default, flags, parse,
                     parse_set=parse_set if "S" in flags else None, write=format_memory)


def boolean(name: str, default: bool, flags: str) -> Directive:
    """A yes/no directive."""
    return Directive(name, default, flags, lambda args: parse_yes_no(args[0]),
                     parse_set=parse_yes_no if "S" in flags else None,
                     show=yes_no_text, write=yes_no_text)


def choice(name: str, default: str, flags: str, choices: Collection[str],
           reason: str) -> Directive:
    """One of ``choices``, matched without case; stored lower-cased."""

    def pick(text: str) -> str:
        word = ascii_lower(text)
        if word not in choices:
            raise InvalidValue(reason)
        return word

    return Directive(name, default, flags, lambda args: pick(args[0]),
                     parse_set=pick if "S" in flags else None)


def string(name: str, default: str, flags: str, *,
           check: Callable[[str], None] | None = None, optional: bool = False) -> Directive:
    """A string directive; ``optional`` ones have no default and are written whenever set."""
    def accept(text: str) -> str:
        if check is not None:
            check(text)
        return text

    return Directive(name, default, flags, lambda args: accept(args[0]),
                     parse_set=accept if "S" in flags else None,
                     write=quoted_if_set if optional else quoted, write_always=optional)

