//! The GPU handle: driver probe, context, stream, device facts, and every kernel loaded.
//!
//! Owns: [`CudaConfig`] (built by the binaries; no environment variables read here),
//! [`Gpu::open`] — returns [`CudaError::NoDriver`] on a machine without a CUDA driver
//! instead of letting `cudarc` panic — [`DeviceInfo`], the table of loaded entry points,
//! and small upload / download / allocation helpers with length checks.

use super::nvrtc::{self, CubinCache, CubinOrigin};
use super::select::{self, DeviceFacts};
use super::sources::Family;
use super::{CudaError, shape_err};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, ValidAsZeroBits, sys,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// How to open the GPU.
#[derive(Clone, Debug, Default)]
pub struct CudaConfig {
    /// Device ordinal.
    pub ordinal: usize,
    /// Directory of the cubin cache (`None`: compile every time).
    pub cubin_cache_dir: Option<PathBuf>,
}

/// Facts about the device, recorded in receipts.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub driver_version: i32,
    pub nvrtc_version: (i32, i32),
    pub total_memory_bytes: usize,
    pub sm_count: u32,
    /// The NVRTC target the kernels were compiled for.
    pub arch: String,
}

/// How each kernel family's module was obtained at open.
#[derive(Clone, Debug)]
pub struct ModuleLoad {
    pub family: Family,
    pub origin: CubinOrigin,
    pub cubin_bytes: usize,
    pub seconds: f64,
}

/// An open GPU with every kernel family loaded.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    funcs: HashMap<String, CudaFunction>,
    loads: Vec<ModuleLoad>,
}

/// Whether a CUDA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda by its usual names; no symbol is called.
    unsafe { sys::is_culib_present() }
}

fn driver_version() -> Result<i32, CudaError> {
    let mut v = 0i32;
    // SAFETY: the driver library is present (callers check first); `v` is valid for writes.
    unsafe { sys::cuDriverGetVersion(&mut v) }.result()?;
    Ok(v)
}

impl Gpu {
    /// Open device `cfg.ordinal`, compile (or load from the cache) every kernel family for
    /// it, and load every entry point.
    pub fn open(cfg: &CudaConfig) -> Result<Gpu, CudaError> {
        if !driver_present() {
            return Err(CudaError::NoDriver);
        }
        if !nvrtc::nvrtc_available() {
            return Err(CudaError::NoNvrtc);
        }
        let ctx = CudaContext::new(cfg.ordinal)?;
        // SAFETY: every launch and copy of this backend goes through the one stream below,
        // so cross-stream event tracking is not needed (and costs events on every launch).
        unsafe { ctx.disable_event_tracking() };
        // A stream of our own rather than the legacy default stream, which cannot be
        // captured into a CUDA graph (decode::graph).
        let stream = ctx.new_stream()?;
        let cc = ctx.compute_capability()?;
        let sm =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let info = DeviceInfo {
            name: ctx.name()?,
            compute_capability: cc,
            driver_version: driver_version()?,
            nvrtc_version: nvrtc::nvrtc_version()?,
            total_memory_bytes: ctx.total_mem()?,
            sm_count: u32::try_from(sm).unwrap_or(0),
            arch: select::arch_for(cc),
        };
        let cache = CubinCache::new(cfg.cubin_cache_dir.clone());
        // Every family compiles (or loads from the cache) on its own thread: NVRTC takes
        // independent programs concurrently, and the matvec halves dominate the time.
        let cubins: Vec<_> = std::thread::scope(|s| {
            let jobs: Vec<_> = Family::ALL
                .map(|family| {
                    let (cache, arch) = (&cache, &info.arch);
                    s.spawn(move || {
                        let t0 = Instant::now();
                        let r = cache.get_or_compile(family, arch, info.driver_version);
                        (family, r, t0.elapsed().as_secs_f64())
                    })
                })
                .into_iter()
                .collect();
            jobs.into_iter()
                .map(|j| j.join().map_err(|_| CudaError::CompileThread))
                .collect()
        });
        let mut funcs = HashMap::new();
        let mut loads = Vec::new();
        for job in cubins {
            let (family, compiled, compile_s) = job?;
            let t0 = Instant::now();
            let (cubin, origin) = compiled?;
            let cubin_bytes = cubin.len();
            let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?;
            for name in family.entry_points() {
                let f = module
                    .load_function(&name)
                    .map_err(|_| CudaError::MissingKernel(name.clone()))?;
                // x tiles live in dynamic shared memory beyond the default 48 KiB (mmv:
                // the one-token entry points' staged x, `select::MMV_X1_MAX_K`; gemmt: its
                // pipeline stages; the prompt pass's attention).
                let dynamic = match family {
                    // The streamed matvec entries only where they run (sm_90: x and the
                    // rings take up to half an SM's 228 KiB, past consumer cards' 99 KiB
                    // opt-in limit, where setting it would fail the load).
                    Family::Matvec if select::is_matvec_wr_entry(&name) => {
                        select::mv_wr_max_shared_bytes(cc)
                    }
                    Family::Matvec | Family::MatvecBatch => Some(select::MV_MAX_SHARED_BYTES),
                    // The one-token entry points' staged x (BF16: three bf16 parts).
                    Family::Mmv => Some(select::MMV_MAX_SHARED_BYTES),
                    // The warpgroup-MMA entries only where they run (sm_90a: their stages
                    // exceed other devices' opt-in limit, A100's 163 KiB and 99 KiB on
                    // consumer cards, and setting it there would fail the load).
                    Family::Gemmt if select::is_gemmw_entry(&name) => {
                        select::gemmt_wgmma(cc, 1, select::GEMMW_BM)
                            .then_some(select::GEMMT_MAX_SHARED_BYTES)
                    }
                    // Section 4's TMA entries likewise (sm_90a only).
                    Family::Gemmt if select::is_gemmtm_entry(&name) => {
                        select::gemmt_wgmma(cc, 1, select::GEMMW_BM)
                            .then_some(select::GEMMTM_MAX_SHARED_BYTES)
                    }
                    Family::Gemmt => Some(select::GEMMT_MMA_MAX_SHARED_BYTES),
                    // The packed prompt-attention entries only where they run (sm_90).
                    Family::Attention if select::is_attention_prefill_pk_entry(&name) => {
                        (cc.0 >= 9).then_some(select::ATT_PREFILL_PK_MAX_SHARED_BYTES)
                    }
                    // attn_prefill_d*: q and two stages of K and V rows.
                    Family::Attention => Some(select::ATT_PREFILL_MAX_SHARED_BYTES),
                    _ => None,
                };
                if let Some(bytes) = dynamic {
                    f.set_attribute(
                        cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        bytes as i32,
                    )?;
                }
                funcs.insert(name, f);
            }
            loads.push(ModuleLoad {
                family,
                origin,
                cubin_bytes,
                seconds: compile_s + t0.elapsed().as_secs_f64(),
            });
        }
        Ok(Gpu {
            ctx,
            stream,
            info,
            funcs,
            loads,
        })
    }

    /// Device facts.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// What kernel choice needs to know about this device.
    pub fn facts(&self) -> DeviceFacts {
        DeviceFacts {
            compute_capability: self.info.compute_capability,
            sm_count: self.info.sm_count,
        }
    }

    /// How each family's module was obtained.
    pub fn module_loads(&self) -> &[ModuleLoad] {
        &self.loads
    }

    /// The stream every operation runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// A loaded entry point.
    pub fn function(&self, name: &str) -> Result<&CudaFunction, CudaError> {
        self.funcs
            .get(name)
            .ok_or_else(|| CudaError::MissingKernel(name.to_string()))
    }

    /// Copy a host slice to a new device buffer.
    pub fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>, CudaError> {
        Ok(self.stream.clone_htod(data)?)
    }

    /// A zero-filled device buffer of `len` elements.
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, CudaError> {
        Ok(self.stream.alloc_zeros(len)?)
    }

    /// Overwrite a device buffer with host data of exactly its length.
    pub fn write<T: DeviceRepr>(&self, src: &[T], dst: &mut CudaSlice<T>) -> Result<(), CudaError> {
        if src.len() != dst.len() {
            return Err(shape_err(
                "write",
                format!("{} host values into a buffer of {}", src.len(), dst.len()),
            ));
        }
        Ok(self.stream.memcpy_htod(src, dst)?)
    }

    /// Copy a device buffer back to the host (waits for the stream).
    pub fn download<T: DeviceRepr, S: DevicePtr<T>>(&self, src: &S) -> Result<Vec<T>, CudaError> {
        Ok(self.stream.clone_dtoh(src)?)
    }

    /// Wait for all queued work.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        Ok(self.stream.synchronize()?)
    }
}
