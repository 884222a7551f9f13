//! `tunedblas lt tune` as a resumable campaign: each finished shape is appended to the
//! profile folder's checkpoint (the same [`Checkpoint`] and campaign lock `tunedblas tune`
//! uses) before the next starts, so a killed campaign, rerun with the same library, rank
//! and shapes, tunes only the shapes it had not finished.

use std::path::Path;

use tunedblas_core::cublaslt::{op_and_signature, parse_key, LtAction, LtKey};

use super::cuda::Result;
use super::mins_secs;
use super::tune::Outcome;
use crate::campaign::{Checkpoint, Header};

/// The `op,signature` line a shape is known by in the checkpoint.
fn shape_line(key: &LtKey) -> String {
    let (op, sig) = op_and_signature(key);
    format!("{op},{sig}")
}

/// Opens the checkpoint in the profile folder `dir` for this campaign; the outcomes an
/// interrupted run of it finished come back (with their keys and rows restored).
pub fn open(
    dir: &Path,
    lib: &str,
    build: &str,
    rank: usize,
    keys: &[LtKey],
    fresh: bool,
) -> crate::error::Result<(Checkpoint, Vec<Outcome>)> {
    let header = Header::new(
        format!("{lib} {build} rank {rank}"),
        keys.iter().map(shape_line).collect(),
    );
    let (checkpoint, done) = Checkpoint::open::<Outcome>(dir, header, fresh)?;
    Ok((checkpoint, done.into_iter().filter_map(restore).collect()))
}

/// What the checkpoint does not hold, rebuilt: the key from the signature, the row's
/// configuration from the adopted solution's name. `None` for a line that does not parse.
fn restore(mut o: Outcome) -> Option<Outcome> {
    o.key = Some(parse_key(&o.op, &o.signature).ok()?);
    o.action = Some(match &o.adopted {
        Some(name) => LtAction::parse(name).ok()?,
        None => LtAction::Default,
    });
    Some(o)
}

/// Every key in turn: the ones in `done` as they were, the others by `tune_one`, each
/// checkpointed as soon as it is tuned. A shape that fails is said and left out (a rerun
/// tries it again). Progress and the ETA of the shapes left on stderr after each shape.
pub fn tune_all(
    keys: &[LtKey],
    done: Vec<Outcome>,
    checkpoint: &mut Checkpoint,
    mut tune_one: impl FnMut(&LtKey) -> Result<Outcome>,
) -> crate::error::Result<Vec<Outcome>> {
    let t0 = std::time::Instant::now();
    let resumed = done.len();
    if resumed > 0 {
        crate::say::note!(
            "tunedblas lt: resuming: {resumed} of {} shapes were tuned by the interrupted run",
            keys.len()
        );
    }
    let mut done = done;
    let mut outcomes = Vec::new();
    let mut tuned = 0;
    for (i, key) in keys.iter().enumerate() {
        let sig = op_and_signature(key).1;
        let said = if let Some(j) = done.iter().position(|o| o.key == Some(*key)) {
            outcomes.push(done.swap_remove(j));
            "from the checkpoint".to_string()
        } else {
            tuned += 1;
            match tune_one(key) {
                Ok(o) => {
                    checkpoint.append(&o)?;
                    let said = format!(
                        "{}{}",
                        o.adopted
                            .as_deref()
                            .map_or("Default".into(), |s| format!("proposed {s}")),
                        o.search
                            .as_ref()
                            .map_or(String::new(), |s| format!("; {}", s.line()))
                    );
                    outcomes.push(o);
                    said
                }
                Err(e) => {
                    println!("{}: not tuned: {e}", shape_line(key));
                    format!("not tuned: {e}")
                }
            }
        };
        let el = t0.elapsed().as_secs_f64();
        let left = keys.len() - i - 1;
        crate::say::note!(
            "tunedblas lt: [{}/{}] {}: {said}; {} elapsed, ETA {}",
            i + 1,
            keys.len(),
            sig.chars().take(48).collect::<String>(),
            mins_secs(el),
            mins_secs(el / tuned.max(1) as f64 * left as f64)
        );
    }
    Ok(outcomes)
}

/// Before anything is written: a campaign that tuned no shape fails (exit 1) and writes
/// nothing (an empty profile registered for the build would serve nothing and hide it).
pub fn none_tuned(keys: &[LtKey], outcomes: &[Outcome]) -> crate::error::Result<()> {
    if outcomes.is_empty() && !keys.is_empty() {
        return Err(crate::error::Error::failed(format!(
            "none of the {} shapes could be tuned (each is said above); nothing was written",
            keys.len()
        )));
    }
    Ok(())
}

/// After the rows are written: shapes that could not be tuned fail the campaign (exit 1),
/// and its checkpoint is kept, so the same command again retries only those. `Ok` when
/// every shape was tuned: the checkpoint is then retired.
pub fn finish(
    keys: &[LtKey],
    outcomes: &[Outcome],
    checkpoint: Checkpoint,
    dir: &Path,
) -> crate::error::Result<()> {
    let untuned = keys.len().saturating_sub(outcomes.len());
    if untuned == 0 {
        checkpoint.retire(dir);
        return Ok(());
    }
    Err(crate::error::Error::failed(format!(
        "{untuned} of {} shapes could not be tuned (each is said above; the rows of the other {} are written): \
         the same command again retries only those",
        keys.len(),
        outcomes.len()
    )))
}

#[cfg(test)]
mod tests {
    use super::super::tune::Timed;
    use super::*;
    use tunedblas_core::cublaslt::R_16BF;

    const ADOPTED: &str =
        "Gemm_Cublaslt_algo66_tile47_stages35_splitk1_red0_swizzle0_custom0_inner0_cluster2";

    /// What the tuner of this stand-in campaign decides: the first shape adopts a
    /// configuration, the others keep the heuristic.
    fn outcome(key: &LtKey) -> Outcome {
        let (op, signature) = op_and_signature(key);
        let adopted = (key.n == 1).then(|| ADOPTED.to_string());
        let timed = |ms: f64| Timed {
            solution: "heuristic".into(),
            median_ms: ms,
            spread: 0.01,
            rel_err: 0.0,
            workspace: 0,
            samples: vec![ms],
        };
        Outcome {
            op,
            signature,
            calls_per_sample: 8,
            input_sets: 1,
            heuristic: timed(0.02),
            candidates: vec![],
            dropped: vec![],
            action: Some(
                adopted
                    .as_deref()
                    .map_or(LtAction::Default, |s| LtAction::parse(s).unwrap()),
            ),
            adopted,
            gain: 0.05,
            confirm_gain: None,
            fresh_gain: None,
            win_share: 1.0,
            reason: "stand-in".into(),
            timing: "graph".into(),
            bytes_moved: 1,
            limit_ms: None,
            heuristic_pct_of_limit: None,
            best_pct_of_limit: None,
            warm_up_ms: 0.0,
            roofline: None,
            search: None,
            key: Some(*key),
        }
    }

    #[test]
    fn an_interrupted_campaign_resumes_and_tunes_each_shape_once() {
        let dir = std::env::temp_dir().join(format!("tunedblas-lt-resume-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let keys: Vec<LtKey> = (1..=4)
            .map(|m| LtKey::linear(R_16BF, 512, m, 256))
            .collect();
        let tuned = std::cell::RefCell::new(Vec::new());
        let tuner = |key: &LtKey| {
            tuned.borrow_mut().push(key.n);
            outcome(key)
        };

        // First run: shape 2 fails (not checkpointed), shape 3 is killed mid-shape.
        let (mut cp, done) = open(&dir, "cublaslt", "sha", 0, &keys, false).unwrap();
        assert!(done.is_empty());
        let killed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tune_all(&keys, done, &mut cp, |key| match key.n {
                2 => Err(super::super::cuda::Error("out of memory".into())),
                3 => panic!("killed"),
                _ => Ok(tuner(key)),
            })
        }));
        assert!(killed.is_err());
        drop(cp);
        assert_eq!(*tuned.borrow(), [1]);

        // Another campaign (other shapes, or another rank) may not take the checkpoint.
        let e = open(&dir, "cublaslt", "sha", 1, &keys, false)
            .err()
            .unwrap();
        assert!(e.message.contains("unfinished campaign"), "{}", e.message);

        // Rerun with the same inputs: shape 1 from the checkpoint, the rest tuned once.
        let (mut cp, done) = open(&dir, "cublaslt", "sha", 0, &keys, false).unwrap();
        assert_eq!(done.len(), 1);
        let out = tune_all(&keys, done, &mut cp, |key| Ok(tuner(key))).unwrap();
        assert_eq!(*tuned.borrow(), [1, 2, 3, 4]);
        let got: Vec<LtKey> = out.iter().map(|o| o.key.unwrap()).collect();
        assert_eq!(got, keys);
        // The resumed shape's row is the one it adopted.
        assert_eq!(out[0].row(), outcome(&keys[0]).row());
        assert!(matches!(out[0].row().action, LtAction::Config(_)));
        cp.retire(&dir);
        assert!(!dir.join(".campaign.partial.jsonl").exists());

        // Finished: a rerun starts afresh.
        let (_cp, done) = open(&dir, "cublaslt", "sha", 0, &keys, false).unwrap();
        assert!(done.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
