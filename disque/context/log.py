"""The server's logger, which every part logs to.

Its format (pid, timestamps) and where it goes (stdout, a file, syslog)
are the process's business: ``disque.process.logformat``.
"""

from __future__ import annotations

import logging
from typing import Final

VERBOSE: Final = 15  # the original's level between debug and notice; logging has none

logger = logging.getLogger("disque")
