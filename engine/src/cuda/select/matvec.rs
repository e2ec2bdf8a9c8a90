//! Matrix-vector product kernels (one-token body, several tokens per pass, gate + up, k + v pairs).

use super::*;

/// Matrix-vector product kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatvecKernel {
    /// `MV_WARPS` warps per block, each owning `rows_per_warp` rows (1, 2 or 4); x staged
    /// in shared memory transposed by chunk (tiles of at most [`mv_tile_max`] chunks),
    /// weights in the device layout of `kernels/common/formats.cuh`, f32 activations and
    /// accumulation, up to [`MV_LAUNCH_MAX_TOK`] token vectors per launch, taken
    /// `tokens_per_pass` (1 or [`MV_BATCH_TOK`]) at a time: each chunk of W is loaded once
    /// per group and dotted with each of its tokens. A row's arithmetic depends neither on
    /// `rows_per_warp` nor on `tokens_per_pass`.
    MultiRow {
        format: QuantFormat,
        rows_per_warp: u32,
        tokens_per_pass: u32,
    },
    /// [`MatvecKernel::MultiRow`] over a gate and an up matrix of the same format and
    /// shape at once (`rows_per_warp` rows of each, 1 or 2), writing act(gate) * up.
    GluMultiRow {
        format: QuantFormat,
        rows_per_warp: u32,
        tokens_per_pass: u32,
    },
    /// Two matrices of one format and shape on the same x in one launch (one token per
    /// pass): the first blocks compute the first matrix, the rest the second, each block
    /// as in its own [`MatvecKernel::MultiRow`] launch (the same bits).
    Pair {
        format: QuantFormat,
        rows_per_warp: u32,
    },
}

/// Most x chunks a matvec block stages per token group of `tokens_per_pass` tokens:
/// `MV_TILE / tokens_per_pass` rounded down to a multiple of 32 (a lane's chunks stay
/// l, l+32, ... across tiles), at least 32 (matvec.cu's `mv_tile_max`).
pub const fn mv_tile_max(tokens_per_pass: usize) -> usize {
    let t = MV_TILE / tokens_per_pass;
    if t >= 32 { t / 32 * 32 } else { 32 }
}

/// Floats per staged x chunk of the one-token matvec body (matvec.cu's `MV_XCS`: the
/// chunk's 32 values at stride 1 and one pad word, so that 32 lanes reading 32 chunks hit
/// 32 banks and every x read is a shared load at an immediate offset).
pub const MV_XCS: usize = 33;

/// Dynamic shared memory of a matvec launch taking `tokens_per_pass` tokens at a time,
/// for rows of `k` values. One token per pass: a tile of k/32 chunks (at most the
/// maximum), each chunk [`MV_XCS`] floats; several: each token's x tile transposed with
/// one pad column, always the maximum tile (matvec.cu's batched body stages x with the full
/// tile's stride, a compile-time constant, whatever k).
pub const fn mv_shared_bytes(tokens_per_pass: usize, k: usize) -> usize {
    let max = mv_tile_max(tokens_per_pass);
    if tokens_per_pass == 1 {
        let tile = if k / 32 < max { k / 32 } else { max };
        tile * MV_XCS * 4
    } else {
        tokens_per_pass * 32 * (max + 1) * 4
    }
}

/// Whether a kernel taking `tokens_per_pass` token vectors per pass runs the batched body
/// (the `_tb` entry points, `tok=` in the name, [`MV_BATCH_ROWS_PER_WARP`] /
/// [`MV_BATCH_GLU_ROWS_PER_WARP`] rows per warp) rather than the one-token body.
const fn batched_body(tokens_per_pass: u32) -> bool {
    tokens_per_pass > 1
}

impl MatvecKernel {
    /// The entry point of this choice. (The Q6_K output head, 4 rows per warp, is the
    /// plain `matvec_q6_k_r4`: with the one-token body's load rounds it holds 128
    /// registers, 2 blocks per SM, and the H200 decoded the 8B Q4_0 at 296.9 tok/s with it
    /// against 288.0 with the former 4-blocks-per-SM compile `_o4`, which spilled 204
    /// bytes per thread under that body; research/notes/decode-roofline.md, session 5.)
    pub fn entry(&self) -> String {
        let tb = |t: &u32| if batched_body(*t) { "_tb" } else { "" };
        match self {
            MatvecKernel::MultiRow {
                format,
                rows_per_warp,
                tokens_per_pass,
            } => format!(
                "matvec_{}{}_r{rows_per_warp}",
                format_suffix(*format),
                tb(tokens_per_pass)
            ),
            MatvecKernel::GluMultiRow {
                format,
                rows_per_warp,
                tokens_per_pass,
            } => format!(
                "matvec_{}_glu{}_r{rows_per_warp}",
                format_suffix(*format),
                tb(tokens_per_pass)
            ),
            MatvecKernel::Pair {
                format,
                rows_per_warp,
            } => format!("matvec_{}_pair_r{rows_per_warp}", format_suffix(*format)),
        }
    }

    /// Rows one block computes.
    pub fn rows_per_block(&self) -> usize {
        match self {
            MatvecKernel::MultiRow { rows_per_warp, .. }
            | MatvecKernel::GluMultiRow { rows_per_warp, .. }
            | MatvecKernel::Pair { rows_per_warp, .. } => (*rows_per_warp * MV_WARPS) as usize,
        }
    }

    /// Token vectors served per pass over the weights.
    pub fn tokens_per_pass(&self) -> usize {
        match self {
            MatvecKernel::MultiRow {
                tokens_per_pass, ..
            }
            | MatvecKernel::GluMultiRow {
                tokens_per_pass, ..
            } => *tokens_per_pass as usize,
            MatvecKernel::Pair { .. } => 1,
        }
    }

    /// Dynamic shared memory of a launch of this kernel for rows of `k` values.
    pub fn shared_bytes(&self, k: usize) -> usize {
        mv_shared_bytes(self.tokens_per_pass(), k)
    }
}

/// The most dynamic shared memory a matvec launch uses (set as the functions' limit).
pub const MV_MAX_SHARED_BYTES: usize = {
    let a = mv_shared_bytes(1, usize::MAX);
    let b = mv_shared_bytes(MV_BATCH_TOK, usize::MAX);
    if a > b { a } else { b }
};

impl std::fmt::Display for MatvecKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // One token per pass keeps the name receipts have carried since issue 7.
        let tok = |t: &u32| {
            if batched_body(*t) {
                format!(",tok={t}")
            } else {
                String::new()
            }
        };
        match self {
            MatvecKernel::MultiRow {
                format,
                rows_per_warp,
                tokens_per_pass,
            } => write!(
                f,
                "matvec_{}/multi-row(r={rows_per_warp},warps={MV_WARPS}{})",
                format_suffix(*format),
                tok(tokens_per_pass)
            ),
            MatvecKernel::GluMultiRow {
                format,
                rows_per_warp,
                tokens_per_pass,
            } => write!(
                f,
                "matvec_{}/glu-multi-row(r={rows_per_warp},warps={MV_WARPS}{})",
                format_suffix(*format),
                tok(tokens_per_pass)
            ),
            MatvecKernel::Pair {
                format,
                rows_per_warp,
            } => write!(
                f,
                "matvec_{}/pair-multi-row(r={rows_per_warp},warps={MV_WARPS})",
                format_suffix(*format)
            ),
        }
    }
}

/// Rows per warp for a matrix of `rows` rows: the most (4, 2, 1) that still gives at
/// least 1.5 blocks per SM, so that small matrices keep every SM busy while large ones
/// share each staged x among more rows (x staging costs ~0.9/R of a Q4_0 row's bytes).
pub fn matvec_rows_per_warp(rows: usize, sm_count: u32) -> u32 {
    let want = (sm_count.max(1) as usize * 3).div_ceil(2);
    for r in [4u32, 2] {
        if rows.div_ceil(r as usize * MV_WARPS as usize) >= want {
            return r;
        }
    }
    1
}

/// The most rows per warp of the one-token matvec for `format`: 2 for the plain float
/// formats (F32, F16, BF16), whose loaded chunk is 32 floats, so that 4 rows' chunks do not
/// fit the registers (NVRTC 13.0.88, sm_90a: `matvec_bf16_r4` and `_glu_r2` at 64 registers
/// with 24-40 bytes of spills); 4 otherwise. Measured on the H200 (session 8, window 1,
/// `research/notes/s8/w1/`, synthetic Llama-3.1-8B BF16, 512-token prompt, graphed, arms
/// alternated): 123.3 tok/s with 4 rows, 153.6 with this cap.
pub fn one_token_rows_cap(format: QuantFormat) -> u32 {
    match format {
        QuantFormat::F32 | QuantFormat::F16 | QuantFormat::BF16 => 2,
        _ => 4,
    }
}

/// Tokens per weight pass for `ntok` token vectors: 1 for a lone token (the decode step,
/// the fewest registers), [`MV_BATCH_TOK`] otherwise (one pass over W per group).
pub fn matvec_tokens_per_pass(ntok: usize) -> u32 {
    if ntok <= 1 { 1 } else { MV_BATCH_TOK as u32 }
}

/// Choose the matvec kernel for a `rows x k` weight in `format` applied to `ntok` vectors.
/// Several tokens take the batched entry points (2 rows per warp: each staged x value
/// read from shared memory serves two rows' multiply-adds; gate/up: 1 row of each).
pub fn choose_matvec(
    format: QuantFormat,
    rows: usize,
    k: usize,
    ntok: usize,
    dev: &DeviceFacts,
) -> Result<MatvecKernel, CudaError> {
    let (rows_per_warp, tokens_per_pass) =
        matvec_grouping(format, rows, k, ntok, MV_BATCH_ROWS_PER_WARP[0], || {
            matvec_rows_per_warp(rows, dev.sm_count).min(one_token_rows_cap(format))
        })?;
    Ok(MatvecKernel::MultiRow {
        format,
        rows_per_warp,
        tokens_per_pass,
    })
}

/// What [`choose_matvec`] and [`choose_matvec_glu`] share: the shape checks
/// ([`check_matvec`]), the tokens per pass for `ntok` vectors, and the rows per warp:
/// `batched` for the batched body, else `one_token()`. Returns (rows per warp, tokens per
/// pass).
fn matvec_grouping(
    format: QuantFormat,
    rows: usize,
    k: usize,
    ntok: usize,
    batched: u32,
    one_token: impl FnOnce() -> u32,
) -> Result<(u32, u32), CudaError> {
    check_matvec(format, rows, k, ntok)?;
    let tokens_per_pass = matvec_tokens_per_pass(ntok);
    let rows_per_warp = if batched_body(tokens_per_pass) {
        batched
    } else {
        one_token()
    };
    Ok((rows_per_warp, tokens_per_pass))
}

/// The shape checks of a matvec launch.
fn check_matvec(format: QuantFormat, rows: usize, k: usize, ntok: usize) -> Result<(), CudaError> {
    let shape = |detail: String| Err(crate::cuda::shape_err("matvec", detail));
    if format_suffix_of(format).is_none() {
        return Err(CudaError::UnsupportedFormat {
            op: "matvec",
            format,
        });
    }
    let (block, _) = format.block_geometry();
    if k == 0 || k % 32 != 0 || k % block != 0 {
        return shape(format!(
            "k = {k} must be a positive multiple of 32 and of the {format} block ({block})"
        ));
    }
    if rows == 0 || rows > i32::MAX as usize {
        return shape(format!("rows = {rows} out of range"));
    }
    if ntok == 0 || ntok > MV_LAUNCH_MAX_TOK {
        return shape(format!(
            "{ntok} token vectors; one launch takes 1..={MV_LAUNCH_MAX_TOK}"
        ));
    }
    Ok(())
}

/// Choose the fused gate/up kernel for two `rows x k` weights in `format`: the rows per
/// warp of [`choose_matvec`] for `2 * rows` rows (each warp reads two matrices), at most 2.
pub fn choose_matvec_glu(
    format: QuantFormat,
    rows: usize,
    k: usize,
    ntok: usize,
    dev: &DeviceFacts,
) -> Result<MatvecKernel, CudaError> {
    let (rows_per_warp, tokens_per_pass) =
        matvec_grouping(format, rows, k, ntok, MV_BATCH_GLU_ROWS_PER_WARP[0], || {
            matvec_rows_per_warp(2 * rows, dev.sm_count).min(one_token_rows_cap(format) / 2)
        })?;
    Ok(MatvecKernel::GluMultiRow {
        format,
        rows_per_warp,
        tokens_per_pass,
    })
}

/// Choose the two-matrix kernel for two `rows x k` weights in `format` on one x, if there is
/// one: only for a lone token (the decode step) and where [`choose_matvec`]'s rule for
/// `2 * rows` rows picks a compiled rows-per-warp ([`MV_PAIR_ROWS_PER_WARP`]: small
/// matrices such as k and v, whose separate launches are too short to fill the GPU).
/// `None`: run the two matrices as two [`choose_matvec`] launches (the same bits).
pub fn choose_matvec_pair(
    format: QuantFormat,
    rows: usize,
    k: usize,
    ntok: usize,
    dev: &DeviceFacts,
) -> Result<Option<MatvecKernel>, CudaError> {
    check_matvec(format, rows, k, ntok)?;
    if ntok != 1 {
        return Ok(None);
    }
    let r = matvec_rows_per_warp(2 * rows, dev.sm_count);
    Ok(MV_PAIR_ROWS_PER_WARP
        .contains(&r)
        .then_some(MatvecKernel::Pair {
            format,
            rows_per_warp: r,
        }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::select::tests::{H200, RTX};

    use crate::cuda::sources::consts::MV_MAX_TOK;

    #[test]
    fn float_formats_take_at_most_two_rows_per_warp_for_one_token() {
        let dev = H200;
        for f in [QuantFormat::F32, QuantFormat::F16, QuantFormat::BF16] {
            let MatvecKernel::MultiRow { rows_per_warp, .. } =
                choose_matvec(f, 128_256, 4096, 1, &dev).unwrap()
            else {
                panic!("multi-row")
            };
            assert_eq!(rows_per_warp, 2, "{f}");
            let MatvecKernel::GluMultiRow { rows_per_warp, .. } =
                choose_matvec_glu(f, 14_336, 4096, 1, &dev).unwrap()
            else {
                panic!("glu")
            };
            assert_eq!(rows_per_warp, 1, "{f}");
        }
        let MatvecKernel::MultiRow { rows_per_warp, .. } =
            choose_matvec(QuantFormat::Q4_0, 128_256, 4096, 1, &dev).unwrap()
        else {
            panic!("multi-row")
        };
        assert_eq!(rows_per_warp, 4);
    }

    #[test]
    fn matvec_choice() {
        for dev in [H200, RTX] {
            let c = choose_matvec(QuantFormat::Q4_K, 896, 4864, 1, &dev).unwrap();
            assert_eq!(
                c,
                MatvecKernel::MultiRow {
                    format: QuantFormat::Q4_K,
                    rows_per_warp: 1,
                    tokens_per_pass: 1
                }
            );
            assert_eq!(c.to_string(), "matvec_q4_k/multi-row(r=1,warps=8)");
            assert_eq!(c.entry(), "matvec_q4_k_r1");
        }
        // Llama-3.1-8B on the H200 (132 SMs): k/v 1024 rows -> 1, q/o/down 4096 -> 2,
        // gate/up 14336 and the head -> 4; the same rows on a smaller GPU share more.
        let r = |rows, dev: &DeviceFacts| match choose_matvec(QuantFormat::Q4_0, rows, 4096, 1, dev)
            .unwrap()
        {
            MatvecKernel::MultiRow { rows_per_warp, .. } => rows_per_warp,
            MatvecKernel::GluMultiRow { .. } | MatvecKernel::Pair { .. } => 0,
        };
        assert_eq!(r(1024, &H200), 1);
        assert_eq!(r(4096, &H200), 2);
        assert_eq!(r(14336, &H200), 4);
        assert_eq!(r(128256, &H200), 4);
        assert_eq!(r(4096, &RTX), 4);
        assert_eq!(r(2048, &RTX), 2);
        assert_eq!(r(1, &RTX), 1);
        let c = choose_matvec(QuantFormat::Q4_0, 4096, 4096, 1, &H200).unwrap();
        assert_eq!(c.rows_per_block(), 16);
        assert_eq!(c.entry(), "matvec_q4_0_r2");
        // Shared memory: one tile of k/32 chunks of 33 floats, capped at MV_TILE chunks.
        assert_eq!(c.shared_bytes(4096), 128 * 33 * 4);
        assert_eq!(c.shared_bytes(1 << 20), MV_MAX_SHARED_BYTES);
        // Gate/up pairs: at most 2 rows of each matrix per warp; 14336-row gate/up on the
        // H200 -> 2, a small MLP -> 1; the same shape checks as a single matvec.
        let g = choose_matvec_glu(QuantFormat::Q4_K, 14336, 4096, 1, &H200).unwrap();
        assert_eq!(
            g,
            MatvecKernel::GluMultiRow {
                format: QuantFormat::Q4_K,
                rows_per_warp: 2,
                tokens_per_pass: 1
            }
        );
        assert_eq!(g.entry(), "matvec_q4_k_glu_r2");
        assert_eq!(g.to_string(), "matvec_q4_k/glu-multi-row(r=2,warps=8)");
        assert_eq!(g.rows_per_block(), 16);
        let g = choose_matvec_glu(QuantFormat::Q8_0, 1024, 512, 1, &H200).unwrap();
        assert_eq!(g.entry(), "matvec_q8_0_glu_r1");
        assert!(choose_matvec_glu(QuantFormat::Q4_K, 64, 896, 1, &H200).is_err());
        assert!(
            choose_matvec_glu(QuantFormat::Q8_0, 64, 512, MV_LAUNCH_MAX_TOK + 1, &H200).is_err()
        );
        // K-quant rows must be whole super-blocks; 32-blocks must be whole too.
        assert!(matches!(
            choose_matvec(QuantFormat::Q4_K, 8, 896, 1, &H200),
            Err(CudaError::Shape { .. })
        ));
        assert!(choose_matvec(QuantFormat::Q8_0, 8, 896, 8, &H200).is_ok());
        assert!(choose_matvec(QuantFormat::Q8_0, 8, 896, MV_LAUNCH_MAX_TOK + 1, &H200).is_err());
        // Up to MV_LAUNCH_MAX_TOK rows in one launch of the batched entry points.
        let c = choose_matvec(QuantFormat::Q8_0, 8, 896, MV_LAUNCH_MAX_TOK, &H200).unwrap();
        assert_eq!(c.tokens_per_pass(), MV_BATCH_TOK);
        assert!(choose_matvec(QuantFormat::Q8_0, 8, 896, 0, &H200).is_err());
        assert!(choose_matvec(QuantFormat::F32, 8, 40, 1, &H200).is_err());
        assert!(matches!(
            choose_matvec(QuantFormat::Q3_K, 8, 256, 1, &H200),
            Err(CudaError::UnsupportedFormat { .. })
        ));
    }

    #[test]
    fn batched_matvec_choice() {
        // One token: the one-token-per-pass kernels; 2..=MV_MAX_TOK: the batched ones.
        assert_eq!(matvec_tokens_per_pass(1), 1);
        for n in 2..=MV_MAX_TOK {
            assert_eq!(matvec_tokens_per_pass(n), MV_BATCH_TOK as u32);
        }
        let c = choose_matvec(QuantFormat::Q4_0, 4096, 4096, 8, &H200).unwrap();
        assert_eq!(
            c,
            MatvecKernel::MultiRow {
                format: QuantFormat::Q4_0,
                rows_per_warp: 2,
                tokens_per_pass: 8
            }
        );
        assert_eq!(c.entry(), "matvec_q4_0_tb_r2");
        assert_eq!(c.to_string(), "matvec_q4_0/multi-row(r=2,warps=8,tok=8)");
        assert_eq!(c.tokens_per_pass(), 8);
        // 2 rows per warp when batched, whatever the rows (k/v rows would take 1 alone).
        let c = choose_matvec(QuantFormat::Q4_0, 1024, 4096, 3, &H200).unwrap();
        assert_eq!(c.entry(), "matvec_q4_0_tb_r2");
        let c = choose_matvec(QuantFormat::Q6_K, 128256, 4096, 5, &H200).unwrap();
        assert_eq!(c.entry(), "matvec_q6_k_tb_r2");
        let g = choose_matvec_glu(QuantFormat::Q8_0, 1024, 512, 3, &H200).unwrap();
        assert_eq!(g.entry(), "matvec_q8_0_glu_tb_r1");
        let g = choose_matvec_glu(QuantFormat::Q4_0, 14336, 4096, 8, &H200).unwrap();
        assert_eq!(g.entry(), "matvec_q4_0_glu_tb_r1");
        assert_eq!(
            g.to_string(),
            "matvec_q4_0/glu-multi-row(r=1,warps=8,tok=8)"
        );
        // Every chosen entry point exists in the family's list.
        use crate::cuda::sources::Family;
        let listed = [Family::Matvec, Family::MatvecBatch]
            .map(|f| f.entry_points())
            .concat();
        for f in KERNEL_FORMATS {
            let unit = f.block_geometry().0.max(32);
            for rows in [1, 67, 1024, 4096, 14336, 128256] {
                for n in (1..=MV_MAX_TOK).chain([MV_LAUNCH_MAX_TOK]) {
                    for dev in [H200, RTX] {
                        let a = choose_matvec(f, rows, unit * 4, n, &dev).unwrap();
                        let b = choose_matvec_glu(f, rows, unit * 4, n, &dev).unwrap();
                        assert!(listed.contains(&a.entry()), "{}", a.entry());
                        assert!(listed.contains(&b.entry()), "{}", b.entry());
                        assert!(a.shared_bytes(unit * 4) <= MV_MAX_SHARED_BYTES);
                    }
                }
            }
        }
        // Tiles: a multiple of 32 chunks (or the whole row), 8 tokens -> 64 chunks each.
        assert_eq!(mv_tile_max(1), 640);
        assert_eq!(mv_tile_max(8), 64);
        assert_eq!(mv_tile_max(64), 32);
        assert_eq!(mv_shared_bytes(8, 4096), 8 * 32 * 65 * 4);
        // Batched: the full tile's stride whatever k (a compile-time stride in matvec.cu).
        assert_eq!(mv_shared_bytes(8, 1024), 8 * 32 * 65 * 4);
        assert_eq!(mv_shared_bytes(8, 32), 8 * 32 * 65 * 4);
        // One token: k/32 chunks of 33 floats, at most 640 chunks.
        assert_eq!(mv_shared_bytes(1, 1024), 32 * 33 * 4);
        assert_eq!(mv_shared_bytes(1, 14336), 448 * 33 * 4);
        assert_eq!(mv_shared_bytes(1, 1 << 20), 640 * 33 * 4);
        assert_eq!(MV_MAX_SHARED_BYTES, 640 * 33 * 4);
        // The kernel's chunk stride is this one.
        let mv = crate::cuda::sources::SOURCES
            .iter()
            .find(|s| s.path == "matvec.cu")
            .unwrap();
        assert!(mv.text.contains(&format!("#define MV_XCS {MV_XCS}\n")));
    }

    #[test]
    fn pair_only_for_small_matrices_and_one_token() {
        let f = QuantFormat::Q4_0;
        // k and v of Llama-3.1-8B: 1024 rows each -> 256 blocks of one row per warp
        let c = choose_matvec_pair(f, 1024, 4096, 1, &H200)
            .unwrap()
            .unwrap();
        assert_eq!(c.entry(), "matvec_q4_0_pair_r1");
        assert_eq!(c.rows_per_block(), MV_WARPS as usize);
        assert_eq!(c.tokens_per_pass(), 1);
        // several tokens, or matrices big enough for 2+ rows per warp: separate launches
        assert_eq!(choose_matvec_pair(f, 1024, 4096, 2, &H200).unwrap(), None);
        assert_eq!(choose_matvec_pair(f, 14336, 4096, 1, &H200).unwrap(), None);
        assert!(choose_matvec_pair(f, 1024, 4095, 1, &H200).is_err());
    }

    #[test]
    fn the_q6_k_head_is_the_plain_r4_entry_point() {
        let h200 = DeviceFacts {
            compute_capability: (9, 0),
            sm_count: 132,
        };
        let c = choose_matvec(QuantFormat::Q6_K, 128_256, 4096, 1, &h200).unwrap();
        assert_eq!(c.entry(), "matvec_q6_k_r4");
        assert_eq!(c.to_string(), "matvec_q6_k/multi-row(r=4,warps=8)");
        // Every one-token entry point is one of the family's plain names.
        use crate::cuda::sources::Family;
        let listed = Family::Matvec.entry_points();
        assert!(listed.iter().all(|e| !e.contains("_o")), "{listed:?}");
        assert!(listed.contains(&c.entry()));
    }
}
