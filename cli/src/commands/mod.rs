//! One file per command, each holding its arguments (declared to clap, each with its help,
//! in its `cli()`), its help (clap's, from those declarations) and its run; `main.rs` lists
//! them in its command table. A command reads its arguments with [`crate::args`],
//! does its work through the modules beside this folder, and returns
//! [`crate::error::Result`]: it never exits the process and never imports another command.

pub mod confirm;
pub mod coverage;
pub mod demo;
pub mod doctor;
pub mod doctor_run;
pub mod env;
pub mod export;
pub mod help;
pub mod lt;
pub mod merge;
pub mod misses;
pub mod profiles;
pub mod qualify;
pub mod replay;
pub mod report;
pub mod selftest;
pub mod status;
pub mod tune;
pub mod verify;
pub mod watch;
pub mod workload;

use crate::args::{self, Args};
use crate::error::Result;

/// How a command reads its arguments.
pub enum Run {
    /// Declared to clap (its `cli()`, whose help is the command's), read strictly, then run.
    Declared(fn() -> clap::Command, fn(&Args) -> Result<()>),
    /// Its own help and reading of the arguments after its name.
    Raw(fn() -> String, fn(&[String]) -> Result<()>),
}

/// A row of the command table.
pub struct Command {
    pub name: &'static str,
    /// Its synopsis, as `tunedblas help` lists it.
    pub usage: &'static str,
    /// One line on what it is for.
    pub summary: &'static str,
    /// How it reads its arguments, and its run.
    pub run: Run,
    /// Run by the harness itself (as a child under the preload) or for a benchmark: not
    /// listed by `tunedblas help` and never offered as a suggestion.
    pub internal: bool,
}

impl Command {
    /// Its full help: options and examples.
    pub fn help(&self) -> String {
        match self.run {
            Run::Declared(cli, _) => args::help_text(cli()),
            Run::Raw(help, _) => help(),
        }
    }

    /// Runs it with the arguments after its name.
    pub fn run(&self, rest: &[String]) -> Result<()> {
        match self.run {
            Run::Declared(cli, run) => run(&Args::of_declared(self.name, cli(), rest)?),
            Run::Raw(_, run) => run(rest),
        }
    }
}

/// Pretty JSON on standard output, for `--json`.
pub fn print_json<T: serde::Serialize>(v: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("plain serialisable data")
    );
}
