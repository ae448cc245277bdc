//! `nv_cpu_utilization`, `nv_cpu_memory_total_bytes` and
//! `nv_cpu_memory_used_bytes`, read from `/proc/stat` and `/proc/meminfo`
//! as Triton reads them: utilization is the busy share of all CPU time
//! between two readings; used memory is total less available.

/// What the CPU gauges show.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuReading {
    /// Between 0.0 and 1.0.
    pub utilization: f64,
    pub memory_total_bytes: u64,
    pub memory_used_bytes: u64,
}

/// Cumulative CPU time, in clock ticks, from `/proc/stat`'s `cpu` line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct CpuTimes {
    busy: u64,
    total: u64,
}

/// Keeps the last `/proc/stat` reading, to measure utilization since.
#[derive(Debug, Default)]
pub struct CpuMonitor {
    last: Option<CpuTimes>,
}

impl CpuMonitor {
    /// Reads the files again; `None` where they cannot be read (not Linux).
    pub fn read(&mut self) -> Option<CpuReading> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        let now = parse_stat(&stat)?;
        let (total, available) = parse_meminfo(&meminfo)?;
        let utilization = self.last.map_or(0.0, |last| utilization(last, now));
        self.last = Some(now);
        Some(CpuReading {
            utilization,
            memory_total_bytes: total,
            memory_used_bytes: total.saturating_sub(available),
        })
    }
}

/// The aggregate `cpu` line: user nice system idle iowait irq softirq steal.
fn parse_stat(text: &str) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if fields.len() < 5 {
        return None;
    }
    let total: u64 = fields.iter().sum();
    let idle = fields[3] + fields[4];
    Some(CpuTimes {
        busy: total - idle,
        total,
    })
}

fn utilization(before: CpuTimes, now: CpuTimes) -> f64 {
    let total = now.total.saturating_sub(before.total);
    if total == 0 {
        return 0.0;
    }
    let busy = now.busy.saturating_sub(before.busy);
    (busy as f64 / total as f64).clamp(0.0, 1.0)
}

/// `MemTotal` and `MemAvailable`, in bytes.
fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utilization_is_the_busy_share_between_readings() {
        let before = parse_stat("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        let now = parse_stat("cpu  200 0 200 1400 200 0 0 0 0 0\n").unwrap();
        assert_eq!(
            before,
            CpuTimes {
                busy: 200,
                total: 1000
            }
        );
        assert!((utilization(before, now) - 0.2).abs() < 1e-9);
        assert_eq!(utilization(now, now), 0.0);
        assert!(parse_stat("intr 1 2 3").is_none());
    }

    #[test]
    fn memory_comes_from_meminfo_in_bytes() {
        let text = "MemTotal:       2048 kB\nMemFree:         100 kB\nMemAvailable:    512 kB\n";
        assert_eq!(parse_meminfo(text), Some((2048 * 1024, 512 * 1024)));
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn this_machine_reads() {
        let mut monitor = CpuMonitor::default();
        if let Some(r) = monitor.read() {
            assert!(r.memory_total_bytes > 0 && r.memory_used_bytes <= r.memory_total_bytes);
            let again = monitor.read().unwrap();
            assert!((0.0..=1.0).contains(&again.utilization));
        }
    }
}
