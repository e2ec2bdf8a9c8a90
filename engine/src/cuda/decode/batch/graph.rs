//! The batched step as a CUDA graph per group of decoders (the default; `ASSAY_BATCH_GRAPH=0`
//! runs it eagerly): the switch ([`batch_graphs_from_env`]), the key a captured group step is
//! kept under ([`GraphKey`]), the captured steps of a workspace ([`BatchGraphs`]), the
//! capture / replay of one group's step ([`graph_step`]) and what a decoder's workspace
//! holds ([`CudaDecoder::batch_graph_counts`], for receipts).
//!
//! Default on since session 19's same-window A/B (same binary, logs only:
//! research/notes/s19/t-ab-batch-graph.log vs t-ab-batch-eager.log), graph vs eager: 4 rows
//! 491.4 vs 484.3 tok/s, 16 rows 612.6 vs 610.7, 64 rows with `--mmv` 2463.4 vs 2402.6; the
//! `batch` gate was green with the graphs in session 9 (the same bits as eager: the graph
//! holds exactly the eager launches, with the attention grids over every split).

use super::super::graph::{StepGraph, capture_stream};
use super::{BatchWs, CudaDecoder, group_body, model_err};
use crate::cuda::CudaError;
use std::sync::Arc;

/// Whether the batched step runs as a CUDA graph per group: on by default (unset, empty or
/// `ASSAY_BATCH_GRAPH=1`), off with `ASSAY_BATCH_GRAPH=0` (eager launches). Read once per
/// process; any other value is an error.
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

/// What a captured group step depends on beyond the data uploaded before each replay
/// (tokens, positions, KV tables, capacities): the decoders of the group in order (their
/// identities: the graph holds their head buffers and the leader's weights and scratch),
/// the row count and whether the row-wise argmax is in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct GraphKey {
    ids: Vec<u64>,
    argmax: bool,
}

/// The captured group steps of a workspace, most recent last (at most
/// [`BatchGraphs::MAX`]; a group of other decoders or another row count captures anew).
#[derive(Default)]
pub(super) struct BatchGraphs {
    held: Vec<(GraphKey, StepGraph)>,
    /// Captures that failed (the step then runs eagerly; for reports).
    failed: usize,
}

impl BatchGraphs {
    const MAX: usize = 8;

    pub(super) fn get(&self, key: &GraphKey) -> Option<&StepGraph> {
        self.held.iter().find(|(k, _)| k == key).map(|(_, g)| g)
    }

    pub(super) fn insert(&mut self, key: GraphKey, g: StepGraph) {
        self.held.retain(|(k, _)| *k != key);
        if self.held.len() >= Self::MAX {
            self.held.remove(0);
        }
        self.held.push((key, g));
    }
}

impl CudaDecoder {
    /// The batched step's CUDA graphs held by the workspace this decoder holds, and the
    /// captures that failed there (each of those steps ran eagerly); `(0, 0)` without a
    /// workspace, or when every batched step ran eagerly (`ASSAY_BATCH_GRAPH=0`, a planted
    /// fault). For receipts: whether a timed batched step was graphed.
    pub fn batch_graph_counts(&self) -> (usize, usize) {
        self.batch
            .as_ref()
            .map_or((0, 0), |w| (w.graphs.held.len(), w.graphs.failed))
    }
}

/// Run the group's step as a CUDA graph: replay the one captured for these decoders and
/// this row count, or capture it now (nothing runs during capture) and launch it. The
/// graph holds exactly the launches of [`group_body`] (without a planted fault), with the
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
    let key = GraphKey {
        ids: std::iter::once(lead.id)
            .chain(rest.iter().map(|d| d.id))
            .collect(),
        argmax,
    };
    if let Some(g) = ws.graphs.get(&key) {
        g.launch()?;
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
            Ok(true)
        }
        Err(e) => {
            if ws.graphs.failed == 0 {
                tracing::warn!("batched step: graph capture failed ({e}); running eagerly");
            }
            ws.graphs.failed += 1;
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

    #[test]
    fn graph_keys_differ_by_group_order_and_argmax() {
        let k = |ids: &[u64], argmax| GraphKey {
            ids: ids.to_vec(),
            argmax,
        };
        assert_eq!(k(&[1, 2], true), k(&[1, 2], true));
        assert_ne!(k(&[1, 2], true), k(&[2, 1], true));
        assert_ne!(k(&[1, 2], true), k(&[1, 2, 3], true));
        assert_ne!(k(&[1, 2], true), k(&[1, 2], false));
    }
}
