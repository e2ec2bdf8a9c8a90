#![allow(clippy::unwrap_used)]
//! Tests of `harness pair --plan`'s estimates (plan.rs).

use super::*;
use crate::bench::cells::{DeviceKind, Mode, SpecCell};

fn cell(id: &str, shape: (&str, &str), quant: &str, p: usize, g: usize, c: usize) -> Cell {
    Cell {
        id: id.into(),
        label: id.into(),
        device: DeviceKind::Gpu,
        mode: Mode::Serve,
        model: None,
        synth: Some(SynthRef {
            arch: shape.0.into(),
            shape: shape.1.into(),
            quant: quant.into(),
            seed: 0,
        }),
        prompt_tokens: p,
        gen_tokens: g,
        batch: c,
        runs: 5,
        warmup: 1,
        arms: vec!["assay".into()],
        prompt_file: None,
        spec: None,
        json_schema: None,
        serve_flags: Vec::new(),
        vs: vec!["llama.cpp".into()],
        vllm_quantization: None,
        mmv: None,
    }
}

const L8: (&str, &str) = ("llama", "llama-3.1-8b");

#[test]
fn sizes_follow_the_synth_inventory() {
    let q4 = reference().unwrap();
    // 8.03 B params, 4.658 GB written (research/notes/final-s4/synth.log).
    assert!((q4.params / 1e9 - 8.03).abs() < 0.01, "{q4:?}");
    assert!((q4.file_bytes / 1e9 - 4.658).abs() < 0.02, "{q4:?}");
    assert!(q4.token_bytes < q4.file_bytes);
    let q8 = sizes(&SynthRef {
        quant: "Q8_0".into(),
        arch: "llama".into(),
        shape: "llama-3.1-8b".into(),
        seed: 0,
    })
    .unwrap();
    assert!((q8.file_bytes / 1e9 - 8.538).abs() < 0.02, "{q8:?}");
    assert!(
        sizes(&SynthRef {
            quant: "Q9_9".into(),
            arch: "llama".into(),
            shape: "llama-3.1-8b".into(),
            seed: 0,
        })
        .is_err()
    );
}

#[test]
fn the_estimate_meets_the_session_anchors() {
    let mut made = BTreeSet::new();
    // The decode cell: ~15 s for both arms and their starts (session 8), synth 48 s on
    // first use.
    let d = estimate(
        &cell("d", L8, "Q4_0", 512, 128, 1),
        Competitor::LlamaCpp,
        &mut made,
    )
    .unwrap();
    assert!((d.synth_s - 48.0).abs() < 0.5, "{d:?}");
    let both = d.start_s + d.timed_s;
    assert!((8.0..30.0).contains(&both), "{d:?}");
    // Its checkpoint is made: the next cell on it pays no synth.
    let c64 = estimate(
        &cell("c", L8, "Q4_0", 128, 64, 64),
        Competitor::LlamaCpp,
        &mut made,
    )
    .unwrap();
    assert_eq!(c64.synth_s, 0.0);
    // One arm of the c=64 128 + 64 serve cell: 90.3 s wall measured (session 14,
    // serve-llama8b-q4_0-c64 at 112c4d7; session 4: 198.6 s).
    let arm = ASSAY_START_S + 6.0 * wave_s(64, 128, 64, 1.0, 1.0, AGGREGATE_TOK_S);
    assert!((70.0..130.0).contains(&arm), "{arm}");
    // Bigger checkpoints decode slower: a Q8_0 wave is longer than a Q4_0 one.
    let q8 = estimate(
        &cell("q8", L8, "Q8_0", 512, 128, 1),
        Competitor::LlamaCpp,
        &mut made,
    )
    .unwrap();
    assert!(q8.timed_s > d.timed_s);
    assert!((q8.synth_s - 21.0).abs() < 0.5);
    // vLLM: its start is longer, and an FP8 cell also makes the BF16 copy.
    let mut made = BTreeSet::new();
    let fp8 = estimate(
        &cell("f", L8, "Q8_0", 512, 128, 1),
        Competitor::Vllm,
        &mut made,
    )
    .unwrap();
    assert!((fp8.synth_s - 351.0).abs() < 0.5, "{fp8:?}");
    assert!(fp8.start_s > d.start_s);
}

#[test]
fn vllm_c64_cells_meet_the_session_33_anchor() {
    // h200-llama8b-fp8-c64 (Q8_0 against vLLM's FP8, 512 + 128, 64 streams, the
    // tensor-core batched flags): 154.7 s of wall time with both starts (92.6 s vLLM,
    // 5.7 s ours), so ~56 s of waves; the model before session 33 said 214 s.
    let mut c = cell("c64", L8, "Q8_0", 512, 128, 64);
    c.serve_flags = vec!["--batched-decode".into(), "--mmv".into()];
    let e = estimate(&c, Competitor::Vllm, &mut BTreeSet::new()).unwrap();
    assert!((40.0..120.0).contains(&e.timed_s), "{e:?}");
    // vLLM's own rate applies to its arm only for concurrent streams and only for vLLM:
    // against llama.cpp both arms are still charged ours (an upper bound).
    let ll = estimate(&c, Competitor::LlamaCpp, &mut BTreeSet::new()).unwrap();
    assert!(ll.timed_s > e.timed_s, "{ll:?} vs {e:?}");
    assert_eq!(their_wave_s(Competitor::Vllm, 1, 512, 128, 1.0, 7.0), 7.0);
    assert_eq!(
        their_wave_s(Competitor::LlamaCpp, 64, 512, 128, 1.0, 7.0),
        7.0
    );
    assert!(their_wave_s(Competitor::Vllm, 64, 512, 128, 1.0, 7.0) < 7.0);
}

fn spec(proposer: &str, k: usize) -> Option<SpecCell> {
    Some(SpecCell {
        proposer: proposer.into(),
        k,
        adaptive: true,
        policy: true,
    })
}

#[test]
fn spec_cells_are_counted_with_their_draft_and_bad_ones_blocked() {
    let mut s = cell("s", L8, "Q4_0", 512, 128, 1);
    s.spec = spec("ngram", 8);
    let d = cell("d", L8, "Q4_0", 512, 128, 1);
    let p = plan(&[&s, &d], Competitor::LlamaCpp, None, false).unwrap();
    assert!(p.cells[0].blocked.is_none());
    assert_eq!(p.selected_ids(), vec!["s".to_owned(), "d".to_owned()]);
    // The n-gram cell pays the synth, `d` reuses it.
    assert!(p.cells[0].synth_s > 40.0 && p.cells[1].synth_s == 0.0);
    // A Q4_0 draft for a Q8_0 cell: its checkpoint is made (once) and loaded.
    let mut q8 = cell("q8", L8, "Q8_0", 512, 128, 1);
    let plain_q8 = plan(&[&q8], Competitor::LlamaCpp, None, false).unwrap();
    q8.spec = spec("draft:synth:Q4_0", 4);
    let p = plan(&[&q8], Competitor::LlamaCpp, None, false).unwrap();
    assert!(
        p.cells[0].synth_s > plain_q8.cells[0].synth_s + 40.0,
        "{p:?}"
    );
    assert!(p.cells[0].start_s > plain_q8.cells[0].start_s);
    let p = plan(&[&d, &q8], Competitor::LlamaCpp, None, false).unwrap();
    assert!(
        (p.cells[1].synth_s - plain_q8.cells[0].synth_s).abs() < 1e-9,
        "the Q4_0 draft was made by `d`"
    );
    // What `assay serve --spec` cannot run stays blocked and out of the totals.
    let mut bad = cell("bad", L8, "Q4_0", 512, 128, 1);
    bad.spec = spec("mtp", 4);
    let mut deep = cell("deep", L8, "Q4_0", 512, 128, 1);
    deep.spec = spec("ngram", 16);
    let p = plan(&[&bad, &deep, &d], Competitor::LlamaCpp, None, false).unwrap();
    assert!(
        p.cells[0]
            .blocked
            .as_deref()
            .is_some_and(|b| b.contains("mtp"))
    );
    assert!(
        p.cells[1]
            .blocked
            .as_deref()
            .is_some_and(|b| b.contains("K=16"))
    );
    let only_d = plan(&[&d], Competitor::LlamaCpp, None, false).unwrap();
    assert!((p.total_s() - only_d.total_s()).abs() < 1e-9);
    let text = render(&p, Competitor::LlamaCpp, None);
    assert!(text.contains("1 runnable, 2 blocked"), "{text}");
}

#[test]
fn the_server_flags_pick_the_aggregate_rate() {
    let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(aggregate_tok_s(&[]), AGGREGATE_TOK_S);
    assert_eq!(
        aggregate_tok_s(&f(&["--batched-decode"])),
        AGGREGATE_BATCHED_TOK_S
    );
    assert_eq!(
        aggregate_tok_s(&f(&["--batched-decode", "--mmv"])),
        AGGREGATE_MMV_TOK_S
    );
    // --mmv alone serves one sequence at a time: the default's rate.
    assert_eq!(aggregate_tok_s(&f(&["--mmv"])), AGGREGATE_TOK_S);
    // A c64 cell with the tensor-core batched flags is estimated faster.
    let mut c = cell("x", L8, "Q4_0", 512, 128, 64);
    let slow = estimate(&c, Competitor::LlamaCpp, &mut BTreeSet::new()).unwrap();
    c.serve_flags = f(&["--batched-decode", "--mmv"]);
    let fast = estimate(&c, Competitor::LlamaCpp, &mut BTreeSet::new()).unwrap();
    assert!(fast.timed_s < slow.timed_s / 2.0, "{fast:?} vs {slow:?}");
}

#[test]
fn a_budget_takes_cells_in_file_order_while_they_fit() {
    let a = cell("a", L8, "Q4_0", 512, 128, 1);
    let b = cell("b", L8, "Q4_0", 512, 128, 64); // large
    let c = cell("c", L8, "Q4_0", 4096, 128, 1);
    let cells = [&a, &b, &c];
    let full = plan(&cells, Competitor::LlamaCpp, None, false).unwrap();
    assert_eq!(full.selected.len(), 3);
    let est: Vec<f64> = full.cells.iter().map(CellEstimate::total_s).collect();
    assert!(est[1] > est[0] + est[2], "{est:?}");
    // Room for a and c but not b: b is passed over, c still taken, and c pays no
    // synth (a made the checkpoint).
    let budget = full.setup_s + est[0] + est[2] + 1.0;
    let p = plan(&cells, Competitor::LlamaCpp, Some(budget), false).unwrap();
    assert_eq!(p.selected_ids(), vec!["a".to_owned(), "c".to_owned()]);
    assert!(p.selected_s() <= budget);
    // Only the setup fits: nothing selected.
    let p = plan(
        &cells,
        Competitor::LlamaCpp,
        Some(full.setup_s + 1.0),
        false,
    )
    .unwrap();
    assert!(p.selected.is_empty());
    // Everything fits: all three, the same total as without a budget.
    let p = plan(&cells, Competitor::LlamaCpp, Some(1e9), false).unwrap();
    assert_eq!(p.selected.len(), 3);
    assert!((p.selected_s() - full.total_s()).abs() < 1e-6);
    let text = render(&p, Competitor::LlamaCpp, Some(1e9));
    assert!(text.contains("--only a,b,c"), "{text}");
}

#[test]
fn synth_is_charged_to_the_first_selected_user() {
    // With a budget that skips `a`, `c` (same checkpoint) pays the synth itself.
    let a = cell("a", L8, "Q4_0", 512, 128, 64);
    let c = cell("c", L8, "Q4_0", 512, 128, 1);
    let full = plan(&[&a, &c], Competitor::LlamaCpp, None, false).unwrap();
    assert_eq!(full.cells[1].synth_s, 0.0);
    let c_alone = plan(&[&c], Competitor::LlamaCpp, None, false).unwrap();
    let budget = c_alone.total_s() + 0.5;
    let p = plan(&[&a, &c], Competitor::LlamaCpp, Some(budget), false).unwrap();
    assert_eq!(p.selected_ids(), vec!["c".to_owned()]);
    assert!(c_alone.cells[0].synth_s > 40.0);
    assert_eq!(p.selected[0].synth_s, c_alone.cells[0].synth_s);
    assert!((p.selected_s() - c_alone.total_s()).abs() < 1e-6);
    assert!(p.selected_s() <= budget);
}
