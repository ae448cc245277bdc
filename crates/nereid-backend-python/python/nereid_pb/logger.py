"""pb_utils.Logger: log lines that end up in the server's log.

In a worker each call sends a `log` frame (level, message, and the caller's
file and line, as Triton records them); outside one it writes a Triton-style
line to stderr. Usable from any thread and at any time, also during
`auto_complete_config`.
"""

import enum
import os
import sys
import time

from . import runtime


class LogLevel(enum.IntEnum):
    """Triton's Logger.LogLevel values."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_WIRE_LEVELS = {
    LogLevel.INFO: "info",
    LogLevel.WARNING: "warn",
    LogLevel.ERROR: "error",
    LogLevel.VERBOSE: "verbose",
}
_LEADING_CHARS = {LogLevel.WARNING: "W", LogLevel.ERROR: "E"}


def _emit(message, level, depth):
    level = LogLevel(level)
    caller = sys._getframe(depth)
    filename, line = caller.f_code.co_filename, caller.f_lineno
    current = runtime.current()
    if current is not None:
        current.log(_WIRE_LEVELS[level], str(message), filename, line)
        return
    now = time.time()
    stamp = time.strftime("%m%d %H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}"
    lead = _LEADING_CHARS.get(level, "I")
    sys.stderr.write(f"{lead}{stamp} {os.getpid()} {os.path.basename(filename)}:{line}] {message}\n")


class Logger:
    """`Logger.log_info(msg)`, `log_warn`, `log_error`, `log_verbose`, and
    `Logger.log(msg, level=Logger.INFO)` with Logger.LogLevel values (also
    exported as Logger.INFO, .WARNING, .ERROR, .VERBOSE)."""

    LogLevel = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message, level=LogLevel.INFO):
        _emit(message, level, 2)

    @staticmethod
    def log_info(message):
        _emit(message, LogLevel.INFO, 2)

    @staticmethod
    def log_warn(message):
        _emit(message, LogLevel.WARNING, 2)

    @staticmethod
    def log_error(message):
        _emit(message, LogLevel.ERROR, 2)

    @staticmethod
    def log_verbose(message):
        _emit(message, LogLevel.VERBOSE, 2)
