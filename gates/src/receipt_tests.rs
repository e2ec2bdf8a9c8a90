//! Tests of the receipt schema: round trip, validation rules, unknown fields, versions.

use super::*;

fn receipt(kind: Kind) -> Receipt {
    Receipt {
        schema: SCHEMA_VERSION,
        kind,
        name: "cell-a".into(),
        time: "2026-11-29T10:00:00Z".into(),
        build: crate::fixtures::build(),
        device: crate::fixtures::cpu_device(),
        model: None,
        workload: Workload::default(),
        arms: vec![Arm {
            name: "assay".into(),
            engine: "assay-reference-cpu".into(),
            version: "0.1.0".into(),
            flags: vec!["--threads 2".into()],
            unit: Some("tok/s".into()),
            samples: vec![10.0, 12.0, 11.0, 9.0, 13.0],
            stats: Stats::of(&[10.0, 12.0, 11.0, 9.0, 13.0]),
            roofline_fraction: Some(0.11),
        }],
        roofline: Some(Roofline {
            bytes_per_token: 1e9,
            bandwidth_bytes_per_s: 1e11,
            bandwidth_method: "memcpy".into(),
            limit_tokens_per_s: 100.0,
        }),
        gemm_ref: None,
        target_tok_s: None,
        verdict: Verdict::Green,
        detail: vec![],
        wall_s: 1.5,
    }
}

#[test]
fn a_valid_receipt_round_trips_through_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/bench.jsonl");
    let r = receipt(Kind::Bench);
    assert_eq!(validate(&r), Vec::<String>::new());
    append(&path, &r).unwrap();
    append(&path, &r).unwrap();
    let back = read_jsonl(&path).unwrap();
    assert_eq!(back, vec![r.clone(), r]);
    assert_eq!(jsonl_files(dir.path()).unwrap(), Vec::<PathBuf>::new());
    assert_eq!(jsonl_files(&dir.path().join("sub")).unwrap(), vec![path]);
}

/// Samples whose shortest decimal form serde_json's default (fast, not always correctly
/// rounded) parser read back one ulp off, so that a receipt written by the harness failed
/// its own "stats match the samples" rule on reading (session 12's serve receipts). With
/// `float_roundtrip` every f64 comes back with its bits.
#[test]
fn samples_come_back_with_their_bits() {
    for v in [
        24.935908935238494_f64,
        0.11242190997538451,
        15.923961170491383,
        33820550054.999954,
    ] {
        let text = serde_json::to_string(&v).unwrap();
        assert_eq!(
            serde_json::from_str::<f64>(&text).unwrap().to_bits(),
            v.to_bits(),
            "{text}"
        );
    }
    let mut r = receipt(Kind::Bench);
    r.arms[0].samples = vec![
        24.935908935238494,
        0.11242190997538451,
        15.923961170491383,
        1.5,
        2.5,
        3.5,
    ];
    r.arms[0].stats = Stats::of(&r.arms[0].samples);
    r.arms[0].roofline_fraction = r.arms[0].stats.map(|st| st.median / 100.0);
    let back: Receipt = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(validate(&back), Vec::<String>::new());
    assert_eq!(back, r);
}

#[test]
fn stats_are_median_min_max() {
    let s = Stats::of(&[3.0, 1.0, 2.0]).unwrap();
    assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
    assert_eq!(Stats::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
    assert_eq!(Stats::of(&[]), None);
    assert_eq!(Stats::of(&[1.0, f64::NAN]), None);
}

#[test]
fn each_rule_catches_its_fault() {
    type Fault = fn(&mut Receipt);
    let faults: [(&str, Fault); 12] = [
        ("schema", |r| r.schema = 0),
        ("time", |r| r.time = "yesterday".into()),
        ("commit", |r| r.build.commit = "main".into()),
        ("kernel identity", |r| r.build.kernel_identity = "x".into()),
        ("stats", |r| r.arms[0].samples[0] = 99.0),
        ("N >= 5", |r| {
            r.arms[0].samples.truncate(4);
            r.arms[0].stats = Stats::of(&r.arms[0].samples);
        }),
        ("roofline fraction", |r| {
            r.arms[0].roofline_fraction = Some(0.5)
        }),
        ("limit", |r| {
            if let Some(x) = r.roofline.as_mut() {
                x.limit_tokens_per_s = 7.0;
            }
        }),
        ("red", |r| r.verdict = Verdict::Red { failures: vec![] }),
        ("arm", |r| r.arms.clear()),
        ("unit", |r| r.arms[0].unit = None),
        ("wall_s", |r| r.wall_s = f64::NAN),
    ];
    for (what, fault) in faults {
        let mut r = receipt(Kind::Bench);
        fault(&mut r);
        assert!(!validate(&r).is_empty(), "fault {what} not caught");
        let dir = tempfile::tempdir().unwrap();
        assert!(append(&dir.path().join("x.jsonl"), &r).is_err(), "{what}");
    }
    // A pair needs two arms; an unknown commit is fine only when dirty.
    assert!(!validate(&receipt(Kind::Pair)).is_empty());
    let mut r = receipt(Kind::Gate);
    r.build.commit = "unknown".into();
    assert!(!validate(&r).is_empty());
    r.build.dirty = true;
    assert!(validate(&r).is_empty());
}

#[test]
fn unknown_fields_and_other_versions_are_refused_on_read() {
    let r = receipt(Kind::Gate);
    let mut v = serde_json::to_value(&r).unwrap();
    v["surprise"] = serde_json::json!(1);
    let err = parse_line(&v.to_string()).unwrap_err();
    assert!(err.contains("surprise"), "{err}");
    let mut v = serde_json::to_value(&r).unwrap();
    v["schema"] = serde_json::json!(2);
    assert!(parse_line(&v.to_string()).unwrap_err().contains("schema 2"));
    let mut v = serde_json::to_value(&r).unwrap();
    v.as_object_mut().unwrap().remove("schema");
    assert!(parse_line(&v.to_string()).unwrap_err().contains("schema"));
    let mut v = serde_json::to_value(&r).unwrap();
    v["device"]["cpu"]["extra"] = serde_json::json!("x");
    assert!(parse_line(&v.to_string()).is_err());

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gate.jsonl");
    let good = serde_json::to_string(&r).unwrap();
    std::fs::write(&path, format!("{good}\n\n{good}\n{{\"schema\":1}}\n")).unwrap();
    match read_jsonl(&path) {
        Err(ReceiptError::Invalid { line, .. }) => assert_eq!(line, 4),
        other => panic!("expected an invalid line 4, got {other:?}"),
    }
}

#[test]
fn verdicts_serialize_with_a_status_tag() {
    let v = serde_json::to_value(Verdict::Red {
        failures: vec!["x".into()],
    })
    .unwrap();
    assert_eq!(v, serde_json::json!({"status": "red", "failures": ["x"]}));
    let s: Verdict = serde_json::from_str(r#"{"status":"skipped","reason":"no GPU"}"#).unwrap();
    assert_eq!(
        s,
        Verdict::Skipped {
            reason: "no GPU".into()
        }
    );
}

/// A measured GEMM reference of 5 reps over an 8B-shaped model's parameters.
fn gemm_ref() -> GemmRef {
    crate::fixtures::gemm_ref(
        vec![780.0, 790.0, 800.0, 785.0, 795.0],
        "512x4096 -> 6144 x32",
    )
}

#[test]
fn the_prefill_target_is_half_the_gemm_rate_over_two_flops_per_param() {
    // Issue 8's numbers: ~790 TFLOP/s and 8.03 B params make ~25k tok/s.
    let t = prefill_target_tok_s(790.0, 8_030_261_248);
    assert!((t - 24_594.5).abs() < 0.1, "{t}");
    assert_eq!(prefill_target_tok_s(4.0, 1_000_000_000_000), 1.0);
}

#[test]
fn a_gemm_reference_round_trips_and_old_rows_stay_byte_identical() {
    let mut r = receipt(Kind::Bench);
    // A row without the new fields serializes without them, so rows written before they
    // existed read back, and write back, unchanged.
    let old = serde_json::to_string(&r).unwrap();
    assert!(
        !old.contains("gemm_ref") && !old.contains("target_tok_s"),
        "{old}"
    );
    let back = parse_line(&old).unwrap();
    assert_eq!((back.gemm_ref.as_ref(), back.target_tok_s), (None, None));
    assert_eq!(serde_json::to_string(&back).unwrap(), old);

    r.gemm_ref = Some(gemm_ref());
    r.target_tok_s = Some(prefill_target_tok_s(790.0, 8_030_261_248));
    assert_eq!(validate(&r), Vec::<String>::new());
    let line = serde_json::to_string(&r).unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["gemm_ref"]["tflops"], serde_json::json!(790.0));
    assert_eq!(v["gemm_ref"]["params"], serde_json::json!(8_030_261_248u64));
    assert_eq!(v["gemm_ref"]["device"], serde_json::json!("NVIDIA H200"));
    assert_eq!(v["gemm_ref"]["samples"].as_array().map(Vec::len), Some(5));
    assert!(v["target_tok_s"].as_f64().is_some_and(|t| t > 24_594.0));
    assert_eq!(parse_line(&line).unwrap(), r);

    // Absent with its reason: no samples, no target; it round trips too.
    r.gemm_ref = Some(crate::fixtures::gemm_ref_absent("torch not importable"));
    r.target_tok_s = None;
    assert_eq!(validate(&r), Vec::<String>::new());
    let line = serde_json::to_string(&r).unwrap();
    assert!(
        line.contains(r#""absent":"torch not importable""#),
        "{line}"
    );
    assert_eq!(parse_line(&line).unwrap(), r);
}

#[test]
fn each_gemm_reference_rule_catches_its_fault() {
    type Fault = fn(&mut Receipt);
    let faults: [(&str, &str, Fault); 8] = [
        ("target off", "target_tok_s", |r| {
            r.target_tok_s = Some(30_000.0)
        }),
        ("target missing", "without target_tok_s", |r| {
            r.target_tok_s = None
        }),
        ("target without a reference", "without a measured", |r| {
            r.gemm_ref = None
        }),
        ("stats", "stats do not match", |r| {
            if let Some(g) = r.gemm_ref.as_mut() {
                g.samples[0] = 1.0;
            }
        }),
        ("median", "not the median", |r| {
            if let Some(g) = r.gemm_ref.as_mut() {
                g.tflops = Some(800.0);
            }
        }),
        ("N >= 5", "N >= 5", |r| {
            if let Some(g) = r.gemm_ref.as_mut() {
                g.samples.truncate(4);
                g.stats = Stats::of(&g.samples);
                g.tflops = g.stats.map(|s| s.median);
            }
        }),
        ("absent with samples", "absent but with samples", |r| {
            if let Some(g) = r.gemm_ref.as_mut() {
                g.absent = Some("no torch".into());
            }
        }),
        ("params", "params must be positive", |r| {
            if let Some(g) = r.gemm_ref.as_mut() {
                g.params = 0;
            }
        }),
    ];
    for (what, says, fault) in faults {
        let mut r = receipt(Kind::Bench);
        r.gemm_ref = Some(gemm_ref());
        r.target_tok_s = Some(prefill_target_tok_s(790.0, 8_030_261_248));
        fault(&mut r);
        let bad = validate(&r).join("; ");
        assert!(bad.contains(says), "fault {what}: {bad:?}");
    }
}
