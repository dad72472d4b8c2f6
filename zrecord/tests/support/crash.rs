//! The crash model: from the operation log of a [`MemFs`] workload, the state that is durable
//! after any prefix of it ([`CrashModel::durable_at`]) and random crash images built from that
//! state and the operations still pending ([`CrashModel::image`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::Arc;

use rand::Rng;
use rand::rngs::SmallRng;

use super::memfs::{MemFs, Node, Op};

/// Sector size used to tear un-synced writes.
pub const SECTOR: u64 = 512;

#[derive(Clone, Debug)]
enum EntryOp {
    Add(OsString, usize),
    Remove(OsString),
    Move(OsString, OsString, usize),
}

fn apply_entry(entries: &mut BTreeMap<OsString, usize>, op: &EntryOp) {
    match op {
        EntryOp::Add(n, i) => {
            entries.insert(n.clone(), *i);
        }
        EntryOp::Remove(n) => {
            entries.remove(n);
        }
        EntryOp::Move(from, to, i) => {
            if entries.get(from) == Some(i) {
                entries.remove(from);
            }
            entries.insert(to.clone(), *i);
        }
    }
}

fn apply_write(data: &mut Vec<u8>, off: u64, bytes: &[u8]) {
    let end = off as usize + bytes.len();
    if data.len() < end {
        data.resize(end, 0);
    }
    data[off as usize..end].copy_from_slice(bytes);
}

/// State after a log prefix: what is durable, and what is still pending (un-synced).
#[derive(Clone, Debug)]
pub struct Durable {
    nodes: Vec<Node>,
    pending_writes: BTreeMap<usize, Vec<(u64, Vec<u8>)>>,
    pending_entries: BTreeMap<usize, Vec<EntryOp>>,
}

impl Durable {
    /// Number of un-synced operations (writes + directory-entry changes).
    pub fn pending(&self) -> usize {
        self.pending_writes.values().map(Vec::len).sum::<usize>()
            + self.pending_entries.values().map(Vec::len).sum::<usize>()
    }
}

/// The recorded log of a workload plus the durable base it started from.
///
/// Durability rules (deliberately the weakest POSIX gives):
/// * a write to a file is durable only once that file is fsynced after it;
/// * a directory entry change (create, mkdir, unlink, rename) is durable only once the directory
///   holding the entry is fsynced after it; fsyncing a file does not persist its name;
/// * at a crash, every un-synced write independently survives per 512-byte sector (torn writes),
///   and every un-synced entry change independently survives or not (applied in log order).
#[derive(Clone, Debug)]
pub struct CrashModel {
    pub base: Vec<Node>,
    pub log: Vec<Op>,
}

impl CrashModel {
    /// Durable state and pending operations after the first `p` operations.
    pub fn durable_at(&self, p: usize) -> Durable {
        let mut nodes = self.base.clone();
        let mut pending_writes: BTreeMap<usize, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
        let mut pending_entries: BTreeMap<usize, Vec<EntryOp>> = BTreeMap::new();
        for op in &self.log[..p] {
            match op {
                Op::Link {
                    dir,
                    name,
                    ino,
                    is_dir,
                } => {
                    if nodes.len() <= *ino {
                        nodes.resize(*ino + 1, Node::File(Arc::new(Vec::new())));
                    }
                    nodes[*ino] = if *is_dir {
                        Node::Dir(BTreeMap::new())
                    } else {
                        Node::File(Arc::new(Vec::new()))
                    };
                    pending_entries
                        .entry(*dir)
                        .or_default()
                        .push(EntryOp::Add(name.clone(), *ino));
                }
                Op::Unlink { dir, name } => pending_entries
                    .entry(*dir)
                    .or_default()
                    .push(EntryOp::Remove(name.clone())),
                Op::Rename {
                    from_dir,
                    from,
                    to_dir,
                    to,
                    ino,
                } => {
                    if from_dir == to_dir {
                        pending_entries
                            .entry(*to_dir)
                            .or_default()
                            .push(EntryOp::Move(from.clone(), to.clone(), *ino));
                    } else {
                        pending_entries
                            .entry(*from_dir)
                            .or_default()
                            .push(EntryOp::Remove(from.clone()));
                        pending_entries
                            .entry(*to_dir)
                            .or_default()
                            .push(EntryOp::Add(to.clone(), *ino));
                    }
                }
                Op::Write { ino, off, data } => pending_writes
                    .entry(*ino)
                    .or_default()
                    .push((*off, data.clone())),
                Op::Sync { ino } => {
                    if let Some(ws) = pending_writes.remove(ino)
                        && let Node::File(d) = &mut nodes[*ino]
                    {
                        let d = Arc::make_mut(d);
                        for (off, data) in ws {
                            apply_write(d, off, &data);
                        }
                    }
                }
                Op::SyncDir { ino } => {
                    if let Some(ops) = pending_entries.remove(ino)
                        && let Node::Dir(e) = &mut nodes[*ino]
                    {
                        for o in &ops {
                            apply_entry(e, o);
                        }
                    }
                }
            }
        }
        Durable {
            nodes,
            pending_writes,
            pending_entries,
        }
    }

    /// One crash image: the durable state plus a random subset of the pending operations, each
    /// surviving with probability `keep`, writes torn at sector granularity.
    pub fn image(d: &Durable, rng: &mut SmallRng, keep: f64) -> MemFs {
        let mut nodes = d.nodes.clone();
        for (ino, ws) in &d.pending_writes {
            let Node::File(data) = &mut nodes[*ino] else {
                continue;
            };
            let data = Arc::make_mut(data);
            for (off, w) in ws {
                let end = off + w.len() as u64;
                let mut s = off - off % SECTOR;
                while s < end {
                    let a = s.max(*off);
                    let b = (s + SECTOR).min(end);
                    if rng.random_bool(keep) {
                        apply_write(data, a, &w[(a - off) as usize..(b - off) as usize]);
                    }
                    s += SECTOR;
                }
            }
        }
        for (dir, ops) in &d.pending_entries {
            let Node::Dir(e) = &mut nodes[*dir] else {
                continue;
            };
            for o in ops {
                if rng.random_bool(keep) {
                    apply_entry(e, o);
                }
            }
        }
        MemFs::from_nodes(nodes)
    }
}
