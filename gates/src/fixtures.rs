//! Fixed values for the tests of receipt writers and readers (here and in the harness): a
//! build and a device that name nothing real, a stamp of them, a measured bf16 GEMM
//! reference and a measured arm. Test data only: no gate or bench writes these.

use crate::device::{CpuFacts, DeviceFacts};
use crate::receipt::{Arm, Build, GemmRef, Stats};
use crate::stamp::Stamp;

/// A clean build of placeholder identities.
pub fn build() -> Build {
    Build {
        commit: "0123456789abcdef0123456789abcdef01234567".into(),
        dirty: false,
        kernel_identity: "a".repeat(64),
        engine_identity: "b".repeat(64),
        harness: "0.1.0 release".into(),
    }
}

/// A two-core CPU machine without GPUs.
pub fn cpu_device() -> DeviceFacts {
    DeviceFacts {
        os: "linux-x86_64".into(),
        cpu: CpuFacts {
            model: "cpu".into(),
            logical_cores: 2,
        },
        gpus: Vec::new(),
    }
}

/// A stamp of [`build`] and [`cpu_device`] at `time`.
pub fn stamp(time: &str) -> Stamp {
    Stamp {
        time: time.into(),
        build: build(),
        device: cpu_device(),
    }
}

/// A bf16 GEMM reference measured as `samples` TFLOP/s on an 8B-shaped model's
/// parameters, one product named `shape`.
pub fn gemm_ref(samples: Vec<f64>, shape: &str) -> GemmRef {
    let stats = Stats::of(&samples);
    GemmRef {
        absent: None,
        tflops: stats.map(|s| s.median),
        stats,
        samples,
        shapes: vec![shape.into()],
        flops_per_rep: 7.1e12,
        params: 8_030_261_248,
        method: "torch.mm bf16 (cuBLAS)".into(),
        torch: Some("2.11.0 (CUDA 12.8)".into()),
        device: Some("NVIDIA H200".into()),
    }
}

/// An arm measured five times at `v` tok/s.
pub fn arm(name: &str, engine: &str, v: f64) -> Arm {
    Arm {
        name: name.into(),
        engine: engine.into(),
        version: "v".into(),
        flags: vec![],
        unit: Some("tok/s".into()),
        samples: vec![v; 5],
        stats: Stats::of(&[v; 5]),
        roofline_fraction: None,
    }
}

/// A bf16 GEMM reference recorded as absent for `why` (no samples, no rate).
pub fn gemm_ref_absent(why: &str) -> GemmRef {
    GemmRef {
        absent: Some(why.into()),
        torch: None,
        device: None,
        ..gemm_ref(Vec::new(), "512x4096 -> 6144 x32")
    }
}
