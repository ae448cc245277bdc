//! The GPU metric families with Triton's names, one series per GPU
//! labelled `gpu_uuid`: `nv_gpu_utilization`, `nv_gpu_memory_total_bytes`,
//! `nv_gpu_memory_used_bytes`, `nv_gpu_power_usage`, `nv_gpu_power_limit`,
//! and the counter `nv_energy_consumption`, joules since the server
//! started (NVML's counter less its first reading). Read from NVML every
//! metrics interval; a figure a GPU does not report is left out, as
//! Triton leaves it.

use std::collections::HashMap;

use nereid_core::exposition::Family;

use crate::{Devices, GpuSample};

/// One GPU's figures at the last refresh.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuReading {
    pub uuid: String,
    pub sample: GpuSample,
    /// Joules since the first reading.
    pub energy_since_start: Option<f64>,
}

/// Keeps each GPU's first energy reading.
#[derive(Debug, Default)]
pub struct GpuMonitor {
    energy_at_start: HashMap<String, f64>,
}

impl GpuMonitor {
    /// Every GPU's figures; GPUs NVML cannot read are left out.
    pub fn read(&mut self, devices: &Devices) -> Vec<GpuReading> {
        devices
            .gpus()
            .iter()
            .filter_map(|gpu| {
                let sample = devices.sample(gpu)?;
                let energy_since_start = sample.energy_joules.map(|now| {
                    let start = *self.energy_at_start.entry(gpu.uuid.clone()).or_insert(now);
                    (now - start).max(0.0)
                });
                Some(GpuReading {
                    uuid: gpu.uuid.clone(),
                    sample,
                    energy_since_start,
                })
            })
            .collect()
    }
}

type Figure = fn(&GpuReading) -> Option<f64>;

const GAUGES: [(&str, &str, Figure); 5] = [
    (
        "nv_gpu_utilization",
        "GPU utilization rate [0.0 - 1.0)",
        |r| r.sample.utilization,
    ),
    (
        "nv_gpu_memory_total_bytes",
        "GPU total memory, in bytes",
        |r| r.sample.memory_total_bytes.map(|b| b as f64),
    ),
    (
        "nv_gpu_memory_used_bytes",
        "GPU used memory, in bytes",
        |r| r.sample.memory_used_bytes.map(|b| b as f64),
    ),
    ("nv_gpu_power_usage", "GPU power usage in watts", |r| {
        r.sample.power_usage_watts
    }),
    (
        "nv_gpu_power_limit",
        "GPU power management limit in watts",
        |r| r.sample.power_limit_watts,
    ),
];

const ENERGY: &str = "nv_energy_consumption";

/// The families of `readings`; without series when there are none.
pub fn families(readings: &[GpuReading]) -> Vec<Family> {
    let label = |r: &GpuReading| vec![("gpu_uuid", r.uuid.clone())];
    let mut families: Vec<Family> = GAUGES
        .into_iter()
        .map(|(name, help, figure)| {
            let mut family = Family::gauge(name, help);
            for r in readings {
                if let Some(value) = figure(r) {
                    family.add(label(r), value);
                }
            }
            family
        })
        .collect();
    let mut energy = Family::counter(
        ENERGY,
        "GPU energy consumption in joules since the Triton Server started",
    );
    for r in readings {
        if let Some(joules) = r.energy_since_start {
            // Whole joules, as the counter was before (Triton's moves in
            // millijoule steps, which whole joules approximate).
            energy.add(label(r), joules.trunc());
        }
    }
    families.push(energy);
    families
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::FakeGpus;

    use super::*;

    #[test]
    fn every_gpu_gets_its_series_and_energy_counts_from_start() {
        let devices = Devices::with_layer(Arc::new(FakeGpus::with_count(2)));
        let mut monitor = GpuMonitor::default();
        let readings = monitor.read(&devices);
        assert_eq!(readings.len(), 2);
        assert_eq!(readings[1].energy_since_start, Some(0.0));
        let mut text = String::new();
        nereid_core::exposition::render(&families(&readings), &mut text);
        let uuid = &devices.gpus()[1].uuid;
        for line in [
            format!("nv_gpu_utilization{{gpu_uuid=\"{uuid}\"}} 0.25"),
            format!("nv_gpu_memory_used_bytes{{gpu_uuid=\"{uuid}\"}} 2147483648"),
            format!("nv_gpu_power_usage{{gpu_uuid=\"{uuid}\"}} 101"),
            format!("nv_gpu_power_limit{{gpu_uuid=\"{uuid}\"}} 700"),
            format!("nv_energy_consumption{{gpu_uuid=\"{uuid}\"}} 0"),
            "# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes".to_string(),
            "# TYPE nv_energy_consumption counter".to_string(),
        ] {
            assert!(text.contains(&line), "{line} not in\n{text}");
        }
    }

    #[test]
    fn no_gpu_no_series() {
        let mut monitor = GpuMonitor::default();
        assert!(monitor.read(&Devices::none("none")).is_empty());
        assert!(families(&[]).iter().all(|f| f.series.is_empty()));
    }
}
