//! `harness pair --shard I/N` (issue 12): the pair board takes hours of device time, and a
//! machine of several GPUs runs N pairing processes side by side, one per GPU
//! (`CUDA_VISIBLE_DEVICES=I`, both arms of a cell on that one GPU, alternating as always).
//! Each process takes the server groups ([`super::group`]) dealt to its shard: whole groups,
//! so that servers shared by consecutive cells stay shared, dealt longest first to the shard
//! with the least estimated time so far ([`deal`]; ties to the lower shard), which every
//! process computes the same from the same cells. A shard runs its groups in file order.
//!
//! Sharded runs never make checkpoints: two processes would write one file. A cell whose
//! synthetic checkpoint (or its draft's, or vLLM's safetensors copy) is missing fails at once
//! with that reason ([`missing_checkpoints`]); the window scripts make them first
//! (tools/gpu/window/psynth).

use std::path::Path;
use std::str::FromStr;

use crate::bench::cells::Cell;

use super::Competitor;

/// One shard of N (`I/N`, 0 <= I < N).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("--shard {s:?}: expected I/N with 0 <= I < N (e.g. 0/2)");
        let (i, n) = s.trim().split_once('/').ok_or_else(bad)?;
        let index: usize = i.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count || count > 64 {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The shard of each job of estimated `costs` (seconds) among `n` shards: the longest job
/// first (ties: the earlier job) to the shard with the least time so far (ties: the lower
/// shard). Deterministic; every shard gets a job while there are at least `n` jobs.
pub fn deal(costs: &[f64], n: usize) -> Vec<usize> {
    let n = n.max(1);
    let mut order: Vec<usize> = (0..costs.len()).collect();
    // Stable sort: equal costs keep file order.
    order.sort_by(|&a, &b| costs[b].total_cmp(&costs[a]));
    let mut load = vec![0.0f64; n];
    let mut out = vec![0usize; costs.len()];
    for j in order {
        let mut best = 0;
        for s in 1..n {
            if load[s] < load[best] {
                best = s;
            }
        }
        load[best] += costs[j].max(0.0);
        out[j] = best;
    }
    out
}

/// The checkpoints `cell` needs that are not in the models folder `models_dir` (its
/// synthetic GGUF, a `draft:synth:Q` draft's, the vLLM or transformers arm's safetensors copy), as
/// paths; empty for a catalog model (those are never made by the harness).
pub fn missing_checkpoints(cell: &Cell, vs: Competitor, models_dir: &Path) -> Vec<String> {
    let Some(s) = &cell.synth else {
        return Vec::new();
    };
    let dir = models_dir.join("synth");
    let gguf = dir.join(s.file_name());
    let mut need = vec![gguf.clone()];
    if let Some(q) = cell
        .spec
        .as_ref()
        .and_then(|p| p.proposer.strip_prefix("draft:synth:"))
    {
        let d = crate::bench::cells::SynthRef {
            quant: q.to_owned(),
            ..s.clone()
        };
        need.push(dir.join(d.file_name()));
    }
    if matches!(vs, Competitor::Vllm | Competitor::Transformers) {
        // The safetensors copy of the BF16 checkpoint of the same shape and seed (what
        // `servers::vllm_model_dir` loads, FP8 cells included).
        let bf = crate::bench::cells::SynthRef {
            quant: "BF16".into(),
            ..s.clone()
        };
        need.push(crate::synth::hf_dir_for(&dir.join(bf.file_name())).join("config.json"));
    }
    need.into_iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_parses_as_i_of_n_and_nothing_else() {
        assert_eq!("1/4".parse::<Shard>(), Ok(Shard { index: 1, count: 4 }));
        assert_eq!(" 0 / 1 ".parse::<Shard>().unwrap().to_string(), "0/1");
        for bad in [
            "", "1", "4/4", "5/4", "0/0", "-1/2", "a/2", "1/b", "1/2/3", "0/65",
        ] {
            assert!(bad.parse::<Shard>().is_err(), "{bad:?} must not parse");
        }
    }

    #[test]
    fn dealing_balances_the_estimated_time_and_is_deterministic() {
        let costs = [300.0, 20.0, 25.0, 210.0, 100.0, 360.0, 150.0, 14.0];
        let d = deal(&costs, 2);
        assert_eq!(
            d,
            deal(&costs, 2),
            "every process must compute the same deal"
        );
        let mut load = [0.0; 2];
        for (j, &s) in d.iter().enumerate() {
            load[s] += costs[j];
        }
        let total: f64 = costs.iter().sum();
        // Longest-first to the least loaded: within the largest job of an even split.
        assert!((load[0] - load[1]).abs() <= 360.0, "{load:?}");
        assert!(load[0].max(load[1]) < total, "both shards work: {load:?}");
        // The longest job goes to shard 0, the next to shard 1.
        assert_eq!(d[5], 0);
        assert_eq!(d[0], 1);
        // One shard takes everything; more shards than jobs leave the last ones idle.
        assert!(deal(&costs, 1).iter().all(|&s| s == 0));
        let d4 = deal(&[5.0, 5.0], 4);
        assert_eq!(d4, vec![0, 1]);
        assert!(deal(&[], 3).is_empty());
        // Every job lands on a shard in range.
        assert!(deal(&costs, 3).iter().all(|&s| s < 3));
    }

    fn cell(more: &str) -> Cell {
        toml::from_str(&format!(
            "id = \"x\"\nlabel = \"x\"\nvs = [\"vllm\"]\ndevice = \"gpu\"\nmode = \"decode\"\n\
             prompt_tokens = 512\ngen_tokens = 128\n\
             synth = {{ arch = \"llama\", shape = \"llama-3.1-8b\", quant = \"Q8_0\", seed = 0 }}\n{more}\n"
        ))
        .unwrap()
    }

    /// A sharded run refuses to make checkpoints: what it would need is named, and once
    /// the files exist nothing is missing.
    #[test]
    fn a_shard_names_the_checkpoints_it_would_have_to_make() {
        let t = tempfile::tempdir().unwrap();
        let c = cell("vllm_quantization = \"fp8\"");
        let m = missing_checkpoints(&c, Competitor::Vllm, t.path());
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(m[0].ends_with("llama-3.1-8b-Q8_0-s0.gguf"), "{m:?}");
        assert!(
            m[1].contains("BF16") && m[1].ends_with("config.json"),
            "{m:?}"
        );
        // llama.cpp needs the GGUF only.
        assert_eq!(
            missing_checkpoints(&c, Competitor::LlamaCpp, t.path()).len(),
            1
        );
        let synth = t.path().join("synth");
        std::fs::create_dir_all(&synth).unwrap();
        std::fs::write(synth.join("llama-3.1-8b-Q8_0-s0.gguf"), b"x").unwrap();
        let hf = crate::synth::hf_dir_for(&synth.join("llama-3.1-8b-BF16-s0.gguf"));
        std::fs::create_dir_all(&hf).unwrap();
        std::fs::write(hf.join("config.json"), b"{}").unwrap();
        assert!(missing_checkpoints(&c, Competitor::Vllm, t.path()).is_empty());
        // A catalog model is never the harness's to make.
        let mut cat = c.clone();
        cat.synth = None;
        assert!(missing_checkpoints(&cat, Competitor::Vllm, t.path()).is_empty());
    }

    #[test]
    fn equal_jobs_are_dealt_in_file_order() {
        assert_eq!(deal(&[1.0, 1.0, 1.0, 1.0], 2), vec![0, 1, 0, 1]);
    }
}
