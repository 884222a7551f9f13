//! The cuBLASLt (NVIDIA) side of the harness, run as `tunedblas lt <subcommand>`
//! (`commands/lt.rs` holds its help, arguments and dispatch). It shares the core's key,
//! profile format and registry, and the rocBLAS side's arguments, errors and exit codes.

mod adopt;
mod campaign;
mod cuda;
mod grid;
mod hip;
mod numeric;
mod overhead;
mod pipeline;
mod problem;
mod resume;
mod search;
mod timing;
mod tune;

use std::path::{Path, PathBuf};

use tunedblas_core::cublaslt::*;
use tunedblas_core::registry;

use crate::args::Args;
pub use adopt::cmd_adopt;
use cuda::{err, lt_check, Cuda, Error, Lt, Result};
pub use overhead::cmd_overhead;
use problem::{Delay, Problem};

/// The command's result: [`crate::error::Error`], whose kind is the exit code.
type CliResult<T> = crate::error::Result<T>;

/// The work failed (exit 1): every error of the CUDA and cuBLASLt calls.
impl From<Error> for crate::error::Error {
    fn from(e: Error) -> Self {
        crate::error::Error::failed(e.0)
    }
}

/// `name`'s number, or `default` when it is not given.
fn num<T: std::str::FromStr>(a: &Args, name: &str, default: T) -> CliResult<T> {
    a.parsed(name, default, "a number")
}

/// An option the subcommand cannot do without.
fn need<'a>(a: &'a Args, name: &str) -> CliResult<&'a str> {
    a.value(name)
        .ok_or_else(|| a.usage(format!("needs {name}")))
}

/// The tuning options, read before anything is loaded (a mistake is exit 2 on any machine);
/// the L2 size is the device's, set by the caller once [`load`] has found it.
fn options(a: &Args) -> CliResult<tune::Options> {
    let d = tune::Options::default();
    Ok(tune::Options {
        trials: num(a, "--trials", d.trials)?.max(3),
        candidates: num(a, "--candidates", d.candidates)?.max(1),
        margin: a.margin(d.margin * 100.0)?,
        win_share: num(a, "--win-share", d.win_share)?,
        workspace: num(a, "--workspace", d.workspace)?,
        sample_ms: num(a, "--sample-ms", d.sample_ms)?,
        l2_bytes: d.l2_bytes,
        explore: num(a, "--explore", d.explore)?,
        timing: timing::Timing::parse(a.value("--timing")).map_err(|e| a.usage(e))?,
        budget: num(a, "--budget", d.budget)?.max(0.0),
        keep: num(a, "--keep", d.keep)?.max(1),
        alignment: match num(a, "--alignment", d.alignment)? {
            v @ (16 | 32 | 64 | 128 | 256) => v,
            v => return Err(a.usage(format!("--alignment takes 16, 32, 64, 128 or 256, not {v}"))),
        },
        delay: problem::DelayKind::parse(a.value("--delay")).map_err(|e| a.usage(e))?,
        rest: crate::rest::checked(num(a, "--rest", d.rest)?).map_err(|e| a.usage(e))?,
        fresh: match a.value("--confirm") {
            None | Some("fresh") => true,
            Some("off") => false,
            Some(o) => return Err(a.usage(format!("--confirm takes fresh or off, not '{o}'"))),
        },
    })
}

/// The CUDA runtime and cuBLASLt: a library that cannot be loaded is exit 3, a runtime
/// that sees no device exit 4 (as `tunedblas` says of rocBLAS and its devices).
fn load(a: &Args) -> CliResult<(Cuda, Lt)> {
    let cannot_load = |e: Error| crate::error::Error::not_rocblas(e.0);
    let cuda = Cuda::load(a.path("--cudart").as_deref()).map_err(cannot_load)?;
    let lt = Lt::load(a.path("--lib").as_deref()).map_err(cannot_load)?;
    if !cuda.has_device() {
        return Err(crate::error::Error::no_device(format!(
            "the CUDA runtime {} sees no usable device",
            cuda.path.display()
        )));
    }
    Ok((cuda, lt))
}

fn sha_of(lt: &Lt) -> Result<String> {
    tunedblas_core::identity::sha256_file(&lt.path)
        .map_err(|e| Error(format!("cannot hash {}: {e}", lt.path.display())))
}

/// The keys of the miss files at `paths` (files, or folders of `*-<lib>-rank*.csv`, `lib`
/// being `cublaslt` or `hipblaslt`).
fn read_misses(paths: &[&str], lib: &str) -> Result<Vec<LtKey>> {
    let tag = format!("-{lib}-rank");
    let mut files = Vec::new();
    for p in paths {
        let p = Path::new(p);
        if p.is_dir() {
            let rd = std::fs::read_dir(p).map_err(|e| Error(format!("{}: {e}", p.display())))?;
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.contains(&tag) && name.ends_with(".csv") && !name.ends_with(".counts.csv") {
                    files.push(e.path());
                }
            }
        } else {
            files.push(p.to_path_buf());
        }
    }
    files.sort();
    let mut keys: Vec<LtKey> = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(&f).map_err(|e| Error(format!("{}: {e}", f.display())))?;
        // hipBLASLt tuning files, HIPBLASLT_LOG_MASK=32 logs and AITER tables name their
        // shapes too (the core reads them; their indices are not carried over).
        let format = tunedblas_core::formats::detect(&text);
        if let Some(parsed) = tunedblas_core::formats::parse_lt(format, &text) {
            for s in &parsed.skipped {
                eprintln!(
                    "tunedblas lt: {}:{}: skipped: {}",
                    f.display(),
                    s.line,
                    s.reason
                );
            }
            for (why, n) in &parsed.unservable {
                eprintln!(
                    "tunedblas lt: {}: {n} rows: {why}; their shapes are tuned where they name a plain GEMM",
                    f.display()
                );
            }
            for e in parsed.entries {
                if !keys.contains(&e.key) {
                    keys.push(e.key);
                }
            }
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            let mut fields = line.trim().splitn(3, ',');
            let (Some(op), Some(sig)) = (fields.next(), fields.next()) else {
                continue;
            };
            match parse_key(op, sig) {
                Ok(k) if !keys.contains(&k) => keys.push(k),
                Ok(_) => {}
                Err(e) => eprintln!("tunedblas lt: {}:{}: skipped: {e}", f.display(), i + 1),
            }
        }
    }
    // Grouped by weight shape (N, K), then tokens.
    keys.sort_by_key(|k| (k.m, k.k, k.n, k.batch));
    Ok(keys)
}

fn write_json(path: Option<PathBuf>, v: &serde_json::Value) -> Result<()> {
    if let Some(p) = path {
        std::fs::write(&p, serde_json::to_vec_pretty(v).expect("plain values"))
            .map_err(|e| Error(format!("{}: {e}", p.display())))?;
    }
    Ok(())
}

fn delay<'a>(cuda: &'a Cuda, lt: &'a Lt, kind: problem::DelayKind) -> Result<Delay<'a>> {
    let mut d = Delay::new(cuda, lt, kind)?;
    // The host cost of one call, measured on a tiny problem, sizes the delay ahead of each
    // timed span (x2 for safety; at least 5 us).
    let p = Problem::new(cuda, lt, LtKey::linear(R_16BF, 512, 1, 512), 1, 0)?;
    let base = p.heuristic(1)?;
    let algo = base
        .first()
        .map_or(std::ptr::null(), |r| &r.algo as *const MatmulAlgo);
    let host = p.host_us(lt.matmul, algo, 100, 5, &d)?;
    d.host_us = (2.0 * numeric::median(&host)).max(5.0);
    Ok(d)
}

/// Whether a graph of matmul calls can be captured and replayed here.
fn probe_capture(cuda: &Cuda, lt: &Lt, d: &Delay) -> Result<()> {
    let p = Problem::new(cuda, lt, LtKey::linear(R_16BF, 512, 1, 512), 1, 0)?;
    let base = p.heuristic(1)?;
    let algo = base
        .first()
        .map_or(std::ptr::null(), |r| &r.algo as *const MatmulAlgo);
    lt_check("cublasLtMatmul", p.launch(algo, 0))?;
    cuda.sync_stream(p.stream)?;
    p.time_graph(algo, 4, d).map(|_| ())
}

/// The timing mode to use: the one asked for, events where graph capture fails.
fn timing_mode(cuda: &Cuda, lt: &Lt, d: &Delay, asked: timing::Timing) -> timing::Timing {
    let probe = match asked {
        timing::Timing::Graph => probe_capture(cuda, lt, d),
        timing::Timing::Events => Ok(()),
    };
    let (t, line) = timing::choose(asked, probe);
    if let Some(l) = line {
        eprintln!("{l}");
    }
    t
}

pub fn cmd_info(a: &Args) -> CliResult<()> {
    let (cuda, lt) = load(a)?;
    println!("cublaslt: {} (version {})", lt.path.display(), lt.version());
    println!("sha256: {}", sha_of(&lt)?);
    println!(
        "cudart: {} (runtime {})",
        cuda.path.display(),
        cuda.runtime_version()
    );
    println!("device: {}, L2 {} MiB", cuda.arch(), cuda.l2_bytes() >> 20);
    Ok(())
}

/// The shapes to tune: the miss files' keys, then `--shape`s not among them.
fn tune_keys(a: &Args, lib: LtLib) -> CliResult<Vec<LtKey>> {
    // `--misses A B` as the old parser read it: the second path is a positional.
    let mut misses = a.values("--misses");
    misses.extend(a.positional.iter().map(String::as_str));
    let shapes = a.values("--shape");
    if misses.is_empty() && shapes.is_empty() {
        return Err(a.usage("needs --misses with a file or folder (or --shape N,M,K)"));
    }
    let mut keys = if misses.is_empty() {
        Vec::new()
    } else {
        read_misses(&misses, &lib.name().to_lowercase())?
    };
    for s in shapes {
        let (n, m, k) = parse_shape(s).map_err(|e| a.usage(e))?;
        let key = LtKey::linear(R_16BF, n, m, k);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    if keys.is_empty() {
        return Err(crate::error::Error::failed(format!(
            "the miss files hold no {} shapes",
            lib.name()
        )));
    }
    Ok(keys)
}

/// The limits of this card in this mode, said on stderr; `None` (said) where they cannot
/// be measured. The matmul rate is measured last, on its own: where it fails the other
/// limits still stand.
fn measure_limits(
    cuda: &Cuda,
    lt: &Lt,
    t: timing::Timing,
    copy_mib: usize,
    d: &Delay,
    rest: f64,
) -> Option<timing::Limits> {
    let mut l = match timing::measure(cuda, t, copy_mib << 20, 15, d) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tunedblas lt: limits not measured: {e}");
            return None;
        }
    };
    let side = timing::MATMUL_RATE_SIDE;
    match timing::matmul_rate(cuda, lt, t, side, 9, d, rest) {
        Ok((rate, spread)) => {
            l.matmul_flops_per_s = Some(rate);
            l.matmul_shape = Some(format!("bf16 {side}x{side}x{side}, the heuristic's answer"));
            l.matmul_spread = Some(spread);
        }
        Err(e) => eprintln!("tunedblas lt: matmul rate not measured ({e}); no compute limit"),
    }
    eprintln!(
        "tunedblas lt: limits ({} timing): copy {:.0} GB/s (read + write, {} MiB, spread {:.1}%; graph {}, events {:.0}), \
         {} {:.2} us per call (spread {:.1}%){}; matmul {}",
        l.timing.name(),
        l.copy_bytes_per_s / 1e9,
        copy_mib,
        l.copy_spread * 100.0,
        l.copy_bytes_per_s_graph
            .map_or("-".into(), |g| format!("{:.0}", g / 1e9)),
        l.copy_bytes_per_s_events / 1e9,
        l.floor_op,
        l.floor_ms * 1e3,
        l.floor_spread * 100.0,
        l.empty_graph_ms
            .map_or(String::new(), |g| format!(", empty graph {:.2} us per launch", g * 1e3)),
        match (l.matmul_flops_per_s, l.matmul_spread) {
            (Some(r), Some(s)) => format!(
                "{:.0} TFLOP/s ({side}^3 bf16, spread {:.1}%), {} SMs",
                r / 1e12,
                s * 100.0,
                cuda.sm_count().map_or("?".into(), |n| n.to_string())
            ),
            _ => "not measured".into(),
        }
    );
    Some(l)
}

fn mins_secs(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    format!("{}m{:02}s", s / 60, s % 60)
}

/// One shape tuned, and measured against the limits where they are known.
fn tune_key(
    cuda: &Cuda,
    lt: &Lt,
    key: &LtKey,
    opts: &tune::Options,
    d: &Delay,
    limits: Option<&timing::Limits>,
) -> Result<tune::Outcome> {
    let sets = Problem::sets_for(key, opts.l2_bytes);
    let p = Problem::new(cuda, lt, *key, sets, opts.workspace)?;
    p.set_timing(opts.timing);
    p.set_alignment(opts.alignment)?;
    let mut o = tune::tune_shape(&p, opts, d)?;
    if let Some(l) = limits {
        let (lim, _) = l.bound_ms(key);
        o.limit_ms = Some(lim);
        o.heuristic_pct_of_limit = Some(timing::pct_of_limit(lim, o.heuristic.median_ms));
        o.best_pct_of_limit = o
            .candidates
            .first()
            .map(|c| timing::pct_of_limit(lim, c.median_ms.min(o.heuristic.median_ms)));
        o.roofline = cuda.sm_count().map(|sms| {
            grid::roofline(
                key,
                l.memory_ms(o.bytes_moved),
                l.compute_ms(key),
                l.floor_ms,
                sms,
                (&o.heuristic.solution, o.heuristic.median_ms),
                o.candidates
                    .first()
                    .map(|c| (c.solution.as_str(), c.median_ms)),
            )
        });
    }
    Ok(o)
}

/// The proposed adoptions re-measured by a fresh process (this binary's `recheck`, its
/// own device context and library handle, interleaved against the heuristic): those it does
/// not confirm by the margin go back to `Default`. `lib_args` say which library and runtime
/// the child loads (and, for cuBLASLt, how it times), as the command line takes them.
fn confirm_fresh(
    lib_args: &[std::ffi::OsString],
    opts: &tune::Options,
    outcomes: &mut [tune::Outcome],
) {
    let proposed: Vec<LtRow> = outcomes
        .iter()
        .filter(|o| o.adopted.is_some())
        .map(|o| o.row())
        .collect();
    if !opts.fresh || proposed.is_empty() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tunedblas-lt-fresh-{}", std::process::id()));
    let verdicts = std::env::current_exe()
        .map_err(|e| format!("this program's path: {e}"))
        .and_then(|exe| fresh_verdicts(&exe, lib_args, opts, &proposed, &dir));
    let _ = std::fs::remove_dir_all(&dir);
    let withdrawn = tune::apply_fresh(
        outcomes,
        verdicts.as_deref().map_err(Clone::clone),
        opts.margin,
    );
    eprintln!(
        "tunedblas lt: fresh process: {} of {} proposed rows confirmed by the {:.0}% margin, {withdrawn} withdrawn",
        proposed.len() - withdrawn,
        proposed.len(),
        opts.margin * 100.0
    );
}

/// The arguments that make a cuBLASLt `recheck` child load these libraries and time as
/// this campaign does.
fn cublaslt_child_args(lt: &Lt, cuda: &Cuda, opts: &tune::Options) -> Vec<std::ffi::OsString> {
    vec![
        "--lib".into(),
        lt.path.clone().into(),
        "--cudart".into(),
        cuda.path.clone().into(),
        "--timing".into(),
        opts.timing.name().into(),
        "--alignment".into(),
        opts.alignment.to_string().into(),
        "--delay".into(),
        opts.delay.name().into(),
    ]
}

/// Runs `exe lt recheck` on `rows` in a child process, with the library arguments
/// `lib_args` and `opts`; its verdicts, or why there are none.
fn fresh_verdicts(
    exe: &Path,
    lib_args: &[std::ffi::OsString],
    opts: &tune::Options,
    rows: &[LtRow],
    dir: &Path,
) -> std::result::Result<Vec<tune::Verdict>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let file = dir.join("proposed.csv");
    let log = dir.join("fresh.json");
    let text = LtResults {
        validators: Vec::new(),
        rows: rows.to_vec(),
        skipped: Vec::new(),
        wildcards: Vec::new(),
    }
    .to_text();
    std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
    eprintln!(
        "tunedblas lt: {} proposed rows re-measured in a fresh process ({} lt recheck)",
        rows.len(),
        exe.display()
    );
    let out = std::process::Command::new(exe)
        .args(["lt", "recheck"])
        .arg("--rows")
        .arg(&file)
        .arg("--log")
        .arg(&log)
        .args(lib_args)
        .args(["--trials", &opts.trials.to_string()])
        .args(["--workspace", &opts.workspace.to_string()])
        .args(["--sample-ms", &opts.sample_ms.to_string()])
        .args(["--rest", &opts.rest.to_string()])
        // In percent, as the command line takes it (rounded: 0.03 * 100 is not exactly 3).
        .args(["--margin", &((opts.margin * 1e8).round() / 1e6).to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        eprintln!("tunedblas lt: fresh process: {line}");
    }
    if !out.status.success() {
        return Err(format!("the child {}", out.status));
    }
    let text = std::fs::read_to_string(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", log.display()))?;
    Ok(tune::read_fresh(&v))
}

fn print_table(opts: &tune::Options, outcomes: &[tune::Outcome]) {
    println!("timing: {}", opts.timing.name());
    println!(
        "{:<44} {:>6} {:>10} {:>7} {:>10} {:>7} {:>7} {:>7} {:>9} {:>8} {:>6}  decision",
        "shape (op signature)",
        "cands",
        "heur ms",
        "spread",
        "best ms",
        "gain",
        "confirm",
        "fresh",
        "limit ms",
        "bound",
        "%lim"
    );
    let pct = |g: Option<f64>| g.map_or("-".into(), |g| format!("{:+.1}%", g * 100.0));
    for o in outcomes {
        println!(
            "{:<44} {:>6} {:>10.5} {:>6.1}% {:>10.5} {:>+6.1}% {:>7} {:>7} {:>9} {:>8} {:>6}  {}",
            format!("{} {}", o.op, o.signature)
                .chars()
                .skip(14)
                .collect::<String>(),
            o.candidates.len(),
            o.heuristic.median_ms,
            o.heuristic.spread * 100.0,
            o.candidates.first().map_or(f64::NAN, |c| c.median_ms),
            o.gain * 100.0,
            pct(o.confirm_gain),
            pct(o.fresh_gain),
            o.limit_ms.map_or("-".into(), |l| format!("{l:.5}")),
            o.roofline.as_ref().map_or("-", |r| r.bound.name()),
            o.heuristic_pct_of_limit
                .map_or("-".into(), |p| format!("{p:.0}%")),
            o.adopted
                .as_deref()
                .map_or(format!("Default: {}", o.reason), |s| format!(
                    "ADOPT {s} ({})",
                    o.reason
                ))
        );
        if let Some(r) = &o.roofline {
            println!(
                "    limit: {}-bound; fastest found {:.5} ms at {:.0}% of it: {}",
                r.bound.name(),
                r.best_ms,
                r.best_pct_of_limit,
                r.why
            );
        }
    }
}

/// The rank file, provenance and registry entry together, all or nothing, in one
/// transaction of the profile store (the locked one every `tunedblas` writer uses), each
/// read as it is now so that tools writing the store at once keep each other's changes.
/// Only this rank's file is written; the other ranks' stay as they are.
fn write_profile(
    profiles: &Path,
    folder: &crate::store::Folder,
    rank: usize,
    sha: &str,
    results: &LtResults,
    entry: registry::Entry,
    campaign: serde_json::Value,
) -> CliResult<PathBuf> {
    let store = crate::store::Store::open(profiles)?;
    store.transaction(|tx| {
        tx.write_rank(folder, rank, results.to_text(), entry)?;
        let prov = tx.provenance(folder)?;
        prov.set_sha256(sha);
        prov.set_profile(&folder.name);
        prov.set("updated", crate::store::utc_now().into());
        prov.push_campaign(campaign);
        Ok(())
    })?;
    Ok(crate::store::rank_file(&folder.dir, rank))
}

/// `--hip` names hipBLASLt's runtime: given to a cuBLASLt command it would be ignored.
fn refuse_hip_only(a: &Args) -> CliResult<()> {
    match a.value("--hip") {
        Some(_) => Err(a.usage(
            "--hip is for hipBLASLt (--backend hipblaslt); cuBLASLt runs on the CUDA runtime: pass --cudart",
        )),
        None => Ok(()),
    }
}

pub fn cmd_tune(a: &Args) -> CliResult<()> {
    if hip::wanted(a)? {
        return hip::cmd_tune(a);
    }
    refuse_hip_only(a)?;
    let mut opts = options(a)?;
    let target = campaign::Target::of(a)?;
    let copy_mib = num(a, "--copy-mib", 1024)?;
    let keys = tune_keys(a, LtLib::Cublaslt)?;
    let (cuda, lt) = load(a)?;
    opts.l2_bytes = cuda.l2_bytes();
    let sha = sha_of(&lt)?;
    let d = delay(&cuda, &lt, opts.delay)?;
    opts.timing = timing_mode(&cuda, &lt, &d, opts.timing);
    let limits = measure_limits(&cuda, &lt, opts.timing, copy_mib, &d, opts.rest);
    crate::say::note!(
        "tunedblas lt: tuning {} shapes on {} ({}), cuBLASLt {} {}; delay: {}, host {:.1} us/call; {}; {}",
        keys.len(),
        cuda.arch(),
        lt.path.display(),
        lt.version(),
        &sha[..12],
        d.describe(),
        d.host_us,
        crate::rest::words(opts.rest),
        if opts.budget > 0.0 {
            format!("wider search {:.1} s per shape (at least {} in all)", opts.budget, mins_secs(opts.budget * keys.len() as f64))
        } else {
            "the heuristic's answers only".into()
        }
    );
    let lib = campaign::Library {
        name: "cublaslt",
        validators: vec![
            ("TUNEDBLAS_BACKEND".into(), "cublaslt".into()),
            ("CUBLASLT_VERSION".into(), lt.version().to_string()),
            (
                "CUDA_RUNTIME_VERSION".into(),
                cuda.runtime_version().to_string(),
            ),
            ("GPU_ARCH".into(), cuda.arch()),
        ],
        record: serde_json::json!({
            "kind": "cublaslt-tune",
            "library": lt.path.display().to_string(),
            "cublaslt_version": lt.version(),
            "arch": cuda.arch(),
            "options": {
                "trials": opts.trials, "candidates": opts.candidates, "margin": opts.margin,
                "win_share": opts.win_share, "workspace": opts.workspace, "sample_ms": opts.sample_ms,
                "explore": opts.explore, "timing": opts.timing, "budget": opts.budget,
                "keep": opts.keep, "fresh": opts.fresh, "alignment": opts.alignment,
                "delay": d.kind().name(), "rest": opts.rest,
            },
            "limits": limits,
        }),
        arch: Some(cuda.arch()),
        entry: vec![("cublaslt_version", lt.version().into())],
        child_args: cublaslt_child_args(&lt, &cuda, &opts),
        sha,
    };
    campaign::run(a, &target, lib, &keys, &opts, |key| {
        tune_key(&cuda, &lt, key, &opts, &d, limits.as_ref())
    })
}

fn profile_rows(a: &Args) -> CliResult<Vec<LtRow>> {
    if let Some(f) = a.value("--rows") {
        let text = std::fs::read_to_string(f).map_err(|e| Error(format!("{f}: {e}")))?;
        return Ok(parse_results(&text).rows);
    }
    let profiles = PathBuf::from(need(a, "--profiles")?);
    let name = need(a, "--name")?;
    let rank: usize = num(a, "--rank", 0)?;
    let file = profiles
        .join(name)
        .join(format!("tunableop_results{rank}.csv"));
    let text =
        std::fs::read_to_string(&file).map_err(|e| Error(format!("{}: {e}", file.display())))?;
    Ok(parse_results(&text).rows)
}

pub fn cmd_recheck(a: &Args) -> CliResult<()> {
    if hip::wanted(a)? {
        return hip::cmd_recheck(a);
    }
    refuse_hip_only(a)?;
    let mut opts = options(a)?;
    let rows = profile_rows(a)?;
    say_other_rows(&rows, LtLib::Cublaslt);
    let (cuda, lt) = load(a)?;
    opts.l2_bytes = cuda.l2_bytes();
    let d = delay(&cuda, &lt, opts.delay)?;
    opts.timing = timing_mode(&cuda, &lt, &d, opts.timing);
    let mut out = Vec::new();
    for r in &rows {
        let LtAction::Config(cfg) = r.action else {
            continue;
        };
        let sets = Problem::sets_for(&r.key, opts.l2_bytes);
        let p = Problem::new(&cuda, &lt, r.key, sets, opts.workspace)?;
        p.set_timing(opts.timing);
        p.set_alignment(opts.alignment)?;
        out.push(say_recheck(tune::recheck(&p, &cfg, &opts, &d)?));
    }
    report_rechecks(a, &opts, out)
}

/// Says how many of `rows` the other Lt library runs (a recheck skips them), and how to
/// recheck those.
fn say_other_rows(rows: &[LtRow], lib: LtLib) {
    let other = rows
        .iter()
        .filter(|r| r.action != LtAction::Default && !lib.serves(&r.action))
        .count();
    if other > 0 {
        let hint = match lib {
            LtLib::Cublaslt => "--backend hipblaslt",
            LtLib::Hipblaslt => "--backend cublaslt",
        };
        eprintln!(
            "tunedblas lt: recheck: {other} rows are not {}'s and are skipped; rerun with {hint} for them",
            lib.name()
        );
    }
}

/// One recheck's line on stdout.
fn say_recheck(c: tune::Recheck) -> tune::Recheck {
    println!(
        "{} {} {}: heuristic {:.5} ms ({:.1}%), tuned {:.5} ms ({:.1}%), gain {:+.1}% {}",
        c.op,
        c.signature,
        c.solution,
        c.heuristic_ms,
        c.heuristic_spread * 100.0,
        c.tuned_ms,
        c.tuned_spread * 100.0,
        c.gain * 100.0,
        match (&c.error, c.still_wins) {
            (Some(e), _) => format!("FAILED: {e}"),
            (None, true) if c.confirmed => "still wins by the margin".into(),
            (None, true) => "still wins, under the margin".into(),
            (None, false) => "FALSE ADOPT".into(),
        }
    );
    c
}

/// The summary line of a recheck and its `--log`.
fn report_rechecks(a: &Args, opts: &tune::Options, out: Vec<tune::Recheck>) -> CliResult<()> {
    let wins = out.iter().filter(|c| c.still_wins).count();
    let confirmed = out.iter().filter(|c| c.confirmed).count();
    // A row that could not run is not a false adopt: it is said apart.
    let failed = out.iter().filter(|c| c.error.is_some()).count();
    println!(
        "recheck: {wins} of {} adopted rows still win in a fresh process ({} false adopts{}; {confirmed} by the {:.0}% margin)",
        out.len(),
        out.len() - wins - failed,
        match failed {
            0 => String::new(),
            n => format!(", {n} could not run"),
        },
        opts.margin * 100.0
    );
    Ok(write_json(
        a.path("--log"),
        &serde_json::json!({
            // How the rows were timed, as `tune` records its own.
            "options": {
                "trials": opts.trials, "margin": opts.margin, "workspace": opts.workspace,
                "sample_ms": opts.sample_ms, "rest": opts.rest, "timing": opts.timing,
            },
            "rechecks": out,
        }),
    )?)
}

fn parse_shape(s: &str) -> Result<(i64, i64, i64)> {
    let v: Vec<i64> = s.split(',').filter_map(|x| x.trim().parse().ok()).collect();
    match v[..] {
        [n, m, k] => Ok((n, m, k)),
        _ => err(format!(
            "--shape takes N,M,K (F.linear out, tokens, in), not {s:?}"
        )),
    }
}

pub fn cmd_verify(a: &Args) -> CliResult<()> {
    let path = need(a, "--stats")?;
    let text = std::fs::read_to_string(path).map_err(|e| Error(format!("{path}: {e}")))?;
    let s: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error(format!("{path}: {e}")))?;
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
    let unhit = s["rows_not_hit"].as_array().map_or(0, Vec::len);
    println!(
        "verify: {} calls, {} served, {} default, {} missed shapes, {} fallbacks, {} of {} rows hit",
        n("calls"),
        n("served"),
        n("default"),
        n("missed_shapes"),
        n("fallbacks"),
        n("rows_hit"),
        n("rows")
    );
    if unhit > 0 || n("missed_shapes") > 0 || n("fallbacks") > 0 || n("rows") == 0 {
        return Err(crate::error::Error::failed(format!(
            "not verified: {unhit} rows never hit, {} shapes missed, {} fallbacks",
            n("missed_shapes"),
            n("fallbacks")
        )));
    }
    Ok(())
}

/// Checks the ABI values tunedblas uses against the real library, and that an algorithm
/// rebuilt from its configuration is the same algorithm.
pub fn cmd_selftest(a: &Args) -> CliResult<()> {
    let (cuda, lt) = load(a)?;
    let key = LtKey::linear(R_16BF, 2560, 256, 1536);
    let p = Problem::new(&cuda, &lt, key, 1, 1 << 20)?;
    let mut failures = Vec::new();
    let mut check = |what: &str, ok: bool| {
        println!("selftest: {what}: {}", if ok { "ok" } else { "FAILED" });
        if !ok {
            failures.push(what.to_string());
        }
    };
    selftest_abi(&lt, key, &mut check)?;
    selftest_rebuilds(&p, &mut check)?;
    if failures.is_empty() {
        println!("selftest: passed");
        Ok(())
    } else {
        Err(crate::error::Error::failed(format!(
            "selftest failed: {}",
            failures.join("; ")
        )))
    }
}

/// Descriptor attributes read back through the values the interposer uses, and the key it
/// would build from them.
fn selftest_abi(lt: &Lt, key: LtKey, check: &mut dyn FnMut(&str, bool)) -> Result<()> {
    // Descriptor attributes read back through the values the interposer uses.
    let (mut desc, mut la, mut lb, mut lc) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    unsafe {
        cuda::lt_check("desc", (lt.desc_create)(&mut desc, COMPUTE_32F, R_32F))?;
        let t = OP_T;
        cuda::lt_check(
            "transa",
            (lt.desc_set)(desc, DESC_TRANSA, (&t as *const i32).cast(), 4),
        )?;
        cuda::lt_check(
            "layout",
            (lt.layout_create)(&mut la, R_16BF, 1536, 2560, 1536),
        )?;
        cuda::lt_check(
            "layout",
            (lt.layout_create)(&mut lb, R_16BF, 1536, 256, 1536),
        )?;
        cuda::lt_check(
            "layout",
            (lt.layout_create)(&mut lc, R_16BF, 2560, 256, 2560),
        )?;
    }
    let geti = |f: GetAttributeFn, o, attr: i32, size: usize| -> Option<i64> {
        let mut v = 0i64;
        let mut w = 0usize;
        (unsafe { f(o, attr, (&mut v as *mut i64).cast(), size, &mut w) } == 0 && w == size)
            .then_some(v)
    };
    check(
        "DESC_COMPUTE_TYPE is 68 (COMPUTE_32F)",
        geti(lt.desc_get, desc, DESC_COMPUTE_TYPE, 4) == Some(COMPUTE_32F as i64),
    );
    check(
        "DESC_SCALE_TYPE is 0 (R_32F)",
        geti(lt.desc_get, desc, DESC_SCALE_TYPE, 4) == Some(0),
    );
    check(
        "DESC_TRANSA reads back T",
        geti(lt.desc_get, desc, DESC_TRANSA, 4) == Some(OP_T as i64),
    );
    check(
        "DESC_TRANSB defaults to N",
        geti(lt.desc_get, desc, DESC_TRANSB, 4) == Some(OP_N as i64),
    );
    check(
        "DESC_EPILOGUE defaults to DEFAULT (1)",
        geti(lt.desc_get, desc, DESC_EPILOGUE, 4) == Some(EPILOGUE_DEFAULT as i64),
    );
    check(
        "DESC_POINTER_MODE defaults to host",
        geti(lt.desc_get, desc, DESC_POINTER_MODE, 4) == Some(0),
    );
    check(
        "DESC_SM_COUNT_TARGET is a 4-byte 0",
        geti(lt.desc_get, desc, DESC_SM_COUNT_TARGET, 4) == Some(0),
    );
    check(
        "LAYOUT_TYPE is bf16 (14)",
        geti(lt.layout_get, la, LAYOUT_TYPE, 4) == Some(R_16BF as i64),
    );
    check(
        "LAYOUT_ROWS is 8 bytes",
        geti(lt.layout_get, la, LAYOUT_ROWS, 8) == Some(1536),
    );
    check(
        "LAYOUT_COLS is 8 bytes",
        geti(lt.layout_get, la, LAYOUT_COLS, 8) == Some(2560),
    );
    check(
        "LAYOUT_LD is 8 bytes",
        geti(lt.layout_get, la, LAYOUT_LD, 8) == Some(1536),
    );
    check(
        "LAYOUT_ORDER defaults to column",
        geti(lt.layout_get, la, LAYOUT_ORDER, 4) == Some(0),
    );
    check(
        "LAYOUT_BATCH_COUNT defaults to 1",
        geti(lt.layout_get, la, LAYOUT_BATCH_COUNT, 4) == Some(1),
    );
    check(
        "LAYOUT_STRIDED_BATCH_OFFSET is 8 bytes",
        geti(lt.layout_get, la, LAYOUT_STRIDED_BATCH_OFFSET, 8) == Some(0),
    );
    // The key the interposer would build from these descriptors.
    let mm = MatmulAttrs {
        trans_a: OP_T,
        ..MatmulAttrs::default()
    };
    let l = |r, c, ld| LayoutAttrs::col(R_16BF, r, c, ld);
    check(
        "key_from_attrs gives F.linear(2560, 256, 1536)",
        key_from_attrs(
            &mm,
            &l(1536, 2560, 1536),
            &l(1536, 256, 1536),
            &l(2560, 256, 2560),
            &l(2560, 256, 2560),
        ) == Ok(key),
    );
    unsafe {
        (lt.layout_destroy)(la);
        (lt.layout_destroy)(lb);
        (lt.layout_destroy)(lc);
        (lt.desc_destroy)(desc);
    }
    Ok(())
}

/// Every heuristic answer: readable configuration -> rebuilt -> same results, bit for bit.
fn selftest_rebuilds(p: &Problem, check: &mut dyn FnMut(&str, bool)) -> Result<()> {
    let answers = p.heuristic(16)?;
    check("the heuristic answers", !answers.is_empty());
    let mut same = 0;
    for r in &answers {
        let cfg = p.config_of(&r.algo)?;
        match p.rebuild(&cfg) {
            Ok((algo, _)) => {
                let a = p.output(&r.algo)?;
                let b = p.output(&algo)?;
                let identical =
                    a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
                let finite = b.iter().all(|x| x.is_finite());
                let words: Vec<usize> =
                    (0..8).filter(|&i| algo.data[i] != r.algo.data[i]).collect();
                println!(
                    "selftest:   {} rebuilt: {}; struct words that differ from the heuristic's: {:?}",
                    cfg.solution_name(),
                    if identical && finite {
                        "identical results"
                    } else {
                        "DIFFERENT results"
                    },
                    words
                );
                same += usize::from(identical && finite);
            }
            Err(e) => println!("selftest:   {} cannot be rebuilt: {e}", cfg.solution_name()),
        }
    }
    check(
        &format!(
            "{same} of {} answers rebuilt to identical results",
            answers.len()
        ),
        same == answers.len(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn miss_files_become_sorted_unique_keys() {
        let dir = std::env::temp_dir().join(format!("tunedblas-lt-misses-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let line = |n, m, k| {
            let (op, sig) = op_and_signature(&LtKey::linear(R_16BF, n, m, k));
            format!("{op},{sig}\n")
        };
        std::fs::write(
            dir.join("h-1-cublaslt-rank0.csv"),
            line(2560, 16, 1536) + &line(512, 4, 2560) + "junk,line\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("h-2-cublaslt-rank0.csv"),
            line(2560, 16, 1536) + &line(2560, 1, 1536),
        )
        .unwrap();
        std::fs::write(
            dir.join("h-2-cublaslt-rank0.counts.csv"),
            "op_name,param_signature,calls\n",
        )
        .unwrap();
        std::fs::write(dir.join("h-3-rank0.csv"), line(64, 64, 64)).unwrap(); // a rocBLAS miss file
        std::fs::write(dir.join("h-4-hipblaslt-rank0.csv"), line(32, 32, 32)).unwrap();
        let keys = read_misses(&[dir.to_str().unwrap()], "cublaslt").unwrap();
        assert_eq!(
            keys,
            [
                LtKey::linear(R_16BF, 512, 4, 2560),
                LtKey::linear(R_16BF, 2560, 1, 1536),
                LtKey::linear(R_16BF, 2560, 16, 1536),
            ]
        );
        // A folder read for hipBLASLt takes the hipBLASLt files only.
        let keys = read_misses(&[dir.to_str().unwrap()], "hipblaslt").unwrap();
        assert_eq!(keys, [LtKey::linear(R_16BF, 32, 32, 32)]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A stand-in for the child `tune` starts: a shell script that checks how it was called
    /// and answers for the first row of the file it was given, as `recheck --log` does.
    fn stand_in_child(dir: &Path, exit: i32) -> PathBuf {
        let script = dir.join(format!("child-{exit}.sh"));
        let body = format!(
            r#"#!/bin/sh
[ "$1" = lt ] && [ "$2" = recheck ] || exit 3
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) rows=$2 ;; --log) log=$2 ;; --lib) lib=$2 ;; --timing) timing=$2 ;; --margin) margin=$2 ;;
    --rest) rest=$2 ;;
  esac
  shift
done
[ "$lib" = /the/cublasLt.so ] && [ "$timing" = graph ] && [ "$margin" = 3 ] && [ "$rest" = 1.5 ] || exit 4
row=$(grep -v '^Validator' "$rows" | head -1)
sig=$(echo "$row" | cut -d, -f2)
sol=$(echo "$row" | cut -d, -f3)
printf '{{"rechecks":[{{"signature":"%s","solution":"%s","gain":0.05,"error":null}}]}}' "$sig" "$sol" >"$log"
echo "recheck: 1 of 1 adopted rows still win"
exit {exit}
"#
        );
        // Written by a `sh` child, not by this process: a fork by another test thread
        // while this process held the file open for writing would pass that descriptor on
        // until its exec, and running the script in that window fails with ETXTBSY.
        use std::io::Write;
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "cat >\"$0\" && chmod 700 \"$0\""])
            .arg(&script)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        sh.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
        assert!(sh.wait().unwrap().success());
        script
    }

    #[test]
    fn the_fresh_process_gets_the_proposed_rows_and_its_verdicts_come_back() {
        let dir =
            std::env::temp_dir().join(format!("tunedblas-lt-fresh-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = LtKey::linear(R_16BF, 512, 256, 2560);
        let cfg = AlgoConfig::parse(
            "Gemm_Cublaslt_algo66_tile47_stages35_splitk1_red0_swizzle0_custom0_inner0_cluster2",
        )
        .unwrap();
        let rows = [LtRow {
            key,
            action: LtAction::Config(cfg),
            time_ms: Some(0.0064),
        }];
        // The child times as the campaign does: its rest too.
        let opts = tune::Options {
            rest: 1.5,
            ..Default::default()
        };
        let libs: Vec<std::ffi::OsString> = [
            "--lib",
            "/the/cublasLt.so",
            "--cudart",
            "/the/cudart.so",
            "--timing",
            opts.timing.name(),
        ]
        .iter()
        .map(Into::into)
        .collect();
        let work = dir.join("work");
        let v = fresh_verdicts(&stand_in_child(&dir, 0), &libs, &opts, &rows, &work).unwrap();
        let sig = op_and_signature(&key).1;
        assert_eq!(v, [(sig, cfg.solution_name(), Some(0.05))]);
        // A child that fails gives no verdicts, whatever it wrote.
        let e = fresh_verdicts(&stand_in_child(&dir, 1), &libs, &opts, &rows, &work).unwrap_err();
        assert!(e.contains("exit status: 1"), "{e}");
        let missing = dir.join("no-such-program");
        assert!(fresh_verdicts(&missing, &libs, &opts, &rows, &work).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_profile_is_written_by_a_store_transaction_one_rank_at_a_time() {
        let dir = std::env::temp_dir().join(format!("tunedblas-lt-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let profiles = dir.join("profiles");
        let folder = crate::store::Folder {
            name: "h200-lt".into(),
            dir: profiles.join("h200-lt"),
            existed: false,
        };
        let sha = "ab".repeat(32);
        let results = |m| LtResults {
            validators: vec![("TUNEDBLAS_BACKEND".into(), "cublaslt".into())],
            rows: vec![LtRow {
                key: LtKey::linear(R_16BF, 512, m, 256),
                action: LtAction::Default,
                time_ms: Some(0.01),
            }],
            skipped: Vec::new(),
            wildcards: Vec::new(),
        };
        let entry = || {
            let mut e = registry::Entry::new("h200-lt", &sha);
            e.extra.insert("library".into(), "cublaslt".into());
            e
        };
        let campaign = |rank| serde_json::json!({ "kind": "cublaslt-tune", "rank": rank });
        for rank in [0, 1] {
            let file = write_profile(
                &profiles,
                &folder,
                rank,
                &sha,
                &results(rank as i64 + 1),
                entry(),
                campaign(rank),
            )
            .unwrap();
            assert_eq!(
                file,
                folder.dir.join(format!("tunableop_results{rank}.csv"))
            );
        }
        // Rank 1 left rank 0 as it was.
        let rows = |rank: usize| {
            let f = folder.dir.join(format!("tunableop_results{rank}.csv"));
            parse_results(&std::fs::read_to_string(f).unwrap()).rows
        };
        assert_eq!(rows(0), results(1).rows);
        assert_eq!(rows(1), results(2).rows);
        let store = crate::store::Store::existing(&profiles).unwrap();
        let reg = store.registry().unwrap();
        let e = reg.get("h200-lt").unwrap();
        assert_eq!(e.lib_sha256, sha);
        let prov = std::fs::read_to_string(folder.dir.join("provenance.json")).unwrap();
        assert!(
            prov.contains("cublaslt-tune") && prov.contains(&sha),
            "{prov}"
        );
        // An entry the registry refuses fails the transaction, and nothing is written.
        let other = registry::Entry::new("h200-lt", "not a sha256");
        let before = std::fs::read_to_string(store.registry_path()).unwrap();
        let refused = write_profile(&profiles, &folder, 2, &sha, &results(3), other, campaign(2));
        assert!(refused.is_err());
        assert!(!folder.dir.join("tunableop_results2.csv").exists());
        assert_eq!(
            std::fs::read_to_string(store.registry_path()).unwrap(),
            before
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn parse(args: &[&str]) -> Args {
        let options = [
            "--misses",
            "--name",
            "--trials",
            "--alignment",
            "--confirm",
            "--timing",
            "--margin",
        ];
        Args::parse("lt tune", &args.map_strings(), &[], &options).unwrap()
    }

    trait MapStrings {
        fn map_strings(&self) -> Vec<String>;
    }

    impl MapStrings for [&str] {
        fn map_strings(&self) -> Vec<String> {
            self.iter().map(|s| s.to_string()).collect()
        }
    }

    #[test]
    fn arguments() {
        let a = parse(&[
            "--misses", "a", "b", "--name", "x", "--trials", "9", "--misses", "c",
        ]);
        assert_eq!(a.values("--misses"), ["a", "c"]);
        assert_eq!(a.positional, ["b"]);
        assert_eq!(need(&a, "--name").unwrap(), "x");
        assert_eq!(need(&a, "--trials").unwrap(), "9");
        assert_eq!(need(&a, "--timing").unwrap_err().exit_code(), 2);
        assert_eq!(num(&a, "--trials", 1usize).unwrap(), 9);
        assert_eq!(options(&a).unwrap().trials, 9);
        // The margin is in percent, as `tunedblas tune` takes it.
        assert_eq!(options(&a).unwrap().margin, 0.03);
        assert_eq!(options(&parse(&["--margin", "5"])).unwrap().margin, 0.05);
        assert_eq!(num::<usize>(&a, "--name", 1).unwrap_err().exit_code(), 2);
        for bad in [
            &["--alignment", "48"][..],
            &["--confirm", "maybe"],
            &["--timing", "clock"],
            &["--trials", "many"],
            &["--margin", "0.03"],
        ] {
            let e = options(&parse(bad)).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {}", e.message);
        }
        assert_eq!(parse_shape("2560,16,1536").unwrap(), (2560, 16, 1536));
        assert!(parse_shape("1,2").is_err());
    }
}
