//! The per-call measurement, run in a child process under `LD_PRELOAD=libtunedblas.so`.
//!
//! The same `rocblas_gemm_ex` is reached two ways in one process: straight into refblas
//! (`dlsym` on refblas's handle: the "direct" baseline) and through the interposer
//! (`dlsym(RTLD_DEFAULT)`, which finds the preload's export first). refblas runs with
//! `REFBLAS_NO_COMPUTE=return`, so its entry returns at once and what is left is the call
//! itself, identical on both ways; the difference is what the interposer adds.
//!
//! Paths are interleaved in short blocks, rotating the order every round, so drifting
//! machine load hits every path alike. Each sample times 16 back-to-back calls (one clock
//! read costs about as much as the thing measured), giving a per-call time; the median and
//! the 99th percentile are over those samples.

use std::ffi::c_void;
use std::hint::black_box;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use tunedblas_core::abi::*;

use crate::ffi::{self, Lib};
use crate::setup::{FIRST_SIGHT_BASE, K, M, N_DEFAULT, N_MISS, N_SERVED};
use crate::stat::{median, quantile};

/// Raw pointers the calls carry; refblas in return mode reads none of them.
#[derive(Clone, Copy)]
struct Ctx {
    handle: Handle,
    scalar: *const c_void,
    buf: *mut c_void,
}
// SAFETY: the pointers are never dereferenced by refblas in return mode, and the handle may
// be shared between threads for calls (rocBLAS allows it; refblas only reads it).
unsafe impl Send for Ctx {}
unsafe impl Sync for Ctx {}

impl Ctx {
    /// A handle from `create`, and an f32 scalar of 1 and a buffer that live to the end of
    /// the run.
    fn new(create: CreateHandleFn) -> Result<Ctx, String> {
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a handle.
        if unsafe { create(&mut handle) } != STATUS_SUCCESS {
            return Err("rocblas_create_handle failed".into());
        }
        Ok(Ctx {
            handle,
            scalar: Box::leak(Box::new(1.0f32)) as *const f32 as *const c_void,
            buf: Box::leak(vec![0u64; 1024].into_boxed_slice()).as_mut_ptr() as *mut c_void,
        })
    }
}

/// The rows of the other build in `--compare` mode.
const OTHER_NAMES: [&str; 4] = [
    "served row, other build",
    "`Default` row, other build",
    "repeat miss, other build",
    "pass-through, other build",
];

/// One way of calling.
#[derive(Clone, Copy)]
struct Path {
    name: &'static str,
    f: GemmExFn<i32>,
    n: i32,
    algo: GemmAlgo,
    solution: i32,
    /// Added-time budget, ns per call (None: no budget).
    budget: Option<f64>,
}

impl Path {
    #[inline(always)]
    fn call(&self, c: &Ctx, n: i32) -> Status {
        // SAFETY: a well-formed gemm_ex call; see Ctx.
        unsafe {
            (self.f)(
                c.handle,
                OP_TRANSPOSE,
                OP_NONE,
                M,
                n,
                K,
                c.scalar,
                c.buf,
                DT_F16_R,
                K,
                c.buf,
                DT_F16_R,
                K,
                c.scalar,
                c.buf,
                DT_F16_R,
                M,
                c.buf,
                DT_F16_R,
                M,
                DT_F32_R,
                self.algo,
                self.solution,
                FLAG_NONE,
            )
        }
    }

    #[inline(never)]
    fn run(&self, c: &Ctx, reps: u64) {
        for _ in 0..reps {
            black_box(self.call(c, black_box(self.n)));
        }
    }
}

const BATCH: u64 = 16;

pub struct Settings {
    pub rounds: usize,
    pub samples: usize,
    pub thread_rounds: usize,
    pub thread_calls: u64,
    pub first_sights: usize,
    /// Another build of the interposer to measure beside this one.
    pub compare: Option<std::path::PathBuf>,
}

struct Workers {
    jobs: Vec<Sender<(Path, u64, Arc<Barrier>)>>,
    /// Per job: wall seconds and the thread's CPU seconds.
    done: Receiver<(f64, f64)>,
}

/// CPU seconds the calling thread has run: unlike the wall clock, it does not count time
/// the thread spent waiting for a core that another process held.
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Two threads that live for the whole run (as a server's do) and run one job at a time.
fn workers(ctx: Ctx) -> Workers {
    let (done_tx, done) = channel();
    let jobs = (0..2)
        .map(|_| {
            let (tx, rx) = channel::<(Path, u64, Arc<Barrier>)>();
            let done_tx = done_tx.clone();
            std::thread::spawn(move || {
                let ctx = ctx;
                for (path, calls, barrier) in rx {
                    barrier.wait();
                    let (t, cpu) = (Instant::now(), thread_cpu());
                    path.run(&ctx, calls);
                    let _ = done_tx.send((t.elapsed().as_secs_f64(), thread_cpu() - cpu));
                }
            });
            tx
        })
        .collect();
    Workers { jobs, done }
}

impl Workers {
    /// Calls per second of `threads` workers running `calls` each at once: by the wall
    /// clock, and by each thread's CPU time (summed over the threads).
    fn rate(&self, path: Path, threads: usize, calls: u64) -> (f64, f64) {
        let barrier = Arc::new(Barrier::new(threads));
        for tx in &self.jobs[..threads] {
            tx.send((path, calls, barrier.clone()))
                .expect("worker alive");
        }
        let done: Vec<(f64, f64)> = (0..threads)
            .map(|_| self.done.recv().expect("worker alive"))
            .collect();
        let slowest = done.iter().map(|d| d.0).fold(0.0, f64::max);
        let cpu_rate = done.iter().map(|d| calls as f64 / d.1).sum();
        ((threads as u64 * calls) as f64 / slowest, cpu_rate)
    }
}

/// The per-call benchmark: every path measured interleaved on one thread, first-sight
/// misses, one thread against two, then the calls each path made (for the parent to check
/// against the interposer's own counters).
pub fn main(lib_path: &std::path::Path, solution: i32, s: &Settings) -> Result<(), String> {
    let (_lib, ctx, mut paths) = set_up(lib_path, solution)?;
    // Holds the other build's handle until the rounds are over (it is never closed).
    let _other_lib = match &s.compare {
        Some(other) => Some(add_other_build(other, &ctx, &mut paths)?),
        None => None,
    };
    let mut calls = vec![1000u64; paths.len()];
    one_thread(&ctx, &paths, s, &mut calls);
    first_sights(&ctx, &paths, s, &mut calls);
    one_thread_vs_two(ctx, &paths, s, &mut calls);
    // What this process made of each path, for the parent to compare with the interposer's
    // own counters (TUNEDBLAS_STATS): every call must have taken the path it was meant to.
    println!(
        "counts served={} default={} missed={} passed={} direct={}",
        calls[1],
        calls[2],
        calls[3] + s.first_sights as u64,
        calls[4],
        calls[0]
    );
    if paths.len() > MAIN_PATHS {
        println!(
            "counts-other served={} default={} missed={} passed={}",
            calls[5], calls[6], calls[7], calls[8]
        );
    }
    Ok(())
}

/// The paths of this build (direct, served, `Default`, repeat miss, pass-through).
const MAIN_PATHS: usize = 5;

/// Opens refblas and the preload's entry point, makes a handle, and warms every path up
/// (start-up happens on the first intercepted call; the miss is then a repeat one).
fn set_up(lib_path: &std::path::Path, solution: i32) -> Result<(Lib, Ctx, Vec<Path>), String> {
    let lib = Lib::open(lib_path, libc::RTLD_NOW | libc::RTLD_GLOBAL)?;
    // SAFETY: rocBLAS's signatures (src/abi.rs).
    let (direct, create) = unsafe {
        (
            lib.func::<GemmExFn<i32>>(c"rocblas_gemm_ex")?,
            lib.func::<CreateHandleFn>(c"rocblas_create_handle")?,
        )
    };
    // SAFETY: as above.
    let (via, via_addr) = unsafe { ffi::global_func::<GemmExFn<i32>>(c"rocblas_gemm_ex")? };
    let via_file = ffi::file_of(via_addr);
    let preload = std::env::var("LD_PRELOAD").unwrap_or_default();
    if via as usize == direct as usize || preload.is_empty() || !preload.contains(&via_file) {
        return Err(format!(
            "rocblas_gemm_ex resolves to {via_file}, not to the preload: run under LD_PRELOAD=libtunedblas.so"
        ));
    }
    let ctx = Ctx::new(create)?;
    let path = |name, f, n, algo, solution, budget| Path {
        name,
        f,
        n,
        algo,
        solution,
        budget,
    };
    let paths = vec![
        path("direct (refblas)", direct, N_SERVED, ALGO_STANDARD, 0, None),
        path("served row", via, N_SERVED, ALGO_STANDARD, 0, Some(15.0)),
        path(
            "`Default` row",
            via,
            N_DEFAULT,
            ALGO_STANDARD,
            0,
            Some(15.0),
        ),
        path("repeat miss", via, N_MISS, ALGO_STANDARD, 0, Some(30.0)),
        path(
            "pass-through",
            via,
            N_SERVED,
            ALGO_SOLUTION_INDEX,
            solution,
            Some(8.0),
        ),
    ];
    // A null handle is invalid_handle for any real rocBLAS; only return mode says success.
    let probe = Ctx {
        handle: std::ptr::null_mut(),
        ..ctx
    };
    if paths[0].call(&probe, N_SERVED) != STATUS_SUCCESS {
        return Err("refblas validates its arguments: set REFBLAS_NO_COMPUTE=return".into());
    }
    for p in &paths {
        p.run(&ctx, 1000);
    }
    Ok((lib, ctx, paths))
}

/// --compare: another build of the interposer, loaded beside the preload with dlopen and
/// measured in the same rounds, so before/after figures share every disturbance. It reads
/// the same settings, except that it writes its counters to a file of its own. Its paths
/// (all but direct) are appended to `paths`; returns its library, which must stay open.
fn add_other_build(
    other: &std::path::Path,
    ctx: &Ctx,
    paths: &mut Vec<Path>,
) -> Result<Lib, String> {
    let lib = Lib::open(other, libc::RTLD_NOW | libc::RTLD_LOCAL)?;
    // SAFETY: the other build exports rocblas_gemm_ex with rocBLAS's signature.
    let f = unsafe { lib.func::<GemmExFn<i32>>(c"rocblas_gemm_ex")? };
    let stats = std::env::var_os("TUNEDBLAS_STATS");
    if let Some(path) = &stats {
        let mut other_stats = path.clone();
        other_stats.push(".other");
        std::env::set_var("TUNEDBLAS_STATS", other_stats);
    }
    let main = paths.clone();
    for p in &main[1..] {
        let q = Path {
            name: OTHER_NAMES[paths.len() - main.len()],
            f,
            budget: None,
            ..*p
        };
        q.run(ctx, 1000);
        paths.push(q);
    }
    if let Some(path) = stats {
        std::env::set_var("TUNEDBLAS_STATS", path);
    }
    Ok(lib)
}

/// Every path on one thread, interleaved round by round; prints the per-call table.
fn one_thread(ctx: &Ctx, paths: &[Path], s: &Settings, calls: &mut [u64]) {
    let mut all: Vec<Vec<f64>> = vec![Vec::with_capacity(s.rounds * s.samples); paths.len()];
    let mut per_round: Vec<Vec<f64>> = vec![Vec::with_capacity(s.rounds); paths.len()];
    let mut block = Vec::with_capacity(s.samples);
    for r in 0..s.rounds {
        for j in 0..paths.len() {
            let i = (r + j) % paths.len();
            block.clear();
            for _ in 0..s.samples {
                let t = Instant::now();
                paths[i].run(ctx, BATCH);
                block.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
            }
            calls[i] += BATCH * s.samples as u64;
            all[i].extend_from_slice(&block);
            per_round[i].push(median(&mut block));
        }
    }
    let direct_rounds = per_round[0].clone();
    let direct_p99 = quantile(&mut all[0].clone(), 0.99);
    println!("### Per call, one thread");
    println!();
    println!(
        "{} rounds x {} samples x {BATCH} calls per path, interleaved. ns per call; \"added\" is the median over rounds of (path - direct) and p99(path) - p99(direct).",
        s.rounds, s.samples
    );
    println!();
    println!("| path | median | p99 | p99/median | added median | added p99 | budget (added) | |");
    println!("|---|---|---|---|---|---|---|---|");
    for (i, p) in paths.iter().enumerate() {
        let med = median(&mut all[i]);
        let p99 = quantile(&mut all[i], 0.99);
        let mut diffs: Vec<f64> = per_round[i]
            .iter()
            .zip(&direct_rounds)
            .map(|(a, b)| a - b)
            .collect();
        let added = median(&mut diffs);
        let added_p99 = p99 - direct_p99;
        let (budget, verdict) = match p.budget {
            None => ("—".to_string(), ""),
            Some(b) => {
                let ok = added <= b && p99 < 5.0 * med;
                (format!("<= {b} ns"), if ok { "met" } else { "OVER" })
            }
        };
        let (added, added_p99) = if i == 0 {
            ("—".to_string(), "—".to_string())
        } else {
            (format!("{added:.1}"), format!("{added_p99:.1}"))
        };
        println!(
            "| {} | {med:.1} | {p99:.1} | {:.2} | {added} | {added_p99} | {budget} | {verdict} |",
            p.name,
            p99 / med
        );
    }
    println!();
}

/// Shapes never seen, each call timed alone against the direct call of the same shape.
fn first_sights(ctx: &Ctx, paths: &[Path], s: &Settings, calls: &mut [u64]) {
    let mut first = Vec::with_capacity(s.first_sights);
    let mut base = Vec::with_capacity(s.first_sights);
    for i in 0..s.first_sights {
        let n = FIRST_SIGHT_BASE + i as i32;
        let t = Instant::now();
        black_box(paths[0].call(ctx, n));
        base.push(t.elapsed().as_nanos() as f64);
        let t = Instant::now();
        black_box(paths[1].call(ctx, n));
        first.push(t.elapsed().as_nanos() as f64);
    }
    calls[0] += s.first_sights as u64;
    let (fm, fp) = (median(&mut first.clone()), quantile(&mut first, 0.99));
    let bm = median(&mut base);
    println!("### First-sight miss (a shape never seen: one append to the miss log)");
    println!();
    println!(
        "{} new shapes, each call timed alone: median {fm:.0} ns, p99 {fp:.0} ns per call; added median {:.0} ns (no budget: it happens once per shape).",
        s.first_sights,
        fm - bm
    );
    println!();
}

/// What the live status costs the threads that make GEMMs (they write it, about once a
/// second while calls arrive: `preload/src/status.rs`): `shapes` missed shapes first (so the
/// files list them), then served calls for `seconds`. Prints the calls made and the writes
/// seen (the status file's modification time, looked at every 1,024 calls), for the parent
/// to divide the instructions callgrind counted in `status::tick` by.
pub fn status_cost(
    lib_path: &std::path::Path,
    solution: i32,
    shapes: i32,
    seconds: f64,
) -> Result<(), String> {
    let (_lib, ctx, paths) = set_up(lib_path, solution)?;
    for i in 0..shapes {
        black_box(paths[3].call(&ctx, FIRST_SIGHT_BASE + 50_000 + i));
    }
    let dir =
        std::path::PathBuf::from(std::env::var_os("TUNEDBLAS_MISS_DIR").ok_or("no miss folder")?);
    let written = || -> Option<std::time::SystemTime> {
        std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .find(|e| e.file_name().to_string_lossy().ends_with(".status.json"))?
            .metadata()
            .ok()?
            .modified()
            .ok()
    };
    let served = paths[1];
    let (mut calls, mut writes, mut last) = (0u64, 0u64, written());
    let began = Instant::now();
    while began.elapsed().as_secs_f64() < seconds {
        served.run(&ctx, 1024);
        calls += 1024;
        let now = written();
        if now != last {
            writes += 1;
            last = now;
        }
    }
    println!("status calls={calls} writes={writes}");
    Ok(())
}

/// This build's paths on one worker thread, then on two at once; prints the scaling table.
fn one_thread_vs_two(ctx: Ctx, paths: &[Path], s: &Settings, calls: &mut [u64]) {
    let w = workers(ctx);
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); MAIN_PATHS];
    let mut cpu_ratios: Vec<Vec<f64>> = vec![Vec::new(); MAIN_PATHS];
    let mut rates: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); MAIN_PATHS];
    for r in 0..s.thread_rounds {
        for j in 0..MAIN_PATHS {
            let i = (r + j) % MAIN_PATHS;
            let one = w.rate(paths[i], 1, s.thread_calls);
            let two = w.rate(paths[i], 2, s.thread_calls);
            calls[i] += 3 * s.thread_calls;
            ratios[i].push(two.0 / one.0);
            cpu_ratios[i].push(two.1 / one.1);
            rates[i].0.push(one.0);
            rates[i].1.push(two.0);
        }
    }
    println!("### One thread vs two");
    println!();
    println!(
        "{} rounds; each round runs {} calls on one worker thread, then that many on each of two at once. Medians. \"Ratio\" is by the wall clock; \"CPU-time ratio\" counts each thread's calls per second of its own CPU time, so time lost to other processes on this shared machine drops out, and only what the threads cost each other (a contended cache line) remains.",
        s.thread_rounds, s.thread_calls
    );
    println!();
    println!("| path | 1 thread (M calls/s) | 2 threads (M calls/s) | ratio | CPU-time ratio | budget | |");
    println!("|---|---|---|---|---|---|---|");
    // The direct path takes no lock and writes nothing shared: when even it does not reach
    // 1.8x, other processes held a core and the wall-clock ratio says nothing about us.
    let busy = median(&mut ratios[0].clone()) < 1.8;
    for (i, p) in paths.iter().take(MAIN_PATHS).enumerate() {
        let ratio = median(&mut ratios[i]);
        let verdict = match (i, ratio >= 1.8, busy) {
            (0, _, true) => "machine busy",
            (0, _, false) => "",
            (_, true, _) => "met",
            (_, false, true) => "not measurable (busy)",
            (_, false, false) => "UNDER",
        };
        println!(
            "| {} | {:.1} | {:.1} | {ratio:.2} | {:.2} | {} | {verdict} |",
            p.name,
            median(&mut rates[i].0) / 1e6,
            median(&mut rates[i].1) / 1e6,
            median(&mut cpu_ratios[i]),
            if i == 0 { "—" } else { ">= 1.8x" }
        );
    }
    println!();
}

/// Start-up: the first intercepted call, less a second one; prints `startup_ns <ns>`.
pub fn startup(lib_path: &std::path::Path) -> Result<(), String> {
    let lib = Lib::open(lib_path, libc::RTLD_NOW | libc::RTLD_GLOBAL)?;
    // SAFETY: rocBLAS's signatures.
    let create = unsafe { lib.func::<CreateHandleFn>(c"rocblas_create_handle")? };
    let (via, _) = unsafe { ffi::global_func::<GemmExFn<i32>>(c"rocblas_gemm_ex")? };
    let ctx = Ctx::new(create)?;
    let p = Path {
        name: "served",
        f: via,
        n: N_SERVED,
        algo: ALGO_STANDARD,
        solution: 0,
        budget: None,
    };
    let t = Instant::now();
    black_box(p.call(&ctx, N_SERVED));
    let first = t.elapsed().as_nanos();
    let t = Instant::now();
    black_box(p.call(&ctx, N_SERVED));
    let second = t.elapsed().as_nanos();
    println!("startup_ns {}", first.saturating_sub(second));
    Ok(())
}

/// `--child ir LIB SOLUTION PATH N`: N calls of one path after a warm-up, and nothing else,
/// for an instruction count under `valgrind --tool=callgrind` (deterministic where the
/// clock is not). PATH: direct, served, default, miss, pass.
pub fn instructions(
    lib_path: &std::path::Path,
    solution: i32,
    which: &str,
    n: u64,
) -> Result<(), String> {
    let lib = Lib::open(lib_path, libc::RTLD_NOW | libc::RTLD_GLOBAL)?;
    // SAFETY: rocBLAS's signatures.
    let (direct, create) = unsafe {
        (
            lib.func::<GemmExFn<i32>>(c"rocblas_gemm_ex")?,
            lib.func::<CreateHandleFn>(c"rocblas_create_handle")?,
        )
    };
    let (via, _) = unsafe { ffi::global_func::<GemmExFn<i32>>(c"rocblas_gemm_ex")? };
    let ctx = Ctx::new(create)?;
    let (f, n_arg, algo, sol) = match which {
        "direct" => (direct, N_SERVED, ALGO_STANDARD, 0),
        "served" => (via, N_SERVED, ALGO_STANDARD, 0),
        "default" => (via, N_DEFAULT, ALGO_STANDARD, 0),
        "miss" => (via, N_MISS, ALGO_STANDARD, 0),
        "pass" => (via, N_SERVED, ALGO_SOLUTION_INDEX, solution),
        other => return Err(format!("unknown path {other}")),
    };
    let p = Path {
        name: "ir",
        f,
        n: n_arg,
        algo,
        solution: sol,
        budget: None,
    };
    p.run(&ctx, 100); // start-up, first sight, first hit
    p.run(&ctx, n);
    Ok(())
}
