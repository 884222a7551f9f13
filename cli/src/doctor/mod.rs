//! `tunedblas doctor`: a field test of the whole loop on the operator's own machine and
//! library, one line per step, and a bundle to attach to a bug report.
//!
//! Every step runs the real thing in a child process, as a user would: the workload under
//! `LD_PRELOAD=libtunedblas.so` ([`child`]), `tunedblas selftest`, `tunedblas tune`. The
//! children's profile store, miss folder and hash cache are folders of the bundle: the
//! user's own are never read or written. A step that fails stops the run (the steps after
//! it need what it makes: they say SKIP); the bundle is written whatever happens.

pub mod bundle;
pub mod child;
pub mod find;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use serde::Serialize;
use tunedblas_tuner::backends::Kind;

use crate::error::{Error, Result};

/// The bundle's archive, inside the bundle folder.
pub const ARCHIVE: &str = "doctor-bundle.tar.gz";
/// The saved outputs of the run without the preload (large on a GPU: removed at the end).
const OUTPUTS: &str = ".outputs";

/// How big the workload's shapes are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Size {
    /// Small where no GPU driver is seen (the CPU reference and the stand-ins), else full.
    #[default]
    Auto,
    Small,
    Full,
}

#[derive(Default)]
pub struct Options {
    pub lib: Option<PathBuf>,
    pub backend: Option<Kind>,
    pub out: Option<PathBuf>,
    pub preload: Option<PathBuf>,
    /// `--cudart` / `--hip` as given, passed on to every child.
    pub runtime: Vec<OsString>,
    pub size: Size,
    /// Options for `tune` the user gave (`--budget 5`, ...): they replace the doctor's.
    pub method: Vec<(String, String)>,
    pub workspace: usize,
    /// The command line, for the bundle.
    pub argv: Vec<String>,
}

/// The workload's `F.linear` shapes (out N, tokens M, in K): a 4096-wide decoder's
/// projections at decode (1 and 8 tokens) and prefill-chunk (128 and 256 tokens) sizes.
const FULL: [(i64, i64, i64); 4] = [
    (4096, 1, 4096),
    (12288, 8, 4096),
    (4096, 128, 11008),
    (22016, 256, 4096),
];
/// The same, 64 times narrower: seconds on a CPU.
const SMALL: [(i64, i64, i64); 4] = [(64, 1, 64), (192, 8, 64), (64, 16, 172), (344, 4, 64)];

/// `tune`'s options by size, before the user's: bounded so the whole run takes at most
/// five minutes on a GPU (a 10 s screening budget per shape) and seconds on the CPU.
fn tune_defaults(small: bool) -> Vec<(&'static str, &'static str)> {
    match small {
        true => vec![
            ("--trials", "7"),
            ("--max-trials", "14"),
            ("--budget", "2"),
            ("--rest", "0"),
            ("--rotate-mib", "0.02"),
        ],
        false => vec![("--budget", "10")],
    }
}

/// A step's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Pass,
    Warn,
    Fail,
    Skip,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Step {
    pub number: usize,
    pub name: &'static str,
    pub verdict: Verdict,
    pub text: String,
    /// What to do (on FAIL and WARN).
    pub todo: Option<String>,
}

/// What a step found: its line, or why it failed, what to do, and the exit code.
struct Fail {
    text: String,
    todo: String,
    error: fn(String) -> Error,
}

fn fail(text: impl Into<String>, todo: impl Into<String>) -> Fail {
    Fail {
        text: text.into(),
        todo: todo.into(),
        error: Error::failed,
    }
}

type Done = std::result::Result<(Verdict, String, Option<String>), Fail>;

fn pass(text: impl Into<String>) -> Done {
    Ok((Verdict::Pass, text.into(), None))
}

/// Everything the bundle says of this machine.
#[derive(Debug, Default, Serialize)]
struct Facts {
    tunedblas: String,
    command: Vec<String>,
    started: String,
    backend: String,
    library: PathBuf,
    found: String,
    sha256: String,
    bytes: u64,
    version: String,
    runtime: PathBuf,
    devices: i32,
    arch: Option<String>,
    gpu: Vec<String>,
    preload: PathBuf,
    preload_sha256: String,
    size: String,
    shapes: Vec<String>,
    os: String,
    environment: Vec<(String, String)>,
}

/// The steps, in order: name and what it shows.
#[rustfmt::skip]
pub const STEPS: [(&str, &str); 11] = [
    ("library", "the library is found and hashed"),
    ("preload", "libtunedblas.so is found and exports this library's GEMM"),
    ("device", "the library and its runtime load and see a device (cuBLASLt: selftest)"),
    ("intercept", "the preload loads in a child and sees every GEMM call"),
    ("record", "the workload's shapes are written to the miss folder"),
    ("baseline", "the workload runs without the preload"),
    ("tune", "the engine tunes the recorded shapes"),
    ("profile", "a profile is written for exactly this build"),
    ("serve", "served under the preload: every row hit, no fallback"),
    ("outputs", "outputs identical without the preload (heuristic's rows), within tolerance otherwise"),
    ("timing", "GEMM time with the profile against without the preload"),
];

#[derive(Default)]
struct Doctor {
    out: PathBuf,
    opts: Options,
    facts: Facts,
    steps: Vec<Step>,
    /// The first failure's exit error.
    failed: Option<Error>,
    lines: Vec<String>,
    // What the steps pass on to each other.
    kind: Option<Kind>,
    preload: PathBuf,
    shapes: Vec<String>,
    small: bool,
    calls: (usize, usize),
    record: Option<child::Report>,
    baseline: Option<child::Report>,
    served: Option<child::Report>,
    rows: Vec<(String, String)>,
    undecided: Vec<String>,
}

pub fn run(opts: Options) -> Result<()> {
    let out = match &opts.out {
        Some(o) => o.clone(),
        None => PathBuf::from(format!("doctor-{}", stamp())),
    };
    fresh_bundle(&out)?;
    let mut d = Doctor {
        out: out.clone(),
        facts: Facts {
            tunedblas: crate::VERSION.into(),
            command: opts.argv.clone(),
            started: crate::store::utc_now(),
            ..Facts::default()
        },
        opts,
        ..Doctor::default()
    };
    let started = Instant::now();
    d.say(format!(
        "tunedblas doctor {}: {} steps; bundle {}",
        crate::VERSION,
        STEPS.len(),
        out.display()
    ));
    d.step(Doctor::library);
    d.step(Doctor::preload);
    d.step(Doctor::device);
    d.step(Doctor::intercept);
    d.step(Doctor::record);
    d.step(Doctor::baseline);
    d.step(Doctor::tune);
    d.step(Doctor::profile);
    d.step(Doctor::serve);
    d.step(Doctor::outputs);
    d.step(Doctor::timing);
    d.finish(started)
}

/// A workload run's shapes (none where the run did not happen).
fn shapes_of(run: &Option<child::Report>) -> Vec<child::ShapeRun> {
    run.as_ref().map(|r| r.shapes.clone()).unwrap_or_default()
}

/// The `op,signature` of each of a workload run's shapes.
fn shape_names(run: &Option<child::Report>) -> Vec<String> {
    shapes_of(run).into_iter().map(|s| s.shape).collect()
}

/// `20260103-141502` (UTC), for the default bundle's name.
fn stamp() -> String {
    let t = crate::store::utc_now();
    t.chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .map(|c| if c == 'T' { '-' } else { c })
        .collect()
}

/// A new or empty folder for the bundle; anything else is refused, never emptied.
fn fresh_bundle(dir: &Path) -> Result<()> {
    let empty = std::fs::read_dir(dir).map_or(true, |mut rd| rd.next().is_none());
    if !empty {
        return Err(Error::usage(
            "doctor",
            format!(
                "--out {}: not empty; give a new or empty folder (the bundle is made there)",
                dir.display()
            ),
        ));
    }
    for sub in ["profiles", "misses", "cache", "logs", "stats", OUTPUTS] {
        std::fs::create_dir_all(dir.join(sub))
            .map_err(|e| Error::failed(format!("cannot create {}: {e}", dir.display())))?;
    }
    tunedblas_core::registry::Registry::new()
        .save_atomic(&dir.join("profiles/profiles.json"))
        .map_err(|e| Error::failed(e.to_string()))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The last non-empty line of a child's stderr: what it said last, usually why it failed.
fn last_line(out: &Output) -> String {
    text(&out.stderr)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(nothing on stderr)")
        .trim()
        .trim_start_matches("error: ")
        .to_string()
}

fn ms(x: f64) -> String {
    format!("{x:.3} ms")
}

impl Doctor {
    fn say(&mut self, line: String) {
        println!("{line}");
        self.lines.push(line);
    }

    /// Runs one step unless an earlier one failed, and prints its line.
    fn step(&mut self, f: fn(&mut Doctor) -> Done) {
        let number = self.steps.len() + 1;
        let name = STEPS[number - 1].0;
        let (verdict, text, todo) = match &self.failed {
            Some(_) => (
                Verdict::Skip,
                format!(
                    "not run: step {} failed",
                    self.steps
                        .iter()
                        .find(|s| s.verdict == Verdict::Fail)
                        .map_or("?", |s| s.name)
                ),
                None,
            ),
            None => match f(self) {
                Ok(done) => done,
                Err(e) => {
                    self.failed = Some((e.error)(format!(
                        "doctor: step {number} ({name}) failed: {}",
                        e.text
                    )));
                    (Verdict::Fail, e.text, Some(e.todo))
                }
            },
        };
        let mut line = format!(
            "{number:>2}/{} {}  {name:<9}  {text}",
            STEPS.len(),
            verdict.word()
        );
        if let Some(t) = &todo {
            line.push_str(&format!("\n{:>18} {t}", "->"));
        }
        self.say(line);
        self.steps.push(Step {
            number,
            name,
            verdict,
            text,
            todo,
        });
    }

    fn kind(&self) -> Kind {
        self.kind.expect("the library step ran")
    }

    /// Runs `tunedblas <args>` with the bundle's folders and nothing of the user's settings
    /// ([`crate::verify::child`]), under the preload writing its counters to `stats` where
    /// given, keeping its stdout and stderr as `logs/<tag>.*.txt`.
    fn logged(
        &self,
        args: &[OsString],
        stats: Option<&Path>,
        tag: &str,
    ) -> std::result::Result<Output, Fail> {
        let preload = stats.map(|s| (self.preload.as_path(), s));
        let cannot = |e: String| {
            fail(
                format!("cannot start tunedblas: {e}"),
                "check that the tunedblas binary can be run",
            )
        };
        let mut cmd = crate::verify::child(
            &self.out.join("profiles"),
            &self.out.join("misses"),
            preload,
        )
        .map_err(|e| cannot(e.message))?;
        cmd.args(args)
            .env("TUNEDBLAS_CACHE_DIR", self.out.join("cache"))
            .env("TUNEDBLAS_NEAR", "0")
            .env("TUNEDBLAS_LOG", "info");
        let out = cmd.output().map_err(|e| cannot(e.to_string()))?;
        let logs = self.out.join("logs");
        let _ = std::fs::write(logs.join(format!("{tag}.stderr.txt")), &out.stderr);
        let _ = std::fs::write(logs.join(format!("{tag}.stdout.txt")), &out.stdout);
        Ok(out)
    }

    /// A child's arguments: `head`, then those that load the library (`--lib` and the
    /// runtime named).
    fn args(&self, head: &[&str]) -> Vec<OsString> {
        let mut v: Vec<OsString> = head.iter().map(OsString::from).collect();
        v.extend(["--lib".into(), self.facts.library.clone().into()]);
        v.extend(self.opts.runtime.iter().cloned());
        v
    }

    /// The workload in a child: `tag` names its logs and stats; `preload` runs it under the
    /// interposer; `outputs` (`--save` or `--compare`) writes its outputs to the bundle or
    /// compares them with those. Its report and where its stats are, or the step's failure:
    /// `what` failed ("the workload under the preload"), see its log (and `note`).
    fn workload(
        &self,
        tag: &str,
        preload: bool,
        outputs: Option<&str>,
        what: &str,
        note: &str,
    ) -> std::result::Result<(child::Report, PathBuf), Fail> {
        let stats = self.out.join("stats").join(format!("{tag}.json"));
        let mut args = self.args(&["doctor-run", "--backend", self.kind().tag()]);
        args.extend(
            [
                "--shapes".to_string(),
                self.shapes.join(";"),
                "--calls".into(),
                self.calls.0.to_string(),
                "--samples".into(),
                self.calls.1.to_string(),
                "--workspace".into(),
                self.opts.workspace.to_string(),
            ]
            .map(OsString::from),
        );
        if let Some(flag) = outputs {
            args.extend([flag.into(), self.out.join(OUTPUTS).into_os_string()]);
        }
        let out = self.logged(&args, preload.then_some(stats.as_path()), tag)?;
        match serde_json::from_slice(&out.stdout) {
            Ok(report) if out.status.success() => Ok((report, stats)),
            _ => Err(fail(
                format!("{what} failed ({}): {}", out.status, last_line(&out)),
                format!("see logs/{tag}.stderr.txt in the bundle{note}"),
            )),
        }
    }

    // ---- the steps ----

    fn library(&mut self) -> Done {
        let found = find::find(self.opts.lib.as_deref(), self.opts.backend).map_err(|e| Fail {
            text: e,
            todo: "pass --lib PATH: the rocBLAS, hipBLASLt or cuBLASLt file your framework loads (`ldd`, or /proc/<pid>/maps of a running server, shows it)".into(),
            error: Error::not_loaded,
        })?;
        let meta = std::fs::metadata(&found.path);
        let sha = tunedblas_core::identity::sha256_file(&found.path).map_err(|e| Fail {
            text: format!("cannot read {}: {e}", found.path.display()),
            todo: "check the file's permissions".into(),
            error: Error::not_loaded,
        })?;
        self.kind = Some(found.kind);
        self.facts.backend = found.kind.name().into();
        self.facts.library = found.path.clone();
        self.facts.found = found.how.clone();
        self.facts.sha256 = sha.clone();
        self.facts.bytes = meta.map_or(0, |m| m.len());
        for (k, p) in &found.others {
            self.say(format!(
                "      also here: {} {} (--backend {} tests it instead)",
                k.name(),
                p.display(),
                k.tag()
            ));
        }
        pass(format!(
            "{} {} ({}), sha256 {}",
            found.kind.name(),
            found.path.display(),
            found.how,
            &sha[..16]
        ))
    }

    fn preload(&mut self) -> Done {
        let path = crate::verify::preload_path(self.opts.preload.as_deref()).map_err(|e| {
            fail(
                e.message,
                "install tunedblas with its libtunedblas.so (scripts/install), or pass --preload PATH",
            )
        })?;
        let symbol = match self.kind() {
            Kind::Rocblas => "rocblas_gemm_ex",
            Kind::Hipblaslt => "hipblasLtMatmul",
            Kind::Cublaslt => "cublasLtMatmul",
        };
        if !tunedblas_core::elf::defines(&path, symbol).unwrap_or(false) {
            return Err(fail(
                format!(
                    "{} does not export {symbol}: it is not tunedblas's interposer",
                    path.display()
                ),
                "pass --preload the libtunedblas.so built with this tunedblas",
            ));
        }
        self.facts.preload_sha256 =
            tunedblas_core::identity::sha256_file(&path).unwrap_or_default();
        self.facts.preload = path.clone();
        self.preload = path.clone();
        pass(format!("{} exports {symbol}", path.display()))
    }

    fn device(&mut self) -> Done {
        let kind = self.kind();
        let args = self.args(&["doctor-run", "--backend", kind.tag(), "--probe"]);
        let out = self.logged(&args, None, "device")?;
        let loaded: Option<child::Loaded> = serde_json::from_slice(&out.stdout).ok();
        let Some(loaded) = loaded.filter(|_| out.status.success()) else {
            let (error, todo): (fn(String) -> Error, &str) = match out.status.code() {
                Some(4) => (Error::no_device, "check the GPU is visible (nvidia-smi, rocm-smi), the driver loaded, and CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES"),
                Some(3) => (Error::not_loaded, "the library or its runtime does not load: pass --cudart / --hip PATH, or fix LD_LIBRARY_PATH"),
                _ => (Error::failed, "see logs/device.stderr.txt in the bundle"),
            };
            return Err(Fail {
                text: format!(
                    "the library did not load in a child ({}): {}",
                    out.status,
                    last_line(&out)
                ),
                todo: todo.into(),
                error,
            });
        };
        self.facts.version = loaded.version.clone();
        self.facts.runtime = loaded.runtime.clone();
        self.facts.devices = loaded.devices;
        self.facts.arch = loaded
            .arch
            .clone()
            .or_else(|| crate::env::gpu_archs().first().cloned());
        self.facts.gpu = gpu_names(kind);
        // The workload's size, now that the device is known.
        self.small = match self.opts.size {
            Size::Small => true,
            Size::Full => false,
            Size::Auto => !gpu_driver(kind),
        };
        self.facts.size = match (self.opts.size, self.small) {
            (Size::Auto, true) => {
                "small (auto: no GPU driver here, a CPU reference or stand-in)".into()
            }
            (Size::Auto, false) => "full (auto: a GPU driver is here)".into(),
            (_, true) => "small (--size)".into(),
            (_, false) => "full (--size)".into(),
        };
        self.calls = if self.small { (3, 3) } else { (50, 7) };
        self.shapes = (if self.small { &SMALL } else { &FULL })
            .iter()
            .map(|&(n, m, k)| match kind {
                Kind::Rocblas => format!("f16:TN:{n}:{m}:{k}"),
                _ => format!("{n},{m},{k}"),
            })
            .collect();
        self.facts.shapes = self.shapes.clone();
        let mut said = format!(
            "{} {} on {} device{} ({}), runtime {}",
            kind.name(),
            loaded.version,
            loaded.devices,
            if loaded.devices == 1 { "" } else { "s" },
            self.facts.arch.as_deref().unwrap_or("arch not reported"),
            loaded.runtime.display()
        );
        if let Some(g) = self.facts.gpu.first() {
            said.push_str(&format!("; GPU {g}"));
        }
        if kind == Kind::Cublaslt && !gpu_driver(kind) {
            said.push_str("; selftest not run: no NVIDIA driver here (a stand-in library)");
        }
        if kind == Kind::Cublaslt && gpu_driver(kind) {
            let out = self.logged(&self.args(&["selftest"]), None, "selftest")?;
            if !out.status.success() {
                return Err(fail(
                    format!("tunedblas selftest failed: {}", last_line(&out)),
                    "cuBLASLt's ABI values or rebuilt algorithms differ from what tunedblas relies on: attach the bundle to a bug report",
                ));
            }
            let checks = text(&out.stdout)
                .lines()
                .filter(|l| l.ends_with(": ok"))
                .count();
            said.push_str(&format!("; selftest: {checks} checks ok"));
        }
        pass(said)
    }

    fn intercept(&mut self) -> Done {
        let (report, stats) = self.workload(
            "record",
            true,
            None,
            "the workload under the preload",
            " (the interposer's start line says what it found)",
        )?;
        let Some(s) = crate::verify::Stats::read(&stats) else {
            return Err(fail(
                format!("the interposer wrote no counters ({} missing): it did not load in the child", stats.display()),
                "check that libtunedblas.so matches this tunedblas build and that nothing else sets LD_PRELOAD; see logs/record.stderr.txt",
            ));
        };
        let made = report.calls;
        self.record = Some(report);
        if s.calls < made {
            return Err(fail(
                format!("the interposer saw {} of the {made} GEMM calls the workload made", s.calls),
                "the library's GEMM is reached without the preload's export (a static link?): attach the bundle",
            ));
        }
        pass(format!(
            "libtunedblas.so in a child saw all {made} {} calls ({} missed and recorded: no profile yet)",
            self.kind().name(),
            s.missed_calls + s.passed_through
        ))
    }

    fn record(&mut self) -> Done {
        let recorded = miss_shapes(&self.out.join("misses"));
        let want = shape_names(&self.record);
        let missing: Vec<&String> = want.iter().filter(|w| !recorded.contains(w)).collect();
        if !missing.is_empty() {
            return Err(fail(
                format!(
                    "{} of {} shapes not in the miss folder: {}",
                    missing.len(),
                    want.len(),
                    missing
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                "see misses/ and logs/record.stderr.txt in the bundle",
            ));
        }
        pass(format!(
            "{} shapes written to the miss folder ({} files)",
            want.len(),
            std::fs::read_dir(self.out.join("misses")).map_or(0, |rd| rd.count())
        ))
    }

    fn baseline(&mut self) -> Done {
        let what = "the workload without the preload";
        let (report, _) = self.workload("baseline", false, Some("--save"), what, "")?;
        let total: f64 = report.shapes.iter().map(|s| s.ms).sum();
        let shaky = report.shapes.iter().filter(|s| !s.deterministic).count();
        let line = format!(
            "{} shapes ({}), {} per pass{}",
            report.shapes.len(),
            self.facts.size.split(' ').next().unwrap_or(""),
            ms(total),
            match shaky {
                0 => String::new(),
                n => format!(
                    "; {n} shapes not bit-reproducible run to run (held to the tolerance below)"
                ),
            }
        );
        self.baseline = Some(report);
        pass(line)
    }

    fn tune(&mut self) -> Done {
        let mut args = self.args(&["tune", "--json"]);
        args.extend([
            "--profiles".into(),
            self.out.join("profiles").into_os_string(),
        ]);
        args.extend(["--workspace".into(), self.opts.workspace.to_string().into()]);
        let mut opts: Vec<(String, String)> = tune_defaults(self.small)
            .into_iter()
            .filter(|(k, _)| !self.opts.method.iter().any(|(m, _)| m == k))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        opts.extend(self.opts.method.iter().cloned());
        for (k, v) in &opts {
            args.extend([OsString::from(k), OsString::from(v)]);
        }
        args.push(self.out.join("misses").into_os_string());
        let started = Instant::now();
        let out = self.logged(&args, None, "tune")?;
        let secs = started.elapsed().as_secs_f64();
        let stdout = text(&out.stdout);
        let summary: Option<serde_json::Value> = stdout
            .find('{')
            .and_then(|i| serde_json::from_str(&stdout[i..]).ok());
        let (true, Some(summary)) = (out.status.success(), summary) else {
            return Err(fail(
                format!(
                    "`tunedblas tune` exited {}: {}",
                    out.status,
                    last_line(&out)
                ),
                "see logs/tune.stderr.txt in the bundle",
            ));
        };
        let c = &summary["counts"];
        let n = |k: &str| c[k].as_u64().unwrap_or(0);
        let tuned = n("new") + n("replaced");
        let undecided = n("undecidable") + n("rejected") + n("failed");
        let options: Vec<String> = opts.iter().map(|(k, v)| format!("{k} {v}")).collect();
        pass(format!(
            "{} shapes in {secs:.0} s ({}): {tuned} tuned rows, {} kept the heuristic (Default rows), {undecided} undecided (no row)",
            n("shapes"),
            options.join(" "),
            n("default"),
        ))
    }

    fn profile(&mut self) -> Done {
        let store = self.out.join("profiles");
        let sel = tunedblas_core::profile::select(&tunedblas_core::profile::Request {
            profile_dir: &store,
            sha256: &self.facts.sha256,
            explicit: None,
            allow_mismatch: false,
        });
        let (name, dir, reason) = match sel {
            // The selection words its reasons for rocBLAS; its rules are every library's.
            tunedblas_core::profile::Selection::Chosen { name, dir, reason } => {
                (name, dir, reason.replace("rocBLAS", self.kind().name()))
            }
            tunedblas_core::profile::Selection::None { why } => {
                return Err(fail(
                    format!(
                        "no profile the interposer would choose for sha256 {}: {why}",
                        &self.facts.sha256[..16]
                    ),
                    "see profiles/ and logs/tune.stderr.txt in the bundle",
                ))
            }
        };
        self.rows = results_rows(&dir);
        let shapes = shape_names(&self.record);
        self.undecided = shapes
            .iter()
            .filter(|s| !self.rows.iter().any(|(k, _)| k == *s))
            .cloned()
            .collect();
        if self.undecided.len() == shapes.len() {
            return Err(fail(
                format!("profile '{name}' has no row for any of the {} shapes", shapes.len()),
                "every shape was undecided: the machine may be too noisy (another job on the GPU?); rerun doctor, or see logs/tune.stderr.txt",
            ));
        }
        pass(format!(
            "'{name}' for sha256 {}: {} rows ({reason})",
            &self.facts.sha256[..16],
            self.rows.len()
        ))
    }

    fn serve(&mut self) -> Done {
        let what = "the workload under the profile";
        let (report, stats) = self.workload("served", true, Some("--compare"), what, "")?;
        self.served = Some(report);
        let Some(s) = crate::verify::Stats::read(&stats) else {
            return Err(fail(
                format!("the interposer wrote no counters ({})", stats.display()),
                "see logs/served.stderr.txt in the bundle",
            ));
        };
        let mut problems = Vec::new();
        if s.rows == 0 || s.rows_hit < s.rows {
            problems.push(format!(
                "{} of {} rows hit{}",
                s.rows_hit,
                s.rows,
                if s.rows == 0 {
                    " (no profile loaded: the start line in logs/served.stderr.txt says why)"
                } else {
                    ""
                }
            ));
        }
        problems.extend(s.refusals());
        if s.missed_shapes as usize > self.undecided.len() {
            problems.push(format!(
                "{} shapes missed, {} had no row",
                s.missed_shapes,
                self.undecided.len()
            ));
        }
        let check = format!("tunedblas verify --stats {}", stats.display());
        if !problems.is_empty() {
            return Err(fail(
                problems.join("; "),
                format!("`{check}` says the same; attach the bundle"),
            ));
        }
        let undecided = match self.undecided.len() {
            0 => String::new(),
            n => format!("; {n} undecided shapes stay misses, as they should"),
        };
        pass(format!(
            "rows hit {}/{}, {} calls served, {} Default, 0 fallbacks{undecided} (as `{check}`)",
            s.rows_hit, s.rows, s.served, s.default
        ))
    }

    fn outputs(&mut self) -> Done {
        let (served, base) = (shapes_of(&self.served), shapes_of(&self.baseline));
        let mut bad = Vec::new();
        let (mut same, mut close) = (0, 0);
        for (s, b) in served.iter().zip(&base) {
            let row = self
                .rows
                .iter()
                .find(|(k, _)| *k == s.shape)
                .map(|(_, r)| r.as_str());
            // The heuristic's own choice must give the very same bits, where the library
            // itself does run to run.
            let must_match = matches!(row, None | Some("Default")) && b.deterministic;
            match (s.identical, s.within) {
                (Some(true), _) => same += 1,
                (_, Some(true)) if !must_match => close += 1,
                _ => bad.push(format!(
                    "{} (row {}): {}",
                    s.label,
                    row.unwrap_or("none"),
                    match must_match {
                        true => "not bit-identical to the run without the preload, though the heuristic's own choice is served".to_string(),
                        false => format!(
                            "outside the tuner's numerics against the reference: {}",
                            s.why.as_deref().unwrap_or("no comparison made")
                        ),
                    }
                )),
            }
        }
        if served.len() != base.len() || served.is_empty() {
            bad.push("the runs did not compare the same shapes".into());
        }
        if !bad.is_empty() {
            return Err(fail(bad.join("; "), "a served row changes results: attach the bundle to a bug report; meanwhile remove the profile or set TUNEDBLAS_DISABLE=1"));
        }
        pass(format!(
            "{same} of {} shapes bit-identical with and without the preload, {close} tuned within the tuner's numerics (the reference, within the output type's tolerance)",
            served.len()
        ))
    }

    fn timing(&mut self) -> Done {
        let (served, base) = (shapes_of(&self.served), shapes_of(&self.baseline));
        let (t0, t1): (f64, f64) = (
            base.iter().map(|s| s.ms).sum(),
            served.iter().map(|s| s.ms).sum(),
        );
        let ratio = t0 / t1.max(1e-12);
        let slower: Vec<String> = served
            .iter()
            .zip(&base)
            .filter(|(s, b)| s.ms > b.ms * 1.02)
            .map(|(s, b)| format!("{} {:+.1}%", s.label, 100.0 * (s.ms / b.ms - 1.0)))
            .collect();
        let line = format!(
            "GEMM time per pass {} without the preload, {} served: {ratio:.3}x{}",
            ms(t0),
            ms(t1),
            match slower.is_empty() {
                true => String::new(),
                false => format!("; slower: {}", slower.join(", ")),
            }
        );
        if ratio < 0.98 {
            return Ok((
                Verdict::Warn,
                format!("{line} (served is SLOWER)"),
                Some("the two runs are separate processes a few seconds apart (a few % of noise is usual); rerun doctor, and if it stays slower attach the bundle".into()),
            ));
        }
        pass(line)
    }

    /// The verdict, the bundle's files and the archive; the exit.
    fn finish(mut self, started: Instant) -> Result<()> {
        let _ = std::fs::remove_dir_all(self.out.join(OUTPUTS));
        let failed = self
            .steps
            .iter()
            .find(|s| s.verdict == Verdict::Fail)
            .map(|s| (s.number, s.name, s.text.clone()));
        let count = |v: Verdict| self.steps.iter().filter(|s| s.verdict == v).count();
        let (warned, passed) = (count(Verdict::Warn), count(Verdict::Pass));
        let verdict = match &failed {
            None => format!(
                "RESULT: PASS  {passed} of {} steps passed{} in {:.0} s: tunedblas records, tunes and serves {} on this machine.",
                STEPS.len(),
                match warned {
                    0 => String::new(),
                    n => format!(", {n} WARN"),
                },
                started.elapsed().as_secs_f64(),
                self.facts.backend
            ),
            Some((n, name, _)) => format!(
                "RESULT: FAIL  step {n} ({name}) failed; the steps after it did not run. Attach {} to a bug report.",
                self.out.join(ARCHIVE).display()
            ),
        };
        self.say(verdict);
        self.facts.os = uname();
        self.facts.environment = environment();
        let w = |name: &str, bytes: Vec<u8>| {
            let _ = std::fs::write(self.out.join(name), bytes);
        };
        w("doctor.txt", (self.lines.join("\n") + "\n").into_bytes());
        w(
            "doctor.json",
            serde_json::to_vec_pretty(&serde_json::json!({
                "passed": failed.is_none(),
                "steps": &self.steps,
                "record": &self.record,
                "baseline": &self.baseline,
                "served": &self.served,
            }))
            .expect("plain data"),
        );
        w(
            "environment.json",
            serde_json::to_vec_pretty(&self.facts).expect("plain data"),
        );
        match bundle::archive(&self.out, ARCHIVE, &[]) {
            Ok(()) => println!(
                "bundle: {} and {}",
                self.out.display(),
                self.out.join(ARCHIVE).display()
            ),
            Err(e) => println!(
                "bundle: {} (the archive could not be written: {e})",
                self.out.display()
            ),
        }
        match self.failed.take() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

/// Whether a GPU driver for `kind`'s runtime is here (else the library is a CPU stand-in).
fn gpu_driver(kind: Kind) -> bool {
    match kind {
        Kind::Cublaslt => tunedblas_tuner::dl::open(
            Path::new("libcuda.so.1"),
            libc::RTLD_LAZY | libc::RTLD_LOCAL,
        )
        .is_ok(),
        _ => !crate::env::gpu_archs().is_empty(),
    }
}

/// The GPUs' names as the vendor's tool says them, else the KFD's architectures.
fn gpu_names(kind: Kind) -> Vec<String> {
    let run = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| {
                text(&o.stdout)
                    .lines()
                    .map(|l| l.trim().to_string())
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    match kind {
        Kind::Cublaslt => run(
            "nvidia-smi",
            &[
                "--query-gpu=name,driver_version,memory.total",
                "--format=csv,noheader",
            ],
        ),
        _ => {
            let mut v = run("rocm-smi", &["--showproductname", "--csv"]);
            v.extend(
                crate::env::gpu_archs()
                    .into_iter()
                    .map(|a| format!("KFD node {a}")),
            );
            v
        }
    }
}

fn uname() -> String {
    Command::new("uname")
        .arg("-srvmo")
        .output()
        .map(|o| text(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The variables that decide what loads and what is served.
fn environment() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| {
            k.starts_with("TUNEDBLAS_")
                || k.starts_with("ROCBLAS_")
                || k.starts_with("HIPBLASLT_")
                || k.starts_with("CUBLASLT_")
                || matches!(
                    k.as_str(),
                    "LD_PRELOAD"
                        | "LD_LIBRARY_PATH"
                        | "ROCM_PATH"
                        | "CUDA_HOME"
                        | "CUDA_VISIBLE_DEVICES"
                        | "HIP_VISIBLE_DEVICES"
                        | "ROCR_VISIBLE_DEVICES"
                )
        })
        .collect()
}

/// The lines of a TunableOp-style file that name a shape: `op,signature` of each, with the
/// rest of the line.
fn shape_lines(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| {
            !l.trim().is_empty() && !l.starts_with("Validator,") && !l.starts_with("op_name,")
        })
        .filter_map(|l| {
            let mut f = l.splitn(3, ',');
            let (op, sig) = (f.next()?, f.next()?);
            Some((format!("{op},{sig}"), f.next().unwrap_or("").to_string()))
        })
        .collect()
}

/// Every shape the miss folder's logs name.
fn miss_shapes(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut out: Vec<String> = rd
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".csv"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .flat_map(|t| shape_lines(&t).into_iter().map(|(k, _)| k))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The rows of a profile folder (rank 0): `op,signature` and the solution.
fn results_rows(dir: &Path) -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(tunedblas_tuner::store::rank_file(dir, 0)).unwrap_or_default();
    shape_lines(&text)
        .into_iter()
        .map(|(k, rest)| (k, rest.split(',').next().unwrap_or("").to_string()))
        .collect()
}
