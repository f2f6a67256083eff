//! Ids as types: a run's id, a chat's id as its client names it, and the scope a chat lives in
//! for its owner. Each is its own type, so a function that takes a run and a chat cannot be
//! handed the two swapped.
//!
//! Each id is shared text (`Arc<str>`): cloned into frames, keys and tasks without copying. It
//! reads as `&str` (`Deref`, `Display`), so encoders and key builders take it as text, but no
//! `&str` becomes an id by accident: an id is made by [`From`] at the one place that knows what
//! the text is (a parsed request, a generated run id, a record read back from the journal).

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.into())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(s.into())
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                *self.0 == **other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == &*other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == &*other.0
            }
        }
    };
}

id_type! {
    /// A run's id: tether's own (a UUID it generates, or one the client chose), or an alias the
    /// backend gave the run (found through the registry's id index like tether's own).
    RunId
}

id_type! {
    /// A chat's id as its client names it (1 to 256 bytes, no control characters; checked where
    /// a request is parsed).
    ChatId
}

id_type! {
    /// The registry key of a chat for its owner: the owner's hash and the chat id (the chat id
    /// alone when every caller is the same owner). Two owners' chats of one id never share a
    /// scope. Made by `state::auth::Auth::scope`.
    Scope
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn an_id_reads_as_its_text_and_is_found_by_it() {
        let id = RunId::from("run-1");
        assert_eq!(id, "run-1");
        assert_eq!(id.to_string(), "run-1");
        assert_eq!(format!("{id:?}"), "\"run-1\"");
        let mut m = HashMap::new();
        m.insert(id.clone(), 1);
        assert_eq!(m.get("run-1"), Some(&1));
        assert_eq!(ChatId::from(String::from("c")).len(), 1);
    }
}
