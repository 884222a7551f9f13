//! The hipBLASLt stand-in itself (`tests/hosts/fake_hipblaslt.cpp`), no preload: the test
//! host runs on it, it exports the `hipblaslt_ext` C++ functions under the mangled names of
//! `src/abi.rs`, and it keeps the rules its header states, which the interposer's hipBLASLt
//! tests rely on. The C++ functions are called here as the interposer calls them: through
//! `dlsym`, with libstdc++'s `std::vector` laid out by hand.

mod common;

use std::ffi::{c_void, CString};
use std::process::Command;

use common::build::hiplt;
use common::{host_env, scratch, text};
use tunedblas_core::abi::{
    self, HipblasLtMatmulAlgo as Algo, HipblasLtMatmulHeuristicResult as Heur,
};

#[test]
fn the_host_runs_the_heuristics_algorithm_on_the_stand_in() {
    let dir = scratch("hiplt-standin-host");
    let mut cmd = Command::new(&hiplt().host);
    cmd.arg(&hiplt().module).args(["2560,16,1536", "8,8,8,0,1"]);
    host_env(&mut cmd, &dir, false);
    cmd.env_remove("REFBLAS_TRACE")
        .env_remove("FAKEHIPLT_CANCEL_POINT")
        .env("FAKEHIPLT_TRACE", dir.join("trace.log"));
    let out = cmd.output().expect("run hiplt_host");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["call=2560,16,1536 status=0", "call=8,8,8,0,1 status=0"]
    );
    // F.linear(x[16,1536], W[2560,1536]) is D[2560,16]; the heuristic's algorithm copes
    // with the misaligned A of the second call.
    let trace = std::fs::read_to_string(dir.join("trace.log")).unwrap_or_default();
    assert_eq!(
        trace.lines().collect::<Vec<_>>(),
        [
            "matmul m=2560 n=16 k=1536 algo=6 ok=1",
            "matmul m=8 n=8 k=8 algo=6 ok=1",
        ]
    );
}

#[test]
fn the_stand_in_exports_the_mangled_names_of_src_abi() {
    let lib = hiplt().lib();
    for name in [
        abi::HIPBLASLT_EXT_GET_ALL_ALGOS,
        abi::HIPBLASLT_EXT_GET_INDEX_FROM_ALGO,
        abi::HIPBLASLT_EXT_GET_ALGOS_FROM_INDEX,
        abi::HIPBLASLT_EXT_MATMUL_IS_ALGO_SUPPORTED,
        "hipblasLtMatmul",
        "hipblasLtMatmulAlgoGetHeuristic",
    ] {
        let found = tunedblas_core::elf::defines(&lib, name).unwrap();
        assert!(found, "{} does not export {name}", lib.display());
    }
}

/// libstdc++'s `std::vector<T>`: begin, end, end of storage; all null when empty.
#[repr(C)]
struct StdVector<T> {
    begin: *mut T,
    end: *mut T,
    cap: *mut T,
}

impl<T: Copy> StdVector<T> {
    fn empty() -> Self {
        StdVector {
            begin: std::ptr::null_mut(),
            end: std::ptr::null_mut(),
            cap: std::ptr::null_mut(),
        }
    }

    /// A vector over `items`, which the callee only reads.
    fn over(items: &mut [T]) -> Self {
        let range = items.as_mut_ptr_range();
        StdVector {
            begin: range.start,
            end: range.end,
            cap: range.end,
        }
    }

    fn items(&self) -> Vec<T> {
        if self.begin.is_null() {
            return Vec::new();
        }
        // SAFETY: libstdc++ keeps begin..end initialized elements of one allocation.
        unsafe { std::slice::from_raw_parts(self.begin, self.end.offset_from(self.begin) as usize) }
            .to_vec()
    }
}

type Handle = *mut c_void;
type GetAllAlgos = unsafe extern "C" fn(
    Handle,
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
    *mut StdVector<Heur>,
) -> i32;
type GetIndexFromAlgo = unsafe extern "C" fn(*mut Algo) -> i32;
type GetAlgosFromIndex =
    unsafe extern "C" fn(Handle, *mut StdVector<i32>, *mut StdVector<Heur>) -> i32;
type IsAlgoSupported = unsafe extern "C" fn(
    Handle,
    Handle,
    *const c_void,
    Handle,
    Handle,
    *const c_void,
    Handle,
    Handle,
    *mut Algo,
    *mut usize,
) -> i32;
type DescCreate = unsafe extern "C" fn(*mut Handle, i32, i32) -> i32;
type DescGet = unsafe extern "C" fn(Handle, i32, *mut c_void, usize, *mut usize) -> i32;
type DescSet = unsafe extern "C" fn(Handle, i32, *const c_void, usize) -> i32;
type LayoutCreate = unsafe extern "C" fn(*mut Handle, i32, u64, u64, i64) -> i32;
type Delete = unsafe extern "C" fn(*mut c_void);

/// The stand-in, loaded here (RTLD_LOCAL): its symbols, found as the interposer finds them.
struct Lib(*mut c_void);

impl Lib {
    fn open() -> Lib {
        let path = CString::new(hiplt().lib().to_str().unwrap()).unwrap();
        // SAFETY: loading the stand-in, whose constructors are libstdc++'s.
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null(), "dlopen {path:?}");
        Lib(h)
    }

    /// The function `name`, as the type `F` the caller names.
    fn sym<F: Copy>(&self, name: &str) -> F {
        let c = CString::new(name).unwrap();
        // SAFETY: a lookup in a handle this test holds.
        let p = unsafe { libc::dlsym(self.0, c.as_ptr()) };
        assert!(!p.is_null(), "the stand-in has no {name}");
        assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
        // SAFETY: F is the function pointer type of the symbol (the caller's word).
        unsafe { std::mem::transmute_copy(&p) }
    }
}

fn index_of(lib: &Lib, mut algo: Algo) -> i32 {
    let f: GetIndexFromAlgo = lib.sym(abi::HIPBLASLT_EXT_GET_INDEX_FROM_ALGO);
    // SAFETY: the stand-in reads the algo it is given.
    unsafe { f(&mut algo) }
}

/// (index, workspace the result says) of each result, freeing the vector as `operator
/// delete`.
fn take(lib: &Lib, v: StdVector<Heur>) -> Vec<(i32, usize)> {
    let items = v.items();
    assert!(!v.begin.is_null(), "the stand-in allocates the vector");
    for r in &items {
        assert_eq!(r.workspace_size, r.algo.max_workspace_bytes);
        assert_eq!(r.state, abi::HIPBLAS_STATUS_SUCCESS);
    }
    let delete: Delete = lib.sym("_ZdlPv");
    // SAFETY: libstdc++ allocated the storage with operator new.
    unsafe { delete(v.begin.cast()) };
    items
        .iter()
        .map(|r| (index_of(lib, r.algo), r.workspace_size))
        .collect()
}

#[test]
fn the_stand_in_keeps_the_rules_of_its_header() {
    const INVALID: i32 = abi::HIPBLAS_STATUS_INVALID_VALUE;
    const NOT_SUPPORTED: i32 = abi::HIPBLAS_STATUS_NOT_SUPPORTED;
    const EXECUTION_FAILED: i32 = 5;
    let lib = Lib::open();
    let create: abi::HipblasLtCreateFn = lib.sym("hipblasLtCreate");
    let mut h: Handle = std::ptr::null_mut();
    // SAFETY: every call below passes what the stand-in's C and C++ prototypes take.
    unsafe {
        assert_eq!(create(&mut h), 0);

        // getAllAlgos: indices 0..=9, 500, 998, 999; the ones >= 500 need 4096 bytes.
        let all: GetAllAlgos = lib.sym(abi::HIPBLASLT_EXT_GET_ALL_ALGOS);
        let mut v = StdVector::empty();
        let (n, bf16, f32_, c32) = (abi::HIPBLAS_OP_N, abi::HIP_R_16BF, abi::HIP_R_32F, 2);
        assert_eq!(all(h, 1, n, n, bf16, bf16, bf16, bf16, c32, &mut v), 0);
        let mut want: Vec<(i32, usize)> = (0..10).map(|i| (i, 0)).collect();
        want.extend([(500, 4096), (998, 4096), (999, 4096)]);
        assert_eq!(take(&lib, v), want);

        // getAlgosFromIndex skips what is not an index.
        let from: GetAlgosFromIndex = lib.sym(abi::HIPBLASLT_EXT_GET_ALGOS_FROM_INDEX);
        let mut asked = [5, -1, 2000, 999, 500, 6, 998];
        let mut v = StdVector::empty();
        assert_eq!(from(h, &mut StdVector::over(&mut asked), &mut v), 0);
        let results = v.items();
        let got = take(&lib, v);
        assert_eq!(
            got.iter().map(|r| r.0).collect::<Vec<_>>(),
            [5, 999, 500, 6, 998]
        );
        // The algo of an index, as getAlgosFromIndex made it.
        let algo = |index: i32| results[got.iter().position(|r| r.0 == index).unwrap()].algo;
        let garbage = Algo {
            data: [0xab; 16],
            max_workspace_bytes: 0,
        };
        assert_eq!(index_of(&lib, garbage), -1);

        // A TN problem D[64,8] = A^T[64,32] B[32,8], as the host's F.linear.
        let desc_create: DescCreate = lib.sym("hipblasLtMatmulDescCreate");
        let desc_set: DescSet = lib.sym("hipblasLtMatmulDescSetAttribute");
        let desc_get: DescGet = lib.sym("hipblasLtMatmulDescGetAttribute");
        let layout: LayoutCreate = lib.sym("hipblasLtMatrixLayoutCreate");
        let mut desc: Handle = std::ptr::null_mut();
        assert_eq!(desc_create(&mut desc, c32, f32_), 0);
        let (mut trans, mut size) = (0i32, 0usize);
        assert_eq!(
            desc_get(
                desc,
                abi::HIPBLASLT_MATMUL_DESC_TRANSA,
                std::ptr::null_mut(),
                0,
                &mut size
            ),
            0
        );
        assert_eq!(size, 4);
        assert_eq!(
            desc_get(
                desc,
                abi::HIPBLASLT_MATMUL_DESC_TRANSA,
                (&raw mut trans).cast(),
                4,
                &mut size
            ),
            0
        );
        assert_eq!(trans, abi::HIPBLAS_OP_N);
        // Attribute numbers that are not TRANSA..BIAS_DATA_TYPE or POINTER_MODE: nothing
        // there reads back the compute or scale type.
        for attr in (5..13).chain(14..40) {
            assert_eq!(
                desc_get(desc, attr, (&raw mut trans).cast(), 4, &mut size),
                INVALID,
                "attribute {attr}"
            );
        }
        let t = abi::HIPBLAS_OP_T;
        assert_eq!(
            desc_set(
                desc,
                abi::HIPBLASLT_MATMUL_DESC_TRANSA,
                (&raw const t).cast(),
                4
            ),
            0
        );
        let (mut a, mut b, mut c) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        assert_eq!(layout(&mut a, bf16, 32, 64, 32), 0);
        assert_eq!(layout(&mut b, bf16, 32, 8, 32), 0);
        assert_eq!(layout(&mut c, bf16, 64, 8, 64), 0);

        // matmulIsAlgoSupported: the workspace an index needs; 999 and garbage refused;
        // layouts that disagree with the transposes refused.
        let supported: IsAlgoSupported = lib.sym(abi::HIPBLASLT_EXT_MATMUL_IS_ALGO_SUPPORTED);
        let one = 1f32;
        let alpha: *const c_void = (&raw const one).cast();
        let check = |mut algo: Algo, a: Handle| {
            let mut ws = 7usize;
            let st = supported(h, desc, alpha, a, b, alpha, c, c, &mut algo, &mut ws);
            (st, ws)
        };
        assert_eq!(check(algo(5), a), (0, 0));
        assert_eq!(check(algo(500), a), (0, 4096));
        assert_eq!(check(algo(5), b).0, INVALID, "B's layout as A's");
        assert_eq!(check(algo(999), a).0, NOT_SUPPORTED);
        assert_eq!(check(garbage, a).0, INVALID);

        // hipblasLtMatmul: workspace, alignment, 998, garbage.
        let matmul: abi::HipblasLtMatmulFn = lib.sym("hipblasLtMatmul");
        let mut buf = vec![0u128; 1024];
        let p = buf.as_mut_ptr().cast::<u8>();
        let run = |algo: Option<Algo>, misalign: usize, ws: usize| {
            let algo_ptr = algo.as_ref().map_or(std::ptr::null(), |x| x as *const Algo);
            let ws_ptr = if ws > 0 {
                p.add(4096).cast()
            } else {
                std::ptr::null_mut()
            };
            matmul(
                h,
                desc,
                alpha,
                p.add(misalign).cast(),
                a,
                p.cast(),
                b,
                alpha,
                p.cast(),
                c,
                p.cast(),
                c,
                algo_ptr,
                ws_ptr,
                ws,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(run(Some(algo(5)), 0, 0), 0);
        assert_eq!(run(Some(algo(5)), 2, 0), INVALID);
        assert_eq!(
            run(Some(algo(6)), 2, 0),
            0,
            "the heuristic's algo copes with misalignment"
        );
        assert_eq!(run(None, 2, 0), 0);
        assert_eq!(run(Some(algo(500)), 0, 0), INVALID, "500 needs a workspace");
        assert_eq!(run(Some(algo(500)), 0, 4095), INVALID);
        assert_eq!(run(Some(algo(500)), 0, 4096), 0);
        assert_eq!(run(Some(algo(998)), 0, 4096), EXECUTION_FAILED);
        assert_eq!(
            run(Some(algo(999)), 0, 4096),
            0,
            "only matmulIsAlgoSupported refuses 999"
        );
        assert_eq!(run(Some(garbage), 0, 4096), INVALID);
        drop(buf);
        let destroy: abi::HipblasLtDestroyFn = lib.sym("hipblasLtDestroy");
        assert_eq!(destroy(h), 0);
    }
}
