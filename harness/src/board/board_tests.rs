//! Board tests on a committed fixture (boards, receipts, README with markers): the
//! regeneration matches the committed expected files byte for byte, is idempotent, shows
//! the newest *current* receipt per cell, and shows `stale` — never a number in the median
//! column — when no receipt is current (the stale row names the last receipt of other sources).
//! `ASSAY_BLESS=1` rewrites the expected files (review the diff).

use super::*;
use gates::Verdict;
use gates::device::{CpuFacts, DeviceFacts, GpuFacts};
use gates::receipt::{
    Arm, Build, Kind, Receipt, Roofline, Stats, Workload, append, prefill_target_tok_s,
};
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
    assert!(g.orphan_regions.is_empty());
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
fn a_region_no_board_defines_is_an_orphan() {
    let t = tempfile::tempdir().unwrap();
    let readme = t.path().join("README.md");
    let text = std::fs::read_to_string(fixture().join("README.in.md")).unwrap();
    std::fs::write(
        &readme,
        format!("{text}\n<!-- board:gone:begin -->\nold rows\n<!-- board:gone:end -->\n"),
    )
    .unwrap();
    let p = BoardPaths {
        readme,
        ..paths("README.in.md")
    };
    let g = regenerate(&p, &today()).unwrap();
    assert_eq!(g.orphan_regions, vec!["gone".to_owned()]);
    assert!(
        g.readme.contains("old rows"),
        "an orphan's text is left alone"
    );
}

#[test]
fn with_no_current_receipt_every_cell_is_stale() {
    let other = SourceIdentity {
        kernel: "d".repeat(64),
        engine: "b".repeat(64),
    };
    let g = regenerate(&paths("README.in.md"), &other).unwrap();
    assert_eq!(g.counts[0], ("demo".to_owned(), 0, 2));
    // No number in the median column: each cell is one stale row, which names what the
    // cell last measured on other sources (the newest green receipt, whatever its identity).
    for n in ["| 805.00 |", "| 999.00 |", "| 500.00 |", "| 502.00 |"] {
        assert!(!g.readme.contains(n), "{n} shown as a result");
    }
    assert_eq!(g.readme.matches("stale: no current receipt").count(), 2);
    assert_eq!(g.readme.matches("; last measured ").count(), 2);
    assert!(
        g.readme
            .contains("| Q8_0 | assay | stale: no current receipt; last measured 2026-11-29T12:00:00Z at `0123456789` (other sources): assay 502.00 tok/s |"),
        "{}",
        g.readme
    );
}

#[test]
fn a_stale_pairing_row_names_its_last_ratios_without_bold() {
    let mut r = pair_with_flags(&[]);
    r.arms[0].name = "assay decode".into();
    r.arms[1].stats = r.arms[1].stats.map(|st| Stats {
        median: 2.0 * st.median,
        ..st
    });
    let t = render::last_text(&r);
    assert!(t.contains("decode 0.50x vs llama.cpp"), "{t}");
    assert!(
        t.starts_with("stale: no current receipt; last measured "),
        "{t}"
    );
    assert!(t.contains("x vs "), "{t}");
    assert!(!t.contains("**"), "{t}");
    let t = render::last_text(&red(r, "arms part at token 2"));
    assert!(
        t.ends_with("(other sources): red: arms part at token 2"),
        "{t}"
    );
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
        g.orphan_regions.is_empty(),
        "README.md has regions no board defines: {:?}",
        g.orphan_regions
    );
    assert!(
        g.readme == text,
        "README.md is out of date: run `harness board`"
    );
    assert!(
        g.uncaused.is_empty(),
        "losses shown without a cause in boards/losses.toml: {:?}",
        g.uncaused
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

/// A prefill receipt of `cell` (assay and llama.cpp at these medians, no roofline), with a
/// measured GEMM reference of `tflops` when given.
fn prefill(cell: &str, ours: f64, theirs: f64, tflops: Option<f64>) -> Receipt {
    let mut r = bench(cell, "2026-12-01T10:00:00Z", &today(), &[ours; 5]);
    r.workload.board = Some("pf".into());
    r.workload.mode = Some("prefill".into());
    r.roofline = None;
    let arm = |name: &str, engine: &str, v: f64| gates::fixtures::arm(name, engine, v);
    r.arms = vec![
        arm("assay", "assay-cuda", ours),
        arm("llama.cpp", "llama-bench", theirs),
    ];
    if let Some(t) = tflops {
        r.gemm_ref = Some(gates::fixtures::gemm_ref(
            vec![t - 10.0, t, t + 10.0, t - 5.0, t + 5.0],
            "512x4096 -> 6144 x32 (q+k+v)",
        ));
        r.target_tok_s = Some(prefill_target_tok_s(t, 8_030_261_248));
    }
    r
}

const PREFILL_BOARD: &str = r#"
name = "pf"
title = "Prefill (test)"

[[cell]]
id = "pf-a"
label = "A, 512"
device = "gpu"
mode = "prefill"
synth = { arch = "llama", shape = "llama-3.1-8b", quant = "Q4_0" }
prompt_tokens = 512
gen_tokens = 16
arms = ["assay", "llama.cpp"]

[[cell]]
id = "pf-b"
label = "B, 2048"
device = "gpu"
mode = "prefill"
synth = { arch = "llama", shape = "llama-3.1-8b", quant = "Q8_0" }
prompt_tokens = 2048
gen_tokens = 16
arms = ["assay", "llama.cpp"]
"#;

/// Regenerate a README holding only the `pf` board from these receipts (written to a
/// file, so the polars selection reads the new fields too).
fn regenerate_prefill(receipts: &[Receipt]) -> Generated {
    let t = tempfile::tempdir().unwrap();
    let boards = t.path().join("boards");
    std::fs::create_dir_all(&boards).unwrap();
    std::fs::write(boards.join("pf.toml"), PREFILL_BOARD).unwrap();
    let research = t.path().join("research");
    for r in receipts {
        append(&research.join("bench.jsonl"), r).unwrap();
    }
    let readme = t.path().join("README.md");
    std::fs::write(&readme, "<!-- board:pf:begin -->\n<!-- board:pf:end -->\n").unwrap();
    regenerate(
        &BoardPaths {
            readme,
            receipts: research,
            boards,
        },
        &today(),
    )
    .unwrap()
}

#[test]
fn a_prefill_receipt_with_a_gemm_reference_shows_the_target_and_fractions() {
    // A: 790 TFLOP/s -> target 24594.5 tok/s; assay at 27000 passes it, llama.cpp not.
    let t = prefill_target_tok_s(790.0, 8_030_261_248);
    let mut absent = prefill("pf-b", 20_000.0, 9_000.0, None);
    absent.gemm_ref = Some(gates::fixtures::gemm_ref_absent("torch not importable"));
    let g = regenerate_prefill(&[prefill("pf-a", 27_000.0, 9_000.0, Some(790.0)), absent]);
    let md = &g.readme;
    let frac = |v: f64| format!("{:.1}% of target", 100.0 * v / t);
    assert!(
        md.contains(&format!(
            "| A, 512 | assay assay-cuda | 27000.00 | 27000.00 – 27000.00 | 5 | 24594.5 target | {} |",
            frac(27_000.0)
        )),
        "{md}"
    );
    assert!(frac(27_000.0) == "109.8% of target" && frac(9_000.0) == "36.6% of target");
    assert!(md.contains("| A, 512 | llama.cpp llama-bench | 9000.00 | 9000.00 – 9000.00 | 5 | 24594.5 target | 36.6% of target |"), "{md}");
    // B has no target: the limit columns stay empty, the list says why.
    assert!(
        md.contains("| B, 2048 | assay assay-cuda | 20000.00 | 20000.00 – 20000.00 | 5 | — | — |"),
        "{md}"
    );
    assert!(md.contains("Target (issue 8): half the bf16 GEMM rate measured in the same run"));
    assert!(md.contains(
        "- A, 512: 790.0 TFLOP/s (780.0 – 800.0, N=5; 2.11.0 (CUDA 12.8), NVIDIA H200), 8.030 B params: target 24594.5 tok/s"
    ), "{md}");
    assert!(
        md.contains("- B, 2048: not measured (torch not importable)"),
        "{md}"
    );
    // Not every shown receipt has a target: the plot stays in tokens/s.
    let svg = &g.plots[0].1;
    assert!(svg.contains("tokens/s (median)") && !svg.contains("% of the target"));

    // Every shown receipt has one: the plot is in % of the target.
    let g = regenerate_prefill(&[
        prefill("pf-a", 27_000.0, 9_000.0, Some(790.0)),
        prefill("pf-b", 20_000.0, 9_000.0, Some(800.0)),
    ]);
    let svg = &g.plots[0].1;
    assert!(svg.contains("% of the target (half the bf16 GEMM rate, same run)"));
    // A file mixing rows with and without the field (older rows) selects and renders both.
    let g = regenerate_prefill(&[
        prefill("pf-b", 20_000.0, 9_000.0, None),
        prefill("pf-a", 27_000.0, 9_000.0, Some(790.0)),
    ]);
    assert_eq!(g.counts[0], ("pf".to_owned(), 2, 0));
    assert!(g.readme.contains("| 24594.5 target | 109.8% of target |"));
    assert!(
        g.readme.contains(
            "| B, 2048 | llama.cpp llama-bench | 9000.00 | 9000.00 – 9000.00 | 5 | — | — |"
        )
    );
    assert!(
        svg.contains("\n109.8\n") && svg.contains("\n36.6\n"),
        "{svg}"
    );
}

#[test]
fn a_prefill_receipt_without_the_field_renders_as_before() {
    let g = regenerate_prefill(&[prefill("pf-a", 27_000.0, 9_000.0, None)]);
    let md = &g.readme;
    assert!(md.contains("| A, 512 | assay assay-cuda | 27000.00 | 27000.00 – 27000.00 | 5 | — | — | NVIDIA H200 | 2026-12-01T10:00:00Z `0123456789` |"), "{md}");
    assert!(md.contains("| B, 2048 | assay, llama.cpp | stale: no current receipt | | | | | | |"));
    assert!(!md.contains("target") && !md.contains("Target"), "{md}");
    assert!(md.contains("\n\n![pf](boards/pf.svg)"));
    assert!(g.plots[0].1.contains("tokens/s (median)"));
    // The list under the table is empty without a reference.
    let b: crate::bench::cells::Board = toml::from_str(PREFILL_BOARD).unwrap();
    let r = prefill("pf-a", 27_000.0, 9_000.0, None);
    let shown = std::collections::BTreeMap::from([("pf-a".to_owned(), &r)]);
    assert_eq!(render::gemm_notes(&b, &shown), "");
    assert_eq!(
        render::target_cells(25_000.0, Some(12_500.0)),
        ("25000.0 target".to_owned(), "50.0% of target".to_owned())
    );
    assert_eq!(render::target_cells(25_000.0, None).1, "—");
}

/// The fixture's boards and README with receipts written to a temporary folder.
fn with_receipts(receipts: &[Receipt]) -> (tempfile::TempDir, BoardPaths) {
    let t = tempfile::tempdir().unwrap();
    let research = t.path().join("research");
    std::fs::create_dir_all(&research).unwrap();
    for r in receipts {
        append(&research.join("bench.jsonl"), r).unwrap();
    }
    let p = BoardPaths {
        receipts: research,
        ..paths("README.in.md")
    };
    (t, p)
}

fn red(mut r: Receipt, why: &str) -> Receipt {
    r.verdict = Verdict::Red {
        failures: vec![why.into()],
    };
    r
}

#[test]
fn a_newer_red_receipt_is_shown_red_with_no_number_and_an_older_one_is_superseded() {
    let s = [700.0, 710.0, 705.0, 702.0, 708.0];
    let why = "the arms disagree on the first greedy tokens (not a near-tie)";
    let (_t, p) = with_receipts(&[
        // q4: green, then red on the same sources: red wins.
        bench("q4", "2026-11-29T10:00:00Z", &today(), &s),
        red(
            bench("q4", "2026-11-29T11:00:00Z", &today(), &[900.0; 5]),
            why,
        ),
        // q8: red, then green: the green one is shown.
        red(
            bench("q8", "2026-11-29T10:00:00Z", &today(), &[900.0; 5]),
            "old | failure",
        ),
        bench("q8", "2026-11-29T11:00:00Z", &today(), &s),
    ]);
    let g = regenerate(&p, &today()).unwrap();
    assert!(g.readme.contains(&format!("| Q4_0 | assay | red: {why} | | | | | NVIDIA H200 | 2026-11-29T11:00:00Z `0123456789` |")), "{}", g.readme);
    assert!(
        !g.readme.contains("900"),
        "a red receipt's numbers are never shown"
    );
    assert!(
        g.readme.contains("| Q8_0 | assay assay-cuda | 705.00 |"),
        "{}",
        g.readme
    );
    assert!(!g.readme.contains("old \\| failure"));
    assert_eq!(g.counts[0], ("demo".to_owned(), 1, 0));
    assert_eq!(g.red, vec![("demo".to_owned(), "q4".to_owned())]);
    let svg = &g.plots[0].1;
    assert!(svg.contains("red: see the table"), "{svg}");
}

#[test]
fn a_red_receipt_on_other_sources_is_stale_not_red() {
    let other = SourceIdentity {
        kernel: "e".repeat(64),
        engine: "b".repeat(64),
    };
    let (_t, p) = with_receipts(&[red(
        bench("q4", "2026-11-29T11:00:00Z", &other, &[900.0; 5]),
        "x",
    )]);
    let g = regenerate(&p, &today()).unwrap();
    assert!(g.red.is_empty());
    assert_eq!(g.readme.matches("stale: no current receipt").count(), 2);
    // Not a red row of today's engine: a stale row naming its last receipt, red.
    assert!(!g.readme.contains("| Q4_0 | assay | red:"), "{}", g.readme);
    assert!(
        g.readme.contains("(other sources): red: x |"),
        "{}",
        g.readme
    );
    assert!(
        !g.readme.contains("900"),
        "a red receipt's numbers are never shown"
    );
}

#[test]
fn red_text_escapes_pipes_and_line_breaks() {
    let r = red(
        bench("q4", "2026-11-29T11:00:00Z", &today(), &[1.0; 5]),
        "a | b\nc",
    );
    assert_eq!(render::red_text(&r), "red: a \\| b c");
}

/// A pairing receipt of `cell` whose assay arm ran with `flags`.
fn pair_with_flags(flags: &[&str]) -> Receipt {
    let mut r = bench("c4", "2026-11-29T11:00:00Z", &today(), &[1.0; 5]);
    r.kind = Kind::Pair;
    let mut theirs = r.arms[0].clone();
    theirs.name = "llama.cpp decode".into();
    theirs.engine = "llama-server".into();
    theirs.flags = llama_server_flags(crate::bench::llama_server::PAIR_TUNING);
    r.arms[0].engine = "assay-serve-cuda".into();
    r.arms[0].flags = flags.iter().map(|s| s.to_string()).collect();
    r.arms.push(theirs);
    r
}

/// A llama-server arm's recorded flags: the model, `server_args`'s base, then `extra`.
fn llama_server_flags(extra: &[&str]) -> Vec<String> {
    let o = crate::bench::llama_server::ServerOptions {
        extra: extra.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let mut f = vec!["-m".to_owned(), "m.gguf".to_owned()];
    f.extend(crate::bench::llama_server::server_args(&o, 8080));
    f
}

/// A serve cell against llama.cpp, 512 + 128, with `more` TOML lines.
fn serve_cell(more: &str) -> crate::bench::cells::Cell {
    toml::from_str(&format!(
        "id = \"c4\"\nlabel = \"c4\"\nvs = [\"llama.cpp\"]\ndevice = \"gpu\"\nmode = \"serve\"\n\
         prompt_tokens = 512\ngen_tokens = 128\n{more}\n"
    ))
    .unwrap()
}

/// The competitor's side: a llama-server arm counts only with llama-server's pairing
/// settings of today (`PAIR_TUNING`) after its base flags. The planted fault: an arm run
/// with a setting the board does not name (an A/B's `-b 2048`), or without one it names (a
/// receipt from before a setting joined PAIR_TUNING), makes the receipt stale.
#[test]
fn a_pairing_receipt_counts_only_with_llama_servers_settings_of_today() {
    use crate::bench::llama_server::{PAIR_TUNING, pair_tuning_of};
    let cell = serve_cell("");
    let ours = ["bin=/tmp/assay-bin/assay", "--backend", "cuda"];
    let mut r = pair_with_flags(&ours);
    let today: Vec<&str> = PAIR_TUNING.to_vec();
    r.arms[1].flags = llama_server_flags(&today);
    assert!(measured_as_defined(&cell, &r));
    let mut other = today.clone();
    other.extend(["-b", "2048"]);
    r.arms[1].flags = llama_server_flags(&other);
    assert!(!measured_as_defined(&cell, &r), "an unnamed setting: stale");
    // Before session 25 llama-server ran with its own defaults: those receipts are stale now.
    assert!(
        !today.is_empty(),
        "session 25's A/B settled llama-server's settings"
    );
    r.arms[1].flags = llama_server_flags(&[]);
    assert!(
        !measured_as_defined(&cell, &r),
        "a receipt without today's settings: stale"
    );
    // Flags without the base (not a pairing run's): stale, never guessed at.
    r.arms[1].flags = vec!["-ngl".into(), "999".into()];
    assert!(!measured_as_defined(&cell, &r));
    // `-t N` belongs to the base.
    let o = crate::bench::llama_server::ServerOptions {
        threads: Some(8),
        extra: vec!["-b".into(), "2048".into()],
        ..Default::default()
    };
    let f = crate::bench::llama_server::server_args(&o, 1);
    assert_eq!(pair_tuning_of(&f).unwrap(), ["-b", "2048"]);
    assert_eq!(pair_tuning_of(&["-ngl".to_owned()]), None);
}

#[test]
fn a_pairing_receipt_counts_only_with_the_server_flags_its_cell_names_today() {
    let cell = serve_cell(
        r#"synth = { arch = "llama", shape = "llama-3.1-8b", quant = "Q4_0", seed = 0 }
batch = 4
serve_flags = ["--batched-decode", "--mmv"]"#,
    );
    let base = [
        "bin=/tmp/assay-bin/assay",
        "--backend",
        "cuda",
        "--ctx",
        "656",
        "--prefix-cache-entries",
        "0",
        "--max-queue",
        "16",
    ];
    let with = |extra: &[&str]| {
        let mut f = base.to_vec();
        f.extend_from_slice(extra);
        pair_with_flags(&f)
    };
    assert!(measured_as_defined(
        &cell,
        &with(&["--batched-decode", "--mmv"])
    ));
    // Measured before the cell gained --mmv (session 19's c4 receipt): not this cell's.
    assert!(!measured_as_defined(&cell, &with(&["--batched-decode"])));
    assert!(!measured_as_defined(&cell, &with(&["--mmv"])));
    assert!(!measured_as_defined(
        &cell,
        &with(&["--batched-decode", "--mmv", "--x"])
    ));
    // A cell without serve flags and a receipt with some: stale too.
    let plain = crate::bench::cells::Cell {
        serve_flags: vec![],
        ..cell.clone()
    };
    assert!(measured_as_defined(&plain, &with(&[])));
    assert!(!measured_as_defined(&plain, &with(&["--batched-decode"])));
    // The harness's --max-batch-tokens (since session 19) is a recorded setting, not the
    // cell's definition: with or without it the receipt is the cell's.
    assert!(measured_as_defined(
        &cell,
        &with(&["--max-batch-tokens", "2048", "--batched-decode", "--mmv"])
    ));
    // A bench receipt of a serve cell is judged the same way; an arm of another engine
    // (a decode bench's assay-cuda) is not judged at all.
    let mut b = with(&["--batched-decode"]);
    b.kind = Kind::Bench;
    assert!(!measured_as_defined(&cell, &b));
    b.arms[0].engine = "assay-cuda".into();
    assert!(measured_as_defined(&cell, &b));
}

#[test]
fn done_cells_are_the_shown_ones_measured_as_defined() {
    let s = [700.0, 710.0, 705.0, 702.0, 708.0];
    let (_t, p) = with_receipts(&[
        bench("q4", "2026-11-29T10:00:00Z", &today(), &s),
        red(bench("q8", "2026-11-29T10:00:00Z", &today(), &s), "x"),
    ]);
    let b: crate::bench::cells::Board =
        toml::from_str(&std::fs::read_to_string(fixture().join("boards/demo.toml")).unwrap())
            .unwrap();
    let cells: Vec<&crate::bench::cells::Cell> = b.cells.iter().collect();
    let done = done_cells(&p.receipts, &today(), &cells).unwrap();
    assert_eq!(done.len(), 2, "a red result is a result: {done:?}");
    let other = SourceIdentity {
        kernel: "f".repeat(64),
        engine: "b".repeat(64),
    };
    assert!(done_cells(&p.receipts, &other, &cells).unwrap().is_empty());
}

/// A pairing receipt of the demo board's `q4` with our decode at `ours` and llama.cpp's at
/// `theirs` (tok/s, 5 equal samples).
fn pair_q4(ours: f64, theirs: f64) -> Receipt {
    let mut r = bench("q4", "2026-11-29T11:00:00Z", &today(), &[ours; 5]);
    r.kind = Kind::Pair;
    r.arms[0].name = "assay decode".into();
    let mut t = r.arms[0].clone();
    t.name = "llama.cpp decode".into();
    t.engine = "llama-server".into();
    t.flags = llama_server_flags(crate::bench::llama_server::PAIR_TUNING);
    t.samples = vec![theirs; 5];
    t.stats = Stats::of(&t.samples);
    t.roofline_fraction = r.roofline.as_ref().map(|x| theirs / x.limit_tokens_per_s);
    r.arms.push(t);
    r
}

#[test]
fn a_loss_without_a_cause_is_flagged_and_one_with_a_cause_shows_it() {
    // Planted: our decode at 0.90x of theirs, and no losses.toml in the fixture's boards.
    let (_t, p) = with_receipts(&[pair_q4(90.0, 100.0)]);
    let g = regenerate(&p, &today()).unwrap();
    assert_eq!(g.uncaused.len(), 1, "{:?}", g.uncaused);
    let (b, l) = &g.uncaused[0];
    assert_eq!(
        (b.as_str(), l.cell.as_str(), l.metric.as_str()),
        ("demo", "q4", "decode")
    );
    assert!((l.ratio - 0.9).abs() < 1e-12);
    assert!(
        g.readme
            .contains("- Q4_0: decode 0.90x vs llama.cpp: **no cause recorded**"),
        "{}",
        g.readme
    );

    // The same receipt with a cause for (q4, decode): nothing uncaused, the cause shown.
    let boards = tempfile::tempdir().unwrap();
    for f in ["demo.toml", "other.toml"] {
        std::fs::copy(p.boards.join(f), boards.path().join(f)).unwrap();
    }
    std::fs::write(
        boards.path().join(losses::FILE),
        "[[loss]]\ncells = [\"q4\"]\nmetrics = [\"decode\"]\ncause = \"the planted cause\"\nsee = \"notes/x.md\"\n",
    )
    .unwrap();
    let p2 = BoardPaths {
        boards: boards.path().to_owned(),
        ..p.clone()
    };
    let g = regenerate(&p2, &today()).unwrap();
    assert!(g.uncaused.is_empty(), "{:?}", g.uncaused);
    assert!(
        g.readme
            .contains("- Q4_0: decode 0.90x vs llama.cpp: the planted cause (notes/x.md)")
    );

    // Ahead, or 1.00x as shown (0.996): no loss, no list.
    for ours in [120.0, 99.6] {
        let (_t, p) = with_receipts(&[pair_q4(ours, 100.0)]);
        let g = regenerate(&p, &today()).unwrap();
        assert!(g.uncaused.is_empty());
        assert!(!g.readme.contains("Losses (ratio rows"));
    }
    assert!(losses::is_loss(0.9949) && !losses::is_loss(0.995));
}

#[test]
fn a_losses_file_is_checked_against_the_boards() {
    let boards = load_boards(&fixture().join("boards")).unwrap();
    let load = |text: &str| {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(losses::FILE), text).unwrap();
        losses::Causes::load(d.path(), &boards).map(|_| ())
    };
    let ok = "[[loss]]\ncells = [\"q4\"]\nmetrics = [\"decode\"]\ncause = \"c\"\n";
    assert!(load(ok).is_ok());
    let err = |text: &str| format!("{:#}", load(text).unwrap_err());
    assert!(err(&ok.replace("q4", "nope")).contains("cell nope is on no board"));
    assert!(err(&format!("{ok}{ok}")).contains("two causes"));
    assert!(
        err(&ok.replace("cause = \"c\"", "cause = \"  \""))
            .contains("needs cells, metrics and a cause")
    );
    assert!(err(&ok.replace("cause = \"c\"", "cause = \"a\\nb\"")).contains("one line"));
    assert!(err(&ok.replace("metrics", "metric")).contains("unknown field"));
    // No file: no causes, no error.
    let d = tempfile::tempdir().unwrap();
    assert!(losses::Causes::load(d.path(), &boards).is_ok());
}
