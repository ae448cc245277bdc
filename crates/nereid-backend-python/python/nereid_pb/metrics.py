"""pb_utils.MetricFamily and its Metric: custom metrics on the server's
metrics endpoint (Triton's custom metrics API).

Every operation is a call to the server (README.md, "Side channel"), which
keeps the values: the metrics of all instances of all models live there,
and two Metric objects with the same family and labels share one series.
As in Triton, a MetricFamily object holds its metrics: deleting a Metric
object changes nothing, deleting (garbage collecting) the MetricFamily
removes the series made through it, and its Metric objects fail from then
on. When the worker exits the server drops whatever it still held.
"""

import enum
import json
import math

from . import runtime
from .calls import CAST_ERROR, call, incompatible, is_float, server
from .errors import TritonModelException

_FAMILY_SIGNATURE = (
    "triton_python_backend_utils.MetricFamily(name: str, description: str, "
    "kind: triton_python_backend_utils.MetricKind)"
)
_DELETED = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. "
    "The 'MetricFamily' object should be deleted AFTER its corresponding 'Metric' "
    "objects have been deleted."
)


class MetricKind(enum.IntEnum):
    """Triton's MetricKind (MetricFamily.COUNTER, .GAUGE, .HISTOGRAM)."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


def _number(value):
    """A float as a frame carries it: JSON has no NaN nor infinities."""
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


class _Life:
    """Whether a family object still lives; its metrics hold this, not the
    family (which then dies as soon as the model drops it, as in Triton)."""

    __slots__ = ("alive",)

    def __init__(self):
        self.alive = True


class MetricFamily:
    """`MetricFamily(name, description, kind)`: creates the family on the
    server, or takes the one with that name (whose kind must match; its
    first description stays)."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, *args, **kwargs):
        self._id = None
        try:
            name, description, kind = _family_arguments(*args, **kwargs)
        except TypeError:
            raise incompatible(
                "__init__", _FAMILY_SIGNATURE, args, kwargs, constructor=True
            ) from None
        reply = call(
            "pb_utils.MetricFamily", "Error when creating MetricFamily", "metric_family",
            name=name, description=description, kind=kind.name,
        )
        self._id = reply["id"]
        self._kind = kind
        self._life = _Life()

    def Metric(self, labels=None, buckets=None):  # noqa: N802 (Triton's name)
        """A Metric of this family with `labels` (a dict of str, or None);
        a histogram needs `buckets` (a list of increasing bounds), the
        other kinds take none."""
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        labels = json.loads(json.dumps(labels))  # keys as Triton's JSON makes them
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != MetricKind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
            if not all(is_float(bound) for bound in buckets):
                raise RuntimeError(CAST_ERROR)
            buckets = [_number(bound) for bound in buckets]
        elif self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        prefix = "Error when creating Metric"
        if labels and not all(isinstance(value, str) for value in labels.values()):
            # Triton's JSON parser's words for a label that is no string.
            raise TritonModelException(
                f"{prefix}: {server('Metric').failure('attempt to access JSON non-string as string')}"
            )
        reply = call("Metric", prefix, "metric", family=self._id, labels=labels, buckets=buckets)
        return Metric(reply["id"], self._life)

    def __del__(self):
        if getattr(self, "_id", None) is None:
            return
        self._life.alive = False
        current = runtime.current()
        if current is not None:
            try:
                current.notify({"op": "metric_family_delete", "family": self._id})
            except Exception:
                pass


def _family_arguments(name, description, kind):
    if not isinstance(name, str) or not isinstance(description, str):
        raise TypeError
    if not isinstance(kind, MetricKind):
        raise TypeError
    return name, description, kind


class Metric:
    """One series of a MetricFamily: `increment(value)`, `set(value)`,
    `observe(value)`, `value()`, each checked by the server against the
    family's kind."""

    def __init__(self, metric_id, life):
        self._id = metric_id
        self._life = life

    def increment(self, value):
        """Add `value` (a counter takes no negative value)."""
        self._update("increment", "Failed to increment metric value", value)

    def set(self, value):
        """Set a gauge to `value`."""
        self._update("set", "Failed to set metric value", value)

    def observe(self, value):
        """Add an observation to a histogram."""
        self._update("observe", "Failed to observe metric value", value)

    def value(self):
        """A counter's or gauge's current value (a histogram has none)."""
        reply = self._update("value", "Failed to get metric value", None)
        return float(reply.get("value", 0.0))  # "nan", "inf", "-inf" too

    def _update(self, action, prefix, value):
        if action != "value" and not is_float(value):
            raise incompatible(
                action,
                "(self: triton_python_backend_utils.Metric, arg0: float) -> None",
                (self, value),
            )
        if not self._life.alive:
            raise TritonModelException(f"{prefix}: {_DELETED}")
        fields = {"metric": self._id, "action": action}
        if action != "value":
            fields["value"] = _number(value)
        return call("Metric", prefix, "metric_update", **fields)
