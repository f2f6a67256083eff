//! Bounded words: the `label_enum!` macro declares an enum whose values are fixed strings (JSON
//! fields, metric labels), with every value listed so a metric family exports each at zero.

/// A bounded set of label values: one metric family's label, one JSON field's words.
pub trait Label: Copy + 'static {
    /// Every value, exported at zero from the start.
    fn all() -> &'static [Self];
    /// The label value.
    fn as_str(self) -> &'static str;
}

/// Declares a label enum: the variants, their label strings, `ALL` and `as_str()`.
#[macro_export]
macro_rules! label_enum {
    ($(#[$m:meta])* pub enum $name:ident { $($(#[$vm:meta])* $var:ident => $s:literal,)+ }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $var,)+ }

        impl $name {
            /// Every value, in label order.
            pub const ALL: &'static [$name] = &[$($name::$var,)+];

            /// The value as it appears in JSON and in metric labels.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$var => $s,)+ }
            }
        }

        impl $crate::vocab::label::Label for $name {
            fn all() -> &'static [Self] {
                Self::ALL
            }
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
        }
    };
}
pub use crate::label_enum;
