//! Parquet files read row by row with the `parquet` crate's record API (no Arrow): each row
//! becomes a JSON object with one key per column, nested lists and structs included (a
//! `messages` column is a list of structs), so it goes through the same shape parsing as JSON.

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use parquet::file::reader::SerializedFileReader;

use crate::error::{DataError, Location, Place, Result};
use crate::source::RawRow;

pub(crate) fn rows(path: &Path) -> Result<Box<dyn Iterator<Item = Result<RawRow>>>> {
    let fail =
        |e: parquet::errors::ParquetError| DataError::Parquet { path: path.to_path_buf(), message: e.to_string() };
    let file = File::open(path).map_err(|source| DataError::Io { path: path.to_path_buf(), source })?;
    let reader = reader_guard(path, "its footer", || SerializedFileReader::new(file).map_err(fail))?;
    let mut rows = reader.into_iter().enumerate();
    let file = path.to_path_buf();
    let mut failed = false;
    // One row per call, each under the guard; the first failure ends the rows.
    let iter = std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let next =
            reader_guard(&file, "a row", || Ok(rows.next().map(|(i, row)| (i, row.map(|row| row.to_json_value())))));
        let item = match next {
            Ok(None) => return None,
            Ok(Some((i, Ok(value)))) => Ok((Location { file: file.clone(), place: Place::Row(i + 1) }, value)),
            Ok(Some((i, Err(e)))) => {
                Err(DataError::Parquet { path: file.clone(), message: format!("row {}: {e}", i + 1) })
            }
            Err(e) => Err(e),
        };
        failed = item.is_err();
        Some(item)
    });
    Ok(Box::new(iter))
}

/// Runs the parquet crate on a user's file with its panics made read errors: parquet 59 panics
/// on some corrupt files instead of returning an error (found by the fuzz target parquet_rows:
/// metadata/mod.rs, column/reader/decoder.rs, util/bit_util.rs, record/reader.rs and
/// record/triplet.rs asserts on bytes the file holds).
fn reader_guard<T>(path: &Path, what: &str, run: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|payload| {
        let why = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(DataError::Parquet {
            path: path.to_path_buf(),
            message: format!("the file is corrupt: the Parquet reader failed on {what} ({why}); write it again"),
        })
    })
}
