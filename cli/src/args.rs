//! The command line of every command, read by clap: `--flag`, `--flag VALUE` /
//! `--flag=VALUE` (repeatable) and positionals, strictly. A typo is clap's error naming the
//! bad input, with the nearest flag it might have meant and the command's usage line, exit 2
//! (see `error`), instead of a silently ignored option or the whole help text.
//!
//! The arguments several commands share (`--lib`, `--profiles`, `--devices`, `--shard`,
//! `--margin`) are read here too, so they mean the same everywhere.

use std::path::PathBuf;
use std::str::FromStr;

use clap::{Arg, ArgAction, ArgMatches};

pub use tunedblas_core::suggest::suggest;

use crate::curate::Rules;
use crate::error::{Error, Result};
use tunedblas_tuner::backends::Spec;
use tunedblas_tuner::pipeline::Method;
use tunedblas_tuner::timer::Mode;

/// A command-line mistake clap found in `command`'s arguments (exit 2), in clap's own
/// words: what was wrong, the nearest valid option where one is close, the usage line.
fn clap_error(command: &str, e: &clap::Error) -> Error {
    let text = e.render().to_string();
    let text = text.trim_end();
    let text = text.strip_prefix("error: ").unwrap_or(text);
    Error::usage(command, text)
}

/// A command's parsed arguments. Options are asked for by their flag (`"--lib"`).
pub struct Args {
    command: String,
    matches: ArgMatches,
    pub positional: Vec<String>,
}

/// The id clap knows an option by: its long name.
fn id(flag: &str) -> &str {
    flag.trim_start_matches('-')
}

/// The id of the positionals every command collects.
const POSITIONAL: &str = "positional";

/// A command declared with clap, in the words its help shows: `tunedblas <command>` with
/// the table's synopsis as its usage line, what it does (`about`), then its arguments
/// (each with its own help) and `after` (examples, notes). Add its arguments with
/// [`switch`], [`option`] and [`positionals`].
pub fn command(
    command: &str,
    about: impl clap::builder::IntoResettable<clap::builder::StyledStr>,
    after: impl clap::builder::IntoResettable<clap::builder::StyledStr>,
) -> clap::Command {
    clap::Command::new(format!("tunedblas {command}"))
        .no_binary_name(true)
        .disable_help_flag(true)
        .disable_version_flag(true)
        .disable_colored_help(true)
        .color(clap::ColorChoice::Never)
        .args_override_self(true)
        .override_usage(crate::usage_of(command))
        .about(about)
        .after_help(after)
        .help_template("{usage}\n\n{about-with-newline}\n{all-args}{after-help}")
        // One width, whatever the terminal: the prose is wrapped for it, and `help X` and
        // `X --help` print the same text everywhere.
        .term_width(100)
}

/// A switch (`--json`), with its help.
pub fn switch(flag: &str, help: &'static str) -> Arg {
    Arg::new(id(flag).to_string())
        .long(id(flag).to_string())
        .action(ArgAction::SetTrue)
        .help(help)
}

/// An option taking one value (`--lib PATH`), repeatable (the last one counts where one is
/// read), with the value's name and its help.
pub fn option(
    flag: &str,
    value: &'static str,
    help: impl clap::builder::IntoResettable<clap::builder::StyledStr>,
) -> Arg {
    Arg::new(id(flag).to_string())
        .long(id(flag).to_string())
        .value_name(value)
        .action(ArgAction::Append)
        .num_args(1)
        .allow_negative_numbers(true)
        .help(help)
}

/// The positionals, at most `max` of them, named `value` in the help.
pub fn positionals(value: &'static str, max: usize, help: &'static str) -> Arg {
    let arg = Arg::new(POSITIONAL).value_name(value).help(help);
    if max == 1 {
        arg.action(ArgAction::Set)
    } else {
        arg.action(ArgAction::Append).num_args(0..=max)
    }
}

/// `--hip`, `--cudart` and `--backend`: which runtime a library runs on, and which library
/// where a command cannot tell from its inputs.
pub fn library_options(c: clap::Command) -> clap::Command {
    c.args(table(
        "\
--hip PATH     the HIP runtime (rocBLAS, hipBLASLt) when not the one the library links or carries
--cudart PATH  the CUDA runtime of cuBLASLt (else $TUNEDBLAS_CUDART, else libcudart.so.13/.12)",
    ))
}

/// How shapes are measured and curated: the same options, with the same meaning and
/// defaults, for every library and every command that measures (`tune`, `confirm`).
pub fn method_options(c: clap::Command) -> clap::Command {
    let d = Method::default();
    c.arg(option("--trials", "N", format!("interleaved rounds of the trials and of the confirmation (default {})", d.trials)))
        .arg(option("--max-trials", "N", format!("rounds added while undecidable, up to N (default {})", d.max_trials)))
        .arg(option("--sample-ms", "MS", format!("device time of one timed sample (default {})", d.sample_ms)))
        .arg(option("--budget", "S", format!("seconds of screening per shape: every candidate the library lists is probed once until it is spent, the most promising first (default {}; 0: no limit)", d.budget_s)))
        .arg(option("--keep", "N", format!("the fastest candidates of the screening that go on to the trials (default {})", d.keep)))
        .arg(option("--prune", "X", format!("candidates slower than X times the best probe are pruned (default {})", d.prune)))
        .arg(option("--rotate-mib", "N", "operand bytes each timed sample rotates through, in MiB (default: three times the device's last-level cache; a graph sample replays one call per operand set at least)"))
        .arg(option("--timing", "MODE", "graph (default): a sample's calls are captured once into a graph and replayed between two events, no launch gaps between calls; events: the calls back to back between two events; graph falls back to events, said once per shape, where capture fails").value_parser(["events", "graph"]))
        .arg(option("--rest", "R", "after each timed sample, leave the device idle for R times the sample's device time, at most a second (default 1; 0: back to back; at most 10). On an H200 back-to-back compute-heavy GEMMs ran into the power cap and spread up to 9%; resting 1x kept them at most 1%"))
        .arg(option("--workspace", "BYTES", "workspace callers give the Lt libraries (default 1048576; hipBLASLt: what your callers pass hipblasLtMatmul): a candidate needing more is never adopted"))
        .arg(option("--confirm", "MODE", "fresh (default): adopt only what a fresh process confirms by the margin; off: the second set of trials in this process only").value_parser(["fresh", "off"]))
        .arg(option("--margin", "PCT", "adoption margin in percent (default 3; 1 or more, or 0)"))
        .arg(switch("--no-default-rows", "write no row when nothing beats the heuristic"))
        .arg(option("--noisy", "PCT", "a shape whose spread is over PCT% (50) is undecidable, not Default: no row is written, so it comes back as a miss"))
}

/// `--profiles DIR`'s help, the same in every command.
pub const PROFILES: &str =
    "the profile store (default $TUNEDBLAS_PROFILE_DIR, else the one the installed interposer reads)";

/// A command's arguments as its help lists them, one a line, the synopsis parted from the
/// help by two spaces: `--flag VALUE  help` (an option), `--flag  help` (a switch),
/// `NAME...  help` or `NAME  help` (any number of positionals, or one). `--profiles` alone
/// is the store, the same in every command.
pub fn table(text: &'static str) -> Vec<Arg> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (head, help) = line
                .split_once("  ")
                .map_or((line, ""), |(h, t)| (h, t.trim_start()));
            match head.split_once(' ') {
                _ if head == "--profiles" => option(head, "DIR", PROFILES),
                _ if !head.starts_with('-') => match head.strip_suffix("...") {
                    Some(name) => positionals(name, usize::MAX, help),
                    None => positionals(head, 1, help),
                },
                Some((flag, value)) => option(flag, value, help),
                None => switch(head, help),
            }
        })
        .collect()
}

/// `c` with `flag` taking only `values` (clap lists them in the help and refuses others).
pub fn choices<const N: usize>(
    c: clap::Command,
    flag: &str,
    values: [&'static str; N],
) -> clap::Command {
    c.mut_arg(id(flag), |a| a.value_parser(values))
}

/// A declared command's help, as `tunedblas help <command>` and `--help` print it.
pub fn help_text(mut command: clap::Command) -> String {
    let mut text = command.render_help().to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

impl Args {
    /// Parses `args` as `declared` (see [`command`]) says.
    pub fn of_declared(command: &str, declared: clap::Command, args: &[String]) -> Result<Args> {
        let matches = declared
            .try_get_matches_from(args)
            .map_err(|e| clap_error(command, &e))?;
        let positional = matches
            .try_get_many::<String>(POSITIONAL)
            .ok()
            .flatten()
            .map(|v| v.cloned().collect())
            .unwrap_or_default();
        Ok(Args {
            command: command.to_string(),
            matches,
            positional,
        })
    }

    /// Whether the switch `name` is on, or the option `name` was given.
    pub fn has(&self, name: &str) -> bool {
        match self.matches.try_get_one::<bool>(id(name)) {
            Ok(Some(on)) => *on,
            _ => self.matches.try_contains_id(id(name)).unwrap_or(false),
        }
    }

    /// The last value given for `name`.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.values(name).pop()
    }

    /// Every value given for a repeatable option, in order.
    pub fn values(&self, name: &str) -> Vec<&str> {
        self.matches
            .try_get_many::<String>(id(name))
            .ok()
            .flatten()
            .map(|v| v.map(String::as_str).collect())
            .unwrap_or_default()
    }

    pub fn path(&self, name: &str) -> Option<PathBuf> {
        self.value(name).map(PathBuf::from)
    }

    /// `name`'s value parsed as `T`, or `default` when absent.
    pub fn parsed<T: FromStr>(&self, name: &str, default: T, what: &str) -> Result<T> {
        match self.value(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| self.usage(format!("{name} takes {what}, not '{v}'"))),
        }
    }

    /// A mistake in this command's arguments.
    pub fn usage(&self, msg: impl std::fmt::Display) -> Error {
        Error::usage(&self.command, format!("tunedblas {}: {msg}", self.command))
    }

    /// Refuses positionals beyond the first `max` (a command that takes none says so
    /// rather than ignoring a stray word).
    pub fn at_most_positional(&self, max: usize) -> Result<()> {
        match self.positional.get(max) {
            None => Ok(()),
            Some(extra) => Err(Error::usage(
                &self.command,
                format!(
                    "unexpected argument '{extra}' for 'tunedblas {}'",
                    self.command
                ),
            )),
        }
    }

    /// The profile store: `--profiles`, `$TUNEDBLAS_PROFILE_DIR`, or the installed one.
    pub fn profile_store(&self) -> PathBuf {
        let env = || std::env::var_os("TUNEDBLAS_PROFILE_DIR").map(PathBuf::from);
        self.path("--profiles")
            .or_else(env)
            .unwrap_or_else(crate::store::default_root)
    }

    /// `--lib`, which most commands cannot do without.
    pub fn lib(&self) -> Result<PathBuf> {
        self.path("--lib")
            .ok_or_else(|| self.usage("needs --lib <path to the library: librocblas.so, libhipblaslt.so or libcublasLt.so>"))
    }

    /// The library `--lib` names, loaded with the runtime [`library_options`] name.
    pub fn opened(&self) -> Result<tunedblas_tuner::backends::Opened> {
        let lib = crate::env::find_library(&self.lib()?);
        let kind = tunedblas_tuner::backends::kind_of(&lib)?;
        let spec = Spec {
            lib: Some(lib),
            ..self.spec()
        };
        tunedblas_tuner::backends::Opened::open(kind, &spec)
    }

    /// The profile `--profile NAME` or `--lib LIBROCBLAS` names (a name wins), in the store.
    pub fn picked(&self) -> Result<crate::pick::Picked> {
        use crate::pick::Which;
        let which = match (self.value("--profile"), self.value("--lib")) {
            (Some(name), _) => Which::Name(name),
            (None, Some(lib)) => Which::Build(std::path::Path::new(lib)),
            (None, None) => {
                return Err(self.usage("needs --lib <librocblas.so> or --profile <name>"))
            }
        };
        crate::pick::pick(which, &self.profile_store())
    }

    /// `--devices 0,1,2,3` (empty when not given: the command's default).
    pub fn devices(&self) -> Result<Vec<i32>> {
        match self.value("--devices") {
            None => Ok(vec![]),
            Some(list) => list
                .split(',')
                .map(|d| d.trim().parse::<i32>().ok().filter(|d| *d >= 0))
                .collect::<Option<Vec<i32>>>()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    self.usage(format!("--devices takes a list like 0,1,2,3, not '{list}'"))
                }),
        }
    }

    /// `--margin PCT`, the adoption margin of `tune` and `confirm`, in percent (`--margin 3`
    /// is 3%), returned as a fraction (0.03); `default_pct` when not given. A value between
    /// 0 and 1 is refused: it is almost surely a fraction meant as one (0.03 for 3%), and
    /// read as a percentage it would adopt nearly anything.
    pub fn margin(&self, default_pct: f64) -> Result<f64> {
        let pct: f64 = self.parsed("--margin", default_pct, "a percentage like 3")?;
        if pct > 0.0 && pct < 1.0 {
            return Err(self.usage(format!(
                "--margin takes a percentage like 3 (for 3%), not '{pct}': below 1% it is taken for a fraction"
            )));
        }
        if !(0.0..100.0).contains(&pct) {
            return Err(self.usage("--margin takes a percentage from 0 to 100"));
        }
        Ok(pct / 100.0)
    }

    /// How shapes are measured ([`method_options`]).
    pub fn method(&self) -> Result<Method> {
        let d = Method::default();
        let trials = self.parsed("--trials", d.trials, "a number of rounds")?;
        let m = Method {
            trials,
            max_trials: self.parsed(
                "--max-trials",
                d.max_trials.max(trials),
                "a number of rounds",
            )?,
            sample_ms: self.parsed("--sample-ms", d.sample_ms, "milliseconds")?,
            budget_s: self.parsed("--budget", d.budget_s, "seconds")?,
            keep: self.parsed("--keep", d.keep, "a count")?,
            prune: self.parsed("--prune", d.prune, "a factor like 1.5")?,
            rotate_bytes: (self.parsed("--rotate-mib", 0.0f64, "MiB")?.max(0.0) * (1 << 20) as f64)
                as usize,
            mode: match self.value("--timing") {
                Some("events") => Mode::Events,
                _ => Mode::Graph,
            },
            rest: crate::rest::checked(self.parsed("--rest", d.rest, "a multiple like 1")?)
                .map_err(|e| self.usage(e))?,
            workspace: self.parsed("--workspace", d.workspace, "bytes")?,
            fresh: self.value("--confirm") != Some("off"),
            ..d
        };
        if m.trials == 0
            || m.prune < 1.0
            || m.keep == 0
            || m.sample_ms.is_nan()
            || m.sample_ms <= 0.0
            || m.budget_s < 0.0
        {
            return Err(self.usage(
                "--trials and --keep must be positive, --sample-ms positive, --budget 0 or more and --prune at least 1",
            ));
        }
        Ok(m)
    }

    /// The method for `kind`: hipBLASLt's heuristic and the algorithms it may use depend on
    /// the workspace callers give, which differs between frameworks and releases, so for
    /// hipBLASLt it is not guessed: `--workspace` is required.
    pub fn method_for(&self, kind: tunedblas_tuner::backends::Kind) -> Result<Method> {
        if kind == tunedblas_tuner::backends::Kind::Hipblaslt && self.value("--workspace").is_none()
        {
            return Err(self.usage(
                "needs --workspace BYTES for hipBLASLt: the workspace your callers give hipblasLtMatmul \
                 (a row needing more is passed through by the interposer, and the heuristic tuned against \
                 must be the one your callers get)",
            ));
        }
        self.method()
    }

    /// How measured shapes are curated ([`method_options`]).
    pub fn rules(&self) -> Result<Rules> {
        let noisy: f64 = self.parsed("--noisy", 50.0, "a percentage like 50")?;
        if noisy <= 0.0 {
            return Err(self.usage("--noisy takes a positive percentage"));
        }
        Ok(Rules {
            margin: self.margin(3.0)?,
            keep_default: !self.has("--no-default-rows"),
            noisy: noisy / 100.0,
        })
    }

    /// The runtime files [`library_options`] name.
    pub fn spec(&self) -> Spec {
        Spec {
            lib: None,
            runtime: self.path("--cudart").or_else(|| self.path("--hip")),
            arch: self.value("--arch").map(str::to_string),
        }
    }

    /// `--shard I/N`: this machine's share of a campaign; `--shard auto` takes it from a
    /// Kubernetes Indexed Job's or a Slurm job array's variables (`tunedblas_core::fleet`).
    pub fn shard(&self) -> Result<Option<(usize, usize)>> {
        let Some(s) = self.value("--shard") else {
            return Ok(None);
        };
        if s == "auto" {
            let shard = tunedblas_core::fleet::shard_from_env().map_err(|e| self.usage(e))?;
            return Ok(Some((shard.index, shard.count)));
        }
        s.split_once('/')
            .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
            .filter(|(i, n)| *n > 0 && i < n)
            .map(Some)
            .ok_or_else(|| {
                self.usage(format!(
                    "--shard takes I/N with 0 <= I < N, like 0/4, or auto, not '{s}'"
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    /// `args` read as a command declaring `switches` and `options` (one value each).
    fn parse(command: &str, args: &[String], switches: &[&str], options: &[&str]) -> Result<Args> {
        let mut c = super::command(command, "", "").arg(positionals("ARG", usize::MAX, ""));
        for f in switches {
            c = c.arg(switch(f, ""));
        }
        for f in options {
            c = c.arg(option(f, "VALUE", ""));
        }
        Args::of_declared(command, c, args)
    }

    #[test]
    fn flags_values_and_positionals() {
        let a = parse(
            "tune",
            &s(&[
                "--json",
                "--lib",
                "x.so",
                "pos",
                "--misses=a",
                "--misses",
                "b",
                "--margin",
                "-1",
                "--",
                "--not-a-flag",
            ]),
            &["--json"],
            &["--lib", "--misses", "--margin"],
        )
        .unwrap();
        assert!(a.has("--json"));
        assert_eq!(a.value("--lib"), Some("x.so"));
        assert_eq!(a.values("--misses"), vec!["a", "b"]);
        assert_eq!(a.value("--margin"), Some("-1"));
        assert_eq!(a.positional, vec!["pos", "--not-a-flag"]);
        assert!(a.at_most_positional(2).is_ok());
        let e = a.at_most_positional(1).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message.contains("unexpected argument '--not-a-flag'"));
    }

    #[test]
    fn a_table_declares_what_its_lines_say() {
        let text = "IN...  inputs\n--lib LIB  a library\n--json  as JSON\n--profiles";
        let c = super::command("x", "", "").args(table(text));
        let a = Args::of_declared("x", c.clone(), &s(&["a", "--json", "--lib", "l", "b"])).unwrap();
        assert_eq!(a.positional, vec!["a", "b"]);
        assert!(a.has("--json") && a.value("--lib") == Some("l") && !a.has("--profiles"));
        let help = help_text(c);
        assert!(
            help.contains("--lib <LIB>       a library") && help.contains("[IN]...  inputs"),
            "{help}"
        );
    }

    #[test]
    fn unknown_and_missing_values_are_errors() {
        // clap's words: the bad input, the nearest valid one, the usage line.
        let e = parse("tune", &s(&["--libb", "x"]), &[], &["--lib"])
            .err()
            .unwrap();
        assert!(
            e.message.starts_with(
                "unexpected argument '--libb' found\n\n  tip: a similar argument exists: '--lib'\n\nUsage: tunedblas tune [--lib LIB]..."
            ),
            "{}",
            e.message
        );
        assert_eq!((e.exit_code(), e.command.as_deref()), (2, Some("tune")));
        let e = parse("tune", &s(&["-x"]), &["--json"], &[]).err().unwrap();
        assert!(
            e.message.starts_with("unexpected argument '-x' found"),
            "{}",
            e.message
        );
        for missing in [&["--lib"][..], &["--lib", "--json"][..]] {
            let e = parse("tune", &s(missing), &["--json"], &["--lib"])
                .err()
                .unwrap();
            assert_eq!(
                e.message, "a value is required for '--lib <VALUE>' but none was supplied",
                "{missing:?}"
            );
        }
        let e = parse("tune", &s(&["--json=1"]), &["--json"], &[])
            .err()
            .unwrap();
        assert!(
            e.message.contains("unexpected value '1' for '--json'"),
            "{}",
            e.message
        );
        // A switch or an option given twice: the last one counts, as before.
        let a = parse(
            "tune",
            &s(&["--json", "--json", "--lib", "a", "--lib", "b"]),
            &["--json"],
            &["--lib"],
        )
        .unwrap();
        assert!(a.has("--json"));
        assert_eq!(a.value("--lib"), Some("b"));
        assert!(!a.has("--nothing") && a.value("--nothing").is_none());
        let a = parse("tune", &s(&["--trials", "x"]), &[], &["--trials"]).unwrap();
        assert!(a.parsed::<usize>("--trials", 5, "a count").is_err());
        assert_eq!(
            parse("tune", &[], &[], &["--trials"])
                .unwrap()
                .parsed::<usize>("--trials", 5, "a count")
                .unwrap(),
            5
        );
    }

    #[test]
    fn shared_arguments_read_the_same_everywhere() {
        let a = parse(
            "tune",
            &s(&["--devices", "0,2", "--shard", "1/4"]),
            &[],
            &["--devices", "--shard", "--lib"],
        )
        .unwrap();
        assert_eq!(a.devices().unwrap(), vec![0, 2]);
        assert_eq!(a.shard().unwrap(), Some((1, 4)));
        assert!(a.lib().unwrap_err().message.contains("needs --lib"));
        let bad = parse("tune", &s(&["--shard", "4/4"]), &[], &["--shard"]).unwrap();
        assert!(bad.shard().is_err());
        let margin = |v: &str| {
            parse("tune", &s(&["--margin", v]), &[], &["--margin"])
                .unwrap()
                .margin(3.0)
        };
        assert_eq!(margin("5").unwrap(), 0.05);
        assert_eq!(margin("1").unwrap(), 0.01);
        assert_eq!(margin("0").unwrap(), 0.0);
        let e = margin("0.03").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message.contains("a percentage like 3 (for 3%)"),
            "{}",
            e.message
        );
        assert!(margin("100").is_err() && margin("-1").is_err() && margin("x").is_err());
        let none = parse("tune", &[], &[], &["--margin"]).unwrap();
        assert_eq!(none.margin(3.0).unwrap(), 0.03);
    }

    #[test]
    fn the_method_and_rules_read_the_same_for_every_library() {
        let read = |v: &[&str]| {
            let c = method_options(library_options(super::command("tune", "", "")));
            Args::of_declared("tune", c, &s(v))
        };
        let a = read(&[
            "--trials",
            "9",
            "--budget",
            "60",
            "--timing",
            "events",
            "--confirm",
            "off",
        ])
        .unwrap();
        let m = a.method().unwrap();
        assert_eq!(
            (m.trials, m.budget_s, m.mode, m.fresh),
            (9, 60.0, Mode::Events, false)
        );
        // The defaults are the engine's.
        let d = read(&[]).unwrap().method().unwrap();
        let e = Method::default();
        assert_eq!(
            (d.trials, d.rest, d.mode, d.fresh),
            (e.trials, e.rest, e.mode, e.fresh)
        );
        // The margin is in percent, as every command takes it.
        assert_eq!(
            read(&["--margin", "5"]).unwrap().rules().unwrap().margin,
            0.05
        );
        for bad in [
            &["--trials", "0"][..],
            &["--trials", "many"],
            &["--rest", "11"],
            &["--prune", "0.5"],
            &["--margin", "0.03"],
            &["--noisy", "0"],
        ] {
            let a = read(bad).unwrap();
            let e = a.method().and_then(|_| a.rules()).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {}", e.message);
        }
        assert_eq!(read(&["--timing", "clock"]).err().unwrap().exit_code(), 2);
        assert_eq!(
            read(&["--cudart", "/x/libcudart.so"])
                .unwrap()
                .spec()
                .runtime,
            Some(PathBuf::from("/x/libcudart.so"))
        );
    }
}
