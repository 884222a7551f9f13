//! The doctor's bundle as one file to attach to a bug report: every file of the bundle
//! folder in a gzip-compressed tar (the `tar` crate over `flate2`, which every `tar -xzf`
//! reads).

use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::Compression;

/// Every file under `dir`, relative to it, in name order (`skip`ped names left out).
fn files(dir: &Path, skip: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(dir.join(&rel)) else {
            continue;
        };
        for e in rd.flatten() {
            if skip.iter().any(|s| e.file_name() == *s) {
                continue;
            }
            let name = rel.join(e.file_name());
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(name),
                Ok(t) if t.is_file() => out.push(name),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// Writes `<dir>/<name>`: every file of `dir` (but `skip` and the archive itself) under the
/// folder's own name, through a partial file renamed at the end, so a bundle never holds a
/// half-written archive.
pub fn archive(dir: &Path, name: &str, skip: &[&str]) -> std::io::Result<()> {
    let top = dir
        .file_name()
        .map_or("bundle".into(), |n| n.to_string_lossy().into_owned());
    let partial = format!(".{name}.partial");
    let mut skip = skip.to_vec();
    skip.extend([name, partial.as_str()]);
    let tmp = dir.join(&partial);
    let gz = GzEncoder::new(std::fs::File::create(&tmp)?, Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    for rel in files(dir, &skip) {
        tar.append_path_with_name(dir.join(&rel), Path::new(&top).join(&rel))?;
    }
    tar.into_inner()?.finish()?.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))
}
