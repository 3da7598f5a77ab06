//! placeholder until the helper lands
