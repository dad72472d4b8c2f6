//! Python bindings (work in progress).
