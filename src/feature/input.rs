//! The request body as borrowed slices of the input: no tree of the whole
//! document is ever built, so memory stays near the body's size, and each
//! feature's members are located in the same pass that checks the syntax.

use std::borrow::Cow;

use crate::geometry::GeometryIn;
use crate::json::{Read, Reader, SyntaxError};

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
    /// Given more than once (its later values are read for their syntax only).
    Repeated,
}

/// Read a whole body, handing each element of `features` to `on_feature`
/// (with its index) as soon as it is read, so that no list of all features
/// is ever held. A geometry is kept up to `max_positions` positions.
pub fn read_body<'a>(
    text: &'a str,
    max_positions: usize,
    on_feature: &mut dyn FnMut(usize, &FeatureIn<'a>),
) -> Result<Body<'a>, SyntaxError> {
    let mut r = Reader::new(text);
    let body = body(&mut r, max_positions, on_feature);
    body.map_err(|_| r.error())
}

fn body<'a>(
    r: &mut Reader<'a>,
    max_positions: usize,
    on_feature: &mut dyn FnMut(usize, &FeatureIn<'a>),
) -> Read<Body<'a>> {
    let mut body = Body {
        members: FeatureIn::default(),
        features: FeatureList::Absent,
    };
    if r.object()? {
        body.members.is_object = true;
        let mut first = true;
        while let Some(name) = r.member_named(&mut first, &BODY_MEMBERS)? {
            if name == FEATURES && body.features != FeatureList::Absent {
                r.skip()?;
                body.features = FeatureList::Repeated;
            } else if name == FEATURES {
                body.features = features(r, max_positions, on_feature)?;
            } else {
                body.members
                    .member(name, r, max_positions, &mut Vec::new())?;
            }
        }
    } else {
        r.skip()?;
    }
    r.end()?;
    Ok(body)
}

/// Read a body that must be a single Feature (its geometry kept up to
/// `max_positions` positions).
pub fn read_feature(text: &str, max_positions: usize) -> Result<FeatureIn<'_>, SyntaxError> {
    let mut r = Reader::new(text);
    let feature =
        FeatureIn::read(&mut r, max_positions, &mut Vec::new()).and_then(|f| r.end().map(|()| f));
    feature.map_err(|_| r.error())
}

fn features<'a>(
    r: &mut Reader<'a>,
    max_positions: usize,
    on_feature: &mut dyn FnMut(usize, &FeatureIn<'a>),
) -> Read<FeatureList> {
    if !r.array()? {
        r.skip()?;
        return Ok(FeatureList::NotArray);
    }
    let mut first = true;
    let mut i = 0;
    // One list of property members serves every feature in turn.
    let mut spare = Vec::new();
    while r.element(&mut first)? {
        let feature = FeatureIn::read(r, max_positions, &mut spare)?;
        on_feature(i, &feature);
        if let Some(Properties::Members(mut members)) = feature.properties {
            members.clear();
            spare = members;
        }
        i += 1;
    }
    Ok(FeatureList::Array)
}

/// A member of a body's top level, as the streamed reading of a
/// FeatureCollection meets it (see [`super::stream`]).
pub enum TopMember {
    /// `type`, and what it says.
    Type(Kind),
    /// `features`: the reader is at its value.
    Features,
    /// Any other member, read for its syntax.
    Other,
}

/// Read the next member of the body's top level (`None` after its closing
/// brace) as [`read_body`] reads it, keeping nothing that borrows the text.
pub fn top_member(
    r: &mut Reader<'_>,
    first: &mut bool,
    max_positions: usize,
) -> Read<Option<TopMember>> {
    let Some(name) = r.member_named(first, &BODY_MEMBERS)? else {
        return Ok(None);
    };
    if name == FEATURES {
        return Ok(Some(TopMember::Features));
    }
    let mut members = FeatureIn::default();
    members.member(name, r, max_positions, &mut Vec::new())?;
    Ok(Some(match members.kind {
        Some(kind) => TopMember::Type(kind),
        None => TopMember::Other,
    }))
}

/// Read the next element of a `features` array as [`read_body`] does.
pub fn feature_element<'a>(r: &mut Reader<'a>, max_positions: usize) -> Read<FeatureIn<'a>> {
    FeatureIn::read(r, max_positions, &mut Vec::new())
}

/// What the `type` member of a GeoJSON object says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `"Feature"`
    Feature,
    /// `"FeatureCollection"`
    FeatureCollection,
    /// Anything else.
    Other,
}

impl Kind {
    fn read(r: &mut Reader<'_>) -> Read<Self> {
        // Checked, not decoded: a string that is no text (a lone surrogate)
        // makes its object "not a Feature", not the body "not JSON".
        Ok(match r.raw()? {
            r#""Feature""# => Kind::Feature,
            r#""FeatureCollection""# => Kind::FeatureCollection,
            plain if !plain.contains('\\') => Kind::Other,
            escaped => match Reader::new(escaped).string().as_deref() {
                Ok("Feature") => Kind::Feature,
                Ok("FeatureCollection") => Kind::FeatureCollection,
                _ => Kind::Other,
            },
        })
    }
}

/// The members of a Feature that are read, in the order of
/// [`FeatureIn::member`] (GeoJSON's, then JSON-FG's), then a
/// FeatureCollection's `features`.
const BODY_MEMBERS: [&str; 10] = [
    "type",
    "geometry",
    "properties",
    "id",
    "place",
    "time",
    "featureType",
    "coordRefSys",
    "measures",
    "features",
];
const FEATURES: usize = 9;

/// The members of one Feature; each is present (`Some`, possibly JSON null) or absent.
#[derive(Default)]
pub struct FeatureIn<'a> {
    /// The value was a JSON object.
    pub is_object: bool,
    /// What `type` says.
    pub kind: Option<Kind>,
    /// `geometry`: read in the same pass as the feature.
    pub geometry: Option<GeometryIn<'a>>,
    /// `properties`: read in the same pass as the feature.
    pub properties: Option<Properties<'a>>,
    /// `id`, as JSON text (a string or number when valid).
    pub id: Option<&'a str>,
    /// JSON-FG's members, read only to be checked when the body is JSON-FG.
    pub fg: FgMembers<'a>,
}

/// The members JSON-FG adds to a Feature (and a FeatureCollection's root).
#[derive(Default)]
pub struct FgMembers<'a> {
    /// `place`: the geometry in `coordRefSys`.
    pub place: Option<GeometryIn<'a>>,
    /// `time`, as JSON text.
    pub time: Option<&'a str>,
    /// `featureType`, as JSON text.
    pub feature_type: Option<&'a str>,
    /// `coordRefSys`, as JSON text.
    pub coord_ref_sys: Option<&'a str>,
    /// `measures`, as JSON text.
    pub measures: Option<&'a str>,
}

impl<'a> FeatureIn<'a> {
    /// Read the next value as a Feature; anything else is kept as "not an
    /// object". Its property members go into `spare` (taken).
    fn read(r: &mut Reader<'a>, max_positions: usize, spare: &mut Members<'a>) -> Read<Self> {
        let mut f = FeatureIn::default();
        if !r.object()? {
            r.skip()?;
            return Ok(f);
        }
        f.is_object = true;
        let mut first = true;
        while let Some(name) = r.member_named(&mut first, &BODY_MEMBERS[..FEATURES])? {
            f.member(name, r, max_positions, spare)?;
        }
        Ok(f)
    }

    /// Read the value of member `name` (an index into [`BODY_MEMBERS`]) if
    /// it is one of a Feature's, else skip it.
    fn member(
        &mut self,
        name: usize,
        r: &mut Reader<'a>,
        max_positions: usize,
        spare: &mut Members<'a>,
    ) -> Read<()> {
        match name {
            0 => self.kind = Some(Kind::read(r)?),
            1 => self.geometry = Some(GeometryIn::read(r, max_positions)?),
            2 => self.properties = Some(Properties::read(r, spare)?),
            3 => self.id = Some(r.raw()?),
            4 => self.fg.place = Some(GeometryIn::read(r, max_positions)?),
            5 => self.fg.time = Some(r.raw()?),
            6 => self.fg.feature_type = Some(r.raw()?),
            7 => self.fg.coord_ref_sys = Some(r.raw()?),
            8 => self.fg.measures = Some(r.raw()?),
            _ => r.skip()?,
        }
        Ok(())
    }
}

/// A Feature's `properties` member.
pub enum Properties<'a> {
    /// JSON null.
    Null,
    /// An object: its members in body order, values as JSON text.
    Members(Members<'a>),
    /// Anything else.
    NotAnObject,
}

/// Property members: names and values as JSON text.
pub type Members<'a> = Vec<(Cow<'a, str>, &'a str)>;

impl<'a> Properties<'a> {
    fn read(r: &mut Reader<'a>, spare: &mut Members<'a>) -> Read<Self> {
        if r.null()? {
            return Ok(Properties::Null);
        }
        if !r.object()? {
            r.skip()?;
            return Ok(Properties::NotAnObject);
        }
        let mut members = std::mem::take(spare);
        let mut first = true;
        while let Some(name) = r.member(&mut first)? {
            members.push((name, r.raw()?));
        }
        Ok(Properties::Members(members))
    }
}
