"""disque-check-aof [--fix [--yes]] FILE: validate an AOF, name the offset
of its first bad record, and truncate the file there.

Every record is parsed, its checksum checked (docs/aof-format.md: records
this version writes carry one, and after the file's format marker all
must) and its job payload decoded. A file that ends in the middle of a
record (a crash during a write) is truncated to its last complete record
with --fix. Damage anywhere else (a checksum that does not match, bytes
that are no record) is reported with its offset and record number; --fix
truncates there too, which drops every record after it, so it says how
much and asks first (--yes answers for scripts). Nothing is ever dropped
without --fix, and --fix refuses damage in the file's first record (a
damaged format marker): cutting there would empty the file.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NamedTuple

from disque.jobs.record_reader import END, JOB, AofFormatError, RecordReader


class CheckResult(NamedTuple):
    """What ``check`` found."""

    valid: int  # offset of the end of the last valid record
    problem: str | None  # None: the whole file is valid
    truncated: bool  # the problem is an incomplete last record
    records: int = 0  # valid records
    checksummed: bool = False  # a format marker was read: every record after it carries one


def check(data: bytes) -> CheckResult:
    """Check every record of ``data`` up to the first bad one."""
    reader = RecordReader(data)
    try:
        while True:
            kind = reader.next()
            if kind == END:
                break
            if kind == JOB:
                reader.job(None)
        reader.finish()
    except AofFormatError as exc:
        # The valid part ends where the bad record starts: --fix cuts there.
        return CheckResult(exc.record_offset, str(exc), exc.truncated, exc.record - 1,
                           reader.required)
    return CheckResult(len(data), None, False, reader.records, reader.required)


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        return False
    print(question + " [y/N]: ", end="", flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="disque-check-aof", description=__doc__.split("\n")[0])
    parser.add_argument("--fix", action="store_true",
                        help="truncate the file at its first bad record")
    parser.add_argument("--yes", action="store_true",
                        help="with --fix: truncate before damage in the middle of the file "
                             "without asking")
    parser.add_argument("file")
    args = parser.parse_args(argv)
    try:
        with open(args.file, "rb") as f:
            data = f.read()
    except OSError as exc:
        print("Cannot open file %s: %s" % (args.file, exc.strerror), file=sys.stderr)
        return 1
    result = check(data)
    valid = result.valid
    print("AOF analyzed: size=%d, ok_up_to=%d, diff=%d" % (len(data), valid, len(data) - valid))
    print("Records: %d valid%s" % (result.records, ", checksummed" if result.checksummed
                                   else " (no format marker: checksums where present)"))
    if result.problem is None:
        print("AOF is valid")
        return 0
    print("AOF problem: %s" % result.problem)
    # Damage in the first record leaves nothing before it to keep: emptying
    # the file is no repair, and the records after it may be intact.
    keeps_nothing = valid == 0 and not result.truncated
    if not args.fix:
        if keeps_nothing:
            print("The damage is in the first record: --fix would keep nothing, so it "
                  "refuses; restore a backup, or repair the record by hand.")
        elif result.truncated:
            print("The file ends with an incomplete record: run with --fix to truncate it.")
        else:
            print("The damage is not at the end of the file: --fix truncates the file at "
                  "offset %d, dropping the %d bytes from there on (every record after the "
                  "damage); make a backup first, or restore one." % (valid, len(data) - valid))
        return 1
    if keeps_nothing:
        print("Not truncated: the damage is in the first record, so truncating would drop "
              "every record of the file (%d bytes); restore a backup, or repair the record "
              "by hand." % len(data))
        return 1
    if not result.truncated and not args.yes:
        if not _confirm("This drops %d bytes (every record after offset %d). Continue?"
                        % (len(data) - valid, valid)):
            print("Not truncated: answer yes, or run with --fix --yes.")
            return 1
    os.truncate(args.file, valid)
    print("Successfully truncated AOF to %d bytes" % valid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
