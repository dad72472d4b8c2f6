//! loaderx (work in progress).
