//! `tunedblas watch`: tuning that follows the misses as they come, beside a server (a systemd
//! unit, a sidecar container) and out of its process (its help says what it does).
//!
//! Each round is a `tune` child of this same program, so a round is exactly what an operator
//! would run by hand (its checkpoint, its store lock, its progress), and this loop only
//! decides when: not more often than `--every`, and within `--hour-budget` seconds of
//! tuning per hour (a round is never cut short: the budget is checked between rounds). On
//! SIGTERM or SIGINT the running round gets the signal too (its shapes done so far are kept
//! in its checkpoint, and the next `watch` or `tune` with the same inputs, or more: the misses
//! recorded since, resumes it; a commit under way finishes first) and the loop ends with
//! status 0.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crate::args::{self, Args};
use crate::error::{Error, Result};
use crate::say::note;

const ABOUT: &str = "\
Follows the misses as they come: every --every seconds, runs `tunedblas tune` on the miss
folder (DIR, else $TUNEDBLAS_MISS_DIR, as the interposer), which tunes the shapes recorded
since and commits each row to the store; running servers serve the new rows within seconds
(hot reload). Tuning is kept within --hour-budget seconds per hour. Stops cleanly on SIGTERM
or SIGINT (a round cut short resumes the next time, with the misses recorded since added).
Options after `--` go to every `tune` round (e.g. -- --devices 1 --trials 9).";

const AFTER: &str = "\
EXAMPLES:
    tunedblas watch --lib /opt/rocm/lib/librocblas.so.4
    tunedblas watch --lib librocblas.so.4 /var/cache/tunedblas/misses --every 30 -- --devices 1
";

const OPTIONS: &str = "\
DIR                    the miss folder to follow (default $TUNEDBLAS_MISS_DIR, as the interposer)
--lib LIB              the rocBLAS build the servers load (required)
--profiles
--every SECONDS        the least time between the starts of two rounds (default 60)
--hour-budget SECONDS  tuning time allowed in any hour (default 900: a quarter of the device's time)
--rounds N             stop after N rounds (default: run until stopped)
";

pub fn cli() -> clap::Command {
    args::command("watch", ABOUT, AFTER)
        .args(args::table(OPTIONS))
        .arg(
            clap::Arg::new("tune-args")
                .num_args(0..)
                .last(true)
                .value_name("TUNE OPTIONS")
                .help("options for every `tune` round, after `--`"),
        )
}

/// Set by SIGTERM / SIGINT.
static STOP: AtomicBool = AtomicBool::new(false);
/// The running round's pid (0: none), for the handler to pass the signal on.
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop(sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    let child = CHILD.load(Ordering::SeqCst);
    if child > 0 {
        // SAFETY: kill is async-signal-safe; the pid is our own child's.
        unsafe { libc::kill(child, sig) };
    }
}

/// Sleeps up to `d`, waking early when a stop was asked.
fn nap(d: Duration) {
    let until = Instant::now() + d;
    while !STOP.load(Ordering::SeqCst) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100).min(until - Instant::now()));
    }
}

pub fn run(a: &Args) -> Result<()> {
    let lib = a.lib()?;
    let seconds = |name, default| a.parsed(name, default, "a whole number of seconds");
    let every = Duration::from_secs(seconds("--every", 60)?);
    let budget = Duration::from_secs(seconds("--hour-budget", 900)?);
    let rounds = a
        .value("--rounds")
        .map(|_| a.parsed("--rounds", 0u64, "a whole number"))
        .transpose()?;
    let dir = a
        .positional
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(tunedblas_core::settings::miss_dir);
    let extra: Vec<String> = a
        .values("tune-args")
        .into_iter()
        .map(String::from)
        .collect();
    let me = std::env::current_exe()
        .map_err(|e| Error::failed(format!("cannot find this program: {e}")))?;
    // SAFETY: plain handlers that store an atomic and pass the signal to the child.
    unsafe {
        libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_stop as *const () as libc::sighandler_t);
    }
    note!(
        "watch: following {} for {} (a round at most every {} s, {} s of tuning an hour)",
        dir.display(),
        lib.display(),
        every.as_secs(),
        budget.as_secs()
    );
    // (start, length) of the rounds of the last hour.
    let mut spent: Vec<(Instant, Duration)> = Vec::new();
    let mut n = 0u64;
    while !STOP.load(Ordering::SeqCst) && rounds.is_none_or(|r| n < r) {
        let began = Instant::now();
        spent.retain(|(at, _)| began.duration_since(*at) < Duration::from_secs(3600));
        let used: Duration = spent.iter().map(|(_, d)| *d).sum();
        if used >= budget {
            note!(
                "watch: {} s of tuning in the last hour: waiting",
                used.as_secs()
            );
            nap(every);
            continue;
        }
        n += 1;
        if dir.is_dir() {
            let mut cmd = Command::new(&me);
            cmd.arg("tune")
                .arg("--lib")
                .arg(&lib)
                .arg("--profiles")
                .arg(a.profile_store())
                .arg(&dir)
                .arg("--json")
                .args(&extra)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            let child = cmd
                .spawn()
                .map_err(|e| Error::failed(format!("cannot run tune: {e}")))?;
            CHILD.store(child.id() as i32, Ordering::SeqCst);
            let out = child.wait_with_output();
            CHILD.store(0, Ordering::SeqCst);
            let out = out.map_err(|e| Error::failed(format!("tune: {e}")))?;
            let took = began.elapsed();
            spent.push((began, took));
            if STOP.load(Ordering::SeqCst) {
                note!("watch: stopped during round {n}; its finished shapes are kept, the rest resume next time");
                break;
            }
            if !out.status.success() {
                note!(
                    "watch: round {n}: tune ended with {} (see above); trying again next round",
                    out.status
                );
            } else {
                report(n, &out.stdout, took);
            }
        } else {
            note!(
                "watch: round {n}: {} does not exist yet (no process has recorded a miss)",
                dir.display()
            );
        }
        nap(every.saturating_sub(began.elapsed()));
    }
    note!("watch: stopped after {n} rounds");
    Ok(())
}

/// One line for a round, from tune's JSON (`counts`).
fn report(n: u64, stdout: &[u8], took: Duration) {
    let v: serde_json::Value = serde_json::from_slice(stdout).unwrap_or_default();
    let c = &v["counts"];
    let get = |k: &str| c[k].as_u64().unwrap_or(0);
    if get("shapes") == 0 {
        note!("watch: round {n}: nothing new to tune");
        return;
    }
    // A round that resumed a campaign stopped before (with the shapes recorded since).
    let resumed = match (
        v["resumed"].as_u64().unwrap_or(0),
        v["added"].as_u64().unwrap_or(0),
    ) {
        (0, _) => String::new(),
        (r, 0) => format!(" (resumed: {r} done before)"),
        (r, a) => format!(
            " (resumed: {r} of {} done before; {a} new shapes added)",
            get("shapes").saturating_sub(a)
        ),
    };
    note!(
        "watch: round {n}: {} shapes{resumed} in {:.0} s: {} new rows, {} replaced, {} Default, {} undecidable, {} failed; profile {}",
        get("shapes"),
        took.as_secs_f64(),
        get("new"),
        get("replaced"),
        get("default"),
        get("undecidable"),
        get("failed"),
        v["profile"].as_str().unwrap_or("?")
    );
}
