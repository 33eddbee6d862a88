"""The disque-server command line: -v, -h, a config file and --directive overrides.

Options follow redis-server: the first argument, unless it starts with
``--``, is the config file; every ``--name args...`` after it is one more
config line, applied after the file.
"""

from __future__ import annotations

import os
import sys

from disque import __version__
from disque.build import core_build
from disque.state.command import unique_commands
from disque.commands.table import build_command_table
from disque.config import Config, ConfigError
from disque.process import configfile
from disque.process.serverinfo import GIT_SHA1, MEM_ALLOCATOR

USAGE = """Usage: {prog} [/path/to/disque.conf] [options]
       {prog} - (read config from stdin)
       {prog} -v or --version
       {prog} -h or --help
       {prog} --gen-certs <dir> [hostname ...] (development TLS certificates)

Examples:
       {prog} (run the server with default conf)
       {prog} /etc/disque/7711.conf
       {prog} --port 7777
       {prog} /etc/mydisque.conf --loglevel verbose
       echo 'port 7777' | {prog} -
"""
PROGRAM_NAME = "disque-server"
# core= is not in the original's line: the build of the core (disque/build.py).
VERSION_LINE = "Disque server v={version} sha={sha}:0 malloc={malloc} bits=64 core={core}\n"
NO_CONFIG_WARNING = ("Warning: no config file specified, using the default config. In order "
                     "to specify a config file use disque-server /path/to/disque.conf")
VERSION_FLAGS = ("-v", "--version")
HELP_FLAGS = ("-h", "--help")
OVERRIDE_PREFIX = "--"
GEN_CERTS_FLAG = "--gen-certs"


class CommandLineExit(Exception):
    """The command line was answered without starting a server; exit with ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def program_name(argv0: str) -> str:
    """The name the program was invoked by, for the usage text.

    ``python -m disque.server`` leaves the module's path in argv[0], which
    names no command a user could type; the console script's name stands in.
    """
    name = os.path.basename(argv0)
    if not name or name.endswith(".py") or name in ("-c", "-m"):
        return PROGRAM_NAME
    return name


def reads_stdin(args: list[str]) -> bool:
    """Whether ``args`` take the config from standard input (``disque-server -``)."""
    return bool(args) and args[0] == configfile.STDIN_PATH


def load_config(args: list[str], prog: str = PROGRAM_NAME) -> Config:
    """The Config that ``args`` (argv without the program name) asks for.

    Raises CommandLineExit after printing the version, the usage or a
    config error.
    """
    if args and args[0] in VERSION_FLAGS:
        sys.stdout.write(VERSION_LINE.format(version=__version__, sha=GIT_SHA1,
                                             malloc=MEM_ALLOCATOR, core=core_build()))
        raise CommandLineExit(0)
    if args and args[0] in HELP_FLAGS:
        sys.stdout.write(USAGE.format(prog=prog))
        raise CommandLineExit(0)
    if args and args[0] == GEN_CERTS_FLAG:
        raise CommandLineExit(_gen_certs(args[1:]))
    path = None
    overrides = args
    if args and not args[0].startswith(OVERRIDE_PREFIX):
        path, overrides = args[0], args[1:]
    try:
        names = [c.name for c in unique_commands(build_command_table())]
        return configfile.load_config(path, overrides, commands=names)
    except ConfigError as exc:
        message = str(exc)
        # Some messages are one line without an end (can't open ...): a
        # shell prompt must not land on the same line.
        sys.stderr.write(message if message.endswith("\n") else message + "\n")
        raise CommandLineExit(1) from None


def _gen_certs(args: list[str]) -> int:
    """``--gen-certs <dir> [hostname ...]``: a development CA and certificates."""
    if not args:
        sys.stderr.write("Usage: disque-server --gen-certs <dir> [hostname ...]\n")
        return 1
    from disque.net.tls import generate_certificates
    try:
        paths = generate_certificates(args[0], args[1:])
    except ImportError:
        sys.stderr.write("--gen-certs needs the cryptography package (pip install cryptography)\n")
        return 1
    except (OSError, ValueError) as exc:
        sys.stderr.write("Can't generate certificates: %s\n" % exc)
        return 1
    sys.stdout.write("".join(path + "\n" for path in paths))
    return 0
