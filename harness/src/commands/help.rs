//! `tunedblas help [COMMAND]`: the overview, or one command's options and examples.

use crate::args::{suggest, Args};
use crate::error::{Error, Result};

const HELP: &str = "\
tunedblas help [COMMAND]

Without COMMAND: every command, the profile store and the exit codes. With one: that
command's options and examples (the same as `tunedblas COMMAND --help`).

EXAMPLES:
    tunedblas help
    tunedblas help tune
";

pub fn help() -> String {
    HELP.into()
}

pub fn run(args: &[String]) -> Result<()> {
    let a = Args::parse("help", args, &[], &[])?;
    a.at_most_positional(1)?;
    match a.positional.first() {
        None => print!("{}", crate::overview()),
        Some(name) => {
            let c = crate::find(name).ok_or_else(|| unknown_command(name))?;
            print!("{}", (c.help)());
        }
    }
    Ok(())
}

/// A command name not in the table, with the nearest listed one.
pub fn unknown_command(name: &str) -> Error {
    let listed = crate::COMMANDS
        .iter()
        .filter(|c| !c.internal)
        .map(|c| c.name);
    let hint = suggest(name, listed)
        .map(|s| format!(" (did you mean '{s}'?)"))
        .unwrap_or_default();
    Error::usage("", format!("unknown command '{name}'{hint}"))
}
