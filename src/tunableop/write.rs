//! Writing results files: rows in the PyTorch (>= 2.7) form where a key has one, else the
//! tunedblas extension form; validators first.

use super::{op_and_signature, solution_text, ResultsFile};

impl ResultsFile {
    /// The file as text: validators, then rows (each key in the PyTorch >= 2.7 form where it
    /// has one, else the extension form), then wildcard and unservable rows as read. `\n`
    /// line ends; times are written with the digits that read back to the same f64.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.validators {
            out.push_str("Validator,");
            out.push_str(k);
            out.push(',');
            out.push_str(v);
            out.push('\n');
        }
        for row in &self.rows {
            let (op, sig) = op_and_signature(&row.key);
            let sol = solution_text(&row.solution);
            write_row(
                &mut out,
                &op,
                &sig,
                &sol,
                row.time_ms,
                row.blas_params.as_deref(),
            );
        }
        for w in &self.wildcards {
            let sol = solution_text(&w.solution);
            write_row(
                &mut out,
                &w.op_name,
                &w.signature,
                &sol,
                w.time_ms,
                w.blas_params.as_deref(),
            );
        }
        for u in &self.unservable {
            write_row(
                &mut out,
                &u.op_name,
                &u.signature,
                &u.solution,
                u.time_ms,
                u.blas_params.as_deref(),
            );
        }
        out
    }
}

fn write_row(
    out: &mut String,
    op: &str,
    sig: &str,
    sol: &str,
    time_ms: Option<f64>,
    blas: Option<&str>,
) {
    out.push_str(op);
    out.push(',');
    out.push_str(sig);
    out.push(',');
    out.push_str(sol);
    if time_ms.is_some() || blas.is_some() {
        out.push(',');
        if let Some(t) = time_ms {
            // Rust's `Display` for f64 prints the shortest text that parses back exactly.
            out.push_str(&t.to_string());
        }
    }
    if let Some(b) = blas {
        out.push(',');
        out.push_str(b);
    }
    out.push('\n');
}
