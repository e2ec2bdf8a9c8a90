//! Carrying the competitor's server from one group of cells to the next (`harness pair`):
//! vLLM takes ~100-125 s to start a server, ours ~8-30 s, and the board's speculative cells
//! run ours with `--spec` but the competitor plain, one stream, short context. Their group
//! differs from the one-stream group before them by our flags only, so where the next group
//! a process runs needs a competitor's server that the running one covers
//! ([`TheirSpec::covers`] on the spec it was started with: the same model, device and
//! quantization, the slot rule, context at least; [`carries`]) and both servers came
//! through the last cell (green, answering `/health`), only our server is stopped and
//! started again.
//!
//! The carried server's prompt ids keep counting up from the group before (no timed prompt
//! shares a prefix with one it saw); where the next group's first cell would pass
//! [`PROMPT_IDS_PERIOD`], both start again. A failed cell or a dead server restarts both,
//! as within a group. `--no-reuse` carries nothing (one start of both per cell). With
//! `--shard`, only the next group dealt to the same shard can carry; the plan
//! ([`super::plan`]) estimates without sharding.
//!
//! Receipts say which cell each server was started for ([`Origins::note`]) and charge a
//! cell's wall time with the starts made for it only ([`Origins::charged_s`]).

use super::group::{Group, PROMPT_IDS_PERIOD, TheirSpec};

/// Whether group `next`, run right after a group whose servers are up (prompt ids used
/// below `next_base`), takes the competitor's server started with `running`: it covers the
/// next group's union of needs, and the next group's first cell's `first_span` prompt ids
/// still fit under [`PROMPT_IDS_PERIOD`] (later cells that would not restart both, as
/// within any group).
pub fn carries(running: &TheirSpec, next: &Group, next_base: usize, first_span: usize) -> bool {
    running.covers(&next.theirs) && next_base + first_span <= PROMPT_IDS_PERIOD
}

/// Which cell each arm's server was started for and what its start took.
#[derive(Clone, Debug, PartialEq)]
pub struct Origins {
    pub ours_for: String,
    pub ours_start_s: f64,
    pub theirs_for: String,
    pub theirs_start_s: f64,
    /// The competitor's server as started (its context per sequence and slots).
    pub theirs: TheirSpec,
}

impl Origins {
    /// Seconds of server starts charged to `cell`'s wall time: each start made for it.
    pub fn charged_s(&self, cell: &str) -> f64 {
        let mut s = 0.0;
        if self.ours_for == cell {
            s += self.ours_start_s;
        }
        if self.theirs_for == cell {
            s += self.theirs_start_s;
        }
        s
    }

    /// The receipt's note on the servers `cell` (of competitor `vs`, prompts from id `base`)
    /// ran on where one was not started for it; None where both were.
    pub fn note(&self, cell: &str, vs: &str, base: usize) -> Option<String> {
        let ids = format!(
            "prompt ids from {base} (serve-ids-v1), after every id the earlier cells on these servers used"
        );
        let carried = format!(
            "the {vs} server reused from cell {} (started for an earlier group, context {}, slots {})",
            self.theirs_for, self.theirs.ctx, self.theirs.slots
        );
        match (self.ours_for == cell, self.theirs_for == cell) {
            (true, true) => None,
            (false, false) if self.ours_for == self.theirs_for => Some(format!(
                "servers reused from cell {} (started once for its group of cells, with the flags above: context and slots the group's largest; this cell timed no start); {ids}",
                self.ours_for
            )),
            (true, false) => Some(format!(
                "{carried}; ours started for this cell (its start charged here, the {vs} server's not); {ids}"
            )),
            _ => Some(format!(
                "servers reused: ours from cell {} (started once for its group of cells, with the flags above), {carried}; this cell timed no start; {ids}",
                self.ours_for
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::bench::cells::{Board, Cell};
    use crate::pair::group::tests::board;
    use crate::pair::group::{groups, prompt_span, their_spec};
    use crate::pair::{Competitor, applies, plan};

    fn of(b: &Board, vs: Competitor) -> Vec<&Cell> {
        b.cells.iter().filter(|c| applies(c, vs)).collect()
    }

    fn cell<'a>(b: &'a Board, id: &str) -> &'a Cell {
        b.cells.iter().find(|c| c.id == id).unwrap()
    }

    /// What the run loop does with every cell green and every server answering: for each
    /// group, the index of the group whose competitor server it runs on (itself: started).
    fn simulate(cells: &[&Cell], gs: &[Group]) -> Vec<usize> {
        let span = |i: usize| prompt_span(cells[i].batch, cells[i].runs.max(5));
        let mut out: Vec<usize> = Vec::new();
        let mut base = 0;
        for (k, g) in gs.iter().enumerate() {
            let from = match out.last() {
                Some(&j) if carries(&gs[j].theirs, g, base, span(g.cells[0])) => j,
                _ => {
                    base = 0;
                    k
                }
            };
            out.push(from);
            base += g.cells.iter().map(|&i| span(i)).sum::<usize>();
        }
        out
    }

    #[test]
    fn the_competitor_is_carried_only_where_the_running_server_covers_the_next_group() {
        let b = board();
        for (vs, fmt, other) in [
            (Competitor::Vllm, "bf16", "fp8"),
            (Competitor::LlamaCpp, "q4_0", "q8_0"),
        ] {
            let c = |s: &str| cell(&b, &format!("h200-llama8b-{s}"));
            let g = |ids: &[&str]| {
                let cs: Vec<&Cell> = ids.iter().map(|s| c(s)).collect();
                let gs = groups(&cs, vs, true);
                assert_eq!(gs.len(), 1, "{ids:?}");
                gs[0].clone()
            };
            let one = g(&[
                &format!("{fmt}-d512"),
                &format!("{fmt}-d4k"),
                &format!("{fmt}-p2k"),
                &format!("{fmt}-e2e"),
            ]);
            let spec = if vs == Competitor::Vllm {
                "bf16-spec-ngram"
            } else {
                "q4_0-spec-ngram"
            };
            let spec = g(&[spec]);
            assert_ne!(one.ours, spec.ours, "ours differ: a group of its own");
            assert!(carries(&one.theirs, &spec, 100, 8), "{vs:?}");
            // The prompt ids would pass the period: start both.
            assert!(!carries(&one.theirs, &spec, PROMPT_IDS_PERIOD - 7, 8));
            assert!(carries(&one.theirs, &spec, PROMPT_IDS_PERIOD - 8, 8));
            // Another quantization (vLLM's fp8) or GGUF: never.
            let fp8 = g(&[&format!("{other}-d512")]);
            assert!(!carries(&one.theirs, &fp8, 0, 8), "{vs:?}");
            assert!(!carries(&fp8.theirs, &spec, 0, 8), "{vs:?}");
            // One stream vs many: neither way.
            let c4 = g(&[&format!("{fmt}-c4")]);
            assert!(!carries(&one.theirs, &c4, 0, 8));
            assert!(!carries(&c4.theirs, &spec, 0, 8));
            // A context too small: d512's server does not serve e2e.
            let d512 = g(&[&format!("{fmt}-d512")]);
            let e2e = g(&[&format!("{fmt}-e2e")]);
            assert!(carries(&e2e.theirs, &d512, 0, 8));
            assert!(!carries(&d512.theirs, &e2e, 0, 8));
            // A 64-sequence server serves c4 (vLLM); llama-server only its own slot count.
            let (c16, c64) = (g(&[&format!("{fmt}-c16")]), g(&[&format!("{fmt}-c64")]));
            assert_eq!(carries(&c64.theirs, &c4, 0, 8), vs == Competitor::Vllm);
            assert!(!carries(&c4.theirs, &c16, 0, 8));
            let wide = TheirSpec {
                ctx: 1 << 20,
                ..c16.theirs.clone()
            };
            assert!(carries(&wide, &c16, 0, 8));
            assert_eq!(carries(&wide, &c4, 0, 8), vs == Competitor::Vllm);
        }
        // Another device: never.
        let d = their_spec(cell(&b, "h200-llama8b-bf16-e2e"), Competitor::Vllm);
        let on_cpu = TheirSpec {
            device: crate::bench::cells::DeviceKind::Cpu,
            ..d.clone()
        };
        let spec = Group::of(
            0,
            cell(&b, "h200-llama8b-bf16-spec-ngram"),
            Competitor::Vllm,
        );
        assert!(carries(&d, &spec, 0, 8) && !carries(&on_cpu, &spec, 0, 8));
    }

    /// On boards/h200.toml each speculative cell follows the one-stream group of its model
    /// and format for its competitor, and runs on that group's competitor server; no other
    /// group carries, and the grouping is what it would be without carrying.
    #[test]
    fn the_boards_spec_cells_carry_the_one_stream_competitor_before_them() {
        let b = board();
        for vs in [Competitor::Vllm, Competitor::LlamaCpp] {
            let cells = of(&b, vs);
            let gs = groups(&cells, vs, true);
            let from = simulate(&cells, &gs);
            let mut carried = 0;
            for (k, g) in gs.iter().enumerate() {
                let first = cells[g.cells[0]];
                if first.spec.is_none() {
                    assert_eq!(from[k], k, "{vs:?} {} starts its own", first.id);
                    continue;
                }
                // A spec cell alone in its group, on the servers of the e2e group's.
                assert_eq!(g.cells.len(), 1, "{}", first.id);
                let src = &gs[from[k]];
                let ids: Vec<&str> = src.cells.iter().map(|&i| cells[i].id.as_str()).collect();
                let stem = first.id.split("-spec-").next().unwrap();
                // llama.cpp: the draft cell is Q8_0 (its own GGUF's group).
                assert_eq!(
                    ids,
                    ["d512", "d4k", "p2k", "e2e"].map(|s| format!("{stem}-{s}")),
                    "{vs:?} {}",
                    first.id
                );
                assert!(from[k] < k && from[k] >= k.saturating_sub(2));
                carried += 1;
            }
            // 2 per shape (4 shapes) for each competitor.
            assert_eq!(carried, 8, "{vs:?}");
            // The same groups as each cell set alone: carrying changes no grouping.
            for g in &gs {
                let cs: Vec<&Cell> = g.cells.iter().map(|&i| cells[i]).collect();
                assert_eq!(groups(&cs, vs, true).len(), 1);
            }
            // --no-reuse: one start of both per cell, nothing carried.
            let none = groups(&cells, vs, false);
            assert_eq!(none.len(), cells.len());
        }
    }

    #[test]
    fn the_plan_charges_a_carried_group_our_start_only() {
        let b = board();
        for (vs, their) in [
            (Competitor::Vllm, plan::VLLM_START_S),
            (Competitor::LlamaCpp, plan::LLAMA_START_S),
        ] {
            let cells = of(&b, vs);
            let with = plan::plan(&cells, vs, None, true).unwrap();
            let without = plan::plan_with(&cells, vs, None, true, false).unwrap();
            let mut n = 0;
            for (i, (e, f)) in with.cells.iter().zip(&without.cells).enumerate() {
                assert_eq!(e.timed_s, f.timed_s);
                match &e.carries {
                    Some(src) => {
                        n += 1;
                        assert!(cells[i].spec.is_some(), "{}", e.id);
                        assert!(src.ends_with("-d512"), "{} carries {src}", e.id);
                        assert!(e.start_s > 0.0 && e.start_s < f.start_s, "{e:?} {f:?}");
                        assert!((f.start_s - e.start_s - their).abs() < 1e-9);
                    }
                    None => assert_eq!(e.start_s, f.start_s, "{}", e.id),
                }
            }
            assert_eq!(n, 8, "{vs:?}");
            // About 2 of the competitor's starts per shape.
            let saved = without.total_s() - with.total_s();
            assert!((saved - 8.0 * their).abs() < 1e-6, "{vs:?} {saved}");
            let text = plan::render(&with, vs, None);
            assert!(
                text.contains(&format!("start: ours only, the {} server of", vs.name())),
                "{text}"
            );
            // --no-reuse: every cell pays both starts.
            let none = plan::plan(&cells, vs, None, false).unwrap();
            assert!(none.cells.iter().all(|e| e.carries.is_none()));
        }
    }

    #[test]
    fn a_carried_group_starts_ours_alone_and_counts_prompt_ids_on() {
        use crate::pair::group::{Lifecycle, Step};
        let mut l = Lifecycle::carried("e2e", 40);
        assert!(!l.is_up() && l.next_base().is_none());
        assert_eq!(
            l.before(),
            Step::Carry {
                their_started_for: "e2e".into(),
                base: 40
            }
        );
        // Ours started: the ids go on from the carried server's base.
        l.started("spec", Ok(()));
        assert_eq!(
            l.before(),
            Step::Reuse {
                started_for: "spec".into(),
                base: 40
            }
        );
        l.after(true, true, 8, None);
        assert_eq!(l.next_base(), Some(48));
        // Ours fails to start: every cell of the group fails (the caller stops both).
        let mut l = Lifecycle::carried("e2e", 40);
        l.started("spec", Err("no assay".into()));
        assert_eq!(l.before(), Step::Fail("no assay".into()));
        assert!(!l.is_up());
        // A failed cell on a carried server: both start again, ids from 0.
        let mut l = Lifecycle::carried("e2e", 40);
        l.started("a", Ok(()));
        l.after(false, true, 8, Some(8));
        assert_eq!(l.before(), Step::Start);
        l.started("b", Ok(()));
        assert_eq!(l.next_base(), Some(0));
    }

    fn origins() -> Origins {
        let b = board();
        Origins {
            ours_for: "a".into(),
            ours_start_s: 10.0,
            theirs_for: "a".into(),
            theirs_start_s: 120.0,
            theirs: their_spec(cell(&b, "h200-llama8b-bf16-e2e"), Competitor::Vllm),
        }
    }

    #[test]
    fn receipts_say_which_server_was_started_for_which_cell() {
        let o = origins();
        assert_eq!(o.note("a", "vllm", 0), None);
        assert_eq!(o.charged_s("a"), 130.0);
        // Both reused: the wording of before, nothing charged.
        let n = o.note("b", "vllm", 8).unwrap();
        assert!(
            n.starts_with("servers reused from cell a (started once for its group of cells"),
            "{n}"
        );
        assert!(n.contains("prompt ids from 8 (serve-ids-v1)"), "{n}");
        assert_eq!(o.charged_s("b"), 0.0);
        // Ours started for c, theirs carried from a: only our start charged.
        let c = Origins {
            ours_for: "c".into(),
            ours_start_s: 12.0,
            ..o.clone()
        };
        let n = c.note("c", "vllm", 40).unwrap();
        assert!(
            n.starts_with(
                "the vllm server reused from cell a (started for an earlier group, context 2628, slots 1); ours started for this cell"
            ),
            "{n}"
        );
        assert!(n.contains("prompt ids from 40"), "{n}");
        assert_eq!(c.charged_s("c"), 12.0);
        // A later cell of the carried group: both reused, from different cells.
        let n = c.note("d", "vllm", 48).unwrap();
        assert!(n.contains("ours from cell c") && n.contains("vllm server reused from cell a"));
        assert_eq!(c.charged_s("d"), 0.0);
    }
}
