//! Hiding a secret in what a cloud answers: an error's words may repeat a token, or part of it.

use std::collections::HashSet;

/// The shortest run of a secret [`hide_secret`] hides: shorter runs are as likely to be words.
pub const SHORTEST_SECRET_RUN: usize = 8;

/// What [`hide_secret`] puts in place of a run of the secret.
pub const HIDDEN: &str = "***";

/// `text` with every run of at least [`SHORTEST_SECRET_RUN`] bytes that is also part of `secret`
/// replaced by [`HIDDEN`] (a secret shorter than that, wherever it stands whole): an answer that
/// repeats a token, or a part of it (Hetzner's rate limit names the first half of the token it
/// counts), says no more of it than that it was there. An empty secret hides nothing.
///
/// ```
/// use orca_machines::kit::hide_secret;
/// let token = "6MWq3U8cixMhwHorZd68v8ILzIZyJb4NqR5s";
/// let said = "limit reached for token '6MWq3U8cixMhwHorZd68...'";
/// assert_eq!(hide_secret(said, token), "limit reached for token '***...'");
/// ```
pub fn hide_secret(text: &str, secret: &str) -> String {
    let (t, s) = (text.as_bytes(), secret.as_bytes());
    if s.is_empty() || t.is_empty() {
        return text.to_string();
    }
    let run = SHORTEST_SECRET_RUN.min(s.len());
    let starts: HashSet<&[u8]> = s.windows(run).collect();
    let mut out = Vec::with_capacity(t.len());
    let mut i = 0;
    while i < t.len() {
        if t.len() - i >= run && starts.contains(&t[i..i + run]) {
            // The longest run from here that still stands in the secret.
            let mut end = i + run;
            while end < t.len() && within(s, &t[i..=end]) {
                end += 1;
            }
            out.extend_from_slice(HIDDEN.as_bytes());
            i = end;
        } else {
            out.push(t[i]);
            i += 1;
        }
    }
    // A run of a secret that is not ASCII may have started or ended inside a character of `text`.
    String::from_utf8_lossy(&out).into_owned()
}

fn within(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "6MWq3U8cixMhwHorZd68v8ILzIZyJb4NqR5sTt0aPl9QwErTyUiOpAsDfGhJkLzX";

    #[test]
    fn a_whole_token_a_half_and_a_middle_run_are_hidden() {
        let said = format!(
            "token '{TOKEN}' and '{}...' and x{}y",
            &TOKEN[..32],
            &TOKEN[20..40]
        );
        assert_eq!(
            hide_secret(&said, TOKEN),
            "token '***' and '***...' and x***y"
        );
    }

    #[test]
    fn short_runs_words_and_an_empty_secret_are_left_as_they_are() {
        let said = format!("limit of requests reached ({})", &TOKEN[..7]);
        assert_eq!(hide_secret(&said, TOKEN), said);
        assert_eq!(hide_secret("anything", ""), "anything");
        assert_eq!(hide_secret("", TOKEN), "");
        // A secret shorter than the run is hidden where it stands whole.
        assert_eq!(hide_secret("pw=abc; abd", "abc"), "pw=***; abd");
    }

    #[test]
    fn text_that_is_not_ascii_around_a_run_stays_readable() {
        let said = format!("é{}ü", &TOKEN[3..30]);
        assert_eq!(hide_secret(&said, TOKEN), "é***ü");
    }
}
