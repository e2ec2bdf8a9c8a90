//! The prompt pass's matrix products as GEMMs: a fused unit (or a group of plain products
//! of one x) of the body staged once and multiplied by the tiled kernel (`gemmt.cu`) or
//! `gemm.cu`, the outputs taken out of their slots while the launch writes them.

use super::super::{CudaDecoder, fuse, get, matrix, model_err, put, take, vector, w_ref};
use crate::arch;
use crate::cuda::CudaError;
use crate::cuda::ops::{self, Activation, GemmX, GemmtSeg};
use crate::cuda::select::GemmKernel;
use cudarc::driver::DevicePtr;

impl CudaDecoder {
    /// The staging buffers, made on first use for the widest matrix.
    fn gemm_x(&mut self) -> Result<GemmX, CudaError> {
        if let Some(x) = self.prefill.x.take() {
            return Ok(x);
        }
        let k_max = self.mats.iter().map(|m| m.cols).max().unwrap_or(1);
        GemmX::with_rows(&self.gpu, self.prefill_pass_rows(), k_max)
    }

    /// Run fused units `units` for `n` rows as GEMMs; `Ok(false)` (nothing queued) when
    /// their weight format has no GEMM. More than one unit: a [`fuse::gemm_group`] of plain
    /// products of one x (one tiled launch; `gemm.cu` runs them one by one on one staging).
    pub(in crate::cuda::decode) fn gemm_units(
        &mut self,
        units: &[fuse::Fused],
        n: usize,
    ) -> Result<bool, CudaError> {
        let Some(&f) = units.first() else {
            return Ok(false);
        };
        let first = match f {
            fuse::Fused::Glu { gate_w, .. } => gate_w,
            fuse::Fused::Residual { weight, .. } | fuse::Fused::Plain { weight, .. } => weight,
            fuse::Fused::RopeAttn { .. } => return Ok(false),
        };
        let fmt = w_ref(&self.mats, matrix(&self.weights, first)?)?.format;
        if !self.gemm_format(fmt) {
            return Ok(false);
        }
        let mut xs = self.gemm_x()?;
        let r = self.gemm_unit(units, n, &mut xs);
        self.prefill.x = Some(xs);
        r.map(|()| true)
    }

    fn gemm_unit(
        &mut self,
        units: &[fuse::Fused],
        n: usize,
        xs: &mut GemmX,
    ) -> Result<(), CudaError> {
        let topts = self.gemmt_opts();
        let CudaDecoder {
            gpu,
            mats,
            weights,
            bufs,
            prefill,
            ..
        } = self;
        let gpu = &**gpu;
        let opts = prefill.opts;
        let tiled = prefill.kernel == GemmKernel::Tiled;
        let mut decoded = prefill
            .decoded
            .lock()
            .map_err(|_| model_err("the prompt pass's decoded weights: a lock was poisoned"))?;
        let decoded = &mut *decoded;
        let f = units[0];
        let (x, norm, first) = match f {
            fuse::Fused::Glu {
                x, norm, gate_w, ..
            } => (x, norm, gate_w),
            fuse::Fused::Residual {
                x, norm, weight, ..
            }
            | fuse::Fused::Plain {
                x, norm, weight, ..
            } => (x, norm, weight),
            fuse::Fused::RopeAttn { .. } => {
                return Err(model_err("rope + attention is not a GEMM"));
            }
        };
        let (k, format) = {
            let w = w_ref(mats, matrix(weights, first)?)?;
            (w.cols, w.format)
        };
        let norm_in = match norm {
            Some(nf) => Some(ops::NormIn {
                weight: vector(weights, nf.weight)?,
                eps: nf.eps,
                w_offset: 0.0,
            }),
            None => None,
        };
        if tiled {
            ops::gemmt_stage_x(gpu, format, topts, get(bufs, x)?, n, k, norm_in, xs)?;
        } else {
            ops::gemm_stage_x_for(gpu, format, get(bufs, x)?, n, k, norm_in, xs)?;
        }
        // The outputs, taken out of their slots while the launch writes them.
        let mut outs = Vec::with_capacity(units.len());
        for u in units {
            let out = match *u {
                fuse::Fused::Glu { out, .. }
                | fuse::Fused::Residual { out, .. }
                | fuse::Fused::Plain { out, .. } => out,
                fuse::Fused::RopeAttn { .. } => {
                    return Err(model_err("rope + attention is not a GEMM"));
                }
            };
            match take(bufs, out) {
                Ok(t) => outs.push((out, t)),
                Err(e) => {
                    for (id, t) in outs {
                        put(bufs, id, t);
                    }
                    return Err(e);
                }
            }
        }
        let r = (|| match f {
            fuse::Fused::Glu {
                gate_w, up_w, act, ..
            } => {
                let wg = w_ref(mats, matrix(weights, gate_w)?)?;
                let wu = w_ref(mats, matrix(weights, up_w)?)?;
                let act = match act {
                    arch::Activation::Silu => Activation::Silu,
                    arch::Activation::GeluTanh => Activation::GeluTanh,
                };
                let y = &mut outs[0].1.slice;
                if tiled {
                    ops::gemmt_glu(gpu, wg, wu, xs, decoded, n, act, y, topts)
                } else {
                    ops::gemm_glu(gpu, wg, wu, xs, n, act, y, opts)
                }
            }
            fuse::Fused::Residual { weight, bias, .. } => {
                let w = w_ref(mats, matrix(weights, weight)?)?;
                let bias = match bias {
                    Some(b) => Some(vector(weights, b)? as &dyn DevicePtr<f32>),
                    None => None,
                };
                let y = &mut outs[0].1.slice;
                if tiled {
                    ops::gemmt(gpu, w, xs, decoded, n, bias, true, y, topts)
                } else {
                    ops::gemm(gpu, w, xs, n, bias, true, y, opts)
                }
            }
            fuse::Fused::Plain { .. } => {
                let mut segs = Vec::with_capacity(units.len());
                for (u, (_, t)) in units.iter().zip(outs.iter_mut()) {
                    let fuse::Fused::Plain { weight, bias, .. } = *u else {
                        return Err(model_err("a GEMM group holds plain products only"));
                    };
                    let bias = match bias {
                        Some(b) => Some(vector(weights, b)? as &dyn DevicePtr<f32>),
                        None => None,
                    };
                    segs.push(GemmtSeg {
                        w: w_ref(mats, matrix(weights, weight)?)?,
                        bias,
                        y: &mut t.slice,
                    });
                }
                if tiled {
                    ops::gemmt_group(gpu, &mut segs, xs, decoded, n, topts)
                } else {
                    segs.iter_mut().try_for_each(|s| {
                        ops::gemm(gpu, s.w, xs, n, s.bias, false, &mut *s.y, opts)
                    })
                }
            }
            fuse::Fused::RopeAttn { .. } => Err(model_err("rope + attention is not a GEMM")),
        })();
        for (id, t) in outs {
            put(bufs, id, t);
        }
        r
    }

    /// A lone body matmul `out = weight x (+ bias)` for `n` rows as a GEMM; `Ok(false)`
    /// when its format has none.
    pub(in crate::cuda::decode) fn gemm_matmul(
        &mut self,
        x: arch::BufId,
        weight: arch::WeightId,
        bias: Option<arch::WeightId>,
        out: arch::BufId,
        n: usize,
    ) -> Result<bool, CudaError> {
        if n > self.prefill_pass_rows() {
            return Err(model_err("a GEMM pass takes at most the pass's rows"));
        }
        if x == out {
            // In place: left to the row path, which refuses it.
            return Ok(false);
        }
        self.gemm_units(
            &[fuse::Fused::Plain {
                x,
                weight,
                bias,
                out,
                norm: None,
            }],
            n,
        )
    }
}
