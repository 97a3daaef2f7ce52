//! Web pages of the read resources (OGC API - Features Part 1, HTML): the
//! format a request asks for, the pages, and their script and style files.
//! The map and the editor run in the browser (assets/html/featurepipe.js,
//! on OpenLayers) and use the API like any other client.

pub mod assets;
pub mod format;
pub mod page;
pub mod pages;

pub use format::Format;
