//! The two shared objects as the rest of the project sees them: built by cargo, with the
//! right SONAME, exactly the intended exports, different bytes, and working through their C
//! symbols (dlopen/dlsym, as the harness and the interposer reach them).
//!
//! One test function: it sets environment variables that each library reads once, so it
//! must be alone in its process.

use std::collections::BTreeSet;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr::{null, null_mut};
use tunedblas_core::abi::*;

const EXPECTED_EXPORTS: [&str; 48] = [
    "hipDeviceSynchronize",
    "hipEventCreate",
    "hipEventDestroy",
    "hipEventElapsedTime",
    "hipEventRecord",
    "hipEventSynchronize",
    "hipFree",
    "hipGetDevice",
    "hipGetDeviceCount",
    "hipGraphDestroy",
    "hipGraphExecDestroy",
    "hipGraphInstantiateWithFlags",
    "hipGraphLaunch",
    "hipMalloc",
    "hipMemcpy",
    "hipSetDevice",
    "hipStreamBeginCapture",
    "hipStreamCreate",
    "hipStreamDestroy",
    "hipStreamEndCapture",
    "hipStreamSynchronize",
    "rocblas_create_handle",
    "rocblas_destroy_handle",
    "rocblas_gemm_batched_ex",
    "rocblas_gemm_batched_ex_64",
    "rocblas_gemm_batched_ex_get_solutions",
    "rocblas_gemm_ex",
    "rocblas_gemm_ex_64",
    "rocblas_gemm_ex_get_solutions",
    "rocblas_gemm_ex_get_solutions_by_type",
    "rocblas_gemm_strided_batched_ex",
    "rocblas_gemm_strided_batched_ex_64",
    "rocblas_gemm_strided_batched_ex_get_solutions",
    "rocblas_get_pointer_mode",
    "rocblas_get_stream",
    "rocblas_get_version_string",
    "rocblas_get_version_string_size",
    "rocblas_hgemm",
    "rocblas_hgemm_64",
    "rocblas_hgemm_strided_batched",
    "rocblas_hgemm_strided_batched_64",
    "rocblas_set_pointer_mode",
    "rocblas_set_stream",
    "rocblas_sgemm",
    "rocblas_sgemm_64",
    "rocblas_sgemm_strided_batched",
    "rocblas_sgemm_strided_batched_64",
    "rocblas_status_to_string",
];

/// `target/<profile>` of this test binary (`target/<profile>/deps/<test>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// Builds both cdylibs with the profile this test was built with; returns their paths.
fn build() -> (PathBuf, PathBuf) {
    let dir = profile_dir();
    let target = dir.parent().unwrap();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-q", "-p", "refblas-v4", "-p", "refblas-v5"])
        .arg("--target-dir")
        .arg(target)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if dir.file_name().unwrap() == "release" {
        cmd.arg("--release");
    }
    let st = cmd.status().expect("cannot run cargo");
    assert!(st.success(), "cargo build of the refblas cdylibs failed");
    (dir.join("librocblas_v4.so"), dir.join("librocblas_v5.so"))
}

// ---- a minimal ELF64 reader: SONAME and defined dynamic symbols ---------------------------

fn u16_at(b: &[u8], o: usize) -> usize {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap()) as usize
}
fn u32_at(b: &[u8], o: usize) -> usize {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
fn cstr_at(b: &[u8], o: usize) -> String {
    let end = b[o..].iter().position(|&c| c == 0).unwrap();
    String::from_utf8(b[o..o + end].to_vec()).unwrap()
}

struct Section {
    kind: usize,
    offset: usize,
    size: usize,
    link: usize,
    entsize: usize,
}

fn sections(b: &[u8]) -> Vec<Section> {
    assert_eq!(&b[..4], b"\x7fELF");
    assert_eq!(b[4], 2, "ELF64");
    assert_eq!(b[5], 1, "little-endian");
    let (shoff, shentsize, shnum) = (u64_at(b, 0x28) as usize, u16_at(b, 0x3a), u16_at(b, 0x3c));
    (0..shnum)
        .map(|i| {
            let h = shoff + i * shentsize;
            Section {
                kind: u32_at(b, h + 4),
                offset: u64_at(b, h + 0x18) as usize,
                size: u64_at(b, h + 0x20) as usize,
                link: u32_at(b, h + 0x28),
                entsize: u64_at(b, h + 0x38) as usize,
            }
        })
        .collect()
}

const SHT_DYNSYM: usize = 11;
const SHT_DYNAMIC: usize = 6;
const DT_SONAME: u64 = 14;

fn soname(b: &[u8]) -> Option<String> {
    let secs = sections(b);
    let dynamic = secs.iter().find(|s| s.kind == SHT_DYNAMIC)?;
    let strtab = &secs[dynamic.link];
    (0..dynamic.size / 16).find_map(|i| {
        let e = dynamic.offset + i * 16;
        (u64_at(b, e) == DT_SONAME).then(|| cstr_at(b, strtab.offset + u64_at(b, e + 8) as usize))
    })
}

/// Names of the global or weak symbols the object defines in its dynamic symbol table.
fn defined_exports(b: &[u8]) -> BTreeSet<String> {
    let secs = sections(b);
    let dynsym = secs.iter().find(|s| s.kind == SHT_DYNSYM).unwrap();
    let strtab = &secs[dynsym.link];
    (0..dynsym.size / dynsym.entsize)
        .filter_map(|i| {
            let e = dynsym.offset + i * dynsym.entsize;
            let (name, info, shndx) = (u32_at(b, e), b[e + 4], u16_at(b, e + 6));
            let bind = info >> 4;
            (shndx != 0 && (bind == 1 || bind == 2)).then(|| cstr_at(b, strtab.offset + name))
        })
        .collect()
}

// ---- the library through dlopen ----------------------------------------------------------

struct Lib(*mut c_void);

impl Lib {
    fn open(path: &Path) -> Lib {
        let c = CString::new(path.to_str().unwrap()).unwrap();
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null(), "dlopen {path:?} failed");
        Lib(h)
    }

    /// The symbol as a function pointer of type `F` (a `tunedblas_core::abi` signature).
    fn sym<F: Copy>(&self, name: &str) -> F {
        assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
        let c = CString::new(name).unwrap();
        let p = unsafe { libc::dlsym(self.0, c.as_ptr()) };
        assert!(!p.is_null(), "no symbol {name}");
        unsafe { std::mem::transmute_copy(&p) }
    }
}

/// D = 2 * A * B + 0.5 * C for A = [[1, 2], [3, 4]] (column-major: 1, 3, 2, 4), B = I, C = 1.
const A: [f32; 4] = [1.0, 3.0, 2.0, 4.0];
const B: [f32; 4] = [1.0, 0.0, 0.0, 1.0];
const WANT: [f32; 4] = [2.5, 6.5, 4.5, 8.5];

unsafe fn exercise(lib: &Lib, major: &str, computes: bool) {
    let version_size: GetVersionStringSizeFn = lib.sym("rocblas_get_version_string_size");
    let version: GetVersionStringFn = lib.sym("rocblas_get_version_string");
    let mut n = 0usize;
    assert_eq!(version_size(&mut n), STATUS_SUCCESS);
    let mut buf = vec![0 as c_char; n];
    assert_eq!(version(buf.as_mut_ptr(), n), STATUS_SUCCESS);
    let v = CStr::from_ptr(buf.as_ptr()).to_str().unwrap().to_owned();
    assert!(v.starts_with(major), "{v}");

    let to_string: StatusToStringFn = lib.sym("rocblas_status_to_string");
    assert_eq!(
        CStr::from_ptr(to_string(STATUS_INVALID_VALUE))
            .to_str()
            .unwrap(),
        "rocblas_status_invalid_value"
    );

    let create: CreateHandleFn = lib.sym("rocblas_create_handle");
    let destroy: DestroyHandleFn = lib.sym("rocblas_destroy_handle");
    let mut h: Handle = null_mut();
    assert_eq!(create(&mut h), STATUS_SUCCESS);

    // gemm_ex through the C symbol, heuristic.
    let gemm_ex: GemmExFn<i32> = lib.sym("rocblas_gemm_ex");
    let (alpha, beta) = (2.0f32, 0.5f32);
    let c = [1.0f32; 4];
    let mut d = [0.0f32; 4];
    let f = DT_F32_R;
    let (al, be) = (
        &alpha as *const f32 as *const c_void,
        &beta as *const f32 as *const c_void,
    );
    let (a, b) = (A.as_ptr() as *const c_void, B.as_ptr() as *const c_void);
    // The C argument lists, a matrix (pointer, type, ld) to a line.
    #[rustfmt::skip]
    let run = |d: &mut [f32; 4], algo: i32, index: i32, flags: u32| {
        gemm_ex(
            h, OP_NONE, OP_NONE, 2, 2, 2, al,
            a, f, 2,
            b, f, 2,
            be, c.as_ptr() as *const c_void, f, 2,
            d.as_mut_ptr() as *mut c_void, f, 2,
            f, algo, index, flags,
        )
    };
    assert_eq!(run(&mut d, ALGO_STANDARD, 0, 0), STATUS_SUCCESS);
    if computes {
        assert_eq!(d, WANT);
    } else {
        assert_eq!(d, [0.0; 4], "REFBLAS_NO_COMPUTE computed anyway");
    }

    // The solutions for this problem, each accepted; a made-up one is invalid_value.
    let get: GemmExGetSolutionsFn = lib.sym("rocblas_gemm_ex_get_solutions");
    #[rustfmt::skip]
    let query = |list: *mut i32, size: &mut i32| {
        get(
            h, OP_NONE, OP_NONE, 2, 2, 2, null(),
            null(), f, 2,
            null(), f, 2,
            null(), null(), f, 2,
            null_mut(), f, 2,
            f, ALGO_SOLUTION_INDEX, 0, list, size,
        )
    };
    let mut count = -1;
    assert_eq!(query(null_mut(), &mut count), STATUS_SUCCESS);
    assert!(count >= 3, "{count}");
    let mut ids = vec![0i32; count as usize];
    assert_eq!(query(ids.as_mut_ptr(), &mut count), STATUS_SUCCESS);
    for &id in &ids {
        let mut d = [0.0f32; 4];
        assert_eq!(run(&mut d, ALGO_SOLUTION_INDEX, id, 0), STATUS_SUCCESS);
        if computes {
            assert_eq!(d, WANT, "solution {id}");
        }
    }
    assert_eq!(
        run(&mut d, ALGO_SOLUTION_INDEX, 77777, 0),
        STATUS_INVALID_VALUE
    );
    // Check-only: not traced.
    assert_eq!(
        run(
            &mut d,
            ALGO_SOLUTION_INDEX,
            ids[0],
            FLAG_CHECK_SOLUTION_INDEX
        ),
        STATUS_SUCCESS
    );

    // sgemm_64: C in place.
    let sgemm64: TypedGemmFn<i64> = lib.sym("rocblas_sgemm_64");
    let mut c2 = [1.0f32; 4];
    #[rustfmt::skip]
    let st = sgemm64(
        h, OP_NONE, OP_NONE, 2, 2, 2, al,
        a, 2,
        b, 2,
        be, c2.as_mut_ptr() as *mut c_void, 2,
    );
    assert_eq!(st, STATUS_SUCCESS);
    if computes {
        assert_eq!(c2, WANT);
    }
    assert_eq!(destroy(h), STATUS_SUCCESS);

    // The HIP subset.
    let count_fn: HipGetDeviceCountFn = lib.sym("hipGetDeviceCount");
    let set_device: HipSetDeviceFn = lib.sym("hipSetDevice");
    let malloc: HipMallocFn = lib.sym("hipMalloc");
    let free: HipFreeFn = lib.sym("hipFree");
    let mut devices = 0;
    assert_eq!(count_fn(&mut devices), HIP_SUCCESS);
    assert_eq!(devices, 3, "REFBLAS_DEVICES");
    assert_eq!(set_device(3), 101);
    let mut p: *mut c_void = null_mut();
    assert_eq!(malloc(&mut p, 100), HIP_SUCCESS);
    assert_eq!(p as usize % 256, 0);
    assert_eq!(free(p), HIP_SUCCESS);
}

#[test]
fn shared_objects_build_load_and_compute() {
    let (v4, v5) = build();
    let (b4, b5) = (std::fs::read(&v4).unwrap(), std::fs::read(&v5).unwrap());
    assert_eq!(soname(&b4).as_deref(), Some("librocblas.so.4"));
    assert_eq!(soname(&b5).as_deref(), Some("librocblas.so.5"));
    let expected: BTreeSet<String> = EXPECTED_EXPORTS.iter().map(|s| s.to_string()).collect();
    assert_eq!(defined_exports(&b4), expected);
    assert_eq!(defined_exports(&b5), expected);
    let (h4, h5) = (
        tunedblas_core::identity::sha256_file(&v4).unwrap(),
        tunedblas_core::identity::sha256_file(&v5).unwrap(),
    );
    println!("librocblas_v4.so {h4}\nlibrocblas_v5.so {h5}");
    assert_ne!(h4, h5);

    let dir = std::env::temp_dir().join(format!("refblas-so-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.log");
    // Each library reads these once, at first use.
    std::env::set_var("REFBLAS_TRACE", &trace);
    std::env::set_var("REFBLAS_DEVICES", "3");
    std::env::remove_var("REFBLAS_NO_COMPUTE");
    let lib4 = Lib::open(&v4);
    unsafe { exercise(&lib4, "4.", true) };
    // The 5.x build is loaded after this is set, so it does not compute (its trace still
    // records the calls).
    std::env::set_var("REFBLAS_NO_COMPUTE", "1");
    let lib5 = Lib::open(&v5);
    unsafe { exercise(&lib5, "5.", false) };

    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    println!("{text}");
    // Per library: 1 heuristic gemm_ex, one per listed solution (3 for 2x2: no reg4x4),
    // 1 sgemm_64; the invalid and the check-only calls are not traced.
    assert_eq!(lines.len(), 10, "{text}");
    for l in &lines {
        let keys: Vec<&str> = l.split(' ').map(|f| f.split_once('=').unwrap().0).collect();
        assert_eq!(
            keys,
            [
                "func",
                "solution",
                "heuristic",
                "m",
                "n",
                "k",
                "batch",
                "lib"
            ],
            "{l}"
        );
        assert!(
            l.ends_with("m=2 n=2 k=2 batch=1 lib=librocblas.so.4")
                || l.ends_with("m=2 n=2 k=2 batch=1 lib=librocblas.so.5"),
            "{l}"
        );
    }
    // V4 f32 solutions are 13..=16; the heuristic takes the naive kernel (13) for 2x2x2.
    assert_eq!(
        lines[0],
        "func=rocblas_gemm_ex solution=13 heuristic=1 m=2 n=2 k=2 batch=1 lib=librocblas.so.4"
    );
    assert!(lines.contains(
        &"func=rocblas_sgemm_64 solution=13 heuristic=1 m=2 n=2 k=2 batch=1 lib=librocblas.so.4"
    ));
    assert!(lines.contains(
        &"func=rocblas_gemm_ex solution=-2 heuristic=1 m=2 n=2 k=2 batch=1 lib=librocblas.so.5"
    ));
    assert!(lines.contains(
        &"func=rocblas_gemm_ex solution=-2 heuristic=0 m=2 n=2 k=2 batch=1 lib=librocblas.so.5"
    ));
    let heuristic_lines = lines.iter().filter(|l| l.contains("heuristic=1")).count();
    assert_eq!(heuristic_lines, 4, "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
