//! vLLM's OpenAI-compatible server as a pairing arm (competitors/vllm): started with the
//! GPU image's Python and the unpacked vLLM folder on `PYTHONPATH`, on a free loopback
//! port, serving a safetensors folder under the model name `bench` with token-id prompts
//! (`--skip-tokenizer-init`: the synthetic checkpoints carry no HF tokenizer), stopped on
//! drop. The transformers arm (competitors/transformers/server.py) runs the same way
//! ([`VllmServer::start_transformers`]). First run on the H200 in session 7 (research/notes/final-s7.md: ready in ~81 s,
//! token-identical to ours on the first 16 greedy tokens of the BF16 decode cell).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::bench::llama_server::{free_port, start_error, wait_child_ready};

/// A running vLLM server.
pub struct VllmServer {
    child: Option<Child>,
    pub port: u16,
    pub log: PathBuf,
    pub flags: Vec<String>,
    pub ready_s: f64,
    pub version: String,
}

/// What a cell asks of the vLLM server.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    /// Context (`--max-model-len`).
    pub ctx: usize,
    /// Most sequences at once (`--max-num-seqs`).
    pub concurrency: usize,
    /// `--quantization` (e.g. `fp8`: vLLM quantizes the BF16 weights itself at load).
    pub quantization: Option<String>,
}

/// The server's flags: loopback, the model name `bench`, bf16, a context of `ctx` tokens,
/// at most `concurrency` sequences, token ids in and out, half of the GPU's memory (our
/// server holds the same weights on the same GPU while the arms alternate), and the
/// cell's `--quantization` when it has one (so the receipt's flags record it).
pub fn vllm_args(model: &Path, port: u16, o: &Options) -> Vec<String> {
    let (ctx, concurrency) = (o.ctx, o.concurrency);
    let mut a: Vec<String> = vec![
        "--model".into(),
        model.display().to_string(),
        "--served-model-name".into(),
        "bench".into(),
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        port.to_string(),
        "--dtype".into(),
        "bfloat16".into(),
        "--max-model-len".into(),
        ctx.to_string(),
        "--max-num-seqs".into(),
        concurrency.max(1).to_string(),
        "--skip-tokenizer-init".into(),
        "--gpu-memory-utilization".into(),
        "0.45".into(),
    ];
    if let Some(q) = &o.quantization {
        a.extend(["--quantization".into(), q.clone()]);
    }
    a
}

impl VllmServer {
    /// Start vLLM on `model` (a folder with config.json and safetensors) and wait for its
    /// `/health`.
    pub fn start(
        python: &str,
        site: &Path,
        model: &Path,
        o: &Options,
        log: &Path,
        ready_timeout: Duration,
    ) -> Result<VllmServer> {
        if !site.join("vllm").is_dir() {
            bail!(
                "no vLLM in {} (carry the parts of competitors/vllm/prepare and run competitors/vllm/install there)",
                site.display()
            );
        }
        let version = Command::new(python)
            .args(["-c", "import vllm; print(vllm.__version__)"])
            .env("PYTHONPATH", site)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "unknown".into());
        let port = free_port()?;
        let args = vllm_args(model, port, o);
        let mut cmd = Command::new(python);
        cmd.args(["-m", "vllm.entrypoints.openai.api_server"])
            .args(&args)
            .env("PYTHONPATH", site)
            .env("VLLM_USE_FLASHINFER_SAMPLER", "0");
        spawn(cmd, "vLLM", port, args, version, log, ready_timeout)
    }

    /// Start competitors/transformers/server.py (`script`) on `model` (the same safetensors
    /// folder vLLM loads; `None`: its `--fake` toy model, for tests without torch) and wait
    /// for its `/health` (it answers once the model is loaded and warmed up). `device` is
    /// torch's (`cuda` for the GPU cells, `cpu` for the CPU cells).
    pub fn start_transformers(
        python: &str,
        script: &Path,
        model: Option<&Path>,
        device: &str,
        ctx: usize,
        log: &Path,
        ready_timeout: Duration,
    ) -> Result<VllmServer> {
        if !script.is_file() {
            bail!("no transformers server script at {}", script.display());
        }
        let version = match model {
            None => "fake-0".to_owned(),
            Some(_) => Command::new(python)
                .args(["-c", "import transformers; print(transformers.__version__)"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_else(|| "unknown".into()),
        };
        let port = free_port()?;
        let mut args = vec![
            "--host".into(),
            "127.0.0.1".into(),
            "--port".into(),
            port.to_string(),
            "--ctx".into(),
            ctx.to_string(),
            "--device".into(),
            device.into(),
        ];
        match model {
            Some(m) => args.extend(["--model".into(), m.display().to_string()]),
            None => args.push("--fake".into()),
        }
        let mut cmd = Command::new(python);
        cmd.arg(script).args(&args);
        spawn(cmd, "transformers", port, args, version, log, ready_timeout)
    }

    /// Stop it and every process it started: vLLM's engine core is a child process that
    /// holds the GPU memory, and outlived a kill of the API server alone in session 23 (the
    /// next group's servers then ran out of memory). See [`stop_group`].
    pub fn stop(&mut self) {
        if let Some(c) = self.child.take() {
            stop_group(c, Duration::from_secs(20), Duration::from_secs(30));
        }
    }
}

/// Stop `child`, started as the leader of its own process group ([`spawn`] does so), and
/// everything in that group: SIGTERM to the group, up to `grace` for the leader to exit,
/// then SIGKILL to the group, and up to `gone` until no live process of the group is left
/// (a CUDA process's GPU memory is freed once it has exited; a zombie holds none). Through
/// kill(1) and /proc: the harness links no libc binding. Returns whether the group is gone.
pub fn stop_group(mut child: Child, grace: Duration, gone: Duration) -> bool {
    let pgid = child.id();
    let group = format!("-{pgid}");
    let signal = |sig: &str| {
        let _ = Command::new("kill")
            .args([sig, "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    };
    signal("-TERM");
    let t0 = std::time::Instant::now();
    while t0.elapsed() < grace && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(100));
    }
    signal("-KILL");
    let _ = child.kill();
    let _ = child.wait();
    let t0 = std::time::Instant::now();
    loop {
        if live_in_group(pgid).is_empty() {
            return true;
        }
        if t0.elapsed() >= gone {
            return false;
        }
        signal("-KILL");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The processes of process group `pgid` that have not exited (state not Z or X), from
/// /proc/<pid>/stat (the state is the field after the command's closing parenthesis, the
/// group the third after it).
pub fn live_in_group(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 2 && f[2].parse::<u32>().ok() == Some(pgid) && !matches!(f[0], "Z" | "X") {
            out.push(pid);
        }
    }
    out
}

/// Spawn `cmd` (a Python server on `port`, logging to `log`) and wait for its `/health`;
/// on a failure, the log's tail is in the error.
fn spawn(
    mut cmd: Command,
    what: &str,
    port: u16,
    flags: Vec<String>,
    version: String,
    log: &Path,
    ready_timeout: Duration,
) -> Result<VllmServer> {
    let out = std::fs::File::create(log)
        .with_context(|| format!("creating the server log {}", log.display()))?;
    let err = out.try_clone().context("sharing the server log")?;
    use std::os::unix::process::CommandExt;
    let child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting the {what} server"))?;
    let mut s = VllmServer {
        child: Some(child),
        port,
        log: log.to_owned(),
        flags,
        ready_s: 0.0,
        version,
    };
    match wait_child_ready(port, ready_timeout, &mut s.child) {
        Ok(t) => {
            s.ready_s = t;
            Ok(s)
        }
        Err(e) => {
            s.stop();
            Err(start_error(e, what, port, log))
        }
    }
}

impl Drop for VllmServer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_serve_token_ids_on_the_loopback_under_the_bench_name() {
        let mut o = Options {
            ctx: 656,
            concurrency: 4,
            quantization: None,
        };
        let a = vllm_args(Path::new("/m/x.hf"), 8000, &o).join(" ");
        assert!(
            a.starts_with("--model /m/x.hf --served-model-name bench --host 127.0.0.1 --port 8000")
        );
        assert!(a.contains("--max-model-len 656") && a.contains("--max-num-seqs 4"));
        assert!(a.contains("--skip-tokenizer-init"));
        assert!(!a.contains("--quantization"));
        o.quantization = Some("fp8".into());
        let a = vllm_args(Path::new("/m/x.hf"), 8000, &o).join(" ");
        assert!(a.ends_with("--quantization fp8"), "{a}");
    }

    /// competitors/transformers/server.py with its toy model (no torch): started, greedy
    /// tokens and a timed stream through the harness's own clients, a bad request refused
    /// with the server still answering, stopped.
    #[test]
    fn the_transformers_server_speaks_the_protocol_the_harness_sends() {
        use crate::bench::serve_load::{Protocol, Target, stream_completion};
        use std::net::{Ipv4Addr, SocketAddr};
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let log =
            std::env::temp_dir().join(format!("transformers-test-{}.log", std::process::id()));
        let mut s = VllmServer::start_transformers(
            "python3",
            &root.join("competitors/transformers/server.py"),
            None,
            "cpu",
            656,
            &log,
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(s.version, "fake-0");
        assert!(s.flags.contains(&"--fake".to_owned()));
        let dev = s.flags.iter().position(|f| f == "--device").unwrap();
        assert_eq!(s.flags[dev + 1], "cpu");
        let t = Target {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, s.port)),
            model: "bench".into(),
            api_key: None,
            protocol: Protocol::OpenAi,
        };
        let prompt: Vec<u32> = (1..40).collect();
        let first =
            crate::pair::requests::first_tokens_ours(&t, &prompt, 16, Duration::from_secs(30))
                .unwrap();
        assert_eq!(first.len(), 16);
        let again =
            crate::pair::requests::first_tokens_ours(&t, &prompt, 16, Duration::from_secs(30))
                .unwrap();
        assert_eq!(first, again, "greedy is deterministic");
        let st = stream_completion(&t, &prompt, 12, Duration::from_secs(30)).unwrap();
        assert_eq!(st.tokens, 12);
        // A prompt of text (the arm takes token ids only): a 400, and the server goes on.
        let bad = stream_completion(
            &Target {
                protocol: Protocol::LlamaNative,
                ..t.clone()
            },
            &prompt,
            4,
            Duration::from_secs(30),
        );
        assert!(bad.is_err());
        assert_eq!(
            crate::bench::llama_server::http_status(s.port, "/health", Duration::from_secs(5)),
            Some(200)
        );
        s.stop();
        let _ = std::fs::remove_file(&log);
    }

    /// The fault session 23 hit: a server whose child outlives the server. `stop_group`
    /// takes the whole group down; a kill of the leader alone (the old `stop`) leaves the
    /// grandchild running.
    #[test]
    fn stopping_a_server_stops_the_processes_it_started() {
        use std::os::unix::process::CommandExt;
        // Alive: in /proc and not a zombie (an orphan's zombie may wait for a reaper).
        let alive = |pid: &str| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
                let state = st
                    .rfind(')')
                    .map(|i| st[i + 1..].trim_start())
                    .unwrap_or("");
                !state.starts_with('Z') && !state.starts_with('X')
            })
        };
        let start = || {
            let dir = tempfile::tempdir().unwrap();
            let pidfile = dir.path().join("pid");
            let child = Command::new("sh")
                .arg("-c")
                .arg(format!("sleep 300 & echo $! > {}; wait", pidfile.display()))
                .process_group(0)
                .spawn()
                .unwrap();
            let t0 = std::time::Instant::now();
            let pid = loop {
                if let Ok(p) = std::fs::read_to_string(&pidfile)
                    && !p.trim().is_empty()
                {
                    break p.trim().to_owned();
                }
                assert!(t0.elapsed() < Duration::from_secs(10));
                std::thread::sleep(Duration::from_millis(20));
            };
            (child, pid)
        };
        // The planted fault: kill the leader only, and the grandchild survives.
        let (mut c, pid) = start();
        c.kill().unwrap();
        c.wait().unwrap();
        assert!(
            alive(&pid),
            "the grandchild outlives a kill of the leader alone"
        );
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
        // The fix: the whole group goes.
        let (c, pid) = start();
        assert!(alive(&pid));
        let pgid = c.id();
        assert_eq!(
            live_in_group(pgid).len(),
            2,
            "the leader and its grandchild"
        );
        assert!(stop_group(
            c,
            Duration::from_secs(5),
            Duration::from_secs(10)
        ));
        assert!(!alive(&pid), "grandchild {pid} still alive");
        assert!(live_in_group(pgid).is_empty());
    }

    #[test]
    fn a_missing_vllm_folder_is_a_clear_error() {
        let e = VllmServer::start(
            "python3",
            Path::new("/nonexistent-vllm-site"),
            Path::new("/m"),
            &Options::default(),
            Path::new("/tmp/x.log"),
            Duration::from_secs(1),
        );
        let msg = format!("{:#}", e.err().map(|e| e.to_string()).unwrap_or_default());
        assert!(msg.contains("competitors/vllm"), "{msg}");
    }
}
