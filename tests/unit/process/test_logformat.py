"""The log format, and the stack of an exception logged with logger.exception."""

from __future__ import annotations

import logging
import re

from disque.context.log import VERBOSE, logger
from disque.process import logformat


def test_lines_have_the_original_format_and_exceptions_their_stack(tmp_path):
    path = tmp_path / "disque.log"
    logformat.configure(str(path), "verbose")
    try:
        logger.log(VERBOSE, "hello %s", "there")
        try:
            {}["missing"]
        except KeyError:
            logger.exception("Error in server cron")
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        logger.setLevel(logging.NOTSET)
    lines = path.read_text().splitlines()
    assert re.fullmatch(r"\d+:M \d\d \w{3} \d\d:\d\d:\d\d\.\d{3} - hello there", lines[0])
    assert re.fullmatch(r"\d+:M .* # Error in server cron", lines[1])
    assert lines[2] == "Traceback (most recent call last):" and lines[-1] == "KeyError: 'missing'"
