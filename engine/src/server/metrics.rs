//! `/metrics` in the Prometheus text format: HTTP-level numbers kept here (requests by
//! route and status, time to first token, inter-token latency) and the engine's live
//! numbers read from each model's [`Stats`].

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::scheduler::Stats;

/// Upper bounds (seconds) of the latency histograms' buckets.
const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// A fixed-bucket histogram (cumulative on output).
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    inf: AtomicU64,
    /// Sum in microseconds.
    sum_us: AtomicU64,
}

impl Histogram {
    /// Record one observation (seconds).
    pub fn observe(&self, secs: f64) {
        let secs = if secs.is_finite() { secs.max(0.0) } else { 0.0 };
        match BUCKETS.iter().position(|&b| secs <= b) {
            Some(i) => self.counts[i].fetch_add(1, Ordering::Relaxed),
            None => self.inf.fetch_add(1, Ordering::Relaxed),
        };
        self.sum_us
            .fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum::<u64>()
            + self.inf.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cum = 0;
        for (b, c) in BUCKETS.iter().zip(&self.counts) {
            cum += c.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        cum += self.inf.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cum}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {cum}");
    }
}

/// The server's own metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    pub ttft: Histogram,
    pub inter_token: Histogram,
}

impl Metrics {
    /// Count one finished request on `route` with `status`.
    pub fn request(&self, route: &str, status: u16) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((route.to_owned(), status)).or_default() += 1;
        }
    }

    /// Requests counted on `route` with `status`.
    pub fn requests(&self, route: &str, status: u16) -> u64 {
        self.requests
            .lock()
            .ok()
            .and_then(|m| m.get(&(route.to_owned(), status)).copied())
            .unwrap_or(0)
    }

    /// The whole exposition text; `models` are (alias, engine stats).
    pub fn render(&self, models: &[(&str, &Stats)]) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "# HELP assay_requests_total HTTP requests by route and status."
        );
        let _ = writeln!(o, "# TYPE assay_requests_total counter");
        if let Ok(m) = self.requests.lock() {
            for ((route, status), n) in m.iter() {
                let _ = writeln!(
                    o,
                    "assay_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
        }
        self.ttft.render(
            &mut o,
            "assay_time_to_first_token_seconds",
            "Time from request arrival to the first generated token.",
        );
        self.inter_token.render(
            &mut o,
            "assay_inter_token_latency_seconds",
            "Time between consecutive generated tokens of a stream.",
        );
        type Get = fn(&Stats) -> u64;
        let rows: [(&str, &str, &str, Get); 17] = [
            (
                "assay_prompt_tokens_total",
                "counter",
                "Prompt tokens admitted.",
                |s| s.prompt_tokens.load(Ordering::Relaxed),
            ),
            (
                "assay_cached_prompt_tokens_total",
                "counter",
                "Prompt tokens served from the prefix cache.",
                |s| s.cached_tokens.load(Ordering::Relaxed),
            ),
            (
                "assay_generated_tokens_total",
                "counter",
                "Tokens generated.",
                |s| s.generated_tokens.load(Ordering::Relaxed),
            ),
            (
                "assay_prefix_cache_hits_total",
                "counter",
                "Admissions that reused a cached prefix.",
                |s| s.prefix_hits.load(Ordering::Relaxed),
            ),
            (
                "assay_prefix_cache_misses_total",
                "counter",
                "Admissions with no cached prefix.",
                |s| s.prefix_misses.load(Ordering::Relaxed),
            ),
            (
                "assay_preemptions_total",
                "counter",
                "Sequences preempted for KV memory (recomputed later).",
                |s| s.preemptions.load(Ordering::Relaxed),
            ),
            (
                "assay_engine_steps_total",
                "counter",
                "Executor steps run.",
                |s| s.steps.load(Ordering::Relaxed),
            ),
            (
                "assay_queue_depth",
                "gauge",
                "Requests waiting for admission.",
                |s| s.queue_depth.load(Ordering::Relaxed) as u64,
            ),
            (
                "assay_running_sequences",
                "gauge",
                "Sequences admitted and running.",
                |s| s.running.load(Ordering::Relaxed) as u64,
            ),
            (
                "assay_kv_blocks_used",
                "gauge",
                "KV blocks held (running sequences and prefix cache).",
                |s| s.kv_blocks_used.load(Ordering::Relaxed) as u64,
            ),
            ("assay_kv_blocks_free", "gauge", "KV blocks free.", |s| {
                s.kv_blocks_free.load(Ordering::Relaxed) as u64
            }),
            (
                "assay_prefix_cache_entries",
                "gauge",
                "Entries in the prefix cache.",
                |s| s.prefix_cache_entries.load(Ordering::Relaxed) as u64,
            ),
            (
                "assay_spec_rounds_total",
                "counter",
                "Speculative verification rounds (the last token and at least one draft in one forward).",
                |s| s.spec.rounds.load(Ordering::Relaxed),
            ),
            (
                "assay_spec_plain_rounds_total",
                "counter",
                "Decode steps of speculating sequences that drafted nothing (no n-gram match, speed policy off).",
                |s| s.spec.plain_rounds.load(Ordering::Relaxed),
            ),
            (
                "assay_spec_drafted_tokens_total",
                "counter",
                "Draft tokens verified.",
                |s| s.spec.drafted(),
            ),
            (
                "assay_spec_accepted_tokens_total",
                "counter",
                "Draft tokens accepted.",
                |s| s.spec.accepted_total(),
            ),
            (
                "assay_spec_failures_total",
                "counter",
                "Requests whose proposer failed (they decoded plain from then on).",
                |s| s.spec.failures.load(Ordering::Relaxed),
            ),
        ];
        for (name, kind, help, get) in rows {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} {kind}");
            for (alias, st) in models {
                let _ = writeln!(o, "{name}{{model=\"{alias}\"}} {}", get(st));
            }
        }
        type Pos = fn(&Stats) -> &[AtomicU64];
        let per_position: [(&str, &str, Pos); 2] = [
            (
                "assay_spec_position_proposed_total",
                "Speculative rounds with a draft token at this position (1-based).",
                |s| &s.spec.proposed,
            ),
            (
                "assay_spec_position_accepted_total",
                "Speculative rounds whose draft token at this position (1-based) was accepted.",
                |s| &s.spec.accepted,
            ),
        ];
        for (name, help, get) in per_position {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} counter");
            for (alias, st) in models {
                for (i, c) in get(st).iter().enumerate() {
                    let _ = writeln!(
                        o,
                        "{name}{{model=\"{alias}\",position=\"{}\"}} {}",
                        i + 1,
                        c.load(Ordering::Relaxed)
                    );
                }
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_buckets_counts_and_gauges() {
        let m = Metrics::default();
        m.request("/v1/completions", 200);
        m.request("/v1/completions", 200);
        m.request("/v1/completions", 400);
        m.ttft.observe(0.003);
        m.ttft.observe(0.2);
        m.ttft.observe(1000.0);
        let st = Stats::default();
        st.kv_blocks_free.store(7, Ordering::Relaxed);
        let t = m.render(&[("smol", &st)]);
        assert!(t.contains("assay_requests_total{route=\"/v1/completions\",status=\"200\"} 2"));
        assert!(t.contains("assay_requests_total{route=\"/v1/completions\",status=\"400\"} 1"));
        assert!(t.contains("assay_time_to_first_token_seconds_bucket{le=\"0.005\"} 1"));
        assert!(t.contains("assay_time_to_first_token_seconds_bucket{le=\"0.25\"} 2"));
        assert!(t.contains("assay_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3"));
        assert!(t.contains("assay_time_to_first_token_seconds_count 3"));
        assert!(t.contains("assay_kv_blocks_free{model=\"smol\"} 7"));
        st.spec.proposed[0].store(5, Ordering::Relaxed);
        st.spec.proposed[1].store(3, Ordering::Relaxed);
        st.spec.accepted[0].store(4, Ordering::Relaxed);
        st.spec.rounds.store(5, Ordering::Relaxed);
        let t = m.render(&[("smol", &st)]);
        assert!(t.contains("assay_spec_rounds_total{model=\"smol\"} 5"));
        assert!(t.contains("assay_spec_drafted_tokens_total{model=\"smol\"} 8"));
        assert!(t.contains("assay_spec_accepted_tokens_total{model=\"smol\"} 4"));
        assert!(t.contains("assay_spec_position_proposed_total{model=\"smol\",position=\"2\"} 3"));
        assert!(t.contains("assay_spec_position_accepted_total{model=\"smol\",position=\"1\"} 4"));
        assert!(t.contains("assay_spec_position_accepted_total{model=\"smol\",position=\"8\"} 0"));
        assert_eq!(m.ttft.count(), 3);
    }
}
