//! Whether the first position where the two arms' greedy tokens part is a near-tie.
//!
//! Both engines run the same weights, but not the same arithmetic: llama.cpp's CUDA and CPU
//! matvecs quantize the activations to 8 bits (q8_1) before the dot products, ours keep them
//! in f32. Where a model's two best next tokens are within a few hundredths of a nat of each
//! other — random synthetic weights in a repetition loop do this often — the arms may pick
//! differently without either being wrong, and from there their continuations differ
//! entirely. So at the first differing position each arm is asked for its top-k next tokens
//! (log-probabilities over the same prefix: the prompt plus the tokens both produced): the
//! divergence is a near-tie when each arm ranks the other's pick within [`NEAR_TIE`] nats of
//! its own. Anything else (the other's pick missing from an arm's top-k, or further away)
//! is a real disagreement and the cell's receipt is red.

/// Largest gap, in nats (= logits), between an arm's pick and the other arm's pick in that
/// arm's own distribution for the divergence to count as a near-tie. Twice the argmax
/// gate's 0.05 (ours vs the f32 CPU reference): the competitor's 8-bit activations move its
/// logits by more than our kernels move ours.
pub const NEAR_TIE: f64 = 0.1;

/// How many next-token candidates each arm is asked for.
pub const TOP_K: usize = 5;

/// One arm's top next tokens: (token text, log-probability), any order.
pub type Top = Vec<(String, f64)>;

/// The arm's pick (its most likely token) and the gap from it to `other` (None when `other`
/// is not among the arm's candidates).
fn gap(top: &[(String, f64)], other: &str) -> Option<(String, f64)> {
    let (pick, best) = top
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(t, l)| (t.clone(), *l))?;
    let theirs = top.iter().find(|(t, _)| t == other)?.1;
    Some((pick, best - theirs))
}

/// The verdict on one divergence.
#[derive(Clone, Debug, PartialEq)]
pub enum Tie {
    /// Each arm ranks the other's pick within `delta` nats of its own: (our gap, theirs).
    Near { ours: f64, theirs: f64 },
    /// Not a near-tie; why.
    Real(String),
}

/// Judge a divergence from both arms' top next tokens over the shared prefix.
pub fn judge(ours: &[(String, f64)], theirs: &[(String, f64)], delta: f64) -> Tie {
    let (Some(our_pick), Some(their_pick)) = (best(ours), best(theirs)) else {
        return Tie::Real("an arm returned no next-token candidates".into());
    };
    if our_pick == their_pick {
        return Tie::Real(format!(
            "both arms now pick {our_pick:?} over the shared prefix: the streamed divergence is not reproduced"
        ));
    }
    let Some((_, g_ours)) = gap(ours, &their_pick) else {
        return Tie::Real(format!(
            "assay's top {} lacks the competitor's pick {their_pick:?}",
            ours.len()
        ));
    };
    let Some((_, g_theirs)) = gap(theirs, &our_pick) else {
        return Tie::Real(format!(
            "the competitor's top {} lacks assay's pick {our_pick:?}",
            theirs.len()
        ));
    };
    if g_ours <= delta && g_theirs <= delta {
        Tie::Near {
            ours: g_ours,
            theirs: g_theirs,
        }
    } else {
        Tie::Real(format!(
            "gaps {g_ours:.4} (assay) and {g_theirs:.4} (competitor) nats, above {delta}"
        ))
    }
}

fn best(top: &[(String, f64)]) -> Option<String> {
    top.iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(t, _)| t.clone())
}

/// Our server's (OpenAI completions `logprobs`) top next tokens: `top_logprobs[0]` of the
/// first choice, an object token -> log-probability.
pub fn parse_openai(v: &serde_json::Value) -> Option<Top> {
    let o = v["choices"][0]["logprobs"]["top_logprobs"][0].as_object()?;
    Some(
        o.iter()
            .filter_map(|(t, l)| l.as_f64().map(|l| (t.clone(), l)))
            .collect(),
    )
}

/// Rename `token_id:N` keys (vLLM's `return_tokens_as_token_ids`) by `piece(N)`, the text
/// our server names token N by; an entry that is not of that form, or whose id has no piece,
/// is an error (the two arms' tops could not be compared).
pub fn name_token_ids(top: Top, piece: impl Fn(u32) -> Option<String>) -> anyhow::Result<Top> {
    top.into_iter()
        .map(|(k, l)| {
            let id: u32 = k
                .strip_prefix("token_id:")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("top token {k:?} is not token_id:N"))?;
            let p = piece(id).ok_or_else(|| anyhow::anyhow!("token id {id} has no piece"))?;
            Ok((p, l))
        })
        .collect()
}

/// llama-server's (native `/completion` with `n_probs`) top next tokens:
/// `completion_probabilities[0].top_logprobs`, an array of {token, logprob}.
pub fn parse_llama(v: &serde_json::Value) -> Option<Top> {
    let a = v["completion_probabilities"][0]["top_logprobs"].as_array()?;
    Some(
        a.iter()
            .filter_map(|e| Some((e["token"].as_str()?.to_owned(), e["logprob"].as_f64()?)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn vllm_token_ids_are_named_by_our_pieces() {
        let top = vec![
            ("token_id:7".to_owned(), -0.5),
            ("token_id:12".to_owned(), -1.25),
        ];
        let named = name_token_ids(top, |id| Some(format!("p{id}"))).unwrap();
        assert_eq!(
            named,
            vec![("p7".to_owned(), -0.5), ("p12".to_owned(), -1.25)]
        );
        let bad = vec![("seven".to_owned(), -0.5)];
        assert!(name_token_ids(bad, |id| Some(format!("p{id}"))).is_err());
        let unknown = vec![("token_id:99".to_owned(), -0.5)];
        assert!(name_token_ids(unknown, |_| None).is_err());
    }

    fn top(v: &[(&str, f64)]) -> Top {
        v.iter().map(|(t, l)| (t.to_string(), *l)).collect()
    }

    #[test]
    fn a_near_tie_in_both_arms_is_near() {
        // The CPU smoke pairing of SmolLM2 on 2026-11-30: ours 'ered' -3.219 / 's' -3.302,
        // llama.cpp's CPU build 's' -3.3458 / 'ered' -3.3554.
        let ours = top(&[("ered", -3.219), ("s", -3.302), ("or", -3.908)]);
        let theirs = top(&[("s", -3.3458), ("ered", -3.3554), ("or", -4.07)]);
        match judge(&ours, &theirs, NEAR_TIE) {
            Tie::Near { ours, theirs } => {
                assert!((ours - 0.083).abs() < 1e-9, "{ours}");
                assert!((theirs - 0.0096).abs() < 1e-9, "{theirs}");
            }
            t => panic!("{t:?}"),
        }
    }

    #[test]
    fn a_clear_pick_in_either_arm_is_real() {
        let ours = top(&[("a", -0.1), ("b", -3.0)]);
        let theirs = top(&[("b", -1.0), ("a", -1.05)]);
        assert!(matches!(judge(&ours, &theirs, NEAR_TIE), Tie::Real(_)));
        // Symmetric: the competitor is the one far from ours.
        assert!(matches!(judge(&theirs, &ours, NEAR_TIE), Tie::Real(_)));
        // Missing from the other's candidates.
        let ours = top(&[("a", -1.0), ("c", -1.01)]);
        let theirs = top(&[("b", -1.0), ("a", -1.01)]);
        let Tie::Real(why) = judge(&ours, &theirs, NEAR_TIE) else {
            panic!("missing pick judged near");
        };
        assert!(why.contains("lacks"), "{why}");
        // No candidates, or the same pick again.
        assert!(matches!(judge(&[], &theirs, NEAR_TIE), Tie::Real(_)));
        let same = top(&[("b", -1.0)]);
        assert!(matches!(judge(&same, &theirs, NEAR_TIE), Tie::Real(_)));
    }

    #[test]
    fn both_servers_answers_parse() {
        let ours =
            json!({"choices": [{"logprobs": {"top_logprobs": [{"ered": -3.2, "s": -3.3}]}}]});
        let mut t = parse_openai(&ours).unwrap();
        t.sort_by(|a, b| b.1.total_cmp(&a.1));
        assert_eq!(t, top(&[("ered", -3.2), ("s", -3.3)]));
        let theirs = json!({"completion_probabilities": [{"id": 99, "token": "s", "logprob": -3.34,
            "top_logprobs": [{"id": 99, "token": "s", "logprob": -3.34},
                             {"id": 1283, "token": "ered", "logprob": -3.36}]}]});
        assert_eq!(
            parse_llama(&theirs).unwrap(),
            top(&[("s", -3.34), ("ered", -3.36)])
        );
        assert!(parse_openai(&json!({"choices": []})).is_none());
        assert!(parse_llama(&json!({})).is_none());
    }
}
