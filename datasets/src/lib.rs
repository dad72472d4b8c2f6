//! datasets (work in progress).
