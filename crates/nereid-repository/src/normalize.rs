//! The defaults Triton fills into every config before validating it:
//! `NormalizeModelConfig`, `NormalizeInstanceGroup` and
//! `SetDefaultInstanceCount` (core/src/model_config_utils.cc). What `GET
//! /v2/models/<m>/config` shows on Triton is the config after these.

use nereid_core::model_config::model_config::SchedulingChoice;
use nereid_core::model_config::model_instance_group::Kind;
use nereid_core::model_config::model_optimization_policy::PinnedMemoryBuffer;
use nereid_core::model_config::model_sequence_batching::StrategyChoice;
use nereid_core::model_config::{ModelConfig, ModelInstanceGroup};

use crate::versions;

/// Triton's `SEQUENCE_IDLE_DEFAULT_MICROSECONDS` (core/src/constants.h).
const SEQUENCE_IDLE_DEFAULT_MICROSECONDS: u64 = 1_000_000;

/// Backends that get two CPU instances by default (Triton's
/// `SetDefaultInstanceCount`: TensorFlow and ONNX Runtime).
const TWO_CPU_INSTANCE_BACKENDS: [&str; 2] = ["tensorflow", "onnxruntime"];

/// Fills Triton's defaults into `config`; `gpus` are the GPU ids available,
/// `gpu_backend` whether the model's backend can run on them.
pub(crate) fn normalize(config: &mut ModelConfig, gpus: &[u32], gpu_backend: bool) {
    if config.version_policy.is_none() {
        config.version_policy = Some(versions::default_policy());
    }
    let max_batch_size = config.max_batch_size;
    let preferred_default = || {
        if max_batch_size > 0 {
            vec![max_batch_size]
        } else {
            Vec::new()
        }
    };
    match &mut config.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(batching))
            if batching.preferred_batch_size.is_empty() =>
        {
            batching.preferred_batch_size = preferred_default();
        }
        Some(SchedulingChoice::SequenceBatching(batcher)) => {
            if batcher.max_sequence_idle_microseconds == 0 {
                batcher.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS;
            }
            if let Some(StrategyChoice::Oldest(oldest)) = &mut batcher.strategy_choice
                && oldest.preferred_batch_size.is_empty()
            {
                oldest.preferred_batch_size = preferred_default();
            }
        }
        Some(SchedulingChoice::EnsembleScheduling(_)) => return,
        Some(SchedulingChoice::DynamicBatching(_)) | None => {}
    }
    let optimization = config.optimization.get_or_insert_with(Default::default);
    let enabled = || Some(PinnedMemoryBuffer { enable: true });
    if optimization.input_pinned_memory.is_none() {
        optimization.input_pinned_memory = enabled();
    }
    if optimization.output_pinned_memory.is_none() {
        optimization.output_pinned_memory = enabled();
    }
    normalize_instance_groups(config, gpus, gpu_backend);
}

/// One default group named after the model when there is none; then for
/// every group a name (`<model>_<index>`), a kind (KIND_AUTO becomes GPU
/// when the backend can use GPUs and every listed GPU exists, else CPU), a
/// count and, for GPU groups that list none, every GPU.
fn normalize_instance_groups(config: &mut ModelConfig, gpus: &[u32], gpu_backend: bool) {
    if config.instance_group.is_empty() {
        config.instance_group.push(ModelInstanceGroup {
            name: config.name.clone(),
            ..Default::default()
        });
    }
    let all_gpus: Vec<i32> = gpus.iter().filter_map(|&g| i32::try_from(g).ok()).collect();
    for (index, group) in config.instance_group.iter_mut().enumerate() {
        if group.name.is_empty() {
            group.name = format!("{}_{index}", config.name);
        }
        if group.kind() == Kind::Auto {
            let all_present = group.gpus.iter().all(|g| all_gpus.contains(g));
            let kind = if !gpu_backend || all_gpus.is_empty() || !all_present {
                Kind::Cpu
            } else {
                Kind::Gpu
            };
            group.set_kind(kind);
        }
        if group.count < 1 {
            let two = group.kind() == Kind::Cpu
                && TWO_CPU_INSTANCE_BACKENDS.contains(&config.backend.as_str());
            group.count = if two { 2 } else { 1 };
        }
        if group.kind() == Kind::Gpu && group.gpus.is_empty() {
            group.gpus.clone_from(&all_gpus);
        }
    }
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::model_version_policy::PolicyChoice;
    use nereid_core::model_config::{ModelDynamicBatching, ModelEnsembling, ModelSequenceBatching};

    use super::*;

    fn config(backend: &str) -> ModelConfig {
        ModelConfig {
            name: "m".into(),
            backend: backend.into(),
            ..Default::default()
        }
    }

    #[test]
    fn fills_triton_defaults() {
        let mut c = config("pytorch");
        normalize(&mut c, &[], true);
        assert!(matches!(
            c.version_policy.as_ref().and_then(|p| p.policy_choice.as_ref()),
            Some(PolicyChoice::Latest(l)) if l.num_versions == 1
        ));
        let opt = c.optimization.as_ref().unwrap();
        assert_eq!(
            opt.input_pinned_memory,
            Some(PinnedMemoryBuffer { enable: true })
        );
        assert_eq!(
            opt.output_pinned_memory,
            Some(PinnedMemoryBuffer { enable: true })
        );
        let group = &c.instance_group[..];
        assert_eq!(group.len(), 1);
        assert_eq!(
            (group[0].name.as_str(), group[0].kind(), group[0].count),
            ("m", Kind::Cpu, 1)
        );
    }

    #[test]
    fn onnxruntime_gets_two_cpu_instances() {
        let mut c = config("onnxruntime");
        normalize(&mut c, &[], true);
        assert_eq!(c.instance_group[0].count, 2);
    }

    #[test]
    fn explicit_pinned_memory_is_kept() {
        let mut c = config("onnxruntime");
        c.optimization = Some(Default::default());
        if let Some(o) = c.optimization.as_mut() {
            o.input_pinned_memory = Some(PinnedMemoryBuffer { enable: false });
        }
        normalize(&mut c, &[], true);
        let opt = c.optimization.as_ref().unwrap();
        assert_eq!(
            opt.input_pinned_memory,
            Some(PinnedMemoryBuffer { enable: false })
        );
    }

    #[test]
    fn group_names_kinds_and_counts() {
        let mut c = config("onnxruntime");
        c.instance_group = vec![
            ModelInstanceGroup {
                count: 3,
                ..Default::default()
            },
            ModelInstanceGroup {
                name: "mine".into(),
                kind: Kind::Gpu as i32,
                ..Default::default()
            },
            ModelInstanceGroup {
                gpus: vec![7],
                ..Default::default()
            },
        ];
        normalize(&mut c, &[0, 1], true);
        let g = &c.instance_group;
        assert_eq!(
            (g[0].name.as_str(), g[0].kind(), g[0].count),
            ("m_0", Kind::Gpu, 3)
        );
        assert_eq!(g[0].gpus, vec![0, 1]);
        assert_eq!(
            (g[1].name.as_str(), g[1].count, g[1].gpus.clone()),
            ("mine", 1, vec![0, 1])
        );
        assert_eq!(
            (g[2].name.as_str(), g[2].kind(), g[2].count),
            ("m_2", Kind::Cpu, 2)
        );
    }

    #[test]
    fn an_omitted_group_follows_the_backend_and_the_gpus() {
        for (gpus, gpu_backend, kind, listed) in [
            (&[][..], true, Kind::Cpu, vec![]),
            (&[0][..], true, Kind::Gpu, vec![0]),
            (
                &[0, 1, 2, 3, 4, 5, 6, 7][..],
                true,
                Kind::Gpu,
                (0..8).collect(),
            ),
            // A backend whose runtime has no CUDA stays on the CPU.
            (&[0, 1][..], false, Kind::Cpu, vec![]),
        ] {
            let mut c = config("python");
            normalize(&mut c, gpus, gpu_backend);
            let g = &c.instance_group[0];
            assert_eq!((g.kind(), g.count, g.gpus.clone()), (kind, 1, listed));
        }
    }

    #[test]
    fn batching_defaults() {
        let mut c = config("onnxruntime");
        c.max_batch_size = 8;
        c.scheduling_choice = Some(SchedulingChoice::DynamicBatching(
            ModelDynamicBatching::default(),
        ));
        normalize(&mut c, &[], true);
        let Some(SchedulingChoice::DynamicBatching(b)) = &c.scheduling_choice else {
            panic!()
        };
        assert_eq!(b.preferred_batch_size, vec![8]);

        let mut c = config("onnxruntime");
        c.scheduling_choice = Some(SchedulingChoice::SequenceBatching(
            ModelSequenceBatching::default(),
        ));
        normalize(&mut c, &[], true);
        let Some(SchedulingChoice::SequenceBatching(s)) = &c.scheduling_choice else {
            panic!()
        };
        assert_eq!(s.max_sequence_idle_microseconds, 1_000_000);
    }

    #[test]
    fn ensembles_get_no_groups_or_optimization() {
        let mut c = config("");
        c.scheduling_choice = Some(SchedulingChoice::EnsembleScheduling(
            ModelEnsembling::default(),
        ));
        normalize(&mut c, &[], true);
        assert!(c.instance_group.is_empty());
        assert!(c.optimization.is_none());
        assert!(c.version_policy.is_some());
    }
}
