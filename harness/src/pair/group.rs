//! Server reuse across cells (`harness pair`, issue 12): which servers a cell needs, when a
//! server started for one cell may serve a later one, and how consecutive cells are grouped
//! into runs that share one start of both servers. Pure: no process is started here.
//!
//! A cell's servers are described by [`our_spec`] (`assay serve`: model, backend, the
//! speculative proposer, the cell's `serve_flags`, and two limits, context and queue) and
//! [`their_spec`] (the competitor: model file or vLLM folder, vLLM's `--quantization`, and
//! two limits, context per sequence and concurrent sequences).
//!
//! **Covering** ([`OurSpec::covers`], [`TheirSpec::covers`]), decided conservatively:
//!
//! - Ours: the same model, backend, `--spec` and `serve_flags` (never a server of other
//!   flags, e.g. `--batched-decode --mmv` for a `--batched-decode` cell), `--ctx` at least
//!   the cell's prompt + generated + 16 (the KV cache is paged: a longer limit allocates
//!   nothing more) and `--max-queue` at least the cell's.
//! - llama-server: the same GGUF and device, **exactly** the cell's `-np` (llama-server
//!   splits `-c` across `-np` slots and its KV layout and batch scheduling follow the slot
//!   count, so a 64-slot server is not what a 4-stream cell measures), and a context per
//!   slot (`-c / -np`) at least the cell's. In practice only cells of one concurrency
//!   share: on boards/h200.toml the four one-stream cells (d512, d4k, p2k, e2e) of a
//!   model and format, at the largest context of the four.
//! - vLLM: the same BF16 folder and `--quantization`, `--max-model-len` at least the
//!   cell's, and `--max-num-seqs` 1 for a one-stream cell (never a batching server for a
//!   batch-1 cell), else at least the cell's concurrency (its KV pool is fixed by
//!   `--gpu-memory-utilization`, and it captures a CUDA graph per batch size up to
//!   `--max-num-seqs`: a wave of 16 runs the same graph size under 16 or 64).
//!
//! **Grouping** ([`groups`]): consecutive cells, in the order they run (file order after
//! `--only` and `--budget-s`), join the current group while the union of the group's
//! limits (largest context, most slots) still covers each of them; the group's servers
//! start once with that union. Our server is never shared between cells whose non-limit
//! flags differ, and a concurrency-1 cell never joins a group of concurrency-N cells or the
//! other way round. `--no-reuse` makes every cell its own group (one start per cell).
//!
//! **Prompts**: every request of a cell uses prompt ids `base..` ([`prompt_span`]): the
//! first cell of a server uses `base = 0` (as before), each later cell on the same server
//! starts after the ids every earlier cell used, so that no timed prompt shares a prefix
//! with a prompt the server saw before (vLLM caches prefixes by default; llama-server is
//! asked `cache_prompt: false`; our prefix cache is off).
//!
//! **Carrying the competitor** ([`super::carry`]): where the next group this process runs
//! needs a competitor's server that the running one covers, only our server is stopped and
//! started again; the competitor's keeps running and its prompt ids keep counting up.
//!
//! **Failures** ([`Lifecycle`]): a cell that fails, or servers found dead after a cell, are
//! stopped and started again for the group's next cell; servers that fail to start fail
//! every remaining cell of their group with that error.

use crate::bench::cells::{Cell, DeviceKind, SpecCell, SynthRef};

use super::Competitor;

/// Which weights a server loads: a synthetic checkpoint's file name, or a catalog model.
fn model_key(cell: &Cell) -> String {
    match (&cell.synth, &cell.model) {
        (Some(s), _) => format!("synth:{}:{}", s.arch, s.file_name()),
        (None, Some(m)) => format!("catalog:{m}"),
        (None, None) => format!("cell:{}", cell.id),
    }
}

/// Context a cell needs per sequence (the same margin as [`crate::bench::serve_load::serve_flags`]).
pub fn ctx_need(cell: &Cell) -> usize {
    cell.prompt_tokens + cell.gen_tokens + 16
}

/// Our server for a cell (or a group: the limits are the union).
#[derive(Clone, Debug, PartialEq)]
pub struct OurSpec {
    pub model: String,
    pub device: DeviceKind,
    pub spec: Option<SpecCell>,
    pub mmv: Option<bool>,
    /// The cell's own `serve_flags`, in order.
    pub serve_flags: Vec<String>,
    /// Limit: `--ctx`.
    pub ctx: usize,
    /// Limit: the streams the `--max-queue` is sized for.
    pub concurrency: usize,
}

/// `assay serve` as `cell` needs it.
pub fn our_spec(cell: &Cell) -> OurSpec {
    OurSpec {
        model: model_key(cell),
        device: cell.device,
        spec: cell.spec.clone(),
        mmv: cell.mmv,
        serve_flags: cell.serve_flags.clone(),
        ctx: ctx_need(cell),
        concurrency: cell.batch.max(1),
    }
}

impl OurSpec {
    /// Everything but the limits is the same.
    fn same_flags(&self, o: &OurSpec) -> bool {
        self.model == o.model
            && self.device == o.device
            && self.spec == o.spec
            && self.mmv == o.mmv
            && self.serve_flags == o.serve_flags
    }

    /// Whether a server started for `self` serves a cell that needs `need`.
    pub fn covers(&self, need: &OurSpec) -> bool {
        self.same_flags(need) && self.ctx >= need.ctx && self.concurrency >= need.concurrency
    }

    /// The limits of both.
    fn union(&self, o: &OurSpec) -> OurSpec {
        OurSpec {
            ctx: self.ctx.max(o.ctx),
            concurrency: self.concurrency.max(o.concurrency),
            ..self.clone()
        }
    }

    /// The `--ctx` and `--max-queue` values (what `serve_load::serve_flags` gives a cell of
    /// this context and concurrency).
    pub fn limits(&self) -> (usize, usize) {
        (self.ctx, (self.concurrency * 2).max(16))
    }
}

/// The competitor's server for a cell (or a group).
#[derive(Clone, Debug, PartialEq)]
pub struct TheirSpec {
    pub vs: Competitor,
    /// llama.cpp: the cell's GGUF; vLLM: its BF16 copy (the safetensors folder).
    pub model: String,
    pub device: DeviceKind,
    /// vLLM's `--quantization`.
    pub quantization: Option<String>,
    /// Limit: context per sequence (llama-server: per slot, `-c` = this x `-np`; vLLM:
    /// `--max-model-len`).
    pub ctx: usize,
    /// Limit: `-np` / `--max-num-seqs`.
    pub slots: usize,
}

/// The competitor's server as `cell` needs it.
pub fn their_spec(cell: &Cell, vs: Competitor) -> TheirSpec {
    let model = match (vs, &cell.synth) {
        // vLLM loads the BF16 safetensors copy (and quantizes it itself when asked).
        (Competitor::Vllm, Some(s)) => model_key(&Cell {
            synth: Some(SynthRef {
                quant: "BF16".into(),
                ..s.clone()
            }),
            ..cell.clone()
        }),
        _ => model_key(cell),
    };
    TheirSpec {
        vs,
        model,
        device: cell.device,
        quantization: match vs {
            Competitor::Vllm => cell.vllm_quantization.clone(),
            _ => None,
        },
        ctx: ctx_need(cell),
        slots: cell.batch.max(1),
    }
}

impl TheirSpec {
    fn same_flags(&self, o: &TheirSpec) -> bool {
        self.vs == o.vs
            && self.model == o.model
            && self.device == o.device
            && self.quantization == o.quantization
    }

    /// Whether a server started for `self` serves a cell that needs `need` (module doc).
    pub fn covers(&self, need: &TheirSpec) -> bool {
        let slots = match self.vs {
            Competitor::LlamaCpp => self.slots == need.slots,
            Competitor::Vllm => {
                if need.slots == 1 {
                    self.slots == 1
                } else {
                    self.slots >= need.slots
                }
            }
            Competitor::Transformers => self.slots == need.slots,
        };
        self.same_flags(need) && slots && self.ctx >= need.ctx
    }

    fn union(&self, o: &TheirSpec) -> TheirSpec {
        TheirSpec {
            ctx: self.ctx.max(o.ctx),
            slots: self.slots.max(o.slots),
            ..self.clone()
        }
    }
}

/// Cells that share one start of both servers.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// Indices into the cells grouped, in order.
    pub cells: Vec<usize>,
    pub ours: OurSpec,
    pub theirs: TheirSpec,
}

impl Group {
    /// A group of `cell` alone.
    pub fn of(i: usize, cell: &Cell, vs: Competitor) -> Group {
        Group {
            cells: vec![i],
            ours: our_spec(cell),
            theirs: their_spec(cell, vs),
        }
    }

    /// The group's servers with `cell` added, if they still cover every cell of the group
    /// and `cell` (None: `cell` starts a new group).
    pub fn joined(&self, cell: &Cell, vs: Competitor) -> Option<(OurSpec, TheirSpec)> {
        let (o, t) = (our_spec(cell), their_spec(cell, vs));
        let (uo, ut) = (self.ours.union(&o), self.theirs.union(&t));
        // The union must still cover the new cell and the group's own needs (which the
        // group's current specs cover): a 64-slot llama-server covers no 1-slot cell.
        let ok = uo.covers(&o)
            && uo.covers(&self.ours)
            && ut.covers(&t)
            && ut.covers(&self.theirs)
            // Never one-stream and many-stream cells on one server (module doc).
            && (t.slots == 1) == (self.theirs.slots == 1);
        ok.then_some((uo, ut))
    }

    /// Add cell `i` (after [`Group::joined`] said yes).
    pub fn push(&mut self, i: usize, (o, t): (OurSpec, TheirSpec)) {
        self.cells.push(i);
        self.ours = o;
        self.theirs = t;
    }
}

/// Group `cells` (in the order they run) into runs sharing servers; `reuse` false gives one
/// group per cell.
pub fn groups(cells: &[&Cell], vs: Competitor, reuse: bool) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for (i, c) in cells.iter().enumerate() {
        let joined = match out.last() {
            Some(g) if reuse => g.joined(c, vs),
            _ => None,
        };
        match (joined, out.last_mut()) {
            (Some(j), Some(g)) => g.push(i, j),
            _ => out.push(Group::of(i, c, vs)),
        }
    }
    out
}

/// Prompt ids a cell uses from its base: the agreement prompt, one warm-up wave per arm,
/// and `runs` timed waves (`batch` ids each, both arms the same).
pub fn prompt_span(batch: usize, runs: usize) -> usize {
    1 + batch * (2 + runs)
}

/// `serve_load::prompt_ids(i, _)` and `(j, _)` share no token at any position unless
/// `i == j` modulo this: a server's cells must stay under it.
pub const PROMPT_IDS_PERIOD: usize = 9000;

/// What to do before a cell of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Start the group's servers (first cell, or after a failure).
    Start,
    /// Start our server only: the competitor's, started for the named cell of an earlier
    /// group, is carried ([`super::carry`]); prompts from `base`.
    Carry {
        their_started_for: String,
        base: usize,
    },
    /// Use the running servers, started for the named cell; prompts from `base`.
    Reuse { started_for: String, base: usize },
    /// Fail the cell: the group's servers did not start.
    Fail(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Down,
    Up {
        started_for: String,
        next_base: usize,
    },
    Broken(String),
    /// The competitor's server carried from an earlier group, ours not started yet.
    Carried {
        their_started_for: String,
        next_base: usize,
    },
}

/// The servers' life over one group's cells: a pure state machine driven by the run loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lifecycle {
    state: State,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle { state: State::Down }
    }
}

impl Lifecycle {
    /// A group whose first cell runs on the competitor's server started for
    /// `their_started_for` (an earlier group's cell), its prompts from `next_base`.
    pub fn carried(their_started_for: &str, next_base: usize) -> Lifecycle {
        Lifecycle {
            state: State::Carried {
                their_started_for: their_started_for.to_owned(),
                next_base,
            },
        }
    }

    /// Before a cell.
    pub fn before(&self) -> Step {
        match &self.state {
            State::Down => Step::Start,
            State::Carried {
                their_started_for,
                next_base,
            } => Step::Carry {
                their_started_for: their_started_for.clone(),
                base: *next_base,
            },
            State::Up {
                started_for,
                next_base,
            } => Step::Reuse {
                started_for: started_for.clone(),
                base: *next_base,
            },
            State::Broken(why) => Step::Fail(why.clone()),
        }
    }

    /// The servers started for `cell` (Ok), or failed to (Err: every later cell fails).
    /// After [`Step::Carry`] only ours started: the prompt ids go on from the carried
    /// competitor's base.
    pub fn started(&mut self, cell: &str, outcome: Result<(), String>) {
        let base = match &self.state {
            State::Carried { next_base, .. } => *next_base,
            _ => 0,
        };
        self.state = match outcome {
            Ok(()) => State::Up {
                started_for: cell.to_owned(),
                next_base: base,
            },
            Err(why) => State::Broken(why),
        };
    }

    /// After a cell that used `span` prompt ids from its base: whether it succeeded and
    /// whether both servers still answer. A failed cell or a dead server means a restart
    /// for the next cell (the next cell's prompts would also wrap past
    /// [`PROMPT_IDS_PERIOD`]: restart then too).
    pub fn after(&mut self, ok: bool, alive: bool, span: usize, next_span: Option<usize>) {
        if let State::Up {
            started_for,
            next_base,
        } = &self.state
        {
            let base = next_base + span;
            let fits = next_span.is_none_or(|n| base + n <= PROMPT_IDS_PERIOD);
            self.state = if ok && alive && fits {
                State::Up {
                    started_for: started_for.clone(),
                    next_base: base,
                }
            } else {
                State::Down
            };
        }
    }

    /// Whether servers are running (to be stopped at the group's end, or before a restart).
    pub fn is_up(&self) -> bool {
        matches!(self.state, State::Up { .. })
    }

    /// The first prompt id not yet used on the running servers (None: none running).
    pub fn next_base(&self) -> Option<usize> {
        match &self.state {
            State::Up { next_base, .. } => Some(*next_base),
            _ => None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::bench::cells::Board;
    use crate::pair::{applies, load_cells, plan};
    use std::path::Path;

    /// The real boards/h200.toml (also for `carry`'s tests).
    pub(crate) fn board() -> Board {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        load_cells(&root.join("boards/h200.toml")).unwrap()
    }

    fn cell<'a>(b: &'a Board, id: &str) -> &'a Cell {
        b.cells.iter().find(|c| c.id == id).unwrap()
    }

    fn of(b: &Board, vs: Competitor) -> Vec<&Cell> {
        b.cells.iter().filter(|c| applies(c, vs)).collect()
    }

    /// The groups as cell ids.
    fn ids(cells: &[&Cell], gs: &[Group]) -> Vec<Vec<String>> {
        gs.iter()
            .map(|g| g.cells.iter().map(|&i| cells[i].id.clone()).collect())
            .collect()
    }

    #[test]
    fn llama_server_covers_only_its_own_slot_count_and_a_long_enough_slot() {
        let b = board();
        let vs = Competitor::LlamaCpp;
        let t = |id| their_spec(cell(&b, id), vs);
        let (d512, d4k) = (t("h200-llama8b-q4_0-d512"), t("h200-llama8b-q4_0-d4k"));
        assert_eq!((d512.ctx, d512.slots), (656, 1));
        assert_eq!((d4k.ctx, d4k.slots), (4240, 1));
        assert!(d4k.covers(&d512) && !d512.covers(&d4k));
        // More slots never cover fewer (llama-server splits -c across -np), nor fewer more.
        let (c4, c16) = (t("h200-llama8b-q4_0-c4"), t("h200-llama8b-q4_0-c16"));
        assert!(!c16.covers(&c4) && !c4.covers(&c16));
        assert!(!c4.covers(&d512));
        let wide = TheirSpec {
            ctx: 100_000,
            slots: 4,
            ..c4.clone()
        };
        assert!(wide.covers(&c4) && !wide.covers(&d512));
        // Another format or shape: another file.
        assert!(!t("h200-llama8b-q8_0-d4k").covers(&d512));
        assert!(!t("h200-qwen25-7b-q4_0-d4k").covers(&d512));
    }

    #[test]
    fn vllm_covers_more_sequences_only_for_concurrent_cells_and_the_same_quantization() {
        let b = board();
        let vs = Competitor::Vllm;
        let t = |id| their_spec(cell(&b, id), vs);
        let (c4, c64) = (t("h200-llama8b-bf16-c4"), t("h200-llama8b-bf16-c64"));
        assert!(c64.covers(&c4) && !c4.covers(&c64));
        let d512 = t("h200-llama8b-bf16-d512");
        assert!(
            !c64.covers(&d512),
            "a batching server for a one-stream cell"
        );
        assert!(t("h200-llama8b-bf16-d4k").covers(&d512));
        // fp8 loads the same BF16 folder but quantizes it: never the BF16 server.
        let f = t("h200-llama8b-fp8-d4k");
        assert_eq!(f.model, d512.model);
        assert_eq!(f.quantization.as_deref(), Some("fp8"));
        assert!(
            !f.covers(&d512) && !t("h200-llama8b-bf16-d4k").covers(&t("h200-llama8b-fp8-d512"))
        );
    }

    #[test]
    fn our_server_is_never_shared_across_other_flags() {
        let b = board();
        let o = |id| our_spec(cell(&b, id));
        // d4k covers d512's limits with the same flags.
        assert!(o("h200-llama8b-q4_0-d4k").covers(&o("h200-llama8b-q4_0-d512")));
        assert!(!o("h200-llama8b-q4_0-d512").covers(&o("h200-llama8b-q4_0-d4k")));
        // c16 (--batched-decode --mmv) and a c4 of --batched-decode alone (the Q4_0 c4
        // cell's flags before session 19): never, either way; the c4 cell of today (both
        // flags) is covered.
        let (c4, c16) = (o("h200-llama8b-q4_0-c4"), o("h200-llama8b-q4_0-c16"));
        let big = OurSpec {
            ctx: 1 << 20,
            concurrency: 1 << 10,
            ..c16.clone()
        };
        let c4_batched = OurSpec {
            serve_flags: vec!["--batched-decode".into()],
            ..c4.clone()
        };
        assert!(!big.covers(&c4_batched));
        assert!(big.covers(&c4));
        let big_batched = OurSpec {
            ctx: 1 << 20,
            concurrency: 1 << 10,
            ..c4_batched.clone()
        };
        assert!(!big_batched.covers(&c16));
        assert!(big.covers(&o("h200-llama8b-q4_0-c64")));
        // A speculative server serves no plain cell.
        let spec = b
            .cells
            .iter()
            .find(|c| c.id.starts_with("h200-llama8b-q4_0") && c.spec.is_some())
            .unwrap();
        let s = OurSpec {
            ctx: 1 << 20,
            ..our_spec(spec)
        };
        assert!(!s.covers(&o("h200-llama8b-q4_0-d512")));
        // For a cell alone the limits are what serve_flags gives it.
        let c = cell(&b, "h200-llama8b-q4_0-c64");
        let flags = crate::bench::serve_load::serve_flags("cuda", 512, 128, 64);
        let (ctx, queue) = our_spec(c).limits();
        assert_eq!(
            flags,
            crate::bench::serve_load::serve_flags("cuda", ctx - 16, 0, queue / 2)
        );
    }

    #[test]
    fn the_boards_cells_group_by_model_format_and_concurrency() {
        let b = board();
        let llama = of(&b, Competitor::LlamaCpp);
        let gs = groups(&llama, Competitor::LlamaCpp, true);
        let named = ids(&llama, &gs);
        let l = |s: &str| format!("h200-llama8b-q4_0-{s}");
        assert_eq!(named[0], vec![l("d512"), l("d4k"), l("p2k"), l("e2e")]);
        // The n-gram cell right after the one-stream group (its competitor server carried:
        // `carry`), then the concurrency cells.
        assert_eq!(named[1], vec![l("spec-ngram")]);
        assert_eq!(named[2..5], [vec![l("c4")], vec![l("c16")], vec![l("c64")]]);
        assert_eq!((gs[0].theirs.ctx, gs[0].theirs.slots), (4240, 1));
        assert_eq!(gs[0].ours.ctx, 4240);
        let vllm = of(&b, Competitor::Vllm);
        let gv = groups(&vllm, Competitor::Vllm, true);
        let named = ids(&vllm, &gv);
        let v = |s: &str| format!("h200-llama8b-{s}");
        assert_eq!(
            named[1..3],
            [vec![v("bf16-spec-ngram")], vec![v("bf16-spec-draft")]]
        );
        assert_eq!(
            named[3],
            vec![v("bf16-c4"), v("bf16-c16"), v("bf16-c64")],
            "one --batched-decode server, vLLM at 64 sequences"
        );
        assert_eq!(gv[3].theirs.slots, 64);
        // fp8 (our Q8_0): c4, c16 and c64 all --batched-decode --mmv (since session 23: c4
        // had no --mmv before, a group of its own), one server.
        assert_eq!(named[5], vec![v("fp8-c4"), v("fp8-c16"), v("fp8-c64")]);
        for (cells, gs, vs) in [
            (&llama, &gs, Competitor::LlamaCpp),
            (&vllm, &gv, Competitor::Vllm),
        ] {
            // Every cell once, in order; each group's servers cover each member; one
            // concurrency class per group; our flags the same.
            let flat: Vec<usize> = gs.iter().flat_map(|g| g.cells.clone()).collect();
            assert_eq!(flat, (0..cells.len()).collect::<Vec<_>>());
            for g in gs.iter() {
                let first = cells[g.cells[0]];
                for &i in &g.cells {
                    let c = cells[i];
                    assert!(g.ours.covers(&our_spec(c)), "{}", c.id);
                    assert!(g.theirs.covers(&their_spec(c, vs)), "{}", c.id);
                    assert_eq!(c.serve_flags, first.serve_flags);
                    assert_eq!(c.spec, first.spec);
                    assert_eq!(c.batch == 1, first.batch == 1, "{}", c.id);
                }
                // The prompt ids of a group's cells stay under the period.
                let ids: usize = g
                    .cells
                    .iter()
                    .map(|&i| prompt_span(cells[i].batch, cells[i].runs.max(5)))
                    .sum();
                assert!(ids <= PROMPT_IDS_PERIOD, "{ids}");
            }
            assert!(gs.len() < cells.len());
            // --no-reuse: one group per cell.
            assert_eq!(groups(cells, vs, false).len(), cells.len());
        }
        // 4 shapes x 3 formats x (c1, c4, c16, c64, 2 spec) for llama.cpp.
        assert_eq!(
            gs.len(),
            4 * 3 * 4 + llama.iter().filter(|c| c.spec.is_some()).count()
        );
    }

    #[test]
    fn the_plan_counts_one_start_per_group() {
        let b = board();
        for vs in [Competitor::LlamaCpp, Competitor::Vllm] {
            let cells = of(&b, vs);
            let before = plan::plan(&cells, vs, None, false).unwrap();
            // Without carrying the competitor across groups (`carry`'s tests).
            let after = plan::plan_with(&cells, vs, None, true, false).unwrap();
            let gs = groups(&cells, vs, true);
            let starts = after.cells.iter().filter(|e| e.start_s > 0.0).count();
            assert_eq!(starts, gs.len(), "{vs:?}");
            for g in &gs {
                let first = &cells[g.cells[0]].id;
                for (k, &i) in g.cells.iter().enumerate() {
                    let (e0, e1) = (&before.cells[i], &after.cells[i]);
                    assert_eq!(e0.timed_s, e1.timed_s);
                    assert_eq!(e0.synth_s, e1.synth_s);
                    if k == 0 {
                        assert_eq!(e1.start_s, e0.start_s);
                        assert!(e1.reuses.is_none());
                    } else {
                        assert_eq!(e1.start_s, 0.0);
                        assert_eq!(e1.reuses.as_ref(), Some(first));
                    }
                }
            }
            assert!(before.cells.iter().all(|e| e.reuses.is_none()));
            let saved = before.total_s() - after.total_s();
            let reused_starts: f64 = gs
                .iter()
                .flat_map(|g| g.cells[1..].iter().map(|&i| before.cells[i].start_s))
                .sum();
            assert!((saved - reused_starts).abs() < 1e-6);
            let text = plan::render(&after, vs, None);
            assert!(text.contains("start 0: reuses the servers of"), "{text}");
        }
        // vLLM's ~2 min starts: at least a quarter of the board's time.
        let cells = of(&b, Competitor::Vllm);
        let before = plan::plan(&cells, Competitor::Vllm, None, false).unwrap();
        let after = plan::plan(&cells, Competitor::Vllm, None, true).unwrap();
        assert!(
            after.total_s() < 0.75 * before.total_s(),
            "{} {}",
            after.total_s(),
            before.total_s()
        );
    }

    #[test]
    fn a_budget_charges_the_start_where_a_selected_group_begins() {
        let b = board();
        let vs = Competitor::LlamaCpp;
        let cells = of(&b, vs);
        // d512, d4k, p2k, e2e of the first block, then c4.
        let first4: Vec<&Cell> = cells[..5].to_vec();
        let full = plan::plan(&first4, vs, None, true).unwrap();
        // A budget without d512: d4k starts the servers, p2k and e2e reuse them.
        let without: Vec<&Cell> = first4[1..].to_vec();
        let alone = plan::plan(&without, vs, None, true).unwrap();
        assert!(alone.cells[0].start_s > 0.0 && alone.cells[1].start_s == 0.0);
        // Everything fits: the same as the full plan.
        let p = plan::plan(&first4, vs, Some(1e9), true).unwrap();
        assert!((p.selected_s() - full.total_s()).abs() < 1e-6);
        // d512, c64, d4k in that order: in the full plan c64 parts them and d4k starts
        // its own servers; a budget without room for c64 passes it over, and d4k joins
        // d512's servers (a skipped cell runs nothing).
        let c64 = cells
            .iter()
            .find(|c| c.id == "h200-llama8b-q4_0-c64")
            .unwrap();
        let order = [first4[0], *c64, first4[1]];
        let full3 = plan::plan(&order, vs, None, true).unwrap();
        assert!(full3.cells[2].start_s > 0.0 && full3.cells[2].reuses.is_none());
        let d4k_reused = full3.cells[2].total_s() - full3.cells[2].start_s;
        let budget = full3.setup_s + full3.cells[0].total_s() + d4k_reused + 0.5;
        assert!(full3.cells[1].total_s() > d4k_reused + 0.5);
        let p = plan::plan(&order, vs, Some(budget), true).unwrap();
        assert_eq!(
            p.selected_ids(),
            vec![order[0].id.clone(), order[2].id.clone()]
        );
        assert_eq!(p.selected[1].start_s, 0.0);
        assert_eq!(p.selected[1].reuses.as_ref(), Some(&order[0].id));
        assert!(p.selected_s() <= budget);
        // Without reuse the same budget cannot take d4k (its start does not fit).
        let p = plan::plan(&order, vs, Some(budget), false).unwrap();
        assert_eq!(p.selected_ids(), vec![order[0].id.clone()]);
        // c4 never joins: it pays its start.
        assert!(full.cells[4].start_s > 0.0);
    }

    #[test]
    fn the_lifecycle_restarts_after_a_failure_and_fails_a_group_that_cannot_start() {
        let mut l = Lifecycle::default();
        assert_eq!(l.before(), Step::Start);
        l.started("a", Ok(()));
        assert!(l.is_up());
        l.after(true, true, 36, Some(36));
        assert_eq!(
            l.before(),
            Step::Reuse {
                started_for: "a".into(),
                base: 36
            }
        );
        l.after(true, true, 36, Some(10));
        assert_eq!(
            l.before(),
            Step::Reuse {
                started_for: "a".into(),
                base: 72
            }
        );
        // A cell fails: the servers go down, the next cell starts them again from id 0.
        l.after(false, true, 36, Some(36));
        assert!(!l.is_up());
        assert_eq!(l.before(), Step::Start);
        l.started("d", Ok(()));
        assert_eq!(
            l.before(),
            Step::Reuse {
                started_for: "d".into(),
                base: 0
            }
        );
        // A server found dead after a green cell: restart too.
        l.after(true, false, 36, Some(36));
        assert_eq!(l.before(), Step::Start);
        // The next cell's prompts would wrap past the period: restart.
        l.started("e", Ok(()));
        l.after(true, true, PROMPT_IDS_PERIOD - 10, Some(11));
        assert_eq!(l.before(), Step::Start);
        // A start that fails fails every later cell of the group, without retrying.
        l.started("f", Err("no llama-server".into()));
        assert!(!l.is_up());
        for _ in 0..3 {
            assert_eq!(l.before(), Step::Fail("no llama-server".into()));
            l.after(false, false, 36, Some(36));
        }
        // The last cell of a group: nothing next.
        let mut l = Lifecycle::default();
        l.started("g", Ok(()));
        l.after(true, true, PROMPT_IDS_PERIOD, None);
        assert!(l.is_up());
    }

    #[test]
    fn prompt_ids_of_different_indices_share_no_token() {
        // The property the bases rely on (serve_load::prompt_ids).
        let p = |i| crate::bench::serve_load::prompt_ids(i, 64);
        assert_eq!(p(PROMPT_IDS_PERIOD + 3), p(3));
        for (i, j) in [(0, 1), (0, 37), (5, 8999), (100, 4100)] {
            assert!(p(i).iter().zip(p(j)).all(|(a, b)| *a != b), "{i} {j}");
        }
        assert_eq!(prompt_span(1, 5), 8);
        assert_eq!(prompt_span(64, 5), 449);
    }
}
