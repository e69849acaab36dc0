//! Structural check of `.safetensors` headers: a digest proves the bytes are the sealed ones, not
//! that they were well formed when sealed. Checked: the u64 LE header length (at most 100 MB and
//! within the file), a JSON object header, each tensor's `data_offsets` inside the data section,
//! not overlapping, and consistent with its dtype and shape.

use hr_files::IoResultExt;
use std::{fs::File, io::Read, path::Path};

use serde_json::Value;

use crate::SealError;

const MAX_HEADER: u64 = 100_000_000;

fn dtype_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" => 1,
        "U16" | "I16" | "F16" | "BF16" => 2,
        "U32" | "I32" | "F32" => 4,
        "U64" | "I64" | "F64" => 8,
        _ => return None,
    })
}

/// Checks the header of the safetensors file at `path` (`rel` names it in errors).
pub(crate) fn check(path: &Path, rel: &str) -> Result<(), SealError> {
    let bad = |reason: String| SealError::MalformedSafetensors {
        path: rel.to_owned(),
        reason,
    };
    let mut file = File::open(path).at("open", path)?;
    let file_size = file.metadata().at("stat", path)?.len();
    let mut len_bytes = [0u8; 8];
    file.read_exact(&mut len_bytes)
        .map_err(|_| bad("shorter than the 8-byte header length".into()))?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_HEADER || header_len + 8 > file_size {
        return Err(bad(format!(
            "header length {header_len} does not fit the {file_size}-byte file"
        )));
    }
    let mut header =
        vec![0u8; usize::try_from(header_len).map_err(|_| bad("header too large".into()))?];
    file.read_exact(&mut header).at("read", path)?;
    let header: Value =
        serde_json::from_slice(&header).map_err(|e| bad(format!("header is not JSON: {e}")))?;
    let Value::Object(entries) = header else {
        return Err(bad("header is not a JSON object".into()));
    };
    let data_len = file_size - 8 - header_len;
    let mut ranges = Vec::new();
    for (name, entry) in &entries {
        if name == "__metadata__" {
            continue;
        }
        let dtype = entry["dtype"]
            .as_str()
            .ok_or_else(|| bad(format!("{name}: no dtype")))?;
        let size =
            dtype_size(dtype).ok_or_else(|| bad(format!("{name}: unknown dtype {dtype}")))?;
        let shape: Vec<u64> = entry["shape"]
            .as_array()
            .and_then(|dims| dims.iter().map(Value::as_u64).collect())
            .ok_or_else(|| bad(format!("{name}: bad shape")))?;
        let offsets: Vec<u64> = entry["data_offsets"]
            .as_array()
            .and_then(|o| o.iter().map(Value::as_u64).collect())
            .filter(|o: &Vec<u64>| o.len() == 2)
            .ok_or_else(|| bad(format!("{name}: bad data_offsets")))?;
        let (begin, end) = (offsets[0], offsets[1]);
        if begin > end || end > data_len {
            return Err(bad(format!(
                "{name}: data_offsets [{begin}, {end}) outside {data_len} data bytes"
            )));
        }
        let expected = shape.iter().try_fold(size, |acc, d| acc.checked_mul(*d));
        if expected != Some(end - begin) {
            return Err(bad(format!(
                "{name}: {dtype} {shape:?} does not fill [{begin}, {end})"
            )));
        }
        ranges.push((begin, end, name.clone()));
    }
    ranges.sort();
    for pair in ranges.windows(2) {
        if pair[1].0 < pair[0].1 {
            return Err(bad(format!("{} and {} overlap", pair[0].2, pair[1].2)));
        }
    }
    Ok(())
}
