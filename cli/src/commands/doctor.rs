//! `tunedblas doctor`: the whole loop on this machine's own GPU library, one PASS/FAIL line
//! per step, and a bundle for a bug report.

use tunedblas_tuner::backends::Kind;

use crate::args::{self, Args};
use crate::doctor::{self, Size, STEPS};
use crate::error::Result;

fn about() -> String {
    let steps: String = STEPS
        .iter()
        .enumerate()
        .map(|(i, (name, what))| format!("  {:>2}. {name}: {what}\n", i + 1))
        .collect();
    format!(
        "\
A five-minute field test of tunedblas on this machine, with its own rocBLAS, hipBLASLt or
cuBLASLt: a small workload of F.linear GEMMs runs in a child process under
LD_PRELOAD=libtunedblas.so and is recorded, the engine tunes its shapes (bounded: a 10 s
screening budget per shape), and the workload runs again served, compared with a run without
the preload. One line per step, PASS, WARN, FAIL or SKIP, with what to do on a FAIL, then one
RESULT line. The steps:
{steps}
Everything is written under --out (default ./doctor-<date>-<time>): the lines printed
(doctor.txt, doctor.json), the environment (environment.json: library, sha256, versions,
GPU), the miss folder, the profile store, the interposer's counters (stats/) and every
child's output (logs/), and all of it as {archive} to attach to a bug report. The
user's profile store and miss folder are never read or written.

Exit 0 only when every step passes (a WARN, such as a slower served run, is said, not
failed); else the exit code of the first failure: 3 the library cannot be found or loaded,
4 no usable device, 1 any later step, 2 a bad command line.",
        archive = doctor::ARCHIVE
    )
}

const AFTER: &str = "\
EXAMPLES:
    tunedblas doctor                                  # the library this machine's framework calls
    tunedblas doctor --backend hipblaslt --workspace 33554432
    tunedblas doctor --lib /opt/rocm/lib/librocblas.so.5 --out /tmp/doctor
    tunedblas doctor --budget 30                      # a longer screening per shape
";

/// The `tune` options doctor passes through (the rest keep tune's defaults).
const METHOD: [&str; 7] = [
    "--budget",
    "--trials",
    "--max-trials",
    "--rest",
    "--margin",
    "--rotate-mib",
    "--timing",
];

const OPTIONS: &str = "\
--lib LIB                         the library to test (else the one found here: $TUNEDBLAS_CUBLASLT / $TUNEDBLAS_HIPBLASLT, the usual sonames, rocBLAS in $ROCM_PATH/lib, /opt/rocm/lib, the system folders)
--backend rocblas|hipblaslt|cublaslt  which library to look for (default: cuBLASLt where an NVIDIA driver is present, hipBLASLt on an MI300-class GPU, else rocBLAS)
--out DIR                         the bundle's folder, new or empty (default ./doctor-<date>-<time>)
--preload LIBTUNEDBLAS            the interposer (default: the libtunedblas.so beside this binary)
--size auto|small|full            the workload's shapes: full (a 4096-wide decoder's projections) on a GPU, small (64 times narrower) on the CPU reference and stand-ins; auto tells by the GPU driver (default)
--workspace BYTES                 workspace the workload gives the Lt libraries, and tune's (default 1048576)
--budget S                        tune: seconds of screening per shape (default 10; 2 on the CPU)
--trials N                        tune: interleaved rounds (default tune's; 7 on the CPU)
--max-trials N                    tune: rounds added while undecidable
--rest R                          tune: device rest between samples
--margin PCT                      tune: adoption margin in percent
--rotate-mib N                    tune: operand bytes each sample rotates through
--timing MODE                     tune: graph or events
";

pub fn cli() -> clap::Command {
    let c = args::command("doctor", about(), AFTER).args(args::table(OPTIONS));
    let c = args::choices(c, "--backend", ["rocblas", "hipblaslt", "cublaslt"]);
    let c = args::choices(c, "--size", ["auto", "small", "full"]);
    args::library_options(args::choices(c, "--timing", ["events", "graph"]))
}

pub fn run(a: &Args) -> Result<()> {
    let mut runtime = Vec::new();
    for flag in ["--cudart", "--hip"] {
        if let Some(v) = a.value(flag) {
            runtime.extend([flag.into(), v.into()]);
        }
    }
    let method = METHOD
        .iter()
        .filter_map(|m| a.value(m).map(|v| (m.to_string(), v.to_string())))
        .collect();
    doctor::run(doctor::Options {
        lib: a.path("--lib"),
        backend: a.value("--backend").and_then(Kind::parse),
        out: a.path("--out"),
        preload: a.path("--preload"),
        runtime,
        size: match a.value("--size") {
            Some("small") => Size::Small,
            Some("full") => Size::Full,
            _ => Size::Auto,
        },
        method,
        workspace: a.parsed("--workspace", 1usize << 20, "bytes")?,
        argv: std::env::args().collect(),
    })
}
