//! `tunedblas lt adopt`: a PyTorch TunableOp results file from a ROCm machine made the
//! profile of a hipBLASLt build, without re-tuning.
//!
//! PyTorch's rows name hipBLASLt algorithms by index (`Gemm_Hipblaslt_<index>`, older
//! files `Gemm_Hipblaslt_<TA><TB>_<index>`), which only mean something to the build that
//! was tuned. The file is read, never the library loaded (no GPU is needed): the profile is
//! registered for the sha256 of the given `libhipblaslt.so`, so only a process loading
//! exactly that file is served from it, and each index is turned back into an algorithm and
//! checked with `hipblaslt_ext::matmulIsAlgoSupported` by the interposer on the row's first
//! call (a row that fails is said once and passed through). rocBLAS rows of the same file
//! are left out here (`tunedblas profiles adopt --lib librocblas.so...` takes them).
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
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};

use tunedblas_core::cublaslt::{parse_results, LtAction, LtLib, LtResults, LtRow};
use tunedblas_core::formats::{self, lt::Device, validators, validators::HipbltBuild, Format};
use tunedblas_core::registry;

use super::{need, num, write_profile, CliResult};
use crate::args::Args;
use crate::error::Error;

/// What hipBLASLt says of itself, read by loading it: `hipblasLtGetVersion` and
/// `hipblasLtGetGitRevision` only check that the handle is not NULL (hipBLASLt 7.1, and
/// its source since), so they are asked with a placeholder handle and need no GPU. `None`
/// where the library cannot be loaded here (its HIP runtime missing, another libc).
fn build_of(lib: &Path) -> Option<HipbltBuild> {
    type VersionFn = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
    type RevisionFn = unsafe extern "C" fn(*mut c_void, *mut c_char) -> c_int;
    let path = CString::new(lib.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: loading a library by path; it stays loaded for the process.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return None;
    }
    let sym = |name: &str| {
        let n = CString::new(name).expect("a symbol name");
        // SAFETY: a symbol lookup in a library we loaded.
        unsafe { libc::dlsym(h, n.as_ptr()) }
    };
    let (v, r) = (sym("hipblasLtGetVersion"), sym("hipblasLtGetGitRevision"));
    if v.is_null() {
        return None;
    }
    let placeholder = std::ptr::dangling_mut::<c_void>();
    let mut version: c_int = 0;
    // SAFETY: hipblasLtGetVersion(handle, int*) as hipblaslt.h declares it.
    let st = unsafe { std::mem::transmute::<*mut c_void, VersionFn>(v)(placeholder, &mut version) };
    if st != 0 {
        return None;
    }
    let git = (!r.is_null()).then(|| {
        // hipBLASLt's buffer is 128 bytes (hipblaslt.h: char rev[128]).
        let mut buf = [0 as c_char; 256];
        // SAFETY: hipblasLtGetGitRevision(handle, char*) into a buffer larger than hipBLASLt's.
        let st = unsafe {
            std::mem::transmute::<*mut c_void, RevisionFn>(r)(placeholder, buf.as_mut_ptr())
        };
        buf[255] = 0;
        // SAFETY: NUL-terminated above.
        (st == 0).then(|| {
            unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        })
    });
    Some(HipbltBuild {
        version,
        git: git.flatten(),
    })
}

/// `--arch gfx950` or `--arch gfx950:256` (AITER's CU count).
fn device_of(a: &Args) -> CliResult<Option<Device>> {
    let Some(v) = a.value("--arch") else {
        return Ok(None);
    };
    let (gfx, cu) = match v.split_once(':') {
        Some((g, c)) => (
            g,
            Some(c.parse::<i64>().map_err(|_| {
                a.usage(format!(
                    "--arch takes gfxNNN or gfxNNN:CUs, like gfx950:256, not '{v}'"
                ))
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

/// A check of the file against the build: refused unless `--force`, which records it.
fn check(
    result: Result<(), String>,
    force: bool,
    what: &str,
    checks: &mut Vec<String>,
) -> CliResult<()> {
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
) -> CliResult<Taken> {
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
    let (kept, other): (Vec<LtRow>, Vec<LtRow>) = parsed
        .rows
        .iter()
        .cloned()
        .partition(|r| LtLib::Hipblaslt.serves(&r.action));
    let (wild, other_wild): (Vec<_>, Vec<_>) = parsed
        .wildcards
        .iter()
        .cloned()
        .partition(|w| LtLib::Hipblaslt.serves(&w.action));
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
) -> CliResult<Taken> {
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
    Ok(Taken {
        results: LtResults {
            validators,
            rows: taken
                .rows
                .into_iter()
                .map(|(key, index)| LtRow {
                    key,
                    action: LtAction::Index(index),
                    time_ms: None,
                })
                .collect(),
            skipped: Vec::new(),
            wildcards: Vec::new(),
        },
        skipped,
        checks,
        format,
        arch,
    })
}

pub fn cmd_adopt(a: &Args) -> CliResult<()> {
    let lib = PathBuf::from(need(a, "--lib")?);
    let profiles = PathBuf::from(need(a, "--profiles")?);
    let name = need(a, "--name")?;
    registry::check_name(name).map_err(|e| a.usage(e))?;
    let rank: usize = num(a, "--rank", 0)?;
    let [file] = a.positional.as_slice() else {
        return Err(a.usage("needs one results file"));
    };
    let file = Path::new(file);
    let device = device_of(a)?;
    let force = a.has("--force");
    let lib = crate::env::find_library(&lib);
    match tunedblas_core::elf::defines(&lib, "hipblasLtMatmul") {
        Ok(true) => {}
        Ok(false) => {
            return Err(Error::not_rocblas(format!(
                "{} is not hipBLASLt: it exports no hipblasLtMatmul (give the libhipblaslt.so* file the server loads)",
                lib.display()
            )))
        }
        Err(e) => {
            return Err(Error::not_rocblas(format!(
                "cannot read {}: {e}",
                lib.display()
            )))
        }
    }
    let sha = tunedblas_core::identity::sha256_file(&lib)
        .map_err(|e| Error::not_rocblas(format!("cannot hash {}: {e}", lib.display())))?;
    let bytes = tunedblas_core::profile::read_regular(
        file,
        tunedblas_core::profile::MAX_RESULTS_FILE_BYTES,
    )
    .map_err(|e| Error::failed(format!("cannot read {}: {e}", file.display())))?;
    let text = String::from_utf8_lossy(&bytes);
    let build = build_of(&lib);
    let taken = match formats::detect(&text) {
        f @ (Format::HipblasltTuning | Format::HipblasltBench | Format::Aiter) => {
            from_lt_format(f, &text, build.as_ref(), device, force)?
        }
        _ => from_tunableop(&text, build.as_ref(), device.as_ref(), force)?,
    };
    let Taken {
        results,
        skipped,
        checks,
        format,
        arch,
    } = taken;
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
    let campaign = serde_json::json!({
        "kind": "hipblaslt-adopt",
        "file": file.display().to_string(),
        "format": format.name(),
        "library": lib.display().to_string(),
        "hipblaslt_version": build.as_ref().map(|b| b.version),
        "hipblaslt_git_version": build.as_ref().and_then(|b| b.git.clone()),
        "validators": results.validators,
        "checks": checks,
        "forced": force,
        "rows": results.rows.len(),
        "wildcard_rows": results.wildcards.len(),
        "indices": indices,
        "skipped": skipped,
    });
    let mut entry = registry::Entry::new(name, &sha);
    entry.rows_per_rank = Some(results.rows.len() as u64);
    entry.arch = arch;
    entry.status = Some("adopted".into());
    entry.extra.insert("library".into(), "hipblaslt".into());
    let folder = crate::store::Folder {
        name: name.to_string(),
        dir: profiles.join(name),
        existed: false,
    };
    let written = write_profile(&profiles, &folder, rank, &sha, &results, entry, campaign)?;
    let wild = if results.wildcards.is_empty() {
        String::new()
    } else {
        format!(", {} `*` rows", results.wildcards.len())
    };
    println!(
        "adopted {} rows of {} ({indices} Gemm_Hipblaslt, {} Default{wild}) -> {}; registered as {name} for hipBLASLt build {}",
        results.rows.len(),
        file.display(),
        results.rows.len() - indices,
        written.display(),
        &sha[..12]
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
