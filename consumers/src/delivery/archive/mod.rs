//! Archives, read and written in memory, with writers whose output is the
//! same bytes for the same input:
//!
//! - [`tar`] — tar reading (ustar, GNU, PAX) and a deterministic ustar
//!   writer (build contexts, image layers, package content), on the `tar`
//!   crate;
//! - [`gzip`] — a deterministic gzip writer (ACR Tasks build contexts), on
//!   `flate2`;
//! - [`zip`] — ZIP reading (stored and deflated) on the `zip` crate, and a
//!   deterministic stored writer (NuGet packages) whose bytes are pinned.
//!
//! The readers take untrusted input (build artifacts): paths that leave the
//! archive, cut-short data and oversized entries are refused.

pub mod gzip;
pub mod tar;
pub mod zip;
