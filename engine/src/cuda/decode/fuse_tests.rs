//! Tests of the fusion planner (decode/fuse.rs).

use super::*;
use crate::quant::QuantFormat;

fn llama_like() -> Program {
    let spec = crate::arch::synthetic::SyntheticSpec::tiny("llama");
    let bytes = crate::arch::synthetic::gguf_bytes(&spec).unwrap();
    let header = crate::model_file::gguf::parse(&bytes).unwrap();
    crate::arch::build_program(&header).unwrap()
}

#[test]
fn llama_body_fuses_gate_up_and_both_residuals() {
    let p = llama_like();
    let steps = plan(&p);
    // Every op once, in order.
    let mut next = 0;
    for s in &steps {
        assert_eq!(s.first, next);
        next += s.len;
    }
    assert_eq!(next, p.body.len());
    let glu = steps
        .iter()
        .filter(|s| matches!(s.fused, Some(Fused::Glu { .. })))
        .count();
    let res = steps
        .iter()
        .filter(|s| matches!(s.fused, Some(Fused::Residual { .. })))
        .count();
    assert_eq!(glu, p.shape.n_layers);
    assert_eq!(res, 2 * p.shape.n_layers);
    // Both norms of every layer folded: into q, k, v (attention) and the gate/up pass.
    let normed = steps
        .iter()
        .filter(|s| {
            matches!(
                s.fused,
                Some(Fused::Glu { norm: Some(_), .. } | Fused::Plain { norm: Some(_), .. })
            )
        })
        .count();
    assert_eq!(normed, 4 * p.shape.n_layers);
    assert!(
        !steps
            .iter()
            .any(|s| s.fused.is_none() && matches!(p.body[s.first], Op::RmsNorm { .. }))
    );
    // RoPE of q and k joins the attention in every layer.
    let rope_attn: Vec<_> = steps
        .iter()
        .filter_map(|s| match s.fused {
            Some(Fused::RopeAttn {
                q_rope,
                k_rope,
                attn,
                ..
            }) => Some((s.first, q_rope, k_rope, attn)),
            _ => None,
        })
        .collect();
    assert_eq!(rope_attn.len(), p.shape.n_layers);
    for (first, q_rope, k_rope, attn) in rope_attn {
        assert_eq!((q_rope, k_rope, attn), (first, first + 1, first + 2));
        assert!(matches!(p.body[attn], Op::Attention(_)));
    }
    assert!(!steps.iter().any(
        |s| s.fused.is_none() && matches!(p.body[s.first], Op::Rope { .. } | Op::Attention(_))
    ));
    for s in &steps {
        if let Some(Fused::Glu { gate_w, up_w, .. }) = s.fused {
            assert!(p.weight(gate_w).name.ends_with("ffn_gate.weight"));
            assert!(p.weight(up_w).name.ends_with("ffn_up.weight"));
        }
    }
}

/// The pairs a greedy scan of the plan finds (as `CudaDecoder::body_pass` runs them).
fn pairs(p: &Program) -> Vec<Pair> {
    let steps = plan(p);
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < steps.len() {
        if let (Some(a), Some(b)) = (steps[i].fused, steps[i + 1].fused) {
            if let Some(pr) = pair(p, &a, &b) {
                out.push(pr);
                i += 2;
                continue;
            }
        }
        i += 1;
    }
    out
}

#[test]
fn k_and_v_pair_up_in_every_layer() {
    // tiny llama: 4 query heads, 2 KV heads -> q is twice k's rows, k and v alike
    let p = llama_like();
    let pr = pairs(&p);
    assert_eq!(pr.len(), p.shape.n_layers);
    for x in &pr {
        assert!(p.weight(x.a.0).name.ends_with("attn_k.weight"));
        assert!(p.weight(x.b.0).name.ends_with("attn_v.weight"));
        assert!(x.norm.is_some());
        assert_ne!(x.a.2, x.b.2);
    }
    // Units that differ in shape, input or norm do not pair.
    let steps = plan(&p);
    let plain: Vec<Fused> = steps
        .iter()
        .filter_map(|s| match s.fused {
            Some(f @ Fused::Plain { .. }) => Some(f),
            _ => None,
        })
        .collect();
    let (q, k) = (plain[0], plain[1]);
    assert!(pair(&p, &q, &k).is_none(), "q and k differ in rows");
    assert!(pair(&p, &k, &k).is_none(), "one output twice");
    if let Fused::Plain {
        x,
        weight,
        bias,
        out,
        ..
    } = k
    {
        let no_norm = Fused::Plain {
            x,
            weight,
            bias,
            out,
            norm: None,
        };
        assert!(pair(&p, &no_norm, &plain[2]).is_none(), "norms differ");
    }
}

/// The triples a scan of the plan finds (as `CudaDecoder::body_pass` tries them, before
/// pairs).
fn triples(p: &Program) -> Vec<(usize, Triple)> {
    let steps = plan(p);
    let mut out = Vec::new();
    let mut i = 0;
    while i + 2 < steps.len() {
        if let (Some(a), Some(b), Some(c)) =
            (steps[i].fused, steps[i + 1].fused, steps[i + 2].fused)
        {
            if let Some(t) = triple(p, &a, &b, &c) {
                out.push((i, t));
                i += 3;
                continue;
            }
        }
        i += 1;
    }
    out
}

#[test]
fn q_k_and_v_make_one_triple_in_every_layer() {
    let p = llama_like();
    let tr = triples(&p);
    assert_eq!(tr.len(), p.shape.n_layers);
    for (_, t) in &tr {
        let names: Vec<&str> = t.m.iter().map(|m| p.weight(m.0).name.as_str()).collect();
        assert!(names[0].ends_with("attn_q.weight"), "{names:?}");
        assert!(names[1].ends_with("attn_k.weight"), "{names:?}");
        assert!(names[2].ends_with("attn_v.weight"), "{names:?}");
        assert!(t.norm.is_some());
        assert!(t.m.iter().all(|m| m.2 != t.x));
        assert!(t.m[0].2 != t.m[1].2 && t.m[1].2 != t.m[2].2 && t.m[0].2 != t.m[2].2);
        // q has other rows than k and v (4 query heads, 2 KV heads): a triple, not a pair.
        assert_ne!(p.weight(t.m[0].0).rows, p.weight(t.m[1].0).rows);
    }
    // k and v still pair (the fallback where the triple's launch does not apply).
    let steps = plan(&p);
    let (i, _) = tr[0];
    let f = |j: usize| steps[j].fused.unwrap();
    assert!(pair(&p, &f(i + 1), &f(i + 2)).is_some());
    // Not a triple: a unit that is not plain, one output twice, another norm or x.
    let glu = steps
        .iter()
        .position(|s| matches!(s.fused, Some(Fused::Glu { .. })))
        .unwrap();
    assert!(triple(&p, &f(i), &f(i + 1), &f(glu)).is_none());
    assert!(triple(&p, &f(i), &f(i + 1), &f(i + 1)).is_none());
    let with = |u: Fused, g: &dyn Fn(&mut Fused)| {
        let mut u = u;
        g(&mut u);
        u
    };
    let no_norm = with(f(i + 2), &|u| {
        if let Fused::Plain { norm, .. } = u {
            *norm = None;
        }
    });
    assert!(triple(&p, &f(i), &f(i + 1), &no_norm).is_none());
    let other_x = with(f(i + 2), &|u| {
        if let Fused::Plain { x, .. } = u {
            *x = BufId(x.0 + 1);
        }
    });
    assert!(triple(&p, &f(i), &f(i + 1), &other_x).is_none());
    let writes_x = with(f(i + 2), &|u| {
        if let Fused::Plain { x, out, .. } = u {
            *out = *x;
        }
    });
    assert!(triple(&p, &f(i), &f(i + 1), &writes_x).is_none());
}

#[test]
fn matrices_of_different_formats_or_k_make_no_triple() {
    let mut p = llama_like();
    let tr = triples(&p);
    let (i, t) = tr[0];
    let steps = plan(&p);
    let f = |j: usize| steps[j].fused.unwrap();
    // v in another format: no triple (and no pair of k and v).
    let v = t.m[2].0;
    let fmt = p.weight(v).format;
    p.weights[v.0 as usize].format = if fmt == QuantFormat::Q8_0 {
        QuantFormat::Q4_0
    } else {
        QuantFormat::Q8_0
    };
    assert!(triple(&p, &f(i), &f(i + 1), &f(i + 2)).is_none());
    assert!(pair(&p, &f(i + 1), &f(i + 2)).is_none());
    p.weights[v.0 as usize].format = fmt;
    assert!(triple(&p, &f(i), &f(i + 1), &f(i + 2)).is_some());
    // k of another width: no triple.
    let k = t.m[1].0;
    p.weights[k.0 as usize].cols *= 2;
    assert!(triple(&p, &f(i), &f(i + 1), &f(i + 2)).is_none());
}

#[test]
fn q_k_and_v_make_one_gemm_group_in_every_layer() {
    let p = llama_like();
    let steps = plan(&p);
    let mut groups = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        let len = gemm_group(&p, &steps[i..], 3);
        assert!(len >= 1);
        if len > 1 {
            groups.push((i, len));
        }
        i += len;
    }
    assert_eq!(groups.len(), p.shape.n_layers);
    for &(i, len) in &groups {
        assert_eq!(len, 3);
        let names: Vec<&str> = steps[i..i + 3]
            .iter()
            .map(|s| match s.fused {
                Some(Fused::Plain { weight, .. }) => p.weight(weight).name.as_str(),
                _ => "",
            })
            .collect();
        assert!(names[0].ends_with("attn_q.weight"), "{names:?}");
        assert!(names[1].ends_with("attn_k.weight"), "{names:?}");
        assert!(names[2].ends_with("attn_v.weight"), "{names:?}");
    }
    // The cap, and a unit that is not plain, end a group.
    let (i, _) = groups[0];
    assert_eq!(gemm_group(&p, &steps[i..], 2), 2);
    assert_eq!(gemm_group(&p, &steps[i..i + 1], 3), 1);
    let glu = steps
        .iter()
        .position(|s| matches!(s.fused, Some(Fused::Glu { .. })))
        .unwrap();
    assert_eq!(gemm_group(&p, &steps[glu..], 3), 1);
    // Another norm (or another x) ends it too.
    let mut st: Vec<Step> = steps[i..i + 3].to_vec();
    if let Some(Fused::Plain { norm, .. }) = st[1].fused.as_mut() {
        *norm = None;
    }
    assert_eq!(gemm_group(&p, &st, 3), 1);
}

#[test]
fn rope_with_another_table_is_not_fused_with_attention() {
    let mut p = llama_like();
    let i = p
        .body
        .iter()
        .position(|op| matches!(op, Op::Rope { .. }))
        .unwrap();
    if let Some(Op::Rope { rope, .. }) = p.body.get_mut(i + 1) {
        rope.base *= 2.0;
    }
    let steps = plan(&p);
    let fused = steps
        .iter()
        .filter(|s| matches!(s.fused, Some(Fused::RopeAttn { .. })))
        .count();
    assert_eq!(fused, p.shape.n_layers - 1);
    // The unfused layer runs its three ops one by one.
    assert!(
        steps
            .iter()
            .any(|s| s.first == i && s.len == 1 && s.fused.is_none())
    );
}

#[test]
fn a_matmul_output_read_later_is_not_fused() {
    let mut p = llama_like();
    // Make the head read the attention output buffer: the residual fusion of the last
    // attention projection must then be refused (its output would never be written).
    let Some(Op::MatMul { out: t, .. }) = p
        .body
        .iter()
        .find(|op| matches!(op, Op::MatMul { weight, .. } if p.weight(*weight).name.ends_with("attn_output.weight")))
        .cloned()
    else {
        panic!("no attention output projection");
    };
    let h = p.hidden;
    p.head.insert(0, Op::Add { a: h, b: t, out: h });
    let res = plan(&p)
        .iter()
        .filter(|s| matches!(s.fused, Some(Fused::Residual { .. })))
        .count();
    // Every layer but the last rewrites the buffer (its own projection) before the
    // head reads it: only the last layer's attention residual stays unfused.
    assert_eq!(res, 2 * p.shape.n_layers - 1);
}

#[test]
fn body_buffers_leave_out_the_heads_own() {
    for arch in ["llama", "qwen2", "qwen3", "gemma3"] {
        let spec = crate::arch::synthetic::SyntheticSpec::tiny(arch);
        let bytes = crate::arch::synthetic::gguf_bytes(&spec).unwrap();
        let header = crate::model_file::gguf::parse(&bytes).unwrap();
        let p = crate::arch::build_program(&header).unwrap();
        let used = body_buffers(&p);
        assert_eq!(used.len(), p.buffers.len(), "{arch}");
        // The body's output and every buffer a body op touches are in; the logits (and the
        // final norm's output, written only by the head) are out.
        assert!(used[p.hidden.0 as usize], "{arch}");
        assert!(!used[p.logits.0 as usize], "{arch}");
        for op in &p.body {
            for b in reads(op).into_iter().chain([writes(op)]) {
                assert!(used[b.0 as usize], "{arch}: {}", p.buffer(b).name);
            }
        }
        for op in &p.head {
            let w = writes(op);
            assert!(!used[w.0 as usize], "{arch}: {}", p.buffer(w).name);
        }
    }
}
