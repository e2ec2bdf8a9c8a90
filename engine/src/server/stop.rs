//! Stop strings over a stream of text pieces: text is released only once it can no longer
//! be the start of a stop string, so a stop string split across tokens is still caught
//! and never partly streamed. The stop string itself is not part of the output.

/// Matcher state for one stream.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
        }
    }

    /// Feed a piece; returns the text that is now safe to emit and whether a stop string
    /// was reached (then the returned text ends right before it and nothing more should be
    /// fed).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        self.held.push_str(piece);
        let found = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = found {
            let out = self.held.get(..at).unwrap_or("").to_owned();
            self.held.clear();
            return (out, true);
        }
        let keep = self.hold_back();
        let cut = self.held.len() - keep;
        let out = self.held.get(..cut).unwrap_or("").to_owned();
        self.held = self.held.get(cut..).unwrap_or("").to_owned();
        (out, false)
    }

    /// Length of the longest suffix of the held text that is a proper prefix of a stop
    /// string (at a character boundary).
    fn hold_back(&self) -> usize {
        let h = &self.held;
        let mut best = 0;
        for s in &self.stops {
            let max = (s.len() - 1).min(h.len());
            for k in (best + 1..=max).rev() {
                let start = h.len() - k;
                if h.is_char_boundary(start) && s.as_bytes().starts_with(&h.as_bytes()[start..]) {
                    best = k;
                    break;
                }
            }
        }
        best
    }

    /// The end of the stream: whatever is held back.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool, String) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out = Vec::new();
        for p in pieces {
            let (t, stop) = m.push(p);
            out.push(t);
            if stop {
                return (out, true, String::new());
            }
        }
        (out, false, m.finish())
    }

    #[test]
    fn stop_split_across_pieces_is_caught_and_not_streamed() {
        let (out, stop, _) = run(&["END"], &["hello E", "N", "D more"]);
        assert_eq!(out, vec!["hello ", "", ""]);
        assert!(stop);
        let (out, stop, _) = run(&["\n\n"], &["a\n", "\nb"]);
        assert_eq!(out.concat(), "a");
        assert!(stop);
    }

    #[test]
    fn false_start_is_released_and_tail_flushed() {
        let (out, stop, tail) = run(&["END"], &["hello E", "x", "EN"]);
        assert_eq!(out, vec!["hello ", "Ex", ""]);
        assert!(!stop);
        assert_eq!(tail, "EN");
        let (out, stop, tail) = run(&[], &["a", "b"]);
        assert_eq!(
            (out.concat(), stop, tail.as_str()),
            ("ab".to_owned(), false, "")
        );
    }

    #[test]
    fn earliest_of_several_and_multibyte() {
        let (out, stop, _) = run(&["world", "lo"], &["hello world"]);
        assert_eq!(out.concat(), "hel");
        assert!(stop);
        let (out, stop, _) = run(&["é!"], &["café", "!"]);
        assert_eq!(out.concat(), "caf");
        assert!(stop);
        let (out, _, tail) = run(&["éa"], &["xé"]);
        assert_eq!((out.concat().as_str(), tail.as_str()), ("x", "é"));
    }
}
