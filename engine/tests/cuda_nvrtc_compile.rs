//! CI compile-check of every kernel: each family in `kernels/` compiles through NVRTC for
//! Hopper (`sm_90a`, the primary target: a cubin, through ptxas, as the engine loads it) and
//! for an older and a newer architecture (`compute_80`, `compute_120`: to PTX, the front end
//! and NVVM for that arch's `__CUDA_ARCH__`, without ptxas, about a third of the time on
//! CI's 2 cores; session 31), with no GPU and no CUDA toolkit — only libnvrtc (the `nvidia-cuda-nvrtc` wheel; see
//! `tools/nvrtc-check`, which installs it and runs this test with
//! `ASSAY_REQUIRE_NVRTC=1`). Without libnvrtc the test prints why it skips, unless
//! `ASSAY_REQUIRE_NVRTC` is set, in which case a missing library fails.

use engine::cuda::nvrtc;
use engine::cuda::sources::Family;

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Compile `src` to PTX for a virtual `arch` (`compute_80`): the PTX text, or the NVRTC
/// result with the compile log.
fn compile_ptx(name: &str, src: &str, options: &[String]) -> Result<Vec<u8>, String> {
    use cudarc::nvrtc::result;
    let c_src = std::ffi::CString::new(src).map_err(|e| e.to_string())?;
    let c_name = std::ffi::CString::new(name).map_err(|e| e.to_string())?;
    let prog = result::create_program(&c_src, Some(&c_name)).map_err(|e| format!("{e:?}"))?;
    let text = |raw: Vec<std::ffi::c_char>| -> Vec<u8> {
        raw.iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect()
    };
    // SAFETY: `prog` was created above and is destroyed once, after its last use; `c_src`
    // and `c_name` outlive it; the options contain no NUL (they are format!ed defines).
    let out = unsafe {
        match result::compile_program(prog, options) {
            Ok(()) => result::get_ptx(prog)
                .map(text)
                .map_err(|e| format!("{e:?}")),
            Err(e) => {
                let log = result::get_program_log(prog).map(text).unwrap_or_default();
                Err(format!("{name}: {e:?}\n{}", String::from_utf8_lossy(&log)))
            }
        }
    };
    // SAFETY: as above; the program is not used after this call.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

/// Compile one family for one arch (`sm_*`: a cubin; `compute_*`: PTX): the failures (none
/// when it compiled with every entry point present).
fn check(arch: &str, family: Family) -> Vec<String> {
    let mut failures = Vec::new();
    let t0 = std::time::Instant::now();
    let compiled = if arch.starts_with("compute_") {
        engine::cuda::sources::expand(family)
            .map_err(|e| e.to_string())
            .and_then(|src| compile_ptx(family.file(), &src, &nvrtc::options_for(family, arch)))
    } else {
        nvrtc::compile_family(family, arch).map_err(|e| e.to_string())
    };
    match compiled {
        Ok(cubin) => {
            assert!(
                arch.starts_with("compute_") || cubin[..4] == *b"\x7fELF",
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
    let jobs: Vec<(&str, Family)> = ["sm_90a", "compute_80", "compute_120"]
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
    // The PTX-only path of the secondary archs fails the same way.
    let err = compile_ptx("broken.cu", src, &["--gpu-architecture=compute_80".into()]).unwrap_err();
    assert!(
        err.contains("broken.cu") && err.contains("undefined_name"),
        "{err}"
    );
    let ptx = compile_ptx(
        "ok.cu",
        "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n",
        &["--gpu-architecture=compute_120".into()],
    )
    .unwrap();
    assert!(
        contains(&ptx, b".entry k("),
        "{}",
        String::from_utf8_lossy(&ptx)
    );
}
