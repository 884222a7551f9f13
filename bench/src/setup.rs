//! The benchmark's world: the shapes of each path, a work folder with refblas under
//! rocBLAS's name, and a profile made for that build.

use std::ffi::c_void;
use std::path::{Path, PathBuf};

use tunedblas_core::abi::*;
use tunedblas_core::key::{ProblemKey, Trans, Types};
use tunedblas_core::tunableop;

use crate::ffi::Lib;

/// Every benchmark call is `gemm_ex(T, N, m = 64, n, k = 64)`, f16 in and out, f32 compute,
/// packed leading dimensions; `n` tells the paths apart.
pub const M: i32 = 64;
pub const K: i32 = 64;
pub const N_SERVED: i32 = 16;
pub const N_DEFAULT: i32 = 32;
pub const N_MISS: i32 = 48;
/// First-sight misses use n = FIRST_SIGHT_BASE + i, never seen before.
pub const FIRST_SIGHT_BASE: i32 = 100_000;
/// Rows in the profile besides the two the paths hit, so lookups run in a table of a
/// realistic size (the real profiles in `fixtures/` hold about 1,600 rows per rank).
pub const FILLER_ROWS: i64 = 1_600;

pub fn key(n: i64) -> ProblemKey {
    let (m, k) = (M as i64, K as i64);
    ProblemKey::single(
        Trans::T,
        Trans::N,
        Types::uniform(DT_F16_R, DT_F32_R),
        m,
        n,
        k,
        k,
        k,
        m,
        m,
        FLAG_NONE,
    )
}

/// The work folder: `lib/librocblas.so.4` (a copy of refblas), `profiles/`, caches.
pub struct Work {
    pub dir: PathBuf,
    pub lib: PathBuf,
    pub profiles: PathBuf,
}

impl Work {
    pub fn create(target: &Path) -> Result<Work, String> {
        let dir = std::env::temp_dir().join(format!("tunedblas-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let libdir = dir.join("lib");
        std::fs::create_dir_all(&libdir).map_err(|e| e.to_string())?;
        let lib = libdir.join("librocblas.so.4");
        std::fs::copy(target.join("librocblas_v4.so"), &lib)
            .map_err(|e| format!("copy librocblas_v4.so: {e}"))?;
        Ok(Work {
            profiles: dir.join("profiles"),
            dir,
            lib,
        })
    }

    /// Writes `profiles.json` and one rank file: the served row, the `Default` row and
    /// [`FILLER_ROWS`] others.
    pub fn write_profile(&self, sha256: &str, solution: i32) -> Result<(), String> {
        let pdir = self.profiles.join("bench");
        std::fs::create_dir_all(&pdir).map_err(|e| e.to_string())?;
        let registry = format!(
            "{{\"profiles\":{{\"bench\":{{\"dir\":\"bench\",\"lib_sha256\":\"{sha256}\"}}}}}}\n"
        );
        std::fs::write(self.profiles.join("profiles.json"), registry).map_err(|e| e.to_string())?;
        let mut text = String::new();
        let mut row = |key: &ProblemKey, sol: &str| {
            let (op, sig) = tunableop::op_and_signature(key);
            text.push_str(&format!("{op},{sig},{sol},0.01\n"));
        };
        row(&key(N_SERVED as i64), &format!("Gemm_Rocblas_{solution}"));
        row(&key(N_DEFAULT as i64), "Default");
        for i in 0..FILLER_ROWS {
            let m = 128 + 64 * (i % 8);
            let filler = ProblemKey {
                m,
                ldc: m,
                ldd: m,
                ..key(1_000 + i)
            };
            if i % 3 == 0 {
                row(&filler, "Default");
            } else {
                row(&filler, &format!("Gemm_Rocblas_{solution}"));
            }
        }
        std::fs::write(pdir.join("tunableop_results0.csv"), text).map_err(|e| e.to_string())
    }
}

/// The real profile the start-up is measured with: ranks 0 and 2 of the 1,601-row
/// `rocm7.14-rocblas5.5` profile from `tests/fixtures/vllm-rdna` (real data; see its
/// SOURCE.md), registered for refblas's hash, each with the served and `Default` rows
/// added so the first call is served. Returns the profile folder and a description.
pub fn write_startup_profile(
    work: &Work,
    sha256: &str,
    solution: i32,
) -> Result<(PathBuf, String), String> {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/vllm-rdna/rocm7.14-rocblas5.5");
    let root = work.dir.join("profiles-real");
    let pdir = root.join("real");
    std::fs::create_dir_all(&pdir).map_err(|e| e.to_string())?;
    let registry =
        format!("{{\"profiles\":{{\"real\":{{\"dir\":\"real\",\"lib_sha256\":\"{sha256}\"}}}}}}\n");
    std::fs::write(root.join("profiles.json"), registry).map_err(|e| e.to_string())?;
    let mut ours = String::new();
    for (n, sol) in [
        (N_SERVED, format!("Gemm_Rocblas_{solution}")),
        (N_DEFAULT, "Default".into()),
    ] {
        let (op, sig) = tunableop::op_and_signature(&key(n as i64));
        ours.push_str(&format!("{op},{sig},{sol},0.01\n"));
    }
    for rank in [0, 2] {
        let name = format!("tunableop_results{rank}.csv");
        let text = std::fs::read_to_string(fixture.join(&name))
            .map_err(|e| format!("{}: {e}", fixture.join(&name).display()))?;
        std::fs::write(pdir.join(&name), text + &ours).map_err(|e| e.to_string())?;
    }
    Ok((
        root,
        "ranks 0 and 2 of the real 1,601-row profile `rocm7.14-rocblas5.5` (tests/fixtures/vllm-rdna), two rank files of 1,603 rows, of which start-up reads the calling device's".into(),
    ))
}

/// A solution refblas offers for the served shape, asked of the library itself.
pub fn served_solution(lib: &Path) -> Result<i32, String> {
    let lib = Lib::open(lib, libc::RTLD_NOW | libc::RTLD_LOCAL)?;
    // SAFETY: the signatures are rocBLAS's (src/abi.rs).
    let (create, query) = unsafe {
        (
            lib.func::<CreateHandleFn>(c"rocblas_create_handle")?,
            lib.func::<GemmExGetSolutionsFn>(c"rocblas_gemm_ex_get_solutions")?,
        )
    };
    let mut h: Handle = std::ptr::null_mut();
    // SAFETY: out-pointer to a handle.
    if unsafe { create(&mut h) } != STATUS_SUCCESS {
        return Err("rocblas_create_handle failed".into());
    }
    let one = 1.0f32;
    let none: *const c_void = std::ptr::null();
    let mut list = [0i32; 64];
    let mut size = list.len() as i32;
    // SAFETY: a query with host scalars and a list of `size` entries; no buffer is read.
    let status = unsafe {
        query(
            h,
            OP_TRANSPOSE,
            OP_NONE,
            M,
            N_SERVED,
            K,
            (&one as *const f32).cast(),
            none,
            DT_F16_R,
            K,
            none,
            DT_F16_R,
            K,
            (&one as *const f32).cast(),
            none,
            DT_F16_R,
            M,
            std::ptr::null_mut(),
            DT_F16_R,
            M,
            DT_F32_R,
            ALGO_SOLUTION_INDEX,
            FLAG_NONE,
            list.as_mut_ptr(),
            &mut size,
        )
    };
    if status != STATUS_SUCCESS || size < 1 {
        return Err(format!(
            "rocblas_gemm_ex_get_solutions: status {status}, {size} solutions"
        ));
    }
    Ok(list[(size as usize).min(list.len()) - 1])
}
