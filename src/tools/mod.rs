//! Whole-system tools built on the wiring: `bosun demo` ([`demo`]),
//! `bosun bench` ([`mod@bench`]) and `bosun infra render` ([`infra`]).

pub mod bench;
pub mod corpus;
pub mod demo;
pub mod infra;
