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

#[cfg(test)]
mod tests {
    use super::*;

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
