//! `assay tokenize`: a model's own tokenizer and chat template from the command line.
//!
//! `assay tokenize MODEL TEXT` prints the ids as a JSON array; `--decode` reads ids (a JSON
//! array or whitespace/comma separated) and prints the text; `--chat FILE.json` renders a
//! conversation (`{"messages": [...], "tools": [...]}` or a bare message array) with the
//! model's chat template and prints the prompt (`--ids` prints its token ids instead).

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use engine::model_file::GgufModel;
use engine::tokenizer::{ChatTemplate, Tokenizer};

/// Arguments of `assay tokenize`.
#[derive(clap::Args)]
pub struct Args {
    /// A GGUF model file, or the name of a catalog model.
    pub model: String,
    /// The text (or, with --decode, the ids); read from stdin when absent or `-`.
    pub text: Option<String>,
    /// Folder of fetched catalog models.
    #[arg(long, env = "ASSAY_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// Decode token ids back to text.
    #[arg(long, conflicts_with = "chat")]
    pub decode: bool,
    /// Render this conversation (JSON) with the model's chat template.
    #[arg(long, value_name = "FILE.json")]
    pub chat: Option<PathBuf>,
    /// With --chat: do not end the prompt with the assistant turn opener (default: the
    /// file's `add_generation_prompt`, else true).
    #[arg(long, requires = "chat")]
    pub no_generation_prompt: bool,
    /// With --chat: print the prompt's token ids instead of its text.
    #[arg(long, requires = "chat")]
    pub ids: bool,
    /// Do not add BOS/EOS (by default they are added as the model's metadata asks).
    #[arg(long)]
    pub no_special: bool,
    /// Treat control-token text such as `<|im_start|>` as plain text.
    #[arg(long)]
    pub no_parse_special: bool,
    /// Print each token with its piece: `[[id, "piece"], ...]`.
    #[arg(long, conflicts_with_all = ["decode", "chat"])]
    pub pieces: bool,
    /// With --decode or --chat: print the text as a JSON string (exact, one line).
    #[arg(long)]
    pub json: bool,
}

fn input(text: Option<&str>) -> anyhow::Result<String> {
    match text {
        Some(t) if t != "-" => Ok(t.to_owned()),
        _ => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading stdin")?;
            Ok(s)
        }
    }
}

fn parse_ids(s: &str) -> anyhow::Result<Vec<u32>> {
    let t = s.trim();
    if t.starts_with('[') {
        return serde_json::from_str(t).context("ids: expected a JSON array of token ids");
    }
    t.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .map(|w| {
            w.parse::<u32>()
                .with_context(|| format!("ids: {w:?} is not a token id"))
        })
        .collect()
}

fn print_text(text: &str, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(text)?);
    } else {
        println!("{text}");
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let path = crate::common::resolve_model(Some(&args.model), args.models_dir.clone())?;
    let model = GgufModel::open(&path).with_context(|| {
        format!(
            "opening {} (the tokenizer needs a GGUF file)",
            path.display()
        )
    })?;
    let tok = Tokenizer::from_gguf(model.header())
        .with_context(|| format!("tokenizer of {}", path.display()))?;
    let add_special = !args.no_special;
    let parse_special = !args.no_parse_special;

    if let Some(file) = &args.chat {
        let conv =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let v: serde_json::Value = serde_json::from_str(&conv)
            .with_context(|| format!("{} is not JSON", file.display()))?;
        let agp = !args.no_generation_prompt
            && v.get("add_generation_prompt")
                .and_then(|b| b.as_bool())
                .unwrap_or(true);
        let tmpl = ChatTemplate::for_model(model.header())?;
        let prompt = tmpl.render_json(&conv, agp)?;
        if args.ids {
            // Templates write BOS themselves where the model wants it.
            let ids = tok.encode(&prompt, false, parse_special)?;
            println!("{}", serde_json::to_string(&ids)?);
            return Ok(());
        }
        return print_text(&prompt, args.json);
    }

    let text = input(args.text.as_deref())?;
    if args.decode {
        let ids = parse_ids(&text)?;
        return print_text(&tok.decode(&ids)?, args.json);
    }
    let ids = tok.encode(&text, add_special, parse_special)?;
    if args.pieces {
        let rows: Vec<(u32, String)> = ids
            .iter()
            .map(|&id| {
                Ok((
                    id,
                    String::from_utf8_lossy(tok.token_to_piece(id)?).into_owned(),
                ))
            })
            .collect::<anyhow::Result<_>>()?;
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        println!("{}", serde_json::to_string(&ids)?);
    }
    Ok(())
}
