//! The GGUF container: header, metadata key/values, tensor infos and the aligned data section
//! (GGUF versions 2 and 3, little-endian).

use std::collections::BTreeMap;

use crate::GgufError;
use crate::dequant::GgmlType;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Any unsigned integer type.
    U64(u64),
    /// Any signed integer type.
    I64(i64),
    /// f32 or f64.
    F64(f64),
    /// A boolean.
    Bool(bool),
    /// A UTF-8 string.
    Str(String),
    /// An array.
    Array(Vec<Value>),
}

impl Value {
    /// The value as an unsigned integer, if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::U64(v) => Some(*v),
            Value::I64(v) => u64::try_from(*v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::F64(v) => Some(*v),
            Value::U64(v) => Some(*v as f64),
            Value::I64(v) => Some(*v as f64),
            _ => None,
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Where a tensor lives and how it is stored.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// GGUF dims, innermost first (`[in, out]` for a linear weight).
    pub dims: Vec<u64>,
    /// Storage type.
    pub ggml_type: GgmlType,
    /// Byte offset from the start of the data section.
    pub offset: u64,
}

/// A parsed GGUF file held in memory.
#[derive(Debug)]
pub struct Gguf {
    /// Metadata key/values.
    pub metadata: BTreeMap<String, Value>,
    /// Tensor infos by name.
    pub tensors: BTreeMap<String, TensorInfo>,
    bytes: Vec<u8>,
    data_start: usize,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn err(&self, message: impl Into<String>) -> GgufError {
        GgufError::Malformed {
            offset: self.pos,
            message: message.into(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], GgufError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.bytes.len());
        let Some(end) = end else {
            return Err(self.err(format!("needs {n} more bytes but the file ends")));
        };
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, GgufError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, GgufError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn len(&mut self) -> Result<usize, GgufError> {
        let n = self.u64()?;
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= self.bytes.len())
            .ok_or_else(|| self.err(format!("length {n} exceeds the file")))
    }

    fn string(&mut self) -> Result<String, GgufError> {
        let n = self.len()?;
        let raw = self.take(n)?.to_vec();
        String::from_utf8(raw).map_err(|_| self.err("string is not UTF-8"))
    }

    fn value(&mut self, kind: u32, depth: usize) -> Result<Value, GgufError> {
        Ok(match kind {
            0 => Value::U64(u64::from(self.u8()?)),
            1 => Value::I64(i64::from(self.u8()? as i8)),
            2 => Value::U64(u64::from(self.u16()?)),
            3 => Value::I64(i64::from(self.u16()? as i16)),
            4 => Value::U64(u64::from(self.u32()?)),
            5 => Value::I64(i64::from(self.u32()? as i32)),
            // Through the shortest decimal form, so 1e-5 stored as f32 reads back as 1e-5.
            6 => Value::F64(
                f32::from_bits(self.u32()?)
                    .to_string()
                    .parse()
                    .unwrap_or(f64::NAN),
            ),
            7 => Value::Bool(self.u8()? != 0),
            8 => Value::Str(self.string()?),
            9 if depth == 0 => {
                let inner = self.u32()?;
                let n = self.len()?;
                let mut items = Vec::with_capacity(n.min(1 << 20));
                for _ in 0..n {
                    items.push(self.value(inner, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(self.u64()? as i64),
            12 => Value::F64(f64::from_bits(self.u64()?)),
            other => return Err(self.err(format!("unknown metadata value type {other}"))),
        })
    }
}

impl Gguf {
    /// Parses GGUF bytes (the caller reads the file within its own bound).
    pub fn parse(bytes: Vec<u8>) -> Result<Self, GgufError> {
        let mut c = Cursor {
            bytes: &bytes,
            pos: 0,
        };
        if c.take(4)? != b"GGUF" {
            return Err(GgufError::Malformed {
                offset: 0,
                message: "missing the GGUF magic".to_owned(),
            });
        }
        let version = c.u32()?;
        if !(2..=3).contains(&version) {
            return Err(c.err(format!("GGUF version {version} is not supported (2 or 3)")));
        }
        let n_tensors = c.len()?;
        let n_kv = c.len()?;
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = c.string()?;
            let kind = c.u32()?;
            let value = c.value(kind, 0)?;
            metadata.insert(key, value);
        }
        let mut tensors = BTreeMap::new();
        for _ in 0..n_tensors {
            let name = c.string()?;
            let n_dims = c.u32()?;
            if n_dims == 0 || n_dims > 4 {
                return Err(c.err(format!("tensor `{name}` has {n_dims} dims")));
            }
            let dims = (0..n_dims)
                .map(|_| c.u64())
                .collect::<Result<Vec<_>, _>>()?;
            let raw_type = c.u32()?;
            let ggml_type = GgmlType::from_id(raw_type).ok_or_else(|| GgufError::Tensor {
                tensor: name.clone(),
                message: format!(
                    "ggml type {raw_type} is not supported (F32, F16, BF16, Q4_0, Q4_1, Q8_0 are)"
                ),
            })?;
            let offset = c.u64()?;
            tensors.insert(
                name,
                TensorInfo {
                    dims,
                    ggml_type,
                    offset,
                },
            );
        }
        let alignment = match metadata.get("general.alignment") {
            None => 32,
            Some(v) => v
                .as_u64()
                .filter(|a| *a > 0)
                .ok_or_else(|| c.err("general.alignment must be a positive integer"))?
                as usize,
        };
        let data_start = c
            .pos
            .div_ceil(alignment)
            .checked_mul(alignment)
            .ok_or_else(|| c.err(format!("general.alignment {alignment} is too large")))?;
        let gguf = Self {
            metadata,
            tensors,
            bytes,
            data_start,
        };
        for (name, info) in &gguf.tensors {
            gguf.tensor_bytes(name, info)?;
        }
        Ok(gguf)
    }

    /// The raw stored bytes of a tensor, bounds-checked.
    pub fn tensor_bytes(&self, name: &str, info: &TensorInfo) -> Result<&[u8], GgufError> {
        let bad = |message: String| GgufError::Tensor {
            tensor: name.to_owned(),
            message,
        };
        let count = info
            .dims
            .iter()
            .try_fold(1u64, |n, d| n.checked_mul(*d))
            .ok_or_else(|| bad(format!("its dims {:?} overflow a u64 count", info.dims)))?;
        let len = info
            .ggml_type
            .storage_bytes(count)
            .ok_or_else(|| GgufError::Tensor {
                tensor: name.to_owned(),
                message: format!(
                    "{count} values do not fill whole {:?} blocks",
                    info.ggml_type
                ),
            })?;
        let range = (self.data_start as u64)
            .checked_add(info.offset)
            .and_then(|start| Some((start, start.checked_add(len)?)))
            .filter(|(_, end)| *end <= self.bytes.len() as u64)
            .ok_or_else(|| bad("its data runs past the end of the file".to_owned()))?;
        // Both bounds are within the file, so they fit in a usize.
        Ok(&self.bytes[range.0 as usize..range.1 as usize])
    }

    /// A metadata value, or an error naming the key.
    pub fn meta(&self, key: &str) -> Result<&Value, GgufError> {
        self.metadata.get(key).ok_or_else(|| GgufError::Metadata {
            key: key.to_owned(),
            message: "is missing".to_owned(),
        })
    }

    /// A metadata integer, or an error naming the key.
    pub fn meta_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.meta(key)?.as_u64().ok_or_else(|| GgufError::Metadata {
            key: key.to_owned(),
            message: "must be an integer".to_owned(),
        })
    }

    /// A metadata number, or an error naming the key.
    pub fn meta_f64(&self, key: &str) -> Result<f64, GgufError> {
        self.meta(key)?.as_f64().ok_or_else(|| GgufError::Metadata {
            key: key.to_owned(),
            message: "must be a number".to_owned(),
        })
    }

    /// A metadata string, or an error naming the key.
    pub fn meta_str(&self, key: &str) -> Result<&str, GgufError> {
        self.meta(key)?.as_str().ok_or_else(|| GgufError::Metadata {
            key: key.to_owned(),
            message: "must be a string".to_owned(),
        })
    }
}
