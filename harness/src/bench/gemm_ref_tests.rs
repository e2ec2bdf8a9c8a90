//! Tests of the GEMM reference: shapes from real inventories, the script's replies (good,
//! garbled, no torch), the receipt's reference and target, the console line, and the
//! script itself end to end under a fake `torch` module (no GPU needed).

use super::*;
use crate::synth::shapes::{Arch, find};
use crate::synth::tensors::inventory;
use gates::receipt::Kind;

fn gemms_of(arch: Arch, shape: &str, vocab: usize) -> (Vec<Gemm>, u64) {
    let s = find(shape, arch).unwrap();
    let inv = inventory(arch, &s, vocab);
    let params = inv.iter().map(|t| t.elems() as u64).sum();
    let g = linear_gemms(inv.iter().map(|t| (t.name.as_str(), t.dims.as_slice()))).unwrap();
    (g, params)
}

fn gemm(what: &str, k: u64, n: u64, count: u64) -> Gemm {
    Gemm {
        what: what.into(),
        k,
        n,
        count,
    }
}

#[test]
fn llama_8b_linear_layers_are_the_four_fused_products() {
    let (g, params) = gemms_of(Arch::Llama, "llama-3.1-8b", 128_256);
    assert_eq!(
        g,
        vec![
            gemm("q+k+v", 4096, 6144, 32),
            gemm("o", 4096, 4096, 32),
            gemm("gate+up", 4096, 28672, 32),
            gemm("down", 14336, 4096, 32),
        ]
    );
    assert_eq!(params, 8_030_261_248);
    // 2 M N K over the products of 32 layers: 2 x 512 x 4096 x 53248 x 32.
    let f = flops_per_rep(512, &g);
    assert_eq!(f, 2.0 * 512.0 * 4096.0 * 53248.0 * 32.0);
    assert!((f / 512.0 / 2.0 - 6.98e9).abs() < 0.01e9, "{f}");
    assert_eq!(
        shape_names(512, &g)[0],
        "512x4096 -> 6144 x32 (q+k+v)".to_owned()
    );
}

#[test]
fn other_shapes_fuse_the_same_way_and_biases_and_norms_are_left_out() {
    // Gemma 3: q is 16 x 256 = 4096 wide on a 3840 residual (o maps 4096 back to 3840).
    let (g, _) = gemms_of(Arch::Gemma3, "gemma-3-12b", 262_208);
    assert_eq!(g[0], gemm("q+k+v", 3840, 4096 + 2 * 2048, 48));
    assert_eq!(g[1], gemm("o", 4096, 3840, 48));
    assert_eq!(g.len(), 4);
    // Qwen2 carries q/k/v biases (1-D): not products.
    let (g, _) = gemms_of(Arch::Qwen2, "qwen2.5-7b", 152_064);
    assert_eq!(g[0], gemm("q+k+v", 3584, 3584 + 2 * 512, 28));
    assert_eq!(g[3], gemm("down", 18944, 3584, 28));
    // No layer weights at all: a reason, not a panic.
    let dims: &[u64] = &[4096, 128_256];
    let e = linear_gemms([("token_embd.weight", dims), ("blk.x.attn_q.weight", dims)]);
    assert!(e.unwrap_err().contains("no blk.N linear weights"));
}

fn stamp() -> gates::stamp::Stamp {
    gates::fixtures::stamp("2026-12-01T00:00:00Z")
}

fn request() -> Request {
    let (g, params) = gemms_of(Arch::Llama, "llama-3.1-8b", 128_256);
    Request {
        m: 512,
        gemms: Ok(g),
        params,
        reps: 5,
    }
}

const GOOD: &str = r#"some warning from torch
GEMM_REF {"cuda": "12.8", "device": "NVIDIA H200", "method": "torch.mm bf16 (cuBLAS)", "ms": [9.0, 9.2, 8.9, 9.1, 9.0], "torch": "2.11.0+cu128"}
"#;

#[test]
fn a_good_reply_parses_into_its_rep_times() {
    let r = parse_reply(GOOD).unwrap();
    assert_eq!(
        r,
        Reply::Timed {
            ms: vec![9.0, 9.2, 8.9, 9.1, 9.0],
            torch: "2.11.0+cu128".into(),
            cuda: Some("12.8".into()),
            device: "NVIDIA H200".into(),
            method: "torch.mm bf16 (cuBLAS)".into(),
        }
    );
}

#[test]
fn garbage_and_broken_replies_are_errors_that_say_why() {
    let e = parse_reply("Traceback (most recent call last):\nSegmentation fault\n").unwrap_err();
    assert!(
        e.contains("no `GEMM_REF` line") && e.contains("Segmentation fault"),
        "{e}"
    );
    let e = parse_reply("GEMM_REF {not json").unwrap_err();
    assert!(e.contains("unreadable"), "{e}");
    let e =
        parse_reply(r#"GEMM_REF {"torch": "2.11", "device": "x", "ms": [1.0, -2.0]}"#).unwrap_err();
    assert!(e.contains("positive"), "{e}");
    let e = parse_reply(r#"GEMM_REF {"torch": "2.11", "device": "x"}"#).unwrap_err();
    assert!(e.contains("no `ms`"), "{e}");
    let e = parse_reply(r#"GEMM_REF {"device": "x", "ms": [1.0]}"#).unwrap_err();
    assert!(e.contains("torch"), "{e}");
    assert!(parse_reply("").is_err());
}

#[test]
fn a_missing_torch_reply_is_an_absence_with_its_reason() {
    let out = "GEMM_REF {\"absent\": \"torch not importable by /usr/bin/python3: \
               ModuleNotFoundError: No module named 'torch'\"}\n";
    let Reply::Absent(why) = parse_reply(out).unwrap() else {
        panic!("expected an absence");
    };
    assert!(why.contains("No module named 'torch'"), "{why}");
    let g = request().gemm_ref(parse_reply(out));
    assert_eq!(g.absent.as_deref(), Some(why.as_str()));
    assert!(g.samples.is_empty() && g.tflops.is_none() && target(&g).is_none());
    // Shapes and FLOPs are still recorded; the reference passes the receipt schema.
    assert_eq!(g.shapes.len(), 4);
    assert_eq!(g.params, 8_030_261_248);
    assert!(validate_gemm_ref(&g).is_empty());
    // Garbage becomes an absence that quotes the problem.
    let g = request().gemm_ref(parse_reply("GEMM_REF [1, 2"));
    assert!(g.absent.unwrap().contains("output: unreadable"));
}

#[test]
fn a_timed_reply_becomes_tflops_and_the_target() {
    let req = request();
    let g = req.gemm_ref(parse_reply(GOOD));
    assert_eq!(g.absent, None);
    let flops = flops_per_rep(512, req.gemms.as_deref().unwrap());
    // The median rep is 9.0 ms.
    let want = flops / (9.0 * 1e-3) / 1e12;
    assert_eq!(g.tflops, Some(want));
    assert!((want - 794.09).abs() < 0.01, "{want}");
    assert_eq!(g.samples.len(), 5);
    assert_eq!(g.samples[1], flops / (9.2 * 1e-3) / 1e12);
    assert_eq!(g.torch.as_deref(), Some("2.11.0+cu128 (CUDA 12.8)"));
    assert_eq!(g.device.as_deref(), Some("NVIDIA H200"));
    assert!(validate_gemm_ref(&g).is_empty());
    // Half the rate over 2 x 8.03e9 FLOPs per token: ~24.7k tok/s.
    let t = target(&g).unwrap();
    assert_eq!(t, 0.5 * want * 1e12 / (2.0 * 8_030_261_248.0));
    assert!((t - 24_721.85).abs() < 0.01, "{t}");
    // Fewer reps than a measurement needs: recorded as absent, never an invalid receipt.
    let short = GOOD.replace("[9.0, 9.2, 8.9, 9.1, 9.0]", "[9.0, 9.2]");
    let g = req.gemm_ref(parse_reply(&short));
    assert!(g.absent.unwrap().contains("N >= 5"));
    // A model without layer weights: absent with that reason.
    let none = Request {
        gemms: Err("no layers".into()),
        ..req
    };
    assert_eq!(
        none.gemm_ref(parse_reply(GOOD)).absent.as_deref(),
        Some("no layers")
    );
}

#[test]
fn the_request_names_every_product_once_with_its_count() {
    let req = request();
    let v: serde_json::Value =
        serde_json::from_str(&req.json(req.gemms.as_deref().unwrap())).unwrap();
    assert_eq!(v["m"], 512);
    assert_eq!(v["reps"], 5);
    assert_eq!(v["shapes"][2], serde_json::json!([4096, 28672, 32]));
    assert_eq!(v["shapes"].as_array().map(Vec::len), Some(4));
}

#[test]
fn the_console_line_gives_the_rate_target_and_each_arms_fraction() {
    let req = request();
    let g = req.gemm_ref(parse_reply(GOOD));
    let t = target(&g).unwrap();
    let mut r = stamp().receipt(Kind::Bench, "prefill-x", gates::Verdict::Green);
    let arm = |name: &str, v: f64| gates::fixtures::arm(name, "e", v);
    r.arms = vec![arm("assay", t), arm("llama.cpp", t / 4.0)];
    assert_eq!(line_suffix(&r), "");
    r.gemm_ref = Some(g);
    r.target_tok_s = Some(t);
    let s = line_suffix(&r);
    assert!(
        s.contains("bf16 GEMM 794.1 TFLOP/s (min 776.8, max 803.0, N=5"),
        "{s}"
    );
    assert!(s.contains(&format!("target {t:.1} tok/s")), "{s}");
    assert!(
        s.contains("assay 100.0% of it, llama.cpp 25.0% of it"),
        "{s}"
    );
    r.gemm_ref = Some(req.absent("torch not importable".into()));
    r.target_tok_s = None;
    assert_eq!(
        line_suffix(&r),
        "; bf16 GEMM reference absent: torch not importable"
    );
}

/// A `python3` that imports the given `torch/__init__.py` first, or `None` (test skipped)
/// when this machine has no python3.
fn fake_python(dir: &std::path::Path, torch: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: no python3 on this machine");
        return None;
    }
    let pkg = dir.join("site/torch");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("__init__.py"), torch).unwrap();
    let py = dir.join("python");
    std::fs::write(
        &py,
        format!(
            "#!/bin/sh\nPYTHONPATH='{}' exec python3 \"$@\"\n",
            dir.join("site").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(py)
}

/// Just enough of torch for the script: every rep "takes" 2, 4, 6, ... ms.
const FAKE_TORCH: &str = r#"
__version__ = "9.9.0+fake"
bfloat16 = "bf16"
class version:
    cuda = "12.8"
class _T:
    def t(self):
        return self
def device(name):
    return name
def manual_seed(s):
    pass
def randn(*a, **k):
    return _T()
def empty(*a, **k):
    return _T()
MM = [0]
def mm(a, b, out=None):
    MM[0] += 1
class cuda:
    @staticmethod
    def is_available():
        return AVAILABLE
    @staticmethod
    def synchronize():
        pass
    @staticmethod
    def get_device_name(d=None):
        return "Fake GPU"
    class Event:
        n = [0]
        def __init__(self, enable_timing=False):
            pass
        def record(self):
            pass
        def synchronize(self):
            pass
        def elapsed_time(self, other):
            cuda.Event.n[0] += 1
            return 2.0 * cuda.Event.n[0]
class backends:
    class cuda:
        class matmul:
            allow_bf16_reduced_precision_reduction = True
"#;

#[test]
fn the_script_times_reps_and_reports_absences_end_to_end() {
    let t = tempfile::tempdir().unwrap();
    let timeout = Duration::from_secs(60);
    let req = Request {
        m: 8,
        gemms: Ok(vec![gemm("q+k+v", 16, 32, 2), gemm("down", 64, 16, 2)]),
        params: 1000,
        reps: 5,
    };
    let Some(py) = fake_python(
        &t.path().join("ok"),
        &format!("AVAILABLE = True\n{FAKE_TORCH}"),
    ) else {
        return;
    };
    let g = req.measure(py.as_os_str(), timeout);
    assert_eq!(g.absent, None, "{g:?}");
    let flops = 2.0 * 8.0 * (16.0 * 32.0 + 64.0 * 16.0) * 2.0;
    assert_eq!(g.flops_per_rep, flops);
    let want: Vec<f64> = [2.0, 4.0, 6.0, 8.0, 10.0]
        .iter()
        .map(|ms| flops / (ms * 1e-3) / 1e12)
        .collect();
    assert_eq!(g.samples, want);
    assert_eq!(g.tflops, Some(want[2]));
    assert_eq!(g.torch.as_deref(), Some("9.9.0+fake (CUDA 12.8)"));
    assert_eq!(g.device.as_deref(), Some("Fake GPU"));
    assert!(g.method.contains("CUDA events") && g.method.contains("5 timed rep(s)"));

    let py = fake_python(
        &t.path().join("nocuda"),
        &format!("AVAILABLE = False\n{FAKE_TORCH}"),
    )
    .unwrap();
    let why = req.measure(py.as_os_str(), timeout).absent.unwrap();
    assert!(
        why.contains("torch 9.9.0+fake sees no CUDA device"),
        "{why}"
    );

    let py = fake_python(
        &t.path().join("broken"),
        "raise ImportError('libcudart.so.12: cannot open shared object file')",
    )
    .unwrap();
    let why = req.measure(py.as_os_str(), timeout).absent.unwrap();
    assert!(
        why.contains("torch not importable") && why.contains("libcudart"),
        "{why}"
    );

    let oom = format!(
        "AVAILABLE = True\n{FAKE_TORCH}\ndef mm(a, b, out=None):\n    raise RuntimeError('CUDA out of memory')\n"
    );
    let py = fake_python(&t.path().join("oom"), &oom).unwrap();
    let why = req.measure(py.as_os_str(), timeout).absent.unwrap();
    assert!(
        why.contains("the GEMM timing failed: RuntimeError: CUDA out of memory"),
        "{why}"
    );

    let why = req
        .measure(OsStr::new("/nonexistent/python3"), timeout)
        .absent
        .unwrap();
    assert!(why.contains("could not run the GEMM script"), "{why}");
}

#[test]
fn the_request_of_a_gguf_reads_its_products_and_parameter_count() {
    use engine::model_file::gguf_write::{TensorSpec, gguf_to_vec};
    use engine::model_file::{GgufModel, MetaValue};
    use engine::quant::QuantFormat;
    let mut meta = std::collections::BTreeMap::new();
    meta.insert(
        "general.architecture".into(),
        MetaValue::String("llama".into()),
    );
    let shapes: &[(&str, [u64; 2])] = &[
        ("token_embd.weight", [64, 10]),
        ("blk.0.attn_q.weight", [64, 64]),
        ("blk.0.attn_k.weight", [64, 16]),
        ("blk.0.attn_v.weight", [64, 16]),
        ("blk.0.attn_output.weight", [64, 64]),
        ("blk.0.ffn_gate.weight", [64, 128]),
        ("blk.0.ffn_up.weight", [64, 128]),
        ("blk.0.ffn_down.weight", [128, 64]),
        ("output.weight", [64, 10]),
    ];
    let data: Vec<Vec<u8>> = shapes
        .iter()
        .map(|(_, d)| vec![0u8; (d[0] * d[1] * 4) as usize])
        .collect();
    let tensors: Vec<(TensorSpec, &[u8])> = shapes
        .iter()
        .zip(&data)
        .map(|((name, d), bytes)| (TensorSpec::new(*name, d, QuantFormat::F32), &bytes[..]))
        .collect();
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("m.gguf");
    std::fs::write(&p, gguf_to_vec(&meta, &tensors).unwrap()).unwrap();
    let m = GgufModel::open(&p).unwrap();
    let req = Request::of_model(m.header(), 128, 7);
    assert_eq!(
        req.gemms,
        Ok(vec![
            gemm("q+k+v", 64, 96, 1),
            gemm("o", 64, 64, 1),
            gemm("gate+up", 64, 256, 1),
            gemm("down", 128, 64, 1),
        ])
    );
    let params: u64 = shapes.iter().map(|(_, d)| d[0] * d[1]).sum();
    assert_eq!(req.params, params);
    assert_eq!((req.m, req.reps), (128, 7));
}

#[test]
fn a_run_measures_each_prompt_length_once_and_keeps_no_absence() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let timeout = Duration::from_secs(60);
    // A "python" that counts its runs and answers with fixed rep times; m is unique to
    // this test so that no other test's cached reference is found.
    let count = t.path().join("runs");
    let py = t.path().join("python");
    std::fs::write(
        &py,
        format!(
            "#!/bin/sh\necho run >> '{}'\necho 'GEMM_REF {{\"cuda\": \"12.8\", \"device\": \"Fake\", \"method\": \"fake\", \"ms\": [1.0, 1.0, 1.0, 1.0, 1.0], \"torch\": \"9.9\"}}'\n",
            count.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    let req = |m: u64, params: u64| Request {
        m,
        gemms: Ok(vec![gemm("q+k+v", 16, 32, 2)]),
        params,
        reps: 5,
    };
    let runs = || std::fs::read_to_string(&count).map_or(0, |s| s.lines().count());
    let a = req(7919, 1000).measure_cached(py.as_os_str(), timeout);
    assert_eq!(a.absent, None, "{a:?}");
    assert_eq!(runs(), 1);
    // The same products and length, another model's parameter count: no second run.
    let b = req(7919, 2000).measure_cached(py.as_os_str(), timeout);
    assert_eq!(runs(), 1);
    assert_eq!(b.samples, a.samples);
    assert_eq!(b.params, 2000);
    assert!(b.method.contains("measured once in this run"));
    assert!(gates::receipt::validate_gemm_ref(&b).is_empty());
    // Another prompt length runs again.
    req(7920, 1000).measure_cached(py.as_os_str(), timeout);
    assert_eq!(runs(), 2);
    // An absence is not kept: a python that fails, then the length is tried again.
    let bad = t.path().join("missing-python");
    let c = req(7921, 1000).measure_cached(bad.as_os_str(), timeout);
    assert!(c.absent.is_some());
    req(7921, 1000).measure_cached(py.as_os_str(), timeout);
    assert_eq!(runs(), 3);
}
