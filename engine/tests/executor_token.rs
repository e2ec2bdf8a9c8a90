//! The executor's token path ([`Want::Token`]: the executor picks the next token from the
//! request's sampler and grammar mask) equals the host path the scheduler ran before it
//! (download the logits row, set the grammar's disallowed tokens to `-inf`,
//! [`Sampler::sample`]) on the CPU executor with SmolLM2: greedy, sampled with a seed (with
//! and without penalties), and constrained by a JSON schema (greedy and sampled). Same
//! tokens, and the samplers end in the same state (same number of draws taken).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;

use engine::api::constrain::{GrammarEnv, GrammarSpec};
use engine::kv::{KvDtype, SeqKv};
use engine::model_file::GgufModel;
use engine::reference::{Reference, ReferenceOptions};
use engine::sampling::{Sampler, SamplerConfig};
use engine::scheduler::{CpuExecutor, Executor, StepInput, StepOut, TokenPick, Want};
use engine::tokenizer::Tokenizer;
use serde_json::{Value, json};

const N: usize = 24;

fn load() -> Option<(CpuExecutor, Tokenizer)> {
    let dir = match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/assay/models")
        }
    };
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.exists() {
        println!("SKIP: {} not found", path.display());
        return None;
    }
    let model = Arc::new(GgufModel::open(&path).unwrap());
    let opts = ReferenceOptions {
        threads: Some(2),
        kv_dtype: KvDtype::F16,
    };
    let mut r = Reference::new(model.clone(), opts).unwrap();
    r.cache_weights(1 << 30).unwrap();
    let tok = Tokenizer::from_gguf(model.header()).unwrap();
    Some((CpuExecutor::new(r), tok))
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer"},
            "pet": {"enum": ["cat", "dog", "fish"]}
        },
        "required": ["name", "age", "pet"],
        "additionalProperties": false
    })
}

/// Generate up to `N` tokens after `prompt`, one step per token through `exec`, either the
/// old host path (`token_path = false`: logits, mask, sample) or the token path. Returns the
/// tokens and the next 64 bits of the sampler's generator (its state after the run).
fn generate(
    exec: &mut CpuExecutor,
    tok: &Tokenizer,
    prompt: &[u32],
    cfg: &SamplerConfig,
    grammar: Option<&GrammarEnv>,
    token_path: bool,
) -> (Vec<u32>, u64) {
    let mut sampler = Sampler::new(cfg.clone());
    for &t in prompt {
        sampler.accept(t);
    }
    let mut c = grammar.map(|g| {
        g.compile(&GrammarSpec::JsonSchema {
            schema: schema(),
            strict: true,
        })
        .unwrap()
    });
    let mut kv: SeqKv = exec.new_kv(prompt.len() + N).unwrap();
    let mut feed: Vec<u32> = prompt.to_vec();
    let mut out = Vec::new();
    while out.len() < N {
        let t = if token_path {
            let mask = c.as_mut().map(|c| c.mask().unwrap());
            let mut b = [StepInput {
                kv: &mut kv,
                tokens: &feed,
                prompt: 0,
                want: Want::Token(TokenPick {
                    sampler: &mut sampler,
                    mask: mask.as_ref().map(|m| m.words()),
                }),
            }];
            match exec.step(&mut b).unwrap().pop() {
                Some(StepOut::Token(t)) => t,
                other => panic!("asked for a token, got {other:?}"),
            }
        } else {
            let mut b = [StepInput {
                kv: &mut kv,
                tokens: &feed,
                prompt: 0,
                want: Want::Logits,
            }];
            let mut row = match exec.step(&mut b).unwrap().pop() {
                Some(StepOut::Logits(r)) => r,
                other => panic!("asked for logits, got {other:?}"),
            };
            if let Some(c) = c.as_mut() {
                c.constrain(&mut row).unwrap();
            }
            sampler.sample(&row)
        };
        if let Some(c) = c.as_mut() {
            c.commit(t).unwrap();
        }
        if tok.is_eog(t) {
            break;
        }
        sampler.accept(t);
        out.push(t);
        if c.as_ref().is_some_and(|c| c.is_stopped()) {
            break;
        }
        feed = vec![t];
    }
    (out, sampler.rng_mut().next_u64())
}

#[test]
fn the_token_path_equals_the_host_logits_path() {
    let Some((mut exec, tok)) = load() else {
        return;
    };
    let env = GrammarEnv::new(&tok, exec.n_vocab()).unwrap();
    let prompt = tok
        .encode(
            "A short profile of a person, as JSON with a name, an age and a pet:",
            true,
            true,
        )
        .unwrap();
    let greedy = SamplerConfig::default();
    let sampled = SamplerConfig {
        temperature: 1.0,
        top_k: 40,
        top_p: 0.95,
        seed: 1234,
        ..SamplerConfig::default()
    };
    let penalized = SamplerConfig {
        temperature: 0.7,
        min_p: 0.02,
        repeat_penalty: 1.3,
        frequency_penalty: 0.2,
        seed: 99,
        ..SamplerConfig::default()
    };
    let cases: [(&str, &SamplerConfig, Option<&GrammarEnv>); 5] = [
        ("greedy", &greedy, None),
        ("sampled", &sampled, None),
        ("sampled with penalties", &penalized, None),
        ("constrained greedy", &greedy, Some(&env)),
        ("constrained sampled", &sampled, Some(&env)),
    ];
    let mut outs = Vec::new();
    for (label, cfg, g) in cases {
        let host = generate(&mut exec, &tok, &prompt, cfg, g, false);
        let token = generate(&mut exec, &tok, &prompt, cfg, g, true);
        assert!(!host.0.is_empty(), "{label}: no tokens");
        assert_eq!(token.0, host.0, "{label}: tokens differ");
        assert_eq!(
            token.1, host.1,
            "{label}: the samplers took different draws"
        );
        if g.is_some() {
            let text = tok.decode_skip_special(&token.0).unwrap();
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{label}: {text:?} does not parse: {e}"));
            assert!(v["pet"].is_string() && v["age"].is_i64(), "{label}: {v}");
        }
        outs.push(token.0);
    }
    // Not vacuous: sampling chose other tokens than greedy, and the mask changed the output.
    assert_ne!(outs[0], outs[1], "sampled == greedy");
    assert_ne!(outs[0], outs[3], "the mask changed nothing");
    assert_ne!(
        outs[3], outs[4],
        "constrained sampled == constrained greedy"
    );
}

#[test]
fn a_mask_is_obeyed_by_the_token_path_and_short_words_disallow_the_rest() {
    let Some((mut exec, tok)) = load() else {
        return;
    };
    let prompt = tok.encode("The capital of France is", true, true).unwrap();
    let mut free = Sampler::new(SamplerConfig::default());
    let mut kv = exec.new_kv(prompt.len() + 1).unwrap();
    let mut b = [StepInput {
        kv: &mut kv,
        tokens: &prompt,
        prompt: prompt.len(),
        want: Want::Token(TokenPick {
            sampler: &mut free,
            mask: None,
        }),
    }];
    let Some(StepOut::Token(best)) = exec.step(&mut b).unwrap().pop() else {
        panic!("no token")
    };
    // Allow only two tokens, neither the unconstrained choice: the pick is one of them.
    let (a, c) = ((best + 1) % 64 + 64, (best + 7) % 64 + 64);
    let mut words = vec![0u32; 4];
    for t in [a, c] {
        words[t as usize / 32] |= 1 << (t % 32);
    }
    for sampled in [false, true] {
        let cfg = SamplerConfig {
            temperature: if sampled { 1.0 } else { 0.0 },
            seed: 5,
            ..SamplerConfig::default()
        };
        let mut s = Sampler::new(cfg);
        let mut kv = exec.new_kv(prompt.len() + 1).unwrap();
        let mut b = [StepInput {
            kv: &mut kv,
            tokens: &prompt,
            prompt: prompt.len(),
            want: Want::Token(TokenPick {
                sampler: &mut s,
                mask: Some(&words),
            }),
        }];
        let Some(StepOut::Token(t)) = exec.step(&mut b).unwrap().pop() else {
            panic!("no token")
        };
        assert!(t == a || t == c, "picked {t}, allowed {a} and {c}");
    }
}
