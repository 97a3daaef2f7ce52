//! Integration tests against a real PostgreSQL + PostGIS (see `make test`).

mod auth;
mod catalog;
mod clients;
mod conflicts;
mod copy;
mod crs;
mod defaults;
mod failures;
mod faults;
mod geometries;
mod hostile;
mod idempotency;
mod ogc_read;
mod ogc_write;
mod openapi;
mod poolers;
mod push;
mod round_trips;
mod sessions;
mod settings;
mod soak;
mod support;
mod telemetry;
mod types;
mod validation;
mod write_path;
