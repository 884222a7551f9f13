//! `tunedblas lt`: gone; kept as a name that says what replaces each of its subcommands,
//! since every command now takes every library.

use crate::error::{Error, Result};

const REPLACED: &[(&str, &str)] = &[
    (
        "tune",
        "tunedblas tune (the library from the miss files' names, or --lib; rows for every rank)",
    ),
    ("recheck", "tunedblas confirm"),
    ("adopt", "tunedblas profiles adopt --lib LIBHIPBLASLT FILE"),
    ("verify", "tunedblas verify --stats FILE"),
    ("info", "tunedblas env --lib LIB"),
    ("selftest", "tunedblas selftest --lib LIBCUBLASLT"),
    ("overhead", "tunedblas-bench overhead --lib LIBCUBLASLT"),
];

pub fn help() -> String {
    let mut text = String::from(
        "tunedblas lt SUBCOMMAND\n\n`tunedblas lt` is gone: every command takes every library (rocBLAS, hipBLASLt, cuBLASLt).\n\n",
    );
    for (old, new) in REPLACED {
        text.push_str(&format!("    lt {old:<8} is now {new}\n"));
    }
    text
}

pub fn run(args: &[String]) -> Result<()> {
    let sub = args.first().map_or("", String::as_str);
    let instead = REPLACED.iter().find(|r| r.0 == sub).map_or_else(
        || "see `tunedblas help lt`".to_string(),
        |r| format!("`lt {sub}` is now `{}`", r.1),
    );
    Err(Error::usage(
        "lt",
        format!("`tunedblas lt` is gone: every command takes every library; {instead}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lt_subcommand_says_what_replaces_it() {
        for (old, new) in REPLACED {
            let e = run(&[old.to_string(), "--lib".into(), "x".into()]).unwrap_err();
            assert_eq!((e.exit_code(), e.command.as_deref()), (2, Some("lt")));
            assert!(
                e.message.contains(&format!("`lt {old}` is now `{new}`")),
                "{}",
                e.message
            );
            assert!(
                help().contains(&format!("lt {old:<8} is now {new}")),
                "{}",
                help()
            );
        }
        let e = run(&[]).unwrap_err();
        assert!(
            e.exit_code() == 2 && e.message.contains("tunedblas help lt"),
            "{}",
            e.message
        );
    }
}
