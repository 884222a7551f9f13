//! One file per command, each holding its arguments (declared to clap, each with its help,
//! in its `cli()`), its help (clap's, from those declarations) and its run; `main.rs` lists
//! them in its command table. A command reads its arguments with [`crate::args`],
//! does its work through the modules beside this folder, and returns
//! [`crate::error::Result`]: it never exits the process and never imports another command.

pub mod coverage;
pub mod demo;
pub mod env;
pub mod export;
pub mod help;
pub mod lt;
pub mod merge;
pub mod misses;
pub mod near_bench;
pub mod profiles;
pub mod qualify;
pub mod replay;
pub mod report;
pub mod status;
pub mod tune;
pub mod verify;
pub mod watch;
pub mod workload;

use crate::error::Result;

/// A row of the command table.
pub struct Command {
    pub name: &'static str,
    /// Its synopsis, as `tunedblas help` lists it.
    pub usage: &'static str,
    /// One line on what it is for.
    pub summary: &'static str,
    /// Its full help: options and examples.
    pub help: fn() -> String,
    /// Runs it with the arguments after its name.
    pub run: fn(&[String]) -> Result<()>,
    /// Run by the harness itself (as a child under the preload) or for a benchmark: not
    /// listed by `tunedblas help` and never offered as a suggestion.
    pub internal: bool,
}

/// Pretty JSON on standard output, for `--json`.
pub fn print_json<T: serde::Serialize>(v: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("plain serialisable data")
    );
}
