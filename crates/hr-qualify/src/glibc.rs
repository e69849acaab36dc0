//! Which glibc a binary needs and which one this machine has: the newest `GLIBC_x.y` version
//! its dynamic symbols require (the ELF `.gnu.version_r` section), against `getconf
//! GNU_LIBC_VERSION`. A binary linked on a newer system than the job's image does not start
//! there ("version `GLIBC_2.39' not found"); `cluster preflight`, run in a shell of the pinned
//! image, says so before a submission.

use std::path::Path;

use object::read::elf::ElfFile64;

/// A glibc version, `(major, minor)`.
pub(crate) type Version = (u32, u32);

/// `2.34` from `GLIBC_2.34`, `glibc 2.34` or `2.34`.
fn parse(text: &str) -> Option<Version> {
    let digits = text
        .trim()
        .trim_start_matches("GLIBC_")
        .trim_start_matches("glibc ");
    let mut parts = digits.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The newest glibc version the ELF binary at `path` requires; `None` for one that names none
/// (static, or not linked against glibc) and for a file that is not ELF (a script).
pub(crate) fn required(path: &Path) -> Result<Option<Version>, String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !data.starts_with(b"\x7fELF") {
        return Ok(None);
    }
    let not_elf =
        |e: object::read::Error| format!("{}: not a 64-bit ELF binary ({e})", path.display());
    let file = ElfFile64::<object::Endianness>::parse(data.as_slice()).map_err(not_elf)?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let Some((mut needs, link)) = sections
        .gnu_verneed(endian, data.as_slice())
        .map_err(not_elf)?
    else {
        return Ok(None);
    };
    let strings = sections
        .strings(endian, data.as_slice(), link)
        .map_err(not_elf)?;
    let mut newest = None;
    while let Some((_, mut versions)) = needs.next().map_err(not_elf)? {
        while let Some(version) = versions.next().map_err(not_elf)? {
            let name = version.name(endian, strings).map_err(not_elf)?;
            let version = std::str::from_utf8(name)
                .ok()
                .filter(|n| n.starts_with("GLIBC_"))
                .and_then(parse);
            newest = newest.max(version);
        }
    }
    Ok(newest)
}

/// This machine's glibc, from `getconf GNU_LIBC_VERSION`.
pub(crate) fn this_machine() -> Option<Version> {
    let out = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    parse(&String::from_utf8_lossy(&out.stdout))
}

/// `2.34`.
pub(crate) fn show((major, minor): Version) -> String {
    format!("{major}.{minor}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_in_every_spelling_and_order_by_number() {
        assert_eq!(parse("GLIBC_2.34"), Some((2, 34)));
        assert_eq!(parse("glibc 2.36\n"), Some((2, 36)));
        assert_eq!(parse("GLIBC_PRIVATE"), None);
        assert!(
            parse("GLIBC_2.4") < parse("GLIBC_2.34"),
            "2.4 is older than 2.34"
        );
    }

    #[test]
    fn this_test_binary_needs_no_newer_glibc_than_the_machine_it_runs_on() {
        let exe = std::env::current_exe().expect("exe");
        let need = required(&exe)
            .expect("an ELF binary")
            .expect("linked against glibc");
        let have = this_machine().expect("getconf names this machine's glibc");
        assert!(need.0 == 2 && need <= have, "{need:?} vs {have:?}");
        assert_eq!(
            required(Path::new("Cargo.toml")),
            Ok(None),
            "a script or text"
        );
        let dir = tempfile::tempdir().expect("tmp");
        let torn = dir.path().join("torn");
        let bytes = std::fs::read(&exe).expect("read");
        std::fs::write(&torn, &bytes[..64]).expect("write");
        let err = required(&torn).expect_err("a torn ELF");
        assert!(err.contains("not a 64-bit ELF binary"), "{err}");
    }
}
