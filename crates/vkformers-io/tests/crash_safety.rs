//! A write that fails midway leaves nothing under the final name (and no temporary file), and
//! an existing file under that name stays as it was.

mod common;

use vkformers_io::{
    save_safetensors, save_safetensors_failing_after, write_atomic, Dtype, IoError, ModelWeights, SaveTensor,
};

#[test]
fn write_atomic_failing_midway_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let e = write_atomic(&path, |w| {
        w.write_all(&[b'x'; 3 << 20])?; // past the buffer: bytes reach the temporary file
        Err(std::io::Error::other("disk full"))
    })
    .unwrap_err();
    assert!(matches!(&e, IoError::Io { path: p, .. } if *p == path), "{e:?}");
    assert!(e.to_string().contains("disk full"));
    assert!(common::file_names(dir.path()).is_empty(), "{:?}", common::file_names(dir.path()));
}

#[test]
fn write_atomic_failing_keeps_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    write_atomic(&path, |w| w.write_all(b"old")).unwrap();
    write_atomic(&path, |w| {
        w.write_all(b"new, but half")?;
        Err(std::io::Error::other("interrupted"))
    })
    .unwrap_err();
    assert_eq!(std::fs::read(&path).unwrap(), b"old");
    assert_eq!(common::file_names(dir.path()), ["config.json"]);
    write_atomic(&path, |w| w.write_all(b"new")).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"new");
}

#[test]
fn save_failing_midway_leaves_no_weight_file() {
    let data = common::values(1000, 11);
    let tensors = [
        SaveTensor::f32("a", Dtype::F32, &[1000], &data),
        SaveTensor::f32("b", Dtype::BF16, &[1000], &data),
        SaveTensor::f32("c", Dtype::F16, &[1000], &data),
    ];
    // Single file and sharded (3 shards of ~4000, 2000, 2000 bytes); fail in the header, in the
    // data of the first file, and in the last shard.
    for (max, fail_after) in [(u64::MAX, 5), (u64::MAX, 5000), (4000, 100), (4000, 7000)] {
        let dir = tempfile::tempdir().unwrap();
        let e = save_safetensors_failing_after(dir.path(), &tensors, max, fail_after).unwrap_err();
        assert!(e.to_string().contains("simulated failure"), "{e}");
        assert!(
            common::file_names(dir.path()).is_empty(),
            "max {max}, fail after {fail_after}: {:?}",
            common::file_names(dir.path())
        );
    }
}

#[test]
fn failed_save_keeps_the_previous_weights_loadable() {
    let dir = tempfile::tempdir().unwrap();
    let old = common::values(10, 12);
    save_safetensors(dir.path(), &[SaveTensor::f32("old", Dtype::F32, &[10], &old)], u64::MAX).unwrap();
    let before = common::file_names(dir.path());
    let new = common::values(1000, 13);
    let t = [SaveTensor::f32("new1", Dtype::F32, &[1000], &new), SaveTensor::f32("new2", Dtype::F32, &[1000], &new)];
    save_safetensors_failing_after(dir.path(), &t, 4000, 6000).unwrap_err();
    assert_eq!(common::file_names(dir.path()), before);
    assert_eq!(ModelWeights::open(dir.path()).unwrap().tensor_f32("old").unwrap(), old);
}

#[test]
fn a_rename_failing_rolls_back_the_files_already_renamed() {
    // A folder squatting on the second shard's name makes its rename fail after the first
    // shard was renamed into place.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("model-00002-of-00002.safetensors")).unwrap();
    std::fs::write(dir.path().join("model-00002-of-00002.safetensors/x"), "x").unwrap();
    let data = common::values(20, 14);
    let t = [SaveTensor::f32("a", Dtype::F32, &[20], &data), SaveTensor::f32("b", Dtype::F32, &[20], &data)];
    save_safetensors(dir.path(), &t, 80).unwrap_err();
    assert_eq!(common::file_names(dir.path()), ["model-00002-of-00002.safetensors"]);
}
