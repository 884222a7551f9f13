//! A campaign, for every library: recorded shapes to rows of the profile of exactly the
//! library build that was loaded. The shapes are tuned one worker per device, each worker
//! measuring its device's limits first and setting every shape against them; each finished
//! shape is checkpointed ([`crate::checkpoint`]) before the next starts. Then every
//! adoption is re-measured in a fresh process and must keep the margin there, and is
//! qualified on every device the runtime sees; the rows, the campaign's record and the
//! build's registry entry are written in one store transaction. A shard of the shapes
//! (`--shard I/N`) can be tuned on each of several machines and the profiles merged.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::backends::{Library, Session};
use crate::bench::Bench;
use crate::checkpoint::{self, Checkpoint, Header};
use crate::curate::{pct, Decision, RowChoice, Rules};
use crate::error::{Error, Result};
use crate::limits::{self, Limits};
use crate::pipeline::{self, Method, Tuned};
use crate::progress::Progress;
use crate::store::{self, Folder, Store};
use crate::timer::Mode;

/// How a campaign runs.
#[derive(Clone, Debug)]
pub struct Options {
    pub profiles: PathBuf,
    /// The profile's name for a build that has none (default `<library>-<version>`).
    pub name: Option<String>,
    /// One worker per device (none given: device 0).
    pub devices: Vec<i32>,
    /// (i, n): tune only the shapes with index % n == i.
    pub shard: Option<(usize, usize)>,
    /// Discard an unfinished campaign with other inputs instead of refusing.
    pub discard: bool,
    /// Rank files to write (None: one per device the runtime sees).
    pub ranks: Option<usize>,
    /// Also tune again every row the build's profile has.
    pub retune: bool,
    /// Measure each device's limits and set each shape against them.
    pub limits: bool,
    pub method: Method,
    pub rules: Rules,
    pub json: bool,
    pub quiet: bool,
}

/// The shapes to tune, as read from the inputs, and where they came from.
pub struct Inputs<K> {
    /// Each shape with its recorded calls (0: not counted).
    pub shapes: Vec<(K, u64)>,
    /// Shapes named on the command line: tuned again even where the profile has a row.
    pub named: Vec<K>,
    pub sources: Vec<String>,
    /// What else the record keeps of the inputs (imported files).
    pub record: Value,
}

/// One finished shape: what the checkpoint holds, one JSON line each.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Outcome {
    /// `op_name,params_signature` of the shape.
    pub shape: String,
    pub calls: u64,
    pub device: i32,
    pub tuned: Option<Tuned>,
    /// Why the shape could not be tuned.
    pub error: Option<String>,
    /// Why an adoption was rejected by qualification (the adoption is then undone).
    pub rejected: Option<String>,
}

impl Outcome {
    fn adopted(&self) -> Option<&str> {
        let t = self.tuned.as_ref()?;
        match (&t.verdict.decision, &t.verdict.row, &self.rejected) {
            (Decision::Adopt, Some(r), None) => Some(r.text()),
            _ => None,
        }
    }

    /// The decision as reported: a qualification failure or an error wins.
    pub fn decision_word(&self) -> &'static str {
        match (&self.error, &self.rejected, &self.tuned) {
            (Some(_), _, _) | (None, None, None) => "failed",
            (None, Some(_), _) => "rejected",
            (None, None, Some(t)) => t.verdict.decision.word(),
        }
    }
}

/// Counts of a finished campaign.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counts {
    pub shapes: usize,
    pub new: usize,
    pub replaced: usize,
    pub kept: usize,
    pub dropped: usize,
    pub default: usize,
    pub undecidable: usize,
    pub rejected: usize,
    pub failed: usize,
}

/// What a campaign produced.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub library: String,
    pub profile: String,
    pub dir: PathBuf,
    pub sha256: String,
    pub version: String,
    pub rows: usize,
    pub counts: Counts,
    /// Shapes finished before, by the campaign this one resumed.
    pub resumed: usize,
    /// Shapes this run added to the campaign it resumed (the inputs grew meanwhile).
    pub added: usize,
    pub seconds: f64,
    pub limits: BTreeMap<i32, Limits>,
    pub outcomes: Vec<Outcome>,
}

/// What a worker sends: its device's limits, or a finished shape with where to say it is
/// checkpointed (the worker takes its next shape only then).
enum Msg {
    Limits(i32, Limits),
    Done(Box<Outcome>, mpsc::Sender<()>),
}

/// A figure as the table shows it, `-` where it was not measured (none, or not finite).
fn or_dash(x: Option<f64>, show: impl Fn(f64) -> String) -> String {
    x.filter(|v| v.is_finite()).map_or("-".into(), show)
}

fn table_header() -> String {
    format!(
        "{:<24} {:<6} {:>8} {:>8} {:>8} {:>7} {:>6} {:<11} reason",
        "shape", "M", "heur ms", "cur ms", "new ms", "delta", "spread", "decision"
    )
}

/// The campaign's one library, its shapes and what it knew before.
struct Work<'a, L: Library> {
    lib: &'a L,
    opts: &'a Options,
    /// The profile's rows before the campaign.
    current: HashMap<L::Key, RowChoice>,
}

impl<L: Library> Work<'_, L> {
    fn key(&self, o: &Outcome) -> Option<L::Key> {
        self.lib.parse_key(&o.shape)
    }

    /// `TN f16 4096x1024 M=256`, or the shape line.
    fn label(&self, o: &Outcome) -> String {
        self.key(o).map_or(o.shape.clone(), |k| {
            let (l, m) = self.lib.label(&k);
            format!("{l} M={m}")
        })
    }

    fn line(&self, o: &Outcome) -> String {
        let (label, m) = self
            .key(o)
            .map_or((o.shape.clone(), 0), |k| self.lib.label(&k));
        let mut line = match (&o.tuned, &o.error) {
            (_, Some(e)) => format!("{label:<24} {m:<6} {:>42} failed      {e}", ""),
            (Some(t), None) => {
                let (v, ms) = (&t.verdict, |x| or_dash(x, |v| format!("{v:.4}")));
                format!(
                    "{label:<24} {m:<6} {:>8} {:>8} {:>8} {:>7} {:>6} {:<11} {}",
                    ms(Some(v.heuristic_ms)),
                    ms(v.current_ms),
                    ms(v.new_ms),
                    or_dash(v.delta, pct),
                    or_dash(Some(v.spread), |s| format!("{:.1}%", s * 100.0)),
                    o.decision_word(),
                    o.rejected.as_deref().unwrap_or(&v.reason)
                )
            }
            (None, None) => format!("{label:<24} {m:<6} {:>42} failed", ""),
        };
        if let Some(t) = &o.tuned {
            line.push_str(&format!("\n    screening: {}", t.screen.line()));
            if let Some(l) = &t.limit {
                line.push_str(&format!(
                    "\n    limit: {}-bound {:.5} ms; heuristic at {:.0}%, fastest ({}) at {:.0}% of it{}",
                    l.bound.name(),
                    l.limit_ms,
                    l.heuristic_pct,
                    l.best,
                    l.best_pct,
                    l.why.as_ref().map_or(String::new(), |w| format!(": {w}"))
                ));
            }
        }
        line
    }

    /// The campaign's opening lines: what, where, resumed from where, how and the rules.
    fn announce(
        &self,
        folder: &Folder,
        devices: &[i32],
        (total, resumed, added): (usize, usize, usize),
    ) {
        let (b, m) = (self.lib.build(), &self.opts.method);
        println!(
            "tuning {total} shapes for {} {} (build {}) on device{} {} -> {}",
            self.lib.kind().name(),
            b.version,
            b.short(),
            if devices.len() > 1 { "s" } else { "" },
            devices
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(","),
            folder.dir.display()
        );
        if added > 0 {
            println!(
                "resuming: {resumed} of {} shapes were finished before; {added} new shapes added; {} to go",
                total - added,
                total - resumed
            );
        } else if resumed > 0 {
            println!(
                "resuming: {resumed} of {total} shapes were finished before; {} to go",
                total - resumed
            );
        }
        println!(
            "timing: {} samples of {} ms, {}; {} trials; screening {}, the fastest {} on; confirmed {}",
            m.mode.name(),
            m.sample_ms,
            crate::rest::words(m.rest),
            m.trials,
            match m.budget_s {
                b if b > 0.0 => format!(
                    "at most {b} s per shape ({} in all)",
                    crate::progress::clock(
                        b * (total - resumed) as f64 / devices.len().max(1) as f64
                    )
                ),
                _ => "every candidate of every shape".into(),
            },
            m.keep,
            if m.fresh { "in this process and in a fresh one" } else { "in this process" }
        );
        println!("rules:");
        for r in self.opts.rules.describe() {
            println!("  - {r}");
        }
        println!("\n          {}", table_header());
    }

    /// Tunes `key` on `session`, set against `limits` where measured; a shape whose graph
    /// timing failed part way is timed again with events (its samples would be of two modes).
    fn tune<S: Session<Key = L::Key>>(
        &self,
        session: &S,
        key: &L::Key,
        limits: Option<&Limits>,
    ) -> Result<Tuned> {
        let (opts, cur) = (self.opts, self.current.get(key));
        let tuned_with = |m: &Method| -> Result<Tuned> {
            let b = session.bench(key, m)?;
            let mut t = pipeline::tune_shape(&b, cur, m, &opts.rules)?;
            if let Some(l) = limits {
                let best = t.leaders.first().map(|(n, ms)| (n.as_str(), *ms));
                let mut sl = l.of_shape(&b.layout(), (&t.heuristic, t.verdict.heuristic_ms), best);
                sl.why = b.why(&sl);
                t.limit = Some(sl);
            }
            Ok(t)
        };
        let t = tuned_with(&opts.method)?;
        if !t.mixed {
            return Ok(t);
        }
        let events = Method {
            mode: Mode::Events,
            ..opts.method
        };
        let mut again = tuned_with(&events)?;
        again.timing = format!("events (re-timed: {})", t.timing);
        Ok(again)
    }

    /// Tunes shapes on one device until the queue is empty.
    fn worker(
        &self,
        device: i32,
        queue: &[(L::Key, u64)],
        next: &AtomicUsize,
        tx: mpsc::Sender<Msg>,
    ) {
        let session = self.lib.session(device);
        let limits = match (&session, self.opts.limits) {
            (Ok(s), true) => match measure_limits(self.lib, s, device, &self.opts.method) {
                Ok(l) => {
                    let _ = tx.send(Msg::Limits(device, l.clone()));
                    Some(l)
                }
                Err(e) => {
                    crate::note!("tunedblas tune: device {device}: limits not measured: {e}");
                    None
                }
            },
            _ => None,
        };
        let (ack, acked) = mpsc::channel();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some((key, calls)) = queue.get(i) else {
                break;
            };
            let mut o = Outcome {
                shape: self.lib.key_text(key),
                calls: *calls,
                device,
                ..Outcome::default()
            };
            match &session {
                Err(e) => o.error = Some(e.message.clone()),
                Ok(s) => match self.tune(s, key, limits.as_ref()) {
                    Ok(t) => o.tuned = Some(t),
                    Err(e) => o.error = Some(e.message),
                },
            }
            if tx.send(Msg::Done(Box::new(o), ack.clone())).is_err() || acked.recv().is_err() {
                break;
            }
        }
    }

    /// Tunes the queue, one worker per device, checkpointing each outcome as it arrives.
    fn tune_queue(
        &self,
        devices: &[i32],
        queue: &[(L::Key, u64)],
        (total, resumed): (usize, usize),
        checkpoint: &mut Checkpoint,
        done: &mut Vec<Outcome>,
    ) -> Result<BTreeMap<i32, Limits>> {
        let human = !self.opts.json && !self.opts.quiet;
        let budget = self.opts.method.budget_s;
        let mut progress = Progress::new(total, resumed, budget, !self.opts.quiet);
        let (next, (tx, rx)) = (AtomicUsize::new(0), mpsc::channel());
        let mut limits = BTreeMap::new();
        std::thread::scope(|scope| -> Result<()> {
            for &d in devices {
                let (tx, next) = (tx.clone(), &next);
                scope.spawn(move || self.worker(d, queue, next, tx));
            }
            drop(tx);
            for msg in rx {
                let (o, ack) = match msg {
                    Msg::Limits(d, l) => {
                        if human {
                            progress.println(&format!("device {d}: {}", l.line()));
                        }
                        limits.insert(d, l);
                        continue;
                    }
                    Msg::Done(o, ack) => (*o, ack),
                };
                // A shape that could not be tuned is not checkpointed: the same command
                // again retries it.
                if o.error.is_none() {
                    checkpoint.append(&o)?;
                }
                let _ = ack.send(());
                progress.advance(&self.label(&o));
                if human {
                    progress.println(&format!(
                        "[{:>3}/{}] {}",
                        progress.done(),
                        total,
                        self.line(&o)
                    ));
                } else if let Some(e) = &o.error {
                    // An error, so said in a quiet or JSON run too (on stderr): the
                    // campaign's last line points back at these.
                    eprintln!("tunedblas tune: {}: failed: {e}", self.label(&o));
                }
                done.push(o);
            }
            Ok(())
        })?;
        progress.finish();
        Ok(limits)
    }
}

/// The device's limits: copies, the floor, and the matmul rate of the library's heuristic.
fn measure_limits<L: Library, S: Session<Key = L::Key>>(
    lib: &L,
    session: &S,
    device: i32,
    m: &Method,
) -> Result<Limits> {
    let rt = lib.runtime();
    // The copy grows from 16 MiB until one takes a millisecond, up to four times the cache.
    let mut bytes = 16usize << 20;
    let max = (4 * rt.cache_bytes(device)).max(bytes);
    let mut l = loop {
        let l = limits::measure(rt, m.mode, bytes, 15)?;
        let ms = 2.0 * bytes as f64 / l.copy_bytes_per_s * 1e3 / 2.0;
        if ms >= 1.0 || bytes >= max {
            break l;
        }
        bytes *= 4;
    };
    let one = Method {
        rotate_bytes: 1,
        ..*m
    };
    match limits::matmul_rate(
        &|side| session.bench(&session.square(side), &one),
        9,
        m.rest,
    ) {
        Ok((rate, side, spread)) => {
            l.matmul_flops_per_s = Some(rate);
            l.matmul_side = Some(side);
            l.matmul_spread = Some(spread);
        }
        Err(e) => crate::note!(
            "tunedblas tune: device {device}: matmul rate not measured ({e}); no compute limit"
        ),
    }
    Ok(l)
}

/// The shapes a campaign tunes (with their calls) and what is recorded of its inputs.
type Planned<K> = (Vec<(K, u64)>, Inputs<K>);

/// The shapes of a campaign: the inputs, plus the profile's own rows with `--retune`,
/// sorted, then sharded. Shapes the profile serves already (tuned since they were recorded)
/// are not tuned again unless asked (`--retune`, or by name); when that leaves nothing the
/// campaign says so (a success: coverage is complete, which a nightly `tune` must not
/// report as a failure). No shapes at all is an error.
fn plan<L: Library>(
    w: &Work<L>,
    folder: &Folder,
    mut inputs: Inputs<L::Key>,
    pending: &[String],
) -> Result<Planned<L::Key>> {
    let (lib, opts) = (w.lib, w.opts);
    let mut shapes = std::mem::take(&mut inputs.shapes);
    let mut served = 0;
    if opts.retune {
        let imported = folder.dir.join(store::IMPORTED_FILE);
        let waiting = std::fs::read_to_string(&imported).unwrap_or_default();
        if !waiting.is_empty() {
            inputs.sources.push(imported.display().to_string());
        }
        let more = waiting.lines().filter_map(|l| lib.parse_key(l));
        let rows = w.current.keys().copied();
        for k in more.chain(rows) {
            if !shapes.iter().any(|s| s.0 == k) {
                shapes.push((k, 0));
            }
        }
        inputs.sources.push(format!("--retune {}", folder.name));
    } else {
        let before = shapes.len();
        // The unfinished campaign's shapes stay, rows or not, so that it can resume.
        shapes.retain(|(k, _)| {
            inputs.named.contains(k)
                || !w.current.contains_key(k)
                || pending.contains(&lib.key_text(k))
        });
        served = before - shapes.len();
    }
    shapes.sort_by_key(|s| lib.key_text(&s.0));
    shapes.dedup_by_key(|s| s.0);
    if let Some((i, n)) = opts.shard {
        shapes = shapes
            .into_iter()
            .enumerate()
            .filter(|(j, _)| j % n == i)
            .map(|(_, s)| s)
            .collect();
    }
    if shapes.is_empty() && served == 0 {
        return Err(Error::failed(
            "no shapes to tune: give miss logs, untuned or results files, --shape, or --retune (with none, the miss folder $TUNEDBLAS_MISS_DIR or ~/.cache/tunedblas/misses is read)",
        ));
    }
    if served > 0 && !opts.quiet && !opts.json {
        println!(
            "{}{served} shapes of the inputs have rows in profile '{}' already{} (--retune measures them again)",
            if shapes.is_empty() { "nothing to tune: all " } else { "" },
            folder.name,
            if shapes.is_empty() { "" } else { ": not tuned again" },
        );
    }
    Ok((shapes, inputs))
}

/// Runs a campaign of `lib` on `inputs`; see the module docs.
pub fn run<L: Library>(lib: &L, inputs: Inputs<L::Key>, opts: &Options) -> Result<Summary> {
    let started = Instant::now();
    let rt = lib.runtime();
    let device_count = rt.device_count()?;
    let devices = if opts.devices.is_empty() {
        vec![0]
    } else {
        opts.devices.clone()
    };
    if let Some(d) = devices.iter().find(|&&d| d < 0 || d >= device_count) {
        return Err(Error::no_device(format!(
            "--devices names device {d}, but the runtime sees {device_count} (0..{})",
            device_count - 1
        )));
    }
    let build = lib.build();
    let store = Store::open(&opts.profiles)?;
    let folder = store.folder_for(build, opts.name.as_deref())?;
    // One campaign per profile at a time, from here to the end: the next one reads the
    // rows and the checkpoint this one leaves.
    let campaign_lock = checkpoint::lock(&folder, opts.quiet)?;
    let current: HashMap<L::Key, RowChoice> = lib
        .read(&store.read_text(&folder)?)
        .into_iter()
        .map(|(k, s, _)| (k, lib.row(&s)))
        .collect();
    let w = Work { lib, opts, current };
    let tag = format!("{} {}", lib.kind().tag(), build.sha256);
    let pending = checkpoint::pending_shapes(&folder.dir, &tag);
    let (shapes, inputs) = plan(&w, &folder, inputs, &pending)?;
    let summary = |rows, counts, (resumed, added), limits, outcomes| Summary {
        library: lib.kind().tag().into(),
        profile: folder.name.clone(),
        dir: folder.dir.clone(),
        sha256: build.sha256.clone(),
        version: build.version.clone(),
        rows,
        counts,
        resumed,
        added,
        seconds: started.elapsed().as_secs_f64(),
        limits,
        outcomes,
    };
    if shapes.is_empty() {
        return Ok(summary(
            w.current.len(),
            Counts::default(),
            (0, 0),
            BTreeMap::new(),
            vec![],
        ));
    }
    let header = Header::new(tag, shapes.iter().map(|s| lib.key_text(&s.0)).collect());
    let (mut checkpoint, mut done) =
        Checkpoint::open::<Outcome>(&folder.dir, header, opts.discard)?;
    let resumed = done.len();
    let added = checkpoint.grown_from.map_or(0, |n| shapes.len() - n);
    let finished: HashSet<String> = done.iter().map(|o| o.shape.clone()).collect();
    let queue: Vec<(L::Key, u64)> = shapes
        .iter()
        .filter(|s| !finished.contains(&lib.key_text(&s.0)))
        .cloned()
        .collect();
    if !opts.json && !opts.quiet {
        w.announce(&folder, &devices, (shapes.len(), resumed, added));
    }
    let limits = w.tune_queue(
        &devices,
        &queue,
        (shapes.len(), resumed),
        &mut checkpoint,
        &mut done,
    )?;
    let failed = done.iter().filter(|o| o.error.is_some()).count();
    if failed == done.len() {
        return Err(Error::failed(format!(
            "none of the {failed} shapes could be tuned (each is said above); nothing was written"
        )));
    }

    if opts.method.fresh {
        confirm_fresh(&w, &mut done);
    }
    let rejected_before = done.iter().filter(|o| o.rejected.is_some()).count();
    qualify(&w, &mut done, device_count);
    if !opts.json {
        print_qualification(&w, &done, rejected_before, device_count);
    }
    done.sort_by_key(|o| w.key(o));
    let ranks = opts.ranks.unwrap_or(device_count.max(1) as usize);
    // The verdicts go into the rows as they are now (a merge or import may have changed
    // them while this campaign tuned), with the record, in one transaction.
    // From the commit to the end of the campaign (its checkpoint retired, its lock
    // released), SIGINT, SIGTERM and SIGHUP wait ([`crate::held`]): a rerun would record
    // a campaign that was committed and not retired a second time.
    let (started_at, id) = (checkpoint.started.clone(), checkpoint.id.clone());
    let mut until_the_end = None;
    let transaction = store.transaction_then(
        |tx| {
            let folder = tx.folder_for(build, Some(&folder.name))?;
            let mut rows: BTreeMap<String, (L::Key, String, Option<f64>)> = lib
                .read(&tx.read_text(&folder)?)
                .into_iter()
                .map(|(k, s, t)| (lib.key_text(&k), (k, s, t)))
                .collect();
            // This campaign's record is there already when a commit of it went through before
            // (with shapes that failed, retried now) or was killed once the record was in
            // place: the record is replaced, and its rows are counted as it counted them.
            let earlier = id.as_deref().and_then(|id| {
                let prov = tx.provenance(&folder).ok()?;
                prov.campaigns().iter().find(|c| c["id"] == id).cloned()
            });
            let (counts, changes) = apply(&w, &done, &mut rows, earlier.as_ref());
            let rows: Vec<_> = rows.into_values().collect();
            let mut fields = lib.describe();
            fields.push(("library", lib.kind().tag().into()));
            tx.write_profile(&folder, build, lib.results(&rows), ranks, "tuned", &fields)?;
            let record = record(
                &w,
                &inputs,
                (&started_at, id.as_deref()),
                &devices,
                &limits,
                &counts,
                rows.len(),
                (&done, &changes),
            );
            tx.record(&folder, build, record)?;
            if opts.retune {
                // Tuned now, and recorded in provenance; shapes imported since stay waiting.
                let tuned: HashSet<String> = done.iter().map(|o| o.shape.clone()).collect();
                let waiting = tx
                .imported(&folder)?
                .into_iter()
                .filter(
                    |l| !matches!(lib.parse_key(l), Some(k) if tuned.contains(&lib.key_text(&k))),
                )
                .collect();
                tx.set_imported(&folder, waiting);
            }
            Ok((counts, rows.len()))
        },
        |_| {
            until_the_end = Some(crate::held::hold());
            // With a shape that failed the checkpoint stays: the same command retries it.
            if failed == 0 {
                checkpoint.retire(&folder.dir, &done);
            }
        },
    );
    drop(campaign_lock);
    drop(until_the_end);
    let (counts, rows_after) = transaction?;
    let s = summary(rows_after, counts, (resumed, added), limits, done);
    if !opts.json {
        print_summary(&s);
    }
    if failed > 0 {
        return Err(Error::failed(format!(
            "{failed} of {} shapes could not be tuned (each is said above; the rows of the other {} are written): \
             the same command again retries only those",
            shapes.len(),
            shapes.len() - failed
        )));
    }
    Ok(s)
}

/// How a shape changed its row: the [`Counts`] field that counts it.
fn change_word(o: &Outcome, replaced: bool) -> &'static str {
    match (&o.tuned, &o.rejected) {
        (None, _) => "failed",
        (Some(_), Some(_)) => "rejected",
        (Some(t), None) => match t.verdict.decision {
            Decision::Adopt if replaced => "replaced",
            Decision::Adopt => "new",
            Decision::Keep => "kept",
            Decision::Drop => "dropped",
            Decision::Default => "default",
            Decision::Undecidable => "undecidable",
        },
    }
}

/// Applies the verdicts to the profile's rows (by shape text); the counts, and each
/// outcome's change (its word in the counts). An adoption replaces a row of ours, else
/// it is new; but where the row is the one this very campaign adopted and recorded in an
/// `earlier` commit (one killed after its record, or with shapes that failed), it is
/// counted as that commit counted it (it did not replace itself).
fn apply<L: Library>(
    w: &Work<L>,
    done: &[Outcome],
    rows: &mut BTreeMap<String, (L::Key, String, Option<f64>)>,
    earlier: Option<&Value>,
) -> (Counts, Vec<&'static str>) {
    let mut c = Counts {
        shapes: done.len(),
        ..Counts::default()
    };
    let recorded = |shape: &str, row: &str| {
        let shapes = earlier?["shapes"].as_array()?;
        let s = shapes
            .iter()
            .find(|s| s["shape"] == shape && s["row"] == row)?;
        s["change"].as_str().map(str::to_string)
    };
    let mut changes = Vec::new();
    for o in done {
        let Some(key) = w.key(o) else {
            changes.push(change_word(o, false));
            continue;
        };
        let Some(t) = &o.tuned else {
            c.failed += 1;
            changes.push("failed");
            continue;
        };
        if o.rejected.is_some() {
            c.rejected += 1;
            changes.push("rejected");
            continue; // what was there stays
        }
        let v = &t.verdict;
        let ours = matches!(w.current.get(&key), Some(RowChoice::Mine(_)));
        let replaced = match (ours, o.adopted()) {
            (true, Some(row)) => recorded(&o.shape, row).is_none_or(|c| c == "replaced"),
            _ => ours,
        };
        let word = change_word(o, replaced);
        changes.push(word);
        match word {
            "replaced" => c.replaced += 1,
            "new" => c.new += 1,
            "kept" => c.kept += 1,
            "dropped" => c.dropped += 1,
            "default" => c.default += 1,
            _ => c.undecidable += 1,
        }
        let time = match v.decision {
            Decision::Adopt => v.new_ms,
            Decision::Keep | Decision::Undecidable => v.current_ms.or(Some(v.heuristic_ms)),
            _ => Some(v.heuristic_ms),
        };
        let text = w.lib.key_text(&key);
        match &v.row {
            Some(r) => rows.insert(text, (key, r.text().to_string(), time)),
            None => rows.remove(&text),
        };
    }
    (c, changes)
}

/// What provenance.json records of a campaign.
#[allow(clippy::too_many_arguments)]
fn record<L: Library>(
    w: &Work<L>,
    inputs: &Inputs<L::Key>,
    (started, id): (&str, Option<&str>),
    devices: &[i32],
    limits: &BTreeMap<i32, Limits>,
    counts: &Counts,
    rows_after: usize,
    (done, changes): (&[Outcome], &[&str]),
) -> Value {
    let (opts, build) = (w.opts, w.lib.build());
    json!({
        "kind": "tune",
        "id": id,
        "library": w.lib.kind().tag(),
        "started": started,
        "finished": store::utc_now(),
        "file": build.path.file_name().map(|f| f.to_string_lossy().into_owned()),
        "sources": inputs.sources,
        "inputs": inputs.record,
        "shard": opts.shard.map(|(i, n)| format!("{i}/{n}")),
        "devices": devices,
        "method": opts.method,
        "rules": {
            "margin": opts.rules.margin,
            "keep_default": opts.rules.keep_default,
            "text": opts.rules.describe(),
        },
        "limits": limits,
        "counts": counts,
        "rows_after": rows_after,
        "shapes": done.iter().zip(changes).map(|(o, change)| {
            let v = o.tuned.as_ref().map(|t| &t.verdict);
            json!({
                "shape": o.shape,
                "calls": o.calls,
                "decision": o.decision_word(),
                "change": change,
                "reason": o.error.clone().or(o.rejected.clone()).or(v.map(|v| v.reason.clone())),
                "heuristic_ms": v.map(|v| v.heuristic_ms),
                "current_ms": v.and_then(|v| v.current_ms),
                "new_ms": v.and_then(|v| v.new_ms),
                "delta": v.and_then(|v| v.delta),
                "fresh_delta": o.tuned.as_ref().and_then(|t| t.fresh_delta),
                "spread": v.map(|v| v.spread).filter(|s| s.is_finite()),
                "row": v.and_then(|v| v.row.as_ref()).map(|r| r.text().to_string()),
            })
        }).collect::<Vec<Value>>(),
    })
}

/// The proposed adoptions re-measured by a fresh process (this binary's `confirm`, with its
/// own device context and library handle, interleaved against the heuristic): those it
/// does not confirm by the margin are withdrawn (what was there stays).
fn confirm_fresh<L: Library>(w: &Work<L>, done: &mut [Outcome]) {
    let proposed: Vec<(L::Key, String, Option<f64>)> = done
        .iter()
        .filter_map(|o| Some((w.key(o)?, o.adopted()?.to_string(), None)))
        .collect();
    if proposed.is_empty() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tunedblas-fresh-{}", std::process::id()));
    let verdicts = std::env::current_exe()
        .map_err(|e| format!("this program's path: {e}"))
        .and_then(|exe| {
            let text = w.lib.results(&proposed);
            fresh_verdicts(
                &exe,
                &w.lib.child_args(),
                &w.opts.method,
                &w.opts.rules,
                &text,
                &dir,
            )
        });
    let _ = std::fs::remove_dir_all(&dir);
    let mut withdrawn = 0;
    for o in done.iter_mut() {
        let cur = w.key(o).and_then(|k| w.current.get(&k).cloned());
        withdrawn += usize::from(apply_fresh(o, &verdicts, &w.opts.rules, cur));
    }
    crate::note!(
        "tunedblas tune: fresh process: {} of {} proposed rows confirmed by the {:.0}% margin, {withdrawn} withdrawn",
        proposed.len() - withdrawn,
        proposed.len(),
        w.opts.rules.margin * 100.0
    );
}

/// The fresh process's verdict on `o`'s adoption: it stands where the fresh process
/// measured the same row at least the margin faster than the heuristic; otherwise (not
/// measured, failed, under the margin, or the whole child failed) it is withdrawn, with
/// why, and what was there (`current`, else `Default` or no row) stays. True when
/// withdrawn.
pub fn apply_fresh(
    o: &mut Outcome,
    verdicts: &std::result::Result<Vec<Verdict>, String>,
    rules: &Rules,
    current: Option<RowChoice>,
) -> bool {
    let Some(sol) = o.adopted().map(str::to_string) else {
        return false;
    };
    let found = match verdicts {
        Ok(v) => Ok(v.iter().find(|x| x.0 == o.shape && x.1 == sol)),
        Err(e) => Err(format!("the fresh-process confirmation failed ({e})")),
    };
    let t = o.tuned.as_mut().expect("adopted");
    t.fresh_delta = found.as_ref().ok().and_then(|f| f.and_then(|x| x.2));
    let verdict = match found {
        Err(e) => Err(e),
        Ok(None) => Err("the fresh process did not measure it".to_string()),
        Ok(Some((_, _, None))) => Err("the fresh process could not run it".to_string()),
        Ok(Some((_, _, Some(d)))) if -d >= rules.margin => Ok(*d),
        Ok(Some((_, _, Some(d)))) => Err(format!("only {} in a fresh process", pct(*d))),
    };
    let v = &mut t.verdict;
    match verdict {
        Ok(d) => {
            v.reason = format!("{}, {} in a fresh process", v.reason, pct(d));
            false
        }
        Err(why) => {
            v.reason = format!("{} but {why}", v.reason);
            v.decision = if current.is_some() {
                Decision::Keep
            } else {
                Decision::Default
            };
            v.row = current.or(rules.keep_default.then_some(RowChoice::Default));
            true
        }
    }
}

/// A fresh process's verdict on one row: (shape, solution, its delta against the
/// heuristic where it measured one).
pub type Verdict = (String, String, Option<f64>);

/// Runs `exe confirm` on the rows of results file `text` in a child process, with the
/// library arguments `lib_args` and how this campaign times; its verdicts, or why none.
pub fn fresh_verdicts(
    exe: &Path,
    lib_args: &[OsString],
    m: &Method,
    rules: &Rules,
    text: &str,
    dir: &Path,
) -> std::result::Result<Vec<Verdict>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (rows, log) = (dir.join("proposed.csv"), dir.join("fresh.json"));
    std::fs::write(&rows, text).map_err(|e| format!("{}: {e}", rows.display()))?;
    crate::note!(
        "tunedblas tune: the proposed rows re-measured in a fresh process ({} confirm)",
        exe.display()
    );
    // Quiet: what the child has to say is its rows' lines (relayed), not its notes.
    let out = std::process::Command::new(exe)
        .args(["confirm", "-q"])
        .arg("--rows")
        .arg(&rows)
        .arg("--log")
        .arg(&log)
        .args(lib_args)
        .args(method_args(m, rules))
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        crate::note!("tunedblas tune: fresh process: {line}");
    }
    if !out.status.success() {
        return Err(format!("the child {}", out.status));
    }
    let text = std::fs::read_to_string(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", log.display()))?;
    Ok(read_fresh(&v))
}

/// The options that make a child time as `m` does, as the command line takes them.
pub fn method_args(m: &Method, rules: &Rules) -> Vec<String> {
    [
        ("--trials", m.trials.to_string()),
        ("--sample-ms", m.sample_ms.to_string()),
        ("--rest", m.rest.to_string()),
        ("--timing", m.mode.name().into()),
        ("--workspace", m.workspace.to_string()),
        (
            "--rotate-mib",
            (m.rotate_bytes as f64 / (1 << 20) as f64).to_string(),
        ),
        // In percent, as the command line takes it (rounded: 0.03 * 100 is not exactly 3).
        ("--margin", ((rules.margin * 1e8).round() / 1e6).to_string()),
    ]
    .into_iter()
    .flat_map(|(option, value)| [option.to_string(), value])
    .collect()
}

/// The verdicts of a `confirm --log` file.
pub fn read_fresh(log: &Value) -> Vec<Verdict> {
    let mut out = Vec::new();
    for r in log["rows"].as_array().into_iter().flatten() {
        let (Some(shape), Some(sol)) = (r["shape"].as_str(), r["solution"].as_str()) else {
            continue;
        };
        let delta = if r["error"].is_null() {
            r["delta"].as_f64()
        } else {
            None
        };
        out.push((shape.to_string(), sol.to_string(), delta));
    }
    out
}

/// Qualifies every adoption on every device the runtime sees; a failure undoes it.
fn qualify<L: Library>(w: &Work<L>, done: &mut [Outcome], devices: i32) {
    let (at, rows): (Vec<usize>, Vec<(L::Key, String)>) = done
        .iter()
        .enumerate()
        .filter_map(|(i, o)| Some((i, (w.key(o)?, o.adopted()?.to_string()))))
        .unzip();
    for (j, why) in qualify_rows(w.lib, &rows, devices, &w.opts.method) {
        done[at[j]].rejected = Some(why);
    }
}

/// Checks each row of `rows` (this library's, by solution name) on every one of `devices`
/// against the reference: the index and why of each that fails.
pub fn qualify_rows<L: Library>(
    lib: &L,
    rows: &[(L::Key, String)],
    devices: i32,
    m: &Method,
) -> Vec<(usize, String)> {
    let one = Method {
        rotate_bytes: 1,
        mode: Mode::Events,
        rest: 0.0,
        ..*m
    };
    let mut failed: Vec<(usize, String)> = Vec::new();
    for d in 0..devices {
        let session = lib.session(d);
        for (i, (key, name)) in rows.iter().enumerate() {
            if failed.iter().any(|f| f.0 == i) {
                continue;
            }
            let checked = match &session {
                Ok(s) => s
                    .bench(key, &one)
                    .map_err(|e| e.message)
                    .and_then(|b| pipeline::qualify(&b, name)),
                Err(e) => Err(e.message.clone()),
            };
            if let Err(why) = checked {
                failed.push((
                    i,
                    format!("{name} failed qualification on device {d}: {why}"),
                ));
            }
        }
    }
    failed
}

/// What qualification did to the adoptions: one line, and one more per adoption it
/// rejected. Nothing when there was nothing to qualify.
fn print_qualification<L: Library>(
    w: &Work<L>,
    done: &[Outcome],
    rejected_before: usize,
    devices: i32,
) {
    let adopted =
        |o: &&Outcome| o.tuned.as_ref().map(|t| t.verdict.decision) == Some(Decision::Adopt);
    let adoptions = done.iter().filter(adopted).count();
    if adoptions == 0 {
        return;
    }
    let rejected: Vec<&Outcome> = done
        .iter()
        .filter(adopted)
        .filter(|o| o.rejected.is_some())
        .collect();
    println!(
        "\nqualification on {devices} device{} against a high-precision reference: {} of {adoptions} adoptions pass{}",
        if devices == 1 { "" } else { "s" },
        adoptions - rejected.len(),
        if rejected.len() > rejected_before {
            format!(", {} rejected (their rows stay as they were):", rejected.len())
        } else {
            String::new()
        }
    );
    for o in rejected {
        println!("  {}: {}", w.label(o), o.rejected.as_deref().unwrap_or(""));
    }
}

/// The campaign's counts, the profile written and the time taken. The per-shape lines were
/// printed as each shape finished (not with --quiet); they are not printed again.
pub fn print_summary(s: &Summary) {
    let c = &s.counts;
    println!(
        "\n{} shapes: {} new, {} replaced, {} kept, {} dropped, {} default, {} undecidable, {} rejected by qualification, {} failed",
        c.shapes, c.new, c.replaced, c.kept, c.dropped, c.default, c.undecidable, c.rejected, c.failed
    );
    println!(
        "profile '{}' ({} rows per rank) for {} {} build {} in {}",
        s.profile,
        s.rows,
        s.library,
        s.version,
        &s.sha256[..12],
        s.dir.display()
    );
    println!(
        "{:.1} s ({:.2} s per shape)",
        s.seconds,
        s.seconds / c.shapes.max(1) as f64
    );
}
