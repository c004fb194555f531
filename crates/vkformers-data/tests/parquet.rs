//! Parquet datasets: files written here with the `parquet` crate in the layout pyarrow (and so
//! Hugging Face `datasets`) writes (optional UTF-8 columns, 3-level LISTs of structs and of
//! int64), one per codec, read into the same examples as the same rows in JSONL.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{tokenizer, write};
use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use serde_json::{json, Value};
use vkformers_data::{read_dataset, ReadOptions};

const SCHEMA: &str = "message schema {
  optional binary text (STRING);
  optional binary prompt (STRING);
  optional binary completion (STRING);
  optional group messages (LIST) {
    repeated group list {
      optional group element {
        optional binary role (STRING);
        optional binary content (STRING);
      }
    }
  }
  optional group input_ids (LIST) {
    repeated group list {
      optional int64 element;
    }
  }
}";

fn rows() -> Vec<Value> {
    vec![
        json!({"text": "Plain text in a Parquet file, café ✓."}),
        json!({"prompt": "Two plus two is", "completion": " four."}),
        json!({"messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]}),
        json!({"input_ids": [4, 8, 15, 16, 23, 42]}),
        json!({"messages": [
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Cat legs?"},
            {"role": "assistant", "content": "Four."}, {"role": "user", "content": "Bird?"},
            {"role": "assistant", "content": "Two."}]}),
    ]
}

/// Definition levels of an optional flat column: 1 present, 0 null.
fn strings(rows: &[Value], key: &str) -> (Vec<ByteArray>, Vec<i16>) {
    let mut values = Vec::new();
    let def = rows
        .iter()
        .map(|r| match r[key].as_str() {
            Some(s) => {
                values.push(ByteArray::from(s));
                1
            }
            None => 0,
        })
        .collect();
    (values, def)
}

/// Levels of a leaf inside an optional LIST: `(def, rep)` is (0, 0) for a null list, and for
/// each element rep 0 on the first and 1 after, def `leaf_def` when the leaf is present.
fn list_leaf<T>(rows: &[Value], key: &str, leaf_def: i16, value: impl Fn(&Value) -> T) -> (Vec<T>, Vec<i16>, Vec<i16>) {
    let (mut values, mut def, mut rep) = (Vec::new(), Vec::new(), Vec::new());
    for row in rows {
        match row[key].as_array() {
            None => {
                def.push(0);
                rep.push(0);
            }
            Some(items) => {
                for (i, item) in items.iter().enumerate() {
                    values.push(value(item));
                    def.push(leaf_def);
                    rep.push(i16::from(i > 0));
                }
            }
        }
    }
    (values, def, rep)
}

fn write_parquet(path: &Path, rows: &[Value], compression: Compression) {
    let schema = Arc::new(parse_message_type(SCHEMA).unwrap());
    let props = Arc::new(WriterProperties::builder().set_compression(compression).build());
    let mut writer = SerializedFileWriter::new(std::fs::File::create(path).unwrap(), schema, props).unwrap();
    let mut group = writer.next_row_group().unwrap();
    let mut index = 0;
    while let Some(mut column) = group.next_column().unwrap() {
        match index {
            0..=2 => {
                let (values, def) = strings(rows, ["text", "prompt", "completion"][index]);
                column.typed::<ByteArrayType>().write_batch(&values, Some(&def), None).unwrap();
            }
            3 | 4 => {
                let field = ["role", "content"][index - 3];
                let (values, def, rep) =
                    list_leaf(rows, "messages", 4, |m| ByteArray::from(m[field].as_str().unwrap()));
                column.typed::<ByteArrayType>().write_batch(&values, Some(&def), Some(&rep)).unwrap();
            }
            _ => {
                let (values, def, rep) = list_leaf(rows, "input_ids", 3, |v| v.as_i64().unwrap());
                column.typed::<Int64Type>().write_batch(&values, Some(&def), Some(&rep)).unwrap();
            }
        }
        column.close().unwrap();
        index += 1;
    }
    assert_eq!(index, 6);
    group.close().unwrap();
    writer.close().unwrap();
}

#[test]
fn parquet_rows_read_like_the_same_jsonl_rows_with_every_codec() {
    let tok = tokenizer("chatml");
    let dir = tempfile::tempdir().unwrap();
    let rows = rows();
    let jsonl: Vec<String> = rows.iter().map(Value::to_string).collect();
    let jsonl = write(dir.path(), "rows.jsonl", &jsonl.join("\n"));
    let want = read_dataset(&[jsonl], &tok, &ReadOptions::default()).unwrap();
    assert_eq!(want.examples.len(), rows.len());
    let codecs = [
        ("none", Compression::UNCOMPRESSED),
        ("snappy", Compression::SNAPPY),
        ("zstd", Compression::ZSTD(ZstdLevel::default())),
        ("gzip", Compression::GZIP(GzipLevel::default())),
    ];
    for (name, compression) in codecs {
        let path = dir.path().join(format!("rows.{name}.parquet"));
        write_parquet(&path, &rows, compression);
        let got = read_dataset(std::slice::from_ref(&path), &tok, &ReadOptions::default()).unwrap();
        assert_eq!(got.examples, want.examples, "{name}");
        assert!(!got.plain_text);
    }
}

#[test]
fn parquet_errors_name_the_row() {
    let tok = tokenizer("chatml");
    let dir = tempfile::tempdir().unwrap();
    let mut rows = rows();
    rows[3] = json!({"prompt": "a prompt without its completion"});
    let path = dir.path().join("bad.parquet");
    write_parquet(&path, &rows, Compression::SNAPPY);
    let e = read_dataset(std::slice::from_ref(&path), &tok, &ReadOptions::default()).unwrap_err();
    assert!(e.to_string().contains("bad.parquet: row 4: the row has `prompt` but no `completion`"), "{e}");
}

/// Corrupt files on which the parquet crate panics or allocates gigabytes (found by the fuzz
/// target parquet_rows; the inputs are its regressions): each is a read error naming the file.
#[test]
fn corrupt_parquet_files_are_read_errors_not_panics() {
    let tok = tokenizer("chatml");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/parquet_rows");
    let mut names: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).collect();
    names.sort();
    assert!(names.len() >= 6, "the regression inputs are missing from {}", dir.display());
    let scratch = tempfile::tempdir().unwrap();
    for input in names {
        let path = scratch.path().join("corrupt.parquet");
        std::fs::copy(&input, &path).unwrap();
        let read =
            std::panic::catch_unwind(|| read_dataset(std::slice::from_ref(&path), &tok, &ReadOptions::default()));
        let e = read.unwrap_or_else(|_| panic!("{} panicked", input.display())).unwrap_err();
        assert!(e.to_string().contains("corrupt.parquet: cannot read Parquet"), "{}: {e}", input.display());
        // This 1 KB file's dictionary declares 335 million values: refused before any is allocated
        // (the parquet crate took 10 GB and 5 s for it).
        if input.ends_with("dictionary-335m-values-10gb") {
            assert!(e.to_string().contains("its dictionary declares 335012858 values in 19 bytes"), "{e}");
        }
    }
}
