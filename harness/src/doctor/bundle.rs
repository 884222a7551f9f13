//! The doctor's bundle as one file to attach to a bug report: every file of the bundle
//! folder in a gzip-compressed tar (POSIX ustar, which every `tar` reads), written by hand
//! over `flate2` (already built for the PNG encoder) rather than another crate.

use std::io::Write;
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
            let name = rel.join(e.file_name());
            if skip.iter().any(|s| e.file_name() == *s) {
                continue;
            }
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

/// A ustar header for a regular file `name` of `size` bytes; `None` where the name does
/// not fit (100 bytes, or a 155-byte prefix and a 100-byte name split at a `/`).
fn header(name: &str, size: u64, mtime: u64) -> Option<[u8; 512]> {
    let mut h = [0u8; 512];
    let (prefix, base) = if name.len() <= 100 {
        ("", name)
    } else {
        let cut = name
            .char_indices()
            .filter(|&(i, c)| c == '/' && i <= 155 && name.len() - i - 1 <= 100)
            .map(|(i, _)| i)
            .next()?;
        (&name[..cut], &name[cut + 1..])
    };
    let put = |h: &mut [u8; 512], at: usize, v: &[u8]| h[at..at + v.len()].copy_from_slice(v);
    put(&mut h, 0, base.as_bytes());
    put(&mut h, 100, b"0000644\0");
    put(&mut h, 108, b"0000000\0");
    put(&mut h, 116, b"0000000\0");
    put(&mut h, 124, format!("{size:011o}\0").as_bytes());
    put(&mut h, 136, format!("{mtime:011o}\0").as_bytes());
    h[156] = b'0';
    put(&mut h, 257, b"ustar\0");
    put(&mut h, 263, b"00");
    put(&mut h, 345, prefix.as_bytes());
    // The checksum is taken with its own field as spaces.
    put(&mut h, 148, b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
    Some(h)
}

/// Writes `<dir>/<name>`: every file of `dir` (but `skip` and the archive itself) under the
/// folder's own name. Returns the files left out (a name too long for ustar).
pub fn archive(dir: &Path, name: &str, skip: &[&str]) -> std::io::Result<Vec<String>> {
    let top = dir
        .file_name()
        .map_or("bundle".into(), |n| n.to_string_lossy().into_owned());
    let mut skip = skip.to_vec();
    skip.push(name);
    let partial = format!(".{name}.partial");
    skip.push(&partial);
    let tmp = dir.join(&partial);
    let mut gz = GzEncoder::new(std::fs::File::create(&tmp)?, Compression::default());
    let mut left_out = Vec::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for rel in files(dir, &skip) {
        let data = std::fs::read(dir.join(&rel))?;
        let path = format!("{top}/{}", rel.display());
        let Some(h) = header(&path, data.len() as u64, now) else {
            left_out.push(path);
            continue;
        };
        gz.write_all(&h)?;
        gz.write_all(&data)?;
        let pad = (512 - data.len() % 512) % 512;
        gz.write_all(&vec![0u8; pad])?;
    }
    gz.write_all(&[0u8; 1024])?;
    gz.finish()?.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    Ok(left_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_carry_size_and_a_checksum_tar_accepts() {
        let h = header("doctor-x/logs/tune.stderr.txt", 1234, 0).unwrap();
        assert_eq!(&h[124..135], b"00000002322");
        let stored = u32::from_str_radix(std::str::from_utf8(&h[148..154]).unwrap(), 8).unwrap();
        let mut blank = h;
        blank[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, blank.iter().map(|&b| u32::from(b)).sum::<u32>());
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(90));
        let h = header(&long, 1, 0).unwrap();
        assert_eq!(&h[345..465], "d".repeat(120).as_bytes());
        assert!(header(&"x".repeat(300), 1, 0).is_none());
    }
}
