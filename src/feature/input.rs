//! The request body as borrowed slices of the input: no tree of the whole
//! document is ever built, so memory stays near the body's size, and each
//! feature's members are located in the same pass that checks the syntax.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The members of the body that tell a Feature from a FeatureCollection.
#[derive(Deserialize)]
pub struct Envelope<'a> {
    /// `type`, unparsed.
    #[serde(rename = "type", default, borrow)]
    pub kind: Option<&'a RawValue>,
    /// `features`, read as features when it is an array.
    #[serde(default, borrow)]
    pub features: Option<Features<'a>>,
}

/// The `features` member: an array of (would-be) features, or something else.
pub enum Features<'a> {
    /// An array.
    List(Vec<FeatureIn<'a>>),
    /// Not an array.
    NotArray,
}

/// The members of one Feature; each is present (`Some`, possibly JSON null) or absent.
#[derive(Default)]
pub struct FeatureIn<'a> {
    /// The value was a JSON object.
    pub is_object: bool,
    /// `type`, unparsed.
    pub kind: Option<&'a RawValue>,
    /// `geometry`: an object or null.
    pub geometry: Option<&'a RawValue>,
    /// `properties`: an object or null.
    pub properties: Option<&'a RawValue>,
    /// `id`: a string or number.
    pub id: Option<&'a RawValue>,
}

/// Whether a raw value is the JSON string `want`.
pub fn is_string(raw: &RawValue, want: &str) -> bool {
    let text = raw.get();
    (text.len() == want.len() + 2 && text[1..text.len() - 1] == *want)
        || serde_json::from_str::<Cow<'_, str>>(text).is_ok_and(|s| s == want)
}

/// A member name, borrowed from the body unless it contains escapes.
#[derive(Deserialize)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

/// Implements the `visit_*` methods for non-container JSON values by returning `$other`.
macro_rules! other_values {
    ($other:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($other)
        }
    };
}

impl<'de: 'a, 'a> Deserialize<'de> for Features<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Features<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of features")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut features = Vec::with_capacity(seq.size_hint().unwrap_or(16));
                while let Some(f) = seq.next_element()? {
                    features.push(f);
                }
                Ok(Features::List(features))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Features::NotArray)
            }
            other_values!(Features::NotArray);
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for FeatureIn<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = FeatureIn<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a feature")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut f = FeatureIn {
                    is_object: true,
                    ..FeatureIn::default()
                };
                while let Some(Key(name)) = map.next_key::<Key<'a>>()? {
                    let slot = match name.as_ref() {
                        "type" => &mut f.kind,
                        "geometry" => &mut f.geometry,
                        "properties" => &mut f.properties,
                        "id" => &mut f.id,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value()?);
                }
                Ok(f)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FeatureIn::default())
            }
            other_values!(FeatureIn::default());
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A Feature's properties in body order, values unparsed.
pub struct Properties<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Properties<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Properties<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((Key(name), value)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    members.push((name, value));
                }
                Ok(Properties(members))
            }
        }
        d.deserialize_map(Members)
    }
}
