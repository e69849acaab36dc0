//! TensorBoard event files: every metrics row as scalars (`train/<TRL name>`, as TRL's runs log
//! them), so `tensorboard --logdir RUN/tensorboard` shows a run's curves, and markdown for the
//! text plugin (a step's completions). TFRecord framing
//! (length, its masked CRC-32C, the record, its masked CRC-32C) around `Event` protos encoded
//! here: three messages and five fields do not need a protobuf toolchain.

use std::{
    fs::File,
    io::Write,
    path::{Path, PathBuf},
};

use hr_files::IoResultExt;
use serde_json::Value;

use crate::TrainError;

/// Appends events to one `events.out.tfevents.*` file.
pub(crate) struct EventWriter {
    file: File,
    path: PathBuf,
}

impl EventWriter {
    /// A new event file in `dir` (created if missing), opened with the file-version event.
    /// Whether `dir` held event files before is returned too (a fresh folder gets the history).
    pub(crate) fn create(dir: &Path) -> Result<(Self, bool), TrainError> {
        std::fs::create_dir_all(dir).at("create", dir)?;
        let had_events = std::fs::read_dir(dir)
            .at("list", dir)?
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().contains("tfevents"));
        let now = wall_time();
        let stem = format!(
            "events.out.tfevents.{}.hessian-recipes.{}",
            now as u64,
            std::process::id()
        );
        let path = (0..)
            .map(|n| match n {
                0 => dir.join(&stem),
                n => dir.join(format!("{stem}.{n}")),
            })
            .find(|p| !p.exists())
            .unwrap_or_else(|| dir.join(&stem));
        let file = File::create(&path).at("create", &path)?;
        let mut writer = Self { file, path };
        writer.record(&event(now, 0, &file_version()))?;
        Ok((writer, had_events))
    }

    /// Writes the numbers of a metrics row (`step` and the metric names) as scalars at its step.
    pub(crate) fn row(&mut self, row: &Value) -> Result<(), TrainError> {
        let Some(fields) = row.as_object() else {
            return Ok(());
        };
        let step = row.get("step").and_then(Value::as_i64).unwrap_or(0);
        let mut summary = Vec::new();
        for (name, value) in fields {
            if let (true, Some(v)) = (name != "step", value.as_f64()) {
                let mut val = Vec::new();
                bytes_field(&mut val, 1, format!("train/{name}").as_bytes());
                val.push(2 << 3 | 5); // simple_value: float
                val.extend_from_slice(&(v as f32).to_le_bytes());
                bytes_field(&mut summary, 1, &val);
            }
        }
        let mut what = Vec::new();
        bytes_field(&mut what, 5, &summary);
        self.record(&event(wall_time(), step, &what))
    }

    /// Writes `markdown` as the text plugin's summary `tag` at `step` (a scalar string tensor).
    pub(crate) fn text(&mut self, step: u64, tag: &str, markdown: &str) -> Result<(), TrainError> {
        let mut plugin = Vec::new();
        bytes_field(&mut plugin, 1, b"text"); // PluginData.plugin_name
        let mut metadata = Vec::new();
        bytes_field(&mut metadata, 1, &plugin); // SummaryMetadata.plugin_data
        let mut tensor = vec![1 << 3, 7]; // TensorProto.dtype: DT_STRING
        bytes_field(&mut tensor, 2, &[]); // tensor_shape: a scalar
        bytes_field(&mut tensor, 8, markdown.as_bytes()); // string_val
        let mut val = Vec::new();
        bytes_field(&mut val, 1, tag.as_bytes());
        bytes_field(&mut val, 9, &metadata);
        bytes_field(&mut val, 8, &tensor);
        let mut summary = Vec::new();
        bytes_field(&mut summary, 1, &val);
        let mut what = Vec::new();
        bytes_field(&mut what, 5, &summary);
        self.record(&event(wall_time(), step as i64, &what))
    }

    fn record(&mut self, data: &[u8]) -> Result<(), TrainError> {
        let len = (data.len() as u64).to_le_bytes();
        let mut framed = Vec::with_capacity(data.len() + 16);
        framed.extend_from_slice(&len);
        framed.extend_from_slice(&masked_crc(&len).to_le_bytes());
        framed.extend_from_slice(data);
        framed.extend_from_slice(&masked_crc(data).to_le_bytes());
        self.file
            .write_all(&framed)
            .and_then(|()| self.file.flush())
            .at("write", &self.path)
            .map_err(Into::into)
    }
}

fn wall_time() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `Event.file_version` (field 3), the first event of every file.
fn file_version() -> Vec<u8> {
    let mut what = Vec::new();
    bytes_field(&mut what, 3, b"brain.Event:2");
    what
}

/// An `Event`: `wall_time` (field 1, double), `step` (field 2, int64) and `what` (encoded).
fn event(wall_time: f64, step: i64, what: &[u8]) -> Vec<u8> {
    let mut out = vec![1 << 3 | 1];
    out.extend_from_slice(&wall_time.to_le_bytes());
    out.push(2 << 3);
    varint(&mut out, step as u64);
    out.extend_from_slice(what);
    out
}

fn bytes_field(out: &mut Vec<u8>, field: u8, bytes: &[u8]) {
    out.push(field << 3 | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// TFRecord's masked CRC-32C.
fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits a TFRecord file into its records, checking both CRCs of each.
    fn records(bytes: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let len_bytes = &bytes[at..at + 8];
            let len = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes")) as usize;
            let crc = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
            assert_eq!(crc(&bytes[at + 8..at + 12]), masked_crc(len_bytes));
            let data = &bytes[at + 12..at + 12 + len];
            assert_eq!(crc(&bytes[at + 12 + len..at + 16 + len]), masked_crc(data));
            out.push(data);
            at += 16 + len;
        }
        out
    }

    #[test]
    fn records_are_framed_with_masked_crc32c_and_hold_the_scalars() {
        // The CRC-32C check value, and TFRecord's mask of it.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        let dir = tempfile::tempdir().expect("tmp");
        let (mut w, had) = EventWriter::create(dir.path()).expect("create");
        assert!(!had);
        w.row(&serde_json::json!({"step": 300, "reward": 0.5, "note": "text"}))
            .expect("row");
        let bytes = std::fs::read(&w.path).expect("read");
        let recs = records(&bytes);
        assert_eq!(recs.len(), 2);
        assert!(recs[0].ends_with(b"brain.Event:2"));
        // step 300 as a varint, then the summary with one value: tag and float 0.5.
        assert_eq!(recs[1][9..12], [0x10, 0xac, 0x02]);
        assert!(recs[1].windows(12).any(|w| w == b"train/reward"));
        assert!(recs[1].ends_with(&[0x15, 0, 0, 0, 0x3f]));
        assert!(
            !recs[1].windows(4).any(|w| w == b"note"),
            "text is no scalar"
        );
        w.text(300, "completions", "| a |\n|---|\n| b |")
            .expect("text");
        let bytes = std::fs::read(&w.path).expect("read");
        let text = records(&bytes)[2];
        assert!(text.windows(11).any(|w| w == b"completions"));
        // The text plugin's metadata, then the string tensor: dtype 7, a scalar shape, the value.
        let metadata = [0x4a, 8, 0x0a, 6, 0x0a, 4, b't', b'e', b'x', b't'];
        assert!(text.windows(10).any(|w| w == metadata));
        assert!(text.ends_with(b"\x08\x07\x12\x00\x42\x11| a |\n|---|\n| b |"));
        let (_, had) = EventWriter::create(dir.path()).expect("again");
        assert!(had, "the folder already held events");
    }
}
