"""CONFIG GET and CONFIG SET: reading and changing a running server's configuration."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from disque.config.errors import ConfigSetError, InvalidValue
from disque.config.globmatch import stringmatch
from disque.config.directive import Directive
from disque.config.messages import (ERR_CHANGING_DIR, ERR_IMMUTABLE, ERR_INVALID_ARGUMENT,
                                    ERR_UNSUPPORTED)
from disque.config.table import DIRECTIVES, GETTABLE
from disque.config.values import decode, encode, printable

if TYPE_CHECKING:
    from disque.config.fields import Settings

Listener = Callable[[Any, Any], None]


def get_values(config: Settings, pattern: bytes) -> list[bytes]:
    """[name, value, ...] for every visible parameter matching the glob."""
    reply: list[bytes] = []
    for directive in GETTABLE:
        name = directive.name.encode()
        if stringmatch(pattern, name, nocase=True):
            reply.append(name)
            reply.append(encode(directive.show(getattr(config, directive.attr))))
    return reply


def settable(name: bytes) -> Directive:
    """The directive CONFIG SET ``name`` changes; ConfigSetError naming it when
    it is read at startup only, or when it is no parameter (unknown, or a
    line of the file only: include, rename-command, user)."""
    directive = DIRECTIVES.get(decode(name.lower()))
    if directive is not None and "S" in directive.flags and directive.parse_set is not None:
        return directive
    if directive is not None and directive.stored:
        raise ConfigSetError(ERR_IMMUTABLE.format(name=printable(name)))
    raise ConfigSetError(ERR_UNSUPPORTED.format(name=printable(name)))


def set_value(config: Settings, listeners: Mapping[str, Listener], name: bytes,
              value: bytes) -> None:
    """Validate, store, notify the directive's listener; raise ConfigSetError."""
    directive = settable(name)
    parse_set = directive.parse_set
    assert parse_set is not None  # settable() returns only directives that have one
    try:
        new = parse_set(decode(value))
    except InvalidValue:
        raise ConfigSetError(ERR_INVALID_ARGUMENT.format(
            value=printable(value), name=printable(name))) from None
    listener = listeners.get(directive.name)
    if not directive.stored:  # dir: the cwd itself is the value
        if listener is not None:
            listener(config.dir, new)
            return
        try:
            config.files.change_dir(new)
        except OSError as exc:
            raise ConfigSetError(ERR_CHANGING_DIR.format(reason=exc.strerror)) from None
        return
    old = getattr(config, directive.attr)
    setattr(config, directive.attr, new)
    if listener is not None:
        try:
            listener(old, new)
        except Exception:
            setattr(config, directive.attr, old)
            raise
