//! Wrappers of `gemmt.cu`: the tiled prompt pass. A launch multiplies x as staged by
//! [`gemmt_stage_x`] (the staging `gemm.cu` shares) by 16-bit weights: F16 where it lies,
//! BF16 where it lies (x in two bf16 parts) or converted to f16 in the tile loop (x in one
//! f16 part, the default), Q4_0 / Q8_0 decoded to f16 in the tile loop, the other quants
//! decoded first into [`GemmtScratch`] (`gemmt_dq_<fmt>`, f16), in one tiled GEMM over all
//! the pass's rows (`gemmt_<kind>[_glu]_m<BM>_p<P>`: BM tokens per tile, P parts of x).
//! The plain launch takes up to [`GEMMT_MAX_SEGS`] products of one x ([`gemmt_group`]: q,
//! k and v). Section 4's tensor maps (the TMA kernel's last parameter) are built in the
//! submodule `tmap`.
//!
//! A token's outputs depend only on its own x, the weights and k (one accumulator per output
//! fed in k order): kernel-check's `gemmt` cases compare each row alone with the same row
//! among many, tile heights and groups with single products, bit for bit. They are neither
//! `gemm.cu`'s bits nor the row path's: the weights (quants) and x (one part) are rounded to
//! 16 bits; kernel-check and the `prefill` gate bound the difference.

mod tmap;

use super::{Arg, DeviceWeight, GemmX, XStaging, int, launch, launch_with, need, rd, wr};
use crate::cuda::select::{
    self, Decoded, GEMMT_BK, GEMMT_BN, GEMMT_MAX_SEGS, GEMMT_TILES_M, GEMMW_BK, GEMMW_BM,
    gemmt_decoded, gemmt_shared_bytes,
};
use crate::cuda::{CudaError, Gpu, shape_err};
use crate::quant::QuantFormat;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig};
use tmap::{GtmMaps, tm_maps};

/// How the tiled pass runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GemmtOpts {
    /// Parts of x multiplied: 2 (f16 hi + lo, or bf16 hi + mid: near-f32 activations for
    /// twice the MMAs), 1 (x rounded to 16 bits), or `None`: the weights' format decides
    /// ([`select::gemmt_x_parts`]).
    pub parts: Option<u32>,
    /// Tokens per tile (one of [`GEMMT_TILES_M`]), or `None`: the grid decides
    /// ([`select::gemmt_tile_m`]). Changes no bits.
    pub tile_m: Option<usize>,
    /// The planted fault of the `prefill` gate: every row's first chunk decodes to zeros
    /// (F16 / BF16 weights, and the formats decoded in the tile loop, then go through the
    /// scratch decode).
    pub fault: bool,
    /// Decode Q4_0 / Q8_0 / BF16 into the scratch first instead of inside the tile loop
    /// ([`select::gemmt_fused`]; the same bits).
    pub scratch_decode: bool,
    /// The warpgroup-MMA kernel (`gemmt_<kind>[_glu]_w<BN>`, sm_90a): `None` where
    /// [`select::gemmt_wgmma`] says so, `Some(false)` never (the mma.sync kernel), `Some(true)`
    /// wherever the device and x's parts allow it, whatever the rows. The same bits.
    pub wgmma: Option<bool>,
    /// Weight rows per section 3 block (one of [`select::GEMMW_BN`]; section 4: tokens per
    /// block, one of [`select::GEMMTM_TN`]), or `None`: the grid decides
    /// ([`select::gemmw_tile_n`], [`select::gemmtm_tile_n`]). Changes no bits.
    pub wgmma_tile_n: Option<usize>,
    /// Section 4's TMA kernel (`gemmt_<kind>[_glu]_tm<TN>`, sm_90a) for the launches that
    /// take the warpgroup MMA: `None` (the default) or `Some(true)` wherever
    /// [`select::gemmt_tm`] allows it, `Some(false)` never (section 3). The same bits.
    pub tm: Option<bool>,
}

impl GemmtOpts {
    /// The parts of x for weights of `format`.
    pub fn parts_for(&self, format: crate::quant::QuantFormat) -> u32 {
        self.parts.unwrap_or_else(|| select::gemmt_x_parts(format))
    }

    /// Whether weights of `format` are decoded inside the tile loop.
    pub fn fused_for(&self, format: crate::quant::QuantFormat) -> bool {
        !self.fault && !self.scratch_decode && select::gemmt_fused(format, self.parts_for(format))
    }

    /// Whether a launch over `n` tokens of `k` values with x in `parts` parts runs on the
    /// warpgroup MMA (k a multiple of its 64-value stages).
    pub fn wgmma_for(&self, gpu: &Gpu, parts: u32, n: usize, k: usize) -> bool {
        let cc = gpu.info().compute_capability;
        if k % GEMMW_BK != 0 {
            return false;
        }
        match self.wgmma {
            None => select::gemmt_wgmma(cc, parts, n),
            Some(on) => on && select::gemmt_wgmma(cc, parts, select::GEMMW_BM),
        }
    }

    /// Whether a warpgroup-MMA launch of weight kind `kind` ([`kind_name`]) takes section 4
    /// (k values, the products' rows `seg_rows`; gate + up: the gate's).
    pub fn tm_for(&self, gpu: &Gpu, parts: u32, kind: &str, k: usize, seg_rows: &[usize]) -> bool {
        let Some(f) = tm_kind(kind) else {
            return false;
        };
        self.tm != Some(false)
            && select::gemmt_tm(gpu.info().compute_capability, parts, f, k, seg_rows)
    }

    /// How x must be staged for weights of `format` ([`gemmt_stage_x`]): bf16 parts for
    /// BF16 weights read in place (two parts), f16 otherwise.
    pub fn staging_for(&self, format: crate::quant::QuantFormat) -> XStaging {
        match gemmt_decoded(format, self.parts_for(format)) {
            Some(Decoded::Bf16) => XStaging::Bf16,
            _ => XStaging::F16,
        }
    }
}

/// The format of a section 4 entry's weight kind ([`kind_name`]: `f16`, `q4_0`, `q8_0`,
/// `bf16`; one of [`select::GEMMTM_KINDS`]), `None` for kinds it has no entry for. `bf16`
/// reaches section 4 only with x in one part (BF16 converted to f16 in the loop): with two
/// parts, [`select::gemmt_tm`] refuses every kind.
fn tm_kind(kind: &str) -> Option<QuantFormat> {
    select::GEMMTM_KINDS
        .into_iter()
        .find(|&f| select::format_suffix(f) == kind)
}

/// Stage `n` rows of x (`[n][k]` f32, optionally RMS-normed first) for the tiled kernel's
/// products of `format` run with `opts` ([`GemmtOpts::staging_for`]).
#[allow(clippy::too_many_arguments)]
pub fn gemmt_stage_x(
    gpu: &Gpu,
    format: crate::quant::QuantFormat,
    opts: GemmtOpts,
    x: &dyn DevicePtr<f32>,
    n: usize,
    k: usize,
    norm: Option<super::NormIn<'_>>,
    xs: &mut GemmX,
) -> Result<(), CudaError> {
    super::gemm::stage(gpu, opts.staging_for(format), x, n, k, norm, xs)
}

/// One product of a [`gemmt_group`] launch: its weights, bias and output (`n` rows of
/// `w.rows`).
pub struct GemmtSeg<'a> {
    pub w: &'a DeviceWeight,
    pub bias: Option<&'a dyn DevicePtr<f32>>,
    pub y: &'a mut dyn DevicePtrMut<f32>,
}

/// The decoded weights of the product being multiplied (grown to the largest product on
/// first use; one per decoder's prompt pass).
#[derive(Default)]
pub struct GemmtScratch {
    buf: Option<CudaSlice<u16>>,
}

impl GemmtScratch {
    pub fn new() -> GemmtScratch {
        GemmtScratch::default()
    }

    /// Bytes held on the device.
    pub fn bytes(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len() * 2)
    }

    fn ensure(&mut self, gpu: &Gpu, len: usize) -> Result<&mut CudaSlice<u16>, CudaError> {
        if self.buf.as_ref().is_none_or(|b| b.len() < len) {
            self.buf = None; // free the old one before allocating the larger
            self.buf = Some(gpu.zeros(len)?);
        }
        self.buf
            .as_mut()
            .ok_or_else(|| shape_err("gemmt", "decoded-weight scratch missing"))
    }
}

/// The weights of `ws` (for one launch) as the kernel reads them: each matrix's address, in
/// place (F16 / BF16, unless the fault is planted; Q4_0 / Q8_0 decoded in the tile loop) or
/// decoded into consecutive rows of `scratch` (16-bit floats).
fn weights16(
    gpu: &Gpu,
    ws: &[&DeviceWeight],
    scratch: &mut GemmtScratch,
    opts: GemmtOpts,
) -> Result<Vec<u64>, CudaError> {
    const OP: &str = "gemmt_dq";
    let fault = opts.fault;
    // Read where they lie: 16-bit floats, or weights the tile loop decodes.
    let in_place = |w: &DeviceWeight| {
        (!fault
            && select::gemmt_in_place(w.format, opts.parts_for(w.format))
            && w.row_bytes == 2 * w.cols)
            || opts.fused_for(w.format)
    };
    let decoded: usize = ws
        .iter()
        .filter(|w| !in_place(w))
        .map(|w| w.rows * w.cols)
        .sum();
    let base = if decoded > 0 {
        wr(gpu, scratch.ensure(gpu, decoded)?)
    } else {
        0
    };
    let mut off = 0usize;
    let mut out = Vec::with_capacity(ws.len());
    for w in ws {
        need(OP, "weight", w.data.len(), w.rows * w.row_bytes)?;
        if in_place(w) {
            out.push(rd(gpu, &w.data));
            continue;
        }
        let kind = gemmt_decoded(w.format, opts.parts_for(w.format)).ok_or(
            CudaError::UnsupportedFormat {
                op: OP,
                format: w.format,
            },
        )?;
        let dst = base + 2 * off as u64;
        let chunks = w.rows * (w.cols / 32);
        let blocks =
            u32::try_from(chunks.div_ceil(256)).map_err(|_| shape_err(OP, "too many rows"))?;
        launch(
            gpu,
            &format!("gemmt_dq_{}", select::format_suffix(w.format)),
            super::cfg1(blocks, 256),
            &[
                Arg::Ptr(rd(gpu, &w.data)),
                Arg::U64(w.row_bytes as u64),
                Arg::I32(int(OP, "rows", w.rows)?),
                Arg::I32(int(OP, "k", w.cols)?),
                Arg::Ptr(dst),
                Arg::I32(i32::from(fault)),
                Arg::I32(i32::from(kind == Decoded::Bf16)),
            ],
        )?;
        out.push(dst);
        off += w.rows * w.cols;
    }
    Ok(out)
}

/// The checks shared by every tiled launch: format, k, n, x's staging, parts; the launch's
/// parts of x.
fn check(
    op: &'static str,
    gpu: &Gpu,
    w: &DeviceWeight,
    xs: &GemmX,
    n: usize,
    opts: GemmtOpts,
) -> Result<u32, CudaError> {
    if !select::gemmt_supported(w.format, gpu.info().compute_capability) {
        return Err(CudaError::UnsupportedFormat {
            op,
            format: w.format,
        });
    }
    let (block, _) = w.format.block_geometry();
    if w.cols == 0 || w.cols % GEMMT_BK != 0 || w.cols % block != 0 || w.cols > xs.k_max {
        return Err(shape_err(
            op,
            format!(
                "k = {}: a multiple of {GEMMT_BK} and of the {} block up to {}",
                w.cols, w.format, xs.k_max
            ),
        ));
    }
    if n == 0 || n > xs.rows {
        return Err(shape_err(
            op,
            format!("{n} rows; the staging holds 1..={}", xs.rows),
        ));
    }
    let parts = opts.parts_for(w.format);
    if !matches!(parts, 1 | 2) {
        return Err(shape_err(op, format!("{parts} parts of x: 1 or 2")));
    }
    if let Some(m) = opts.tile_m.filter(|m| !GEMMT_TILES_M.contains(m)) {
        return Err(shape_err(
            op,
            format!("tiles of {m} tokens: one of {GEMMT_TILES_M:?}"),
        ));
    }
    let want = opts.staging_for(w.format);
    if xs.staged != Some(want) {
        return Err(shape_err(
            op,
            format!(
                "x staged as {:?}; {} weights in {parts} part(s) multiply x staged as {want:?} (gemmt_stage_x)",
                xs.staged, w.format
            ),
        ));
    }
    if parts == 1 && w.format == crate::quant::QuantFormat::BF16 && !w.fits_f16 {
        return Err(shape_err(
            op,
            "BF16 weights past f16's range: multiply them with x in two parts",
        ));
    }
    Ok(parts)
}

/// A section 4 launch: tokens per block (one of [`select::GEMMTM_TN`]) and the weights' kind
/// (one of [`select::GEMMTM_KINDS`]).
type TmTile = (usize, QuantFormat);

/// The launch's grid, shared memory and tile name (the entry's suffix), and section 4's
/// tokens per block and weight kind when it runs (weights of kind `kind`, products of
/// `seg_rows` rows).
#[allow(clippy::too_many_arguments)]
fn grid(
    op: &'static str,
    gpu: &Gpu,
    n: usize,
    k: usize,
    tile_rows: usize,
    parts: u32,
    glu: bool,
    kind: &str,
    seg_rows: &[usize],
    opts: GemmtOpts,
) -> Result<(LaunchConfig, String, Option<TmTile>), CudaError> {
    let grid_y = |per_block: usize| {
        u32::try_from(tile_rows.div_ceil(per_block))
            .ok()
            .filter(|&y| y <= 65535)
            .ok_or_else(|| shape_err(op, "too many rows"))
    };
    // Section 4 only with a tile of at most n tokens (x's TMA box within x): passes of fewer
    // than 128 tokens, or a forced tile taller than the pass, take section 3 (the same bits).
    let tm = tm_kind(kind)
        .filter(|_| opts.wgmma_for(gpu, parts, n, k) && opts.tm_for(gpu, parts, kind, k, seg_rows));
    if let Some(tk) = tm {
        let tn = opts
            .wgmma_tile_n
            .unwrap_or_else(|| select::gemmtm_tile_n(n, tile_rows));
        if !select::GEMMTM_TN.contains(&tn) {
            return Err(shape_err(
                op,
                "TMA warpgroup-MMA tiles take 128 or 256 tokens",
            ));
        }
        if tn <= n {
            let cfg = LaunchConfig {
                grid_dim: (n.div_ceil(tn) as u32, grid_y(select::GEMMTM_WR)?, 1),
                block_dim: (select::GEMMTM_THREADS, 1, 1),
                shared_mem_bytes: select::gemmtm_shared_bytes(tk, tn) as u32,
            };
            return Ok((cfg, format!("tm{tn}"), Some((tn, tk))));
        }
    }
    if opts.wgmma_for(gpu, parts, n, k) {
        let bn = opts
            .wgmma_tile_n
            .unwrap_or_else(|| select::gemmw_tile_n(n, tile_rows));
        if !select::GEMMW_BN.contains(&bn) {
            return Err(shape_err(op, "warpgroup-MMA tiles take 128 or 256 rows"));
        }
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(GEMMW_BM) as u32, grid_y(bn)?, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: select::gemmw_shared_bytes(bn, glu) as u32,
        };
        return Ok((cfg, format!("w{bn}"), None));
    }
    // The mma.sync kernel's blocks take GEMMT_BN tile rows (gate + up: 64 of each).
    let col_tiles = tile_rows.div_ceil(GEMMT_BN);
    let bm = opts
        .tile_m
        .unwrap_or_else(|| select::gemmt_tile_m(n, col_tiles, gpu.info().sm_count as usize, parts));
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(bm) as u32, grid_y(GEMMT_BN)?, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: gemmt_shared_bytes(parts as usize, bm, glu) as u32,
    };
    Ok((cfg, format!("m{bm}_p{parts}"), None))
}

/// The entry's weight kind: the format decoded in the tile loop, or the 16-bit float.
fn kind_name(w: &DeviceWeight, opts: GemmtOpts) -> &'static str {
    if opts.fused_for(w.format) {
        return select::format_suffix(w.format);
    }
    match gemmt_decoded(w.format, opts.parts_for(w.format)) {
        Some(Decoded::Bf16) => "bf16",
        _ => "f16",
    }
}

/// `y[t] = W xs[t] (+ bias) (+ y[t] when residual)` for the `n` staged rows.
#[allow(clippy::too_many_arguments)]
pub fn gemmt(
    gpu: &Gpu,
    w: &DeviceWeight,
    xs: &GemmX,
    scratch: &mut GemmtScratch,
    n: usize,
    bias: Option<&dyn DevicePtr<f32>>,
    residual: bool,
    y: &mut dyn DevicePtrMut<f32>,
    opts: GemmtOpts,
) -> Result<(), CudaError> {
    let mut segs = [GemmtSeg { w, bias, y }];
    launch_plain(gpu, &mut segs, xs, scratch, n, residual, opts)
}

/// `segs[i].y[t] = segs[i].w xs[t] (+ segs[i].bias)` for the `n` staged rows: up to
/// [`GEMMT_MAX_SEGS`] products of the same format and k in one launch (the bits of their
/// own launches).
pub fn gemmt_group(
    gpu: &Gpu,
    segs: &mut [GemmtSeg<'_>],
    xs: &GemmX,
    scratch: &mut GemmtScratch,
    n: usize,
    opts: GemmtOpts,
) -> Result<(), CudaError> {
    launch_plain(gpu, segs, xs, scratch, n, false, opts)
}

fn launch_plain(
    gpu: &Gpu,
    segs: &mut [GemmtSeg<'_>],
    xs: &GemmX,
    scratch: &mut GemmtScratch,
    n: usize,
    residual: bool,
    opts: GemmtOpts,
) -> Result<(), CudaError> {
    const OP: &str = "gemmt";
    let Some(first) = segs.first() else {
        return Err(shape_err(OP, "no product"));
    };
    let w0 = first.w;
    if segs.len() > GEMMT_MAX_SEGS {
        return Err(shape_err(
            OP,
            format!(
                "{} products; at most {GEMMT_MAX_SEGS} per launch",
                segs.len()
            ),
        ));
    }
    if residual && segs.len() != 1 {
        return Err(shape_err(OP, "the residual epilogue takes one product"));
    }
    let parts = check(OP, gpu, w0, xs, n, opts)?;
    let mut ptrs = [(0u64, 0u64, 0i32); GEMMT_MAX_SEGS]; // (bias, y, rows)
    let mut total = 0usize;
    for (i, s) in segs.iter_mut().enumerate() {
        if s.w.format != w0.format || s.w.cols != w0.cols {
            return Err(shape_err(
                OP,
                "the products of a launch differ in format or k",
            ));
        }
        need(OP, "y", s.y.len(), n * s.w.rows)?;
        let b = match s.bias {
            Some(b) => {
                need(OP, "bias", b.len(), s.w.rows)?;
                rd(gpu, b)
            }
            None => 0,
        };
        ptrs[i] = (b, wr(gpu, s.y), int(OP, "rows", s.w.rows)?);
        total += s.w.rows;
    }
    int(OP, "rows", total)?;
    let kind = kind_name(w0, opts);
    let rows: Vec<usize> = segs.iter().map(|s| s.w.rows).collect();
    let (cfg, tile, tm) = grid(OP, gpu, n, w0.cols, total, parts, false, kind, &rows, opts)?;
    let ws: Vec<&DeviceWeight> = segs.iter().map(|s| s.w).collect();
    let wp = weights16(gpu, &ws, scratch, opts)?;
    let maps = match tm {
        Some((tn, tk)) => {
            let mats: Vec<(u64, usize)> = wp.iter().copied().zip(rows.iter().copied()).collect();
            Some(tm_maps(OP, rd(gpu, &xs.hi), n, w0.cols, tn, tk, &mats)?)
        }
        None => None,
    };
    // Unused segments: no rows, the first segment's addresses.
    let seg = |i: usize| {
        if i < segs.len() {
            (wp[i], ptrs[i])
        } else {
            (wp[0], (0, ptrs[0].1, 0))
        }
    };
    let (s0, s1, s2) = (seg(0), seg(1), seg(2));
    launch_with(
        gpu,
        &format!("gemmt_{kind}_{tile}"),
        cfg,
        &[
            x_args(gpu, xs),
            [Arg::Ptr(s0.0), Arg::Ptr(s1.0), Arg::Ptr(s2.0)],
            [Arg::Ptr(s0.1.1), Arg::Ptr(s1.1.1), Arg::Ptr(s2.1.1)],
            [Arg::Ptr(s0.1.0), Arg::Ptr(s1.1.0), Arg::Ptr(s2.1.0)],
            [Arg::I32(s0.1.2), Arg::I32(s1.1.2), Arg::I32(s2.1.2)],
            [
                Arg::Ptr(if residual { s0.1.1 } else { 0 }),
                Arg::I32(int(OP, "k", w0.cols)?),
                Arg::I32(int(OP, "n", n)?),
            ],
        ]
        .concat(),
        maps.as_ref().map(GtmMaps::by_value),
    )
}

/// `y[t] = act(Wg xs[t]) * (Wu xs[t])` for the `n` staged rows (same format and shape).
#[allow(clippy::too_many_arguments)]
pub fn gemmt_glu(
    gpu: &Gpu,
    wg: &DeviceWeight,
    wu: &DeviceWeight,
    xs: &GemmX,
    scratch: &mut GemmtScratch,
    n: usize,
    act: super::Activation,
    y: &mut dyn DevicePtrMut<f32>,
    opts: GemmtOpts,
) -> Result<(), CudaError> {
    const OP: &str = "gemmt_glu";
    if wg.format != wu.format || wg.rows != wu.rows || wg.cols != wu.cols {
        return Err(shape_err(OP, "gate and up differ in format or shape"));
    }
    let parts = check(OP, gpu, wg, xs, n, opts)?;
    need(OP, "y", y.len(), n * wg.rows)?;
    // Tile rows: each gate row and its up row (a block takes half of its rows from each).
    let kind = kind_name(wg, opts);
    let (cfg, tile, tm) = grid(
        OP,
        gpu,
        n,
        wg.cols,
        2 * wg.rows,
        parts,
        true,
        kind,
        &[wg.rows],
        opts,
    )?;
    let wp = weights16(gpu, &[wg, wu], scratch, opts)?;
    let maps = match tm {
        Some((tn, tk)) => {
            let mats = [(wp[0], wg.rows), (wp[1], wu.rows)];
            Some(tm_maps(OP, rd(gpu, &xs.hi), n, wg.cols, tn, tk, &mats)?)
        }
        None => None,
    };
    let yp = wr(gpu, y);
    let tail = [
        Arg::Ptr(wp[0]),
        Arg::Ptr(wp[1]),
        Arg::Ptr(yp),
        Arg::I32(int(OP, "rows", wg.rows)?),
        Arg::I32(int(OP, "k", wg.cols)?),
        Arg::I32(int(OP, "n", n)?),
        Arg::I32(super::pointwise::act_code(act)),
    ];
    launch_with(
        gpu,
        &format!("gemmt_{kind}_glu_{tile}"),
        cfg,
        &[&x_args(gpu, xs)[..], &tail[..]].concat(),
        maps.as_ref().map(GtmMaps::by_value),
    )
}

/// The kernels' first three arguments: x's staged parts (hi, lo) and its per-row scales.
fn x_args(gpu: &Gpu, xs: &GemmX) -> [Arg; 3] {
    [
        Arg::Ptr(rd(gpu, &xs.hi)),
        Arg::Ptr(rd(gpu, &xs.lo)),
        Arg::Ptr(rd(gpu, &xs.scale)),
    ]
}

#[cfg(test)]
#[path = "gemmt_tests.rs"]
mod tests;
