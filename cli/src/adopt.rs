//! `tunedblas profiles adopt --lib LIBHIPBLASLT FILE`: a file naming hipBLASLt algorithms by
//! index made the profile of a hipBLASLt build, without re-tuning.
//!
//! PyTorch's rows name hipBLASLt algorithms by index (`Gemm_Hipblaslt_<index>`, older
//! files `Gemm_Hipblaslt_<TA><TB>_<index>`), which only mean something to the build that
//! was tuned. The profile is registered for the sha256 of the given `libhipblaslt.so`, so
//! only a process loading exactly that file is served from it, and each index is turned
//! back into an algorithm and checked with `hipblaslt_ext::matmulIsAlgoSupported` by the
//! interposer on the row's first call (a row that fails is said once and passed through).
//! rocBLAS rows of the same file are left out (`--lib librocblas.so...` takes them).
//!
//! The other files that name hipBLASLt indices are taken too, told by their content
//! (`tunedblas_core::formats`): hipBLASLt's own tuning and override files, `hipblaslt-bench`
//! lines run with `--algo_method index`, and AITER's `bf16_tuned_gemm.csv` (its `hipblaslt`
//! rows; AITER's own kernels are counted and left out). Before anything is written, what
//! the file says of its build is checked against this library, which is loaded for its
//! version and revision (`hipblasLtGetVersion`, `hipblasLtGetGitRevision`; neither needs a
//! GPU): a tuning file's `Git Version:` line, a TunableOp file's `HIPBLASLT_VERSION`, and
//! for AITER the device (`--arch gfx950[:CUs]` picks one where the file has several). A
//! mismatch refuses the file; `--force` adopts it anyway and says so in provenance.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::path::Path;

use serde_json::json;
use tunedblas_core::cublaslt::{parse_results, LtAction, LtLib, LtResults, LtRow};
use tunedblas_core::formats::{self, lt::Device, validators, validators::HipbltBuild, Format};
use tunedblas_tuner::dl;

use crate::error::{Error, Result};
use crate::store::{Build, Store};

/// What hipBLASLt says of itself, read by loading it: `hipblasLtGetVersion` and
/// `hipblasLtGetGitRevision` only check that the handle is not NULL (hipBLASLt 7.1, and
/// its source since), so they are asked with a placeholder handle and need no GPU. `None`
/// where the library cannot be loaded here (its HIP runtime missing, another libc).
fn build_of(lib: &Path) -> Option<HipbltBuild> {
    type VersionFn = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
    type RevisionFn = unsafe extern "C" fn(*mut c_void, *mut c_char) -> c_int;
    let h = dl::open(lib, libc::RTLD_NOW | libc::RTLD_LOCAL).ok()?;
    // SAFETY: the C types hipblaslt.h declares.
    let (v, r) = unsafe {
        (
            dl::sym::<VersionFn>(h, "hipblasLtGetVersion")?,
            dl::sym::<RevisionFn>(h, "hipblasLtGetGitRevision"),
        )
    };
    let placeholder = std::ptr::dangling_mut::<c_void>();
    let mut version: c_int = 0;
    // SAFETY: an out-pointer; the handle is only compared with NULL.
    if unsafe { v(placeholder, &mut version) } != 0 {
        return None;
    }
    let git = r.and_then(|r| {
        // hipBLASLt's buffer is 128 bytes (hipblaslt.h: char rev[128]).
        let mut buf = [0 as c_char; 256];
        // SAFETY: a buffer larger than hipBLASLt's, NUL-terminated below.
        let st = unsafe { r(placeholder, buf.as_mut_ptr()) };
        buf[255] = 0;
        (st == 0).then(|| {
            // SAFETY: NUL-terminated above.
            unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        })
    });
    Some(HipbltBuild { version, git })
}

/// `--arch gfx950` or `--arch gfx950:256` (AITER's CU count).
pub fn device(v: Option<&str>) -> std::result::Result<Option<Device>, String> {
    let Some(v) = v else { return Ok(None) };
    let (gfx, cu) = match v.split_once(':') {
        Some((g, c)) => (
            g,
            Some(c.parse::<i64>().map_err(|_| {
                format!("--arch takes gfxNNN or gfxNNN:CUs, like gfx950:256, not '{v}'")
            })?),
        ),
        None => (v, None),
    };
    Ok(Some(Device {
        gfx: gfx.to_string(),
        cu_num: cu,
    }))
}

/// A file made rows of a hipBLASLt profile: the rows, what was left out by reason, the
/// checks made against the build, and what to record.
struct Taken {
    results: LtResults,
    skipped: BTreeMap<String, usize>,
    checks: Vec<String>,
    format: Format,
    arch: Option<String>,
}

/// A check of the file against the build: refused unless `force`, which records it.
fn check(
    result: std::result::Result<(), String>,
    force: bool,
    what: &str,
    checks: &mut Vec<String>,
) -> Result<()> {
    match result {
        Ok(()) => {
            checks.push(format!("{what}: matches"));
            Ok(())
        }
        Err(why) if force => {
            checks.push(format!("{what}: MISMATCH, adopted with --force: {why}"));
            Ok(())
        }
        Err(why) => Err(Error::failed(format!(
            "refusing the file: {why}; its indices would be served to another build (--force adopts it anyway)"
        ))),
    }
}

/// A PyTorch TunableOp results file (the rows of the other backends left out); its
/// GCN_ARCH_NAME checked against `--arch` where given.
fn from_tunableop(
    text: &str,
    build: Option<&HipbltBuild>,
    device: Option<&Device>,
    force: bool,
) -> Result<Taken> {
    let parsed = parse_results(text);
    let mut checks = Vec::new();
    let validator = |k: &str| {
        parsed
            .validators
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    match (validator("HIPBLASLT_VERSION"), build) {
        (Some(v), Some(b)) => check(
            validators::check_hipblaslt_version(v, b),
            force,
            "HIPBLASLT_VERSION",
            &mut checks,
        )?,
        (Some(v), None) => checks.push(format!(
            "HIPBLASLT_VERSION {v}: not checked (the library could not be loaded here)"
        )),
        (None, _) => checks.push("no HIPBLASLT_VERSION validator: nothing to check".into()),
    }
    if let (Some(file), Some(d)) = (validator("GCN_ARCH_NAME"), device) {
        check(
            validators::check_arch(file, &d.gfx),
            force,
            "GCN_ARCH_NAME",
            &mut checks,
        )?;
    }
    if let Some((k, v)) = validators::hip_runtime(&parsed.validators) {
        checks.push(format!(
            "{k} {v}: the HIP runtime PyTorch was built with (recorded)"
        ));
    }
    let serves = |a: &LtAction| LtLib::Hipblaslt.serves(a);
    let (kept, other): (Vec<LtRow>, Vec<LtRow>) =
        parsed.rows.iter().cloned().partition(|r| serves(&r.action));
    let (wild, other_wild): (Vec<_>, Vec<_>) = parsed
        .wildcards
        .iter()
        .cloned()
        .partition(|w| serves(&w.action));
    // Why the other lines were left out, by reason.
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    for (_, why) in &parsed.skipped {
        let reason = if why.starts_with(tunedblas_core::cublaslt::OTHER_LIBRARY) {
            "rocBLAS rows (serve them through rocBLAS: tunedblas profiles adopt --lib librocblas.so...)".to_string()
        } else if why.starts_with("op ") {
            "ops the hipBLASLt interposer does not serve (scaled, bias or complex GEMMs)"
                .to_string()
        } else {
            why.clone()
        };
        *skipped.entry(reason).or_default() += 1;
    }
    if !other.is_empty() || !other_wild.is_empty() {
        *skipped
            .entry("cuBLASLt configurations (not a hipBLASLt row)".into())
            .or_default() += other.len() + other_wild.len();
    }
    let arch = validator("GCN_ARCH_NAME").map(str::to_string);
    let mut validators = parsed.validators.clone();
    validators.push(("TUNEDBLAS_BACKEND".into(), "hipblaslt".into()));
    Ok(Taken {
        results: LtResults {
            validators,
            rows: kept,
            skipped: Vec::new(),
            wildcards: wild,
        },
        skipped,
        checks,
        format: Format::TunableOp,
        arch,
    })
}

/// A hipBLASLt tuning file, hipblaslt-bench lines or an AITER table.
fn from_lt_format(
    format: Format,
    text: &str,
    build: Option<&HipbltBuild>,
    device: Option<Device>,
    force: bool,
) -> Result<Taken> {
    let parsed = formats::parse_lt(format, text).expect("a hipBLASLt-side format");
    let mut checks = Vec::new();
    let mut validators = vec![("TUNEDBLAS_BACKEND".to_string(), "hipblaslt".to_string())];
    match format {
        Format::HipblasltTuning => match build {
            Some(b) => check(
                validators::check_git_version(parsed.git_version.as_deref(), b),
                force,
                "Git Version",
                &mut checks,
            )?,
            None if force => checks.push(
                "Git Version: not checked (the library could not be loaded here), adopted with --force".into(),
            ),
            None => {
                return Err(Error::failed(
                    "refusing the file: the library cannot be loaded here to read its revision, so its `Git Version:` cannot be checked (--force adopts it anyway)",
                ))
            }
        },
        Format::HipblasltBench => checks.push(
            "hipblaslt-bench lines name no build: their indices are taken as this build's".into(),
        ),
        _ => {}
    }
    if let Some(b) = build {
        validators.push((
            "HIPBLASLT_VERSION".into(),
            b.pytorch_validator()
                .unwrap_or_else(|| b.version.to_string()),
        ));
        if let Some(g) = &b.git {
            validators.push(("HIPBLASLT_GIT_VERSION".into(), g.clone()));
        }
    }
    // AITER keys rows by device: one device per profile.
    let devices = parsed.devices();
    let device = match (device, devices.len()) {
        (Some(d), _) => Some(d),
        (None, 0) => None,
        (None, 1) => devices.keys().next().cloned(),
        (None, _) => {
            return Err(Error::failed(format!(
                "the file holds rows of {} devices ({}); pick one with --arch gfxNNN:CUs",
                devices.len(),
                devices
                    .iter()
                    .map(|(d, n)| format!(
                        "{}:{} ({n} rows)",
                        d.gfx,
                        d.cu_num.map_or("?".into(), |c| c.to_string())
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    };
    let arch = device.as_ref().map(|d| d.gfx.clone());
    if let Some(d) = &device {
        validators.push(("GCN_ARCH_NAME".into(), d.gfx.clone()));
        if let Some(cu) = d.cu_num {
            validators.push(("AITER_CU_NUM".into(), cu.to_string()));
        }
        checks.push(format!("device {d}: rows of other devices left out"));
    }
    let taken = parsed.index_rows(device.as_ref());
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    for (why, n) in taken.left_out {
        *skipped.entry(why).or_default() += n;
    }
    for s in &parsed.skipped {
        *skipped.entry(s.reason.clone()).or_default() += 1;
    }
    let rows = taken.rows.into_iter().map(|(key, index)| LtRow {
        key,
        action: LtAction::Index(index),
        time_ms: None,
    });
    Ok(Taken {
        results: LtResults {
            validators,
            rows: rows.collect(),
            skipped: Vec::new(),
            wildcards: Vec::new(),
        },
        skipped,
        checks,
        format,
        arch,
    })
}

/// Adopts `file` for the hipBLASLt build at `lib` into the store at `root` (profile `name`,
/// else the build's default name).
pub fn adopt(
    root: &Path,
    lib: &Path,
    name: Option<&str>,
    file: &Path,
    device: Option<Device>,
    force: bool,
) -> Result<()> {
    let text = crate::export::read_text(file)?;
    let hipblaslt = build_of(lib);
    let Taken {
        results,
        skipped,
        checks,
        format,
        arch,
    } = match formats::detect(&text) {
        f @ (Format::HipblasltTuning | Format::HipblasltBench | Format::Aiter) => {
            from_lt_format(f, &text, hipblaslt.as_ref(), device, force)?
        }
        _ => from_tunableop(&text, hipblaslt.as_ref(), device.as_ref(), force)?,
    };
    if results.rows.is_empty() && results.wildcards.is_empty() {
        let why = skipped
            .iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(Error::failed(format!(
            "{} ({}) has no hipBLASLt rows (Gemm_Hipblaslt_<index> or Default) this interposer can serve{}",
            file.display(),
            format.name(),
            if why.is_empty() { String::new() } else { format!(": {why}") }
        )));
    }
    let indices = results
        .rows
        .iter()
        .filter(|r| matches!(r.action, LtAction::Index(_)))
        .count();
    let version = hipblaslt.as_ref().map(|b| b.version.to_string());
    let build = Build::of("hipblaslt", lib, version, arch.as_deref())
        .map_err(|e| Error::not_loaded(e.message))?;
    let campaign = json!({
        "kind": "hipblaslt-adopt",
        "file": file.display().to_string(),
        "format": format.name(),
        "hipblaslt_version": hipblaslt.as_ref().map(|b| b.version),
        "hipblaslt_git_version": hipblaslt.as_ref().and_then(|b| b.git.clone()),
        "validators": results.validators,
        "checks": checks,
        "forced": force,
        "rows": results.rows.len(),
        "wildcard_rows": results.wildcards.len(),
        "indices": indices,
        "skipped": skipped,
    });
    let store = Store::open(root)?;
    let folder = store.transaction(|tx| {
        let folder = tx.folder_for(&build, name)?;
        let fields = [
            ("library", "hipblaslt".to_string()),
            ("arch", build.arch.clone()),
        ];
        let ranks = tx.ranks(&folder);
        tx.write_profile(
            &folder,
            &build,
            results.to_text(),
            ranks,
            "adopted",
            &fields,
        )?;
        tx.record(&folder, &build, campaign.clone())?;
        Ok(folder)
    })?;
    let wild = match results.wildcards.len() {
        0 => String::new(),
        n => format!(", {n} `*` rows"),
    };
    println!(
        "adopted {} rows of {} ({indices} Gemm_Hipblaslt, {} Default{wild}) -> {}; registered as {} for hipBLASLt build {}",
        results.rows.len(),
        file.display(),
        results.rows.len() - indices,
        folder.dir.display(),
        folder.name,
        build.short()
    );
    for c in &checks {
        println!("  checked {c}");
    }
    for (reason, n) in &skipped {
        println!("  {n} lines left out: {reason}");
    }
    println!("  each index is checked with matmulIsAlgoSupported on its first call; one this build lacks is said once and its calls keep the caller's algorithm");
    Ok(())
}
