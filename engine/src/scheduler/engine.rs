//! The engine thread's loop: take commands, reap cancelled requests, admit by KV memory,
//! plan one step (decodes first, then prefill chunks in admission order within the token
//! budget), grow block tables (evicting prefix-cache entries, then preempting the newest
//! sequence when the pool is dry), run the executor, emit events.
//!
//! A sequence whose step reaches the end of its tokens asks the executor for the next token
//! ([`Want::Token`]: its sampler and, when constrained, the grammar's mask computed here
//! before the step) unless it needs the raw logits ([`wants_logits`]: logprobs), in which
//! case it asks for the row and masks and samples here. Either way the grammar advances
//! here by the token picked.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Instant;

use super::prefix::PrefixCache;
use super::spec::{SeqSpec, SpecServe, eligible};
use super::{
    Command, Event, Executor, Finish, FinishReason, GenRequest, SchedulerConfig, Stats, StepInput,
    StepOut, TokenPick, Want, WantKind,
};
use crate::api::constrain::TokenMask;
use crate::kv::blocks::{BlockAllocator, BlockTable};
use crate::sampling::Sampler;

struct Seq<K> {
    req: GenRequest,
    sampler: Sampler,
    /// Prompt followed by the generated tokens.
    tokens: Vec<u32>,
    prompt_len: usize,
    cached: usize,
    generated: usize,
    kv: Option<K>,
    blocks: BlockTable,
    admitted_once: bool,
    /// Speculation state, when the model speculates and the request is eligible.
    spec: Option<SeqSpec>,
}

pub(super) struct Engine<E: Executor> {
    exec: E,
    alloc: BlockAllocator,
    config: Arc<SchedulerConfig>,
    stats: Arc<Stats>,
    rx: Receiver<Command>,
    rx_open: bool,
    waiting: VecDeque<Seq<E::Kv>>,
    running: Vec<Seq<E::Kv>>,
    cache: PrefixCache<E::Kv>,
    drain_deadline: Option<Instant>,
    spec: Option<SpecServe>,
}

impl<E: Executor> Engine<E> {
    pub(super) fn new(
        exec: E,
        alloc: BlockAllocator,
        config: Arc<SchedulerConfig>,
        stats: Arc<Stats>,
        rx: Receiver<Command>,
        spec: Option<SpecServe>,
    ) -> Self {
        let cache = PrefixCache::new(config.prefix_cache_entries);
        Self {
            exec,
            alloc,
            config,
            stats,
            rx,
            rx_open: true,
            waiting: VecDeque::new(),
            running: Vec::new(),
            cache,
            drain_deadline: None,
            spec,
        }
    }

    pub(super) fn run(&mut self) {
        self.warmup();
        loop {
            if !self.pull_commands() {
                break;
            }
            self.reap();
            self.admit();
            if !self.running.is_empty() {
                self.step();
            }
            self.publish();
            let draining = self.stats.draining.load(Ordering::SeqCst);
            if draining && self.running.is_empty() && self.waiting.is_empty() {
                break;
            }
        }
        for s in std::mem::take(&mut self.running) {
            self.finish(s, FinishReason::Shutdown);
        }
        while let Some(s) = self.waiting.pop_front() {
            self.finish(s, FinishReason::Shutdown);
        }
        self.publish();
        self.stats.stopped.store(true, Ordering::SeqCst);
    }

    fn warmup(&mut self) {
        if let Some(t) = self.config.warmup_token {
            let mut kv = match self.exec.new_kv(1) {
                Ok(kv) => kv,
                Err(e) => {
                    tracing::error!("warm-up cache: {e}");
                    return;
                }
            };
            let toks = [t];
            let mut b = [StepInput {
                kv: &mut kv,
                tokens: &toks,
                prompt: 0,
                want: Want::Logits,
            }];
            if let Err(e) = self.exec.step(&mut b) {
                tracing::error!("warm-up step failed: {e}");
                return;
            }
        }
        self.stats.ready.store(true, Ordering::SeqCst);
    }

    /// Take every pending command; block when there is nothing to do. `false` = exit.
    fn pull_commands(&mut self) -> bool {
        let idle = self.running.is_empty() && self.waiting.is_empty();
        if idle {
            if self.stats.draining.load(Ordering::SeqCst) || !self.rx_open {
                return false;
            }
            match self.rx.recv() {
                Ok(c) => self.command(c),
                Err(_) => return false,
            }
        }
        loop {
            match self.rx.try_recv() {
                Ok(c) => self.command(c),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.rx_open = false;
                    break;
                }
            }
        }
        true
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::Submit(req) => {
                let req = *req;
                let mut sampler = Sampler::new(req.sampling.clone());
                for &t in &req.prompt {
                    sampler.accept(t);
                }
                let tokens = req.prompt.clone();
                let prompt_len = tokens.len();
                self.waiting.push_back(Seq {
                    req,
                    sampler,
                    tokens,
                    prompt_len,
                    cached: 0,
                    generated: 0,
                    kv: None,
                    blocks: BlockTable::default(),
                    admitted_once: false,
                    spec: None,
                });
            }
            Command::Drain(deadline) => {
                self.drain_deadline = Some(deadline);
            }
        }
    }

    /// Cancel requests nobody listens to; apply the drain.
    fn reap(&mut self) {
        let draining = self.stats.draining.load(Ordering::SeqCst);
        let waiting = std::mem::take(&mut self.waiting);
        for s in waiting {
            if s.req.events.is_closed() {
                self.finish(s, FinishReason::Cancelled);
            } else if draining {
                self.finish(s, FinishReason::Shutdown);
            } else {
                self.waiting.push_back(s);
            }
        }
        let past_deadline = self.drain_deadline.is_some_and(|d| Instant::now() >= d);
        let running = std::mem::take(&mut self.running);
        for s in running {
            if s.req.events.is_closed() {
                self.finish(s, FinishReason::Cancelled);
            } else if past_deadline {
                self.finish(s, FinishReason::Shutdown);
            } else {
                self.running.push(s);
            }
        }
    }

    fn release(&mut self, mut t: BlockTable) {
        if let Err(e) = self.alloc.release(&mut t) {
            tracing::error!("KV accounting: {e}");
        }
    }

    fn evict_one(&mut self) -> bool {
        match self.cache.evict_lru() {
            Some(t) => {
                self.release(t);
                true
            }
            None => false,
        }
    }

    fn admit(&mut self) {
        while let Some(mut s) = self.waiting.pop_front() {
            if s.req.max_tokens == 0 {
                self.count_admission(&mut s, 0);
                self.finish(s, FinishReason::Length);
                continue;
            }
            // Positions the sequence can ever hold: its prompt and every token it may
            // generate, within the context.
            let capacity = s
                .prompt_len
                .saturating_add(s.req.max_tokens)
                .min(self.config.n_ctx)
                .max(s.tokens.len().min(self.config.n_ctx));
            let need = if self.exec.reserves_capacity() {
                capacity
            } else {
                (s.tokens.len() + self.alloc.block_tokens()).min(self.config.n_ctx)
            };
            while !self.alloc.can_admit(need) && self.evict_one() {}
            let blocks = match self.alloc.allocate(need) {
                Ok(b) => b,
                Err(_) => {
                    self.waiting.push_front(s);
                    break;
                }
            };
            let hit = self.cache.lookup(&s.req.tenant, &s.tokens);
            let reuse = hit.map_or(0, |h| h.shared.min(s.tokens.len() - 1));
            let kv = match (hit, reuse) {
                (Some(h), r) if r > 0 => match self.cache.kv(h.entry) {
                    Some(src) => self.exec.kv_prefix(src, r, capacity),
                    None => self.exec.new_kv(capacity),
                },
                _ => self.exec.new_kv(capacity),
            };
            let kv = match kv {
                Ok(kv) => kv,
                Err(e) => {
                    tracing::error!("cannot make a KV cache: {e}");
                    self.release(blocks);
                    self.count_admission(&mut s, 0);
                    self.finish(s, FinishReason::Error(format!("KV cache: {e}")));
                    continue;
                }
            };
            let reused = self.exec.kv_len(&kv);
            match (&self.spec, s.spec.as_mut()) {
                (_, Some(sp)) => sp.capacity = capacity,
                (Some(spec), None) if eligible(&s.req, &s.sampler, spec.sampled) => {
                    s.spec = Some(SeqSpec::new(spec, &s.sampler, capacity));
                }
                _ => {}
            }
            s.kv = Some(kv);
            s.blocks = blocks;
            self.count_admission(&mut s, reused);
            self.running.push(s);
        }
    }

    fn count_admission(&mut self, s: &mut Seq<E::Kv>, reused: usize) {
        if s.admitted_once {
            return;
        }
        s.admitted_once = true;
        s.cached = reused;
        let st = &self.stats;
        st.queue_depth.fetch_sub(1, Ordering::SeqCst);
        st.prompt_tokens
            .fetch_add(s.prompt_len as u64, Ordering::Relaxed);
        st.cached_tokens.fetch_add(reused as u64, Ordering::Relaxed);
        if reused > 0 {
            st.prefix_hits.fetch_add(1, Ordering::Relaxed);
        } else {
            st.prefix_misses.fetch_add(1, Ordering::Relaxed);
        }
        let _ = s.req.events.send(Event::Admitted {
            cached_tokens: reused,
        });
    }

    fn fed(&self, s: &Seq<E::Kv>) -> usize {
        s.kv.as_ref().map_or(0, |kv| self.exec.kv_len(kv))
    }

    /// Preempt the newest running sequence: free its KV, queue it first for recompute.
    fn preempt_newest(&mut self) {
        if let Some(mut s) = self.running.pop() {
            s.kv = None;
            if let Some(sp) = s.spec.as_mut() {
                // The draft's cache goes with the target's; rebuilt on re-admission.
                sp.drop_proposer();
            }
            let t = std::mem::take(&mut s.blocks);
            self.release(t);
            self.stats.preemptions.fetch_add(1, Ordering::Relaxed);
            self.waiting.push_front(s);
        }
    }

    /// Tokens each running sequence feeds this step (0 = none), decodes first, then
    /// prefill chunks in admission order within the budget.
    fn plan(&self) -> Vec<usize> {
        let mut plan = vec![0usize; self.running.len()];
        let mut decodes = 0;
        for (i, s) in self.running.iter().enumerate() {
            if s.tokens.len().saturating_sub(self.fed(s)) == 1 {
                // One token, or the last token and the drafts of a speculative round.
                plan[i] = s.spec.as_ref().map_or(1, |sp| sp.feed.len().max(1));
                decodes += plan[i];
            }
        }
        let mut budget = self
            .config
            .max_batch_tokens
            .saturating_sub(decodes)
            .max(self.alloc.block_tokens());
        for (i, s) in self.running.iter().enumerate() {
            let left = s.tokens.len().saturating_sub(self.fed(s));
            if left > 1 && budget > 0 {
                plan[i] = left.min(budget);
                budget -= plan[i];
            }
        }
        plan
    }

    /// Grow the block tables for `plan`; preempts (and shortens `plan`) when the pool is
    /// dry.
    fn grow(&mut self, plan: &mut Vec<usize>) {
        let mut i = 0;
        while i < self.running.len().min(plan.len()) {
            if plan[i] == 0 {
                i += 1;
                continue;
            }
            let target = self.fed(&self.running[i]) + plan[i];
            loop {
                let s = &mut self.running[i];
                if self.alloc.grow(&mut s.blocks, target).is_ok() {
                    i += 1;
                    break;
                }
                if self.evict_one() {
                    continue;
                }
                self.preempt_newest();
                plan.truncate(self.running.len());
                if i >= self.running.len() {
                    break;
                }
            }
        }
    }

    fn step(&mut self) {
        let mut done: Vec<(usize, FinishReason)> = Vec::new();
        self.draft();
        let mut plan = self.plan();
        self.grow(&mut plan);
        // The grammar masks of the sequences that will ask for a token, computed before the
        // step (the executor applies them to the pick).
        let mut masks: Vec<Option<TokenMask>> = Vec::with_capacity(self.running.len());
        for (i, s) in self.running.iter_mut().enumerate() {
            let n = plan.get(i).copied().unwrap_or(0);
            let fed = s.kv.as_ref().map_or(0, |kv| self.exec.kv_len(kv));
            let picks = n > 0 && fed + n == s.tokens.len() && !wants_logits(&s.req);
            let mask = match s.req.constraint.as_mut() {
                Some(c) if picks => match c.mask() {
                    Ok(m) => Some(m),
                    Err(e) => {
                        done.push((i, FinishReason::Error(e.to_string())));
                        None
                    }
                },
                _ => None,
            };
            masks.push(mask);
        }
        // (sequence, what it asked, whether this is a decode round of a speculating one).
        let mut which: Vec<(usize, WantKind, bool)> = Vec::new();
        let t0 = Instant::now();
        let result = {
            let mut inputs = Vec::new();
            for (i, s) in self.running.iter_mut().enumerate() {
                let n = plan.get(i).copied().unwrap_or(0);
                let Some(kv) = s.kv.as_mut() else { continue };
                if n == 0 || done.iter().any(|d| d.0 == i) {
                    continue;
                }
                let fed = self.exec.kv_len(kv);
                let decoding = fed + 1 == s.tokens.len();
                if let Some(sp) = s.spec.as_ref()
                    && decoding
                    && sp.feed.len() > 1
                    && n == sp.feed.len()
                {
                    // A speculative round: the last token, then the drafts.
                    which.push((i, WantKind::Rows, true));
                    inputs.push(StepInput {
                        kv,
                        tokens: &sp.feed,
                        prompt: 0,
                        want: Want::Rows { argmax: sp.argmax },
                    });
                    continue;
                }
                let Some(tokens) = s.tokens.get(fed..fed + n) else {
                    continue;
                };
                let want = if fed + n < s.tokens.len() {
                    Want::Nothing
                } else if wants_logits(&s.req) {
                    Want::Logits
                } else {
                    Want::Token(TokenPick {
                        sampler: &mut s.sampler,
                        mask: masks.get(i).and_then(|m| m.as_ref()).map(|m| m.words()),
                    })
                };
                which.push((
                    i,
                    want.kind(),
                    decoding && s.generated > 0 && s.spec.is_some(),
                ));
                let prompt = s.prompt_len.saturating_sub(fed).min(n);
                inputs.push(StepInput {
                    kv,
                    tokens,
                    prompt,
                    want,
                });
            }
            if inputs.is_empty() {
                None
            } else {
                Some(self.exec.step(&mut inputs))
            }
        };
        let Some(result) = result else {
            self.end(done);
            return;
        };
        // Each input's share of the step's time (the speed policy's clock).
        let share_s = t0.elapsed().as_secs_f64() / which.len().max(1) as f64;
        self.stats.steps.fetch_add(1, Ordering::Relaxed);
        let outs = match result {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("executor step failed: {e}");
                for &(i, _, _) in &which {
                    done.push((i, FinishReason::Error(e.clone())));
                }
                self.end(done);
                return;
            }
        };
        if outs.len() != which.len() {
            let e = format!(
                "the executor answered {} of {} inputs",
                outs.len(),
                which.len()
            );
            done.extend(
                which
                    .iter()
                    .map(|&(i, _, _)| (i, FinishReason::Error(e.clone()))),
            );
            self.end(done);
            return;
        }
        for (&(i, asked, round), out) in which.iter().zip(outs) {
            if asked == WantKind::Rows {
                if let Some(reason) = self.spec_round(i, out, share_s) {
                    done.push((i, reason));
                }
                continue;
            }
            let Some(s) = self.running.get_mut(i) else {
                continue;
            };
            let (tok, raw) = match (asked, out) {
                (WantKind::Nothing, StepOut::Nothing) => continue,
                (WantKind::Token, StepOut::Token(t)) => (t, None),
                (WantKind::Logits, StepOut::Logits(mut row)) => {
                    let raw = s.req.logprobs.map(|n| (n, row.clone()));
                    if let Some(c) = s.req.constraint.as_mut()
                        && let Err(e) = c.constrain(&mut row)
                    {
                        done.push((i, FinishReason::Error(e.to_string())));
                        continue;
                    }
                    (s.sampler.sample(&row), raw)
                }
                (asked, out) => {
                    let e = format!(
                        "the executor answered {} to a {asked:?} request",
                        out_name(&out)
                    );
                    done.push((i, FinishReason::Error(e)));
                    continue;
                }
            };
            if round && let Some(sp) = s.spec.as_mut() {
                // A plain step of a speculating sequence (nothing drafted, or the policy
                // has speculation off): timed for the policy.
                let before = s.tokens.len();
                sp.end_round(0, share_s, before);
                if s.req.ignore_eos || !self.config.eog_tokens.contains(&tok) {
                    sp.stats.emitted += 1;
                }
                self.stats.spec.plain_rounds.fetch_add(1, Ordering::Relaxed);
            }
            if let Some((n, raw)) = raw {
                let lp = crate::api::logprobs::token_logprob(&raw, tok, n);
                let _ = s.req.events.send(Event::Logprob(lp));
            }
            let mut grammar_done = false;
            if let Some(c) = s.req.constraint.as_mut() {
                if let Err(e) = c.commit(tok) {
                    done.push((i, FinishReason::Error(e.to_string())));
                    continue;
                }
                grammar_done = c.is_stopped();
            }
            if !s.req.ignore_eos && self.config.eog_tokens.contains(&tok) {
                done.push((i, FinishReason::Eog));
                continue;
            }
            s.sampler.accept(tok);
            s.tokens.push(tok);
            s.generated += 1;
            self.stats.generated_tokens.fetch_add(1, Ordering::Relaxed);
            if s.req.events.send(Event::Token(tok)).is_err() {
                done.push((i, FinishReason::Cancelled));
            } else if grammar_done {
                done.push((i, FinishReason::Eog));
            } else if s.generated >= s.req.max_tokens || s.tokens.len() >= self.config.n_ctx {
                done.push((i, FinishReason::Length));
            }
        }
        self.end(done);
    }

    /// Draft the next round of every speculating sequence about to decode (see
    /// [`super::spec`]); a sequence whose proposer fails (a draft decoder that cannot be
    /// made) decodes plain from then on: nothing of the target changed, so its tokens stay
    /// those of plain decoding.
    fn draft(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        for s in self.running.iter_mut() {
            let Some(sp) = s.spec.as_mut() else { continue };
            let fed = s.kv.as_ref().map_or(0, |kv| self.exec.kv_len(kv));
            // The first token comes from the prompt's pass, as in the spec loop (also when
            // the prefix cache left one prompt token to feed).
            if s.kv.is_none() || fed + 1 != s.tokens.len() || s.generated == 0 {
                sp.clear_round();
                continue;
            }
            // Drafts past the target's own token: within max_tokens, the context and the
            // sequence's cache.
            let len = s.tokens.len();
            let room = s
                .req
                .max_tokens
                .saturating_sub(s.generated)
                .saturating_sub(1)
                .min(self.config.n_ctx.saturating_sub(len + 1))
                .min(sp.capacity.saturating_sub(len));
            if let Err(e) = sp.prepare(spec, &s.req.sampling, &s.tokens, room) {
                tracing::warn!("speculation off for a request: {e}");
                self.stats.spec.failures.fetch_add(1, Ordering::Relaxed);
                s.spec = None;
            }
        }
    }

    /// Verify, emit and account one speculative round of running sequence `i`; returns why
    /// the sequence ends, if it does.
    fn spec_round(&mut self, i: usize, out: StepOut, share_s: f64) -> Option<FinishReason> {
        let s = self.running.get_mut(i)?;
        let sp = s.spec.as_mut()?;
        let kv = s.kv.as_mut()?;
        let drafted = sp.draft.tokens.len();
        let rows = match &out {
            StepOut::Picks(p) => p.len(),
            StepOut::Rows(r) => r.len(),
            _ => 0,
        };
        // The target's cache before the round: the context but its last token.
        let base = self.exec.kv_len(kv).saturating_sub(sp.feed.len());
        if rows != drafted + 1 {
            sp.clear_round();
            return Some(FinishReason::Error(format!(
                "the executor answered {} with {rows} rows to a verification of {} tokens",
                out_name(&out),
                drafted + 1
            )));
        }
        let verifier = self.spec.as_mut()?.verifier.as_mut();
        let res = match out {
            StepOut::Picks(p) => verifier.verify_argmax(&p, &sp.draft, &mut s.sampler),
            StepOut::Rows(r) => verifier.verify(&r, &sp.draft, &mut s.sampler),
            _ => {
                return Some(FinishReason::Error(
                    "unreachable verification answer".into(),
                ));
            }
        };
        let accepted = res.accepted.min(drafted);
        self.exec.kv_truncate(kv, base + 1 + accepted);
        let context_len = s.tokens.len();
        let spec_stats = &self.stats.spec;
        spec_stats.rounds.fetch_add(1, Ordering::Relaxed);
        for pos in 0..drafted.min(spec_stats.proposed.len()) {
            spec_stats.proposed[pos].fetch_add(1, Ordering::Relaxed);
            if pos < accepted {
                spec_stats.accepted[pos].fetch_add(1, Ordering::Relaxed);
            }
        }
        let emit: Vec<u32> = sp.draft.tokens[..accepted]
            .iter()
            .copied()
            .chain([res.next])
            .collect();
        sp.end_round(accepted, share_s, context_len);
        let mut end = None;
        for t in emit {
            if !s.req.ignore_eos && self.config.eog_tokens.contains(&t) {
                end = Some(FinishReason::Eog);
                break;
            }
            s.tokens.push(t);
            s.generated += 1;
            sp.stats.emitted += 1;
            self.stats.generated_tokens.fetch_add(1, Ordering::Relaxed);
            if s.req.events.send(Event::Token(t)).is_err() {
                end = Some(FinishReason::Cancelled);
                break;
            }
            if s.generated >= s.req.max_tokens || s.tokens.len() >= self.config.n_ctx {
                end = Some(FinishReason::Length);
                break;
            }
        }
        // An end inside the round: the cache keeps no position past the tokens kept.
        if self.exec.kv_len(kv) > s.tokens.len() {
            self.exec.kv_truncate(kv, s.tokens.len());
        }
        end
    }

    /// Finish the running sequences `done` names (indices into `running`), removing them
    /// from the back so indices stay valid and the rest keep admission order.
    fn end(&mut self, mut done: Vec<(usize, FinishReason)>) {
        done.sort_by_key(|d| std::cmp::Reverse(d.0));
        done.dedup_by_key(|d| d.0);
        for (i, reason) in done {
            if i < self.running.len() {
                let s = self.running.remove(i);
                self.finish(s, reason);
            }
        }
    }

    fn finish(&mut self, mut s: Seq<E::Kv>, reason: FinishReason) {
        let _ = s.req.events.send(Event::Finished(Finish {
            reason: reason.clone(),
            prompt_tokens: s.prompt_len,
            cached_tokens: s.cached,
            generated: s.generated,
            spec: s.spec.as_ref().map(|sp| super::SpecUsage {
                rounds: sp.stats.rounds - sp.stats.plain_rounds,
                drafted: sp.stats.drafted(),
                accepted: sp.stats.accepted.iter().sum(),
            }),
        }));
        if !s.admitted_once {
            self.stats.queue_depth.fetch_sub(1, Ordering::SeqCst);
        }
        let blocks = std::mem::take(&mut s.blocks);
        let keep = matches!(reason, FinishReason::Length | FinishReason::Eog);
        match s.kv.take() {
            Some(mut kv) if keep && self.config.prefix_cache_entries > 0 => {
                let len = self.exec.kv_len(&kv);
                self.exec.kv_trim(&mut kv, len);
                let mut blocks = blocks;
                if let Err(e) = self.alloc.shrink(&mut blocks, len) {
                    tracing::error!("KV accounting: {e}");
                }
                s.tokens.truncate(len);
                let freed = self.cache.insert_fed(
                    &s.req.tenant,
                    std::mem::take(&mut s.tokens),
                    s.prompt_len,
                    kv,
                    blocks,
                );
                for t in freed {
                    self.release(t);
                }
            }
            _ => self.release(blocks),
        }
    }

    fn publish(&self) {
        let st = &self.stats;
        st.running.store(self.running.len(), Ordering::Relaxed);
        st.kv_blocks_used
            .store(self.alloc.used_blocks(), Ordering::Relaxed);
        st.kv_blocks_free
            .store(self.alloc.free_blocks(), Ordering::Relaxed);
        st.prefix_cache_entries
            .store(self.cache.len(), Ordering::Relaxed);
    }
}

/// The name of an answer (error messages).
fn out_name(out: &StepOut) -> &'static str {
    match out {
        StepOut::Nothing => "nothing",
        StepOut::Logits(_) => "logits",
        StepOut::Token(_) => "a token",
        StepOut::Picks(_) => "arg-max rows",
        StepOut::Rows(_) => "logits rows",
    }
}

/// Whether a request needs its raw logits rows on the host (logprobs / `top_logprobs`);
/// every other request asks the executor for the token itself ([`Want::Token`]).
pub(super) fn wants_logits(req: &GenRequest) -> bool {
    req.logprobs.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::SamplerConfig;

    fn req(logprobs: Option<usize>, temperature: f32) -> GenRequest {
        let (events, _rx) = tokio::sync::mpsc::unbounded_channel();
        GenRequest {
            tenant: String::new(),
            prompt: vec![1],
            max_tokens: 1,
            sampling: SamplerConfig {
                temperature,
                ..SamplerConfig::default()
            },
            events,
            constraint: None,
            logprobs,
            ignore_eos: false,
        }
    }

    #[test]
    fn only_logprobs_requests_download_logits() {
        // Greedy or sampled, the executor picks the token.
        assert!(!wants_logits(&req(None, 0.0)));
        assert!(!wants_logits(&req(None, 0.9)));
        // logprobs (with or without alternatives) need the raw row.
        assert!(wants_logits(&req(Some(0), 0.0)));
        assert!(wants_logits(&req(Some(5), 0.9)));
    }
}
