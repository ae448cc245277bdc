//! Engine types -> gRPC messages: model metadata, statistics and the
//! repository index; repository parameters -> the frontends' shared form. (Request and response tensors are converted in
//! `nereid_protocol::grpc`, which cannot see the engine.)

use std::collections::HashMap;

use nereid_engine::stats::{BatchSnapshot, DurationSnapshot, StatsSnapshot};
use nereid_engine::{IndexEntry, ModelMetadata, ModelState, TensorMetadata, VersionStatistics};
use nereid_protocol::inference::model_metadata_response::TensorMetadata as TensorMetadataProto;
use nereid_protocol::inference::model_repository_parameter::ParameterChoice;
use nereid_protocol::inference::repository_index_response::ModelIndex;
use nereid_protocol::inference::{
    InferBatchStatistics, InferStatistics, ModelMetadataResponse, ModelRepositoryParameter,
    ModelStatistics, ModelStatisticsResponse, RepositoryIndexResponse, StatisticDuration,
};

use nereid_edge::model_control::Param;

pub fn model_metadata(m: ModelMetadata) -> ModelMetadataResponse {
    let tensors = |ts: Vec<TensorMetadata>| -> Vec<TensorMetadataProto> {
        ts.into_iter()
            .map(|t| TensorMetadataProto {
                name: t.name,
                datatype: t.datatype,
                shape: t.shape,
            })
            .collect()
    };
    ModelMetadataResponse {
        name: m.name,
        versions: m.versions,
        platform: m.platform,
        inputs: tensors(m.inputs),
        outputs: tensors(m.outputs),
        labels: m
            .labels
            .into_iter()
            .map(|(label, version)| (label, version.to_string()))
            .collect(),
    }
}

/// Statistics in Triton's order: by model name, then version.
pub fn model_statistics(mut stats: Vec<VersionStatistics>) -> ModelStatisticsResponse {
    stats.sort_by(|a, b| (&a.name, a.version).cmp(&(&b.name, b.version)));
    ModelStatisticsResponse {
        model_stats: stats.into_iter().map(version_statistics).collect(),
    }
}

fn version_statistics(v: VersionStatistics) -> ModelStatistics {
    let StatsSnapshot {
        success,
        fail,
        queue,
        compute_input,
        compute_infer,
        compute_output,
        inference_count,
        cache_hit,
        cache_miss,
        execution_count,
        last_inference_ms,
        cancelled: _,
        sequences_reaped: _,
        latency_histograms: _,
        batches,
    } = v.stats;
    ModelStatistics {
        name: v.name,
        version: v.version.to_string(),
        last_inference: last_inference_ms,
        inference_count,
        execution_count,
        inference_stats: Some(InferStatistics {
            success: duration(success),
            fail: duration(fail),
            queue: duration(queue),
            compute_input: duration(compute_input),
            compute_infer: duration(compute_infer),
            compute_output: duration(compute_output),
            cache_hit: duration(cache_hit),
            cache_miss: duration(cache_miss),
        }),
        batch_stats: batches.into_iter().map(batch_statistics).collect(),
        memory_usage: Vec::new(),
        response_stats: HashMap::new(),
    }
}

fn batch_statistics(b: BatchSnapshot) -> InferBatchStatistics {
    InferBatchStatistics {
        batch_size: b.batch_size,
        compute_input: duration(b.compute_input),
        compute_infer: duration(b.compute_infer),
        compute_output: duration(b.compute_output),
    }
}

fn duration(d: DurationSnapshot) -> Option<StatisticDuration> {
    Some(StatisticDuration {
        count: d.count,
        ns: d.ns,
    })
}

/// The repository index; `ready_only` keeps the READY versions. A model
/// that failed before any version was known has an empty version.
pub fn repository_index(entries: Vec<IndexEntry>, ready_only: bool) -> RepositoryIndexResponse {
    let models = entries
        .into_iter()
        .filter(|e| !ready_only || e.state == Some(ModelState::Ready))
        .map(|e| ModelIndex {
            name: e.name,
            version: e.version.map(|v| v.to_string()).unwrap_or_default(),
            state: e
                .state
                .map(ModelState::as_str)
                .unwrap_or_default()
                .to_string(),
            reason: e.reason,
            labels: e.labels,
            memory_bytes: e.memory_bytes.unwrap_or_default(),
        })
        .collect();
    RepositoryIndexResponse { models }
}

/// Repository load / unload parameters as the frontends share them.
pub fn repository_params(
    params: HashMap<String, ModelRepositoryParameter>,
) -> Vec<(String, Param)> {
    let mut params: Vec<(String, Param)> = params
        .into_iter()
        .map(|(key, value)| {
            let param = match value.parameter_choice {
                Some(ParameterChoice::BoolParam(b)) => Param::Bool(b),
                Some(ParameterChoice::Int64Param(i)) => Param::Int(i),
                Some(ParameterChoice::StringParam(s)) => Param::Text(s),
                Some(ParameterChoice::BytesParam(b)) => Param::Bytes(b.to_vec()),
                None => Param::Other(String::new()),
            };
            (key, param)
        })
        .collect();
    // Map order is random; errors should not be.
    params.sort_by(|a, b| a.0.cmp(&b.0));
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(count: u64, ns: u64) -> DurationSnapshot {
        DurationSnapshot { count, ns }
    }

    fn stats(name: &str, version: i64) -> VersionStatistics {
        VersionStatistics {
            name: name.into(),
            version,
            stats: StatsSnapshot {
                success: d(8, 100),
                fail: d(1, 5),
                queue: d(8, 10),
                compute_input: d(8, 20),
                compute_infer: d(8, 30),
                compute_output: d(8, 40),
                cache_hit: d(3, 6),
                cache_miss: d(4, 8),
                inference_count: 9,
                execution_count: 8,
                last_inference_ms: 1_700_000_000_000,
                cancelled: 2,
                sequences_reaped: 0,
                latency_histograms: None,
                batches: vec![BatchSnapshot {
                    batch_size: 2,
                    compute_input: d(1, 2),
                    compute_infer: d(1, 3),
                    compute_output: d(1, 4),
                }],
            },
        }
    }

    #[test]
    fn statistics_have_tritons_shape_and_order() {
        let response =
            model_statistics(vec![stats("simple", 2), stats("b", 1), stats("simple", 1)]);
        let names: Vec<(&str, &str)> = response
            .model_stats
            .iter()
            .map(|m| (m.name.as_str(), m.version.as_str()))
            .collect();
        assert_eq!(names, [("b", "1"), ("simple", "1"), ("simple", "2")]);
        let m = &response.model_stats[0];
        assert_eq!(m.last_inference, 1_700_000_000_000);
        assert_eq!((m.inference_count, m.execution_count), (9, 8));
        let s = m.inference_stats.unwrap();
        assert_eq!(s.success, Some(StatisticDuration { count: 8, ns: 100 }));
        assert_eq!(s.fail, Some(StatisticDuration { count: 1, ns: 5 }));
        assert_eq!(s.queue, Some(StatisticDuration { count: 8, ns: 10 }));
        assert_eq!(
            s.compute_infer,
            Some(StatisticDuration { count: 8, ns: 30 })
        );
        assert_eq!(s.cache_hit, Some(StatisticDuration { count: 3, ns: 6 }));
        assert_eq!(s.cache_miss, Some(StatisticDuration { count: 4, ns: 8 }));
        assert_eq!(m.batch_stats.len(), 1);
        assert_eq!(m.batch_stats[0].batch_size, 2);
        assert_eq!(
            m.batch_stats[0].compute_output,
            Some(StatisticDuration { count: 1, ns: 4 })
        );
    }

    #[test]
    fn index_rows_and_ready_filter() {
        let entries = vec![
            IndexEntry {
                name: "broken".into(),
                version: None,
                state: Some(ModelState::Unavailable),
                reason: "bad config".into(),
                labels: Vec::new(),
                memory_bytes: None,
            },
            IndexEntry {
                name: "not_loaded".into(),
                version: None,
                state: None,
                reason: String::new(),
                labels: Vec::new(),
                memory_bytes: None,
            },
            IndexEntry {
                name: "simple".into(),
                version: Some(1),
                state: Some(ModelState::Ready),
                reason: String::new(),
                labels: vec!["stable".into()],
                memory_bytes: None,
            },
        ];
        let all = repository_index(entries.clone(), false);
        assert_eq!(all.models.len(), 3);
        // Triton lists a model it never loaded by name alone.
        assert_eq!(
            (all.models[1].version.as_str(), all.models[1].state.as_str()),
            ("", "")
        );
        assert_eq!(all.models[0].version, "");
        assert_eq!(all.models[0].state, "UNAVAILABLE");
        assert_eq!(all.models[0].reason, "bad config");
        let ready = repository_index(entries, true);
        assert_eq!(ready.models.len(), 1);
        assert_eq!(ready.models[0].name, "simple");
        assert_eq!(ready.models[0].version, "1");
        assert_eq!(ready.models[0].state, "READY");
        assert_eq!(ready.models[0].labels, ["stable"]);
        assert!(all.models[0].labels.is_empty());
    }

    #[test]
    fn metadata_keeps_every_field() {
        let m = ModelMetadata {
            name: "simple".into(),
            versions: vec!["1".into()],
            platform: "onnxruntime_onnx".into(),
            inputs: vec![TensorMetadata {
                name: "INPUT0".into(),
                datatype: "INT32".into(),
                shape: vec![-1, 16],
            }],
            outputs: vec![],
            labels: [("canary".to_string(), 2), ("stable".to_string(), 1)].into(),
        };
        let p = model_metadata(m);
        assert_eq!(p.labels.get("stable").map(String::as_str), Some("1"));
        assert_eq!(p.labels.get("canary").map(String::as_str), Some("2"));
        assert_eq!(p.name, "simple");
        assert_eq!(p.versions, ["1"]);
        assert_eq!(p.platform, "onnxruntime_onnx");
        assert_eq!(p.inputs[0].shape, [-1, 16]);
        assert_eq!(p.inputs[0].datatype, "INT32");
    }
}
