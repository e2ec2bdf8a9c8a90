//! Tests of the kernel sources (sources.rs): the tuning defines, the source list, the
//! identity and the header expansion.

#[test]
fn mmv_defines_carry_every_tuning_name() {
    // mmv.cu is always compiled with a value for each tuning define (the consts), so
    // `mmv_define_value` reads what the launch shapes must agree with.
    for (name, _) in MMV_TUNING {
        let pre = format!("-D{name}=");
        assert!(
            Family::Mmv.defines().iter().any(|d| d.starts_with(&pre)),
            "{name}"
        );
    }
    assert_eq!(mmv_define_value("MMV_U"), consts::MMV_U as u32);
    assert_eq!(mmv_define_value("MMV_NOPE"), 0);
}

#[test]
fn mmv_tuning_defines_are_strict() {
    assert_eq!(mmv_tuning_defines(None).unwrap(), Vec::<String>::new());
    assert_eq!(mmv_tuning_defines(Some(" ")).unwrap(), Vec::<String>::new());
    assert_eq!(
        mmv_tuning_defines(Some("MMV_U=8, MMV_PIPE=1,MMV_Q4MAP=0")).unwrap(),
        ["-DMMV_U=8", "-DMMV_PIPE=1", "-DMMV_Q4MAP=0"]
    );
    for bad in [
        "MMV_U",
        "MMV_U=0",
        "MMV_U=17",
        "MMV_WARPS=4",
        "mmv_u=8",
        "MMV_PIPE=x",
    ] {
        assert!(mmv_tuning_defines(Some(bad)).is_err(), "{bad}");
    }
}

use super::*;
use std::path::Path;

fn files_under(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().to_string();
        if e.file_type().unwrap().is_dir() {
            files_under(&e.path(), &format!("{prefix}{name}/"), out);
        } else if name.ends_with(".cu") || name.ends_with(".cuh") {
            out.push(format!("{prefix}{name}"));
        }
    }
}

#[test]
fn sources_list_every_kernel_file_sorted() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels");
    let mut on_disk = Vec::new();
    files_under(&dir, "", &mut on_disk);
    on_disk.sort();
    let listed: Vec<String> = SOURCES.iter().map(|s| s.path.to_string()).collect();
    assert_eq!(
        listed, on_disk,
        "SOURCES must list every kernels/ file, sorted"
    );
    for f in Family::ALL {
        assert!(source(f.file()).is_some(), "{f:?}");
    }
}

#[test]
fn identity_changes_with_any_byte_and_ignores_order() {
    let a = [
        KernelSource {
            path: "a.cu",
            text: "x",
        },
        KernelSource {
            path: "b.cu",
            text: "y",
        },
    ];
    let b = [a[1], a[0]];
    assert_eq!(identity_of(&a), identity_of(&b));
    let c = [
        KernelSource {
            path: "a.cu",
            text: "x",
        },
        KernelSource {
            path: "b.cu",
            text: "z",
        },
    ];
    assert_ne!(identity_of(&a), identity_of(&c));
    // Moving a byte between files changes the identity too.
    let d = [
        KernelSource {
            path: "a.cu",
            text: "xy",
        },
        KernelSource {
            path: "b.cu",
            text: "",
        },
    ];
    assert_ne!(identity_of(&a), identity_of(&d));
    assert_eq!(kernel_identity().len(), 64);
}

// Every entry point is defined in its family (and every kernel listed): see
// engine/tests/entry_points.rs, which also knows gemmt.cu's macro names.

#[test]
fn mma_header_shared_by_gemm_and_mmv() {
    // gemm.cu and mmv.cu include common/mma.cuh and keep no copy of its helpers, so the
    // prompt pass and the decode products make the same f16 integers and MMAs.
    for (file, fam) in [("gemm.cu", Family::Gemm), ("mmv.cu", Family::Mmv)] {
        let text = source(file).unwrap();
        assert!(text.contains("#include \"common/mma.cuh\""), "{file}");
        let expanded = expand(fam).unwrap();
        for item in [
            "__device__ __forceinline__ u32 gm_pair(",
            "__device__ __forceinline__ void gm_mma(",
            "struct GmA {",
            "struct GmQ4_0 {",
            "struct GmQ8_0 {",
        ] {
            assert!(!text.contains(item), "{file} redefines {item}");
            assert_eq!(expanded.matches(item).count(), 1, "{file}: {item}");
        }
    }
}

#[test]
fn expansion_inlines_headers_once() {
    let s = expand(Family::Matvec).unwrap();
    assert!(
        !s.lines().any(|l| l.trim_start().starts_with("#include")),
        "includes left in"
    );
    assert_eq!(s.matches("typedef unsigned char u8;").count(), 1);
    assert!(s.contains("struct FmtQ6_K"));
    assert!(!s.contains("#pragma once"));
}

#[test]
fn kv_block_matches_common_header() {
    let common = SOURCES
        .iter()
        .find(|k| k.path == "common/common.cuh")
        .map(|k| k.text)
        .unwrap_or_default();
    assert!(
        common.contains(&format!("#define KV_BLOCK {}\n", consts::KV_BLOCK)),
        "common.cuh must define KV_BLOCK {}",
        consts::KV_BLOCK
    );
}
