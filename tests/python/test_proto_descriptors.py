"""Checks that Nereid's proto/ files are wire compatible with Triton.

The .proto files under proto/ are compiled with the protoc bundled in
``grpcio-tools`` (no system protoc needed) into a FileDescriptorSet. The
result is compared with the descriptors compiled into ``tritonclient``
(``tritonclient.grpc.service_pb2`` / ``model_config_pb2``): every message
(nested ones included), field, oneof, map, enum value and RPC that the
reference has must exist in ours with the same name, number, type, label
and type name. Our files may be a superset of the reference.

Run with:  .venv/bin/python -m pytest tests/python/test_proto_descriptors.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = REPO_ROOT / "proto"
TRITON_PROTOS = ("model_config.proto", "grpc_service.proto")
ALL_PROTOS = TRITON_PROTOS + ("health.proto",)

FDP = descriptor_pb2.FieldDescriptorProto
TYPE_NAMES = {v: k for k, v in FDP.Type.items()}
LABEL_NAMES = {v: k for k, v in FDP.Label.items()}


# --------------------------------------------------------------------------
# Compilation
# --------------------------------------------------------------------------


def _require_grpc_tools() -> None:
    try:
        import grpc_tools  # noqa: F401
    except ImportError:  # pragma: no cover - environment problem
        pytest.fail(
            "grpcio-tools is not installed in this interpreter; it provides the "
            "protoc used by this test. Install it with "
            "`.venv/bin/pip install -r scripts/requirements.txt`."
        )


def compile_protos(names, out_dir: Path) -> descriptor_pb2.FileDescriptorSet:
    """Compile proto/<names> with grpc_tools' protoc into a FileDescriptorSet."""
    _require_grpc_tools()
    out = out_dir / "descriptors.pb"
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--proto_path={PROTO_DIR}",
        "--include_imports",
        f"--descriptor_set_out={out}",
        *names,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not out.exists():
        pytest.fail(
            "protoc failed to compile "
            + ", ".join(names)
            + f" (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}",
            pytrace=False,
        )
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(out.read_bytes())
    return fds


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    fds = compile_protos(ALL_PROTOS, tmp_path_factory.mktemp("protoc"))
    return {f.name: f for f in fds.file}


@pytest.fixture(scope="module")
def reference() -> dict[str, descriptor_pb2.FileDescriptorProto]:
    try:
        from tritonclient.grpc import model_config_pb2, service_pb2
    except ImportError as exc:  # pragma: no cover - environment problem
        pytest.fail(
            f"tritonclient[grpc] is required as the reference schema ({exc}); "
            "install scripts/requirements.txt into the venv."
        )
    files = {}
    for mod in (model_config_pb2, service_pb2):
        fdp = descriptor_pb2.FileDescriptorProto()
        fdp.ParseFromString(mod.DESCRIPTOR.serialized_pb)
        files[fdp.name] = fdp
    return files


# --------------------------------------------------------------------------
# Flattening helpers
# --------------------------------------------------------------------------


def _walk_messages(prefix, messages, out):
    for msg in messages:
        full = f"{prefix}.{msg.name}"
        out[full] = msg
        _walk_messages(full, msg.nested_type, out)


def _walk_enums(prefix, messages, enums, out):
    for enum in enums:
        out[f"{prefix}.{enum.name}"] = enum
    for msg in messages:
        full = f"{prefix}.{msg.name}"
        _walk_enums(full, msg.nested_type, msg.enum_type, out)


def index(files):
    """Map fully qualified names to message / enum / service descriptors."""
    messages, enums, services = {}, {}, {}
    for fdp in files:
        pkg = "." + fdp.package if fdp.package else ""
        _walk_messages(pkg, fdp.message_type, messages)
        _walk_enums(pkg, fdp.message_type, fdp.enum_type, enums)
        for svc in fdp.service:
            services[f"{pkg}.{svc.name}"] = svc
    return messages, enums, services


def field_signature(msg: descriptor_pb2.DescriptorProto, field: FDP) -> dict:
    if field.HasField("oneof_index"):
        oneof = msg.oneof_decl[field.oneof_index].name
    else:
        oneof = None
    return {
        "number": field.number,
        "type": TYPE_NAMES[field.type],
        "label": LABEL_NAMES[field.label],
        "type_name": field.type_name,
        "oneof": oneof,
        "proto3_optional": field.proto3_optional,
        "packed": field.options.packed if field.options.HasField("packed") else None,
    }


def compare(reference_files, our_files) -> list[str]:
    """Return human readable differences (reference -> ours)."""
    diffs: list[str] = []
    ref_msgs, ref_enums, ref_svcs = index(reference_files)
    our_msgs, our_enums, our_svcs = index(our_files)

    for name, ref in ref_msgs.items():
        mine = our_msgs.get(name)
        if mine is None:
            diffs.append(f"message {name}: missing")
            continue
        if ref.options.map_entry != mine.options.map_entry:
            diffs.append(
                f"message {name}: map_entry is {mine.options.map_entry}, "
                f"expected {ref.options.map_entry}"
            )
        our_fields = {f.name: f for f in mine.field}
        our_by_number = {f.number: f.name for f in mine.field}
        for rf in ref.field:
            mf = our_fields.get(rf.name)
            if mf is None:
                extra = ""
                if rf.number in our_by_number:
                    extra = f" (number {rf.number} is used by '{our_by_number[rf.number]}')"
                diffs.append(f"field {name}.{rf.name} = {rf.number}: missing{extra}")
                continue
            want = field_signature(ref, rf)
            got = field_signature(mine, mf)
            for key in want:
                if want[key] != got[key]:
                    diffs.append(
                        f"field {name}.{rf.name}: {key} is {got[key]!r}, "
                        f"expected {want[key]!r}"
                    )
        our_oneofs = {o.name for o in mine.oneof_decl}
        for ro in ref.oneof_decl:
            if ro.name not in our_oneofs:
                diffs.append(f"oneof {name}.{ro.name}: missing")

    for name, ref in ref_enums.items():
        mine = our_enums.get(name)
        if mine is None:
            diffs.append(f"enum {name}: missing")
            continue
        our_values = {v.name: v.number for v in mine.value}
        for rv in ref.value:
            if rv.name not in our_values:
                diffs.append(f"enum value {name}.{rv.name} = {rv.number}: missing")
            elif our_values[rv.name] != rv.number:
                diffs.append(
                    f"enum value {name}.{rv.name}: number is "
                    f"{our_values[rv.name]}, expected {rv.number}"
                )

    for name, ref in ref_svcs.items():
        mine = our_svcs.get(name)
        if mine is None:
            diffs.append(f"service {name}: missing")
            continue
        our_methods = {m.name: m for m in mine.method}
        for rm in ref.method:
            mm = our_methods.get(rm.name)
            if mm is None:
                diffs.append(f"rpc {name}.{rm.name}: missing")
                continue
            for attr in ("input_type", "output_type", "client_streaming", "server_streaming"):
                if getattr(rm, attr) != getattr(mm, attr):
                    diffs.append(
                        f"rpc {name}.{rm.name}: {attr} is {getattr(mm, attr)!r}, "
                        f"expected {getattr(rm, attr)!r}"
                    )
    return diffs


def _fail_on(diffs: list[str], what: str) -> None:
    if diffs:
        pytest.fail(
            f"{len(diffs)} difference(s) between proto/ and {what}:\n  "
            + "\n  ".join(diffs),
            pytrace=False,
        )


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


@pytest.mark.parametrize("proto_name", TRITON_PROTOS)
def test_file_level_settings(ours, reference, proto_name):
    mine, ref = ours[proto_name], reference[proto_name]
    assert mine.syntax == "proto3"
    assert mine.package == ref.package == "inference"
    assert list(mine.dependency) == list(ref.dependency), (
        f"{proto_name} imports {list(mine.dependency)}, "
        f"Triton imports {list(ref.dependency)}"
    )


@pytest.mark.parametrize("proto_name", TRITON_PROTOS)
def test_matches_tritonclient(ours, reference, proto_name):
    """Everything in tritonclient's <proto_name> exists identically in ours."""
    diffs = compare([reference[proto_name]], [ours[proto_name]])
    _fail_on(diffs, f"tritonclient's {proto_name}")


def test_grpc_service_methods(ours, reference):
    """GRPCInferenceService has every RPC with identical types and streaming."""
    want = {
        m.name: (m.input_type, m.output_type, m.client_streaming, m.server_streaming)
        for m in reference["grpc_service.proto"].service[0].method
    }
    (svc,) = [s for s in ours["grpc_service.proto"].service if s.name == "GRPCInferenceService"]
    got = {
        m.name: (m.input_type, m.output_type, m.client_streaming, m.server_streaming)
        for m in svc.method
    }
    diffs = [
        f"rpc {name}: got {got.get(name)}, expected {sig}"
        for name, sig in want.items()
        if got.get(name) != sig
    ]
    # The RPCs Nereid must serve (Triton 2.51); guards against an old reference.
    required = {
        "ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
        "ModelInfer", "ModelStreamInfer", "ModelConfig", "ModelStatistics",
        "RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload",
        "SystemSharedMemoryStatus", "SystemSharedMemoryRegister",
        "SystemSharedMemoryUnregister", "CudaSharedMemoryStatus",
        "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister",
        "TraceSetting", "LogSettings",
    }
    diffs += [f"rpc {name}: missing" for name in sorted(required - got.keys())]
    stream = got.get("ModelStreamInfer")
    if stream is not None and not (stream[2] and stream[3]):
        diffs.append("rpc ModelStreamInfer: must be bidirectional streaming")
    _fail_on(diffs, "tritonclient's GRPCInferenceService")


def test_wire_roundtrip(ours):
    """Messages serialized by tritonclient parse losslessly with our schema."""
    from tritonclient.grpc import model_config_pb2, service_pb2

    pool = descriptor_pool.DescriptorPool()
    for name in ("model_config.proto", "grpc_service.proto"):
        pool.Add(ours[name])

    def ours_cls(full_name):
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))

    config = model_config_pb2.ModelConfig(
        name="m", backend="onnxruntime", max_batch_size=8,
        input=[model_config_pb2.ModelInput(name="x", data_type=model_config_pb2.TYPE_FP32, dims=[-1, 3])],
        output=[model_config_pb2.ModelOutput(name="y", data_type=model_config_pb2.TYPE_BF16, dims=[2])],
        dynamic_batching=model_config_pb2.ModelDynamicBatching(
            preferred_batch_size=[4], max_queue_delay_microseconds=100,
            priority_queue_policy={1: model_config_pb2.ModelQueuePolicy(max_queue_size=3)},
        ),
        instance_group=[model_config_pb2.ModelInstanceGroup(
            kind=model_config_pb2.ModelInstanceGroup.KIND_CPU, count=2)],
        parameters={"k": model_config_pb2.ModelParameter(string_value="v")},
        model_metrics=model_config_pb2.ModelMetrics(metric_control=[
            model_config_pb2.ModelMetrics.MetricControl(
                metric_identifier=model_config_pb2.ModelMetrics.MetricControl.MetricIdentifier(family="f"),
                histogram_options=model_config_pb2.ModelMetrics.MetricControl.HistogramOptions(buckets=[0.5, 1.0]),
            )
        ]),
    )
    request = service_pb2.ModelInferRequest(
        model_name="m", id="1",
        parameters={"sequence_id": service_pb2.InferParameter(uint64_param=7)},
        inputs=[service_pb2.ModelInferRequest.InferInputTensor(
            name="x", datatype="FP32", shape=[1, 3],
            contents=service_pb2.InferTensorContents(fp32_contents=[1.0, 2.0, 3.0]),
        )],
        outputs=[service_pb2.ModelInferRequest.InferRequestedOutputTensor(name="y")],
        raw_input_contents=[b"\x00\x01"],
    )
    response = service_pb2.ModelConfigResponse(config=config)

    diffs = []
    for msg in (config, request, response):
        name = msg.DESCRIPTOR.full_name
        wire = msg.SerializeToString(deterministic=True)
        try:
            parsed = ours_cls(name).FromString(wire)
            if parsed.SerializeToString(deterministic=True) != wire:
                diffs.append(f"{name}: binary re-serialization differs")
                continue
            # Text format drops unknown fields, so this only round-trips when
            # our schema recognised every tag (at every nesting level) under
            # the same names and enum values as Triton's.
            back = text_format.Parse(text_format.MessageToString(parsed), type(msg)())
        except Exception as exc:  # noqa: BLE001 - reported below
            diffs.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if back.SerializeToString(deterministic=True) != wire:
            diffs.append(f"{name}: text round trip through our schema lost data")
    _fail_on(diffs, "tritonclient (wire round trip)")


def test_health_proto(ours):
    """health.proto compiles and has the standard grpc.health.v1 shape."""
    health = ours["health.proto"]
    assert health.syntax == "proto3"
    assert health.package == "grpc.health.v1"

    msgs = {m.name: m for m in health.message_type}
    assert set(msgs) >= {"HealthCheckRequest", "HealthCheckResponse"}
    (service_field,) = msgs["HealthCheckRequest"].field
    assert (service_field.name, service_field.number, service_field.type) == (
        "service", 1, FDP.TYPE_STRING,
    )

    resp = msgs["HealthCheckResponse"]
    (status,) = resp.field
    assert (status.name, status.number, status.type, status.type_name) == (
        "status", 1, FDP.TYPE_ENUM, ".grpc.health.v1.HealthCheckResponse.ServingStatus",
    )
    (enum,) = resp.enum_type
    assert enum.name == "ServingStatus"
    assert {v.name: v.number for v in enum.value} == {
        "UNKNOWN": 0, "SERVING": 1, "NOT_SERVING": 2, "SERVICE_UNKNOWN": 3,
    }

    (svc,) = health.service
    assert svc.name == "Health"
    methods = {
        m.name: (m.input_type, m.output_type, m.client_streaming, m.server_streaming)
        for m in svc.method
    }
    req, res = ".grpc.health.v1.HealthCheckRequest", ".grpc.health.v1.HealthCheckResponse"
    assert methods == {"Check": (req, res, False, False), "Watch": (req, res, False, True)}


def test_health_matches_grpc_health_checking(ours):
    """When grpcio-health-checking is installed, compare with its descriptor too."""
    health_pb2 = pytest.importorskip("grpc_health.v1.health_pb2")
    ref = descriptor_pb2.FileDescriptorProto()
    ref.ParseFromString(health_pb2.DESCRIPTOR.serialized_pb)
    # Newer releases add a List RPC (HealthListRequest/Response); Nereid only
    # implements the classic Check and Watch, so compare that part.
    kept = [m for m in ref.message_type if m.name in ("HealthCheckRequest", "HealthCheckResponse")]
    del ref.message_type[:]
    ref.message_type.extend(kept)
    for svc in ref.service:
        methods = [m for m in svc.method if m.name in ("Check", "Watch")]
        del svc.method[:]
        svc.method.extend(methods)
    _fail_on(compare([ref], [ours["health.proto"]]), "grpc_health.v1")


def test_compare_detects_differences(reference):
    """Self-check: the comparison reports a renumbered field and a missing value."""
    broken = descriptor_pb2.FileDescriptorProto()
    broken.CopyFrom(reference["model_config.proto"])
    (cfg,) = [m for m in broken.message_type if m.name == "ModelConfig"]
    (backend,) = [f for f in cfg.field if f.name == "backend"]
    backend.number = 999
    (dtype,) = [e for e in broken.enum_type if e.name == "DataType"]
    del dtype.value[-1]
    diffs = compare([reference["model_config.proto"]], [broken])
    assert any("inference.ModelConfig.backend: number is 999" in d for d in diffs), diffs
    assert any(d.startswith("enum value .inference.DataType.") for d in diffs), diffs
