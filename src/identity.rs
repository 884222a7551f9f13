//! Which library build is loaded: its file, a check that the mapped code is that file, and
//! its sha256 — cached per user by (device, inode, size, mtime) so start-up stays cheap.
//!
//! Solution indices are only meaningful for the exact build that produced them, and one
//! build can be loaded from several paths (a system copy and a wheel copy), so a build is
//! identified by content, never by path or version string.

use std::ffi::{c_void, CStr, OsStr};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The file a loaded code address belongs to (`dladdr`), as the dynamic loader opened it.
/// The address is only looked up in the loader's tables, never dereferenced.
pub fn library_of_address(addr: usize) -> Option<PathBuf> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables; info is a valid out-pointer.
    if unsafe { libc::dladdr(addr as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: the loader keeps dli_fname alive while the object is loaded.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(OsStr::from_bytes(name.to_bytes()));
    Some(fs::canonicalize(&path).unwrap_or(path))
}

/// What `/proc/self/maps` says is mapped at an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
    pub path: String,
}

/// Parses one line of `/proc/<pid>/maps`.
pub fn parse_maps_line(line: &str) -> Option<Mapping> {
    let mut it = line.split_ascii_whitespace();
    let range = it.next()?;
    let _perms = it.next()?;
    let _offset = it.next()?;
    let dev = it.next()?;
    let inode = it.next()?.parse().ok()?;
    let path = it.collect::<Vec<_>>().join(" ");
    let (s, e) = range.split_once('-')?;
    let (maj, min) = dev.split_once(':')?;
    Some(Mapping {
        start: usize::from_str_radix(s, 16).ok()?,
        end: usize::from_str_radix(e, 16).ok()?,
        dev_major: u32::from_str_radix(maj, 16).ok()?,
        dev_minor: u32::from_str_radix(min, 16).ok()?,
        inode,
        path,
    })
}

/// The mapping of this process that contains `addr`.
pub fn mapping_of(addr: usize) -> Option<Mapping> {
    let maps = fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(parse_maps_line)
        .find(|m| m.start <= addr && addr < m.end)
}

/// Whether the code mapped at `addr` is still the file at `path`. A library replaced on
/// disk keeps running from its old inode, and hashing the new file would name the wrong
/// build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapCheck {
    Same,
    /// The file on disk is not the one mapped (replaced after loading).
    Replaced,
    /// /proc is not available; nothing could be checked.
    Unknown,
}

pub fn check_mapped_file(addr: usize, path: &Path) -> MapCheck {
    let (Some(map), Ok(meta)) = (mapping_of(addr), fs::metadata(path)) else {
        return MapCheck::Unknown;
    };
    let dev = meta.dev();
    let same_dev = libc::major(dev) == map.dev_major && libc::minor(dev) == map.dev_minor;
    if same_dev && meta.ino() == map.inode {
        MapCheck::Same
    } else {
        MapCheck::Replaced
    }
}

/// Lowercase hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// sha256 of a whole file, streamed (sha2 uses the CPU's SHA instructions where present).
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut f = File::open(path)?;
    let mut hasher = Sha256::new();
    // A smaller buffer where a host's address-space limit has no megabyte to spare (the
    // interposer hashes at start-up, in the host: an allocation failure would abort it).
    let mut buf = Vec::new();
    for size in [1 << 20, 1 << 16, 1 << 12] {
        if buf.try_reserve_exact(size).is_ok() {
            buf.resize(size, 0);
            break;
        }
    }
    if buf.is_empty() {
        return Err(io::Error::from(io::ErrorKind::OutOfMemory));
    }
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        crate::progress::tick();
    }
    Ok(hex(&hasher.finalize()))
}

/// The identity of one library file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub path: PathBuf,
    pub sha256: String,
    /// True when the hash came from the cache rather than reading the file.
    pub cached: bool,
}

/// A per-user cache of file hashes, one small file per (device, inode, size, mtime).
/// Any change to the file changes at least one of those, so a stale hit is not possible
/// short of deliberate tampering with the mtime.
///
/// What it answers decides which build's rows a process serves, so it is untrusted input:
/// the folder must be a real directory (not a symlink) of this user that no one else can
/// write, and an entry must be a regular file of this user of at most [`ENTRY_MAX`] bytes,
/// opened without following a symlink or waiting on a FIFO. A folder that fails is not
/// used at all (every file is hashed), and [`HashCache::refused`] says why.
pub struct HashCache {
    dir: PathBuf,
}

/// The longest a cache entry may be (a hex sha256 and a newline).
pub const ENTRY_MAX: u64 = 128;

impl HashCache {
    pub fn new(dir: PathBuf) -> HashCache {
        HashCache { dir }
    }

    /// The cache the interposer and the command share: `<user cache>/sha256`.
    pub fn for_user() -> HashCache {
        HashCache::new(user_cache_dir().join("sha256"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry a file's hash is kept under: its device, inode, size and mtime.
    pub fn entry_name(meta: &fs::Metadata) -> String {
        format!(
            "{:x}-{:x}-{:x}-{}.{}",
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec()
        )
    }

    /// Why the folder cannot be used, if it cannot: it (once made) or a folder above it is
    /// not this user's own or can be written by others, up to the first folder that belongs
    /// to root (a `/tmp/tunedblas-<uid>` someone else made first is refused).
    pub fn refused(&self) -> Option<String> {
        if let Ok(meta) = fs::symlink_metadata(&self.dir) {
            if let Err(e) = check_private(&self.dir, &meta) {
                return Some(e.to_string());
            }
        }
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        for above in self.dir.ancestors().skip(1) {
            let Ok(meta) = fs::metadata(above) else {
                continue; // not made yet
            };
            let sticky = meta.mode() & libc::S_ISVTX != 0;
            if meta.uid() == 0 && uid != 0 && (meta.mode() & 0o022 == 0 || sticky) {
                return None;
            }
            if meta.uid() != uid {
                return Some(format!(
                    "{}: {} belongs to another user; not using it",
                    self.dir.display(),
                    above.display()
                ));
            }
            if meta.mode() & 0o022 != 0 && !sticky {
                return Some(format!(
                    "{}: {} can be written by other users; not using it",
                    self.dir.display(),
                    above.display()
                ));
            }
        }
        None
    }

    pub fn get(&self, meta: &fs::Metadata) -> Option<String> {
        if self.refused().is_some() {
            return None;
        }
        let text = read_small_own_file(&self.dir.join(Self::entry_name(meta)), ENTRY_MAX)?;
        let sha = text.trim();
        (sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit())).then(|| sha.to_owned())
    }

    /// Stores a hash; failures are ignored (the cache is only an optimisation), and a
    /// failed store leaves no temporary behind.
    pub fn put(&self, meta: &fs::Metadata, sha: &str) {
        let name = Self::entry_name(meta);
        let tmp = self.dir.join(format!(".{name}.{}", std::process::id()));
        let stored = (|| -> io::Result<()> {
            private_dir(&self.dir)?;
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)?;
            // Inside a host: a file-size limit fails the write, never ends the host.
            crate::process::quiet_write(|| f.write_all(sha.as_bytes()))?;
            drop(f);
            fs::rename(&tmp, self.dir.join(name))
        })();
        if stored.is_err() {
            let _ = fs::remove_file(&tmp);
        }
    }

    /// The identity of `path`, from the cache when possible.
    pub fn identify(&self, path: &Path) -> io::Result<Identity> {
        let meta = fs::metadata(path)?;
        if let Some(sha256) = self.get(&meta) {
            return Ok(Identity {
                path: path.to_owned(),
                sha256,
                cached: true,
            });
        }
        let sha256 = sha256_file(path)?;
        // Only cache if the file did not change while it was read.
        if fs::metadata(path).map(|m2| Self::entry_name(&m2) == Self::entry_name(&meta))? {
            self.put(&meta, &sha256);
        }
        Ok(Identity {
            path: path.to_owned(),
            sha256,
            cached: false,
        })
    }
}

/// The text of a small file of this user: a regular file (opened without following a
/// symlink, without waiting on a FIFO or touching a device) of at most `max` bytes. `None`
/// for anything else.
pub fn read_small_own_file(path: &Path, max: u64) -> Option<String> {
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    if !meta.file_type().is_file() || meta.uid() != uid || meta.len() > max {
        return None;
    }
    let mut text = String::new();
    (&mut f).take(max).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The check [`private_dir`] makes of a folder: a real directory (not a symlink) of this
/// user that no one else can write.
fn check_private(dir: &Path, meta: &fs::Metadata) -> io::Result<()> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let why = if !meta.file_type().is_dir() {
        "is not a directory (a symlink or a file)"
    } else if meta.uid() != uid {
        "belongs to another user"
    } else if meta.mode() & 0o022 != 0 {
        "can be written by other users"
    } else {
        return Ok(());
    };
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{} {why}; not using it", dir.display()),
    ))
}

/// Creates `dir` (and parents) with mode 0700 and checks that the final folder is a real
/// directory owned by us that no one else can write, not a symlink planted by someone else.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    make_dirs(dir, 0o700)?;
    check_private(dir, &fs::symlink_metadata(dir)?)
}

/// Makes `dir` and every missing folder above it with exactly `mode`, whatever the host's
/// umask: under an outside tester's `umask 0777` the folders made for us, a parent such as
/// `~/.cache` included, came out mode 000, unusable by their owner and by every program
/// run after. Each folder made here is set to `mode`; folders that were there are left as
/// they are.
pub fn make_dirs(dir: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut missing = Vec::new();
    let mut at = dir;
    while fs::symlink_metadata(at).is_err() {
        missing.push(at);
        match at.parent() {
            Some(up) if !up.as_os_str().is_empty() => at = up,
            _ => break,
        }
    }
    for d in missing.into_iter().rev() {
        match fs::DirBuilder::new().mode(mode).create(d) {
            // By path: a folder the umask left mode 000 cannot be opened to fchmod it. Only
            // its owner, who just made it where only they may write, could swap it.
            Ok(()) => fs::set_permissions(d, fs::Permissions::from_mode(mode))?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The per-user cache folder:
/// 1. `$TUNEDBLAS_CACHE_DIR` (made if missing);
/// 2. `$XDG_CACHE_HOME/tunedblas`, if that folder exists;
/// 3. `$HOME/.cache/tunedblas`, if `$HOME` exists (a service user's `HOME=/nonexistent`
///    is never created);
/// 4. `$XDG_RUNTIME_DIR/tunedblas` (the user's private runtime folder), if it exists;
/// 5. else `/tmp/tunedblas-<uid>`: a shared folder, so used only while it is this user's
///    own and no one else can write it (checked at every use, [`private_dir`],
///    [`HashCache::refused`]: a folder someone else made first is refused, never trusted).
///
/// Values that are not UTF-8 are used as they are.
pub fn user_cache_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = env("TUNEDBLAS_CACHE_DIR") {
        return d;
    }
    let existing = |k: &str| env(k).filter(|d| d.is_absolute() && d.is_dir());
    if let Some(d) = existing("XDG_CACHE_HOME") {
        return d.join("tunedblas");
    }
    if let Some(d) = existing("HOME") {
        return d.join(".cache").join("tunedblas");
    }
    if let Some(d) = existing("XDG_RUNTIME_DIR") {
        return d.join("tunedblas");
    }
    // SAFETY: getuid cannot fail.
    PathBuf::from(format!("/tmp/tunedblas-{}", unsafe { libc::getuid() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tunedblas-id-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn maps_line_parses() {
        let m = parse_maps_line(
            "7f12a000-7f12b000 r-xp 00001000 fd:01 1234567   /opt/rocm/lib/librocblas.so.4.2",
        )
        .unwrap();
        assert_eq!((m.start, m.end), (0x7f12a000, 0x7f12b000));
        assert_eq!((m.dev_major, m.dev_minor, m.inode), (0xfd, 1, 1234567));
        assert_eq!(m.path, "/opt/rocm/lib/librocblas.so.4.2");
        assert!(parse_maps_line("garbage").is_none());
    }

    #[test]
    fn sha256_of_known_content() {
        let d = tempdir("sha");
        let f = d.join("abc");
        fs::write(&f, b"abc").unwrap();
        assert_eq!(
            sha256_file(&f).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn cache_hits_and_invalidates_on_change() {
        let d = tempdir("cache");
        let lib = d.join("lib.so");
        fs::write(&lib, b"build one").unwrap();
        let cache = HashCache::new(d.join("cache"));
        let first = cache.identify(&lib).unwrap();
        assert!(!first.cached);
        let second = cache.identify(&lib).unwrap();
        assert!(second.cached);
        assert_eq!(first.sha256, second.sha256);
        // A replaced file (new inode, new size) is hashed again, not served from the cache.
        fs::remove_file(&lib).unwrap();
        fs::write(&lib, b"build two, longer").unwrap();
        let third = cache.identify(&lib).unwrap();
        assert!(!third.cached);
        assert_ne!(third.sha256, first.sha256);
    }

    #[test]
    fn own_test_binary_is_mapped_from_its_file() {
        let addr = own_test_binary_is_mapped_from_its_file as *const () as usize;
        let path = library_of_address(addr).expect("dladdr");
        assert_eq!(check_mapped_file(addr, &path), MapCheck::Same);
        assert_eq!(
            check_mapped_file(addr, Path::new("/proc/self/status")),
            MapCheck::Replaced
        );
    }

    #[test]
    fn the_cache_refuses_entries_and_folders_it_cannot_trust() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempdir("untrusted");
        let lib = d.join("lib.so");
        fs::write(&lib, b"build one").unwrap();
        let meta = fs::metadata(&lib).unwrap();
        let dir = d.join("cache");
        let cache = HashCache::new(dir.clone());
        let truth = cache.identify(&lib).unwrap().sha256;
        let entry = dir.join(HashCache::entry_name(&meta));
        let plant = |what: &dyn Fn(&Path)| {
            fs::remove_file(&entry).unwrap();
            what(&entry);
            let started = std::time::Instant::now();
            let got = cache.identify(&lib).unwrap();
            assert!(started.elapsed() < std::time::Duration::from_secs(10));
            assert_eq!(got.sha256, truth, "the file itself is hashed");
            assert!(!got.cached);
        };
        // Another build's hash behind a symlink, a FIFO (a read would wait forever),
        // /dev/zero (a read would never end), an entry far too long.
        let other = d.join("other");
        fs::write(&other, "0".repeat(64)).unwrap();
        plant(&|e| std::os::unix::fs::symlink(&other, e).unwrap());
        plant(&|e| {
            let c = std::ffi::CString::new(e.as_os_str().as_bytes()).unwrap();
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        });
        plant(&|e| std::os::unix::fs::symlink("/dev/zero", e).unwrap());
        plant(&|e| fs::write(e, format!("{}\n{}", "0".repeat(64), "x".repeat(4096))).unwrap());
        // A folder others can write is not used at all, and says why.
        fs::remove_file(&entry).unwrap();
        fs::write(&entry, "0".repeat(64)).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(cache
            .refused()
            .unwrap()
            .contains("can be written by other users"));
        let got = cache.identify(&lib).unwrap();
        assert_eq!((got.sha256.as_str(), got.cached), (truth.as_str(), false));
        // Nor a symlink to a folder.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let linked = HashCache::new(link);
        assert!(linked.refused().is_some());
        assert!(!linked.identify(&lib).unwrap().cached);
        // The trusted folder with its own entry is used.
        fs::write(&entry, &truth).unwrap();
        assert!(cache.identify(&lib).unwrap().cached);
        // A folder above it that others can write (as someone else's /tmp/tunedblas-<uid>
        // would be) refuses it too.
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(cache
            .refused()
            .unwrap()
            .contains("can be written by other users"));
        assert!(!cache.identify(&lib).unwrap().cached);
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
    }

    #[test]
    fn private_dir_refuses_symlink() {
        let d = tempdir("priv");
        let target = d.join("elsewhere");
        fs::create_dir(&target).unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(private_dir(&link).is_err());
        assert!(private_dir(&d.join("fresh/nested")).is_ok());
    }
}
