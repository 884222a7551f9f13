//! An Lt library's descriptors and layouts as their create and set calls left them:
//! `object address -> words` in a lock-free address map (`tunedblas_core::address_map`),
//! written by the wrapped create, set and destroy calls (`exports.rs`, `lt_exports!`)
//! and read by the matmul with no library call. Both libraries keep the same words, in
//! cuBLASLt's numbers ([`desc`], [`layout`]; hipBLASLt's are mapped as they are set,
//! `hipblaslt/objects.rs`), and word 0 of each object is its word of the call key
//! (`tunedblas_core::cublaslt::call_key`), computed at create and at each set, so a served
//! call reads one word per object.
//!
//! PyTorch creates and destroys its descriptors around every GEMM, and in a long-running
//! process its allocator hands out ever new addresses: a destroyed object's slot is freed
//! for the next one, so a map holds what is alive now. A destroy frees the slot *before*
//! the real destroy frees the address, and a create fills it *after* the real create
//! returned it, so a racing create at a just-freed address is never undone. A matmul that
//! reads an object while another thread destroys it (the caller's race) gets its words
//! whole or not at all, never those of an object made meanwhile at another address in the
//! same slot.
//!
//! Nothing here blocks or allocates: the maps are statics, and a fork child keeps them
//! (its objects are the parent's, copied; one a parent's thread was writing at the fork
//! reads as unknown). An object a map does not know (made before the interposer was
//! loaded, through the library's own symbol, or while [`SLOTS`] others were alive around
//! its address) is unknown, and the first such object is said once.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use tunedblas_core::address_map::{AddressMap, Found, Words};
use tunedblas_core::cublaslt::*;

use super::callers::Fns;

/// Objects of one kind alive at once that are kept (PyTorch has a handful alive).
pub const SLOTS: usize = 1 << 13;

/// Where a matmul descriptor's words hold what (cuBLASLt's numbers; 32-bit values
/// sign-extended).
pub mod desc {
    /// The descriptor's word of the call key (0: not packed, see `call_key.rs`).
    pub const CALL: usize = 0;
    /// The set and destroy functions of the library that made it (`lt::callers::Fns`; 0:
    /// not known).
    pub const FNS: usize = 1;
    pub const COMPUTE: usize = 2;
    pub const SCALE: usize = 3;
    pub const POINTER_MODE: usize = 4;
    pub const TRANSA: usize = 5;
    pub const TRANSB: usize = 6;
    pub const EPILOGUE: usize = 7;
    /// Negative: never set (the bias has D's type).
    pub const BIAS_TYPE: usize = 8;
    pub const SM_COUNT: usize = 9;
    /// [`super::GETTERS`] and the like.
    pub const FLAGS: usize = 10;
    pub const WORDS: usize = 11;
}

/// Where a matrix layout's words hold what.
pub mod layout {
    /// The layout's word of the call key (0: not packed).
    pub const CALL: usize = 0;
    /// The set and destroy functions of the library that made it (0: not known).
    pub const FNS: usize = 1;
    pub const TYPE: usize = 2;
    pub const ORDER: usize = 3;
    pub const ROWS: usize = 4;
    pub const COLS: usize = 5;
    pub const LD: usize = 6;
    pub const BATCH: usize = 7;
    pub const STRIDE: usize = 8;
    /// cuBLASLt 13's batch mode (arrays of pointers are not served).
    pub const BATCH_MODE: usize = 9;
    pub const FLAGS: usize = 10;
    pub const WORDS: usize = 11;
}

// Both kinds keep their call key's word first, their library's functions second and their
// flags last (`Objects` reads and sets them there).
const _: () = assert!(desc::CALL == 0 && layout::CALL == 0);
const _: () = assert!(desc::FNS == 1 && layout::FNS == 1);
const _: () = assert!(desc::FLAGS == desc::WORDS - 1 && layout::FLAGS == layout::WORDS - 1);

/// Flags: an attribute the key reads was set in a way not kept here (a size this file does
/// not read, though the library took it): the object is read through the library's getters.
pub const GETTERS: u64 = 1;
/// Flags (hipBLASLt): an attribute the key does not hold was set (scale pointers and modes,
/// compute input types, amax, the epilogue's aux buffer, ...): a tuned index checked once
/// per key must not run a problem the key does not describe, so its calls pass through.
pub const UNSERVED: u64 = 2;
/// Flags (hipBLASLt): a compute type tunedblas does not serve (the 8-bit float modes).
pub const UNSERVED_COMPUTE: u64 = 4;

/// A 32-bit value as a word (read back with `as i32`).
#[inline(always)]
pub fn signed(v: i32) -> u64 {
    v as i64 as u64
}

/// What a successful set-attribute call changes in an object's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing the key reads.
    None,
    /// Word `.0` is now `.1`.
    Word(usize, u64),
    /// Descriptor word `.0` is now `.1`, a field a plain descriptor's word holds at `.2`
    /// (changed there in place).
    Field(usize, u64, DescField),
    /// These flags are set.
    Flag(u64),
}

/// The descriptor a matmul reads from its words.
#[inline]
pub fn matmul_attrs(w: &[u64; desc::WORDS]) -> MatmulAttrs {
    MatmulAttrs {
        compute: w[desc::COMPUTE] as i32,
        scale: w[desc::SCALE] as i32,
        pointer_mode: w[desc::POINTER_MODE] as i32,
        trans_a: w[desc::TRANSA] as i32,
        trans_b: w[desc::TRANSB] as i32,
        epilogue: w[desc::EPILOGUE] as u32,
        bias_type: w[desc::BIAS_TYPE] as i32,
        sm_count: w[desc::SM_COUNT] as i32,
    }
}

/// The layout a matmul reads from its words.
#[inline]
pub fn layout_attrs(w: &[u64; layout::WORDS]) -> LayoutAttrs {
    LayoutAttrs {
        dtype: w[layout::TYPE] as i32,
        order: w[layout::ORDER] as i32,
        rows: w[layout::ROWS],
        cols: w[layout::COLS],
        ld: w[layout::LD] as i64,
        batch: w[layout::BATCH] as i32,
        stride: w[layout::STRIDE] as i64,
    }
}

/// A new descriptor: its create call's types (in cuBLASLt's numbers), the rest the
/// defaults both libraries give (host pointers, no transposes, the default epilogue, the
/// bias of D's type, the whole device).
pub fn new_desc(compute: i32, scale: i32) -> MatmulAttrs {
    MatmulAttrs {
        compute,
        scale,
        bias_type: -1,
        ..MatmulAttrs::default()
    }
}

/// A descriptor's words, all of them (the plain word 0).
fn desc_words(mm: &MatmulAttrs, flags: u64) -> [u64; desc::WORDS] {
    let mut w = [0; desc::WORDS];
    w[desc::COMPUTE] = signed(mm.compute);
    w[desc::SCALE] = signed(mm.scale);
    w[desc::POINTER_MODE] = signed(mm.pointer_mode);
    w[desc::TRANSA] = signed(mm.trans_a);
    w[desc::TRANSB] = signed(mm.trans_b);
    w[desc::EPILOGUE] = u64::from(mm.epilogue);
    w[desc::BIAS_TYPE] = signed(mm.bias_type);
    w[desc::SM_COUNT] = signed(mm.sm_count);
    w[desc::FLAGS] = flags;
    w
}

/// A layout's words, all of them (the plain word 0).
fn layout_words(l: &LayoutAttrs, batch_mode: i32, flags: u64) -> [u64; layout::WORDS] {
    let mut w = [0; layout::WORDS];
    w[layout::TYPE] = signed(l.dtype);
    w[layout::ORDER] = signed(l.order);
    w[layout::ROWS] = l.rows;
    w[layout::COLS] = l.cols;
    w[layout::LD] = l.ld as u64;
    w[layout::BATCH] = signed(l.batch);
    w[layout::STRIDE] = l.stride as u64;
    w[layout::BATCH_MODE] = signed(batch_mode);
    w[layout::FLAGS] = flags;
    w
}

/// The descriptor's word of the call key when that word says all there is to say of it
/// (its plain form: packed, no flags, a bias type unset or read), else 0.
#[inline(always)]
pub fn plain_desc(mm: &MatmulAttrs, flags: u64) -> u64 {
    let bias_kept = mm.bias_type == -1 || (mm.bias_type >= 0 && epilogue_has_bias(mm.epilogue));
    if flags != 0 || !bias_kept {
        return 0;
    }
    desc_word(mm)
}

/// The layout's word of the call key when that word says all there is to say of it (one
/// matrix, stride and batch mode 0, packed, no flags), else 0.
#[inline(always)]
pub fn plain_layout(l: &LayoutAttrs, batch_mode: i32, flags: u64) -> u64 {
    if flags != 0 || l.stride != 0 || batch_mode != 0 {
        return 0;
    }
    layout_word(l)
}

fn desc_expand(p: u64) -> [u64; desc::WORDS] {
    let mut w = desc_words(&unpack_desc(p, -1), 0);
    w[desc::CALL] = p;
    w
}

fn desc_plain(w: &[u64; desc::WORDS]) -> u64 {
    plain_desc(&matmul_attrs(w), w[desc::FLAGS])
}

fn layout_expand(p: u64) -> [u64; layout::WORDS] {
    let mut w = layout_words(&unpack_layout(p), 0, 0);
    w[layout::CALL] = p;
    w
}

fn layout_plain(w: &[u64; layout::WORDS]) -> u64 {
    plain_layout(
        &layout_attrs(w),
        w[layout::BATCH_MODE] as i32,
        w[layout::FLAGS],
    )
}

/// An object's words as a set changes them: from its plain word (all else implied but its
/// library's functions) or its words, `change` applied, and back: only the plain word
/// written when there is one (the other words but the functions are then never read), else
/// all words with a plain word of 0.
fn apply<const N: usize>(
    w: &mut [u64; N],
    change: Change,
    expand: fn(u64) -> [u64; N],
    plain: fn(&[u64; N]) -> u64,
) {
    let mut full = if w[0] != 0 {
        let mut full = expand(w[0]);
        full[1] = w[1];
        full
    } else {
        *w
    };
    match change {
        Change::None => return,
        Change::Word(i, v) | Change::Field(i, v, _) => {
            if let Some(x) = full.get_mut(i) {
                *x = v;
            }
        }
        Change::Flag(f) => full[N - 1] |= f,
    }
    let p = plain(&full);
    if p != 0 {
        w[0] = p;
    } else {
        full[0] = 0;
        *w = full;
    }
}

/// The functions of the library that made the object `found` (its word 1).
#[inline(always)]
pub fn fns_of<const N: usize>(found: &Found<'_, N>) -> Option<&'static Fns> {
    // SAFETY: word 1 is 0 or what `Fns::register` returned.
    unsafe { Fns::of(found.word(1)) }
}

/// [`apply`] to an object's words in its slot: only the plain word written when there is
/// one, else all words.
fn edit_all<const N: usize>(
    w: &Words<'_, N>,
    change: Change,
    expand: fn(u64) -> [u64; N],
    plain: fn(&[u64; N]) -> u64,
) {
    let mut all: [u64; N] = std::array::from_fn(|i| w.get(i));
    apply(&mut all, change, expand, plain);
    if all[0] != 0 {
        w.set(0, all[0]);
    } else {
        for (i, x) in all.into_iter().enumerate() {
            w.set(i, x);
        }
    }
}

/// One kind of object of one library (matmul descriptors, or matrix layouts), `N` words
/// each: word 0 its word of the call key, which alone holds a plain object (what a create
/// makes and what a PyTorch GEMM keeps: one word written per create), or 0 and the
/// object's fields in the other words.
///
/// All zero when made, so the four statics (852 KB each) lie in `.bss`, never in the file
/// or in a process's memory until touched: no name is kept here (a pointer would need
/// `.data`); the create calls name their library ([`Kinds::LIBRARY`]) for the line said
/// at the bound.
pub struct Objects<const N: usize> {
    map: AddressMap<N, SLOTS>,
    /// The line for an object that could not be kept was said.
    full_said: AtomicBool,
}

/// Matmul descriptors of one library.
pub struct Descs(Objects<{ desc::WORDS }>);
/// Matrix layouts of one library.
pub struct Layouts(Objects<{ layout::WORDS }>);

impl std::ops::Deref for Descs {
    type Target = Objects<{ desc::WORDS }>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::Deref for Layouts {
    type Target = Objects<{ layout::WORDS }>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<const N: usize> Objects<N> {
    const fn new() -> Objects<N> {
        Objects {
            map: AddressMap::new(),
            full_said: AtomicBool::new(false),
        }
    }

    /// An object was made at `object` by `library` ("hipBLASLt", ...), whose functions are
    /// `fns` (`lt::callers::Fns`): its plain word, or (0) all its words. `what` it is
    /// ("matmul descriptors", ...) and `library` are read only to say the line at the bound.
    #[inline(always)]
    fn made(
        &self,
        (library, what): (&'static str, &'static str),
        object: *mut c_void,
        plain: u64,
        fns: u64,
        words: impl FnOnce() -> [u64; N],
    ) {
        // (NULL is refused by the map, and is looked at only then: no object, nothing to
        // say.)
        let kept = if plain != 0 {
            self.map.insert_pair(object as usize, plain, fns)
        } else {
            let mut w = words();
            w[1] = fns;
            self.map.insert(object as usize, w)
        };
        if !kept && !object.is_null() {
            self.not_kept(library, what);
        }
    }

    /// An object could not be kept: said once (out of line, so a create keeps no
    /// registers for it).
    #[cold]
    #[inline(never)]
    fn not_kept(&self, library: &'static str, what: &'static str) {
        if !self.full_said.swap(true, Ordering::Relaxed) {
            // (Our panics never reach the caller: this one logs.)
            let _ = std::panic::catch_unwind(|| self.say_full(library, what));
        }
    }

    /// Once, when an object could not be kept: how many are alive (all the map holds are:
    /// destroyed ones free their slots).
    #[cold]
    #[inline(never)]
    fn say_full(&self, library: &str, what: &str) {
        crate::log::info!(
            "{library}: {what}: {} are alive at once, as many as the interposer keeps around a new one's address (it keeps up to {SLOTS}); calls using one it could not keep pass through untuned, and objects made once others are destroyed are kept again",
            self.map.live()
        );
    }

    /// The slot of the object at `object`, if known (for a set: its library's functions,
    /// then the change, with one lookup).
    #[inline(always)]
    pub fn find(&self, object: *mut c_void) -> Option<Found<'_, N>> {
        self.map.find_slot(object as usize)
    }

    /// [`Objects::find`] in the object's home slot only (`None`: look further).
    #[inline(always)]
    pub fn find_home(&self, object: *mut c_void) -> Option<Found<'_, N>> {
        self.map.find_home(object as usize)
    }

    /// The object at `object` is about to be destroyed: its slot is freed; the functions
    /// of the library that made it, if known.
    #[inline(always)]
    pub fn taken(&self, object: *mut c_void) -> Option<&'static Fns> {
        // SAFETY: word 1 is 0 or what `Fns::register` returned.
        unsafe { Fns::of(self.map.take(object as usize, 1).unwrap_or(0)) }
    }

    /// [`Objects::taken`] of an object in its home slot; `None` (and the slot untouched)
    /// if it is not there, or it is and its functions are not known: then
    /// [`Objects::taken`] looks further (a freed slot is not found again).
    #[inline(always)]
    pub fn taken_home(&self, object: *mut c_void) -> Option<&'static Fns> {
        // SAFETY: word 1 is 0 or what `Fns::register` returned.
        unsafe { Fns::of(self.map.take_home(object as usize, 1).unwrap_or(0)) }
    }

    /// The object's word of the call key: 0 if unknown or not packed.
    #[inline(always)]
    pub fn call_word(&self, object: *mut c_void) -> u64 {
        self.map.get_word(object as usize, 0).unwrap_or(0)
    }

    #[cfg(test)]
    pub fn live(&self) -> usize {
        self.map.live()
    }
}

impl Descs {
    pub const fn new() -> Descs {
        Descs(Objects::new())
    }

    /// A descriptor was made at `object` whose plain word is `plain` (not 0), by
    /// `library`, whose functions are `fns` (0: not known).
    #[inline(always)]
    pub fn created_plain(&self, library: &'static str, object: *mut c_void, plain: u64, fns: u64) {
        self.made((library, "matmul descriptors"), object, plain, fns, || {
            [0; desc::WORDS]
        });
    }

    /// A descriptor was made at `object` with these attributes and flags, by `library`,
    /// whose functions are `fns` (0: not known).
    #[inline(always)]
    pub fn created(
        &self,
        library: &'static str,
        object: *mut c_void,
        mm: MatmulAttrs,
        flags: u64,
        fns: u64,
    ) {
        let what = (library, "matmul descriptors");
        self.made(what, object, plain_desc(&mm, flags), fns, || {
            desc_words(&mm, flags)
        });
    }

    /// A set-attribute call on the descriptor at `object` succeeded, changing this (a
    /// known descriptor only).
    #[cfg(test)]
    pub fn changed(&self, object: *mut c_void, change: Change) {
        if let Some(found) = self.find(object) {
            Self::changed_in(&found, change);
        }
    }

    /// A set-attribute call on the descriptor `found` succeeded, changing this. A plain
    /// descriptor's transposes, types, pointer mode or SM count ([`Change::Field`]) are
    /// changed in its one word; anything else through all its words.
    #[inline(always)]
    pub fn changed_in(found: &Found<'_, { desc::WORDS }>, change: Change) {
        match change {
            Change::None => {}
            Change::Field(_, v, f) => found.edit(|w| {
                let n = desc_word_set(w.get(desc::CALL), f, v as i32);
                if n != 0 {
                    w.set(desc::CALL, n);
                } else {
                    edit_all(w, change, desc_expand, desc_plain);
                }
            }),
            _ => found.edit(|w| edit_all(w, change, desc_expand, desc_plain)),
        }
    }

    /// All the words of the descriptor at `object`, if known.
    pub fn get(&self, object: *mut c_void) -> Option<[u64; desc::WORDS]> {
        let w = self.0.map.get(object as usize)?;
        Some(if w[0] != 0 {
            let mut full = desc_expand(w[0]);
            full[1] = w[1];
            full
        } else {
            w
        })
    }
}

impl Layouts {
    pub const fn new() -> Layouts {
        Layouts(Objects::new())
    }

    /// A layout was made at `object` whose plain word is `plain` (not 0), by
    /// `library`, whose functions are `fns` (0: not known).
    #[inline(always)]
    pub fn created_plain(&self, library: &'static str, object: *mut c_void, plain: u64, fns: u64) {
        self.made((library, "matrix layouts"), object, plain, fns, || {
            [0; layout::WORDS]
        });
    }

    /// A layout was made at `object` with these attributes, by `library`, whose functions
    /// are `fns` (0: not known).
    #[inline(always)]
    pub fn created(&self, library: &'static str, object: *mut c_void, l: LayoutAttrs, fns: u64) {
        let what = (library, "matrix layouts");
        self.made(what, object, plain_layout(&l, 0, 0), fns, || {
            layout_words(&l, 0, 0)
        });
    }

    /// A set-attribute call on the layout at `object` succeeded, changing this (a known
    /// layout only).
    #[cfg(test)]
    pub fn changed(&self, object: *mut c_void, change: Change) {
        if let Some(found) = self.find(object) {
            Self::changed_in(&found, change);
        }
    }

    /// A set-attribute call on the layout `found` succeeded, changing this.
    #[inline]
    pub fn changed_in(found: &Found<'_, { layout::WORDS }>, change: Change) {
        if change != Change::None {
            found.edit(|w| edit_all(w, change, layout_expand, layout_plain));
        }
    }

    /// All the words of the layout at `object`, if known.
    pub fn get(&self, object: *mut c_void) -> Option<[u64; layout::WORDS]> {
        let w = self.0.map.get(object as usize)?;
        Some(if w[0] != 0 {
            let mut full = layout_expand(w[0]);
            full[1] = w[1];
            full
        } else {
            w
        })
    }
}

/// What one Lt library keeps of its descriptors and layouts: the wrapped create, set and
/// destroy calls (`exports.rs`, `lt_exports!`) go through this.
pub trait Kinds {
    /// "hipBLASLt" or "cuBLASLt", for messages.
    const LIBRARY: &'static str;
    const DESCS: &'static Descs;
    const LAYOUTS: &'static Layouts;
    /// A descriptor made by `MatmulDescCreate(compute, scale)` (the library's numbers):
    /// its attributes in cuBLASLt's numbers, and flags.
    fn new_desc(compute: i32, scale: i32) -> (MatmulAttrs, u64);
    /// What a successful `MatmulDescSetAttribute(attr, buf, size)` changes.
    ///
    /// # Safety
    /// `buf` points to `size` readable bytes (the caller's own arguments, just read by the
    /// library).
    unsafe fn desc_set(attr: i32, buf: *const c_void, size: usize) -> Change;
    /// The transposes PyTorch sets on every GEMM, read for the set's fast path: the field
    /// of a plain descriptor's word they change, and the value in cuBLASLt's numbers,
    /// exactly what [`Kinds::desc_set`] would give as a [`Change::Field`]. `None` for every
    /// other set (then `desc_set` says what changed).
    ///
    /// # Safety
    /// As [`Kinds::desc_set`].
    unsafe fn desc_field(attr: i32, buf: *const c_void, size: usize) -> Option<(DescField, i32)>;
    /// What a successful `MatrixLayoutSetAttribute(attr, buf, size)` changes.
    ///
    /// # Safety
    /// As [`Kinds::desc_set`].
    unsafe fn layout_set(attr: i32, buf: *const c_void, size: usize) -> Change;
}

/// No layout set changes a field in place ([`Kinds::desc_field`] for layouts).
///
/// # Safety
/// None needed: nothing is read.
#[inline(always)]
pub unsafe fn no_field(_: i32, _: *const c_void, _: usize) -> Option<(DescField, i32)> {
    None
}

/// The key of a call from its objects' words, or why it is not one tunedblas serves: the
/// descriptor's flags, a batch of pointer arrays, then `key_from_attrs` (a bias type never
/// set is D's).
pub fn key_of(
    d: &[u64; desc::WORDS],
    layouts: [&[u64; layout::WORDS]; 4],
) -> Result<LtKey, &'static str> {
    if d[desc::FLAGS] & UNSERVED != 0 {
        return Err("its descriptor has an attribute the key does not hold");
    }
    if d[desc::FLAGS] & UNSERVED_COMPUTE != 0 {
        return Err("a compute type tunedblas does not serve");
    }
    if layouts
        .iter()
        .any(|l| l[layout::BATCH] as i32 > 1 && l[layout::BATCH_MODE] as i32 != 0)
    {
        return Err("a batch through arrays of pointers");
    }
    let [a, b, c, dd] = layouts.map(layout_attrs);
    let mut mm = matmul_attrs(d);
    if epilogue_has_bias(mm.epilogue) && mm.bias_type < 0 {
        mm.bias_type = dd.dtype;
    }
    key_from_attrs(&mm, &a, &b, &c, &dd)
}

/// A set-attribute call's value as the word it is kept in: read with the attribute's own
/// size (`four`: 4 bytes, else 8), sign-extended where `signed`. `None` for a buffer smaller
/// than the attribute (the library refuses those too).
///
/// # Safety
/// `buf` points to `size` readable bytes (the caller's own set-attribute arguments).
#[inline]
pub unsafe fn field_value(
    buf: *const c_void,
    size: usize,
    four: bool,
    signed: bool,
) -> Option<u64> {
    if buf.is_null() {
        return None;
    }
    // SAFETY: per the contract, with the size checked against the attribute's.
    unsafe {
        match (four, size) {
            (true, 4..) if signed => Some(buf.cast::<i32>().read_unaligned() as i64 as u64),
            (true, 4..) => Some(u64::from(buf.cast::<u32>().read_unaligned())),
            (false, 8..) => Some(buf.cast::<u64>().read_unaligned()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_follow_create_set_and_destroy_at_a_reused_address() {
        static O: Layouts = Layouts::new();
        let a = 0x1000 as *mut c_void;
        assert_eq!(O.get(a), None);
        assert_eq!(O.call_word(a), 0);
        let l = LayoutAttrs::col(R_16BF, 64, 32, 64);
        let fns = Fns::register(0x1111, 0x7777);
        O.created("test", a, l, fns);
        let w = O.get(a).unwrap();
        assert_eq!(layout_attrs(&w), l);
        assert_eq!(w[layout::CALL], layout_word(&l));
        assert_eq!(O.call_word(a), layout_word(&l), "a plain layout: its word");
        O.changed(a, Change::Word(layout::LD, 96));
        assert_eq!(O.get(a).unwrap()[layout::LD], 96);
        let l96 = LayoutAttrs { ld: 96, ..l };
        assert_eq!(
            O.call_word(a),
            layout_word(&l96),
            "the call word follows a set"
        );
        // A stride on a single matrix: not plain any more (all words kept), the same key.
        O.changed(a, Change::Word(layout::STRIDE, 4096));
        assert_eq!(O.call_word(a), 0);
        let w = O.get(a).unwrap();
        assert_eq!(
            layout_attrs(&w),
            LayoutAttrs {
                stride: 4096,
                ..l96
            }
        );
        O.changed(a, Change::Word(layout::STRIDE, 0));
        assert_eq!(O.call_word(a), layout_word(&l96), "plain again");
        O.changed(a, Change::Flag(GETTERS));
        assert_eq!(O.call_word(a), 0, "an object read through the getters");
        assert_eq!(O.get(a).unwrap()[layout::FLAGS], GETTERS);
        assert_eq!(layout_attrs(&O.get(a).unwrap()), l96, "the fields kept");
        assert_eq!(
            O.taken(a).and_then(Fns::destroy),
            Some(0x7777 as *mut c_void),
            "its library's destroy function, kept through sets"
        );
        assert_eq!(O.get(a), None, "a destroyed object has no words");
        assert!(O.taken(a).is_none(), "not known any more");
        O.changed(a, Change::Word(layout::LD, 128));
        assert_eq!(
            O.get(a),
            None,
            "setting a destroyed object makes it no better known"
        );
        // The allocator hands the address out again.
        let l2 = LayoutAttrs::col(R_32F, 8, 8, 8);
        O.created("test", a, l2, 0);
        assert_eq!(layout_attrs(&O.get(a).unwrap()), l2);
        assert_eq!(
            O.get(a).unwrap()[layout::FLAGS],
            0,
            "no flag of the old object"
        );
        O.created("test", std::ptr::null_mut(), l2, 0);
        assert_eq!(O.get(std::ptr::null_mut()), None);
    }

    /// What a plain word holds is all of the object: a descriptor read back from its
    /// word is the descriptor, whatever the sets made of it; one that a word cannot hold
    /// keeps all its words.
    #[test]
    fn descriptors_read_back_as_set_plain_or_not() {
        static O: Descs = Descs::new();
        let d = 0x2000 as *mut c_void;
        let mut want = new_desc(COMPUTE_32F, R_32F);
        let fns = Fns::register(0x4444, 0x5555);
        O.created("test", d, want, 0, fns);
        assert_ne!(O.call_word(d), 0);
        let steps = [
            (desc::TRANSA, signed(OP_T)),
            (desc::BIAS_TYPE, signed(R_16BF)),
            (desc::EPILOGUE, u64::from(EPILOGUE_BIAS)),
            (desc::BIAS_TYPE, signed(-1)),
            (desc::EPILOGUE, u64::from(EPILOGUE_DEFAULT)),
            (desc::SM_COUNT, signed(5000)),
            (desc::SM_COUNT, signed(66)),
            (desc::BIAS_TYPE, signed(-7)),
        ];
        for (i, v) in steps {
            O.changed(d, Change::Word(i, v));
            let mut w = desc_words(&want, 0);
            w[i] = v;
            want = matmul_attrs(&w);
            let got = O.get(d).unwrap();
            assert_eq!(matmul_attrs(&got), want, "after word {i} = {v}");
            assert_eq!(O.call_word(d), plain_desc(&want, 0));
        }
        assert_eq!(O.call_word(d), 0, "a bias type of -7 is not plain");
        assert_eq!(O.get(d).unwrap()[desc::FNS], fns, "the functions kept");
        let found = O.find(d).unwrap();
        assert_eq!(
            fns_of(&found).and_then(Fns::set),
            Some(0x4444 as *mut c_void)
        );
        assert_eq!(
            O.taken(d).and_then(Fns::destroy),
            Some(0x5555 as *mut c_void)
        );
    }

    /// A host making and destroying its objects at ever new addresses, as a long-running
    /// PyTorch process does: every one is known while it lives, long past the number of
    /// slots, and only the live ones hold slots.
    #[test]
    fn objects_at_ever_new_addresses_are_known_long_past_the_slot_count() {
        static O: Descs = Descs::new();
        for n in 1..=(4 * SLOTS) {
            let d = (n * 0x50) as *mut c_void;
            O.created("test", d, new_desc(COMPUTE_32F, (n % 200) as i32), 0, 0);
            assert_eq!(
                O.get(d).map(|w| w[desc::SCALE]),
                Some((n % 200) as u64),
                "object {n}"
            );
            O.taken(d);
        }
        assert_eq!(O.live(), 0);
        assert!(!O.full_said.load(Ordering::Relaxed), "never full");
    }

    /// A key read from kept words is the key read through the getters: F.linear's objects,
    /// a bias of D's type left unset, and the refusals the readers made.
    #[test]
    fn keys_from_kept_words_are_the_readers_keys() {
        let (n, m, k) = (64u64, 8u64, 32u64);
        let mut d = desc_words(&new_desc(COMPUTE_32F, R_32F), 0);
        d[desc::TRANSA] = signed(OP_T);
        let l = |r, c, ld| layout_words(&LayoutAttrs::col(R_16BF, r, c, ld), 0, 0);
        let (a, b, c) = (l(k, n, k as i64), l(k, m, k as i64), l(n, m, n as i64));
        let linear = LtKey::linear(R_16BF, n as i64, m as i64, k as i64);
        assert_eq!(key_of(&d, [&a, &b, &c, &c]), Ok(linear));
        d[desc::EPILOGUE] = u64::from(EPILOGUE_BIAS);
        assert_eq!(
            key_of(&d, [&a, &b, &c, &c]).map(|k| k.bias_type),
            Ok(R_16BF),
            "an unset bias type is D's"
        );
        let mut flagged = d;
        flagged[desc::FLAGS] = UNSERVED;
        assert!(key_of(&flagged, [&a, &b, &c, &c]).is_err());
        let mut batched = a;
        batched[layout::BATCH] = 2;
        batched[layout::BATCH_MODE] = 1;
        assert!(key_of(&d, [&batched, &b, &c, &c]).is_err());
    }

    /// The set's fast path (`Kinds::desc_field`) changes a descriptor's word exactly as
    /// the general one (`Kinds::desc_set`) would, for each library, every attribute number
    /// around the transposes' and buffers of each size.
    #[test]
    fn a_transpose_set_in_place_is_the_general_sets_change() {
        fn check<K: Kinds>() {
            let word = desc_word(&new_desc(COMPUTE_32F, R_32F));
            for attr in -1..40 {
                for v in [-3i64, -1, 0, 1, 2, 3, 111, 1 << 40] {
                    for size in [0usize, 2, 4, 8] {
                        let p = (&v as *const i64).cast();
                        let quick = unsafe { K::desc_field(attr, p, size) };
                        let Some((field, got)) = quick else { continue };
                        let Change::Field(_, want, want_field) =
                            (unsafe { K::desc_set(attr, p, size) })
                        else {
                            panic!("{}: attr {attr} size {size}: not a field", K::LIBRARY)
                        };
                        assert_eq!(
                            (field, got),
                            (want_field, want as i32),
                            "{}: attr {attr}",
                            K::LIBRARY
                        );
                        assert_eq!(
                            desc_word_set(word, field, got),
                            desc_word_set(word, want_field, want as i32)
                        );
                    }
                }
            }
            let t: i32 = OP_T;
            assert!(
                unsafe { K::desc_field(DESC_TRANSA, (&t as *const i32).cast(), 4) }.is_some()
                    || K::LIBRARY == "hipBLASLt",
                "cuBLASLt's TRANSA takes the fast path"
            );
        }
        check::<crate::cublaslt::objects::Kept>();
        check::<crate::hipblaslt::objects::Kept>();
        let op_t = tunedblas_core::abi::HIPBLAS_OP_T;
        let hip = unsafe {
            crate::hipblaslt::objects::Kept::desc_field(
                tunedblas_core::abi::HIPBLASLT_MATMUL_DESC_TRANSA,
                (&op_t as *const i32).cast(),
                4,
            )
        };
        assert_eq!(
            hip,
            Some((DescField::TRANS_A, OP_T)),
            "hipBLASLt's TRANSA takes it too"
        );
    }

    #[test]
    fn set_values_are_read_with_the_attributes_own_size() {
        let v: i64 = -2;
        let p = (&v as *const i64).cast();
        unsafe {
            assert_eq!(field_value(p, 8, false, true), Some(-2i64 as u64));
            assert_eq!(field_value(p, 4, false, true), None, "too small");
            assert_eq!(
                field_value(p, 8, true, true),
                Some(-2i64 as u64),
                "its first 4 bytes"
            );
            assert_eq!(field_value(p, 4, true, false), Some(0xffff_fffe));
            assert_eq!(field_value(std::ptr::null(), 8, false, false), None);
        }
    }
}
