//! kernel-check's cases of the prompt pass's warpgroup-MMA kernels (sm_90a, x in one part):
//! gemmt.cu section 3 against the mma.sync pass, and section 4 (TMA) against section 3, bit
//! for bit (the shapes, epilogues and references are the parent module's: `gemmt.rs`).

use super::*;

/// One product's inputs and its mma.sync pass `mma` of [`FULL`] rows, as both sections'
/// cases take them.
pub(super) struct WCase<'a> {
    pub x: &'a [f32],
    pub res: &'a [f32],
    pub mma: &'a Outputs,
    pub format: QuantFormat,
    pub name: &'a str,
    pub tag: &'a str,
}

/// Section 3: the warpgroup-MMA kernel, x in one part, never section 4.
fn sec3() -> GemmtOpts {
    GemmtOpts {
        parts: Some(1),
        wgmma: Some(true),
        tm: Some(false),
        ..GemmtOpts::default()
    }
}

/// A line comparing rows `0..n` of every epilogue of `got` with `want`.
fn same_rows(
    op: &'static str,
    label: String,
    got: &Outputs,
    want: &Outputs,
    rows: usize,
    n: usize,
) -> CheckLine {
    compare_f32(op, label, &got.rows(rows, 0, n), &want.rows(rows, 0, n))
}

/// The warpgroup-MMA kernel (sm_90a, x in one part) against the mma.sync pass of [`FULL`]
/// rows: the same bits for every epilogue, its tile-loop decode == its scratch decode, and
/// passes of the sizes of [`PASS_SIZES`] on it (partial token tiles, forced even where the
/// engine would take the mma.sync kernel) give the full pass's rows.
pub(super) fn wgmma_cases(
    cx: &mut Ctx<'_>,
    c: &WCase<'_>,
    lines: &mut Vec<CheckLine>,
) -> Result<(), String> {
    let (rows, k) = (cx.inp.rows, cx.inp.k);
    let (x, res, name, tag) = (c.x, c.res, c.name, c.tag);
    let w = sec3();
    // The grid's own tile width (`full`, the reference of the lines below) is one of these.
    let full = cx.run(x, res, FULL, w)?;
    // Both tile widths, whatever the grid would pick for these rows.
    for bn in select::GEMMW_BN {
        let opts = GemmtOpts {
            wgmma_tile_n: Some(bn),
            ..w
        };
        let got = cx.run(x, res, FULL, opts)?;
        lines.push(same_rows(
            "fusion",
            format!(
                "gemmt {name} {tag}: warpgroup MMA in tiles of {bn} rows == mma.sync, 5 epilogues"
            ),
            &got,
            c.mma,
            rows,
            FULL,
        ));
    }
    if select::gemmt_fused(c.format, 1) {
        let opts = GemmtOpts {
            scratch_decode: true,
            ..w
        };
        let scratch = cx.run(x, res, FULL, opts)?;
        lines.push(same_rows(
            "fusion",
            format!(
                "gemmt {name} {tag}: warpgroup MMA, decoded in the tile loop == through the scratch"
            ),
            &full,
            &scratch,
            rows,
            FULL,
        ));
    }
    for n in PASS_SIZES {
        let got = cx.run(&x[..n * k], &res[..n * rows], n, w)?;
        lines.push(same_rows(
            "batch_invariance",
            format!("gemmt {name} {tag}: warpgroup MMA, rows of a pass of {n} == of {FULL}"),
            &got,
            &full,
            rows,
            n,
        ));
    }
    Ok(())
}

/// Whether section 4's TMA kernel takes products of `format` (`rows` x `k`) on this device,
/// read in place (F16), decoded or converted in the registers (Q4_0, Q8_0, BF16) or through
/// the scratch (any format: f16).
pub(super) fn tm_applies(gpu: &Gpu, format: QuantFormat, rows: usize, k: usize) -> bool {
    let cc = gpu.info().compute_capability;
    select::gemmt_tm(cc, 1, QuantFormat::F16, k, &[rows])
        || select::gemmt_tm(cc, 1, format, k, &[rows])
}

/// Section 4's TMA kernel (sm_90a, x in one part; F16, Q4_0, Q8_0 and BF16 in place, any
/// format through the scratch) against section 3 and the mma.sync pass of [`FULL`] rows: the
/// same bits for every epilogue (plain + bias, residual, the norm, gate + up with either
/// activation), both tiles (128 and 256 tokens per block), decoded in the registers ==
/// through the scratch, a group of three products (segment boundaries inside a block), and
/// passes of the sizes of [`PASS_SIZES`] of at least a tile (partial token tiles: x's box
/// read past n as zeros: 129 and 299 tokens).
pub(super) fn tm_cases(
    cx: &mut Ctx<'_>,
    c: &WCase<'_>,
    lines: &mut Vec<CheckLine>,
) -> Result<(), String> {
    let (rows, k) = (cx.inp.rows, cx.inp.k);
    let (x, res, name, tag) = (c.x, c.res, c.name, c.tag);
    let cc = cx.gpu.info().compute_capability;
    let sec3 = sec3();
    // In place (F16) or decoded / converted in the registers (Q4_0, Q8_0, BF16) when the
    // kernel takes the format as it lies, else through the scratch (as f16).
    let direct = select::gemmt_tm(cc, 1, c.format, k, &[rows]);
    let tm = GemmtOpts {
        tm: Some(true),
        scratch_decode: !direct,
        ..sec3
    };
    let tiled = |tn: usize| GemmtOpts {
        wgmma_tile_n: Some(tn),
        ..tm
    };
    let via = if direct { "" } else { " (through the scratch)" };
    let w3 = cx.run(x, res, FULL, sec3)?;
    let full = cx.run(x, res, FULL, tm)?;
    // The grid's own tile width is one of the tile lines below (each against section 3).
    lines.push(same_rows(
        "fusion",
        format!("gemmt {name} {tag}: TMA warpgroup MMA{via} == mma.sync, 5 epilogues"),
        &full,
        c.mma,
        rows,
        FULL,
    ));
    for tn in select::GEMMTM_TN {
        let got = cx.run(x, res, FULL, tiled(tn))?;
        lines.push(same_rows(
            "fusion",
            format!(
                "gemmt {name} {tag}: TMA warpgroup MMA{via} in tiles of {tn} tokens == section 3, 5 epilogues"
            ),
            &got,
            &w3,
            rows,
            FULL,
        ));
    }
    if direct && select::gemmt_fused(c.format, 1) {
        let opts = GemmtOpts {
            scratch_decode: true,
            ..tm
        };
        let scratch = cx.run(x, res, FULL, opts)?;
        lines.push(same_rows(
            "fusion",
            format!(
                "gemmt {name} {tag}: TMA warpgroup MMA, decoded in the registers == through the scratch (f16)"
            ),
            &full,
            &scratch,
            rows,
            FULL,
        ));
    }
    let (grouped, alone) = cx.run_group(x, FULL, tm)?;
    let (grouped3, _) = cx.run_group(x, FULL, sec3)?;
    lines.push(compare_f32(
        "fusion",
        format!(
            "gemmt {name} {tag}: TMA warpgroup MMA{via}, w + bias, wu, w + bias in one launch == their own launches"
        ),
        &grouped,
        &alone,
    ));
    lines.push(compare_f32(
        "fusion",
        format!(
            "gemmt {name} {tag}: TMA warpgroup MMA{via}, w + bias, wu, w + bias in one launch == section 3's"
        ),
        &grouped,
        &grouped3,
    ));
    // Passes of at least a tile (the host takes section 3 for tiles taller than the pass).
    for n in PASS_SIZES {
        for tn in select::GEMMTM_TN.into_iter().filter(|&tn| tn <= n) {
            let got = cx.run(&x[..n * k], &res[..n * rows], n, tiled(tn))?;
            lines.push(same_rows(
                "batch_invariance",
                format!(
                    "gemmt {name} {tag}: TMA warpgroup MMA{via} in tiles of {tn} tokens, rows of a pass of {n} == of {FULL}"
                ),
                &got,
                &full,
                rows,
                n,
            ));
        }
    }
    Ok(())
}
