//! Whether the first position where the two arms' greedy tokens part is a near-tie.
//!
//! Both engines run the same weights, but not the same arithmetic: llama.cpp's CUDA and CPU
//! matvecs quantize the activations to 8 bits (q8_1) before the dot products, ours keep them
//! in f32. Where a model's two best next tokens are within a few hundredths of a nat of each
//! other — random synthetic weights in a repetition loop do this often — the arms may pick
//! differently without either being wrong, and from there their continuations differ
//! entirely. So at the first differing position each arm is asked for its top-k next tokens
//! (log-probabilities over the same prefix: the prompt plus the tokens both produced), and
//! the two streamed picks (ours and theirs, token ids) are looked up in both: the divergence
//! is a near-tie when, in each arm's distribution, both picks are within [`NEAR_TIE`] nats of
//! that arm's best token. Anything else (a pick missing from an arm's top-k, or further away)
//! is a real disagreement and the cell's receipt is red.
//!
//! Candidates are matched by token id wherever the arm gives ids (llama-server's `n_probs`
//! entries carry `id`; our server and vLLM name tokens `token_id:N` under
//! `return_tokens_as_token_ids`). Text alone cannot tell apart two tokens with the same
//! piece — on the synthetic checkpoints every padding token past the donor's vocabulary has
//! an empty piece, so two different picks may both read `""` — so a candidate without an id
//! is matched by its piece only where that piece is unambiguous, and otherwise the verdict is
//! [`Tie::Undecided`] (red, and saying why), never agreement.

/// Largest gap, in nats (= logits), between an arm's best token and either streamed pick in
/// that arm's own distribution for the divergence to count as a near-tie. Twice the argmax
/// gate's 0.05 (ours vs the f32 CPU reference): the competitor's 8-bit activations move its
/// logits by more than our kernels move ours.
pub const NEAR_TIE: f64 = 0.1;

/// How many next-token candidates each arm is asked for.
pub const TOP_K: usize = 5;

/// One next-token candidate of an arm.
#[derive(Clone, Debug, PartialEq)]
pub struct Cand {
    /// The token id, when the arm named it.
    pub id: Option<u32>,
    /// Its text (our tokenizer's piece for an id; the arm's own text otherwise).
    pub piece: String,
    pub logprob: f64,
}

/// One arm's top next tokens, any order.
pub type Top = Vec<Cand>;

/// A streamed pick: its id and (for messages and the piece-only fallback) our piece of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Pick {
    pub id: u32,
    pub piece: String,
}

impl std::fmt::Display for Pick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "id {} {:?}", self.id, self.piece)
    }
}

fn show(c: &Cand) -> String {
    match c.id {
        Some(id) => format!("id {id} {:?}", c.piece),
        None => format!("{:?} (no id)", c.piece),
    }
}

/// The verdict on one divergence.
#[derive(Clone, Debug, PartialEq)]
pub enum Tie {
    /// In each arm both picks are within `delta` nats of its best: the larger of the two
    /// gaps in our distribution and in theirs, and a note (empty, or how the picks were
    /// matched / which arm's best is not its streamed pick).
    Near {
        ours: f64,
        theirs: f64,
        note: String,
    },
    /// Not a near-tie; why.
    Real(String),
    /// The tops cannot tell the picks apart (text only, shared or ambiguous pieces); why.
    Undecided(String),
}

/// Where `pick` is in `top`: by id when the candidates carry ids; by piece otherwise, which
/// is `Err` (undecidable) when `other` has the same piece or the piece is not unique in
/// `top`.
fn find(top: &[Cand], pick: &Pick, other: &Pick, arm: &str) -> Result<Option<f64>, String> {
    if top.iter().all(|c| c.id.is_some()) {
        return Ok(top
            .iter()
            .find(|c| c.id == Some(pick.id))
            .map(|c| c.logprob));
    }
    if pick.piece == other.piece {
        return Err(format!(
            "{arm}'s top tokens carry no ids and the picks {pick} and {other} have the same piece"
        ));
    }
    let same: Vec<&Cand> = top.iter().filter(|c| c.piece == pick.piece).collect();
    match same.as_slice() {
        [] => Ok(None),
        [c] => Ok(Some(c.logprob)),
        _ => Err(format!(
            "{arm}'s top tokens carry no ids and {} of them have the piece {:?} of the pick {pick}",
            same.len(),
            pick.piece
        )),
    }
}

/// One arm's view: the larger gap from its best to either pick, and a note when its best is
/// not its own streamed pick. `Err(Tie)` for a missing pick or an undecidable lookup.
fn arm_gap(top: &[Cand], own: &Pick, other: &Pick, arm: &str) -> Result<(f64, String), Tie> {
    let Some(best) = top.iter().max_by(|a, b| a.logprob.total_cmp(&b.logprob)) else {
        return Err(Tie::Real(format!(
            "{arm} returned no next-token candidates"
        )));
    };
    let lp = |p: &Pick| -> Result<f64, Tie> {
        match find(top, p, if p == own { other } else { own }, arm) {
            Err(why) => Err(Tie::Undecided(why)),
            Ok(None) => Err(Tie::Real(format!(
                "{arm}'s top {} ({}) lacks {} pick {p}",
                top.len(),
                top.iter().map(show).collect::<Vec<_>>().join(", "),
                if p == own {
                    "its own streamed"
                } else {
                    "the other arm's"
                }
            ))),
            Ok(Some(l)) => Ok(l),
        }
    };
    let (l_own, l_other) = (lp(own)?, lp(other)?);
    let gap = best.logprob - l_own.min(l_other);
    let note = if l_own < best.logprob {
        format!(
            "{arm} now ranks {} first, {:.4} nats above its streamed pick {own}",
            show(best),
            best.logprob - l_own
        )
    } else {
        String::new()
    };
    Ok((gap, note))
}

/// Judge the divergence of the streamed picks `our_pick` (ours) and `their_pick` from both
/// arms' top next tokens over the shared prefix; `their_name` names the competitor.
pub fn judge(
    ours: &[Cand],
    theirs: &[Cand],
    our_pick: &Pick,
    their_pick: &Pick,
    their_name: &str,
    delta: f64,
) -> Tie {
    if our_pick.id == their_pick.id {
        return Tie::Real(format!(
            "both arms streamed {our_pick}: there is no divergence to judge"
        ));
    }
    let (g_ours, n_ours) = match arm_gap(ours, our_pick, their_pick, "assay") {
        Ok(x) => x,
        Err(t) => return t,
    };
    let (g_theirs, n_theirs) = match arm_gap(theirs, their_pick, our_pick, their_name) {
        Ok(x) => x,
        Err(t) => return t,
    };
    let by_ids = ours.iter().chain(theirs).all(|c| c.id.is_some());
    let mut notes: Vec<String> = [n_ours, n_theirs]
        .into_iter()
        .filter(|n| !n.is_empty())
        .collect();
    if !by_ids {
        notes.push("matched by piece (an arm gave no ids)".into());
    }
    if g_ours <= delta && g_theirs <= delta {
        Tie::Near {
            ours: g_ours,
            theirs: g_theirs,
            note: notes.join("; "),
        }
    } else {
        Tie::Real(format!(
            "assay {our_pick} vs {their_name} {their_pick}: gaps {g_ours:.4} (assay) and {g_theirs:.4} ({their_name}) nats, above {delta}{}",
            if notes.is_empty() {
                String::new()
            } else {
                format!(" ({})", notes.join("; "))
            }
        ))
    }
}

/// An OpenAI completions answer's (`logprobs`) top next tokens: `top_logprobs[0]` of the
/// first choice, an object token -> log-probability. `token_id:N` keys (our server's and
/// vLLM's `return_tokens_as_token_ids`) become ids named by `piece(N)` (an id without a
/// piece is an error); other keys are pieces without ids.
pub fn parse_openai(
    v: &serde_json::Value,
    piece: impl Fn(u32) -> Option<String>,
) -> anyhow::Result<Top> {
    let o = v["choices"][0]["logprobs"]["top_logprobs"][0]
        .as_object()
        .ok_or_else(|| anyhow::anyhow!("no choices[0].logprobs.top_logprobs[0] in the answer"))?;
    o.iter()
        .map(|(k, l)| {
            let logprob = l.as_f64().ok_or_else(|| {
                anyhow::anyhow!("top token {k:?}: log-probability {l} is not a number")
            })?;
            match k.strip_prefix("token_id:") {
                Some(n) => {
                    let id: u32 = n
                        .parse()
                        .map_err(|_| anyhow::anyhow!("top token {k:?} is not token_id:N"))?;
                    let piece =
                        piece(id).ok_or_else(|| anyhow::anyhow!("token id {id} has no piece"))?;
                    Ok(Cand {
                        id: Some(id),
                        piece,
                        logprob,
                    })
                }
                None => Ok(Cand {
                    id: None,
                    piece: k.clone(),
                    logprob,
                }),
            }
        })
        .collect()
}

/// llama-server's (native `/completion` with `n_probs`) top next tokens:
/// `completion_probabilities[0].top_logprobs`, an array of {id, token, logprob} (the pinned
/// llama.cpp, tools/server/server-task.cpp `completion_token_output::to_json`, writes `id`;
/// an entry without one is kept as a piece).
pub fn parse_llama(v: &serde_json::Value) -> Option<Top> {
    let a = v["completion_probabilities"][0]["top_logprobs"].as_array()?;
    Some(
        a.iter()
            .filter_map(|e| {
                Some(Cand {
                    id: e["id"].as_u64().and_then(|i| u32::try_from(i).ok()),
                    piece: e["token"].as_str()?.to_owned(),
                    logprob: e["logprob"].as_f64()?,
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Candidates with ids.
    fn top(v: &[(u32, &str, f64)]) -> Top {
        v.iter()
            .map(|(i, t, l)| Cand {
                id: Some(*i),
                piece: t.to_string(),
                logprob: *l,
            })
            .collect()
    }

    /// Candidates without ids (text only).
    fn text(v: &[(&str, f64)]) -> Top {
        v.iter()
            .map(|(t, l)| Cand {
                id: None,
                piece: t.to_string(),
                logprob: *l,
            })
            .collect()
    }

    fn pick(id: u32, piece: &str) -> Pick {
        Pick {
            id,
            piece: piece.into(),
        }
    }

    #[test]
    fn token_id_keys_become_ids_named_by_our_pieces() {
        let v = json!({"choices": [{"logprobs": {"top_logprobs": [
            {"token_id:7": -0.5, "token_id:12": -1.25}]}}]});
        let mut t = parse_openai(&v, |id| Some(format!("p{id}"))).unwrap();
        t.sort_by(|a, b| b.logprob.total_cmp(&a.logprob));
        assert_eq!(t, top(&[(7, "p7", -0.5), (12, "p12", -1.25)]));
        let unknown = json!({"choices": [{"logprobs": {"top_logprobs": [{"token_id:99": -0.5}]}}]});
        assert!(parse_openai(&unknown, |_| None).is_err());
        let bad = json!({"choices": [{"logprobs": {"top_logprobs": [{"token_id:x": -0.5}]}}]});
        assert!(parse_openai(&bad, |id| Some(format!("p{id}"))).is_err());
        let nan = json!({"choices": [{"logprobs": {"top_logprobs": [{"token_id:1": "x"}]}}]});
        assert!(parse_openai(&nan, |id| Some(format!("p{id}"))).is_err());
        // Plain keys are pieces without ids.
        let v = json!({"choices": [{"logprobs": {"top_logprobs": [{"ered": -3.2}]}}]});
        assert_eq!(parse_openai(&v, |_| None).unwrap(), text(&[("ered", -3.2)]));
        assert!(parse_openai(&json!({"choices": []}), |_| None).is_err());
    }

    #[test]
    fn llama_server_entries_keep_their_ids() {
        let theirs = json!({"completion_probabilities": [{"id": 99, "token": "s", "logprob": -3.34,
            "top_logprobs": [{"id": 99, "token": "s", "logprob": -3.34},
                             {"id": 1283, "token": "ered", "logprob": -3.36},
                             {"token": "x", "logprob": -4.0}]}]});
        let t = parse_llama(&theirs).unwrap();
        assert_eq!(
            &t[..2],
            &top(&[(99, "s", -3.34), (1283, "ered", -3.36)])[..]
        );
        assert_eq!(t[2].id, None);
        assert!(parse_llama(&json!({})).is_none());
    }

    #[test]
    fn a_near_tie_by_ids_is_near() {
        // The CPU smoke pairing of SmolLM2 on 2026-11-30: ours 'ered' -3.219 / 's' -3.302,
        // llama.cpp's CPU build 's' -3.3458 / 'ered' -3.3554.
        let ours = top(&[(1283, "ered", -3.219), (99, "s", -3.302), (5, "or", -3.908)]);
        let theirs = top(&[
            (99, "s", -3.3458),
            (1283, "ered", -3.3554),
            (5, "or", -4.07),
        ]);
        let (a, b) = (pick(1283, "ered"), pick(99, "s"));
        match judge(&ours, &theirs, &a, &b, "llama.cpp", NEAR_TIE) {
            Tie::Near { ours, theirs, note } => {
                assert!((ours - 0.083).abs() < 1e-9, "{ours}");
                assert!((theirs - 0.0096).abs() < 1e-9, "{theirs}");
                assert!(note.is_empty(), "{note}");
            }
            t => panic!("{t:?}"),
        }
    }

    #[test]
    fn a_real_disagreement_by_ids_is_red_and_named() {
        // Planted: our pick leads theirs by 2.9 nats in our distribution.
        let ours = top(&[(10, "a", -0.1), (20, "b", -3.0)]);
        let theirs = top(&[(20, "b", -1.0), (10, "a", -1.05)]);
        let (a, b) = (pick(10, "a"), pick(20, "b"));
        let Tie::Real(why) = judge(&ours, &theirs, &a, &b, "llama.cpp", NEAR_TIE) else {
            panic!("a 2.9-nat gap judged near");
        };
        assert!(
            why.contains("id 10 \"a\"") && why.contains("id 20 \"b\""),
            "{why}"
        );
        assert!(why.contains("2.9000"), "{why}");
        // Symmetric: the competitor is the one far from ours.
        assert!(matches!(
            judge(&theirs, &ours, &b, &a, "llama.cpp", NEAR_TIE),
            Tie::Real(_)
        ));
        // The other's pick missing from an arm's candidates.
        let ours = top(&[(10, "a", -1.0), (30, "c", -1.01)]);
        let Tie::Real(why) = judge(&ours, &theirs, &a, &b, "llama.cpp", NEAR_TIE) else {
            panic!("missing pick judged near");
        };
        assert!(why.contains("lacks the other arm's pick id 20"), "{why}");
        // No candidates at all.
        assert!(matches!(
            judge(&[], &theirs, &a, &b, "llama.cpp", NEAR_TIE),
            Tie::Real(_)
        ));
        // The same streamed id is no divergence.
        assert!(matches!(
            judge(&ours, &theirs, &a, &a, "llama.cpp", NEAR_TIE),
            Tie::Real(_)
        ));
    }

    #[test]
    fn two_empty_pieces_with_different_ids_are_told_apart() {
        // Session 7's p2k cell: both picks are padding tokens of the synthetic vocabulary,
        // whose pieces are empty. By ids: a near-tie when close...
        let (a, b) = (pick(49839, ""), pick(58626, ""));
        let ours = top(&[(49839, "", -4.00), (58626, "", -4.03), (7, "x", -4.5)]);
        let theirs = top(&[(58626, "", -4.01), (49839, "", -4.05), (7, "x", -4.4)]);
        match judge(&ours, &theirs, &a, &b, "llama.cpp", NEAR_TIE) {
            Tie::Near { ours, theirs, .. } => {
                assert!((ours - 0.03).abs() < 1e-9 && (theirs - 0.04).abs() < 1e-9);
            }
            t => panic!("{t:?}"),
        }
        // ...and red, naming both ids, when far apart in one arm.
        let far = top(&[(58626, "", -1.0), (49839, "", -2.0)]);
        let Tie::Real(why) = judge(&ours, &far, &a, &b, "llama.cpp", NEAR_TIE) else {
            panic!("a 1-nat gap judged near");
        };
        assert!(
            why.contains("id 49839 \"\"") && why.contains("id 58626 \"\""),
            "{why}"
        );
        // Without ids the same tops cannot decide: never agreement.
        let strip = |t: &Top| -> Top {
            t.iter()
                .map(|c| Cand {
                    id: None,
                    ..c.clone()
                })
                .collect()
        };
        let Tie::Undecided(why) = judge(&strip(&ours), &theirs, &a, &b, "llama.cpp", NEAR_TIE)
        else {
            panic!("equal pieces without ids decided");
        };
        assert!(why.contains("same piece"), "{why}");
    }

    #[test]
    fn piece_only_tops_decide_only_unambiguous_pieces() {
        let (a, b) = (pick(1283, "ered"), pick(99, "s"));
        // Unique pieces: matched by piece, said so.
        let ours = text(&[("ered", -3.219), ("s", -3.302)]);
        let theirs = text(&[("s", -3.3458), ("ered", -3.3554)]);
        match judge(&ours, &theirs, &a, &b, "llama.cpp", NEAR_TIE) {
            Tie::Near { note, .. } => assert!(note.contains("by piece"), "{note}"),
            t => panic!("{t:?}"),
        }
        // A piece held by two candidates: undecided.
        let dup = text(&[("ered", -3.2), ("ered", -3.25), ("s", -3.3)]);
        assert!(matches!(
            judge(&dup, &theirs, &a, &b, "llama.cpp", NEAR_TIE),
            Tie::Undecided(_)
        ));
    }

    #[test]
    fn a_pick_no_longer_first_is_noted_and_judged_by_its_gap() {
        // Over the shared prefix both arms now rank our pick first; theirs streamed the
        // other, within 0.02 nats: a near-tie, with the note.
        let (a, b) = (pick(1, "a"), pick(2, "b"));
        let ours = top(&[(1, "a", -1.0), (2, "b", -1.05)]);
        let theirs = top(&[(1, "a", -1.0), (2, "b", -1.02)]);
        match judge(&ours, &theirs, &a, &b, "vllm", NEAR_TIE) {
            Tie::Near { ours, theirs, note } => {
                assert!((ours - 0.05).abs() < 1e-9 && (theirs - 0.02).abs() < 1e-9);
                assert!(note.contains("vllm now ranks id 1"), "{note}");
            }
            t => panic!("{t:?}"),
        }
        // Its own pick missing from its top: real.
        let theirs = top(&[(1, "a", -1.0), (3, "c", -1.02)]);
        let Tie::Real(why) = judge(&ours, &theirs, &a, &b, "vllm", NEAR_TIE) else {
            panic!("own pick missing judged near");
        };
        assert!(why.contains("its own streamed pick id 2"), "{why}");
    }
}
