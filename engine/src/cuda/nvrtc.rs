//! NVRTC: compiling a kernel family to a cubin for one GPU architecture, and the on-disk
//! cubin cache.
//!
//! Owns: [`compile_family`] (expand the family's includes, compile with the family's `-D`
//! defines for `--gpu-architecture=<arch>`, return the cubin), [`nvrtc_available`] /
//! [`nvrtc_version`], and [`CubinCache`]: `<dir>/<key>.cubin` where key =
//! sha256(expanded source, options, arch, driver version, NVRTC version). The directory is
//! passed in by the caller's configuration; with none, nothing is cached.

use super::CudaError;
use super::sources::{self, Family};
use cudarc::nvrtc::{result, sys};
use sha2::{Digest, Sha256};
use std::ffi::CString;
use std::path::{Path, PathBuf};

/// Whether libnvrtc can be loaded on this machine.
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the library by its usual names; no symbol is called.
    unsafe { sys::is_culib_present() }
}

/// NVRTC's (major, minor) version.
pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    if !nvrtc_available() {
        return Err(CudaError::NoNvrtc);
    }
    let (mut major, mut minor) = (0i32, 0i32);
    // SAFETY: the library is present (checked above); both pointers are valid for writes.
    let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(compile_error("(version)", "", r, String::new()));
    }
    Ok((major, minor))
}

/// The full NVRTC option list for a family on `arch`.
pub fn options_for(family: Family, arch: &str) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
    ];
    o.extend(family.defines());
    o
}

fn compile_error(file: &str, arch: &str, r: sys::nvrtcResult, log: String) -> CudaError {
    CudaError::Compile {
        file: file.to_string(),
        arch: arch.to_string(),
        code: format!("{r:?}"),
        log,
    }
}

/// Compile `family` for `arch` (e.g. `sm_90a`) and return the cubin. Needs libnvrtc
/// (and libnvrtc-builtins) loadable, but no GPU and no CUDA headers.
pub fn compile_family(family: Family, arch: &str) -> Result<Vec<u8>, CudaError> {
    let src = sources::expand(family)?;
    compile_source(family.file(), &src, &options_for(family, arch), arch)
}

/// Compile one self-contained source with the given options and return the cubin.
pub fn compile_source(
    name: &str,
    src: &str,
    options: &[String],
    arch: &str,
) -> Result<Vec<u8>, CudaError> {
    if !nvrtc_available() {
        return Err(CudaError::NoNvrtc);
    }
    let bad = |what: &str| {
        compile_error(
            name,
            arch,
            sys::nvrtcResult::NVRTC_ERROR_INVALID_INPUT,
            what.into(),
        )
    };
    let c_src = CString::new(src).map_err(|_| bad("source contains a NUL byte"))?;
    let c_name = CString::new(name).map_err(|_| bad("name contains a NUL byte"))?;
    if options.iter().any(|o| o.contains('\0')) {
        return Err(bad("an option contains a NUL byte"));
    }
    let prog = result::create_program(&c_src, Some(&c_name))
        .map_err(|e| compile_error(name, arch, e.0, String::new()))?;
    // SAFETY: `prog` was created above and is destroyed exactly once, below, after its last
    // use; `c_src` and `c_name` outlive it.
    let out = unsafe { compile_and_take_cubin(prog, options) };
    // SAFETY: as above; the program is not used after this call.
    let _ = unsafe { result::destroy_program(prog) };
    out.map_err(|(r, log)| compile_error(name, arch, r, log))
}

/// # Safety
/// `prog` must be a live program from `create_program`.
unsafe fn compile_and_take_cubin(
    prog: sys::nvrtcProgram,
    options: &[String],
) -> Result<Vec<u8>, (sys::nvrtcResult, String)> {
    // SAFETY: `prog` is live (caller's contract); options contain no NUL (checked by caller).
    let compiled = unsafe { result::compile_program(prog, options) };
    // SAFETY: `prog` is live.
    let log = unsafe { result::get_program_log(prog) }
        .map(|raw| {
            let bytes: Vec<u8> = raw
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    if let Err(e) = compiled {
        return Err((e.0, log));
    }
    let mut size = 0usize;
    // SAFETY: `prog` is live and compiled; `size` is valid for writes.
    let r = unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err((r, log));
    }
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` has exactly the size NVRTC reported.
    let r = unsafe { sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err((r, log));
    }
    Ok(cubin)
}

/// Where compiled cubins are kept between runs.
#[derive(Clone, Debug, Default)]
pub struct CubinCache {
    dir: Option<PathBuf>,
}

/// How a module was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CubinOrigin {
    Compiled,
    Cached,
}

impl CubinCache {
    /// A cache in `dir` (created on first write), or no cache at all.
    pub fn new(dir: Option<PathBuf>) -> Self {
        CubinCache { dir }
    }

    /// The cache key of a compilation.
    pub fn key(
        src: &str,
        options: &[String],
        arch: &str,
        driver_version: i32,
        nvrtc: (i32, i32),
    ) -> String {
        let mut h = Sha256::new();
        h.update(b"assay-cubin-v1\0");
        h.update((src.len() as u64).to_le_bytes());
        h.update(src.as_bytes());
        for o in options {
            h.update((o.len() as u64).to_le_bytes());
            h.update(o.as_bytes());
        }
        h.update(b"\0arch\0");
        h.update(arch.as_bytes());
        h.update(driver_version.to_le_bytes());
        h.update(nvrtc.0.to_le_bytes());
        h.update(nvrtc.1.to_le_bytes());
        hex::encode(h.finalize())
    }

    /// The family's cubin for `arch`: from the cache when present, else compiled (and
    /// stored when a cache directory is set).
    pub fn get_or_compile(
        &self,
        family: Family,
        arch: &str,
        driver_version: i32,
    ) -> Result<(Vec<u8>, CubinOrigin), CudaError> {
        let src = sources::expand(family)?;
        let options = options_for(family, arch);
        let key = Self::key(&src, &options, arch, driver_version, nvrtc_version()?);
        let path = self.dir.as_ref().map(|d| d.join(format!("{key}.cubin")));
        if let Some(p) = &path {
            if let Ok(bytes) = std::fs::read(p) {
                if !bytes.is_empty() {
                    return Ok((bytes, CubinOrigin::Cached));
                }
            }
        }
        let cubin = compile_source(family.file(), &src, &options, arch)?;
        if let (Some(dir), Some(p)) = (&self.dir, &path) {
            store(dir, p, &cubin)?;
        }
        Ok((cubin, CubinOrigin::Compiled))
    }
}

/// Write atomically: a temporary file in the same directory, then rename.
fn store(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), CudaError> {
    let io = |source| CudaError::Cache {
        path: dir.display().to_string(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".tmp-{}-{name}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_depends_on_every_input() {
        let o = vec!["-DA=1".to_string()];
        let k = CubinCache::key("src", &o, "sm_90a", 13000, (13, 0));
        assert_eq!(k.len(), 64);
        assert_ne!(k, CubinCache::key("src2", &o, "sm_90a", 13000, (13, 0)));
        assert_ne!(
            k,
            CubinCache::key("src", &["-DA=2".to_string()], "sm_90a", 13000, (13, 0))
        );
        assert_ne!(k, CubinCache::key("src", &o, "sm_90", 13000, (13, 0)));
        assert_ne!(k, CubinCache::key("src", &o, "sm_90a", 13010, (13, 0)));
        assert_ne!(k, CubinCache::key("src", &o, "sm_90a", 13000, (13, 1)));
        assert_eq!(k, CubinCache::key("src", &o, "sm_90a", 13000, (13, 0)));
    }

    #[test]
    fn options_carry_arch_and_defines() {
        let o = options_for(Family::Matvec, "sm_90a");
        assert_eq!(o[0], "--gpu-architecture=sm_90a");
        assert!(o.iter().any(|s| s.starts_with("-DMV_MAX_TOK=")));
    }

    #[test]
    fn store_writes_atomically_readable_file() {
        let dir = std::env::temp_dir().join(format!("assay-cubin-test-{}", std::process::id()));
        let p = dir.join("k.cubin");
        store(&dir, &p, b"abc").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"abc");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
