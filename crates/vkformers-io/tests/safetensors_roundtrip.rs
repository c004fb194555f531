//! Saving and reading back single-file safetensors: exact conversions, raw bytes, layout
//! identical to the `safetensors` library's, deterministic bytes.

mod common;

use std::borrow::Cow;

use half::{bf16, f16};
use vkformers_io::{save_safetensors, Dtype, ModelWeights, SaveTensor, DEFAULT_MAX_SHARD_BYTES};

#[test]
fn f32_f16_bf16_round_trip_bit_exact() {
    let dir = tempfile::tempdir().unwrap();
    let data = common::values(3 * 5 * 7, 1);
    let tensors = [
        SaveTensor::f32("a.f32", Dtype::F32, &[3, 5, 7], &data),
        SaveTensor::f32("b.f16", Dtype::F16, &[3, 35], &data),
        SaveTensor::f32("c.bf16", Dtype::BF16, &[105], &data),
    ];
    let saved = save_safetensors(dir.path(), &tensors, DEFAULT_MAX_SHARD_BYTES).unwrap();
    assert_eq!(saved.files, vec![dir.path().join("model.safetensors")]);
    assert_eq!(saved.index, None);
    assert_eq!(saved.total_size, 105 * (4 + 2 + 2));
    assert_eq!(saved.total_parameters, 3 * 105);

    let w = ModelWeights::open(dir.path()).unwrap();
    assert_eq!(w.len(), 3);
    let infos = w.tensors();
    assert_eq!(infos.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), ["a.f32", "b.f16", "c.bf16"]);
    assert_eq!(infos[0].dtype, Dtype::F32);
    assert_eq!(infos[0].shape, [3, 5, 7]);
    assert_eq!(infos[1].dtype, Dtype::F16);
    assert_eq!(infos[1].shape, [3, 35]);
    assert_eq!(infos[2].dtype, Dtype::BF16);
    assert_eq!(infos[2].shape, [105]);
    assert_eq!(infos[0].file, dir.path().join("model.safetensors"));

    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&w.tensor_f32("a.f32").unwrap()), bits(&data));
    let want_f16: Vec<f32> = data.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
    assert_eq!(bits(&w.tensor_f32("b.f16").unwrap()), bits(&want_f16));
    let want_bf16: Vec<f32> = data.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
    assert_eq!(bits(&w.tensor_f32("c.bf16").unwrap()), bits(&want_bf16));

    // The stored bytes are exactly half's little-endian encodings.
    let raw = w.tensor_bytes("b.f16").unwrap();
    assert_eq!(raw.dtype, Dtype::F16);
    assert_eq!(raw.shape, [3, 35]);
    let want: Vec<u8> = data.iter().flat_map(|&x| f16::from_f32(x).to_le_bytes()).collect();
    assert_eq!(raw.data, want.as_slice());
    let raw = w.tensor_bytes("c.bf16").unwrap();
    let want: Vec<u8> = data.iter().flat_map(|&x| bf16::from_f32(x).to_le_bytes()).collect();
    assert_eq!(raw.data, want.as_slice());
}

#[test]
fn nan_survives_every_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let data = [f32::NAN, 1.5, -2.25];
    let tensors = [
        SaveTensor::f32("x", Dtype::F32, &[3], &data),
        SaveTensor::f32("y", Dtype::F16, &[3], &data),
        SaveTensor::f32("z", Dtype::BF16, &[3], &data),
    ];
    save_safetensors(dir.path(), &tensors, DEFAULT_MAX_SHARD_BYTES).unwrap();
    let w = ModelWeights::open(dir.path()).unwrap();
    for name in ["x", "y", "z"] {
        let v = w.tensor_f32(name).unwrap();
        assert!(v[0].is_nan(), "{name}");
        assert_eq!(&v[1..], &[1.5, -2.25], "{name}");
    }
}

#[test]
fn raw_bytes_of_any_dtype_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let ints: Vec<u8> = [1i64, -2, 3, i64::MAX].iter().flat_map(|v| v.to_le_bytes()).collect();
    let halfs: Vec<u8> = [0.5f32, -8.0].iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect();
    let tensors = [
        SaveTensor::raw("ids", Dtype::I64, &[2, 2], &ints),
        SaveTensor::raw("w", Dtype::BF16, &[2], &halfs),
        SaveTensor::raw("flag", Dtype::BOOL, &[1], &[1]),
        SaveTensor::raw("scalar", Dtype::U8, &[], &[7]),
    ];
    save_safetensors(dir.path(), &tensors, DEFAULT_MAX_SHARD_BYTES).unwrap();
    let w = ModelWeights::open_file(dir.path().join("model.safetensors")).unwrap();
    let raw = w.tensor_bytes("ids").unwrap();
    assert_eq!((raw.dtype, raw.shape, raw.data), (Dtype::I64, &[2usize, 2][..], ints.as_slice()));
    assert_eq!(w.tensor_f32("w").unwrap(), [0.5, -8.0]);
    assert_eq!(w.tensor_bytes("flag").unwrap().data, [1]);
    let scalar = w.tensor_bytes("scalar").unwrap();
    assert_eq!((scalar.shape, scalar.data), (&[][..], &[7u8][..]));
}

/// A tensor in the form the `safetensors` library serializes.
struct LibTensor {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl safetensors::View for &LibTensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

#[test]
fn bytes_equal_the_safetensors_library_with_pt_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let a = common::values(12, 2);
    let b = common::values(6, 3);
    let ints: Vec<u8> = (0..4i32).flat_map(|v| v.to_le_bytes()).collect();
    let tensors = [
        SaveTensor::f32("z.weight", Dtype::BF16, &[3, 4], &a),
        SaveTensor::f32("a.weight", Dtype::F32, &[6], &b),
        SaveTensor::raw("m.ids", Dtype::I32, &[4], &ints),
        SaveTensor::f32("b.bias", Dtype::F16, &[2, 3], &b),
    ];
    save_safetensors(dir.path(), &tensors, DEFAULT_MAX_SHARD_BYTES).unwrap();
    let ours = std::fs::read(dir.path().join("model.safetensors")).unwrap();

    let lib = [
        (
            "z.weight",
            LibTensor {
                dtype: Dtype::BF16,
                shape: vec![3, 4],
                data: enc(&a, |x| bf16::from_f32(x).to_le_bytes().to_vec()),
            },
        ),
        ("a.weight", LibTensor { dtype: Dtype::F32, shape: vec![6], data: enc(&b, |x| x.to_le_bytes().to_vec()) }),
        ("m.ids", LibTensor { dtype: Dtype::I32, shape: vec![4], data: ints.clone() }),
        (
            "b.bias",
            LibTensor {
                dtype: Dtype::F16,
                shape: vec![2, 3],
                data: enc(&b, |x| f16::from_f32(x).to_le_bytes().to_vec()),
            },
        ),
    ];
    let metadata = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    let theirs = safetensors::serialize(lib.iter().map(|(n, t)| (*n, t)), Some(metadata)).unwrap();
    assert_eq!(ours, theirs);

    // The header starts with the fixed metadata, and is padded to 8 bytes.
    let n = u64::from_le_bytes(ours[..8].try_into().unwrap()) as usize;
    assert_eq!(n % 8, 0);
    let header = std::str::from_utf8(&ours[8..8 + n]).unwrap();
    assert!(header.starts_with(r#"{"__metadata__":{"format":"pt"},"#), "{header}");
}

fn enc(v: &[f32], f: impl Fn(f32) -> Vec<u8>) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

#[test]
fn saving_twice_gives_identical_bytes_whatever_the_input_order() {
    let data = common::values(64, 4);
    let t = |order: &[usize]| -> Vec<SaveTensor<'_>> {
        let all = [
            SaveTensor::f32("layers.0.w", Dtype::BF16, &[8, 8], &data),
            SaveTensor::f32("layers.1.w", Dtype::F16, &[64], &data),
            SaveTensor::f32("embed", Dtype::F32, &[4, 16], &data),
            SaveTensor::f32("norm", Dtype::F32, &[16], &data[..16]),
        ];
        order.iter().map(|&i| all[i].clone()).collect()
    };
    for max in [DEFAULT_MAX_SHARD_BYTES, 200] {
        let d1 = tempfile::tempdir().unwrap();
        let d2 = tempfile::tempdir().unwrap();
        let s1 = save_safetensors(d1.path(), &t(&[0, 1, 2, 3]), max).unwrap();
        let s2 = save_safetensors(d2.path(), &t(&[3, 1, 0, 2]), max).unwrap();
        // And a third time over the first, replacing its files.
        save_safetensors(d1.path(), &t(&[2, 0, 3, 1]), max).unwrap();
        assert_eq!(common::file_names(d1.path()), common::file_names(d2.path()));
        assert_eq!(s1.files.len(), s2.files.len());
        for name in common::file_names(d1.path()) {
            let a = std::fs::read(d1.path().join(&name)).unwrap();
            let b = std::fs::read(d2.path().join(&name)).unwrap();
            assert_eq!(a, b, "{name} differs between two saves (max_shard_bytes {max})");
        }
    }
}

#[test]
fn empty_weights_give_an_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let saved = save_safetensors(dir.path(), &[], DEFAULT_MAX_SHARD_BYTES).unwrap();
    assert_eq!(saved.files.len(), 1);
    let w = ModelWeights::open(dir.path()).unwrap();
    assert!(w.is_empty());
}
