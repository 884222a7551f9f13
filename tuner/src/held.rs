//! SIGINT, SIGTERM and SIGHUP held off while the store is committed. A commit renames
//! several files (the rank files, `provenance.json`, `profiles.json`) that describe one
//! profile; the signal a user sends (Ctrl-C, `watch` passing its SIGTERM on to its round)
//! must not land between two renames and leave new rows with the old registry entry, or a
//! campaign recorded but not retired (recorded again by the rerun). While a [`Held`]
//! guard lives, a handler only notes the first of them; when the outermost guard goes,
//! the dispositions the process had are put back and the signal noted is raised again, so
//! the process ends as asked, right after the commit. SIGKILL cannot be held (RELIABILITY.md).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The first signal noted while held (0: none).
static CAUGHT: AtomicI32 = AtomicI32::new(0);

/// How many guards live, and the dispositions the outermost one replaced.
static STATE: Mutex<(usize, Vec<(libc::c_int, libc::sigaction)>)> = Mutex::new((0, Vec::new()));

extern "C" fn note(sig: libc::c_int) {
    let _ = CAUGHT.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
}

/// While it lives, SIGINT, SIGTERM and SIGHUP are noted, not acted on; see the module docs.
pub struct Held(());

/// Holds SIGINT, SIGTERM and SIGHUP off until the guard (and any outer one) is dropped.
pub fn hold() -> Held {
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if state.0 == 0 {
        // SAFETY: a handler that only stores an atomic; every sigaction is of a signal
        // that can be caught, with structures initialised here.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = note as *const () as libc::sighandler_t;
            act.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            for s in SIGNALS {
                libc::sigaddset(&mut act.sa_mask, s);
            }
            for s in SIGNALS {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(s, &act, &mut old) == 0 {
                    state.1.push((s, old));
                }
            }
        }
    }
    state.0 += 1;
    Held(())
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
        state.0 -= 1;
        if state.0 > 0 {
            return;
        }
        for (s, old) in state.1.drain(..) {
            // SAFETY: puts back the disposition sigaction gave us for this signal.
            unsafe { libc::sigaction(s, &old, std::ptr::null_mut()) };
        }
        drop(state);
        let sig = CAUGHT.swap(0, Ordering::SeqCst);
        if sig != 0 {
            // As it would have been delivered: ignored where it was ignored, the old
            // handler where there was one, else the default (the process ends).
            // SAFETY: raising a signal at ourselves.
            unsafe { libc::raise(sig) };
        }
    }
}
