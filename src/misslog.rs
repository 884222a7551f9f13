//! The durable record of shapes that had no row.
//!
//! Two parts:
//! - [`MissSet`]: a fixed-size, lock-free open-addressing set of (device, key) with a call
//!   count each. A repeated miss is a probe and one atomic add: no lock, no allocation, no
//!   system call. Only the first sight of a key claims a slot. Each count is split over
//!   [`SHARDS`] cache lines picked by the calling thread's stack, so threads that miss the
//!   same shape do not fight over one line (exact totals are the sum).
//! - [`MissFiles`]: the files under the miss folder. A first sight is appended at once with
//!   one `write(2)` to `<host>-<pid>-rank<device>.csv` in PyTorch's untuned-file form
//!   (`op_name,param_signature`), so even SIGKILL loses no shape. Call counts go to the
//!   sidecar `<host>-<pid>-rank<device>.counts.csv` (`op_name,param_signature,calls`),
//!   rewritten atomically (temp file + rename) whenever the owner flushes.
//!
//! One pair of files per process and device: ranks and processes never interleave.

use std::cell::UnsafeCell;
use std::fs::{self, File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rustc_hash::FxHasher;

use crate::key::ProblemKey;

const EMPTY: u32 = 0;
const BUSY: u32 = 1;
const READY: u32 = 2;

struct Slot<K> {
    state: AtomicU32,
    hash: AtomicU64,
    /// The caller's word about this key (0 until set; see [`MissSet::note_if_unset`]). The
    /// interposer keeps a missed key's near-serving verdict here, so a repeated miss reads
    /// it with the same probe that counts the call.
    note: AtomicU64,
    /// Written once by the thread that moved the slot EMPTY -> BUSY, read only after READY.
    entry: UnsafeCell<MaybeUninit<(i32, K)>>,
}

/// What [`MissSet::record`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sight {
    /// The first call with this key on this device: the caller must log it.
    First,
    /// Seen before; the count went up. `count` is the new count of the caller's share
    /// (its shard; one thread always counts in the same one), which [`MissSet::snapshot`]
    /// adds up with the others.
    Repeat { count: u64 },
    /// The set is full; the shape could not be counted.
    Full,
    /// Not in the set, and the caller's `admit` check turned it away
    /// ([`MissSet::record_hashed_if`]).
    Refused,
}

/// Lock-free set of missed (device, key) pairs with call counts. The key type is the
/// rocBLAS [`ProblemKey`] unless a backend names its own (cuBLASLt's `LtKey`).
pub struct MissSet<K = ProblemKey> {
    slots: Box<[Slot<K>]>,
    /// `counts[shard * slots.len() + slot]`: each shard is its own array, so two shards of
    /// one slot never share a cache line.
    counts: Box<[AtomicU64]>,
    mask: usize,
}

/// Shares of each count.
pub const SHARDS: usize = 8;

/// The calling thread's shard: threads run on separate stacks, so the stack address tells
/// them apart without a thread-local (two threads whose stacks fall in one 64 KiB window
/// share a shard, which is still exact, only slower).
#[inline(always)]
fn shard() -> usize {
    let here = 0u8;
    let sp = &here as *const u8 as u64;
    ((sp >> 16).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 61) as usize
}

/// `n` zeroed values of a type for which all-zero bytes are a valid value, as a box whose
/// pages the system only provides once touched.
///
/// # Safety
/// All-zero bytes must be a valid `T`.
pub(crate) unsafe fn zeroed_slice<T>(n: usize) -> Box<[T]> {
    let layout = std::alloc::Layout::array::<T>(n).expect("slice size");
    let p = std::alloc::alloc_zeroed(layout) as *mut T;
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n))
}

// SAFETY: `entry` is written by exactly one thread (the one that won the EMPTY -> BUSY CAS)
// before a Release store of READY, and read only after an Acquire load sees READY.
unsafe impl<K: Send> Sync for MissSet<K> {}
unsafe impl<K: Send> Send for MissSet<K> {}

/// A key's hash through its `Hash` impl (FxHash), for [`MissSet::record`].
fn key_hash<K: Hash>(key: &K) -> u64 {
    let mut h = FxHasher::default();
    key.hash(&mut h);
    h.finish()
}

/// The set's hash of (device, key), from the key's [`ProblemKey::lookup_hash`].
#[inline(always)]
pub(crate) fn hash_of(device: i32, key_hash: u64) -> u64 {
    // One multiply mixes the device into every bit the slot index and tag use.
    let p = ((key_hash ^ device as u32 as u64) as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (p as u64) ^ ((p >> 64) as u64)
}

impl<K: Copy + Eq + Hash> MissSet<K> {
    /// A set with room for `capacity` distinct shapes (rounded up to a power of two).
    ///
    /// The slots come from the allocator already zeroed (an empty slot is all zero bytes),
    /// so a large set costs no start-up time and no resident memory until shapes land in
    /// it: the pages stay untouched. Writing 16k slots one by one took most of the
    /// interposer's start-up (BENCHMARKS.md).
    pub fn with_capacity(capacity: usize) -> MissSet<K> {
        let n = capacity.max(2).next_power_of_two();
        const { assert!(EMPTY == 0) };
        // SAFETY: an all-zero Slot is a valid empty slot (atomics at 0 = EMPTY, `entry` is
        // MaybeUninit), and an all-zero AtomicU64 is 0.
        let (slots, counts) = unsafe { (zeroed_slice(n), zeroed_slice(n * SHARDS)) };
        MissSet {
            slots,
            counts,
            mask: n - 1,
        }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Counts one call of `key` on `device`.
    pub fn record(&self, device: i32, key: &K) -> Sight {
        self.record_hashed(device, key, key_hash(key))
    }

    /// [`MissSet::record`] with a hash of the key computed by the caller (the interposer
    /// passes [`ProblemKey::lookup_hash`], which its table lookup computed already). One
    /// set must always be given the same hash for the same key: use either this or
    /// [`MissSet::record`] on it, not both.
    #[inline]
    pub fn record_hashed(&self, device: i32, key: &K, key_hash: u64) -> Sight {
        self.record_hashed_if(device, key, key_hash, || true)
    }

    /// [`MissSet::record_hashed`] that adds a new key only if `admit()` says so. `admit` runs
    /// only for a key not in the set yet, so a check there costs a repeated miss nothing.
    #[inline]
    pub fn record_hashed_if(
        &self,
        device: i32,
        key: &K,
        key_hash: u64,
        admit: impl FnOnce() -> bool,
    ) -> Sight {
        self.record_noted(device, key, key_hash, admit).0
    }

    /// [`MissSet::record_hashed_if`] that also returns the key's slot and its note (what
    /// [`MissSet::note_if_unset`] or [`MissSet::set_note`] left there, 0 if nothing): one
    /// probe counts the call and reads the caller's word about the key. No slot for
    /// [`Sight::Full`] and [`Sight::Refused`].
    #[inline(always)]
    pub fn record_noted(
        &self,
        device: i32,
        key: &K,
        key_hash: u64,
        admit: impl FnOnce() -> bool,
    ) -> (Sight, Option<(usize, u64)>) {
        let mut admit = Some(admit);
        // Once per call: two reads of the stack address in one call may straddle a 64 KiB
        // window (debug builds give each inlined read its own slot) and pick two shards.
        let shard = shard();
        let hash = hash_of(device, key_hash);
        let mut i = hash as usize & self.mask;
        for _ in 0..self.slots.len() {
            let slot = &self.slots[i];
            loop {
                match slot.state.load(Ordering::Acquire) {
                    READY => {
                        if slot.hash.load(Ordering::Relaxed) == hash {
                            // SAFETY: READY was observed with Acquire; entry is initialised.
                            let (d, k) = unsafe { (*slot.entry.get()).assume_init_ref() };
                            if *d == device && k == key {
                                let c = &self.counts[shard * self.slots.len() + i];
                                let count = c.fetch_add(1, Ordering::Relaxed) + 1;
                                let note = slot.note.load(Ordering::Acquire);
                                return (Sight::Repeat { count }, Some((i, note)));
                            }
                        }
                        break;
                    }
                    EMPTY => {
                        if let Some(admit) = admit.take() {
                            if !admit() {
                                return (Sight::Refused, None);
                            }
                        }
                        if slot
                            .state
                            .compare_exchange(EMPTY, BUSY, Ordering::Acquire, Ordering::Relaxed)
                            .is_ok()
                        {
                            // SAFETY: we own the slot until the READY store below.
                            unsafe { (*slot.entry.get()).write((device, *key)) };
                            slot.hash.store(hash, Ordering::Relaxed);
                            self.counts[shard * self.slots.len() + i]
                                .fetch_add(1, Ordering::Relaxed);
                            slot.state.store(READY, Ordering::Release);
                            return (Sight::First, Some((i, 0)));
                        }
                        // Lost the race: look at the same slot again.
                    }
                    _ => std::hint::spin_loop(), // BUSY: the owner is a few stores from READY.
                }
            }
            i = (i + 1) & self.mask;
        }
        (Sight::Full, None)
    }

    /// The slot of (device, key) if the set holds it; counts nothing.
    pub fn find(&self, device: i32, key: &K, key_hash: u64) -> Option<usize> {
        let hash = hash_of(device, key_hash);
        let mut i = hash as usize & self.mask;
        for _ in 0..self.slots.len() {
            let slot = &self.slots[i];
            match slot.state.load(Ordering::Acquire) {
                EMPTY => return None,
                READY if slot.hash.load(Ordering::Relaxed) == hash => {
                    // SAFETY: READY was observed with Acquire; entry is initialised.
                    let (d, k) = unsafe { (*slot.entry.get()).assume_init_ref() };
                    if *d == device && k == key {
                        return Some(i);
                    }
                }
                // A slot being filled (BUSY) holds a key whose first sight has not returned
                // yet: not the one a caller asks about after its own call was recorded.
                _ => {}
            }
            i = (i + 1) & self.mask;
        }
        None
    }

    /// Leaves `note` (not 0) in a slot [`MissSet::record_noted`] returned, unless a note is
    /// there already. True if it was stored.
    pub fn note_if_unset(&self, slot: usize, note: u64) -> bool {
        self.slots.get(slot).is_some_and(|s| {
            s.note
                .compare_exchange(0, note, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    /// Replaces the note of a slot [`MissSet::record_noted`] or [`MissSet::find`] returned.
    pub fn set_note(&self, slot: usize, note: u64) {
        if let Some(s) = self.slots.get(slot) {
            s.note.store(note, Ordering::Release);
        }
    }

    /// Every recorded (device, key, count), in slot order.
    pub fn snapshot(&self) -> Vec<(i32, K, u64)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state.load(Ordering::Acquire) == READY)
            .map(|(i, s)| {
                // SAFETY: READY observed with Acquire.
                let (d, k) = unsafe { (*s.entry.get()).assume_init_ref() };
                (*d, *k, self.count_of(i))
            })
            .collect()
    }

    fn count_of(&self, slot: usize) -> u64 {
        (0..SHARDS)
            .map(|s| self.counts[s * self.slots.len() + slot].load(Ordering::Relaxed))
            .sum()
    }

    /// Number of distinct shapes recorded.
    pub fn len(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.state.load(Ordering::Acquire) == READY)
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything. Only for a freshly forked child, where no other thread exists.
    ///
    /// # Safety
    /// No other thread may use the set concurrently.
    pub unsafe fn reset(&self) {
        for (i, s) in self.slots.iter().enumerate() {
            if s.state.swap(EMPTY, Ordering::Relaxed) != EMPTY {
                s.note.store(0, Ordering::Relaxed);
                for shard in 0..SHARDS {
                    self.counts[shard * self.slots.len() + i].store(0, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Formats a key as the two fields of an untuned-file line.
pub type KeyFormat<K = ProblemKey> = fn(&K) -> (String, String);

/// First sights that could not be written (full disk, unwritable folder) and wait for the
/// next write that works; beyond this many they are only in memory (and in the counts
/// written at exit).
const PENDING_MAX: usize = 1 << 14;

/// The miss files of one process.
pub struct MissFiles<K = ProblemKey> {
    dir: PathBuf,
    prefix: String,
    /// Inserted after `<host>-<pid>` in file names (`-cublaslt`), so backends never share a file.
    tag: &'static str,
    format: KeyFormat<K>,
    open: Vec<(i32, File)>,
    /// (device, line) of first sights whose write failed, oldest first.
    pending: Vec<(i32, String)>,
}

/// `<host>-<pid>`: the per-process part of the file names.
pub fn process_prefix() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates on success.
    let host = if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end])
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    } else {
        "host".to_owned()
    };
    format!("{host}-{}", std::process::id())
}

/// Creates the miss folder (and any missing parents) with mode 0700, then checks the
/// folder itself: a real directory, not a symlink, and either ours or a shared folder with
/// the sticky bit (like `/tmp`), where no one else can remove or replace our files.
pub fn checked_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = fs::symlink_metadata(dir)?;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let sticky = meta.mode() & libc::S_ISVTX != 0;
    if !meta.file_type().is_dir() || (meta.uid() != uid && !sticky) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a directory owned by uid {uid} (a symlink or someone else's folder); refusing to write there",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// Opens a file of ours for writing without following a symlink or blocking on a FIFO
/// planted under its name, and refuses anything but a regular file of ours with one link
/// (a hard link planted in a shared folder would make us write into someone else's file).
fn open_own(path: &Path, opts: &mut OpenOptions) -> io::Result<File> {
    let f = opts
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    let meta = f.metadata()?;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    if !meta.file_type().is_file() || meta.uid() != uid || meta.nlink() != 1 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a regular file of ours with a single link; refusing to write it",
                path.display()
            ),
        ));
    }
    Ok(f)
}

/// Appends `bytes` with one `write(2)`. A short write (disk full, file size limit) is
/// rolled back, so the file never ends in half a line that a later append would glue onto.
fn append_whole(f: &mut File, bytes: &[u8]) -> io::Result<()> {
    let before = f.metadata()?.len();
    loop {
        match f.write(bytes) {
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(n) => {
                let _ = f.set_len(before);
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!(
                        "short write to the miss log ({n} of {} bytes; disk full?)",
                        bytes.len()
                    ),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

impl<K> MissFiles<K> {
    pub fn new(dir: PathBuf, format: KeyFormat<K>) -> MissFiles<K> {
        MissFiles::tagged(dir, format, "")
    }

    /// Files named `<host>-<pid><tag>-rank<device>.csv`.
    pub fn tagged(dir: PathBuf, format: KeyFormat<K>, tag: &'static str) -> MissFiles<K> {
        MissFiles {
            dir,
            prefix: process_prefix(),
            tag,
            format,
            open: Vec::new(),
            pending: Vec::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path_for(&self, device: i32) -> PathBuf {
        self.dir
            .join(format!("{}{}-rank{device}.csv", self.prefix, self.tag))
    }

    pub fn counts_path_for(&self, device: i32) -> PathBuf {
        self.dir.join(format!(
            "{}{}-rank{device}.counts.csv",
            self.prefix, self.tag
        ))
    }

    /// First sights not yet written.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    fn file(&mut self, device: i32) -> io::Result<&mut File> {
        if let Some(pos) = self.open.iter().position(|(d, _)| *d == device) {
            return Ok(&mut self.open[pos].1);
        }
        checked_dir(&self.dir)?;
        let f = open_own(
            &self.path_for(device),
            OpenOptions::new().append(true).create(true),
        )?;
        self.open.push((device, f));
        Ok(&mut self.open.last_mut().expect("just pushed").1)
    }

    /// Appends the first sight of a key: one line, one `write(2)` (together with any earlier
    /// lines of that device whose write failed). On failure the line is kept for the next
    /// attempt.
    pub fn append_first_sight(&mut self, device: i32, key: &K) -> io::Result<()> {
        let (op, sig) = (self.format)(key);
        let line = format!("{op},{sig}\n");
        let mut text = String::new();
        for (_, l) in self.pending.iter().filter(|(d, _)| *d == device) {
            text.push_str(l);
        }
        text.push_str(&line);
        match self
            .file(device)
            .and_then(|f| append_whole(f, text.as_bytes()))
        {
            Ok(()) => {
                self.pending.retain(|(d, _)| *d != device);
                Ok(())
            }
            Err(e) => {
                if self.pending.len() < PENDING_MAX {
                    self.pending.push((device, line));
                }
                Err(e)
            }
        }
    }

    /// Tries once more to write every first sight whose write failed.
    pub fn flush_pending(&mut self) -> io::Result<()> {
        let mut devices: Vec<i32> = self.pending.iter().map(|(d, _)| *d).collect();
        devices.sort_unstable();
        devices.dedup();
        let mut result = Ok(());
        for device in devices {
            let text: String = self
                .pending
                .iter()
                .filter(|(d, _)| *d == device)
                .map(|(_, l)| l.as_str())
                .collect();
            match self
                .file(device)
                .and_then(|f| append_whole(f, text.as_bytes()))
            {
                Ok(()) => self.pending.retain(|(d, _)| *d != device),
                Err(e) => result = Err(e),
            }
        }
        result
    }

    /// Rewrites the counts sidecar of every device present in `snapshot`.
    pub fn write_counts(&mut self, snapshot: &[(i32, K, u64)]) -> io::Result<()> {
        let mut devices: Vec<i32> = snapshot.iter().map(|(d, _, _)| *d).collect();
        devices.sort_unstable();
        devices.dedup();
        if !devices.is_empty() {
            checked_dir(&self.dir)?;
        }
        for device in devices {
            let mut text = String::from("op_name,param_signature,calls\n");
            for (_, key, count) in snapshot.iter().filter(|(d, _, _)| *d == device) {
                let (op, sig) = (self.format)(key);
                text.push_str(&format!("{op},{sig},{count}\n"));
            }
            let path = self.counts_path_for(device);
            let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
            let create = || open_own(&tmp, OpenOptions::new().write(true).create_new(true));
            // A temporary left by a process that died mid-write (same pid, recycled) is ours
            // to replace; anything else under that name is refused by `open_own`.
            let mut f = match create() {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    fs::remove_file(&tmp)?;
                    create()?
                }
                other => other?,
            };
            let written = f.write_all(text.as_bytes());
            drop(f);
            if let Err(e) = written.and_then(|()| fs::rename(&tmp, &path)) {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        }
        Ok(())
    }

    /// After `fork`: the child writes its own files.
    pub fn reset_after_fork(&mut self) {
        self.open.clear();
        self.pending.clear();
        self.prefix = process_prefix();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi;
    use crate::key::{Trans, Types};
    use std::sync::Arc;

    fn key(n: i64) -> ProblemKey {
        let t = Types::uniform(abi::DT_F16_R, abi::DT_F32_R);
        ProblemKey::single(Trans::T, Trans::N, t, 256, n, 64, 64, 64, 256, 256, 0)
    }

    fn fmt(k: &ProblemKey) -> (String, String) {
        ("Op".into(), format!("n{}", k.n))
    }

    #[test]
    fn first_then_repeat_counts() {
        let s = MissSet::with_capacity(16);
        assert_eq!(s.record(0, &key(1)), Sight::First);
        assert_eq!(s.record(0, &key(1)), Sight::Repeat { count: 2 });
        assert_eq!(s.record(1, &key(1)), Sight::First, "devices are distinct");
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn notes_ride_on_the_probe_that_counts() {
        let s = MissSet::with_capacity(16);
        let h = |n| key(n).lookup_hash();
        let (sight, noted) = s.record_noted(0, &key(1), h(1), || true);
        assert_eq!(sight, Sight::First);
        let (slot, note) = noted.expect("a slot");
        assert_eq!(note, 0, "no note yet");
        assert_eq!(s.find(0, &key(1), h(1)), Some(slot));
        assert_eq!(s.find(1, &key(1), h(1)), None, "devices are distinct");
        assert_eq!(s.find(0, &key(2), h(2)), None);
        assert!(s.note_if_unset(slot, 7));
        assert!(!s.note_if_unset(slot, 8), "only an empty note is filled");
        assert_eq!(
            s.record_noted(0, &key(1), h(1), || true),
            (Sight::Repeat { count: 2 }, Some((slot, 7)))
        );
        s.set_note(slot, 9);
        assert_eq!(s.record_noted(0, &key(1), h(1), || true).1, Some((slot, 9)));
        assert_eq!(
            s.record_noted(0, &key(2), h(2), || false),
            (Sight::Refused, None)
        );
        // SAFETY: no other thread uses the set.
        unsafe { s.reset() };
        assert_eq!(s.find(0, &key(1), h(1)), None);
        let (_, noted) = s.record_noted(0, &key(1), h(1), || true);
        assert_eq!(noted.map(|n| n.1), Some(0), "reset clears notes");
    }

    #[test]
    fn refused_keys_stay_out_and_admit_runs_only_for_new_keys() {
        let s = MissSet::with_capacity(16);
        let h = key(1).lookup_hash();
        assert_eq!(s.record_hashed_if(0, &key(1), h, || false), Sight::Refused);
        assert!(s.is_empty());
        assert_eq!(s.record_hashed_if(0, &key(1), h, || true), Sight::First);
        let asked = std::cell::Cell::new(false);
        let sight = s.record_hashed_if(0, &key(1), h, || {
            asked.set(true);
            false
        });
        assert_eq!(sight, Sight::Repeat { count: 2 });
        assert!(!asked.get(), "admit ran for a key already in the set");
    }

    #[test]
    fn full_set_says_so() {
        let s = MissSet::with_capacity(4);
        for n in 0..4 {
            assert_eq!(s.record(0, &key(n)), Sight::First);
        }
        assert_eq!(s.record(0, &key(99)), Sight::Full);
        assert!(matches!(s.record(0, &key(2)), Sight::Repeat { .. }));
        // The count is the caller's share; the snapshot adds up the shares.
        let counted: Vec<u64> = s
            .snapshot()
            .iter()
            .filter(|e| e.1 == key(2))
            .map(|e| e.2)
            .collect();
        assert_eq!(counted, vec![2]);
    }

    #[test]
    fn eight_threads_lose_nothing() {
        let s = Arc::new(MissSet::with_capacity(1024));
        let firsts = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (s, firsts) = (s.clone(), firsts.clone());
                std::thread::spawn(move || {
                    for round in 0..500 {
                        for n in 0..40 {
                            if s.record(0, &key(n)) == Sight::First {
                                firsts.fetch_add(1, Ordering::Relaxed);
                            }
                            let _ = round;
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(
            firsts.load(Ordering::Relaxed),
            40,
            "each key is first-seen exactly once"
        );
        let snap = s.snapshot();
        assert_eq!(snap.len(), 40);
        assert!(snap.iter().all(|(_, _, c)| *c == 8 * 500));
    }

    #[test]
    fn files_get_one_line_per_first_sight_and_counts() {
        let dir = std::env::temp_dir().join(format!("tunedblas-miss-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut files = MissFiles::new(dir.clone(), fmt);
        let set = MissSet::with_capacity(16);
        for n in [5, 5, 6, 5] {
            if set.record(2, &key(n)) == Sight::First {
                files.append_first_sight(2, &key(n)).unwrap();
            }
        }
        files.write_counts(&set.snapshot()).unwrap();
        let log = fs::read_to_string(files.path_for(2)).unwrap();
        assert_eq!(log, "Op,n5\nOp,n6\n");
        let counts = fs::read_to_string(files.counts_path_for(2)).unwrap();
        assert!(
            counts.contains("Op,n5,3\n") && counts.contains("Op,n6,1\n"),
            "{counts}"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn other_key_types_and_tagged_files() {
        // A backend with its own key type gets its own files beside the rocBLAS ones.
        fn fmt_pair(k: &(u32, u32)) -> (String, String) {
            ("Lt".into(), format!("{}x{}", k.0, k.1))
        }
        let dir = std::env::temp_dir().join(format!("tunedblas-miss-tag-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let plain: MissFiles = MissFiles::new(dir.clone(), fmt);
        let mut tagged = MissFiles::tagged(dir.clone(), fmt_pair, "-cublaslt");
        assert_ne!(plain.path_for(0), tagged.path_for(0));
        assert!(tagged
            .path_for(0)
            .to_string_lossy()
            .ends_with("-cublaslt-rank0.csv"));
        let set: MissSet<(u32, u32)> = MissSet::with_capacity(4);
        assert_eq!(set.record(0, &(3, 4)), Sight::First);
        assert!(matches!(set.record(0, &(3, 4)), Sight::Repeat { .. }));
        assert_eq!(set.snapshot(), vec![(0, (3, 4), 2)]);
        tagged.append_first_sight(0, &(3, 4)).unwrap();
        assert_eq!(fs::read_to_string(tagged.path_for(0)).unwrap(), "Lt,3x4\n");
        let _ = fs::remove_dir_all(&dir);
    }
}
