//! The speculative decode loop, and the plain loop it must equal.

use std::time::Instant;

use crate::sampling::Sampler;

use super::{
    AdaptiveDepth, CostModel, Draft, DraftMode, EvidencePolicy, PolicyEvent, Proposer, Replay,
    RoundCost, SpecError, SpecOptions, SpecStats, Target, Verifier,
};

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    /// `max_tokens` generated.
    Length,
    /// An end-of-generation token was drawn (not included in the tokens).
    Eog,
}

/// The result of a generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    pub tokens: Vec<u32>,
    pub stop: StopReason,
    /// Speculation counters (empty for plain decode).
    pub stats: SpecStats,
    pub prefill_s: f64,
    pub decode_s: f64,
}

/// Plain tokens between two replays of a free proposer while speculation is off.
const REPLAY_EVERY: usize = 16;
/// Most plain tokens one replay covers (the latest).
const REPLAY_SPAN: usize = 32;

/// The rounds a free proposer would have made over `context[from..]` (each drafting up to
/// `k` tokens after the context before it, emitting its matching prefix plus one token).
pub fn replay(
    proposer: &mut dyn Proposer,
    context: &[u32],
    from: usize,
    k: usize,
    mode: DraftMode,
) -> Result<Replay, SpecError> {
    let mut r = Replay::default();
    let mut pos = from.max(1);
    while pos < context.len() {
        let d = proposer.propose(&context[..pos], k, mode)?;
        let matched = d
            .tokens
            .iter()
            .zip(&context[pos..])
            .take_while(|(a, b)| a == b)
            .count();
        if d.tokens.is_empty() {
            r.empty_rounds += 1;
        } else {
            r.drafted_rounds += 1;
            r.drafted += d.tokens.len() as u64;
            r.first_accepted += u64::from(matched > 0);
            r.cont_trials += matched as u64;
            r.cont_accepted += if matched == d.tokens.len() {
                matched as u64
            } else {
                matched.saturating_sub(1) as u64
            };
        }
        let step = (matched + 1).min(context.len() - pos);
        r.tokens += step as u64;
        pos += step;
    }
    Ok(r)
}

/// Greedy without penalties: only the arg-max of each row matters, so the loops ask the
/// target for arg-max ids ([`Target::forward_last_argmax`], [`Target::forward_all_argmax`])
/// instead of logits rows (a device target then downloads 4 bytes per row).
pub fn argmax_only(sampler: &Sampler) -> bool {
    let c = sampler.config();
    sampler.is_greedy()
        && c.repeat_penalty == 1.0
        && c.presence_penalty == 0.0
        && c.frequency_penalty == 0.0
}

fn is_stop(opts: &SpecOptions, t: u32) -> bool {
    !opts.ignore_eos && opts.eog.contains(&t)
}

/// Plain decoding: prefill, then one target step per token. `sampler` must already have
/// seen the prompt (as `assay generate` does); `on_token` is called for every token.
pub fn plain_generate(
    target: &mut dyn Target,
    sampler: &mut Sampler,
    prompt: &[u32],
    max_tokens: usize,
    opts: &SpecOptions,
    on_token: &mut dyn FnMut(u32) -> Result<(), SpecError>,
) -> Result<Generation, SpecError> {
    if prompt.is_empty() {
        return Err(SpecError::EmptyPrompt);
    }
    let fast = argmax_only(sampler);
    let step = |target: &mut dyn Target, sampler: &mut Sampler, feed: &[u32]| {
        if fast {
            target.forward_last_argmax(feed)
        } else {
            Ok(sampler.sample(&target.forward_last(feed)?))
        }
    };
    let t0 = Instant::now();
    let mut next = if fast {
        target.prefill_last_argmax(prompt)?
    } else {
        sampler.sample(&target.prefill_last(prompt)?)
    };
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut tokens = Vec::new();
    let mut stop = StopReason::Length;
    while tokens.len() < max_tokens {
        if is_stop(opts, next) {
            stop = StopReason::Eog;
            break;
        }
        sampler.accept(next);
        tokens.push(next);
        on_token(next)?;
        if tokens.len() == max_tokens {
            break;
        }
        next = step(target, sampler, &[next])?;
    }
    Ok(Generation {
        tokens,
        stop,
        stats: SpecStats::default(),
        prefill_s,
        decode_s: t1.elapsed().as_secs_f64(),
    })
}

/// Speculative decoding: prefill (the target's, then the proposer's prompt pass: both in
/// `prefill_s`, the proposer's also in the statistics' `draft_prefill_s`), the first token
/// from the prefill's logits (as plain decoding), then rounds of draft + one verification
/// forward of `k + 1` rows, emitting the accepted drafts and the target's own next token;
/// rounds of depth 0 (the speed policy's plain steps) are plain target steps. Same
/// contract as [`plain_generate`]; with a greedy sampler and [`super::ExactVerifier`] the
/// tokens are those of plain decoding for every proposer, depth and policy decision.
#[allow(clippy::too_many_arguments)]
pub fn generate(
    target: &mut dyn Target,
    proposer: &mut dyn Proposer,
    verifier: &mut dyn Verifier,
    sampler: &mut Sampler,
    prompt: &[u32],
    max_tokens: usize,
    opts: &SpecOptions,
    on_token: &mut dyn FnMut(u32) -> Result<(), SpecError>,
) -> Result<Generation, SpecError> {
    if prompt.is_empty() {
        return Err(SpecError::EmptyPrompt);
    }
    let mut stats = SpecStats::new(proposer.name(), opts.depth.k_max);
    let free = proposer.is_free();
    let mut depth = AdaptiveDepth::new(opts.depth.clone())
        .with_rows_per_pass(target.rows_per_pass())
        .with_free_drafts(free)
        .with_cost_model(CostModel::new(
            free,
            proposer.weight_bytes(),
            target.weight_bytes(),
        ));
    // A free proposer under the speed policy: the evidence rule decides every round from
    // the proposal's own match (adaptive::evidence); `depth` then only keeps the config.
    let mut evidence = (opts.depth.off_when_slower && free).then(|| {
        let cap = if opts.depth.adaptive {
            opts.depth
                .k_max
                .min(target.rows_per_pass().saturating_sub(1))
        } else {
            opts.depth.k_max
        };
        EvidencePolicy::new(cap)
    });
    // With the speed policy on, a draft model's prompt pass waits for its first round: a
    // request the policy never drafts for never pays it (the plan counts it as catch-up).
    let defer_prompt = opts.depth.off_when_slower && !free;
    let mode = DraftMode {
        greedy: sampler.is_greedy(),
        confidence: opts.depth.confidence,
    };
    let draft_forwards0 = proposer.forwards();
    let fast = argmax_only(sampler);
    let t0 = Instant::now();
    let first = if fast {
        target.prefill_last_argmax(prompt)?
    } else {
        sampler.sample(&target.prefill_last(prompt)?)
    };
    let tp = Instant::now();
    if max_tokens > 1 && !defer_prompt {
        proposer.prefill(prompt)?;
    }
    stats.draft_prefill_s = tp.elapsed().as_secs_f64();
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    // The proposer missed the tokens of plain rounds (policy off) since it last drafted.
    let mut proposer_behind = false;
    // The draft model has not seen the prompt yet (deferred prompt pass), and the context
    // length it had seen when it last drafted.
    let mut prompt_pending = defer_prompt && max_tokens > 1;
    let mut draft_seen = if prompt_pending { 0 } else { prompt.len() };
    // Context length when the policy last turned speculation off, and at the last replay.
    let (mut off_from, mut replayed_at) = (0usize, 0usize);
    let mut tokens = Vec::new();
    let mut stop = StopReason::Length;
    let mut context = prompt.to_vec();
    if max_tokens > 0 {
        if is_stop(opts, first) {
            stop = StopReason::Eog;
        } else {
            sampler.accept(first);
            tokens.push(first);
            context.push(first);
            on_token(first)?;
        }
    }
    'rounds: while stop == StopReason::Length && tokens.len() < max_tokens {
        if evidence.is_none() && depth.wants_replay() && context.len() >= replayed_at + REPLAY_EVERY
        {
            let from = off_from.max(context.len().saturating_sub(REPLAY_SPAN));
            let ts = Instant::now();
            let r = replay(proposer, &context, from, depth.replay_k(), mode)?;
            stats.draft_s += ts.elapsed().as_secs_f64();
            replayed_at = context.len();
            if depth.replay_verdict(&r).is_some() {
                stats.policy_probes += 1;
            }
        }
        let remaining = max_tokens - tokens.len();
        let behind = if free {
            0
        } else {
            context.len().saturating_sub(draft_seen)
        };
        let before = if evidence.is_none() {
            depth.before_round(Some(remaining as u64), behind as u64)
        } else {
            None
        };
        match before {
            Some(PolicyEvent::Off) => {
                stats.policy_offs += 1;
                stats.off_at.get_or_insert(tokens.len() as u64);
                off_from = context.len();
                replayed_at = off_from;
            }
            Some(PolicyEvent::Hopeless) => {
                stats.policy_offs += 1;
                stats.off_at.get_or_insert(tokens.len() as u64);
                stats.hopeless_at = Some(tokens.len() as u64);
            }
            _ => {}
        }
        // The evidence rule drafts its largest depth (free), then picks how much to verify.
        let k = match &evidence {
            Some(ev) => ev.k_cap().min(remaining - 1),
            None => depth.next_k().min(remaining - 1),
        };
        let mut sync_s = 0.0;
        if k > 0 && prompt_pending {
            // The deferred prompt pass (all of the context but its last token, which the
            // proposal feeds): a cost the plan accounted for, kept out of the measured
            // rounds' window (it is paid once, not per round).
            let ts = Instant::now();
            proposer.prefill(&context[..context.len() - 1])?;
            // Counted as the draft's prompt pass (in the decode time, not per drafted token).
            stats.draft_prefill_s += ts.elapsed().as_secs_f64();
            prompt_pending = false;
            proposer_behind = false;
        }
        if k > 0 {
            draft_seen = context.len();
        }
        if k > 0 && proposer_behind {
            let ts = Instant::now();
            proposer.sync(&context)?;
            sync_s = ts.elapsed().as_secs_f64();
            stats.draft_s += sync_s;
            proposer_behind = false;
        }
        let tr = Instant::now();
        let mut draft = if k > 0 {
            proposer.propose(&context, k, mode)?
        } else {
            Draft::default()
        };
        draft.tokens.truncate(k);
        // The proposal's evidence and first token (a plain step checks it: a shadow trial).
        let mut shadow = None;
        if let Some(ev) = evidence.as_mut() {
            let e = proposer.evidence(&context).unwrap_or(0);
            shadow = Some((e, draft.tokens.first().copied()));
            let pick = ev.pick(e, draft.tokens.len());
            draft.tokens.truncate(pick);
        }
        if let Some(d) = draft.dists.as_mut() {
            d.truncate(draft.tokens.len());
        }
        let drafted_s = tr.elapsed().as_secs_f64();
        let tv = Instant::now();
        let base = target.len();
        let last = context.last().copied().ok_or(SpecError::EmptyPrompt)?;
        let mut feed = Vec::with_capacity(draft.tokens.len() + 1);
        feed.push(last);
        feed.extend_from_slice(&draft.tokens);
        let res = if fast {
            let picks = if draft.tokens.is_empty() {
                vec![target.forward_last_argmax(&feed)?]
            } else {
                target.forward_all_argmax(&feed)?
            };
            if picks.len() != feed.len() {
                return Err(SpecError::Rows {
                    got: picks.len(),
                    want: feed.len(),
                });
            }
            verifier.verify_argmax(&picks, &draft, sampler)
        } else {
            let rows = if draft.tokens.is_empty() {
                vec![target.forward_last(&feed)?]
            } else {
                target.forward_all(&feed)?
            };
            if rows.len() != feed.len() {
                return Err(SpecError::Rows {
                    got: rows.len(),
                    want: feed.len(),
                });
            }
            verifier.verify(&rows, &draft, sampler)
        };
        // Read before the truncation (a target's own bookkeeping, not a forward).
        let setup = fast && !draft.tokens.is_empty() && target.last_forward_setup();
        let accepted = res.accepted.min(draft.tokens.len());
        target.truncate(base + 1 + accepted);
        let verify_s = tv.elapsed().as_secs_f64();
        stats.draft_s += drafted_s;
        if draft.tokens.is_empty() {
            stats.plain_s += verify_s;
        } else {
            stats.verify_s += verify_s;
        }
        stats.record(draft.tokens.len(), accepted);
        stats.record_verify_s(draft.tokens.len(), verify_s);
        if setup {
            stats.setup_rounds += 1;
            stats.setup_s += verify_s;
        }
        if k == 0 {
            proposer_behind = true;
        }
        let round = RoundCost {
            drafted: draft.tokens.len(),
            accepted,
            emitted: accepted + 1,
            draft_s: drafted_s,
            verify_s,
            sync_s,
            setup,
        };
        let event = match (evidence.as_mut(), shadow) {
            (Some(ev), Some((e, first))) => {
                let hit = if draft.tokens.is_empty() {
                    first.map(|t| t == res.next)
                } else {
                    None
                };
                ev.record(
                    e,
                    round.drafted,
                    accepted,
                    round.emitted,
                    verify_s,
                    setup,
                    hit,
                );
                None
            }
            _ => depth.record(&round),
        };
        if matches!(event, Some(PolicyEvent::Off | PolicyEvent::Hopeless)) {
            // The tokens of this round are emitted below: replays start after them.
            off_from = context.len() + accepted + 1;
            replayed_at = off_from;
        }
        match event {
            Some(PolicyEvent::Off) => {
                stats.policy_offs += 1;
                stats.off_at.get_or_insert(tokens.len() as u64);
            }
            Some(PolicyEvent::Hopeless) => {
                stats.policy_offs += 1;
                stats.off_at.get_or_insert(tokens.len() as u64);
                stats.hopeless_at = Some(tokens.len() as u64);
            }
            Some(PolicyEvent::Probe) => stats.policy_probes += 1,
            None => {}
        }
        let out = draft.tokens[..accepted].iter().copied().chain([res.next]);
        for t in out {
            if is_stop(opts, t) {
                stop = StopReason::Eog;
                break 'rounds;
            }
            tokens.push(t);
            context.push(t);
            stats.emitted += 1;
            on_token(t)?;
            if tokens.len() == max_tokens {
                break 'rounds;
            }
        }
    }
    stats.draft_forwards = proposer.forwards() - draft_forwards0;
    stats.decisions = match &evidence {
        Some(ev) => ev.decisions().to_vec(),
        None => depth.decisions().to_vec(),
    };
    Ok(Generation {
        tokens,
        stop,
        stats,
        prefill_s,
        decode_s: t1.elapsed().as_secs_f64(),
    })
}
