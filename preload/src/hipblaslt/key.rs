//! The key of a `hipblasLtMatmul` call: what its descriptor and layouts were made and set
//! with ([`super::objects`], kept in cuBLASLt's numbers), so no hipBLASLt call is made for
//! it; and its call key, the four words a served call is looked up by.

use tunedblas_core::cublaslt::{CallKey, LtKey};

use super::objects::{DESCS, LAYOUTS};
use crate::log::debug;
use crate::lt::objects::{key_of, GETTERS};
use crate::lt::LtCall;

/// The call key of a call (`crate::lt::key::call_key`); none that matches a row when C and
/// D differ (an algorithm is checked with C and D at one address: such a call keeps its
/// own, `read_key` says why): its descriptor word cleared, as an unknown descriptor's is.
/// Cleared rather than returned early: the served path's code then keeps the registers it
/// needs (`bench/lt/instructions.sh`: 7 instructions fewer per served call than the early
/// return, once the rows became swappable).
#[inline(always)]
pub fn call_key(x: &LtCall) -> CallKey {
    let mut k = crate::lt::key::call_key(&DESCS, &LAYOUTS, x);
    if x.c != x.d.cast_const() {
        k[0] = 0;
    }
    k
}

/// The key of a call, or `None` when it is not one tunedblas serves.
///
/// # Safety
/// `x` holds a caller's live descriptors.
pub unsafe fn read_key(x: &LtCall) -> Option<LtKey> {
    let Some((d, [a, b, c, dd])) = crate::lt::key::kept(&DESCS, &LAYOUTS, x) else {
        debug!("hipBLASLt: passing a call through: a descriptor or layout not made through the interposer");
        return None;
    };
    if d[crate::lt::objects::desc::FLAGS] & GETTERS != 0 {
        debug!("hipBLASLt: passing a call through: its descriptor was given an attribute in a form the interposer does not read");
        return None;
    }
    if x.c != x.d.cast_const() {
        // An algorithm is checked with C and D at one address (matmulIsAlgoSupported sees
        // no pointers): a call writing D elsewhere keeps its own.
        debug!("hipBLASLt: passing a call through: C and D differ");
        return None;
    }
    match key_of(&d, [&a, &b, &c, &dd]) {
        Ok(k) => Some(k),
        Err(why) => {
            debug!("hipBLASLt: passing a call through: {why}");
            None
        }
    }
}
