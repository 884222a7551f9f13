//! The interposer's files: where they go, what they are called, and how they are written
//! without owning anything the host can see or collide with.
//!
//! - **No descriptor is held between writes.** Every write opens the folder (`O_PATH`, never
//!   through a symlink), checks it, opens the file relative to it, writes, and closes both.
//!   A host that closes every descriptor (`close_range`, as daemons do) and opens its own
//!   files can never find our bytes in them, nor find its `open` returning a number other
//!   than the one it would get without us. Every descriptor is close-on-exec and is moved
//!   above 2 while held, so a host that closed stdin, stdout or stderr never writes into
//!   our file through that number.
//! - **Names are unique per process start** ([`ProcessName`]): `<host>-<pid>-<ticks>.<nonce>`,
//!   where `<ticks>` is the start time (`/proc/self/stat`) and `<nonce>` 64 random bits, so
//!   two containers' PID 1 started in the same clock tick on one host still write apart;
//!   a miss log is created exclusively, and appended to only while it is the file we made.
//! - **Little stack, no allocation** on every write ([`Name`], [`Out`]): names are built in
//!   a 256-byte buffer, text goes out through a 512-byte one, and only `libc` calls are
//!   made (no `std::fs`, which allocates for long paths). The exit paths, which a signal
//!   handler on a small alternate stack may run, write through here.
//! - **Files we read or write are checked**: a folder is a real directory of ours that
//!   others cannot write (or, named by the user, a shared sticky one); a file we append to
//!   is a regular file of ours with one link.

use std::ffi::{c_int, CStr, CString};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// A descriptor of ours, closed when dropped; never 0, 1 or 2.
#[derive(Debug)]
pub struct Fd(c_int);

impl Fd {
    /// Takes `fd` (from an `open` that may have returned a number the host closed), moving
    /// it above 2 (see the module docs).
    fn own(fd: c_int) -> io::Result<Fd> {
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        if fd > 2 {
            return Ok(Fd(fd));
        }
        // SAFETY: fcntl and close on a descriptor we just opened.
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        let err = io::Error::last_os_error();
        unsafe { libc::close(fd) };
        if high < 0 {
            return Err(err);
        }
        Ok(Fd(high))
    }

    pub fn raw(&self) -> c_int {
        self.0
    }

    fn stat(&self) -> io::Result<libc::stat> {
        // SAFETY: an out-pointer to a stat buffer; our own descriptor.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(self.0, &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st)
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.0) };
    }
}

fn uid() -> libc::uid_t {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

fn refused(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why)
}

/// Who may own a folder we write into.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Trust {
    /// Ours, and no one else can write it (the hash cache: what we read back from it
    /// chooses which rows a process serves).
    Private,
    /// Ours and not writable by others, or a shared folder with the sticky bit (like
    /// `/tmp`: no one can remove or replace another's files), which a user may name as the
    /// miss folder for several users' processes.
    OursOrSticky,
}

/// Why a folder's status says it cannot be used, checked on its `stat`.
pub fn check_folder(st: &libc::stat, trust: Trust) -> io::Result<()> {
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(refused("not a directory; refusing to write there"));
    }
    let ours = st.st_uid == uid();
    let ok = match trust {
        Trust::Private => ours && st.st_mode & 0o022 == 0,
        Trust::OursOrSticky => (ours && st.st_mode & 0o002 == 0) || st.st_mode & libc::S_ISVTX != 0,
    };
    if ok {
        Ok(())
    } else if !ours && trust == Trust::Private {
        Err(refused(
            "the folder belongs to another user; refusing to write there",
        ))
    } else if !ours && st.st_mode & libc::S_ISVTX == 0 {
        Err(refused(
            "the folder belongs to another user and is not a sticky shared folder; refusing to write there",
        ))
    } else {
        Err(refused(
            "other users can write the folder; refusing to write there",
        ))
    }
}

/// A folder the interposer writes into, kept as its path (never as a descriptor).
pub struct Folder {
    path: CString,
    trust: Trust,
    /// The process's root directory when the folder was named (device, inode): its path
    /// means that folder only while the root is the same.
    root: Option<(u64, u64)>,
}

/// The identity of the process's root directory now (`None` where it cannot be read).
fn root_now() -> Option<(u64, u64)> {
    // SAFETY: stat into a buffer of ours.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::stat(c"/".as_ptr(), &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

impl Folder {
    /// `None` when the path holds a NUL byte (no file system can name it).
    pub fn new(path: &Path, trust: Trust) -> Option<Folder> {
        Some(Folder {
            path: CString::new(path.as_os_str().as_bytes()).ok()?,
            trust,
            root: root_now(),
        })
    }

    pub fn path(&self) -> &Path {
        Path::new(std::ffi::OsStr::from_bytes(self.path.to_bytes()))
    }

    /// The folder, opened for one write (never through a symlink) and checked. Allocates
    /// nothing.
    pub fn open(&self) -> io::Result<Fd> {
        // A host that confines itself (`chroot`, `pivot_root`) after its first calls: the
        // path now leads into its jail, where nothing of ours belongs (an outside tester's
        // sandboxed worker found its jail holding a miss folder). What is kept in memory
        // still reaches the stats and the summary.
        if self.root.is_some() && root_now() != self.root {
            return Err(refused(
                "the process changed its root directory since start-up; not writing under the new root",
            ));
        }
        // SAFETY: a NUL-terminated path.
        let fd = Fd::own(unsafe {
            libc::open(
                self.path.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        })
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOTDIR | libc::ELOOP) if self.is_symlink() => {
                refused("the folder is a symbolic link; refusing to write there")
            }
            _ => e,
        })?;
        check_folder(&fd.stat()?, self.trust)?;
        Ok(fd)
    }

    fn is_symlink(&self) -> bool {
        // SAFETY: lstat into a buffer of ours.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        unsafe {
            libc::lstat(self.path.as_ptr(), &mut st) == 0
                && st.st_mode & libc::S_IFMT == libc::S_IFLNK
        }
    }

    /// [`Folder::open`], making the folder first (mode 0700, or 0750 with
    /// `TUNEDBLAS_GROUP_READ`) if it is missing. Only where allocation is allowed (not at
    /// an exit, which may run in a signal handler).
    pub fn open_or_make(&self) -> io::Result<Fd> {
        match self.open() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Past the host's umask, parents made for us included.
                tunedblas_core::identity::make_dirs(self.path(), mode(true))?;
                self.open()
            }
            other => other,
        }
    }
}

/// A file name (one path component) built on the stack: at most 255 bytes, NUL-terminated.
pub struct Name {
    buf: [u8; 256],
    len: usize,
}

impl Name {
    pub fn new() -> Name {
        Name {
            buf: [0; 256],
            len: 0,
        }
    }

    pub fn as_cstr(&self) -> &CStr {
        // SAFETY: `write` keeps one NUL byte after the text and refuses NUL bytes in it.
        unsafe { CStr::from_bytes_with_nul_unchecked(&self.buf[..=self.len]) }
    }
}

impl io::Write for Name {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.len + b.len() >= self.buf.len() || b.contains(&0) || b.contains(&b'/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "file name too long",
            ));
        }
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
        self.buf[self.len] = 0;
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes all of `bytes` to `fd`, going on after a signal interrupted the write; a
/// file-size limit fails it rather than end the host ([`crate::log::without_our_signals`]).
fn write_all(fd: c_int, bytes: &[u8]) -> io::Result<()> {
    crate::log::without_our_signals(|| write_all_now(fd, bytes))
}

fn write_all_now(fd: c_int, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: writing from a live slice to our own descriptor.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the file takes no more bytes (disk full?)",
            ));
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// Buffered output to a file of ours through a 512-byte stack buffer.
pub struct Out {
    fd: c_int,
    buf: [u8; 512],
    len: usize,
}

impl io::Write for Out {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.len + b.len() > self.buf.len() {
            self.flush()?;
        }
        if b.len() > self.buf.len() {
            write_all(self.fd, b)?;
        } else {
            self.buf[self.len..self.len + b.len()].copy_from_slice(b);
            self.len += b.len();
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        let n = std::mem::take(&mut self.len);
        write_all(self.fd, &self.buf[..n])
    }
}

const NEW_FILE: c_int = libc::O_WRONLY
    | libc::O_CREAT
    | libc::O_EXCL
    | libc::O_NOFOLLOW
    | libc::O_CLOEXEC
    | libc::O_NONBLOCK;

/// `TUNEDBLAS_GROUP_READ`: the files and folders made here are readable by the process's
/// group too. Set once when a backend starts ([`share_with_group`]).
static GROUP_READ: AtomicBool = AtomicBool::new(false);

/// Files made from now on are 0640 and a folder made 0750 (`on`), or 0600 and 0700.
pub fn share_with_group(on: bool) {
    GROUP_READ.store(on, Ordering::Relaxed);
}

/// The mode of a file or folder made now: the owner's alone, or readable by the group.
fn mode(folder: bool) -> libc::mode_t {
    match (GROUP_READ.load(Ordering::Relaxed), folder) {
        (false, false) => 0o600,
        (false, true) => 0o700,
        (true, false) => 0o640,
        (true, true) => 0o750,
    }
}

fn open_at(dir: &Fd, name: &CStr, flags: c_int) -> io::Result<Fd> {
    let mode = mode(false);
    // SAFETY: a folder descriptor of ours and a NUL-terminated name.
    let f =
        Fd::own(unsafe { libc::openat(dir.raw(), name.as_ptr(), flags, mode as libc::c_uint) })?;
    // The host's umask would take bits away again: a service's `UMask=0077` the group's
    // read, an outside tester's `umask 0777` our own (the log could not be opened again).
    if flags & libc::O_CREAT != 0 {
        // SAFETY: a descriptor of ours.
        unsafe { libc::fchmod(f.raw(), mode) };
    }
    Ok(f)
}

fn unlink_at(dir: &Fd, name: &CStr) {
    // SAFETY: as above.
    unsafe { libc::unlinkat(dir.raw(), name.as_ptr(), 0) };
}

/// Writes `target` in `folder` whole or not at all: `body` writes into the temporary `tmp`
/// (created exclusively; one left by a writer that died mid-write under the same name is
/// ours to replace), which is then renamed over `target` (replacing a symlink planted there
/// without following it). Allocates nothing.
pub fn replace(
    folder: &Folder,
    target: &Name,
    tmp: &Name,
    body: impl FnOnce(&mut Out) -> io::Result<()>,
) -> io::Result<()> {
    let dir = folder.open()?;
    let f = match open_at(&dir, tmp.as_cstr(), NEW_FILE) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            unlink_at(&dir, tmp.as_cstr());
            open_at(&dir, tmp.as_cstr(), NEW_FILE)?
        }
        other => other?,
    };
    let mut out = Out {
        fd: f.raw(),
        buf: [0; 512],
        len: 0,
    };
    let written = body(&mut out).and_then(|()| out.flush());
    drop(f);
    let renamed = written.and_then(|()| {
        // SAFETY: both names relative to our folder descriptor.
        let r = unsafe {
            libc::renameat(
                dir.raw(),
                tmp.as_cstr().as_ptr(),
                dir.raw(),
                target.as_cstr().as_ptr(),
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    });
    if renamed.is_err() {
        unlink_at(&dir, tmp.as_cstr());
    }
    renamed
}

/// Removes `name` from `folder` (a missing file is no error).
pub fn remove(folder: &Folder, name: &Name) -> io::Result<()> {
    let dir = folder.open()?;
    // SAFETY: a name relative to our folder descriptor.
    if unsafe { libc::unlinkat(dir.raw(), name.as_cstr().as_ptr(), 0) } != 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::NotFound {
            return Err(e);
        }
    }
    Ok(())
}

/// Which file an append log is: (device, inode) of the file we created, 0 before.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Made {
    dev: u64,
    ino: u64,
}

/// Appends `line` to the log `name` in `folder` with one `write(2)`, creating the log
/// exclusively the first time (`made` is then set to it). Later appends go only into the
/// file we made (a regular file of ours, one link, the same inode); if it was removed it is
/// made again. A short write (disk full, file size limit) is rolled back, so the file never
/// ends in half a line. Allocates nothing.
pub fn append(folder: &Folder, name: &Name, made: &mut Made, line: &[u8]) -> io::Result<()> {
    let dir = folder.open_or_make()?;
    let existing = if *made == Made::default() {
        None
    } else {
        match open_at(
            &dir,
            name.as_cstr(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        ) {
            Ok(f) => Some(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        }
    };
    let f = match existing {
        Some(f) => {
            let st = f.stat()?;
            let same = Made {
                dev: st.st_dev,
                ino: st.st_ino,
            } == *made;
            if !same
                || st.st_mode & libc::S_IFMT != libc::S_IFREG
                || st.st_nlink != 1
                || st.st_uid != uid()
            {
                return Err(refused(
                    "the miss log was replaced by a file that is not the one this process made; refusing to write it",
                ));
            }
            f
        }
        None => {
            let f = open_at(&dir, name.as_cstr(), NEW_FILE | libc::O_APPEND)?;
            let st = f.stat()?;
            *made = Made {
                dev: st.st_dev,
                ino: st.st_ino,
            };
            f
        }
    };
    let before = f.stat()?.st_size;
    // SAFETY: writing from a live slice to our own descriptor.
    let n = crate::log::without_our_signals(|| unsafe {
        libc::write(f.raw(), line.as_ptr().cast(), line.len())
    });
    if n == line.len() as isize {
        return Ok(());
    }
    let e = if n < 0 {
        io::Error::last_os_error()
    } else {
        // SAFETY: truncating our own file back to its length before the write.
        unsafe { libc::ftruncate(f.raw(), before) };
        io::Error::new(
            io::ErrorKind::WriteZero,
            "short write to the miss log (disk full?)",
        )
    };
    Err(e)
}

/// This process's part of every file name: `<host>-<pid>-<ticks>.<nonce>` (see the module
/// docs). Set when the first backend starts, made anew in a fork child; read without a
/// lock or an allocation.
pub struct ProcessName {
    text: AtomicPtr<Parts>,
}

/// The parts of a process name, each as the status files and `tunedblas status` read them.
pub struct Parts {
    pub host: String,
    pub pid: u32,
    pub start: u64,
    /// `<host>-<pid>-<start>.<nonce>`, the nonce 16 hex digits.
    pub prefix: String,
}

pub static PROCESS: ProcessName = ProcessName {
    text: AtomicPtr::new(std::ptr::null_mut()),
};

/// 64 random bits from the kernel (no descriptor); the clock and a stack address mixed
/// where it has none to give.
fn nonce() -> u64 {
    let mut n = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into `n`.
    let got = unsafe { libc::getrandom((&mut n as *mut u64).cast(), 8, libc::GRND_NONBLOCK) };
    if got != 8 {
        let t = crate::lifecycle::monotonic_ns();
        let a = &n as *const u64 as u64;
        n = (t ^ a.rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    n
}

impl ProcessName {
    fn make() -> Parts {
        let host = tunedblas_core::process::host_name();
        let pid = std::process::id();
        let start = tunedblas_core::process::start_ticks(None).unwrap_or(0);
        let nonce = nonce();
        let prefix = format!("{host}-{pid}-{start}.{nonce:016x}");
        Parts {
            host,
            pid,
            start,
            prefix,
        }
    }

    /// The name, made on first use (allocates: call from a path that may).
    pub fn get_or_make(&self) -> &Parts {
        if let Some(p) = self.get() {
            return p;
        }
        tunedblas_core::leaked::publish(&self.text, Box::new(Self::make()))
    }

    /// The name if it was made (never allocates).
    pub fn get(&self) -> Option<&Parts> {
        tunedblas_core::leaked::get(&self.text)
    }

    /// In a fork child: a name of its own (the parent's is leaked, not freed).
    ///
    /// # Safety
    /// Only in a fork child's handler, where no other thread exists.
    pub unsafe fn remake_in_child(&self) {
        if self.get().is_some() {
            let fresh = Box::into_raw(Box::new(Self::make()));
            self.text.store(fresh, Ordering::Release);
        }
    }
}

/// `<prefix><rest...>` as a [`Name`].
pub fn name(parts: &Parts, rest: std::fmt::Arguments) -> io::Result<Name> {
    let mut n = Name::new();
    n.write_all(parts.prefix.as_bytes())?;
    n.write_fmt(rest)?;
    Ok(n)
}

/// This thread's id, for temporaries only one thread writes.
pub fn tid() -> libc::pid_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn folder(tag: &str) -> (std::path::PathBuf, Folder) {
        let d = std::env::temp_dir().join(format!("tunedblas-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        let f = Folder::new(&d, Trust::Private).unwrap();
        (d, f)
    }

    fn named(text: &str) -> Name {
        let mut n = Name::new();
        n.write_all(text.as_bytes()).unwrap();
        n
    }

    #[test]
    fn a_log_is_made_exclusively_and_written_only_while_it_is_the_file_made() {
        let (d, f) = folder("append");
        // A file already under the name before the first write (another process's, or a
        // planted one): never written into.
        std::fs::write(d.join("taken.csv"), "theirs\n").unwrap();
        let mut made = Made::default();
        let e = append(&f, &named("taken.csv"), &mut made, b"ours\n").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(
            std::fs::read_to_string(d.join("taken.csv")).unwrap(),
            "theirs\n"
        );
        // Our own log: made, then appended to.
        let mut made = Made::default();
        append(&f, &named("log.csv"), &mut made, b"a\n").unwrap();
        append(&f, &named("log.csv"), &mut made, b"b\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("log.csv")).unwrap(),
            "a\nb\n"
        );
        // Replaced by another file: refused; removed: made again.
        std::fs::remove_file(d.join("log.csv")).unwrap();
        std::fs::write(d.join("other"), "x\n").unwrap();
        std::fs::hard_link(d.join("other"), d.join("log.csv")).unwrap();
        assert!(append(&f, &named("log.csv"), &mut made, b"c\n").is_err());
        assert_eq!(std::fs::read_to_string(d.join("other")).unwrap(), "x\n");
        std::fs::remove_file(d.join("log.csv")).unwrap();
        append(&f, &named("log.csv"), &mut made, b"d\n").unwrap();
        assert_eq!(std::fs::read_to_string(d.join("log.csv")).unwrap(), "d\n");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn replace_writes_whole_files_and_never_follows_a_link() {
        let (d, f) = folder("replace");
        let victim = d.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("t.json")).unwrap();
        std::os::unix::fs::symlink(&victim, d.join("t.tmp")).unwrap();
        replace(&f, &named("t.json"), &named("t.tmp"), |o| {
            o.write_all(&[b'x'; 2000])
        })
        .unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_eq!(std::fs::read(d.join("t.json")).unwrap(), vec![b'x'; 2000]);
        assert!(!d.join("t.tmp").exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn folders_others_can_write_or_that_are_links_are_refused() {
        let (d, f) = folder("trust");
        assert!(f.open().is_ok());
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(f.open().is_err(), "private: others can write it");
        let shared = Folder::new(&d, Trust::OursOrSticky).unwrap();
        assert!(shared.open().is_err(), "not sticky either");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(
            shared.open().is_ok(),
            "a sticky shared folder the user named"
        );
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = d.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&d, &link).unwrap();
        let e = Folder::new(&link, Trust::OursOrSticky)
            .unwrap()
            .open()
            .unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn two_names_for_one_host_pid_and_start_tick_differ() {
        let (a, b) = (ProcessName::make(), ProcessName::make());
        assert_eq!(
            (a.host.as_str(), a.pid, a.start),
            (b.host.as_str(), b.pid, b.start)
        );
        assert_ne!(a.prefix, b.prefix, "the random part tells them apart");
    }
}
