//! The one error type of the `tunedblas` command and its tuner. Every command returns [`Result`]; `main`
//! prints the message and exits with the kind's code, so the exit codes the README and
//! `tunedblas help` document are decided here and nowhere else:
//!
//! | code | kind | in every command |
//! |---|---|---|
//! | 0 | - | success (`tune` with nothing left to tune included) |
//! | 1 | [`ErrorKind::Failed`] | the work failed; the message says why |
//! | 2 | [`ErrorKind::Usage`] | the command line: unknown option or command, a value missing or malformed (`--shape`, `--trials`, ...) |
//! | 3 | [`ErrorKind::NotLoaded`] | the library cannot be loaded or is not the one named |
//! | 4 | [`ErrorKind::NoDevice`] | no usable device |
//! | 3, 4 | [`ErrorKind::Verdict`] | `coverage --strict`: missing, unservable |
//!
//! A closed output pipe is none of these: SIGPIPE ends the process (see `main`).

use std::fmt;

/// What kind of failure, for the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The work failed: exit 1.
    Failed,
    /// A mistake on the command line: exit 2, with a hint naming the command's help.
    Usage,
    /// The library could not be loaded or is not the one named: exit 3.
    NotLoaded,
    /// No usable device: exit 4.
    NoDevice,
    /// A check the user asked to gate on came out negative (`coverage --strict`): the
    /// command's own documented code, since a launch script branches on it.
    Verdict(u8),
}

/// A failure with the words a user needs: what failed and what to do.
#[derive(Debug)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    /// The command whose help a usage error points to (`run 'tunedblas help <command>'`).
    pub command: Option<String>,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    fn of(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            command: None,
        }
    }

    /// The work failed (exit 1).
    pub fn failed(message: impl Into<String>) -> Error {
        Error::of(ErrorKind::Failed, message)
    }

    /// A command-line mistake in `command` (exit 2). `command` is the name `tunedblas help`
    /// takes, or empty for a mistake before any command was recognised.
    pub fn usage(command: &str, message: impl Into<String>) -> Error {
        Error {
            command: Some(command.to_string()).filter(|c| !c.is_empty()),
            ..Error::of(ErrorKind::Usage, message)
        }
    }

    /// `cannot <action> <path>: <e>`: a file that could not be read, written or locked.
    pub fn cannot(action: &str, path: &std::path::Path, e: impl fmt::Display) -> Error {
        Error::failed(format!("cannot {action} {}: {e}", path.display()))
    }

    /// The library cannot be loaded or is not the one named (exit 3).
    pub fn not_loaded(message: impl Into<String>) -> Error {
        Error::of(ErrorKind::NotLoaded, message)
    }

    /// No usable device (exit 4).
    pub fn no_device(message: impl Into<String>) -> Error {
        Error::of(ErrorKind::NoDevice, message)
    }

    /// A negative answer to a check run to gate on, with its documented `code`.
    pub fn verdict(code: u8, message: impl Into<String>) -> Error {
        Error::of(ErrorKind::Verdict(code), message)
    }

    /// The same error with `context: ` before its message (which file, which shape).
    pub fn context(mut self, context: impl fmt::Display) -> Error {
        self.message = format!("{context}: {}", self.message);
        self
    }

    pub fn exit_code(&self) -> u8 {
        match self.kind {
            ErrorKind::Failed => 1,
            ErrorKind::Usage => 2,
            ErrorKind::NotLoaded => 3,
            ErrorKind::NoDevice => 4,
            ErrorKind::Verdict(code) => code,
        }
    }

    /// What `main` writes to standard error: the message, and for a usage error the one
    /// line that leads to the command's help (never the whole usage text).
    pub fn report(&self) -> String {
        let mut text = format!("error: {}", self.message);
        if self.kind == ErrorKind::Usage {
            if self.message.contains('\n') {
                text.push('\n');
            }
            text.push_str(&match &self.command {
                Some(c) => format!("\nrun 'tunedblas help {c}' for its options"),
                None => "\nrun 'tunedblas help' for the commands".to_string(),
            });
        }
        text
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
