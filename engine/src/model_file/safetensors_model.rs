//! safetensors checkpoints: a single file or shards listed by
//! `model.safetensors.index.json`, plus the `config.json` beside them, as one validated
//! tensor inventory over memory maps.
//!
//! The index's `weight_map` must agree exactly with the shards: every listed tensor exists
//! in its shard, every tensor in a shard is listed for that shard, and shard names are plain
//! file names in the same folder (no path components), so a hostile index cannot reach
//! outside the checkpoint's folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::safetensors::{self, SafetensorsHeader, SafetensorsTensor};
use super::{FileBytes, ModelFileError};

/// Name of the shard index.
pub const INDEX_NAME: &str = "model.safetensors.index.json";
/// Name of the single-file checkpoint looked for in a folder.
pub const SINGLE_NAME: &str = "model.safetensors";
/// Name of the model configuration beside the weights.
pub const CONFIG_NAME: &str = "config.json";
/// Largest index or config JSON read.
const MAX_JSON_FILE: u64 = 64 << 20;

/// One memory-mapped, validated safetensors file.
pub struct SafetensorsFile {
    path: PathBuf,
    bytes: FileBytes,
    header: SafetensorsHeader,
}

impl SafetensorsFile {
    /// Memory-map and validate the safetensors file at `path`.
    pub fn open(path: &Path) -> Result<Self, ModelFileError> {
        let bytes = FileBytes::map(path).map_err(|e| ModelFileError::io(path, e))?;
        Self::from_bytes(path.to_owned(), bytes)
    }

    /// Validate safetensors `bytes`; `path` is only used in messages.
    pub fn from_bytes(path: PathBuf, bytes: FileBytes) -> Result<Self, ModelFileError> {
        match safetensors::parse_header(bytes.as_slice()) {
            Ok(header) => Ok(Self {
                path,
                bytes,
                header,
            }),
            Err(source) => Err(ModelFileError::Safetensors { path, source }),
        }
    }

    /// Path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The validated header.
    pub fn header(&self) -> &SafetensorsHeader {
        &self.header
    }

    /// The raw bytes of a tensor of this file. Bounds were validated at open.
    pub fn tensor_bytes(&self, t: &SafetensorsTensor) -> &[u8] {
        let start = self.header.data_start.saturating_add(t.begin) as usize;
        let end = self.header.data_start.saturating_add(t.end) as usize;
        self.bytes.as_slice().get(start..end).unwrap_or_default()
    }
}

/// A safetensors checkpoint: one or more files and the optional `config.json`.
pub struct SafetensorsModel {
    root: PathBuf,
    shards: Vec<SafetensorsFile>,
    /// Tensor name -> (shard, index in that shard's header).
    index: BTreeMap<String, (usize, usize)>,
    config: Option<serde_json::Value>,
}

fn read_json(path: &Path) -> Result<serde_json::Value, String> {
    let len = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if len > MAX_JSON_FILE {
        return Err(format!(
            "{len} bytes exceeds the {MAX_JSON_FILE}-byte limit"
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

fn is_plain_file_name(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && !s.contains(['/', '\\', '\0'])
        && Path::new(s).file_name().is_some_and(|n| n == s)
}

impl SafetensorsModel {
    /// Open a checkpoint: a folder (holding the index, or `model.safetensors`, or exactly
    /// one `*.safetensors`), an index file, or a single `.safetensors` file.
    pub fn open(path: &Path) -> Result<Self, ModelFileError> {
        let meta = std::fs::metadata(path).map_err(|e| ModelFileError::io(path, e))?;
        if meta.is_dir() {
            let index = path.join(INDEX_NAME);
            if index.is_file() {
                return Self::open_index(&index);
            }
            let single = path.join(SINGLE_NAME);
            if single.is_file() {
                return Self::open_single(&single);
            }
            let mut found = Vec::new();
            for entry in std::fs::read_dir(path).map_err(|e| ModelFileError::io(path, e))? {
                let p = entry.map_err(|e| ModelFileError::io(path, e))?.path();
                if p.is_file() && p.extension().is_some_and(|e| e == "safetensors") {
                    found.push(p);
                }
            }
            return match found.as_slice() {
                [one] => Self::open_single(one),
                _ => Err(ModelFileError::NoWeights {
                    path: path.to_owned(),
                    found: found.len(),
                }),
            };
        }
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().ends_with(".index.json"))
        {
            Self::open_index(path)
        } else {
            Self::open_single(path)
        }
    }

    fn folder_of(path: &Path) -> PathBuf {
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        }
    }

    fn read_config(root: &Path) -> Result<Option<serde_json::Value>, ModelFileError> {
        let path = root.join(CONFIG_NAME);
        if !path.is_file() {
            return Ok(None);
        }
        read_json(&path)
            .map(Some)
            .map_err(|why| ModelFileError::BadConfig { path, why })
    }

    /// Open one `.safetensors` file (and the `config.json` beside it, if any).
    pub fn open_single(path: &Path) -> Result<Self, ModelFileError> {
        let root = Self::folder_of(path);
        let file = SafetensorsFile::open(path)?;
        let index = file
            .header
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), (0, i)))
            .collect();
        let config = Self::read_config(&root)?;
        Ok(Self {
            root,
            shards: vec![file],
            index,
            config,
        })
    }

    /// Open a sharded checkpoint from its `model.safetensors.index.json`.
    pub fn open_index(index_path: &Path) -> Result<Self, ModelFileError> {
        let root = Self::folder_of(index_path);
        let bad = |why: String| ModelFileError::BadIndex {
            path: index_path.to_owned(),
            why,
        };
        let json = read_json(index_path).map_err(bad)?;
        let Some(map) = json.get("weight_map").and_then(|m| m.as_object()) else {
            return Err(bad("no \"weight_map\" object".into()));
        };
        // Shard file name -> tensors it must hold, both in sorted order.
        let mut wanted: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (name, shard) in map {
            let Some(shard) = shard.as_str() else {
                return Err(bad(format!("weight_map[{name:?}] is not a string")));
            };
            if !is_plain_file_name(shard) {
                return Err(bad(format!(
                    "shard name {shard:?} is not a plain file name"
                )));
            }
            wanted.entry(shard).or_default().push(name);
        }
        let mut shards = Vec::with_capacity(wanted.len());
        let mut index = BTreeMap::new();
        for (shard_no, (shard, names)) in wanted.into_iter().enumerate() {
            let file = SafetensorsFile::open(&root.join(shard))?;
            let mut local: BTreeMap<&str, usize> = BTreeMap::new();
            for (i, t) in file.header.tensors.iter().enumerate() {
                local.insert(&t.name, i);
            }
            for name in &names {
                let Some(i) = local.remove(name) else {
                    return Err(ModelFileError::MissingTensor {
                        path: file.path.clone(),
                        name: (*name).to_owned(),
                    });
                };
                index.insert((*name).to_owned(), (shard_no, i));
            }
            if let Some(extra) = local.keys().next() {
                return Err(ModelFileError::UnlistedTensor {
                    path: file.path.clone(),
                    name: (*extra).to_owned(),
                });
            }
            shards.push(file);
        }
        let config = Self::read_config(&root)?;
        Ok(Self {
            root,
            shards,
            index,
            config,
        })
    }

    /// Folder holding the checkpoint.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The files, in shard-name order.
    pub fn shards(&self) -> &[SafetensorsFile] {
        &self.shards
    }

    /// `config.json`, if the folder has one.
    pub fn config(&self) -> Option<&serde_json::Value> {
        self.config.as_ref()
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True when the checkpoint holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn locate(&self, name: &str) -> Option<(&SafetensorsFile, &SafetensorsTensor)> {
        let &(s, i) = self.index.get(name)?;
        let file = self.shards.get(s)?;
        Some((file, file.header.tensors.get(i)?))
    }

    /// Every tensor, in name order.
    pub fn tensors(&self) -> impl Iterator<Item = &SafetensorsTensor> {
        self.index
            .keys()
            .filter_map(|n| self.locate(n).map(|(_, t)| t))
    }

    /// A tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&SafetensorsTensor> {
        self.locate(name).map(|(_, t)| t)
    }

    /// The raw bytes of a tensor.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8], ModelFileError> {
        let (file, t) = self
            .locate(name)
            .ok_or_else(|| ModelFileError::NoSuchTensor(name.to_owned()))?;
        Ok(file.tensor_bytes(t))
    }

    /// A tensor converted to f32 (row-major, all elements); F32, F16, BF16 and F8_E4M3.
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, ModelFileError> {
        let (file, t) = self
            .locate(name)
            .ok_or_else(|| ModelFileError::NoSuchTensor(name.to_owned()))?;
        let wrap = |source| ModelFileError::Safetensors {
            path: file.path.clone(),
            source,
        };
        if !t.dtype.is_float_supported() {
            return Err(wrap(safetensors::SafetensorsError::UnsupportedDtype {
                name: t.name.clone(),
                dtype: t.dtype.name(),
            }));
        }
        let mut out = vec![0f32; t.elems as usize];
        safetensors::dequantize(&t.name, t.dtype, file.tensor_bytes(t), &mut out).map_err(wrap)?;
        Ok(out)
    }
}
