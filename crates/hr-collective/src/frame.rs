//! One message between two ranks: `HRC1`, the exchange's sequence number, the sender's rank, the
//! length and the sha256 of the bytes, then the bytes. Every field is checked on arrival, and the
//! length is bounded before anything is allocated.

use std::io::{Read, Write};

use sha2::{Digest, Sha256};

use crate::{CollectiveError, io};

const MAGIC: &[u8; 4] = b"HRC1";
const HEADER: usize = 4 + 8 + 4 + 8 + 32;

/// Most bytes one frame carries (a gathered list of every rank's gradients included).
pub(crate) const MAX_FRAME: u64 = 4 << 30;

/// Writes `bytes` as frame `seq` from `rank`.
pub(crate) fn write(
    stream: &mut impl Write,
    seq: u64,
    rank: usize,
    bytes: &[u8],
    peer: &str,
) -> Result<(), CollectiveError> {
    if bytes.len() as u64 > MAX_FRAME {
        return Err(CollectiveError::Protocol(format!(
            "frame {seq} for {peer} would carry {} bytes, over the {MAX_FRAME} a frame may: \
             the ranks' gathered parts (gradients of every adapter tensor, a step's episodes) \
             are too large for this transport",
            bytes.len()
        )));
    }
    let mut header = Vec::with_capacity(HEADER);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&seq.to_le_bytes());
    header.extend_from_slice(&(rank as u32).to_le_bytes());
    header.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    header.extend_from_slice(&Sha256::digest(bytes));
    let what = || format!("sending frame {seq} to {peer}");
    stream.write_all(&header).map_err(io(what()))?;
    stream.write_all(bytes).map_err(io(what()))?;
    stream.flush().map_err(io(what()))
}

/// Reads frame `seq` of at most `max` bytes; from `rank` when given, else from any rank (a
/// greeting), which is returned with the bytes.
pub(crate) fn read(
    stream: &mut impl Read,
    seq: u64,
    rank: Option<usize>,
    max: u64,
    peer: &str,
) -> Result<(usize, Vec<u8>), CollectiveError> {
    let what = || format!("receiving frame {seq} from {peer}");
    let mut header = [0u8; HEADER];
    stream.read_exact(&mut header).map_err(io(what()))?;
    let bad = |message: String| CollectiveError::Protocol(format!("{}: {message}", what()));
    if &header[..4] != MAGIC {
        return Err(bad("not a hessian-recipes rank (no HRC1 header)".to_owned()));
    }
    let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap_or_default());
    let got_seq = word(4);
    let sender = u32::from_le_bytes(header[12..16].try_into().unwrap_or_default()) as usize;
    let len = word(16);
    if got_seq != seq {
        return Err(bad(format!(
            "it is frame {got_seq}: the ranks are out of step"
        )));
    }
    if rank.is_some_and(|r| r != sender) {
        return Err(bad(format!("it comes from rank {sender}")));
    }
    if len > max {
        return Err(bad(format!("{len} bytes is over {max}")));
    }
    let mut bytes = vec![0u8; len as usize];
    stream.read_exact(&mut bytes).map_err(io(what()))?;
    if Sha256::digest(&bytes).as_slice() != &header[24..] {
        return Err(bad("its bytes do not match their sha256".to_owned()));
    }
    Ok((sender, bytes))
}

/// Every rank's part, in rank order, as one frame's bytes: the count, each length, the parts.
pub(crate) fn pack(parts: &[Vec<u8>]) -> Vec<u8> {
    let total: usize = parts.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(4 + 8 * parts.len() + total);
    out.extend_from_slice(&(parts.len() as u32).to_le_bytes());
    for part in parts {
        out.extend_from_slice(&(part.len() as u64).to_le_bytes());
    }
    for part in parts {
        out.extend_from_slice(part);
    }
    out
}

/// The parts [`pack`] wrote, which must be `count`.
pub(crate) fn unpack(bytes: &[u8], count: usize) -> Result<Vec<Vec<u8>>, CollectiveError> {
    let bad = |m: &str| CollectiveError::Protocol(format!("the chief's gathered parts: {m}"));
    let n = bytes
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| bad("too short"))? as usize;
    if n != count {
        return Err(bad(&format!("{n} parts for {count} ranks")));
    }
    let mut at = 4 + 8 * n;
    let lengths = bytes.get(4..at).ok_or_else(|| bad("too short"))?;
    let mut parts = Vec::with_capacity(n);
    for len in lengths.chunks_exact(8) {
        let len = u64::from_le_bytes(len.try_into().unwrap_or_default()) as usize;
        let end = at
            .checked_add(len)
            .ok_or_else(|| bad("a length overflows"))?;
        parts.push(bytes.get(at..end).ok_or_else(|| bad("too short"))?.to_vec());
        at = end;
    }
    if at != bytes.len() {
        return Err(bad("bytes left over"));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_and_every_field_is_checked() {
        let mut wire = Vec::new();
        write(&mut wire, 7, 2, b"gradients", "test").expect("write");
        let (rank, bytes) =
            read(&mut wire.as_slice(), 7, Some(2), MAX_FRAME, "test").expect("read");
        assert_eq!((rank, bytes.as_slice()), (2, &b"gradients"[..]));
        let refused = |wire: &[u8], seq, rank| {
            read(&mut &wire[..], seq, rank, MAX_FRAME, "test")
                .expect_err("refused")
                .to_string()
        };
        assert!(refused(&wire, 8, Some(2)).contains("out of step"));
        assert!(refused(&wire, 7, Some(1)).contains("from rank 2"));
        let mut flipped = wire.clone();
        *flipped.last_mut().expect("bytes") ^= 1;
        assert!(refused(&flipped, 7, Some(2)).contains("sha256"));
        let mut huge = wire.clone();
        huge[16..24].copy_from_slice(&(MAX_FRAME + 1).to_le_bytes());
        assert!(refused(&huge, 7, Some(2)).contains("is over"));
        assert!(
            refused(
                b"GET / HTTP/1.1\r\n\r\n0123456789012345678901234567890123456789",
                7,
                None
            )
            .contains("HRC1")
        );
        assert!(refused(&wire[..30], 7, Some(2)).contains("receiving frame 7"));
    }

    #[test]
    fn packed_parts_unpack_and_a_short_or_miscounted_pack_is_refused() {
        let parts = vec![b"a".to_vec(), Vec::new(), b"ccc".to_vec()];
        let packed = pack(&parts);
        assert_eq!(unpack(&packed, 3).expect("unpack"), parts);
        assert!(unpack(&packed, 2).is_err());
        assert!(unpack(&packed[..packed.len() - 1], 3).is_err());
        let mut longer = packed.clone();
        longer.push(0);
        assert!(unpack(&longer, 3).is_err());
    }
}
