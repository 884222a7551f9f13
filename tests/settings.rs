//! The interposer's settings as an operator meets them: a value it cannot read as written, or
//! a `TUNEDBLAS_*` name it does not know, is said once per process (whatever the number of
//! backends and calls), with what is used instead; `TUNEDBLAS_DISABLE` says so too.

mod common;

use std::process::Command;

/// Runs the refblas host under the preload with `vars` set; returns its stderr.
fn run_with(name: &str, vars: &[(&str, &str)]) -> String {
    let a = common::artifacts();
    let dir = common::scratch(name);
    let mut cmd = Command::new(&a.host4);
    cmd.args(["ex:TN:h:16:8:4", "ex:TN:h:16:8:4", "sgemm:NN:s:8:8:8"]);
    common::host_env(&mut cmd, &dir, true);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = common::run(cmd);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    common::text(&out.stderr)
}

#[test]
fn bad_values_and_unknown_names_are_said_once() {
    let err = run_with(
        "settings-bad",
        &[
            ("TUNEDBLAS_LOG", "verbose"),
            ("TUNEDBLAS_NEAR", "abc"),
            ("TUNEDBLAS_PROFILES_DIR", "/nowhere"),
        ],
    );
    for want in [
        "tunedblas: TUNEDBLAS_LOG=verbose is not a level (quiet, info or debug): using info",
        "tunedblas: TUNEDBLAS_NEAR=abc is not a window in tokens",
        "tunedblas: TUNEDBLAS_PROFILES_DIR is not a tunedblas setting, ignored (did you mean TUNEDBLAS_PROFILE_DIR?)",
    ] {
        assert_eq!(err.matches(want).count(), 1, "{want:?} once in:\n{err}");
    }
}

#[test]
fn good_values_say_nothing_about_settings() {
    let err = run_with(
        "settings-good",
        &[("TUNEDBLAS_LOG", "info"), ("TUNEDBLAS_NEAR", "off")],
    );
    assert!(
        !err.contains("is not a") && !err.contains("not a tunedblas setting"),
        "{err}"
    );
}

#[test]
fn disabled_says_so_once_and_passes_everything_through() {
    let err = run_with("settings-disabled", &[("TUNEDBLAS_DISABLE", "1")]);
    assert_eq!(
        err.matches("tunedblas: disabled by TUNEDBLAS_DISABLE")
            .count(),
        1,
        "{err}"
    );
    // Nothing else from us: no profile line, no summary.
    assert_eq!(err.matches("tunedblas:").count(), 1, "{err}");
}
