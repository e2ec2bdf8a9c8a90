use super::*;

#[test]
fn check_is_red_on_one_swapped_token_or_an_error() {
    let ok = || Case {
        label: "a".into(),
        want: vec![1, 2, 3],
        got: Ok(vec![1, 2, 3]),
    };
    assert_eq!(check(&[ok(), ok()]), Verdict::Green);
    let swapped = Case {
        label: "b".into(),
        want: vec![1, 2, 3],
        got: Ok(vec![1, 9, 3]),
    };
    let Verdict::Red { failures } = check(&[ok(), swapped]) else {
        panic!("not red")
    };
    assert!(
        failures[0].starts_with("b: token 1 differs"),
        "{failures:?}"
    );
    let short = Case {
        label: "c".into(),
        want: vec![1, 2, 3],
        got: Ok(vec![1, 2]),
    };
    assert!(check(&[short]).is_red());
    let err = Case {
        label: "d".into(),
        want: vec![1],
        got: Err("HTTP 500".into()),
    };
    assert!(check(&[err]).is_red());
}

type Loaded = (Reference, Reference, Tokenizer, ChatTemplate);

/// SmolLM2 twice (reference and served) with its tokenizer and template, or `None`
/// (skip) when it is not fetched.
fn smollm2() -> Option<Loaded> {
    let dir = std::env::var_os("ASSAY_MODELS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/assay/models")
        });
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.exists() {
        println!("SKIP: {} not found", path.display());
        return None;
    }
    let model = Arc::new(engine::model_file::GgufModel::open(&path).unwrap());
    let opts = ReferenceOptions {
        threads: Some(2),
        kv_dtype: KvDtype::F16,
    };
    let mut reference = Reference::new(model.clone(), opts).unwrap();
    reference.cache_weights(1 << 30).unwrap();
    let mut served = Reference::new(model.clone(), opts).unwrap();
    served.cache_weights(1 << 30).unwrap();
    let tok = Tokenizer::from_gguf(model.header()).unwrap();
    let tmpl = ChatTemplate::for_model(model.header()).unwrap();
    Some((reference, served, tok, tmpl))
}

#[test]
fn the_served_path_is_green_and_one_swapped_token_turns_it_red() {
    let Some((reference, served, tok, tmpl)) = smollm2() else {
        return;
    };
    let (v, detail) = run_served(CpuExecutor::new(served), &reference, tok, tmpl, 3);
    assert_eq!(v, Verdict::Green, "{detail:?}");
    let Some((reference, served, tok, tmpl)) = smollm2() else {
        return;
    };
    // Row 1 is the warm-up; row 6 belongs to a real request.
    let faulty = SwapOne {
        inner: CpuExecutor::new(served),
        rows: 0,
        at: 6,
    };
    let (v, _) = run_served(faulty, &reference, tok, tmpl, 3);
    let Verdict::Red { failures } = v else {
        panic!("a swapped token left the gate green")
    };
    assert!(
        failures.iter().any(|f| f.contains("differs")),
        "{failures:?}"
    );
}

/// On a GPU with SmolLM2 fetched: the CUDA served path is green, and one swapped token
/// behind it turns the gate red (skipped elsewhere).
#[test]
fn the_cuda_served_path_is_green_and_one_swapped_token_turns_it_red() {
    if !engine::cuda::driver_present() {
        println!("SKIP: no CUDA driver");
        return;
    }
    let Some((_, _, tok, tmpl)) = smollm2() else {
        return;
    };
    let dir = std::env::var_os("ASSAY_MODELS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/assay/models")
        });
    let model =
        engine::model_file::GgufModel::open(&dir.join("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let gpu = Arc::new(Gpu::open(&CudaConfig::default()).unwrap());
    let program = engine::arch::build_program(model.header()).unwrap();
    let mut dec = CudaDecoder::new(gpu.clone(), &model, program, 1024).unwrap();
    let exec = CudaExecutor::new(gpu.clone(), &model, true).unwrap();
    let want =
        |ids: &[u32], tok: &Tokenizer, pick: &PickSpec| cuda_pick(&mut dec, tok, ids, 3, pick);
    let (v, detail) = serve_and_check(exec, want, tok, tmpl, 3);
    assert_eq!(v, Verdict::Green, "{detail:?}");
    let Some((_, _, tok, tmpl)) = smollm2() else {
        return;
    };
    let faulty = SwapOne {
        inner: CudaExecutor::new(gpu, &model, true).unwrap(),
        rows: 0,
        at: 6,
    };
    let want =
        |ids: &[u32], tok: &Tokenizer, pick: &PickSpec| cuda_pick(&mut dec, tok, ids, 3, pick);
    let (v, _) = serve_and_check(faulty, want, tok, tmpl, 3);
    assert!(v.is_red(), "a swapped token left the CUDA gate green");
}

/// An executor that tampers with every token request before the real one picks: drops
/// its grammar mask and, when sampled, takes one extra draw from its sampler.
struct Tamper<E> {
    inner: E,
}

impl<E: Executor> Executor for Tamper<E> {
    type Kv = E::Kv;
    fn new_kv(&self, capacity: usize) -> Result<Self::Kv, String> {
        self.inner.new_kv(capacity)
    }
    fn kv_len(&self, kv: &Self::Kv) -> usize {
        self.inner.kv_len(kv)
    }
    fn kv_prefix(&self, kv: &Self::Kv, len: usize, cap: usize) -> Result<Self::Kv, String> {
        self.inner.kv_prefix(kv, len, cap)
    }
    fn kv_trim(&self, kv: &mut Self::Kv, len: usize) {
        self.inner.kv_trim(kv, len)
    }
    fn kv_truncate(&self, kv: &mut Self::Kv, len: usize) {
        self.inner.kv_truncate(kv, len)
    }
    fn kv_bytes_per_token(&self) -> usize {
        self.inner.kv_bytes_per_token()
    }
    fn n_vocab(&self) -> usize {
        self.inner.n_vocab()
    }
    fn step(&mut self, batch: &mut [StepInput<'_, Self::Kv>]) -> Result<Vec<StepOut>, String> {
        for b in batch.iter_mut() {
            if let engine::scheduler::Want::Token(p) = &mut b.want {
                p.mask = None;
                if !p.sampler.is_greedy() {
                    p.sampler.draw();
                }
            }
        }
        self.inner.step(batch)
    }
}

#[test]
fn a_dropped_mask_and_a_skipped_draw_turn_the_served_gate_red() {
    let Some((reference, served, tok, tmpl)) = smollm2() else {
        return;
    };
    let faulty = Tamper {
        inner: CpuExecutor::new(served),
    };
    let (v, _) = run_served(faulty, &reference, tok, tmpl, 6);
    let Verdict::Red { failures } = v else {
        panic!("the faults left the gate green")
    };
    // The dropped mask shows in the greedy schema case (no draws), the skipped draw in
    // the unconstrained sampled case (no mask); greedy unconstrained cases are unharmed.
    for label in ["json_schema greedy", "sampled seed 42"] {
        assert!(
            failures.iter().any(|f| f.starts_with(label)),
            "{label}: {failures:?}"
        );
    }
    assert!(
        failures
            .iter()
            .all(|f| f.starts_with("json_schema") || f.starts_with("sampled")),
        "{failures:?}"
    );
}

#[test]
fn dechunk_undoes_chunked_coding() {
    assert_eq!(
        dechunk(b"3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n").unwrap(),
        b"abcde"
    );
    assert!(dechunk(b"5\r\nab").is_err());
}

/// A verifier that accepts one wrong draft token (at the first rejection it meets).
struct AcceptsOneWrong {
    fired: bool,
}

impl engine::spec::Verifier for AcceptsOneWrong {
    fn verify(
        &mut self,
        rows: &[Vec<f32>],
        d: &engine::spec::Draft,
        s: &mut Sampler,
    ) -> engine::spec::RoundResult {
        engine::spec::ExactVerifier.verify(rows, d, s)
    }
    fn verify_argmax(
        &mut self,
        picks: &[u32],
        d: &engine::spec::Draft,
        s: &mut Sampler,
    ) -> engine::spec::RoundResult {
        let r = engine::spec::greedy_match(picks, d, &mut s.clone());
        if self.fired || r.accepted + 1 >= d.tokens.len() {
            return engine::spec::greedy_match(picks, d, s);
        }
        self.fired = true;
        for &t in &d.tokens[..=r.accepted] {
            s.accept(t);
        }
        let next = picks[r.accepted + 1];
        s.accept(next);
        engine::spec::RoundResult {
            accepted: r.accepted + 1,
            next,
        }
    }
}

/// The speculating server (n-gram at K = 1, 4, 8; SmolLM2 drafting for itself at K = 2) is
/// green, and a verifier that accepts one wrong draft token turns it red.
#[test]
fn served_speculation_is_green_and_one_wrongly_accepted_draft_turns_it_red() {
    let Some((reference, _, _, _)) = smollm2() else {
        return;
    };
    let reference = Arc::new(reference);
    let exact = || Box::new(engine::spec::ExactVerifier) as Box<dyn engine::spec::Verifier + Send>;
    use spec::Proposal::{Ngram, SelfDraft};
    let runs = [(Ngram, 1), (Ngram, 4), (Ngram, 8), (SelfDraft, 2)];
    let (v, detail) = spec::run_served_spec(&reference, 5, 4, &runs, &exact);
    assert_eq!(v, Verdict::Green, "{detail:?}");
    let faulty =
        || Box::new(AcceptsOneWrong { fired: false }) as Box<dyn engine::spec::Verifier + Send>;
    let (v, detail) = spec::run_served_spec(&reference, 5, 4, &[(Ngram, 4)], &faulty);
    let Verdict::Red { failures } = v else {
        panic!("a wrongly accepted draft left the gate green: {detail:?}")
    };
    assert!(
        failures.iter().any(|f| f.contains("differs")),
        "{failures:?}"
    );
}
