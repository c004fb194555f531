//! Rotary encoders: RoFormer's fixed sinusoid table is a buffer that a model drawn from its
//! config fills exactly as transformers' `create_weight` does (f64 angles rounded to f32), and
//! that training leaves alone (it is no parameter).

use std::path::PathBuf;

use vkformers_io::ModelWeights;
use vkformers_models::init::init_from_config;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

#[test]
fn a_fresh_roformer_stores_transformers_sinusoid_table_as_a_buffer() {
    let table = "roformer.encoder.embed_positions.weight";
    on_every_device("roformer table", |ctx| {
        let g = Graph::new(ctx);
        let config = vkformers_io::read_json(fixture("roformer").join("config.json")).unwrap();
        let m = init_from_config(&g, config, 7).unwrap();
        assert!(m.params.iter().all(|(n, _)| n != table), "the table is not trained");
        let (_, buf) = m.buffers.iter().find(|(n, _)| n == table).expect("the table is a buffer");
        let want = ModelWeights::open(fixture("roformer")).unwrap().tensor_f32(table).unwrap();
        // Exact: the same f64 angles rounded once to f32 (rows 64 × head_dim 8).
        assert_eq!(g.read(buf).unwrap(), want);
        Ok(())
    });
}
