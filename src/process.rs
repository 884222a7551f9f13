//! Which process wrote a file: the `<host>-<pid>-<start>` part of the interposer's file
//! names (miss logs, counts, status), and whether that process is still running.
//!
//! `<start>` is the process's start time in clock ticks since boot (field 22 of
//! `/proc/<pid>/stat`): a later process with the same host name and pid (a restarted
//! container's PID 1) is not taken for the one that wrote the file. Read from `/proc`, so
//! the preload, `tunedblas status` and `tunedblas misses --prune` agree by construction.

/// This machine's host name as file names carry it: `/proc/sys/kernel/hostname` (the UTS
/// name `gethostname` returns), anything but letters, digits, `.` and `_` as `_`; `host`
/// where it cannot be read.
pub fn host_name() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name = file_safe(raw.trim());
    if name.is_empty() {
        "host".to_owned()
    } else {
        name
    }
}

/// `raw` with anything but ASCII letters, digits, `.` and `_` replaced by `_`.
pub fn file_safe(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Field 22 of a `/proc/<pid>/stat` text (after the parenthesised command name, which may
/// itself hold spaces and parentheses).
pub fn start_ticks_in(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The start time of process `pid` (`None`: this process), if it is running.
pub fn start_ticks(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    start_ticks_in(&std::fs::read_to_string(path).ok()?)
}

/// A `<host>-<pid>-<start>` file-name prefix, read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Writer {
    pub host: String,
    pub pid: u32,
    pub start: u64,
}

/// Where the process that wrote a file is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// On this host, with the same pid and start time.
    Running,
    /// On this host, and no process with that pid and start time runs.
    Gone,
    /// Written on another host (a shared folder): cannot be told from here.
    Elsewhere,
}

impl Writer {
    /// Parses `<host>-<pid>-<start>` or `<host>-<pid>-<start>.<nonce>` (the host is made
    /// file-safe, so it holds no `-`; pid and start are numbers, the nonce hex: the random
    /// part that keeps two processes with the same host, pid and start tick apart).
    pub fn parse(prefix: &str) -> Option<Writer> {
        let (rest, start) = prefix.rsplit_once('-')?;
        let start = match start.split_once('.') {
            Some((ticks, nonce))
                if !nonce.is_empty() && nonce.bytes().all(|b| b.is_ascii_hexdigit()) =>
            {
                ticks
            }
            Some(_) => return None,
            None => start,
        };
        let (host, pid) = rest.rsplit_once('-')?;
        Some(Writer {
            host: host.to_owned(),
            pid: pid.parse().ok()?,
            start: start.parse().ok()?,
        })
    }

    /// Whether the writer runs, as seen from host `here`.
    pub fn state(&self, here: &str) -> State {
        if self.host != here {
            State::Elsewhere
        } else if start_ticks(Some(self.pid)) == Some(self.start) {
            State::Running
        } else {
            State::Gone
        }
    }
}

/// Runs `write` (one write of ours, inside a host process) with SIGPIPE and SIGXFSZ blocked
/// in this thread. When it failed with EPIPE or EFBIG, the signal that failure raised (a
/// pipe nobody reads, a file-size limit: `ulimit -f`) is taken back, so it cannot end the
/// host, whose default action for both it is; one that was pending before is the host's
/// and stays, and so does any that arrives while the write succeeds or fails otherwise (an
/// outside tester's host sends itself these signals). Only async-signal-safe calls; the
/// kernel's 8-byte sets through the raw calls (glibc's `sigset_t` is 128 bytes, and this
/// runs on exit paths with a few KiB of stack); errno is left as `write` left it.
pub fn quiet_write<T>(write: impl FnOnce() -> T) -> T {
    const SET_SIZE: libc::c_long = 8;
    let bit = |sig: libc::c_int| 1u64 << (sig - 1);
    let ours = bit(libc::SIGPIPE) | bit(libc::SIGXFSZ);
    let (mut old, mut before, mut after) = (0u64, 0u64, 0u64);
    // SAFETY: the kernel's signal calls on 8-byte sets of ours; errno is this thread's.
    unsafe {
        let mask = |how: libc::c_int, set: *const u64, old: *mut u64| {
            libc::syscall(libc::SYS_rt_sigprocmask, how, set, old, SET_SIZE)
        };
        let pending = |set: *mut u64| libc::syscall(libc::SYS_rt_sigpending, set, SET_SIZE);
        mask(libc::SIG_BLOCK, &ours, &mut old);
        pending(&mut before);
        // The union of this thread's and the process's pending signals: one the host sent
        // the process (kill) sits in the process's set, where ours would not merge with
        // it. Only this thread's own set says whether ours would (rarely needed).
        if before & ours != 0 {
            before = thread_pending().unwrap_or(before);
        }
        *libc::__errno_location() = 0;
        let out = write();
        let errno = *libc::__errno_location();
        let raised = match errno {
            libc::EPIPE => bit(libc::SIGPIPE),
            libc::EFBIG => bit(libc::SIGXFSZ),
            _ => 0,
        };
        if raised != 0 {
            pending(&mut after);
            // Not pending on this thread before: ours, raised on this thread, and taken
            // back first (a thread's own signals are taken before the process's).
            let take = raised & after & !before;
            if take != 0 {
                let now = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                let null = std::ptr::null_mut::<libc::siginfo_t>();
                libc::syscall(libc::SYS_rt_sigtimedwait, &take, null, &now, SET_SIZE);
            }
        }
        mask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        *libc::__errno_location() = errno;
        out
    }
}

/// This thread's own pending signals (`SigPnd` of `/proc/thread-self/status`), read with
/// raw calls into a stack buffer (async-signal-safe, no allocation), or `None`.
#[inline(never)]
fn thread_pending() -> Option<u64> {
    let mut buf = [0u8; 2048];
    // SAFETY: a NUL-terminated path; reading into a buffer of ours; our descriptor closed.
    let n = unsafe {
        let fd = libc::open(
            c"/proc/thread-self/status".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        usize::try_from(n).ok()?
    };
    let text = &buf[..n];
    let at = text.windows(7).position(|w| w == b"SigPnd:")? + 7;
    let hex: &[u8] = text[at..].split(|&b| b == b'\n').next()?.trim_ascii();
    u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a child (its own signal state and file-size limit): the host sends itself a
    /// SIGXFSZ (`kill`, the process's set) and keeps it blocked; then our write fails past
    /// `ulimit -f`. The host must find exactly its one signal pending, not ours as well
    /// (an outside tester's finding: two), and not none. Exit code: the signals pending.
    #[test]
    fn a_failed_write_takes_back_its_own_signal_and_leaves_the_hosts() {
        let dir = std::env::temp_dir().join(format!("tunedblas-quiet-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = std::ffi::CString::new(dir.join("f").to_str().unwrap()).unwrap();
        for host_sends in [true, false] {
            // SAFETY: the child makes only async-signal-safe calls and leaves by _exit.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                unsafe {
                    let limit = libc::rlimit {
                        rlim_cur: 4,
                        rlim_max: libc::RLIM_INFINITY,
                    };
                    libc::setrlimit(libc::RLIMIT_FSIZE, &limit);
                    let mut set: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut set);
                    libc::sigaddset(&mut set, libc::SIGXFSZ);
                    libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                    if host_sends {
                        libc::kill(libc::getpid(), libc::SIGXFSZ);
                    }
                    let fd = libc::open(
                        file.as_ptr(),
                        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                        0o600,
                    );
                    let n = quiet_write(|| libc::write(fd, b"0123456789".as_ptr().cast(), 10));
                    let n2 = quiet_write(|| libc::write(fd, b"0123456789".as_ptr().cast(), 10));
                    let failed = n == 4 && n2 < 0 && *libc::__errno_location() == libc::EFBIG;
                    let now = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    };
                    let mut pending = 0;
                    while libc::sigtimedwait(&set, std::ptr::null_mut(), &now) == libc::SIGXFSZ {
                        pending += 1;
                    }
                    libc::_exit(if failed { pending } else { 99 });
                }
            }
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            assert!(libc::WIFEXITED(status), "{status}");
            let want = i32::from(host_sends);
            assert_eq!(
                libc::WEXITSTATUS(status),
                want,
                "host sent one: {host_sends}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn names_and_start_times_read_back() {
        assert_eq!(file_safe("gpu-node 1"), "gpu_node_1");
        let stat = "4242 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 777 19";
        assert_eq!(start_ticks_in(stat), Some(777));
        assert_eq!(start_ticks_in("garbage"), None);
        let w = Writer::parse("node_1-4242-777").unwrap();
        assert_eq!((w.host.as_str(), w.pid, w.start), ("node_1", 4242, 777));
        assert_eq!(Writer::parse("node-x-777"), None);
        let w = Writer::parse("node_1-4242-777.00ff12ab34cd56ef").unwrap();
        assert_eq!((w.host.as_str(), w.pid, w.start), ("node_1", 4242, 777));
        assert_eq!(Writer::parse("node_1-4242-777.zz"), None);
    }

    #[test]
    fn this_process_runs_and_a_reused_pid_does_not_count() {
        let here = host_name();
        let me = Writer {
            host: here.clone(),
            pid: std::process::id(),
            start: start_ticks(None).unwrap(),
        };
        assert_eq!(me.state(&here), State::Running);
        let earlier = Writer {
            start: me.start.wrapping_sub(1),
            ..me.clone()
        };
        assert_eq!(earlier.state(&here), State::Gone, "same pid, another start");
        assert_eq!(me.state("another-host"), State::Elsewhere);
    }
}
