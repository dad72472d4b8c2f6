//! Datasets of parts: many containers, written by any process on any host in any order, published
//! together by versioned manifests.
//!
//! A dataset is a root (a local directory or an object-store URL) holding
//!
//! * `parts/<part>/`: each part a complete zrecord container, written and published by its own
//!   writer (`DenseWriter::create(part_path(root, name, None), ...)`); for a dataset of several
//!   aligned columns, `parts/<part>/<column>/`, one container per column with equal record counts;
//! * `versions/<n>.zrv`: version `n`'s manifest ([`VersionManifest`]): the parts in global
//!   record order, each with its record count and the CRC32C of each column's container manifest,
//!   and the schema every part shares.
//!
//! [`commit`] and [`append`] publish version `n + 1` by creating its manifest only if no version
//! `n + 1` exists (locally a link that fails on an existing name; on object storage a conditional
//! PUT, `If-None-Match: *`): of two committers racing for one version exactly one wins, and the
//! other gets [`Error::Conflict`] naming the version, to re-read and retry. Readers open the
//! newest version or a pinned one (`Store::open_dataset`); a part that no version lists is
//! invisible and [`gc`] removes it. Record `i` of the dataset is record `i - start(p)` of the part
//! `p` whose range holds it (prefix sums over the parts' record counts).

mod commit;
mod gc;
mod versions;

pub use crate::format::{ColumnSchema, PartColumn, PartEntry, VersionManifest};
pub use commit::{PartReceipt, append, append_described, commit, commit_described, describe_part};
pub use gc::{DatasetGc, gc};
pub(crate) use versions::read_version_counted;
pub use versions::{PARTS_DIR, VERSIONS_DIR, new_part_name, part_path, read_version, versions};
