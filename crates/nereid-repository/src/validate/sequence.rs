//! Sequence batcher settings, as the sequence part of Triton's
//! `ValidateModelConfig` with `GetBooleanSequenceControlProperties` and
//! `GetTypedSequenceControlProperties` (core/src/model_config_utils.cc).

use std::collections::BTreeSet;

use nereid_core::model_config::model_sequence_batching::control::Kind;
use nereid_core::model_config::model_sequence_batching::{Control, StrategyChoice};
use nereid_core::model_config::{DataType, ModelSequenceBatching};

/// Checks `batcher` of model `model` (whose `max_batch_size` is given);
/// the error is Triton's message.
pub(super) fn validate_sequence(
    batcher: &ModelSequenceBatching,
    model: &str,
    max_batch_size: i32,
) -> Result<(), String> {
    for kind in [
        Kind::ControlSequenceStart,
        Kind::ControlSequenceEnd,
        Kind::ControlSequenceReady,
    ] {
        check_control(batcher, model, kind, check_boolean_values)?;
    }
    check_control(batcher, model, Kind::ControlSequenceCorrid, check_corrid)?;
    match &batcher.strategy_choice {
        Some(StrategyChoice::Oldest(oldest)) => {
            for &size in &oldest.preferred_batch_size {
                if size <= 0 {
                    return Err(format!(
                        "sequence batching preferred batch size must be positive for {model}"
                    ));
                }
                if size > max_batch_size {
                    return Err(format!(
                        "sequence batching preferred batch size must be <= max batch size for {model}"
                    ));
                }
            }
        }
        Some(StrategyChoice::Direct(direct))
            if !(0.0..=1.0).contains(&direct.minimum_slot_utilization) =>
        {
            return Err(format!(
                "sequence batching minimum slot utilization must be in range (0.0, 1.0] for {model}"
            ));
        }
        Some(StrategyChoice::Direct(_)) | None => {}
    }
    Ok(())
}

/// Walks the control inputs for `kind`: names present and unique, the kind
/// given at most once, and its values checked by `check_values`.
fn check_control(
    batcher: &ModelSequenceBatching,
    model: &str,
    kind: Kind,
    check_values: fn(&Control, &str, &str) -> Result<(), String>,
) -> Result<(), String> {
    let kind_name = kind.as_str_name();
    let mut seen_tensors = BTreeSet::new();
    let mut seen_control = false;
    for input in &batcher.control_input {
        if input.name.is_empty() {
            return Err(format!(
                "sequence batching control tensor must have a name for {model}"
            ));
        }
        if !seen_tensors.insert(input.name.as_str()) {
            return Err(format!(
                "sequence batching control tensor '{}' is specified for multiple control kinds for {model}",
                input.name
            ));
        }
        for control in input.control.iter().filter(|c| c.kind == kind as i32) {
            if seen_control {
                return Err(format!(
                    "sequence batching specifies multiple {kind_name} tensors for {model}"
                ));
            }
            seen_control = true;
            check_values(control, kind_name, model)?;
        }
    }
    Ok(())
}

fn check_boolean_values(control: &Control, kind: &str, model: &str) -> Result<(), String> {
    let lists = [
        ("int32_false_true", control.int32_false_true.len()),
        ("fp32_false_true", control.fp32_false_true.len()),
        ("bool_false_true", control.bool_false_true.len()),
    ];
    let given: Vec<_> = lists.iter().filter(|(_, len)| *len != 0).collect();
    match given.as_slice() {
        [] => Err(format!(
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for {kind} for {model}"
        )),
        [(field, len)] if *len != 2 => Err(format!(
            "sequence batching control '{field}' must have exactly 2 entries for {kind} for {model}"
        )),
        [_] => Ok(()),
        _ => Err(format!(
            "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' for {kind} for {model}"
        )),
    }
}

fn check_corrid(control: &Control, kind: &str, model: &str) -> Result<(), String> {
    let has_values = !control.int32_false_true.is_empty()
        || !control.fp32_false_true.is_empty()
        || !control.bool_false_true.is_empty();
    if has_values {
        return Err(format!(
            "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for {kind} for {model}"
        ));
    }
    let allowed = [
        DataType::TypeUint64,
        DataType::TypeInt64,
        DataType::TypeUint32,
        DataType::TypeInt32,
        DataType::TypeString,
    ];
    if !allowed.contains(&control.data_type()) {
        return Err(format!(
            "unexpected data type for control {kind} for {model}. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::model_sequence_batching::ControlInput;

    use super::*;

    fn control(kind: Kind, int32: &[i32]) -> Control {
        Control {
            kind: kind as i32,
            int32_false_true: int32.to_vec(),
            ..Default::default()
        }
    }

    fn batcher(inputs: Vec<(&str, Vec<Control>)>) -> ModelSequenceBatching {
        let control_input = inputs
            .into_iter()
            .map(|(name, control)| ControlInput {
                name: name.into(),
                control,
            })
            .collect();
        ModelSequenceBatching {
            control_input,
            ..Default::default()
        }
    }

    #[test]
    fn accepts_usual_controls() {
        let mut corrid = control(Kind::ControlSequenceCorrid, &[]);
        corrid.data_type = DataType::TypeUint64 as i32;
        let b = batcher(vec![
            ("START", vec![control(Kind::ControlSequenceStart, &[0, 1])]),
            ("READY", vec![control(Kind::ControlSequenceReady, &[0, 1])]),
            ("CORRID", vec![corrid]),
        ]);
        assert_eq!(validate_sequence(&b, "m", 8), Ok(()));
    }

    #[test]
    fn rejects_bad_controls() {
        let b = batcher(vec![(
            "START",
            vec![control(Kind::ControlSequenceStart, &[0, 1, 2])],
        )]);
        let err = validate_sequence(&b, "m", 8).unwrap_err();
        assert!(
            err.contains("'int32_false_true' must have exactly 2 entries"),
            "{err}"
        );
        let b = batcher(vec![
            ("A", vec![control(Kind::ControlSequenceEnd, &[0, 1])]),
            ("B", vec![control(Kind::ControlSequenceEnd, &[0, 1])]),
        ]);
        let err = validate_sequence(&b, "m", 8).unwrap_err();
        assert_eq!(
            err,
            "sequence batching specifies multiple CONTROL_SEQUENCE_END tensors for m"
        );
        let b = batcher(vec![("C", vec![control(Kind::ControlSequenceCorrid, &[])])]);
        let err = validate_sequence(&b, "m", 8).unwrap_err();
        assert!(
            err.starts_with("unexpected data type for control CONTROL_SEQUENCE_CORRID"),
            "{err}"
        );
    }
}
