//! Enums whose every variant is one word: of the API, of the configuration file or of the log.
//! `words!` declares one with its words written once, beside its variants.

/// An enum whose every variant is one word.
pub trait Word: Copy + PartialEq + 'static {
    /// Every variant, in the order a message lists their words.
    const ALL: &'static [Self];

    /// The variant's word.
    fn word(self) -> &'static str;
}

/// The words of `T` as a message lists them: `static, auto or any`.
pub fn either<T: Word>() -> String {
    let words: Vec<&str> = T::ALL.iter().map(|v| v.word()).collect();
    listed(&words)
}

/// Words as a message lists them: `static, auto or any`.
pub fn listed(words: &[&str]) -> String {
    match words.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => words.concat(),
    }
}

/// Declares an enum whose variants are written `Variant = "word",`: with `as_str` (the word), the
/// [`Word`] impl and a `Display` that pads the word (so that tables align). An enum that is also
/// serialized names the same words to serde (`rename_all`); a test compares the two.
macro_rules! words {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $word:literal, )+
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// The word.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $word, )+
                }
            }
        }

        impl $crate::words::Word for $name {
            const ALL: &'static [Self] = &[$( $name::$variant, )+];

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
    use crate::backend::Effect;
    use crate::config::{FirewallMode, Role};
    use crate::model::{Reason, Status};

    #[test]
    fn words_are_listed_and_serialized_as_declared() {
        assert_eq!(either::<FirewallMode>(), "static, auto or any");
        assert_eq!(either::<Role>(), "admin or service");
        assert_eq!(format!("[{:>8}]", Role::Admin), "[   admin]");
        fn serialized<T: Word + serde::Serialize>() {
            for v in T::ALL {
                assert_eq!(serde_json::to_value(v).unwrap(), v.word());
            }
        }
        serialized::<Status>();
        serialized::<Reason>();
        serialized::<Effect>();
    }
}
