//! The program's own notes: `vramtrace.annotate(key, value)` records a key
//! and a value (a step number, a setting such as the batch size); the
//! replay keeps them ([`crate::replay::ReplayState::annotations`]).

/// The last value noted under any of `keys` (compared without case): a
/// process's notes reach every trace it starts later, so a second
/// recording in one process holds the first one's notes before its own.
pub fn last<'a>(notes: &'a [(String, String)], keys: &[&str]) -> Option<&'a str> {
    notes
        .iter()
        .rev()
        .find(|(k, _)| keys.iter().any(|w| k.eq_ignore_ascii_case(w)))
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_note_of_a_key_is_found_without_case() {
        let notes = vec![
            ("step".to_string(), "1".to_string()),
            ("Batch".to_string(), "8".to_string()),
            ("batch".to_string(), "16".to_string()),
        ];
        assert_eq!(last(&notes, &["batch", "batch_size"]), Some("16"));
        assert_eq!(last(&notes, &["seq"]), None);
    }
}
