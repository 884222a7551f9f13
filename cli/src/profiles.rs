//! Profile management: `profiles list|show|which|import|adopt`, `qualify` and `merge`, all over
//! the [`Store`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{json, Value};
use tunedblas_core::identity;
use tunedblas_core::key::ProblemKey;
use tunedblas_core::profile::{self, Request, Selection};
use tunedblas_core::registry::{Match, Provenance};
use tunedblas_core::tunableop::{self, ResultsFile, Row, Solution};

use crate::commands::print_json;
use crate::error::{Error, Result};
use crate::store::{self, Folder, Store, IMPORTED_FILE};
use tunedblas_core::abi::{FLAG_CHECK_SOLUTION_INDEX, STATUS_SUCCESS};
use tunedblas_tuner::backends::rocblas::{Rocblas, RocblasProblem};
use tunedblas_tuner::backends::{Library, ShapeKey as _};

pub fn list(root: &Path, json: bool) -> Result<()> {
    let store = Store::existing(root)?;
    let reg = store.registry()?;
    let rows: Vec<Value> = reg
        .entries()
        .map(|(name, e)| {
            json!({
                "name": name,
                "build": e.lib_sha256,
                "rocblas": e.rocblas,
                "arch": e.arch,
                "rows_per_rank": e.rows_per_rank,
                "status": e.status,
                "dir": e.path_in(root),
            })
        })
        .collect();
    if json {
        print_json(&rows);
        return Ok(());
    }
    println!("profiles in {}:", store.registry_path().display());
    if rows.is_empty() {
        println!("  (none yet: `tunedblas tune` writes the first)");
    }
    println!(
        "  {:<28} {:<13} {:<18} {:<12} {:>6}  status",
        "name", "build", "rocblas", "arch", "rows"
    );
    for (name, e) in reg.entries() {
        println!(
            "  {:<28} {:<13} {:<18} {:<12} {:>6}  {}",
            name,
            &e.lib_sha256[..e.lib_sha256.len().min(12)],
            e.rocblas.as_deref().unwrap_or("-"),
            e.arch.as_deref().unwrap_or("-"),
            e.rows_per_rank.map_or("-".into(), |r| r.to_string()),
            e.status.as_deref().unwrap_or("")
        );
    }
    for err in reg.errors() {
        println!("  skipped: {}: {}", err.name, err.reason);
    }
    Ok(())
}

pub fn show(root: &Path, name: &str, json: bool) -> Result<()> {
    let store = Store::existing(root)?;
    let reg = store.registry()?;
    let entry = reg.get(name).ok_or_else(|| {
        Error::failed(format!(
            "no profile '{name}' in {}; `tunedblas profiles list` shows the names",
            store.registry_path().display()
        ))
    })?;
    let dir = entry.path_in(root);
    // A hipBLASLt or cuBLASLt profile's rows are read as that library's interposer reads
    // them: by rocBLAS's reader every one of them was "another backend's".
    let library = entry.library().unwrap_or("rocblas");
    let (rows, distinct, unservable, problems) = if library == "rocblas" {
        let loaded = profile::load_tables(&dir);
        let unservable = unservable_by_reason(&dir);
        (loaded.rows, loaded.distinct, unservable, loaded.problems)
    } else {
        lt_rows(&dir)
    };
    let prov = Provenance::load(&dir.join("provenance.json")).ok();
    let campaigns: Vec<Value> = prov
        .as_ref()
        .map(|p| {
            p.campaigns()
                .iter()
                .map(|c| {
                    json!({
                        "kind": c.get("kind"),
                        "finished": c.get("finished"),
                        "counts": c.get("counts"),
                        "sources": c.get("sources"),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let report = json!({
        "name": name,
        "library": library,
        "entry": entry,
        "dir": dir,
        "ranks": rows.len(),
        "rows": rows,
        "unservable": unservable.iter().map(|(rank, reason, n)| json!({"rank": rank, "reason": reason, "rows": n})).collect::<Vec<_>>(),
        "problems": problems,
        "campaigns": campaigns,
    });
    if json {
        print_json(&report);
        return Ok(());
    }
    println!("profile '{name}' in {}", dir.display());
    println!("  build      {}", entry.lib_sha256);
    match library {
        "rocblas" => println!("  rocBLAS    {}", entry.rocblas.as_deref().unwrap_or("-")),
        lt => println!(
            "  library    {lt} {}",
            entry
                .extra
                .get(&format!("{lt}_version"))
                .and_then(Value::as_str)
                .unwrap_or("-")
        ),
    }
    println!("  arch       {}", entry.arch.as_deref().unwrap_or("-"));
    println!(
        "  rank files {} ({} distinct), rows per rank: {}",
        rows.len(),
        distinct,
        rows.iter()
            .map(|(rank, n)| format!("rank {rank}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (rank, reason, n) in &unservable {
        println!("  unservable rank {rank}: {n} rows: {reason}");
    }
    for p in &problems {
        println!("  problem    {p}");
    }
    for c in &campaigns {
        // A merge's record has no counts (its rows came from the shards' campaigns).
        let counts = match &c["counts"] {
            Value::Null => String::new(),
            counts => format!(" {counts}"),
        };
        println!(
            "  campaign   {} {}{counts}",
            c["kind"].as_str().unwrap_or("?"),
            c["finished"].as_str().unwrap_or("?"),
        );
    }
    Ok(())
}

/// Rank rows, unservable rows by reason and problems of a profile.
type Shown = (
    Vec<(usize, usize)>,
    usize,
    Vec<(usize, String, usize)>,
    Vec<String>,
);

/// [`Shown`] of a hipBLASLt or cuBLASLt profile, read by the Lt libraries' one reader:
/// (rank, rows) with `*` rows counted, distinct rank files, lines it skipped by reason.
fn lt_rows(dir: &Path) -> Shown {
    let (mut rows, mut texts, mut unservable, mut problems) = (vec![], vec![], vec![], vec![]);
    for (rank, path) in profile::rank_files(dir).unwrap_or_default() {
        let text = match crate::export::read_text(&path) {
            Ok(t) => t,
            Err(e) => {
                problems.push(e.message);
                continue;
            }
        };
        let r = tunedblas_core::cublaslt::parse_results(&text);
        rows.push((rank, r.rows.len() + r.wildcards.len()));
        let counts = tally(r.skipped.into_iter().map(|(_, why)| why));
        unservable.extend(counts.into_iter().map(|(k, n)| (rank, k, n)));
        if !texts.contains(&text) {
            texts.push(text);
        }
    }
    (rows, texts.len(), unservable, problems)
}

/// Each distinct reason and how often it came, in the order first seen.
fn tally(reasons: impl Iterator<Item = String>) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for why in reasons {
        match counts.iter_mut().find(|(k, _)| *k == why) {
            Some((_, n)) => *n += 1,
            None => counts.push((why, 1)),
        }
    }
    counts
}

/// The rows of each rank file the interposer reads but cannot serve, counted by reason:
/// (rank, reason, rows), in rank order.
fn unservable_by_reason(dir: &Path) -> Vec<(usize, String, usize)> {
    let mut out = Vec::new();
    for (rank, path) in profile::rank_files(dir).unwrap_or_default() {
        let Ok(file) = tunableop::read(&path) else {
            continue;
        };
        let counts = tally(file.unservable.iter().map(|u| u.kind().to_string()));
        out.extend(counts.into_iter().map(|(k, n)| (rank, k, n)));
    }
    out
}

/// The `GCN_ARCH_NAME` of each rank file of a profile folder, checked against `device`:
/// (file, check).
fn arch_checks(dir: &Path, device: &crate::env::Device) -> Vec<(PathBuf, crate::env::ArchCheck)> {
    profile::rank_files(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|(_, f)| {
            let arch = tunableop::read(&f)
                .ok()
                .and_then(|r| r.validator("GCN_ARCH_NAME").map(str::to_string));
            let check = crate::env::check_arch(arch.as_deref(), device);
            (f, check)
        })
        .collect()
}

/// The profile a process loading `lib` (a `kind` build: `rocBLAS`, `hipBLASLt`, `cuBLASLt`)
/// whose sha256 is `sha` would get, chosen as the interposer chooses, with the same
/// environment (`TUNEDBLAS_PROFILE`, `TUNEDBLAS_ALLOW_MISMATCH`, read by its rules): a
/// `TUNEDBLAS_PROFILE` path is checked against rocBLAS's version string; the Lt backends
/// select by name and build alone. `profiles which` and `env` say it.
pub fn selection(root: &Path, lib: &Path, kind: &str, sha: &str) -> Result<Selection> {
    let var = crate::env::var;
    let explicit = var("TUNEDBLAS_PROFILE");
    let allow_mismatch = tunedblas_core::settings::switch(
        "TUNEDBLAS_ALLOW_MISMATCH",
        var("TUNEDBLAS_ALLOW_MISMATCH").as_deref(),
    )
    .0;
    let path = explicit
        .as_deref()
        .filter(|e| kind == "rocBLAS" && profile::names_a_path(e));
    let sel = match path {
        // A path is checked against the library's version string, as the interposer does.
        Some(path) => {
            let version = Rocblas::at(lib, None)?.version().to_string();
            profile::select_path(
                Path::new(path),
                Some(version.as_str()).filter(|v| *v != "unknown"),
                allow_mismatch,
            )
        }
        None => profile::select(&Request {
            profile_dir: root,
            sha256: sha,
            explicit: explicit.as_deref(),
            allow_mismatch,
        }),
    };
    // The selection words its reasons for rocBLAS; the Lt backends' lines say their own name.
    let words = |s: String| match kind {
        "hipBLASLt" | "cuBLASLt" => s.replace("rocBLAS", kind),
        _ => s,
    };
    Ok(match sel {
        Selection::Chosen { name, dir, reason } => Selection::Chosen {
            name,
            dir,
            reason: words(reason),
        },
        Selection::None { why } => Selection::None { why: words(why) },
    })
}

/// `profiles which`: the profile [`selection`] picks for `lib`, and whether its files were
/// tuned on the device's architecture (the interposer does not check that yet: PyTorch
/// drops such a file).
pub fn which(
    root: &Path,
    lib: &Path,
    kind: &str,
    device: &crate::env::Device,
    json: bool,
) -> Result<()> {
    let sha = identity::sha256_file(lib)
        .map_err(|e| Error::failed(format!("cannot hash {}: {e}", lib.display())))?;
    let sel = selection(root, lib, kind, &sha)?;
    let archs = match &sel {
        Selection::Chosen { dir, .. } => arch_checks(dir, device),
        Selection::None { .. } => Vec::new(),
    };
    let report = match &sel {
        Selection::Chosen { name, dir, reason } => {
            json!({"library": lib, "sha256": sha, "profile": name, "dir": dir, "reason": reason,
                "device": device, "arch": archs.iter().map(|(f, c)| json!({"file": f, "check": c})).collect::<Vec<_>>()})
        }
        Selection::None { why } => {
            json!({"library": lib, "sha256": sha, "profile": null, "reason": why})
        }
    };
    if json {
        print_json(&report);
    } else {
        println!("{} (build {})", lib.display(), &sha[..12]);
        match sel {
            Selection::Chosen { name, dir, reason } => {
                println!("  -> profile '{name}' in {}: {reason}", dir.display())
            }
            Selection::None { why } => println!("  -> no profile: {why}"),
        }
        for (f, c) in &archs {
            use crate::env::ArchCheck;
            match c {
                ArchCheck::Same(t) | ArchCheck::Unchecked(t) => println!("  {}: {t}", f.display()),
                ArchCheck::Other(t) => println!(
                    "  {}: WRONG ARCHITECTURE: {t}; the interposer serves it all the same today (it does not read the device's architecture)",
                    f.display()
                ),
            }
        }
    }
    Ok(())
}

/// What one results file gives `profiles import`: the shapes it names (every row that names
/// a rocBLAS problem, whatever solved it: ids are never reused across builds), where some
/// of them came from, and the lines it gives nothing for, counted by reason.
#[derive(Debug, Default)]
pub struct FileShapes {
    pub shapes: Vec<ProblemKey>,
    /// Shapes taken from `Gemm_Hipblaslt_*` (or other backends') rows.
    pub from_other_backends: usize,
    /// Shapes taken from tf32 rows (as f32 GEMMs).
    pub from_tf32: usize,
    /// (reason, lines) of the lines that give no shape.
    pub skipped: Vec<(String, usize)>,
}

impl FileShapes {
    fn skip(&mut self, reason: &str, n: usize) {
        if n == 0 {
            return;
        }
        match self.skipped.iter_mut().find(|(r, _)| r == reason) {
            Some((_, count)) => *count += n,
            None => self.skipped.push((reason.to_string(), n)),
        }
    }
}

/// The shapes a results file names, for `profiles import` (see [`FileShapes`]).
pub fn file_shapes(r: &ResultsFile) -> FileShapes {
    let mut out = FileShapes::default();
    out.shapes.extend(r.rows.iter().map(|row| row.key));
    for u in &r.unservable {
        match tunableop::shape_key(&u.op_name, &u.signature) {
            Ok(k) => {
                if u.op_name.contains("_tf32_") {
                    out.from_tf32 += 1;
                } else {
                    out.from_other_backends += 1;
                }
                out.shapes.push(k);
            }
            Err(_) => out.skip(u.kind(), 1),
        }
    }
    out.skip("a `*` row names no concrete shape", r.wildcards.len());
    out.skip(
        "a later row for a shape an earlier row named",
        r.duplicates.len(),
    );
    out.skip(
        "unreadable line (`tunedblas tune` on the file lists each)",
        r.malformed_lines(),
    );
    out
}

/// Adds the shapes of other builds' results files to this build's shape list.
pub fn import(root: &Path, lib_path: &Path, files: &[PathBuf], json: bool) -> Result<()> {
    let lib = Rocblas::at(lib_path, None)?;
    let build = lib.build().clone();
    let store = Store::open(root)?;
    let mut read = Vec::new();
    for f in files {
        let r = crate::export::read(f)?;
        let shapes = file_shapes(&r);
        read.push((f, r, shapes));
    }
    // Lines skipped, by reason, over every file.
    let mut skipped = FileShapes::default();
    for (_, _, s) in &read {
        for (reason, n) in &s.skipped {
            skipped.skip(reason, *n);
        }
    }
    // Under the store's lock, onto the list as it is now: imports run at once all count.
    let (folder, known, sources, added, already) = store.transaction(|tx| {
        let folder = tx.folder_for(&build, None)?;
        let mut known = tx.imported(&folder)?;
        let mut sources = Vec::new();
        let (mut added, mut already) = (0, 0);
        for (f, r, shapes) in &read {
            let mut n = 0;
            for key in &shapes.shapes {
                let line = key.text();
                if !known.contains(&line) {
                    known.push(line);
                    n += 1;
                } else {
                    already += 1;
                }
            }
            added += n;
            sources.push(json!({
                "file": f.display().to_string(),
                "rocblas": r.validator("ROCBLAS_VERSION"),
                "rows": r.rows.len() + r.unservable.len(),
                "shapes": shapes.shapes.len(),
                "from_hipblaslt_rows": shapes.from_other_backends,
                "from_tf32_rows": shapes.from_tf32,
                "new_shapes": n,
                "skipped": shapes.skipped.iter().map(|(r, n)| json!({"reason": r, "lines": n})).collect::<Vec<_>>(),
                "ids": "not reused",
            }));
        }
        tx.set_imported(&folder, known.clone());
        if folder.existed {
            tx.record(
                &folder,
                &build,
                json!({"kind": "import", "finished": store::utc_now(), "sources": sources}),
            )?;
        }
        Ok((folder, known, sources, added, already))
    })?;
    let list = folder.dir.join(IMPORTED_FILE);
    if json {
        print_json(
            &json!({"profile": folder.name, "added": added, "already_waiting": already, "shapes": known.len(), "sources": sources}),
        );
    } else {
        println!(
            "{added} new shapes imported (ids not reused) into {}; {} waiting. Tune them with: tunedblas tune --lib {} --retune",
            list.display(),
            known.len(),
            lib_path.display()
        );
        let (lt, tf32): (usize, usize) = read
            .iter()
            .map(|(_, _, s)| (s.from_other_backends, s.from_tf32))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        if lt > 0 {
            println!("  {lt} shapes taken from hipBLASLt-tuned rows (the shape, not the solution)");
        }
        if tf32 > 0 {
            println!("  {tf32} shapes taken from tf32 rows, as f32 GEMMs");
        }
        if already > 0 {
            println!("  {already} shapes were already waiting");
        }
        for (reason, n) in &skipped.skipped {
            println!("  {n} rows skipped: {reason}");
        }
    }
    Ok(())
}

/// `profiles adopt`: a results file PyTorch wrote on this machine becomes (part of) the
/// profile of the build at `lib_path`. The file's `ROCBLAS_VERSION` validator must name
/// this build's version; each `Gemm_Rocblas_<id>` row is kept only if rocBLAS accepts the
/// id for its problem (`check_solution_index`, nothing run), else it is listed and its shape
/// waits for `tune --retune` like the shapes of rows only hipBLASLt can serve; `Default`
/// rows are kept. A shape the profile already has a row for keeps that row.
///
/// Its `GCN_ARCH_NAME` must name the device's architecture (`device`: `--arch`, else this
/// machine's GPUs, where any is visible): PyTorch drops a file tuned on another one, and
/// its ids name that architecture's kernels; `force` adopts it anyway.
pub fn adopt(
    root: &Path,
    lib_path: &Path,
    file: &Path,
    device: &crate::env::Device,
    force: bool,
    json: bool,
) -> Result<()> {
    let lib = Rocblas::at(lib_path, None)?;
    let r = crate::export::read(file)?;
    let arch = crate::env::check_arch(r.validator("GCN_ARCH_NAME"), device);
    if let crate::env::ArchCheck::Other(why) = &arch {
        if !force {
            return Err(Error::failed(format!(
                "refusing {}: {why}; --force adopts it anyway",
                file.display()
            )));
        }
    }
    let build = {
        let mut b = lib.build().clone();
        if let Some(a) = r.validator("GCN_ARCH_NAME") {
            b.arch = a.to_string();
        }
        b
    };
    match r.validator("ROCBLAS_VERSION") {
        Some(v) if tunedblas_core::version::same_build(v, &build.version) => {}
        Some(v) => {
            return Err(Error::failed(format!(
                "refusing {}: its Validator ROCBLAS_VERSION is {v}, but {} reports {} (solution ids belong to the build that was tuned); `tunedblas profiles import --lib {} {}` takes its shapes only",
                file.display(),
                lib_path.display(),
                build.version,
                lib_path.display(),
                file.display()
            )))
        }
        None => {
            return Err(Error::failed(format!(
                "refusing {}: it has no Validator ROCBLAS_VERSION, so nothing says which build its ids belong to; `tunedblas profiles import --lib {} {}` takes its shapes only",
                file.display(),
                lib_path.display(),
                file.display()
            )))
        }
    }
    // Every rocBLAS id checked on this build before anything is written.
    let mut kept: Vec<Row> = Vec::new();
    let mut refused: Vec<(String, i32, String)> = Vec::new();
    let mut to_tune: Vec<ProblemKey> = Vec::new();
    for row in &r.rows {
        match row.solution {
            Solution::Rocblas(id) => match check_id(&lib, row.key, id) {
                Ok(()) => kept.push(row.clone()),
                Err(why) => {
                    refused.push((row.key.text(), id, why));
                    to_tune.push(row.key);
                }
            },
            _ => kept.push(row.clone()),
        }
    }
    let shapes = file_shapes(&ResultsFile {
        rows: vec![],
        ..r.clone()
    });
    to_tune.extend(shapes.shapes.iter().copied());
    let store = Store::open(root)?;
    let (folder, adopted, had, waiting) = store.transaction(|tx| {
        let folder = tx.folder_for(&build, None)?;
        let mut now = if folder.existed {
            tx.rows(&folder)?
        } else {
            ResultsFile::default()
        };
        let (mut adopted, mut had) = (0, 0);
        for row in &kept {
            if now.find(&row.key).is_some() {
                had += 1;
            } else {
                now.rows.push(Row {
                    line: 0,
                    ..row.clone()
                });
                adopted += 1;
            }
        }
        let mut waiting = tx.imported(&folder)?;
        for key in &to_tune {
            let line = key.text();
            if now.find(key).is_none() && !waiting.contains(&line) {
                waiting.push(line);
            }
        }
        let ranks = if folder.existed { tx.ranks(&folder) } else { 1 };
        tx.write_rows(&folder, &build, &mut now, ranks, "adopted")?;
        tx.set_imported(&folder, waiting.clone());
        tx.record(
            &folder,
            &build,
            json!({
                "kind": "adopt",
                "finished": store::utc_now(),
                "file": file.display().to_string(),
                "validators": r.validators,
                "adopted": adopted,
                "kept_existing": had,
                "refused": refused.iter().map(|(k, id, why)| json!({"shape": k, "solution": id, "reason": why})).collect::<Vec<_>>(),
                "shapes_to_tune": waiting.len(),
                "skipped": shapes.skipped.iter().map(|(r, n)| json!({"reason": r, "lines": n})).collect::<Vec<_>>(),
            }),
        )?;
        Ok((folder, adopted, had, waiting.len()))
    })?;
    if json {
        let report = json!({
            "profile": folder.name,
            "dir": folder.dir,
            "arch": arch,
            "adopted": adopted,
            "kept_existing": had,
            "refused": refused.iter().map(|(k, id, why)| json!({"shape": k, "solution": id, "reason": why})).collect::<Vec<_>>(),
            "waiting": waiting,
            "skipped": shapes.skipped.iter().map(|(r, n)| json!({"reason": r, "lines": n})).collect::<Vec<_>>(),
        });
        print_json(&report);
        return Ok(());
    }
    match &arch {
        crate::env::ArchCheck::Other(why) => {
            println!("  adopted with --force although {why}")
        }
        crate::env::ArchCheck::Same(t) | crate::env::ArchCheck::Unchecked(t) => {
            println!("  {t}")
        }
    }
    for (k, id, why) in &refused {
        println!("  refused {k},Gemm_Rocblas_{id}: {why}");
    }
    println!(
        "adopted {adopted} rows of {} into profile '{}' ({}) for rocBLAS {} (build {}); {} refused by check_solution_index, {had} shapes already had a row",
        file.display(),
        folder.name,
        folder.dir.display(),
        build.version,
        build.short(),
        refused.len()
    );
    if shapes.from_other_backends + shapes.from_tf32 > 0 {
        println!(
            "  {} rows name hipBLASLt solutions or tf32 GEMMs the rocBLAS interposer cannot serve: their shapes wait for tuning",
            shapes.from_other_backends + shapes.from_tf32
        );
    }
    for (reason, n) in &shapes.skipped {
        println!("  {n} rows skipped: {reason}");
    }
    if waiting > 0 {
        println!(
            "  {waiting} shapes waiting; tune them with: tunedblas tune --lib {} --retune",
            lib_path.display()
        );
    }
    Ok(())
}

#[derive(Debug, Serialize)]
pub struct QualifyReport {
    pub profile: String,
    pub checked: usize,
    pub devices: i32,
    /// (shape, reason) of every removed row.
    pub removed: Vec<(String, String)>,
}

/// Whether rocBLAS at `lib` accepts solution `id` for `key` (`check_solution_index`: the
/// call validates the id for the problem and runs nothing).
fn check_id(lib: &Rocblas, key: ProblemKey, id: i32) -> std::result::Result<(), String> {
    let p = RocblasProblem::once(lib, key).map_err(|e| e.message)?;
    match p.run_flags(0, Some(id), FLAG_CHECK_SOLUTION_INDEX) {
        STATUS_SUCCESS => Ok(()),
        st => Err(format!(
            "check_solution_index refused solution {id} for this problem on this build (rocBLAS status {st})"
        )),
    }
}

/// `tunedblas qualify`: every tuned row of the build's profile (any library) on every
/// device; failures are removed.
pub fn qualify_profile<L: tunedblas_tuner::backends::Library>(
    lib: &L,
    root: &Path,
    json: bool,
) -> Result<QualifyReport> {
    let devices = lib.runtime().device_count()?;
    let mut build = lib.build().clone();
    let store = Store::existing(root)?;
    let folder = store.existing_folder(&build)?;
    let text = store.read_text(&folder)?;
    if let Some(a) = tunableop::parse(&text).validator("GCN_ARCH_NAME") {
        build.arch = a.to_string();
    }
    let rows: Vec<(L::Key, String)> = lib
        .read(&text)
        .into_iter()
        .filter(|(_, s, _)| matches!(lib.row(s), tunedblas_tuner::curate::RowChoice::Mine(_)))
        .map(|(k, s, _)| (k, s))
        .collect();
    let method = tunedblas_tuner::pipeline::Method::default();
    let failed = tunedblas_tuner::campaign::qualify_rows(lib, &rows, devices, &method);
    let report = QualifyReport {
        profile: folder.name.clone(),
        checked: rows.len(),
        devices,
        removed: failed
            .iter()
            .map(|(i, why)| (lib.key_text(&rows[*i].0), why.clone()))
            .collect(),
    };
    if !json {
        for (shape, why) in &report.removed {
            println!("  removed {shape}: {why}");
        }
    }
    // The failed rows leave the rows as they are now: a row another command added or
    // changed since they were read stays.
    store.transaction(|tx| {
        let folder = tx.existing_folder(&build)?;
        let now: Vec<_> = lib
            .read(&tx.read_text(&folder)?)
            .into_iter()
            .filter(|(k, s, _)| !failed.iter().any(|(i, _)| rows[*i].0 == *k && rows[*i].1 == *s))
            .collect();
        let ranks = tx.ranks(&folder);
        let mut fields = lib.describe();
        fields.push(("library", lib.kind().tag().into()));
        tx.write_profile(&folder, &build, lib.results(&now), ranks, "qualified", &fields)?;
        tx.record(
            &folder,
            &build,
            json!({
                "kind": "qualify",
                "finished": store::utc_now(),
                "devices": devices,
                "checked": report.checked,
                "removed": report.removed.iter().map(|(s, r)| json!({"shape": s, "reason": r})).collect::<Vec<_>>(),
            }),
        )
    })?;
    if !json {
        println!(
            "qualify '{}': {} rows checked on {} device{}, {} removed",
            report.profile,
            report.checked,
            devices,
            if devices == 1 { "" } else { "s" },
            report.removed.len()
        );
    }
    Ok(report)
}

#[derive(Debug, Serialize)]
pub struct MergeReport {
    pub profile: String,
    pub rows: usize,
    pub added: usize,
    /// Shapes two shards both had, with different solutions: the faster recorded one won.
    pub conflicts: Vec<String>,
}

/// The profile for the build hashed `sha256` in each shard store: its name and folder, and
/// the architecture it was tuned on where it says.
fn shard_profile(shard: &Store, root: &Path, sha256: &str) -> Result<(Folder, Option<String>)> {
    match shard.registry()?.find_by_sha(sha256) {
        Match::Unique(name, entry) => Ok((
            Folder {
                name: name.to_string(),
                dir: entry.path_in(root),
                existed: true,
            },
            entry.arch.clone().filter(|a| a != "unknown"),
        )),
        _ => Err(Error::failed(format!(
            "{} has no profile for build {}: it was tuned for another library",
            shard.registry_path().display(),
            &sha256[..sha256.len().min(12)]
        ))),
    }
}

/// The architecture the shards recorded for the build of `lib` (their registry's `arch`),
/// for a merge where `--arch` does not say and no device may be there to ask.
pub fn shards_arch(lib: &Path, shards: &[PathBuf]) -> Option<String> {
    let sha = identity::sha256_file(lib).ok()?;
    shards.iter().find_map(|root| {
        let reg = Store::existing(root).ok()?.registry().ok()?;
        match reg.find_by_sha(&sha) {
            Match::Unique(_, e) => e.arch.clone().filter(|a| a != "unknown"),
            _ => None,
        }
    })
}

/// `tunedblas merge`: joins the profiles several `tune --shard` runs wrote for one build of
/// any library, row by shape: a shape two shards tuned to different solutions keeps the
/// faster recorded one (said as a conflict).
pub fn merge<L: Library>(
    lib: &L,
    root: &Path,
    shards: &[PathBuf],
    json: bool,
) -> Result<MergeReport> {
    let build = lib.build();
    let store = Store::open(root)?;
    // The shards first, outside the store's lock.
    let mut shard_rows = Vec::new();
    let mut campaigns = Vec::new();
    let mut ranks = 1;
    let mut archs = std::collections::BTreeSet::new();
    for shard_root in shards {
        let shard = Store::existing(shard_root)?;
        let (folder, arch) = shard_profile(&shard, shard_root, &build.sha256)?;
        archs.extend(arch);
        ranks = ranks.max(shard.ranks(&folder));
        shard_rows.extend(lib.read(&shard.read_text(&folder)?));
        if let Ok(p) = Provenance::load(&store::provenance_file(&folder.dir)) {
            campaigns.extend(p.campaigns().iter().cloned());
        }
    }
    // Rows tuned on one architecture are not another's: shards of two, or shards of one
    // merged where the profile would record another (the device here, for the Lt
    // libraries), are refused rather than joined under one name.
    let archs: Vec<String> = archs.into_iter().collect();
    if archs.len() > 1 {
        return Err(Error::failed(format!(
            "the shards were tuned on different architectures ({}): merge the shards of one architecture at a time",
            archs.join(", ")
        )));
    }
    if let Some(theirs) = archs
        .first()
        .filter(|a| build.arch != "unknown" && **a != build.arch)
    {
        return Err(Error::failed(format!(
            "the shards were tuned on {theirs}, but the profile would record {} (this machine's device, or --arch): merge on a machine whose device is {theirs}",
            build.arch
        )));
    }
    // Then into the profile's rows as they are now, under the lock: merges run at once
    // each add their rows to what the others wrote.
    let report = store.transaction(|tx| {
        let folder = tx.folder_for(build, None)?;
        let mut rows: BTreeMap<String, (L::Key, String, Option<f64>)> = lib
            .read(&tx.read_text(&folder)?)
            .into_iter()
            .map(|r| (lib.key_text(&r.0), r))
            .collect();
        let mut report = MergeReport {
            profile: folder.name.clone(),
            rows: 0,
            added: 0,
            conflicts: vec![],
        };
        for row in shard_rows {
            let shape = lib.key_text(&row.0);
            match rows.get(&shape) {
                None => {
                    report.added += 1;
                    rows.insert(shape, row);
                }
                Some(old) if old.1 == row.1 => {}
                Some(old) => {
                    let faster = row.2.unwrap_or(f64::INFINITY) < old.2.unwrap_or(f64::INFINITY);
                    report.conflicts.push(shape.clone());
                    if faster {
                        rows.insert(shape, row);
                    }
                }
            }
        }
        let rows: Vec<_> = rows.into_values().collect();
        report.rows = rows.len();
        let ranks = ranks.max(tx.ranks(&folder));
        let mut fields = lib.describe();
        fields.push(("library", lib.kind().tag().into()));
        tx.write_profile(&folder, build, lib.results(&rows), ranks, "tuned", &fields)?;
        tx.record(
            &folder,
            build,
            json!({
                "kind": "merge",
                "finished": store::utc_now(),
                "shards": shards.iter().map(|s| s.display().to_string()).collect::<Vec<_>>(),
                "added": report.added,
                "conflicts": report.conflicts,
                "shard_campaigns": campaigns,
            }),
        )?;
        Ok(report)
    })?;
    if !json {
        println!(
            "merged {} shard stores into '{}': {} rows added, {} rows in all, {} conflicts",
            shards.len(),
            report.profile,
            report.added,
            report.rows,
            report.conflicts.len()
        );
    }
    Ok(report)
}
