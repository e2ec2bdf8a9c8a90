//! The gates that run on any machine: the registry entries and their wrappers around the
//! check functions ([`crate::quant_golden`], [`crate::model_files`]).

use std::path::Path;

use engine::catalog;
use engine::quant::dequantize;

use crate::model_files::check_model;
use crate::quant_golden::check_quant_golden;
use crate::receipt::Workload;
use crate::{GateContext, GateDef, GateOutcome, Verdict};

/// The CPU gates, in run order.
pub fn gates() -> Vec<GateDef> {
    vec![
        GateDef {
            name: "quant-golden",
            about: "dequantize of all 15 formats == gguf-python golden values, exactly",
            needs_gpu: false,
            quick: true,
            run: quant_golden,
        },
        GateDef {
            name: "model-files",
            about: "catalog models open; sha256, arch and quant census match the catalog",
            needs_gpu: false,
            quick: true,
            run: model_files,
        },
    ]
}

fn gate_workload() -> Workload {
    Workload {
        mode: Some("gate".into()),
        ..Workload::default()
    }
}

fn quant_golden(ctx: &GateContext) -> GateOutcome {
    let dir = ctx.root.join("engine/tests/fixtures/quant");
    let (verdict, detail) = check_quant_golden(&dir, dequantize);
    GateOutcome {
        workload: gate_workload(),
        ..GateOutcome::new(verdict, detail)
    }
}

fn model_files(ctx: &GateContext) -> GateOutcome {
    let models = match catalog::models() {
        Ok(m) => m,
        Err(e) => return GateOutcome::new(Verdict::from_failures(vec![e.to_string()]), vec![]),
    };
    let mut failures = Vec::new();
    let mut detail = Vec::new();
    let mut facts = None;
    for m in &models {
        let is_default = m.name == ctx.default_model;
        if ctx.quick && !is_default {
            continue;
        }
        let path = ctx.models_dir.join(&m.file);
        if !Path::new(&path).exists() {
            if is_default {
                failures.push(format!(
                    "default model {} not found at {}",
                    m.name,
                    path.display()
                ));
            } else {
                detail.push(format!("{}: not fetched, not checked", m.name));
            }
            continue;
        }
        let (v, d, f) = check_model(&path, m);
        if let Verdict::Red { failures: fs } = v {
            failures.extend(fs);
        }
        detail.extend(d);
        if is_default {
            facts = f;
        }
    }
    let checked: Vec<&str> = detail
        .iter()
        .filter(|l| !l.ends_with("not checked"))
        .filter_map(|l| l.split(':').next())
        .collect();
    let summary = format!(
        "{} model(s) match tools/models.json: {}",
        checked.len(),
        checked.join(", ")
    );
    detail.insert(0, summary);
    GateOutcome {
        verdict: Verdict::from_failures(failures),
        detail,
        model: facts,
        workload: gate_workload(),
    }
}
