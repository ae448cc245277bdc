//! What the engine adds for a model with `sequence_batching`: reading a
//! request's sequence parameters (with Triton's errors), the control
//! tensors (START, END, READY, CORRID) and implicit state each step gets,
//! the rows of slots without a request (READY false), and keeping the state
//! outputs of a step for the next one instead of answering them.

use std::path::Path;

use bytes::Bytes;
use nereid_core::model_config::model_sequence_batching::control::Kind;
use nereid_core::model_config::model_sequence_batching::initial_state::StateData;
use nereid_core::model_config::{DataType as ConfigDataType, ModelConfig};
use nereid_core::{DataType, Error, InferRequest, InputTensor, Parameters, Tensor};
use nereid_scheduler::{CorrelationId, Placement};

use crate::validate::ValidatedRequest;

/// A request's place in its sequence, from its parameters.
#[derive(Debug)]
pub struct SequenceRequest {
    pub id: CorrelationId,
    pub start: bool,
    pub end: bool,
    /// Set by the sequence batcher when it sends the request.
    pub placement: Option<Placement>,
}

/// A control input: its tensor name, what it signals, and its values.
#[derive(Debug)]
enum Control {
    /// START, END or READY: the false and true values, one element each.
    Flag {
        name: String,
        kind: Kind,
        datatype: DataType,
        values: [Bytes; 2],
    },
    Corrid {
        name: String,
        datatype: DataType,
    },
}

/// An implicit state: fed to `input`, read back from `output`.
#[derive(Debug)]
struct StateSpec {
    input: String,
    output: String,
    datatype: DataType,
    /// One sequence's initial state, without the batch dimension.
    initial: Tensor,
}

/// A model's sequence settings, as the engine uses them.
#[derive(Debug)]
pub struct SequenceSetup {
    model: String,
    batching: bool,
    controls: Vec<Control>,
    states: Vec<StateSpec>,
}

impl SequenceSetup {
    /// The setup of `config`'s `sequence_batching`, `None` without one.
    /// `model_dir` holds `initial_state/` data files.
    pub fn from_config(config: &ModelConfig, model_dir: &Path) -> Result<Option<Self>, Error> {
        use nereid_core::model_config::model_config::SchedulingChoice;
        let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice else {
            return Ok(None);
        };
        let invalid =
            |what: String| Error::invalid_argument(format!("model '{}': {what}", config.name));
        let datatype = |dt: i32, what: &str| {
            ConfigDataType::try_from(dt)
                .ok()
                .and_then(DataType::from_config)
                .ok_or_else(|| invalid(format!("{what} has no usable data type")))
        };
        let mut controls = Vec::new();
        for input in &sb.control_input {
            for control in &input.control {
                let kind = Kind::try_from(control.kind).unwrap_or(Kind::ControlSequenceStart);
                let entry = if kind == Kind::ControlSequenceCorrid {
                    Control::Corrid {
                        name: input.name.clone(),
                        datatype: datatype(control.data_type, &input.name)?,
                    }
                } else {
                    let (datatype, values) = flag_values(control).ok_or_else(|| {
                        invalid(format!("control '{}' has no values", input.name))
                    })?;
                    Control::Flag {
                        name: input.name.clone(),
                        kind,
                        datatype,
                        values,
                    }
                };
                controls.push(entry);
            }
        }
        if !sb.state.is_empty() && !matches!(config.backend.as_str(), "onnxruntime" | "pytorch") {
            return Err(invalid(format!(
                "implicit state (sequence_batching.state) is supported for ONNX Runtime and PyTorch (TorchScript) models only, not backend '{}'",
                config.backend
            )));
        }
        let mut states = Vec::new();
        for state in &sb.state {
            let dt = datatype(state.data_type, &state.input_name)?;
            let initial = initial_state(state, dt, model_dir).map_err(invalid)?;
            states.push(StateSpec {
                input: state.input_name.clone(),
                output: state.output_name.clone(),
                datatype: dt,
                initial,
            });
        }
        Ok(Some(SequenceSetup {
            model: config.name.clone(),
            batching: config.max_batch_size > 0,
            controls,
            states,
        }))
    }

    /// The request's sequence ID and flags, with Triton's errors.
    pub fn request_of(&self, request: &ValidatedRequest) -> Result<SequenceRequest, Error> {
        let model = &self.model;
        if request.batch_size > 1 {
            return Err(Error::invalid_argument(format!(
                "inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher"
            )));
        }
        let sequence = &request.request.routing.sequence;
        let id = sequence.id.clone();
        if id.is_none() {
            return Err(Error::invalid_argument(format!(
                "inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
            )));
        }
        if let Some(expected) = self.corrid_type() {
            let string = matches!(id, CorrelationId::Str(_));
            if string != (expected == DataType::Bytes) {
                return Err(Error::invalid_argument(format!(
                    "sequence batching control 'CORRID' for model '{model}' expects a {} correlation ID, got {}",
                    if expected == DataType::Bytes {
                        "string"
                    } else {
                        "numeric"
                    },
                    if string { "a string" } else { "a number" },
                )));
            }
        }
        Ok(SequenceRequest {
            id,
            start: sequence.start,
            end: sequence.end,
            placement: None,
        })
    }

    fn corrid_type(&self) -> Option<DataType> {
        self.controls.iter().find_map(|c| match c {
            Control::Corrid { datatype, .. } => Some(*datatype),
            Control::Flag { .. } => None,
        })
    }

    /// Names of the state outputs, which a step computes but its client
    /// never sees.
    pub fn state_outputs(&self) -> impl Iterator<Item = &str> {
        self.states.iter().map(|s| s.output.as_str())
    }

    /// The request of one step as the model gets it: the client's inputs,
    /// the control tensors and the sequence's state; its outputs include
    /// the state outputs.
    pub fn step_row(&self, request: &ValidatedRequest, step: &SequenceRequest) -> ValidatedRequest {
        let mut row = request.clone();
        let state = step.placement.as_ref().map(|p| p.state.lock().clone());
        // A START begins from the initial state, even on a reused slot.
        let state = if step.start { None } else { state.flatten() };
        self.add_inputs(
            &mut row.request,
            true,
            step.start,
            step.end,
            &step.id,
            state.as_deref(),
        );
        self.add_state_outputs(&mut row);
        row
    }

    /// Adds the control tensors alone to a step's request (backends that
    /// take requests one by one, which have no implicit state).
    pub fn add_controls(&self, request: &mut InferRequest, step: &SequenceRequest) {
        self.add_control_inputs(request, true, step.start, step.end, &step.id);
    }

    fn add_state_outputs(&self, row: &mut ValidatedRequest) {
        for output in self.state_outputs() {
            if !row.outputs.iter().any(|o| o == output) {
                row.outputs.push(output.to_string());
            }
        }
    }

    /// A row for a slot without a request in this batch: `like`'s inputs
    /// (a client's request, before `step_row` added anything) as zeros,
    /// READY false, the initial state, no outputs.
    pub fn idle_row(&self, like: &ValidatedRequest) -> ValidatedRequest {
        let mut request = InferRequest {
            model_name: like.request.model_name.clone(),
            id: String::new(),
            routing: nereid_core::Routing {
                version: like.request.routing.version.clone(),
                ..Default::default()
            },
            inputs: Vec::new(),
            outputs: Vec::new(),
            parameters: Parameters::new(),
            trace: None,
        };
        for input in &like.request.inputs {
            request.inputs.push(InputTensor {
                name: input.name.clone(),
                datatype: input.datatype,
                shape: input.shape.clone(),
                data: Bytes::from(vec![0u8; input.data.len()]),
                parameters: Parameters::new(),
            });
        }
        self.add_inputs(
            &mut request,
            false,
            false,
            false,
            &CorrelationId::Int(0),
            None,
        );
        ValidatedRequest {
            request,
            batch_size: 1,
            outputs: Vec::new(),
        }
    }

    fn add_inputs(
        &self,
        request: &mut InferRequest,
        ready: bool,
        start: bool,
        end: bool,
        id: &CorrelationId,
        state: Option<&[Tensor]>,
    ) {
        self.add_control_inputs(request, ready, start, end, id);
        for spec in &self.states {
            let kept = state.and_then(|tensors| tensors.iter().find(|t| t.name == spec.output));
            let (dims, data) = match kept {
                // The kept output has the batch dimension of its step (1).
                Some(t) if self.batching => (
                    t.shape.get(1..).unwrap_or_default().to_vec(),
                    t.data.clone(),
                ),
                Some(t) => (t.shape.clone(), t.data.clone()),
                None => (spec.initial.shape.clone(), spec.initial.data.clone()),
            };
            push_input(
                request,
                &spec.input,
                spec.datatype,
                self.row_shape(&dims),
                data,
            );
        }
    }

    /// `dims` with the batch dimension of one row, for a batching model.
    fn row_shape(&self, dims: &[i64]) -> Vec<i64> {
        if self.batching {
            std::iter::once(1).chain(dims.iter().copied()).collect()
        } else {
            dims.to_vec()
        }
    }

    fn add_control_inputs(
        &self,
        request: &mut InferRequest,
        ready: bool,
        start: bool,
        end: bool,
        id: &CorrelationId,
    ) {
        for control in &self.controls {
            let (name, datatype, data) = match control {
                Control::Flag {
                    name,
                    kind,
                    datatype,
                    values,
                } => {
                    let on = match kind {
                        Kind::ControlSequenceStart => start,
                        Kind::ControlSequenceEnd => end,
                        _ => ready,
                    };
                    (name, *datatype, values[usize::from(on)].clone())
                }
                Control::Corrid { name, datatype } => {
                    (name, *datatype, corrid_bytes(id, *datatype))
                }
            };
            push_input(request, name, datatype, self.row_shape(&[1]), data);
        }
    }

    /// Takes the state outputs out of a step's outputs, keeping them for
    /// the sequence's next step; the rest is the client's.
    pub fn keep_state(&self, step: &SequenceRequest, outputs: Vec<Tensor>) -> Vec<Tensor> {
        if self.states.is_empty() {
            return outputs;
        }
        let (state, answer): (Vec<Tensor>, Vec<Tensor>) = outputs
            .into_iter()
            .partition(|t| self.states.iter().any(|s| s.output == t.name));
        if let Some(placement) = &step.placement {
            *placement.state.lock() = Some(state);
        }
        answer
    }
}

fn push_input(
    request: &mut InferRequest,
    name: &str,
    datatype: DataType,
    shape: Vec<i64>,
    data: Bytes,
) {
    request.inputs.push(InputTensor {
        name: name.to_string(),
        datatype,
        shape,
        data,
        parameters: Parameters::new(),
    });
}

/// The false and true values of a START, END or READY control.
fn flag_values(
    control: &nereid_core::model_config::model_sequence_batching::Control,
) -> Option<(DataType, [Bytes; 2])> {
    let pair = |a: Vec<u8>, b: Vec<u8>| [Bytes::from(a), Bytes::from(b)];
    if let [f, t] = control.int32_false_true[..] {
        return Some((
            DataType::Int32,
            pair(f.to_le_bytes().to_vec(), t.to_le_bytes().to_vec()),
        ));
    }
    if let [f, t] = control.fp32_false_true[..] {
        return Some((
            DataType::Fp32,
            pair(f.to_le_bytes().to_vec(), t.to_le_bytes().to_vec()),
        ));
    }
    if let [f, t] = control.bool_false_true[..] {
        return Some((DataType::Bool, pair(vec![u8::from(f)], vec![u8::from(t)])));
    }
    None
}

/// The correlation ID as a CORRID tensor of `datatype` (for a row without
/// a sequence, ID 0: zero, or an empty string).
fn corrid_bytes(id: &CorrelationId, datatype: DataType) -> Bytes {
    match (id, datatype) {
        (_, DataType::Bytes) => {
            let text = match id {
                CorrelationId::Str(s) => s.clone(),
                CorrelationId::Int(0) => String::new(),
                CorrelationId::Int(v) => v.to_string(),
            };
            let mut framed = (text.len() as u32).to_le_bytes().to_vec();
            framed.extend_from_slice(text.as_bytes());
            Bytes::from(framed)
        }
        (CorrelationId::Str(_), DataType::Uint32 | DataType::Int32) => Bytes::from(vec![0u8; 4]),
        (CorrelationId::Str(_), _) => Bytes::from(vec![0u8; 8]),
        (CorrelationId::Int(v), DataType::Uint32 | DataType::Int32) => {
            Bytes::from((*v as u32).to_le_bytes().to_vec())
        }
        (CorrelationId::Int(v), _) => Bytes::from(v.to_le_bytes().to_vec()),
    }
}

/// A START, END or sequence ID flag parameter.
/// A state's initial value: zeros, or the named file of `initial_state/`
/// (raw little-endian elements), for one sequence.
fn initial_state(
    state: &nereid_core::model_config::model_sequence_batching::State,
    datatype: DataType,
    model_dir: &Path,
) -> Result<Tensor, String> {
    let (dims, data) = match state.initial_state.first() {
        None => (state.dims.clone(), None),
        Some(initial) => {
            let data = match &initial.state_data {
                Some(StateData::DataFile(file)) => {
                    let path = model_dir.join("initial_state").join(file);
                    Some(std::fs::read(&path).map_err(|e| {
                        format!("cannot read initial state '{}': {e}", path.display())
                    })?)
                }
                _ => None,
            };
            (initial.dims.clone(), data)
        }
    };
    if dims.iter().any(|&d| d < 0) {
        return Err(format!(
            "the initial state of '{}' needs fixed dims, got {dims:?}",
            state.input_name
        ));
    }
    let elements: usize = dims.iter().map(|&d| d as usize).product();
    let size = elements * datatype.element_size().unwrap_or(1);
    let data = match data {
        Some(bytes) if bytes.len() != size => {
            return Err(format!(
                "the initial state file of '{}' holds {} bytes, {size} expected",
                state.input_name,
                bytes.len()
            ));
        }
        Some(bytes) => bytes,
        None => vec![0u8; size],
    };
    Ok(Tensor {
        name: state.input_name.clone(),
        datatype,
        shape: dims,
        data: Bytes::from(data),
    })
}
