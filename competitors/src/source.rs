//! The prepared sources every writer receives (whole, in one call) and the reference gather that
//! defines the expected bytes.

use zrecord::DType;

use crate::error::{Result, bail};
use crate::output::{Batch, DenseOut, RaggedOut, same_dense, same_ragged};
use crate::util;

/// The two record geometries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Geometry {
    /// Fixed `(dtype, item_shape)` per store.
    Dense,
    /// Variable shape per record, fixed dtype and `ndim`.
    Ragged,
}

impl Geometry {
    /// `"dense"` or `"ragged"`.
    pub const fn name(self) -> &'static str {
        match self {
            Geometry::Dense => "dense",
            Geometry::Ragged => "ragged",
        }
    }
}

/// A Dense source: `n` records of `item_shape`, row-major, native-endian (a `.npy` payload).
#[derive(Clone, Debug)]
pub struct DenseSource<'a> {
    pub dtype: DType,
    /// Shape of one record (may be empty: 0-D records).
    pub item_shape: Vec<u64>,
    /// `n * stride` bytes.
    pub data: &'a [u8],
}

impl DenseSource<'_> {
    /// Bytes per record.
    pub fn stride(&self) -> usize {
        self.item_shape.iter().product::<u64>() as usize * self.dtype.itemsize()
    }

    /// Number of records (0 when `stride == 0`).
    pub fn len(&self) -> u64 {
        match self.stride() {
            0 => 0,
            s => (self.data.len() / s) as u64,
        }
    }

    /// Whether the source holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of record `i`.
    pub fn record(&self, i: u64) -> &[u8] {
        let s = self.stride();
        &self.data[i as usize * s..(i as usize + 1) * s]
    }

    /// Checks that the payload is a whole number of non-empty records.
    pub fn validate(&self) -> Result<()> {
        let s = self.stride();
        if s == 0 {
            bail!(
                "dense source: zero-byte records (item_shape {:?}) are not supported",
                self.item_shape
            );
        }
        if !self.data.len().is_multiple_of(s) {
            bail!(
                "dense source: {} bytes is not a multiple of the {s}-byte stride",
                self.data.len()
            );
        }
        Ok(())
    }
}

/// A Ragged source: flat values plus element offsets and per-record shapes (the `tokens.npy` +
/// `offsets.npy` layout, or a flattened Arrow List payload plus a shape column).
#[derive(Clone, Debug)]
pub struct RaggedSource<'a> {
    pub dtype: DType,
    /// Dimensions per record (>= 1).
    pub ndim: usize,
    /// Flat values, native-endian.
    pub values: &'a [u8],
    /// Element offsets into `values`, `n + 1` entries, non-decreasing; record `i` is
    /// `values[offsets[i]..offsets[i + 1]]` (in elements).
    pub offsets: &'a [i64],
    /// `n * ndim` dims; the product of record `i`'s dims equals its element count.
    pub shapes: &'a [u64],
}

impl RaggedSource<'_> {
    /// Number of records.
    pub fn len(&self) -> u64 {
        self.offsets.len().saturating_sub(1) as u64
    }

    /// Whether the source holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of record `i`.
    pub fn record(&self, i: u64) -> &[u8] {
        let (it, i) = (self.dtype.itemsize(), i as usize);
        &self.values[self.offsets[i] as usize * it..self.offsets[i + 1] as usize * it]
    }

    /// The bytes of every record, back to back (`values` from the first offset to the last).
    pub fn payload(&self) -> &[u8] {
        let (it, o) = (self.dtype.itemsize(), self.offsets);
        let (a, b) = (o.first().copied(), o.last().copied());
        &self.values[a.unwrap_or(0) as usize * it..b.unwrap_or(0) as usize * it]
    }

    /// Shape of record `i`.
    pub fn shape(&self, i: u64) -> &[u64] {
        let i = i as usize;
        &self.shapes[i * self.ndim..(i + 1) * self.ndim]
    }

    /// Checks offsets, shapes and sizes for consistency.
    pub fn validate(&self) -> Result<()> {
        if self.ndim == 0 {
            bail!("ragged source: ndim must be >= 1");
        }
        if self.offsets.is_empty() {
            bail!("ragged source: offsets needs n + 1 entries");
        }
        let n = self.len() as usize;
        if self.shapes.len() != n * self.ndim {
            bail!(
                "ragged source: {} shape dims for {n} records of ndim {}",
                self.shapes.len(),
                self.ndim
            );
        }
        let it = self.dtype.itemsize();
        for i in 0..n {
            let (a, b) = (self.offsets[i], self.offsets[i + 1]);
            if a < 0 || b < a || b as usize * it > self.values.len() {
                bail!("ragged source: bad offsets {a}..{b} for record {i}");
            }
            let prod: u64 = self.shape(i as u64).iter().product();
            if prod != (b - a) as u64 {
                bail!(
                    "ragged source: record {i} has {} elements but shape {:?}",
                    b - a,
                    self.shape(i as u64)
                );
            }
        }
        Ok(())
    }
}

/// A prepared source of either geometry.
#[derive(Clone, Debug)]
pub enum Source<'a> {
    /// Fixed-shape records.
    Dense(DenseSource<'a>),
    /// Variable-shape records.
    Ragged(RaggedSource<'a>),
}

impl Source<'_> {
    /// The source's geometry.
    pub fn geometry(&self) -> Geometry {
        match self {
            Source::Dense(_) => Geometry::Dense,
            Source::Ragged(_) => Geometry::Ragged,
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            Source::Dense(d) => d.dtype,
            Source::Ragged(r) => r.dtype,
        }
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        match self {
            Source::Dense(d) => d.len(),
            Source::Ragged(r) => r.len(),
        }
    }

    /// Whether the source holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Payload bytes of record `i`.
    pub fn record(&self, i: u64) -> &[u8] {
        match self {
            Source::Dense(d) => d.record(i),
            Source::Ragged(r) => r.record(i),
        }
    }

    /// The source's logical bytes, as one slice (every record, back to back).
    pub fn payload(&self) -> &[u8] {
        match self {
            Source::Dense(d) => d.data,
            Source::Ragged(r) => r.payload(),
        }
    }

    /// Total payload bytes.
    pub fn payload_bytes(&self) -> u64 {
        self.payload().len() as u64
    }

    /// Checks the source for consistency.
    pub fn validate(&self) -> Result<()> {
        match self {
            Source::Dense(d) => d.validate(),
            Source::Ragged(r) => r.validate(),
        }
    }

    /// Checks `got` against the batch [`Source::gather_reference`] builds for `indices`, with
    /// the same verdict as [`crate::verify`] on that batch, but record by record in place: no
    /// reference batch is allocated (a fresh 38.5 MB one a dense image batch, each page of it
    /// faulted in), so checking costs one read of the source records and of `got`.
    pub fn check(&self, indices: &[u64], got: &Batch) -> Result<()> {
        match got {
            Batch::Dense(g) => self.check_dense(indices, g.bytes(), g.shape()),
            Batch::Ragged(g) => self.check_ragged(indices, g.values(), g.cu_seqlens(), g.shapes()),
        }
    }

    /// [`Source::check`] of a Dense batch given as its `bytes` and `shape` (a batch held in
    /// another crate's type, checked without copying it).
    pub fn check_dense(&self, indices: &[u64], bytes: &[u8], shape: &[u64]) -> Result<()> {
        util::check_indices(indices, self.len())?;
        let Source::Dense(d) = self else {
            bail!(
                "geometry mismatch: got a dense batch (shape {shape:?}, {} bytes), expected a {:?} batch",
                bytes.len(),
                self.geometry()
            );
        };
        let want_shape = util::batch_shape(indices.len(), &d.item_shape);
        let (records, len) = (
            indices.iter().map(|&i| d.record(i)),
            indices.len() * d.stride(),
        );
        same_dense(bytes, shape, &want_shape, records, len)
    }

    /// [`Source::check`] of a Ragged batch given as its packed `values`, `cu` (`cu_seqlens`) and
    /// `shapes` (a batch held in another crate's type, checked without copying it).
    pub fn check_ragged(
        &self,
        indices: &[u64],
        values: &[u8],
        cu: &[i32],
        shapes: &[u64],
    ) -> Result<()> {
        util::check_indices(indices, self.len())?;
        let Source::Ragged(r) = self else {
            bail!(
                "geometry mismatch: got a ragged batch ({} records, {} value bytes), expected a {:?} batch",
                cu.len().saturating_sub(1),
                values.len(),
                self.geometry()
            );
        };
        let records = indices.iter().map(|&i| r.record(i));
        let want_cu = util::cu_seqlens(records.clone().map(<[u8]>::len), r.dtype.itemsize())?;
        let want_shapes = util::gather_shapes(r.shapes, r.ndim, indices);
        let want_len = want_cu.last().map_or(0, |&e| e as usize) * r.dtype.itemsize();
        let got = (values, cu, shapes);
        same_ragged(got, (&want_cu, &want_shapes), records, want_len)
    }

    /// The expected batch for `indices`, built directly from the source (single-threaded,
    /// straightforward): the definition every backend is verified against.
    pub fn gather_reference(&self, indices: &[u64]) -> Result<Batch> {
        util::check_indices(indices, self.len())?;
        let records: Vec<&[u8]> = indices.iter().map(|&i| self.record(i)).collect();
        Ok(match self {
            Source::Dense(d) => Batch::Dense(Box::new(DenseOut {
                bytes: records.concat(),
                shape: util::batch_shape(indices.len(), &d.item_shape),
            })),
            Source::Ragged(r) => Batch::Ragged(Box::new(RaggedOut {
                cu_seqlens: util::cu_seqlens(records.iter().map(|x| x.len()), r.dtype.itemsize())?,
                values: records.concat(),
                shapes: util::gather_shapes(r.shapes, r.ndim, indices),
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// An owned copy of a reference batch spoiled one way (or not at all), as a loader or a
    /// store could get it wrong: a flipped bit, a byte short or over, a boundary or a dim off.
    fn spoiled(b: &Batch, rng: &mut SmallRng) -> Batch {
        let (mut bytes, mut cu, mut dims) = match b {
            Batch::Dense(d) => (d.bytes().to_vec(), Vec::new(), d.shape().to_vec()),
            Batch::Ragged(r) => (
                r.values().to_vec(),
                r.cu_seqlens().to_vec(),
                r.shapes().to_vec(),
            ),
        };
        match rng.random_range(0..6) {
            0 => {}
            1 if !bytes.is_empty() => {
                let p = rng.random_range(0..bytes.len());
                bytes[p] ^= 1 << rng.random_range(0..8);
            }
            2 => drop(bytes.pop()),
            3 => bytes.push(7),
            4 if cu.len() > 2 => cu[1] += 1,
            _ => dims.last_mut().into_iter().for_each(|d| *d += 1),
        }
        match b {
            Batch::Dense(_) => Batch::Dense(Box::new(DenseOut { bytes, shape: dims })),
            Batch::Ragged(_) => Batch::Ragged(Box::new(RaggedOut {
                values: bytes,
                cu_seqlens: cu,
                shapes: dims,
            })),
        }
    }

    /// `check` gives the verdict `verify` gives against the reference batch, whatever the
    /// spoiling: the in-place check against its oracle.
    #[test]
    fn check_agrees_with_verify_against_the_reference_batch() {
        let mut rng = SmallRng::seed_from_u64(11);
        let n = 40u64;
        let dense_data: Vec<u8> = (0..n * 6).map(|_| rng.random()).collect();
        let lens: Vec<i64> = (0..n).map(|i| (i % 5) as i64).collect();
        let mut offsets = vec![0i64];
        for l in &lens {
            offsets.push(offsets.last().unwrap() + l);
        }
        let values: Vec<u8> = (0..*offsets.last().unwrap() * 2)
            .map(|_| rng.random())
            .collect();
        let shapes: Vec<u64> = lens.iter().map(|&l| l as u64).collect();
        let dense = Source::Dense(DenseSource {
            dtype: DType::UInt16,
            item_shape: vec![3],
            data: &dense_data,
        });
        let ragged = Source::Ragged(RaggedSource {
            dtype: DType::UInt16,
            ndim: 1,
            values: &values,
            offsets: &offsets,
            shapes: &shapes,
        });
        let mut agreed = [0, 0]; // [bad, good]
        for round in 0..2000 {
            let src = if round % 2 == 0 { &dense } else { &ragged };
            let k = rng.random_range(0..12);
            let idx: Vec<u64> = (0..k).map(|_| rng.random_range(0..n)).collect();
            let want = src.gather_reference(&idx).unwrap();
            let got = spoiled(&want, &mut rng);
            let oracle = crate::verify(&got, &want).is_ok();
            let verdict = src.check(&idx, &got).is_ok();
            assert_eq!(verdict, oracle, "round {round}: {got:?} for {idx:?}");
            agreed[usize::from(oracle)] += 1;
        }
        assert!(agreed.iter().all(|&a| a > 300), "[bad, good]: {agreed:?}");
        assert!(
            dense
                .check(&[n], &dense.gather_reference(&[0]).unwrap())
                .is_err()
        );
        assert!(
            dense
                .check(&[0], &ragged.gather_reference(&[0]).unwrap())
                .is_err()
        );
    }
}
