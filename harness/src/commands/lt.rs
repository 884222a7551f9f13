//! `tunedblas lt <subcommand>`: the cuBLASLt (NVIDIA) side, with the arguments, errors and
//! exit codes of every other command. Its work is in `crate::lt`.

use crate::args::Args;
use crate::error::{Error, Result};

const HELP: &str = "\
tunedblas lt info|selftest|tune|recheck|overhead|verify|adopt [options]

Tune and check cuBLASLt algorithms for libtunedblas.so (NVIDIA GPUs), tune hipBLASLt
(AMD GPUs: `tune --backend hipblaslt`), and make hipBLASLt profiles from PyTorch TunableOp
files. `tunedblas-lt ARGS` is the same as `tunedblas lt ARGS`.

SUBCOMMANDS:
    info
        The cuBLASLt and CUDA runtime found, the library's sha256, the GPU.
    selftest
        GPU self-test: the ABI values tunedblas relies on, read back from the real library;
        an algorithm rebuilt from its readable configuration computes bit-identical results.
    tune --misses PATH [PATH...] --profiles DIR --name NAME [--rank R] [--shape N,M,K]...
        Tune every shape in the miss files (a file, or a folder of *-cublaslt-rank*.csv) and
        write DIR/NAME/tunableop_results<R>.csv, provenance.json and DIR/profiles.json.
        Each finished shape is checkpointed in DIR/NAME: an interrupted campaign resumes
        when the same command is run again (--fresh discards an unfinished one with other
        shapes); one campaign per profile runs at a time. The card's limits are measured
        first (copy bandwidth, launch floor, the matmul rate of an 8192^3 bf16 GEMM); each
        shape is reported against the one that binds, with a 'limit:' line saying why the
        fastest configuration found is where it is (its grid of CTAs against the SMs).
        With --backend hipblaslt (implied by a --lib whose file name says hipblaslt) it tunes
        the hipBLASLt misses (*-hipblaslt-rank*.csv): every algorithm getAllAlgos lists that
        matmulIsAlgoSupported accepts within --workspace, the same numerics, probes, trials
        and margin, rows written as PyTorch TunableOp writes them (Gemm_Hipblaslt_<index>)
        for the loaded hipBLASLt's sha256. --workspace is required (what your callers give
        hipblasLtMatmul). Samples are HIP graph replays (--timing graph, the default) or
        calls back to back between events (no delay kernel ahead of them: the smallest
        shapes are timed with their launch cost there); not yet run on a real AMD GPU. A
        shape that cannot be tuned fails the campaign (exit 1) after the other rows are
        written; the same command again retries it.
    recheck (--profiles DIR --name NAME [--rank R] | --rows FILE)
        Re-measure every adopted row against the heuristic in this (fresh) process: how many
        still win (the false-adopt rate is the rest). `tune` runs it itself on the rows it
        proposes (--confirm fresh) and adopts only what it confirms by the margin. With
        --backend hipblaslt: the Gemm_Hipblaslt_<index> rows, each rebuilt from its index
        and checked as the interposer does (PyTorch TunableOp's rows too). Each row's
        numerics are judged first, as tuning judges a candidate's: a row computing a wrong
        result FAILS and is not timed.
    adopt --lib LIBHIPBLASLT --profiles DIR --name NAME [--rank R] [--arch GFX[:CUs]] [--force] FILE
        Make a file of hipBLASLt indices the profile of that hipBLASLt build (registered for
        its sha256; no GPU is needed): a PyTorch TunableOp results file from a ROCm machine
        (its Gemm_Hipblaslt_<index>, Default and `*` rows; rocBLAS rows are left out:
        tunedblas profiles adopt takes those), a hipBLASLt tuning or override file, hipblaslt-
        bench lines run with --algo_method index, or an AITER bf16_tuned_gemm.csv (its
        hipblaslt rows; AITER's own kernels are counted and left out; --arch picks the
        device where it has several). The file must name this build: a tuning file's Git
        Version, a TunableOp file's HIPBLASLT_VERSION (read from the library, which is
        loaded but needs no GPU); --force adopts it anyway. The interposer checks each index
        with matmulIsAlgoSupported on its first call.
    overhead [--shape N,M,K] [--calls C] [--reps R]
        Host microseconds per cublasLtMatmul call, the library's own symbol against the one a
        linked host resolves (an LD_PRELOADed interposer's), on objects made through the
        linked host's symbols; and per F.linear as PyTorch issues it (a descriptor, two
        attributes, three layouts, the matmul, four destroys), all through the library's
        symbols against all through the linked host's. The differences are the interposer's
        cost per call and per GEMM.
    verify --stats FILE
        Checks a TUNEDBLAS_STATS file of a run under the profile: every row hit, no miss, no
        fallback.

OPTIONS:
    --lib PATH        libcublasLt.so to load (else $TUNEDBLAS_CUBLASLT, else libcublasLt.so.13/.12)
    --cudart PATH     libcudart.so to load (else $TUNEDBLAS_CUDART, else libcudart.so.13/.12)
    --backend LIB     (tune, recheck) cublaslt (default) or hipblaslt; with hipblaslt, --lib is
                      libhipblaslt.so (else $TUNEDBLAS_HIPBLASLT, else libhipblaslt.so.1)
    --hip PATH        (tune, recheck; hipblaslt) the HIP runtime: by default the one hipBLASLt
                      links; a PATH that is another file is refused (two runtimes in one
                      process would mix their buffers and streams)
    --trials N        interleaved trials per candidate (15)
    --candidates N    heuristic answers asked for (32)
    --margin PCT      gain needed to adopt, in percent, in the selection and the confirmation
                      (3; as `tunedblas tune`: 1 or more, or 0; 0.03 is refused)
    --win-share F     share of the trials the candidate must win (see tune.rs)
    --workspace B     workspace bytes callers give cuBLASLt or hipBLASLt (1048576): a row
                      needing more is never adopted (the interposer would pass it through)
    --sample-ms MS    time each timed sample spans
    --explore N       also try up to N configurations near the heuristic's answers (other
                      cluster shapes and custom options of their tiles; 0)
    --budget S        (tune) wider search, S seconds per shape (0: the heuristic's answers only):
                      the algorithm ids cuBLASLt lists for the types (AlgoGetIds), each one's
                      tiles, stages, split-K and reduction schemes, swizzling, custom options
                      and cluster shapes, validated with AlgoCheck, pruned by one short probe
                      each; the fastest --keep (8) go on to numerics and the trials
    --alignment B     pointer alignment the heuristic is told, bytes (16): PyTorch tells it
                      its pointers' alignment, 256 for tensors of their own allocation
    --confirm MODE    (tune) fresh (default): a proposed row is adopted only if a fresh process
                      (`recheck`, interleaved against the heuristic) measures it faster by the
                      margin too; off: the second set of trials in this process decides
    --timing MODE     graph (default): each sample is a CUDA (HIP) graph of the calls,
                      replayed between two events, inputs rotated beyond L2 inside it;
                      events: the calls back to back between two events. Graph falls back
                      to events, with one line, where capture does not work.
    --delay KIND      (cuBLASLt) what holds the stream ahead of each timed sample so the host
                      has queued it: spin (default; one thread waiting on the GPU's timer,
                      the SMs idle) or gemm (4096^3 bf16 GEMMs, the first mode: a tensor-core
                      burst before each sample). Spin falls back to gemm, with one line, where
                      its kernel cannot be loaded.
    --rest R          after each timed sample of a shape's decision (sizing, probes, warm-up,
                      trials) and of recheck, leave the device idle for R times the sample's
                      device time, at most a second (1; 0: back to back; R at most 10). Back
                      to back, compute-heavy shapes drive the card into its power cap and its
                      clock wanders (spreads up to 9% on an H200); resting 1x kept them at
                      most 1%. The matmul rate of the limits rests alike; the wider search's
                      probes do not.
    --shape N,M,K     (tune, overhead) F.linear(out N, tokens M, in K) in bf16; repeatable
    --copy-mib N      (tune) size of the copy that measures the bandwidth limit (1024)
    --log FILE        every measurement as JSON

EXIT CODES:
    0 success; 1 the work failed; 2 bad command line; 3 cuBLASLt, hipBLASLt or their
    runtime cannot be loaded; 4 the runtime sees no usable device

EXAMPLES:
    tunedblas lt tune --misses misses --profiles profiles --name h200-cublaslt
    tunedblas lt tune --backend hipblaslt --misses misses --profiles profiles --name mi300
    tunedblas lt verify --stats s.json
";

pub fn help() -> String {
    HELP.into()
}

/// The options the timing subcommands share.
const TIMING: &[&str] = &[
    "--lib",
    "--cudart",
    "--trials",
    "--candidates",
    "--margin",
    "--win-share",
    "--workspace",
    "--sample-ms",
    "--explore",
    "--budget",
    "--keep",
    "--alignment",
    "--confirm",
    "--timing",
    "--delay",
    "--rest",
    "--log",
];

/// A subcommand: its name, the options it takes on top of `shared`, its positionals, its run.
struct Sub {
    name: &'static str,
    switches: &'static [&'static str],
    shared: &'static [&'static str],
    options: &'static [&'static str],
    positionals: usize,
    run: fn(&Args) -> Result<()>,
}

const LIBS: &[&str] = &["--lib", "--cudart"];

const SUBS: &[Sub] = &[
    Sub {
        name: "info",
        switches: &[],
        shared: LIBS,
        options: &[],
        positionals: 0,
        run: crate::lt::cmd_info,
    },
    Sub {
        name: "selftest",
        switches: &[],
        shared: LIBS,
        options: &[],
        positionals: 0,
        run: crate::lt::cmd_selftest,
    },
    Sub {
        name: "tune",
        switches: &["--fresh"],
        shared: TIMING,
        options: &[
            "--misses",
            "--profiles",
            "--name",
            "--rank",
            "--shape",
            "--copy-mib",
            "--backend",
            "--hip",
        ],
        // More miss files after `--misses A`.
        positionals: usize::MAX,
        run: crate::lt::cmd_tune,
    },
    Sub {
        name: "recheck",
        switches: &[],
        shared: TIMING,
        options: &[
            "--profiles",
            "--name",
            "--rank",
            "--rows",
            "--backend",
            "--hip",
        ],
        positionals: 0,
        run: crate::lt::cmd_recheck,
    },
    Sub {
        name: "overhead",
        switches: &[],
        shared: LIBS,
        options: &["--shape", "--calls", "--reps", "--workspace", "--log"],
        positionals: 0,
        run: crate::lt::cmd_overhead,
    },
    Sub {
        name: "adopt",
        switches: &["--force"],
        shared: &[],
        options: &["--lib", "--profiles", "--name", "--rank", "--arch"],
        positionals: 1,
        run: crate::lt::cmd_adopt,
    },
    Sub {
        name: "verify",
        switches: &[],
        shared: &[],
        options: &["--stats"],
        positionals: 0,
        run: crate::lt::cmd_verify,
    },
];

pub fn run(args: &[String]) -> Result<()> {
    let Some(name) = args.first() else {
        return Err(Error::usage(
            "lt",
            "'tunedblas lt' needs a subcommand: info, selftest, tune, recheck, overhead, verify or adopt",
        ));
    };
    if name == "help" {
        print!("{HELP}");
        return Ok(());
    }
    let Some(sub) = SUBS.iter().find(|s| s.name == name) else {
        let hint = crate::args::suggest(name, SUBS.iter().map(|s| s.name))
            .map(|s| format!(" (did you mean '{s}'?)"))
            .unwrap_or_default();
        return Err(Error::usage(
            "lt",
            format!("unknown subcommand '{name}' for 'tunedblas lt'{hint}"),
        ));
    };
    let options: Vec<&str> = sub.shared.iter().chain(sub.options).copied().collect();
    let run = || {
        let a = Args::parse(&format!("lt {name}"), &args[1..], sub.switches, &options)?;
        a.at_most_positional(sub.positionals)?;
        (sub.run)(&a)
    };
    // A usage error leads to `tunedblas help lt`, which has every subcommand.
    run().map_err(|mut e| {
        if e.command.is_some() {
            e.command = Some("lt".into());
        }
        e
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_names_every_subcommand_and_every_option_they_take() {
        for sub in SUBS {
            assert!(
                HELP.contains(&format!("\n    {} ", sub.name))
                    || HELP.contains(&format!("\n    {}\n", sub.name)),
                "{}",
                sub.name
            );
            for o in sub.switches.iter().chain(sub.shared).chain(sub.options) {
                assert!(HELP.contains(&format!("{o} ")), "{} {o}", sub.name);
            }
        }
    }

    #[test]
    fn a_usage_error_leads_to_the_lt_help() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let e = run(&v(&["recheck", "--rows"])).unwrap_err();
        assert_eq!((e.exit_code(), e.command.as_deref()), (2, Some("lt")));
        assert!(
            e.message
                .contains("a value is required for '--rows <ROWS>'"),
            "{}",
            e.message
        );
        let e = run(&v(&["tune", "--fresh=1"])).unwrap_err();
        assert!(
            e.message.contains("unexpected value '1' for '--fresh'"),
            "{}",
            e.message
        );
        let e = run(&[]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }
}
