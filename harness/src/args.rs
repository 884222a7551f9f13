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

use crate::error::{Error, Result};

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

/// The clap command for `tunedblas <command>` taking `switches` (no value) and `options`
/// (one value each, repeatable) and positionals; everything after `--` is positional. Help
/// is the command table's (`tunedblas help <command>`), so clap adds no `--help` of its own.
pub fn clap_command(command: &str, switches: &[&str], options: &[&str]) -> clap::Command {
    let mut c = clap::Command::new(format!("tunedblas {command}"))
        .no_binary_name(true)
        .disable_help_flag(true)
        .disable_version_flag(true)
        .disable_colored_help(true)
        .color(clap::ColorChoice::Never)
        .args_override_self(true)
        .override_usage(crate::usage_of(command));
    for s in switches {
        c = c.arg(
            Arg::new(id(s).to_string())
                .long(id(s).to_string())
                .action(ArgAction::SetTrue),
        );
    }
    for o in options {
        c = c.arg(
            Arg::new(id(o).to_string())
                .long(id(o).to_string())
                .value_name(id(o).to_uppercase())
                .action(ArgAction::Append)
                .num_args(1)
                .allow_negative_numbers(true),
        );
    }
    c.arg(
        Arg::new(POSITIONAL)
            .action(ArgAction::Append)
            .num_args(0..)
            .allow_negative_numbers(true),
    )
}

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
pub fn option(flag: &str, value: &'static str, help: &'static str) -> Arg {
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

/// `--lib LIBROCBLAS`: the library build the command works on (its profile is that file's).
pub fn lib_option(help: &'static str) -> Arg {
    option("--lib", "LIBROCBLAS", help)
}

/// `--profiles DIR`, the same in every command.
pub fn profiles_option() -> Arg {
    option(
        "--profiles",
        "DIR",
        "the profile store (default $TUNEDBLAS_PROFILE_DIR, else the one the installed interposer reads)",
    )
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
            .map_err(|e| Error::clap(command, &e))?;
        Ok(Args::of(command, matches))
    }

    /// Parses `args` by the declared `switches` (no value) and `options` (one value each).
    /// Everything after `--` is positional.
    pub fn parse(
        command: &str,
        args: &[String],
        switches: &[&str],
        options: &[&str],
    ) -> Result<Args> {
        let matches = clap_command(command, switches, options)
            .try_get_matches_from(args)
            .map_err(|e| Error::clap(command, &e))?;
        Ok(Args::of(command, matches))
    }

    fn of(command: &str, matches: ArgMatches) -> Args {
        let positional = matches
            .try_get_many::<String>(POSITIONAL)
            .ok()
            .flatten()
            .map(|v| v.cloned().collect())
            .unwrap_or_default();
        Args {
            command: command.to_string(),
            matches,
            positional,
        }
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
        self.path("--profiles")
            .unwrap_or_else(default_profile_store)
    }

    /// `--lib`, which most commands cannot do without.
    pub fn lib(&self) -> Result<PathBuf> {
        self.path("--lib")
            .ok_or_else(|| self.usage("needs --lib <path to librocblas.so>"))
    }

    /// The profile `--profile NAME` or `--lib LIBROCBLAS` names (a name wins).
    pub fn which_profile(&self) -> Result<crate::pick::Which<'_>> {
        use crate::pick::Which;
        match (self.value("--profile"), self.value("--lib")) {
            (Some(name), _) => Ok(Which::Name(name)),
            (None, Some(lib)) => Ok(Which::Build(std::path::Path::new(lib))),
            (None, None) => Err(self.usage("needs --lib <librocblas.so> or --profile <name>")),
        }
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

    /// `--margin PCT`, the adoption margin of `tune` and `lt tune`, in percent (`--margin 3`
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

/// The store when no `--profiles` is given: `$TUNEDBLAS_PROFILE_DIR`, else the installed one.
pub fn default_profile_store() -> PathBuf {
    std::env::var_os("TUNEDBLAS_PROFILE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(crate::store::default_root)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn flags_values_and_positionals() {
        let a = Args::parse(
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
    fn unknown_and_missing_values_are_errors() {
        // clap's words: the bad input, the nearest valid one, the usage line.
        let e = Args::parse("tune", &s(&["--libb", "x"]), &[], &["--lib"])
            .err()
            .unwrap();
        assert!(
            e.message.starts_with(
                "unexpected argument '--libb' found\n\n  tip: a similar argument exists: '--lib'\n\nUsage: tunedblas tune --lib LIBROCBLAS"
            ),
            "{}",
            e.message
        );
        assert_eq!((e.exit_code(), e.command.as_deref()), (2, Some("tune")));
        let e = Args::parse("tune", &s(&["-x"]), &["--json"], &[])
            .err()
            .unwrap();
        assert!(
            e.message.starts_with("unexpected argument '-x' found"),
            "{}",
            e.message
        );
        for missing in [&["--lib"][..], &["--lib", "--json"][..]] {
            let e = Args::parse("tune", &s(missing), &["--json"], &["--lib"])
                .err()
                .unwrap();
            assert_eq!(
                e.message, "a value is required for '--lib <LIB>' but none was supplied",
                "{missing:?}"
            );
        }
        let e = Args::parse("tune", &s(&["--json=1"]), &["--json"], &[])
            .err()
            .unwrap();
        assert!(
            e.message.contains("unexpected value '1' for '--json'"),
            "{}",
            e.message
        );
        // A switch or an option given twice: the last one counts, as before.
        let a = Args::parse(
            "tune",
            &s(&["--json", "--json", "--lib", "a", "--lib", "b"]),
            &["--json"],
            &["--lib"],
        )
        .unwrap();
        assert!(a.has("--json"));
        assert_eq!(a.value("--lib"), Some("b"));
        assert!(!a.has("--nothing") && a.value("--nothing").is_none());
        let a = Args::parse("tune", &s(&["--trials", "x"]), &[], &["--trials"]).unwrap();
        assert!(a.parsed::<usize>("--trials", 5, "a count").is_err());
        assert_eq!(
            Args::parse("tune", &[], &[], &["--trials"])
                .unwrap()
                .parsed::<usize>("--trials", 5, "a count")
                .unwrap(),
            5
        );
    }

    #[test]
    fn shared_arguments_read_the_same_everywhere() {
        let a = Args::parse(
            "tune",
            &s(&["--devices", "0,2", "--shard", "1/4"]),
            &[],
            &["--devices", "--shard", "--lib"],
        )
        .unwrap();
        assert_eq!(a.devices().unwrap(), vec![0, 2]);
        assert_eq!(a.shard().unwrap(), Some((1, 4)));
        assert!(a.lib().unwrap_err().message.contains("needs --lib"));
        let bad = Args::parse("tune", &s(&["--shard", "4/4"]), &[], &["--shard"]).unwrap();
        assert!(bad.shard().is_err());
        let margin = |v: &str| {
            Args::parse("tune", &s(&["--margin", v]), &[], &["--margin"])
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
        let none = Args::parse("tune", &[], &[], &["--margin"]).unwrap();
        assert_eq!(none.margin(3.0).unwrap(), 0.03);
    }
}
