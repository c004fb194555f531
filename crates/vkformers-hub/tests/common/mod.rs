//! A fake Hub on loopback that answers the way huggingface.co does: repo listings at
//! `/api/{models|datasets}/{id}/revision/{rev}?blobs=true`, files at `/{id}/resolve/{rev}/{file}`
//! (datasets under `/datasets/`) with `X-Repo-Commit` and `ETag`, LFS files as a 302 redirect to
//! `/cdn/{sha256}` with `X-Linked-Etag`, `Range` requests answered with 206, and gated repos that
//! answer 401 without the right `Authorization: Bearer` token.
#![allow(dead_code)]

use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// A file of one commit. `lfs` files are served through the CDN redirect, like weights on the Hub.
#[derive(Clone)]
pub struct FakeFile {
    pub name: String,
    pub data: Vec<u8>,
    pub lfs: bool,
    /// Bytes actually served instead of `data` (to serve a corrupt file); the listing describes `data`.
    pub served: Option<Vec<u8>>,
    /// A blob id the listing gives instead of the real one (to test hostile listings).
    pub listed_blob: Option<String>,
}

impl FakeFile {
    pub fn new(name: &str, data: &[u8]) -> FakeFile {
        let lfs = name.ends_with(".safetensors") || name.ends_with(".parquet") || name.ends_with(".bin");
        FakeFile { name: name.into(), data: data.to_vec(), lfs, served: None, listed_blob: None }
    }

    /// The git blob id the Hub reports for non-LFS files (here a stand-in: 40 hex of the sha256).
    pub fn oid(&self) -> String {
        sha256_hex(&self.data)[..40].to_string()
    }

    /// The name Python gives this file's blob in the cache.
    pub fn etag(&self) -> String {
        if self.lfs {
            sha256_hex(&self.data)
        } else {
            self.oid()
        }
    }

    fn served_bytes(&self) -> &[u8] {
        self.served.as_deref().unwrap_or(&self.data)
    }
}

#[derive(Clone)]
pub struct FakeRepo {
    /// `models` or `datasets`.
    pub kind: &'static str,
    pub id: String,
    /// Branch or tag name -> commit sha.
    pub refs: HashMap<String, String>,
    pub commits: HashMap<String, Vec<FakeFile>>,
    /// Private or gated: file requests need `Authorization: Bearer {token}`.
    pub token: Option<String>,
    /// Private (true): the listing needs the token too. Gated (false): anyone may list it.
    pub private: bool,
}

impl FakeRepo {
    pub fn new(kind: &'static str, id: &str) -> FakeRepo {
        FakeRepo { kind, id: id.into(), refs: HashMap::new(), commits: HashMap::new(), token: None, private: true }
    }

    /// Adds a commit with `files` that `branch` points to.
    pub fn commit(mut self, branch: &str, sha: &str, files: Vec<FakeFile>) -> FakeRepo {
        assert_eq!(sha.len(), 40);
        self.refs.insert(branch.into(), sha.into());
        self.commits.insert(sha.into(), files);
        self
    }

    fn sha_of(&self, rev: &str) -> Option<String> {
        self.refs.get(rev).cloned().or_else(|| self.commits.contains_key(rev).then(|| rev.to_string()))
    }
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

#[derive(Default)]
struct State {
    repos: Vec<FakeRepo>,
    seen: Vec<Seen>,
    /// CDN blobs (sha256) whose next download stops halfway through.
    cut_next: HashSet<String>,
}

pub struct FakeHub {
    pub endpoint: String,
    state: Arc<Mutex<State>>,
}

impl FakeHub {
    /// Starts the Hub and its CDN, on two loopback ports: the CDN is another origin, as on the
    /// real Hub, so clients neither send it the token nor expect Hub headers from it.
    pub fn start(repos: Vec<FakeRepo>) -> FakeHub {
        let hub = TcpListener::bind("127.0.0.1:0").unwrap();
        let cdn = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", hub.local_addr().unwrap());
        let cdn_endpoint = format!("http://{}", cdn.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State { repos, ..State::default() }));
        for listener in [hub, cdn] {
            let (state, cdn_endpoint) = (state.clone(), cdn_endpoint.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let (state, cdn_endpoint) = (state.clone(), cdn_endpoint.clone());
                    std::thread::spawn(move || serve(stream, &state, &cdn_endpoint));
                }
            });
        }
        FakeHub { endpoint, state }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// The next download of the blob with this sha256 sends its headers, half its bytes, then hangs up.
    pub fn cut_next_download(&self, sha256: &str) {
        self.state.lock().unwrap().cut_next.insert(sha256.into());
    }
}

struct Request {
    head_only: bool,
    path: String,
    query: String,
    headers: HashMap<String, String>,
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut words = line.split_whitespace();
    let head_only = words.next()? == "HEAD";
    let target = words.next()?.to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let (path, query) =
        target.split_once('?').map(|(p, q)| (p.to_string(), q.to_string())).unwrap_or((target, String::new()));
    Some(Request { head_only, path, query, headers })
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Stop after this many body bytes (a dropped connection).
    cut_at: Option<usize>,
}

impl Reply {
    fn new(status: u16, body: Vec<u8>) -> Reply {
        Reply { status, headers: Vec::new(), body, cut_at: None }
    }

    fn header(mut self, k: &str, v: impl Into<String>) -> Reply {
        self.headers.push((k.into(), v.into()));
        self
    }

    fn error(status: u16, message: &str) -> Reply {
        Reply::new(status, format!("{{\"error\":\"{message}\"}}").into_bytes())
    }
}

fn serve(mut stream: TcpStream, state: &Mutex<State>, cdn: &str) {
    let Some(req) = read_request(&stream) else { return };
    let local = stream.local_addr().map(|a| format!("http://{a}")).unwrap_or_default();
    let on_cdn = local == cdn;
    let reply = {
        let mut st = state.lock().unwrap();
        st.seen.push(Seen {
            path: req.path.clone(),
            range: req.headers.get("range").cloned(),
            authorization: req.headers.get("authorization").cloned(),
        });
        if on_cdn {
            serve_cdn(&req, &mut st)
        } else {
            route(&req, &mut st, cdn)
        }
    };
    let mut head =
        format!("HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n", reply.status, reply.body.len());
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let body = if req.head_only { &[][..] } else { &reply.body[..reply.cut_at.unwrap_or(reply.body.len())] };
    let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(body));
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn route(req: &Request, st: &mut State, cdn: &str) -> Reply {
    let path = percent_decode(&req.path);
    if let Some(rest) = req.path.strip_prefix("/api/") {
        let (kind, rest) = rest.split_once('/').unwrap_or(("", ""));
        let Some((id, rev)) = rest.split_once("/revision/") else { return Reply::error(404, "no route") };
        return listing(req, st, kind, id, &percent_decode(rev));
    }
    let (kind, rest) = match path.strip_prefix("/datasets/") {
        Some(rest) => ("datasets", rest),
        None => ("models", &path[1..]),
    };
    let Some((id, rest)) = rest.split_once("/resolve/") else { return Reply::error(404, "no route") };
    let Some((rev, file)) = rest.split_once('/') else { return Reply::error(404, "no file") };
    resolve(req, st, cdn, kind, id, rev, file)
}

/// The repo, or the Hub's 404/401 answer; `listing` requests of gated (not private) repos need no token.
fn find<'a>(st: &'a State, req: &Request, kind: &str, id: &str, listing: bool) -> Result<&'a FakeRepo, Reply> {
    let repo = st
        .repos
        .iter()
        .find(|r| r.kind == kind && r.id == id)
        .ok_or_else(|| Reply::error(404, "Repository not found"))?;
    if let Some(token) = repo.token.as_ref().filter(|_| repo.private || !listing) {
        if req.headers.get("authorization") != Some(&format!("Bearer {token}")) {
            return Err(Reply::error(401, "Access to this repo is restricted"));
        }
    }
    Ok(repo)
}

fn listing(req: &Request, st: &State, kind: &str, id: &str, rev: &str) -> Reply {
    let repo = match find(st, req, kind, id, true) {
        Ok(r) => r,
        Err(reply) => return reply,
    };
    assert!(req.query.contains("blobs=true"), "the client asks for blob ids");
    let Some(sha) = repo.sha_of(rev) else { return Reply::error(404, "Revision not found") };
    let siblings: Vec<serde_json::Value> = repo.commits[&sha]
        .iter()
        .map(|f| {
            let mut s = serde_json::json!({
                "rfilename": f.name,
                "size": f.data.len(),
                "blobId": f.listed_blob.clone().unwrap_or_else(|| f.oid()),
            });
            if f.lfs {
                let sha256 = f.listed_blob.clone().unwrap_or_else(|| sha256_hex(&f.data));
                s["lfs"] = serde_json::json!({"sha256": sha256, "size": f.data.len(), "pointerSize": 134});
            }
            s
        })
        .collect();
    let body = serde_json::json!({"id": id, "sha": sha, "siblings": siblings});
    Reply::new(200, body.to_string().into_bytes()).header("Content-Type", "application/json")
}

fn resolve(req: &Request, st: &State, cdn: &str, kind: &str, id: &str, rev: &str, file: &str) -> Reply {
    let repo = match find(st, req, kind, id, false) {
        Ok(r) => r,
        Err(reply) => return reply,
    };
    let Some(sha) = repo.sha_of(rev) else { return Reply::error(404, "Revision not found") };
    let Some(f) = repo.commits[&sha].iter().find(|f| f.name == file) else {
        return Reply::error(404, "Entry not found");
    };
    if f.lfs {
        let sha256 = sha256_hex(&f.data);
        return Reply::new(302, Vec::new())
            .header("Location", format!("{cdn}/cdn/{sha256}"))
            .header("X-Repo-Commit", sha.clone())
            .header("X-Linked-Etag", format!("\"{sha256}\""))
            .header("X-Linked-Size", f.data.len().to_string());
    }
    ranged(req, f.served_bytes()).header("ETag", format!("\"{}\"", f.oid())).header("X-Repo-Commit", sha)
}

fn serve_cdn(req: &Request, st: &mut State) -> Reply {
    let Some(sha256) = req.path.strip_prefix("/cdn/") else { return Reply::error(404, "no route") };
    let file =
        st.repos.iter().flat_map(|r| r.commits.values().flatten()).find(|f| sha256_hex(&f.data) == sha256).cloned();
    let Some(file) = file else { return Reply::error(404, "no such blob") };
    let mut reply = ranged(req, file.served_bytes()).header("ETag", format!("\"cdn-{}\"", &sha256[..8]));
    if st.cut_next.remove(sha256) {
        reply.cut_at = Some(reply.body.len() / 2);
    }
    reply
}

/// 200 with the whole body, or 206 with the tail a `Range: bytes=N-` asks for.
fn ranged(req: &Request, data: &[u8]) -> Reply {
    let Some(range) = req.headers.get("range") else { return Reply::new(200, data.to_vec()) };
    let start: usize = range.trim_start_matches("bytes=").trim_end_matches('-').parse().expect("open-ended range");
    if start >= data.len() {
        return Reply::new(416, Vec::new()).header("Content-Range", format!("bytes */{}", data.len()));
    }
    Reply::new(206, data[start..].to_vec())
        .header("Content-Range", format!("bytes {start}-{}/{}", data.len() - 1, data.len()))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
