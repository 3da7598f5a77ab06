//! Finding a record by its id or a unique prefix of it: one rule for every
//! kind of record an operator names by a prefix (dead letters, deliveries),
//! the same on every backend.

use super::StoreError;

/// How many ids an [`StoreError::Ambiguous`] lists.
pub const AMBIGUOUS_SHOWN: usize = 10;

/// A lookup by id or id prefix, the same on every backend: the prefix is
/// matched literally (ids are lowercase hex and dashes; anything else
/// matches nothing), within one tenant when one is given, and "not found"
/// reads the same whatever other tenants have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdLookup {
    /// What is looked up (`dead letter`), for an ambiguity.
    pub what: &'static str,
    /// What "not found" calls it, saying how to name one.
    not_found_what: &'static str,
    /// The id or prefix as given, for messages.
    pub given: String,
    /// The prefix to match (lowercase), or `None` when it can match nothing.
    pub prefix: Option<String>,
}

impl IdLookup {
    /// The rows to fetch at most: enough to list an ambiguity.
    pub const LIMIT: usize = AMBIGUOUS_SHOWN + 1;

    /// Reads a dead letter's id or prefix.
    pub fn dead_letter(id: &str) -> Self {
        Self::new(
            "dead letter",
            "dead letter (give the full id or a unique prefix of at least 4 characters)",
            id,
        )
    }

    /// Reads a delivery's correlation id or prefix.
    pub fn delivery(id: &str) -> Self {
        Self::new(
            "delivery",
            "delivery (give the full correlation id or a unique prefix of at least 4 characters)",
            id,
        )
    }

    fn new(what: &'static str, not_found_what: &'static str, id: &str) -> Self {
        let prefix = id.trim().to_ascii_lowercase();
        let valid = prefix.len() >= 4 && prefix.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        Self {
            what,
            not_found_what,
            given: id.to_owned(),
            prefix: valid.then_some(prefix),
        }
    }

    /// The answer for no match.
    pub fn not_found(&self) -> StoreError {
        StoreError::NotFound {
            what: self.not_found_what,
            id: self.given.clone(),
        }
    }

    /// The answer from the records the prefix matched (in id order, at most
    /// [`Self::LIMIT`]), each record's id read by `id_of`: the one whose
    /// whole id was given, else the only one, else an ambiguity listing
    /// their ids.
    pub fn pick<T>(&self, found: Vec<T>, id_of: impl Fn(&T) -> String) -> Result<T, StoreError> {
        self.pick_shown(found, &id_of, &id_of)
    }

    /// [`IdLookup::pick`], an ambiguity listing each record as `shown`
    /// writes it (its id and what tells it apart).
    pub fn pick_shown<T>(
        &self,
        mut found: Vec<T>,
        id_of: impl Fn(&T) -> String,
        shown: impl Fn(&T) -> String,
    ) -> Result<T, StoreError> {
        let Some(prefix) = &self.prefix else {
            return Err(self.not_found());
        };
        if let Some(exact) = found.iter().position(|record| id_of(record) == *prefix) {
            return Ok(found.swap_remove(exact));
        }
        match <[T; 1]>::try_from(found) {
            Ok([only]) => Ok(only),
            Err(found) if found.is_empty() => Err(self.not_found()),
            Err(found) => Err(StoreError::Ambiguous {
                what: self.what,
                id: self.given.clone(),
                candidates: found
                    .iter()
                    .take(AMBIGUOUS_SHOWN)
                    .map(shown)
                    .chain((found.len() > AMBIGUOUS_SHOWN).then(|| "...".to_owned()))
                    .collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(found: &[&str]) -> Vec<String> {
        found.iter().map(|id| (*id).to_owned()).collect()
    }

    #[test]
    fn a_prefix_is_hex_and_dashes_of_at_least_four_characters_any_case() {
        assert_eq!(IdLookup::delivery(" 0195F3A0 ").prefix.as_deref(), Some("0195f3a0"));
        for nothing in ["019", "0195%", "01_5", "c-1x", "", "    "] {
            assert_eq!(IdLookup::delivery(nothing).prefix, None, "{nothing:?}");
        }
    }

    #[test]
    fn the_whole_id_wins_one_match_is_taken_and_several_are_listed() {
        let lookup = IdLookup::delivery("0195-0001");
        let found = ids(&["0195-0001", "0195-00011"]);
        assert_eq!(lookup.pick(found, String::clone).unwrap(), "0195-0001");
        let lookup = IdLookup::delivery("0195");
        assert_eq!(lookup.pick(ids(&["0195-7"]), String::clone).unwrap(), "0195-7");
        let shown = lookup.pick_shown(ids(&["0195-1", "0195-2"]), String::clone, |id| format!("{id} (failed)"));
        let Err(StoreError::Ambiguous { what, id, candidates }) = shown else {
            panic!("ambiguous: {shown:?}");
        };
        assert_eq!((what, id.as_str()), ("delivery", "0195"));
        assert_eq!(candidates, ["0195-1 (failed)", "0195-2 (failed)"]);
    }

    #[test]
    fn more_than_ten_are_cut_short_and_none_reads_not_found() {
        let lookup = IdLookup::dead_letter("0195");
        let many: Vec<String> = (0..IdLookup::LIMIT).map(|n| format!("0195-{n:02}")).collect();
        let Err(StoreError::Ambiguous { candidates, .. }) = lookup.pick(many, String::clone) else {
            panic!("ambiguous");
        };
        assert_eq!(candidates.len(), AMBIGUOUS_SHOWN + 1);
        assert_eq!(candidates.last().map(String::as_str), Some("..."));
        let none = lookup
            .pick(Vec::<String>::new(), String::clone)
            .unwrap_err()
            .to_string();
        assert!(none.starts_with("no dead letter (give the full id"), "{none}");
        let invalid = IdLookup::dead_letter("%").pick(ids(&["0195"]), String::clone);
        assert!(matches!(invalid, Err(StoreError::NotFound { .. })));
    }
}
