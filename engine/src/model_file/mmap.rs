//! Read-only file bytes: a memory map for real files, an owned buffer for tests.

use std::fs::File;
use std::path::Path;

/// The bytes of a model file.
pub enum FileBytes {
    /// A read-only memory map of a file on disk.
    Mapped(memmap2::Mmap),
    /// An owned buffer (tests, fuzzing, small generated files).
    Owned(Vec<u8>),
}

impl FileBytes {
    /// Map `path` read-only.
    pub fn map(path: &Path) -> std::io::Result<Self> {
        let file = File::open(path)?;
        if file.metadata()?.len() == 0 {
            return Ok(Self::Owned(Vec::new()));
        }
        // SAFETY: the map is read-only and private to this process. Model files are treated
        // as immutable while loaded; a concurrent writer truncating the file could still
        // fault, which is the documented limit of memory-mapped loading everywhere.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(Self::Mapped(map))
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Self::Mapped(m) => m,
            Self::Owned(v) => v,
        }
    }
}
