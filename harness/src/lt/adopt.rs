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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tunedblas_core::cublaslt::{parse_results, LtAction, LtLib, LtResults};
use tunedblas_core::registry;

use super::{need, num, write_profile, CliResult};
use crate::args::Args;
use crate::error::Error;

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
    let parsed = parse_results(&String::from_utf8_lossy(&bytes));
    let (kept, other): (Vec<_>, Vec<_>) = parsed
        .rows
        .iter()
        .cloned()
        .partition(|r| LtLib::Hipblaslt.serves(&r.action));
    if kept.is_empty() {
        return Err(Error::failed(format!(
            "{} has no hipBLASLt rows (Gemm_Hipblaslt_<index> or Default) this interposer can serve",
            file.display()
        )));
    }
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
    if !other.is_empty() {
        *skipped
            .entry("cuBLASLt configurations (not a hipBLASLt row)".into())
            .or_default() += other.len();
    }
    let indices = kept
        .iter()
        .filter(|r| matches!(r.action, LtAction::Index(_)))
        .count();
    let mut validators = parsed.validators.clone();
    validators.push(("TUNEDBLAS_BACKEND".into(), "hipblaslt".into()));
    let results = LtResults {
        validators: validators.clone(),
        rows: kept,
        skipped: Vec::new(),
    };
    let campaign = serde_json::json!({
        "kind": "hipblaslt-adopt",
        "file": file.display().to_string(),
        "library": lib.display().to_string(),
        "validators": parsed.validators,
        "rows": results.rows.len(),
        "indices": indices,
        "skipped": skipped,
    });
    let mut entry = registry::Entry::new(name, &sha);
    entry.rows_per_rank = Some(results.rows.len() as u64);
    entry.arch = parsed
        .validators
        .iter()
        .find(|(k, _)| k == "GCN_ARCH_NAME")
        .map(|(_, v)| v.clone());
    entry.status = Some("adopted".into());
    entry.extra.insert("library".into(), "hipblaslt".into());
    let folder = crate::store::Folder {
        name: name.to_string(),
        dir: profiles.join(name),
        existed: false,
    };
    let written = write_profile(&profiles, &folder, rank, &sha, &results, entry, campaign)?;
    println!(
        "adopted {} rows of {} ({indices} Gemm_Hipblaslt, {} Default) -> {}; registered as {name} for hipBLASLt build {}",
        results.rows.len(),
        file.display(),
        results.rows.len() - indices,
        written.display(),
        &sha[..12]
    );
    for (reason, n) in &skipped {
        println!("  {n} lines left out: {reason}");
    }
    println!("  each index is checked with matmulIsAlgoSupported on its first call; one this build lacks is said once and its calls keep the caller's algorithm");
    Ok(())
}
