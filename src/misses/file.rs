//! Reading one miss file back (or a folder of them, merged): the interposer's `<host>-<pid>-<start>-rank<d>.csv` files, their
//! `.counts.csv` sidecars, and PyTorch's own `tunableop_untuned<ordinal>.csv` files.
//!
//! All three are PyTorch untuned-file lines, `op_name,param_signature`, optionally followed
//! by a third field: the call count in a counts sidecar, or PyTorch's `BLAS_PARAMS ...` text
//! (kept out of the key). Accepted as well, so that logs written by older versions still
//! load: the PyTorch <= 2.6 signatures (`tn_<m>_<n>_<k>`, `..._B_<batch>`, no leading
//! dimensions), CRLF line ends, blank lines and the `op_name,param_signature[,calls]`
//! header. Lines that name an op rocBLAS does not serve are counted in
//! [`MissLog::unservable`]; lines that make no sense are listed in [`MissLog::malformed`]
//! with the reason, and the rest still loads.
//!
//! The interposer writes each line with one `write(2)` ending in a newline, so a last line
//! without one is a fragment (a writer cut short by a full disk, an older version killed
//! mid-write): it is reported, never read as a shape, since a cut signature such as
//! `tn_64_24_4` would still parse as some other problem. [`parse`] never panics.

use std::io;
use std::path::{Path, PathBuf};

use crate::key::ProblemKey;
use crate::tunableop::{self, KeyParse};

/// One line that was not read, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine {
    pub line: usize,
    pub reason: String,
}

/// One missed shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Miss {
    pub key: ProblemKey,
    /// Calls counted for it (a counts sidecar), `None` where the file records sights only.
    pub calls: Option<u64>,
    /// The first line naming it.
    pub line: usize,
}

/// A parsed miss log, counts file or PyTorch untuned file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MissLog {
    /// Distinct shapes in order of first appearance (repeated lines add their counts).
    pub misses: Vec<Miss>,
    /// Lines naming ops rocBLAS does not serve: (line, op name).
    pub unservable: Vec<(usize, String)>,
    pub malformed: Vec<BadLine>,
}

impl MissLog {
    pub fn keys(&self) -> impl Iterator<Item = &ProblemKey> {
        self.misses.iter().map(|m| &m.key)
    }
}

fn is_header(op: &str, sig: &str) -> bool {
    op == "op_name" && sig == "param_signature"
}

/// Calls of one shape from two lines or files: summed; unknown only when neither knows.
fn add_calls(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    }
}

/// Parses the text of a miss log, counts file or PyTorch untuned file (cut into lines by
/// [`tunableop::lines`], the same as results files).
pub fn parse(text: &str) -> MissLog {
    let mut out = MissLog::default();
    for l in tunableop::lines(text) {
        let (line, line_no) = (l.text, l.number);
        if l.last {
            out.malformed.push(BadLine {
                line: line_no,
                reason: "the last line has no newline: a fragment of a write that was cut short"
                    .into(),
            });
            continue;
        }
        let mut fields = line.splitn(3, ',');
        let op = fields.next().unwrap_or("").trim();
        let Some(sig) = fields.next().map(str::trim) else {
            out.malformed.push(BadLine {
                line: line_no,
                reason: "expected op_name,param_signature[,calls]".into(),
            });
            continue;
        };
        if is_header(op, sig) {
            continue;
        }
        let third = fields.next().map(str::trim).filter(|t| !t.is_empty());
        let calls = match third {
            None => None,
            Some(t) if t.bytes().all(|b| b.is_ascii_digit()) => match t.parse::<u64>() {
                Ok(n) => Some(n),
                Err(_) => {
                    out.malformed.push(BadLine {
                        line: line_no,
                        reason: format!("call count {t} does not fit in 64 bits"),
                    });
                    continue;
                }
            },
            // PyTorch's BLAS_PARAMS text (it contains commas): not part of the key.
            Some(t) if t.starts_with("BLAS_PARAMS") => None,
            Some(t) => {
                out.malformed.push(BadLine {
                    line: line_no,
                    reason: format!("third field {t:?} is neither a call count nor BLAS_PARAMS"),
                });
                continue;
            }
        };
        match tunableop::parse_key(op, sig) {
            KeyParse::Key(key) => match out.misses.iter_mut().find(|m| m.key == key) {
                Some(m) => m.calls = add_calls(m.calls, calls),
                None => out.misses.push(Miss {
                    key,
                    calls,
                    line: line_no,
                }),
            },
            KeyParse::Unservable => out.unservable.push((line_no, op.to_string())),
            KeyParse::Wildcard(_) => out.malformed.push(BadLine {
                line: line_no,
                reason: "a miss names one concrete shape; `*` dimensions are not one".into(),
            }),
            KeyParse::Invalid(reason) => out.malformed.push(BadLine {
                line: line_no,
                reason,
            }),
        }
    }
    out
}

/// Reads one file (invalid UTF-8 is replaced, then parsed). Only a regular file of at
/// most [`crate::profile::MAX_RESULTS_FILE_BYTES`] is read, as for results files: a FIFO
/// or a device left in a miss folder never blocks the reader.
pub fn read(path: &Path) -> io::Result<MissLog> {
    let bytes = crate::profile::read_regular(path, crate::profile::MAX_RESULTS_FILE_BYTES)?;
    Ok(parse(&String::from_utf8_lossy(&bytes)))
}

/// Every miss file in a folder, merged.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MissDir {
    /// Distinct shapes, with the calls summed over every counts file that names them
    /// (`None` when no counts file does, e.g. after SIGKILL).
    pub misses: Vec<Miss>,
    /// One line per problem: `file:line: what; what to do`.
    pub problems: Vec<String>,
    /// Files read.
    pub files: Vec<PathBuf>,
}

/// Reads every `*.csv` under `dir` (miss logs, counts sidecars, PyTorch untuned files) in
/// name order. Temporary files (`*.tmp.<pid>`) are ignored.
pub fn read_dir(dir: &Path) -> io::Result<MissDir> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv") && p.is_file())
        .collect();
    paths.sort();
    let mut out = MissDir::default();
    for path in paths {
        let log = match read(&path) {
            Ok(l) => l,
            Err(e) => {
                out.problems
                    .push(format!("{}: unreadable ({e}); skipped", path.display()));
                continue;
            }
        };
        for p in &log.malformed {
            out.problems.push(format!(
                "{}:{}: skipped: {}; the line is ignored (delete it to silence this)",
                path.display(),
                p.line,
                p.reason
            ));
        }
        for m in log.misses {
            match out.misses.iter_mut().find(|o| o.key == m.key) {
                Some(o) => o.calls = add_calls(o.calls, m.calls),
                None => out.misses.push(m),
            }
        }
        out.files.push(path);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_older_and_pytorch_forms() {
        let text = "op_name,param_signature,calls\n\
            GemmTunableOp_Half_TN,tn_64_24_40_ld_40_40_64,7\n\
            GemmTunableOp_Half_TN,tn_64_24_40\r\n\
            GemmTunableOp_float_NN,nn_8_8_8,BLAS_PARAMS: m=8, n=8\n\
            \n\
            ScaledGemmTunableOp_x,tn_1_1_1_ld_1_1_1_rw_0_bias_None\n\
            GemmTunableOp_Half_TN,tn_-4_1_1\n\
            GemmTunableOp_Half_TN,tn_64_24";
        let log = parse(text);
        // The PyTorch 2.7 and 2.6 forms of a packed problem are one key.
        assert_eq!(log.misses.len(), 2, "{log:?}");
        assert_eq!(log.misses[0].calls, Some(7));
        assert_eq!(log.misses[1].calls, None);
        assert_eq!(
            log.unservable,
            vec![(6, "ScaledGemmTunableOp_x".to_string())]
        );
        let lines: Vec<usize> = log.malformed.iter().map(|p| p.line).collect();
        assert_eq!(lines, [7, 8], "{:?}", log.malformed);
        assert!(log.malformed[1].reason.contains("cut short"));
    }

    #[test]
    fn counts_add_up_and_overflow_is_reported() {
        let log = parse(
            "GemmTunableOp_Half_TN,tn_8_8_8,3\nGemmTunableOp_Half_TN,tn_8_8_8,4\n\
             GemmTunableOp_Half_TN,tn_8_8_8,99999999999999999999\n",
        );
        assert_eq!(log.misses.len(), 1);
        assert_eq!(log.misses[0].calls, Some(7));
        assert_eq!(log.malformed.len(), 1);
    }

    #[test]
    fn a_byte_order_mark_does_not_hide_the_first_miss() {
        let log = parse("\u{feff}GemmTunableOp_Half_TN,tn_8_8_8\n");
        assert_eq!(log.misses.len(), 1, "{log:?}");
        assert!(log.unservable.is_empty() && log.malformed.is_empty());
    }

    #[test]
    fn a_fifo_is_refused_not_read() {
        let dir = std::env::temp_dir().join(format!("tunedblas-missfile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("x.csv");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a plain mkfifo on a path this test owns.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read(&fifo).unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
