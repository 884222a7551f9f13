//! The `TUNEDBLAS_*` environment variables: what each one accepts, and what is said when a
//! value (or a name) is not one of ours.
//!
//! The interposer reads its settings once, when a backend starts, and must never refuse to
//! start over a bad value; but a setting it silently reads as something else (`LOG=verbose`
//! taken as `info`, `NEAR=abc` as the default window, `TUNEDBLAS_PROFILES_DIR` ignored) leaves
//! an operator believing what is not so. Each parser here returns the value used *and* the
//! sentence saying why it is not what was written; the interposer prints those once, and
//! `tunedblas env` can show the same ones, since both read through these functions.

use crate::suggest::suggest;

/// Log levels, as the interposer numbers them.
pub const LOG_QUIET: u8 = 0;
pub const LOG_INFO: u8 = 1;
pub const LOG_DEBUG: u8 = 2;

/// Every variable the interposer reads.
pub const INTERPOSER: &[&str] = &[
    "TUNEDBLAS_PROFILE_DIR",
    "TUNEDBLAS_PROFILE",
    "TUNEDBLAS_ALLOW_MISMATCH",
    "TUNEDBLAS_MISS_DIR",
    "TUNEDBLAS_CACHE_DIR",
    "TUNEDBLAS_DISABLE",
    "TUNEDBLAS_LOG",
    "TUNEDBLAS_STATS",
    "TUNEDBLAS_NEAR",
    "TUNEDBLAS_STATUS_THREAD",
    "TUNEDBLAS_RELOAD",
    "TUNEDBLAS_GROUP_READ",
];

/// Variables the tools read (the cuBLASLt harness, the tests, the benchmarks). Not the
/// interposer's, but not typos either: they may be exported for a whole session.
pub const TOOLS: &[&str] = &[
    "TUNEDBLAS_CUBLASLT",
    "TUNEDBLAS_CUDART",
    "TUNEDBLAS_BACKEND",
    "TUNEDBLAS_LT_BIN",
    "TUNEDBLAS_BENCH_PRELOAD",
    "TUNEDBLAS_CONFORMANCE",
    "TUNEDBLAS_CONFORMANCE_MIRROR",
    "TUNEDBLAS_TEST_REGISTRY_WORKER",
];

/// A value read, and the sentence to say when it is not what was written (`None`: it is).
pub type Parsed<T> = (T, Option<String>);

/// `TUNEDBLAS_LOG`: `quiet` (`0`, `off`), `info` (`1`, the default) or `debug` (`2`).
pub fn log_level(value: Option<&str>) -> Parsed<u8> {
    match value {
        None | Some("1" | "info") => (LOG_INFO, None),
        Some("0" | "quiet" | "off") => (LOG_QUIET, None),
        Some("2" | "debug") => (LOG_DEBUG, None),
        Some(v) => (
            LOG_INFO,
            Some(format!(
                "TUNEDBLAS_LOG={v} is not a level (quiet, info or debug): using info"
            )),
        ),
    }
}

/// A switch (`TUNEDBLAS_DISABLE`, `TUNEDBLAS_ALLOW_MISMATCH`): `1`/`true`/`yes`/`on` or
/// `0`/`false`/`no`/`off`. Anything else counts as on, as it always has (a value was set
/// on purpose), and is said.
pub fn switch(name: &str, value: Option<&str>) -> Parsed<bool> {
    match value {
        None | Some("0" | "false" | "no" | "off") => (false, None),
        Some("1" | "true" | "yes" | "on") => (true, None),
        Some(v) => (
            true,
            Some(format!(
                "{name}={v} is not 1 or 0 (true/false, yes/no, on/off): taken as 1"
            )),
        ),
    }
}

/// `TUNEDBLAS_NEAR`: a window in tokens (a whole number; `0`, `off`, `no` or `false`: never).
pub fn near_window(value: Option<&str>, default: i64) -> Parsed<i64> {
    match value {
        None => (default, None),
        Some("off" | "no" | "false") => (0, None),
        Some(v) => match v.parse::<i64>() {
            Ok(w) if w >= 0 => (w, None),
            _ => (
                default,
                Some(format!(
                    "TUNEDBLAS_NEAR={v} is not a window in tokens (a whole number, or off): using {default}"
                )),
            ),
        },
    }
}

/// The interposer's typed settings (the paths are read as they are), and the sentences for
/// whatever in the environment is not what it was meant to be.
#[derive(Debug, Clone, PartialEq)]
pub struct Switches {
    pub disabled: bool,
    pub allow_mismatch: bool,
    pub log_level: u8,
    pub near_window: i64,
    /// `TUNEDBLAS_STATUS_THREAD`: the live status also written by a thread of the
    /// interposer's own, once a second (off by default: the host sees no thread of ours).
    pub status_thread: bool,
    /// `TUNEDBLAS_RELOAD`: rows committed to the store while a process runs are served
    /// without a restart (on unless `0`).
    pub reload: bool,
    /// `TUNEDBLAS_GROUP_READ`: the files the interposer writes (miss logs, live status,
    /// Prometheus) are readable by the process's group too (0640, in a 0750 folder when it
    /// makes one), for a node-exporter or an operator of the service's group; off by
    /// default: they are the user's alone (0600 in 0700).
    pub group_read: bool,
}

impl Switches {
    /// Reads them through `get` (a variable's non-empty value), and says what is wrong with
    /// them and with any `TUNEDBLAS_*` name in `names` that is not known.
    pub fn read<'a>(
        get: impl Fn(&str) -> Option<String>,
        names: impl IntoIterator<Item = &'a str>,
        default_window: i64,
    ) -> (Switches, Vec<String>) {
        let mut said = Vec::new();
        fn take<T>(said: &mut Vec<String>, (value, problem): Parsed<T>) -> T {
            said.extend(problem);
            value
        }
        let get = |name: &str| get(name).filter(|v| !v.is_empty());
        let switches = Switches {
            disabled: take(
                &mut said,
                switch("TUNEDBLAS_DISABLE", get("TUNEDBLAS_DISABLE").as_deref()),
            ),
            allow_mismatch: take(
                &mut said,
                switch(
                    "TUNEDBLAS_ALLOW_MISMATCH",
                    get("TUNEDBLAS_ALLOW_MISMATCH").as_deref(),
                ),
            ),
            log_level: take(&mut said, log_level(get("TUNEDBLAS_LOG").as_deref())),
            near_window: take(
                &mut said,
                near_window(get("TUNEDBLAS_NEAR").as_deref(), default_window),
            ),
            status_thread: take(
                &mut said,
                switch(
                    "TUNEDBLAS_STATUS_THREAD",
                    get("TUNEDBLAS_STATUS_THREAD").as_deref(),
                ),
            ),
            reload: match get("TUNEDBLAS_RELOAD") {
                None => true,
                Some(v) => take(&mut said, switch("TUNEDBLAS_RELOAD", Some(&v))),
            },
            group_read: take(
                &mut said,
                switch(
                    "TUNEDBLAS_GROUP_READ",
                    get("TUNEDBLAS_GROUP_READ").as_deref(),
                ),
            ),
        };
        said.extend(unknown_names(names));
        (switches, said)
    }
}

/// A path setting as the environment has it (any bytes, UTF-8 or not); `None` when unset
/// or empty.
pub fn path_var(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
}

/// Where the interposer records misses: `TUNEDBLAS_MISS_DIR`, else `<user cache>/misses`
/// (`identity::user_cache_dir`). `misses`, `tune` and `report` look there by default.
pub fn miss_dir() -> std::path::PathBuf {
    path_var("TUNEDBLAS_MISS_DIR")
        .unwrap_or_else(|| crate::identity::user_cache_dir().join("misses"))
}

/// One sentence per `TUNEDBLAS_*` variable in `vars` whose name is neither the
/// interposer's nor a tool's, with the nearest known name when one is close.
pub fn unknown_names<'a>(vars: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out = Vec::new();
    for name in vars {
        if !name.starts_with("TUNEDBLAS_") || INTERPOSER.contains(&name) || TOOLS.contains(&name) {
            continue;
        }
        // Compared without the common prefix, which would make every long name "close".
        let rest = |n: &'static str| n.trim_start_matches("TUNEDBLAS_");
        let known: Vec<&str> = INTERPOSER.iter().chain(TOOLS).map(|n| rest(n)).collect();
        let hint = suggest(&name["TUNEDBLAS_".len()..], known)
            .map(|n| format!(" (did you mean TUNEDBLAS_{n}?)"))
            .unwrap_or_default();
        out.push(format!("{name} is not a tunedblas setting, ignored{hint}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_what_is_said_of_a_bad_one() {
        assert_eq!(log_level(None), (LOG_INFO, None));
        assert_eq!(log_level(Some("debug")).0, LOG_DEBUG);
        assert_eq!(log_level(Some("0")).0, LOG_QUIET);
        let (level, said) = log_level(Some("verbose"));
        assert_eq!(level, LOG_INFO);
        assert!(said
            .unwrap()
            .contains("TUNEDBLAS_LOG=verbose is not a level"));
    }

    #[test]
    fn switches_keep_their_old_reading_and_say_when_unclear() {
        assert_eq!(switch("TUNEDBLAS_DISABLE", Some("1")), (true, None));
        assert_eq!(switch("TUNEDBLAS_DISABLE", Some("off")), (false, None));
        assert_eq!(switch("TUNEDBLAS_DISABLE", None), (false, None));
        let (on, said) = switch("TUNEDBLAS_DISABLE", Some("maybe"));
        assert!(on);
        assert!(said.unwrap().starts_with("TUNEDBLAS_DISABLE=maybe"));
    }

    #[test]
    fn near_windows() {
        assert_eq!(near_window(None, 32), (32, None));
        assert_eq!(near_window(Some("off"), 32), (0, None));
        assert_eq!(near_window(Some("64"), 32), (64, None));
        let (w, said) = near_window(Some("abc"), 32);
        assert_eq!(w, 32);
        assert!(said.unwrap().contains("TUNEDBLAS_NEAR=abc"));
        assert!(near_window(Some("-5"), 32).1.is_some());
    }

    #[test]
    fn unknown_names_are_said_with_the_nearest_known_one() {
        let said = unknown_names([
            "TUNEDBLAS_PROFILES_DIR",
            "TUNEDBLAS_LOG",
            "TUNEDBLAS_CUBLASLT",
            "HOME",
            "TUNEDBLAS_SOMETHING_ELSE_ENTIRELY",
        ]);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].contains("did you mean TUNEDBLAS_PROFILE_DIR?"),
            "{said:?}"
        );
        assert!(!said[1].contains("did you mean"), "{said:?}");
    }
}
