//! `tunedblas merge`: joins the stores of a campaign sharded over several machines.

use std::path::PathBuf;

use crate::args::{self, Args};
use crate::error::Result;
use crate::profiles;

use super::print_json;

const ABOUT: &str = "\
Joins campaigns run with `tune --shard I/N` on several machines: each SHARD_STORE is the
profile store a shard wrote. Their profiles must be for the build at LIBROCBLAS; rows are
combined into this store's profile and every shard's campaign is recorded.";

const AFTER: &str = "\
EXAMPLE:
    tunedblas merge --lib librocblas.so.5 shard0/profiles shard1/profiles
";

const OPTIONS: &str = "\
SHARD_STORE...  the profile store each shard wrote (one or more)
--lib LIB       the rocBLAS build the shards tuned (required)
--profiles
--arch ARCH     GPU architecture to record, e.g. gfx1030
--json          the result as JSON
";

pub fn cli() -> clap::Command {
    args::command("merge", ABOUT, AFTER).args(args::table(OPTIONS))
}

pub fn run(a: &Args) -> Result<()> {
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
