//! Embeds every JSON schema under `schemas/` into the library, so the build and the binary never
//! read `../shared` or any file outside the crate at run time.

use std::{env, fs, path::Path};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
    let mut files = Vec::new();
    collect(&root, &mut files);
    files.sort();
    let mut out =
        String::from("/// Every embedded schema document: (path under `schemas/`, text).\n");
    out.push_str("pub(crate) const EMBEDDED: &[(&str, &str)] = &[\n");
    for file in &files {
        let rel = file.strip_prefix(&root).expect("under schemas/");
        out.push_str(&format!(
            "    ({:?}, include_str!({:?})),\n",
            rel.to_string_lossy(),
            file.to_string_lossy()
        ));
    }
    out.push_str("];\n");
    let dest = Path::new(&env::var("OUT_DIR").expect("OUT_DIR")).join("embedded_schemas.rs");
    fs::write(dest, out).expect("write embedded_schemas.rs");
    println!("cargo::rerun-if-changed=schemas");
}

fn collect(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).expect("read schemas dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "json") {
            files.push(path);
        }
    }
}
