//! Durable file writes, spelled once: a JSON-lines append that survives a crash mid-line (the
//! torn tail is cut before the next line, and readers take only complete lines), an atomic
//! replace (temporary file, fsync, rename, folder fsync), an atomic create that never replaces,
//! and a folder fsync.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{IoError, IoResultExt};

/// Appends `line` and a newline to `path` (created when absent) and fsyncs it. A torn last line
/// left by a crash mid-append is cut off first, so the new line starts on a line of its own.
pub fn append_line(path: &Path, line: &str) -> Result<(), IoError> {
    cut_torn_tail(path)?;
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .at("open", path)?;
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    file.write_all(&bytes)
        .and_then(|()| file.sync_all())
        .at("write", path)
}

/// Truncates `path` after its last newline (nothing when it is absent, empty, or ends on one).
pub fn cut_torn_tail(path: &Path) -> Result<(), IoError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(IoError::new("read", path, e)),
    };
    let keep = complete_len(&bytes);
    if keep < bytes.len() {
        let file = OpenOptions::new().write(true).open(path).at("open", path)?;
        file.set_len(keep as u64)
            .and_then(|()| file.sync_all())
            .at("truncate", path)?;
    }
    Ok(())
}

/// The complete lines of a JSON-lines text: a torn last line (no newline after it) is left out.
pub fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    text[..complete_len(text.as_bytes())].lines()
}

fn complete_len(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1)
}

/// Replaces `path` with `bytes` atomically and durably: `<path>.tmp` written and fsynced, renamed
/// over `path`, then the folder fsynced. A crash leaves the old file or the new one, never a mix.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    let tmp = synced_beside(path, bytes)?;
    std::fs::rename(&tmp, path).at("rename", path)?;
    fsync_parent(path)
}

/// Writes `bytes` to `path` as a new file, atomically and durably, refusing to replace anything
/// there (`AlreadyExists`): `<path>.tmp` written and fsynced, hard-linked to `path` (which fails
/// if `path` exists, with no window between check and write), the temporary name removed, then
/// the folder fsynced. A crash leaves no file at `path` or the whole one.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    let tmp = synced_beside(path, bytes)?;
    let linked = std::fs::hard_link(&tmp, path).at("create", path);
    std::fs::remove_file(&tmp).at("remove", &tmp)?;
    linked?;
    fsync_parent(path)
}

/// `bytes` written and fsynced to `<path>.tmp`, whose path is returned.
fn synced_beside(path: &Path, bytes: &[u8]) -> Result<PathBuf, IoError> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_owned();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let mut file = File::create(&tmp).at("create", &tmp)?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .at("write", &tmp)?;
    Ok(tmp)
}

/// Fsyncs the folder holding `path` (the working folder for a bare name).
fn fsync_parent(path: &Path) -> Result<(), IoError> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => fsync_dir(dir),
        _ => fsync_dir(Path::new(".")),
    }
}

/// Fsyncs a folder, so a rename or a new entry in it survives a crash.
pub fn fsync_dir(dir: &Path) -> Result<(), IoError> {
    File::open(dir).and_then(|d| d.sync_all()).at("fsync", dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_append_after_a_torn_line_starts_clean_and_readers_skip_the_torn_tail() {
        let dir = std::env::temp_dir().join(format!("hr-files-durable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.jsonl");
        append_line(&path, r#"{"n":1}"#).unwrap();
        OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(br#"{"n":"#)
            .unwrap();
        let torn = std::fs::read_to_string(&path).unwrap();
        assert_eq!(complete_lines(&torn).collect::<Vec<_>>(), [r#"{"n":1}"#]);
        append_line(&path, r#"{"n":2}"#).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"n\":1}\n{\"n\":2}\n"
        );
        write_atomic(&dir.join("b.json"), b"one").unwrap();
        write_atomic(&dir.join("b.json"), b"two").unwrap();
        assert_eq!(std::fs::read(dir.join("b.json")).unwrap(), b"two");
        assert!(!dir.join("b.json.tmp").exists());
        write_new(&dir.join("c.json"), b"first").unwrap();
        let again = write_new(&dir.join("c.json"), b"second").unwrap_err();
        assert_eq!(again.source.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(dir.join("c.json")).unwrap(), b"first");
        assert!(!dir.join("c.json.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
