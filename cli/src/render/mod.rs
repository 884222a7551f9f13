//! How reports read: text for people, JSON for tools. The numbers come from the core and
//! the work modules; these modules only lay them out.

pub mod coverage;
pub mod misses;
pub mod report;
