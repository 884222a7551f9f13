//! A call's compact key: what the interposer looks a served Lt call up by, one word per
//! object, so the served path reads four words and does one small lookup instead of
//! building an [`LtKey`] (24 fields, validated) and hashing it.
//!
//! Each descriptor and layout carries its word, computed when it is made or set (the
//! interposer keeps them, `preload/src/lt/objects.rs`): an exact packing of every field the
//! key reads from that object, or 0 when a field is outside the small ranges packed (a
//! dimension of 2^20 or more, a batch, a row-major layout, a type tunedblas does not
//! serve, ...). A call's key is the descriptor's word and its four layouts' ([`CallKey`]).
//! A table indexes each row by the call keys of the objects a caller makes for that row's
//! problem ([`call_keys`], one or two), checked to give that row's key back through
//! [`key_from_attrs`]; so a call whose words equal a row's call key has that row's key, and
//! a call with a word of 0, or words that match no row, is looked up the long way (its
//! fields, [`key_from_attrs`], the table), which gives the same answer.

use super::*;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU8, Ordering};

/// A descriptor's word and its four layouts' (A, B, C, D).
pub type CallKey = [u64; 5];

/// Set in every packed word (0 is "not packed").
const PACKED: u64 = 1 << 63;

/// The bias field of a descriptor whose epilogue adds no bias (its bias type is not read).
const NO_BIAS: u64 = 0xff;
/// The bias field of a bias epilogue whose bias type was never set (D's type).
const BIAS_OF_D: u64 = 0xfe;

/// Dimensions and leading dimensions packed: below 2^20.
const DIM_BITS: u32 = 20;

/// A matmul descriptor's word (Lt numbers; a negative `bias_type` is unset), or 0.
///
/// Every field is checked by the bits above its width at once (a negative value has them
/// all): the wrapped create and set calls compute this on every PyTorch GEMM.
#[inline]
pub fn desc_word(mm: &MatmulAttrs) -> u64 {
    let bias = if epilogue_has_bias(mm.epilogue) {
        if mm.bias_type < 0 {
            BIAS_OF_D
        } else {
            // An explicit type the codes above would take is out of range.
            (mm.bias_type as u32 as u64) | ((mm.bias_type as u32 >= BIAS_OF_D as u32) as u64) << 8
        }
    } else {
        NO_BIAS
    };
    let u = |v: i32| v as u32 as u64;
    let over = u(mm.compute) >> 8
        | u(mm.scale) >> 8
        | u(mm.trans_a) >> 1
        | u(mm.trans_b) >> 1
        | u(mm.pointer_mode) >> 4
        | u64::from(mm.epilogue) >> 16
        | bias >> 8
        | u(mm.sm_count) >> 12;
    if over != 0 {
        return 0;
    }
    PACKED
        | u(mm.compute)
        | u(mm.scale) << 8
        | u(mm.trans_a) << 16
        | u(mm.trans_b) << 17
        | u(mm.pointer_mode) << 18
        | u64::from(mm.epilogue) << 22
        | bias << 38
        | u(mm.sm_count) << 46
}

/// Where a field a set can change in place sits in a packed descriptor word
/// ([`desc_word_set`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescField {
    shift: u8,
    bits: u8,
}

impl DescField {
    pub const COMPUTE: DescField = DescField { shift: 0, bits: 8 };
    pub const SCALE: DescField = DescField { shift: 8, bits: 8 };
    pub const TRANS_A: DescField = DescField { shift: 16, bits: 1 };
    pub const TRANS_B: DescField = DescField { shift: 17, bits: 1 };
    pub const POINTER_MODE: DescField = DescField { shift: 18, bits: 4 };
    pub const SM_COUNT: DescField = DescField {
        shift: 46,
        bits: 12,
    };
}

/// `word` (a packed descriptor word) with `field` set to `v`, or 0 when `v` is out of that
/// field's range: the same word [`desc_word`] makes of the changed descriptor, without
/// unpacking it (a set on a PyTorch descriptor's transposes costs a few instructions).
/// The epilogue and bias type are not fields here: they change what the bias field means.
#[inline(always)]
pub fn desc_word_set(word: u64, field: DescField, v: i32) -> u64 {
    desc_word_edit(word, field, v).unwrap_or(0)
}

/// [`desc_word_set`] as an option (`None` for its 0): what a set's in-place edit takes, with
/// no second test of the word it made (a packed word is never 0).
#[inline(always)]
pub fn desc_word_edit(word: u64, field: DescField, v: i32) -> Option<u64> {
    let v = v as u32 as u64;
    if word == 0 || v >> field.bits != 0 {
        return None;
    }
    let mask = ((1u64 << field.bits) - 1) << field.shift;
    Some((word & !mask) | v << field.shift)
}

/// The code of each type whose layouts are packed, by type number (others: [`NO_TYPE`]).
const TYPE_CODES: [u8; 16] = {
    let mut t = [NO_TYPE; 16];
    t[R_32F as usize] = 0;
    t[R_64F as usize] = 1;
    t[R_16F as usize] = 2;
    t[R_16BF as usize] = 3;
    t
};
const NO_TYPE: u8 = 0xff;

/// A layout word's type bits by type number, [`PACKED`] included (0: a type not packed;
/// every number from 16 on reads the last entry): the create on every PyTorch GEMM ORs its
/// entry in, rather than mapping, checking and shifting a code.
const TYPE_BITS: [u64; 17] = {
    let mut t = [0; 17];
    let mut i = 0;
    while i < 16 {
        if TYPE_CODES[i] != NO_TYPE {
            t[i] = PACKED | (TYPE_CODES[i] as u64) << (3 * DIM_BITS);
        }
        i += 1;
    }
    t
};

/// A layout's word, or 0: one column-major matrix of a served type, rows, columns and
/// leading dimension below 2^20 (the leading dimension at least 1; the stride of a single
/// matrix is not read, but a negative one is refused, as the key refuses it).
#[inline]
pub fn layout_word(l: &LayoutAttrs) -> u64 {
    let ty = TYPE_BITS[(l.dtype as u32).min(16) as usize];
    let ld = l.ld as u64;
    // A leading dimension of 0 or below has the bits above 2^20 in `ld - 1` or `ld`.
    let over = (l.rows | l.cols | ld | ld.wrapping_sub(1)) >> DIM_BITS
        | u64::from(ty == 0)
        | u64::from(l.batch != 1 || l.order != ORDER_COL || l.stride < 0);
    if over != 0 {
        return 0;
    }
    ty | l.rows | l.cols << DIM_BITS | ld << (2 * DIM_BITS)
}

/// The descriptor a packed word was made from (`d_type`: D's type, for an unset bias
/// type of a bias epilogue; -1 where none is read). Only for a word [`desc_word`] made.
pub fn unpack_desc(w: u64, d_type: i32) -> MatmulAttrs {
    let bias = w >> 38 & 0xff;
    MatmulAttrs {
        compute: (w & 0xff) as i32,
        scale: (w >> 8 & 0xff) as i32,
        trans_a: (w >> 16 & 1) as i32,
        trans_b: (w >> 17 & 1) as i32,
        pointer_mode: (w >> 18 & 0xf) as i32,
        epilogue: (w >> 22 & 0xffff) as u32,
        bias_type: match bias {
            NO_BIAS => -1,
            BIAS_OF_D => d_type,
            t => t as i32,
        },
        sm_count: (w >> 46 & 0xfff) as i32,
    }
}

/// The layout a packed word was made from (one column-major matrix, stride 0). Only for a
/// word [`layout_word`] made.
pub fn unpack_layout(w: u64) -> LayoutAttrs {
    let m = (1u64 << DIM_BITS) - 1;
    LayoutAttrs {
        dtype: [R_32F, R_64F, R_16F, R_16BF][(w >> (3 * DIM_BITS) & 3) as usize],
        order: ORDER_COL,
        rows: w & m,
        cols: w >> DIM_BITS & m,
        ld: (w >> (2 * DIM_BITS) & m) as i64,
        batch: 1,
        stride: 0,
    }
}

/// The call keys of the objects a caller makes for `key`'s problem: its descriptor (with
/// the bias type set, or, when it is D's, left unset) and its layouts, each checked to
/// give `key` back. None for a key whose objects are not all packed.
pub fn call_keys(key: &LtKey) -> Vec<CallKey> {
    let layouts = key.layouts();
    let words = layouts.map(|l| layout_word(&l));
    if words.contains(&0) {
        return Vec::new();
    }
    let mm = MatmulAttrs {
        compute: key.compute,
        scale: key.scale,
        pointer_mode: key.pointer_mode,
        trans_a: op_of(key.trans_a),
        trans_b: op_of(key.trans_b),
        epilogue: key.epilogue,
        bias_type: key.bias_type,
        sm_count: key.sm_count,
    };
    let mut biases = vec![key.bias_type];
    if epilogue_has_bias(key.epilogue) && key.bias_type == key.d_type {
        biases.push(-1);
    }
    let [a, b, c, d] = &layouts;
    biases
        .into_iter()
        .filter_map(|bias_type| {
            let mm = MatmulAttrs { bias_type, ..mm };
            let desc = desc_word(&mm);
            // What the reader makes of an unset bias type: D's.
            let read = MatmulAttrs {
                bias_type: if bias_type < 0 { d.dtype } else { bias_type },
                ..mm
            };
            let back = key_from_attrs(&read, a, b, c, d);
            (desc != 0 && back.as_ref() == Ok(key))
                .then_some([desc, words[0], words[1], words[2], words[3]])
        })
        .collect()
}

/// One slot of a [`CallIndex`]: a call key and what it names (a row's position).
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    key: CallKey,
    row: u32,
}

/// Call key -> row, built once with a table and never changed: open addressing in a
/// power-of-two array at most half full, so a lookup is a few multiplies, one or two
/// slots and a compare of five words.
#[derive(Debug, Default)]
pub struct CallIndex {
    slots: Box<[Slot]>,
    shift: u32,
}

impl CallIndex {
    /// Indexes `rows` (call key, row); the first row of a call key wins.
    pub fn new(rows: impl IntoIterator<Item = (CallKey, u32)>) -> CallIndex {
        let rows: Vec<(CallKey, u32)> = rows.into_iter().collect();
        if rows.is_empty() {
            return CallIndex::default();
        }
        let size = (rows.len() * 2).next_power_of_two().max(8);
        let mut index = CallIndex {
            slots: vec![Slot::default(); size].into_boxed_slice(),
            shift: 64 - size.trailing_zeros(),
        };
        for (key, row) in rows {
            let mut i = index.home(&key);
            loop {
                let s = &mut index.slots[i];
                if s.key == key {
                    break;
                }
                if s.key[0] == 0 {
                    *s = Slot { key, row };
                    break;
                }
                i = (i + 1) & (size - 1);
            }
        }
        index
    }

    /// The home slot of a call key: its words folded (each rotated apart) and one multiply,
    /// high bits kept.
    #[inline(always)]
    fn home(&self, k: &CallKey) -> usize {
        let folded = k[0]
            ^ k[1].rotate_left(13)
            ^ k[2].rotate_left(26)
            ^ k[3].rotate_left(39)
            ^ k[4].rotate_left(52);
        (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// The row of a call key, if a row has it.
    #[inline]
    pub fn get(&self, k: &CallKey) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(k);
        loop {
            // SAFETY: masked by the power-of-two length.
            let s = unsafe { self.slots.get_unchecked(i & mask) };
            // An empty slot first: a call key whose descriptor word is 0 (not packed) must
            // never match one.
            if s.key[0] == 0 {
                return None;
            }
            // Word by word (an array compare calls memcmp): the layouts' words first,
            // where rows differ.
            if s.key[1] == k[1]
                && s.key[2] == k[2]
                && s.key[3] == k[3]
                && s.key[4] == k[4]
                && s.key[0] == k[0]
            {
                return Some(s.row);
            }
            i += 1;
        }
    }

    /// Call keys indexed.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.key[0] != 0).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Call keys that matched no row, with their key and its hash, so a repeated miss is not
/// worked out again (objects read in full, the key built and checked, the table looked up,
/// the key hashed): the four words of the call key and this lookup find them.
/// Insert-only and bounded ([`CallMisses::SLOTS`], allocated at the first miss): a call key
/// that finds no room is worked out the long way each time, with the same answer. Kept by
/// the table whose misses they are, so a table replaced takes its misses with it.
#[derive(Default)]
pub struct CallMisses {
    slots: OnceLock<Box<[MissSlot]>>,
}

/// One kept miss: written once by the caller that took the slot ([`READY`] then), never
/// changed after.
struct MissSlot {
    state: AtomicU8,
    entry: UnsafeCell<(CallKey, LtKey, u64)>,
}

// SAFETY: `entry` is written only by the one writer that moved `state` from EMPTY to
// WRITING, and read only after `state` is READY (Acquire), after which nothing writes it.
unsafe impl Sync for MissSlot {}

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const READY: u8 = 2;

impl std::fmt::Debug for CallMisses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CallMisses({} kept)", self.len())
    }
}

impl CallMisses {
    /// Misses kept per table.
    pub const SLOTS: usize = 1024;
    /// Slots a lookup or a keep looks at from a call key's home.
    const PROBES: usize = 16;

    #[inline(always)]
    fn home(k: &CallKey) -> usize {
        let folded = k[0]
            ^ k[1].rotate_left(13)
            ^ k[2].rotate_left(26)
            ^ k[3].rotate_left(39)
            ^ k[4].rotate_left(52);
        (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - Self::SLOTS.trailing_zeros())) as usize
    }

    /// The key and hash of a call key that missed before, if kept.
    #[inline]
    pub fn get(&self, k: &CallKey) -> Option<(&LtKey, u64)> {
        let slots = self.slots.get()?;
        if k[0] == 0 {
            return None;
        }
        let home = Self::home(k);
        for step in 0..Self::PROBES {
            let s = &slots[(home + step) & (Self::SLOTS - 1)];
            match s.state.load(Ordering::Acquire) {
                EMPTY => return None,
                READY => {
                    // SAFETY: READY: written whole, never written again.
                    let (ck, key, hash) = unsafe { &*s.entry.get() };
                    if ck[1] == k[1]
                        && ck[2] == k[2]
                        && ck[3] == k[3]
                        && ck[4] == k[4]
                        && ck[0] == k[0]
                    {
                        return Some((key, *hash));
                    }
                }
                _ => {} // being written: look further
            }
        }
        None
    }

    /// A call key missed with this key (whose hash is `hash`): kept if there is room and
    /// every word of it is packed.
    pub fn keep(&self, k: &CallKey, key: &LtKey, hash: u64) {
        if k.contains(&0) {
            return;
        }
        let slots = self.slots.get_or_init(|| {
            (0..Self::SLOTS)
                .map(|_| MissSlot {
                    state: AtomicU8::new(EMPTY),
                    entry: UnsafeCell::new(([0; 5], LtKey::linear(R_32F, 1, 1, 1), 0)),
                })
                .collect()
        });
        let home = Self::home(k);
        for step in 0..Self::PROBES {
            let s = &slots[(home + step) & (Self::SLOTS - 1)];
            if s.state
                .compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: this caller took the slot (EMPTY -> WRITING); no one reads it
                // until it is READY.
                unsafe { *s.entry.get() = (*k, *key, hash) };
                s.state.store(READY, Ordering::Release);
                return;
            }
            if s.state.load(Ordering::Acquire) == READY {
                // SAFETY: as in `get`.
                if unsafe { &(*s.entry.get()).0 } == k {
                    return; // kept already (by another caller)
                }
            }
        }
    }

    /// Misses kept (a walk: for messages and tests).
    pub fn len(&self) -> usize {
        self.slots.get().map_or(0, |s| {
            s.iter()
                .filter(|s| s.state.load(Ordering::Acquire) == READY)
                .count()
        })
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rng;

    fn any_layout(r: &mut Rng, rows: u64, cols: u64) -> LayoutAttrs {
        LayoutAttrs {
            dtype: r.pick(&[R_16BF, R_16BF, R_16BF, R_16F, R_32F, R_64F, R_8I]),
            order: r.pick(
                &[ORDER_COL; 15]
                    .iter()
                    .copied()
                    .chain([1])
                    .collect::<Vec<_>>(),
            ),
            rows,
            cols,
            ld: r.pick(
                &[rows as i64; 12]
                    .iter()
                    .copied()
                    .chain([rows as i64 + 8, 0, -1, 1 << 20])
                    .collect::<Vec<_>>(),
            ),
            batch: r.pick(&[1; 15].iter().copied().chain([2]).collect::<Vec<_>>()),
            stride: r.pick(
                &[0; 13]
                    .iter()
                    .copied()
                    .chain([4096, 4096, -4])
                    .collect::<Vec<_>>(),
            ),
        }
    }

    /// The packing as first written (a code mapped, checked and shifted in): the packing
    /// each create now makes with [`TYPE_BITS`] must give the same word.
    fn layout_word_as_first_written(l: &LayoutAttrs) -> u64 {
        let code = TYPE_CODES
            .get(l.dtype as u32 as usize)
            .map_or(NO_TYPE, |&c| c);
        let over = (l.rows | l.cols | l.ld as u64) >> DIM_BITS
            | u64::from(code >> 2)
            | u64::from(l.batch != 1 || l.order != ORDER_COL || l.ld < 1 || l.stride < 0);
        if over != 0 {
            return 0;
        }
        PACKED
            | l.rows
            | l.cols << DIM_BITS
            | (l.ld as u64) << (2 * DIM_BITS)
            | u64::from(code) << (3 * DIM_BITS)
    }

    #[test]
    fn a_layout_word_is_the_first_written_packing() {
        let dims = [
            0u64,
            1,
            2,
            64,
            (1 << 20) - 1,
            1 << 20,
            (1 << 20) + 1,
            1 << 40,
            u64::MAX,
        ];
        let lds = [
            i64::MIN,
            -1,
            0,
            1,
            2,
            64,
            (1 << 20) - 1,
            1 << 20,
            1 << 21,
            i64::MAX,
        ];
        let mut packed = 0;
        for dtype in (-3..40).chain([i32::MIN, i32::MAX]) {
            for &rows in &dims {
                for &cols in &dims {
                    for &ld in &lds {
                        for (batch, order, stride) in [
                            (1, ORDER_COL, 0),
                            (2, ORDER_COL, 0),
                            (1, 1, 0),
                            (1, ORDER_COL, -1),
                            (0, ORDER_COL, 5),
                        ] {
                            let l = LayoutAttrs {
                                dtype,
                                order,
                                rows,
                                cols,
                                ld,
                                batch,
                                stride,
                            };
                            let w = layout_word(&l);
                            assert_eq!(w, layout_word_as_first_written(&l), "{l:?}");
                            packed += usize::from(w != 0);
                        }
                    }
                }
            }
        }
        assert!(packed > 100, "some layouts are packed ({packed})");
    }

    /// The packing is exact: whenever every word of a call is packed, the fields read back
    /// from the words make the same key (or the same refusal) as the fields themselves.
    /// So equal words mean an equal key.
    #[test]
    fn packed_words_make_the_key_the_fields_make() {
        let mut r = Rng(0x2545_f491_4f6c_dd1d);
        let mut packed = 0;
        for _ in 0..200_000 {
            let (m, n, k) = (
                r.pick(&[1u64, 8, 64, 1 << 19, (1 << 20) - 1, 1 << 20]),
                r.pick(&[1u64, 7, 512]),
                r.pick(&[16u64, 2560]),
            );
            let mm = MatmulAttrs {
                compute: r.pick(&[COMPUTE_32F, COMPUTE_32F_FAST_16BF, 300]),
                scale: r.pick(&[R_32F, R_16BF]),
                pointer_mode: r.pick(&[0, 1, 16]),
                trans_a: r.pick(&[OP_N, OP_T, OP_C]),
                trans_b: r.pick(&[OP_N, OP_T]),
                epilogue: r.pick(&[EPILOGUE_DEFAULT, EPILOGUE_BIAS, 6, 20, 1 << 16]),
                bias_type: r.pick(&[-1, R_16BF, R_32F, 300]),
                sm_count: r.pick(&[0, 66, 4096]),
            };
            let ta = mm.trans_a == OP_T;
            let tb = mm.trans_b == OP_T;
            let a = any_layout(&mut r, if ta { k } else { m }, if ta { m } else { k });
            let b = any_layout(&mut r, if tb { n } else { k }, if tb { k } else { n });
            let c = any_layout(&mut r, m, n);
            let d = if r.next().is_multiple_of(2) {
                c
            } else {
                any_layout(&mut r, m, n)
            };
            let words = [
                desc_word(&mm),
                layout_word(&a),
                layout_word(&b),
                layout_word(&c),
                layout_word(&d),
            ];
            if words.contains(&0) {
                continue;
            }
            packed += 1;
            let resolve = |mm: &MatmulAttrs| MatmulAttrs {
                bias_type: if mm.bias_type < 0 {
                    d.dtype
                } else {
                    mm.bias_type
                },
                ..*mm
            };
            let direct = key_from_attrs(&resolve(&mm), &a, &b, &c, &d);
            let [la, lb, lc, ld] = [1, 2, 3, 4].map(|i| unpack_layout(words[i]));
            let back = key_from_attrs(&unpack_desc(words[0], ld.dtype), &la, &lb, &lc, &ld);
            assert_eq!(direct, back, "{mm:?} {a:?} {b:?} {c:?} {d:?}");
        }
        assert!(packed > 1000, "the test packs enough calls ({packed})");
    }

    /// A field set in place makes the word packing the changed descriptor makes.
    #[test]
    fn fields_set_in_place_make_the_packed_word() {
        let mm = MatmulAttrs::default();
        let w = desc_word(&mm);
        type Set = fn(&mut MatmulAttrs, i32);
        let cases: [(DescField, i32, Set); 6] = [
            (DescField::COMPUTE, COMPUTE_32F_FAST_16BF, |m, v| {
                m.compute = v
            }),
            (DescField::SCALE, R_16BF, |m, v| m.scale = v),
            (DescField::TRANS_A, OP_T, |m, v| m.trans_a = v),
            (DescField::TRANS_B, OP_T, |m, v| m.trans_b = v),
            (DescField::POINTER_MODE, 1, |m, v| m.pointer_mode = v),
            (DescField::SM_COUNT, 66, |m, v| m.sm_count = v),
        ];
        for (f, v, set) in cases {
            let mut changed = mm;
            set(&mut changed, v);
            assert_eq!(desc_word_set(w, f, v), desc_word(&changed), "{f:?}");
        }
        assert_eq!(desc_word_set(w, DescField::TRANS_A, OP_C), 0);
        assert_eq!(desc_word_set(w, DescField::SM_COUNT, -1), 0);
        assert_eq!(desc_word_set(0, DescField::SCALE, R_32F), 0);
    }

    /// Every key of a PyTorch F.linear or addmm with bias (the bias of D's type set or
    /// left unset) has call keys, each giving the key back; a key outside the packed
    /// ranges has none.
    #[test]
    fn pytorch_keys_are_indexed_by_the_objects_pytorch_makes() {
        let linear = LtKey::linear(R_16BF, 4096, 7, 14336);
        assert_eq!(call_keys(&linear).len(), 1);
        let bias = LtKey {
            epilogue: EPILOGUE_BIAS,
            bias_type: R_16BF,
            ..linear
        };
        assert_eq!(call_keys(&bias).len(), 2, "set, or left unset");
        let f32_bias = LtKey {
            bias_type: R_32F,
            ..bias
        };
        assert_eq!(call_keys(&f32_bias).len(), 1);
        assert!(call_keys(&LtKey::linear(R_16BF, 1 << 20, 1, 64)).is_empty());
        let index = CallIndex::new(
            [linear, bias, f32_bias]
                .iter()
                .enumerate()
                .flat_map(|(i, k)| call_keys(k).into_iter().map(move |c| (c, i as u32))),
        );
        assert_eq!(index.len(), 4);
        for (i, k) in [linear, bias, f32_bias].iter().enumerate() {
            for c in call_keys(k) {
                assert_eq!(index.get(&c), Some(i as u32));
            }
        }
        let other = call_keys(&LtKey::linear(R_16BF, 4096, 8, 14336))[0];
        assert_eq!(index.get(&other), None);
        assert_eq!(index.get(&[0; 5]), None, "objects not packed match no row");
        assert_eq!(CallIndex::default().get(&other), None);
    }

    /// A missed call key is kept with its key and hash and found again; call keys with a
    /// word not packed are not kept; past the room, misses are simply not kept.
    #[test]
    fn missed_call_keys_are_kept_and_found_again() {
        let m = CallMisses::default();
        let k = LtKey::linear(R_16BF, 64, 3, 64);
        let ck = call_keys(&k)[0];
        assert!(m.get(&ck).is_none());
        m.keep(&ck, &k, 77);
        assert_eq!(m.get(&ck), Some((&k, 77)));
        m.keep(&ck, &k, 77);
        assert_eq!(m.len(), 1, "kept once");
        let mut unpacked = ck;
        unpacked[2] = 0;
        m.keep(&unpacked, &k, 1);
        assert!(m.get(&unpacked).is_none());
        for t in 1..=4 * CallMisses::SLOTS as i64 {
            let k = LtKey::linear(R_16BF, 128, t, 64);
            m.keep(&call_keys(&k)[0], &k, t as u64);
        }
        assert!(m.len() <= CallMisses::SLOTS);
        let found = (1..=4 * CallMisses::SLOTS as i64)
            .filter(|&t| {
                let k = LtKey::linear(R_16BF, 128, t, 64);
                m.get(&call_keys(&k)[0])
                    .is_some_and(|(key, h)| *key == k && h == t as u64)
            })
            .count();
        assert_eq!(
            found,
            m.len() - 1,
            "every kept miss is found as it was kept"
        );
    }

    /// Threads keeping and finding misses at once read only whole entries.
    #[test]
    fn threads_keeping_misses_at_once_read_whole_entries() {
        let m = std::sync::Arc::new(CallMisses::default());
        let threads: Vec<_> = (0..4i64)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..2000i64 {
                        let tokens = 1 + (i * 7 + t) % 300;
                        let k = LtKey::linear(R_16BF, 256, tokens, 64);
                        let ck = call_keys(&k)[0];
                        m.keep(&ck, &k, tokens as u64);
                        if let Some((key, h)) = m.get(&ck) {
                            assert_eq!((*key, h), (k, tokens as u64), "a torn entry");
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    /// Many rows, including ones whose call keys differ only in one layout, each found.
    #[test]
    fn an_index_of_many_rows_finds_each() {
        let keys: Vec<LtKey> = (1..=3000)
            .map(|t| LtKey::linear(R_16BF, 4096, t, 4096))
            .collect();
        let index = CallIndex::new(
            keys.iter()
                .enumerate()
                .map(|(i, k)| (call_keys(k)[0], i as u32)),
        );
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(index.get(&call_keys(k)[0]), Some(i as u32));
        }
    }
}
