//! Helpers shared by the models crate's integration tests. Each test binary compiles this
//! module and uses a part of it, hence `dead_code` allowed.
#![allow(dead_code)]

use std::path::Path;

use vkformers_io::{Dtype, SaveTensor};

/// The fixtures (under `tests/fixtures`) of every multi-head latent attention family.
pub const MLA_FIXTURES: [&str; 11] = [
    "minicpm3",
    "deepseek_v2",
    "deepseek_v2_qlora",
    "deepseek_v3",
    "youtu",
    "axk1",
    "sarvam_mla",
    "glm4_moe_lite",
    "mistral4",
    "longcat_flash",
    "axk2",
];

/// A named f32 tensor to write: name, shape, values.
pub type NamedF32 = (String, Vec<usize>, Vec<f32>);

/// Writes `tensors` (stored as `dtype`, in shards of at most `max_shard_bytes`) into the model
/// folder `out`, with the config of the model folder `config_of`: a checkpoint rewritten.
pub fn write_model(out: &Path, tensors: &[NamedF32], (dtype, max_shard_bytes): (Dtype, u64), config_of: &Path) {
    let save: Vec<SaveTensor<'_>> = tensors.iter().map(|(n, s, d)| SaveTensor::f32(n.as_str(), dtype, s, d)).collect();
    vkformers_io::save_safetensors(out, &save, max_shard_bytes).unwrap();
    std::fs::copy(config_of.join("config.json"), out.join("config.json")).unwrap();
}
