//! The paged KV cache's layout, and the row tables of the batched launches.
//!
//! A layer's K (and V) cache is a pool of blocks of [`KV_BLOCK`] positions, each block
//! `[n_kv_heads][KV_BLOCK][head_dim]` f16, and a sequence reads and writes it through its
//! block table (`i32` per block of positions: entry `i` names the pool block holding
//! positions `i * KV_BLOCK ..`). A block is one attention split, so the arithmetic (and the
//! bits) of a position do not depend on where its block lies. [`kv_pool_offset`] is the
//! layout on the host; the kernels' is `kv_off` (common.cuh). The wrappers check lengths
//! (`check_pages`, [`kv_row_table`]); the entries of a table must name blocks of the pool
//! (the engine writes every table from its own allocator: no table comes from user input).

use super::{int, need, rd};
use crate::cuda::sources::consts::KV_BLOCK;
use crate::cuda::{CudaError, Gpu};
use cudarc::driver::{CudaSlice, DevicePtr};
use half::f16;

/// Blocks of a block table covering `capacity` positions.
pub fn kv_blocks(capacity: usize) -> usize {
    capacity.div_ceil(KV_BLOCK)
}

/// Halves of one pool block of `n_kv_heads` heads of `head_dim`.
pub fn kv_block_len(n_kv_heads: usize, head_dim: usize) -> usize {
    n_kv_heads * KV_BLOCK * head_dim
}

/// The offset in a pool of (KV head `h`, position `p`, dim 0) for block table `bt`: the
/// host's copy of the kernels' `kv_off`. `None` when `p` lies past the table or its entry
/// is negative.
pub fn kv_pool_offset(
    bt: &[i32],
    h: usize,
    p: usize,
    n_kv_heads: usize,
    head_dim: usize,
) -> Option<usize> {
    let b = usize::try_from(*bt.get(p / KV_BLOCK)?).ok()?;
    Some(((b * n_kv_heads + h) * KV_BLOCK + p % KV_BLOCK) * head_dim)
}

/// A logical cache (`[n_kv_heads][capacity][head_dim]`) laid out in a pool of `n_blocks`
/// blocks through table `bt` (pool slots no table entry names hold `fill`).
pub fn to_paged<T: Copy>(
    logical: &[T],
    bt: &[i32],
    n_blocks: usize,
    n_kv_heads: usize,
    capacity: usize,
    head_dim: usize,
    fill: T,
) -> Option<Vec<T>> {
    let mut pool = vec![fill; n_blocks * kv_block_len(n_kv_heads, head_dim)];
    for h in 0..n_kv_heads {
        for p in 0..capacity {
            let o = kv_pool_offset(bt, h, p, n_kv_heads, head_dim)?;
            let l = (h * capacity + p) * head_dim;
            pool.get_mut(o..o + head_dim)?
                .copy_from_slice(logical.get(l..l + head_dim)?);
        }
    }
    Some(pool)
}

/// The logical cache (`[n_kv_heads][capacity][head_dim]`) that table `bt` reads from `pool`.
pub fn from_paged<T: Copy>(
    pool: &[T],
    bt: &[i32],
    n_kv_heads: usize,
    capacity: usize,
    head_dim: usize,
) -> Option<Vec<T>> {
    let mut out = Vec::with_capacity(n_kv_heads * capacity * head_dim);
    for h in 0..n_kv_heads {
        for p in 0..capacity {
            let o = kv_pool_offset(bt, h, p, n_kv_heads, head_dim)?;
            out.extend_from_slice(pool.get(o..o + head_dim)?);
        }
    }
    Some(out)
}

/// Check a pool and its table for `capacity` positions: the pools hold whole blocks (at
/// least one), the table covers the capacity.
pub(super) fn check_pages(
    op: &'static str,
    k_len: usize,
    v_len: usize,
    bt_len: usize,
    n_kv_heads: usize,
    head_dim: usize,
    capacity: usize,
) -> Result<(), CudaError> {
    let block = kv_block_len(n_kv_heads, head_dim);
    if block == 0 || k_len < block || v_len < block || k_len % block != 0 || v_len % block != 0 {
        return Err(crate::cuda::shape_err(
            op,
            format!("KV pools of {k_len} / {v_len} halves are not whole blocks of {block}"),
        ));
    }
    need(op, "block table", bt_len, kv_blocks(capacity))
}

/// One row's KV cache in a batched launch ([`super::attention_rows`],
/// [`super::rope_kv_rows`]): the device addresses of a layer's K and V pools and of the
/// row's block table, their lengths (halves, entries), and the capacity in positions the
/// table covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvRow {
    pub k: u64,
    pub v: u64,
    pub bt: u64,
    pub k_len: usize,
    pub v_len: usize,
    pub bt_len: usize,
    pub capacity: usize,
}

impl KvRow {
    /// The row of one layer's pools and a sequence's block table.
    pub fn of(
        gpu: &Gpu,
        k: &CudaSlice<f16>,
        v: &CudaSlice<f16>,
        bt: &CudaSlice<i32>,
        capacity: usize,
    ) -> KvRow {
        KvRow {
            k: rd(gpu, k),
            v: rd(gpu, v),
            bt: rd(gpu, bt),
            k_len: k.len(),
            v_len: v.len(),
            bt_len: bt.len(),
            capacity,
        }
    }
}

/// The pointer table of a batched launch, `[k0, v0, bt0, k1, v1, bt1, ...]` (row `t`'s
/// pools at `3t`, `3t + 1`, its block table at `3t + 2`), and the rows' capacities, after
/// checking every row as the one-row wrappers do (whole pool blocks, a table covering the
/// capacity, a capacity that fits an `i32`): the kernels trust the table.
pub fn kv_row_table(
    rows: &[KvRow],
    n_kv_heads: usize,
    head_dim: usize,
) -> Result<(Vec<u64>, Vec<i32>), CudaError> {
    const OP: &str = "kv rows";
    let mut ptrs = Vec::with_capacity(3 * rows.len());
    let mut caps = Vec::with_capacity(rows.len());
    for (t, r) in rows.iter().enumerate() {
        let pages = check_pages(
            OP, r.k_len, r.v_len, r.bt_len, n_kv_heads, head_dim, r.capacity,
        );
        if r.capacity == 0 || r.k == 0 || r.v == 0 || r.bt == 0 || pages.is_err() {
            return Err(crate::cuda::shape_err(
                OP,
                format!(
                    "row {t}: pools of {} / {} halves at {:#x} / {:#x}, table of {} at {:#x}, \
                     capacity {} ({})",
                    r.k_len,
                    r.v_len,
                    r.k,
                    r.v,
                    r.bt_len,
                    r.bt,
                    r.capacity,
                    pages
                        .err()
                        .map_or_else(|| "null address".to_string(), |e| e.to_string())
                ),
            ));
        }
        ptrs.push(r.k);
        ptrs.push(r.v);
        ptrs.push(r.bt);
        caps.push(int(OP, "capacity", r.capacity)?);
    }
    Ok((ptrs, caps))
}

/// A pointer table on the device for rows `0..ntok` of a batched launch: `ptrs` holds
/// `3 * ntok` addresses from [`kv_row_table`], `caps` the `ntok` capacities, and
/// `capacity` is at least the largest of them (it sizes the split layout of the scratch).
/// `max_pos`, when known, bounds every row's position (the attention's grid then stops at
/// the last split any row reaches: the blocks past it would exit at once).
pub struct KvRowsDev<'a> {
    pub ptrs: &'a dyn DevicePtr<u64>,
    pub caps: &'a dyn DevicePtr<i32>,
    pub capacity: usize,
    pub max_pos: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    // A row of `blocks` pool blocks of 2 heads x 8 dims and a table of `entries`.
    fn row(k: u64, capacity: usize, blocks: usize, entries: usize) -> KvRow {
        let len = blocks * kv_block_len(2, 8);
        KvRow {
            k,
            v: k + 0x1000,
            bt: k + 0x2000,
            k_len: len,
            v_len: len,
            bt_len: entries,
            capacity,
        }
    }

    #[test]
    fn kv_row_table_interleaves_rows_and_checks_each_cache() {
        let rows = [row(0x10000, 16, 1, 1), row(0x20000, 130, 3, 3)];
        let (p, c) = kv_row_table(&rows, 2, 8).unwrap();
        assert_eq!(
            p,
            vec![0x10000, 0x11000, 0x12000, 0x20000, 0x21000, 0x22000]
        );
        assert_eq!(c, vec![16, 130]);
        // a table shorter than the capacity needs, a pool of a partial block, an empty
        // capacity, a null address
        let mut partial = row(0x10000, 16, 1, 1);
        partial.k_len -= 1;
        for bad in [
            row(0x10000, 130, 3, 2),
            partial,
            row(0x10000, 0, 1, 1),
            row(0, 16, 1, 1),
        ] {
            let e = kv_row_table(&[rows[0], bad], 2, 8).unwrap_err().to_string();
            assert!(e.contains("row 1"), "{e}");
        }
        assert_eq!(kv_row_table(&[], 2, 8).unwrap().0.len(), 0);
    }

    #[test]
    fn paged_layout_round_trips_through_any_table() {
        let (nkv, hd, cap) = (3, 8, 2 * KV_BLOCK + 5);
        let logical: Vec<u32> = (0..(nkv * cap * hd) as u32).collect();
        assert_eq!(kv_blocks(cap), 3);
        for bt in [vec![0, 1, 2], vec![4, 0, 2], vec![1, 3, 0]] {
            let pool = to_paged(&logical, &bt, 5, nkv, cap, hd, u32::MAX).unwrap();
            assert_eq!(pool.len(), 5 * kv_block_len(nkv, hd));
            assert_eq!(from_paged(&pool, &bt, nkv, cap, hd).unwrap(), logical);
            // position p of head h sits in block bt[p / KV_BLOCK] at row p % KV_BLOCK
            let (h, p) = (2, KV_BLOCK + 7);
            let o = kv_pool_offset(&bt, h, p, nkv, hd).unwrap();
            let b = bt[1] as usize;
            assert_eq!(o, ((b * nkv + h) * KV_BLOCK + 7) * hd);
            assert_eq!(pool[o], ((h * cap + p) * hd) as u32);
        }
        // the identity table of a whole-capacity pool is block-major, not [nkv][cap][hd]
        let pool = to_paged(&logical, &[0, 1, 2], 3, nkv, cap, hd, 0).unwrap();
        assert_ne!(pool[..logical.len()], logical[..]);
        // a table too short, a block past the pool, a negative entry
        assert!(to_paged(&logical, &[0, 1], 3, nkv, cap, hd, 0).is_none());
        assert!(to_paged(&logical, &[0, 1, 3], 3, nkv, cap, hd, 0).is_none());
        assert!(kv_pool_offset(&[-1], 0, 0, nkv, hd).is_none());
    }
}
