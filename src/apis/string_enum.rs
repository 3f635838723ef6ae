//! String-valued enums, the way Clusternet's Go API declares them (`type X string` plus constants).
//!
//! Two flavours, because the CRDs treat them differently:
//!
//! - **closed**: the CRD carries an `enum:` list, so the apiserver rejects anything else. The Rust
//!   enum has exactly those variants and its schema lists them.
//! - **open**: Go defines constants but the CRD accepts any string (e.g. `clusterType`,
//!   `ClusterRegistrationRequest.status.result`, Helm release phases). The Rust enum keeps an
//!   `Other(String)` variant so that one unexpected value written by another component can never make
//!   a whole list or watch fail to deserialize; its schema is a plain string.
//!
//! Serde and schemars derives are not used for these: serde would accept/emit Rust names, and
//! schemars would emit `oneOf` for documented variants. Writing the four impls by macro keeps the
//! wire strings in one place.

use thiserror::Error;

/// A string that is not one of a closed enum's values.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{value:?} is not a valid {type_name} (expected one of {expected:?})")]
pub struct UnknownEnumValue {
    /// Rust name of the enum.
    pub type_name: &'static str,
    /// The rejected input.
    pub value: String,
    /// The accepted wire strings.
    pub expected: &'static [&'static str],
}

/// Declares a closed (`enum:`-validated) string enum. See the module docs.
macro_rules! closed_string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every value the CRD accepts, in upstream declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];
            /// The exact wire strings, in the same order as [`Self::ALL`].
            pub const VALUES: &'static [&'static str] = &[$($value),+];

            /// The exact wire string.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $value),+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::apis::string_enum::UnknownEnumValue;

            fn from_str(s: &str) -> ::std::result::Result<Self, Self::Err> {
                match s {
                    $($value => Ok(Self::$variant),)+
                    _ => Err($crate::apis::string_enum::UnknownEnumValue {
                        type_name: stringify!($name),
                        value: s.to_owned(),
                        expected: Self::VALUES,
                    }),
                }
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> ::std::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> ::std::result::Result<Self, D::Error> {
                let s = <::std::string::String as ::serde::Deserialize>::deserialize(deserializer)?;
                s.parse()
                    .map_err(|_| <D::Error as ::serde::de::Error>::unknown_variant(&s, Self::VALUES))
            }
        }

        impl ::schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                ::schemars::json_schema!({
                    "type": "string",
                    "enum": [$($value),+],
                })
            }
        }
    };
}

/// Declares an open string enum (known values plus `Other(String)`). See the module docs.
macro_rules! open_string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value Clusternet does not define, kept verbatim.
            Other(::std::string::String),
        }

        impl $name {
            /// The values Clusternet itself writes, in upstream declaration order.
            pub const KNOWN: &'static [&'static str] = &[$($value),+];

            /// The exact wire string.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $value,)+
                    Self::Other(s) => s.as_str(),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::convert::From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $($value => Self::$variant,)+
                    other => Self::Other(other.to_owned()),
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = ::std::convert::Infallible;

            fn from_str(s: &str) -> ::std::result::Result<Self, Self::Err> {
                Ok(Self::from(s))
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> ::std::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> ::std::result::Result<Self, D::Error> {
                let s = <::std::string::String as ::serde::Deserialize>::deserialize(deserializer)?;
                Ok(Self::from(s.as_str()))
            }
        }

        impl ::schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                ::schemars::json_schema!({ "type": "string" })
            }
        }
    };
}

pub(crate) use closed_string_enum;
pub(crate) use open_string_enum;

#[cfg(test)]
mod tests {
    closed_string_enum! {
        /// Test enum.
        enum Closed {
            /// A.
            A = "Alpha",
            B = "Beta",
        }
    }

    open_string_enum! {
        enum Open {
            A = "Alpha",
        }
    }

    #[test]
    fn closed_round_trips_and_rejects_unknown() {
        assert_eq!(
            serde_json::to_string(&Closed::A).ok().as_deref(),
            Some("\"Alpha\"")
        );
        assert_eq!(
            serde_json::from_str::<Closed>("\"Beta\"").ok(),
            Some(Closed::B)
        );
        let err = serde_json::from_str::<Closed>("\"Gamma\"")
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("Gamma")));
        assert_eq!(Closed::VALUES, &["Alpha", "Beta"]);
        assert_eq!(Closed::ALL, &[Closed::A, Closed::B]);
        let schema = schemars::schema_for!(Closed);
        assert_eq!(
            schema.get("enum"),
            Some(&serde_json::json!(["Alpha", "Beta"]))
        );
    }

    #[test]
    fn open_keeps_unknown_values() {
        assert_eq!(
            serde_json::from_str::<Open>("\"Alpha\"").ok(),
            Some(Open::A)
        );
        assert_eq!(Open::KNOWN, &["Alpha"]);
        let other = serde_json::from_str::<Open>("\"Zeta\"").ok();
        assert_eq!(other, Some(Open::Other("Zeta".into())));
        assert_eq!(
            other.map(|o| serde_json::to_string(&o).ok()),
            Some(Some("\"Zeta\"".to_owned()))
        );
    }
}
