//! Whether a shared library file exports a symbol, read from the file (never loaded).
//!
//! `tunedblas profiles which FILE` must tell "not rocBLAS" from "a rocBLAS build with no
//! profile" without loading the file: the real libraries need a newer glibc than many
//! machines running the tool have (rocBLAS 5.5.1 needs 2.38), loading runs their
//! constructors, and a 1 GB file would be mapped for one question. Only the section headers,
//! the dynamic symbol table and its strings are read.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

const SHT_DYNSYM: u32 = 11;
const SHN_UNDEF: u16 = 0;

fn bad(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{} is not a 64-bit ELF shared object ({why})",
            path.display()
        ),
    )
}

fn read_at(f: &mut File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0; len];
    f.read_exact(&mut buf)?;
    Ok(buf)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Whether the ELF file at `path` defines (exports) the dynamic symbol `name`. An error when
/// the file cannot be read or is not a little-endian 64-bit ELF file.
pub fn defines(path: &Path, name: &str) -> io::Result<bool> {
    let mut f = File::open(path)?;
    let header = read_at(&mut f, 0, 64).map_err(|_| bad(path, "too short"))?;
    if &header[..4] != b"\x7fELF" {
        return Err(bad(path, "no ELF magic"));
    }
    if header[4] != 2 || header[5] != 1 {
        return Err(bad(path, "not 64-bit little-endian"));
    }
    let (shoff, shentsize, shnum) = (
        u64_at(&header, 0x28),
        u16_at(&header, 0x3a) as usize,
        u16_at(&header, 0x3c) as usize,
    );
    if shentsize < 64 || shnum == 0 || shnum > 65_535 {
        return Err(bad(path, "no section headers"));
    }
    let sections = read_at(&mut f, shoff, shentsize * shnum)?;
    let section = |i: usize| &sections[i * shentsize..(i + 1) * shentsize];
    let Some(dynsym) = (0..shnum).find(|&i| u32_at(section(i), 4) == SHT_DYNSYM) else {
        return Ok(false);
    };
    let s = section(dynsym);
    let (sym_off, sym_size, link, entsize) = (
        u64_at(s, 0x18),
        u64_at(s, 0x20),
        u32_at(s, 0x28) as usize,
        u64_at(s, 0x38),
    );
    if entsize < 24 || link >= shnum || sym_size > (1 << 30) {
        return Err(bad(path, "a damaged symbol table"));
    }
    let strtab = section(link);
    let (str_off, str_size) = (u64_at(strtab, 0x18), u64_at(strtab, 0x20));
    if str_size > (1 << 30) {
        return Err(bad(path, "a damaged string table"));
    }
    let symbols = read_at(&mut f, sym_off, sym_size as usize)?;
    let strings = read_at(&mut f, str_off, str_size as usize)?;
    let want = name.as_bytes();
    Ok(symbols.chunks_exact(entsize as usize).any(|sym| {
        let at = u32_at(sym, 0) as usize;
        let defined = u16_at(sym, 6) != SHN_UNDEF;
        defined
            && strings
                .get(at..)
                .and_then(|rest| rest.split(|&c| c == 0).next())
                .is_some_and(|n| n == want)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary's own libc defines `malloc` and only refers to nothing we name.
    fn libc_path() -> std::path::PathBuf {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
            .map(std::path::PathBuf::from)
            .expect("libc is mapped")
    }

    #[test]
    fn a_library_defines_its_exports_and_not_what_it_lacks() {
        let libc = libc_path();
        assert!(defines(&libc, "malloc").unwrap());
        assert!(!defines(&libc, "rocblas_create_handle").unwrap());
        // A prefix of a real name is not the name.
        assert!(!defines(&libc, "mallo").unwrap());
    }

    #[test]
    fn what_is_not_elf_is_an_error_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("tunedblas-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("not-elf.so");
        std::fs::write(&p, b"hello, this is text").unwrap();
        let e = defines(&p, "x").unwrap_err();
        assert!(e.to_string().contains("not-elf.so"), "{e}");
        std::fs::write(&p, b"\x7fELF").unwrap();
        assert!(defines(&p, "x").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
