//! The table rows as a type: [`Backend`] names every row once (its name, whether it is a
//! reference), and [`UnknownBackend`] is what parsing a name that is no row gives. A leaf: the
//! adapters and the interface import it; which adapter serves a row is `Backend::competitor`, at
//! the crate root, which imports them all.

use std::fmt;
use std::str::FromStr;

/// Declares [`Backend`] from one list of its rows (doc, variant, name): the enum, [`Backend::ALL`]
/// in the list's order and [`Backend::name`].
macro_rules! backends {
    ($($(#[doc = $doc:literal])* $row:ident = $name:literal,)*) => {
        /// One row of the store tables.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Backend {
            $($(#[doc = $doc])* $row,)*
        }

        impl Backend {
            /// Every row, in table order; the last two are references, not peers
            /// ([`Backend::is_reference`]).
            pub const ALL: [Backend; [$($name),*].len()] = [$(Backend::$row),*];

            /// The row name the tables, results and command lines use, e.g. `"hdf5-gzip"`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Backend::$row => $name,)*
                }
            }
        }
    };
}

backends! {
    /// zrecord, raw records (every read verified).
    ZrecordRaw = "zrecord-raw",
    /// One plain `.npy` file, gathered out of a read-only mapping.
    NpyMmapRaw = "npy-mmap-raw",
    /// libhdf5, contiguous dataset.
    Hdf5Raw = "hdf5-raw",
    /// LMDB through heed, one key per record.
    LmdbRaw = "lmdb-raw",
    /// Arrow IPC file, uncompressed.
    ArrowIpcRaw = "arrow-ipc-raw",
    /// Parquet, uncompressed, page index on.
    ParquetRaw = "parquet-raw",
    /// Google's ArrayRecord (Python helper), uncompressed.
    ArrayRecordRaw = "arrayrecord-raw",
    /// zrecord, zstd per record.
    ZrecordZstd = "zrecord-zstd",
    /// zrecord, zstd with a shared dictionary.
    ZrecordZstdict = "zrecord-zstdict",
    /// libhdf5, chunked with gzip.
    Hdf5Gzip = "hdf5-gzip",
    /// Arrow IPC file, zstd buffers.
    ArrowIpcZstd = "arrow-ipc-zstd",
    /// Parquet, zstd pages.
    ParquetZstd = "parquet-zstd",
    /// ArrayRecord, zstd.
    ArrayRecordZstd = "arrayrecord-zstd",
    /// Reference (Dense only): `npy-mmap-raw`'s gather plus a CRC32C pass over every record.
    NpyCrcLimit = "npy-crc-limit",
    /// Reference: the same records copied out of memory.
    MemcpyLimit = "memcpy-limit",
}

impl Backend {
    /// `self`, or when `compressed` its compressed twin (a raw backend of a peer that has one:
    /// `hdf5-raw` gives `hdf5-gzip`, `arrow-ipc-raw` `arrow-ipc-zstd`, ...).
    pub const fn compressed_if(self, compressed: bool) -> Backend {
        match (compressed, self) {
            (true, Backend::Hdf5Raw) => Backend::Hdf5Gzip,
            (true, Backend::ArrowIpcRaw) => Backend::ArrowIpcZstd,
            (true, Backend::ParquetRaw) => Backend::ParquetZstd,
            (true, Backend::ArrayRecordRaw) => Backend::ArrayRecordZstd,
            (_, other) => other,
        }
    }

    /// Whether the row is a reference rather than a peer: `npy-crc-limit` (Dense tables:
    /// npy-mmap-raw's gather plus a CRC32C pass over every record, the verified-copy limit) and
    /// `memcpy-limit` (the same records copied from memory). Tables show them, but never as the
    /// best row, and no rule compares zrecord with them as with a peer.
    pub const fn is_reference(self) -> bool {
        matches!(self, Backend::NpyCrcLimit | Backend::MemcpyLimit)
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no row of [`Backend::ALL`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownBackend {
    pub name: String,
}

impl fmt::Display for UnknownBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = Backend::ALL.map(Backend::name).join(", ");
        write!(
            f,
            "unknown backend {:?}; expected one of {names}",
            self.name
        )
    }
}

impl std::error::Error for UnknownBackend {}

impl FromStr for Backend {
    type Err = UnknownBackend;

    fn from_str(name: &str) -> Result<Backend, UnknownBackend> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == name)
            .ok_or_else(|| UnknownBackend {
                name: name.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_names_say_what_was_expected() {
        for b in Backend::ALL {
            assert_eq!(b.name().parse::<Backend>(), Ok(b));
        }
        let e = "nope".parse::<Backend>().unwrap_err();
        assert_eq!(e.name, "nope");
        let text = e.to_string();
        assert!(text.starts_with("unknown backend \"nope\"; expected one of zrecord-raw, "));
        assert!(text.ends_with("npy-crc-limit, memcpy-limit"), "{text}");
    }

    #[test]
    fn a_compressed_twin_shares_the_raw_name_up_to_the_codec() {
        for b in Backend::ALL {
            assert_eq!(b.compressed_if(false), b);
            let twin = b.compressed_if(true);
            if twin != b {
                let (raw, packed) = (b.name(), twin.name());
                assert!(raw.ends_with("-raw"), "{raw}");
                assert_eq!(
                    packed.rsplit_once('-').map(|p| p.0),
                    raw.strip_suffix("-raw")
                );
                assert_eq!(twin.compressed_if(true), twin);
            }
        }
        assert_eq!(Backend::ZrecordRaw.compressed_if(true), Backend::ZrecordRaw);
        assert_eq!(Backend::LmdbRaw.compressed_if(true), Backend::LmdbRaw);
    }
}
