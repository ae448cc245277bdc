"""pb_utils.TritonError and pb_utils.TritonModelException.

Triton defines both in C++ (pybind11): TritonError is a plain value object
(not an exception) that a model puts in an InferenceResponse; the error code
constants live on the class (TritonError.NOT_FOUND ...) and default to
INTERNAL. TritonModelException is the exception Triton raises from its own
calls and that models may raise themselves.
"""

import enum


class ErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code values, in Triton's numbering. The name is what
    travels on the wire (`"code": "INVALID_ARG"`)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError:
    """An error carried by an InferenceResponse: `TritonError(message,
    code=TritonError.INTERNAL)`; read back with `message()` and `code()`."""

    UNKNOWN = ErrorCode.UNKNOWN
    INTERNAL = ErrorCode.INTERNAL
    NOT_FOUND = ErrorCode.NOT_FOUND
    INVALID_ARG = ErrorCode.INVALID_ARG
    UNAVAILABLE = ErrorCode.UNAVAILABLE
    UNSUPPORTED = ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = ErrorCode.ALREADY_EXISTS
    CANCELLED = ErrorCode.CANCELLED

    def __init__(self, message, code=ErrorCode.INTERNAL):
        if not isinstance(message, str):
            raise TypeError(
                f"TritonError message must be a str, found type '{type(message)}'"
            )
        try:
            self._code = ErrorCode(code)
        except ValueError:
            raise TypeError(f"TritonError code {code!r} is not a TritonError code") from None
        self._message = message

    def message(self):
        """The error message."""
        return self._message

    def code(self):
        """The error code (a TritonError.<NAME> constant)."""
        return self._code

    def __str__(self):
        return self._message

    def __repr__(self):
        return f"TritonError({self._message!r}, TritonError.{self._code.name})"


class TritonModelException(Exception):
    """Raised by pb_utils calls that fail, and by models to fail a call of
    theirs; `str(e)` is the message."""

    def message(self):
        """The exception message (kept from Triton's older pure-Python class)."""
        return str(self)


def not_supported(call, what):
    """The error for a Triton API call Nereid cannot honour yet: names the call
    and says why, so a model author sees at once what to change."""
    return TritonModelException(
        f"{call}: Nereid's Python backend does not support {what} yet."
    )
