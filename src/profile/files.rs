//! Reading the files of a profile folder: only regular files of bounded size, so a FIFO,
//! a device or a runaway file never blocks or floods the host.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// The largest results file the loader reads: 1 GiB (some 13 million rows of PyTorch's
/// form). A larger file is refused whole, with one line, rather than read: a file that
/// never ends (a symlink to `/dev/zero` is refused before that, as not a regular file) or a
/// runaway writer must not take the host's memory with it.
pub const MAX_RESULTS_FILE_BYTES: u64 = 1 << 30;

/// The largest `profiles.json` or `provenance.json` read: 64 MiB.
pub const MAX_JSON_FILE_BYTES: u64 = 64 << 20;

/// Why a file of the profile folder was not read.
#[derive(Debug)]
pub enum ReadError {
    /// It could not be opened or read (missing, no permission, a directory, ...).
    Io(io::Error),
    /// Not a regular file, in words: `a FIFO (named pipe)`, `a symlink to /dev/zero (a
    /// character device)`, ... Opening a FIFO for reading would block until a writer
    /// came, and a device may never end.
    NotRegular(String),
    /// Larger than the limit it was read with.
    TooLarge { size: u64, limit: u64 },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::NotRegular(what) => write!(f, "{what}, not a regular file"),
            ReadError::TooLarge { size, limit } => write!(
                f,
                "{size} bytes, more than the {} it may have",
                bytes_text(*limit)
            ),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<ReadError> for io::Error {
    fn from(e: ReadError) -> io::Error {
        match e {
            ReadError::Io(e) => e,
            other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

fn bytes_text(n: u64) -> String {
    if n >= 1 << 30 && n & ((1 << 30) - 1) == 0 {
        format!("{} GiB", n >> 30)
    } else if n >= 1 << 20 && n & ((1 << 20) - 1) == 0 {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// What a file that is not regular is, in words, and the symlink that led there if any.
fn describe_special(path: &Path, ft: std::fs::FileType) -> String {
    let kind = if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "a special file"
    };
    match std::fs::read_link(path) {
        Ok(target) => format!("a symlink to {} ({kind})", target.display()),
        Err(_) => kind.to_string(),
    }
}

/// Checks what `meta` (of `path`, symlinks followed) describes: a regular file of at most
/// `limit` bytes. A directory is the error reading one gives (`EISDIR`).
pub(super) fn check_regular(
    path: &Path,
    meta: &std::fs::Metadata,
    limit: u64,
) -> Result<u64, ReadError> {
    let ft = meta.file_type();
    if ft.is_dir() {
        return Err(ReadError::Io(io::Error::from_raw_os_error(libc::EISDIR)));
    }
    if !ft.is_file() {
        return Err(ReadError::NotRegular(describe_special(path, ft)));
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge {
            size: meta.len(),
            limit,
        });
    }
    Ok(meta.len())
}

/// Opens a file of the profile folder for reading, if it is a regular file (symlinks are
/// followed) of at most `limit` bytes; returns it with its size. What it is is checked
/// with `stat` before opening, so a device is never opened (opening some has effects),
/// and again with `fstat` on what was opened; the open is `O_NONBLOCK` (a FIFO swapped in
/// between cannot block it), `O_NOCTTY` and `O_CLOEXEC`.
pub fn open_regular(path: &Path, limit: u64) -> Result<(File, u64), ReadError> {
    let meta = std::fs::metadata(path).map_err(ReadError::Io)?;
    check_regular(path, &meta, limit)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(ReadError::Io)?;
    let size = check_regular(path, &file.metadata().map_err(ReadError::Io)?, limit)?;
    Ok((file, size))
}

/// Reads a whole file of the profile folder with [`open_regular`]'s checks, never more
/// than `limit` bytes (a file that grows past it while read is refused too).
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let (file, size) = open_regular(path, limit)?;
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// The problem line for a rank file that was not read: the file, what it is, what to do.
pub(crate) fn unreadable(path: &Path, rank: usize, e: &ReadError) -> String {
    let p = path.display();
    match e {
        ReadError::Io(e) => format!("{p}: unreadable ({e}); rank {rank} serves nothing"),
        ReadError::NotRegular(what) => format!(
            "{p}: {what}, not a regular file, so it is not read; rank {rank} serves nothing; put the results file itself there, or remove it"
        ),
        ReadError::TooLarge { size, limit } => format!(
            "{p}: {size} bytes, more than the {} a results file may have, so it is not read; rank {rank} serves nothing; prune the profile or split it",
            bytes_text(*limit)
        ),
    }
}

/// Whether two rank files hold the same bytes: the same file (inode), or regular files of
/// one size whose contents compare equal (read in 64 KiB blocks, never held whole).
pub(super) fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    if (ma.dev(), ma.ino()) == (mb.dev(), mb.ino()) {
        return ma.is_file();
    }
    if ma.len() != mb.len() {
        return false;
    }
    let limit = MAX_RESULTS_FILE_BYTES;
    let (Ok((fa, _)), Ok((fb, _))) = (open_regular(a, limit), open_regular(b, limit)) else {
        return false;
    };
    let (mut ra, mut rb) = (fa.take(limit + 1), fb.take(limit + 1));
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let na = match read_full(&mut ra, &mut ba) {
            Ok(n) => n,
            Err(_) => return false,
        };
        let nb = match read_full(&mut rb, &mut bb) {
            Ok(n) => n,
            Err(_) => return false,
        };
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

/// Fills `buf` from `r` as far as the data goes; the bytes read (fewer only at the end).
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
