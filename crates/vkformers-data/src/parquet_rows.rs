//! Parquet files read row by row with the `parquet` crate's record API (no Arrow): each row
//! becomes a JSON object with one key per column, nested lists and structs included (a
//! `messages` column is a list of structs), so it goes through the same shape parsing as JSON.

use std::fs::File;
use std::path::Path;

use parquet::file::reader::SerializedFileReader;

use crate::error::{DataError, Location, Place, Result};
use crate::source::RawRow;

pub(crate) fn rows(path: &Path) -> Result<Box<dyn Iterator<Item = Result<RawRow>>>> {
    let fail =
        |e: parquet::errors::ParquetError| DataError::Parquet { path: path.to_path_buf(), message: e.to_string() };
    let file = File::open(path).map_err(|source| DataError::Io { path: path.to_path_buf(), source })?;
    let reader = SerializedFileReader::new(file).map_err(fail)?;
    let rows = reader.into_iter();
    let file = path.to_path_buf();
    let iter = rows.enumerate().map(move |(i, row)| {
        let location = Location { file: file.clone(), place: Place::Row(i + 1) };
        match row {
            Ok(row) => Ok((location, row.to_json_value())),
            Err(e) => Err(DataError::Parquet { path: file.clone(), message: format!("row {}: {e}", i + 1) }),
        }
    });
    Ok(Box::new(iter))
}
