//! Thin HTTP handlers, one file per resource.

pub mod collections;
pub mod health;
pub mod items;
pub mod openapi;
