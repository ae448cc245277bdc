//! Which forward() argument each config input feeds, and which returned
//! value each config output reads: Triton's PyTorch backend conventions.
//!
//! Inputs, in Triton's order of preference:
//! 1. every config name is an argument of forward(): bound by name;
//! 2. every name is `<name>__<index>`: bound to argument `index`;
//! 3. otherwise the config's order is forward()'s order.
//!
//! A forward() that takes one `Dict[str, Tensor]` gets the inputs in it,
//! keyed by their config names. Outputs are `<name>__<index>` or else taken
//! in config order.

use nereid_core::model_config::model_config::SchedulingChoice;
use nereid_core::model_config::model_sequence_batching::control::Kind;
use nereid_core::model_config::{DataType as ConfigDataType, ModelConfig, ModelInput, ModelOutput};
use nereid_core::{BackendError, DataType};

use crate::ffi::{ArgKind, Argument};

/// How config tensors are named, as Triton detects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Naming {
    ForwardArgument,
    NamedIndex,
    ConfigOrder,
}

/// How a batch's inputs become forward()'s arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InputPlan {
    /// One argument per config input; `inputs[i]` feeds argument `position`.
    Positional(Vec<BoundInput>),
    /// forward() takes a single `Dict[str, Tensor]` of every input.
    Dict(Vec<BoundInput>),
}

/// A config input and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BoundInput {
    pub(crate) name: String,
    pub(crate) datatype: DataType,
    /// Argument position (for a dict, the entry's order).
    pub(crate) position: usize,
}

/// A config output and the index of the returned value it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BoundOutput {
    pub(crate) name: String,
    pub(crate) datatype: DataType,
    pub(crate) index: usize,
}

/// `<name>__<index>`'s index: the digits after the first `__` (Triton reads
/// an empty tail as 0), or None when the name does not follow it.
fn named_index(name: &str) -> Option<usize> {
    let (_, tail) = name.split_once("__")?;
    if !tail.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(tail.parse().unwrap_or(0))
}

fn naming<'a>(
    names: impl Iterator<Item = &'a str> + Clone,
    arguments: Option<&[Argument]>,
) -> Naming {
    if let Some(arguments) = arguments
        && names.clone().all(|n| arguments.iter().any(|a| a.name == n))
    {
        return Naming::ForwardArgument;
    }
    if names.clone().all(|n| named_index(n).is_some()) {
        Naming::NamedIndex
    } else {
        Naming::ConfigOrder
    }
}

fn load_error(config: &ModelConfig, message: impl std::fmt::Display) -> BackendError {
    BackendError::Load(format!("model '{}': {message}", config.name))
}

/// The datatype of a config tensor, or Triton's error for one libtorch
/// cannot hold (the unsigned types above 8 bits).
fn datatype(
    config: &ModelConfig,
    data_type: i32,
    kind: &str,
    name: &str,
) -> Result<DataType, BackendError> {
    let config_type = ConfigDataType::try_from(data_type).unwrap_or(ConfigDataType::TypeInvalid);
    match DataType::from_config(config_type) {
        Some(dt) if dt == DataType::Bytes || crate::convert::kind_of(dt).is_some() => Ok(dt),
        _ => Err(load_error(
            config,
            format_args!(
                "unsupported datatype {} for {kind} '{name}' (libtorch has no such tensor type)",
                config_type.as_str_name()
            ),
        )),
    }
}

/// Triton passes BYTES as `List[str]`, which is one-dimensional.
fn check_string_dims(
    config: &ModelConfig,
    kind: &str,
    name: &str,
    dims: &[i64],
    reshape: Option<&[i64]>,
) -> Result<(), BackendError> {
    let dims = reshape.unwrap_or(dims);
    let batch = usize::from(config.max_batch_size > 0);
    if dims.len() + batch > 1 {
        return Err(load_error(
            config,
            format_args!(
                "Triton only supports 1 dimensional List of String as {kind} for '{name}'"
            ),
        ));
    }
    Ok(())
}

/// Binds the config's inputs to forward()'s `arguments`.
pub(crate) fn bind_inputs(
    config: &ModelConfig,
    arguments: &[Argument],
) -> Result<InputPlan, BackendError> {
    if !config.batch_input.is_empty() {
        return Err(load_error(
            config,
            "batch_input is not supported by the PyTorch backend of Nereid",
        ));
    }
    if config.input.is_empty() {
        return Err(load_error(
            config,
            "model configuration must contain at least one input, none were specified",
        ));
    }
    let mut bound = Vec::with_capacity(config.input.len());
    for input in &config.input {
        let datatype = datatype(config, input.data_type, "input", &input.name)?;
        if datatype == DataType::Bytes {
            let reshape = input.reshape.as_ref().map(|r| r.shape.as_slice());
            check_string_dims(config, "input", &input.name, &input.dims, reshape)?;
        }
        bound.push(BoundInput {
            name: input.name.clone(),
            datatype,
            position: 0,
        });
    }
    if let [only] = arguments
        && only.kind == ArgKind::Dict
    {
        if let Some(text) = bound.iter().find(|b| b.datatype == DataType::Bytes) {
            return Err(load_error(
                config,
                format_args!(
                    "input '{}' is BYTES, but forward() takes a Dict[str, Tensor]",
                    text.name
                ),
            ));
        }
        for (i, b) in bound.iter_mut().enumerate() {
            b.position = i;
        }
        return Ok(InputPlan::Dict(bound));
    }
    check_arguments(config, arguments)?;
    let names = config.input.iter().map(|i| i.name.as_str());
    let convention = naming(names, Some(arguments));
    for (i, b) in bound.iter_mut().enumerate() {
        b.position = match convention {
            Naming::ForwardArgument => arguments.iter().position(|a| a.name == b.name).unwrap_or(i),
            Naming::NamedIndex => named_index(&b.name).unwrap_or(i),
            Naming::ConfigOrder => i,
        };
    }
    for (i, b) in bound.iter().enumerate() {
        check_binding(config, b, arguments)?;
        if let Some(other) = bound[..i].iter().find(|o| o.position == b.position) {
            return Err(load_error(
                config,
                format_args!(
                    "inputs '{}' and '{}' both feed argument {} of forward()",
                    other.name, b.name, b.position
                ),
            ));
        }
    }
    Ok(InputPlan::Positional(bound))
}

/// Triton's checks on forward() itself: tensors and lists only, no second
/// dict, and as many arguments as the config has inputs.
fn check_arguments(config: &ModelConfig, arguments: &[Argument]) -> Result<(), BackendError> {
    if arguments.iter().any(|a| a.kind == ArgKind::Dict) {
        return Err(load_error(
            config,
            "Multiple inputs of kind DictType were detected. Only a single input of type Dict(str, Tensor) is supported.",
        ));
    }
    if let Some(other) = arguments.iter().find(|a| a.kind == ArgKind::Other) {
        return Err(load_error(
            config,
            format_args!(
                "An input of type '{}' was detected in the model. Only a single input of type Dict(str, Tensor) or input(s) of type Tensor are supported.",
                other.type_name
            ),
        ));
    }
    if arguments.len() != config.input.len() {
        return Err(load_error(
            config,
            format_args!(
                "configuration expects {} inputs, model provides {}",
                config.input.len(),
                arguments.len()
            ),
        ));
    }
    Ok(())
}

/// An input must land on an argument, and BYTES exactly on `List[str]`.
fn check_binding(
    config: &ModelConfig,
    input: &BoundInput,
    arguments: &[Argument],
) -> Result<(), BackendError> {
    let Some(argument) = arguments.get(input.position) else {
        return Err(load_error(
            config,
            format_args!(
                "input '{}' refers to argument {} of forward(), which takes {}",
                input.name,
                input.position,
                arguments.len()
            ),
        ));
    };
    let wants_strings = argument.kind == ArgKind::StringList;
    if (input.datatype == DataType::Bytes) != wants_strings {
        return Err(load_error(
            config,
            format_args!(
                "input '{}' is {} but feeds forward()'s argument '{}' of type {}; BYTES inputs must be List[str] and List[str] arguments BYTES",
                input.name, input.datatype, argument.name, argument.type_name
            ),
        ));
    }
    Ok(())
}

/// Binds the config's outputs to the values forward() returns.
pub(crate) fn bind_outputs(config: &ModelConfig) -> Result<Vec<BoundOutput>, BackendError> {
    if config.output.is_empty() {
        return Err(load_error(
            config,
            "model configuration must contain at least one output, none were specified (TorchScript does not name its outputs, so they cannot be filled in)",
        ));
    }
    let convention = naming(config.output.iter().map(|o| o.name.as_str()), None);
    config
        .output
        .iter()
        .enumerate()
        .map(|(i, output)| {
            let datatype = datatype(config, output.data_type, "output", &output.name)?;
            if datatype == DataType::Bytes {
                let reshape = output.reshape.as_ref().map(|r| r.shape.as_slice());
                check_string_dims(config, "output", &output.name, &output.dims, reshape)?;
            }
            let index = match convention {
                Naming::NamedIndex => named_index(&output.name).unwrap_or(i),
                _ => i,
            };
            Ok(BoundOutput {
                name: output.name.clone(),
                datatype,
                index,
            })
        })
        .collect()
}

/// The config as forward() sees it: for a model with `sequence_batching`,
/// the control inputs (START, END, READY, CORRID) and the state inputs are
/// inputs too, and the state outputs outputs, as Triton's PyTorch backend
/// counts them. With implicit state every name must follow
/// `<name>__<index>`, Triton's rule.
pub(crate) fn with_sequence_tensors(config: &ModelConfig) -> Result<ModelConfig, BackendError> {
    let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice else {
        return Ok(config.clone());
    };
    let mut full = config.clone();
    for input in &sb.control_input {
        let Some(control) = input.control.first() else {
            continue;
        };
        let data_type = match Kind::try_from(control.kind) {
            Ok(Kind::ControlSequenceCorrid) => control.data_type,
            _ if !control.fp32_false_true.is_empty() => ConfigDataType::TypeFp32 as i32,
            _ if !control.bool_false_true.is_empty() => ConfigDataType::TypeBool as i32,
            _ => ConfigDataType::TypeInt32 as i32,
        };
        full.input.push(ModelInput {
            name: input.name.clone(),
            data_type,
            dims: vec![1],
            ..Default::default()
        });
    }
    for state in &sb.state {
        full.input.push(ModelInput {
            name: state.input_name.clone(),
            data_type: state.data_type,
            dims: state.dims.clone(),
            ..Default::default()
        });
        full.output.push(ModelOutput {
            name: state.output_name.clone(),
            data_type: state.data_type,
            dims: state.dims.clone(),
            ..Default::default()
        });
    }
    if !sb.state.is_empty() {
        let names = full
            .input
            .iter()
            .map(|i| &i.name)
            .chain(full.output.iter().map(|o| &o.name));
        if let Some(name) = names.clone().find(|n| named_index(n).is_none()) {
            let state = sb
                .state
                .iter()
                .flat_map(|s| [&s.input_name, &s.output_name])
                .find(|s| *s == name);
            return Err(BackendError::Load(match state {
                Some(state) => format!(
                    "PyTorch model '{}' is using sequence batching with state but state '{state}' does not follow the <name>__<index> naming convention. ",
                    config.name
                ),
                None => format!(
                    "PyTorch model '{}' is using sequence batching with state but not all inputs and outputs follow the <name>__<index> naming convention. ",
                    config.name
                ),
            }));
        }
    }
    Ok(full)
}

#[cfg(test)]
#[path = "binding_tests.rs"]
mod tests;
