//! `harness pair --vs llama.cpp --cells FILE` (issue 12): our server and a competitor's,
//! both OpenAI-compatible, on the same model file, timed one at a time through the same
//! streaming client ([`serve_load`]), alternating A B A B over N >= 5 reps after a
//! discarded warm-up wave each.
//!
//! Per cell (a board file's `[[cell]]`: model or synthetic checkpoint, prompt and generated
//! lengths, `batch` = concurrency): start `assay serve` and the competitor's server, check
//! that both give the same first [`AGREE_TOKENS`] greedy tokens for the cell's first prompt
//! (recorded either way, with the first position where they part; a parting is accepted
//! only where it is a near-tie in both arms' own distributions, the picks compared by token
//! id, [`agree`]), then time waves of `batch` streamed greedy completions (`ignore_eos`, fixed
//! `max_tokens`): time to first token, per-stream decode tok/s from the stream's token
//! arrival times, and end-to-end tok/s
//! (tokens over the request's whole time). One receipt (`kind = pair`) per cell with
//! every raw sample of both arms, their versions and flags.
//!
//! Servers are shared across cells ([`group`]): consecutive cells whose needs one start of
//! both servers covers (same model file and flags, a context and slot count that fit, one
//! concurrency class) run on one pair of servers started with the group's largest limits;
//! each receipt records the flags actually used and names the cell the servers were
//! started for. A failed cell or a dead server restarts them for the next cell; servers
//! that cannot start fail the rest of their group. Where the next group needs a
//! competitor's server the running one covers (the board's speculative cells after the
//! one-stream group of their model and format), only ours restarts ([`carry`]).
//! `--no-reuse`: one start of both per cell.
//!
//! Competitors: `llama.cpp` (llama-server from competitors/llama.cpp/build, its best flags
//! in [`llama_server::server_args`]), timed through its native `/completion` stream
//! ([`Protocol::LlamaNative`]: its OpenAI stream sends no event for a token that ends
//! inside a UTF-8 sequence, so it cannot be counted token by token); `vllm` (its
//! OpenAI-compatible server from competitors/vllm on the BF16 safetensors copy of the
//! synthetic checkpoint, [`vllm`]; first run on the H200 in session 7, first receipts in
//! session 19); `transformers` (competitors/transformers/server.py: transformers'
//! `generate` with a static cache on the same safetensors, behind the OpenAI completions
//! protocol on token ids, one request at a time: the numerical reference arm of the
//! board's `-hf` cells; `--transformers-fake` runs its toy model, for the wiring without a
//! GPU; not yet run on the GPU machine).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use gates::Verdict;
use gates::model_facts::model_facts;
use gates::receipt::{Arm, Kind, Receipt, Stats};

use crate::bench::cells::{Board, Cell, DeviceKind, Mode};
use crate::bench::model_path;
use crate::bench::serve_load::{self, StreamTiming, Target};

mod agree;
pub mod carry;
pub mod group;
pub mod plan;
mod requests;
mod servers;
pub mod shard;
mod vllm;
use crate::env::{EnvArgs, under};
use requests::{first_tokens_llama, first_tokens_ours, piece, top_llama, top_openai};
use servers::{Servers, TheirServer};

/// Greedy tokens both arms must agree on before a cell is timed.
pub const AGREE_TOKENS: usize = 16;

/// The engine paired against ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Competitor {
    #[value(name = "llama.cpp")]
    LlamaCpp,
    Vllm,
    Transformers,
}

impl Competitor {
    pub fn name(self) -> &'static str {
        match self {
            Competitor::LlamaCpp => "llama.cpp",
            Competitor::Vllm => "vllm",
            Competitor::Transformers => "transformers",
        }
    }
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("planning").args(["plan", "budget_s"]).multiple(true)))]
pub struct PairArgs {
    /// The competitor.
    #[arg(long)]
    pub vs: Competitor,
    /// The cells: a board file (`[[cell]]` tables as in boards/*.toml).
    #[arg(long)]
    pub cells: PathBuf,
    /// Only these cells (comma-separated ids).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Timed reps per arm (at least 5; default: the cell's).
    #[arg(long)]
    pub runs: Option<usize>,
    /// Receipt file to append to (relative to the root).
    #[arg(long, default_value = "research/pair.jsonl")]
    pub receipts: PathBuf,
    /// Write no receipt.
    #[arg(long)]
    pub no_receipt: bool,
    /// Folder of the llama.cpp builds (default: ~/.cache/assay/llama.cpp).
    #[arg(long, env = "ASSAY_LLAMA_CPP_HOME")]
    pub llama_cpp_home: Option<PathBuf>,
    /// The folder vLLM is unpacked into (competitors/vllm/install).
    #[arg(long, env = "ASSAY_VLLM_SITE", default_value = "/tmp/vllm-site")]
    pub vllm_site: PathBuf,
    /// The Python that runs vLLM and the transformers arm (the GPU image's, which holds
    /// torch and transformers).
    #[arg(long, env = "ASSAY_VLLM_PYTHON", default_value = "python3")]
    pub vllm_python: String,
    /// The transformers arm's toy model (competitors/transformers/server.py `--fake`, no
    /// torch): for checking the wiring on a machine without a GPU; its receipts say
    /// `fake-0`.
    #[arg(long)]
    pub transformers_fake: bool,
    /// The `assay` binary (default: `assay` next to this harness).
    #[arg(long, env = "ASSAY_BIN")]
    pub assay_bin: Option<PathBuf>,
    /// Longest wait for a server to become ready, and for one request, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_s: u64,
    /// Print the cells that apply to the competitor with an estimated device time each
    /// (`pair::plan`) and the total; run nothing (no GPU needed).
    #[arg(long)]
    pub plan: bool,
    /// Take, in file order, the cells that fit this many seconds of device time (setup
    /// included); with `--plan`, only show the selection.
    #[arg(long)]
    pub budget_s: Option<f64>,
    /// With `--plan` / `--budget-s`: keep the cells that already have a current receipt
    /// (what an engine change would make stale: the whole re-pairing's device time).
    #[arg(long, requires = "planning")]
    pub include_current: bool,
    /// Start both servers for every cell (default: consecutive cells whose servers one
    /// start covers share it, `pair::group`).
    #[arg(long)]
    pub no_reuse: bool,
    /// One more argument for llama-server after its standard flags (repeatable, in order;
    /// e.g. `--llama-server-arg=--ctx-checkpoints --llama-server-arg=0`): an A/B of the
    /// competitor's own settings. Recorded in its arm's flags; without it the standard flags
    /// only (competitors/llama.cpp/README.md).
    #[arg(long = "llama-server-arg", allow_hyphen_values = true)]
    pub llama_server_args: Vec<String>,
    /// Run only shard I of N (`I/N`): the server groups dealt to it, longest first to the
    /// least loaded shard (`pair::shard`); for N processes side by side on a machine of N
    /// GPUs, each with `CUDA_VISIBLE_DEVICES=I` and its own `--receipts` file. Checkpoints
    /// must exist beforehand (a missing one fails its cell: shards never make them). With
    /// `--plan`, prints every shard's share.
    #[arg(long)]
    pub shard: Option<shard::Shard>,
}

/// Where two token lists first differ (None when equal).
pub fn first_divergence(a: &[u32], b: &[u32]) -> Option<usize> {
    let n = a.len().min(b.len());
    (0..n)
        .find(|&i| a[i] != b[i])
        .or((a.len() != b.len()).then_some(n))
}

/// One arm's samples.
#[derive(Default)]
struct Samples {
    ttft_ms: Vec<f64>,
    stream_tok_s: Vec<f64>,
    e2e_tok_s: Vec<f64>,
    /// Prompt tokens over the time to first token.
    prefill_tok_s: Vec<f64>,
}

impl Samples {
    fn add(&mut self, timings: &[StreamTiming], prompt_tokens: usize) {
        for x in timings {
            self.ttft_ms.push(x.ttft_s * 1000.0);
            if x.ttft_s > 0.0 {
                self.prefill_tok_s.push(prompt_tokens as f64 / x.ttft_s);
            }
            if let Some(r) = x.decode_tok_s() {
                self.stream_tok_s.push(r);
            }
            if x.total_s > 0.0 {
                self.e2e_tok_s.push(x.tokens as f64 / x.total_s);
            }
        }
    }
}

fn load_cells(path: &Path) -> Result<Board> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let b: Board = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    b.check(path)?;
    Ok(b)
}

/// The cells without a current receipt (`done`: cell id -> its receipt's time).
fn pending<'a>(
    cells: Vec<&'a Cell>,
    done: &std::collections::BTreeMap<String, String>,
) -> Vec<&'a Cell> {
    cells
        .into_iter()
        .filter(|c| !done.contains_key(&c.id))
        .collect()
}

/// Whether `cell` is paired against `vs` (a cell naming no competitor applies to any).
pub fn applies(cell: &Cell, vs: Competitor) -> bool {
    cell.vs.is_empty() || cell.vs.iter().any(|v| v == vs.name())
}

/// The arms run different weight formats (vLLM quantizing the BF16 copy itself): their
/// tokens may part without either being wrong, so the agreement is recorded, not required.
fn formats_differ(cell: &Cell, vs: Competitor) -> bool {
    vs == Competitor::Vllm && cell.vllm_quantization.is_some()
}

/// Pair one cell on running servers `s` (started for this cell, or reused from the earlier
/// cells `s.origins` names); this cell's prompts start at id `base` (0 on servers started
/// for it; [`group::prompt_span`]).
fn pair_cell(
    env: &EnvArgs,
    args: &PairArgs,
    stamp: &gates::stamp::Stamp,
    board: &str,
    cell: &Cell,
    s: &Servers,
    base: usize,
) -> Result<Receipt> {
    let t0 = Instant::now();
    if let Some(why) = plan::blocked(cell) {
        bail!("{why}");
    }
    let timeout = Duration::from_secs(args.timeout_s);
    let runs = args.runs.unwrap_or(cell.runs).max(5);
    let (name, path) = model_path(env, cell)?;
    let model = engine::model_file::GgufModel::open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let facts = model_facts(&name, &path, &model).context("hashing the model")?;
    // vLLM runs without a tokenizer (`--skip-tokenizer-init`): its top tokens come back as
    // ids and are named here by the pieces our server gives them.
    let tok = engine::tokenizer::Tokenizer::from_gguf(model.header())
        .with_context(|| format!("{}: the tokenizer", path.display()))?;
    drop(model);
    let (ours, theirs, bin, backend) = (&s.ours, &s.theirs, &s.bin, s.backend);
    let their_target = Target {
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, theirs.port())),
        model: "bench".into(),
        api_key: None,
        protocol: s.protocol,
    };
    let our_target = ours.target();

    // Agreement on the first greedy tokens of the first prompt.
    let prompt = serve_load::prompt_ids(base, cell.prompt_tokens);
    let a = first_tokens_ours(&our_target, &prompt, AGREE_TOKENS, timeout)
        .context("assay: the agreement request")?;
    let b = match &theirs {
        TheirServer::Llama(l) => first_tokens_llama(l.port, &prompt, AGREE_TOKENS, timeout),
        TheirServer::Vllm(_) | TheirServer::Transformers(_) => {
            first_tokens_ours(&their_target, &prompt, AGREE_TOKENS, timeout)
        }
    }
    .with_context(|| format!("{}: the agreement request", args.vs.name()))?;
    let divergence = first_divergence(&a, &b);
    let differ = formats_differ(cell, args.vs);
    let mut detail = vec![match divergence {
        None => format!("agreement: the first {AGREE_TOKENS} greedy tokens are identical ({a:?})"),
        Some(i) => format!(
            "agreement: the arms part at generated token {i} (assay {a:?}, {} {b:?}); timed anyway{}",
            args.vs.name(),
            if differ {
                " (different weight formats: recorded, not required)"
            } else {
                ""
            }
        ),
    }];
    // A divergence is a near-tie or a real disagreement (`agree`): each arm's top next
    // tokens over the shared prefix, the two streamed picks looked up by id.
    let tie = match divergence {
        Some(i) if !differ => {
            let mut prefix = prompt.clone();
            prefix.extend_from_slice(&a[..i.min(a.len())]);
            let picks = match (a.get(i), b.get(i)) {
                (Some(&x), Some(&y)) => Ok((x, y)),
                _ => Err(agree::Tie::Real(format!(
                    "an arm stopped at generated token {i} (assay {} tokens, {} {})",
                    a.len(),
                    args.vs.name(),
                    b.len()
                ))),
            };
            let tie = match picks {
                Err(t) => t,
                Ok((x, y)) => {
                    let name = |id| agree::Pick {
                        id,
                        piece: piece(&tok, id).unwrap_or_default(),
                    };
                    let tops = top_openai(&our_target, &prefix, &tok, timeout)
                        .context("assay")
                        .and_then(|o| {
                            let t = match &theirs {
                                TheirServer::Llama(l) => top_llama(l.port, &prefix, timeout),
                                TheirServer::Vllm(_) | TheirServer::Transformers(_) => {
                                    top_openai(&their_target, &prefix, &tok, timeout)
                                }
                            }
                            .context(args.vs.name())?;
                            Ok((o, t))
                        });
                    match tops {
                        Ok((o, t)) => agree::judge(
                            &o,
                            &t,
                            &name(x),
                            &name(y),
                            args.vs.name(),
                            agree::NEAR_TIE,
                        ),
                        Err(e) => agree::Tie::Real(format!("top tokens unavailable: {e:#}")),
                    }
                }
            };
            detail.push(match &tie {
                agree::Tie::Near {
                    ours,
                    theirs,
                    note,
                } => format!(
                    "agreement: token {i} is a near-tie: assay ranks the two picks (id {} {:?}, {} id {} {:?}) within {ours:.4} nats of its best, {} within {theirs:.4} (<= {} each: green){}",
                    a[i],
                    piece(&tok, a[i]).unwrap_or_default(),
                    args.vs.name(),
                    b[i],
                    piece(&tok, b[i]).unwrap_or_default(),
                    args.vs.name(),
                    agree::NEAR_TIE,
                    if note.is_empty() {
                        String::new()
                    } else {
                        format!("; {note}")
                    }
                ),
                agree::Tie::Real(why) => {
                    format!("agreement: token {i} is not a near-tie: {why}")
                }
                agree::Tie::Undecided(why) => format!(
                    "agreement: token {i} cannot be judged (not counted as agreement): {why}"
                ),
            });
            Some(tie)
        }
        _ => None,
    };
    if let (true, Some(q), Some(s)) = (differ, &cell.vllm_quantization, &cell.synth) {
        detail.push(format!(
            "formats: assay runs {} (GGUF), vllm runs --quantization {q} on the BF16 safetensors copy of the same weights",
            s.quant
        ));
    }

    // Warm-up, then A B A B.
    let mut next = base + 1;
    for (label, t) in [("assay", &our_target), (args.vs.name(), &their_target)] {
        serve_load::wave(
            t,
            cell.batch,
            next,
            cell.prompt_tokens,
            cell.gen_tokens,
            timeout,
        )
        .with_context(|| format!("{label}: the warm-up wave"))?;
        next += cell.batch;
    }
    let (mut sa, mut sb) = (Samples::default(), Samples::default());
    for rep in 0..runs {
        // Both arms get the same prompts in each rep.
        let (ta, _) = serve_load::wave(
            &our_target,
            cell.batch,
            next,
            cell.prompt_tokens,
            cell.gen_tokens,
            timeout,
        )
        .with_context(|| format!("assay: rep {rep}"))?;
        sa.add(&ta, cell.prompt_tokens);
        let (tb, _) = serve_load::wave(
            &their_target,
            cell.batch,
            next,
            cell.prompt_tokens,
            cell.gen_tokens,
            timeout,
        )
        .with_context(|| format!("{}: rep {rep}", args.vs.name()))?;
        sb.add(&tb, cell.prompt_tokens);
        next += cell.batch;
    }
    // A speculative cell records our server's acceptance (its /metrics).
    let spec_line = match &cell.spec {
        Some(_) => Some(
            serve_load::get_metrics(our_target.addr, timeout)
                .map(|m| {
                    serve_load::spec_summary(&m).unwrap_or_else(|| {
                        "spec: assay /metrics counted no verification round".into()
                    })
                })
                .unwrap_or_else(|e| format!("spec: assay /metrics unreadable: {e:#}")),
        ),
        None => None,
    };
    let verdict = match (&tie, divergence.is_none() || differ) {
        (_, true) | (Some(agree::Tie::Near { .. }), _) => Verdict::Green,
        (Some(agree::Tie::Undecided(_)), _) => Verdict::Red {
            failures: vec![
                "the arms part on the first greedy tokens and their top tokens cannot tell a near-tie from a disagreement".into(),
            ],
        },
        _ => Verdict::Red {
            failures: vec!["the arms disagree on the first greedy tokens (not a near-tie)".into()],
        },
    };
    let mut r = stamp.receipt(Kind::Pair, &cell.id, verdict);
    r.model = Some(facts);
    r.workload = crate::bench::serve_workload(board, cell, None);
    let mut our_flags = vec![format!("bin={}", bin.display())];
    our_flags.extend(ours.flags.iter().cloned());
    let arms = [
        (
            "assay",
            format!("assay-serve-{backend}"),
            env!("CARGO_PKG_VERSION").to_string(),
            our_flags,
            sa,
        ),
        (
            args.vs.name(),
            s.their_engine.to_string(),
            s.their_version.clone(),
            theirs.flags(),
            sb,
        ),
    ];
    for (label, engine, version, flags, s) in arms {
        let mut metrics = vec![
            ("decode", "tok/s/stream", s.stream_tok_s),
            ("TTFT", "ms", s.ttft_ms),
            ("end-to-end", "tok/s", s.e2e_tok_s),
        ];
        // Prefill cells: prompt tok/s from the time to first token (the same samples as
        // TTFT, as a rate).
        if cell.mode == Mode::Prefill {
            metrics.push(("prefill", "tok/s", s.prefill_tok_s));
        }
        for (what, unit, samples) in metrics {
            r.arms.push(Arm {
                name: format!("{label} {what}"),
                engine: engine.clone(),
                version: version.clone(),
                flags: flags.clone(),
                unit: Some(unit.into()),
                stats: Stats::of(&samples),
                samples,
                roofline_fraction: None,
            });
        }
    }
    detail.push(format!(
        "{runs} reps per arm, alternating assay / {} (A B A B), each a wave of {} streamed greedy completions ({} prompt ids + {} tokens, ignore_eos) after one warm-up wave per arm",
        args.vs.name(),
        cell.batch,
        cell.prompt_tokens,
        cell.gen_tokens
    ));
    detail.push(format!(
        "servers ready after {:.1} s (assay) and {:.1} s ({})",
        ours.ready_s,
        theirs.ready_s(),
        args.vs.name()
    ));
    detail.extend(s.origins.note(&cell.id, args.vs.name(), base));
    detail.push(format!(
        "server logs: {} (assay), {} ({})",
        ours.log.display(),
        theirs.log().display(),
        args.vs.name()
    ));
    detail.extend(spec_line);
    r.detail.extend(detail);
    let wall = t0.elapsed().as_secs_f64() + s.origins.charged_s(&cell.id);
    r.wall_s = (wall * 1000.0).round() / 1000.0;
    Ok(r)
}

/// Run `harness pair`: true when every selected cell was paired.
pub fn run(env: &EnvArgs, args: &PairArgs) -> Result<bool> {
    let root = env.root()?;
    let board = load_cells(&under(&root, &args.cells))?;
    let mut cells: Vec<&Cell> = board
        .cells
        .iter()
        .filter(|c| applies(c, args.vs))
        .filter(|c| args.only.is_empty() || args.only.contains(&c.id))
        .collect();
    if cells.is_empty() {
        bail!(
            "{}: no cell applies to {} (see the cells' `vs`{})",
            args.cells.display(),
            args.vs.name(),
            if args.only.is_empty() {
                ""
            } else {
                " and --only"
            }
        );
    }
    if (args.plan || args.budget_s.is_some()) && !args.include_current {
        // A cell that already has a current receipt measured as the cell is defined today
        // (what `harness board` shows: green, or red when newer) is done: the plan and the
        // budget leave it out, so the next window's `--budget-s` takes the next slice.
        let today = gates::identity::SourceIdentity::of_tree(&root)
            .context("computing today's source identities")?;
        let done = crate::board::done_cells(&root.join("research"), &today, &cells)?;
        let before = cells.len();
        cells = pending(cells, &done);
        if cells.len() < before {
            println!(
                "{} cell(s) already have a current receipt: left out",
                before - cells.len()
            );
        }
    }
    if args.plan || args.budget_s.is_some() {
        let p = plan::plan(&cells, args.vs, args.budget_s, !args.no_reuse)?;
        print!("{}", plan::render(&p, args.vs, args.budget_s));
        if args.plan {
            if let Some(sh) = args.shard {
                let sel: Vec<&Cell> = cells
                    .iter()
                    .copied()
                    .filter(|c| p.selected.iter().any(|e| e.id == c.id))
                    .collect();
                print!("{}", shard_plan(&sel, args.vs, !args.no_reuse, sh.count)?);
            }
            return Ok(true);
        }
    }
    let chosen: Option<Vec<String>> = match args.budget_s {
        Some(b) => Some(plan::plan(&cells, args.vs, Some(b), !args.no_reuse)?.selected_ids()),
        None => None,
    };
    let stamp = env.measurement_stamp(&root)?;
    let receipts = under(&root, &args.receipts);
    let receipts = (!args.no_receipt).then_some(receipts.as_path());
    let mut runnable: Vec<&Cell> = Vec::new();
    for cell in cells {
        if chosen.as_ref().is_some_and(|ids| !ids.contains(&cell.id)) {
            continue;
        }
        if let Some(why) = plan::blocked(cell) {
            println!("{:<36} skipped: {why}", cell.id);
            continue;
        }
        if cell.device == DeviceKind::Gpu && stamp.device.gpu().is_none() {
            println!(
                "{:<36} skipped: no GPU (nvidia-smi reports no device)",
                cell.id
            );
            continue;
        }
        runnable.push(cell);
    }
    let span = |c: &Cell| group::prompt_span(c.batch, args.runs.unwrap_or(c.runs).max(5));
    let mut tally = crate::bench::Tally::default();
    let all_groups = group::groups(&runnable, args.vs, !args.no_reuse);
    let dealt = match args.shard {
        Some(sh) => Some((
            sh,
            deal_groups(&runnable, &all_groups, args.vs, !args.no_reuse, sh.count)?,
        )),
        None => None,
    };
    // The groups this process runs, in order (with `--shard`, those dealt to it).
    let mine: Vec<group::Group> = all_groups
        .into_iter()
        .enumerate()
        .filter(|(gi, _)| dealt.as_ref().is_none_or(|(sh, d)| d[*gi] == sh.index))
        .map(|(_, g)| g)
        .collect();
    // Servers kept up after a group: the competitor's carried to the next ([`carry`]), from
    // this prompt id.
    let mut held: Option<(Servers, usize)> = None;
    for (gk, g) in mine.iter().enumerate() {
        if let Some((sh, _)) = &dealt {
            // Shards never make checkpoints (two processes would write one file).
            let dir = env.models_dir()?;
            let missing: Vec<(String, Vec<String>)> = g
                .cells
                .iter()
                .map(|&i| runnable[i])
                .map(|c| (c.id.clone(), shard::missing_checkpoints(c, args.vs, &dir)))
                .filter(|(_, m)| !m.is_empty())
                .collect();
            if !missing.is_empty() {
                if let Some((mut s, _)) = held.take() {
                    s.stop();
                }
                for &i in &g.cells {
                    let cell = runnable[i];
                    let why = anyhow::anyhow!(
                        "shard {sh}: checkpoints missing for this group of servers ({}); a sharded run never makes them: run `harness synth` first",
                        missing
                            .iter()
                            .map(|(id, m)| format!("{id}: {}", m.join(", ")))
                            .collect::<Vec<_>>()
                            .join("; ")
                    );
                    tally.record(&cell.id, Err(why), true, receipts)?;
                }
                continue;
            }
        }
        if g.cells.len() > 1 {
            let ids: Vec<&str> = g.cells.iter().map(|&i| runnable[i].id.as_str()).collect();
            println!("servers shared by {} cells: {}", ids.len(), ids.join(", "));
        }
        let (mut servers, mut life) = match held.take() {
            Some((s, base)) => {
                let life = group::Lifecycle::carried(&s.origins.theirs_for, base);
                (Some(s), life)
            }
            None => (None, group::Lifecycle::default()),
        };
        for (k, &i) in g.cells.iter().enumerate() {
            let cell = runnable[i];
            let outcome = match life.before() {
                group::Step::Fail(why) => Err(anyhow::anyhow!(
                    "the servers of this group did not start: {why}"
                )),
                group::Step::Start => match Servers::start(env, args, cell, g) {
                    Ok(s) => {
                        life.started(&cell.id, Ok(()));
                        let r = pair_cell(env, args, &stamp, &board.name, cell, &s, 0);
                        servers = Some(s);
                        r
                    }
                    Err(e) => {
                        life.started(
                            &cell.id,
                            Err(format!("(starting them for {}) {e:#}", cell.id)),
                        );
                        Err(e)
                    }
                },
                group::Step::Carry {
                    their_started_for,
                    base,
                } => match servers.as_mut() {
                    Some(s) => match s.restart_ours(env, args, cell, g) {
                        Ok(()) => {
                            life.started(&cell.id, Ok(()));
                            pair_cell(env, args, &stamp, &board.name, cell, s, base)
                        }
                        Err(e) => {
                            life.started(
                                &cell.id,
                                Err(format!(
                                    "(starting ours for {}, the {} server of {their_started_for} carried) {e:#}",
                                    cell.id,
                                    args.vs.name()
                                )),
                            );
                            Err(e)
                        }
                    },
                    None => Err(anyhow::anyhow!("no servers carried (internal)")),
                },
                group::Step::Reuse { base, .. } => match &servers {
                    Some(s) => pair_cell(env, args, &stamp, &board.name, cell, s, base),
                    None => Err(anyhow::anyhow!("no servers running (internal)")),
                },
            };
            let alive = servers.as_ref().is_some_and(Servers::alive);
            let next_span = g.cells.get(k + 1).map(|&j| span(runnable[j]));
            life.after(outcome.is_ok(), alive, span(cell), next_span);
            if !life.is_up()
                && let Some(mut s) = servers.take()
            {
                s.stop();
                if k + 1 < g.cells.len() {
                    println!(
                        "    stopped the servers (cell failed: {}, servers answer: {alive}); the next cell starts them again",
                        outcome.is_err()
                    );
                }
            }
            tally.record(&cell.id, outcome, true, receipts)?;
        }
        // The next group may take the competitor's server (`carry`); else stop both.
        let next = mine.get(gk + 1).filter(|_| !args.no_reuse);
        match (servers.take(), life.next_base(), next) {
            (Some(s), Some(base), Some(n))
                if carry::carries(&s.origins.theirs, n, base, span(runnable[n.cells[0]])) =>
            {
                println!(
                    "    the {} server of {} carried to {}; ours stops",
                    args.vs.name(),
                    s.origins.theirs_for,
                    runnable[n.cells[0]].id
                );
                held = Some((s, base));
            }
            (Some(mut s), _, _) => s.stop(),
            (None, _, _) => {}
        }
    }
    if let Some((mut s, _)) = held.take() {
        s.stop();
    }
    Ok(tally.finish(receipts, "paired"))
}

/// The shard of each server group of `cells` (as [`group::groups`] makes them), dealt by
/// the groups' estimated start + timed seconds ([`plan::plan`]; checkpoints are made before
/// a sharded run, so their time is not dealt).
fn deal_groups(
    cells: &[&Cell],
    groups: &[group::Group],
    vs: Competitor,
    reuse: bool,
    n: usize,
) -> Result<Vec<usize>> {
    let p = plan::plan(cells, vs, None, reuse)?;
    let costs: Vec<f64> = groups
        .iter()
        .map(|g| {
            g.cells
                .iter()
                .map(|&i| p.cells[i].start_s + p.cells[i].timed_s)
                .sum()
        })
        .collect();
    Ok(shard::deal(&costs, n))
}

/// `--plan --shard I/N`: each shard's cells and estimated seconds.
fn shard_plan(cells: &[&Cell], vs: Competitor, reuse: bool, n: usize) -> Result<String> {
    use std::fmt::Write;
    let groups = group::groups(cells, vs, reuse);
    let d = deal_groups(cells, &groups, vs, reuse, n)?;
    let p = plan::plan(cells, vs, None, reuse)?;
    let mut out = String::new();
    for s in 0..n {
        let ids: Vec<usize> = groups
            .iter()
            .zip(&d)
            .filter(|(_, sh)| **sh == s)
            .flat_map(|(g, _)| g.cells.iter().copied())
            .collect();
        let secs: f64 = ids
            .iter()
            .map(|&i| p.cells[i].start_s + p.cells[i].timed_s)
            .sum();
        let names: Vec<&str> = ids.iter().map(|&i| cells[i].id.as_str()).collect();
        let _ = writeln!(
            out,
            "shard {s}/{n}: {} cell(s), ~{secs:.0} s (setup and checkpoints not included): {}",
            ids.len(),
            names.join(",")
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
