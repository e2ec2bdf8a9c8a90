//! Section 4's tensor maps (`gemmt_<kind>[_glu]_tm<TN>`, kernels/gemmt/tma.cuh): the
//! kernels' `GtmMaps` parameter, built per launch by [`tm_maps`] from one [`MapSpec`] per
//! map (x, the weights or quant plane, the scale plane), each checked against the TMA's rules
//! and encoded on the host by `cuTensorMapEncodeTiled`.

use crate::cuda::ops::ByValue;
use crate::cuda::select;
use crate::cuda::{CudaError, shape_err};
use crate::quant::QuantFormat;

/// Section 4's tensor maps, the kernels' `GtmMaps` parameter (kernels/gemmt.cu): x, then per
/// product (plain: up to three, unused ones repeat the first; gate + up: gate, up) the F16 /
/// BF16 weights or the Q4_0 / Q8_0 quant plane, then the quants' scale planes (F16 / BF16:
/// copies of the weight maps, unused). 7 x 128 bytes, 64-byte aligned like the device
/// struct.
#[repr(C, align(64))]
pub(super) struct GtmMaps {
    maps: [[u64; 16]; 7],
}

const _: () = assert!(std::mem::size_of::<GtmMaps>() == select::GEMMTM_MAPS_BYTES);

impl GtmMaps {
    pub(super) fn by_value(&self) -> ByValue<'_> {
        // SAFETY: a plain array of u64 without padding (size checked above), read as bytes
        // for as long as `self` is borrowed.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (self as *const GtmMaps).cast::<u8>(),
                std::mem::size_of::<GtmMaps>(),
            )
        };
        ByValue { bytes }
    }
}

/// Encode the tensor maps of a section 4 launch (host only: `cuTensorMapEncodeTiled` does no
/// device work; a few microseconds per launch): x at `x` (`[n][k]` f16, box 64 values x `tn`
/// tokens, 128-byte swizzle, rows past n read as zeros), and each product `(address, rows)`
/// of `mats` by the weights' `kind` (F16 / BF16 `[rows][k]`, box 64 x 64, 128-byte swizzle;
/// Q4_0 planar: quants `[rows][k / 2]` bytes, box 32 x 64, no swizzle, then scales
/// `[rows][k / 32]` f16 at `rows * k / 2`, box 8 x 64; Q8_0 planar: quants `[rows][k]`
/// bytes, box 64 x 64, 64-byte swizzle, then scales `[rows][k / 32]` f16 at `rows * k`, box
/// 8 x 64).
pub(super) fn tm_maps(
    op: &'static str,
    x: u64,
    n: usize,
    k: usize,
    tn: usize,
    kind: QuantFormat,
    mats: &[(u64, usize)],
) -> Result<GtmMaps, CudaError> {
    let mut out = GtmMaps { maps: [[0; 16]; 7] };
    let xs = x_spec(x, n, k, tn);
    out.maps[0] = tmap(op, &xs)?;
    let Some(&first) = mats.first() else {
        return Err(shape_err(op, "no product"));
    };
    for i in 0..3 {
        let (addr, rows) = mats.get(i).copied().unwrap_or(first);
        let (w, s) = weight_specs(kind, addr, rows, k)
            .ok_or(CudaError::UnsupportedFormat { op, format: kind })?;
        // A stage's boxes (x, then per 64-row half the weights and scales) must bring the
        // bytes the kernel's `full` barrier expects (GtmCfg::TX), or its consumers never wake.
        let half = w.box_bytes() + s.map_or(0, |s| s.box_bytes());
        let tx = (tn * 128 + select::gemmtm_weight_stage_bytes(kind)) as u64;
        if xs.box_bytes() + 2 * half != tx {
            return Err(shape_err(
                op,
                format!("{kind} tensor-map boxes bring other than the kernel's {tx} bytes"),
            ));
        }
        let w = tmap(op, &w)?;
        // F16 / BF16: no scales, a copy of the weights' map (unused).
        out.maps[1 + i] = w;
        out.maps[4 + i] = match s {
            Some(s) => tmap(op, &s)?,
            None => w,
        };
    }
    Ok(out)
}

/// A tensor map's element type (the copies move bytes; the type only sets the element size
/// and the meaning of the box's inner extent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MapTy {
    F16,
    Bf16,
    U8,
    U16,
}

/// One 2D tensor map before its encode: element type and size (`es` bytes), global address,
/// dims and box innermost first, `stride` bytes between rows, the shared-memory swizzle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MapSpec {
    pub(super) ty: MapTy,
    pub(super) es: u64,
    pub(super) addr: u64,
    pub(super) dims: [u64; 2],
    pub(super) stride: u64,
    pub(super) boxd: [u32; 2],
    pub(super) swizzle: Swizzle,
}

impl MapSpec {
    /// The TMA's rules (a violation would surface only as an "illegal instruction" that kills
    /// the context): address and stride multiples of 16, the box's inner extent a multiple
    /// of 16 bytes (at most the swizzle's span, 64 or 128 bytes, with a swizzle), boxes of at
    /// most 256 per dimension.
    pub(super) fn ok(&self) -> bool {
        let inner = u64::from(self.boxd[0]) * self.es;
        self.addr % 16 == 0
            && self.stride % 16 == 0
            && self.stride < 1 << 40
            && self.dims.iter().all(|&d| d > 0 && d <= 1 << 32)
            && self.dims[0] * self.es <= self.stride
            && inner % 16 == 0
            && self.swizzle.span().is_none_or(|s| inner <= s)
            && self.boxd.iter().all(|&b| (1..=256).contains(&b))
    }

    /// Bytes one box brings.
    pub(super) fn box_bytes(&self) -> u64 {
        u64::from(self.boxd[0]) * u64::from(self.boxd[1]) * self.es
    }
}

/// x's map: `[n][k]` f16 at `x`, box 64 values x `tn` tokens, 128-byte swizzle (rows past n
/// read as zeros).
pub(super) fn x_spec(x: u64, n: usize, k: usize, tn: usize) -> MapSpec {
    let k = k as u64;
    MapSpec {
        ty: MapTy::F16,
        es: 2,
        addr: x,
        dims: [k, n as u64],
        stride: 2 * k,
        boxd: [64, tn as u32],
        swizzle: Swizzle::B128,
    }
}

/// The maps of one product of `rows` x `k` weights of `kind` at `addr`: the weights (F16 /
/// BF16 `[rows][k]`, box 64 x 64, 128-byte swizzle) or the quant plane (Q4_0 `[rows][k / 2]`
/// bytes, box 32 x 64, no swizzle; Q8_0 `[rows][k]` bytes, box 64 x 64, 64-byte swizzle:
/// a stage's 64 values of 64 rows, the kernel's QROW x 64), and the quants' scale plane
/// (`[rows][k / 32]` f16 after the quants, box 8 x 64: the 16-byte group of four stages'
/// scale pairs). `None` for a kind section 4 has no entry for.
pub(super) fn weight_specs(
    kind: QuantFormat,
    addr: u64,
    rows: usize,
    k: usize,
) -> Option<(MapSpec, Option<MapSpec>)> {
    let (rows, k) = (rows as u64, k as u64);
    match kind {
        QuantFormat::Q4_0 | QuantFormat::Q8_0 => {
            // Quant bytes per block of 32 values.
            let nb = k / 32;
            let (qb, swizzle) = if kind == QuantFormat::Q4_0 {
                (16, Swizzle::None)
            } else {
                (32, Swizzle::B64)
            };
            let quants = MapSpec {
                ty: MapTy::U8,
                es: 1,
                addr,
                dims: [nb * qb, rows],
                stride: nb * qb,
                boxd: [2 * qb as u32, 64],
                swizzle,
            };
            let scales = MapSpec {
                ty: MapTy::U16,
                es: 2,
                addr: addr + rows * nb * qb,
                dims: [nb, rows],
                stride: nb * 2,
                boxd: [8, 64],
                swizzle: Swizzle::None,
            };
            Some((quants, Some(scales)))
        }
        QuantFormat::F16 | QuantFormat::BF16 => Some((
            MapSpec {
                ty: if kind == QuantFormat::BF16 {
                    MapTy::Bf16
                } else {
                    MapTy::F16
                },
                es: 2,
                addr,
                dims: [k, rows],
                stride: 2 * k,
                boxd: [64, 64],
                swizzle: Swizzle::B128,
            },
            None,
        )),
        _ => None,
    }
}

/// A tensor map's shared-memory swizzle: none, or 16-byte chunks permuted within 64-byte
/// (chunk c of 64-byte row r at chunk c ^ ((r >> 1) & 3)) or 128-byte spans (c ^ (r & 7)),
/// the patterns the kernel's reads assume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Swizzle {
    None,
    B64,
    B128,
}

impl Swizzle {
    /// The widest box row (bytes) the swizzle takes, `None` for no limit.
    fn span(self) -> Option<u64> {
        match self {
            Swizzle::None => None,
            Swizzle::B64 => Some(64),
            Swizzle::B128 => Some(128),
        }
    }
}

/// Encode one 2D tensor map, checked against the TMA's rules first ([`MapSpec::ok`]).
fn tmap(op: &'static str, spec: &MapSpec) -> Result<[u64; 16], CudaError> {
    use cudarc::driver::sys;
    use sys::CUtensorMapDataType_enum as Ty;
    let MapSpec {
        ty,
        es,
        addr,
        dims,
        stride,
        boxd,
        swizzle,
    } = *spec;
    if !spec.ok() {
        return Err(shape_err(
            op,
            format!(
                "tensor map at {addr:#x}: dims {dims:?}, row stride {stride} bytes, box {boxd:?} of {es}-byte values, {swizzle:?} breaks the TMA's rules"
            ),
        ));
    }
    let ty = match ty {
        MapTy::F16 => Ty::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        MapTy::Bf16 => Ty::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        MapTy::U8 => Ty::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        MapTy::U16 => Ty::CU_TENSOR_MAP_DATA_TYPE_UINT16,
    };
    // SAFETY: CUtensorMap is 16 plain u64 words; all-zero is a valid value.
    let mut m: sys::CUtensorMap = unsafe { std::mem::zeroed() };
    let strides = [stride];
    let elem = [1u32, 1];
    let swizzle = match swizzle {
        Swizzle::None => sys::CUtensorMapSwizzle_enum::CU_TENSOR_MAP_SWIZZLE_NONE,
        Swizzle::B64 => sys::CUtensorMapSwizzle_enum::CU_TENSOR_MAP_SWIZZLE_64B,
        Swizzle::B128 => sys::CUtensorMapSwizzle_enum::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    // SAFETY: a host-only encode into `m` from the arrays above (rank 2: two dims, one
    // stride, two box extents, two element strides), all alive for the call; the address is
    // a live device buffer's, which the caller keeps alive until the launch is queued.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut m,
            ty,
            2,
            addr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxd.as_ptr(),
            elem.as_ptr(),
            sys::CUtensorMapInterleave_enum::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion_enum::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill_enum::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()?;
    Ok(m.opaque)
}
