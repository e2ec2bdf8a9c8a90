//! Assay engine: everything that turns a model file into tokens.
//!
//! One folder per concern (see `shared/DESIGN.md`): `model_file` (GGUF, safetensors, mmap,
//! validation) and `quant` (block formats: layout, dequant, reference dot, quantize) are the
//! foundation the tokenizer, architectures, executors and server build on.

pub mod api;
pub mod arch;
pub mod catalog;
pub mod cuda;
pub mod kv;
pub mod model_file;
pub mod quant;
pub mod reference;
pub mod sampling;
pub mod scheduler;
pub mod server;
pub mod spec;
pub mod tokenizer;
