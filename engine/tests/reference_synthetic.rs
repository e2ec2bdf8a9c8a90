//! Reference executor on synthetic checkpoints of every family: agreement with an
//! independent, naive f64 implementation written from the papers/configs (the hand check),
//! bit-identical results across thread counts, prefill vs token-by-token decode and batch
//! composition, sliding-window semantics, and named errors for bad files.

// Test helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use engine::arch::synthetic::{SyntheticSpec, gguf_bytes};
use engine::arch::{self, ArchError};
use engine::kv::KvDtype;
use engine::model_file::gguf_write::{TensorSpec, gguf_to_vec};
use engine::model_file::{FileBytes, GgufModel, MetaValue};
use engine::quant::QuantFormat;
use engine::reference::{LogitRows, Reference, ReferenceError, ReferenceOptions, SeqInput};

const FAMILIES: [&str; 4] = ["llama", "qwen2", "qwen3", "gemma3"];

fn open(spec: &SyntheticSpec) -> Arc<GgufModel> {
    let bytes = gguf_bytes(spec).unwrap();
    Arc::new(
        GgufModel::from_bytes(PathBuf::from("synthetic.gguf"), FileBytes::Owned(bytes)).unwrap(),
    )
}

fn reference(spec: &SyntheticSpec, threads: usize, kv: KvDtype) -> Reference {
    Reference::new(
        open(spec),
        ReferenceOptions {
            threads: Some(threads),
            kv_dtype: kv,
        },
    )
    .unwrap()
}

fn prompt(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 37 + 11) % vocab) as u32).collect()
}

/// Logits of every position of `tokens`, fed as one prefill.
fn all_logits(r: &Reference, tokens: &[u32]) -> Vec<f32> {
    let mut kv = r.new_cache();
    let mut b = [SeqInput {
        kv: &mut kv,
        tokens,
        logits: LogitRows::All,
    }];
    r.forward(&mut b).unwrap().data
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

type Tensors = Vec<(TensorSpec, Vec<u8>)>;

/// Re-write a model file after editing its metadata and tensors.
fn rewrite(
    m: &GgufModel,
    edit: impl FnOnce(&mut BTreeMap<String, MetaValue>, &mut Tensors),
) -> Arc<GgufModel> {
    let mut meta = m.header().metadata.clone();
    let mut tensors: Tensors = m
        .header()
        .tensors
        .iter()
        .map(|t| {
            (
                TensorSpec::new(t.name.clone(), &t.dims, t.format),
                m.tensor_bytes(t).to_vec(),
            )
        })
        .collect();
    edit(&mut meta, &mut tensors);
    let pairs: Vec<(TensorSpec, &[u8])> = tensors
        .iter()
        .map(|(s, d)| (s.clone(), d.as_slice()))
        .collect();
    let bytes = gguf_to_vec(&meta, &pairs).unwrap();
    Arc::new(GgufModel::from_bytes(PathBuf::from("edited.gguf"), FileBytes::Owned(bytes)).unwrap())
}

// ---------------------------------------------------------------------------------------
// Independent naive implementation (f64, straight loops, no shared code with the engine).

struct Naive {
    m: Arc<GgufModel>,
    s: SyntheticSpec,
}

impl Naive {
    fn w(&self, name: &str) -> Vec<f64> {
        self.m
            .dequantize(name)
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect()
    }
    fn has(&self, name: &str) -> bool {
        self.m.header().tensor(name).is_some()
    }
    fn matvec(&self, name: &str, x: &[f64]) -> Vec<f64> {
        let w = self.w(name);
        let cols = x.len();
        w.chunks(cols)
            .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
            .collect()
    }
    fn norm(&self, x: &[f64], w: &[f64]) -> Vec<f64> {
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let r = 1.0 / (ms + f64::from(self.s.rms_eps)).sqrt();
        x.iter()
            .zip(w.iter().cycle())
            .map(|(v, g)| v * r * g)
            .collect()
    }
    fn rope(&self, x: &mut [f64], pos: usize, base: f64, neox: bool) {
        let hd = self.s.head_dim;
        for head in x.chunks_mut(hd) {
            for i in 0..hd / 2 {
                let th = pos as f64 * base.powf(-2.0 * i as f64 / hd as f64);
                let (a, b) = if neox {
                    (i, i + hd / 2)
                } else {
                    (2 * i, 2 * i + 1)
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * th.cos() - x1 * th.sin();
                head[b] = x0 * th.sin() + x1 * th.cos();
            }
        }
    }

    /// Logits of every position.
    fn run(&self, tokens: &[u32]) -> Vec<Vec<f64>> {
        let s = &self.s;
        let (e, hd, nh, nkv) = (s.n_embd, s.head_dim, s.n_heads, s.n_kv_heads);
        let gemma = s.arch == "gemma3";
        let neox = s.arch != "llama";
        let emb = self.w("token_embd.weight");
        let mut h: Vec<Vec<f64>> = tokens
            .iter()
            .map(|&t| {
                let row = &emb[t as usize * e..(t as usize + 1) * e];
                let k = if gemma { (e as f64).sqrt() } else { 1.0 };
                row.iter().map(|v| v * k).collect()
            })
            .collect();
        for il in 0..s.n_layers {
            let p = |n: &str| format!("blk.{il}.{n}");
            let local = gemma
                && s.sliding_window > 0
                && match &s.swa_pattern {
                    Some(pat) => pat[il],
                    None => il % 6 < 5,
                };
            let base = if local {
                10000.0
            } else {
                f64::from(s.rope_base)
            };
            let mut ks = Vec::new();
            let mut vs = Vec::new();
            let mut qs = Vec::new();
            for x in &h {
                let xn = self.norm(x, &self.w(&p("attn_norm.weight")));
                let mut q = self.matvec(&p("attn_q.weight"), &xn);
                let mut k = self.matvec(&p("attn_k.weight"), &xn);
                let mut v = self.matvec(&p("attn_v.weight"), &xn);
                if self.has(&p("attn_q.bias")) {
                    for (a, b) in q.iter_mut().zip(self.w(&p("attn_q.bias"))) {
                        *a += b;
                    }
                    for (a, b) in k.iter_mut().zip(self.w(&p("attn_k.bias"))) {
                        *a += b;
                    }
                    for (a, b) in v.iter_mut().zip(self.w(&p("attn_v.bias"))) {
                        *a += b;
                    }
                }
                if self.has(&p("attn_q_norm.weight")) {
                    let qn = self.w(&p("attn_q_norm.weight"));
                    let kn = self.w(&p("attn_k_norm.weight"));
                    q = q.chunks(hd).flat_map(|c| self.norm(c, &qn)).collect();
                    k = k.chunks(hd).flat_map(|c| self.norm(c, &kn)).collect();
                }
                let pos = qs.len();
                self.rope(&mut q, pos, base, neox);
                self.rope(&mut k, pos, base, neox);
                qs.push(q);
                ks.push(k);
                vs.push(v);
            }
            for (pos, x) in h.iter_mut().enumerate() {
                let mut att = vec![0f64; nh * hd];
                for head in 0..nh {
                    let kvh = head / (nh / nkv);
                    let q = &qs[pos][head * hd..(head + 1) * hd];
                    let lo = if local {
                        (pos + 1).saturating_sub(s.sliding_window)
                    } else {
                        0
                    };
                    let sc: Vec<f64> = (lo..=pos)
                        .map(|j| {
                            let k = &ks[j][kvh * hd..(kvh + 1) * hd];
                            q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                        })
                        .collect();
                    let m = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let ex: Vec<f64> = sc.iter().map(|v| (v - m).exp()).collect();
                    let z: f64 = ex.iter().sum();
                    for (j, w) in (lo..=pos).zip(&ex) {
                        for d in 0..hd {
                            att[head * hd + d] += w / z * vs[j][kvh * hd + d];
                        }
                    }
                }
                let mut o = self.matvec(&p("attn_output.weight"), &att);
                if gemma {
                    o = self.norm(&o, &self.w(&p("post_attention_norm.weight")));
                }
                for (a, b) in x.iter_mut().zip(&o) {
                    *a += b;
                }
                let xn = self.norm(x, &self.w(&p("ffn_norm.weight")));
                let g = self.matvec(&p("ffn_gate.weight"), &xn);
                let u = self.matvec(&p("ffn_up.weight"), &xn);
                let act: Vec<f64> = g
                    .iter()
                    .zip(&u)
                    .map(|(&g, &u)| {
                        let a = if gemma {
                            0.5 * g
                                * (1.0
                                    + ((2.0 / std::f64::consts::PI).sqrt()
                                        * (g + 0.044715 * g * g * g))
                                        .tanh())
                        } else {
                            g / (1.0 + (-g).exp())
                        };
                        a * u
                    })
                    .collect();
                let mut d = self.matvec(&p("ffn_down.weight"), &act);
                if gemma {
                    d = self.norm(&d, &self.w(&p("post_ffw_norm.weight")));
                }
                for (a, b) in x.iter_mut().zip(&d) {
                    *a += b;
                }
            }
        }
        let out = if self.has("output.weight") {
            "output.weight"
        } else {
            "token_embd.weight"
        };
        let on = self.w("output_norm.weight");
        h.iter()
            .map(|x| self.matvec(out, &self.norm(x, &on)))
            .collect()
    }
}

fn max_abs_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn matches_naive_f64_implementation_every_family() {
    for fam in FAMILIES {
        for layers in [1, 3] {
            let mut spec = SyntheticSpec::tiny(fam);
            spec.n_layers = layers;
            spec.seed = 7 + layers as u64;
            let r = reference(&spec, 2, KvDtype::F32);
            let toks = prompt(9, spec.n_vocab);
            let ours = all_logits(&r, &toks);
            let naive = Naive {
                m: open(&spec),
                s: spec.clone(),
            }
            .run(&toks);
            let flat: Vec<f64> = naive.concat();
            let scale = flat.iter().fold(0f64, |m, v| m.max(v.abs()));
            let d = max_abs_diff(&ours, &flat);
            println!("{fam} layers={layers}: max |diff| {d:.3e} (max |logit| {scale:.2})");
            assert!(
                d < 2e-5 * scale.max(1.0),
                "{fam} layers={layers}: max diff {d} vs scale {scale}"
            );
        }
    }
}

#[test]
fn bit_identical_across_thread_counts() {
    for fam in FAMILIES {
        let mut spec = SyntheticSpec::tiny(fam);
        spec.matrix_format = QuantFormat::Q8_0;
        spec.n_embd = 128;
        spec.n_ff = 160;
        let toks = prompt(23, spec.n_vocab);
        let runs: Vec<Vec<u32>> = [1, 2, 3]
            .iter()
            .map(|&t| bits(&all_logits(&reference(&spec, t, KvDtype::F16), &toks)))
            .collect();
        assert_eq!(runs[0], runs[1], "{fam}: 1 vs 2 threads");
        assert_eq!(runs[0], runs[2], "{fam}: 1 vs 3 threads");
    }
}

#[test]
fn prefill_then_decode_equals_token_by_token() {
    for fam in FAMILIES {
        let spec = SyntheticSpec::tiny(fam);
        let r = reference(&spec, 2, KvDtype::F16);
        let toks = prompt(14, spec.n_vocab);
        let whole = all_logits(&r, &toks);
        // Token by token.
        let mut kv = r.new_cache();
        let mut one = Vec::new();
        for t in &toks {
            one.extend(r.step(&mut kv, std::slice::from_ref(t)).unwrap());
        }
        assert_eq!(bits(&whole), bits(&one), "{fam}: prefill vs token-by-token");
        // Prefill of 5, then chunks of 4 and 5.
        let mut kv = r.new_cache();
        let mut mixed = Vec::new();
        for chunk in [&toks[..5], &toks[5..9], &toks[9..]] {
            let mut b = [SeqInput {
                kv: &mut kv,
                tokens: chunk,
                logits: LogitRows::All,
            }];
            mixed.extend(r.forward(&mut b).unwrap().data);
        }
        assert_eq!(bits(&whole), bits(&mixed), "{fam}: chunked prefill");
    }
}

#[test]
fn batch_composition_does_not_change_a_sequence() {
    let spec = SyntheticSpec::tiny("qwen2");
    let r = reference(&spec, 3, KvDtype::F16);
    let a = prompt(10, spec.n_vocab);
    let b: Vec<u32> = prompt(17, spec.n_vocab)
        .iter()
        .map(|t| (t + 5) % 96)
        .collect();
    let alone = all_logits(&r, &a);
    let (mut ka, mut kb) = (r.new_cache(), r.new_cache());
    // b first, then a: a is at a different place in the batch.
    let mut batch = [
        SeqInput {
            kv: &mut kb,
            tokens: &b,
            logits: LogitRows::Last,
        },
        SeqInput {
            kv: &mut ka,
            tokens: &a,
            logits: LogitRows::All,
        },
    ];
    let out = r.forward(&mut batch).unwrap();
    assert_eq!(out.rows.len(), 1 + a.len());
    assert_eq!(out.rows[0], (0, b.len() - 1));
    let a_rows: Vec<f32> = (1..out.rows.len())
        .flat_map(|i| out.row(i).to_vec())
        .collect();
    assert_eq!(bits(&alone), bits(&a_rows));
    // Decoding both together, one token each, equals decoding a alone.
    let (mut ka2, mut kb2) = (r.new_cache(), r.new_cache());
    r.step(&mut ka2, &a).unwrap();
    r.step(&mut kb2, &b).unwrap();
    let mut batch = [
        SeqInput {
            kv: &mut kb2,
            tokens: &[3],
            logits: LogitRows::Last,
        },
        SeqInput {
            kv: &mut ka2,
            tokens: &[7],
            logits: LogitRows::Last,
        },
    ];
    let both = r.forward(&mut batch).unwrap();
    let mut ka3 = r.new_cache();
    r.step(&mut ka3, &a).unwrap();
    let solo = r.step(&mut ka3, &[7]).unwrap();
    assert_eq!(bits(both.row(1)), bits(&solo));
}

#[test]
fn gemma3_sliding_window_hides_old_tokens_only_on_local_layers() {
    let mut spec = SyntheticSpec::tiny("gemma3");
    spec.n_layers = 2;
    spec.sliding_window = 3;
    spec.rope_base = 500000.0;
    spec.swa_pattern = Some(vec![true, true]);
    let toks = prompt(10, spec.n_vocab);
    let mut changed = toks.clone();
    changed[0] = (changed[0] + 1) % spec.n_vocab as u32;
    let r = reference(&spec, 2, KvDtype::F32);
    let last = |t: &[u32]| r.step(&mut r.new_cache(), t).unwrap();
    // Two local layers of window 3 see back 4 positions: token 0 cannot reach position 9.
    assert_eq!(bits(&last(&toks)), bits(&last(&changed)));
    // ...but it does reach position 4 (window 3, two layers: 4 - 2 - 2 = 0).
    assert_ne!(bits(&last(&toks[..5])), bits(&last(&changed[..5])));
    // With the second layer global, it reaches every position.
    spec.swa_pattern = Some(vec![true, false]);
    let r = reference(&spec, 2, KvDtype::F32);
    let last = |t: &[u32]| r.step(&mut r.new_cache(), t).unwrap();
    assert_ne!(bits(&last(&toks)), bits(&last(&changed)));
    // The program carries the per-layer window and RoPE bases.
    let p = r.program();
    let atts: Vec<_> = p
        .ops()
        .filter_map(|o| {
            if let arch::Op::Attention(a) = o {
                Some(a.window)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(atts, vec![Some(3), None]);
    let bases: Vec<f32> = p
        .ops()
        .filter_map(|o| {
            if let arch::Op::Rope { rope, .. } = o {
                Some(rope.base)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        bases,
        vec![10000.0, 10000.0, spec.rope_base, spec.rope_base]
    );
}

#[test]
fn gemma3_default_pattern_is_every_sixth_layer_global() {
    let mut spec = SyntheticSpec::tiny("gemma3");
    spec.n_layers = 12;
    spec.rope_base = 1e6;
    let m = open(&spec);
    let p = arch::build_program(m.header()).unwrap();
    let windows: Vec<Option<usize>> = p.kv_layers.iter().map(|k| k.window).collect();
    let expect: Vec<Option<usize>> = (0..12)
        .map(|il| if il % 6 == 5 { None } else { Some(4) })
        .collect();
    assert_eq!(windows, expect);
}

#[test]
fn unsupported_and_corrupt_files_give_named_errors() {
    let mut spec = SyntheticSpec::tiny("llama");
    spec.arch = "mamba";
    let m = open(&spec);
    let err = Reference::new(m, ReferenceOptions::default())
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(msg.contains("unsupported architecture \"mamba\""), "{msg}");
    assert!(
        msg.contains("supported: llama, qwen2, qwen3, gemma3"),
        "{msg}"
    );

    // A qwen2 file without its QKV biases is not a valid qwen2 file.
    let m = rewrite(&open(&SyntheticSpec::tiny("qwen2")), |_, t| {
        t.retain(|(s, _)| s.name != "blk.0.attn_q.bias")
    });
    let err = arch::build_program(m.header()).err().unwrap();
    assert_eq!(err, ArchError::MissingTensor("blk.0.attn_q.bias".into()));

    // A tensor of the wrong shape is named.
    let m = rewrite(&open(&SyntheticSpec::tiny("llama")), |_, t| {
        for (s, d) in t.iter_mut() {
            if s.name == "blk.1.ffn_up.weight" {
                s.dims = vec![s.dims[0], s.dims[1] - 1];
                d.truncate(d.len() / 96 * 95);
            }
        }
    });
    let err = arch::build_program(m.header()).err().unwrap();
    assert!(
        matches!(err, ArchError::Shape { ref name, .. } if name == "blk.1.ffn_up.weight"),
        "{err}"
    );

    // Missing hyper-parameters are named.
    let m = rewrite(&open(&SyntheticSpec::tiny("qwen3")), |meta, _| {
        meta.remove("qwen3.attention.head_count");
    });
    let err = arch::build_program(m.header()).err().unwrap();
    assert_eq!(
        err.to_string(),
        "missing metadata key qwen3.attention.head_count"
    );

    // A token outside the vocabulary is an error, and the cache does not grow.
    let spec = SyntheticSpec::tiny("llama");
    let r = reference(&spec, 1, KvDtype::F16);
    let mut kv = r.new_cache();
    let e = r.step(&mut kv, &[1, 96]).err().unwrap();
    assert!(matches!(
        e,
        ReferenceError::TokenOutOfRange {
            token: 96,
            n_vocab: 96
        }
    ));
    assert_eq!(kv.len(), 0);
}

#[test]
fn cached_weights_give_identical_results() {
    let mut spec = SyntheticSpec::tiny("qwen3");
    spec.matrix_format = QuantFormat::Q4_K;
    spec.n_embd = 256;
    spec.n_heads = 16;
    spec.n_kv_heads = 4;
    spec.n_ff = 512;
    let toks = prompt(9, spec.n_vocab);
    let plain = bits(&all_logits(&reference(&spec, 2, KvDtype::F16), &toks));
    for budget in [usize::MAX, 300_000] {
        let mut r = reference(&spec, 2, KvDtype::F16);
        let used = r.cache_weights(budget).unwrap();
        assert!(used > 0 && used <= budget);
        assert_eq!(plain, bits(&all_logits(&r, &toks)), "budget {budget}");
    }
}
