//! Enums whose every variant is one word: of an API, a configuration file, a log or a metric.
//! [`words!`](crate::words!) declares one with each word written once, beside its variant, so the
//! list of every variant, the word of each and the parse of a word cannot drift apart.
//!
//! ```
//! orca_machines::words! {
//!     /// How a pool treats machines it does not know.
//!     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
//!     pub enum Unknown {
//!         /// Leave them.
//!         Keep = "keep",
//!         /// Delete them.
//!         Delete = "delete",
//!     }
//! }
//! use orca_machines::words::{either, Word};
//! assert_eq!(Unknown::ALL, [Unknown::Keep, Unknown::Delete]);
//! assert_eq!(Unknown::from_word("delete"), Some(Unknown::Delete));
//! assert_eq!(format!("[{:>6}]", Unknown::Keep), "[  keep]");
//! assert_eq!(either::<Unknown>(), "keep or delete");
//! ```

/// An enum whose every variant is one word.
pub trait Word: Copy + PartialEq + 'static {
    /// Every variant, in the order a message lists their words.
    const WORDS: &'static [Self];

    /// The variant's word.
    fn word(self) -> &'static str;

    /// The variant whose word is `word`, if any.
    fn from_word(word: &str) -> Option<Self> {
        Self::WORDS.iter().copied().find(|v| v.word() == word)
    }
}

/// The words of `T` as a message lists them: `static, auto or any`.
pub fn either<T: Word>() -> String {
    let words: Vec<&str> = T::WORDS.iter().map(|v| v.word()).collect();
    listed(&words)
}

/// Words as a message lists them: `static, auto or any`.
pub fn listed(words: &[&str]) -> String {
    match words.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => words.concat(),
    }
}

/// Declares an enum whose variants are written `Variant = "word",`: with `ALL` (every variant, in
/// order), `as_str` (the word), `from_word` (its parse), the [`Word`](crate::words::Word) impl and
/// a `Display` that pads the word (so that tables align; a width or precision applies to it). An
/// enum that is also serialized should name the same words to serde (`rename_all`), and its crate
/// should test that the two agree.
#[macro_export]
macro_rules! words {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $word:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in the order of the enum.
            pub const ALL: [Self; [$($word),+].len()] = [$( $name::$variant, )+];

            /// The word.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $word, )+
                }
            }

            /// The variant whose word is `word`, if any.
            pub fn from_word(word: &str) -> Option<Self> {
                match word {
                    $( $word => Some($name::$variant), )+
                    _ => None,
                }
            }
        }

        impl $crate::words::Word for $name {
            const WORDS: &'static [Self] = &$name::ALL;

            fn word(self) -> &'static str {
                self.as_str()
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.pad(self.as_str())
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ErrorKind, Status};

    #[test]
    fn the_librarys_words_are_its_serde_names() {
        fn serialized<T: Word + serde::Serialize + serde::de::DeserializeOwned>() {
            for v in T::WORDS {
                assert_eq!(serde_json::to_value(v).unwrap(), v.word());
                let back: T = serde_json::from_value(v.word().into()).unwrap();
                assert!(back == *v && T::from_word(v.word()) == Some(*v));
            }
        }
        serialized::<Status>();
        serialized::<ErrorKind>();
        assert_eq!(Status::from_word("Running"), None);
        assert_eq!(listed(&["a"]), "a");
        assert_eq!(listed(&[]), "");
        assert_eq!(listed(&["a", "b", "c"]), "a, b or c");
    }
}
