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
//!   (prefill). The competitor's arm is estimated at our rates, an upper bound where it is
//!   faster (llama.cpp decoded 323.7 vs our 264.7 tok/s on the same cell), except vLLM's
//!   waves of concurrent streams ([`their_wave_s`]): its batched step is a GEMM, 5-7x our
//!   rate at 64 streams (session 33), and charging it ours overestimated those cells ~3x.
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
/// vLLM's aggregate decode with concurrent streams, 8B (session 33's FP8 c64 pairs: 150.5 to
/// 185.2 tok/s per stream x 64). Scaled by parameters (its batched step is a GEMM).
pub const VLLM_AGGREGATE_TOK_S: f64 = 9600.0;
/// vLLM's prompt pass, 8B (the anchor: BF16 ~18.5k tok/s end to end on a 512-token
/// prompt). Scaled by parameters.
pub const VLLM_PREFILL_TOK_S: f64 = 18500.0;

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

/// `harness synth` on the Llama-3.1-8B shape, by format, 16-core machine: Q4_0 ~48 s,
/// Q8_0 20.7 s (research/notes/final-s4/synth.log); BF16 written twice (GGUF and
/// safetensors) 336 s and Q4_K_M 519 s for Qwen3-8B's 8.19 B parameters (session 36's window,
/// research/notes/s36/device/psynth.log; the 120 s assumed before was 4x low, and is what
/// made session 36's plan put Gemma-3-12B's Q4_K_M in the window). Other K mixes assumed
/// like Q4_K_M.
pub fn synth_8b_s(quant: &str) -> f64 {
    match quant.to_ascii_uppercase().as_str() {
        "Q4_0" => 48.0,
        "Q8_0" => 21.0,
        "BF16" => 330.0,
        q if q.ends_with("_M") => 510.0,
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

/// One wave of the competitor's arm: vLLM's own rates for concurrent streams (scaled by
/// `prefill_scale`, the reference's parameters over the checkpoint's), else `ours`.
pub fn their_wave_s(
    vs: Competitor,
    c: usize,
    p: usize,
    g: usize,
    prefill_scale: f64,
    ours: f64,
) -> f64 {
    if vs != Competitor::Vllm || c <= 1 {
        return ours;
    }
    let (c, p, g) = (c as f64, p as f64, g as f64);
    c * p / (VLLM_PREFILL_TOK_S * prefill_scale) + c * g / (VLLM_AGGREGATE_TOK_S * prefill_scale)
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
    // The batched tensor-core step (`--batched-decode --mmv`) is bound by instruction issue,
    // not by the weight bytes: its rate follows the parameters (session 33: the 8B Q8_0 c64
    // step ran at 1715 tok/s, not at half the Q4_0 anchor as bytes would say).
    let flag = |f: &str| cell.serve_flags.iter().any(|x| x == f);
    let decode_scale = if cell.batch > 1 && flag("--batched-decode") && flag("--mmv") {
        refs.params / ours.params
    } else {
        refs.token_bytes / ours.token_bytes
    };
    let wave = wave_s(
        cell.batch,
        cell.prompt_tokens,
        cell.gen_tokens,
        decode_scale,
        refs.params / ours.params,
        aggregate_tok_s(&cell.serve_flags),
    );
    let theirs = their_wave_s(
        vs,
        cell.batch,
        cell.prompt_tokens,
        cell.gen_tokens,
        refs.params / ours.params,
        wave,
    );
    let timed_s = waves * (wave + theirs) + AGREE_S + ours.file_bytes / 1e9 / HASH_GB_S;
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
#[path = "plan_tests.rs"]
mod tests;
