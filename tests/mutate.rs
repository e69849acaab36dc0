//! Byte-level mutation for the parser fuzz tests: flips, insertions, removals and cuts, driven
//! by numbers a property-test strategy draws.

/// One edit: `(op, at, byte)`; `op % 4` picks flip (xor with a non-zero byte), insert, remove or
/// cut, at position `at` modulo the current length.
pub type Edit = (u8, usize, u8);

/// Applies `edits` to `bytes` in order.
pub fn mutate(bytes: &mut Vec<u8>, edits: &[Edit]) {
    for &(op, at, byte) in edits {
        let i = at % bytes.len().max(1);
        match op % 4 {
            0 if !bytes.is_empty() => bytes[i] ^= byte.max(1),
            1 => bytes.insert(i, byte),
            2 if !bytes.is_empty() => {
                bytes.remove(i);
            }
            _ => bytes.truncate(i),
        }
    }
}

/// [`mutate`] on text (the result need not be UTF-8; invalid bytes become U+FFFD).
pub fn mutate_text(text: &str, edits: &[Edit]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    mutate(&mut bytes, edits);
    String::from_utf8_lossy(&bytes).into_owned()
}
