"""disque-check-aof [--fix] FILE: validate an AOF and repair a truncated tail.

A file that ends in the middle of a record (a crash during a write) is
truncated to its last complete record with --fix. Damage anywhere else is
reported with its offset and never "repaired" by dropping data silently.
"""

from __future__ import annotations

import argparse
import os
import sys

from disque.aof.format import (DELJOB, LOADJOB, AofFormatError, Truncated, load_job,
                               read_record)


def check(data: bytes) -> tuple[int, str | None, bool]:
    """Return (offset of the end of the last valid record, problem, truncated?)."""
    pos = 0
    end = len(data)
    while pos < end:
        try:
            argv, nxt = read_record(data, pos, end)
        except Truncated:
            return pos, "unexpected end of file", True
        except AofFormatError as exc:
            return pos, "bad format at offset %d: %s" % (exc.offset, exc.reason), False
        name = argv[0].upper()
        if name == LOADJOB and len(argv) >= 2:
            try:
                load_job(argv[1], None)
            except (ValueError, TypeError) as exc:  # BadJobPayload is a ValueError
                return pos, "corrupted job at offset %d: %s" % (pos, exc), False
        elif not (name == DELJOB and len(argv) >= 2):
            return pos, "unknown command %r at offset %d" % (argv[0][:32], pos), False
        pos = nxt
    return pos, None, False


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="disque-check-aof", description=__doc__.split("\n")[0])
    parser.add_argument("--fix", action="store_true", help="truncate an incomplete last record")
    parser.add_argument("file")
    args = parser.parse_args(argv)
    try:
        with open(args.file, "rb") as f:
            data = f.read()
    except OSError as exc:
        print("Cannot open file %s: %s" % (args.file, exc.strerror), file=sys.stderr)
        return 1
    valid, problem, truncated = check(data)
    print("AOF analyzed: size=%d, ok_up_to=%d, diff=%d" % (len(data), valid, len(data) - valid))
    if problem is None:
        print("AOF is valid")
        return 0
    print("AOF problem: %s" % problem)
    if not truncated:
        print("The damage is not at the end of the file: fix it by hand or restore a backup.")
        return 1
    if not args.fix:
        print("The file ends with an incomplete record: run with --fix to truncate it.")
        return 1
    os.truncate(args.file, valid)
    print("Successfully truncated AOF to %d bytes" % valid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
