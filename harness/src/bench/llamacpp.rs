//! llama.cpp as a bench arm: `llama-bench` from the build that
//! `competitors/llama.cpp/build` made (`<home>/cpu/` or `<home>/cuda/`, each with `bin/`
//! and a `BUILD_INFO` file), run on the very same GGUF as our arm, its JSON-lines output
//! parsed into samples.
//!
//! A decode cell of P prompt tokens and G generated tokens runs `llama-bench -p 0 -n G
//! -d P`: the P-token context is filled untimed (llama-bench's depth), then the G
//! generated tokens are timed, which is what our arm times. llama-bench cannot be paused
//! between its repetitions, so to alternate with our arm each timed run is its own call
//! with `-r 1` (the model is loaded again by every call; loading is not timed).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use super::arms::ArmRun;
use super::cells::{Cell, DeviceKind, Mode};

/// The build backend a cell's device needs.
pub fn backend(device: DeviceKind) -> &'static str {
    match device {
        DeviceKind::Cpu => "cpu",
        DeviceKind::Gpu => "cuda",
    }
}

/// The default folder of the builds: `$ASSAY_LLAMA_CPP_HOME` (read by clap), else
/// `~/.cache/assay/llama.cpp` (the build script's default too).
pub fn default_home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/assay/llama.cpp"))
}

/// `BUILD_INFO`: one `key value...` per line, written by the build script.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BuildInfo(pub BTreeMap<String, String>);

impl BuildInfo {
    pub fn parse(text: &str) -> BuildInfo {
        BuildInfo(
            text.lines()
                .filter_map(|l| {
                    let l = l.trim();
                    let (k, v) = l.split_once(' ').unwrap_or((l, ""));
                    (!k.is_empty()).then(|| (k.to_owned(), v.trim().to_owned()))
                })
                .collect(),
        )
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// What the receipt records as the arm's version.
    pub fn version(&self) -> String {
        format!(
            "{} sdist, vendored llama.cpp {}",
            self.get("package")
                .unwrap_or("llama-cpp-python (unknown version)"),
            self.get("llama_cpp_commit").unwrap_or("(unknown commit)")
        )
    }
}

/// One llama.cpp build, ready to run.
#[derive(Clone, Debug)]
pub struct Install {
    pub llama_bench: PathBuf,
    pub llama_server: PathBuf,
    pub info: BuildInfo,
}

/// The build for `device` under `home`, or an error that says what is missing and how to
/// make it.
pub fn locate(home: &Path, device: DeviceKind) -> Result<Install> {
    let be = backend(device);
    let dir = home.join(be);
    let hint = format!(
        "build it with `competitors/llama.cpp/build --{be} --home {}` (see \
         competitors/llama.cpp/README.md), or leave the arm out with `--arms assay` or \
         `--skip-missing-arms`",
        home.display()
    );
    let llama_bench = dir.join("bin/llama-bench");
    if !llama_bench.is_file() {
        bail!(
            "no llama.cpp {be} build: {} does not exist; {hint}",
            llama_bench.display()
        );
    }
    let info_path = dir.join("BUILD_INFO");
    let text = std::fs::read_to_string(&info_path).with_context(|| {
        format!(
            "llama.cpp {be} build at {} is incomplete: cannot read {}; {hint}",
            dir.display(),
            info_path.display()
        )
    })?;
    let info = BuildInfo::parse(&text);
    if info.get("backend") != Some(be) {
        bail!(
            "{} says backend {:?}, this cell needs {be}; {hint}",
            info_path.display(),
            info.get("backend").unwrap_or("(none)")
        );
    }
    Ok(Install {
        llama_server: dir.join("bin/llama-server"),
        llama_bench,
        info,
    })
}

/// The llama-bench arguments of `cell` on `model` for `reps` timed repetitions, without
/// the model (given separately so receipts record the file name, not a machine's path).
/// GPU: every layer offloaded (`-ngl 999`), flash attention on (`-fa 1`), llama.cpp's
/// best batch-1 settings; CPU: no offload, `threads` threads.
pub fn bench_args(cell: &Cell, reps: usize, threads: usize) -> Vec<String> {
    let (p, n, d) = match cell.mode {
        Mode::Decode | Mode::Serve => (0, cell.gen_tokens, cell.prompt_tokens),
        Mode::Prefill => (cell.prompt_tokens, 0, 0),
    };
    let mut a: Vec<String> = vec![
        "-p".into(),
        p.to_string(),
        "-n".into(),
        n.to_string(),
        "-d".into(),
        d.to_string(),
        "-r".into(),
        reps.to_string(),
    ];
    match cell.device {
        DeviceKind::Gpu => a.extend(["-ngl", "999", "-fa", "1"].map(String::from)),
        DeviceKind::Cpu => {
            a.extend(["-ngl", "0", "-fa", "1", "-t"].map(String::from));
            a.push(threads.to_string());
        }
    }
    a.extend(["-o", "jsonl"].map(String::from));
    a
}

/// One test of llama-bench's JSON-lines output (the fields the receipt uses).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct BenchRow {
    pub build_commit: String,
    pub build_number: i64,
    #[serde(default)]
    pub cpu_info: String,
    #[serde(default)]
    pub gpu_info: String,
    pub backends: String,
    pub model_type: String,
    pub n_threads: i64,
    pub n_gpu_layers: i64,
    pub flash_attn: i64,
    pub type_k: String,
    pub type_v: String,
    pub n_prompt: u64,
    pub n_gen: u64,
    pub n_depth: u64,
    pub samples_ns: Vec<u64>,
    pub samples_ts: Vec<f64>,
}

/// Every test row of llama-bench's `-o jsonl` output (blank lines allowed).
pub fn parse_jsonl(text: &str) -> Result<Vec<BenchRow>> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row: BenchRow = serde_json::from_str(line)
            .with_context(|| format!("llama-bench output line {}: not a test row", i + 1))?;
        rows.push(row);
    }
    Ok(rows)
}

/// The tok/s samples of `cell` from llama-bench's rows: exactly one row must be the
/// cell's test (prompt, generated, depth) with `reps` samples. Tokens per second are
/// recomputed from the raw nanoseconds (generated tokens for decode, prompt tokens for
/// prefill) and must agree with llama-bench's own figures (printed to 6 significant
/// digits).
pub fn samples(rows: &[BenchRow], cell: &Cell, reps: usize) -> Result<(Vec<f64>, BenchRow)> {
    let (p, n, d, tokens) = match cell.mode {
        Mode::Decode | Mode::Serve => (0, cell.gen_tokens, cell.prompt_tokens, cell.gen_tokens),
        Mode::Prefill => (cell.prompt_tokens, 0, 0, cell.prompt_tokens),
    };
    let want =
        |r: &&BenchRow| r.n_prompt == p as u64 && r.n_gen == n as u64 && r.n_depth == d as u64;
    let mut matching = rows.iter().filter(want);
    let (Some(row), None) = (matching.next(), matching.next()) else {
        bail!(
            "llama-bench output has {} row(s) for -p {p} -n {n} -d {d} (of {} rows); expected one",
            rows.iter().filter(want).count(),
            rows.len()
        );
    };
    if row.samples_ns.len() != reps || row.samples_ts.len() != reps {
        bail!(
            "llama-bench row has {} / {} samples, expected {reps}",
            row.samples_ns.len(),
            row.samples_ts.len()
        );
    }
    let mut out = Vec::with_capacity(reps);
    for (&ns, &ts) in row.samples_ns.iter().zip(&row.samples_ts) {
        if ns == 0 {
            bail!("llama-bench reported a zero-duration run");
        }
        let v = tokens as f64 / (ns as f64 * 1e-9);
        if (v - ts).abs() > 1e-5 * v.max(ts) {
            bail!("llama-bench says {ts} tok/s for a run of {ns} ns over {tokens} tokens ({v})");
        }
        out.push(v);
    }
    Ok((out, row.clone()))
}

/// Run `cmd`, waiting at most `timeout`; (stdout, stderr) of a successful exit.
pub fn run_captured(cmd: &mut Command, timeout: Duration) -> Result<(String, String)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    let reader = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut p) = p {
                let _ = p.read_to_string(&mut s);
            }
            s
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().context("waiting for the child")? {
            break s;
        }
        if t.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{:?} still running after {} s: killed",
                cmd.get_program(),
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if !status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(12).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "{:?} exited with {status}:\n{}",
            cmd.get_program(),
            tail.join("\n")
        );
    }
    Ok((stdout, stderr))
}

/// llama.cpp ready to time `cell` on `model`.
pub struct LlamaArm {
    pub install: Install,
    cell: Cell,
    model: PathBuf,
    threads: usize,
    timeout: Duration,
    calls: usize,
    reps_per_call: Vec<usize>,
    row: Option<BenchRow>,
}

impl LlamaArm {
    pub fn new(
        install: Install,
        cell: &Cell,
        model: &Path,
        threads: usize,
        timeout: Duration,
    ) -> LlamaArm {
        LlamaArm {
            install,
            cell: cell.clone(),
            model: model.to_owned(),
            threads,
            timeout,
            calls: 0,
            reps_per_call: Vec::new(),
            row: None,
        }
    }

    /// The flags recorded in the receipt (one timed call's, `reps` being that call's).
    pub fn flags(&self, reps: usize) -> Vec<String> {
        let file = self
            .model
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut f = vec!["-m".to_string(), file];
        f.extend(bench_args(&self.cell, reps, self.threads));
        f
    }

    /// Receipt detail lines: the build, what llama-bench reported, how the calls went.
    pub fn detail(&self) -> Vec<String> {
        let i = &self.install.info;
        let mut d = vec![format!(
            "llama.cpp build: backend {}{}, cmake {}",
            i.get("backend").unwrap_or("?"),
            i.get("cuda_arch")
                .map(|a| format!(" sm_{a}"))
                .unwrap_or_default(),
            i.get("cmake_flags").unwrap_or("?")
        )];
        if let Some(r) = &self.row {
            d.push(format!(
                "llama-bench reports: build {} ({}), backends {}, model {}, n_gpu_layers {}, \
                 flash_attn {}, KV {}/{}, threads {}, gpu {:?}",
                r.build_commit,
                r.build_number,
                r.backends,
                r.model_type,
                r.n_gpu_layers,
                r.flash_attn,
                r.type_k,
                r.type_v,
                r.n_threads,
                r.gpu_info
            ));
        }
        d.push(format!(
            "llama.cpp: {} llama-bench call(s), -r per call {:?}{}; every call loads the \
             model (not timed) and makes its own untimed 1-token warm-up",
            self.calls,
            self.reps_per_call,
            if self.cell.warmup > 0 {
                " (the first call is the warm-up, discarded)"
            } else {
                ""
            }
        ));
        d
    }

    /// KV bytes per element as llama-bench ran (f16 unless told otherwise).
    pub fn kv_bytes(&self) -> f64 {
        match self.row.as_ref().map(|r| r.type_k.as_str()) {
            Some("f32") => 4.0,
            Some("q8_0") => 34.0 / 32.0,
            Some("q4_0") => 18.0 / 32.0,
            _ => 2.0,
        }
    }
}

impl ArmRun for LlamaArm {
    fn run(&mut self, n: usize) -> Result<Vec<f64>> {
        let mut cmd = Command::new(&self.install.llama_bench);
        cmd.arg("-m")
            .arg(&self.model)
            .args(bench_args(&self.cell, n, self.threads));
        let (stdout, _) = run_captured(&mut cmd, self.timeout)
            .with_context(|| format!("llama-bench (cell {})", self.cell.id))?;
        let rows = parse_jsonl(&stdout)?;
        let (s, row) = samples(&rows, &self.cell, n)?;
        self.calls += 1;
        self.reps_per_call.push(n);
        self.row = Some(row);
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::cells::Cell;

    /// llama-bench 0c1e57098 (CPU build, GGML_NATIVE=OFF + AVX-512) on SmolLM2-135M
    /// Q4_1, recorded on the development machine: `-p 0 -n 16 -d 16 -r 3 -ngl 0 -fa 1 -t 2`.
    const RECORDED: &str = include_str!("../../tests/fixtures/llama-bench/cpu-smollm2.jsonl");

    fn cell(device: DeviceKind, mode: Mode, p: usize, g: usize) -> Cell {
        Cell {
            id: "c".into(),
            label: "l".into(),
            device,
            mode,
            model: Some("m".into()),
            synth: None,
            prompt_tokens: p,
            gen_tokens: g,
            batch: 1,
            runs: 5,
            warmup: 1,
            arms: vec!["assay".into(), "llama.cpp".into()],
            prompt_file: None,
            spec: None,
            json_schema: None,
            serve_flags: Vec::new(),
            vs: Vec::new(),
            vllm_quantization: None,
            mmv: None,
        }
    }

    #[test]
    fn recorded_output_parses_into_samples() {
        let rows = parse_jsonl(RECORDED).unwrap();
        assert_eq!(rows.len(), 1);
        let c = cell(DeviceKind::Cpu, Mode::Decode, 16, 16);
        let (s, row) = samples(&rows, &c, 3).unwrap();
        assert_eq!(s.len(), 3);
        for (v, ns) in s.iter().zip(&row.samples_ns) {
            assert!((v - 16.0 / (*ns as f64 * 1e-9)).abs() < 1e-9 * v);
        }
        assert_eq!(row.n_depth, 16);
        assert_eq!(row.type_k, "f16");
        // Asking for another shape, or another count, is an error, not a number.
        assert!(samples(&rows, &cell(DeviceKind::Cpu, Mode::Decode, 32, 16), 3).is_err());
        assert!(samples(&rows, &c, 5).is_err());
        assert!(samples(&rows, &cell(DeviceKind::Cpu, Mode::Prefill, 16, 16), 3).is_err());
    }

    #[test]
    fn broken_output_is_refused() {
        assert!(parse_jsonl("{\"build_commit\": \"x\"}").is_err());
        assert!(parse_jsonl("| model | size |").is_err());
        assert_eq!(parse_jsonl("\n\n").unwrap().len(), 0);
        // Two rows of the cell's test: ambiguous.
        let line = RECORDED.lines().next().unwrap();
        let rows = parse_jsonl(&format!("{line}\n{line}\n")).unwrap();
        assert!(samples(&rows, &cell(DeviceKind::Cpu, Mode::Decode, 16, 16), 3).is_err());
        // A tok/s figure that does not match its nanoseconds.
        let mut rows = parse_jsonl(line).unwrap();
        rows[0].samples_ts[0] *= 1.5;
        assert!(samples(&rows, &cell(DeviceKind::Cpu, Mode::Decode, 16, 16), 3).is_err());
        rows[0].samples_ts[0] /= 1.5;
        rows[0].samples_ns[1] = 0;
        assert!(samples(&rows, &cell(DeviceKind::Cpu, Mode::Decode, 16, 16), 3).is_err());
    }

    #[test]
    fn args_follow_the_cell() {
        let a = bench_args(&cell(DeviceKind::Gpu, Mode::Decode, 4096, 128), 1, 16);
        assert_eq!(
            a.join(" "),
            "-p 0 -n 128 -d 4096 -r 1 -ngl 999 -fa 1 -o jsonl"
        );
        let a = bench_args(&cell(DeviceKind::Cpu, Mode::Prefill, 512, 128), 5, 2);
        assert_eq!(
            a.join(" "),
            "-p 512 -n 0 -d 0 -r 5 -ngl 0 -fa 1 -t 2 -o jsonl"
        );
    }

    #[test]
    fn a_missing_build_is_a_clear_error() {
        let t = tempfile::tempdir().unwrap();
        let e = locate(t.path(), DeviceKind::Gpu).unwrap_err().to_string();
        assert!(e.contains("no llama.cpp cuda build"), "{e}");
        assert!(e.contains("competitors/llama.cpp/build --cuda"), "{e}");
        // A binary without BUILD_INFO: incomplete.
        let bin = t.path().join("cpu/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("llama-bench"), "").unwrap();
        let e = format!("{:#}", locate(t.path(), DeviceKind::Cpu).unwrap_err());
        assert!(e.contains("incomplete"), "{e}");
        // BUILD_INFO of another backend.
        std::fs::write(t.path().join("cpu/BUILD_INFO"), "backend cuda\n").unwrap();
        let e = locate(t.path(), DeviceKind::Cpu).unwrap_err().to_string();
        assert!(e.contains("needs cpu"), "{e}");
        std::fs::write(
            t.path().join("cpu/BUILD_INFO"),
            "backend cpu\npackage llama-cpp-python==0.3.36\nllama_cpp_commit 0c1e57098\n",
        )
        .unwrap();
        let i = locate(t.path(), DeviceKind::Cpu).unwrap();
        assert_eq!(
            i.info.version(),
            "llama-cpp-python==0.3.36 sdist, vendored llama.cpp 0c1e57098"
        );
    }

    /// An install whose llama-bench is the shell script `body` (retried while another
    /// test thread's fork still holds the fresh script open for writing: ETXTBSY).
    fn fake_install(t: &Path, body: &str) -> Install {
        let bin = t.join("cpu/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = bin.join("llama-bench");
        std::fs::write(&exe, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::write(
            t.join("cpu/BUILD_INFO"),
            "backend cpu\npackage llama-cpp-python==0.3.36\nllama_cpp_commit 0c1e57098\n",
        )
        .unwrap();
        locate(t, DeviceKind::Cpu).unwrap()
    }

    fn run_retrying(arm: &mut LlamaArm, n: usize) -> Result<Vec<f64>> {
        for _ in 0..20 {
            match arm.run(n) {
                Err(e) if format!("{e:#}").contains("Text file busy") => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                r => return r,
            }
        }
        arm.run(n)
    }

    #[test]
    fn the_arm_runs_llama_bench_and_records_its_calls() {
        let t = tempfile::tempdir().unwrap();
        let fixture = t.path().join("out.jsonl");
        std::fs::write(&fixture, RECORDED).unwrap();
        // The fake prints the recorded output and logs its arguments.
        let args_log = t.path().join("args");
        let inst = fake_install(
            t.path(),
            &format!(
                "echo \"$@\" > {}\ncat {}",
                args_log.display(),
                fixture.display()
            ),
        );
        let c = cell(DeviceKind::Cpu, Mode::Decode, 16, 16);
        let model = t.path().join("SmolLM2.gguf");
        let mut arm = LlamaArm::new(inst, &c, &model, 2, Duration::from_secs(30));
        let s = run_retrying(&mut arm, 3).unwrap();
        assert_eq!(s.len(), 3);
        let args = std::fs::read_to_string(&args_log).unwrap();
        assert_eq!(
            args.trim(),
            format!(
                "-m {} -p 0 -n 16 -d 16 -r 3 -ngl 0 -fa 1 -t 2 -o jsonl",
                model.display()
            )
        );
        // The recorded output holds 3 samples: asking for 1 is an error, not a number.
        assert!(run_retrying(&mut arm, 1).is_err());
        let d = arm.detail().join("\n");
        assert!(
            d.contains("1 llama-bench call(s), -r per call [3] (the first"),
            "{d}"
        );
        assert!(d.contains("KV f16/f16"), "{d}");
        assert_eq!(arm.flags(1)[..2], ["-m".to_string(), "SmolLM2.gguf".into()]);
        assert_eq!(arm.kv_bytes(), 2.0);
        // A llama-bench that fails: its stderr is in the error.
        let t2 = tempfile::tempdir().unwrap();
        let inst = fake_install(t2.path(), "echo 'failed to load model' >&2; exit 1");
        let mut arm = LlamaArm::new(inst, &c, &model, 2, Duration::from_secs(30));
        let e = format!("{:#}", run_retrying(&mut arm, 3).unwrap_err());
        assert!(e.contains("failed to load model"), "{e}");
    }

    #[test]
    fn a_failing_or_hanging_binary_is_an_error() {
        let e = run_captured(
            Command::new("sh").args(["-c", "echo boom >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("boom"), "{e}");
        let e = run_captured(
            Command::new("sh").args(["-c", "sleep 5"]),
            Duration::from_millis(200),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("killed"), "{e}");
        let (o, _) = run_captured(
            Command::new("sh").args(["-c", "echo ok"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(o, "ok\n");
        assert!(
            run_captured(
                &mut Command::new("/nonexistent/llama-bench"),
                Duration::from_secs(1)
            )
            .is_err()
        );
    }
}
