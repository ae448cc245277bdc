"""Calls the server through the side channel: custom metrics (a counter
made in initialize, others per case) and the model control calls. Each
request names a case in its `case` parameter; RESULT holds what the case
returned, or the exception it raised, as JSON text (with the `raise`
parameter, the exception fails the batch)."""

import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


def count(model):
    model.counter.increment(2)
    return model.counter.value()


def gauge_nan(model):
    family = pb_utils.MetricFamily("temperature", "", pb_utils.MetricFamily.GAUGE)
    gauge = family.Metric()
    gauge.set(float("nan"))
    return repr(gauge.value())


def lifetime(model):
    family = pb_utils.MetricFamily("short_lived", "d", pb_utils.MetricFamily.GAUGE)
    metric = family.Metric(labels={"k": "v"})
    del family
    metric.set(1)


def histogram_checks(model):
    family = pb_utils.MetricFamily("latency", "d", pb_utils.MetricFamily.HISTOGRAM)
    errors = []
    for labels, buckets in (({"x": "y"}, None), ({"x": "y"}, (1.0,)), ({"x": 1}, [1.0]), ({}, ["a"])):
        try:
            family.Metric(labels=labels, buckets=buckets)
        except Exception as error:
            errors.append(f"{type(error).__name__}: {error}")
    metric = family.Metric(labels={"x": "y"}, buckets=[0.5, 1])
    metric.observe(float("inf"))
    return errors


def load(model):
    pb_utils.load_model("other", config='{"backend": "python"}',
                        files={"file:1/model.py": b"print('other')", "file:1/empty.txt": b""})


def load_self(model):
    pb_utils.load_model("server_calls")


def unload(model):
    pb_utils.unload_model("other", unload_dependents=True)


def ready(model):
    return [pb_utils.is_model_ready("other"), pb_utils.is_model_ready("other", " 2x")]


def bad_version(model):
    pb_utils.is_model_ready("other", "-1")


def later(model):
    """Counts from a thread once execute has returned (the worker idle)."""
    def work():
        model.counter.increment(1)
        pb_utils.Logger.log_info(f"counted later: {model.counter.value()}")

    threading.Thread(target=work).start()


CASES = {f.__name__: f for f in (count, gauge_nan, lifetime, histogram_checks, load, load_self, unload,
                                 ready, bad_version, later)}


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily("requests_total", "Requests seen", pb_utils.MetricFamily.COUNTER)
        self.counter = self.family.Metric(labels={"model": args["model_name"]})

    def execute(self, requests):
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters())
            try:
                result = CASES[parameters["case"]](self)
            except Exception as error:
                if parameters.get("raise"):
                    raise
                result = f"{type(error).__name__}: {error}"
            data = np.array([json.dumps(result).encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("RESULT", data)]))
        return responses
