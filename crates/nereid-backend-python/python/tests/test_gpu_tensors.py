"""GPU tensors (DLPack kDLCUDA) without a GPU: stand-in producers from
models/gpu_output/fake_gpu.py. In process: what pb_utils.Tensor does with
them; through a worker: that a GPU output reaches the server as a host copy."""

import json
import sys
import types

import numpy as np
import pytest

from harness import MODELS, PYTHON_DIR, outputs_by_name, read_tensor, request

sys.path.insert(0, str(PYTHON_DIR))
sys.path.insert(0, str(MODELS / "gpu_output"))
import triton_python_backend_utils as pb_utils  # noqa: E402
from fake_gpu import FakeGpuArray, FakeTorch, LegacyGpuArray, cuda_capsule  # noqa: E402
from nereid_pb import dlpack, wire  # noqa: E402
from nereid_pb.shm import OutputArena  # noqa: E402

GPU_NUMPY_MESSAGE = "Tensor is stored in GPU and cannot be converted to NumPy."


@pytest.fixture
def no_frameworks(monkeypatch):
    """torch and cupy unimportable (None in sys.modules makes import fail),
    so a fake CUDA capsule never reaches a real one."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "cupy", None)


def data_pointer(capsule):
    return dlpack._dl_tensor(capsule).data


def test_a_gpu_tensor_keeps_its_producer_and_is_not_cpu():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    producer = FakeGpuArray(array, device_id=3)
    tensor = pb_utils.Tensor.from_dlpack("OUT", producer)
    assert isinstance(tensor, pb_utils.Tensor)
    assert (tensor.name(), tensor.is_cpu(), tensor.shape(), tensor.triton_dtype()) == (
        "OUT", False, [2, 3], pb_utils.TRITONSERVER_TYPE_FP32)
    assert tensor.__dlpack_device__() == (2, 3)
    with pytest.raises(pb_utils.TritonModelException, match=f"^{GPU_NUMPY_MESSAGE}$"):
        tensor.as_numpy()
    # Another Tensor over it shares the same GPU memory.
    again = pb_utils.Tensor.from_dlpack("AGAIN", tensor)
    assert (again.name(), again.is_cpu(), again._data is tensor._data) == ("AGAIN", False, True)


def test_to_dlpack_hands_out_the_gpu_memory_itself():
    producer = FakeGpuArray(np.arange(4, dtype=np.int64), device_id=1)
    tensor = pb_utils.Tensor.from_dlpack("OUT", producer)
    producer.calls.clear()
    for capsule in (tensor.to_dlpack(), tensor.__dlpack__(stream=7)):
        described = dlpack.describe(capsule)
        assert described == (1, pb_utils.TRITONSERVER_TYPE_INT64, (4,))
        assert dlpack._dl_tensor(capsule).device.device_type == dlpack.KDL_CUDA
        assert data_pointer(capsule) == producer.array.ctypes.data, "zero copy"
    assert [call["stream"] for call in producer.calls] == [None, 7], "the consumer's stream is passed on"


def test_the_host_copy_asks_the_producer_for_a_cpu_copy():
    array = np.arange(5, dtype=np.float16)
    producer = FakeGpuArray(array)
    host = pb_utils.Tensor.from_dlpack("OUT", producer).to_host()
    assert producer.calls[-1] == {"stream": None, "dl_device": (1, 0), "copy": True}
    assert host.is_cpu() and host.triton_dtype() == pb_utils.TRITONSERVER_TYPE_FP16
    np.testing.assert_array_equal(host.as_numpy(), array)
    assert not np.shares_memory(host.as_numpy(), array)


def test_a_bf16_gpu_tensor_stays_bf16_on_the_host():
    words = np.array([0x3FC0, 0x4000], dtype=np.uint16)  # bfloat16 1.5 and 2.0

    class Bf16GpuArray(FakeGpuArray):
        def __dlpack__(self, **options):
            capsule = super().__dlpack__(**options)
            dlpack._dl_tensor(capsule).dtype.code = 4  # kDLBfloat
            return capsule

    tensor = pb_utils.Tensor.from_dlpack("OUT", Bf16GpuArray(words))
    assert tensor.triton_dtype() == pb_utils.TRITONSERVER_TYPE_BF16
    host = tensor.to_host()
    assert host.triton_dtype() == pb_utils.TRITONSERVER_TYPE_BF16
    np.testing.assert_array_equal(host._array, words)


def test_a_producer_without_dlpack_1_is_copied_through_its_framework(monkeypatch):
    array = np.arange(3, dtype=np.int32)
    legacy = pb_utils.Tensor.from_dlpack("OUT", LegacyGpuArray(array))
    with pytest.raises(pb_utils.TritonModelException,
                       match=r"^GPU tensor 'OUT' cannot be copied to host memory for the Nereid server: "
                             r"its producer \(LegacyGpuArray\) does not support "
                             r"__dlpack__\(dl_device=\(1, 0\), copy=True\)"):
        legacy.to_host()
    monkeypatch.setitem(sys.modules, "torch", FakeTorch)
    host = pb_utils.Tensor.from_dlpack("OUT", FakeTorch.Tensor(array)).to_host()
    np.testing.assert_array_equal(host.as_numpy(), array)


def test_a_bare_capsule_is_adopted_by_a_framework_or_refused_at_the_copy(no_frameworks, monkeypatch):
    array = np.arange(4, dtype=np.float32)
    bare = pb_utils.Tensor.from_dlpack("OUT", cuda_capsule(array, device_id=2))
    assert (bare.is_cpu(), bare.shape(), bare.__dlpack_device__()) == (False, [4], (2, 2))
    refused = "^GPU tensor 'OUT' was made from a bare DLPack capsule that neither torch nor cupy could take,"
    with pytest.raises(pb_utils.TritonModelException, match=refused):
        bare.to_host()
    assert data_pointer(bare.to_dlpack()) == array.ctypes.data

    adopted = []

    def from_dlpack(capsule):
        adopted.append(capsule)
        return FakeGpuArray(array, device_id=2)

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(from_dlpack=from_dlpack))
    tensor = pb_utils.Tensor.from_dlpack("OUT", cuda_capsule(array, device_id=2))
    assert len(adopted) == 1 and isinstance(tensor._data.source, FakeGpuArray)
    np.testing.assert_array_equal(tensor.to_host().as_numpy(), array)


def test_a_strided_gpu_capsule_is_refused_as_triton_does(no_frameworks):
    strided = np.arange(6, dtype=np.float32).reshape(2, 3).T
    with pytest.raises(pb_utils.TritonModelException, match="^DLPack tensor is not contiguous"):
        pb_utils.Tensor.from_dlpack("OUT", cuda_capsule(strided))


def test_gpu_tensors_are_written_to_shared_memory_as_host_copies():
    # The path of response outputs and BLS request inputs alike.
    arena = OutputArena()
    try:
        array = np.arange(8, dtype=np.float32)
        tensors = [pb_utils.Tensor.from_dlpack("GPU", FakeGpuArray(array)), pb_utils.Tensor("CPU", array)]
        placed, sizes, offsets, block = wire.place_tensors(tensors, arena)
        for tensor, size, offset in zip(placed, sizes, offsets):
            descriptor = {"name": tensor.name(), "datatype": "FP32", "shape": [8],
                          "shm": {"path": block.path, "offset": offset, "size": size}}
            np.testing.assert_array_equal(read_tensor(descriptor), array)
        arena.free(block)
    finally:
        arena.close()


def test_a_gpu_output_reaches_the_server_in_host_memory(start_worker, shm):
    worker = start_worker()
    worker.initialize("gpu_output")
    data = np.arange(5, dtype=np.float32)
    reply = worker.execute([request("r", [shm.put("INPUT0", "FP32", data)], ["OUTPUT0", "INFO"])])
    assert reply["error"] is None
    outputs = outputs_by_name(reply["responses"][0])
    np.testing.assert_array_equal(read_tensor(outputs["OUTPUT0"]), data * 2)
    assert outputs["OUTPUT0"]["datatype"] == "FP32"
    assert json.loads(read_tensor(outputs["INFO"])[0]) == {
        "is_cpu": False, "device": [2, 0], "shape": [5], "dtype": pb_utils.TRITONSERVER_TYPE_FP32,
        "as_numpy": GPU_NUMPY_MESSAGE}


def test_a_gpu_output_that_cannot_be_copied_fails_the_batch(start_worker, shm):
    worker = start_worker()
    worker.initialize("gpu_output")
    inputs = [shm.put("INPUT0", "FP32", np.ones(2, np.float32))]
    reply = worker.execute([request("r", inputs, ["OUTPUT0"], parameters={"producer": "legacy"})])
    assert reply["responses"] is None
    assert reply["error"]["message"].startswith(
        "Failed to process the request(s) for model 'gpu_output_0_0', message: "
        "TritonModelException: GPU tensor 'OUTPUT0' cannot be copied to host memory")
