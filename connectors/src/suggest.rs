//! "Did you mean": the known name closest to a misspelled one, for errors about unknown
//! options, settings, tables, columns and functions, and for the REPL.

/// The candidate closest to `word` by edit distance (case-insensitive), when it is close
/// enough to be a likely misspelling: at most a third of the longer name's characters
/// differ (and at most 3). Ties go to the first candidate.
pub fn closest<'a, I>(word: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let word = word.to_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for c in candidates {
        let lower = c.to_lowercase();
        if lower == word {
            continue;
        }
        let d = edit_distance(&word, &lower);
        let longest = word.chars().count().max(lower.chars().count());
        let limit = (longest / 3).clamp(1, 3);
        if d <= limit && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// `" (did you mean 'x'?)"` when a candidate is close to `word`, else nothing.
pub fn did_you_mean<'a, I>(word: &str, candidates: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    closest(word, candidates)
        .map(|c| format!(" (did you mean '{c}'?)"))
        .unwrap_or_default()
}

/// Levenshtein distance with adjacent transpositions counted as one edit (optimal string
/// alignment), over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut before = vec![0usize; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0usize; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            current[j] = d;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("ab", "ba"), 1);
        assert_eq!(edit_distance("batch_szie", "batch_size"), 1);
    }

    #[test]
    fn suggests_only_close_names() {
        let keys = ["path", "format", "header", "batch_size", "rate"];
        assert_eq!(closest("fromat", keys), Some("format"));
        assert_eq!(closest("batchsize", keys), Some("batch_size"));
        assert_eq!(closest("PATH2", keys), Some("path"));
        assert_eq!(closest("topic", keys), None);
        assert_eq!(closest("x", keys), None);
        assert_eq!(did_you_mean("heade", keys), " (did you mean 'header'?)");
        assert_eq!(did_you_mean("zzz", keys), "");
    }
}
