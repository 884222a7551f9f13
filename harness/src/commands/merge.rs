//! `tunedblas merge`: joins the stores of a campaign sharded over several machines.

use std::path::PathBuf;

use crate::args::Args;
use crate::error::Result;
use crate::profiles;

use super::print_json;

pub const HELP: &str = "\
tunedblas merge --lib LIBROCBLAS [--profiles DIR] SHARD_STORE...

Joins campaigns run with `tune --shard I/N` on several machines: each SHARD_STORE is the
profile store a shard wrote. Their profiles must be for the build at LIBROCBLAS; rows are
combined into this store's profile and every shard's campaign is recorded.

EXAMPLE:
    tunedblas merge --lib librocblas.so.5 shard0/profiles shard1/profiles
";

pub fn help() -> String {
    HELP.into()
}

pub fn run(args: &[String]) -> Result<()> {
    let a = Args::parse(
        "merge",
        args,
        &["--json"],
        &["--lib", "--profiles", "--arch"],
    )?;
    if a.positional.is_empty() {
        return Err(a.usage("needs one or more shard stores to merge"));
    }
    let shards: Vec<PathBuf> = a.positional.iter().map(PathBuf::from).collect();
    let report = profiles::merge(&a.profile_store(), &a.lib()?, &shards, a.has("--json"))?;
    if a.has("--json") {
        print_json(&report);
    }
    Ok(())
}
