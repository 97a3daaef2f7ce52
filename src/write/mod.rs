//! The write path: plan the statements, then insert through a pipeline.

mod dberror;
mod insert;
pub mod plan;
pub mod report;
pub mod sql;

pub use insert::insert_features;
pub use plan::BatchLimits;
