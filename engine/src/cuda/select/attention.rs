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
}
