//! Embedding lookup and decode attention kernels.

use super::*;

/// Embedding lookup kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbedKernel {
    /// One block per token, threads over 32-value chunks.
    ChunkPerThread { format: QuantFormat },
}

impl std::fmt::Display for EmbedKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EmbedKernel::ChunkPerThread { format } => {
                write!(f, "embed_{}/chunk-per-thread", format_suffix(*format))
            }
        }
    }
}

/// Choose the embedding kernel for rows of `k` values in `format`.
pub fn choose_embed(format: QuantFormat, k: usize) -> Result<EmbedKernel, CudaError> {
    if format_suffix_of(format).is_none() {
        return Err(CudaError::UnsupportedFormat {
            op: "embed",
            format,
        });
    }
    let (block, _) = format.block_geometry();
    if k == 0 || k % 32 != 0 || k % block != 0 {
        return Err(crate::cuda::shape_err(
            "embed",
            format!("row length {k} is not a block multiple"),
        ));
    }
    Ok(EmbedKernel::ChunkPerThread { format })
}

/// Decode attention kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKernel {
    /// Split the KV range into fixed absolute splits of `split` positions, one block per
    /// (head, split, token), then combine the splits in order.
    SplitKv { split: usize, max_splits: usize },
}

impl std::fmt::Display for AttentionKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttentionKernel::SplitKv { split, max_splits } => {
                write!(
                    f,
                    "attention/split-kv(split={split},max_splits={max_splits})"
                )
            }
        }
    }
}

/// Choose the attention kernel for `n_heads` query heads over `n_kv_heads` KV heads of size
/// `head_dim`, with a KV cache of `capacity` positions.
/// Warps of an attention split block for `group` query heads per KV head: one block stages
/// the KV head's rows once for all of them; 4 warps up to 4 heads, else 8 (2 heads per warp
/// beyond 8). A function of the model's shape alone, so a head's arithmetic never depends on
/// the launch.
pub fn attention_warps(group: usize) -> u32 {
    if group <= 4 { 4 } else { ATT_WARPS }
}

/// The attention split kernel for a head size: the head-size-specialised entry points of
/// `attention.cu` for 64, 128 and 256 dims, the general one otherwise.
pub fn attention_entry(head_dim: usize) -> &'static str {
    match head_dim {
        64 => "attn_partial_d64",
        128 => "attn_partial_d128",
        256 => "attn_partial_d256",
        _ => "attn_partial",
    }
}

/// The entry point of the batched attention over per-row caches (`attn_rows*`), by head
/// size: the kernel of [`attention_entry`] with each row's cache pointers from a table.
pub fn attention_rows_entry(head_dim: usize) -> &'static str {
    match head_dim {
        64 => "attn_rows_d64",
        128 => "attn_rows_d128",
        256 => "attn_rows_d256",
        _ => "attn_rows",
    }
}

/// Tokens per block of the prompt pass's attention (`AP_BQ`: 16 per warp).
pub const ATT_PREFILL_BQ: usize = 64;

/// The head sizes the prompt pass's tensor-core attention has entry points for.
pub const ATT_PREFILL_HEAD_DIMS: [usize; 2] = [64, 128];

/// Dynamic shared memory of `attn_prefill_d<hd>`: q as f16 hi + lo, then two stages of a
/// KV block's K and V rows (rows padded by 8 halves).
pub const fn attention_prefill_shared_bytes(head_dim: usize) -> usize {
    let ld = head_dim + 8;
    (2 * ATT_PREFILL_BQ + 2 * 2 * crate::cuda::sources::consts::ATT_SPLIT) * ld * 2
}

/// The most any attn_prefill entry uses (set as the attention family's limit).
pub const ATT_PREFILL_MAX_SHARED_BYTES: usize = attention_prefill_shared_bytes(128);

/// The prompt pass's attention entry for heads of `head_dim` on a device of compute
/// capability `cc`: `attn_prefill_d64` / `_d128` (flash attention on tensor cores, sm_80+),
/// or `None` (other head sizes keep the split-KV decode kernel in the prompt pass).
pub fn attention_prefill_entry(head_dim: usize, cc: (i32, i32)) -> Option<&'static str> {
    if cc.0 < 8 {
        return None;
    }
    match head_dim {
        64 => Some("attn_prefill_d64"),
        128 => Some("attn_prefill_d128"),
        _ => None,
    }
}

/// The prompt pass's tensor-core attention variants (`kernels/attention.cu`,
/// `ASSAY_PREFILL_ATTN=flash|flash2|flash3|flash4`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefillAttn {
    /// `attn_prefill_d<hd>`: one query head and [`ATT_PREFILL_BQ`] tokens per block, q as
    /// f16 hi + lo.
    Flash,
    /// `attn_prefill_pk_d<hd>`: the bits of [`PrefillAttn::Flash`], with the query heads
    /// of a KV head packed into one block ([`attention_prefill_pack`]) and the heaviest
    /// causal tiles first. sm_90 only.
    Packed,
    /// `attn_prefill_pk1_d<hd>`: the packed layout with q as one f16 part and a base-2
    /// softmax (other bits, within the `prefill` gate's tolerance). sm_90 only.
    PackedF16,
    /// `attn_prefill_pk1s_d<hd>` + `attn_prefill_combine` (flash4): [`PrefillAttn::PackedF16`]'s
    /// arithmetic over one split of [`ATT_PREFILL_SPLIT`] absolute positions per block (grid
    /// tiles x head groups x splits), the splits' partials folded in order by the combine
    /// kernel. A row that sees positions of one split only (every row at a position below
    /// [`ATT_PREFILL_SPLIT`]) gets flash3's bits. Needs scratch ([`attention_prefill_split_plan`]).
    /// sm_90 only.
    PackedSplit,
}

impl PrefillAttn {
    /// `ASSAY_PREFILL_ATTN`'s word for it.
    pub fn name(self) -> &'static str {
        match self {
            PrefillAttn::Flash => "flash",
            PrefillAttn::Packed => "flash2",
            PrefillAttn::PackedF16 => "flash3",
            PrefillAttn::PackedSplit => "flash4",
        }
    }

    /// The variant of an `ASSAY_PREFILL_ATTN` word (`split` is not a variant: `None`).
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "flash" => Some(PrefillAttn::Flash),
            "flash2" => Some(PrefillAttn::Packed),
            "flash3" => Some(PrefillAttn::PackedF16),
            "flash4" => Some(PrefillAttn::PackedSplit),
            _ => None,
        }
    }
}

/// The prompt pass's attention when `ASSAY_PREFILL_ATTN` is unset: `flash3`
/// ([`PrefillAttn::PackedF16`]; on devices without the packed entries the decoder falls
/// back to [`PrefillAttn::Flash`]). Measured on the H200 (session 18, call 1 of its window,
/// research/notes/s18/first: 8B Q4_0 prompt tok/s, same binary, N=5): flash3 27233 / 21778
/// at 2048 / 8192 tokens, flash4 (the split-KV variant, `ASSAY_PREFILL_ATTN=flash4`)
/// 27132 / 21136 — flash4 loses (-2.9% at 8192 tokens), so it stays opt-in.
pub const DEFAULT_PREFILL_ATTN: PrefillAttn = PrefillAttn::PackedF16;

/// Positions per split of flash4 ([`PrefillAttn::PackedSplit`], `ATT_PREFILL_SPLIT` in
/// attention.cu): absolute boundaries, a multiple of the KV block.
pub const ATT_PREFILL_SPLIT: usize = crate::cuda::sources::consts::ATT_PREFILL_SPLIT;

/// Most bytes of flash4's partials (scratch) one launch may use: a pass whose rows need
/// more runs in row groups ([`attention_prefill_split_plan`]).
pub const ATT_PREFILL_SPLIT_SCRATCH_BYTES: usize = 256 << 20;

/// Most splits of a flash4 launch (the grid's z dimension holds at most 65535 blocks).
pub const ATT_PREFILL_MAX_SPLITS: usize = 65535;

/// How flash4 runs a pass ([`attention_prefill_split_plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefillSplitPlan {
    /// Splits per row in the scratch (and the grid's z): ceil(capacity / split).
    pub splits: usize,
    /// Rows (tokens) per launch: the whole pass, or groups of whole tiles (of `tt` tokens)
    /// where the scratch bound asks for fewer (the last group may be shorter).
    pub group_rows: usize,
    /// f32 values of scratch the launches need: group_rows x heads x splits x (hd + 2).
    pub scratch_floats: usize,
}

/// Scratch bytes of one flash4 row (token) of `n_heads` heads of `head_dim` over a cache of
/// `capacity` positions: heads x splits x (hd + 2) x 4 (O, m, l per split).
pub const fn attention_prefill_split_row_bytes(
    n_heads: usize,
    head_dim: usize,
    capacity: usize,
) -> usize {
    let splits = if capacity == 0 {
        1
    } else {
        capacity.div_ceil(ATT_PREFILL_SPLIT)
    };
    n_heads * splits * (head_dim + 2) * 4
}

/// flash4's plan for a pass of `ntok` tokens (`tt` tokens per tile): the split count, the
/// rows per launch that keep the scratch within `budget` bytes (whole tiles where at least
/// one fits, else fewer tokens than a tile), and the scratch size. `None` when one token
/// alone needs more than `budget`, or the splits exceed the grid's z limit
/// ([`ATT_PREFILL_MAX_SPLITS`]) (the caller runs flash3 instead: memory stays bounded for
/// any capacity), or nothing is to be done.
pub fn attention_prefill_split_plan(
    ntok: usize,
    n_heads: usize,
    head_dim: usize,
    capacity: usize,
    tt: usize,
    budget: usize,
) -> Option<PrefillSplitPlan> {
    let row = attention_prefill_split_row_bytes(n_heads, head_dim, capacity);
    if ntok == 0 || row == 0 || row > budget {
        return None;
    }
    if capacity.div_ceil(ATT_PREFILL_SPLIT) > ATT_PREFILL_MAX_SPLITS {
        return None;
    }
    let fit = budget / row;
    let group_rows = if fit >= ntok {
        ntok
    } else if tt > 0 && fit >= tt {
        fit - fit % tt
    } else {
        fit
    };
    let splits = capacity.div_ceil(ATT_PREFILL_SPLIT).max(1);
    Some(PrefillSplitPlan {
        splits,
        group_rows,
        scratch_floats: group_rows * n_heads * splits * (head_dim + 2),
    })
}

/// Most q rows (query heads x tokens) of a packed prompt-attention block (`AP_PK_ROWS`).
pub const ATT_PREFILL_PK_ROWS: usize = 128;

/// The packing of a packed prompt-attention block for `n_heads` query heads over
/// `n_kv_heads`: `(gp, tt)`, gp query heads of one KV head (the largest divisor of the
/// group size G = n_heads / n_kv_heads with at most 8) times tt tokens (16 x (8 / gp),
/// a multiple of 16 so that a warp's 16 rows are one head's), gp x tt <=
/// [`ATT_PREFILL_PK_ROWS`]. `None` when the heads do not share the KV heads evenly.
pub fn attention_prefill_pack(n_heads: usize, n_kv_heads: usize) -> Option<(usize, usize)> {
    if n_kv_heads == 0 || n_heads == 0 || n_heads % n_kv_heads != 0 {
        return None;
    }
    let g = n_heads / n_kv_heads;
    let gp = (1..=8.min(g)).rev().find(|d| g % d == 0)?;
    Some((gp, 16 * (8 / gp)))
}

/// The entry of a prompt-attention variant for heads of `head_dim` on a device of compute
/// capability `cc`; `None` where it has none (the packed ones run on sm_90 only: their
/// shared memory exceeds other devices' opt-in limits).
pub fn attention_prefill_entry_for(
    v: PrefillAttn,
    head_dim: usize,
    cc: (i32, i32),
) -> Option<&'static str> {
    if v != PrefillAttn::Flash && cc.0 < 9 {
        return None;
    }
    attention_prefill_entry(head_dim, cc)?;
    Some(match (v, head_dim) {
        (PrefillAttn::Flash, 64) => "attn_prefill_d64",
        (PrefillAttn::Flash, _) => "attn_prefill_d128",
        (PrefillAttn::Packed, 64) => "attn_prefill_pk_d64",
        (PrefillAttn::Packed, _) => "attn_prefill_pk_d128",
        (PrefillAttn::PackedF16, 64) => "attn_prefill_pk1_d64",
        (PrefillAttn::PackedF16, _) => "attn_prefill_pk1_d128",
        (PrefillAttn::PackedSplit, 64) => "attn_prefill_pk1s_d64",
        (PrefillAttn::PackedSplit, _) => "attn_prefill_pk1s_d128",
    })
}

/// Whether `name` is a packed prompt-attention entry (its shared-memory limit is set only
/// on sm_90).
pub fn is_attention_prefill_pk_entry(name: &str) -> bool {
    name.starts_with("attn_prefill_pk")
}

/// Dynamic shared memory of a prompt-attention variant's launch for heads of `head_dim`
/// and `rows` q rows per block (the packed ones: gp x tt).
pub const fn attention_prefill_variant_shared_bytes(
    v: PrefillAttn,
    head_dim: usize,
    rows: usize,
) -> usize {
    let ld = head_dim + 8;
    let kv = 2 * 2 * crate::cuda::sources::consts::ATT_SPLIT;
    match v {
        PrefillAttn::Flash => attention_prefill_shared_bytes(head_dim),
        PrefillAttn::Packed => (2 * rows + kv) * ld * 2,
        PrefillAttn::PackedF16 | PrefillAttn::PackedSplit => (rows + kv) * ld * 2,
    }
}

/// The most the packed entries use (their limit on sm_90).
pub const ATT_PREFILL_PK_MAX_SHARED_BYTES: usize =
    attention_prefill_variant_shared_bytes(PrefillAttn::Packed, 128, ATT_PREFILL_PK_ROWS);

pub fn choose_attention(
    head_dim: usize,
    n_heads: usize,
    n_kv_heads: usize,
    capacity: usize,
    _dev: &DeviceFacts,
) -> Result<AttentionKernel, CudaError> {
    if head_dim == 0 || head_dim > ATT_MAX_HD || head_dim % 8 != 0 {
        return Err(crate::cuda::shape_err(
            "attention",
            format!("head size {head_dim} is not a multiple of 8 in 8..={ATT_MAX_HD}"),
        ));
    }
    if n_kv_heads == 0 || n_heads == 0 || n_heads % n_kv_heads != 0 {
        return Err(crate::cuda::shape_err(
            "attention",
            format!("{n_heads} query heads do not share {n_kv_heads} KV heads evenly"),
        ));
    }
    if (n_heads / n_kv_heads) * head_dim > ATT_WARPS as usize * ATT_MAX_HD {
        return Err(crate::cuda::shape_err(
            "attention",
            format!(
                "{} query heads per KV head of {head_dim} dims: the attention block stages at most {} query values",
                n_heads / n_kv_heads,
                ATT_WARPS as usize * ATT_MAX_HD
            ),
        ));
    }
    if n_heads / n_kv_heads > ATT_MAX_GROUP {
        return Err(crate::cuda::shape_err(
            "attention",
            format!(
                "{} query heads per KV head; the attention kernel takes at most {ATT_MAX_GROUP}",
                n_heads / n_kv_heads
            ),
        ));
    }
    if capacity == 0 || capacity > i32::MAX as usize / 2 {
        return Err(crate::cuda::shape_err(
            "attention",
            format!("KV capacity {capacity} out of range"),
        ));
    }
    Ok(AttentionKernel::SplitKv {
        split: ATT_SPLIT,
        max_splits: capacity.div_ceil(ATT_SPLIT),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::select::tests::{H200, RTX};

    #[test]
    fn embed_choice() {
        assert_eq!(
            choose_embed(QuantFormat::Q6_K, 2048).unwrap().to_string(),
            "embed_q6_k/chunk-per-thread"
        );
        assert!(choose_embed(QuantFormat::Q6_K, 896).is_err());
        assert!(choose_embed(QuantFormat::IQ4_XS, 256).is_err());
    }

    #[test]
    fn attention_choice() {
        let c = choose_attention(64, 9, 3, 8192, &H200).unwrap();
        assert_eq!(
            c,
            AttentionKernel::SplitKv {
                split: ATT_SPLIT,
                max_splits: 8192 / ATT_SPLIT
            }
        );
        let c = choose_attention(256, 4, 1, 300, &RTX).unwrap();
        assert_eq!(
            c,
            AttentionKernel::SplitKv {
                split: ATT_SPLIT,
                max_splits: 300usize.div_ceil(ATT_SPLIT)
            }
        );
        assert!(choose_attention(512, 8, 8, 100, &H200).is_err());
        assert!(choose_attention(64, 9, 2, 100, &H200).is_err());
        assert!(choose_attention(64, 8, 2, 0, &H200).is_err());
        // 16-byte staging of K/V rows: head sizes are multiples of 8
        assert!(choose_attention(60, 8, 8, 100, &H200).is_err());
        assert!(choose_attention(80, 8, 8, 100, &H200).is_ok());
        // at most 2 heads per warp of the widest block
        assert!(choose_attention(64, ATT_MAX_GROUP, 1, 100, &H200).is_ok());
        // the block's staged q: G * head_dim <= ATT_WARPS * ATT_MAX_HD values
        assert!(choose_attention(128, ATT_MAX_GROUP, 1, 100, &H200).is_ok());
        assert!(choose_attention(256, ATT_MAX_GROUP, 1, 100, &H200).is_err());
        assert!(choose_attention(256, 8, 1, 100, &H200).is_ok());
        assert!(choose_attention(64, 2 * ATT_MAX_GROUP, 1, 100, &H200).is_err());
    }

    #[test]
    fn attention_entry_by_head_size() {
        assert_eq!(attention_entry(128), "attn_partial_d128");
        assert_eq!(attention_entry(64), "attn_partial_d64");
        assert_eq!(attention_entry(256), "attn_partial_d256");
        assert_eq!(attention_entry(80), "attn_partial");
        for hd in [64, 80, 128, 256] {
            assert_eq!(
                attention_rows_entry(hd).strip_prefix("attn_rows"),
                attention_entry(hd).strip_prefix("attn_partial")
            );
        }
    }

    #[test]
    fn attention_warps_by_group() {
        assert_eq!(attention_warps(1), 4);
        assert_eq!(attention_warps(4), 4);
        assert_eq!(attention_warps(7), 8);
        assert_eq!(attention_warps(ATT_MAX_GROUP), ATT_WARPS);
        // every head of the largest group has a warp slot (2 per warp)
        assert!(ATT_MAX_GROUP <= 2 * ATT_WARPS as usize);
        // attention.cu stages the group's q with ATT_QPT = ATT_MAX_HD / 32 values per
        // thread: every accepted shape fits the block it gets
        for g in 1..=2 * ATT_MAX_GROUP {
            for hd in (8..=ATT_MAX_HD).step_by(8) {
                if choose_attention(hd, g, 1, 100, &H200).is_ok() {
                    let threads = attention_warps(g) as usize * 32;
                    assert!(g * hd <= threads * (ATT_MAX_HD / 32), "g={g} hd={hd}");
                }
            }
        }
    }

    #[test]
    fn prefill_attention_entries_and_shared_memory() {
        assert_eq!(
            attention_prefill_entry(128, (9, 0)),
            Some("attn_prefill_d128")
        );
        assert_eq!(
            attention_prefill_entry(64, (8, 0)),
            Some("attn_prefill_d64")
        );
        assert_eq!(attention_prefill_entry(256, (9, 0)), None);
        assert_eq!(attention_prefill_entry(80, (9, 0)), None);
        assert_eq!(attention_prefill_entry(128, (7, 5)), None);
        for hd in ATT_PREFILL_HEAD_DIMS {
            assert!(attention_prefill_entry(hd, (9, 0)).is_some());
        }
        // 128 dims: q hi + lo (2 x 64 rows) and two stages of K and V (4 x 64 rows) of 136.
        assert_eq!(attention_prefill_shared_bytes(128), 6 * 64 * 136 * 2);
        // Two blocks per SM on the H200 (227 KiB).
        const { assert!(2 * ATT_PREFILL_MAX_SHARED_BYTES <= 227 * 1024) };
    }

    #[test]
    fn prefill_attention_variants() {
        for v in [
            PrefillAttn::Flash,
            PrefillAttn::Packed,
            PrefillAttn::PackedF16,
            PrefillAttn::PackedSplit,
        ] {
            assert_eq!(PrefillAttn::parse(v.name()), Some(v));
        }
        assert_eq!(PrefillAttn::parse("flash4"), Some(PrefillAttn::PackedSplit));
        assert_eq!(
            attention_prefill_entry_for(PrefillAttn::PackedSplit, 128, (9, 0)),
            Some("attn_prefill_pk1s_d128")
        );
        assert_eq!(
            attention_prefill_entry_for(PrefillAttn::PackedSplit, 64, (9, 0)),
            Some("attn_prefill_pk1s_d64")
        );
        assert_eq!(
            attention_prefill_entry_for(PrefillAttn::PackedSplit, 128, (8, 0)),
            None
        );
        assert_eq!(
            attention_prefill_entry_for(PrefillAttn::PackedSplit, 256, (9, 0)),
            None
        );
        assert!(is_attention_prefill_pk_entry("attn_prefill_pk1s_d64"));
        // flash4's blocks are flash3's: the same shared memory (two blocks per SM).
        assert_eq!(
            attention_prefill_variant_shared_bytes(PrefillAttn::PackedSplit, 128, 128),
            attention_prefill_variant_shared_bytes(PrefillAttn::PackedF16, 128, 128)
        );
        assert!(
            attention_prefill_variant_shared_bytes(PrefillAttn::PackedSplit, 128, 128)
                <= ATT_PREFILL_PK_MAX_SHARED_BYTES
        );
        assert_eq!(PrefillAttn::parse("split"), None);
        assert_eq!(
            attention_prefill_entry_for(PrefillAttn::Packed, 128, (9, 0)),
            Some("attn_prefill_pk_d128")
        );
        assert_eq!(
            attention_prefill_entry_for(PrefillAttn::PackedF16, 64, (9, 0)),
            Some("attn_prefill_pk1_d64")
        );
        // Packed: sm_90 only; Flash as before.
        assert_eq!(
            attention_prefill_entry_for(PrefillAttn::Packed, 128, (8, 0)),
            None
        );
        assert_eq!(
            attention_prefill_entry_for(PrefillAttn::Flash, 128, (8, 0)),
            Some("attn_prefill_d128")
        );
        assert_eq!(
            attention_prefill_entry_for(PrefillAttn::PackedF16, 256, (9, 0)),
            None
        );
        assert!(is_attention_prefill_pk_entry("attn_prefill_pk1_d128"));
        assert!(!is_attention_prefill_pk_entry("attn_prefill_d128"));
    }

    #[test]
    fn default_prefill_attention_runs_where_flash_does_on_sm90() {
        for hd in ATT_PREFILL_HEAD_DIMS {
            assert!(attention_prefill_entry_for(DEFAULT_PREFILL_ATTN, hd, (9, 0)).is_some());
        }
    }

    #[test]
    fn prefill_attention_packing() {
        // Llama-3.1-8B: G = 4, 4 heads x 32 tokens.
        assert_eq!(attention_prefill_pack(32, 8), Some((4, 32)));
        // SmolLM2-135M: G = 3; Qwen2.5 0.5B: G = 7; 1.5B: G = 6; MHA; G = 16.
        assert_eq!(attention_prefill_pack(9, 3), Some((3, 32)));
        assert_eq!(attention_prefill_pack(14, 2), Some((7, 16)));
        assert_eq!(attention_prefill_pack(12, 2), Some((6, 16)));
        assert_eq!(attention_prefill_pack(8, 8), Some((1, 128)));
        assert_eq!(attention_prefill_pack(32, 2), Some((8, 16)));
        assert_eq!(attention_prefill_pack(10, 4), None);
        assert_eq!(attention_prefill_pack(0, 0), None);
        for nkv in 1..=8 {
            for g in 1..=32 {
                let (gp, tt) = attention_prefill_pack(g * nkv, nkv).unwrap();
                assert_eq!(g % gp, 0);
                assert_eq!(tt % 16, 0);
                assert!(gp * tt <= ATT_PREFILL_PK_ROWS && gp * tt >= 64, "g={g}");
            }
        }
        // Packed (hi + lo): one block per SM at 128 rows of 128 dims; PackedF16: two.
        assert_eq!(
            ATT_PREFILL_PK_MAX_SHARED_BYTES,
            (2 * 128 + 4 * 64) * 136 * 2
        );
        const { assert!(ATT_PREFILL_PK_MAX_SHARED_BYTES <= 227 * 1024) };
        assert!(
            2 * attention_prefill_variant_shared_bytes(PrefillAttn::PackedF16, 128, 128)
                <= 227 * 1024
        );
    }

    #[test]
    fn prefill_attention_split_plan() {
        const { assert!(ATT_PREFILL_SPLIT % crate::cuda::sources::consts::KV_BLOCK == 0) };
        assert_eq!(ATT_PREFILL_SPLIT, 1024);
        assert_eq!(DEFAULT_PREFILL_ATTN, PrefillAttn::PackedF16);
        let b = ATT_PREFILL_SPLIT_SCRATCH_BYTES;
        // 8B (32 heads of 128) at 8192 positions: 8 splits, a 512-token pass in one launch
        // (512 x 32 x 8 x 130 x 4 B = 68 MB).
        let p = attention_prefill_split_plan(512, 32, 128, 8192, 32, b).unwrap();
        assert_eq!(p.splits, 8);
        assert_eq!(p.group_rows, 512);
        assert_eq!(p.scratch_floats, 512 * 32 * 8 * 130);
        assert_eq!(
            attention_prefill_split_row_bytes(32, 128, 8192),
            32 * 8 * 130 * 4
        );
        // One split for a cache of at most the split; at least one for a 0 capacity.
        assert_eq!(
            attention_prefill_split_plan(300, 8, 64, 1000, 32, b)
                .unwrap()
                .splits,
            1
        );
        assert_eq!(attention_prefill_split_row_bytes(8, 64, 0), 8 * 66 * 4);
        // 131072 positions: 128 splits, 2.1 MB per token -> groups of whole 32-token tiles.
        let p = attention_prefill_split_plan(512, 32, 128, 131072, 32, b).unwrap();
        assert_eq!(p.splits, 128);
        let row = 32 * 128 * 130 * 4;
        assert_eq!(p.group_rows, (b / row) / 32 * 32);
        assert_eq!(p.group_rows, 96);
        assert!(p.scratch_floats * 4 <= b);
        // Fewer than a tile fit: groups of the tokens that fit.
        let p = attention_prefill_split_plan(512, 64, 128, 1 << 20, 32, b).unwrap();
        assert!(p.group_rows >= 1 && p.group_rows < 32);
        assert!(p.scratch_floats * 4 <= b);
        // One token over the bound (or nothing to do): no plan (flash3 runs instead).
        assert_eq!(
            attention_prefill_split_plan(512, 64, 128, 1 << 30, 32, b),
            None
        );
        assert_eq!(attention_prefill_split_plan(0, 32, 128, 8192, 32, b), None);
        // More splits than the grid's z holds: flash3 instead.
        let cap = (ATT_PREFILL_MAX_SPLITS + 1) * ATT_PREFILL_SPLIT;
        assert!(attention_prefill_split_row_bytes(1, 64, cap) <= b);
        assert_eq!(attention_prefill_split_plan(1, 1, 64, cap, 128, b), None);
        assert!(attention_prefill_split_plan(1, 1, 64, cap - ATT_PREFILL_SPLIT, 128, b).is_some());
        // Bounded for every capacity, heads and pass.
        for cap in [
            1,
            64,
            1023,
            1024,
            1025,
            8192,
            65536,
            131072,
            1 << 20,
            1 << 29,
        ] {
            for (nh, hd, tt) in [(32, 128, 32), (9, 64, 32), (64, 128, 16), (8, 128, 128)] {
                for n in [1, 31, 512, 4096] {
                    if let Some(p) = attention_prefill_split_plan(n, nh, hd, cap, tt, b) {
                        assert!(p.scratch_floats * 4 <= b, "cap={cap} nh={nh} n={n}");
                        assert!(p.group_rows >= 1 && p.group_rows <= n);
                        assert!(p.group_rows == n || p.group_rows < tt || p.group_rows % tt == 0);
                        assert_eq!(p.splits, cap.div_ceil(ATT_PREFILL_SPLIT));
                        assert!(p.splits <= ATT_PREFILL_MAX_SPLITS);
                    }
                }
            }
        }
    }
}
