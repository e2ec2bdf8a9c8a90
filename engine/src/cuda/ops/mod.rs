//! Launch wrappers, one per kernel family (candle-style: check shapes, pick the kernel,
//! push the arguments, launch on the GPU's stream).
//!
//! Owns: [`DeviceWeight`] (a weight matrix uploaded in its device layout, [`repack`]) and
//! the shared launch plumbing. Buffers are passed as `cudarc` device pointers (`CudaSlice` or
//! views), so callers can hand in sub-ranges of larger buffers; every wrapper checks that
//! each buffer is long enough for the launch before queueing it, which is what keeps the
//! kernels' raw indexing in bounds.

mod attention;
mod attention_prefill;
mod gemm;
mod gemmt;
mod kv;
mod linear;
mod mask;
mod mmv;
mod pointwise;
mod qkv_rope;
mod rope_kv;
mod sample;

pub use attention::{
    AttnScratch, AttnShape, KvView, attention, attention_rows, attention_two_pass, first_split,
    grid_splits, window_splits,
};
pub use attention_prefill::{
    PrefillSplitScratch, attention_prefill, attention_prefill_effective, attention_prefill_ws,
};
pub use gemm::{GemmOpts, GemmX, XParts, XStaging, gemm, gemm_glu, gemm_stage_x, gemm_stage_x_for};
pub use gemmt::{GemmtOpts, GemmtScratch, GemmtSeg, gemmt, gemmt_glu, gemmt_group, gemmt_stage_x};
pub use kv::{
    KvRow, KvRowsDev, from_paged, kv_block_len, kv_blocks, kv_pool_offset, kv_row_table, to_paged,
};
pub use linear::{
    MatvecOpts, NormIn, embed, matvec, matvec_fused, matvec_glu, matvec_pair, matvec_residual,
    matvec_segs,
};
pub use mask::{MaskBuffer, apply_mask};
pub use mmv::{MmvScratch, mmv, mmv_glu, mmv_glu_x1, mmv_pair_x1, mmv_x1};
pub use pointwise::{
    Activation, RopeStyle, RopeTable, add, add_inplace, argmax, gated_act, gated_act_inplace,
    qk_norm, rmsnorm, rmsnorm_inplace, rope, scale_inplace, softcap_inplace,
};
pub use qkv_rope::{QkvRope, matvec_segs_rope};
pub use rope_kv::{RopeKvShape, kv_store, rope_kv, rope_kv_rows};
pub use sample::{SAMPLE_CAP, SampleBuffers, Sampled, sample};

use super::{CudaError, Gpu, shape_err};
use crate::quant::QuantFormat;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};

/// A weight matrix on the device: `rows` rows of `cols` values in `format`'s device layout
/// ([`repack`]: planar for Q4_0, Q8_0 and Q6_K, the file's block layout otherwise), as
/// many bytes as in the file.
pub struct DeviceWeight {
    pub format: QuantFormat,
    pub rows: usize,
    pub cols: usize,
    pub row_bytes: usize,
    pub data: CudaSlice<u8>,
    /// Every value converts to f16 without overflow (BF16: no |value| past f16's 65504
    /// after rounding, no infinity or NaN, [`bf16_fits_f16`]; true for every other format).
    /// The tiled prompt pass converts BF16 to f16 only when it holds.
    pub fits_f16: bool,
}

impl DeviceWeight {
    /// Upload `bytes` (rows of `format.bytes_for(cols)` bytes each, GGUF block layout),
    /// repacked into the device layout.
    pub fn upload(
        gpu: &Gpu,
        format: QuantFormat,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<DeviceWeight, CudaError> {
        let row_bytes = format
            .bytes_for(cols)
            .map_err(|e| shape_err("upload weight", e.to_string()))?;
        if rows.checked_mul(row_bytes) != Some(bytes.len()) {
            return Err(shape_err(
                "upload weight",
                format!(
                    "{rows} rows of {row_bytes} bytes, got {} bytes",
                    bytes.len()
                ),
            ));
        }
        Ok(DeviceWeight {
            format,
            rows,
            cols,
            row_bytes,
            data: gpu.upload(&repack(format, bytes))?,
            fits_f16: format != QuantFormat::BF16 || bf16_fits_f16(bytes),
        })
    }
}

/// Whether every bf16 value of `bytes` (little-endian pairs) converts to a finite f16:
/// exponent field below 143 (|value| < 2^16; the largest such bf16, 65280, is under f16's
/// 65504), which also rules out infinities and NaNs. Four values per 64-bit word: each
/// 16-bit lane's exponent (bits 7..14) plus 0x71 reaches bit 8 exactly when it is >= 143.
pub fn bf16_fits_f16(bytes: &[u8]) -> bool {
    const EXP: u64 = 0x00FF_00FF_00FF_00FF;
    const ADD: u64 = 0x0071_0071_0071_0071;
    const TOP: u64 = 0x0100_0100_0100_0100;
    let mut words = bytes.chunks_exact(8);
    let wide = words.by_ref().all(|c| {
        ((((u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) >> 7) & EXP) + ADD) & TOP) == 0
    });
    wide && words
        .remainder()
        .chunks_exact(2)
        .all(|c| (u16::from_le_bytes([c[0], c[1]]) >> 7) & 0xFF < 143)
}

/// Planar split of a block format: the byte ranges of one GGUF block that go to plane 0,
/// 1, 2, in that order (see `kernels/common/formats.cuh`), or `None` for formats kept in
/// their block layout. Q4_0 and Q8_0 blocks (2-byte aligned: 18 and 34 bytes) put their
/// quants first and the f16 scale second; Q6_K (210 bytes) puts ql+qh (192), then the 16
/// sub-scales, then d. Every plane starts 16-byte aligned and every quant load of the
/// kernels is 16 bytes wide.
pub fn planar_split(format: QuantFormat) -> Option<&'static [std::ops::Range<usize>]> {
    const Q4_0: [std::ops::Range<usize>; 2] = [2..18, 0..2];
    const Q8_0: [std::ops::Range<usize>; 2] = [2..34, 0..2];
    const Q6_K: [std::ops::Range<usize>; 3] = [0..192, 192..208, 208..210];
    match format {
        QuantFormat::Q4_0 => Some(&Q4_0),
        QuantFormat::Q8_0 => Some(&Q8_0),
        QuantFormat::Q6_K => Some(&Q6_K),
        _ => None,
    }
}

/// The device layout of a matrix given in GGUF block layout: a permutation of its bytes
/// (the length is unchanged). Formats without a [`planar_split`] are returned as they are;
/// for the others, plane p holds range p of every block, blocks in file order.
pub fn repack(format: QuantFormat, bytes: &[u8]) -> Vec<u8> {
    let Some(split) = planar_split(format) else {
        return bytes.to_vec();
    };
    let (_, block) = format.block_geometry();
    let nblocks = bytes.len() / block;
    let mut out = Vec::with_capacity(bytes.len());
    for r in split {
        for b in bytes.chunks_exact(block) {
            out.extend_from_slice(&b[r.clone()]);
        }
    }
    // A trailing partial block (never produced by `upload`'s size check) is kept as is.
    out.extend_from_slice(&bytes[nblocks * block..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planar_splits_cover_each_block_once_with_aligned_planes() {
        for f in crate::quant::QuantFormat::ALL {
            let Some(split) = planar_split(f) else {
                continue;
            };
            let (_, block) = f.block_geometry();
            let mut seen = vec![0u8; block];
            for r in split {
                for i in r.clone() {
                    seen[i] += 1;
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{f}");
            // Every plane but the last is a multiple of 16 bytes per block or the scales.
            assert_eq!(split[0].len() % 16, 0, "{f}");
        }
    }

    #[test]
    fn bf16_fits_f16_is_the_f16_conversion_staying_finite() {
        // Every bf16 bit pattern, alone and in each lane of a word, against half's own
        // conversion (f32 -> f16, round to nearest even).
        for b in 0..=u16::MAX {
            let v = half::bf16::from_bits(b).to_f32();
            let want = half::f16::from_f32(v).is_finite();
            for lane in 0..4 {
                let mut w = [0u8; 8];
                w[2 * lane..2 * lane + 2].copy_from_slice(&b.to_le_bytes());
                assert_eq!(bf16_fits_f16(&w), want, "{b:#06x} lane {lane}");
            }
            // Odd tails: after a full word, and alone.
            let mut t = [0u8; 10];
            t[8..].copy_from_slice(&b.to_le_bytes());
            assert_eq!(bf16_fits_f16(&t), want, "{b:#06x} tail");
            assert_eq!(bf16_fits_f16(&b.to_le_bytes()), want, "{b:#06x} alone");
        }
        assert!(bf16_fits_f16(&[]));
    }

    /// The body of kernel (or device function) `name` in the embedded sources: the text
    /// after the `{` that opens the `__global__` / `__device__` definition of `name(`.
    fn kernel_body(name: &str) -> Option<&'static str> {
        let pat = format!("{name}(");
        for src in crate::cuda::sources::SOURCES {
            let t = src.text;
            let mut from = 0;
            while let Some(i) = t[from..].find(&pat) {
                let at = from + i;
                from = at + pat.len();
                let ident_start = at == 0
                    || !t[..at]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_');
                let head = &t[t[..at].rfind(';').map_or(0, |j| j + 1)..at];
                if ident_start && (head.contains("__global__") || head.contains("__device__")) {
                    let open = t[at..].find('{')? + at;
                    return Some(&t[open + 1..]);
                }
            }
        }
        None
    }

    #[test]
    fn every_pdl_kernel_waits_before_anything_else() {
        for name in PDL_KERNELS {
            let body = kernel_body(name).unwrap_or_else(|| panic!("no kernel {name}"));
            let first: Vec<&str> = body.split(';').take(2).map(|s| s.trim()).collect();
            assert_eq!(first, ["pdl_wait()", "pdl_trigger()"], "{name}");
        }
        // A kernel that is not listed is not required to, and the finder is not fooled by
        // calls: `rope(` appears in rope_kv's comment and in other kernels' names.
        assert!(kernel_body("rope").is_some());
        assert!(kernel_body("no_such_kernel").is_none());
        // Every matvec entry point runs one of the matvec bodies; each waits after its
        // weight prefetch (the streamed body: its first weight loads) and before the first
        // read of x, of the norm weight, or of the residual / output.
        let mut bodies = 0;
        for body in ["matvec_body", "matvec_body_tb", "matvec_wr_body"] {
            let Some(mv) = kernel_body(body) else {
                continue;
            };
            bodies += 1;
            let mv = &mv[..mv.find("\n}").unwrap()];
            let wait = mv
                .find("pdl_wait();")
                .unwrap_or_else(|| panic!("{body}: no pdl_wait"));
            assert!(
                mv[wait..]
                    .trim_start_matches("pdl_wait();")
                    .trim_start()
                    .starts_with("pdl_trigger();")
            );
            for first_use in [
                "x + (u64)",
                "(const float4*)x",
                "(const float4*)nw",
                "mv_inv_rms(",
                "mv_store<",
                "res[",
                "y[",
                "F::dot",
                "F::ldc",
            ] {
                if let Some(at) = mv.find(first_use) {
                    assert!(wait < at, "{body}: {first_use} before pdl_wait");
                }
            }
        }
        assert_eq!(bodies, 3);
        // The mmv entry points (`mmv_*`) run `mmv_body`: it waits after its weight
        // prefetch (and, with MMV_PIPE, its first round of weight loads: W is written by no
        // kernel) and before the first read of x, its scale, res, y or the split scratch.
        let mv = kernel_body("mmv_body").unwrap_or_else(|| panic!("no mmv_body"));
        let mv = &mv[..mv.find("\n}").unwrap()];
        let wait = mv
            .find("pdl_wait();")
            .unwrap_or_else(|| panic!("mmv_body: no pdl_wait"));
        assert!(
            mv[wait..]
                .trim_start_matches("pdl_wait();")
                .trim_start()
                .starts_with("pdl_trigger();")
        );
        for first_use in [
            "xht",
            "xsc[",
            "res[",
            "y[",
            "part[",
            "cnt[",
            "mmv_stage_one(",
        ] {
            let at = mv
                .find(first_use)
                .unwrap_or_else(|| panic!("mmv_body: no {first_use}"));
            assert!(wait < at, "mmv_body: {first_use} before pdl_wait");
        }
        // The attention entry points read only the block table (and the rows' table) before
        // the wait: the one-row forms `split_block(bt, cap)`, the rows forms in
        // attn_rows_entry.
        for name in PDL_TABLE_KERNELS {
            let body = kernel_body(name).unwrap_or_else(|| panic!("no kernel {name}"));
            let body = if name.starts_with("attn_rows") {
                assert!(body.trim_start().starts_with("attn_rows_entry<"), "{name}");
                kernel_body("attn_rows_entry").unwrap_or_else(|| panic!("no attn_rows_entry"))
            } else {
                body
            };
            let wait = body
                .find("pdl_wait();")
                .unwrap_or_else(|| panic!("{name}: no pdl_wait"));
            let before: String = body[..wait]
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect();
            assert!(before.contains("split_block("), "{name}: {before}");
            for read in [
                "pos[",
                "q[",
                "part_o",
                "part_ml",
                "count",
                "out[",
                "attn_entry",
            ] {
                assert!(!before.contains(read), "{name}: {read} before pdl_wait");
            }
            assert!(
                body[wait..]
                    .trim_start_matches("pdl_wait();")
                    .trim_start()
                    .starts_with("pdl_trigger();"),
                "{name}"
            );
        }
        assert!(is_pdl_kernel("attn_rows_d128") && !PDL_KERNELS.contains(&"attn_partial"));
        assert!(is_pdl_kernel("mmv_q4_0_glu_nt1"));
        assert!(is_pdl_kernel("matvec_q4_0_r2") && is_pdl_kernel("rope_kv"));
        assert!(
            !is_pdl_kernel("matvec_q4_0_wr_r4_d3") && !is_pdl_kernel("matvec_q4_0_glu_wr_r1_d6")
        );
        assert!(!is_pdl_kernel("matvec_q4_0_seg3_wr_r4_d3"));
        assert!(!is_pdl_kernel("embed_q4_0"));
    }

    #[test]
    fn repack_q4_0_puts_quants_then_scales() {
        // Two blocks: d = [0xA0, 0xA1] / [0xB0, 0xB1], qs = 1..=16 / 101..=116.
        let mut bytes = vec![0xA0, 0xA1];
        bytes.extend(1..=16u8);
        bytes.extend([0xB0, 0xB1]);
        bytes.extend(101..=116u8);
        let p = repack(QuantFormat::Q4_0, &bytes);
        let mut want: Vec<u8> = (1..=16u8).chain(101..=116).collect();
        want.extend([0xA0, 0xA1, 0xB0, 0xB1]);
        assert_eq!(p, want);
        // Formats kept in block layout are untouched.
        assert_eq!(repack(QuantFormat::Q4_K, &bytes), bytes);
    }

    #[test]
    fn repack_q6_k_three_planes() {
        let bytes: Vec<u8> = (0..420).map(|i| (i % 251) as u8).collect();
        let p = repack(QuantFormat::Q6_K, &bytes);
        assert_eq!(p.len(), bytes.len());
        assert_eq!(&p[..192], &bytes[..192]);
        assert_eq!(&p[192..384], &bytes[210..402]);
        assert_eq!(&p[384..400], &bytes[192..208]);
        assert_eq!(&p[400..416], &bytes[402..418]);
        assert_eq!(&p[416..418], &bytes[208..210]);
        assert_eq!(&p[418..420], &bytes[418..420]);
    }
}

/// Check that a buffer holds at least `need` elements.
pub(crate) fn need(
    op: &'static str,
    what: &str,
    have: usize,
    need: usize,
) -> Result<(), CudaError> {
    if have < need {
        return Err(shape_err(
            op,
            format!("{what} holds {have} values, the launch needs {need}"),
        ));
    }
    Ok(())
}

/// Check a device address is aligned to `align` bytes.
pub(crate) fn aligned(op: &'static str, what: &str, ptr: u64, align: u64) -> Result<(), CudaError> {
    if ptr % align != 0 {
        return Err(shape_err(
            op,
            format!("{what} must start {align}-byte aligned"),
        ));
    }
    Ok(())
}

/// Convert a size to the kernels' `int`.
pub(crate) fn int(op: &'static str, what: &str, v: usize) -> Result<i32, CudaError> {
    i32::try_from(v)
        .map_err(|_| shape_err(op, format!("{what} = {v} exceeds the kernel's int range")))
}

/// One kernel argument: a device address or a scalar.
#[derive(Clone, Copy)]
pub(crate) enum Arg {
    Ptr(u64),
    I32(i32),
    U64(u64),
    F32(f32),
    F64(f64),
}

/// Kernels whose first statement is `pdl_wait()` (`kernels/common/common.cuh`): on sm_90
/// and later they are launched with programmatic stream serialization, so that the device
/// may start them while the kernel before them is finishing (the wait holds every thread
/// until that kernel has completed and its writes are visible); they also call
/// `pdl_trigger()` right after the wait, letting the next such kernel be scheduled early.
/// Any other kernel waits for its predecessor as usual. The matvec kernels
/// (`matvec_*`, [`is_pdl_kernel`]) wait after asking L2 for their first weight tile (which
/// no kernel writes), so that prefetch overlaps the kernel before. `tests` check the
/// sources.
pub const PDL_KERNELS: &[&str] = &[
    "rope_kv",
    "rope",
    "kv_store",
    "attn_combine",
    "rope_kv_rows",
    "rope_kv_pass",
    "rmsnorm",
    "argmax_rows",
];

/// Attention kernels launched programmatically that read their split's entry of the KV
/// block table (and, for the rows forms, the row's pools, table and capacity from the
/// host-written row table) before `pdl_wait()`: no kernel writes those tables, so the read
/// overlaps the kernel before. `tests` check that nothing else is read before the wait.
pub const PDL_TABLE_KERNELS: &[&str] = &[
    "attn_partial",
    "attn_partial_d64",
    "attn_partial_d128",
    "attn_partial_d256",
    "attn_rows",
    "attn_rows_d64",
    "attn_rows_d128",
    "attn_rows_d256",
];

/// Whether kernel `name` is launched programmatically (where [`pdl_allowed`]). The streamed
/// one-token matvec ([`super::select::is_matvec_wr_entry`]) is not (unless `ASSAY_MV_WR_PDL=1`, to
/// time both forms with one binary): its persistent grid deals the work to its blocks up
/// front, and launched early it cannot place its blocks while the kernel before holds the
/// shared memory they need, so the launch ends with its latest block. Session 14, 8B Q4_0 at
/// 512 context (research/notes/s14): streamed with PDL 325.5 tok/s, without (all launches)
/// 372.4, not streamed with PDL 335.5.
pub fn is_pdl_kernel(name: &str) -> bool {
    PDL_KERNELS.contains(&name)
        || PDL_TABLE_KERNELS.contains(&name)
        || (name.starts_with("matvec_") && (!super::select::is_matvec_wr_entry(name) || wr_pdl()))
        || name.starts_with("mmv_")
}

/// `ASSAY_MV_WR_PDL=1`: the streamed matvec launched programmatically too (session 14's
/// shipped form, kept for the A/B).
fn wr_pdl() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("ASSAY_MV_WR_PDL").is_some_and(|v| v == "1"))
}

/// Whether launches may use programmatic dependent launch: sm_90+, unless the environment
/// sets `ASSAY_NO_PDL=1` (to time both forms with one binary).
fn pdl_allowed(gpu: &Gpu) -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let off = *OFF.get_or_init(|| std::env::var_os("ASSAY_NO_PDL").is_some_and(|v| v == "1"));
    !off && gpu.info().compute_capability.0 >= 9
}

/// Launch `name` with `args` (in the kernel's parameter order) on the GPU's stream.
pub(crate) fn launch(
    gpu: &Gpu,
    name: &str,
    cfg: LaunchConfig,
    args: &[Arg],
) -> Result<(), CudaError> {
    launch_with(gpu, name, cfg, args, None)
}

/// A kernel's last parameter passed by value: the bytes of a plain C struct (`#[repr(C)]`,
/// as the kernel declares it, e.g. a `__grid_constant__` struct of CUDA tensor maps). The
/// driver copies as many bytes as the kernel's parameter has from `bytes` at launch (and a
/// CUDA graph captures that copy), so `bytes` must be exactly the parameter's size; its
/// alignment within the parameter buffer is the driver's business (it lays the parameters
/// out as the kernel was compiled).
#[derive(Clone, Copy)]
pub(crate) struct ByValue<'a> {
    pub bytes: &'a [u8],
}

/// [`launch`] with an optional by-value struct parameter after `args`.
pub(crate) fn launch_with(
    gpu: &Gpu,
    name: &str,
    cfg: LaunchConfig,
    args: &[Arg],
    tail: Option<ByValue<'_>>,
) -> Result<(), CudaError> {
    let f = gpu.function(name)?;
    let stream = gpu.stream();
    let pdl = is_pdl_kernel(name) && pdl_allowed(gpu);
    if pdl || tail.is_some() {
        return launch_ex(stream, f, cfg, args, tail, pdl);
    }
    let mut b = stream.launch_builder(f);
    for a in args {
        match a {
            Arg::Ptr(p) | Arg::U64(p) => b.arg(p),
            Arg::I32(v) => b.arg(v),
            Arg::F32(v) => b.arg(v),
            Arg::F64(v) => b.arg(v),
        };
    }
    // SAFETY: every wrapper checks, before calling here, that each buffer is long enough for
    // the grid it launches and that each scalar matches the kernel's parameter list in order
    // and type (u64 addresses, int, float, double); the addresses come from live cudarc buffers whose
    // borrows the caller holds until this call returns and the work is queued on the one
    // stream they are used on.
    unsafe { b.launch(cfg) }?;
    Ok(())
}

/// [`launch`] through `cuLaunchKernelEx`: with the programmatic stream serialization
/// attribute when `pdl` (see [`PDL_KERNELS`]), and the by-value `tail` parameter if any.
fn launch_ex(
    stream: &cudarc::driver::CudaStream,
    f: &cudarc::driver::CudaFunction,
    cfg: LaunchConfig,
    args: &[Arg],
    tail: Option<ByValue<'_>>,
    pdl: bool,
) -> Result<(), CudaError> {
    use cudarc::driver::sys;
    stream.context().bind_to_thread()?;
    // One 8-byte slot per argument; the driver reads each parameter's size from the start
    // of its slot (little-endian, so a 4-byte int or float is its low half).
    let mut slots: Vec<u64> = args
        .iter()
        .map(|a| match *a {
            Arg::Ptr(p) | Arg::U64(p) => p,
            Arg::I32(v) => u64::from(v as u32),
            Arg::F32(v) => u64::from(v.to_bits()),
            Arg::F64(v) => v.to_bits(),
        })
        .collect();
    let mut params: Vec<*mut std::ffi::c_void> = slots
        .iter_mut()
        .map(|s| (s as *mut u64).cast::<std::ffi::c_void>())
        .collect();
    if let Some(t) = tail {
        // The driver only reads through this pointer.
        params.push(t.bytes.as_ptr().cast_mut().cast::<std::ffi::c_void>());
    }
    // SAFETY: an all-zero CUlaunchAttribute is a valid value of this plain C struct/union.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: if pdl { &mut attr } else { std::ptr::null_mut() },
        numAttrs: u32::from(pdl),
    };
    // SAFETY: as in `launch` (buffers checked by the wrapper, scalars in the kernel's
    // parameter order and types, `tail` the bytes of the kernel's last parameter, see
    // [`ByValue`]); `params` points at `slots` and `tail`, and `config` at `attr`, all
    // alive until the call returns (the driver copies the parameters at launch).
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            f.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()?;
    Ok(())
}

/// Device address of a read-only buffer.
pub(crate) fn rd<T>(gpu: &Gpu, b: &dyn DevicePtr<T>) -> u64 {
    let (p, _sync) = b.device_ptr(gpu.stream());
    p
}

/// Device address of a written buffer.
pub(crate) fn wr<T>(gpu: &Gpu, b: &mut dyn DevicePtrMut<T>) -> u64 {
    let (p, _sync) = b.device_ptr_mut(gpu.stream());
    p
}

/// A 1-D launch of `blocks` blocks of `threads` threads.
pub(crate) fn cfg1(blocks: u32, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}
