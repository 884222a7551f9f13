//! `tunedblas-bench`: what `libtunedblas.so` costs, measured against issue 6's budgets.
//!
//! Run it with `scripts/bench` (which builds the release objects first). It prints a
//! Markdown report:
//! - per call, one thread: each path (served row, `Default` row, repeat miss, pass-through)
//!   against calling refblas directly, side by side in one process, median and p99;
//!   first-sight misses;
//! - one thread vs two: calls per second of each path;
//! - start-up: the first intercepted call (profile selection) with a warm and a cold hash
//!   cache, and sha256 throughput;
//! - the lookup table's heap bytes per row for 1k and 10k rows.
//!
//! The per-call figures come from a child process run under `LD_PRELOAD` (see `calls.rs`);
//! this parent prepares a work folder and a profile, starts the children, and checks with
//! the interposer's own counters (`TUNEDBLAS_STATS`) that every call took the path it was
//! meant to. Options: `--quick` (fewer rounds, for a smoke test), `--keep` (keep the work
//! folder), `--compare OTHER.so` (measure another build of the interposer in the same
//! rounds, for before/after figures), `--instructions` (also count the instructions each
//! path adds per call with valgrind's callgrind: exact and immune to machine load).
//!
//! Two measurements of other questions are subcommands (each with `--help`):
//! `tunedblas-bench overhead` (an interposer's host cost per cuBLASLt call and per
//! `F.linear`, on an NVIDIA GPU: bench/lt/overhead.sh) and `tunedblas-bench near-bench`
//! (does near-shape serving pay on this library: BENCHMARKS.md).

mod calls;
mod ffi;
mod memory;
mod near;
mod opts;
mod overhead;
mod setup;
mod stat;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tunedblas_core::identity;

use crate::setup::Work;
use crate::stat::median;

#[global_allocator]
static ALLOC: memory::Counting = memory::Counting;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let asks_help = args.iter().any(|a| a == "--help" || a == "-h");
    let result = match args.get(1).map(String::as_str) {
        Some("--child") => child(&args[2..]),
        Some("overhead") if asks_help => {
            print!("{}", overhead::help());
            Ok(())
        }
        Some("overhead") => overhead::run(&args[2..]),
        Some("near-bench") if asks_help => {
            print!("{}", near::help());
            Ok(())
        }
        Some("near-bench") => near::run(&args[2..]),
        _ => parent(&args[1..]),
    };
    if let Err(e) = result {
        eprintln!("tunedblas-bench: {e}");
        std::process::exit(1);
    }
}

fn child(args: &[String]) -> Result<(), String> {
    let arg = |i: usize| args.get(i).cloned().ok_or("missing child argument");
    let lib = PathBuf::from(arg(1)?);
    match arg(0)?.as_str() {
        "calls" => {
            let solution = arg(2)?.parse().map_err(|_| "bad solution")?;
            let quick = args.iter().any(|a| a == "--quick");
            let compare = args
                .iter()
                .position(|a| a == "--compare")
                .and_then(|i| args.get(i + 1))
                .map(PathBuf::from);
            let settings = calls::Settings {
                rounds: if quick { 6 } else { 60 },
                samples: 250,
                thread_rounds: if quick { 2 } else { 9 },
                thread_calls: if quick { 50_000 } else { 300_000 },
                first_sights: if quick { 300 } else { 3_000 },
                compare,
            };
            calls::main(&lib, solution, &settings)
        }
        "startup" => calls::startup(&lib),
        "status" => {
            let solution = arg(2)?.parse().map_err(|_| "bad solution")?;
            let shapes = arg(3)?.parse().map_err(|_| "bad shape count")?;
            let seconds = arg(4)?.parse().map_err(|_| "bad duration")?;
            calls::status_cost(&lib, solution, shapes, seconds)
        }
        "ir" => {
            let solution = arg(2)?.parse().map_err(|_| "bad solution")?;
            let n = arg(4)?.parse().map_err(|_| "bad call count")?;
            calls::instructions(&lib, solution, &arg(3)?, n)
        }
        other => Err(format!("unknown child mode {other}")),
    }
}

/// The folder of this executable, where cargo also put the shared objects.
fn target_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().ok_or("no parent folder")?.to_path_buf();
    for need in ["libtunedblas.so", "librocblas_v4.so"] {
        if !dir.join(need).is_file() {
            return Err(format!(
                "{} is missing: build with `cargo build --release -p tunedblas-preload -p refblas-v4 -p tunedblas-bench` (scripts/bench does)",
                dir.join(need).display()
            ));
        }
    }
    Ok(dir)
}

/// A child under the preload, with only the settings we choose.
fn child_command(target: &Path, work: &Work, cache: &Path, stats: &Path) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("current_exe"));
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        // TUNEDBLAS_NEAR passes through: `TUNEDBLAS_NEAR=0 scripts/bench` measures the miss
        // path without near-shape serving.
        let keep = ["TUNEDBLAS_BENCH_PRELOAD", "TUNEDBLAS_NEAR"];
        if (k.starts_with("TUNEDBLAS_") && !keep.contains(&k.as_str())) || k.starts_with("REFBLAS_")
        {
            c.env_remove(k);
        }
    }
    // TUNEDBLAS_BENCH_PRELOAD: measure another build of the interposer (before/after).
    let preload = std::env::var_os("TUNEDBLAS_BENCH_PRELOAD")
        .map(PathBuf::from)
        .unwrap_or_else(|| target.join("libtunedblas.so"));
    c.env("LD_PRELOAD", preload)
        .env("REFBLAS_NO_COMPUTE", "return")
        .env("TUNEDBLAS_LOG", "quiet")
        .env("TUNEDBLAS_PROFILE_DIR", &work.profiles)
        .env("TUNEDBLAS_CACHE_DIR", cache)
        .env("TUNEDBLAS_MISS_DIR", work.dir.join("misses"))
        .env("TUNEDBLAS_STATS", stats)
        .arg("--child");
    c
}

fn run_child(c: &mut Command) -> Result<String, String> {
    let out = c
        .output()
        .map_err(|e| format!("cannot start a child: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "child failed ({}):\n{text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(text)
}

/// A number from the interposer's stats file.
fn stat_of(stats: &Path, field: &str) -> Result<u64, String> {
    let text = std::fs::read_to_string(stats).map_err(|e| format!("{}: {e}", stats.display()))?;
    let pat = format!("\"{field}\":");
    let at = text.find(&pat).ok_or(format!("no {field} in the stats"))? + pat.len();
    text[at..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|d| d.parse().ok())
        .ok_or(format!("bad {field} in the stats"))
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn parent(args: &[String]) -> Result<(), String> {
    let quick = args.iter().any(|a| a == "--quick");
    let keep = args.iter().any(|a| a == "--keep");
    let target = target_dir()?;
    if cfg!(debug_assertions) {
        eprintln!("tunedblas-bench: this is a debug build of the benchmark; use scripts/bench");
    }
    let work = Work::create(&target)?;
    let compare = args
        .iter()
        .position(|a| a == "--compare")
        .map(|i| {
            args.get(i + 1)
                .map(PathBuf::from)
                .ok_or("--compare needs the path of another libtunedblas.so")
        })
        .transpose()?;
    let instructions = args.iter().any(|a| a == "--instructions");
    let result = report(&target, &work, quick, compare.as_deref(), instructions);
    if keep {
        eprintln!("work folder kept: {}", work.dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&work.dir);
    }
    result
}

fn report(
    target: &Path,
    work: &Work,
    quick: bool,
    compare: Option<&Path>,
    instructions: bool,
) -> Result<(), String> {
    let sha = identity::sha256_file(&work.lib).map_err(|e| e.to_string())?;
    let solution = setup::served_solution(&work.lib)?;
    work.write_profile(&sha, solution)?;
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("## tunedblas-bench");
    println!();
    println!(
        "{} CPUs, load average at start {}; {}; interposer {}",
        cpus,
        load_average(),
        cpu_model(),
        target.join("libtunedblas.so").display()
    );
    println!();

    // ---- per call ---------------------------------------------------------------------
    let stats = work.dir.join("calls-stats.json");
    let mut c = child_command(target, work, &work.dir.join("cache-calls"), &stats);
    c.args([
        "calls".as_ref(),
        work.lib.as_os_str(),
        solution.to_string().as_ref(),
    ]);
    if quick {
        c.arg("--quick");
    }
    if let Some(other) = compare {
        c.arg("--compare").arg(other);
    }
    let out = run_child(&mut c)?;
    let (mut counts, mut counts_other) = (None, None);
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("counts ") {
            counts = Some(rest.to_owned());
        } else if let Some(rest) = line.strip_prefix("counts-other ") {
            counts_other = Some(rest.to_owned());
        } else {
            println!("{line}");
        }
    }
    check_counts(
        counts.as_deref().ok_or("the child printed no counts")?,
        &stats,
    )?;
    if let Some(other) = counts_other {
        check_counts(&other, &stats.with_extension("json.other"))?;
    }

    if instructions {
        instruction_counts(target, work, solution)?;
    }

    // ---- the live status ----------------------------------------------------------------
    if instructions {
        status_cost(target, work, solution)?;
    }

    // ---- start-up -----------------------------------------------------------------------
    startup(target, work, if quick { 2 } else { 7 }, &sha, solution)?;

    // ---- hashing and memory -------------------------------------------------------------
    hashing(work, if quick { 16 } else { 256 })?;
    memory::table_report();
    println!("load average at the end {}", load_average());
    Ok(())
}

/// Every call of each path must show in the interposer's counter for that path.
fn check_counts(mine: &str, stats: &Path) -> Result<(), String> {
    let field = |name: &str| -> Result<u64, String> {
        mine.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .ok_or(format!("no {name} in the child's counts"))
    };
    let pairs = [
        ("served", "served"),
        ("default", "default"),
        ("missed", "missed_calls"),
        ("passed", "passed_through"),
    ];
    for (mine_name, theirs) in pairs {
        let (a, b) = (field(mine_name)?, stat_of(stats, theirs)?);
        if a != b {
            return Err(format!(
                "the benchmark made {a} {mine_name} calls but the interposer counted {b} {theirs}: a path did not do what it measures"
            ));
        }
    }
    if stat_of(stats, "fallbacks")? != 0 {
        return Err("tuned calls fell back: the served path was not served".into());
    }
    println!(
        "Checked against the interposer's own counters ({}): every call took its path ({mine}).",
        stats
            .file_name()
            .map_or(String::new(), |f| f.to_string_lossy().into_owned())
    );
    println!();
    Ok(())
}

/// Instructions per call of each path, from callgrind: N and N + 10,000 calls of one path
/// in a child (after a warm-up), the difference divided by 10,000, so start-up cancels out.
/// `child` (a [`child_command`]) run under callgrind with `options`, its output in `out`.
fn under_callgrind(child: &Command, options: &[&str], out: &Path) -> Command {
    let mut c = Command::new("valgrind");
    c.arg("--tool=callgrind")
        .args(options)
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(child.get_program());
    for (k, val) in child.get_envs() {
        match val {
            Some(val) => c.env(k, val),
            None => c.env_remove(k),
        };
    }
    c
}

/// What writing the live status costs the calling threads: a child makes served calls for a
/// few seconds under callgrind after 10 or 1,000 missed shapes were recorded; the
/// instructions inside `status::tick` (the clock read every 64 calls, and about once a
/// second the status files and the counts written) per write seen, and per call.
fn status_cost(target: &Path, work: &Work, solution: i32) -> Result<(), String> {
    println!("### The live status, written by the calling threads (callgrind)");
    println!();
    println!("Served calls for 4 s under callgrind after N missed shapes were recorded. Instructions inside `status::tick`: per status write seen (the status and prom files and the counts, with the clock reads of its second: one every 64 calls), and per call over the run. The clock reads cost about half an instruction per call at any rate; the writes' share falls as the calls per second rise (callgrind runs them ~30x slower than they run natively).");
    println!();
    println!("| missed shapes | calls | writes | instructions per write | instructions per call |");
    println!("|---|---|---|---|---|");
    for shapes in [10, 1_000] {
        let out_file = work.dir.join(format!("callgrind-status-{shapes}.out"));
        let stats = work.dir.join(format!("status-{shapes}.json"));
        let misses = work.dir.join(format!("misses-status-{shapes}"));
        let child = child_command(target, work, &work.dir.join("cache-status"), &stats);
        let mut c = under_callgrind(
            &child,
            &["--toggle-collect=tunedblas::status::tick"],
            &out_file,
        );
        c.env("TUNEDBLAS_MISS_DIR", &misses);
        c.args(["--child", "status"]).arg(&work.lib).args([
            solution.to_string(),
            shapes.to_string(),
            "4".into(),
        ]);
        let out = run_child(&mut c)?;
        let field = |name: &str| -> Result<u64, String> {
            out.split_whitespace()
                .find_map(|w| w.strip_prefix(name)?.parse().ok())
                .ok_or_else(|| format!("no {name} in {out}"))
        };
        let (calls, writes) = (field("calls=")?, field("writes=")?);
        let text = std::fs::read_to_string(&out_file).map_err(|e| e.to_string())?;
        let ir: u64 = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("summary:")
                    .or_else(|| l.strip_prefix("totals:"))
            })
            .and_then(|v| v.trim().parse().ok())
            .ok_or("no instruction total in the callgrind output")?;
        println!(
            "| {shapes} | {calls} | {writes} | {:.0} | {:.2} |",
            ir as f64 / writes.max(1) as f64,
            ir as f64 / calls as f64
        );
    }
    println!();
    Ok(())
}

fn instruction_counts(target: &Path, work: &Work, solution: i32) -> Result<(), String> {
    let have = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        println!("(--instructions: valgrind is not installed; skipped)\n");
        return Ok(());
    }
    let count = |path: &str, n: u64| -> Result<u64, String> {
        let out_file = work.dir.join(format!("callgrind-{path}-{n}.out"));
        let stats = work.dir.join("ir-stats.json");
        let child = child_command(target, work, &work.dir.join("cache-calls"), &stats);
        // The calls' thread's own file (thread 1): exact whatever other threads do. Its
        // count includes the status tick's clock read every 64 calls; a status write (once
        // a second) falls before the run (the first call's) in a child this short.
        let mut c = under_callgrind(
            &child,
            &[
                "--toggle-collect=tunedblas_bench::calls::Path::run",
                "--separate-threads=yes",
            ],
            &out_file,
        );
        c.args(["--child", "ir"]).arg(&work.lib).args([
            solution.to_string(),
            path.to_string(),
            n.to_string(),
        ]);
        run_child(&mut c)?;
        let mut main_thread = out_file.clone().into_os_string();
        main_thread.push("-01");
        let text = std::fs::read_to_string(&main_thread)
            .or_else(|_| std::fs::read_to_string(&out_file))
            .map_err(|e| e.to_string())?;
        text.lines()
            .find_map(|l| {
                l.strip_prefix("summary:")
                    .or_else(|| l.strip_prefix("totals:"))
            })
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| "no instruction total in the callgrind output".to_string())
    };
    let per_call = |path: &str| -> Result<f64, String> {
        Ok((count(path, 11_000)? as f64 - count(path, 1_000)? as f64) / 10_000.0)
    };
    let direct = per_call("direct")?;
    println!("### Instructions per call (callgrind)");
    println!();
    println!("Exact counts: instructions executed per call, refblas's own included; \"added\" is the difference from calling refblas directly.");
    println!();
    println!("| path | instructions per call | added |");
    println!("|---|---|---|");
    println!("| direct (refblas) | {direct:.0} | — |");
    for (path, name) in [
        ("served", "served row"),
        ("default", "`Default` row"),
        ("miss", "repeat miss"),
        ("pass", "pass-through"),
    ] {
        let n = per_call(path)?;
        println!("| {name} | {n:.0} | {:.0} |", n - direct);
    }
    println!();
    Ok(())
}

fn startup(
    target: &Path,
    work: &Work,
    runs: usize,
    sha: &str,
    solution: i32,
) -> Result<(), String> {
    let (profiles, what) = setup::write_startup_profile(work, sha, solution)?;
    // One start-up: [first call, identify, select, load] in ms. The phases come from the
    // interposer's own debug line (`start-up times: ...`).
    let once = |cache: &Path, tag: &str| -> Result<[f64; 4], String> {
        let stats = work.dir.join(format!("startup-{tag}.json"));
        let mut c = child_command(target, work, cache, &stats);
        c.env("TUNEDBLAS_PROFILE_DIR", &profiles)
            .env("TUNEDBLAS_LOG", "debug")
            .args(["startup".as_ref(), work.lib.as_os_str()]);
        let out = c
            .output()
            .map_err(|e| format!("cannot start a child: {e}"))?;
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        if !out.status.success() {
            return Err(format!("start-up child failed: {stdout}{stderr}"));
        }
        if stat_of(&stats, "served")? != 2 {
            return Err("start-up run: the profile was not selected".into());
        }
        // Start-up reads the calling device's rank file only (the other, with other rows,
        // waits for its device's first call): one table of 1,603 rows.
        let rows = stat_of(&stats, "rows")?;
        if rows != 1_603 {
            return Err(format!(
                "start-up run: the profile loaded {rows} rows, not the calling device's 1,603"
            ));
        }
        let first = stdout
            .lines()
            .find_map(|l| l.strip_prefix("startup_ns "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .ok_or("the start-up child printed no time")?;
        let phase = |name: &str| -> Result<f64, String> {
            let line = stderr
                .lines()
                .find(|l| l.contains("start-up times:"))
                .ok_or("no start-up times in the interposer's debug log")?;
            let at = line.find(&format!("{name} ")).ok_or("bad start-up times")? + name.len() + 1;
            line[at..]
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| "bad start-up times".to_string())
        };
        Ok([
            first / 1e6,
            phase("identify")?,
            phase("select")?,
            phase("load")?,
        ])
    };
    let warm_cache = work.dir.join("cache-warm");
    once(&warm_cache, "prime")?;
    let (mut warm, mut cold) = (Vec::new(), Vec::new());
    for i in 0..runs {
        cold.push(once(&work.dir.join(format!("cache-cold-{i}")), "cold")?);
        warm.push(once(&warm_cache, "warm")?);
    }
    let size = std::fs::metadata(&work.lib)
        .map_err(|e| e.to_string())?
        .len() as f64;
    let col = |v: &[[f64; 4]], i: usize| median(&mut v.iter().map(|r| r[i]).collect::<Vec<_>>());
    println!("### Start-up (the first intercepted call)");
    println!();
    println!(
        "{runs} processes each, interleaved; first call less a second one; phases from the interposer's debug line; medians in ms. The profile: {what}."
    );
    println!();
    println!("| hash cache | first call | identify the build | select the profile | load the tables | budget: selection (identify + select) <= 2 ms |");
    println!("|---|---|---|---|---|---|");
    for (name, v) in [("warm", &warm), ("cold", &cold)] {
        let selection = col(v, 1) + col(v, 2);
        let verdict = match (name, selection <= 2.0) {
            ("cold", _) => format!("— (hashes the {:.1} MB library)", size / 1e6),
            (_, true) => format!("{selection:.2} ms: met"),
            (_, false) => format!("{selection:.2} ms: OVER"),
        };
        println!(
            "| {name} | {:.2} | {:.2} | {:.3} | {:.2} | {verdict} |",
            col(v, 0),
            col(v, 1),
            col(v, 2),
            col(v, 3)
        );
    }
    println!();
    Ok(())
}

fn hashing(work: &Work, mib: usize) -> Result<(), String> {
    let file = work.dir.join("hash-input.bin");
    let mut data = vec![0u8; mib << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(&file, &data).map_err(|e| e.to_string())?;
    drop(data);
    let mut rates = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        identity::sha256_file(&file).map_err(|e| e.to_string())?;
        rates.push((mib << 20) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    let _ = std::fs::remove_file(&file);
    let best = rates.iter().cloned().fold(0.0, f64::max);
    let rate = median(&mut rates);
    #[cfg(target_arch = "x86_64")]
    let sha_ni = if std::arch::is_x86_feature_detected!("sha") {
        "the CPU has SHA instructions (sha2 uses them)"
    } else {
        "the CPU has no SHA instructions"
    };
    #[cfg(not(target_arch = "x86_64"))]
    let sha_ni = "not an x86_64 CPU";
    println!("### Cold hashing");
    println!();
    println!(
        "`identity::sha256_file` of a {mib} MiB file in the page cache, 3 runs: median {rate:.2} GB/s (best {best:.2}); budget >= 1 GB/s: {}; {sha_ni}.",
        if rate >= 1.0 { "met" } else { "UNDER" }
    );
    println!();
    Ok(())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
