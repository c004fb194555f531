//! The flags that pick files of a Hub dataset named by `--data org/name` (ignored for local
//! paths), shared by `train`, `eval` and `finetune`.

use vkformers_hub::DatasetQuery;

#[derive(clap::Args, Clone, Debug, Default)]
pub struct HubDataArgs {
    /// Hub dataset config: a top-level folder of the repo, or a config of its Parquet branch.
    #[arg(long)]
    pub data_config: Option<String>,
    /// Hub dataset split (default: train; an --eval-data Hub id defaults to validation).
    #[arg(long)]
    pub data_split: Option<String>,
    /// A glob over the Hub dataset repo's file names (`*` within a folder, `**` across).
    #[arg(long)]
    pub data_files: Option<String>,
}

impl HubDataArgs {
    /// The query for `--data`.
    pub fn query(&self) -> DatasetQuery {
        DatasetQuery {
            config: self.data_config.clone(),
            split: self.data_split.clone(),
            files: self.data_files.clone(),
        }
    }

    /// The query for `--eval-data`: the same config, the validation split, no file glob.
    pub fn eval_query(&self) -> DatasetQuery {
        DatasetQuery { config: self.data_config.clone(), split: Some("validation".into()), files: None }
    }
}
