//! The call trace (`REFBLAS_TRACE=<file>`): one line per GEMM that ran, so tests can see
//! exactly which solution the interposer made the library run.
//!
//! Format (space-separated key=value, newline-terminated):
//! `func=<exported name> solution=<index, flavour's encoding> heuristic=<0|1> m=<m> n=<n> k=<k> batch=<batch> lib=<soname>`
//! (`lib` tells which build ran a call when two are loaded in one process).
//!
//! Each line is one `write(2)` on an `O_APPEND` descriptor, so lines from concurrent threads
//! and processes never interleave.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::OnceLock;

/// One executed GEMM, as traced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Executed {
    pub func: &'static str,
    /// The soname of the build that ran it.
    pub lib: &'static str,
    /// The solution that ran, in the flavour's index encoding.
    pub solution: i32,
    /// True when the caller asked for no particular solution.
    pub heuristic: bool,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub batch: i64,
}

impl Executed {
    /// The trace line, with its newline.
    pub fn line(&self) -> String {
        format!(
            "func={} solution={} heuristic={} m={} n={} k={} batch={} lib={}\n",
            self.func,
            self.solution,
            self.heuristic as u8,
            self.m,
            self.n,
            self.k,
            self.batch,
            self.lib
        )
    }
}

/// An append-only trace file.
pub struct Tracer {
    file: File,
}

impl Tracer {
    pub fn open(path: &Path) -> io::Result<Tracer> {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o644)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)?;
        Ok(Tracer { file })
    }

    /// Appends one line with a single `write(2)` (never split into several writes, which is
    /// what keeps concurrent lines whole). Errors are ignored: tracing must never fail a GEMM.
    pub fn write_line(&self, line: &str) {
        let fd = self.file.as_raw_fd();
        loop {
            // SAFETY: the buffer is valid for its length, the fd is open for our lifetime.
            let r = unsafe { libc::write(fd, line.as_ptr() as *const libc::c_void, line.len()) };
            if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
    }

    pub fn record(&self, e: &Executed) {
        self.write_line(&e.line());
    }
}

/// The process's tracer, from `REFBLAS_TRACE` read at first use; None when unset or when the
/// file cannot be opened (reported once on stderr).
pub fn global() -> Option<&'static Tracer> {
    static TRACER: OnceLock<Option<Tracer>> = OnceLock::new();
    TRACER
        .get_or_init(|| {
            let path = std::env::var_os("REFBLAS_TRACE").filter(|p| !p.is_empty())?;
            match Tracer::open(Path::new(&path)) {
                Ok(t) => Some(t),
                Err(e) => {
                    eprintln!("refblas: cannot open REFBLAS_TRACE {path:?}: {e}");
                    None
                }
            }
        })
        .as_ref()
}

/// Records an executed GEMM in the global trace, if tracing is on.
pub fn record(e: &Executed) {
    if let Some(t) = global() {
        t.record(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_format() {
        let e = Executed {
            func: "rocblas_gemm_strided_batched_ex",
            lib: "librocblas.so.5",
            solution: -1086326047,
            heuristic: false,
            m: 4,
            n: 5,
            k: 6,
            batch: 7,
        };
        assert_eq!(
            e.line(),
            "func=rocblas_gemm_strided_batched_ex solution=-1086326047 heuristic=0 m=4 n=5 k=6 batch=7 lib=librocblas.so.5\n"
        );
    }

    #[test]
    fn concurrent_lines_stay_whole() {
        let dir = std::env::temp_dir().join(format!("refblas-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace.txt");
        let _ = std::fs::remove_file(&path);
        let tracer = std::sync::Arc::new(Tracer::open(&path).unwrap());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let tracer = tracer.clone();
                std::thread::spawn(move || {
                    for i in 0..500 {
                        tracer.record(&Executed {
                            func: "rocblas_gemm_ex",
                            lib: "librocblas.so.4",
                            solution: t,
                            heuristic: i % 2 == 0,
                            m: i,
                            n: 1000 + i,
                            k: 123456789,
                            batch: 1,
                        });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2000);
        for l in lines {
            let fields: Vec<&str> = l.split(' ').collect();
            assert_eq!(fields.len(), 8, "{l}");
            assert_eq!(fields[0], "func=rocblas_gemm_ex");
            assert!(fields[6] == "batch=1", "{l}");
            assert!(fields[7] == "lib=librocblas.so.4", "{l}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
