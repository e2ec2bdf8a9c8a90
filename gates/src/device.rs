//! Device facts recorded in receipts: the CPU always, the GPU when one is present.
//!
//! GPU facts come from `nvidia-smi` (present wherever the NVIDIA driver is installed), so
//! that they are known before — and independently of — the engine's CUDA runtime; clocks
//! are the ones seen at the moment of the probe, next to the maximum clocks.

use std::process::Command;

use serde::{Deserialize, Serialize};

/// The CPU of the machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuFacts {
    /// `model name` from `/proc/cpuinfo`, or `unknown`.
    pub model: String,
    /// Logical cores available to this process.
    pub logical_cores: u32,
}

/// One GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuFacts {
    pub name: String,
    /// Compute capability, e.g. `9.0`.
    pub compute_capability: String,
    /// Driver version, e.g. `580.159`.
    pub driver: String,
    pub memory_bytes: u64,
    /// SM and memory clocks seen at the probe, and their maxima, in MHz.
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub max_sm_clock_mhz: Option<u32>,
    pub max_mem_clock_mhz: Option<u32>,
}

/// The machine a receipt was measured on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceFacts {
    /// `linux-x86_64` etc.
    pub os: String,
    pub cpu: CpuFacts,
    /// Every GPU seen (empty without a GPU).
    pub gpus: Vec<GpuFacts>,
}

impl DeviceFacts {
    /// The first GPU, the one the harness uses.
    pub fn gpu(&self) -> Option<&GpuFacts> {
        self.gpus.first()
    }

    /// One line: the GPU if there is one, else the CPU.
    pub fn summary(&self) -> String {
        match self.gpu() {
            Some(g) => format!(
                "{} (cc {}, driver {}, {:.0} GiB)",
                g.name,
                g.compute_capability,
                g.driver,
                g.memory_bytes as f64 / f64::from(1u32 << 30)
            ),
            None => format!(
                "{} ({} logical cores, no GPU)",
                self.cpu.model, self.cpu.logical_cores
            ),
        }
    }
}

fn cpu_facts() -> CpuFacts {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let logical_cores = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    CpuFacts {
        model,
        logical_cores,
    }
}

/// Parse `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` output (the field
/// order of [`SMI_FIELDS`]); lines that do not parse are skipped.
pub fn parse_smi(text: &str) -> Vec<GpuFacts> {
    let num = |s: &str| {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            let [name, cc, driver, mem_mib, sm, mem, max_sm, max_mem] = f.as_slice() else {
                return None;
            };
            Some(GpuFacts {
                name: (*name).to_owned(),
                compute_capability: (*cc).to_owned(),
                driver: (*driver).to_owned(),
                memory_bytes: (num(mem_mib)? * 1024.0 * 1024.0) as u64,
                sm_clock_mhz: num(sm).map(|v| v as u32),
                mem_clock_mhz: num(mem).map(|v| v as u32),
                max_sm_clock_mhz: num(max_sm).map(|v| v as u32),
                max_mem_clock_mhz: num(max_mem).map(|v| v as u32),
            })
        })
        .collect()
}

/// The `nvidia-smi` query fields, in the order [`parse_smi`] expects.
pub const SMI_FIELDS: &str = "name,compute_cap,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem";

fn gpu_facts() -> Vec<GpuFacts> {
    let Ok(out) = Command::new("nvidia-smi")
        .arg(format!("--query-gpu={SMI_FIELDS}"))
        .arg("--format=csv,noheader,nounits")
        .output()
    else {
        return Vec::new();
    };
    if !out.status.success() {
        return Vec::new();
    }
    parse_smi(&String::from_utf8_lossy(&out.stdout))
}

/// Probe this machine.
pub fn probe() -> DeviceFacts {
    DeviceFacts {
        os: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
        cpu: cpu_facts(),
        gpus: gpu_facts(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smi_output_parses() {
        let text = "NVIDIA H200, 9.0, 580.159, 143771, 1980, 3201, 1980, 3201\n\
                    garbage line\n\
                    NVIDIA L4, 8.9, 580.159, 23034, [N/A], 6251, 2040, 6251\n";
        let g = parse_smi(text);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].name, "NVIDIA H200");
        assert_eq!(g[0].compute_capability, "9.0");
        assert_eq!(g[0].memory_bytes, 143_771 * 1024 * 1024);
        assert_eq!(g[0].sm_clock_mhz, Some(1980));
        assert_eq!(g[1].sm_clock_mhz, None);
        assert_eq!(g[1].max_sm_clock_mhz, Some(2040));
    }

    #[test]
    fn probe_sees_the_cpu() {
        let d = probe();
        assert!(d.cpu.logical_cores >= 1);
        assert!(!d.cpu.model.is_empty());
        assert!(!d.summary().is_empty());
    }
}
