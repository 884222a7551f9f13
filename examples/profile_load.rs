//! Start-up cost of a large profile: writes a generated profile folder, or loads one the way
//! the interposer does at start-up, and prints how long that took and how many rows it holds.
//! Run it under `/usr/bin/time -v` for the peak resident memory (BENCHMARKS.md, "Start-up
//! with a 2.5M-row profile").
//!
//! ```text
//! profile_load gen DIR ROWS [RANKS]   write DIR/tunableop_results<r>.csv, ROWS distinct rows
//!                                     each; rank r > 0 names other solution ids
//! profile_load all DIR                profile::load_tables: every rank file
//! profile_load lazy DIR DEVICE        profile::LazyTables::open: the calling device's rank
//! ```

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use tunedblas_core::profile;

const WIDTHS: [i64; 8] = [1024, 2048, 2560, 4096, 5120, 8192, 11008, 14336];

fn generate(dir: &Path, rows: usize, ranks: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for rank in 0..ranks.max(1) {
        let path = dir.join(format!("tunableop_results{rank}.csv"));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        writeln!(out, "Validator,PT_VERSION,2.7.0").unwrap();
        writeln!(out, "Validator,ROCBLAS_VERSION,4.4.0-refblas").unwrap();
        writeln!(out, "Validator,GCN_ARCH_NAME,gfx1030").unwrap();
        let per_n = WIDTHS.len() * WIDTHS.len();
        for i in 0..rows {
            let (m, k) = (
                WIDTHS[i % WIDTHS.len()],
                WIDTHS[i / WIDTHS.len() % WIDTHS.len()],
            );
            let n = 1 + (i / per_n) as i64;
            let id = -1_086_327_687 + (i % 97) as i64 + 1_000 * rank as i64;
            let time = 0.001 + (i % 1000) as f64 * 0.0137;
            writeln!(
                out,
                "GemmTunableOp_Half_TN,tn_{m}_{n}_{k}_ld_{k}_{k}_{m},Gemm_Rocblas_{id},{time:.4}"
            )
            .unwrap();
        }
        out.flush().unwrap();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: profile_load gen DIR ROWS [RANKS] | all DIR | lazy DIR DEVICE";
    let (Some(mode), Some(dir)) = (args.first(), args.get(1)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let dir = Path::new(dir);
    let arg = |i: usize| -> usize {
        args.get(i).and_then(|a| a.parse().ok()).unwrap_or_else(|| {
            eprintln!("{usage}");
            std::process::exit(2)
        })
    };
    let start = Instant::now();
    match mode.as_str() {
        "gen" => {
            let ranks = if args.len() > 3 { arg(3) } else { 1 };
            generate(dir, arg(2), ranks);
            println!("wrote {ranks} rank files of {} rows", arg(2));
        }
        "all" => {
            let loaded = profile::load_tables(dir);
            let ms = start.elapsed().as_secs_f64() * 1e3;
            println!(
                "load_tables: {:?} rows by rank, {} problems, {ms:.0} ms",
                loaded.rows,
                loaded.problems.len()
            );
        }
        "lazy" => {
            let device = i32::try_from(arg(2)).unwrap_or(0);
            let (tables, opened) = profile::LazyTables::open(dir, device, None);
            let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
            let took = ms(start.elapsed());
            let rows = match tables.table_for(device) {
                profile::RankTable::Ready(t) => t.len(),
                _ => 0,
            };
            println!(
                "LazyTables::open: device {device}: {rows} rows, ranks parsed {:?} of {} rank files, {} problems, {took:.0} ms",
                tables.parsed_ranks(),
                opened.rank_files,
                opened.problems.len()
            );
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}
