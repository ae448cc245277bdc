//! How much memory loaded models may hold: on the host, and on each GPU.

use std::collections::BTreeMap;
use std::fmt;

/// Where a loaded version's memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Place {
    Host,
    Gpu(u32),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Host => f.write_str("host"),
            Place::Gpu(id) => write!(f, "gpu{id}"),
        }
    }
}

/// `--model-memory-budget`: bytes for the host, and for each GPU named.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budget {
    limits: BTreeMap<Place, u64>,
}

impl Budget {
    /// No budget anywhere: nothing is ever evicted for memory.
    pub fn none() -> Budget {
        Budget::default()
    }

    /// Reads the flag's values: `BYTES` is the host's budget and
    /// `GPU:BYTES` one GPU's, as Triton's per-GPU flags are written
    /// (`--cuda-memory-pool-byte-size 0:256000000`). BYTES may end in
    /// K, M, G (powers of 1000) or Ki, Mi, Gi (powers of 1024).
    pub fn parse(values: &[String]) -> Result<Budget, String> {
        let mut budget = Budget::default();
        for value in values {
            let (place, bytes) = match value.split_once(':') {
                Some((gpu, bytes)) => {
                    let id = gpu.trim().parse::<u32>().map_err(|_| {
                        format!("--model-memory-budget '{value}': '{gpu}' is not a GPU number")
                    })?;
                    (Place::Gpu(id), bytes)
                }
                None => (Place::Host, value.as_str()),
            };
            let bytes = parse_bytes(bytes.trim()).ok_or_else(|| {
                format!(
                    "--model-memory-budget '{value}': '{bytes}' is not a size in bytes (e.g. 8000000000, 8G or 8Gi)"
                )
            })?;
            if budget.limits.insert(place, bytes).is_some() {
                return Err(format!(
                    "--model-memory-budget gives the {place} budget twice"
                ));
            }
        }
        Ok(budget)
    }

    /// The budget at `place`, if it has one.
    pub fn limit(&self, place: Place) -> Option<u64> {
        self.limits.get(&place).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }

    /// Every place with a budget, and its bytes.
    pub fn places(&self) -> impl Iterator<Item = (Place, u64)> + '_ {
        self.limits.iter().map(|(p, b)| (*p, *b))
    }
}

fn parse_bytes(text: &str) -> Option<u64> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit: u64 = match &text[digits.len()..] {
        "" => 1,
        "K" | "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// Bytes for a person: "512.0 MB".
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["bytes", "kB", "MB", "GB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(values: &[&str]) -> Result<Budget, String> {
        Budget::parse(&values.iter().map(|v| v.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn host_and_gpu_budgets_read_as_tritons_per_gpu_flags() {
        let budget = parse(&["8Gi", "0:4000000000", "1:2G"]).unwrap();
        assert_eq!(budget.limit(Place::Host), Some(8 << 30));
        assert_eq!(budget.limit(Place::Gpu(0)), Some(4_000_000_000));
        assert_eq!(budget.limit(Place::Gpu(1)), Some(2_000_000_000));
        assert_eq!(budget.limit(Place::Gpu(2)), None);
        assert_eq!(parse(&["100"]).unwrap().limit(Place::Host), Some(100));
    }

    #[test]
    fn a_bad_budget_says_what_is_wrong() {
        assert!(
            parse(&["lots"])
                .unwrap_err()
                .contains("not a size in bytes")
        );
        assert!(parse(&["x:1G"]).unwrap_err().contains("not a GPU number"));
        assert!(
            parse(&["1G", "2G"])
                .unwrap_err()
                .contains("host budget twice")
        );
        assert!(parse(&["1T"]).is_err());
    }

    #[test]
    fn sizes_read_for_people() {
        assert_eq!(human(999), "999 bytes");
        assert_eq!(human(104_857_600), "104.9 MB");
        assert_eq!(human(8_000_000_000), "8.0 GB");
    }
}
