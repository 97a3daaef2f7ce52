//! The request body as borrowed slices of the input: no tree of the whole
//! document is ever built, so memory stays near the body's size, and each
//! feature's members are located in the same pass that checks the syntax.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::geometry::GeometryIn;
use crate::json::Text;

/// The top level of a body: its own members (all of them when it is a
/// Feature) and what its `features` member was.
pub struct Body<'a> {
    /// The body's members, read as a Feature's.
    pub members: FeatureIn<'a>,
    /// The `features` member.
    pub features: FeatureList,
}

/// What the `features` member of a body was.
#[derive(Debug, PartialEq, Eq)]
pub enum FeatureList {
    /// Not there.
    Absent,
    /// An array; its elements went to the callback.
    Array,
    /// Something else.
    NotArray,
}

/// Reads a body, handing each element of `features` to `on_feature` as soon
/// as it is read, so that no list of all features is ever held.
pub struct BodySeed<'f, 'a> {
    /// Called with (index, feature) for each element of `features`.
    pub on_feature: &'f mut dyn FnMut(usize, FeatureIn<'a>),
}

impl<'de: 'a, 'a> DeserializeSeed<'de> for BodySeed<'_, 'a> {
    type Value = Body<'a>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Body<'a>, D::Error> {
        struct V<'f, 'a>(&'f mut dyn FnMut(usize, FeatureIn<'a>));
        impl<'de: 'a, 'a> Visitor<'de> for V<'_, 'a> {
            type Value = Body<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a GeoJSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body<'a>, A::Error> {
                let mut body = Body {
                    members: FeatureIn {
                        is_object: true,
                        ..FeatureIn::default()
                    },
                    features: FeatureList::Absent,
                };
                while let Some(Text(name)) = map.next_key::<Text<'a>>()? {
                    if name == "features" {
                        body.features = map.next_value_seed(FeaturesSeed(&mut *self.0))?;
                    } else {
                        body.members.member(&name, &mut map)?;
                    }
                }
                Ok(body)
            }
            arrays_are!(Body::not_an_object());
            other_values!(Body::not_an_object());
        }
        d.deserialize_any(V(self.on_feature))
    }
}

impl Body<'_> {
    fn not_an_object() -> Self {
        Body {
            members: FeatureIn::default(),
            features: FeatureList::Absent,
        }
    }
}

/// The `features` member: each element goes to the callback.
struct FeaturesSeed<'f, 'a>(&'f mut dyn FnMut(usize, FeatureIn<'a>));

impl<'de: 'a, 'a> DeserializeSeed<'de> for FeaturesSeed<'_, 'a> {
    type Value = FeatureList;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<FeatureList, D::Error> {
        struct V<'f, 'a>(&'f mut dyn FnMut(usize, FeatureIn<'a>));
        impl<'de: 'a, 'a> Visitor<'de> for V<'_, 'a> {
            type Value = FeatureList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of features")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FeatureList, A::Error> {
                let mut i = 0;
                while let Some(feature) = seq.next_element()? {
                    (self.0)(i, feature);
                    i += 1;
                }
                Ok(FeatureList::Array)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FeatureList, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(FeatureList::NotArray)
            }
            other_values!(FeatureList::NotArray);
        }
        d.deserialize_any(V(self.0))
    }
}

/// The members of one Feature; each is present (`Some`, possibly JSON null) or absent.
#[derive(Default)]
pub struct FeatureIn<'a> {
    /// The value was a JSON object.
    pub is_object: bool,
    /// `type`, unparsed.
    pub kind: Option<&'a RawValue>,
    /// `geometry`: read in the same pass as the feature.
    pub geometry: Option<GeometryIn<'a>>,
    /// `properties`: read in the same pass as the feature.
    pub properties: Option<Properties<'a>>,
    /// `id`: a string or number.
    pub id: Option<&'a RawValue>,
}

impl<'a> FeatureIn<'a> {
    /// Read the value of member `name` if it is one of a Feature's, else skip it.
    fn member<'de: 'a, A: MapAccess<'de>>(
        &mut self,
        name: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        let slot = match name {
            "type" => &mut self.kind,
            "properties" => {
                self.properties = Some(map.next_value()?);
                return Ok(());
            }
            "geometry" => {
                self.geometry = Some(map.next_value()?);
                return Ok(());
            }
            "id" => &mut self.id,
            _ => return map.next_value::<IgnoredAny>().map(drop),
        };
        *slot = Some(map.next_value()?);
        Ok(())
    }
}

/// Whether a raw value is the JSON string `want`.
pub fn is_string(raw: &RawValue, want: &str) -> bool {
    let text = raw.get();
    (text.len() == want.len() + 2 && text[1..text.len() - 1] == *want)
        || serde_json::from_str::<Cow<'_, str>>(text).is_ok_and(|s| s == want)
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
                while let Some(Text(name)) = map.next_key::<Text<'a>>()? {
                    f.member(&name, &mut map)?;
                }
                Ok(f)
            }
            arrays_are!(FeatureIn::default());
            other_values!(FeatureIn::default());
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A Feature's `properties` member.
pub enum Properties<'a> {
    /// JSON null.
    Null,
    /// An object: its members in body order, values unparsed.
    Members(Vec<(Cow<'a, str>, &'a RawValue)>),
    /// Anything else.
    NotAnObject,
}

impl<'de: 'a, 'a> Deserialize<'de> for Properties<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Properties<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object or null")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((Text(name), value)) = map.next_entry::<Text<'a>, &'a RawValue>()? {
                    members.push((name, value));
                }
                Ok(Properties::Members(members))
            }
            arrays_are!(Properties::NotAnObject);
            other_values!(Properties::NotAnObject, null => Properties::Null);
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}
