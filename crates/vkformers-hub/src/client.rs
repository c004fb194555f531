//! Talking to the Hub. `hf-hub` lists a repo at a revision (`/api/{kind}/{id}/revision/{rev}`);
//! file downloads go through our own `ureq` agent because hf-hub's sync download names cache
//! paths after server headers without checking them, keeps partials as `.part` (Python uses
//! `.incomplete`), appends when a server ignores `Range`, and verifies nothing.

use crate::cache::{check_etag, CacheRepo};
use crate::config::HubConfig;
use crate::error::HubError;
use crate::repo_id::{is_commit_sha, RepoRef};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Files at least this large get a progress bar.
const PROGRESS_MIN_BYTES: u64 = 8 << 20;
const MAX_REDIRECTS: usize = 10;

/// A repo file as the Hub lists it with `?blobs=true`.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct RemoteFile {
    pub rfilename: String,
    pub size: Option<u64>,
    #[serde(rename = "blobId")]
    pub blob_id: Option<String>,
    pub lfs: Option<LfsInfo>,
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct LfsInfo {
    pub sha256: String,
    pub size: u64,
}

impl RemoteFile {
    /// The cache blob name, as Python names it: the sha256 for LFS files, else the git blob id.
    fn etag(&self) -> Option<&str> {
        self.lfs.as_ref().map(|l| l.sha256.as_str()).or(self.blob_id.as_deref())
    }

    fn expected_size(&self) -> Option<u64> {
        self.lfs.as_ref().map(|l| l.size).or(self.size)
    }
}

/// A repo at one commit.
#[derive(Debug, Deserialize)]
pub(crate) struct Listing {
    pub sha: String,
    pub siblings: Vec<RemoteFile>,
}

impl Listing {
    pub fn names(&self) -> Vec<String> {
        self.siblings.iter().map(|s| s.rfilename.clone()).collect()
    }

    pub fn file(&self, name: &str) -> Option<&RemoteFile> {
        self.siblings.iter().find(|s| s.rfilename == name)
    }
}

/// An online Hub client. Its `Debug` never shows the token (hf-hub's `Api` Debug would).
pub(crate) struct Hub {
    config: HubConfig,
    api: hf_hub::api::sync::Api,
    agent: ureq::Agent,
}

impl fmt::Debug for Hub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hub").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Hub {
    pub fn new(config: &HubConfig) -> Result<Hub, HubError> {
        let api = hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::new(config.cache_dir.clone()))
            .with_endpoint(config.endpoint.clone())
            .with_token(config.token.as_ref().map(|t| t.secret().to_string()))
            .with_progress(false)
            .build()
            .map_err(|e| HubError::Http { url: config.endpoint.clone(), message: e.to_string() })?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // Redirects are followed in `get`, which decides where the token may go.
            .max_redirects(0)
            .timeout_connect(Some(Duration::from_secs(30)))
            // Headers must come within a minute; a body may take as long as it takes (a cut
            // connection surfaces as a read error and the download resumes next time).
            .timeout_recv_response(Some(Duration::from_secs(60)))
            .build()
            .into();
        Ok(Hub { config: config.clone(), api, agent })
    }

    /// The repo's commit sha and files at `repo.revision`.
    pub fn listing(&self, repo: &RepoRef) -> Result<Listing, HubError> {
        let request = self.api.repo(repo.hf()).info_request().query("blobs", "true");
        let url = format!("{}/api/{}", self.config.endpoint, repo.hf().api_url());
        let mut response = match request.call() {
            Ok(r) => r,
            Err(ureq::Error::StatusCode(status)) => return Err(status_error(repo, status, &url)),
            Err(e) => {
                let message = format!("{e} (check the network and HF_ENDPOINT; HF_HUB_OFFLINE=1 uses only the cache)");
                return Err(HubError::Http { url, message });
            }
        };
        let listing: Listing = response
            .body_mut()
            .read_json()
            .map_err(|e| HubError::Http { url: url.clone(), message: format!("bad repo listing: {e}") })?;
        if !is_commit_sha(&listing.sha) {
            return Err(HubError::Http { url, message: format!("listing has no commit sha (`{}`)", listing.sha) });
        }
        Ok(listing)
    }

    /// `file` of `repo` at commit `sha` in the cache, downloaded (or resumed) when missing, its
    /// size and sha256 checked against the listing; returns the snapshot entry.
    pub fn fetch(&self, repo: &RepoRef, sha: &str, file: &RemoteFile) -> Result<PathBuf, HubError> {
        crate::cache::check_repo_path(&repo.id, &file.rfilename)?;
        let cache = CacheRepo::new(&self.config.cache_dir, repo);
        let entry = cache.snapshot(sha).join(&file.rfilename);
        if entry.is_file() {
            return Ok(entry);
        }
        let etag = file.etag().ok_or_else(|| HubError::Http {
            url: self.config.endpoint.clone(),
            message: format!("the listing of `{}` gives no blob id for `{}`", repo.id, file.rfilename),
        })?;
        check_etag(&repo.id, etag)?;
        let blob = cache.blob(etag);
        let _lock = cache.lock_blob(etag, &file.rfilename)?;
        if !blob_is_complete(&blob, file.expected_size()) {
            self.download_blob(repo, sha, file, etag, &cache)?;
        }
        cache.link(sha, &file.rfilename, etag)
    }

    fn download_blob(
        &self,
        repo: &RepoRef,
        sha: &str,
        file: &RemoteFile,
        etag: &str,
        cache: &CacheRepo,
    ) -> Result<(), HubError> {
        let part = cache.incomplete(etag);
        std::fs::create_dir_all(part.parent().unwrap()).map_err(HubError::io(&part))?;
        let url = self.file_url(repo, sha, &file.rfilename);
        let mut start = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
        if file.expected_size().is_some_and(|size| start > size) {
            start = 0;
        }
        let expect = Expected { repo, sha, etag };
        let response = self.get(&url, start, &expect)?;
        let status = response.status().as_u16();
        let start = match status {
            206 => start,
            200 => 0, // the server ignored Range: start over
            416 => return self.restart(repo, sha, file, etag, cache, &part),
            _ => return Err(status_error(repo, status, &url)),
        };
        let size = file.expected_size().or_else(|| content_length(&response).map(|n| n + start)).unwrap_or(0);
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(start > 0)
            .write(true)
            .truncate(start == 0)
            .open(&part)
            .map_err(HubError::io(&part))?;
        let progress = self.progress_bar(&file.rfilename, size, start);
        let mut reader = progress.wrap_read(response.into_body().into_reader());
        let copied = copy_to(&mut reader, &mut out, &part);
        progress.finish_and_clear();
        if let Err(message) = copied {
            let got = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
            let (id, name) = (repo.id.clone(), file.rfilename.clone());
            return Err(HubError::Interrupted { id, name, got, size, message });
        }
        drop(out);
        verify(repo, file, &part)?;
        let blob = cache.blob(etag);
        std::fs::rename(&part, &blob).map_err(HubError::io(&blob))
    }

    /// The server says our partial file does not fit the blob: drop it and download from scratch.
    fn restart(
        &self,
        repo: &RepoRef,
        sha: &str,
        file: &RemoteFile,
        etag: &str,
        cache: &CacheRepo,
        part: &Path,
    ) -> Result<(), HubError> {
        std::fs::remove_file(part).map_err(HubError::io(part))?;
        self.download_blob(repo, sha, file, etag, cache)
    }

    /// GET `url` (from byte `start`), following redirects ourselves: the token goes only to the
    /// Hub's own origin (scheme, host and port), never to the CDN a file redirects to. Every Hub
    /// response on the way must agree with the listing (commit and blob etag).
    fn get(&self, url: &str, start: u64, expect: &Expected) -> Result<ureq::http::Response<ureq::Body>, HubError> {
        let mut url = url.to_string();
        for _ in 0..MAX_REDIRECTS {
            let on_hub = same_origin(&self.config.endpoint, &url);
            let response = self.send(&url, start, on_hub)?;
            if on_hub {
                check_headers(expect, &response)?;
            }
            let location = response.headers().get("location").and_then(|v| v.to_str().ok());
            match location {
                Some(location) if response.status().is_redirection() => url = join_location(&url, location)?,
                _ => return Ok(response),
            }
        }
        Err(HubError::Http { url, message: format!("more than {MAX_REDIRECTS} redirects") })
    }

    fn send(&self, url: &str, start: u64, with_token: bool) -> Result<ureq::http::Response<ureq::Body>, HubError> {
        let mut request = self.agent.get(url);
        if let Some(token) = self.config.token.as_ref().filter(|_| with_token) {
            request = request.header("Authorization", format!("Bearer {}", token.secret()));
        }
        // Raw bytes only: sizes, sha256 and Range offsets all refer to the file as stored.
        request = request.header("Accept-Encoding", "identity");
        if start > 0 {
            request = request.header("Range", format!("bytes={start}-"));
        }
        request.call().map_err(|e| HubError::Http { url: url.to_string(), message: e.to_string() })
    }

    /// `{endpoint}/{prefix}{id}/resolve/{sha}/{file}`: pinned to the commit so every file of one
    /// resolution comes from the same commit even if the branch moves meanwhile.
    fn file_url(&self, repo: &RepoRef, sha: &str, name: &str) -> String {
        let name: Vec<String> = name.split('/').map(percent_encode).collect();
        format!("{}/{}{}/resolve/{sha}/{}", self.config.endpoint, repo.kind.url_prefix(), repo.id, name.join("/"))
    }

    fn progress_bar(&self, name: &str, size: u64, start: u64) -> indicatif::ProgressBar {
        if !self.config.progress || size < PROGRESS_MIN_BYTES {
            return indicatif::ProgressBar::hidden();
        }
        // ProgressDrawTarget::stderr draws nothing when stderr is not a terminal.
        let bar = indicatif::ProgressBar::with_draw_target(Some(size), indicatif::ProgressDrawTarget::stderr());
        let style = indicatif::ProgressStyle::with_template(
            "{msg} [{wide_bar}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("valid progress template");
        bar.set_style(style);
        bar.set_message(name.to_string());
        bar.set_position(start);
        bar
    }
}

fn status_error(repo: &RepoRef, status: u16, url: &str) -> HubError {
    match status {
        401 | 403 => HubError::Unauthorized { id: repo.id.clone(), status },
        404 => HubError::RepoNotFound { id: repo.id.clone(), revision: repo.revision.clone() },
        _ => HubError::Http { url: url.to_string(), message: format!("HTTP {status}") },
    }
}

/// What a file's Hub responses must say: the commit we listed, and the blob the listing named.
struct Expected<'a> {
    repo: &'a RepoRef,
    sha: &'a str,
    etag: &'a str,
}

fn check_headers(expect: &Expected, response: &ureq::http::Response<ureq::Body>) -> Result<(), HubError> {
    let header = |k: &str| response.headers().get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    let mismatch = |what: String| HubError::Http { url: format!("{} file", expect.repo.id), message: what };
    if let Some(commit) = header("x-repo-commit") {
        if commit != expect.sha {
            return Err(mismatch(format!("served from commit {commit}, expected {}", expect.sha)));
        }
    }
    if let Some(served) = header("x-linked-etag").or_else(|| header("etag")) {
        let served = served.trim_start_matches("W/").trim_matches('"').to_string();
        // Only a Hub-style etag (a git blob id or sha256) is comparable; size and sha256 are
        // checked after the download anyway.
        if check_etag(&expect.repo.id, &served).is_ok() && served != expect.etag {
            return Err(mismatch(format!("served blob {served}, the listing said {}", expect.etag)));
        }
    }
    Ok(())
}

/// Scheme, host and port of a URL (ports defaulted by scheme), to compare origins.
fn origin(url: &str) -> Option<(String, String, u16)> {
    let uri: ureq::http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let port = uri.port_u16().unwrap_or(if scheme == "https" { 443 } else { 80 });
    Some((scheme, uri.host()?.to_ascii_lowercase(), port))
}

fn same_origin(a: &str, b: &str) -> bool {
    origin(a).is_some_and(|o| Some(o) == origin(b))
}

/// The URL a `Location` header points to: absolute, or a path on the current origin.
fn join_location(current: &str, location: &str) -> Result<String, HubError> {
    if location.starts_with("http://") || location.starts_with("https://") {
        return Ok(location.to_string());
    }
    let bad = || HubError::Http { url: current.to_string(), message: format!("unusable redirect to `{location}`") };
    let uri: ureq::http::Uri = current.parse().map_err(|_| bad())?;
    match (location.starts_with('/'), uri.scheme_str(), uri.authority()) {
        (true, Some(scheme), Some(authority)) => Ok(format!("{scheme}://{authority}{location}")),
        _ => Err(bad()),
    }
}

fn content_length(response: &ureq::http::Response<ureq::Body>) -> Option<u64> {
    response.headers().get("content-length")?.to_str().ok()?.parse().ok()
}

fn blob_is_complete(blob: &Path, size: Option<u64>) -> bool {
    match (std::fs::metadata(blob), size) {
        (Ok(m), Some(size)) => m.is_file() && m.len() == size,
        (Ok(m), None) => m.is_file(),
        _ => false,
    }
}

fn copy_to(reader: &mut impl Read, out: &mut std::fs::File, part: &Path) -> Result<(), String> {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = reader.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(|e| format!("{}: {e}", part.display()))?;
    }
    out.sync_all().map_err(|e| format!("{}: {e}", part.display()))
}

/// Size (always, when listed) and sha256 (LFS files) of a finished download; a bad file is removed.
fn verify(repo: &RepoRef, file: &RemoteFile, part: &Path) -> Result<(), HubError> {
    let corrupt = |what: String| {
        let _ = std::fs::remove_file(part);
        HubError::Corrupt { id: repo.id.clone(), name: file.rfilename.clone(), what }
    };
    let len = std::fs::metadata(part).map_err(HubError::io(part))?.len();
    if let Some(size) = file.expected_size() {
        if len != size {
            return Err(corrupt(format!("{len} bytes, the Hub lists {size}")));
        }
    }
    if let Some(lfs) = &file.lfs {
        let got = sha256_file(part)?;
        if !got.eq_ignore_ascii_case(&lfs.sha256) {
            return Err(corrupt(format!("sha256 {got}, the Hub lists {}", lfs.sha256)));
        }
    }
    Ok(())
}

pub(crate) fn sha256_file(path: &Path) -> Result<String, HubError> {
    let mut f = std::fs::File::open(path).map_err(HubError::io(path))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut f, &mut hasher).map_err(HubError::io(path))?;
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Percent-encodes one path segment of a repo file name (RFC 3986 unreserved characters stay).
fn percent_encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
