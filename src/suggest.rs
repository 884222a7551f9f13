//! "Did you mean": the known name a mistyped one most likely stands for, for the command
//! line (`tunedblas tune --frehs`) and the interposer's settings (`TUNEDBLAS_PROFILES_DIR`).

/// The candidate `given` most likely misspells: the closest by edit distance within a
/// tolerance that grows with the length, else the only candidate `given` abbreviates.
/// None when nothing is close, so a wild guess is never offered.
pub fn suggest<'a>(given: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let candidates: Vec<&str> = candidates.into_iter().collect();
    let bare = |s: &str| s.trim_start_matches('-').to_ascii_lowercase();
    let g = bare(given);
    let tolerance = 1 + g.chars().count() / 4;
    let closest = candidates
        .iter()
        .map(|c| (edit_distance(&g, &bare(c)), *c))
        .filter(|(d, _)| *d <= tolerance)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c);
    closest.or_else(|| {
        let mut prefixed = candidates
            .iter()
            .filter(|c| g.len() >= 2 && bare(c).starts_with(&g));
        match (prefixed.next(), prefixed.next()) {
            (Some(only), None) => Some(*only),
            _ => None,
        }
    })
}

/// Levenshtein distance (insertions, deletions, substitutions), by characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_near_misses_or_unique_abbreviations() {
        let flags = [
            "--fresh",
            "--retune",
            "--devices",
            "--json",
            "--shard",
            "--shape",
        ];
        assert_eq!(suggest("--frseh", flags), Some("--fresh"));
        assert_eq!(suggest("--retnue", flags), Some("--retune"));
        assert_eq!(suggest("--JSON", flags), Some("--json"));
        assert_eq!(suggest("--dev", flags), Some("--devices"));
        // "--sha" abbreviates two flags: no guess.
        assert_eq!(suggest("--sha", flags), None);
        assert_eq!(suggest("--bogus", flags), None);
        assert_eq!(suggest("tunr", ["tune", "qualify"]), Some("tune"));
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }
}
