"""Configuration: the directive table, config file parsing, CONFIG GET/SET/REWRITE.

spec: config.md. A single table of ``Directive`` descriptors (``table``)
drives every path: loading a file (``loader``), CONFIG GET/SET
(``runtime``) and CONFIG REWRITE (``rewrite``). ``Config`` (``settings``)
holds the values and is what the rest of the server uses; the names below
are the package's public face.
"""

from disque.config.directive import Directive
from disque.config.errors import ConfigError, ConfigSetError
from disque.config.globmatch import stringmatch
from disque.config.rewrite import REWRITE_SIGNATURE
from disque.config.settings import Config
from disque.config.table import DIRECTIVES
from disque.config.values import format_memory, parse_memory

__all__ = [
    "DIRECTIVES",
    "REWRITE_SIGNATURE",
    "Config",
    "ConfigError",
    "ConfigSetError",
    "Directive",
    "format_memory",
    "parse_memory",
    "stringmatch",
]
