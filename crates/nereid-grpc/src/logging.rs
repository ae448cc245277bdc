//! `LogSettings`: Triton's logging extension over gRPC.

use nereid_core::Error;
use nereid_protocol::inference::log_settings_request::setting_value::ParameterChoice as In;
use nereid_protocol::inference::log_settings_response::SettingValue as OutValue;
use nereid_protocol::inference::log_settings_response::setting_value::ParameterChoice as Out;
use nereid_protocol::inference::{LogSettingsRequest, LogSettingsResponse};

use nereid_edge::logging::{LogControl, LogSettings, SettingValue};

/// Applies the request's settings (none: only reads) and answers all.
pub fn log_settings(
    control: &LogControl,
    request: LogSettingsRequest,
) -> Result<LogSettingsResponse, Error> {
    let changes: Vec<(String, SettingValue)> = request
        .settings
        .into_iter()
        .map(|(name, value)| (name, setting_value(value.parameter_choice)))
        .collect();
    let settings = control.update(changes.iter().map(|(k, v)| (k.as_str(), v.clone())))?;
    Ok(response(&settings))
}

fn setting_value(choice: Option<In>) -> SettingValue {
    match choice {
        Some(In::BoolParam(b)) => SettingValue::Bool(b),
        Some(In::Uint32Param(n)) => SettingValue::Uint(u64::from(n)),
        Some(In::StringParam(s)) => SettingValue::Str(s),
        None => SettingValue::Other("no value".to_string()),
    }
}

fn response(s: &LogSettings) -> LogSettingsResponse {
    let values = [
        ("log_file", Out::StringParam(s.log_file.clone())),
        ("log_info", Out::BoolParam(s.log_info)),
        ("log_warning", Out::BoolParam(s.log_warning)),
        ("log_error", Out::BoolParam(s.log_error)),
        ("log_verbose_level", Out::Uint32Param(s.log_verbose_level)),
        (
            "log_format",
            Out::StringParam(s.log_format.as_str().to_string()),
        ),
    ];
    LogSettingsResponse {
        settings: values
            .into_iter()
            .map(|(name, value)| {
                let value = OutValue {
                    parameter_choice: Some(value),
                };
                (name.to_string(), value)
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_protocol::inference::log_settings_request::SettingValue as InValue;

    #[test]
    fn a_wrong_type_is_refused_and_a_right_one_applied() {
        let control = LogControl::default();
        let mut request = LogSettingsRequest::default();
        request.settings.insert(
            "log_info".into(),
            InValue {
                parameter_choice: Some(In::StringParam("false".into())),
            },
        );
        let err = log_settings(&control, request).unwrap_err();
        assert!(err.message().contains("'log_info'"), "{}", err.message());
        let mut request = LogSettingsRequest::default();
        request.settings.insert(
            "log_verbose_level".into(),
            InValue {
                parameter_choice: Some(In::Uint32Param(1)),
            },
        );
        let answer = log_settings(&control, request).unwrap();
        assert_eq!(
            answer.settings["log_verbose_level"].parameter_choice,
            Some(Out::Uint32Param(1))
        );
        assert_eq!(
            answer.settings["log_format"].parameter_choice,
            Some(Out::StringParam("default".into()))
        );
    }
}
