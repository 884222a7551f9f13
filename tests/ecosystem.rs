//! End-to-end tests of what tunedblas says to other tools: exports of a profile as a
//! rocblas-gemm-tune override CSV, rocblas-bench lines and PyTorch TunableOp files, each
//! read back (by the core readers, by `tunedblas tune` as inputs, and by a reader that
//! follows PyTorch's own rules); the HTML/PNG report; `env`; and the installer.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;
use tunedblas_core::formats::{bench, gemm_tune};
use tunedblas_core::key::ProblemKey;
use tunedblas_core::tunableop;

fn harness(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = tunedblas_cmd(dir, args);
    cmd.env("NO_COLOR", "1");
    cmd
}

/// `tunedblas export --lib <lib> --format <format> <rest>` in `dir`'s environment.
fn export(dir: &Path, lib: &str, format: &str, rest: &[&str]) -> Command {
    let mut args = vec!["export", "--lib", lib, "--format", format];
    args.extend(rest);
    harness(dir, &args)
}

fn key_text(k: &ProblemKey) -> String {
    let (op, sig) = tunableop::op_and_signature(k);
    format!("{op},{sig}")
}

/// One row of a hand-made profile: spec, solution text.
struct Made {
    specs: Vec<(&'static str, String)>,
}

/// Writes a store with one profile for the build in `libdir/soname`, as `tune` would:
/// registry entry with version and arch, validators, `ranks` rank files (rank r > 0 gets
/// Default as the solution of the first spec, to tell ranks apart).
fn make_store(dir: &Path, libdir: &Path, soname: &str, version: &str, rows: &Made) -> PathBuf {
    let store = dir.join("profiles");
    let name = format!("rocblas-{version}");
    let sha = sha_of(libdir, soname);
    std::fs::create_dir_all(store.join(&name)).unwrap();
    let registry = serde_json::json!({"profiles": {&name: {
        "dir": &name, "lib_sha256": sha, "rocblas": version, "arch": "gfx1030",
        "rows_per_rank": rows.specs.len(), "status": "tuned"}}});
    std::fs::write(store.join("profiles.json"), registry.to_string()).unwrap();
    for rank in 0..2 {
        let mut t =
            format!("Validator,ROCBLAS_VERSION,{version}\nValidator,GCN_ARCH_NAME,gfx1030\n");
        for (i, (spec, sol)) in rows.specs.iter().enumerate() {
            let sol = if rank == 1 && i == 0 {
                "Default"
            } else {
                sol.as_str()
            };
            t.push_str(&row(spec, sol));
            t.push('\n');
        }
        std::fs::write(
            store
                .join(&name)
                .join(format!("tunableop_results{rank}.csv")),
            t,
        )
        .unwrap();
    }
    store
}

/// [`make_store`] for refblas's v4 build (`librocblas.so.4`) as rocBLAS `version`.
fn store4(dir: &Path, version: &str, rows: &Made) -> PathBuf {
    make_store(dir, &artifacts().libdir4, "librocblas.so.4", version, rows)
}

/// Reads a results file as PyTorch's `TuningContext::ReadFile` does: split on commas,
/// `Validator` lines into a map, other lines of 3+ fields into results (first wins). It
/// returns None where PyTorch would discard the file: validator keys not exactly
/// `registered`, or a value that differs from PyTorch's own; an empty line in the file
/// also fails, as old PyTorch indexes the first field of every line.
fn pytorch_reads(
    text: &str,
    registered: &BTreeMap<String, String>,
) -> Option<BTreeMap<(String, String), String>> {
    let mut validators = BTreeMap::new();
    let mut results = BTreeMap::new();
    for line in text.split('\n') {
        if line.is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.split(',').collect();
        if parts[0].is_empty() {
            return None;
        }
        if parts[0] == "Validator" && parts.len() >= 3 {
            validators.insert(parts[1].to_string(), parts[2].to_string());
        } else if parts.len() >= 3 {
            results
                .entry((parts[0].to_string(), parts[1].to_string()))
                .or_insert_with(|| parts[2].to_string());
        }
    }
    assert!(!text.contains("\n\n"), "no blank lines");
    (&validators == registered).then_some(results)
}

const TUNED: &str = "ex:TN:h:64:24:40";
const DEFAULT: &str = "ex:TN:h:96:16:64";
const EXTENSION: &str = "ex:NN:hh:32:8:16";
const STRIDED: &str = "sb:NT:h:24:16:8";

fn profile_rows(host: &Path) -> Made {
    // `heuristic_solution` uses one scratch folder per spec: one test at a time here.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let sol = |spec: &str| format!("Gemm_Rocblas_{}", non_heuristic_solutions(host, spec)[0]);
    Made {
        specs: vec![
            (TUNED, sol(TUNED)),
            (DEFAULT, "Default".to_string()),
            (EXTENSION, sol(EXTENSION)),
            (STRIDED, sol(STRIDED)),
        ],
    }
}

fn solution_id(s: &str) -> Option<i32> {
    s.strip_prefix("Gemm_Rocblas_").map(|v| v.parse().unwrap())
}

#[test]
fn gemm_tune_and_bench_exports_read_back_and_feed_a_campaign() {
    let dir = scratch("export-gemm-tune-bench");
    let made = profile_rows(&artifacts().host4);
    let _store = store4(&dir, "4.4.0.5f2e9c71", &made);
    let sha = sha4();
    let lib = artifacts().lib4();
    let lib = lib.to_str().unwrap();

    // The override CSV: Tensile indices of the rocBLAS 4 build (the ids themselves), the
    // build named in comment lines without commas, Default rows left out.
    let csv = dir.join("override.csv");
    let out = export(
        &dir,
        lib,
        "gemm-tune",
        &["--beta", "0,1", "--out", csv.to_str().unwrap()],
    )
    .output()
    .unwrap();
    ok(&out);
    assert_has(&text(&out.stderr), "exported 6 rows");
    let body = std::fs::read_to_string(&csv).unwrap();
    assert_has(&body, &format!("valid ONLY for rocBLAS build sha256 {sha}"));
    for line in body.lines() {
        assert_eq!(
            line.starts_with('#'),
            !line.contains(','),
            "a comment with a comma would be a row: {line}"
        );
    }
    let parsed = gemm_tune::parse(&body);
    assert!(parsed.skipped.is_empty(), "{:?}", parsed.skipped);
    let got: BTreeMap<String, i32> = parsed
        .entries
        .iter()
        .map(|e| {
            (
                key_text(&e.key),
                gemm_tune::solution_id(e.solution.unwrap(), Some(4)).unwrap(),
            )
        })
        .collect();
    let want: BTreeMap<String, i32> = made
        .specs
        .iter()
        .filter_map(|(spec, sol)| Some((key_text(&spec_key(spec)), solution_id(sol)?)))
        .collect();
    assert_eq!(got, want);

    // rocblas-bench lines: each row, then its heuristic.
    let sh = dir.join("check.sh");
    ok(
        &export(&dir, lib, "bench", &["--out", sh.to_str().unwrap()])
            .output()
            .unwrap(),
    );
    let body = std::fs::read_to_string(&sh).unwrap();
    let parsed = bench::parse(&body);
    assert!(parsed.skipped.is_empty(), "{:?}", parsed.skipped);
    let commands = body
        .lines()
        .filter(|l| l.starts_with("./rocblas-bench"))
        .count();
    assert_eq!(
        commands, 7,
        "3 tuned rows twice, the Default row once:\n{body}"
    );
    let got: BTreeMap<String, Option<i32>> = parsed
        .entries
        .iter()
        .map(|e| (key_text(&e.key), e.solution))
        .collect();
    let want: BTreeMap<String, Option<i32>> = made
        .specs
        .iter()
        .map(|(spec, sol)| (key_text(&spec_key(spec)), solution_id(sol)))
        .collect();
    assert_eq!(got, want);

    // Both exports are inputs a campaign takes: the shapes come back, the ids do not.
    let other = dir.join("other-store");
    let out = ok(&harness(
        &dir,
        &[
            "tune",
            "--lib",
            lib,
            "--profiles",
            other.to_str().unwrap(),
            "--json",
            sh.to_str().unwrap(),
            csv.to_str().unwrap(),
        ]
        .into_iter()
        .chain(QUICK_TUNE)
        .collect::<Vec<_>>(),
    )
    .output()
    .unwrap());
    let summary: Value = serde_json::from_str(&out).unwrap();
    let shapes: BTreeSet<String> = summary["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["shape"].as_str().unwrap().to_string())
        .collect();
    let specs: BTreeSet<String> = made
        .specs
        .iter()
        .map(|(s, _)| key_text(&spec_key(s)))
        .collect();
    assert_eq!(shapes, specs);
}

/// rocBLAS 2.47 (ROCm 5.5, Debian's 5.5.1, version string `2.47.0.`) has no
/// ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH (it first appears in rocBLAS 3.1, ROCm 5.7; the
/// conformance suite checks the real libraries' strings): a file for it would be ignored
/// without a word, so the export refuses and says what works instead. Bench lines still go.
#[test]
fn gemm_tune_export_refuses_a_build_that_does_not_read_the_override_file() {
    let dir = scratch("export-gemm-tune-2.47");
    let made = profile_rows(&artifacts().host4);
    store4(&dir, "2.47.0.", &made);
    let lib = artifacts().lib4();
    let lib = lib.to_str().unwrap();
    let csv = dir.join("override.csv");
    let out = export(&dir, lib, "gemm-tune", &["--out", csv.to_str().unwrap()])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("rocBLAS 2.47.0 (ROCm 5.5)")
            && err.contains("does not read ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH")
            && err.contains("3.1 (ROCm 5.7)")
            && err.contains("LD_PRELOAD"),
        "{err}"
    );
    assert!(!csv.exists(), "no file that would be ignored");
    let sh = dir.join("check.sh");
    ok(
        &export(&dir, lib, "bench", &["--out", sh.to_str().unwrap()])
            .output()
            .unwrap(),
    );

    // A build that reads the file gets a comment saying so.
    let dir = scratch("export-gemm-tune-4.4");
    store4(&dir, "4.4.1.", &made);
    let out = ok(&export(&dir, lib, "gemm-tune", &[]).output().unwrap());
    assert_has(&out, "# rocBLAS 4.4.1 reads that variable");
}

#[test]
fn rocblas5_ids_become_tensile_indices_and_others_are_named() {
    let dir = scratch("export-gemm-tune-v5");
    let mut made = profile_rows(&artifacts().host5);
    // One Tensile solution (<= -11) and rocBLAS's source kernel (-2), which has no index.
    let tensile = non_heuristic_solutions(&artifacts().host5, TUNED)
        .into_iter()
        .find(|&s| s <= -11)
        .expect("refblas v5 offers Tensile-style ids");
    made.specs[0].1 = format!("Gemm_Rocblas_{tensile}");
    assert!(solutions(&artifacts().host5, EXTENSION).contains(&-2));
    made.specs[2].1 = "Gemm_Rocblas_-2".to_string();
    make_store(
        &dir,
        &artifacts().libdir5,
        "librocblas.so.5",
        "5.6.0.c83a10d4",
        &made,
    );
    let csv = dir.join("o.csv");
    let lib = artifacts().lib5();
    let out = export(
        &dir,
        lib.to_str().unwrap(),
        "gemm-tune",
        &["--out", csv.to_str().unwrap(), "--json"],
    )
    .output()
    .unwrap();
    let report: Value = serde_json::from_str(&ok(&out)).unwrap();
    let parsed = gemm_tune::parse(&std::fs::read_to_string(&csv).unwrap());
    assert!(
        parsed.entries.iter().any(|e| e.key == spec_key(TUNED)),
        "{report}"
    );
    let dropped = report["dropped"].to_string();
    assert!(dropped.contains("source kernel"), "{report}");
    for (spec, sol) in &made.specs {
        let Some(id) = solution_id(sol) else { continue };
        let entry = parsed.entries.iter().find(|e| e.key == spec_key(spec));
        match gemm_tune::override_index(id, Some(5)) {
            Ok(index) => {
                assert!(id <= -11, "{id}");
                assert_eq!(entry.unwrap().solution, Some(index));
                assert_eq!(gemm_tune::solution_id(index, Some(5)), Some(id));
            }
            Err(_) => {
                assert!(entry.is_none());
                let dropped = report["dropped"].as_array().unwrap();
                assert!(
                    dropped
                        .iter()
                        .any(|d| d.as_str().unwrap().starts_with(&key_text(&spec_key(spec)))),
                    "{report}"
                );
            }
        }
    }
}

#[test]
fn tunableop_export_is_what_pytorch_accepts_or_a_clear_refusal() {
    let dir = scratch("export-tunableop");
    let made = profile_rows(&artifacts().host4);
    let rank1_sol = made.specs[0].1.clone();
    store4(&dir, "4.4.0.5f2e9c71", &made);
    let lib = artifacts().lib4();
    let lib = lib.to_str().unwrap();
    // A file PyTorch wrote on the target (from the vllm-rdna fixtures): its validators.
    let pytorch_file =
        repo().join("tests/fixtures/vllm-rdna/rocblas-c27e2252cc7a/tunableop_results0.csv");
    let pytorch_file = pytorch_file.to_str().unwrap();

    // Our own validators are not PyTorch's set: refused, saying what is missing.
    let out = export(&dir, lib, "tunableop", &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("PT_VERSION")
            && err.contains("HIP_VERSION")
            && err.contains("--validators-from"),
        "{err}"
    );
    // That PyTorch used another rocBLAS: the ids would be wrong there.
    let out = export(&dir, lib, "tunableop", &["--validators-from", pytorch_file])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("5.6.0.8d1ae90e") && text(&out.stderr).contains("--force"),
        "{}",
        text(&out.stderr)
    );

    // A file naming the version twice (this build's, then another) is no file PyTorch
    // wrote: refused, not checked by one value and read by PyTorch by the other.
    let twice = dir.join("twice.csv");
    std::fs::write(
        &twice,
        "Validator,ROCBLAS_VERSION,4.4.0.5f2e9c71\nValidator,ROCBLAS_VERSION,9.9.9\n",
    )
    .unwrap();
    let out = export(
        &dir,
        lib,
        "tunableop",
        &["--validators-from", twice.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_has(
        &text(&out.stderr),
        "names validator ROCBLAS_VERSION twice (4.4.0.5f2e9c71 and 9.9.9)",
    );

    // The same PyTorch with this build's rocBLAS: accepted, one file per rank.
    let accepted_export = |extra: &[&str]| {
        let mut rest = vec![
            "--validators-from",
            pytorch_file,
            "--validator",
            "ROCBLAS_VERSION=4.4.0.5f2e9c71",
        ];
        rest.extend(extra);
        export(&dir, lib, "tunableop", &rest).output().unwrap()
    };
    let outdir = dir.join("pytorch");
    ok(&accepted_export(&["--out", outdir.to_str().unwrap()]));
    let mut registered: BTreeMap<String, String> = tunableop::read(Path::new(pytorch_file))
        .unwrap()
        .validators
        .into_iter()
        .collect();
    registered.insert("ROCBLAS_VERSION".into(), "4.4.0.5f2e9c71".into());
    for rank in 0..2 {
        let body =
            std::fs::read_to_string(outdir.join(format!("tunableop_results{rank}.csv"))).unwrap();
        let results = pytorch_reads(&body, &registered)
            .unwrap_or_else(|| panic!("PyTorch would discard:\n{body}"));
        let want: BTreeMap<(String, String), String> = made
            .specs
            .iter()
            .filter(|(spec, _)| *spec != EXTENSION)
            .map(|(spec, sol)| {
                let (op, sig) = tunableop::op_and_signature(&spec_key(spec));
                let sol = if rank == 1 && *spec == TUNED {
                    "Default".to_string()
                } else {
                    sol.clone()
                };
                ((op, sig), sol)
            })
            .collect();
        assert_eq!(results, want, "rank {rank}");
        assert!(!body.contains(tunableop::EXT_OP_PREFIX));
    }
    assert_ne!(rank1_sol, "Default");

    // The folder now holds results files (PyTorch's own, say): a second export there
    // replaces nothing unless asked, and names the file.
    let before = std::fs::read(outdir.join("tunableop_results0.csv")).unwrap();
    std::fs::write(outdir.join("tunableop_results0.csv"), "PyTorch's rows\n").unwrap();
    let out = accepted_export(&["--out", outdir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_has(&text(&out.stderr), "tunableop_results0.csv exists");
    assert_has(&text(&out.stderr), "--overwrite");
    let kept = std::fs::read_to_string(outdir.join("tunableop_results0.csv")).unwrap();
    assert_eq!(kept, "PyTorch's rows\n");
    ok(&accepted_export(&[
        "--out",
        outdir.to_str().unwrap(),
        "--overwrite",
    ]));
    assert_eq!(
        std::fs::read(outdir.join("tunableop_results0.csv")).unwrap(),
        before
    );

    // One rank to one file: the count said is that file's rows, not every rank's.
    let one = dir.join("rank0.csv");
    let out = accepted_export(&["--out", one.to_str().unwrap()]);
    ok(&out);
    let rows = std::fs::read_to_string(&one)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("Validator,") && !l.is_empty())
        .count();
    assert!(rows > 0);
    assert!(
        text(&out.stderr).contains(&format!("exported {rows} rows of profile")),
        "{rows} rows written: {}",
        text(&out.stderr)
    );

    // PyTorch 2.6 names problems without leading dimensions.
    let out = ok(&accepted_export(&["--validator", "PT_VERSION=2.6.0"]));
    let k = spec_key(TUNED);
    assert_has(
        &out,
        &format!(
            "GemmTunableOp_Half_TN,tn_{}_{}_{},{}",
            k.m, k.n, k.k, made.specs[0].1
        ),
    );
    assert!(!out.contains("_ld_"), "{out}");
}

/// Headless Chromium, if this machine has it (`.ci/run` installs Debian's `chromium`).
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
        .find(|p| p.is_file())
}

/// Runs `cmd`, killing it after `secs` (a browser that hangs must not hang the suite).
fn output_within(mut cmd: Command, secs: u64) -> Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed().as_secs() > secs {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

/// Decodes the PNG `tunedblas report` writes with the `png` crate's decoder, which checks
/// every CRC and the zlib checksum: RGB pixels.
fn png_pixels(png: &[u8]) -> (usize, usize, Vec<u8>) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(png))
        .read_info()
        .expect("a valid PNG header");
    let mut pixels = vec![0; reader.output_buffer_size().expect("a sane size")];
    let info = reader.next_frame(&mut pixels).expect("a valid PNG image");
    assert_eq!(
        (info.color_type, info.bit_depth),
        (png::ColorType::Rgb, png::BitDepth::Eight)
    );
    pixels.truncate(info.buffer_size());
    (info.width as usize, info.height as usize, pixels)
}

#[test]
fn the_report_renders_in_chromium_and_its_figures_match_the_profile() {
    let dir = scratch("report");
    let store = dir.join("profiles");
    let lib = artifacts().lib4();
    // A real campaign, so provenance holds measurements: two layers, three token counts
    // for one and one for the other.
    let args = ["--profiles", store.to_str().unwrap(), "--arch", "gfx1030"];
    let mut cmd = lib_cmd(&dir, "tune", &lib, &args);
    for s in [
        "f16:TN:64:8:40",
        "f16:TN:64:16:40",
        "f16:TN:64:24:40",
        "f16:TN:96:16:32",
    ] {
        cmd.args(["--shape", s]);
    }
    cmd.args(["--trials", "3", "--max-trials", "3", "--rotate-mib", "1"])
        .env("NO_COLOR", "1");
    ok(&cmd.output().unwrap());
    let rows: Vec<(String, String)> = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .flat_map(|p| {
            std::fs::read_to_string(p.join("tunableop_results0.csv"))
                .unwrap()
                .lines()
                .filter(|l| !l.starts_with("Validator"))
                .map(|l| {
                    let f: Vec<&str> = l.split(',').collect();
                    (f[1].to_string(), f[2].to_string())
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let tuned = rows
        .iter()
        .filter(|r| r.1.starts_with("Gemm_Rocblas_"))
        .count();
    let default = rows.iter().filter(|r| r.1 == "Default").count();
    // The four shapes as an untuned file, given as recorded misses: whatever rows the
    // campaign wrote, the map has the 64-wide layer at three token counts (8, 16, 24) and
    // the 96-wide one at 16 only (it was never seen at 8 or 24); the cells without a row
    // are near or missed.
    let shapes = dir.join("shapes.csv");
    let lines: String = [(64, 8, 40), (64, 16, 40), (64, 24, 40), (96, 16, 32)]
        .iter()
        .map(|&(n, m, k)| format!("{}\n", key_text(&spec_key(&format!("ex:TN:h:{n}:{m}:{k}")))))
        .collect();
    std::fs::write(&shapes, lines).unwrap();
    let gaps = 4 - tuned - default;

    let html = dir.join("out/report.html");
    let png = dir.join("out/report.png");
    let out = ok(&lib_cmd(
        &dir,
        "report",
        &lib,
        &[
            "--profiles",
            store.to_str().unwrap(),
            "--out",
            html.to_str().unwrap(),
            "--png",
            png.to_str().unwrap(),
            "--misses",
            shapes.to_str().unwrap(),
            "--json",
        ],
    )
    .env("NO_COLOR", "1")
    .env("TUNEDBLAS_NEAR", "32")
    .output()
    .unwrap());
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        j["report"]["columns"],
        serde_json::json!([8, 16, 24]),
        "{j}"
    );
    assert_eq!(j["report"]["rows"].as_array().unwrap().len(), 2, "{j}");
    let counts = &j["report"]["counts"];
    assert_eq!(
        counts["never_seen"].as_u64(),
        Some(2),
        "96 at 8 and 24: {j}"
    );
    assert_eq!(
        (counts["tuned"].as_u64(), counts["default"].as_u64()),
        (Some(tuned as u64), Some(default as u64)),
        "{j}"
    );
    let (near, missed) = (
        counts["near"].as_u64().unwrap(),
        counts["missed"].as_u64().unwrap(),
    );
    assert_eq!(near + missed, gaps as u64, "{j}");
    // A layer without rows has nothing near; every cell was seen as a miss.
    for row in j["report"]["rows"].as_array().unwrap() {
        let cells = row["cells"].as_array().unwrap();
        let st: Vec<&str> = cells
            .iter()
            .map(|c| c["status"].as_str().unwrap())
            .collect();
        let has_row = st.iter().any(|s| *s == "tuned" || *s == "default");
        assert!(has_row || !st.contains(&"near"), "{row}");
        assert!(cells.iter().all(|c| c["missed"] == true), "{row}");
    }
    let bars = j["report"]["bars"].as_array().unwrap();
    assert_eq!(
        bars.len(),
        tuned,
        "every adopted row was measured by the campaign: {j}"
    );
    for b in bars {
        let (h, s) = (
            b["heuristic_ms"].as_f64().unwrap(),
            b["served_ms"].as_f64().unwrap(),
        );
        assert!((b["speedup"].as_f64().unwrap() - h / s).abs() < 1e-9);
    }
    let page = std::fs::read_to_string(&html).unwrap();
    for remote in ["src=", "href=", "url(", "@import"] {
        assert!(!page.contains(remote), "the page loads nothing: {remote}");
    }

    // The PNG: one interior per cell in the cell's colour, and one legend swatch per status.
    let bytes = std::fs::read(&png).unwrap();
    let (w, h, px) = png_pixels(&bytes);
    // Stored compressed: a chart of flat cells is a small file, not width x height x 3.
    assert!(
        bytes.len() < 200 * 1024 && bytes.len() * 10 < w * h * 3,
        "{} bytes for {w}x{h}",
        bytes.len()
    );
    let cell = &j["png_cell"];
    let area = (cell[0].as_u64().unwrap() as usize - 2) * (cell[1].as_u64().unwrap() as usize - 2);
    let count = |rgb: [u8; 3]| px.chunks(3).filter(|p| *p == rgb).count();
    assert_eq!(
        count([46, 157, 74]),
        (tuned + 1) * area,
        "tuned cells in the PNG"
    );
    assert_eq!(
        count([154, 163, 173]),
        (default + 1) * area,
        "Default cells in the PNG"
    );
    assert!(
        !page.contains("<pre id=\"rendered\">"),
        "no visible test hook"
    );

    // The page in a real browser: its script counts what was laid out into an attribute.
    let Some(browser) = chromium() else {
        println!("SKIPPED the Chromium half of this test: no chromium on PATH (.ci/run installs Debian's chromium; apt-get install chromium)");
        return;
    };
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
    ])
    .arg(format!(
        "--user-data-dir={}",
        dir.join("chromium").display()
    ))
    .arg("--dump-dom")
    .arg(format!("file://{}", html.display()))
    .env("HOME", &dir);
    let out = output_within(cmd, 120);
    let dom = text(&out.stdout);
    let rendered = dom
        .split("data-rendered=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| {
            panic!(
                "no rendered figures in the DOM:\n{dom}\n{}",
                text(&out.stderr)
            )
        })
        .replace("&quot;", "\"");
    let r: Value = serde_json::from_str(&rendered).unwrap_or_else(|e| panic!("{e}: {rendered}"));
    assert_eq!(r["tuned"].as_u64(), Some(tuned as u64), "{r}");
    assert_eq!(r["default"].as_u64(), Some(default as u64), "{r}");
    assert_eq!(r["near"].as_u64(), Some(near), "{r}");
    assert_eq!(r["missed"].as_u64(), Some(missed), "{r}");
    assert_eq!(r["never"].as_u64(), Some(2), "{r}");
    assert_eq!(r["bars"].as_u64(), Some(tuned as u64), "{r}");
    assert!(
        r["mapWidth"].as_u64().unwrap() > 200 && r["mapHeight"].as_u64().unwrap() > 60,
        "laid out: {r}"
    );
}

#[test]
fn the_installed_interposer_finds_the_installed_profiles_without_settings() {
    let dir = scratch("install");
    let prefix = dir.join("prefix");
    let out = Command::new("bash")
        .arg(repo().join("scripts/install"))
        .args([
            "--prefix",
            prefix.to_str().unwrap(),
            "--from",
            target_dir().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    ok(&out);
    let bin = prefix.join("bin/tunedblas");
    let preload = prefix.join("lib/libtunedblas.so");
    let store = prefix.join("share/tunedblas/profiles");
    assert!(bin.is_file() && preload.is_file() && store.join("profiles.json").is_file());
    assert!(prefix.join("share/doc/tunedblas/README.md").is_file());
    // Every relative link of the installed README leads to an installed file.
    let doc = prefix.join("share/doc/tunedblas");
    let readme = std::fs::read_to_string(doc.join("README.md")).unwrap();
    let links: Vec<&str> = readme
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|l| !l.contains("://") && !l.starts_with('#') && l.ends_with(".md"))
        .collect();
    assert!(!links.is_empty());
    for l in links {
        assert!(
            doc.join(l).is_file(),
            "the installed README links {l}, not installed"
        );
    }

    // Nothing says where the profiles are: each finds the installed store by itself.
    let bare = |cmd: &mut Command| {
        host_env(cmd, &dir, false);
        cmd.env_remove("TUNEDBLAS_PROFILE_DIR")
            .env_remove("REFBLAS_TRACE")
            .env("NO_COLOR", "1");
    };
    let lib = artifacts().lib4();
    let lib = lib.to_str().unwrap();
    let mut tune = Command::new(&bin);
    tune.args([
        "tune",
        "--lib",
        lib,
        "--arch",
        "gfx1030",
        "--shape",
        "f16:TN:64:24:40",
    ])
    .args(["--trials", "3", "--max-trials", "3", "--rotate-mib", "1"]);
    bare(&mut tune);
    let out = ok(&tune.output().unwrap());
    assert!(
        store
            .join("rocblas-4.4.0.5f2e9c71/tunableop_results0.csv")
            .is_file(),
        "tuned into the installed store:\n{out}"
    );
    // A campaign may find the shape undecidable and write no row; the serving half of this
    // test needs one, so the heuristic's row stands in then.
    let folder = store.join("rocblas-4.4.0.5f2e9c71");
    for f in std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().path())
    {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("tunableop_results") && name.ends_with(".csv") {
            let body = std::fs::read_to_string(&f).unwrap();
            if !body.contains(&miss_line("ex:TN:h:64:24:40")) {
                std::fs::write(
                    &f,
                    format!("{body}{}\n", row("ex:TN:h:64:24:40", "Default")),
                )
                .unwrap();
            }
        }
    }

    let mut env = Command::new(&bin);
    env.args(["env", "--json", "--lib", lib]);
    bare(&mut env);
    let j: Value = serde_json::from_str(&ok(&env.output().unwrap())).unwrap();
    assert!(j["libraries"][0]["profile"].is_string(), "{j}");
    assert_eq!(
        j["preload"].as_str(),
        Some(std::fs::canonicalize(&preload).unwrap().to_str().unwrap()),
        "{j}"
    );
    let miss = j["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "TUNEDBLAS_MISS_DIR")
        .unwrap();
    assert_eq!(miss["source"], "environment", "{j}");
    assert!(j["snippets"]["vllm"]
        .as_str()
        .unwrap()
        .contains(preload.file_name().unwrap().to_str().unwrap()));

    // The installed verify finds the installed interposer (../lib) and every row is hit.
    let mut verify = Command::new(&bin);
    verify.args(["verify", "--lib", lib]);
    bare(&mut verify);
    ok(&verify.output().unwrap());

    // A host under the installed preload, with no TUNEDBLAS_PROFILE_DIR: served, no miss.
    let stats = dir.join("stats.json");
    let mut host = Command::new(&artifacts().host4);
    host.arg("ex:TN:h:64:24:40");
    bare(&mut host);
    host.env("LD_PRELOAD", &preload)
        .env("TUNEDBLAS_STATS", &stats);
    let out = host.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_has(&text(&out.stderr), "auto-selected");
    let s: Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert_eq!(s["missed_calls"], 0, "{s}");
    assert_eq!(s["rows"], 1, "{s}");
    assert_eq!(s["rows_hit"], 1, "{s}");

    // The installed demo finds its CPU rocBLAS (lib/tunedblas/, off the loader's path) and
    // starts its workload; it is stopped there (the whole loop is the README's demo).
    assert!(prefix.join("lib/tunedblas/librocblas_v5.so").is_file());
    let mut demo = Command::new(&bin)
        .args(["demo", "--passes", "1", "--dir"])
        .arg(dir.join("demo"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(demo.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    let _ = demo.kill();
    let out = demo.wait_with_output().unwrap();
    assert!(
        first.starts_with("tunedblas demo in "),
        "{first}{}",
        text(&out.stderr)
    );
}

/// The harness runs each shape with its own flags: ROCBLAS_INTERNAL_FP16_ALT_IMPL, which
/// rocBLAS would apply to every call it times, is dropped, and the commands that run GEMMs
/// say so (shapes recorded under the variable carry fp16_alt_impl in their keys already).
#[test]
fn the_harness_drops_rocblas_internal_fp16_alt_impl() {
    let dir = scratch("fp16-alt-impl-harness");
    let lib = artifacts().lib4();
    let out = harness(&dir, &["verify", "--lib", lib.to_str().unwrap()])
        .env("ROCBLAS_INTERNAL_FP16_ALT_IMPL", "1")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_has(
        &err,
        "ROCBLAS_INTERNAL_FP16_ALT_IMPL=1 is ignored here: each shape runs with its own flags",
    );
}
