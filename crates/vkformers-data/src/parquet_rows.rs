//! Parquet files read row by row with the `parquet` crate's record API (no Arrow): each row
//! becomes a JSON object with one key per column, nested lists and structs included (a
//! `messages` column is a list of structs), so it goes through the same shape parsing as JSON.

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use parquet::basic::PageType;
use parquet::file::reader::{FileReader, SerializedFileReader};

use crate::error::{DataError, Location, Place, Result};
use crate::source::RawRow;

pub(crate) fn rows(path: &Path) -> Result<Box<dyn Iterator<Item = Result<RawRow>>>> {
    let fail =
        |e: parquet::errors::ParquetError| DataError::Parquet { path: path.to_path_buf(), message: e.to_string() };
    let file = File::open(path).map_err(|source| DataError::Io { path: path.to_path_buf(), source })?;
    let reader = reader_guard(path, "its footer", || {
        let reader = SerializedFileReader::new(file).map_err(fail)?;
        check_dictionaries(&reader).map_err(|message| DataError::Parquet { path: path.to_path_buf(), message })?;
        Ok(reader)
    })?;
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

/// Refuses a dictionary page that declares more values than it has bytes. parquet 59 allocates a
/// dictionary's declared value count up front (a 1 KB file declaring 335 million values took
/// 10 GB and 5 s: found by the fuzz target parquet_rows); a PLAIN dictionary value takes at
/// least one byte, so such a count is a corrupt file. A dictionary is the first page of its
/// column chunk: only that page of each chunk is read here (once more, later, by the rows).
fn check_dictionaries(reader: &SerializedFileReader<File>) -> std::result::Result<(), String> {
    for g in 0..reader.num_row_groups() {
        let group = reader.get_row_group(g).map_err(|e| e.to_string())?;
        for c in 0..group.num_columns() {
            let mut pages = group.get_column_page_reader(c).map_err(|e| e.to_string())?;
            let Some(page) = pages.get_next_page().map_err(|e| e.to_string())? else { continue };
            let (values, bytes) = (page.num_values() as usize, page.buffer().len());
            if page.page_type() == PageType::DICTIONARY_PAGE && values > bytes {
                let column = group.metadata().column(c).column_path().string();
                return Err(format!(
                    "the file is corrupt: row group {g}, column `{column}`: its dictionary declares {values} values \
                     in {bytes} bytes; write it again"
                ));
            }
        }
    }
    Ok(())
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
