//! A campaign spread over a fleet: which share of the shapes this machine tunes
//! (`tune --shard auto`), from the variables the job engines operators run already set.
//!
//! - **Kubernetes Indexed Jobs** (`completionMode: Indexed`) give each pod its index in
//!   `JOB_COMPLETION_INDEX` (0-based). Kubernetes does not put the number of completions in
//!   the environment: the Job sets `JOB_COMPLETIONS` to its `.spec.completions` itself
//!   (docs/fleet.md has the manifest).
//! - **Slurm job arrays** set `SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_COUNT`, and
//!   `SLURM_ARRAY_TASK_MIN` / `_MAX` / `_STEP` (`--array=1-8` starts at 1, `--array=0-14:2`
//!   steps by 2): the share is the task's position in the array, `(ID - MIN) / STEP`.
//!
//! Anything missing, malformed or inconsistent is an error that names the variables, never a
//! guess: a wrong share silently tunes some shapes twice and others never.

/// This machine's share: `index` of `count`, and the engine that said so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
    /// `"Kubernetes"` or `"Slurm"`.
    pub engine: &'static str,
}

const K8S: [&str; 2] = ["JOB_COMPLETION_INDEX", "JOB_COMPLETIONS"];
const SLURM: [&str; 2] = ["SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"];

fn number(var: &str, value: &str) -> Result<i64, String> {
    value
        .trim()
        .parse::<i64>()
        .map_err(|_| format!("{var}={value:?} is not a whole number"))
}

/// An engine's two variables (index and count), or `None` when neither is set: the job
/// is not that engine's.
fn engine_vars(
    get: &dyn Fn(&str) -> Option<String>,
    names: [&str; 2],
) -> Option<[Option<String>; 2]> {
    let vars = names.map(get);
    (vars[0].is_some() || vars[1].is_some()).then_some(vars)
}

fn kubernetes(get: &dyn Fn(&str) -> Option<String>) -> Option<Result<Shard, String>> {
    let [index, count] = engine_vars(get, K8S)?;
    Some((|| {
        let Some(index) = index else {
            return Err(format!(
                "{} is set but {} is not: is this pod part of an Indexed Job (completionMode: Indexed)?",
                K8S[1], K8S[0]
            ));
        };
        let Some(count) = count else {
            return Err(format!(
                "{}={index} is set but {} is not: Kubernetes does not set it; give the Job's container env JOB_COMPLETIONS with the value of .spec.completions",
                K8S[0], K8S[1]
            ));
        };
        let (i, n) = (number(K8S[0], &index)?, number(K8S[1], &count)?);
        if n < 1 {
            return Err(format!("{}={n}: a Job needs at least 1 completion", K8S[1]));
        }
        if !(0..n).contains(&i) {
            return Err(format!(
                "{}={i} is not below {}={n}: .spec.completions and JOB_COMPLETIONS disagree",
                K8S[0], K8S[1]
            ));
        }
        Ok(Shard {
            index: i as usize,
            count: n as usize,
            engine: "Kubernetes",
        })
    })())
}

fn slurm(get: &dyn Fn(&str) -> Option<String>) -> Option<Result<Shard, String>> {
    let [id, count] = engine_vars(get, SLURM)?;
    Some((|| {
        let (Some(id), Some(count)) = (id, count) else {
            return Err(format!(
                "{} and {} must both be set (Slurm sets them in every task of a job array: sbatch --array)",
                SLURM[0], SLURM[1]
            ));
        };
        let (id, n) = (number(SLURM[0], &id)?, number(SLURM[1], &count)?);
        let opt = |v: &str| get(v).map(|x| number(v, &x)).transpose();
        let min = opt("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
        let step = opt("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1);
        let max = opt("SLURM_ARRAY_TASK_MAX")?;
        if n < 1 || step < 1 {
            return Err(format!(
                "{}={n}, SLURM_ARRAY_TASK_STEP={step}: an array has at least one task and a positive step",
                SLURM[1]
            ));
        }
        if let Some(max) = max {
            if min + (n - 1) * step != max {
                return Err(format!(
                    "the array is not evenly spaced (SLURM_ARRAY_TASK_MIN={min}, _MAX={max}, _STEP={step}, _COUNT={n}), as --array=1,3,10 makes it; run the tasks with an explicit --shard I/N"
                ));
            }
        }
        if id < min || (id - min) % step != 0 || (id - min) / step >= n {
            return Err(format!(
                "{}={id} is not a task of the array SLURM_ARRAY_TASK_MIN={min}, _STEP={step}, _COUNT={n}",
                SLURM[0]
            ));
        }
        Ok(Shard {
            index: ((id - min) / step) as usize,
            count: n as usize,
            engine: "Slurm",
        })
    })())
}

/// The share of the job this process belongs to, from the environment `get` reads. Both
/// engines' variables present must agree.
pub fn shard_from(get: impl Fn(&str) -> Option<String>) -> Result<Shard, String> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    match (kubernetes(&get), slurm(&get)) {
        (None, None) => Err(format!(
            "--shard auto needs a job engine's index and count: {} and {} (a Kubernetes Indexed Job; set JOB_COMPLETIONS to .spec.completions), or {} and {} (a Slurm job array); none is set. Give --shard I/N to choose by hand",
            K8S[0], K8S[1], SLURM[0], SLURM[1]
        )),
        (Some(r), None) | (None, Some(r)) => r,
        (Some(k), Some(s)) => {
            let (k, s) = (k?, s?);
            if (k.index, k.count) == (s.index, s.count) {
                Ok(k)
            } else {
                Err(format!(
                    "Kubernetes says shard {}/{} ({}, {}) and Slurm says {}/{} ({}, {}): unset one engine's variables",
                    k.index, k.count, K8S[0], K8S[1], s.index, s.count, SLURM[0], SLURM[1]
                ))
            }
        }
    }
}

/// [`shard_from`] on this process's environment.
pub fn shard_from_env() -> Result<Shard, String> {
    shard_from(|k| std::env::var(k).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    /// The environment `NAME=value NAME=value ...` (values without spaces).
    fn vars(text: &str) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = text
            .split_whitespace()
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    /// Why [`shard_from`] refuses the environment `text` (as [`vars`] reads it).
    fn refusal(text: &str) -> String {
        shard_from(vars(text)).unwrap_err()
    }

    #[test]
    fn kubernetes_indexed_jobs() {
        let s = shard_from(vars("JOB_COMPLETION_INDEX=2 JOB_COMPLETIONS=4")).unwrap();
        assert_eq!((s.index, s.count, s.engine), (2, 4, "Kubernetes"));
        let missing = shard_from(env(&[("JOB_COMPLETION_INDEX", "2")])).unwrap_err();
        assert!(
            missing.contains("JOB_COMPLETIONS is not") && missing.contains(".spec.completions"),
            "{missing}"
        );
        assert!(shard_from(env(&[("JOB_COMPLETIONS", "4")]))
            .unwrap_err()
            .contains("Indexed"));
        let past = refusal("JOB_COMPLETION_INDEX=4 JOB_COMPLETIONS=4");
        assert!(past.contains("disagree"), "{past}");
        assert!(refusal("JOB_COMPLETION_INDEX=x JOB_COMPLETIONS=4")
            .contains("JOB_COMPLETION_INDEX=\"x\""));
    }

    #[test]
    fn slurm_arrays_from_any_start_and_step() {
        let one_based = "SLURM_ARRAY_TASK_ID=3 SLURM_ARRAY_TASK_COUNT=8 \
            SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=8";
        let s = shard_from(vars(one_based)).unwrap();
        assert_eq!((s.index, s.count, s.engine), (2, 8, "Slurm"));
        let stepped = "SLURM_ARRAY_TASK_ID=6 SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_MIN=0 \
            SLURM_ARRAY_TASK_MAX=6 SLURM_ARRAY_TASK_STEP=2";
        assert_eq!(shard_from(vars(stepped)).unwrap().index, 3);
        let listed = "SLURM_ARRAY_TASK_ID=3 SLURM_ARRAY_TASK_COUNT=3 \
            SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=10";
        assert!(refusal(listed).contains("evenly spaced"));
        assert!(shard_from(env(&[("SLURM_ARRAY_TASK_ID", "1")]))
            .unwrap_err()
            .contains("both be set"));
        let outside = "SLURM_ARRAY_TASK_ID=9 SLURM_ARRAY_TASK_COUNT=4";
        assert!(refusal(outside).contains("not a task of the array"));
    }

    #[test]
    fn none_or_both_engines() {
        let none = shard_from(env(&[])).unwrap_err();
        for v in [
            "JOB_COMPLETION_INDEX",
            "JOB_COMPLETIONS",
            "SLURM_ARRAY_TASK_ID",
            "SLURM_ARRAY_TASK_COUNT",
        ] {
            assert!(none.contains(v), "{none}");
        }
        let blank = shard_from(env(&[
            ("JOB_COMPLETION_INDEX", " "),
            ("JOB_COMPLETIONS", ""),
        ]));
        assert!(blank.is_err(), "blank variables are unset");
        let agree = "JOB_COMPLETION_INDEX=1 JOB_COMPLETIONS=2 \
            SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=2";
        assert_eq!(shard_from(vars(agree)).unwrap().index, 1);
        let disagree = "JOB_COMPLETION_INDEX=0 JOB_COMPLETIONS=2 \
            SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=2";
        assert!(refusal(disagree).contains("unset one engine"));
    }
}
