"""Message texts of config errors and CONFIG replies, written once.

spec: config.md §1-2, commands.md CONFIG; the wording is the C server's,
since operators and scripts match on it.
"""

from typing import Final

FATAL_AT_LINE: Final = ("\n*** FATAL CONFIG FILE ERROR ***\n"
                        "Reading the configuration file, at line {number}\n"
                        ">>> '{line}'\n"
                        "{reason}\n")
CANT_OPEN_CONFIG: Final = "Fatal error, can't open config file '{path}': {reason}"

BAD_DIRECTIVE: Final = "Bad directive or wrong number of arguments"
UNBALANCED_QUOTES: Final = "Unbalanced quotes in configuration line"
NOT_YES_NO: Final = "argument must be 'yes' or 'no'"
NOT_INTEGER: Final = "argument couldn't be parsed into an integer"
NOT_MEMORY: Final = "argument must be a memory value"
INVALID_PORT: Final = "Invalid port"
INVALID_BUS_PORT: Final = "Invalid cluster bus port"
INVALID_BACKLOG: Final = "Invalid backlog value"
TOO_MANY_BIND: Final = "Too many bind addresses specified"
INVALID_SOCKET_PERM: Final = "Invalid socket file permissions"
INVALID_TIMEOUT: Final = "Invalid timeout value"
INVALID_KEEPALIVE: Final = "Invalid tcp-keepalive value"
INVALID_SUPERVISED: Final = "Invalid option for 'supervised'. Allowed values: 'systemd', 'auto', or 'no'"
INVALID_LOGLEVEL: Final = "Invalid log level. Must be one of debug, verbose, notice, warning"
INVALID_FACILITY: Final = "Invalid log facility. Must be one of USER or between LOCAL0-LOCAL7"
CANT_CHDIR: Final = "Can't chdir to '{path}': {reason}"
INVALID_DATABASES: Final = "Invalid number of databases"
INCLUDE_TOO_DEEP: Final = "Too many nested include directives"
INVALID_MAXCLIENTS: Final = "Invalid max clients limit"
MAXMEMORY_NOT_POSITIVE: Final = "You need to specify a memory limit greater than zero"
INVALID_POLICY: Final = "Invalid maxmemory policy"
INVALID_SAMPLES: Final = "maxmemory-samples must be 1 or greater"
APPENDFILENAME_PATH: Final = "appendfilename can't be a path, just a filename"
INVALID_FSYNC: Final = "argument must be 'no', 'always' or 'everysec'"
NEGATIVE_PERCENTAGE: Final = "Invalid negative percentage for AOF auto rewrite"
NEGATIVE_MIN_SIZE: Final = "auto-aof-rewrite-min-size can't be negative"
PASSWORD_TOO_LONG: Final = "Password is longer than DISQUE_AUTHPASS_MAX_LEN"
NO_SUCH_COMMAND: Final = "No such command in rename-command"
TARGET_EXISTS: Final = "Target command name already exists"
NODE_TIMEOUT_TOO_SMALL: Final = "cluster node timeout must be 1 or greater"
NEGATIVE_SLOWLOG_LEN: Final = "slowlog-max-len can't be negative"
NEGATIVE_LATENCY: Final = "The latency threshold can't be negative"
UNKNOWN_CLIENT_CLASS: Final = "Unrecognized client limit class"
NEGATIVE_SOFT_SECONDS: Final = "Negative number of seconds in soft limit is invalid"
PROTO_MAX_BULK_LEN_TOO_SMALL: Final = "proto-max-bulk-len must be 1mb or greater"

ERR_UNSUPPORTED: Final = "ERR Unsupported CONFIG parameter: {name}"
# A parameter that exists but is read at startup only (Redis 7's text);
# ERR_UNSUPPORTED is for names that are no parameter.
ERR_IMMUTABLE: Final = ("ERR CONFIG SET failed (possibly related to argument '{name}') - "
                        "can't set immutable config")
ERR_INVALID_ARGUMENT: Final = "ERR Invalid argument '{value}' for CONFIG SET '{name}'"
ERR_CHANGING_DIR: Final = "ERR Changing directory: {reason}"
ERR_NO_CONFIG_FILE: Final = "ERR The server is running without a config file"
ERR_REWRITING: Final = "ERR Rewriting config file: {reason}"
INVALID_MAXDELIVER: Final = "maxdeliver-default must be between 0 (unlimited) and 65535"
INVALID_DEDUP_WINDOW: Final = "dedup-window must be between 0 (off) and 2592000 seconds"
SCHEDULE_MAX_BODY_TOO_SMALL: Final = "schedule-max-body must be 1kb or greater"
INVALID_METRICS_PORT: Final = "Invalid metrics port"
INVALID_DASHBOARD_HOST: Final = ("dashboard-hosts takes host names, IP addresses or *, "
                                 "at most 64 of them")
INVALID_METRICS_MAX_QUEUES: Final = "metrics-max-queues must be between 0 and 100000"
INVALID_TLS_PORT: Final = "Invalid tls-port"
INVALID_TLS_AUTH_CLIENTS: Final = "tls-auth-clients must be one of yes, no, optional"
INVALID_TLS_PROTOCOLS: Final = "tls-protocols takes TLSv1, TLSv1.1, TLSv1.2 and TLSv1.3, separated by spaces"
QUERY_BUFFER_LIMIT_TOO_SMALL: Final = "client-query-buffer-limit must be 1mb or greater"
UNAUTH_BUFFER_LIMIT_TOO_SMALL: Final = "unauthenticated-query-buffer-limit must be 1kb or greater"
INVALID_MAXMEMORY_CLIENTS: Final = ("maxmemory-clients must be a memory value, or a percentage of "
                                    "maxmemory from 0% to 100%")
INVALID_GETJOB_MAX_QUEUES: Final = "getjob-max-queues must be 1 or greater"
INVALID_REQUEST_TIMEOUT: Final = "client-request-timeout can't be negative"
INVALID_ENABLE_OPTION: Final = "argument must be 'no', 'local' or 'yes'"
INVALID_USER_NAME: Final = "user names are printable ASCII without spaces"
ACLFILE_AND_USERS: Final = ("Configuring Disque with users defined in the config file and at the "
                            "same time an ACL file path (aclfile) is invalid. This setup is very "
                            "likely to lead to configuration errors and security holes, please "
                            "define either an ACL file or declare users directly in the config "
                            "file, but not both.")
