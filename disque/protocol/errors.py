"""Every error reply text the spec names, written once (spec: commands.md).

Values are complete RESP error replies, ready to send.
"""

from typing import Final

from disque.protocol.resp import error

SYNTAX: Final = error("ERR syntax error")
NOT_INTEGER: Final = error("ERR value is not an integer or out of range")
NOAUTH: Final = error("NOAUTH Authentication required.")
AUTH_NOT_SET: Final = error("ERR Client sent AUTH, but no password is set")
INVALID_PASSWORD: Final = error("ERR invalid password")
OOM: Final = error("OOM command not allowed when used memory > 'maxmemory'.")
LOADING: Final = error("LOADING Disque is loading the dataset in memory")
MAX_CLIENTS: Final = error("ERR max number of clients reached")

BADID: Final = error("BADID Invalid Job ID format.")
NOJOB: Final = error("NOJOB Job not known in the context of this node.")
TOOLATE: Final = error("TOOLATE Half of job TTL already elapsed, you are no longer allowed "
                       "to postpone the next delivery.")
LEAVING: Final = error("LEAVING This node is leaving the cluster, please connect to a different one")
PAUSED: Final = error("PAUSED Queue paused in input, try later")
MAXLEN_EXCEEDED: Final = error("MAXLEN Queue is already longer than the specified MAXLEN count")
LOADJOB_FROM_CLIENT: Final = error("ERR LOADJOB is a special command only processed from AOF")

REPLICATE_RANGE: Final = error("ERR REPLICATE must be between 1 and 65535")
TTL_RANGE: Final = error("ERR TTL must be a number > 0")
RETRY_RANGE: Final = error("ERR RETRY time must be a non negative number")
DELAY_RANGE: Final = error("ERR DELAY time must be a non negative number")
MAXLEN_RANGE: Final = error("ERR MAXLEN must be a positive number")
TIMEOUT_NOT_INTEGER: Final = error("ERR timeout is not an integer or out of range")
TIMEOUT_NEGATIVE: Final = error("ERR timeout is negative")
RETRY0_REPLICATE: Final = error("ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 "
                                "(at-most-once delivery)")
DELAY_TTL: Final = error("ERR The specified DELAY is greater than TTL. Job refused since would "
                         "never be delivered")
COUNT_RANGE: Final = error("ERR COUNT must be a number greater than zero")

# Extensions (docs/commands.md).
PRIORITY_RANGE: Final = error("ERR PRIORITY must be between 0 and 9")
MAXDELIVER_RANGE: Final = error("ERR MAXDELIVER must be between 0 (unlimited) and 65535")
DEADLETTER_EMPTY: Final = error("ERR DEADLETTER must name a queue")
BACKOFF_RANGE: Final = error("ERR BACKOFF must be a number between 1 and 1000")
MAXRETRY_RANGE: Final = error("ERR MAXRETRY must be a number > 0")
MAXRETRY_WITHOUT_BACKOFF: Final = error("ERR MAXRETRY is the cap of BACKOFF: give BACKOFF too")
DEDUPID_RANGE: Final = error("ERR DEDUPID must be 1 to 256 bytes")
HEADER_NAME_SIZE: Final = error("ERR HEADER name must be 1 to 256 bytes")
HEADERS_TOO_MANY: Final = error("ERR too many HEADERs: a job has at most 32")
HEADERS_TOO_LARGE: Final = error("ERR HEADERs too large: names and values of a job add up to "
                                 "at most 8192 bytes")
HEADER_REPEATED: Final = error("ERR HEADER name given twice")
NACK_REASON_SIZE: Final = error("ERR NACK REASON must be 1 to 1024 bytes")
ADDJOBS_DEDUPID: Final = error("ERR ADDJOBS gives each job its own DEDUPID: use DEDUPIDS "
                               "token body [token body ...]")
ADDJOBS_NO_JOBS: Final = error("ERR ADDJOBS needs BODIES body [body ...] or DEDUPIDS token body "
                               "[token body ...] after its options")
ADDJOBS_TOO_MANY: Final = error("ERR ADDJOBS adds at most 10000 jobs per call")


def dedup_pending(job_id: bytes) -> bytes:
    """A repeated DEDUPID whose first ADDJOB still waits for its replicas."""
    return (b"-PENDING Job " + job_id
            + b" with this DEDUPID is waiting for its replicas, retry later\r\n")

NOREPL_UNREACHABLE: Final = error("NOREPL Not enough reachable nodes for the requested replication level")
_NOREPL_NO_COPY: Final = ("NOREPL Not enough reachable nodes for the requested replication level, "
                          "since I'm unable to hold a copy of the message for the following reason: ")
NOREPL_LEAVING: Final = error(_NOREPL_NO_COPY + "I'm leaving the cluster")
NOREPL_OOM: Final = error(_NOREPL_NO_COPY + "I'm out of memory")
NOREPL_TIMEOUT: Final = error("NOREPL Timeout reached before replicating to the requested number of nodes")
NOREPL_REMOVED: Final = error("NOREPL job removed (expired?) before the requested replication level "
                              "was achieved")

INVALID_CURSOR: Final = error("ERR invalid cursor or option name")
INVALID_STATE: Final = error("ERR Invalid job state name")
INVALID_REPLY_TYPE: Final = error("ERR Invalid REPLY type, try ID or ALL")


def unknown_command(name: bytes) -> bytes:
    """``-ERR unknown command '<name as sent>'`` (newlines made spaces, at most 128 bytes)."""
    name = name[:128].replace(b"\r", b" ").replace(b"\n", b" ")
    return b"-ERR unknown command '" + name + b"'\r\n"


def wrong_arity(name: str) -> bytes:
    """``-ERR wrong number of arguments for '<name>' command``."""
    return error("ERR wrong number of arguments for '%s' command" % name)


def misconf(reason: str) -> bytes:
    """The reply while the last AOF write failed."""
    return error("MISCONF Errors writing to the AOF file: " + reason)
