#![allow(clippy::unwrap_used)]
use super::requests::{dechunk, ids};
use super::*;
use serde_json::json;

#[test]
fn divergence_is_the_first_differing_position() {
    assert_eq!(first_divergence(&[1, 2, 3], &[1, 2, 3]), None);
    assert_eq!(first_divergence(&[1, 2, 3], &[1, 9, 3]), Some(1));
    assert_eq!(first_divergence(&[1, 2], &[1, 2, 3]), Some(2));
    assert_eq!(first_divergence(&[], &[]), None);
}

#[test]
fn chunked_bodies_are_joined_and_bad_ones_refused() {
    let raw = b"4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n";
    assert_eq!(dechunk(raw).unwrap(), b"{\"a\":1}");
    assert!(dechunk(b"zz\r\nabc").is_err());
    assert!(dechunk(b"10\r\nabc").is_err());
}

#[test]
fn token_id_arrays_parse_and_bad_ones_fail() {
    assert_eq!(ids(&json!([1, 2, 3]), "x").unwrap(), vec![1, 2, 3]);
    assert!(ids(&json!([1, "a"]), "x").is_err());
    assert!(ids(&json!(null), "x").is_err());
}

#[test]
fn the_published_board_covers_issue_12() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let b = load_cells(&root.join("boards/h200.toml")).unwrap();
    let of = |vs: Competitor| -> Vec<&Cell> { b.cells.iter().filter(|c| applies(c, vs)).collect() };
    let (llama, vllm) = (of(Competitor::LlamaCpp), of(Competitor::Vllm));
    // Every cell names exactly one competitor; the transformers (reference) cells are BF16.
    let hf = of(Competitor::Transformers);
    assert_eq!(llama.len() + vllm.len() + hf.len(), b.cells.len());
    assert!(!hf.is_empty());
    assert!(
        hf.iter()
            .all(|c| c.synth.as_ref().is_some_and(|s| s.quant == "BF16"))
    );
    let quant = |c: &Cell| c.synth.as_ref().unwrap().quant.clone();
    let shape = |c: &Cell| c.synth.as_ref().unwrap().shape.clone();
    for shp in ["llama-3.1-8b", "qwen2.5-7b", "qwen3-8b", "gemma-3-12b"] {
        for q in ["Q4_0", "Q4_K_M", "Q8_0"] {
            let mine: Vec<_> = llama
                .iter()
                .filter(|c| shape(c) == shp && quant(c) == q && c.spec.is_none())
                .collect();
            // d512, d4k, p2k, e2e, c4, c16, c64.
            let mut w: Vec<_> = mine
                .iter()
                .map(|c| (c.prompt_tokens, c.gen_tokens, c.batch))
                .collect();
            w.sort();
            assert_eq!(
                w,
                vec![
                    (512, 128, 1),
                    (512, 128, 4),
                    (512, 128, 16),
                    (512, 128, 64),
                    (2048, 16, 1),
                    (2100, 512, 1),
                    (4096, 128, 1)
                ],
                "{shp} {q}"
            );
            assert!(mine.iter().any(|c| c.mode == Mode::Prefill));
        }
        for fp8 in [false, true] {
            let n = vllm
                .iter()
                .filter(|c| {
                    shape(c) == shp && c.spec.is_none() && c.vllm_quantization.is_some() == fp8
                })
                .count();
            assert_eq!(n, 7, "{shp} fp8={fp8}");
        }
        assert!(
            b.cells.iter().any(|c| shape(c) == shp && c.spec.is_some()),
            "{shp}: speculative cells"
        );
    }
    // vLLM runs BF16 or its own FP8 of the BF16 copy; llama.cpp never gets those.
    for c in &vllm {
        assert!(
            quant(c) == "BF16" || c.vllm_quantization.as_deref() == Some("fp8"),
            "{}",
            c.id
        );
    }
    assert!(llama.iter().all(|c| c.vllm_quantization.is_none()));
    // The plans: every cell estimated, the speculative ones too (`assay serve --spec`).
    for (vs, cells) in [(Competitor::LlamaCpp, &llama), (Competitor::Vllm, &vllm)] {
        let p = plan::plan(cells, vs, None, true).unwrap();
        let blocked: Vec<_> = p.cells.iter().filter_map(|c| c.blocked.as_ref()).collect();
        assert!(blocked.is_empty(), "{blocked:?}");
        assert!(cells.iter().any(|c| c.spec.is_some()));
        assert!(p.total_s() > p.setup_s);
        let slice = plan::plan(cells, vs, Some(1800.0), true).unwrap();
        assert!(!slice.selected.is_empty() && slice.selected_s() <= 1800.0);
    }
}

#[test]
fn cells_with_a_current_receipt_leave_the_plan() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let b = load_cells(&root.join("boards/h200.toml")).unwrap();
    let cells: Vec<&Cell> = b
        .cells
        .iter()
        .filter(|c| applies(c, Competitor::LlamaCpp))
        .collect();
    let first = plan::plan(&cells, Competitor::LlamaCpp, Some(1800.0), true).unwrap();
    let done: std::collections::BTreeMap<String, String> = first
        .selected_ids()
        .into_iter()
        .map(|id| (id, "2026-11-30T10:00:00Z".to_owned()))
        .collect();
    let left = pending(cells.clone(), &done);
    assert_eq!(left.len(), cells.len() - done.len());
    // The next window's slice is new cells only.
    let next = plan::plan(&left, Competitor::LlamaCpp, Some(1800.0), true).unwrap();
    assert!(!next.selected.is_empty());
    assert!(next.selected_ids().iter().all(|id| !done.contains_key(id)));
}

#[test]
fn formats_differ_only_for_vllm_quantization() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let b = load_cells(&root.join("boards/h200.toml")).unwrap();
    let fp8 = b
        .cells
        .iter()
        .find(|c| c.vllm_quantization.is_some())
        .unwrap();
    assert!(formats_differ(fp8, Competitor::Vllm));
    let bf16 = b
        .cells
        .iter()
        .find(|c| applies(c, Competitor::Vllm) && c.vllm_quantization.is_none())
        .unwrap();
    assert!(!formats_differ(bf16, Competitor::Vllm));
}

#[test]
fn the_cells_files_parse_as_boards() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for f in [
        "boards/h200.toml",
        "tools/pair-smoke.toml",
        "competitors/transformers/cpu-check.toml",
    ] {
        let b = load_cells(&root.join(f)).unwrap();
        assert!(!b.cells.is_empty(), "{f}");
        assert!(b.cells.iter().all(|c| c.runs >= 5 && c.batch >= 1), "{f}");
    }
}

#[test]
fn a_cpu_cell_pairs_with_llama_cpp_or_transformers_never_vllm() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let check = root.join("competitors/transformers/cpu-check.toml");
    let b = load_cells(&check).unwrap();
    let c = &b.cells[0];
    assert_eq!(c.device, crate::bench::cells::DeviceKind::Cpu);
    assert!(applies(c, Competitor::Transformers));
    assert!(!applies(c, Competitor::Vllm));
    // The same cell against vLLM is refused at load, with the reason.
    let t = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(&check).unwrap().replace(
        "vs = [\"transformers\"]",
        "vs = [\"transformers\", \"vllm\"]",
    );
    let p = t.path().join("cells.toml");
    std::fs::write(&p, text).unwrap();
    let e = format!("{:#}", load_cells(&p).unwrap_err());
    assert!(e.contains("vLLM needs the GPU"), "{e}");
}

#[test]
fn llama_server_args_pass_through_in_order_after_the_standard_flags() {
    use clap::Parser;
    #[derive(Parser)]
    struct W {
        #[command(flatten)]
        a: PairArgs,
    }
    let w = W::try_parse_from([
        "pair",
        "--vs",
        "llama.cpp",
        "--cells",
        "boards/h200.toml",
        "--llama-server-arg=--ctx-checkpoints",
        "--llama-server-arg",
        "0",
        "--llama-server-arg",
        "--cache-ram",
        "--llama-server-arg=0",
    ])
    .unwrap();
    assert_eq!(
        w.a.llama_server_args,
        ["--ctx-checkpoints", "0", "--cache-ram", "0"]
    );
    let o = crate::bench::llama_server::ServerOptions {
        extra: w.a.llama_server_args.clone(),
        ..Default::default()
    };
    let a = crate::bench::llama_server::server_args(&o, 8080);
    assert!(a.ends_with(&w.a.llama_server_args), "{a:?}");
    assert!(a.starts_with(&["--host".to_owned(), "127.0.0.1".to_owned()]));
    // None given: the standard flags only.
    let w = W::try_parse_from(["pair", "--vs", "llama.cpp", "--cells", "x.toml"]).unwrap();
    assert!(w.a.llama_server_args.is_empty());
}

#[test]
fn include_current_goes_with_plan_or_budget_only() {
    use clap::Parser;
    #[derive(Parser)]
    struct W {
        #[command(flatten)]
        a: PairArgs,
    }
    let base = [
        "pair",
        "--vs",
        "vllm",
        "--cells",
        "x.toml",
        "--include-current",
    ];
    // Alone it is refused: a run pairs every cell it is given anyway.
    assert!(W::try_parse_from(base).is_err());
    for extra in [
        &["--plan"][..],
        &["--budget-s", "900"],
        &["--plan", "--budget-s", "900"],
    ] {
        let w = W::try_parse_from(base.iter().chain(extra)).unwrap();
        assert!(w.a.include_current, "{extra:?}");
    }
    let w = W::try_parse_from(["pair", "--vs", "vllm", "--cells", "x.toml", "--plan"]).unwrap();
    assert!(!w.a.include_current);
}

/// Every batched cell of the published board whose weights have tensor-core decode products
/// (Q4_0, Q8_0) serves them with `--mmv` (our best flags at 4 rows and more: boards/h200.toml's
/// header), whichever competitor it faces: session 23 found the four FP8 (our Q8_0) c4 cells
/// left without it.
#[test]
fn batched_cells_of_the_mmv_formats_run_the_tensor_core_products() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let b = load_cells(&root.join("boards/h200.toml")).unwrap();
    let mut seen = 0;
    for c in &b.cells {
        let batched = c.serve_flags.iter().any(|f| f == "--batched-decode");
        let quant = c.synth.as_ref().map(|s| s.quant.as_str());
        if batched && matches!(quant, Some("Q4_0" | "Q8_0" | "BF16" | "Q4_K_M")) {
            seen += 1;
            assert!(
                c.serve_flags.iter().any(|f| f == "--mmv"),
                "{} runs {:?} without --mmv",
                c.id,
                quant
            );
        }
    }
    assert!(
        seen >= 60,
        "{seen} batched Q4_0 / Q8_0 / BF16 / Q4_K_M cells"
    );
}

/// `--shard I/N` on the real board: every cell runs in exactly one shard, a group of cells
/// sharing servers is never split, and the shards' estimated times are within the longest
/// group of each other (what makes N GPUs take ~1/N of the wall time).
#[test]
fn shards_cover_every_cell_once_and_never_split_a_server_group() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let b = load_cells(&root.join("boards/h200.toml")).unwrap();
    for vs in [Competitor::LlamaCpp, Competitor::Vllm] {
        let cells: Vec<&Cell> = b.cells.iter().filter(|c| applies(c, vs)).collect();
        let groups = group::groups(&cells, vs, true);
        let p = plan::plan(&cells, vs, None, true).unwrap();
        for n in 1..=4 {
            let d = deal_groups(&cells, &groups, vs, true, n).unwrap();
            assert_eq!(d.len(), groups.len());
            let mut seen = vec![0usize; cells.len()];
            let mut load = vec![0.0f64; n];
            let mut longest = 0.0f64;
            for (g, &s) in groups.iter().zip(&d) {
                assert!(s < n);
                let mut cost = 0.0;
                for &i in &g.cells {
                    seen[i] += 1;
                    cost += p.cells[i].start_s + p.cells[i].timed_s;
                }
                load[s] += cost;
                longest = longest.max(cost);
            }
            assert!(seen.iter().all(|&k| k == 1), "{vs:?} n={n}: {seen:?}");
            let (lo, hi) = load
                .iter()
                .fold((f64::MAX, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
            assert!(hi - lo <= longest + 1e-6, "{vs:?} n={n}: {load:?}");
            let text = shard_plan(&cells, vs, true, n).unwrap();
            assert_eq!(text.lines().count(), n, "{text}");
        }
    }
}
