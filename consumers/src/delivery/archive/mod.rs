//! Archives, read and written in memory, with writers whose output is the
//! same bytes for the same input:
//!
//! - [`tar`] — tar reading (ustar, GNU, PAX) and a deterministic ustar
//!   writer (build contexts, image layers, package content);
//! - [`gzip`] — a deterministic gzip writer (ACR Tasks build contexts);
//! - [`zip`] — ZIP reading (stored and deflated) and a deterministic stored
//!   writer (NuGet packages).

pub mod gzip;
pub mod tar;
pub mod zip;
