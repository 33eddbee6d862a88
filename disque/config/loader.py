"""Loading a config file and command-line overrides into a Config (spec: config.md §1)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from disque.protocol.argsplit import UnbalancedQuotes, quote_arg, split_args
from disque.config.errors import ConfigError, InvalidValue
from disque.config.messages import (
    BAD_DIRECTIVE,
    CANT_CHDIR,
    CANT_OPEN_CONFIG,
    INCLUDE_TOO_DEEP,
    INVALID_USER_NAME,
    NO_SUCH_COMMAND,
    TARGET_EXISTS,
    UNBALANCED_QUOTES,
)
from disque.config.users import RuleError, User, user_with_rules, valid_user_name
from disque.config.values import ascii_lower, decode, encode, printable

if TYPE_CHECKING:
    from disque.config.directive import Directive
    from disque.config.filesystem import FileSystem
    from disque.config.fields import Settings

MAX_INCLUDE_DEPTH: Final = 32


class Loader:
    """Applies config lines to the settings; one instance per file (include nests).

    ``files`` reads included files and changes directory for ``dir``.
    """

    def __init__(self, config: Settings, directives: Mapping[str, Directive],
                 commands: set[str] | None, files: FileSystem, depth: int = 0) -> None:
        self.config = config
        self.directives = directives
        self.commands = commands
        self.files = files
        self.depth = depth

    def run(self, lines: Iterable[bytes]) -> None:
        """Apply every line; raise ConfigError at the first bad one."""
        for number, raw in enumerate(lines, 1):
            line = raw.strip(b" \t\r\n")
            if not line or line.startswith(b"#"):
                continue
            try:
                self._apply_line(line)
            except InvalidValue as exc:
                raise ConfigError.at_line(number, printable(line), exc.reason) from None

    def _apply_line(self, line: bytes) -> None:
        try:
            argv = split_args(line)
        except UnbalancedQuotes:
            raise InvalidValue(UNBALANCED_QUOTES) from None
        if not argv:
            return
        directive = self.directives.get(decode(argv[0].lower()))
        args = [decode(arg) for arg in argv[1:]]
        if (directive is None or "F" not in directive.flags
                or not directive.nargs[0] <= len(args) <= directive.nargs[1]):
            raise InvalidValue(BAD_DIRECTIVE)
        value = directive.parse(args)
        if directive.applied:
            self._act(directive.name, value)
        else:
            setattr(self.config, directive.attr, value)

    def _act(self, name: str, value: Any) -> None:
        """The loader's actions, for the directives that are not stored values."""
        if name == "dir":
            self.chdir(value)
        elif name == "include":
            self.include(value)
        elif name == "rename-command":
            self.rename(value)
        else:
            self.user(value)

    def chdir(self, path: str) -> None:
        """`dir` takes effect immediately so later relative paths resolve against it."""
        try:
            self.files.change_dir(path)
        except OSError as exc:
            raise InvalidValue(CANT_CHDIR.format(path=path, reason=exc.strerror)) from None

    def include(self, path: str) -> None:
        """Apply another file at this point (relative to the current directory)."""
        if self.depth >= MAX_INCLUDE_DEPTH:
            raise InvalidValue(INCLUDE_TOO_DEEP)
        try:
            data = self.files.read_file(path)
        except OSError as exc:
            raise InvalidValue(CANT_OPEN_CONFIG.format(path=path, reason=exc.strerror)) from None
        Loader(self.config, self.directives, self.commands, self.files,
               self.depth + 1).run(split_lines(data))

    def user(self, args: list[str]) -> None:
        """A ``user <name> <rules>...`` line: create or change the user, as
        ACL SETUSER would (all rules or none)."""
        name = encode(args[0])
        if not valid_user_name(name):
            raise InvalidValue(INVALID_USER_NAME)
        users = self.config.users
        base = users.get(name)
        try:
            user = user_with_rules(base if base is not None else User(name),
                                   [encode(arg) for arg in args[1:]])
        except RuleError as exc:
            raise InvalidValue(str(exc)) from None
        if base is None:
            users[name] = user
        else:
            base.assign(user)

    def rename(self, names: tuple[str, str]) -> None:
        """Record a rename-command; checked against the command table when one is known."""
        old, new = names
        if self.commands is not None:
            if ascii_lower(old) not in self.commands:
                raise InvalidValue(NO_SUCH_COMMAND)
            self.commands.discard(ascii_lower(old))
            if new:
                if ascii_lower(new) in self.commands:
                    raise InvalidValue(TARGET_EXISTS)
                self.commands.add(ascii_lower(new))
        self.config.rename_commands.append((old, new))


def split_lines(data: bytes) -> list[bytes]:
    """A config file's lines, without their newlines."""
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


def override_lines(overrides: Iterable[str | bytes]) -> list[bytes]:
    """Turn argv overrides into config lines: each ``--name`` starts a line (redis-server)."""
    lines: list[bytes] = []
    for arg in overrides:
        # argv was decoded as UTF-8 with surrogateescape: encode gives its bytes back
        raw = encode(arg) if isinstance(arg, str) else arg
        if raw.startswith(b"--"):
            lines.append(raw[2:])
        else:
            quoted = quote_arg(raw).encode("ascii")
            if lines:
                lines[-1] += b" " + quoted
            else:
                lines.append(quoted)
    return lines

