//! A small command-line reader: `--flag`, `--flag VALUE` (repeatable) and positionals, with
//! errors that name the flag. Every subcommand declares what it takes, so a typo is an error
//! instead of a silently ignored option.

use std::path::PathBuf;
use std::str::FromStr;

/// A command-line mistake: exit code 2 and the message.
#[derive(Debug)]
pub struct Usage(pub String);

pub struct Args {
    command: String,
    /// (flag, value); value is None for switches.
    flags: Vec<(String, Option<String>)>,
    pub positional: Vec<String>,
}

impl Args {
    /// Splits `args` by the declared `switches` (no value) and `options` (one value each).
    pub fn parse(
        command: &str,
        args: &[String],
        switches: &[&str],
        options: &[&str],
    ) -> Result<Args, Usage> {
        let mut flags = Vec::new();
        let mut positional = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--" {
                positional.extend(it.by_ref().cloned());
                break;
            }
            if !a.starts_with("--") || a.len() == 2 {
                positional.push(a.clone());
                continue;
            }
            let (name, inline) = match a.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (a.as_str(), None),
            };
            if switches.contains(&name) {
                if inline.is_some() {
                    return Err(Usage(format!("{command}: {name} takes no value")));
                }
                flags.push((name.to_string(), None));
            } else if options.contains(&name) {
                let v = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .cloned()
                        .ok_or_else(|| Usage(format!("{command}: {name} needs a value")))?,
                };
                flags.push((name.to_string(), Some(v)));
            } else {
                let mut known: Vec<&str> = switches.iter().chain(options).copied().collect();
                known.sort_unstable();
                return Err(Usage(format!(
                    "{command}: unknown option {name} (it takes: {})",
                    if known.is_empty() {
                        "no options".to_string()
                    } else {
                        known.join(" ")
                    }
                )));
            }
        }
        Ok(Args {
            command: command.to_string(),
            flags,
            positional,
        })
    }

    pub fn has(&self, name: &str) -> bool {
        self.flags.iter().any(|(n, _)| n == name)
    }

    /// The last value given for `name`.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Every value given for a repeatable option, in order.
    pub fn values(&self, name: &str) -> Vec<&str> {
        self.flags
            .iter()
            .filter(|(n, _)| n == name)
            .filter_map(|(_, v)| v.as_deref())
            .collect()
    }

    pub fn path(&self, name: &str) -> Option<PathBuf> {
        self.value(name).map(PathBuf::from)
    }

    /// `name`'s value parsed as `T`, or `default` when absent.
    pub fn parsed<T: FromStr>(&self, name: &str, default: T, what: &str) -> Result<T, Usage> {
        match self.value(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| Usage(format!("{}: {name} takes {what}, not '{v}'", self.command))),
        }
    }

    pub fn usage(&self, msg: impl std::fmt::Display) -> Usage {
        Usage(format!("{}: {msg}", self.command))
    }
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
            ]),
            &["--json"],
            &["--lib", "--misses"],
        )
        .unwrap();
        assert!(a.has("--json"));
        assert_eq!(a.value("--lib"), Some("x.so"));
        assert_eq!(a.values("--misses"), vec!["a", "b"]);
        assert_eq!(a.positional, vec!["pos"]);
    }

    #[test]
    fn unknown_and_missing_values_are_errors() {
        let e = Args::parse("tune", &s(&["--libb", "x"]), &[], &["--lib"])
            .err()
            .unwrap();
        assert!(e.0.contains("unknown option --libb"), "{}", e.0);
        let e = Args::parse("tune", &s(&["--lib"]), &[], &["--lib"])
            .err()
            .unwrap();
        assert!(e.0.contains("--lib needs a value"), "{}", e.0);
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
}
