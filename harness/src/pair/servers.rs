//! The two arms' servers of `harness pair`: starting both for a group of cells ([`group`]:
//! the group's union of limits), or only ours where the competitor's is carried from the
//! group before ([`super::carry`]), checking they still answer, stopping them; the competitor's
//! server (llama-server or vLLM) behind one type; and the safetensors folder vLLM loads for
//! a cell.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::carry::Origins;
use super::{Competitor, PairArgs, group, vllm};
use crate::bench::cells::{Cell, DeviceKind, SynthRef};
use crate::bench::llama_server::{LlamaServer, ServerOptions};
use crate::bench::serve_load::{self, AssayServer, Protocol};
use crate::bench::{llamacpp, model_path};
use crate::env::EnvArgs;

/// Both servers of a group of cells ([`group`]), started once (the competitor's perhaps
/// for an earlier group: [`super::carry`]).
pub(super) struct Servers {
    pub(super) ours: AssayServer,
    pub(super) theirs: TheirServer,
    pub(super) their_version: String,
    pub(super) their_engine: &'static str,
    pub(super) protocol: Protocol,
    pub(super) bin: PathBuf,
    pub(super) backend: &'static str,
    /// The cell each server was started for and what its start took (charged to that
    /// cell's wall time), and the competitor's server as started.
    pub(super) origins: Origins,
}

/// The competitor's server just started.
struct Theirs {
    server: TheirServer,
    version: String,
    engine: &'static str,
    protocol: Protocol,
    start_s: f64,
}

/// Our server just started.
struct Ours {
    server: AssayServer,
    bin: PathBuf,
    backend: &'static str,
    start_s: f64,
}

impl Servers {
    /// Start both servers of group `g` (its union of limits) for its cell `cell`: the
    /// competitor's first (a missing build fails before our server loads).
    pub(super) fn start(
        env: &EnvArgs,
        args: &PairArgs,
        cell: &Cell,
        g: &group::Group,
    ) -> Result<Servers> {
        let t = start_theirs(env, args, cell, g)?;
        // Ours failing drops (stops) theirs.
        let o = start_ours(env, args, cell, g)?;
        Ok(Servers {
            ours: o.server,
            theirs: t.server,
            their_version: t.version,
            their_engine: t.engine,
            protocol: t.protocol,
            bin: o.bin,
            backend: o.backend,
            origins: Origins {
                ours_for: cell.id.clone(),
                ours_start_s: o.start_s,
                theirs_for: cell.id.clone(),
                theirs_start_s: t.start_s,
                theirs: g.theirs.clone(),
            },
        })
    }

    /// Stop our server and start ours for group `g`'s cell `cell`, keeping the competitor's
    /// (carried: [`super::carry::carries`] said it serves `g`). On an error the caller stops both.
    pub(super) fn restart_ours(
        &mut self,
        env: &EnvArgs,
        args: &PairArgs,
        cell: &Cell,
        g: &group::Group,
    ) -> Result<()> {
        self.ours.stop();
        let o = start_ours(env, args, cell, g)?;
        self.ours = o.server;
        self.bin = o.bin;
        self.backend = o.backend;
        self.origins.ours_for = cell.id.clone();
        self.origins.ours_start_s = o.start_s;
        Ok(())
    }

    /// Whether both still answer `/health`.
    pub(super) fn alive(&self) -> bool {
        let t = Duration::from_secs(5);
        [self.ours.port, self.theirs.port()]
            .iter()
            .all(|&p| crate::bench::llama_server::http_status(p, "/health", t) == Some(200))
    }

    pub(super) fn stop(&mut self) {
        self.ours.stop();
        self.theirs.stop();
    }
}

/// Start the competitor's server of group `g` (its union of limits) for its cell `cell`.
fn start_theirs(env: &EnvArgs, args: &PairArgs, cell: &Cell, g: &group::Group) -> Result<Theirs> {
    let t0 = Instant::now();
    let timeout = Duration::from_secs(args.timeout_s);
    // vLLM's safetensors first: a BF16 checkpoint is then made once, with its copy, and
    // our arm finds the GGUF already there.
    let vllm_dir = match (args.vs, &cell.synth) {
        (Competitor::Vllm | Competitor::Transformers, Some(s)) if !args.transformers_fake => {
            Some(vllm_model_dir(
                env,
                cell,
                &env.models_dir()?.join("synth").join(s.file_name()),
            )?)
        }
        _ => None,
    };
    let (_, path) = model_path(env, cell)?;
    let (server, version, engine, protocol) = match args.vs {
        Competitor::LlamaCpp => {
            let home = args
                .llama_cpp_home
                .clone()
                .or_else(llamacpp::default_home)
                .context("no llama.cpp home (HOME unset; pass --llama-cpp-home)")?;
            let install = llamacpp::locate(&home, cell.device)?;
            let o = ServerOptions {
                ctx: g.theirs.ctx,
                parallel: g.theirs.slots,
                gpu_layers: if cell.device == DeviceKind::Gpu {
                    999
                } else {
                    0
                },
                ready_timeout: timeout,
                // The board's settings, then an A/B's own (`--llama-server-arg`).
                extra: crate::bench::llama_server::PAIR_TUNING
                    .iter()
                    .map(|s| s.to_string())
                    .chain(args.llama_server_args.iter().cloned())
                    .collect(),
                ..ServerOptions::default()
            };
            let log = std::env::temp_dir().join(format!("llama-server-{}.log", cell.id));
            let version = install.info.version();
            (
                TheirServer::Llama(LlamaServer::start(&install, &path, &o, &log)?),
                version,
                "llama-server",
                Protocol::LlamaNative,
            )
        }
        Competitor::Vllm => {
            let dir = match vllm_dir.clone() {
                Some(d) => d,
                None => vllm_model_dir(env, cell, &path)?,
            };
            let log = std::env::temp_dir().join(format!("vllm-{}.log", cell.id));
            let v = vllm::VllmServer::start(
                &args.vllm_python,
                &args.vllm_site,
                &dir,
                &vllm::Options {
                    ctx: g.theirs.ctx,
                    concurrency: g.theirs.slots,
                    quantization: g.theirs.quantization.clone(),
                },
                &log,
                timeout,
            )?;
            let version = v.version.clone();
            (TheirServer::Vllm(v), version, "vllm", Protocol::OpenAi)
        }
        Competitor::Transformers => {
            let dir = match (&vllm_dir, args.transformers_fake) {
                (_, true) => None,
                (Some(d), false) => Some(d.clone()),
                // A real model's cell (no synth): transformers reads the very GGUF our arm
                // serves (dequantized on load; needs the `gguf` and `accelerate` packages).
                (None, false) if cell.synth.is_none() => Some(path.clone()),
                (None, false) => Some(vllm_model_dir(env, cell, &path)?),
            };
            let log = std::env::temp_dir().join(format!("transformers-{}.log", cell.id));
            let script = env.root()?.join("competitors/transformers/server.py");
            let v = vllm::VllmServer::start_transformers(
                &args.vllm_python,
                &script,
                dir.as_deref(),
                if cell.device == DeviceKind::Gpu {
                    "cuda"
                } else {
                    "cpu"
                },
                g.theirs.ctx,
                &log,
                timeout,
            )?;
            let version = v.version.clone();
            (
                TheirServer::Transformers(v),
                version,
                "transformers",
                Protocol::OpenAi,
            )
        }
    };
    Ok(Theirs {
        server,
        version,
        engine,
        protocol,
        start_s: t0.elapsed().as_secs_f64(),
    })
}

/// Start our server of group `g` (its union of limits) for its cell `cell`.
fn start_ours(env: &EnvArgs, args: &PairArgs, cell: &Cell, g: &group::Group) -> Result<Ours> {
    let t0 = Instant::now();
    let timeout = Duration::from_secs(args.timeout_s);
    let (_, path) = model_path(env, cell)?;
    let bin = crate::bench::assay_bin(args.assay_bin.as_ref())?;
    let backend = if cell.device == DeviceKind::Gpu {
        "cuda"
    } else {
        "cpu"
    };
    // The group's limits (`--ctx` = prompt + generated + 16 of its longest cell, the queue
    // of its most streams): for a cell alone, exactly `serve_flags` of the cell.
    let (ctx, _) = g.ours.limits();
    let mut flags = serve_load::serve_flags(backend, ctx - 16, 0, g.ours.concurrency);
    if let Some(spec) = &g.ours.spec {
        // Ours speculative, theirs plain (the board's spec cells).
        let draft = crate::bench::draft_path(env, cell)?;
        flags.extend(serve_load::spec_flags(spec, draft.as_deref())?);
    }
    // The cell's own server flags (e.g. `--batched-decode --mmv` for the concurrency
    // cells), recorded with the arm's flags: the same for every cell of the group.
    flags.extend(g.ours.serve_flags.iter().cloned());
    let log = std::env::temp_dir().join(format!("assay-serve-pair-{}.log", cell.id));
    let server = AssayServer::start(&bin, &path, &flags, &log, timeout)?;
    Ok(Ours {
        server,
        bin,
        backend,
        start_s: t0.elapsed().as_secs_f64(),
    })
}

/// The competitor's running server.
pub(super) enum TheirServer {
    Llama(LlamaServer),
    Vllm(vllm::VllmServer),
    /// competitors/transformers/server.py (the same process type as vLLM's).
    Transformers(vllm::VllmServer),
}

impl TheirServer {
    pub(super) fn port(&self) -> u16 {
        match self {
            TheirServer::Llama(l) => l.port,
            TheirServer::Vllm(v) | TheirServer::Transformers(v) => v.port,
        }
    }
    pub(super) fn ready_s(&self) -> f64 {
        match self {
            TheirServer::Llama(l) => l.ready_s,
            TheirServer::Vllm(v) | TheirServer::Transformers(v) => v.ready_s,
        }
    }
    pub(super) fn flags(&self) -> Vec<String> {
        match self {
            TheirServer::Llama(l) => l.flags.clone(),
            TheirServer::Vllm(v) | TheirServer::Transformers(v) => v.flags.clone(),
        }
    }
    pub(super) fn log(&self) -> &Path {
        match self {
            TheirServer::Llama(l) => &l.log,
            TheirServer::Vllm(v) | TheirServer::Transformers(v) => &v.log,
        }
    }
    pub(super) fn stop(&mut self) {
        match self {
            TheirServer::Llama(l) => {
                let _ = l.stop();
            }
            TheirServer::Vllm(v) | TheirServer::Transformers(v) => v.stop(),
        }
    }
}

/// The safetensors folder vLLM loads for a cell: the `<stem>.hf/` copy that `harness
/// synth` writes next to a BF16 synthetic GGUF (made again, with the same bytes, when only
/// the GGUF is there), so both engines run the very same weights. A cell with
/// `vllm_quantization` (our arm in another format) uses the BF16 checkpoint of the same
/// shape and seed, made when missing.
fn vllm_model_dir(env: &EnvArgs, cell: &Cell, gguf: &Path) -> Result<PathBuf> {
    let Some(s) = &cell.synth else {
        bail!(
            "cell {}: the vllm arm needs a synthetic checkpoint (its safetensors copy)",
            cell.id
        );
    };
    let bf16 = s.quant.eq_ignore_ascii_case("BF16");
    if !bf16 && cell.vllm_quantization.is_none() {
        bail!(
            "cell {}: the vllm and transformers arms run the BF16 safetensors copy; this cell is {} (set vllm_quantization to pair it against vLLM's own quantization)",
            cell.id,
            s.quant
        );
    }
    let bf = SynthRef {
        quant: "BF16".into(),
        ..s.clone()
    };
    let gguf = if bf16 {
        gguf.to_owned()
    } else {
        gguf.with_file_name(bf.file_name())
    };
    let dir = crate::synth::hf_dir_for(&gguf);
    if !dir.join("config.json").exists() {
        println!(
            "{:<36} making {} (harness synth with safetensors)",
            cell.id,
            dir.display()
        );
        bf.make(env, &gguf, true)
            .with_context(|| format!("cell {}: making the safetensors copy", cell.id))?;
    }
    Ok(dir)
}
