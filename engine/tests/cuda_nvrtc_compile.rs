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

/// Compile one family for one arch: the failures (none when it compiled with every entry
/// point present).
fn check(arch: &str, family: Family) -> Vec<String> {
    let mut failures = Vec::new();
    let t0 = std::time::Instant::now();
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
            eprintln!(
                "ok {arch} {:<16} {:<12} {:>7} bytes {:.1}s",
                family.file(),
                format!("{family:?}"),
                cubin.len(),
                t0.elapsed().as_secs_f64()
            );
        }
        Err(e) => failures.push(format!("{arch} {}: {e}", family.file())),
    }
    failures
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
    // Every (arch, family) compiles on one of a few threads (the machine's cores, at most
    // 4); the failures are reported in the list's order.
    let jobs: Vec<(&str, Family)> = ["sm_90a", "sm_80", "sm_120"]
        .into_iter()
        .flat_map(|arch| Family::ALL.map(|f| (arch, f)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4);
    let mut results: Vec<(usize, Vec<String>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(arch, family)) = jobs.get(i) else {
                            break;
                        };
                        out.push((i, check(arch, family)));
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    let failures: Vec<String> = results.into_iter().flat_map(|(_, f)| f).collect();
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
