//! CI compile-check of every kernel: each family in `kernels/` compiles through NVRTC for
//! Hopper (`sm_90a`, the primary target) and for an older and a newer architecture, with
//! no GPU and no CUDA toolkit — only libnvrtc (the `nvidia-cuda-nvrtc` wheel; see
//! `tools/nvrtc-check`, which installs it and runs this test with
//! `ASSAY_REQUIRE_NVRTC=1`). Without libnvrtc the test prints why it skips, unless
//! `ASSAY_REQUIRE_NVRTC` is set, in which case a missing library fails.

use engine::cuda::nvrtc;
use engine::cuda::sources::Family;

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn every_kernel_family_compiles_through_nvrtc() {
    let required = std::env::var_os("ASSAY_REQUIRE_NVRTC").is_some();
    if !nvrtc::nvrtc_available() {
        assert!(
            !required,
            "ASSAY_REQUIRE_NVRTC is set but libnvrtc cannot be loaded (is the wheel's lib directory on LD_LIBRARY_PATH?)"
        );
        eprintln!(
            "skip: libnvrtc is not loadable here; run tools/nvrtc-check (installs the nvidia-cuda-nvrtc wheel) to compile-check the kernels"
        );
        return;
    }
    let (major, minor) = nvrtc::nvrtc_version().unwrap();
    eprintln!(
        "NVRTC {major}.{minor}, kernel identity {}",
        engine::cuda::kernel_identity()
    );
    let mut failures = Vec::new();
    for arch in ["sm_90a", "sm_80", "sm_120"] {
        for family in Family::ALL {
            match nvrtc::compile_family(family, arch) {
                Ok(cubin) => {
                    assert_eq!(
                        &cubin[..4],
                        b"\x7fELF",
                        "{family:?} {arch}: not an ELF cubin"
                    );
                    for name in family.entry_points() {
                        if !contains(&cubin, name.as_bytes()) {
                            failures.push(format!(
                                "{arch} {}: entry point {name} missing",
                                family.file()
                            ));
                        }
                    }
                    eprintln!("ok {arch} {:<16} {:>7} bytes", family.file(), cubin.len());
                }
                Err(e) => failures.push(format!("{arch} {}: {e}", family.file())),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "kernel compile-check failed:\n{}",
        failures.join("\n")
    );
}

#[test]
fn a_broken_kernel_is_reported_with_the_compiler_log() {
    if !nvrtc::nvrtc_available() {
        eprintln!("skip: libnvrtc is not loadable here");
        return;
    }
    let src = "extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }\n";
    let err = nvrtc::compile_source(
        "broken.cu",
        src,
        &["--gpu-architecture=sm_90a".into()],
        "sm_90a",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("broken.cu") && err.contains("undefined_name"),
        "{err}"
    );
}
