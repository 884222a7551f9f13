//! `tunedblas help [COMMAND]`: the overview, or one command's options and examples.

use crate::args::{self, suggest, Args};
use crate::error::{Error, Result};

const ABOUT: &str = "\
Without COMMAND: every command, the profile store and the exit codes. With one: that
command's options and examples (the same as `tunedblas COMMAND --help`).";

const AFTER: &str = "\
EXAMPLES:
    tunedblas help
    tunedblas help tune
";

const OPTIONS: &str = "COMMAND  the command whose options and examples to show";

pub fn cli() -> clap::Command {
    args::command("help", ABOUT, AFTER).args(args::table(OPTIONS))
}

pub fn run(a: &Args) -> Result<()> {
    match a.positional.first() {
        None => print!("{}", crate::overview()),
        Some(name) => {
            let c = crate::find(name).ok_or_else(|| unknown_command(name))?;
            print!("{}", c.help());
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
