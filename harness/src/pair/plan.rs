//! `harness pair --plan` (issue 12): how much device time the cells of a board take against
//! one competitor, before any GPU call, and `--budget-s N`: which cells, taken in file
//! order, fit a session's slice.
//!
//! The model is deliberately simple; every constant comes from a receipt or log of session
//! 4 (H200, 8B Q4_0 anchors) or is marked *assumed* where nothing was timed yet:
//!
//! - **setup**, once per window: a cold machine start ([`COLD_START_S`]), the first NVRTC
//!   compile of the kernels ([`NVRTC_FIRST_S`]), and the competitor's own: building
//!   llama.cpp there ([`LLAMA_BUILD_S`]) or carrying vLLM's parts and unpacking them
//!   ([`VLLM_INSTALL_S`]).
//! - **synth**, the first time a cell needs a checkpoint: [`synth_8b_s`] scaled by the
//!   shape's parameter count (a vLLM FP8 cell also needs the BF16 copy).
//! - **per arm**: the server start ([`ASSAY_START_S`], [`LLAMA_START_S`],
//!   [`VLLM_START_S`]) plus `warmup + runs` waves. A wave of `c` streams of `p` prompt +
//!   `g` generated tokens takes `p / PREFILL + g / DECODE` at `c = 1` and
//!   `c*p / PREFILL_BATCHED + c*g / AGGREGATE` above, where the rates are our 8B Q4_0
//!   serve receipts' scaled by the checkpoint's bytes per token (decode) or parameters
//!   (prefill). The competitor's arm is estimated at our rates: an upper bound where it is
//!   faster (llama.cpp decoded 323.7 vs our 264.7 tok/s on the same cell).
//! - **per cell**: hashing the GGUF for the receipt ([`HASH_GB_S`]) and the agreement
//!   request.
//!
//! Anchors (unit-tested): the 8B Q4_0 512 + 128 c=1 cell comes to ~15 s with both arms and
//! their starts (session 8's final window: the d512 and p2k pairs together took ~29 s of
//! wall time, research/notes/final-s8/timing.log); the c=64 128 + 64 arm to ~220 s
//! (serve-llama8b-q4_0-c64: 198.6 s wall).

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use engine::quant::QuantFormat;

use crate::bench::cells::{Cell, SynthRef};
use crate::synth::shapes::{self, Arch};
use crate::synth::tensors::{Mix, Role, inventory};

use super::Competitor;
use super::group::{Group, TheirSpec, their_spec};

/// A device call's hard limit is 600 s; a cell estimated above this needs a background run
/// polled over several calls.
pub const CALL_LIMIT_S: f64 = 570.0;
/// A cold machine start (session-4 brief: 60-90 s; ~30 s in sessions 7 and 8's windows).
pub const COLD_START_S: f64 = 30.0;
/// NVRTC compiling matvec.cu and the rest on a fresh machine (~55 s, session-3 notes).
pub const NVRTC_FIRST_S: f64 = 55.0;
/// Building llama-server there (competitors/llama.cpp/README.md: ~6 min on 16 cores).
pub const LLAMA_BUILD_S: f64 = 360.0;
/// Carrying vLLM's 3 parts one per call and unpacking them (session 7: ~61 s of held time,
/// the third call 40 s with the unpack).
pub const VLLM_INSTALL_S: f64 = 75.0;
/// Starting `assay serve` on an 8B checkpoint with cached cubins (session 7 pairs: 3.5 s Q4_0,
/// 10.3 s BF16; session 8: 3.8 s Q4_0; the rest of the margin covers the model hash).
pub const ASSAY_START_S: f64 = 10.0;
/// Starting llama-server (session 7 pairs: ready in 2.1 s, session 8: 1.9 s).
pub const LLAMA_START_S: f64 = 5.0;
/// Starting vLLM's server: torch.compile and CUDA graph capture (session 7, BF16 8B, cold
/// compile cache: ready in 80.9 s).
pub const VLLM_START_S: f64 = 90.0;
/// The transformers arm's start (assumed, not yet measured on the H200): loading the BF16
/// safetensors and one warm-up `generate` with a static cache.
pub const TRANSFORMERS_START_S: f64 = 60.0;
/// Per-stream decode at one stream, 8B Q4_0 (session 8's pair h200-llama8b-q4_0-d512: 333.0
/// tok/s/stream; serve-llama8b-q4_0-c1 at session 4: 239.7).
pub const DECODE_TOK_S: f64 = 330.0;
/// Aggregate decode with concurrent streams, 8B Q4_0, `assay serve`'s default (session 14,
/// board serve-h200 at 112c4d7: c4 318.6, c16 315.6, c64 298.0 tok/s; session 4's c64 was
/// 131.4).
pub const AGGREGATE_TOK_S: f64 = 298.0;
/// Aggregate decode with `--batched-decode` (session 15, serve-h200 at 4edf334: c16 555.5,
/// c64 514.7 tok/s).
pub const AGGREGATE_BATCHED_TOK_S: f64 = 510.0;
/// Aggregate decode with `--batched-decode --mmv` (session 15's second window, logs: c16
/// 1251.9, c64 1159.5 tok/s).
pub const AGGREGATE_MMV_TOK_S: f64 = 1150.0;

/// The aggregate decode rate of concurrent streams served with `flags`.
pub fn aggregate_tok_s(flags: &[String]) -> f64 {
    let has = |f: &str| flags.iter().any(|x| x == f);
    match (has("--batched-decode"), has("--mmv")) {
        (true, true) => AGGREGATE_MMV_TOK_S,
        (true, false) => AGGREGATE_BATCHED_TOK_S,
        _ => AGGREGATE_TOK_S,
    }
}
/// Prefill at one stream, 8B (session 14's pair h200-llama8b-q4_0-p2k at 112c4d7: 17240
/// tok/s on 2048 tokens through the server, the warpgroup-MMA prompt pass; session 8: 2860).
pub const PREFILL_TOK_S: f64 = 17000.0;
/// Prefill of concurrent streams (their prompts share the scheduler's steps with decoding
/// streams; assumed: half the one-stream rate, not measured).
pub const PREFILL_BATCHED_TOK_S: f64 = 8500.0;
/// sha256 of the GGUF for the receipt's model facts (assumed 1 GB/s).
pub const HASH_GB_S: f64 = 1.0;
/// The agreement request (16 greedy tokens per arm) and bookkeeping per cell.
pub const AGREE_S: f64 = 3.0;

/// `harness synth` on the Llama-3.1-8B shape, by format, idle 16-core machine: Q4_0 ~48 s,
/// Q8_0 20.7 s (research/notes/final-s4/synth.log); BF16 (a cast, written twice: GGUF and
/// safetensors) and the K-quant mixes were not timed (assumed).
pub fn synth_8b_s(quant: &str) -> f64 {
    match quant.to_ascii_uppercase().as_str() {
        "Q4_0" => 48.0,
        "Q8_0" => 21.0,
        "BF16" => 45.0,
        q if q.ends_with("_M") => 120.0,
        _ => 60.0,
    }
}

/// The sizes the estimate scales with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sizes {
    /// The whole checkpoint.
    pub file_bytes: f64,
    /// Weights read per decoded token (all but the token embedding, unless tied).
    pub token_bytes: f64,
    pub params: f64,
}

/// The sizes of a synthetic checkpoint, from the same tensor inventory `harness synth`
/// writes.
pub fn sizes(s: &SynthRef) -> Result<Sizes> {
    let arch = <Arch as clap::ValueEnum>::from_str(&s.arch, true).map_err(anyhow::Error::msg)?;
    let shape = shapes::find(&s.shape, arch).map_err(anyhow::Error::msg)?;
    let mix = Mix::parse(&s.quant).with_context(|| format!("unknown quant {:?}", s.quant))?;
    let vocab = shape.vocab.unwrap_or(32_000);
    let (mut file, mut token, mut params) = (0f64, 0f64, 0f64);
    for t in inventory(arch, &shape, vocab) {
        let f = mix.format_for(&t, shape.n_layers);
        let b = f
            .bytes_for(t.elems())
            .or_else(|_| QuantFormat::F32.bytes_for(t.elems()))? as f64;
        file += b;
        params += t.elems() as f64;
        if t.role != Role::Embd || shape.tied {
            token += b;
        }
    }
    Ok(Sizes {
        file_bytes: file,
        token_bytes: token,
        params,
    })
}

/// The reference checkpoint the rates were measured on.
fn reference() -> Result<Sizes> {
    sizes(&SynthRef {
        arch: "llama".into(),
        shape: "llama-3.1-8b".into(),
        quant: "Q4_0".into(),
        seed: 0,
    })
}

/// Seconds of one wave of `c` streams, `p` prompt + `g` generated tokens, at `scale`
/// (decode: reference bytes per token / this one's; prefill: reference parameters / this
/// one's), concurrent streams decoding at `aggregate` tok/s ([`aggregate_tok_s`] of the
/// cell's server flags).
pub fn wave_s(
    c: usize,
    p: usize,
    g: usize,
    decode_scale: f64,
    prefill_scale: f64,
    aggregate: f64,
) -> f64 {
    let (c, p, g) = (c as f64, p as f64, g as f64);
    if c <= 1.0 {
        p / (PREFILL_TOK_S * prefill_scale) + g / (DECODE_TOK_S * decode_scale)
    } else {
        c * p / (PREFILL_BATCHED_TOK_S * prefill_scale) + c * g / (aggregate * decode_scale)
    }
}

/// The estimate of one cell.
#[derive(Clone, Debug, PartialEq)]
pub struct CellEstimate {
    pub id: String,
    /// Checkpoints made for this cell (first use in the plan).
    pub synth_s: f64,
    /// Both servers' starts.
    pub start_s: f64,
    /// Warm-up and timed waves of both arms, the agreement request, the model hash.
    pub timed_s: f64,
    /// Why the cell cannot run now (not counted in totals).
    pub blocked: Option<String>,
    /// The cell whose servers this one reuses (its start counted there, 0 here;
    /// [`super::group`]).
    pub reuses: Option<String>,
    /// The cell of an earlier group whose competitor server this one's group is carried
    /// on ([`super::carry`]): its start here is ours only.
    pub carries: Option<String>,
}

impl CellEstimate {
    pub fn total_s(&self) -> f64 {
        self.synth_s + self.start_s + self.timed_s
    }
}

/// Why `cell` cannot be paired now, if so: a speculative cell whose proposer or depth
/// `assay serve --spec` does not take (`ngram` or `draft:...`, K in 1..=8).
pub fn blocked(cell: &Cell) -> Option<String> {
    let s = cell.spec.as_ref()?;
    let max = engine::scheduler::spec::MAX_SERVE_K;
    if s.proposer != "ngram" && !s.proposer.starts_with("draft:") {
        return Some(format!(
            "blocked: proposer {:?} is not one `assay serve --spec` takes (ngram, draft:MODEL)",
            s.proposer
        ));
    }
    if !(1..=max).contains(&s.k) {
        return Some(format!(
            "blocked: `assay serve` drafts 1..={max} tokens per round, the cell asks K={}",
            s.k
        ));
    }
    None
}

/// The synthetic draft checkpoint of a `draft:synth:<QUANT>` cell.
pub fn draft_synth(cell: &Cell) -> Option<SynthRef> {
    let quant = cell.spec.as_ref()?.proposer.strip_prefix("draft:synth:")?;
    cell.synth.as_ref().map(|s| SynthRef {
        quant: quant.to_owned(),
        ..s.clone()
    })
}

/// The checkpoints a cell needs (ours, our draft's, and the BF16 copy vLLM quantizes
/// itself).
fn checkpoints(cell: &Cell, vs: Competitor) -> Vec<SynthRef> {
    let Some(s) = &cell.synth else {
        return Vec::new();
    };
    let mut out = vec![s.clone()];
    out.extend(draft_synth(cell));
    if vs == Competitor::Vllm && !s.quant.eq_ignore_ascii_case("BF16") {
        out.push(SynthRef {
            quant: "BF16".into(),
            ..s.clone()
        });
    }
    out
}

/// Estimate `cell` against `vs`; `made` holds the checkpoints earlier cells already made
/// (updated when this cell makes one).
pub fn estimate(cell: &Cell, vs: Competitor, made: &mut BTreeSet<String>) -> Result<CellEstimate> {
    let refs = reference()?;
    let ours = match &cell.synth {
        Some(s) => sizes(s).with_context(|| format!("cell {}", cell.id))?,
        // A catalog model: no shape known here; sized as the 8B Q4_0 reference.
        None => refs,
    };
    // A blocked cell makes nothing: its synth is shown, charged to no one.
    let why = blocked(cell);
    let mut scratch = made.clone();
    let made = if why.is_some() { &mut scratch } else { made };
    let mut synth_s = 0.0;
    for s in checkpoints(cell, vs) {
        if made.insert(s.file_name()) {
            let sz = sizes(&s)?;
            synth_s += synth_8b_s(&s.quant) * sz.params / refs.params;
        }
    }
    let their_start = their_start_s(vs);
    // Our server loads its draft too.
    let draft_bytes = match draft_synth(cell) {
        Some(d) => sizes(&d)?.file_bytes,
        None => 0.0,
    };
    let start_s = ASSAY_START_S * (ours.file_bytes + draft_bytes) / refs.file_bytes + their_start;
    let waves = (cell.warmup + cell.runs.max(5)) as f64;
    let wave = wave_s(
        cell.batch,
        cell.prompt_tokens,
        cell.gen_tokens,
        refs.token_bytes / ours.token_bytes,
        refs.params / ours.params,
        aggregate_tok_s(&cell.serve_flags),
    );
    let timed_s = 2.0 * waves * wave + AGREE_S + ours.file_bytes / 1e9 / HASH_GB_S;
    Ok(CellEstimate {
        id: cell.id.clone(),
        synth_s,
        start_s,
        timed_s,
        blocked: why,
        reuses: None,
        carries: None,
    })
}

/// The competitor's server start.
pub fn their_start_s(vs: Competitor) -> f64 {
    match vs {
        Competitor::LlamaCpp => LLAMA_START_S,
        Competitor::Vllm => VLLM_START_S,
        Competitor::Transformers => TRANSFORMERS_START_S,
    }
}

/// One-off seconds of a window against `vs`: cold start, NVRTC, the competitor's setup.
pub fn setup_s(vs: Competitor) -> f64 {
    COLD_START_S
        + NVRTC_FIRST_S
        + match vs {
            Competitor::LlamaCpp => LLAMA_BUILD_S,
            Competitor::Vllm => VLLM_INSTALL_S,
            Competitor::Transformers => 0.0,
        }
}

/// A plan: every applicable cell's estimate, and the ones a budget selects.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub setup_s: f64,
    pub cells: Vec<CellEstimate>,
    /// The selected cells (all runnable ones without a budget), in file order, with the
    /// synth cost charged as the selection runs them.
    pub selected: Vec<CellEstimate>,
}

impl Plan {
    /// Setup plus every runnable cell.
    pub fn total_s(&self) -> f64 {
        self.setup_s
            + self
                .cells
                .iter()
                .filter(|c| c.blocked.is_none())
                .map(CellEstimate::total_s)
                .sum::<f64>()
    }

    /// Setup plus the selected cells.
    pub fn selected_s(&self) -> f64 {
        self.setup_s + self.selected.iter().map(CellEstimate::total_s).sum::<f64>()
    }

    /// The selected cells' ids.
    pub fn selected_ids(&self) -> Vec<String> {
        self.selected.iter().map(|e| e.id.clone()).collect()
    }
}

/// The servers running after the cells charged so far.
#[derive(Clone)]
struct Running {
    /// Our server's group and the id of the cell that started it.
    group: Group,
    first: String,
    /// The competitor's server as started, and the cell it was started for (`first`, or a
    /// cell of an earlier group where it was carried).
    theirs: TheirSpec,
    theirs_for: String,
}

/// Charge `cell` (index `i`) its start only where it begins a new group of servers
/// (`reuse`: [`super::group`]), and only our start where the competitor's server running
/// covers its needs (`carry`: [`super::carry`]; the run also asks that the whole group be
/// covered: where a later cell of a carried group outgrows the carried server, the run
/// starts both at the group's first cell, and the plan charges that start to the later
/// cell: the same total); returns the servers running after it.
fn charge_start(
    running: &Option<Running>,
    i: usize,
    cell: &Cell,
    vs: Competitor,
    (reuse, carry): (bool, bool),
    e: &mut CellEstimate,
) -> Option<Running> {
    if e.blocked.is_some() {
        return running.clone();
    }
    if reuse && let Some(r) = running {
        if let Some(j) = r.group.joined(cell, vs) {
            let mut g = r.group.clone();
            g.push(i, j);
            e.start_s = 0.0;
            e.reuses = Some(r.first.clone());
            let carried = r.theirs_for != r.first;
            if carried && r.theirs.covers(&g.theirs) {
                return Some(Running {
                    group: g,
                    ..r.clone()
                });
            }
            if carried {
                e.start_s = their_start_s(vs);
            }
            return Some(Running {
                theirs: g.theirs.clone(),
                theirs_for: r.first.clone(),
                group: g,
                first: r.first.clone(),
            });
        }
        if carry && r.theirs.covers(&their_spec(cell, vs)) {
            e.start_s -= their_start_s(vs);
            e.carries = Some(r.theirs_for.clone());
            return Some(Running {
                group: Group::of(i, cell, vs),
                first: cell.id.clone(),
                ..r.clone()
            });
        }
    }
    let g = Group::of(i, cell, vs);
    Some(Running {
        theirs: g.theirs.clone(),
        theirs_for: cell.id.clone(),
        group: g,
        first: cell.id.clone(),
    })
}

/// Plan `cells` (already filtered to `vs`) in file order. With a budget, take each
/// runnable cell that still fits after setup and the cells taken before it (a cell that
/// does not fit is passed over, a later smaller one may still be taken); the synth cost of
/// a checkpoint is charged to the first selected cell that needs it, and (`reuse`) the
/// servers' start to the first selected cell of each group of cells sharing them (a cell
/// that joins the servers of the cell selected before it starts nothing, and the first
/// cell of a group that takes the competitor's server of the group before starts ours
/// only: [`super::carry`], estimated without sharding and as if every cell passed).
pub fn plan(cells: &[&Cell], vs: Competitor, budget_s: Option<f64>, reuse: bool) -> Result<Plan> {
    plan_with(cells, vs, budget_s, reuse, reuse)
}

/// [`plan`], carrying the competitor's server across groups only where `carry` (and
/// `reuse`) says so.
pub fn plan_with(
    cells: &[&Cell],
    vs: Competitor,
    budget_s: Option<f64>,
    reuse: bool,
    carry: bool,
) -> Result<Plan> {
    let setup = setup_s(vs);
    // The full list: synth and starts charged in file order.
    let mut made = BTreeSet::new();
    let mut running: Option<Running> = None;
    let mut all = Vec::new();
    for (i, c) in cells.iter().enumerate() {
        let mut e = estimate(c, vs, &mut made)?;
        running = charge_start(&running, i, c, vs, (reuse, carry), &mut e);
        all.push(e);
    }
    let mut selected = Vec::new();
    match budget_s {
        None => selected.extend(all.iter().filter(|e| e.blocked.is_none()).cloned()),
        Some(b) => {
            let mut made = BTreeSet::new();
            let mut running: Option<Running> = None;
            let mut used = setup;
            for (i, c) in cells.iter().enumerate() {
                let mut trial = made.clone();
                let mut e = estimate(c, vs, &mut trial)?;
                let after = charge_start(&running, i, c, vs, (reuse, carry), &mut e);
                if e.blocked.is_none() && used + e.total_s() <= b {
                    used += e.total_s();
                    made = trial;
                    running = after;
                    selected.push(e);
                }
            }
        }
    }
    Ok(Plan {
        setup_s: setup,
        cells: all,
        selected,
    })
}

/// The plan as printed.
pub fn render(p: &Plan, vs: Competitor, budget_s: Option<f64>) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<36} {:>7} {:>7} {:>7} {:>7}  note",
        "cell", "synth", "start", "timed", "total"
    );
    let _ = writeln!(
        s,
        "{:<36} {:>7} {:>7} {:>7} {:>7.0}  cold start, NVRTC, {} setup (once per window)",
        "(setup)",
        "",
        "",
        "",
        p.setup_s,
        vs.name()
    );
    let ids = p.selected_ids();
    for e in &p.cells {
        let mut note = Vec::new();
        if let Some(b) = &e.blocked {
            note.push(b.clone());
        } else {
            if budget_s.is_some() {
                note.push(if ids.contains(&e.id) {
                    "selected".to_owned()
                } else {
                    "not in this budget".to_owned()
                });
            }
            if let Some(first) = &e.reuses {
                note.push(format!("start 0: reuses the servers of {first}"));
            }
            if let Some(first) = &e.carries {
                note.push(format!(
                    "start: ours only, the {} server of {first} carried",
                    vs.name()
                ));
            }
            if e.total_s() > CALL_LIMIT_S {
                note.push("over one 600 s call: run it in the background, polled".into());
            }
        }
        let _ = writeln!(
            s,
            "{:<36} {:>7.0} {:>7.0} {:>7.0} {:>7.0}  {}",
            e.id,
            e.synth_s,
            e.start_s,
            e.timed_s,
            e.total_s(),
            note.join("; ")
        );
    }
    let runnable = p.cells.iter().filter(|c| c.blocked.is_none()).count();
    let _ = writeln!(
        s,
        "total vs {}: {} cell(s), {} runnable, {} blocked; estimated device time {:.0} s ({:.1} h) with setup",
        vs.name(),
        p.cells.len(),
        runnable,
        p.cells.len() - runnable,
        p.total_s(),
        p.total_s() / 3600.0
    );
    if let Some(b) = budget_s {
        let _ = writeln!(
            s,
            "budget {b:.0} s: {} cell(s) selected, estimated {:.0} s with setup: --only {}",
            p.selected.len(),
            p.selected_s(),
            ids.join(",")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
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
        assert!((fp8.synth_s - 66.0).abs() < 0.5, "{fp8:?}");
        assert!(fp8.start_s > d.start_s);
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
}
