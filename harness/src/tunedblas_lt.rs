//! `tunedblas-lt ARGS`: the same as `tunedblas lt ARGS`, for the scripts that call it by
//! this name. It replaces itself with the `tunedblas` beside it, so there is one parser,
//! one set of errors and exit codes, and one copy of the code.

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let me = std::env::current_exe().ok();
    let Some(tunedblas) = me
        .as_deref()
        .and_then(|p| p.parent())
        .map(|d| d.join("tunedblas"))
    else {
        eprintln!("error: tunedblas-lt cannot find its own path");
        return ExitCode::from(1);
    };
    let e = Command::new(&tunedblas)
        .arg("lt")
        .args(std::env::args_os().skip(1))
        .exec();
    eprintln!(
        "error: tunedblas-lt runs {} (it must be beside it): {e}",
        tunedblas.display()
    );
    ExitCode::from(1)
}
