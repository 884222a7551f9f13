//! The command line itself: strict arguments, suggestions, help, and the exit codes of
//! mistakes. Nothing here loads a library, so it runs anywhere.

use std::process::{Command, Output};

fn tunedblas(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tunedblas"))
        .args(args)
        .env_remove("TUNEDBLAS_PROFILE_DIR")
        .output()
        .expect("the tunedblas binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A usage error: exit 2, the words naming the bad input first (clap's, with its tip and
/// usage line where it has them), the line that leads to the command's help last, and
/// nothing else (never the whole help text).
fn assert_usage_error(args: &[&str], message: &str, help_for: &str) {
    let out = tunedblas(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    let hint = if help_for.is_empty() {
        "run 'tunedblas help' for the commands".to_string()
    } else {
        format!("run 'tunedblas help {help_for}' for its options")
    };
    assert!(
        err.starts_with(&format!("error: {message}")),
        "{args:?}: {err}"
    );
    assert!(err.trim_end().ends_with(&hint), "{args:?}: {err}");
    assert!(err.lines().count() <= 8, "{args:?}: {err}");
    assert!(stdout(&out).is_empty(), "{args:?}");
}

#[test]
fn an_unknown_option_names_itself_and_the_nearest_one() {
    assert_usage_error(
        &["tune", "--frehs"],
        "unexpected argument '--frehs' found\n\n  tip: a similar argument exists: '--fresh'\n\nUsage: tunedblas tune [--lib LIB]...",
        "tune",
    );
    // The serving flags coverage reads in vLLM's spelling are suggested too.
    assert_usage_error(
        &["coverage", "--block-sise", "16"],
        "unexpected argument '--block-sise' found\n\n  tip: a similar argument exists: '--block-size'",
        "coverage",
    );
    // Nothing close: no guess.
    assert_usage_error(
        &["misses", "--frobnicate"],
        "unexpected argument '--frobnicate' found",
        "misses",
    );
    assert!(!stderr(&tunedblas(&["misses", "--frobnicate"])).contains("similar argument"));
    // A stray word where a command takes none is refused, not ignored.
    assert_usage_error(
        &["qualify", "--lib", "x.so", "extra"],
        "unexpected argument 'extra' found\n\nUsage: tunedblas qualify --lib LIB",
        "qualify",
    );
}

#[test]
fn an_unknown_command_gets_the_nearest_command() {
    assert_usage_error(
        &["qualfy"],
        "unknown command 'qualfy' (did you mean 'qualify'?)",
        "",
    );
    assert_usage_error(
        &["help", "tunr"],
        "unknown command 'tunr' (did you mean 'tune'?)",
        "",
    );
    // Internal commands are never offered.
    assert_usage_error(&["near-bnch"], "unknown command 'near-bnch'", "");
}

#[test]
fn an_option_missing_its_value_says_so() {
    for args in [
        &["export", "--format"][..],
        &["export", "--format", "--json"][..],
    ] {
        assert_usage_error(
            args,
            "a value is required for '--format <FORMAT>' but none was supplied",
            "export",
        );
    }
    assert_usage_error(
        &["coverage", "--max-num-seqs"],
        "--max-num-seqs needs a value",
        "coverage",
    );
}

#[test]
fn help_for_every_command_including_help_itself() {
    let out = tunedblas(&["help", "help"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("tunedblas help [COMMAND]"),
        "{}",
        stdout(&out)
    );
    for name in [
        "demo", "tune", "qualify", "verify", "profiles", "merge", "coverage", "misses", "export",
        "report", "env", "help",
    ] {
        let via_help = tunedblas(&["help", name]);
        let via_flag = tunedblas(&[name, "--help"]);
        assert_eq!(via_help.status.code(), Some(0), "{name}");
        assert_eq!(via_flag.status.code(), Some(0), "{name}");
        assert_eq!(stdout(&via_help), stdout(&via_flag), "{name}");
        assert!(
            stdout(&via_help).starts_with(&format!("tunedblas {name}")),
            "{name}: {}",
            stdout(&via_help)
        );
        // Generated from the command's declared arguments (clap), each with its meaning.
        if name != "help" {
            assert!(
                stdout(&via_help).contains("\nOptions:\n      --"),
                "{name}: {}",
                stdout(&via_help)
            );
        }
        // The overview lists it.
        assert!(
            stdout(&tunedblas(&["help"])).contains(&format!("    tunedblas {name}")),
            "{name}"
        );
    }
    let status = stdout(&tunedblas(&["help", "status"]));
    assert!(
        status.contains("--prune  remove the Prometheus files (.prom) of processes not running"),
        "{status}"
    );
    // No command: the overview on stderr, exit 2.
    let out = tunedblas(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("EXIT CODES"), "{}", stderr(&out));
}

#[test]
fn the_version_is_one_line_in_every_spelling() {
    let want = format!("tunedblas {}\n", env!("CARGO_PKG_VERSION"));
    for spelling in ["--version", "-V", "version"] {
        let out = tunedblas(&[spelling]);
        assert_eq!(out.status.code(), Some(0), "{spelling}: {}", stderr(&out));
        assert_eq!(stdout(&out), want, "{spelling}");
    }
    // And `env` starts with it.
    let out = tunedblas(&["env"]);
    assert!(stdout(&out).starts_with(&want), "{}", stdout(&out));
}

#[test]
fn env_says_what_the_interposer_would_say_of_the_settings() {
    let out = Command::new(env!("CARGO_BIN_EXE_tunedblas"))
        .arg("env")
        .env("TUNEDBLAS_LOG", "verbose")
        .env("TUNEDBLAS_PROFILES_DIR", "/x")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.contains(
            "warning: TUNEDBLAS_LOG=verbose is not a level (quiet, info or debug): using info"
        ),
        "{text}"
    );
    assert!(
        text.contains("warning: TUNEDBLAS_PROFILES_DIR is not a tunedblas setting, ignored (did you mean TUNEDBLAS_PROFILE_DIR?)"),
        "{text}"
    );
}

#[test]
fn profiles_which_refuses_what_is_no_blas_library_with_exit_3() {
    // The C library is on every machine and is certainly none of the three.
    let out = tunedblas(&["profiles", "which", "libc.so.6"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is not rocBLAS, hipBLASLt or cuBLASLt: it exports none of"),
        "{}",
        stderr(&out)
    );
    let out = tunedblas(&["profiles", "which", "/no/such/librocblas.so.4"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot read /no/such/librocblas.so.4"));
}

#[test]
fn demo_never_empties_a_folder_it_did_not_make() {
    let dir = std::env::temp_dir().join(format!("tunedblas-cli-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("precious.txt"), "mine").unwrap();
    let out = tunedblas(&["demo", "--dir", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is not empty and not a folder an earlier demo made"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("precious.txt")).unwrap(),
        "mine"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn demo_leaves_no_temporary_folder_behind_even_when_it_fails() {
    // The binary alone, without refblas beside it: the demo fails at once.
    let bin = std::env::temp_dir().join(format!("tunedblas-cli-bin-{}", std::process::id()));
    std::fs::create_dir_all(&bin).unwrap();
    let exe = bin.join("tunedblas");
    // Copied by `cp`, not `std::fs::copy`: while this process holds the copy open for
    // writing, a fork by another test thread passes that descriptor on until its exec,
    // and running the copy in that window fails with ETXTBSY (CI saw it once).
    let cp = Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_tunedblas"))
        .arg(&exe)
        .status()
        .unwrap();
    assert!(cp.success());
    let out = Command::new(&exe).arg("demo").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("librocblas_v5.so is not beside"),
        "{}",
        stderr(&out)
    );
    let said = stdout(&out);
    let removed = said
        .lines()
        .find_map(|l| l.strip_prefix("(removed "))
        .and_then(|l| l.split(';').next())
        .unwrap_or_else(|| panic!("no removal said: {said}"));
    assert!(
        !std::path::Path::new(removed).exists(),
        "{removed} left behind"
    );
    std::fs::remove_dir_all(&bin).unwrap();
}

/// Every command the overview lists, with what it needs before its options are read.
const EVERY_COMMAND: &[&[&str]] = &[
    &["demo"],
    &["tune"],
    &["qualify"],
    &["verify"],
    &["profiles", "list"],
    &["merge"],
    &["coverage"],
    &["misses"],
    &["status"],
    &["export"],
    &["report"],
    &["env"],
    &["confirm"],
];

#[test]
fn the_same_mistake_is_exit_2_in_every_command_and_every_one_takes_quiet() {
    for cmd in EVERY_COMMAND {
        let name = cmd[0];
        // -q is read by every command: the error is about the unknown option after it.
        let args = [*cmd, &["-q", "--frobnicate"]].concat();
        let out = tunedblas(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("unexpected argument '--frobnicate' found"),
            "{args:?}: {err}"
        );
        assert!(
            err.contains(&format!("tunedblas help {name}")),
            "{args:?}: {err}"
        );
        // An option without its value, wherever it is.
        let args = [*cmd, &["--quiet", "--profiles"]].concat();
        let out = tunedblas(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    }
    // A malformed value: a bad --shape is a command-line mistake as a bad --trials is.
    for (args, names) in [
        (
            &["tune", "--lib", "x.so", "--shape", "f16:TN:0:1:1"][..],
            "--shape f16:TN:0:1:1",
        ),
        (
            &["tune", "--lib", "x.so", "--shape", "f16"][..],
            "--shape f16",
        ),
        (
            &["tune", "--lib", "x.so", "--trials", "many"][..],
            "--trials",
        ),
        (
            &["tune", "--lib", "libcublasLt.so.13", "--shape", "1,2"][..],
            "--shape takes N,M,K",
        ),
        (&["misses", "--top", "0"][..], "--top"),
    ] {
        let out = tunedblas(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(names), "{args:?}: {err}");
        assert!(err.contains("run 'tunedblas help"), "{args:?}: {err}");
    }
}

#[test]
fn quiet_silences_the_notes_never_the_answer() {
    let dir = std::env::temp_dir().join(format!("tunedblas-cli-quiet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let loud = tunedblas(&["misses", d, "--prune", "0"]);
    let quiet = tunedblas(&["misses", d, "--prune", "0", "-q"]);
    assert_eq!(loud.status.code(), Some(0), "{}", stderr(&loud));
    assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
    assert!(
        stderr(&loud).contains("pruned the files of 0"),
        "{}",
        stderr(&loud)
    );
    assert!(stderr(&quiet).is_empty(), "{}", stderr(&quiet));
    assert_eq!(stdout(&loud), stdout(&quiet));
    assert!(!stdout(&quiet).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}
