//! Reliability, harness: concurrent `profiles.json` (and `provenance.json`) updates lose
//! nothing. Several threads and several processes add entries at once through
//! `Registry::update_locked` (a `flock`ed lock file, then re-read, change, atomic save).
//!
//! The processes are this test binary run again with `TUNEDBLAS_TEST_REGISTRY_WORKER` set:
//! the `worker` test below then does its share and exits; without the variable it does
//! nothing.

use std::path::Path;
use std::process::Command;

use crate::temp_scratch;
use tunedblas_core::registry::{lock_path, ProfileEntry, Provenance, Registry};

const SHA: &str = "c27e2252cc7a4b6e174601a180a169822dcf15a29e634046daecb61498e3bd2a";
const WORKER_ENV: &str = "TUNEDBLAS_TEST_REGISTRY_WORKER";

/// Adds `count` entries named `<tag>-<i>`, one update each.
fn add_entries(path: &Path, tag: &str, count: usize) {
    for i in 0..count {
        let name = format!("{tag}-{i}");
        Registry::update_locked(path, |reg| {
            reg.insert(&name, ProfileEntry::new(&name, SHA)).unwrap();
        })
        .unwrap();
    }
}

/// The worker process: `<registry>|<provenance>|<tag>|<count>`.
#[test]
fn worker() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let (reg, prov, tag, count) = (
        Path::new(parts[0]),
        Path::new(parts[1]),
        parts[2],
        parts[3].parse().unwrap(),
    );
    let tmp = format!("{tag}-new");
    for i in 0..count {
        // Add, then rename in a second update: each update depends on the one before.
        add_entries(reg, &tmp, 1);
        let name = format!("{tag}-{i}");
        Registry::update_locked(reg, |r| {
            let e = r.remove(&format!("{tmp}-0")).unwrap();
            r.insert(
                &name,
                ProfileEntry {
                    dir: name.clone(),
                    ..e
                },
            )
            .unwrap();
        })
        .unwrap();
        Provenance::update_locked(prov, |p| {
            p.push_campaign(serde_json::json!({ "by": tag, "i": i }))
        })
        .unwrap();
    }
}

#[test]
fn concurrent_updates_from_threads_and_processes_lose_no_entry() {
    let dir = temp_scratch("registry-concurrent");
    let reg = dir.join("profiles.json");
    let prov = dir.join("provenance.json");
    // An existing registry with an entry and a field some other tool wrote.
    std::fs::write(
        &reg,
        format!(
            r#"{{"schema": 7, "profiles": {{"seed": {{"dir": "seed", "lib_sha256": "{SHA}"}}}}}}"#
        ),
    )
    .unwrap();
    let exe = std::env::current_exe().unwrap();
    // The test `worker` of this module, as the test binary names it (no crate name).
    let worker = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::worker"),
        None => "worker".to_string(),
    };
    let procs: Vec<_> = (0..4)
        .map(|p| {
            Command::new(&exe)
                .args(["--exact", &worker, "--test-threads", "1", "--quiet"])
                .env(
                    WORKER_ENV,
                    format!("{}|{}|proc{p}|12", reg.display(), prov.display()),
                )
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (reg, prov) = (reg.clone(), prov.clone());
            std::thread::spawn(move || {
                for i in 0..10 {
                    add_entries(&reg, &format!("thread{t}-{i}"), 1);
                    Provenance::update_locked(&prov, |p| {
                        p.push_campaign(serde_json::json!({ "by": format!("thread{t}"), "i": i }))
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for mut p in procs {
        assert!(p.wait().unwrap().success());
    }

    let loaded = Registry::load(&reg).unwrap();
    assert!(loaded.errors().is_empty(), "{:?}", loaded.errors());
    let mut want: Vec<String> = vec!["seed".into()];
    for p in 0..4 {
        want.extend((0..12).map(|i| format!("proc{p}-{i}")));
    }
    for t in 0..6 {
        want.extend((0..10).map(|i| format!("thread{t}-{i}-0")));
    }
    want.sort();
    let names: Vec<String> = loaded.entries().map(|(n, _)| n.to_owned()).collect();
    assert_eq!(names, want, "every entry of every updater is there");
    assert_eq!(
        loaded.extra.get("schema"),
        Some(&serde_json::Value::from(7))
    );
    let campaigns = Provenance::load(&prov).unwrap().campaigns().len();
    assert_eq!(campaigns, 4 * 12 + 6 * 10, "every campaign record is there");

    // Nothing but the two files and the lock file is left behind.
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            ".profiles.json.lock",
            ".provenance.json.lock",
            "profiles.json",
            "provenance.json"
        ]
    );
    assert_eq!(lock_path(&reg), dir.join(".profiles.json.lock"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_broken_registry_is_not_overwritten_by_an_update() {
    let dir = temp_scratch("registry-broken");
    let reg = dir.join("profiles.json");
    std::fs::write(&reg, "{\"profiles\": {,,}").unwrap();
    let err = Registry::update_locked(&reg, |r| {
        r.insert("x", ProfileEntry::new("x", SHA)).unwrap()
    })
    .unwrap_err();
    assert!(err.to_string().contains("profiles.json:1:"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&reg).unwrap(),
        "{\"profiles\": {,,}"
    );
    // A missing registry starts empty.
    let fresh = dir.join("new/profiles.json");
    std::fs::create_dir_all(fresh.parent().unwrap()).unwrap();
    Registry::update_locked(&fresh, |r| {
        r.insert("x", ProfileEntry::new("x", SHA)).unwrap()
    })
    .unwrap();
    assert_eq!(Registry::load(&fresh).unwrap().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
