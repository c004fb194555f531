//! Resolving a Hub id to cache paths, online (list, fetch what is missing, record the ref) or
//! offline (`HF_HUB_OFFLINE`, or the Hub unreachable: the cache must already hold everything).

use crate::cache::CacheRepo;
use crate::client::{Hub, Listing};
use crate::config::HubConfig;
use crate::dataset_files::select;
use crate::error::HubError;
use crate::model_files::{plan, shards, Want};
use crate::repo_id::RepoRef;
use crate::DatasetQuery;
use std::path::{Path, PathBuf};

/// The branch where the Hub keeps its Parquet conversion of every dataset.
const PARQUET_BRANCH: &str = "refs/convert/parquet";

pub(crate) fn model(repo: &RepoRef, want: Want, config: &HubConfig) -> Result<PathBuf, HubError> {
    let cache = CacheRepo::new(&config.cache_dir, repo);
    if config.offline {
        return cached_model(repo, want, &cache, config);
    }
    let hub = Hub::new(config)?;
    let listing = match hub.listing(repo) {
        Ok(listing) => listing,
        Err(err @ HubError::Http { .. }) => return fall_back(err, || cached_model(repo, want, &cache, config)),
        Err(err) => return Err(err),
    };
    let plan = plan(&repo.id, &listing.names(), want)?;
    for name in &plan.files {
        fetch(&hub, repo, &listing, name)?;
    }
    if let Some(index) = &plan.index {
        let index = cache.snapshot(&listing.sha).join(index);
        for shard in shards(&repo.id, &index)? {
            fetch(&hub, repo, &listing, &shard)?;
        }
    }
    cache.write_ref(&repo.revision, &listing.sha)?;
    Ok(cache.snapshot(&listing.sha))
}

fn fetch(hub: &Hub, repo: &RepoRef, listing: &Listing, name: &str) -> Result<PathBuf, HubError> {
    let file = listing.file(name).ok_or_else(|| HubError::NoWeights {
        id: repo.id.clone(),
        expected: format!("`{name}` (named by the repo's index) in the repo"),
    })?;
    hub.fetch(repo, &listing.sha, file)
}

/// The Hub could not be reached: use the cache when it has everything, as `transformers` does.
fn fall_back<T>(err: HubError, cached: impl FnOnce() -> Result<T, HubError>) -> Result<T, HubError> {
    match cached() {
        Ok(found) => {
            eprintln!("warning: {err}; using the cached copy");
            Ok(found)
        }
        Err(_) => Err(err),
    }
}

/// The snapshot folder of a model already complete in the cache.
fn cached_model(repo: &RepoRef, want: Want, cache: &CacheRepo, config: &HubConfig) -> Result<PathBuf, HubError> {
    let not_cached = |missing: String| HubError::NotCached {
        id: repo.id.clone(),
        revision: repo.revision.clone(),
        cache: config.cache_dir.clone(),
        missing,
    };
    let sha = cache.commit_of(&repo.revision).ok_or_else(|| not_cached("no ref or snapshot".into()))?;
    let dir = cache.snapshot(&sha);
    let names = files_under(&dir);
    let plan = plan(&repo.id, &names, want).map_err(|e| match e {
        HubError::PickleOnly { .. } => e,
        other => not_cached(other.to_string()),
    })?;
    let mut needed = plan.files.clone();
    if let Some(index) = &plan.index {
        needed.extend(shards(&repo.id, &dir.join(index))?);
    }
    let missing: Vec<String> = needed.into_iter().filter(|n| !dir.join(n).is_file()).collect();
    if missing.is_empty() {
        Ok(dir)
    } else {
        Err(not_cached(format!("missing {}", missing.join(", "))))
    }
}

pub(crate) fn dataset(repo: &RepoRef, query: &DatasetQuery, config: &HubConfig) -> Result<Vec<PathBuf>, HubError> {
    let cache = CacheRepo::new(&config.cache_dir, repo);
    if config.offline {
        return cached_dataset(repo, query, &cache, config);
    }
    let hub = Hub::new(config)?;
    let listing = match hub.listing(repo) {
        Ok(listing) => listing,
        Err(err @ HubError::Http { .. }) => return fall_back(err, || cached_dataset(repo, query, &cache, config)),
        Err(err) => return Err(err),
    };
    let (repo, listing, files) = match select(&listing.names(), query, false) {
        Ok(files) => (repo.clone(), listing, files),
        Err(why) if query.files.is_some() => return Err(dataset_error(repo, why)),
        Err(why) => parquet_files(&hub, repo, query, why)?,
    };
    let paths = files.iter().map(|name| fetch(&hub, &repo, &listing, name)).collect::<Result<Vec<_>, _>>()?;
    cache.write_ref(&repo.revision, &listing.sha)?;
    Ok(paths)
}

/// The main branch has nothing usable (e.g. only a builder script): take the Hub's Parquet
/// conversion instead. Scripts are never downloaded nor run.
fn parquet_files(
    hub: &Hub,
    repo: &RepoRef,
    query: &DatasetQuery,
    main_why: String,
) -> Result<(RepoRef, Listing, Vec<String>), HubError> {
    let parquet = repo.at(PARQUET_BRANCH);
    let listing = match hub.listing(&parquet) {
        Ok(listing) => listing,
        Err(HubError::RepoNotFound { .. }) => {
            return Err(dataset_error(repo, format!("{main_why}, and the Hub has no Parquet conversion of it")));
        }
        Err(e) => return Err(e),
    };
    let files = select(&listing.names(), query, true)
        .map_err(|why| dataset_error(repo, format!("{main_why}; in its Parquet conversion: {why}")))?;
    Ok((parquet, listing, files))
}

fn cached_dataset(
    repo: &RepoRef,
    query: &DatasetQuery,
    cache: &CacheRepo,
    config: &HubConfig,
) -> Result<Vec<PathBuf>, HubError> {
    let mut reasons = Vec::new();
    for (revision, parquet) in [(repo.revision.as_str(), false), (PARQUET_BRANCH, true)] {
        let Some(sha) = cache.commit_of(revision) else {
            reasons.push(format!("no `{revision}` in the cache"));
            continue;
        };
        let dir = cache.snapshot(&sha);
        match select(&files_under(&dir), query, parquet) {
            Ok(files) => return Ok(files.iter().map(|f| dir.join(f)).collect()),
            Err(why) => reasons.push(format!("`{revision}`: {why}")),
        }
        if query.files.is_some() {
            break;
        }
    }
    Err(HubError::NotCached {
        id: repo.id.clone(),
        revision: repo.revision.clone(),
        cache: config.cache_dir.clone(),
        missing: reasons.join("; "),
    })
}

fn dataset_error(repo: &RepoRef, message: String) -> HubError {
    HubError::Dataset { id: repo.id.clone(), message }
}

/// Repo-relative names (with `/`) of the complete files under a snapshot folder; dangling
/// links (a blob never finished) are left out.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, prefix)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
            let full = entry.path();
            if full.is_dir() {
                stack.push((full, rel));
            } else if full.is_file() {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}
