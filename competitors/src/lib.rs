//! competitors (work in progress).
