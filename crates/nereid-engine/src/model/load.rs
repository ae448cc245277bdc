//! Loading a version: its instances started (placed on devices, each on
//! a worker thread of its own) behind the scheduler its config asks for,
//! or an ensemble's pipeline; and the step that tells a model a reaped
//! sequence ended.

use std::sync::{Arc, OnceLock};

use nereid_core::model_config::ModelConfig;
use nereid_core::model_config::model_instance_group::Kind;
use nereid_core::{Backend, Device, Error, InferRequest, ModelSource};

use nereid_ensemble::{Composer, Pipeline};

use super::{LoadedVersion, QUEUE_PER_INSTANCE, Runner};
use crate::classify::Labels;
use crate::footprint::Footprint;
use crate::job::Job;
use crate::sequence::SequenceSetup;
use crate::stats::ModelStats;
use crate::warmup;
use crate::worker::{WorkerContext, start_workers};

impl LoadedVersion {
    /// Starts every configured instance of `version`; blocks until all are
    /// loaded or one fails. A model with `dynamic_batching` gets a batcher.
    pub fn load(
        backend: &Arc<dyn Backend>,
        config: Arc<ModelConfig>,
        version: i64,
        model_path: std::path::PathBuf,
    ) -> Result<LoadedVersion, Error> {
        let mut plan = nereid_scheduler::plan(&config)?;
        let model_dir = model_dir(&model_path, 2);
        let folder = model_dir.to_path_buf();
        let labels = Labels::load(&config, model_dir)?;
        let warmup = warmup::samples(&config, model_dir)?;
        let sequence = SequenceSetup::from_config(&config, model_dir)?.map(Arc::new);
        let sources = instance_sources(&config, version, &model_path)?;
        let embedded = Some(crate::model::Embedded {
            backend: Arc::clone(backend),
            model_path: model_path.clone(),
        });
        let instances = sources.len();
        // One queue every instance reads, or one each (sequence slots).
        let (senders, receivers): (Vec<_>, Vec<_>) = if plan.queue_per_instance() {
            (0..instances)
                .map(|_| nereid_scheduler::work_queue::unbounded())
                .unzip()
        } else {
            let (tx, rx) = nereid_scheduler::work_queue::bounded(QUEUE_PER_INSTANCE * instances);
            (vec![tx], vec![rx; instances])
        };
        let stats = Arc::new(ModelStats::default());
        if let nereid_scheduler::Plan::Sequence(sequence) = &mut plan {
            sequence.reaped = Arc::clone(&stats.sequences_reaped);
        }
        let failure = Arc::new(OnceLock::new());
        let footprint = Arc::new(Footprint::default());
        let ctx = Arc::new(WorkerContext {
            footprint: Arc::clone(&footprint),
            output_dims: config
                .output
                .iter()
                .filter(|o| o.reshape.is_some())
                .map(|o| (o.name.clone(), o.dims.clone()))
                .collect(),
            model_name: config.name.clone(),
            version,
            batching: config.max_batch_size > 0,
            stats: Arc::clone(&stats),
            failure: Arc::clone(&failure),
            sequence: sequence.clone(),
        });
        let workers = start_workers(backend, sources, ctx, warmup, receivers)?;
        let farewell = sequence
            .as_ref()
            .and_then(|_| farewell(&config, Arc::clone(&stats)));
        let (scheduler, order) =
            nereid_scheduler::start(&config.name, plan, instances, senders, workers, farewell)?;
        Ok(LoadedVersion {
            version,
            config,
            stats,
            failure,
            labels,
            cache: None,
            folder,
            embedded,
            footprint,
            runner: Runner::Instances {
                scheduler,
                order,
                sequence,
            },
        })
    }

    /// An ensemble's version: it has no instances of its own; its steps
    /// reach the models they name through `composer`.
    pub fn ensemble(
        config: Arc<ModelConfig>,
        version: i64,
        version_dir: &std::path::Path,
        composer: Arc<dyn Composer>,
    ) -> Result<LoadedVersion, Error> {
        let folder = model_dir(version_dir, 1).to_path_buf();
        let labels = Labels::load(&config, &folder)?;
        let pipeline = Pipeline::new(&config, version);
        let models = pipeline.models().map(|(m, v)| (m.to_string(), v)).collect();
        Ok(LoadedVersion {
            version,
            config,
            stats: Arc::new(ModelStats::default()),
            failure: Arc::default(),
            labels,
            cache: None,
            folder,
            embedded: None,
            footprint: Default::default(),
            runner: Runner::Ensemble {
                pipeline,
                composer,
                models,
            },
        })
    }
}

/// What a reaped sequence's END step is made of: the model's inputs as
/// zeros (a variable dimension as 1, BYTES as empty strings), one row;
/// `None` when an input's datatype is not one Nereid knows.
fn farewell(
    config: &ModelConfig,
    stats: Arc<ModelStats>,
) -> Option<nereid_scheduler::Farewell<Job>> {
    let batching = config.max_batch_size > 0;
    let mut inputs = Vec::with_capacity(config.input.len());
    for input in &config.input {
        let datatype = nereid_core::DataType::from_config(input.data_type())?;
        let dims: Vec<i64> = input.dims.iter().map(|&d| d.max(1)).collect();
        let elements: usize = dims.iter().map(|&d| d as usize).product();
        let size = datatype.element_size().unwrap_or(4) * elements;
        let shape = if batching {
            std::iter::once(1).chain(dims).collect()
        } else {
            dims
        };
        inputs.push(nereid_core::InputTensor {
            name: input.name.clone(),
            datatype,
            shape,
            data: bytes::Bytes::from(vec![0u8; size]),
            parameters: nereid_core::Parameters::new(),
        });
    }
    let model = config.name.clone();
    Some(Box::new(move |id: &nereid_scheduler::CorrelationId| {
        let request = crate::ValidatedRequest {
            request: InferRequest {
                model_name: model.clone(),
                id: String::new(),
                routing: nereid_core::Routing::default(),
                inputs: inputs.clone(),
                outputs: Vec::new(),
                parameters: nereid_core::Parameters::new(),
                trace: None,
            },
            batch_size: 1,
            outputs: Vec::new(),
        };
        Some(Job::farewell(request, id.clone(), Arc::clone(&stats)))
    }))
}

/// One `ModelSource` per instance the config's instance groups ask for:
/// `count` on each GPU a `KIND_GPU` group lists, `count` of the others.
/// Each is named as Triton names it, `<group>_<index in the group>`.
fn instance_sources(
    config: &ModelConfig,
    version: i64,
    model_path: &std::path::Path,
) -> Result<Vec<ModelSource>, Error> {
    let mut placed: Vec<(Device, String)> = Vec::new();
    for group in &config.instance_group {
        let count = usize::try_from(group.count.max(1)).unwrap_or(1);
        let devices: Vec<Device> = match group.kind() {
            Kind::Gpu => {
                if group.gpus.is_empty() {
                    return Err(Error::invalid_argument(format!(
                        "instance group '{}' of model '{}' asks for KIND_GPU but no GPU is available",
                        group.name, config.name
                    )));
                }
                group
                    .gpus
                    .iter()
                    .filter_map(|&gpu| u32::try_from(gpu).ok())
                    .flat_map(|gpu| std::iter::repeat_n(Device::Gpu(gpu), count))
                    .collect()
            }
            Kind::Model => vec![Device::Model; count],
            Kind::Cpu | Kind::Auto => vec![Device::Cpu; count],
        };
        placed.extend(
            devices
                .into_iter()
                .enumerate()
                .map(|(index, device)| (device, format!("{}_{index}", group.name))),
        );
    }
    if placed.is_empty() {
        placed.push((Device::Cpu, format!("{}_0", config.name)));
    }
    Ok(placed
        .into_iter()
        .enumerate()
        .map(|(instance_index, (device, instance_name))| ModelSource {
            model_name: config.name.clone(),
            version,
            model_path: model_path.to_path_buf(),
            config: config.clone(),
            device,
            instance_index,
            instance_name,
        })
        .collect())
}

/// The model's folder: `levels` up from a version's model file (2) or
/// version folder (1). Labels and warmup files are named relative to it.
fn model_dir(path: &std::path::Path, levels: usize) -> &std::path::Path {
    path.ancestors().nth(levels).unwrap_or(path)
}

#[cfg(test)]
mod placement_tests {
    use nereid_core::model_config::ModelInstanceGroup;
    use nereid_repository::normalize_and_validate;

    use super::*;

    fn placed(
        groups: Vec<ModelInstanceGroup>,
        gpus: &[u32],
    ) -> Result<Vec<(Device, String)>, String> {
        let mut config = ModelConfig {
            name: "m".into(),
            backend: "python".into(),
            instance_group: groups,
            ..Default::default()
        };
        normalize_and_validate(&mut config, gpus, true).map_err(|e| e.to_string())?;
        let sources = instance_sources(&config, 1, std::path::Path::new("/m/1/model.py"))
            .map_err(|e| e.to_string())?;
        Ok(sources
            .into_iter()
            .map(|s| (s.device, s.instance_name))
            .collect())
    }

    fn group(kind: Kind, count: i32, gpus: Vec<i32>) -> ModelInstanceGroup {
        let mut g = ModelInstanceGroup {
            count,
            gpus,
            ..Default::default()
        };
        g.set_kind(kind);
        g
    }

    #[test]
    fn an_omitted_group_places_one_instance_per_gpu() {
        for count in [0u32, 1, 2, 8] {
            let gpus: Vec<u32> = (0..count).collect();
            let devices: Vec<Device> = placed(vec![], &gpus)
                .unwrap()
                .into_iter()
                .map(|(d, _)| d)
                .collect();
            let expected = match count {
                0 => vec![Device::Cpu],
                n => (0..n).map(Device::Gpu).collect(),
            };
            assert_eq!(devices, expected, "{count} GPUs");
        }
    }

    #[test]
    fn counts_multiply_by_listed_gpus_and_names_follow_groups() {
        let gpus: Vec<u32> = (0..8).collect();
        let got = placed(
            vec![
                group(Kind::Gpu, 2, vec![1, 3]),
                group(Kind::Cpu, 1, vec![]),
                group(Kind::Model, 1, vec![]),
            ],
            &gpus,
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                (Device::Gpu(1), "m_0_0".to_string()),
                (Device::Gpu(1), "m_0_1".to_string()),
                (Device::Gpu(3), "m_0_2".to_string()),
                (Device::Gpu(3), "m_0_3".to_string()),
                (Device::Cpu, "m_1_0".to_string()),
                (Device::Model, "m_2_0".to_string()),
            ]
        );
        let all = placed(vec![group(Kind::Gpu, 2, vec![])], &gpus[..2]).unwrap();
        assert_eq!(
            all.iter().map(|(d, _)| *d).collect::<Vec<_>>(),
            [
                Device::Gpu(0),
                Device::Gpu(0),
                Device::Gpu(1),
                Device::Gpu(1)
            ]
        );
    }

    #[test]
    fn gpu_groups_without_gpus_get_tritons_errors() {
        let err = placed(vec![group(Kind::Gpu, 1, vec![])], &[]).unwrap_err();
        assert!(
            err.contains("has kind KIND_GPU but no GPUs are available"),
            "{err}"
        );
        let err = placed(vec![group(Kind::Gpu, 1, vec![2])], &[0, 1]).unwrap_err();
        assert!(
            err.contains("specifies invalid or unsupported gpu id 2. GPUs with at least the minimum required CUDA compute compatibility are: 0, 1"),
            "{err}"
        );
    }
}
