//! API keys: a keys file holds one SHA-256 hash (hex) of a key per line (`#` comments,
//! blank lines and a label after the hash allowed); a request authenticates with
//! `Authorization: Bearer KEY` and its tenant identity is the key's hash (the prefix
//! cache is scoped by it). [`new_key`] makes a key from the OS's random source.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

/// Errors reading or writing keys.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} line {line}: expected a 64-digit hex SHA-256 hash")]
    BadLine { path: String, line: usize },
    #[error("{0} holds no key hash")]
    Empty(String),
    #[error("cannot read random bytes: {0}")]
    Random(std::io::Error),
}

/// Hex SHA-256 of a key.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// The accepted key hashes.
#[derive(Clone, Debug, Default)]
pub struct KeySet {
    hashes: HashSet<String>,
}

impl KeySet {
    /// Parse a keys file's text.
    pub fn parse(text: &str, path: &str) -> Result<Self, KeyError> {
        let mut hashes = HashSet::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let h = line.split_whitespace().next().unwrap_or("");
            if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(KeyError::BadLine {
                    path: path.to_owned(),
                    line: i + 1,
                });
            }
            hashes.insert(h.to_ascii_lowercase());
        }
        if hashes.is_empty() {
            return Err(KeyError::Empty(path.to_owned()));
        }
        Ok(Self { hashes })
    }

    /// Read a keys file.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Io {
            path: p.clone(),
            source,
        })?;
        Self::parse(&text, &p)
    }

    /// The tenant (hash) of `key` when it is accepted.
    pub fn check(&self, key: &str) -> Option<String> {
        let h = hash_key(key);
        self.hashes.contains(&h).then_some(h)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

/// A new random key (`sk-assay-` + 64 hex digits from 32 random bytes).
pub fn new_key() -> Result<String, KeyError> {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(KeyError::Random)?;
    Ok(format!("sk-assay-{}", hex::encode(b)))
}

/// Make a key, append its hash (with `label`) to `file`, return the key.
pub fn add_new_key(file: &Path, label: &str) -> Result<String, KeyError> {
    let key = new_key()?;
    let p = file.display().to_string();
    let io = |source| KeyError::Io {
        path: p.clone(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(io)?;
    let label = label.replace(['\n', '\r'], " ");
    writeln!(f, "{} {}", hash_key(&key), label.trim()).map_err(io)?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_file_round_trip_and_bad_lines() {
        let dir = std::env::temp_dir().join(format!("assay-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("keys");
        let _ = std::fs::remove_file(&f);
        let k1 = add_new_key(&f, "alice").unwrap();
        let k2 = add_new_key(&f, "bob").unwrap();
        assert!(k1.starts_with("sk-assay-") && k1.len() == 9 + 64 && k1 != k2);
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(!text.contains(&k1), "the key itself is never stored");
        let set = KeySet::load(&f).unwrap();
        assert_eq!(set.len(), 2);
        assert_eq!(set.check(&k1), Some(hash_key(&k1)));
        assert_eq!(set.check("sk-assay-wrong"), None);
        assert!(matches!(
            KeySet::parse("# c\n\nnot-a-hash\n", "f"),
            Err(KeyError::BadLine { line: 3, .. })
        ));
        assert!(matches!(
            KeySet::parse("# only\n", "f"),
            Err(KeyError::Empty(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
