//! Model warmup (`model_warmup` in the config): samples built once per
//! version from zeros, random bytes or files in the model's `warmup/`
//! folder, and run on every instance after it loads and before the version
//! is ready, as Triton does. A sample that cannot be built or that fails
//! fails the load with the reason.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nereid_core::model_config::ModelConfig;
use nereid_core::model_config::model_warmup::Input as WarmupInput;
use nereid_core::model_config::model_warmup::input::InputDataType;
use nereid_core::{BatchRequest, DataType, Error, InferRequest, InputTensor, ModelInstance};

use crate::batch::{gather, scatter};
use crate::stats::{ComputeTimes, ModelStats};
use crate::validate::{ValidatedRequest, validate};

/// The folder of a model that holds `input_data_file`s, as in Triton.
const WARMUP_FOLDER: &str = "warmup";

/// One `model_warmup` entry, ready to run.
#[derive(Debug)]
pub struct WarmupSample {
    pub name: String,
    /// `batch_size` requests of batch 1, run together as one batch.
    pub requests: Vec<ValidatedRequest>,
    /// How many times the sample runs (Triton's `count`; 0 means once).
    pub runs: u32,
}

/// Builds every warmup sample of `config`; samples of batch size 0 are
/// skipped, as in Triton.
pub fn samples(config: &ModelConfig, model_dir: &Path) -> Result<Vec<WarmupSample>, Error> {
    let mut samples = Vec::new();
    for warmup in config.model_warmup.iter().filter(|w| w.batch_size > 0) {
        let mut request = InferRequest {
            model_name: config.name.clone(),
            id: format!("warmup '{}'", warmup.name),
            ..InferRequest::default()
        };
        let mut names: Vec<&String> = warmup.inputs.keys().collect();
        names.sort();
        for name in names {
            let input = &warmup.inputs[name];
            request
                .inputs
                .push(warmup_input(config, model_dir, name, input)?);
        }
        let request = validate(config, request).map_err(|e| {
            Error::invalid_argument(format!("warmup sample '{}': {}", warmup.name, e.message()))
        })?;
        let requests = (0..warmup.batch_size).map(|_| request.clone()).collect();
        samples.push(WarmupSample {
            name: warmup.name.clone(),
            requests,
            runs: warmup.count.max(1),
        });
    }
    Ok(samples)
}

fn warmup_input(
    config: &ModelConfig,
    model_dir: &Path,
    name: &str,
    input: &WarmupInput,
) -> Result<InputTensor, Error> {
    let datatype = DataType::from_config(input.data_type()).ok_or_else(|| {
        Error::invalid_argument(format!("warmup input '{name}' has no valid data_type"))
    })?;
    let elements = input
        .dims
        .iter()
        .try_fold(1usize, |acc, &d| usize::try_from(d).ok().map(|d| acc * d))
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "warmup setting expects all variable-size dimensions are specified for input '{name}'"
            ))
        })?;
    // A BYTES element of zeros is its 4-byte length: an empty string.
    let byte_size = elements * datatype.element_size().unwrap_or(4);
    let data = match &input.input_data_type {
        Some(InputDataType::ZeroData(_)) => Bytes::from(vec![0u8; byte_size]),
        Some(InputDataType::RandomData(_)) if datatype == DataType::Bytes => {
            Bytes::from(vec![0u8; byte_size])
        }
        Some(InputDataType::RandomData(_)) => Bytes::from(random_bytes(byte_size)),
        Some(InputDataType::InputDataFile(file)) => {
            let data = read_warmup_file(model_dir, file)?;
            if datatype == DataType::Bytes {
                data
            } else if data.len() < byte_size {
                return Err(Error::invalid_argument(format!(
                    "warmup setting expects {byte_size} bytes, but the data provided from {file} only has {} bytes",
                    data.len()
                )));
            } else {
                data.slice(..byte_size)
            }
        }
        None => {
            return Err(Error::invalid_argument(format!(
                "warmup setting expects input '{name}' to have input_data_type set"
            )));
        }
    };
    let mut shape = Vec::with_capacity(input.dims.len() + 1);
    if config.max_batch_size > 0 {
        shape.push(1);
    }
    shape.extend(&input.dims);
    Ok(InputTensor {
        name: name.to_string(),
        datatype,
        shape,
        data,
        parameters: Default::default(),
    })
}

/// Reads `warmup/<file>` of the model; the name may not leave that folder.
fn read_warmup_file(model_dir: &Path, file: &str) -> Result<Bytes, Error> {
    // The name may not leave warmup/, nor warmup/ (a link) the model folder.
    let path = nereid_repository::inside(&model_dir.join(WARMUP_FOLDER), file)
        .and_then(|_| nereid_repository::inside(model_dir, &format!("{WARMUP_FOLDER}/{file}")))
        .map_err(|e| {
        Error::invalid_argument(format!(
            "warmup input_data_file must name a file inside the model's '{WARMUP_FOLDER}' folder: {e}"
        ))
    })?;
    std::fs::read(&path).map(Bytes::from).map_err(|e| {
        Error::invalid_argument(format!(
            "unable to read warmup data file '{}': {e}",
            path.display()
        ))
    })
}

/// Bytes from a small xorshift generator seeded by the clock: warmup needs
/// varied data, not unpredictable data.
fn random_bytes(len: usize) -> Vec<u8> {
    let mut state = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9E37_79B9_7F4A_7C15)
        | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// Runs every sample on a freshly loaded instance, each as one batch of its
/// requests, `runs` times. The first failure is the load's error. As in
/// Triton, warmup runs count in the version's statistics.
pub fn run(
    instance: &mut dyn ModelInstance,
    samples: &[WarmupSample],
    batching: bool,
    stats: &ModelStats,
) -> Result<(), Error> {
    for sample in samples {
        tracing::debug!(sample = %sample.name, "running warmup sample");
        for _ in 0..sample.runs {
            let started = Instant::now();
            run_once(instance, sample, batching).map_err(|e| {
                Error::internal(format!(
                    "failed to run warmup sample '{}': {e}",
                    sample.name
                ))
            })?;
            let times = ComputeTimes {
                infer: started.elapsed(),
                ..ComputeTimes::default()
            };
            let inferences = sample.requests.iter().map(|r| r.batch_size).sum();
            stats.record_execution(inferences, times);
            for _ in &sample.requests {
                stats.record_success(started.elapsed(), Duration::ZERO, times);
            }
        }
    }
    Ok(())
}

fn run_once(
    instance: &mut dyn ModelInstance,
    sample: &WarmupSample,
    batching: bool,
) -> Result<(), String> {
    if let Some(request_wise) = instance.as_request_wise() {
        let never = || false;
        let requests: Vec<BatchRequest<'_>> = sample
            .requests
            .iter()
            .map(|r| BatchRequest {
                request: &r.request,
                outputs: &r.outputs,
                cancelled: &never,
                responder: None,
            })
            .collect();
        let results = request_wise.execute_requests(&requests);
        return match results.into_iter().find_map(Result::err) {
            Some(e) => Err(e.to_string()),
            None => Ok(()),
        };
    }
    let requests: Vec<&ValidatedRequest> = sample.requests.iter().collect();
    let batch = gather(&requests, batching);
    let outputs = instance.execute(&batch).map_err(|e| e.to_string())?;
    scatter(&requests, outputs)
        .map(drop)
        .map_err(|e| e.message().to_string())
}
