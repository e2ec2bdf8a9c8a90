//! Board tests on a committed fixture (boards, receipts, README with markers): the
//! regeneration matches the committed expected files byte for byte, is idempotent, shows
//! the newest *current* receipt per cell, and shows `stale` — never a number — when no
//! receipt is current. `ASSAY_BLESS=1` rewrites the expected files (review the diff).

use super::*;
use gates::Verdict;
use gates::device::{CpuFacts, DeviceFacts, GpuFacts};
use gates::receipt::{Arm, Build, Kind, Receipt, Roofline, Stats, Workload, append};
use gates::stamp::Stamp;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/board")
}

fn today() -> SourceIdentity {
    SourceIdentity {
        kernel: "a".repeat(64),
        engine: "b".repeat(64),
    }
}

fn paths(readme: &str) -> BoardPaths {
    let f = fixture();
    BoardPaths {
        readme: f.join(readme),
        receipts: f.join("research"),
        boards: f.join("boards"),
    }
}

/// A bench receipt of `cell` at `time` with these samples, on `ids`.
fn bench(cell: &str, time: &str, ids: &SourceIdentity, samples: &[f64]) -> Receipt {
    let stamp = Stamp {
        time: time.into(),
        build: Build {
            commit: "0123456789abcdef0123456789abcdef01234567".into(),
            dirty: false,
            kernel_identity: ids.kernel.clone(),
            engine_identity: ids.engine.clone(),
            harness: "0.1.0 release".into(),
        },
        device: DeviceFacts {
            os: "linux-x86_64".into(),
            cpu: CpuFacts {
                model: "Test CPU".into(),
                logical_cores: 16,
            },
            gpus: vec![GpuFacts {
                name: "NVIDIA H200".into(),
                compute_capability: "9.0".into(),
                driver: "580.159".into(),
                memory_bytes: 150_754_820_096,
                sm_clock_mhz: Some(1980),
                mem_clock_mhz: Some(3201),
                max_sm_clock_mhz: Some(1980),
                max_mem_clock_mhz: Some(3201),
            }],
        },
    };
    let mut r = stamp.receipt(Kind::Bench, cell, Verdict::Green);
    r.workload = Workload {
        board: Some("demo".into()),
        mode: Some("decode".into()),
        ..Workload::default()
    };
    let roof = Roofline {
        bytes_per_token: 4.36e9,
        bandwidth_bytes_per_s: 4.26e12,
        bandwidth_method: "device-to-device copy 4 GiB".into(),
        limit_tokens_per_s: 4.26e12 / 4.36e9,
    };
    let stats = Stats::of(samples);
    r.arms = vec![Arm {
        name: "assay".into(),
        engine: "assay-cuda".into(),
        version: "0.1.0".into(),
        flags: vec![],
        unit: Some("tok/s".into()),
        samples: samples.to_vec(),
        stats,
        roofline_fraction: stats.map(|s| s.median / roof.limit_tokens_per_s),
    }];
    r.roofline = Some(roof);
    r.wall_s = 10.0;
    r
}

fn bless() {
    let dir = fixture().join("research");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bench.jsonl");
    let _ = std::fs::remove_file(&file);
    let old = SourceIdentity {
        kernel: "c".repeat(64),
        engine: "b".repeat(64),
    };
    for r in [
        bench(
            "q4",
            "2026-11-29T10:00:00Z",
            &today(),
            &[700.0, 710.0, 705.0, 702.0, 708.0],
        ),
        bench(
            "q4",
            "2026-11-29T11:00:00Z",
            &today(),
            &[800.0, 810.0, 805.0, 802.0, 808.0],
        ),
        // Newer, but measured on other kernels: never shown.
        bench(
            "q4",
            "2026-11-29T12:00:00Z",
            &old,
            &[999.0, 999.5, 999.0, 999.0, 999.0],
        ),
        bench(
            "q8",
            "2026-11-29T12:00:00Z",
            &old,
            &[500.0, 501.0, 502.0, 503.0, 504.0],
        ),
    ] {
        append(&file, &r).unwrap();
    }
    let g = regenerate(&paths("README.in.md"), &today()).unwrap();
    std::fs::write(fixture().join("README.expected.md"), &g.readme).unwrap();
    for (p, svg) in &g.plots {
        std::fs::write(p, svg).unwrap();
    }
}

#[test]
fn regeneration_matches_the_committed_fixture_byte_for_byte() {
    if std::env::var_os("ASSAY_BLESS").is_some() {
        bless();
    }
    let g = regenerate(&paths("README.in.md"), &today()).unwrap();
    let expected = std::fs::read_to_string(fixture().join("README.expected.md")).unwrap();
    assert_eq!(g.readme, expected);
    for (p, svg) in &g.plots {
        assert_eq!(&std::fs::read_to_string(p).unwrap(), svg, "{}", p.display());
    }
    assert_eq!(g.missing_markers, vec!["other".to_owned()]);
    assert_eq!(g.plots.len(), 1, "only the README's boards are drawn");
    // The newest current receipt is shown; the newer non-current one is not.
    assert!(expected.contains("| 805.00 |"), "{expected}");
    assert!(!expected.contains("999"));
    assert!(expected.contains("| Q8_0 | assay | stale: no current receipt"));
    // Idempotent: regenerating from the generated README changes nothing.
    let again = regenerate(&paths("README.expected.md"), &today()).unwrap();
    assert_eq!(again.readme, expected);
    assert_eq!(again.plots, g.plots);
}

#[test]
fn with_no_current_receipt_every_cell_is_stale() {
    let other = SourceIdentity {
        kernel: "d".repeat(64),
        engine: "b".repeat(64),
    };
    let g = regenerate(&paths("README.in.md"), &other).unwrap();
    assert_eq!(g.counts[0], ("demo".to_owned(), 0, 2));
    for n in ["805", "999", "500"] {
        assert!(!g.readme.contains(n), "{n} shown");
    }
    assert_eq!(g.readme.matches("stale: no current receipt").count(), 2);
}

#[test]
fn the_committed_readme_is_a_regeneration_of_the_committed_receipts() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = root.join("README.md");
    let text = std::fs::read_to_string(&readme).unwrap();
    if !text.contains("<!-- board:") {
        eprintln!("skipped: README.md has no board markers yet");
        return;
    }
    let today = SourceIdentity::of_tree(&root).unwrap();
    let p = BoardPaths {
        readme,
        receipts: root.join("research"),
        boards: root.join("boards"),
    };
    let g = regenerate(&p, &today).unwrap();
    assert!(
        g.readme == text,
        "README.md is out of date: run `harness board`"
    );
    for (p, svg) in &g.plots {
        let on_disk = std::fs::read_to_string(p).unwrap_or_default();
        assert!(
            &on_disk == svg,
            "{} is out of date: run `harness board`",
            p.display()
        );
    }
}

#[test]
fn pair_ratios_say_above_one_when_we_are_ahead() {
    let mut r = bench("pair-cell", "2026-11-30T00:00:00Z", &today(), &[100.0; 5]);
    r.kind = Kind::Pair;
    let arm = |name: &str, v: f64| Arm {
        name: name.into(),
        engine: "e".into(),
        version: "v".into(),
        flags: vec![],
        unit: None,
        samples: vec![v; 5],
        stats: Stats::of(&[v; 5]),
        roofline_fraction: None,
    };
    r.arms = vec![
        arm("assay decode", 300.0),
        arm("assay TTFT", 50.0),
        arm("llama.cpp decode", 250.0),
        arm("llama.cpp TTFT", 40.0),
    ];
    let got = render::ratios(&r);
    assert_eq!(got.len(), 2);
    assert_eq!(
        (got[0].0.as_str(), got[0].1.as_str()),
        ("decode", "llama.cpp")
    );
    assert!((got[0].2 - 1.2).abs() < 1e-12);
    // TTFT: lower is better, so theirs / ours = 0.8 (a loss, shown plainly).
    assert!((got[1].2 - 0.8).abs() < 1e-12);
    assert_eq!(render::ratio_cell(got[0].2), "**1.20x**");
    assert_eq!(render::ratio_cell(got[1].2), "0.80x");
}
