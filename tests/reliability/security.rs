//! Reliability, security: the interposer does nothing in set-uid processes (`AT_SECURE`);
//! it creates folders 0700 and files 0600 whatever the umask; it follows no symlink, opens no
//! FIFO and writes through no hard link planted under its file names in a shared folder; and
//! profiles are data only (a registry `dir` never leads outside the profile folder, nothing
//! in a results file is ever executed).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use crate::common::faults::*;
use crate::common::*;

const HIT: &str = "ex:TN:h:64:24:40";
const MISS: &str = "ex:TN:h:8:8:8";

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o7777
}

#[test]
fn set_uid_process_is_left_alone() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: making a set-uid program of another user needs root (CI runs as root)");
        return;
    }
    // The loader ignores LD_PRELOAD paths in a set-uid program, so this one dlopens the
    // interposer (RTLD_GLOBAL) and then a module linked against rocBLAS, as a program with
    // the interposer in /etc/ld.so.preload would have it.
    let steps = |dir: &Path, host: &Path| {
        let mut cmd = Command::new(host);
        cmd.args([
            &format!("@open:{}:global", artifacts().preload.display()),
            &format!("@open:{}:local", artifacts().module4.display()),
            "@main",
            HIT,
            MISS,
        ]);
        host_env(&mut cmd, dir, false);
        cmd
    };
    // Control: the same program, not set-uid, is served and records.
    let plain = scratch("rel-setuid-control");
    let sol = profile_with_hit(&plain, HIT);
    let out = run_guarded(steps(&plain, &hosts().dl));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(trace(&plain)[0]["solution"], sol.to_string());
    assert!(plain.join("misses").exists());

    let dir = scratch_with_hit("rel-setuid", HIT);
    let suid = dir.join("dl_host_suid");
    copy_executable(&hosts().dl, &suid);
    std::os::unix::fs::chown(&suid, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // The set-uid program runs as `nobody`: let it write refblas's trace here.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (out, stderr) = run_ok(steps(&dir, &suid));
    assert!(!stderr.contains("tunedblas"), "silent: {stderr}");
    assert_eq!(results(&out), expected("rel-setuid", &[HIT, MISS], &[]));
    let t = trace(&dir);
    assert_eq!(t.len(), 2, "{t:?}");
    assert!(
        t.iter().all(|l| l["heuristic"] == "1"),
        "nothing served: {t:?}"
    );
    for sub in ["misses", "cache"] {
        assert!(
            !dir.join(sub).exists(),
            "{sub} created in a set-uid process"
        );
    }
}

#[test]
fn folders_are_0700_and_files_0600_whatever_the_umask() {
    let dir = scratch_with_hit("rel-modes", HIT);
    let miss_dir = dir.join("m1/m2");
    let cache_dir = dir.join("c1/c2");
    let mut cmd = fault_cmd(&dir, true, &[HIT, MISS]);
    cmd.env("TUNEDBLAS_MISS_DIR", &miss_dir)
        .env("TUNEDBLAS_CACHE_DIR", &cache_dir)
        .env("TUNEDBLAS_STATS", dir.join("stats.json"));
    with_umask(&mut cmd, 0);
    let out = run_guarded(cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for d in [
        dir.join("m1"),
        miss_dir.clone(),
        dir.join("c1"),
        cache_dir.clone(),
    ] {
        assert_eq!(mode(&d), 0o700, "{}", d.display());
    }
    let mut files: Vec<_> = std::fs::read_dir(&miss_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.extend(walk_files(&cache_dir));
    files.push(dir.join("stats.json"));
    assert!(files.len() >= 4, "{files:?}");
    for f in files {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
}

fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_symlinked_miss_folder_is_refused() {
    let dir = scratch("rel-symlink-dir");
    let sol = profile_with_hit(&dir, HIT);
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join("link")).unwrap();
    let mut cmd = fault_cmd(&dir, true, &[HIT, MISS]);
    cmd.env("TUNEDBLAS_MISS_DIR", dir.join("link"));
    let (out, stderr) = run_ok(cmd);
    one_warning(&stderr);
    assert_has(&stderr, "refusing to write there");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    assert_eq!(
        results(&out),
        expected("rel-symlink-dir", &[HIT, MISS], &[(HIT, sol)])
    );
}

/// A shared folder like /tmp (sticky, world-writable) where files were planted in place of
/// this process's own (its names hold a random part, so they can only be found once made:
/// the host makes a first miss, then plants).
fn planted(name: &str, step: &str) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let dir = scratch(name);
    let sol = profile_with_hit(&dir, HIT);
    let shared = dir.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let step = step
        .replace("DIR", &shared.display().to_string())
        .replace("VICTIM", &victim.display().to_string());
    let mut cmd = fault_cmd(&dir, true, &["ex:TN:h:4:4:4", &step, HIT, MISS]);
    cmd.env("TUNEDBLAS_MISS_DIR", &shared);
    let (out, stderr) = run_ok(cmd);
    one_warning(&stderr);
    assert_eq!(
        results(&out),
        expected(name, &["ex:TN:h:4:4:4", HIT, MISS], &[(HIT, sol)])
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious\n",
        "the victim file is untouched"
    );
    (dir, shared, stderr)
}

#[test]
fn planted_symlinks_are_not_followed() {
    let (_, shared, _) = planted("rel-planted-symlink", "@plant:DIR:VICTIM");
    // The counts were still written, as a file of ours replacing the planted link.
    let counts: Vec<_> = std::fs::read_dir(&shared)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".counts.csv"))
        .collect();
    assert_eq!(counts.len(), 1);
    assert!(!counts[0].is_symlink());
    assert_eq!(mode(&counts[0]), 0o600);
}

#[test]
fn a_planted_fifo_does_not_block_the_host() {
    planted("rel-planted-fifo", "@fifo:DIR");
}

#[test]
fn a_planted_hard_link_is_not_written_through() {
    planted("rel-planted-link", "@link:DIR:VICTIM");
}

#[test]
fn a_planted_stats_symlink_is_not_followed() {
    let dir = scratch_with_hit("rel-planted-stats", HIT);
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("stats.json")).unwrap();
    let mut cmd = fault_cmd(&dir, true, &[HIT]);
    cmd.env("TUNEDBLAS_STATS", dir.join("stats.json"));
    let out = run_guarded(cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}

/// `TUNEDBLAS_STATS` naming a stream (a FIFO no one reads, a link to a device such as
/// `/dev/null`, a link to a descriptor as `/dev/stdout` is): written through, appended, and
/// each left as it was. The temporary + rename of a stats file replaced each with a regular
/// file (run as root with `/dev/null` itself, for a whole container: an outside tester's
/// finding).
#[test]
fn a_stats_path_naming_a_stream_is_written_through_and_left_as_it_is() {
    use std::os::unix::fs::FileTypeExt;
    let dir = scratch_with_hit("rel-stats-stream", HIT);
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a plain mkfifo of a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let null = dir.join("null");
    std::os::unix::fs::symlink("/dev/null", &null).unwrap();
    let stdout_link = dir.join("stdout");
    std::os::unix::fs::symlink("/proc/self/fd/1", &stdout_link).unwrap();
    for path in [&fifo, &null, &stdout_link] {
        let before = std::fs::symlink_metadata(path).unwrap().file_type();
        let mut cmd = fault_cmd(&dir, true, &[HIT]);
        cmd.env("TUNEDBLAS_STATS", path);
        let out = run_guarded(cmd);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let after = std::fs::symlink_metadata(path).unwrap().file_type();
        assert_eq!(
            (after.is_fifo(), after.is_symlink(), after.is_file()),
            (before.is_fifo(), before.is_symlink(), false),
            "{} left as it was",
            path.display()
        );
        if path == &stdout_link {
            assert_has(&text(&out.stdout), "\"calls\": 1");
        }
    }
    // A link to a device that someone else planted (owned by another user) is replaced by
    // the stats file, never followed.
    let planted = dir.join("planted");
    std::os::unix::fs::symlink("/dev/null", &planted).unwrap();
    let c = std::ffi::CString::new(planted.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: lchown of a link we made.
    if unsafe { libc::lchown(c.as_ptr(), 65534, 65534) } != 0 {
        eprintln!("skipped the planted link: this process may not give it away");
        return;
    }
    let mut cmd = fault_cmd(&dir, true, &[HIT]);
    cmd.env("TUNEDBLAS_STATS", &planted);
    let out = run_guarded(cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let after = std::fs::symlink_metadata(&planted).unwrap();
    assert!(
        after.is_file(),
        "the planted link was replaced, not followed"
    );
    assert_has(&std::fs::read_to_string(&planted).unwrap(), "\"calls\": 1");
}

#[test]
fn profiles_are_data_only() {
    let dir = scratch("rel-data-only");
    let sol = tuned(HIT);
    let sha = sha4();
    let profiles = dir.join("profiles");
    let outside = dir.join("outside");
    let marker = dir.join("pwned");
    // A valid profile for this build, but outside the profile folder.
    Profile::new(&dir, "outside", &sha).tuned(HIT, sol).write();
    std::fs::remove_file(dir.join("profiles.json")).unwrap();
    std::fs::create_dir_all(profiles.join("inside")).unwrap();
    let registry = serde_json::json!({"profiles": {
        "escape": {"dir": "../outside", "lib_sha256": sha},
        "absolute": {"dir": outside.display().to_string(), "lib_sha256": sha},
        "$(touch x)": {"dir": "inside", "lib_sha256": sha},
    }});
    std::fs::write(profiles.join("profiles.json"), registry.to_string()).unwrap();
    let (_, stderr) = run_ok(fault_cmd(&dir, true, &[HIT]));
    for name in ["escape", "absolute", "$(touch x)"] {
        assert!(
            stderr.contains(&format!("profile {name:?} skipped")),
            "{name}: {stderr}"
        );
    }
    assert_has(&stderr, "profiles.json");
    assert_eq!(
        trace(&dir)[0]["heuristic"],
        "1",
        "nothing served from outside"
    );

    // Naming the outside folder explicitly is no way around it.
    let mut cmd = fault_cmd(&dir, true, &[HIT]);
    cmd.env("TUNEDBLAS_PROFILE", "../outside");
    let out = run_guarded(cmd);
    assert!(text(&out.stderr).contains("TUNEDBLAS_PROFILE=../outside is not in"));

    // Shell text in a results file is data: never run, the rest of the file still served.
    let dir = scratch("rel-data-only-csv");
    let rows = [
        format!("$(touch {}),tn_1_1_1,Default,1", marker.display()),
        format!(
            "GemmTunableOp_Half_TN,`touch {}`,Default,1",
            marker.display()
        ),
        format!(
            "GemmTunableOp_Half_TN,tn_1_1_1,Gemm_Rocblas_$(touch {}),1",
            marker.display()
        ),
        row(HIT, &format!("Gemm_Rocblas_{sol}")),
    ];
    Profile::new(&dir.join("profiles"), "ref-v4", &sha)
        .lines(&rows)
        .write();
    std::fs::write(
        dir.join("profiles/ref-v4/tunableop_results0.csv.sh"),
        format!("touch {}\n", marker.display()),
    )
    .unwrap();
    let out = run_guarded(fault_cmd(&dir, true, &[HIT]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(trace(&dir)[0]["solution"], sol.to_string());
    assert!(!marker.exists(), "nothing in a profile is executed");
}

#[test]
fn a_planted_hash_cache_folder_entry_or_fifo_is_never_trusted() {
    // Someone else's cache folder (here: one others can write, as a /tmp/tunedblas-<uid>
    // made first by another user would be) holding another build's hash: the loaded build is
    // hashed instead, its own profile served, and the refusal said once.
    let dir = scratch("rel-planted-cache");
    let sol = profile_with_hit(&dir, HIT);
    let cache = dir.join("cache");
    let sha256 = cache.join("sha256");
    std::fs::create_dir_all(&sha256).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let lib = std::fs::canonicalize(artifacts().lib4()).unwrap();
    let meta = std::fs::metadata(&lib).unwrap();
    let entry = sha256.join(tunedblas_core::identity::HashCache::entry_name(&meta));
    std::fs::write(&entry, "0".repeat(64)).unwrap();
    let (out, stderr) = run_ok(fault_cmd(&dir, true, &[HIT]));
    assert_eq!(
        results(&out),
        expected("rel-planted-cache", &[HIT], &[(HIT, sol)])
    );
    assert_has(&stderr, "auto-selected");
    assert_eq!(
        stderr.matches("can be written by other users").count(),
        1,
        "{stderr}"
    );
    // In a folder of the user's own, a FIFO (a read would wait forever) or a link to
    // /dev/zero (a read would never end) in place of the entry: hashed, not read.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    for plant in ["fifo", "zero"] {
        let _ = std::fs::remove_file(&entry);
        if plant == "fifo" {
            let c = std::ffi::CString::new(entry.to_str().unwrap()).unwrap();
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        } else {
            std::os::unix::fs::symlink("/dev/zero", &entry).unwrap();
        }
        let out = run_guarded_for(
            fault_cmd(&dir, true, &[HIT]),
            std::time::Duration::from_secs(30),
        );
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{plant}: {stderr}");
        assert_eq!(
            results(&out),
            expected("rel-planted-cache", &[HIT], &[(HIT, sol)]),
            "{plant}"
        );
    }
}

#[test]
fn a_full_disk_is_said_for_the_stats_and_leaves_no_cache_temporary() {
    let dir = scratch_with_hit("rel-full-disk", HIT);
    let mut cmd = fault_cmd(&dir, true, &[HIT, MISS]);
    cmd.env("TUNEDBLAS_STATS", dir.join("stats.json"));
    with_file_size_limit(&mut cmd, 10);
    let (_, stderr) = run_ok(cmd);
    assert_eq!(
        stderr.matches("cannot write the stats file").count(),
        1,
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.join("cache/sha256"))
        .map(|rd| rd.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "nothing half-written in the cache: {left:?}"
    );
    assert!(!dir.join("stats.json").exists());
}

#[test]
fn a_home_that_does_not_exist_is_never_made() {
    // A service user with HOME=/nonexistent (root, as here, may create anything): the cache
    // and the miss folder go to the user's runtime folder instead.
    let dir = scratch_with_hit("rel-no-home", HIT);
    let home = dir.join("nonexistent");
    let runtime = dir.join("run");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut cmd = fault_cmd(&dir, true, &[MISS]);
    cmd.env_remove("TUNEDBLAS_CACHE_DIR")
        .env_remove("TUNEDBLAS_MISS_DIR")
        .env_remove("XDG_CACHE_HOME")
        .env("HOME", &home)
        .env("XDG_RUNTIME_DIR", &runtime);
    let out = run_guarded(cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!home.exists(), "HOME was created");
    assert!(runtime.join("tunedblas/misses").is_dir());
    assert!(runtime.join("tunedblas/sha256").is_dir());
}

#[test]
fn path_settings_that_are_not_utf8_are_used_as_they_are() {
    use std::os::unix::ffi::OsStrExt;
    let dir = scratch_with_hit("rel-non-utf8", HIT);
    let misses = dir.join(std::ffi::OsStr::from_bytes(b"miss\xff\xfe"));
    let stats = dir.join(std::ffi::OsStr::from_bytes(b"stats\xff.json"));
    let mut cmd = fault_cmd(&dir, true, &[HIT, MISS]);
    cmd.env("TUNEDBLAS_MISS_DIR", &misses)
        .env("TUNEDBLAS_STATS", &stats);
    let out = run_guarded(cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(misses.is_dir(), "the miss folder named");
    assert!(stats.is_file(), "the stats file named");
    assert!(!dir.join("misses").exists(), "not the default");
}

#[test]
fn a_long_miss_folder_path_is_written_to() {
    // 1,030 bytes and more: legal (PATH_MAX is 4,096), and the shapes land there (before,
    // names were built in a 1 KiB buffer and nothing was ever written).
    let dir = scratch_with_hit("rel-long-miss-dir", HIT);
    let mut misses = dir.clone();
    while misses.as_os_str().len() < 1100 {
        misses = misses.join("a_rather_long_folder_name_0123456789");
    }
    let mut cmd = fault_cmd(&dir, true, &[HIT, MISS]);
    cmd.env("TUNEDBLAS_MISS_DIR", &misses);
    let (_, stderr) = run_ok(cmd);
    assert!(!stderr.contains("cannot write"), "{stderr}");
    let names: Vec<String> = std::fs::read_dir(&misses)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n.ends_with("-rank0.csv")), "{names:?}");
    assert!(
        names.iter().any(|n| n.ends_with("-rank0.counts.csv")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n.ends_with(".status.json")),
        "{names:?}"
    );
}

#[test]
fn a_default_miss_folder_of_another_user_is_never_written_into() {
    // The default miss folder (`<cache>/misses`, no TUNEDBLAS_MISS_DIR) made first by
    // someone else: refused with one warning, nothing written there, serving goes on.
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: giving a folder to another user needs root (CI runs as root)");
        return;
    }
    let dir = scratch("rel-foreign-misses");
    let sol = profile_with_hit(&dir, HIT);
    let misses = dir.join("cache/misses");
    std::fs::create_dir_all(&misses).unwrap();
    let c = std::ffi::CString::new(misses.to_str().unwrap()).unwrap();
    // SAFETY: chown of a folder this test made, to `nobody`.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
    std::fs::set_permissions(&misses, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut cmd = fault_cmd(&dir, true, &[HIT, MISS]);
    cmd.env_remove("TUNEDBLAS_MISS_DIR");
    let (out, stderr) = run_ok(cmd);
    one_warning(&stderr);
    assert_has(&stderr, "belongs to another user");
    assert_eq!(
        results(&out),
        expected("rel-foreign-misses", &[HIT, MISS], &[(HIT, sol)])
    );
    assert_eq!(std::fs::read_dir(&misses).unwrap().count(), 0);
}
