//! The shapes table: real models' exact hyper-parameters (the sizes that decide bytes per
//! token) plus tiny shapes for tests, per architecture.

use std::fmt;

/// The architectures `synth` writes (GGUF `general.architecture` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
        }
    }

    /// The catalog test model whose tokenizer metadata a synthetic checkpoint carries.
    pub fn tokenizer_donor(self) -> &'static str {
        match self {
            Arch::Llama => "SmolLM2-135M-Instruct",
            Arch::Qwen2 | Arch::Qwen3 => "Qwen2.5-Coder-0.5B-Instruct",
            Arch::Gemma3 => "Gemma-3-270M",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One shape: everything that fixes the tensor inventory.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub name: &'static str,
    /// `None`: any architecture (the tiny test shape).
    pub arch: Option<Arch>,
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// `None`: the donor tokenizer's vocabulary size.
    pub vocab: Option<usize>,
    pub n_ctx: usize,
    pub rope_base: f32,
    pub rms_eps: f32,
    /// Output head shares the token embedding.
    pub tied: bool,
    /// Sliding window of the local layers (Gemma 3).
    pub sliding_window: Option<usize>,
}

/// Every shape, real ones first.
pub const SHAPES: &[Shape] = &[
    Shape {
        name: "llama-3.1-8b",
        arch: Some(Arch::Llama),
        n_layers: 32,
        n_embd: 4096,
        n_ff: 14336,
        n_heads: 32,
        n_kv_heads: 8,
        head_dim: 128,
        vocab: Some(128_256),
        n_ctx: 131_072,
        rope_base: 500_000.0,
        rms_eps: 1e-5,
        tied: false,
        sliding_window: None,
    },
    Shape {
        name: "qwen2.5-7b",
        arch: Some(Arch::Qwen2),
        n_layers: 28,
        n_embd: 3584,
        n_ff: 18944,
        n_heads: 28,
        n_kv_heads: 4,
        head_dim: 128,
        vocab: Some(152_064),
        n_ctx: 32_768,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        tied: false,
        sliding_window: None,
    },
    Shape {
        name: "qwen3-8b",
        arch: Some(Arch::Qwen3),
        n_layers: 36,
        n_embd: 4096,
        n_ff: 12288,
        n_heads: 32,
        n_kv_heads: 8,
        head_dim: 128,
        vocab: Some(151_936),
        n_ctx: 40_960,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        tied: false,
        sliding_window: None,
    },
    Shape {
        name: "gemma-3-12b",
        arch: Some(Arch::Gemma3),
        n_layers: 48,
        n_embd: 3840,
        n_ff: 15360,
        n_heads: 16,
        n_kv_heads: 8,
        head_dim: 256,
        vocab: Some(262_208),
        n_ctx: 131_072,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        tied: true,
        sliding_window: Some(1024),
    },
    Shape {
        name: "tiny",
        arch: None,
        n_layers: 2,
        n_embd: 256,
        n_ff: 512,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 64,
        vocab: None,
        n_ctx: 4096,
        rope_base: 10_000.0,
        rms_eps: 1e-5,
        tied: false,
        sliding_window: Some(64),
    },
];

/// The shape named `name` (case-insensitive) for `arch`, or why not.
pub fn find(name: &str, arch: Arch) -> Result<Shape, String> {
    let Some(s) = SHAPES.iter().find(|s| s.name.eq_ignore_ascii_case(name)) else {
        let known: Vec<&str> = SHAPES.iter().map(|s| s.name).collect();
        return Err(format!("no shape {name:?}; shapes: {}", known.join(", ")));
    };
    match s.arch {
        Some(a) if a != arch => Err(format!("shape {} is a {a} shape, not {arch}", s.name)),
        _ => Ok(s.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_consistent() {
        for s in SHAPES {
            assert_eq!(s.n_heads % s.n_kv_heads, 0, "{}", s.name);
            // Every projection row length is a multiple of 256 (K-quants apply).
            for k in [s.n_embd, s.n_ff, s.n_heads * s.head_dim] {
                assert_eq!(k % 256, 0, "{}: {k}", s.name);
            }
        }
        assert!(find("Llama-3.1-8B", Arch::Llama).is_ok());
        assert!(find("llama-3.1-8b", Arch::Qwen2).is_err());
        assert!(find("tiny", Arch::Gemma3).is_ok());
        assert!(find("nope", Arch::Llama).is_err());
    }
}
