//! Seeds of the `parquet_rows` target: small Parquet files in the layout pyarrow (and so
//! Hugging Face `datasets`) writes (optional UTF-8 columns, a 3-level LIST of int64), one per
//! codec, written here with the `parquet` crate (no binary files in the repository).

use std::sync::Arc;

use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

const SCHEMA: &str = "message schema {
  optional binary text (STRING);
  optional binary prompt (STRING);
  optional binary completion (STRING);
  optional group input_ids (LIST) {
    repeated group list {
      optional int64 element;
    }
  }
}";

/// Rows: text, text, prompt/completion, input_ids (None: null in that column).
const TEXT: [Option<&str>; 4] = [Some("Plain text, café ✓."), Some("More text."), None, None];
const PROMPT: [Option<&str>; 4] = [None, None, Some("Two plus two is"), None];
const COMPLETION: [Option<&str>; 4] = [None, None, Some(" four."), None];
const IDS: [&[i64]; 4] = [&[], &[], &[], &[4, 8, 15, 16]];

/// An optional flat string column: the present values and the definition levels (1 present).
fn strings(column: &[Option<&str>]) -> (Vec<ByteArray>, Vec<i16>) {
    let values = column.iter().flatten().map(|s| ByteArray::from(*s)).collect();
    (values, column.iter().map(|v| i16::from(v.is_some())).collect())
}

/// The int64 LIST leaf: an empty row is a null list (def 0); elements have def 3, rep 1 after
/// the first of a row.
fn ids() -> (Vec<i64>, Vec<i16>, Vec<i16>) {
    let (mut values, mut def, mut rep) = (Vec::new(), Vec::new(), Vec::new());
    for row in IDS {
        if row.is_empty() {
            def.push(0);
            rep.push(0);
        }
        for (i, &v) in row.iter().enumerate() {
            values.push(v);
            def.push(3);
            rep.push(i16::from(i > 0));
        }
    }
    (values, def, rep)
}

fn file(compression: Compression) -> parquet::errors::Result<Vec<u8>> {
    let schema = Arc::new(parse_message_type(SCHEMA)?);
    let props = Arc::new(WriterProperties::builder().set_compression(compression).build());
    let mut writer = SerializedFileWriter::new(Vec::new(), schema, props)?;
    let mut group = writer.next_row_group()?;
    let mut index = 0;
    while let Some(mut column) = group.next_column()? {
        if index < 3 {
            let (values, def) = strings(&[TEXT, PROMPT, COMPLETION][index]);
            column.typed::<ByteArrayType>().write_batch(&values, Some(&def), None)?;
        } else {
            let (values, def, rep) = ids();
            column.typed::<Int64Type>().write_batch(&values, Some(&def), Some(&rep))?;
        }
        column.close()?;
        index += 1;
    }
    group.close()?;
    writer.into_inner()
}

/// One file per codec the reader supports.
pub fn seeds() -> Vec<Vec<u8>> {
    let codecs = [
        Compression::UNCOMPRESSED,
        Compression::SNAPPY,
        Compression::ZSTD(ZstdLevel::default()),
        Compression::GZIP(GzipLevel::default()),
    ];
    codecs.into_iter().map(|c| file(c).expect("a parquet seed")).collect()
}
