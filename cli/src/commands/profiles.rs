//! `tunedblas profiles`: the profile store: list, show, which, import, adopt.

use std::path::PathBuf;

use crate::args::{self, suggest, Args};
use crate::env;
use crate::error::{Error, Result};
use crate::profiles;

const ABOUT: &str = "\
The profile store, by ACTION:
  list                         every profile: name, build, rocBLAS version, rows, status
  show NAME                    one profile: registry entry, rank files, campaigns from
                               provenance.json
  which LIB                    the profile a process loading that file would get, and why
                               (the interposer's rule)
  import --lib LIBROCBLAS FILE...
                               adds the shapes of results files (any build, rows tuned with
                               rocBLAS or hipBLASLt, tf32 files as f32 GEMMs) to this build's
                               shape list (ids are never reused); says how many lines it
                               skipped and why; `tune --retune` then tunes them
  adopt --lib LIB FILE         makes a file naming this library build's solutions the
                               profile of that build. rocBLAS: a PyTorch TunableOp results
                               file written on this machine (same build: its ROCBLAS_VERSION
                               validator must match); each Gemm_Rocblas_<id> row is checked
                               with check_solution_index on the build and kept or listed as
                               refused; refused rows and hipBLASLt/tf32 rows become shapes to
                               tune. hipBLASLt (no GPU needed): a TunableOp file's
                               Gemm_Hipblaslt_<index>, Default and `*` rows, a hipBLASLt
                               tuning or override file, hipblaslt-bench lines run with
                               --algo_method index, or an AITER bf16_tuned_gemm.csv (its
                               hipblaslt rows); the file must name this build (a tuning
                               file's Git Version, a TunableOp file's HIPBLASLT_VERSION); the
                               interposer checks each index on its first call

which and adopt check the files' GCN_ARCH_NAME against the device's architecture: --arch, else
(rocBLAS) this machine's AMD GPUs as the driver lists them (/sys/class/kfd), where any is
visible. PyTorch drops a file tuned on another architecture (its solution ids name that
architecture's kernels): which says so, adopt refuses it (--force adopts it anyway).";

const AFTER: &str = "\
EXAMPLES:
    tunedblas profiles which /opt/rocm/lib/librocblas.so.5
    tunedblas profiles import --lib librocblas.so.5 old-build/tunableop_results0.csv
    tunedblas profiles adopt --lib /opt/rocm/lib/librocblas.so.4 tunableop_results0.csv
    tunedblas profiles adopt --lib /opt/rocm/lib/libhipblaslt.so.1 tunableop_results0.csv
";

const OPTIONS: &str = "\
ACTION [ARG]...   list (the default), show, which, import or adopt, and what it takes
--lib LIB         (import, which: rocBLAS; adopt: rocBLAS or hipBLASLt) the library build
--arch GFX[:CUs]  (which, adopt) the device's architecture, e.g. gfx942, where this machine's GPU is not the one served (default: this machine's GPUs); for an AITER table, gfx950:256 picks its device
--force           (adopt) adopt a file tuned on another architecture or build
--profiles
--name NAME       (adopt) profile name for a build that has none (default <library>-<version>)
--json            the answer as JSON
";

pub fn cli() -> clap::Command {
    args::command("profiles", ABOUT, AFTER).args(args::table(OPTIONS))
}

const ACTIONS: [&str; 5] = ["list", "show", "which", "import", "adopt"];

pub fn run(a: &Args) -> Result<()> {
    let root = a.profile_store();
    let json = a.has("--json");
    // The action's one argument (none beyond it).
    let arg = || -> Result<Option<&String>> {
        a.at_most_positional(2)?;
        Ok(a.positional.get(1))
    };
    match a.positional.first().map(String::as_str) {
        None | Some("list") => {
            a.at_most_positional(1)?;
            profiles::list(&root, json)
        }
        Some("show") => {
            let name = arg()?.ok_or_else(|| a.usage("show needs a profile NAME"))?;
            profiles::show(&root, name, json)
        }
        Some("which") => {
            let lib = arg()?
                .map(PathBuf::from)
                .or_else(|| a.path("--lib"))
                .ok_or_else(|| a.usage("which needs a library file"))?;
            // A bare soname (librocblas.so.0) is found where `env` looks.
            let lib = env::find_library(&lib);
            let kind = blas_kind(&lib)?;
            profiles::which(
                &root,
                &lib,
                kind,
                &env::Device::new(a.value("--arch")),
                json,
            )
        }
        Some("import") => {
            let files: Vec<PathBuf> = a.positional[1..].iter().map(PathBuf::from).collect();
            if files.is_empty() {
                return Err(a.usage("import needs one or more results files"));
            }
            profiles::import(&root, &a.lib()?, &files, json)
        }
        Some("adopt") => {
            let file = arg()?
                .map(PathBuf::from)
                .ok_or_else(|| a.usage("adopt needs one results file"))?;
            let lib = env::find_library(&a.lib()?);
            let force = a.has("--force");
            match tunedblas_tuner::backends::kind_of(&lib)? {
                tunedblas_tuner::backends::Kind::Hipblaslt => {
                    let device = crate::adopt::device(a.value("--arch")).map_err(|e| a.usage(e))?;
                    crate::adopt::adopt(&root, &lib, a.value("--name"), &file, device, force)
                }
                tunedblas_tuner::backends::Kind::Rocblas => {
                    let device = env::Device::new(a.value("--arch"));
                    profiles::adopt(&root, &lib, &file, &device, force, json)
                }
                k => Err(Error::failed(format!(
                    "a {} profile is made by `tunedblas tune`: no PyTorch file names its configurations",
                    k.name()
                ))),
            }
        }
        Some(other) => Err(a.usage(format!(
            "unknown action '{other}': list, show, which, import or adopt{}",
            suggest(other, ACTIONS)
                .map(|s| format!(" (did you mean '{s}'?)"))
                .unwrap_or_default()
        ))),
    }
}

/// `which` answers for rocBLAS, hipBLASLt and cuBLASLt builds (told from the file's exports,
/// read from the file, not loaded); any other file is refused with exit 3.
fn blas_kind(lib: &std::path::Path) -> Result<&'static str> {
    if let Err(e) = tunedblas_core::elf::defines(lib, "rocblas_create_handle") {
        return Err(Error::not_loaded(format!(
            "cannot read {}: {e}",
            lib.display()
        )));
    }
    match env::kind_of(lib) {
        "unknown" => Err(Error::not_loaded(format!(
            "{} is not rocBLAS, hipBLASLt or cuBLASLt: it exports none of rocblas_create_handle, hipblasLtMatmul, cublasLtMatmul (give the library file the server loads)",
            lib.display()
        ))),
        kind => Ok(kind),
    }
}
