//! The options of the measurement subcommands (`overhead`, `near-bench`): `--name VALUE`
//! pairs and bare switches, each checked against the subcommand's table so that a mistyped
//! option is refused rather than ignored.

use std::path::PathBuf;
use std::str::FromStr;

/// One option: name, value placeholder ("" for a switch), help.
pub type OptionRow = (&'static str, &'static str, &'static str);

pub struct Opts {
    command: &'static str,
    given: Vec<(&'static str, Option<String>)>,
}

/// `tunedblas-bench COMMAND [options]`, the about text and every option of `table`.
pub fn help(command: &str, about: &str, table: &[OptionRow]) -> String {
    let mut text = format!("tunedblas-bench {command} [options]\n\n{about}\n\nOPTIONS:\n");
    for (name, value, what) in table {
        text.push_str(&format!("    {:<22} {what}\n", format!("{name} {value}")));
    }
    text
}

impl Opts {
    /// Reads `args` against `table`: every word must be one of its options, and an option
    /// that takes a value must have one.
    pub fn parse(
        command: &'static str,
        table: &[OptionRow],
        args: &[String],
    ) -> Result<Opts, String> {
        let mut given = Vec::new();
        let mut words = args.iter();
        while let Some(w) = words.next() {
            let &(name, value, _) = table
                .iter()
                .find(|r| r.0 == w)
                .ok_or_else(|| format!("{command}: unknown option '{w}' (--help lists them)"))?;
            let v = match value {
                "" => None,
                _ => Some(
                    words
                        .next()
                        .cloned()
                        .ok_or_else(|| format!("{command}: {name} needs {value}"))?,
                ),
            };
            given.push((name, v));
        }
        Ok(Opts { command, given })
    }

    pub fn value(&self, name: &str) -> Option<&str> {
        self.given
            .iter()
            .rev()
            .find(|g| g.0 == name)
            .and_then(|g| g.1.as_deref())
    }

    pub fn path(&self, name: &str) -> Option<PathBuf> {
        self.value(name).map(PathBuf::from)
    }

    pub fn has(&self, name: &str) -> bool {
        self.given.iter().any(|g| g.0 == name)
    }

    /// `name`'s value parsed as `T`, or `default` when absent.
    pub fn parsed<T: FromStr>(&self, name: &str, default: T, what: &str) -> Result<T, String> {
        match self.value(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("{}: {name} takes {what}, not '{v}'", self.command)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &[OptionRow] = &[("--calls", "C", "calls"), ("--json", "", "as JSON")];

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn values_and_switches_are_read_and_unknown_options_refused() {
        let o = Opts::parse("x", TABLE, &words(&["--calls", "7", "--json"])).unwrap();
        assert_eq!(o.parsed("--calls", 200usize, "a count"), Ok(7));
        assert!(o.has("--json"));
        assert_eq!(
            Opts::parse("x", TABLE, &[])
                .unwrap()
                .parsed("--calls", 200, "n"),
            Ok(200)
        );
        assert!(Opts::parse("x", TABLE, &words(&["--cals", "7"])).is_err());
        assert!(Opts::parse("x", TABLE, &words(&["--calls"])).is_err());
        let bad = Opts::parse("x", TABLE, &words(&["--calls", "many"])).unwrap();
        assert!(bad.parsed("--calls", 1usize, "a count").is_err());
    }
}
