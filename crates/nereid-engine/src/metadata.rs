//! Model metadata (KServe v2 `ModelMetadataResponse`) derived from a config.

use std::collections::BTreeMap;

use nereid_core::DataType;
use nereid_core::model_config::{DataType as ConfigDataType, ModelConfig};

/// Name, datatype and shape of one input or output. The shape starts with
/// `-1` for the batch dimension when the model batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMetadata {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

/// What `GET /v2/models/{name}` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
    /// Nereid's version labels: label → version.
    pub labels: BTreeMap<String, i64>,
}

impl ModelMetadata {
    pub fn new(config: &ModelConfig, ready_versions: &[i64]) -> ModelMetadata {
        let batching = config.max_batch_size > 0;
        let tensor = |name: &str, dt: ConfigDataType, dims: &[i64]| TensorMetadata {
            name: name.to_string(),
            datatype: DataType::from_config(dt)
                .map_or("INVALID", DataType::wire_name)
                .to_string(),
            shape: batching
                .then_some(-1)
                .into_iter()
                .chain(dims.iter().copied())
                .collect(),
        };
        ModelMetadata {
            name: config.name.clone(),
            versions: ready_versions.iter().map(i64::to_string).collect(),
            platform: config.platform.clone(),
            inputs: config
                .input
                .iter()
                .map(|i| tensor(&i.name, i.data_type(), &i.dims))
                .collect(),
            outputs: config
                .output
                .iter()
                .map(|o| tensor(&o.name, o.data_type(), &o.dims))
                .collect(),
            labels: BTreeMap::new(),
        }
    }

    /// The metadata of a request that named `version`: as in Triton,
    /// `versions` then lists that version alone (the ready ones otherwise).
    pub fn for_version(mut self, version: Option<i64>) -> ModelMetadata {
        if let Some(version) = version {
            self.versions = vec![version.to_string()];
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_version_is_the_only_one_listed() {
        let config = ModelConfig {
            name: "m".into(),
            ..Default::default()
        };
        let all = ModelMetadata::new(&config, &[1, 2, 3]);
        assert_eq!(all.clone().for_version(None).versions, ["1", "2", "3"]);
        assert_eq!(all.for_version(Some(2)).versions, ["2"]);
    }
}
