//! How much memory is in use where a budget applies.

use std::path::Path;

use crate::budget::Place;

/// Reads the memory in use at a place now.
pub trait Meter: Send + Sync + std::fmt::Debug {
    /// Bytes in use at `place` (this process's resident memory with its
    /// workers', or a GPU's used memory); `None` when it cannot be read.
    fn used(&self, place: Place) -> Option<u64>;
}

/// The host's side of the budget: the resident memory of this process
/// and of its child processes (Python models' workers), from /proc. GPUs
/// come from the device layer, through the closure.
pub struct ProcessMemory {
    gpu: Box<dyn Fn(u32) -> Option<u64> + Send + Sync>,
}

impl std::fmt::Debug for ProcessMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessMemory").finish_non_exhaustive()
    }
}

impl ProcessMemory {
    /// `gpu` reads a GPU's used memory (NVML's figure), `None` when unknown.
    pub fn new(gpu: impl Fn(u32) -> Option<u64> + Send + Sync + 'static) -> ProcessMemory {
        ProcessMemory { gpu: Box::new(gpu) }
    }
}

impl Meter for ProcessMemory {
    fn used(&self, place: Place) -> Option<u64> {
        match place {
            Place::Host => {
                let own = resident_bytes(Path::new("/proc/self"))?;
                Some(own + children_resident_bytes())
            }
            Place::Gpu(id) => (self.gpu)(id),
        }
    }
}

/// This process's resident memory alone (VmRSS), for a footprint measured
/// around a load.
pub fn own_resident_bytes() -> Option<u64> {
    resident_bytes(Path::new("/proc/self"))
}

/// VmRSS of the process whose /proc folder is `proc`.
fn resident_bytes(proc: &Path) -> Option<u64> {
    let status = std::fs::read_to_string(proc.join("status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The resident memory of this process's children (Python models' worker
/// processes), from /proc/self/task/*/children.
fn children_resident_bytes() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    let mut pids: Vec<u32> = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids.iter()
        .filter_map(|pid| resident_bytes(&Path::new("/proc").join(pid.to_string())))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_reads_its_own_resident_memory() {
        let meter = ProcessMemory::new(|_| None);
        let before = meter.used(Place::Host).unwrap();
        let held = vec![1u8; 64 << 20];
        let after = meter.used(Place::Host).unwrap();
        assert!(after >= before + (60 << 20), "{before} -> {after}");
        drop(held);
        assert_eq!(meter.used(Place::Gpu(0)), None);
    }

    #[test]
    fn children_count_on_the_host() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(children_resident_bytes() > 0);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
