//! A region's id as the datanodes' region engine spells it: a table id in the high 32 bits and
//! the region's number in the low 32, which hold an 8-bit group and a 24-bit sequence.

use std::fmt;

/// A table's id.
pub type TableId = u32;
/// A region's number within its table.
pub type RegionNumber = u32;
/// The group bits of a region number.
pub type RegionGroup = u8;
/// The sequence bits of a region number.
pub type RegionSeq = u32;

const REGION_SEQ_BITS: u32 = 24;
const REGION_SEQ_MASK: u32 = (1 << REGION_SEQ_BITS) - 1;
/// The highest sequence a region number can hold.
pub const MAX_REGION_SEQ: u32 = REGION_SEQ_MASK;

/// A region's id; walserver keeps each region's WAL as the namespace of the same `u64`.
#[derive(Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegionId(u64);

impl RegionId {
    /// The id of region `region_number` of table `table_id`.
    pub const fn new(table_id: TableId, region_number: RegionNumber) -> RegionId {
        RegionId(((table_id as u64) << 32) | region_number as u64)
    }

    /// The table the region belongs to.
    pub const fn table_id(&self) -> TableId {
        (self.0 >> 32) as TableId
    }

    /// The region's number within its table.
    pub const fn region_number(&self) -> RegionNumber {
        self.0 as RegionNumber
    }

    /// The group bits of the region number.
    pub const fn region_group(&self) -> RegionGroup {
        (self.region_number() >> REGION_SEQ_BITS) as RegionGroup
    }

    /// The sequence bits of the region number.
    pub const fn region_sequence(&self) -> RegionSeq {
        self.region_number() & REGION_SEQ_MASK
    }

    /// The id as one `u64` (walserver's namespace id).
    pub const fn as_u64(&self) -> u64 {
        self.0
    }

    /// The region of a `u64` id.
    pub const fn from_u64(id: u64) -> RegionId {
        RegionId(id)
    }

    /// The id of a region given by table, group and sequence (the sequence keeps its low 24
    /// bits).
    pub const fn with_group_and_seq(
        table_id: TableId,
        group: RegionGroup,
        seq: RegionSeq,
    ) -> RegionId {
        let number = ((group as u32) << REGION_SEQ_BITS) | (seq & REGION_SEQ_MASK);
        RegionId::new(table_id, number)
    }
}

impl fmt::Debug for RegionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({}, {})", self.0, self.table_id(), self.region_number())
    }
}

impl fmt::Display for RegionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl From<u64> for RegionId {
    fn from(id: u64) -> RegionId {
        RegionId(id)
    }
}

impl From<RegionId> for u64 {
    fn from(id: RegionId) -> u64 {
        id.0
    }
}

impl PartialEq<u64> for RegionId {
    fn eq(&self, other: &u64) -> bool {
        self.0 == *other
    }
}

impl PartialEq<RegionId> for u64 {
    fn eq(&self, other: &RegionId) -> bool {
        *self == other.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_id_packs_its_table_and_number() {
        let id = RegionId::new(1234, 5);
        assert_eq!(id.as_u64(), (1234 << 32) | 5);
        assert_eq!((id.table_id(), id.region_number()), (1234, 5));
        assert_eq!(id.to_string(), "5299989643269(1234, 5)");
        assert_eq!(RegionId::from_u64(id.as_u64()), id);
        let grouped = RegionId::with_group_and_seq(7, 3, 0x1ff_ffff);
        assert_eq!((grouped.region_group(), grouped.region_sequence()), (3, 0xff_ffff));
        let raw = (1234u64 << 32) | 5;
        assert!(id == raw);
        assert!(raw == id);
    }
}
