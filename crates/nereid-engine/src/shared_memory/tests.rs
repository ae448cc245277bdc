use std::io::{Read, Seek, Write};

use bytes::Bytes;
use nereid_core::{
    DataType, ErrorKind, InferRequest, InputTensor, Parameter, Parameters, RequestedOutput,
};
use tempfile::NamedTempFile;

use super::*;
use crate::test_support::uint8_response;

/// A shared memory object of `len` bytes 0, 1, 2, ... and its key.
fn object(len: usize) -> (NamedTempFile, String) {
    let mut file = tempfile::Builder::new()
        .prefix("nereid-test-")
        .tempfile_in("/dev/shm")
        .unwrap();
    let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
    file.write_all(&data).unwrap();
    let name = file.path().file_name().unwrap().to_str().unwrap();
    let key = format!("/{name}");
    (file, key)
}

fn place(region: &str, offset: i64, size: Option<i64>) -> Parameters {
    let mut p = Parameters::from([
        (
            nereid_core::shared_memory::REGION.to_string(),
            Parameter::String(region.into()),
        ),
        (
            nereid_core::shared_memory::OFFSET.to_string(),
            Parameter::Int64(offset),
        ),
    ]);
    if let Some(size) = size {
        p.insert(
            nereid_core::shared_memory::BYTE_SIZE.to_string(),
            Parameter::Int64(size),
        );
    }
    p
}

fn request_with_input(parameters: Parameters) -> InferRequest {
    InferRequest {
        inputs: vec![InputTensor {
            name: "IN".into(),
            datatype: DataType::Uint8,
            shape: vec![4],
            data: Bytes::new(),
            parameters,
        }],
        ..InferRequest::default()
    }
}

fn message(e: SharedMemoryError) -> String {
    e.to_string()
}

#[test]
fn registers_shows_and_unregisters() {
    let (_file, key) = object(64);
    let registry = SharedMemoryRegistry::default();
    registry.register("b", &key, 8, 16).unwrap();
    registry.register("a", &key[1..], 0, 64).unwrap();
    let all = registry.status(None).unwrap();
    assert_eq!(
        all.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(all[1].offset, 8);
    assert_eq!(all[1].byte_size, 16);
    assert_eq!(all[1].key, key);
    registry.unregister("a");
    registry.unregister("never-registered");
    assert_eq!(
        message(registry.status(Some("a")).unwrap_err()),
        "Unable to find system shared memory region: 'a'"
    );
    registry.unregister_all();
    assert!(registry.status(None).unwrap().is_empty());
}

#[test]
fn refuses_what_triton_refuses() {
    let (_file, key) = object(64);
    let registry = SharedMemoryRegistry::default();
    registry.register("r", &key, 0, 64).unwrap();
    let e = registry.register("r", &key, 0, 8).unwrap_err();
    assert_eq!(message(e), "shared memory region 'r' already in manager");
    let e = registry.register("s", &key, 32, 33).unwrap_err();
    assert_eq!(
        message(e),
        "failed to register shared memory region 's': invalid args"
    );
    let e = registry.register("s", &key, u64::MAX, 2).unwrap_err();
    assert!(matches!(e, SharedMemoryError::OutsideFile { .. }));
    let e = registry.register("s", &key, 0, 0).unwrap_err();
    assert!(matches!(e, SharedMemoryError::Empty { .. }));
    let e = registry
        .register("s", "/nereid-no-such-object", 0, 8)
        .unwrap_err();
    assert_eq!(
        message(e),
        "Unable to open shared memory region: '/nereid-no-such-object'"
    );
    let e = registry.register("s", "/../etc/passwd", 0, 8).unwrap_err();
    assert!(matches!(e, SharedMemoryError::Open { .. }));
    assert_eq!(registry.status(None).unwrap().len(), 1);
}

#[test]
fn inputs_are_slices_of_their_region() {
    let (_file, key) = object(64);
    let registry = SharedMemoryRegistry::default();
    registry.register("r", &key, 16, 32).unwrap();
    let mut request = request_with_input(place("r", 4, Some(4)));
    let plan = registry.prepare(&mut request).unwrap();
    assert!(plan.is_empty());
    assert_eq!(&request.inputs[0].data[..], &[20, 21, 22, 23]);
    assert!(request.inputs[0].parameters.is_empty());
}

#[test]
fn bad_input_places_are_refused_in_tritons_order() {
    let (_file, key) = object(64);
    let registry = SharedMemoryRegistry::default();
    registry.register("r", &key, 0, 32).unwrap();
    let cases = [
        (
            place("nope", 0, Some(4)),
            ErrorKind::NotFound,
            "Unable to find shared memory region: 'nope'",
        ),
        (
            place("r", 32, Some(4)),
            ErrorKind::InvalidArgument,
            "Invalid offset for shared memory region: 'r'",
        ),
        (
            place("r", 30, Some(4)),
            ErrorKind::InvalidArgument,
            "Invalid offset + byte size for shared memory region: 'r'",
        ),
        (
            place("r", 0, None),
            ErrorKind::InvalidArgument,
            "Invalid offset + byte size for shared memory region: 'r'",
        ),
        (
            place("r", -1, Some(4)),
            ErrorKind::InvalidArgument,
            "Unable to parse 'shared_memory_offset': attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
    ];
    for (params, kind, text) in cases {
        let e = registry
            .prepare(&mut request_with_input(params))
            .unwrap_err();
        assert_eq!((e.kind(), e.message()), (kind, text));
    }
}

#[test]
fn unregistering_keeps_the_mapping_of_requests_in_flight() {
    let (_file, key) = object(64);
    let registry = SharedMemoryRegistry::default();
    registry.register("r", &key, 0, 64).unwrap();
    let mut request = request_with_input(place("r", 60, Some(4)));
    registry.prepare(&mut request).unwrap();
    registry.unregister("r");
    assert!(registry.status(None).unwrap().is_empty());
    assert_eq!(&request.inputs[0].data[..], &[60, 61, 62, 63]);
    // The name is free again at once.
    registry.register("r", &key, 0, 8).unwrap();
}

fn request_with_output(parameters: Parameters) -> InferRequest {
    InferRequest {
        outputs: vec![RequestedOutput {
            name: "OUT".into(),
            parameters,
        }],
        ..InferRequest::default()
    }
}

#[test]
fn outputs_are_written_into_their_region() {
    let (mut file, key) = object(64);
    let registry = SharedMemoryRegistry::default();
    registry.register("r", &key, 8, 16).unwrap();
    let plan = registry
        .prepare(&mut request_with_output(place("r", 4, Some(8))))
        .unwrap();
    // Unregistered while the request runs: the write still lands.
    registry.unregister("r");
    let mut response = uint8_response(vec![0xAA; 8]);
    plan.write(&mut response).unwrap();
    assert!(response.outputs[0].data.is_empty());
    assert_eq!(response.in_shared_memory, ["OUT"]);
    let mut contents = Vec::new();
    file.rewind().unwrap();
    file.read_to_end(&mut contents).unwrap();
    assert_eq!(contents[11], 11);
    assert_eq!(&contents[12..20], &[0xAA; 8]);
    assert_eq!(contents[20], 20);
}

#[test]
fn an_output_larger_than_its_place_is_refused() {
    let (_file, key) = object(64);
    let registry = SharedMemoryRegistry::default();
    registry.register("r", &key, 0, 64).unwrap();
    let plan = registry
        .prepare(&mut request_with_output(place("r", 0, Some(4))))
        .unwrap();
    let e = plan.write(&mut uint8_response(vec![1; 8])).unwrap_err();
    assert_eq!(
        message(e),
        "shared memory size specified with the request for output 'OUT' (4 bytes) should be at least 8 bytes to hold the results"
    );
}

/// A registry over two fake GPUs, whose device memory is shared memory
/// objects named in their handles.
fn cuda_registry() -> SharedMemoryRegistry {
    let gpus = nereid_device::FakeGpus::with_count(2);
    SharedMemoryRegistry::new(nereid_device::Devices::with_layer(Arc::new(gpus)))
}

fn fake_handle(key: &str) -> [u8; 64] {
    nereid_device::FakeGpus::handle(key).unwrap()
}

#[test]
fn cuda_regions_register_and_list_apart_from_system_ones() {
    let (_file, key) = object(64);
    let registry = cuda_registry();
    assert!(registry.cuda_supported());
    registry
        .register_cuda("c", &fake_handle(&key), 1, 32)
        .unwrap();
    registry.register("s", &key, 0, 8).unwrap();
    let cuda = registry.cuda_status(None).unwrap();
    assert_eq!(
        cuda,
        [CudaRegionStatus {
            name: "c".into(),
            device_id: 1,
            byte_size: 32
        }]
    );
    assert_eq!(registry.status(None).unwrap().len(), 1);
    // One namespace for both kinds, as in Triton.
    let e = registry.register("c", &key, 0, 8).unwrap_err();
    assert_eq!(message(e), "shared memory region 'c' already in manager");
    let e = registry
        .register_cuda("s", &fake_handle(&key), 0, 8)
        .unwrap_err();
    assert_eq!(message(e), "shared memory region 's' already in manager");
    assert_eq!(
        message(registry.status(Some("c")).unwrap_err()),
        "The region named 'c' is registered as CUDA shared memory, not system shared memory"
    );
    assert_eq!(
        message(registry.cuda_status(Some("s")).unwrap_err()),
        "The region named 's' is registered as system shared memory, not CUDA shared memory"
    );
    assert_eq!(
        message(registry.cuda_status(Some("x")).unwrap_err()),
        "Unable to find cuda shared memory region: 'x'"
    );
    // Unregistering one kind leaves the other alone.
    registry.unregister("c");
    registry.unregister_all();
    assert_eq!(registry.cuda_status(None).unwrap().len(), 1);
    registry.unregister_all_cuda();
    assert!(registry.cuda_status(None).unwrap().is_empty());
}

#[test]
fn cuda_registration_refuses_what_triton_refuses() {
    let (_file, key) = object(64);
    let registry = cuda_registry();
    for (device, size) in [(2, 8), (u64::MAX, 8), (0, 65)] {
        let e = registry
            .register_cuda("c", &fake_handle(&key), device, size)
            .unwrap_err();
        let e = Error::from(e);
        assert_eq!(
            (e.kind(), e.message()),
            (
                ErrorKind::InvalidArgument,
                "failed to register shared memory region 'c': invalid args"
            )
        );
    }
    let none = SharedMemoryRegistry::default();
    assert!(!none.cuda_supported());
    let e = Error::from(none.register_cuda("c", &[0; 64], 0, 8).unwrap_err());
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(
        e.message()
            .starts_with("CUDA shared memory is not supported")
    );
}

#[test]
fn cuda_inputs_are_copied_to_the_host_and_outputs_back() {
    let (mut file, key) = object(64);
    let registry = cuda_registry();
    registry
        .register_cuda("c", &fake_handle(&key), 0, 64)
        .unwrap();
    let mut request = request_with_input(place("c", 4, Some(4)));
    registry.prepare(&mut request).unwrap();
    assert_eq!(&request.inputs[0].data[..], &[4, 5, 6, 7]);
    let plan = registry
        .prepare(&mut request_with_output(place("c", 40, Some(8))))
        .unwrap();
    let mut response = uint8_response(vec![0xBB; 8]);
    plan.write(&mut response).unwrap();
    assert_eq!(response.in_shared_memory, ["OUT"]);
    let mut contents = Vec::new();
    file.rewind().unwrap();
    file.read_to_end(&mut contents).unwrap();
    assert_eq!(&contents[40..48], &[0xBB; 8]);
    assert_eq!(contents[48], 48);
}
