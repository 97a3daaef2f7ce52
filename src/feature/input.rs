//! The request body as borrowed slices of the input: no tree of the whole
//! document is ever built, so memory stays near the body's size, and each
//! feature's members are located in the same pass that checks the syntax.

use std::borrow::Cow;

use crate::geometry::GeometryIn;
use crate::json::{Read, Reader};

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

/// Read a whole body, handing each element of `features` to `on_feature`
/// (with its index) as soon as it is read, so that no list of all features
/// is ever held.
pub fn read_body<'a>(
    text: &'a str,
    on_feature: &mut dyn FnMut(usize, FeatureIn<'a>),
) -> Read<Body<'a>> {
    let mut r = Reader::new(text);
    let mut body = Body {
        members: FeatureIn::default(),
        features: FeatureList::Absent,
    };
    if r.object()? {
        body.members.is_object = true;
        let mut first = true;
        while let Some(name) = r.member(&mut first)? {
            if name == "features" {
                body.features = features(&mut r, on_feature)?;
            } else {
                body.members.member(&name, &mut r)?;
            }
        }
    } else {
        r.skip()?;
    }
    r.end()?;
    Ok(body)
}

/// Read a body that must be a single Feature.
pub fn read_feature(text: &str) -> Read<FeatureIn<'_>> {
    let mut r = Reader::new(text);
    let feature = FeatureIn::read(&mut r)?;
    r.end()?;
    Ok(feature)
}

fn features<'a>(
    r: &mut Reader<'a>,
    on_feature: &mut dyn FnMut(usize, FeatureIn<'a>),
) -> Read<FeatureList> {
    if !r.array()? {
        r.skip()?;
        return Ok(FeatureList::NotArray);
    }
    let mut first = true;
    let mut i = 0;
    while r.element(&mut first)? {
        on_feature(i, FeatureIn::read(r)?);
        i += 1;
    }
    Ok(FeatureList::Array)
}

/// The members of one Feature; each is present (`Some`, possibly JSON null) or absent.
#[derive(Default)]
pub struct FeatureIn<'a> {
    /// The value was a JSON object.
    pub is_object: bool,
    /// `type`, as JSON text.
    pub kind: Option<&'a str>,
    /// `geometry`: read in the same pass as the feature.
    pub geometry: Option<GeometryIn<'a>>,
    /// `properties`: read in the same pass as the feature.
    pub properties: Option<Properties<'a>>,
    /// `id`, as JSON text (a string or number when valid).
    pub id: Option<&'a str>,
}

impl<'a> FeatureIn<'a> {
    /// Read the next value as a Feature; anything else is kept as "not an object".
    fn read(r: &mut Reader<'a>) -> Read<Self> {
        let mut f = FeatureIn::default();
        if !r.object()? {
            r.skip()?;
            return Ok(f);
        }
        f.is_object = true;
        let mut first = true;
        while let Some(name) = r.member(&mut first)? {
            f.member(&name, r)?;
        }
        Ok(f)
    }

    /// Read the value of member `name` if it is one of a Feature's, else skip it.
    fn member(&mut self, name: &str, r: &mut Reader<'a>) -> Read<()> {
        match name {
            "type" => self.kind = Some(r.raw()?),
            "properties" => self.properties = Some(Properties::read(r)?),
            "geometry" => self.geometry = Some(GeometryIn::read(r)?),
            "id" => self.id = Some(r.raw()?),
            _ => r.skip()?,
        }
        Ok(())
    }
}

/// Whether the JSON text `raw` is the string `want`.
pub fn is_string(raw: &str, want: &str) -> bool {
    (raw.len() == want.len() + 2 && raw[1..raw.len() - 1] == *want)
        || (raw.starts_with('"') && Reader::new(raw).string().is_ok_and(|s| s == want))
}

/// A Feature's `properties` member.
pub enum Properties<'a> {
    /// JSON null.
    Null,
    /// An object: its members in body order, values as JSON text.
    Members(Vec<(Cow<'a, str>, &'a str)>),
    /// Anything else.
    NotAnObject,
}

impl<'a> Properties<'a> {
    fn read(r: &mut Reader<'a>) -> Read<Self> {
        if r.null()? {
            return Ok(Properties::Null);
        }
        if !r.object()? {
            r.skip()?;
            return Ok(Properties::NotAnObject);
        }
        let mut members = Vec::with_capacity(8);
        let mut first = true;
        while let Some(name) = r.member(&mut first)? {
            members.push((name, r.raw()?));
        }
        Ok(Properties::Members(members))
    }
}
