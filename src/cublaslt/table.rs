//! cuBLASLt profile rows and the lookup table the interposer serves from: the rows of a
//! results file, each key's action (`Default`, or a configuration to rebuild), and per
//! row the algorithm once rebuilt and checked, its hit mark and its quarantine.

use super::*;
use crate::claim_map::{self, ClaimMap, Probe};
use crate::table::RowState;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};

/// What a row tells the interposer to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LtAction {
    /// The caller's own algorithm was fastest: pass the call through.
    Default,
    /// cuBLASLt: rebuild this configuration and run with it.
    Config(AlgoConfig),
    /// hipBLASLt: the algorithm of this index (`Gemm_Hipblaslt_<index>`, as PyTorch
    /// TunableOp writes it), rebuilt with `hipblaslt_ext::getAlgosFromIndex`.
    Index(i32),
}

/// Why a row was skipped because it belongs to another library (not a problem to report:
/// one ROCm results file holds rocBLAS and hipBLASLt rows side by side).
pub const OTHER_LIBRARY: &str = "another library's row";

impl LtAction {
    pub fn solution_text(&self) -> String {
        match self {
            LtAction::Default => "Default".into(),
            LtAction::Config(c) => c.solution_name(),
            LtAction::Index(i) => format!("{}{i}", crate::hipblaslt::SOLUTION_PREFIX),
        }
    }

    pub fn parse(text: &str) -> Result<LtAction, String> {
        let t = text.trim();
        if t == "Default" {
            return Ok(LtAction::Default);
        }
        if let Some(index) = crate::hipblaslt::parse_index(t) {
            return index.map(LtAction::Index);
        }
        if t.starts_with("Gemm_Rocblas_") {
            return Err(format!("{OTHER_LIBRARY}: {t} is a rocBLAS solution"));
        }
        AlgoConfig::parse(t).map(LtAction::Config)
    }
}

/// The two Lt libraries: each serves `Default` rows and its own kind of tuned row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LtLib {
    Cublaslt,
    Hipblaslt,
}

impl LtLib {
    pub fn name(self) -> &'static str {
        match self {
            LtLib::Cublaslt => "cuBLASLt",
            LtLib::Hipblaslt => "hipBLASLt",
        }
    }

    /// True when this library can run the row's action.
    pub fn serves(self, action: &LtAction) -> bool {
        matches!(
            (self, action),
            (_, LtAction::Default)
                | (LtLib::Cublaslt, LtAction::Config(_))
                | (LtLib::Hipblaslt, LtAction::Index(_))
        )
    }
}

/// One row of a cuBLASLt profile.
#[derive(Clone, Debug, PartialEq)]
pub struct LtRow {
    pub key: LtKey,
    pub action: LtAction,
    pub time_ms: Option<f64>,
}

/// A `*` row of a results file (see [`LtPattern`]), as written.
#[derive(Clone, Debug, PartialEq)]
pub struct LtWildcardRow {
    pub pattern: LtPattern,
    /// `op,signature` as the file wrote it.
    pub text: String,
    pub action: LtAction,
    pub time_ms: Option<f64>,
}

/// A cuBLASLt results file: validators, rows, and the lines that were skipped (with why).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LtResults {
    pub validators: Vec<(String, String)>,
    pub rows: Vec<LtRow>,
    /// (1-based line, reason) of lines that are not servable cuBLASLt rows.
    pub skipped: Vec<(usize, String)>,
    /// PyTorch's `*` rows, in file order.
    pub wildcards: Vec<LtWildcardRow>,
}

impl LtResults {
    /// The file as text: validators, then rows in the order given.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.validators {
            out.push_str(&format!("Validator,{k},{v}\n"));
        }
        for r in &self.rows {
            let (op, sig) = op_and_signature(&r.key);
            out.push_str(&format!("{op},{sig},{}", r.action.solution_text()));
            if let Some(t) = r.time_ms {
                out.push_str(&format!(",{t}"));
            }
            out.push('\n');
        }
        for w in &self.wildcards {
            out.push_str(&format!("{},{}", w.text, w.action.solution_text()));
            if let Some(t) = w.time_ms {
                out.push_str(&format!(",{t}"));
            }
            out.push('\n');
        }
        out
    }
}

/// Parses a results file for cuBLASLt rows. Never panics; a later row for a key an earlier
/// row named is skipped (the first wins, as in PyTorch).
pub fn parse_results(text: &str) -> LtResults {
    let mut out = LtResults::default();
    let mut seen: HashMap<LtKey, usize> = HashMap::new();
    // The one line reader of TunableOp-style files (BOM, blank lines, a cut-short last line).
    for one in crate::tunableop::lines(text) {
        let (line, l) = (one.number, one.text);
        if one.cut_short() {
            out.skipped.push((line, crate::tunableop::CUT_SHORT.into()));
            continue;
        }
        let fields: Vec<&str> = l.splitn(5, ',').map(str::trim).collect();
        if fields[0] == "Validator" {
            if fields.len() >= 3 {
                let value = l.splitn(3, ',').nth(2).unwrap_or("").trim();
                out.validators
                    .push((fields[1].to_owned(), value.to_owned()));
            } else {
                out.skipped
                    .push((line, "a Validator line without a value".into()));
            }
            continue;
        }
        if fields.len() < 3 {
            out.skipped.push((line, "fewer than three fields".into()));
            continue;
        }
        let key = match parse_key(fields[0], fields[1]) {
            Ok(k) => k,
            Err(e) if fields[1].contains('*') => {
                match (
                    LtPattern::parse(fields[0], fields[1]),
                    LtAction::parse(fields[2]),
                ) {
                    (Ok(pattern), Ok(action)) => {
                        let text = format!("{},{}", fields[0], fields[1]);
                        if let Some(first) = out.wildcards.iter().position(|w| w.text == text) {
                            out.skipped.push((
                                line,
                                format!("duplicate of `*` row {}; the first row wins", first + 1),
                            ));
                        } else {
                            out.wildcards.push(LtWildcardRow {
                                pattern,
                                text,
                                action,
                                time_ms: fields.get(3).and_then(|t| t.parse::<f64>().ok()),
                            });
                        }
                    }
                    (Err(_), _) => out.skipped.push((line, e)),
                    (_, Err(why)) => out.skipped.push((line, why)),
                }
                continue;
            }
            Err(e) => {
                out.skipped.push((line, e));
                continue;
            }
        };
        let action = match LtAction::parse(fields[2]) {
            Ok(a) => a,
            Err(e) => {
                out.skipped.push((line, e));
                continue;
            }
        };
        if let Some(first) = seen.get(&key) {
            out.skipped.push((
                line,
                format!("duplicate of line {first}; the first row wins"),
            ));
            continue;
        }
        seen.insert(key, line);
        let time_ms = fields.get(3).and_then(|t| t.parse::<f64>().ok());
        out.rows.push(LtRow {
            key,
            action,
            time_ms,
        });
    }
    out
}

/// An algorithm rebuilt from its configuration and checked against a call's descriptors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prepared {
    pub algo: MatmulAlgo,
    /// Workspace bytes it needs (`cublasLtMatmulAlgoCheck`).
    pub workspace: usize,
    /// Minimum alignment in bytes of the A, B, C, D pointers.
    pub min_align: [u32; 4],
    /// The class of call it was checked for (the library's `Library::call_class`: for
    /// hipBLASLt alpha and beta at 1 or 0); a call of another class keeps its own
    /// algorithm.
    pub class: u8,
    /// `min_align` as masks of the low bits a pointer must not have (powers of two), and
    /// whether any alignment is not a power of two (then checked by division).
    masks: [usize; 4],
    odd: bool,
    /// The one mask of all four pointers when they share it (the usual case: one alignment
    /// for A, B, C and D), else `usize::MAX`: then one mask of the four pointers ORed.
    one: usize,
}

impl Prepared {
    pub fn new(algo: MatmulAlgo, workspace: usize, min_align: [u32; 4], class: u8) -> Prepared {
        Prepared {
            algo,
            workspace,
            min_align,
            class,
            masks: min_align.map(|a| (a as usize).saturating_sub(1)),
            odd: min_align.iter().any(|&a| a > 1 && !a.is_power_of_two()),
            one: match min_align.map(|a| a.max(1)) {
                [a, b, c, d] if a == b && b == c && c == d && a.is_power_of_two() => a as usize - 1,
                _ => usize::MAX,
            },
        }
    }

    /// True when a call with these pointers and this workspace can use the algorithm.
    /// (Four masks on every served call; an alignment that is not a power of two is
    /// checked by division.)
    #[inline(always)]
    pub fn fits(&self, ptrs: [usize; 4], workspace: *const c_void, workspace_bytes: usize) -> bool {
        if self.workspace > workspace_bytes || (self.workspace > 0 && workspace.is_null()) {
            return false;
        }
        let [a, b, c, d] = ptrs;
        if self.one != usize::MAX {
            return (a | b | c | d) & self.one == 0;
        }
        if self.odd {
            // (The pointers as four values: an array would be stored for it on every call.)
            return self.fits_by_division(a, b, c, d);
        }
        (a & self.masks[0]) | (b & self.masks[1]) | (c & self.masks[2]) | (d & self.masks[3]) == 0
    }

    #[cold]
    #[inline(never)]
    fn fits_by_division(&self, a: usize, b: usize, c: usize, d: usize) -> bool {
        [a, b, c, d]
            .iter()
            .zip(self.min_align)
            .all(|(p, a)| a <= 1 || p % a as usize == 0)
    }
}

/// One row as the interposer holds it; its [`RowState`] methods (`mark_hit`,
/// `quarantine`, ...) are called on the entry itself, as on rocBLAS's `table::Entry`.
#[derive(Debug)]
pub struct LtEntry {
    pub action: LtAction,
    state: RowState,
    /// Rebuilt and checked on a call of the key; set once, by the one caller that made it.
    prepared: OnceLock<Prepared>,
    /// Set by the one caller that rebuilds the algorithm (cleared again if that failed, so
    /// a later call tries once more).
    preparing: AtomicBool,
    /// Failures counted against the row ([`LtEntry::failed`]).
    strikes: AtomicU8,
}

/// What [`LtEntry::prepared_or_try`] found.
#[derive(Debug)]
pub enum Prep<'a, E> {
    /// The rebuilt, checked algorithm.
    Ready(&'a Prepared),
    /// Another caller is rebuilding it now (this call passes through instead of waiting).
    Busy,
    /// This call's rebuild or check failed, for the reason given.
    Failed(E),
}

/// What one failure did to a row ([`LtEntry::failed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strike {
    /// The first: the row stays in service and the key's next call tries it again.
    First,
    /// The second: the row is quarantined for the process from now on.
    Quarantined,
    /// The row was quarantined already (by another caller's failure).
    Already,
}

/// Failures a row may have before it is quarantined: one is forgiven, because a caller
/// destroying a descriptor while another thread passes it to a matmul (the caller's bug)
/// makes a good row's check or call fail once.
const STRIKES: u8 = 2;

impl LtEntry {
    fn new(action: LtAction) -> LtEntry {
        LtEntry {
            action,
            state: RowState::default(),
            prepared: OnceLock::new(),
            preparing: AtomicBool::new(false),
            strikes: AtomicU8::new(0),
        }
    }

    /// The row's rebuilt algorithm if it is made already (what [`LtEntry::prepared_or_try`]
    /// looks at first): a served call's path, with no closure for the rebuild built.
    #[inline(always)]
    pub fn prepared(&self) -> Option<&Prepared> {
        self.prepared.get()
    }

    /// The row's rebuilt algorithm: the one made already, or made now by `prepare` if no
    /// other caller is making it. [`Prep::Busy`] while another caller is (that call passes
    /// through instead of waiting: the rebuild runs library code that may be slow, and a
    /// fork child or a signal handler on that thread must never wait for it; a fork child
    /// that inherited a rebuild in progress passes this row's calls through for good). A
    /// failed rebuild leaves the row to be tried again by a later call; the caller counts
    /// the failure ([`LtEntry::failed`]).
    #[inline(always)]
    pub fn prepared_or_try<E>(&self, prepare: impl FnOnce() -> Result<Prepared, E>) -> Prep<'_, E> {
        if let Some(p) = self.prepared.get() {
            return Prep::Ready(p);
        }
        self.prepare_now(prepare)
    }

    /// [`LtEntry::prepared_or_try`] before the algorithm is made.
    #[cold]
    #[inline(never)]
    fn prepare_now<E>(&self, prepare: impl FnOnce() -> Result<Prepared, E>) -> Prep<'_, E> {
        if self.preparing.swap(true, Ordering::AcqRel) {
            return Prep::Busy;
        }
        match prepare() {
            // The one setter: `set` cannot block (nothing else initialises the cell).
            Ok(p) => Prep::Ready(self.prepared.get_or_init(|| p)),
            Err(e) => {
                self.preparing.store(false, Ordering::Release);
                Prep::Failed(e)
            }
        }
    }

    /// The row's algorithm failed once more (its rebuild or check, or a call that the
    /// caller's own algorithm then made fine): the first failure is forgiven, the second
    /// quarantines the row.
    pub fn failed(&self) -> Strike {
        if self
            .strikes
            .fetch_add(1, Ordering::AcqRel)
            .saturating_add(1)
            < STRIKES
        {
            return Strike::First;
        }
        if self.state.quarantine() {
            Strike::Quarantined
        } else {
            Strike::Already
        }
    }
}

impl std::ops::Deref for LtEntry {
    type Target = RowState;

    fn deref(&self) -> &RowState {
        &self.state
    }
}

type FxBuild = BuildHasherDefault<FxHasher>;

/// Concrete problems served from `*` rows, per table: each (row, key) gets its own entry,
/// so each problem's algorithm is rebuilt and checked for that problem and a failure
/// quarantines that problem only (PyTorch: a `*` row is a hint that the library checks per
/// call). Beyond this many problems a `*` row serves nothing more (the calls pass through).
pub const WILDCARD_PROBLEMS: usize = 4096;

/// A `*` row in a table: its pattern, its text for messages, its action and state.
#[derive(Debug)]
pub struct LtWildcard {
    pub pattern: LtPattern,
    pub text: String,
    pub action: LtAction,
    /// Hit when any problem took the row.
    pub state: RowState,
}

/// An immutable key -> row map; the first row for a key wins. Rows are also found by the
/// call keys of the objects a caller makes for them (`call_key.rs`), which is how a served
/// call finds its row without building its key. PyTorch's `*` rows sit beside it and are
/// only looked at when the exact lookup misses ([`LtTable::get_or_wildcard`]).
#[derive(Debug, Default)]
pub struct LtTable {
    rows: Vec<(LtKey, LtEntry)>,
    by_key: HashMap<LtKey, u32, FxBuild>,
    by_call: CallIndex,
    /// Call keys that matched no row of this table (`CallMisses`).
    pub misses: CallMisses,
    wildcards: Vec<LtWildcard>,
    /// (row number, problem) -> its entry, made on first use.
    instances: Option<Box<ClaimMap<LtKey, AtomicPtr<LtEntry>>>>,
}

impl std::fmt::Debug for ClaimMap<LtKey, AtomicPtr<LtEntry>> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClaimMap({} slots)", self.slots())
    }
}

impl Drop for LtTable {
    fn drop(&mut self) {
        if let Some(map) = &self.instances {
            map.for_each(|_, _, _, p| {
                let e = p.swap(std::ptr::null_mut(), Ordering::AcqRel);
                if !e.is_null() {
                    // SAFETY: made by Box::into_raw in `get_or_wildcard`, freed once here.
                    drop(unsafe { Box::from_raw(e) });
                }
            });
        }
    }
}

fn key_hash(key: &LtKey) -> u64 {
    use std::hash::BuildHasher;
    FxBuild::default().hash_one(key)
}

impl LtTable {
    pub fn new(rows: impl IntoIterator<Item = (LtKey, LtAction)>) -> LtTable {
        LtTable::with_wildcards(rows, [])
    }

    /// As [`LtTable::new`], with `*` rows (pattern, `op,signature`, action) in file order.
    pub fn with_wildcards(
        rows: impl IntoIterator<Item = (LtKey, LtAction)>,
        wildcards: impl IntoIterator<Item = (LtPattern, String, LtAction)>,
    ) -> LtTable {
        let mut by_key: HashMap<LtKey, u32, FxBuild> = HashMap::default();
        let mut kept = Vec::new();
        for (k, a) in rows {
            by_key.entry(k).or_insert_with(|| {
                kept.push((k, LtEntry::new(a)));
                (kept.len() - 1) as u32
            });
        }
        by_key.shrink_to_fit();
        kept.shrink_to_fit();
        let by_call = CallIndex::new(
            kept.iter()
                .enumerate()
                .flat_map(|(i, (k, _))| call_keys(k).into_iter().map(move |c| (c, i as u32))),
        );
        let wildcards: Vec<LtWildcard> = wildcards
            .into_iter()
            .map(|(pattern, text, action)| LtWildcard {
                pattern,
                text,
                action,
                state: RowState::default(),
            })
            .collect();
        let instances =
            (!wildcards.is_empty()).then(|| Box::new(ClaimMap::new(WILDCARD_PROBLEMS, 64)));
        LtTable {
            rows: kept,
            by_key,
            by_call,
            misses: CallMisses::default(),
            wildcards,
            instances,
        }
    }
    #[inline]
    pub fn get(&self, key: &LtKey) -> Option<&LtEntry> {
        self.by_key.get(key).map(|&i| &self.rows[i as usize].1)
    }
    /// The row of a call key (its key and entry), if a row has it.
    #[inline]
    pub fn get_call(&self, call: &CallKey) -> Option<(&LtKey, &LtEntry)> {
        let i = self.by_call.get(call)? as usize;
        // SAFETY: the index holds positions of `rows` only.
        let (k, e) = unsafe { self.rows.get_unchecked(i) };
        Some((k, e))
    }

    /// The row for `key`: its own, else the first `*` row whose pattern matches it (PyTorch's
    /// rule, [`LtPattern`]), as an entry of its own for this problem. `None` when neither
    /// (or the `*` row has served [`WILDCARD_PROBLEMS`] problems already).
    pub fn get_or_wildcard(&self, key: &LtKey) -> Option<&LtEntry> {
        self.get(key).or_else(|| self.get_wildcard(key))
    }

    /// The first `*` row whose pattern matches `key`, as an entry of its own for this problem
    /// ([`LtTable::get_or_wildcard`] without the exact lookup).
    pub fn get_wildcard(&self, key: &LtKey) -> Option<&LtEntry> {
        let map = self.instances.as_deref()?;
        let (row, w) = self
            .wildcards
            .iter()
            .enumerate()
            .find(|(_, w)| w.pattern.matches(key))?;
        let hash = claim_map::hash_of(row as i32, key_hash(key));
        let slot = match map.probe(
            hash,
            row as i32,
            key,
            || true,
            |p| {
                let e = Box::into_raw(Box::new(LtEntry::new(w.action)));
                p.store(e, Ordering::Release);
            },
        ) {
            Probe::Found(_, p) | Probe::Claimed(_, p) => p,
            Probe::Absent => return None,
        };
        w.state.mark_hit();
        let e = slot.load(Ordering::Acquire);
        // SAFETY: set once before the slot was published, freed only when the table drops.
        (!e.is_null()).then(|| unsafe { &*e })
    }

    /// The `*` rows, in file order.
    pub fn wildcards(&self) -> &[LtWildcard] {
        &self.wildcards
    }
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = (&LtKey, &LtEntry)> {
        self.rows.iter().map(|(k, e)| (k, e))
    }
    fn same_rows(&self, other: &LtTable) -> bool {
        fn wild(t: &LtTable) -> Vec<(&LtPattern, &LtAction)> {
            t.wildcards
                .iter()
                .map(|w| (&w.pattern, &w.action))
                .collect()
        }
        crate::table::same_rows(
            (self.len(), other.len()),
            self.rows.iter().map(|(k, e)| (k, &e.action)),
            |k| other.get(k).map(|o| &o.action),
            (wild(self), wild(other)),
        )
    }
}

/// A profile's rank files as cuBLASLt tables.
#[derive(Debug, Default)]
pub struct LtLoaded {
    pub tables: Vec<Option<Arc<LtTable>>>,
    pub distinct: usize,
    /// One line per problem met while reading.
    pub problems: Vec<String>,
    /// Lines that were not cuBLASLt rows (rocBLAS rows, other backends).
    pub skipped: usize,
}

impl LtLoaded {
    /// The table of `device`: its own rank file, else rank 0's.
    #[inline]
    pub fn table_for(&self, device: i32) -> Option<&LtTable> {
        crate::profile::table_of_device(&self.tables, device)
    }
}

/// Reads every `tunableop_results<rank>.csv` of a profile folder for the rows `lib` can
/// serve, through the one rank loader (`profile::load_ranks`: regular files of bounded size
/// only). Rows of the other libraries are skipped without a word.
pub fn load_tables(dir: &Path, lib: LtLib) -> LtLoaded {
    let mut loaded = LtLoaded::default();
    let mut skipped = 0;
    let (tables, distinct) = crate::profile::load_ranks(
        dir,
        &mut loaded.problems,
        LtTable::same_rows,
        |rank, path, problems| {
            let text =
                match crate::profile::read_regular(path, crate::profile::MAX_RESULTS_FILE_BYTES) {
                    Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                    Err(e) => {
                        problems.push(crate::profile::unreadable(path, rank, &e));
                        return None;
                    }
                };
            let parsed = parse_results(&text);
            for (line, why) in &parsed.skipped {
                if why.starts_with("duplicate")
                    || !(why.starts_with("op ") || why.starts_with(OTHER_LIBRARY))
                {
                    problems.push(format!("{}:{line}: skipped: {why}", path.display()));
                }
            }
            let (mine, other): (Vec<&LtRow>, Vec<&LtRow>) =
                parsed.rows.iter().partition(|r| lib.serves(&r.action));
            let (wild, other_wild): (Vec<&LtWildcardRow>, Vec<&LtWildcardRow>) =
                parsed.wildcards.iter().partition(|w| lib.serves(&w.action));
            skipped += parsed.skipped.len() + other.len() + other_wild.len();
            Some(LtTable::with_wildcards(
                mine.iter().map(|r| (r.key, r.action)),
                wild.iter().map(|w| (w.pattern, w.text.clone(), w.action)),
            ))
        },
    );
    loaded.tables = tables;
    loaded.distinct = distinct;
    loaded.skipped = skipped;
    loaded
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 10240 x 320 layer at 2048 tokens, its `op,signature`, and a configuration of
    /// algorithm 66 on a cluster shape of `cluster`.
    fn layer_row(cluster: u32) -> (LtKey, String, String) {
        let key = LtKey::linear(R_16BF, 10240, 2048, 320);
        let (op, sig) = op_and_signature(&key);
        let cfg = format!(
            "Gemm_Cublaslt_algo66_tile20_stages35_splitk1_red0_swizzle0_custom0_inner0_cluster{cluster}"
        );
        (key, format!("{op},{sig}"), cfg)
    }

    #[test]
    fn results_files_keep_the_first_row_and_skip_other_backends() {
        let (k1, row, cfg) = layer_row(2);
        let text = format!(
            "Validator,PT_VERSION,2.11.0\r\nValidator,CUBLASLT_VERSION,130100\n\
             {row},{cfg},0.0374\n\
             {row},Default,0.03\n\
             GemmTunableOp_BFloat16_TN,tn_512_1_2560_ld_2560_2560_512,Default\n\
             GemmTunableOp_Half_TN,tn_512_1_2560_ld_2560_2560_512,Gemm_Rocblas_-9,0.01\n\
             TunedblasGemm_Single_f16_f16_f16_f16_f16_TN,tn_4_4_4_ld_4_4_4_4_fl_0x0,Default\n\n"
        );
        let r = parse_results(&text);
        assert_eq!(r.validators.len(), 2);
        assert_eq!(
            r.validators[1],
            ("CUBLASLT_VERSION".into(), "130100".into())
        );
        assert_eq!(r.rows.len(), 2);
        assert_eq!(r.rows[0].key, k1);
        assert_eq!(r.rows[0].action, LtAction::parse(&cfg).unwrap());
        assert_eq!(r.rows[0].time_ms, Some(0.0374));
        assert_eq!(r.rows[1].action, LtAction::Default);
        assert_eq!(r.skipped.len(), 3, "{:?}", r.skipped);
        // Writing and reading again gives the same rows.
        let again = parse_results(&r.to_text());
        assert_eq!(again.rows, r.rows);
        assert_eq!(again.validators, r.validators);
    }

    /// A file cut inside its last row (a full disk, a killed writer) could end inside the
    /// configuration and still read as another one: that row is never served.
    #[test]
    fn a_last_row_cut_short_is_skipped() {
        let (_, row, cfg) = layer_row(12);
        // Cut one digit short, the configuration still parses: as another cluster shape.
        let shorter = &cfg[..cfg.len() - 1];
        assert!(LtAction::parse(shorter).is_ok());
        let cut = format!("Validator,PT_VERSION,2.11.0\n{row},{shorter}");
        let r = parse_results(&cut);
        assert!(r.rows.is_empty(), "{:?}", r.rows);
        assert_eq!(r.skipped.len(), 1);
        assert!(r.skipped[0].1.contains("cut short"), "{:?}", r.skipped);
        // The same row ended by its writer is read.
        let whole = format!("Validator,PT_VERSION,2.11.0\n{row},{cfg},0.03\n");
        assert_eq!(parse_results(&whole).rows.len(), 1);
    }

    #[test]
    fn prepared_algorithms_fit_only_calls_that_can_run_them() {
        let p = Prepared::new(MatmulAlgo::default(), 4096, [16, 16, 16, 16], 0);
        let ws = 0x1000 as *const c_void;
        assert!(p.fits([0x100, 0x200, 0x300, 0x300], ws, 4096));
        assert!(
            !p.fits([0x100, 0x200, 0x300, 0x300], ws, 4095),
            "workspace too small"
        );
        assert!(!p.fits([0x100, 0x200, 0x300, 0x300], std::ptr::null(), 1 << 20));
        assert!(
            !p.fits([0x102, 0x200, 0x300, 0x300], ws, 4096),
            "A misaligned"
        );
        let none = Prepared::new(p.algo, 0, [2, 2, 2, 2], 0);
        assert!(none.fits([0x102, 0x202, 0x302, 0x302], std::ptr::null(), 0));
        let odd = Prepared::new(p.algo, 0, [12, 0, 1, 16], 0);
        assert!(odd.fits([24, 3, 5, 32], std::ptr::null(), 0));
        assert!(
            !odd.fits([16, 3, 5, 32], std::ptr::null(), 0),
            "16 is not a multiple of 12"
        );
        assert!(!odd.fits([24, 3, 5, 40], std::ptr::null(), 0));
    }

    /// The one-mask check of four pointers sharing an alignment agrees with the general
    /// rule (each pointer a multiple of its own alignment), for every mix of alignments,
    /// shared or not, and pointers around them.
    #[test]
    fn a_shared_alignment_is_checked_as_each_pointers_own() {
        let aligns = [0u32, 1, 2, 8, 16, 256, 12];
        let ptrs = [
            0usize,
            1,
            2,
            8,
            12,
            16,
            24,
            48,
            256,
            0x1000,
            0x1008,
            0x7f00_0000_0110,
        ];
        let mut shared = 0;
        for i in 0..aligns.len().pow(4) {
            let a = [0, 1, 2, 3].map(|k| aligns[i / aligns.len().pow(k) % aligns.len()]);
            let p = Prepared::new(MatmulAlgo::default(), 0, a, 0);
            shared += usize::from(p.one != usize::MAX);
            for j in 0..ptrs.len().pow(2) {
                // A and B vary; C and D take each one of them.
                let (x, y) = (ptrs[j % ptrs.len()], ptrs[j / ptrs.len()]);
                for q in [[x, y, x, y], [y, x, y, y], [x, x, x, y], [x, x, y, x]] {
                    let want = q.iter().zip(a).all(|(&q, a)| a <= 1 || q % a as usize == 0);
                    assert_eq!(p.fits(q, std::ptr::null(), 0), want, "{a:?} {q:x?}");
                }
            }
        }
        assert!(shared >= 6, "the shared path is tried ({shared})");
    }

    /// One caller rebuilds; a caller arriving meanwhile (another thread, a signal handler
    /// on the same one, a fork child) passes through instead of waiting; later callers get
    /// the result.
    #[test]
    fn a_row_is_prepared_once_and_never_waited_for() {
        let e = LtEntry::new(LtAction::Index(7));
        let p = Prepared::new(MatmulAlgo::default(), 0, [1; 4], 3);
        let got = e.prepared_or_try(|| {
            assert!(
                matches!(
                    e.prepared_or_try::<()>(|| panic!("a second rebuild")),
                    Prep::Busy
                ),
                "a caller during the rebuild passes through"
            );
            Ok::<_, ()>(p)
        });
        assert!(matches!(got, Prep::Ready(&q) if q == p));
        assert!(matches!(
            e.prepared_or_try::<()>(|| panic!("rebuilt again")),
            Prep::Ready(&q) if q == p
        ));
    }

    /// A failed rebuild or check (a caller's race: its descriptor destroyed by another
    /// thread meanwhile) is tried again on a later call; the row is quarantined only when
    /// a second try fails too, and said quarantined once.
    #[test]
    fn a_row_that_fails_once_is_tried_again_and_quarantined_only_after_a_second_failure() {
        let p = Prepared::new(MatmulAlgo::default(), 0, [1; 4], 0);
        let once = LtEntry::new(LtAction::Index(8));
        assert!(matches!(
            once.prepared_or_try(|| Err("raced")),
            Prep::Failed("raced")
        ));
        assert_eq!(once.failed(), Strike::First);
        assert!(!once.is_quarantined());
        assert!(matches!(
            once.prepared_or_try::<&str>(|| Ok(p)),
            Prep::Ready(_)
        ));
        let twice = LtEntry::new(LtAction::Index(9));
        for strike in [Strike::First, Strike::Quarantined, Strike::Already] {
            assert!(matches!(
                twice.prepared_or_try(|| Err(())),
                Prep::Failed(())
            ));
            assert_eq!(twice.failed(), strike);
        }
        assert!(twice.is_quarantined());
    }

    /// PyTorch's `*` rows in a ROCm results file: read beside the exact rows, written back
    /// as they were, served after an exact miss with one entry per concrete problem, so a
    /// failing problem is quarantined alone.
    #[test]
    fn wildcard_rows_serve_each_problem_with_its_own_entry() {
        let exact = LtKey::linear(R_16BF, 2560, 512, 1536);
        let (op, sig) = op_and_signature(&exact);
        let text = format!(
            "Validator,PT_VERSION,2.12.0\n\
             {op},{sig},Gemm_Hipblaslt_11,0.02\n\
             GemmTunableOp_BFloat16_TN,tn_2560_*_1536_ld_1536_1536_2560,Gemm_Hipblaslt_7,0.03\n\
             GemmTunableOp_BFloat16_TN,tn_2560_*_1536_ld_1536_1536_2560,Gemm_Hipblaslt_8,0.03\n\
             GemmTunableOp_BFloat16_TN,tn_64_*_64,Gemm_Rocblas_-5\n\
             GemmTunableOp_BFloat16_TN,tn_64_*,Gemm_Hipblaslt_1\n"
        );
        let r = parse_results(&text);
        assert_eq!(r.rows.len(), 1);
        assert_eq!(r.wildcards.len(), 1, "{:?}", r.skipped);
        assert_eq!(r.skipped.len(), 3, "{:?}", r.skipped);
        assert!(r.skipped[0].1.contains("duplicate"), "{:?}", r.skipped);
        assert!(r.skipped[1].1.starts_with(OTHER_LIBRARY), "{:?}", r.skipped);
        let again = parse_results(&r.to_text());
        assert_eq!(again.wildcards, r.wildcards);
        let t = LtTable::with_wildcards(
            r.rows.iter().map(|x| (x.key, x.action)),
            r.wildcards
                .iter()
                .map(|w| (w.pattern, w.text.clone(), w.action)),
        );
        assert_eq!(
            t.get_or_wildcard(&exact).unwrap().action,
            LtAction::Index(11),
            "an exact row wins"
        );
        let (a, b) = (
            LtKey::linear(R_16BF, 2560, 513, 1536),
            LtKey::linear(R_16BF, 2560, 7, 1536),
        );
        let ea = t.get_or_wildcard(&a).unwrap();
        assert_eq!(ea.action, LtAction::Index(7));
        assert!(
            std::ptr::eq(ea, t.get_or_wildcard(&a).unwrap()),
            "one entry per problem"
        );
        let eb = t.get_or_wildcard(&b).unwrap();
        assert!(!std::ptr::eq(ea, eb));
        assert!(t.wildcards()[0].state.was_hit());
        ea.failed();
        assert_eq!(ea.failed(), Strike::Quarantined);
        assert!(!eb.is_quarantined(), "another problem keeps the row");
        assert!(t
            .get_or_wildcard(&LtKey::linear(R_16BF, 2560, 7, 1537))
            .is_none());
        assert!(t.get(&a).is_none(), "the exact lookup never sees patterns");
    }

    #[test]
    fn table_first_row_wins_and_quarantine_reports_once() {
        let k = LtKey::linear(R_16F, 64, 1, 64);
        let t = LtTable::new([(k, LtAction::Default), (k, LtAction::Default)]);
        assert_eq!(t.len(), 1);
        let e = t.get(&k).unwrap();
        assert!(!e.was_hit());
        e.mark_hit();
        assert!(e.was_hit());
        assert!(e.quarantine());
        assert!(!e.quarantine());
        assert!(t.get(&LtKey::linear(R_16F, 64, 2, 64)).is_none());
    }

    /// A row is found by its key and by the call keys of the objects a caller makes for
    /// it, as the same entry; the first row of a key wins both ways.
    #[test]
    fn rows_are_found_by_their_call_keys_as_by_their_keys() {
        let k = LtKey::linear(R_16BF, 64, 8, 64);
        let other = LtKey::linear(R_16BF, 64, 9, 64);
        let t = LtTable::new([
            (k, LtAction::Index(3)),
            (k, LtAction::Default),
            (other, LtAction::Default),
        ]);
        let call = call_keys(&k)[0];
        let (key, e) = t.get_call(&call).unwrap();
        assert_eq!(*key, k);
        assert!(std::ptr::eq(e, t.get(&k).unwrap()));
        assert_eq!(e.action, LtAction::Index(3));
        assert_eq!(t.get_call(&call_keys(&other)[0]).unwrap().0, &other);
        assert!(t
            .get_call(&call_keys(&LtKey::linear(R_16BF, 64, 10, 64))[0])
            .is_none());
    }
}
