//! What `vkformers serve` runs for an embedding model (a sentence-transformers folder, or a plain
//! encoder folder: mean pooling): the `vkformers_serve::embeddings::Embedder` over the same code
//! as `vkformers embed`, so the server's vectors are `embed`'s.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use vkformers_io::HfTokenizer;
use vkformers_models::model::Model;
use vkformers_serve::embeddings::{EmbedInput, EmbedLoader, Embedded, Embedder};
use vkformers_tensor::{DType, Graph};

use crate::embed::{embed_encoded, tokenize};
use crate::st_modules::SentenceModel;

/// Rows per forward of the server's embedding batches.
const BATCH_ROWS: usize = 32;

/// Whether `dir` holds an embedding model: its transformer (the folder itself, or the one
/// `modules.json` names) is an encoder.
pub fn is_embedding_model(dir: &Path) -> anyhow::Result<bool> {
    let st = SentenceModel::read(dir)?;
    let path = st.transformer.join("config.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let cfg: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    Ok(vkformers_models::archs::spec_from_config(&cfg).is_ok_and(|s| s.encoder.is_some()))
}

/// Loads the model of `dir` on the embedding thread's graph, in `dtype`.
pub fn loader(dir: PathBuf, dtype: DType) -> EmbedLoader {
    Box::new(move |g| {
        let load = || -> anyhow::Result<Box<dyn Embedder>> {
            let st = SentenceModel::read(&dir)?;
            let model = Model::load_for_inference(g, &st.transformer, dtype)
                .with_context(|| format!("loading {}", st.transformer.display()))?;
            crate::load::generate_in_weight_type(g, &model);
            let tok = HfTokenizer::from_dir(&st.transformer)?;
            Ok(Box::new(Served { model, tok, st }))
        };
        load().map_err(|e| format!("{e:#}"))
    })
}

struct Served {
    model: Model,
    tok: HfTokenizer,
    st: SentenceModel,
}

impl Served {
    /// Texts tokenized as `embed` tokenizes them; token ids used as given (token type 0), refused
    /// past the model's positions.
    fn encode(&self, inputs: &[EmbedInput]) -> anyhow::Result<Vec<(Vec<i32>, Vec<i32>)>> {
        let positions = self.model.spec.encoder.as_ref().map_or(usize::MAX, |e| e.max_positions);
        // Every text in one tokenizer call (it sets up truncation once), then back in order.
        let texts: Vec<String> =
            inputs.iter().filter_map(|i| if let EmbedInput::Text(t) = i { Some(t.clone()) } else { None }).collect();
        let mut tokenized = tokenize(&self.model, &self.tok, &self.st, &texts)?.into_iter();
        inputs
            .iter()
            .map(|input| match input {
                EmbedInput::Text(_) => tokenized.next().context("the tokenizer returned fewer rows than texts"),
                EmbedInput::Ids(ids) if ids.len() > positions => {
                    anyhow::bail!("{} token ids, above the model's {positions} positions: shorten the input", ids.len())
                }
                EmbedInput::Ids(ids) => Ok((ids.iter().map(|&t| t as i32).collect(), vec![0; ids.len()])),
            })
            .collect()
    }
}

impl Embedder for Served {
    fn embed(&mut self, g: &Graph<'_>, inputs: &[EmbedInput]) -> Result<Embedded, String> {
        let run = || -> anyhow::Result<Embedded> {
            let encoded = self.encode(inputs)?;
            let vectors = embed_encoded(g, &self.model, &self.st, &encoded, BATCH_ROWS)?;
            Ok(Embedded { vectors, tokens: encoded.iter().map(|e| e.0.len()).collect() })
        };
        run().map_err(|e| format!("{e:#}"))
    }

    fn vocab(&self) -> usize {
        self.model.spec.vocab
    }
}
