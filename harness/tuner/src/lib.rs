//! The tuning engine of `tunedblas`: one pipeline, for every library, from a recorded shape
//! to a row of the profile of exactly the library build that was loaded.

pub mod curate;
pub mod error;
pub mod progress;
pub mod rest;
pub mod say;
pub mod store;
