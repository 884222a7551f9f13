//! One `lt tune` campaign, for either Lt library, from the keys to the written profile: the
//! profile folder locked (one campaign per folder), every key tuned in turn with a
//! checkpoint after each (a killed campaign resumes), the proposed rows confirmed by a
//! fresh process, the table printed, the rows, provenance and registry entry written in one
//! transaction of the store, and the campaign failed (exit 1, checkpoint kept) if a shape
//! could not be tuned. The libraries differ only in how a key is tuned and what is said of
//! them, which the caller gives.

use std::ffi::OsString;
use std::path::PathBuf;

use tunedblas_core::cublaslt::{LtKey, LtResults, LtRow};
use tunedblas_core::registry;

use super::cuda::Result;
use super::tune::{Options, Outcome};
use super::{need, num, resume, write_json, write_profile, CliResult};
use crate::args::Args;

/// Where the campaign writes: read from the command line before anything is loaded, so a
/// mistake is exit 2 on any machine.
pub struct Target {
    pub profiles: PathBuf,
    pub name: String,
    pub rank: usize,
}

impl Target {
    pub fn of(a: &Args) -> CliResult<Target> {
        let profiles = PathBuf::from(need(a, "--profiles")?);
        let name = need(a, "--name")?;
        registry::check_name(name).map_err(|e| a.usage(e))?;
        Ok(Target {
            profiles,
            name: name.to_string(),
            rank: num(a, "--rank", 0)?,
        })
    }
}

/// What a campaign says of its library: the checkpoint's and registry's library name
/// (`cublaslt`, `hipblaslt`), the build's sha256, the rank file's validators, the campaign
/// record (kind, library, options; the shape and adoption counts are added), the registry
/// entry's extra fields, the arguments that make a `recheck` child load the same libraries.
pub struct Library {
    pub name: &'static str,
    pub sha: String,
    pub validators: Vec<(String, String)>,
    pub record: serde_json::Value,
    pub arch: Option<String>,
    pub entry: Vec<(&'static str, serde_json::Value)>,
    pub child_args: Vec<OsString>,
}

pub fn run(
    a: &Args,
    target: &Target,
    lib: Library,
    keys: &[LtKey],
    opts: &Options,
    tune_one: impl FnMut(&LtKey) -> Result<Outcome>,
) -> CliResult<()> {
    let folder = crate::store::Folder {
        name: target.name.clone(),
        dir: target.profiles.join(&target.name),
        existed: false,
    };
    let _campaign = crate::campaign::lock_campaign(&folder, false)?;
    let (mut checkpoint, done) = resume::open(
        &folder.dir,
        lib.name,
        &lib.sha,
        target.rank,
        keys,
        a.has("--fresh"),
    )?;
    let mut outcomes = resume::tune_all(keys, done, &mut checkpoint, tune_one)?;
    resume::none_tuned(keys, &outcomes)?;
    super::confirm_fresh(&lib.child_args, opts, &mut outcomes);
    super::print_table(opts, &outcomes);
    let rows: Vec<LtRow> = outcomes.iter().map(|o| o.row()).collect();
    let adopted = outcomes.iter().filter(|o| o.adopted.is_some()).count();
    let results = LtResults {
        validators: lib.validators,
        rows,
        skipped: Vec::new(),
        wildcards: Vec::new(),
    };
    let mut record = lib.record;
    record["rank"] = target.rank.into();
    record["shapes"] = outcomes.len().into();
    record["adopted"] = adopted.into();
    let mut entry = registry::Entry::new(&target.name, &lib.sha);
    entry.rows_per_rank = Some(results.rows.len() as u64);
    entry.arch = lib.arch;
    entry.status = Some("tuned".into());
    entry.extra.insert("library".into(), lib.name.into());
    for (k, v) in lib.entry {
        entry.extra.insert(k.into(), v);
    }
    let file = write_profile(
        &target.profiles,
        &folder,
        target.rank,
        &lib.sha,
        &results,
        entry,
        record.clone(),
    )?;
    write_json(
        a.path("--log"),
        &serde_json::json!({ "campaign": record, "outcomes": outcomes }),
    )?;
    crate::say::note!(
        "tunedblas lt: {} rows ({adopted} adopted, {} Default) -> {}; registered as {} for {} build {}",
        results.rows.len(),
        results.rows.len() - adopted,
        file.display(),
        target.name,
        lib.name,
        &lib.sha[..12]
    );
    resume::finish(keys, &outcomes, checkpoint, &folder.dir)
}
