//! Whole-system tools built on the wiring: `bosun demo` ([`demo`]) and
//! `bosun bench` ([`mod@bench`]).

pub mod bench;
pub mod demo;
