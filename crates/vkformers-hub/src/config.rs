//! Where the Hub is and how we talk to it: endpoint, cache folder, token, offline mode. All
//! environment reading happens in [`HubConfig::from_lookup`] so tests can pass their own values.

use std::fmt;
use std::path::{Path, PathBuf};

/// The public Hub, used when `HF_ENDPOINT` is not set.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// An access token. Its `Debug` is redacted and it has no `Display`, so it cannot end up in logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A token from its text; empty text (after trimming) is no token.
    pub fn new(text: &str) -> Option<Token> {
        let t = text.trim();
        (!t.is_empty()).then(|| Token(t.to_string()))
    }

    pub(crate) fn secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// How to reach the Hub and where its cache lives (the one Python's `huggingface_hub` uses).
#[derive(Clone, Debug)]
pub struct HubConfig {
    /// Base URL, e.g. `https://huggingface.co` (no trailing slash).
    pub endpoint: String,
    /// The hub cache: `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`.
    pub cache_dir: PathBuf,
    pub token: Option<Token>,
    /// `HF_HUB_OFFLINE=1`: never touch the network, use the cache only.
    pub offline: bool,
    /// Progress bars on stderr for large files (indicatif hides them when stderr is not a terminal).
    pub progress: bool,
}

impl HubConfig {
    /// A config for `endpoint` with its cache in `cache_dir`, no token, online, no progress bars.
    pub fn new(endpoint: &str, cache_dir: impl Into<PathBuf>) -> HubConfig {
        HubConfig {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            cache_dir: cache_dir.into(),
            token: None,
            offline: false,
            progress: false,
        }
    }

    /// The config the process environment asks for.
    pub fn from_env() -> HubConfig {
        HubConfig::from_lookup(|k| std::env::var(k).ok(), home_dir())
    }

    /// The config for the variables `var` returns, the way `huggingface_hub` reads them:
    /// `HF_ENDPOINT`, `HF_HOME`, `HF_HUB_CACHE` (legacy `HUGGINGFACE_HUB_CACHE`), `HF_HUB_OFFLINE`,
    /// `HF_HUB_DISABLE_PROGRESS_BARS`, `HF_TOKEN` (legacy `HUGGING_FACE_HUB_TOKEN`), else the file
    /// `HF_TOKEN_PATH`, else `HF_HOME/token`.
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>, home: Option<PathBuf>) -> HubConfig {
        let set = |k: &str| var(k).filter(|v| !v.is_empty());
        let hf_home = set("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            let xdg = set("XDG_CACHE_HOME").map(PathBuf::from);
            xdg.or_else(|| home.map(|h| h.join(".cache")))
                .unwrap_or_else(|| PathBuf::from(".cache"))
                .join("huggingface")
        });
        let cache_dir = set("HF_HUB_CACHE")
            .or_else(|| set("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        let token_file = set("HF_TOKEN_PATH").map(PathBuf::from).unwrap_or_else(|| hf_home.join("token"));
        let token = set("HF_TOKEN")
            .or_else(|| set("HUGGING_FACE_HUB_TOKEN"))
            .and_then(|t| Token::new(&t))
            .or_else(|| read_token_file(&token_file));
        let endpoint = set("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        HubConfig {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            cache_dir,
            token,
            offline: set("HF_HUB_OFFLINE").is_some_and(|v| is_true(&v)),
            progress: !set("HF_HUB_DISABLE_PROGRESS_BARS").is_some_and(|v| is_true(&v)),
        }
    }
}

fn read_token_file(path: &Path) -> Option<Token> {
    std::fs::read_to_string(path).ok().and_then(|t| Token::new(&t))
}

/// `huggingface_hub`'s truthy values for boolean variables.
fn is_true(v: &str) -> bool {
    matches!(v.trim().to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE")
}

fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE")).map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_follow_python() {
        let c = HubConfig::from_lookup(lookup(&[]), Some("/home/u".into()));
        assert_eq!(c.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(c.cache_dir, PathBuf::from("/home/u/.cache/huggingface/hub"));
        assert!(!c.offline);
        assert!(c.progress);
        assert!(c.token.is_none());
        assert!(!HubConfig::from_lookup(lookup(&[("HF_HUB_DISABLE_PROGRESS_BARS", "1")]), None).progress);
    }

    #[test]
    fn hf_home_then_hub_cache_override() {
        let c = HubConfig::from_lookup(lookup(&[("HF_HOME", "/h")]), None);
        assert_eq!(c.cache_dir, PathBuf::from("/h/hub"));
        let c = HubConfig::from_lookup(lookup(&[("HF_HOME", "/h"), ("HF_HUB_CACHE", "/c")]), None);
        assert_eq!(c.cache_dir, PathBuf::from("/c"));
        let c = HubConfig::from_lookup(lookup(&[("HF_ENDPOINT", "http://x:1/"), ("HF_HUB_OFFLINE", "1")]), None);
        assert_eq!(c.endpoint, "http://x:1");
        assert!(c.offline);
        let c = HubConfig::from_lookup(lookup(&[("HF_HUB_OFFLINE", "0")]), None);
        assert!(!c.offline);
    }

    #[test]
    fn token_from_env_then_token_file() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().to_str().unwrap();
        std::fs::write(dir.path().join("token"), "hf_fromfile\n").unwrap();
        let c = HubConfig::from_lookup(lookup(&[("HF_HOME", home)]), None);
        assert_eq!(c.token, Token::new("hf_fromfile"));
        let c = HubConfig::from_lookup(lookup(&[("HF_HOME", home), ("HF_TOKEN", "hf_env")]), None);
        assert_eq!(c.token, Token::new("hf_env"));
        std::fs::write(dir.path().join("other"), "hf_other").unwrap();
        let other = dir.path().join("other");
        let c = HubConfig::from_lookup(lookup(&[("HF_HOME", home), ("HF_TOKEN_PATH", other.to_str().unwrap())]), None);
        assert_eq!(c.token, Token::new("hf_other"));
    }

    #[test]
    fn debug_redacts_the_token() {
        let mut c = HubConfig::new("http://127.0.0.1:1", "/tmp/x");
        c.token = Token::new("hf_verysecret");
        let shown = format!("{c:?}");
        assert!(!shown.contains("verysecret"), "{shown}");
        assert!(shown.contains("redacted"), "{shown}");
    }
}
