//! Integration tests against a real PostgreSQL + PostGIS (see `make test`).

mod catalog;
mod copy;
mod defaults;
mod failures;
mod geometries;
mod openapi;
mod round_trips;
mod support;
mod types;
mod validation;
mod write_path;
