"""What the pb_utils calls that Triton binds with pybind11 share: its
argument checks and their messages, and the way into the server.

Triton's `load_model`, `MetricFamily` and their kin are C++ functions; a
wrong argument type fails in pybind11 with a TypeError listing the
signature, a value pybind11 cannot convert with a RuntimeError. Nereid's
versions answer the same way.
"""

from . import runtime
from .errors import TritonModelException

# pybind11's words when a value cannot become the C++ type (a list element,
# a dict key).
CAST_ERROR = (
    "Unable to cast Python instance to C++ type (#define "
    "PYBIND11_DETAILED_ERROR_MESSAGES or compile in debug mode for details)"
)


def incompatible(function, signature, args=(), kwargs=None, constructor=False):
    """pybind11's TypeError for arguments that fit no overload."""
    what = "constructor arguments" if constructor else "function arguments"
    invoked = ", ".join(repr(arg) for arg in args)
    if kwargs:
        listed = ", ".join(f"{key}={value!r}" for key, value in kwargs.items())
        invoked = f"{invoked}; kwargs: {listed}" if invoked else f"kwargs: {listed}"
    return TypeError(
        f"{function}(): incompatible {what}. The following argument types are "
        f"supported:\n    1. {signature}\n\nInvoked with: {invoked}"
    )


def is_float(value):
    """Whether pybind11 would take `value` for a C++ double."""
    return not isinstance(value, (str, bytes)) and hasattr(type(value), "__float__")


def server(what):
    """The worker's Runtime, for the pb_utils call `what`; outside a worker
    there is no server to ask."""
    current = runtime.current()
    if current is None:
        raise TritonModelException(f"{what} is only available inside a Nereid worker.")
    return current


def call(what, prefix, op, **fields):
    """Make the call `op` on the side channel; a failure raises
    TritonModelException("<prefix>: <Triton's words>")."""
    try:
        return server(what).call(op, fields)
    except runtime.CallFailed as error:
        raise TritonModelException(f"{prefix}: {error}") from None
