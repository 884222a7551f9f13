//! Reading results files: one parser for every kind of row (validators, concrete rows,
//! `*` rows, rows other backends serve, duplicates, malformed lines), over a whole text
//! ([`parse`]) or a reader a line at a time ([`parse_reader`], the interposer's loader).

use std::collections::HashMap;
use std::io;
use std::path::Path;

use super::{
    parse_key, Duplicate, KeyParse, Malformed, ResultsFile, Row, Solution, Unservable, WildcardRow,
};
use crate::key::ProblemKey;

/// Reads a results file. Invalid UTF-8 is replaced (lossy) and the text still parsed.
/// Only a regular file of at most [`crate::profile::MAX_RESULTS_FILE_BYTES`] is read: a FIFO
/// (which would block), a device such as `/dev/zero` (which never ends) or a larger file is
/// refused with an error saying what it is.
pub fn read(path: &Path) -> io::Result<ResultsFile> {
    let bytes = crate::profile::read_regular(path, crate::profile::MAX_RESULTS_FILE_BYTES)?;
    Ok(parse(&String::from_utf8_lossy(&bytes)))
}

/// The UTF-8 byte order mark some editors (and Windows tools) put at the start of a file.
const BOM: &str = "\u{feff}";

/// One non-blank line of a TunableOp-style file (a results file, a PyTorch untuned file,
/// a miss log or its counts): its 1-based number, its text trimmed (the `\r` of CRLF and
/// spaces dropped), and whether it is the last segment, one that no newline ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    pub number: usize,
    pub text: &'a str,
    pub last: bool,
}

impl Line<'_> {
    /// PyTorch ends every row with a newline and a time. A last line with neither was cut
    /// short (a full disk, a killed writer) and may end inside the solution, which would
    /// still read as some other, wrong solution: never serve it.
    pub fn cut_short(&self) -> bool {
        self.last && !self.text.starts_with("Validator,") && self.text.split(',').count() < 4
    }
}

/// What is said of a [`Line::cut_short`] line.
pub const CUT_SHORT: &str = "the last line has no time_ms and no newline: the file was cut short";

/// The one way every TunableOp-style file is cut into lines: `\n`-separated segments, a
/// UTF-8 byte order mark at the very start dropped, blank lines skipped. A `last` line
/// that is not blank was never ended by its writer (the file may have been cut short).
pub fn lines(text: &str) -> impl Iterator<Item = Line<'_>> {
    let text = text.strip_prefix(BOM).unwrap_or(text);
    let segments = text.split('\n').count();
    text.split('\n').enumerate().filter_map(move |(idx, raw)| {
        let text = raw.trim();
        (!text.is_empty()).then_some(Line {
            number: idx + 1,
            text,
            last: idx + 1 == segments,
        })
    })
}

/// Parses the text of a results file. Never panics; see the module docs for what goes where.
/// A UTF-8 byte order mark at the start is dropped.
pub fn parse(text: &str) -> ResultsFile {
    let segments = text.split('\n').count();
    let mut sink = FileRows::default();
    // Sized for every line being a row: growing the row vector and the key map as rows
    // arrive was a third of the interposer's start-up (docs/benchmarks/history.md).
    sink.rows.reserve(segments);
    sink.keys.reserve(segments);
    let mut parser = Parser::new(sink);
    for line in lines(text) {
        parser.take(line);
    }
    let (mut out, sink) = parser.finish();
    out.rows = sink.rows;
    out
}

/// Parses a results file from a reader, one line at a time, handing each concrete row to
/// `sink` instead of keeping it: what the interposer's loader uses, so a large profile is
/// never held as text plus rows plus a key map at once. Everything but `rows` is in the
/// returned [`ResultsFile`] (validators, `*` rows, unservable rows, duplicates, malformed
/// lines), exactly as [`parse`] would have it for the same bytes; invalid UTF-8 is replaced
/// line by line, which gives the same text as replacing it in the whole file.
pub(crate) fn parse_reader<S: RowSink>(
    mut reader: impl io::BufRead,
    sink: S,
) -> io::Result<(ResultsFile, S)> {
    let mut parser = Parser::new(sink);
    let mut buf = Vec::with_capacity(256);
    let mut idx = 0;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf)?;
        // A segment not ended by a newline is the last one (empty at a final newline).
        let last = n == 0 || buf.last() != Some(&b'\n');
        if last && n == 0 && idx > 0 {
            // The file ended with a newline: the empty segment after it is blank.
            break;
        }
        idx += 1;
        if idx % 1024 == 0 {
            crate::progress::tick();
        }
        let mut bytes = &buf[..];
        if bytes.last() == Some(&b'\n') {
            bytes = &bytes[..bytes.len() - 1];
        }
        if idx == 1 {
            bytes = bytes.strip_prefix(BOM.as_bytes()).unwrap_or(bytes);
        }
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim();
        if !text.is_empty() {
            parser.take(Line {
                number: idx,
                text,
                last,
            });
        }
        if last {
            break;
        }
    }
    Ok(parser.finish())
}

/// The servable part of a concrete row, for a [`RowSink`].
pub(crate) struct RowData<'a> {
    pub solution: Solution,
    pub time_ms: Option<f64>,
    pub blas_params: Option<&'a str>,
}

/// Where the parser puts concrete rows: [`ResultsFile::rows`] for [`parse`], or a lookup
/// table straight away for the interposer's loader. The sink also answers for duplicates,
/// so a second map of every key is never needed.
pub(crate) trait RowSink {
    /// Takes the row at `line` for `key`, unless an earlier row named the same problem: then
    /// it keeps nothing and returns that row's line. `row` is `None` when the row's solution
    /// is not a rocBLAS one; the key is still taken (PyTorch would use that first row).
    fn claim(&mut self, key: ProblemKey, line: usize, row: Option<RowData<'_>>) -> Option<usize>;
}

/// [`parse`]'s sink: every row, and the first line of every key.
#[derive(Default)]
struct FileRows {
    rows: Vec<Row>,
    keys: HashMap<ProblemKey, usize>,
}

impl RowSink for FileRows {
    fn claim(&mut self, key: ProblemKey, line: usize, row: Option<RowData<'_>>) -> Option<usize> {
        match self.keys.entry(key) {
            std::collections::hash_map::Entry::Occupied(first) => Some(*first.get()),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(line);
                if let Some(r) = row {
                    self.rows.push(Row {
                        key,
                        solution: r.solution,
                        time_ms: r.time_ms,
                        blas_params: r.blas_params.map(str::to_string),
                        line,
                    });
                }
                None
            }
        }
    }
}

struct Parser<S> {
    out: ResultsFile,
    sink: S,
    /// First line of each (op, signature) that has no concrete key.
    texts: HashMap<(String, String), usize>,
}

impl<S: RowSink> Parser<S> {
    fn new(sink: S) -> Parser<S> {
        Parser {
            out: ResultsFile::default(),
            sink,
            texts: HashMap::new(),
        }
    }

    fn finish(self) -> (ResultsFile, S) {
        (self.out, self.sink)
    }

    fn malformed(&mut self, line: usize, reason: String) {
        if self.out.malformed.len() < super::MALFORMED_KEPT {
            self.out.malformed.push(Malformed { line, reason });
        } else {
            self.out.malformed_more += 1;
        }
    }

    /// One line of the file (see [`lines`]).
    fn take(&mut self, l: Line<'_>) {
        if l.cut_short() {
            return self.malformed(l.number, CUT_SHORT.into());
        }
        self.line(l.text, l.number);
    }

    /// The first line of the (op, signature) text, or `None` after noting this one as first.
    fn first_text(&mut self, op: &str, sig: &str, line: usize) -> Option<usize> {
        let key = (op.to_string(), sig.to_string());
        if let Some(&first) = self.texts.get(&key) {
            return Some(first);
        }
        self.texts.insert(key, line);
        None
    }

    fn line(&mut self, text: &str, line: usize) {
        if let Some(rest) = text.strip_prefix("Validator,") {
            let (k, v) = match rest.split_once(',') {
                Some((k, v)) => (k.trim(), v.trim()),
                None => {
                    return self.malformed(line, "a Validator line needs a key and a value".into())
                }
            };
            if k.is_empty() {
                return self.malformed(line, "a Validator line with an empty key".into());
            }
            if self.out.validator(k).is_some() {
                return self.malformed(line, format!("validator {k} repeated; the first is kept"));
            }
            self.out.validators.push((k.to_string(), v.to_string()));
            return;
        }

        let mut fields = text.splitn(5, ',');
        let op = fields.next().unwrap_or("").trim();
        let (sig, sol) = match (fields.next(), fields.next()) {
            (Some(sig), Some(sol)) => (sig.trim(), sol.trim()),
            _ => {
                return self.malformed(
                    line,
                    "expected op_name,param_signature,solution[,time_ms[,BLAS_PARAMS]]".into(),
                )
            }
        };
        let time_ms = match parse_time(fields.next().unwrap_or("")) {
            Ok(t) => t,
            Err(e) => return self.malformed(line, e),
        };
        let blas_params = fields.next().map(str::trim);
        if op.is_empty() || sig.is_empty() {
            return self.malformed(line, "empty op name or signature".into());
        }
        if sol.is_empty() {
            return self.malformed(line, "the solution field is empty".into());
        }

        let unservable = |reason: String| Unservable {
            op_name: op.to_string(),
            signature: sig.to_string(),
            solution: sol.to_string(),
            line,
            reason,
            time_ms,
            blas_params: blas_params.map(str::to_string),
        };

        match parse_key(op, sig) {
            KeyParse::Invalid(reason) => self.malformed(line, reason),
            KeyParse::Unservable => {
                if let Some(first_line) = self.first_text(op, sig, line) {
                    self.out.duplicates.push(Duplicate { line, first_line });
                } else {
                    let u = unservable(unservable_op_reason(op));
                    self.out.unservable.push(u);
                }
            }
            KeyParse::Wildcard(pattern) => {
                let solution = match Solution::parse(sol) {
                    Ok(s) => s,
                    Err(e) => return self.malformed(line, e),
                };
                if let Some(first_line) = self.first_text(op, sig, line) {
                    self.out.duplicates.push(Duplicate { line, first_line });
                    return;
                }
                if let Solution::Other(s) = &solution {
                    let u = unservable(format!("solution {s} is not a rocBLAS solution"));
                    self.out.unservable.push(u);
                    return;
                }
                self.out.wildcards.push(WildcardRow {
                    op_name: op.to_string(),
                    signature: sig.to_string(),
                    tokens: sig.split('_').map(str::to_string).collect(),
                    pattern,
                    solution,
                    time_ms,
                    blas_params: blas_params.map(str::to_string),
                    line,
                });
            }
            KeyParse::Key(key) => {
                let solution = match Solution::parse(sol) {
                    Ok(s) => s,
                    Err(e) => return self.malformed(line, e),
                };
                let other = match &solution {
                    Solution::Other(s) => Some(s.clone()),
                    _ => None,
                };
                let row = other.is_none().then_some(RowData {
                    solution,
                    time_ms,
                    blas_params,
                });
                if let Some(first_line) = self.sink.claim(key, line, row) {
                    self.out.duplicates.push(Duplicate { line, first_line });
                    return;
                }
                if let Some(s) = other {
                    let u = unservable(format!("solution {s} is not a rocBLAS solution"));
                    self.out.unservable.push(u);
                }
            }
        }
    }
}

fn parse_time(field: &str) -> Result<Option<f64>, String> {
    let t = field.trim();
    if t.is_empty() {
        return Ok(None);
    }
    // PyTorch writes `inf` for a candidate that never ran (a `Default` it could not time,
    // a result loaded but not re-timed) and reads it back; `0` is what TunableOp on CUDA
    // writes. Both are times, not errors; only NaN and negative values make no sense.
    match t.parse::<f64>() {
        Ok(v) if v >= 0.0 => Ok(Some(v)),
        Ok(_) => Err(format!("time_ms {t:?} is not a non-negative number")),
        Err(_) => Err(format!("time_ms {t:?} is not a number")),
    }
}

fn unservable_op_reason(op: &str) -> String {
    if op.starts_with("GemmAndBiasTunableOp_") {
        "GemmAndBias (hipBLASLt epilogue) ops are not served through rocBLAS".into()
    } else if op.starts_with("ScaledGemmTunableOp_") {
        "ScaledGemm (fp8) ops are not served through rocBLAS".into()
    } else if op.contains("_tf32_") {
        "tf32 GEMMs are not served through rocBLAS".into()
    } else {
        format!("unknown op name {op}")
    }
}
