//! The snippets of `tunedblas env --snippet vllm|systemd|docker` work as written, as far as
//! this machine allows (issue 26): each is made by an installed `tunedblas` (installed by
//! `scripts/install` run from another folder), then the vLLM launcher runs a GEMM host
//! through a stub `vllm` under the preload, the systemd unit's keys and paths are checked
//! (by `systemd-analyze verify` where there is one), and the Dockerfile's context is built
//! as its comment says and holds everything it copies (no Docker engine runs here).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

/// `scripts/install --prefix <prefix>` run in `cwd` (the prefix as written: relative ones
/// are taken from `cwd`), from the binaries this test run built.
fn install(cwd: &Path, prefix: &str) {
    let stray = repo().join(prefix.trim_start_matches("./"));
    let existed = stray.exists();
    let out = Command::new("bash")
        .arg(repo().join("scripts/install"))
        .args(["--prefix", prefix, "--from"])
        .arg(target_dir())
        .current_dir(cwd)
        .output()
        .unwrap();
    if !existed && stray.exists() && !prefix.starts_with('/') {
        let _ = std::fs::remove_dir_all(&stray);
        panic!(
            "scripts/install --prefix {prefix} run in {} installed into the checkout",
            cwd.display()
        );
    }
    ok(&out);
}

/// A snippet as an installed `tunedblas env` prints it, with nothing of this shell's
/// tunedblas settings.
fn snippet(prefix: &Path, kind: &str, env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(prefix.join("bin/tunedblas"));
    cmd.args(["env", "--snippet", kind]);
    for (k, _) in std::env::vars() {
        if k.starts_with("TUNEDBLAS_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    ok(&cmd.output().unwrap())
}

/// Where an image path of the Dockerfile comes from in its build context, by its COPY lines.
fn in_context(docker: &str, context: &Path, image_path: &str) -> PathBuf {
    for line in docker.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.first() == Some(&"COPY") {
            let (src, dst) = (w[1], w[2]);
            if let Some(rest) = image_path.strip_prefix(dst) {
                return context.join(src).join(rest);
            }
        }
    }
    panic!("no COPY puts {image_path} in the image:\n{docker}")
}

/// The checks the Dockerfile allows without an engine: every COPY source is in `context`,
/// the preload and the profile store it names come from there, and the store is a volume.
fn check_dockerfile(docker: &str, context: &Path) {
    let copies: Vec<&str> = docker.lines().filter(|l| l.starts_with("COPY ")).collect();
    assert!(!copies.is_empty(), "{docker}");
    for c in copies {
        let src = c.split_whitespace().nth(1).unwrap();
        assert!(
            context.join(src).exists(),
            "{c}: not in {}",
            context.display()
        );
    }
    let preload = docker
        .lines()
        .find_map(|l| l.strip_prefix("ENV LD_PRELOAD="))
        .and_then(|v| v.split_whitespace().next())
        .expect("ENV LD_PRELOAD");
    assert!(in_context(docker, context, preload).is_file(), "{preload}");
    let store = docker
        .lines()
        .find_map(|l| l.strip_prefix("# The interposer finds the profiles in "))
        .and_then(|v| v.strip_suffix(" by itself."))
        .expect("where the image's profiles are");
    assert!(
        in_context(docker, context, store)
            .join("profiles.json")
            .is_file(),
        "{store}"
    );
    let volumes: Vec<&str> = docker
        .lines()
        .filter_map(|l| l.strip_prefix("VOLUME "))
        .flat_map(str::split_whitespace)
        .collect();
    assert!(
        volumes.contains(&store),
        "the profile store is a volume: {volumes:?}"
    );
    assert!(
        docker.contains(&format!("-v tunedblas-profiles:{store} ")),
        "the run line mounts a named volume on it:\n{docker}"
    );
    if Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        println!("a Docker engine answers, but the base image is not pulled here: not built");
    } else {
        println!("SKIPPED docker build: no Docker engine on this machine");
    }
}

/// Issue 26: `scripts/install --prefix ./dist` run from another folder installed into the
/// checkout, and the Dockerfile's comment named the prefix itself as the build context,
/// which holds no `dist/` for `COPY dist/`; the profile store was in the image layer, so a
/// `tune` inside the container was lost with it.
#[test]
fn the_dockerfile_context_holds_what_it_copies_and_the_store_is_a_volume() {
    let base = scratch("snippet-docker");
    // Installed as the comment says: in the context folder, a relative ./dist.
    let context = base.join("context");
    std::fs::create_dir_all(&context).unwrap();
    install(&context, "./dist");
    let prefix = context.join("dist");
    assert!(prefix.join("bin/tunedblas").is_file());
    let docker = snippet(&prefix, "docker", &[]);
    assert_has(
        &docker,
        &format!(
            "#   here: {} (its dist/ is this installation)",
            context.display()
        ),
    );
    check_dockerfile(&docker, &context);

    // Installed elsewhere: the comment's copy commands, run in a new folder, make the
    // context.
    let other = base.join("opt-tunedblas");
    install(&base, other.to_str().unwrap());
    let docker = snippet(&other, "docker", &[]);
    let made = base.join("context2");
    std::fs::create_dir_all(&made).unwrap();
    let steps: Vec<&str> = docker
        .lines()
        .filter_map(|l| l.strip_prefix("#   "))
        .filter(|l| l.starts_with("mkdir ") || l.starts_with("cp "))
        .collect();
    assert_eq!(steps.len(), 3, "{docker}");
    let out = Command::new("sh")
        .args(["-ec", &steps.join("\n")])
        .current_dir(&made)
        .output()
        .unwrap();
    ok(&out);
    check_dockerfile(&docker, &made);
}

/// Issue 26: the launcher sent misses to $HOME/.cache/tunedblas/misses, which is not where
/// the interposer's own default (and so `tunedblas status`) is once XDG_CACHE_HOME is set.
/// Run as written, through a stub `vllm` that runs a GEMM host: served under the installed
/// preload, and the installed `status` with no argument finds the process.
#[test]
fn the_vllm_launcher_runs_under_the_preload_and_status_finds_it() {
    let base = scratch("snippet-vllm");
    let prefix = base.join("prefix");
    install(&base, prefix.to_str().unwrap());
    let (home, xdg, stub) = (base.join("home"), base.join("xdg"), base.join("stub"));
    for d in [&home, &xdg, &stub] {
        std::fs::create_dir_all(d).unwrap();
    }
    let env = [
        ("HOME", home.to_str().unwrap()),
        ("XDG_CACHE_HOME", xdg.to_str().unwrap()),
    ];
    let launcher = base.join("vllm-tuned");
    write_executable(&launcher, &snippet(&prefix, "vllm", &env));
    let vllm = stub.join("vllm");
    write_executable(
        &vllm,
        &format!(
            "#!/bin/sh\n[ \"$1\" = serve ] || {{ echo \"vllm: not serve: $1\" >&2; exit 9; }}\nshift\nexec {} \"$@\"\n",
            artifacts().host4.display()
        ),
    );
    let path = format!("{}:{}", stub.display(), std::env::var("PATH").unwrap());
    let clean = |cmd: &mut Command| {
        for (k, _) in std::env::vars() {
            if k.starts_with("TUNEDBLAS_") || k == "LD_PRELOAD" || k == "REFBLAS_TRACE" {
                cmd.env_remove(k);
            }
        }
        cmd.envs(env).env("PATH", &path).env("NO_COLOR", "1");
    };
    let mut run_it = Command::new(&launcher);
    run_it.args(["ex:TN:h:64:24:40:3"]);
    clean(&mut run_it);
    let out = run(run_it);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("tunedblas"), "the preload spoke: {stderr}");
    let mut status = Command::new(prefix.join("bin/tunedblas"));
    status.args(["status", "--json"]);
    clean(&mut status);
    let v: Value = serde_json::from_str(&ok(&status.output().unwrap())).unwrap();
    let procs = v["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{v}");
    assert_eq!(procs[0]["backends"][0]["counters"]["missed"], 3, "{v}");
    assert_eq!(
        v["dir"].as_str().map(PathBuf::from),
        Some(xdg.join("tunedblas/misses"))
    );
}

/// Issue 26: run as another user, `tunedblas status` on the service's folder gave advice
/// that does not apply there. The unit says how to read it (as User=), with the command
/// and folder it sets; its keys are systemd's (`systemd-analyze verify` where present), its
/// paths exist.
#[test]
fn the_systemd_unit_names_its_paths_and_how_to_read_its_status() {
    let base = scratch("snippet-systemd");
    let prefix = base.join("prefix");
    install(&base, prefix.to_str().unwrap());
    let stub = base.join("venv/bin");
    std::fs::create_dir_all(&stub).unwrap();
    write_executable(&stub.join("vllm"), "#!/bin/sh\n");
    let path = format!("{}:{}", stub.display(), std::env::var("PATH").unwrap());
    let unit = snippet(
        &prefix,
        "systemd",
        &[("USER", "svc-vllm"), ("PATH", path.as_str())],
    );
    let key = |k: &str| -> Vec<&str> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
            .collect()
    };
    assert_eq!(key("User"), ["svc-vllm"], "{unit}");
    let envs: Vec<(&str, &str)> = key("Environment")
        .into_iter()
        .map(|e| e.split_once('=').unwrap())
        .collect();
    let env = |k: &str| envs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v).unwrap();
    assert!(Path::new(env("LD_PRELOAD")).is_file(), "{unit}");
    assert!(
        Path::new(env("TUNEDBLAS_PROFILE_DIR"))
            .join("profiles.json")
            .is_file(),
        "{unit}"
    );
    let misses = env("TUNEDBLAS_MISS_DIR");
    assert_eq!(
        Path::new(misses).parent(),
        Some(
            Path::new("/var/cache")
                .join(key("CacheDirectory")[0])
                .as_path()
        ),
        "the misses go under the folder systemd makes for User=: {unit}"
    );
    let exec = key("ExecStart")[0];
    assert_eq!(
        exec.split(' ').next(),
        Some(stub.join("vllm").to_str().unwrap()),
        "{unit}"
    );
    let advice = format!(
        "#   sudo -u svc-vllm {} status {misses}",
        prefix.join("bin/tunedblas").display()
    );
    assert!(unit.lines().any(|l| l == advice), "{advice}\n{unit}");
    let file = base.join("vllm-tuned.service");
    std::fs::write(&file, &unit).unwrap();
    match Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&file)
        .output()
    {
        Ok(out) => {
            let said = text(&out.stderr);
            assert!(out.status.success(), "{said}");
            let own: Vec<&str> = said
                .lines()
                .filter(|l| l.contains("vllm-tuned.service"))
                .collect();
            assert!(own.is_empty(), "systemd-analyze verify: {said}");
        }
        Err(_) => println!("SKIPPED systemd-analyze verify: not on this machine"),
    }
}
