//! The batched step as a CUDA graph per row count (the default; `ASSAY_BATCH_GRAPH=0` runs
//! it eagerly): the switch ([`batch_graphs_from_env`]), the key a captured step is kept
//! under ([`GraphKey`]), the captured steps of a workspace ([`BatchGraphs`], a small LRU),
//! the capture / replay of one group's step ([`graph_step`]) and what the workspace of a
//! decoder's weights holds ([`CudaDecoder::batch_graph_counts`],
//! [`CudaDecoder::batch_graph_stats`], for receipts and logs).
//!
//! A captured step reads and writes only the workspace of the weights' upload (its
//! activation buffers, tokens, positions, capacities, KV pointer tables, attention scratch,
//! mmv staging and argmax) and the shared weights; every row's KV pool pointers, block table,
//! position and capacity are uploaded as data before each replay
//! ([`upload_step`](super::ws::upload_step)), and each row's logits are copied into its
//! decoder's head buffer after the replay ([`copy_logits`](super::copy_logits)). So one
//! graph serves every group of the same row count and modes, whichever decoders are in it
//! (issue 8: `assay serve --batched-decode` no longer captures anew when a request joins or
//! leaves, once each row count was seen). The exception: a body with an attention the plan
//! did not fuse with its RoPE (no model of the registry today) runs it per row on each
//! decoder's own cache and scratch, and its graphs stay keyed by the decoders
//! ([`GraphKey::pinned`]).
//!
//! Default on since session 19's same-window A/B (same binary, logs only:
//! research/notes/s19/t-ab-batch-graph.log vs t-ab-batch-eager.log), graph vs eager: 4 rows
//! 491.4 vs 484.3 tok/s, 16 rows 612.6 vs 610.7, 64 rows with `--mmv` 2463.4 vs 2402.6; the
//! `batch` gate was green with the graphs in session 9 (the same bits as eager: the graph
//! holds exactly the eager launches, with the attention grids over every split).

use super::super::graph::{StepGraph, capture_stream};
use super::{BatchWs, CudaDecoder, group_body, model_err};
use crate::arch::Op;
use crate::cuda::CudaError;
use crate::cuda::ops::MatvecOpts;
use std::sync::Arc;

/// Whether the batched step runs as a CUDA graph per row count: on by default (unset, empty
/// or `ASSAY_BATCH_GRAPH=1`), off with `ASSAY_BATCH_GRAPH=0` (eager launches). Read once
/// per process; any other value is an error.
pub fn batch_graphs_from_env() -> Result<bool, CudaError> {
    static ON: std::sync::OnceLock<Result<bool, String>> = std::sync::OnceLock::new();
    ON.get_or_init(|| parse_batch_graph(std::env::var("ASSAY_BATCH_GRAPH").ok().as_deref()))
        .clone()
        .map_err(model_err)
}

fn parse_batch_graph(v: Option<&str>) -> Result<bool, String> {
    match v.map(str::trim) {
        None | Some("") | Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some(other) => Err(format!("ASSAY_BATCH_GRAPH must be 0 or 1, not {other:?}")),
    }
}

/// What a captured step depends on beyond the data uploaded before each replay (tokens,
/// positions, KV tables, capacities) and the workspace it was captured in (the graphs live
/// in that workspace and go with it): the row count, whether the row-wise argmax is in
/// it, and the modes that change the launches (the decode products on `mmv.cu` and how,
/// the forced matvec choices). The program and its fusion plan are the weights' (every
/// decoder of one upload has a clone of one program).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct GraphKey {
    rows: usize,
    argmax: bool,
    /// `CudaDecoder::mmv_mode`: `off`, `on` or `staged`.
    mmv: &'static str,
    mv: MatvecOpts,
    /// The decoders of the group in order, only when the step reads a decoder's own
    /// buffers (an unfused attention: [`super::rows_attention`]); empty otherwise.
    pinned: Vec<u64>,
}

/// Counters of a workspace's captured steps (for receipts and logs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchGraphStats {
    /// Graphs held now (at most [`BatchGraphs::MAX`]).
    pub held: usize,
    /// Steps captured (each then launched once).
    pub captures: usize,
    /// Steps replayed from a held graph.
    pub replays: usize,
    /// Graphs dropped to make room (least recently used first).
    pub evictions: usize,
    /// Captures that failed (the step then ran eagerly).
    pub failed: usize,
}

/// The captured steps of a workspace, least recently used first (at most
/// [`BatchGraphs::MAX`]; a key not held captures anew and evicts the least recently used).
#[derive(Default)]
pub(super) struct BatchGraphs {
    held: Vec<(GraphKey, StepGraph)>,
    stats: BatchGraphStats,
}

impl BatchGraphs {
    pub(super) const MAX: usize = 16;

    /// The graph held under `key`, now the most recently used.
    fn touch(&mut self, key: &GraphKey) -> Option<&StepGraph> {
        lru_touch(&mut self.held, key)
    }

    /// Hold `g` under `key` (replacing one held under it), evicting the least recently used
    /// past [`BatchGraphs::MAX`].
    fn insert(&mut self, key: GraphKey, g: StepGraph) {
        lru_insert(&mut self.held, key, g, Self::MAX, &mut self.stats.evictions);
    }

    pub(super) fn stats(&self) -> BatchGraphStats {
        BatchGraphStats {
            held: self.held.len(),
            ..self.stats
        }
    }
}

/// The value held under `key` in a list kept least recently used first, moved to the end.
fn lru_touch<'a, K: PartialEq, V>(held: &'a mut Vec<(K, V)>, key: &K) -> Option<&'a V> {
    let i = held.iter().position(|(k, _)| k == key)?;
    let e = held.remove(i);
    held.push(e);
    held.last().map(|(_, v)| v)
}

/// Insert into a list kept least recently used first, at most `max` long.
fn lru_insert<K: PartialEq, V>(
    held: &mut Vec<(K, V)>,
    key: K,
    v: V,
    max: usize,
    evictions: &mut usize,
) {
    held.retain(|(k, _)| *k != key);
    while held.len() >= max.max(1) {
        held.remove(0);
        *evictions += 1;
    }
    held.push((key, v));
}

impl CudaDecoder {
    /// The batched step's CUDA graphs held by the workspace of this decoder's weights, and
    /// the captures that failed there (each of those steps ran eagerly); `(0, 0)` without a
    /// workspace, or when every batched step ran eagerly (`ASSAY_BATCH_GRAPH=0`, a planted
    /// fault). For receipts: whether a timed batched step was graphed.
    pub fn batch_graph_counts(&self) -> (usize, usize) {
        let s = self.batch_graph_stats();
        (s.held, s.failed)
    }

    /// The counters of the batched step's graphs in the workspace of this decoder's
    /// weights (shared by every decoder of the upload); all zero without a workspace.
    pub fn batch_graph_stats(&self) -> BatchGraphStats {
        super::lock_slot(&self.batch)
            .as_ref()
            .map_or_else(BatchGraphStats::default, |w| w.graphs.stats())
    }
}

/// Whether the body's plan runs an attention unfused (per row on each decoder's own KV
/// cache and scratch: [`super::rows_attention`]).
fn reads_decoder_buffers(lead: &CudaDecoder) -> bool {
    lead.plan.iter().any(|s| {
        s.fused.is_none()
            && lead
                .program
                .body
                .iter()
                .skip(s.first)
                .take(s.len)
                .any(|op| matches!(op, Op::Attention(_)))
    })
}

/// Run the group's step as a CUDA graph: replay the one captured for this row count and
/// these modes, or capture it now (nothing runs during capture) and launch it. The graph
/// holds exactly the launches of [`group_body`] (without a planted fault), with the
/// attention grids over every split of the capacity (the same bits: kernel-check
/// `attention_rows` compares both grids), reading the tokens, positions and KV tables
/// [`upload_step`](super::ws::upload_step) wrote. `Ok(false)`: the capture failed (logged
/// once per workspace; the caller runs the step eagerly).
pub(super) fn graph_step(
    lead: &mut CudaDecoder,
    rest: &mut [&mut CudaDecoder],
    ws: &mut BatchWs,
    argmax: bool,
    n: usize,
) -> Result<bool, CudaError> {
    let pinned = if reads_decoder_buffers(lead) {
        std::iter::once(lead.id)
            .chain(rest.iter().map(|d| d.id))
            .collect()
    } else {
        Vec::new()
    };
    let key = GraphKey {
        rows: n,
        argmax,
        mmv: lead.mmv_mode(),
        mv: lead.mv,
        pinned,
    };
    if let Some(g) = ws.graphs.touch(&key) {
        g.launch()?;
        ws.graphs.stats.replays += 1;
        return Ok(true);
    }
    let stream = Arc::clone(lead.gpu.stream());
    lead.swap_batch(ws);
    ws.capturing = true;
    let captured = capture_stream(&stream, || group_body(lead, rest, ws, argmax, None, n));
    ws.capturing = false;
    lead.swap_batch(ws);
    match captured {
        Ok(g) => {
            g.launch()?;
            ws.graphs.insert(key, g);
            ws.graphs.stats.captures += 1;
            let s = ws.graphs.stats();
            tracing::info!(
                rows = n,
                argmax,
                captures = s.captures,
                replays = s.replays,
                evictions = s.evictions,
                held = s.held,
                "batched step: graph captured"
            );
            Ok(true)
        }
        Err(e) => {
            if ws.graphs.stats.failed == 0 {
                tracing::warn!("batched step: graph capture failed ({e}); running eagerly");
            }
            ws.graphs.stats.failed += 1;
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_graph_switch_is_strict() {
        // On by default (session 19's A/B); `0` is the eager rollback.
        assert_eq!(parse_batch_graph(None), Ok(true));
        assert_eq!(parse_batch_graph(Some("")), Ok(true));
        assert_eq!(parse_batch_graph(Some("1")), Ok(true));
        assert_eq!(parse_batch_graph(Some(" 1 ")), Ok(true));
        assert_eq!(parse_batch_graph(Some("0")), Ok(false));
        assert_eq!(parse_batch_graph(Some(" 0 ")), Ok(false));
        for bad in ["yes", "2", "on"] {
            assert!(parse_batch_graph(Some(bad)).is_err(), "{bad}");
        }
    }

    fn key(rows: usize, argmax: bool) -> GraphKey {
        GraphKey {
            rows,
            argmax,
            mmv: "off",
            mv: MatvecOpts::default(),
            pinned: Vec::new(),
        }
    }

    #[test]
    fn graph_keys_are_row_counts_and_modes_not_decoders() {
        // Two groups of other decoders with the same row count and modes: one key.
        assert_eq!(key(4, true), key(4, true));
        assert_ne!(key(4, true), key(5, true));
        assert_ne!(key(4, true), key(4, false));
        let on = GraphKey {
            mmv: "on",
            ..key(4, true)
        };
        assert_ne!(key(4, true), on);
        let staged = GraphKey {
            mmv: "staged",
            ..key(4, true)
        };
        assert_ne!(on, staged);
        let wr = GraphKey {
            mv: MatvecOpts {
                wr: Some(true),
                ..MatvecOpts::default()
            },
            ..key(4, true)
        };
        assert_ne!(key(4, true), wr);
        // A body that reads the decoders' own buffers keys by them, in order.
        let pin = |ids: &[u64]| GraphKey {
            pinned: ids.to_vec(),
            ..key(2, true)
        };
        assert_eq!(pin(&[1, 2]), pin(&[1, 2]));
        assert_ne!(pin(&[1, 2]), pin(&[2, 1]));
        assert_ne!(pin(&[1, 2]), key(2, true));
    }

    #[test]
    fn the_lru_evicts_the_least_recently_used() {
        let mut held: Vec<(usize, &str)> = Vec::new();
        let mut ev = 0;
        for k in 0..3 {
            lru_insert(&mut held, k, "g", 3, &mut ev);
        }
        assert_eq!(ev, 0);
        // Re-inserting a held key replaces it without an eviction.
        lru_insert(&mut held, 1, "h", 3, &mut ev);
        assert_eq!(ev, 0);
        assert_eq!(held.iter().map(|e| e.0).collect::<Vec<_>>(), vec![0, 2, 1]);
        // A replay makes its key the most recently used.
        assert_eq!(lru_touch(&mut held, &0), Some(&"g"));
        assert_eq!(lru_touch(&mut held, &9), None);
        assert_eq!(held.iter().map(|e| e.0).collect::<Vec<_>>(), vec![2, 1, 0]);
        lru_insert(&mut held, 7, "g", 3, &mut ev);
        assert_eq!(ev, 1);
        assert_eq!(held.iter().map(|e| e.0).collect::<Vec<_>>(), vec![1, 0, 7]);
        assert_eq!(held.len(), 3);
        assert_eq!(BatchGraphs::MAX, 16);
        let g = BatchGraphs::default();
        assert_eq!(g.stats(), BatchGraphStats::default());
    }
}
