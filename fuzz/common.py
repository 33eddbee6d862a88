"""What the fuzz targets share: the engines that run them, the corpus on
disk, and a byte-driven random source for structure-aware inputs.

A target (``fuzz/<name>.py``) is one function taking bytes: it returns
normally for any input the code under test handles, including the errors
that code defines for bad input (a RESP ProtocolError, a load refused with
AofLoadError, a bus frame dropped). Anything else it raises is a crash.
Targets import the code under test inside ``build`` so that atheris can
instrument those modules as they load (coverage guidance needs it).

Engines:

- ``atheris`` (coverage-guided, libFuzzer): ``python -m fuzz.<name> --runs N``;
  inputs that reach new coverage go to a work directory, and with
  ``--merge`` some of them (spread over their sizes) are added to
  ``fuzz/corpus/<name>``.
- ``random``: mutations of the corpus with a seeded ``random.Random``, no
  coverage feedback; what ``tests/unit/test_fuzz_targets.py`` runs inside
  ``make test``, and the fallback where atheris is not installed.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

FUZZ_DIR = Path(__file__).resolve().parent
CORPUS_DIR = FUZZ_DIR / "corpus"
MAX_CORPUS_FILE = 4096  # bytes: the corpus stays small enough for the repository
MAX_NEW_PER_RUN = 60  # inputs a --merge run adds to a target's corpus
MAX_CORPUS_FILES = 250  # per target: then runs add nothing (the corpus stays small)


@dataclass
class Target:
    """A fuzz target: ``one_input`` and the inputs it starts from."""

    name: str
    one_input: Callable[[bytes], None]
    seeds: Callable[[], Iterable[bytes]]
    max_len: int = 2048
    modules: tuple[str, ...] = ("disque",)  # what atheris instruments
    dictionary: list[bytes] = field(default_factory=list)  # tokens for the mutators

    @property
    def corpus(self) -> Path:
        return CORPUS_DIR / self.name


class Crash(Exception):
    """An input made the code under test misbehave without raising (a broken
    invariant, an exception it caught and logged)."""


class ErrorTrap(logging.Handler):
    """Turns an exception the code under test logged (``logger.exception``,
    as the bus does around a frame's handlers) into a crash; warnings are
    dropped before they are formatted."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)

    def check(self) -> None:
        """Raise the first exception logged since the last check."""
        if self.records:
            record = self.records[0]
            self.records.clear()
            exc = record.exc_info[1] if record.exc_info else None
            raise Crash("logged: %s" % record.getMessage()) from exc


def trap_errors(name: str = "disque") -> ErrorTrap:
    """Install an ErrorTrap on ``name``'s logger, which then only passes errors."""
    log = logging.getLogger(name)
    trap = ErrorTrap()
    log.addHandler(trap)
    log.setLevel(logging.ERROR)
    log.propagate = False
    return trap


class ByteRandom(random.Random):
    """A random source that reads its choices from the fuzzer's input.

    Every method of ``random.Random`` (choice, randrange, sample, randbytes)
    draws through ``random`` and ``getrandbits``; here those consume the
    input, so a small change to the input makes a small change to the
    choices, which is what coverage-guided mutation needs. Once the input
    is used up every draw is 0.
    """

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0
        super().__init__(0)

    def seed(self, *args, **kwargs) -> None:  # random.Random.__init__ calls it
        return None

    @property
    def exhausted(self) -> bool:
        """All of the input has been read."""
        return self._pos >= len(self._data)

    def getrandbits(self, k: int) -> int:
        if k <= 0:
            return 0
        size = (k + 7) // 8
        chunk = self._data[self._pos:self._pos + size]
        self._pos += size
        return int.from_bytes(chunk, "little") & ((1 << k) - 1)

    def random(self) -> float:
        return self.getrandbits(16) / 65536.0

    def take(self, size: int) -> bytes:
        """The next ``size`` bytes of input (fewer at its end)."""
        chunk = self._data[self._pos:self._pos + size]
        self._pos += size
        return chunk


# ------------------------------------------------------------------ corpus

def corpus_inputs(target: Target) -> list[bytes]:
    """The stored corpus of ``target``, or its seeds when it has none yet."""
    files = sorted(target.corpus.glob("*")) if target.corpus.is_dir() else []
    inputs = [f.read_bytes() for f in files if f.is_file()]
    return inputs or list(target.seeds())


def write_seeds(target: Target) -> int:
    """Store the target's seeds in its corpus directory (named by content)."""
    target.corpus.mkdir(parents=True, exist_ok=True)
    count = 0
    for data in target.seeds():
        data = data[:MAX_CORPUS_FILE]
        path = target.corpus / hashlib.sha1(data).hexdigest()
        if not path.exists():
            path.write_bytes(data)
            count += 1
    return count


# ------------------------------------------------------------ random engine

def mutate(rng: random.Random, data: bytes, corpus: list[bytes], max_len: int,
           dictionary: list[bytes]) -> bytes:
    """One to four random edits of ``data``: flips, inserts, deletions,
    repeats, tokens, interesting integers, splices with another input."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(9)
        at = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            at = min(at, len(buf) - 1)
            buf[at] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            at = min(at, len(buf) - 1)
            buf[at] = rng.randrange(256)
        elif op == 2:
            buf[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and buf:
            del buf[at:at + rng.randint(1, 16)]
        elif op == 4 and buf:
            start = rng.randrange(len(buf))
            piece = buf[start:start + rng.randint(1, 32)]
            buf[at:at] = piece * rng.randint(1, 4)
        elif op == 5 and dictionary:
            buf[at:at] = rng.choice(dictionary)
        elif op == 6:
            number = rng.choice([0, 1, 2, 7, 8, 15, 16, 40, 127, 128, 255, 256, 1023, 1024,
                                 65535, 65536, 1 << 31, (1 << 32) - 1, 1 << 63, -1])
            buf[at:at] = str(number).encode()
        elif op == 7 and corpus:
            other = rng.choice(corpus)
            start = rng.randrange(len(other) + 1)
            buf[at:] = other[start:start + rng.randint(1, 256)]
        elif op == 8 and buf:
            at = min(at, len(buf) - 1)
            buf[at:at + 4] = rng.choice([b"\x00", b"\xff", b"\x7f", b"\x80", b"\r\n", b"*",
                                         b"$", b"\x90", b"\xdd\xff\xff\xff\xff"])
    return bytes(buf[:max_len])


def run_random(target: Target, count: int, seed: int, corpus: list[bytes] | None = None,
               deadline: float | None = None) -> int:
    """Run ``count`` mutated inputs (fewer if ``deadline``, a time.monotonic
    value, passes first); return how many ran. A crash raises with the input
    and the seed that replays it."""
    rng = random.Random(seed)
    pool = list(corpus if corpus is not None else corpus_inputs(target)) or [b""]
    for i in range(count):
        if deadline is not None and i % 64 == 0 and time.monotonic() > deadline:
            return i
        data = mutate(rng, rng.choice(pool), pool, target.max_len, target.dictionary)
        try:
            target.one_input(data)
        except BaseException as exc:
            raise Crash("target %s crashed on input %r (random engine, seed %d, input %d)"
                        % (target.name, data, seed, i)) from exc
    return count


def replay(target: Target, inputs: Iterable[bytes]) -> int:
    """Run every input; a crash raises with the input."""
    count = 0
    for data in inputs:
        try:
            target.one_input(data)
        except BaseException as exc:
            raise Crash("target %s crashed on corpus input %r" % (target.name, data)) from exc
        count += 1
    return count


# ------------------------------------------------------------ command line

def _atheris_available() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


def main(build: Callable[[], Target], argv: list[str] | None = None) -> int:
    """``python -m fuzz.<name>``: fuzz the target ``build()`` makes."""
    parser = argparse.ArgumentParser(description=(build.__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000, help="inputs to try")
    parser.add_argument("--engine", choices=("atheris", "random"),
                        default="atheris" if _atheris_available() else "random")
    parser.add_argument("--seed", type=int, default=None, help="random engine's seed")
    parser.add_argument("--max-seconds", type=int, default=0,
                        help="stop after this long (0: when --runs are done)")
    parser.add_argument("--merge", action="store_true",
                        help="atheris: add the new inputs that gain coverage to the "
                             "corpus in the repository")
    parser.add_argument("--write-seeds", action="store_true",
                        help="store the target's seed inputs in its corpus and exit")
    parser.add_argument("--replay", action="store_true",
                        help="run the stored corpus once and exit")
    args = parser.parse_args(argv)
    if args.engine == "atheris":
        import atheris

        import disque  # noqa: F401  # installs its source finder first: atheris wraps it
        with atheris.instrument_imports(include=["disque"]):
            target = build()
    else:
        target = build()
    if args.write_seeds:
        print("%s: %d seed inputs written to %s" % (target.name, write_seeds(target),
                                                   target.corpus))
        return 0
    if args.replay:
        print("%s: %d corpus inputs, no crash" % (target.name,
                                                  replay(target, corpus_inputs(target))))
        return 0
    if args.engine == "random":
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
        deadline = time.monotonic() + args.max_seconds if args.max_seconds else None
        started = time.monotonic()
        ran = run_random(target, args.runs, seed, deadline=deadline)
        print("%s: %d inputs (random engine, seed %d) in %.1f s, no crash"
              % (target.name, ran, seed, time.monotonic() - started))
        return 0
    return _run_atheris(target, args)


def _run_atheris(target: Target, args: argparse.Namespace) -> int:
    import atheris

    work = Path(tempfile.mkdtemp(prefix="fuzz-%s-" % target.name))
    scratch = Path(tempfile.mkdtemp(prefix="fuzz-%s-dict-" % target.name))
    artifacts = Path(os.environ.get("FUZZ_ARTIFACTS", FUZZ_DIR / "crashes"))
    artifacts.mkdir(parents=True, exist_ok=True)
    dictionary = None
    if target.dictionary:
        dictionary = scratch / "tokens.dict"
        dictionary.write_text("".join('"%s"\n' % "".join("\\x%02x" % b for b in token)
                                      for token in target.dictionary))
    options = ["-runs=%d" % args.runs, "-max_len=%d" % target.max_len,
               "-artifact_prefix=%s/%s-" % (artifacts, target.name), "-print_final_stats=1",
               "-rss_limit_mb=3072", "-timeout=30"]
    if args.max_seconds:
        options.append("-max_total_time=%d" % args.max_seconds)
    if dictionary is not None:
        options.append("-dict=%s" % dictionary)
    corpus = [str(work)]
    if target.corpus.is_dir():
        corpus.append(str(target.corpus))
    if args.merge:
        # atheris.Fuzz() ends the process: fuzz in a child, then keep what
        # it found here. libFuzzer writes to the first corpus directory
        # only the inputs that reached new coverage.
        pid = os.fork()
        if pid == 0:
            atheris.Setup([sys.argv[0], *options, *corpus], target.one_input)
            atheris.Fuzz()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        kept = keep_new_inputs(target, work)
        shutil.rmtree(work, True)
        shutil.rmtree(scratch, True)
        print("%s: %d new inputs added to %s" % (target.name, kept, target.corpus))
        return code
    atheris.Setup([sys.argv[0], *options, *corpus], target.one_input)
    atheris.Fuzz()
    return 0


def keep_new_inputs(target: Target, work: Path, most: int = MAX_NEW_PER_RUN) -> int:
    """Copy up to ``most`` of the inputs a run found into the target's corpus,
    spread over their sizes (the short ones and the long ones reach
    different code)."""
    found = sorted((p for p in work.iterdir()
                    if p.is_file() and p.stat().st_size <= MAX_CORPUS_FILE),
                   key=lambda p: p.stat().st_size)
    target.corpus.mkdir(parents=True, exist_ok=True)
    most = min(most, MAX_CORPUS_FILES - sum(1 for _ in target.corpus.iterdir()))
    if most <= 0:
        return 0
    if len(found) > most:
        found = [found[i * len(found) // most] for i in range(most)]
    kept = 0
    for path in found:
        dest = target.corpus / path.name
        if not dest.exists():
            dest.write_bytes(path.read_bytes())
            kept += 1
    return kept
