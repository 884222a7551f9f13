//! The one rank loader: one `tunableop_results<rank>.csv` read a line at a time straight
//! into a lookup table, for [`super::load_tables`] and [`super::LazyTables`] alike.

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::Path;

use super::files::{open_regular, unreadable, ReadError, MAX_RESULTS_FILE_BYTES};
use crate::key::ProblemKey;
use crate::table::{Action, Table, TableBuilder};
use crate::tunableop::{self, RowData, RowSink, Solution};

/// One rank file read into a table.
pub(super) struct RankFile {
    pub(super) table: Table,
    /// Its problem lines: malformed lines, then duplicates.
    pub(super) problems: Vec<String>,
    pub(super) unservable: usize,
    pub(super) rocblas_version: Option<String>,
    /// (line, `op,signature`, id) of rows naming a solution id <= 0 (see
    /// [`version_problems`]).
    pub(super) nonpositive: Vec<(usize, String, i32)>,
}

/// The parser's sink for the loader: rows go straight into the table being built.
struct TableSink {
    builder: TableBuilder,
    /// The line of each row of the builder, by position, for duplicate reports.
    lines: Vec<u32>,
    /// Keys whose first row names another backend's solution: PyTorch would use that
    /// row, so a later rocBLAS row for the key is a duplicate (rare; usually empty).
    blocked: HashMap<ProblemKey, usize>,
    /// Rows naming ids <= 0 (rare; usually empty).
    nonpositive: Vec<(usize, String, i32)>,
}

impl RowSink for TableSink {
    fn claim(&mut self, key: ProblemKey, line: usize, row: Option<RowData<'_>>) -> Option<usize> {
        if !self.blocked.is_empty() {
            if let Some(&first) = self.blocked.get(&key) {
                return Some(first);
            }
        }
        let action = match row.map(|r| r.solution) {
            Some(Solution::Default) => Action::Default,
            Some(Solution::Rocblas(id)) => {
                if id <= 0 {
                    let (op, sig) = tunableop::op_and_signature(&key);
                    self.nonpositive.push((line, format!("{op},{sig}"), id));
                }
                Action::Solution(id)
            }
            Some(Solution::Other(_)) | None => {
                if let Some(pos) = self.builder.find(&key) {
                    return Some(self.lines[pos] as usize);
                }
                self.blocked.insert(key, line);
                return None;
            }
        };
        match self.builder.insert(key, action) {
            // Lines fit in 32 bits: a file is at most MAX_RESULTS_FILE_BYTES.
            Ok(_) => {
                self.lines.push(line as u32);
                None
            }
            Err(pos) => Some(self.lines[pos] as usize),
        }
    }
}

/// Reads one rank file into a table, a line at a time: the text is never held whole, and
/// rows go into the table as they are read (no parsed-row list, no second key map). The
/// error is the problem line.
pub(super) fn load_rank(path: &Path, rank: usize) -> Result<RankFile, String> {
    let limit = MAX_RESULTS_FILE_BYTES;
    let (file, size) = open_regular(path, limit).map_err(|e| unreadable(path, rank, &e))?;
    let mut reader = io::BufReader::with_capacity(1 << 16, file.take(limit + 1));
    // Rows are rarely under 60 bytes: sized so the table seldom grows while read.
    let guess = usize::try_from(size / 96).unwrap_or(0);
    let sink = TableSink {
        builder: TableBuilder::with_capacity(guess),
        lines: Vec::with_capacity(guess),
        blocked: HashMap::new(),
        nonpositive: Vec::new(),
    };
    let (parsed, sink) = tunableop::parse_reader(&mut reader, sink)
        .map_err(|e| unreadable(path, rank, &ReadError::Io(e)))?;
    if reader.get_ref().limit() == 0 {
        // It grew past the limit while it was read.
        let e = ReadError::TooLarge {
            size: limit + 1,
            limit,
        };
        return Err(unreadable(path, rank, &e));
    }
    let mut problems = Vec::new();
    for m in &parsed.malformed {
        problems.push(format!(
            "{}:{}: skipped: {}; fix or delete the line",
            path.display(),
            m.line,
            m.reason
        ));
    }
    if parsed.malformed_more > 0 {
        problems.push(format!(
            "{}: {} more lines skipped, each no row (the first {} are said)",
            path.display(),
            parsed.malformed_more,
            tunableop::MALFORMED_KEPT
        ));
    }
    for d in &parsed.duplicates {
        problems.push(format!(
            "{}:{}: duplicate of line {}; the first row wins",
            path.display(),
            d.line,
            d.first_line
        ));
    }
    let mut builder = sink.builder;
    for w in &parsed.wildcards {
        let Some(action) = Action::of(&w.solution) else {
            continue;
        };
        builder.push_wildcard(w.pattern, format!("{},{}", w.op_name, w.signature), action);
    }
    Ok(RankFile {
        table: builder.finish(),
        problems,
        unservable: parsed.unservable.len(),
        rocblas_version: parsed.validator("ROCBLAS_VERSION").map(str::to_owned),
        nonpositive: sink.nonpositive,
    })
}
