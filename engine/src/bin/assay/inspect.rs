//! `assay inspect`: describe a model file (architecture, hyper-parameters, tensor count,
//! quant census, tokenizer summary, chat template, weight bytes), or one tensor's values.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use engine::model_file::{
    GgufHeader, GgufModel, MetaArray, MetaValue, ModelFile, SafetensorsModel,
};
use serde_json::{Value, json};

/// Arrays longer than this are summarized (type, length, first items) unless `--full`.
const ARRAY_SUMMARY_LEN: usize = 16;

/// Arguments of `assay inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// A model file, or the name of a catalog model (see `tools/fetch-models --list`);
    /// defaults to the catalog's default model.
    pub model: Option<String>,
    /// Folder of fetched catalog models.
    #[arg(long, env = "ASSAY_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Describe one tensor: type, shape, first values, sum and L2 norm of its values.
    #[arg(long, value_name = "NAME")]
    pub tensor: Option<String>,
    /// Print long metadata arrays (vocabularies, merges) in full.
    #[arg(long)]
    pub full: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let path = crate::common::resolve_model(args.model.as_deref(), args.models_dir.clone())?;
    let file = ModelFile::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let report = match (&file, &args.tensor) {
        (ModelFile::Gguf(m), Some(name)) => Some(tensor_report(m, name)?),
        (ModelFile::Safetensors(m), Some(name)) => Some(st_tensor_report(m, name)?),
        _ => None,
    };
    if let Some(report) = report {
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print_tensor(&report);
        }
        return Ok(());
    }
    let report = match &file {
        ModelFile::Gguf(m) => model_report(m, args.full),
        ModelFile::Safetensors(m) => st_model_report(m),
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_model(&report);
    }
    Ok(())
}

/// A metadata value as JSON; floats keep their shortest f32 spelling.
fn meta_json(v: &MetaValue, full: bool) -> Value {
    match v {
        MetaValue::U8(x) => json!(x),
        MetaValue::I8(x) => json!(x),
        MetaValue::U16(x) => json!(x),
        MetaValue::I16(x) => json!(x),
        MetaValue::U32(x) => json!(x),
        MetaValue::I32(x) => json!(x),
        MetaValue::U64(x) => json!(x),
        MetaValue::I64(x) => json!(x),
        MetaValue::F32(x) => f32_json(*x),
        MetaValue::F64(x) => json!(x),
        MetaValue::Bool(x) => json!(x),
        MetaValue::String(s) => json!(s),
        MetaValue::Array(a) => array_json(a, full),
    }
}

fn f32_json(x: f32) -> Value {
    // Go through the shortest decimal spelling so 1e-5f32 prints as 1e-5, not 9.99999974e-6.
    format!("{x}")
        .parse::<f64>()
        .map(|f| json!(f))
        .unwrap_or(Value::Null)
}

fn array_items(a: &MetaArray, take: usize, full: bool) -> Vec<Value> {
    fn pick<T: Clone + Into<Value>>(v: &[T], take: usize) -> Vec<Value> {
        v.iter().take(take).cloned().map(Into::into).collect()
    }
    match a {
        MetaArray::U8(v) => pick(v, take),
        MetaArray::I8(v) => pick(v, take),
        MetaArray::U16(v) => pick(v, take),
        MetaArray::I16(v) => pick(v, take),
        MetaArray::U32(v) => pick(v, take),
        MetaArray::I32(v) => pick(v, take),
        MetaArray::U64(v) => pick(v, take),
        MetaArray::I64(v) => pick(v, take),
        MetaArray::F32(v) => v.iter().take(take).map(|x| f32_json(*x)).collect(),
        MetaArray::F64(v) => pick(v, take),
        MetaArray::Bool(v) => pick(v, take),
        MetaArray::String(v) => pick(v, take),
        MetaArray::Array(v) => v.iter().take(take).map(|x| array_json(x, full)).collect(),
    }
}

fn array_json(a: &MetaArray, full: bool) -> Value {
    if full || a.len() <= ARRAY_SUMMARY_LEN {
        return Value::Array(array_items(a, usize::MAX, full));
    }
    json!({
        "type": format!("array<{}>", a.elem_type_name()),
        "len": a.len(),
        "head": array_items(a, 8, full),
    })
}

fn model_report(model: &GgufModel, full: bool) -> Value {
    let h = model.header();
    let arch = h.architecture().unwrap_or("unknown").to_owned();
    let mut census: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
    let (mut params, mut bytes) = (0u64, 0u64);
    for t in &h.tensors {
        let e = census.entry(t.format.name()).or_default();
        e.0 += t.bytes;
        e.1 += 1;
        e.2 += t.elems;
        params += t.elems;
        bytes += t.bytes;
    }
    let census: BTreeMap<&str, Value> = census
        .into_iter()
        .map(|(k, (b, n, e))| (k, json!({"bytes": b, "tensors": n, "parameters": e})))
        .collect();
    let prefix = format!("{arch}.");
    let hyper: BTreeMap<&str, Value> = h
        .metadata
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(&prefix)
                .map(|short| (short, meta_json(v, false)))
        })
        .collect();
    let metadata: BTreeMap<&str, Value> = h
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), meta_json(v, full)))
        .collect();
    json!({
        "path": model.path().display().to_string(),
        "format": "gguf",
        "gguf_version": h.version,
        "architecture": arch,
        "name": h.get("general.name").and_then(MetaValue::as_str),
        "tensor_count": h.tensors.len(),
        "parameters": params,
        "weight_bytes": bytes,
        "quant_census": census,
        "hyperparameters": hyper,
        "tokenizer": tokenizer_summary(h),
        "chat_template": h.get("tokenizer.chat_template").and_then(MetaValue::as_str).is_some(),
        "metadata": metadata,
    })
}

fn tokenizer_summary(h: &GgufHeader) -> Value {
    let s = |k: &str| h.get(k).and_then(MetaValue::as_str);
    let n = |k: &str| h.get(k).and_then(MetaValue::as_u64);
    let len = |k: &str| h.get(k).and_then(MetaValue::as_array).map(MetaArray::len);
    json!({
        "model": s("tokenizer.ggml.model"),
        "pre": s("tokenizer.ggml.pre"),
        "tokens": len("tokenizer.ggml.tokens"),
        "merges": len("tokenizer.ggml.merges"),
        "bos_token_id": n("tokenizer.ggml.bos_token_id"),
        "eos_token_id": n("tokenizer.ggml.eos_token_id"),
        "add_bos_token": h.get("tokenizer.ggml.add_bos_token").and_then(MetaValue::as_bool),
    })
}

fn tensor_report(model: &GgufModel, name: &str) -> anyhow::Result<Value> {
    let h = model.header();
    let t = h.tensor(name).with_context(|| {
        let near: Vec<&str> = h
            .tensors
            .iter()
            .map(|t| t.name.as_str())
            .filter(|n| n.contains(name) || name.contains(*n))
            .take(5)
            .collect();
        format!(
            "no tensor named {name:?} (similar: {near:?}; {} tensors in file)",
            h.tensors.len()
        )
    })?;
    let values = model.dequantize(name)?;
    let (first, sum, l2) = value_stats(&values);
    Ok(json!({
        "name": t.name,
        "type": t.format.name(),
        "shape": t.dims,
        "elements": t.elems,
        "bytes": t.bytes,
        "first": first,
        "sum": sum,
        "l2": l2,
    }))
}

/// Statistics of a tensor's values: first 16, sum and L2 norm accumulated in f64.
fn value_stats(values: &[f32]) -> (Vec<Value>, f64, f64) {
    let (mut sum, mut sq) = (0f64, 0f64);
    for &v in values {
        sum += f64::from(v);
        sq += f64::from(v) * f64::from(v);
    }
    let first = values
        .iter()
        .take(16)
        .map(|&v| json!(f64::from(v)))
        .collect();
    (first, sum, sq.sqrt())
}

fn st_model_report(model: &SafetensorsModel) -> Value {
    let mut census: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    let (mut params, mut bytes) = (0u64, 0u64);
    for t in model.tensors() {
        let e = census.entry(t.dtype.name().to_owned()).or_default();
        e.0 += t.end - t.begin;
        e.1 += 1;
        e.2 += t.elems;
        params += t.elems;
        bytes += t.end - t.begin;
    }
    let census: BTreeMap<String, Value> = census
        .into_iter()
        .map(|(k, (b, n, e))| (k, json!({"bytes": b, "tensors": n, "parameters": e})))
        .collect();
    let config = model.config().cloned().unwrap_or(Value::Null);
    let arch = config["model_type"]
        .as_str()
        .unwrap_or("unknown")
        .to_owned();
    json!({
        "path": model.root().display().to_string(),
        "format": "safetensors",
        "architecture": arch,
        "name": config["_name_or_path"].as_str(),
        "tensor_count": model.len(),
        "parameters": params,
        "weight_bytes": bytes,
        "quant_census": census,
        "hyperparameters": config.clone(),
        "tokenizer": Value::Null,
        "chat_template": false,
        "metadata": config,
    })
}

fn st_tensor_report(model: &SafetensorsModel, name: &str) -> anyhow::Result<Value> {
    let t = model
        .tensor(name)
        .with_context(|| format!("no tensor named {name:?}"))?;
    let values = model.dequantize(name)?;
    let (first, sum, l2) = value_stats(&values);
    Ok(json!({
        "name": t.name,
        "type": t.dtype.name(),
        "shape": t.shape,
        "elements": t.elems,
        "bytes": t.end - t.begin,
        "first": first,
        "sum": sum,
        "l2": l2,
    }))
}

fn human_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else {
        format!("{:.1} kB", b / 1e3)
    }
}

fn print_model(r: &Value) {
    let u = |k: &str| r[k].as_u64().unwrap_or(0);
    println!("file          {}", r["path"].as_str().unwrap_or(""));
    println!(
        "architecture  {}",
        r["architecture"].as_str().unwrap_or("?")
    );
    if let Some(n) = r["name"].as_str() {
        println!("name          {n}");
    }
    println!("parameters    {:.1} M", u("parameters") as f64 / 1e6);
    println!("tensors       {}", u("tensor_count"));
    println!(
        "weight bytes  {} ({})",
        u("weight_bytes"),
        human_bytes(u("weight_bytes"))
    );
    println!("hyper-parameters:");
    if let Some(m) = r["hyperparameters"].as_object() {
        for (k, v) in m {
            println!("  {k:40} {v}");
        }
    }
    println!("quant census:");
    let total = u("weight_bytes").max(1) as f64;
    if let Some(m) = r["quant_census"].as_object() {
        for (k, v) in m {
            let b = v["bytes"].as_u64().unwrap_or(0);
            let n = v["tensors"].as_u64().unwrap_or(0);
            let pct = 100.0 * b as f64 / total;
            println!("  {k:7} {:>10} {pct:5.1} %  {n:4} tensors", human_bytes(b));
        }
    }
    let t = &r["tokenizer"];
    if t.is_null() {
        return;
    }
    println!(
        "tokenizer     {} (pre {}), {} tokens, {} merges, bos {}, eos {}",
        t["model"].as_str().unwrap_or("none"),
        t["pre"].as_str().unwrap_or("-"),
        t["tokens"],
        t["merges"],
        t["bos_token_id"],
        t["eos_token_id"]
    );
    let chat = if r["chat_template"].as_bool().unwrap_or(false) {
        "present"
    } else {
        "absent"
    };
    println!("chat template {chat}");
}

fn print_tensor(r: &Value) {
    println!("tensor   {}", r["name"].as_str().unwrap_or(""));
    println!("type     {}", r["type"].as_str().unwrap_or(""));
    println!("shape    {}", r["shape"]);
    println!("bytes    {}", r["bytes"]);
    println!("first    {}", r["first"]);
    println!("sum      {}", r["sum"]);
    println!("l2       {}", r["l2"]);
}
