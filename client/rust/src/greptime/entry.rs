//! An entry of a region's WAL as the datanodes' log store passes it around: whole (`Naive`) or
//! in parts (`MultiplePart`). walserver stores an entry of any size up to its limit whole (it
//! splits large entries into Kafka records itself), so entries it reads back are always
//! `Naive`; a complete `MultiplePart` entry given to `append_batch` is stored as its parts
//! joined.

use std::fmt;

use super::{Provider, RegionId};

/// An entry id: the Kafka offset of the entry's first record in its topic (walserver's entry
/// id). Ids of one topic's regions are comparable; two regions' entries may share one.
pub type Id = u64;

/// A whole entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NaiveEntry {
    /// Where the region's WAL lives.
    pub provider: Provider,
    /// The region.
    pub region_id: RegionId,
    /// The entry's id (set by reads; ignored by appends).
    pub entry_id: Id,
    /// The entry's bytes.
    pub data: Vec<u8>,
}

/// Which part of an entry a part is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiplePartHeader {
    /// The first part.
    First,
    /// A part between the first and the last, by its index.
    Middle(usize),
    /// The last part.
    Last,
}

/// An entry in parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiplePartEntry {
    /// Where the region's WAL lives.
    pub provider: Provider,
    /// The region.
    pub region_id: RegionId,
    /// The entry's id.
    pub entry_id: Id,
    /// One header per part.
    pub headers: Vec<MultiplePartHeader>,
    /// The parts, in order.
    pub parts: Vec<Vec<u8>>,
}

impl NaiveEntry {
    fn estimated_size(&self) -> usize {
        std::mem::size_of::<NaiveEntry>() + self.data.len()
    }
}

impl MultiplePartEntry {
    fn is_complete(&self) -> bool {
        self.headers.contains(&MultiplePartHeader::First)
            && self.headers.contains(&MultiplePartHeader::Last)
    }

    fn estimated_size(&self) -> usize {
        std::mem::size_of::<MultiplePartEntry>()
            + self.parts.iter().map(Vec::len).sum::<usize>()
            + self.headers.len() * std::mem::size_of::<MultiplePartHeader>()
    }
}

/// An entry of a region's WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A whole entry.
    Naive(NaiveEntry),
    /// An entry in parts.
    MultiplePart(MultiplePartEntry),
}

impl Entry {
    /// The whole entry, if it is one.
    pub fn into_naive_entry(self) -> Option<NaiveEntry> {
        match self {
            Entry::Naive(entry) => Some(entry),
            Entry::MultiplePart(_) => None,
        }
    }

    /// The entry in parts, if it is one.
    pub fn into_multiple_part_entry(self) -> Option<MultiplePartEntry> {
        match self {
            Entry::Naive(_) => None,
            Entry::MultiplePart(entry) => Some(entry),
        }
    }

    /// Where the region's WAL lives.
    pub fn provider(&self) -> &Provider {
        match self {
            Entry::Naive(entry) => &entry.provider,
            Entry::MultiplePart(entry) => &entry.provider,
        }
    }

    /// The region.
    pub fn region_id(&self) -> RegionId {
        match self {
            Entry::Naive(entry) => entry.region_id,
            Entry::MultiplePart(entry) => entry.region_id,
        }
    }

    /// The entry's id.
    pub fn entry_id(&self) -> Id {
        match self {
            Entry::Naive(entry) => entry.entry_id,
            Entry::MultiplePart(entry) => entry.entry_id,
        }
    }

    /// Sets the entry's id.
    pub fn set_entry_id(&mut self, id: Id) {
        match self {
            Entry::Naive(entry) => entry.entry_id = id,
            Entry::MultiplePart(entry) => entry.entry_id = id,
        }
    }

    /// Whether the entry is all there: always for a whole entry; for one in parts, when it has
    /// its first and its last part.
    pub fn is_complete(&self) -> bool {
        match self {
            Entry::Naive(_) => true,
            Entry::MultiplePart(entry) => entry.is_complete(),
        }
    }

    /// The entry's bytes (the parts joined).
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Entry::Naive(entry) => entry.data,
            Entry::MultiplePart(entry) => entry.parts.concat(),
        }
    }

    /// About how much memory the entry takes.
    pub fn estimated_size(&self) -> usize {
        match self {
            Entry::Naive(entry) => entry.estimated_size(),
            Entry::MultiplePart(entry) => entry.estimated_size(),
        }
    }
}

impl fmt::Display for NaiveEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NaiveEntry(provider={:?}, region_id={}, entry_id={})",
            self.provider, self.region_id, self.entry_id
        )
    }
}

impl fmt::Display for MultiplePartEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MultiplePartEntry(provider={:?}, region_id={}, entry_id={}, len={})",
            self.provider,
            self.region_id,
            self.entry_id,
            self.parts.len()
        )
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Naive(entry) => entry.fmt(f),
            Entry::MultiplePart(entry) => entry.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: Vec<MultiplePartHeader>) -> Entry {
        let parts = (0..headers.len() as u8).map(|i| vec![i; 3]).collect();
        Entry::MultiplePart(MultiplePartEntry {
            provider: Provider::kafka_provider("my_topic".into()),
            region_id: RegionId::new(1, 1),
            entry_id: 1,
            headers,
            parts,
        })
    }

    #[test]
    fn an_entry_in_parts_is_complete_with_its_first_and_last_and_joins_them() {
        use MultiplePartHeader::{First, Last, Middle};
        let whole = parts(vec![First, Middle(1), Last]);
        assert!(whole.is_complete());
        assert_eq!(whole.region_id(), RegionId::new(1, 1));
        assert!(!parts(vec![First, Middle(1)]).is_complete());
        assert!(!parts(vec![Middle(1), Last]).is_complete());
        let size = whole.estimated_size();
        assert_eq!(
            size,
            std::mem::size_of::<MultiplePartEntry>()
                + 9
                + 3 * std::mem::size_of::<MultiplePartHeader>()
        );
        let mut renumbered = whole.clone();
        renumbered.set_entry_id(7);
        assert_eq!(renumbered.entry_id(), 7);
        assert!(whole.clone().into_naive_entry().is_none());
        assert_eq!(whole.into_bytes(), vec![0, 0, 0, 1, 1, 1, 2, 2, 2]);
    }
}
