//! `harness requant` on tiny synthetic checkpoints.

use super::*;
use engine::arch::synthetic::{SyntheticSpec, gguf_bytes};
use engine::model_file::GgufModel;

fn tiny(dir: &Path, format: QuantFormat) -> PathBuf {
    let spec = SyntheticSpec {
        matrix_format: format,
        ..SyntheticSpec::tiny("llama")
    };
    let p = dir.join(format!("tiny-{}.gguf", format.name()));
    std::fs::write(&p, gguf_bytes(&spec).unwrap()).unwrap();
    p
}

/// A temporary folder holding a tiny Q8_0 checkpoint, and an output path in it.
fn q8_setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let input = tiny(d.path(), QuantFormat::Q8_0);
    let out = d.path().join("out.gguf");
    (d, input, out)
}

#[test]
fn matrices_take_the_target_and_everything_else_is_copied() {
    let (d, input, out) = q8_setup();
    let s = requant_file(&input, &out, QuantFormat::Q4_0, &[]).unwrap();
    let a = GgufModel::open(&input).unwrap();
    let b = GgufModel::open(&out).unwrap();
    assert_eq!(a.header().tensors.len(), b.header().tensors.len());
    assert!(s.converted > 0 && s.copied > 0 && s.misfit.is_empty());
    assert_eq!(s.converted + s.copied, a.header().tensors.len());
    for (ta, tb) in a.header().tensors.iter().zip(&b.header().tensors) {
        assert_eq!(ta.name, tb.name);
        assert_eq!(ta.dims, tb.dims);
        if ta.dims.len() >= 2 {
            assert_eq!(tb.format, QuantFormat::Q4_0, "{}", ta.name);
            // Row by row: our Q4_0 quantizer applied to the dequantized Q8_0 row.
            let row = ta.dims[0] as usize;
            let x = a.dequantize(&ta.name).unwrap();
            let mut want = Vec::new();
            for r in x.chunks(row) {
                want.extend(engine::quant::quantize_to_vec(QuantFormat::Q4_0, r).unwrap());
            }
            assert_eq!(b.tensor_bytes(tb), &want[..], "{}", ta.name);
        } else {
            assert_eq!(tb.format, ta.format);
            assert_eq!(a.tensor_bytes(ta), b.tensor_bytes(tb), "{}", ta.name);
        }
    }
    // Metadata: the input's, with the file type and the source recorded.
    let (ma, mb) = (&a.header().metadata, &b.header().metadata);
    for (k, v) in ma {
        if k != "general.file_type" {
            assert_eq!(mb.get(k), Some(v), "{k}");
        }
    }
    assert_eq!(mb.get("general.file_type"), Some(&MetaValue::U32(2)));
    assert_eq!(mb.get(KEY_FORMAT), Some(&MetaValue::String("Q4_0".into())));
    assert_eq!(s.out_bytes, std::fs::metadata(&out).unwrap().len());
    // No temporary file is left beside the output.
    let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
    assert_eq!(names.len(), 2);
}

#[test]
fn the_output_runs_on_the_reference_executor() {
    let d = tempfile::tempdir().unwrap();
    let input = tiny(d.path(), QuantFormat::F32);
    let out = d.path().join("q8.gguf");
    requant_file(&input, &out, QuantFormat::Q8_0, &[]).unwrap();
    // Q8_0 of an F32 model stays close to it: the first prompt token's logits agree.
    let la = first_logits(&input);
    let lb = first_logits(&out);
    let scale = la.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = la
        .iter()
        .zip(&lb)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        worst <= 0.05 * scale.max(1.0),
        "worst {worst} scale {scale}"
    );
    assert!(la != lb, "Q8_0 should not reproduce F32 bit for bit");
}

fn first_logits(path: &Path) -> Vec<f32> {
    let m = std::sync::Arc::new(GgufModel::open(path).unwrap());
    let r = engine::reference::Reference::new(m, Default::default()).unwrap();
    let mut kv = r.new_cache();
    r.step(&mut kv, &[1, 2, 3]).unwrap()
}

#[test]
fn keep_copies_a_named_tensor_and_an_unknown_name_is_an_error() {
    let (_d, input, out) = q8_setup();
    requant_file(
        &input,
        &out,
        QuantFormat::Q4_0,
        &["token_embd.weight".into()],
    )
    .unwrap();
    let a = GgufModel::open(&input).unwrap();
    let b = GgufModel::open(&out).unwrap();
    let (ta, tb) = (
        a.header().tensor("token_embd.weight").unwrap(),
        b.header().tensor("token_embd.weight").unwrap(),
    );
    assert_eq!(tb.format, QuantFormat::Q8_0);
    assert_eq!(a.tensor_bytes(ta), b.tensor_bytes(tb));
    let e = requant_file(&input, &out, QuantFormat::Q4_0, &["no.such".into()]).unwrap_err();
    assert!(format!("{e:#}").contains("no.such"), "{e:#}");
}

#[test]
fn rows_that_do_not_fit_the_target_are_copied_and_listed() {
    let (_d, input, out) = q8_setup();
    // Q4_K blocks hold 256 values; the tiny model's rows are 64 and 96 long.
    let s = requant_file(&input, &out, QuantFormat::Q4_K, &[]).unwrap();
    assert_eq!(s.converted, 0);
    assert!(!s.misfit.is_empty());
    assert!(
        s.misfit.iter().any(|n| n == "token_embd.weight"),
        "{:?}",
        s.misfit
    );
}

#[test]
fn bad_input_is_a_clear_error_and_leaves_no_output() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("junk.gguf");
    std::fs::write(&input, b"GGUF but not really").unwrap();
    let out = d.path().join("out.gguf");
    let e = requant_file(&input, &out, QuantFormat::Q4_0, &[]).unwrap_err();
    assert!(format!("{e:#}").contains("junk.gguf"), "{e:#}");
    assert!(!out.exists());
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    let e = target_format("Q3_0").unwrap_err();
    assert!(format!("{e:#}").contains("Q4_0"), "{e:#}");
}

#[test]
fn resolve_makes_a_copy_once_and_replaces_one_from_another_source() {
    let d = tempfile::tempdir().unwrap();
    let input = tiny(d.path(), QuantFormat::Q8_0);
    let spec = format!("Q4_0:{}", input.display());
    let p = resolve(&spec, d.path()).unwrap();
    assert_eq!(p, d.path().join("tiny-Q8_0.requant-Q4_0.gguf"));
    let first = std::fs::read(&p).unwrap();
    // Reused as it is: a marker byte past the data survives a second resolve.
    let mut marked = first.clone();
    marked.push(0);
    std::fs::write(&p, &marked).unwrap();
    assert_eq!(resolve(&spec, d.path()).unwrap(), p);
    assert_eq!(std::fs::read(&p).unwrap(), marked);
    // A copy made from another source (here: an F32 file of another name) is replaced.
    let other = tiny(d.path(), QuantFormat::F32);
    requant_file(&other, &p, QuantFormat::Q4_0, &[]).unwrap();
    assert_eq!(resolve(&spec, d.path()).unwrap(), p);
    assert_eq!(std::fs::read(&p).unwrap(), first);
    assert!(resolve("Q4_0", d.path()).is_err());
}
