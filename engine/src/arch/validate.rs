//! Structural check of a [`Program`]: every weight and buffer id in range and every op's
//! widths consistent, so a backend can execute a validated program without re-checking
//! shapes (and without panicking on a bad index).

use super::ArchError;
use super::program::{BufId, Op, Program, WeightId};

fn bad(msg: String) -> ArchError {
    ArchError::Internal(msg)
}

fn width(p: &Program, b: BufId) -> Result<usize, ArchError> {
    p.buffers
        .get(b.0 as usize)
        .map(|s| s.width)
        .ok_or_else(|| bad(format!("buffer id {} out of range", b.0)))
}

fn wshape(p: &Program, w: WeightId) -> Result<(usize, usize), ArchError> {
    p.weights
        .get(w.0 as usize)
        .map(|s| (s.rows, s.cols))
        .ok_or_else(|| bad(format!("weight id {} out of range", w.0)))
}

fn eq(what: &str, a: usize, b: usize) -> Result<(), ArchError> {
    if a == b {
        Ok(())
    } else {
        Err(bad(format!("{what}: {a} != {b}")))
    }
}

/// Check `p`; see the module docs.
pub fn validate(p: &Program) -> Result<(), ArchError> {
    for op in p.ops() {
        match op {
            Op::Embed { table, out, .. } => {
                let (_, cols) = wshape(p, *table)?;
                eq("embed width", width(p, *out)?, cols)?;
            }
            Op::RmsNorm {
                x,
                weight,
                out,
                group,
                ..
            } => {
                let (rows, cols) = wshape(p, *weight)?;
                eq("norm weight rows", rows, 1)?;
                eq("norm weight length", cols, *group)?;
                let w = width(p, *x)?;
                if *group == 0 || w % group != 0 {
                    return Err(bad(format!("norm group {group} does not divide width {w}")));
                }
                eq("norm out width", width(p, *out)?, w)?;
            }
            Op::MatMul {
                x,
                weight,
                bias,
                out,
            } => {
                let (rows, cols) = wshape(p, *weight)?;
                eq("matmul input width", width(p, *x)?, cols)?;
                eq("matmul output width", width(p, *out)?, rows)?;
                if x == out {
                    return Err(bad("matmul cannot run in place".into()));
                }
                if let Some(bias) = bias {
                    let (br, bc) = wshape(p, *bias)?;
                    eq("bias rows", br, 1)?;
                    eq("bias length", bc, rows)?;
                }
            }
            Op::Rope { x, rope } => {
                eq("rope width", width(p, *x)?, rope.n_heads * rope.head_dim)?;
                if rope.rot_dims > rope.head_dim || rope.rot_dims % 2 != 0 {
                    return Err(bad(format!(
                        "rope dims {} vs head {}",
                        rope.rot_dims, rope.head_dim
                    )));
                }
                if let Some(f) = rope.freq_factors {
                    let (r, c) = wshape(p, f)?;
                    eq("rope factors", r * c, rope.rot_dims / 2)?;
                }
            }
            Op::Scale { x, .. } | Op::Softcap { x, .. } => {
                width(p, *x)?;
            }
            Op::Attention(a) => {
                let kv = p
                    .kv_layers
                    .get(a.kv_layer)
                    .ok_or_else(|| bad(format!("kv layer {} out of range", a.kv_layer)))?;
                eq("kv heads", kv.n_kv_heads, a.n_kv_heads)?;
                eq("kv head dim", kv.head_dim, a.head_dim)?;
                if kv.window != a.window {
                    return Err(bad("attention window differs from its KV layer".into()));
                }
                if a.n_kv_heads == 0 || a.n_heads % a.n_kv_heads != 0 {
                    return Err(bad(format!(
                        "{} KV heads for {} heads",
                        a.n_kv_heads, a.n_heads
                    )));
                }
                eq("q width", width(p, a.q)?, a.n_heads * a.head_dim)?;
                eq("k width", width(p, a.k)?, a.n_kv_heads * a.head_dim)?;
                eq("v width", width(p, a.v)?, a.n_kv_heads * a.head_dim)?;
                eq(
                    "attention out width",
                    width(p, a.out)?,
                    a.n_heads * a.head_dim,
                )?;
            }
            Op::GatedAct { gate, up, out, .. } => {
                let w = width(p, *gate)?;
                eq("gated up width", width(p, *up)?, w)?;
                eq("gated out width", width(p, *out)?, w)?;
            }
            Op::Add { a, b, out } => {
                let w = width(p, *a)?;
                eq("add width", width(p, *b)?, w)?;
                eq("add out width", width(p, *out)?, w)?;
            }
        }
    }
    eq("hidden width", width(p, p.hidden)?, p.shape.n_embd)?;
    eq("logits width", width(p, p.logits)?, p.shape.n_vocab)?;
    Ok(())
}
