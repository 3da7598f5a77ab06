//! Whole-system tools built on the wiring: `bosun demo` ([`demo`]) and
//! `bosun bench` ([`bench`]).

pub mod bench;
pub mod demo;
