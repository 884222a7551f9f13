//! `tunedblas merge`: joins the stores of a campaign sharded over several machines.

use std::path::PathBuf;

use crate::args::{self, Args};
use crate::error::Result;
use crate::profiles;
use tunedblas_tuner::backends::{self, Spec};

use super::print_json;

const ABOUT: &str = "\
Joins campaigns run with `tune --shard I/N` on several machines: each SHARD_STORE is the
profile store a shard wrote. Their profiles must be for the build at LIB (rocBLAS, hipBLASLt
or cuBLASLt); rows are combined into this store's profile, shape by shape (two shards'
different solutions for one shape: the faster recorded one stays, said as a conflict), and
every shard's campaign is recorded.";

const AFTER: &str = "\
EXAMPLE:
    tunedblas merge --lib librocblas.so.5 shard0/profiles shard1/profiles
";

const OPTIONS: &str = "\
SHARD_STORE...  the profile store each shard wrote (one or more)
--lib LIB       the library build the shards tuned (required)
--profiles
--arch ARCH     GPU architecture to record, e.g. gfx1030 (default: the shards')
--json          the result as JSON
";

pub fn cli() -> clap::Command {
    args::library_options(args::command("merge", ABOUT, AFTER).args(args::table(OPTIONS)))
}

pub fn run(a: &Args) -> Result<()> {
    if a.positional.is_empty() {
        return Err(a.usage("needs one or more shard stores to merge"));
    }
    let shards: Vec<PathBuf> = a.positional.iter().map(PathBuf::from).collect();
    let lib = crate::env::find_library(&a.lib()?);
    let kind = backends::kind_of(&lib)?;
    // The architecture to record: --arch, else the shards' (no device need be here).
    let arch = a
        .value("--arch")
        .map(str::to_string)
        .or_else(|| profiles::shards_arch(&lib, &shards));
    let spec = Spec {
        lib: Some(lib),
        arch,
        ..a.spec()
    };
    let opened = backends::Opened::open(kind, &spec)?;
    let (root, json) = (a.profile_store(), a.has("--json"));
    let report =
        tunedblas_tuner::with_library!(&opened, l => profiles::merge(l, &root, &shards, json))?;
    if a.has("--json") {
        print_json(&report);
    }
    Ok(())
}
