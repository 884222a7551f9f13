//! The engine's error and its exit codes (`tunedblas_tuner::error`) through its public API.

use tunedblas_tuner::error::*;

#[test]
fn exit_codes_are_the_documented_ones() {
    assert_eq!(Error::failed("x").exit_code(), 1);
    assert_eq!(Error::usage("tune", "x").exit_code(), 2);
    assert_eq!(Error::not_loaded("x").exit_code(), 3);
    assert_eq!(Error::no_device("x").exit_code(), 4);
    assert_eq!(Error::verdict(3, "x").exit_code(), 3);
}

#[test]
fn usage_errors_point_to_the_command_help_only() {
    let e = Error::usage("tune", "unknown option '--x'");
    assert_eq!(
        e.report(),
        "error: unknown option '--x'\nrun 'tunedblas help tune' for its options"
    );
    assert_eq!(
        Error::usage("", "no command").report(),
        "error: no command\nrun 'tunedblas help' for the commands"
    );
    assert_eq!(Error::failed("disk full").report(), "error: disk full");
    assert_eq!(
        Error::failed("disk full").context("a.csv").message,
        "a.csv: disk full"
    );
}
