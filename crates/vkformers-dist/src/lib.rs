//! Data-parallel training over MPI (`mpirun -n N vkformers train ...`).
//!
//! Every rank drives one Vulkan device and holds a full copy of the parameters and of AdamW's
//! moments. Each optimizer step, rank `r` trains on the `r`-th batch of each window of `N`
//! batches of one global shuffled order (`vkformers_train::Loader::shard`); the loss of each
//! micro-batch is divided by the target count of the whole step over all ranks; after the
//! last micro-batch's backward the gradients are summed over ranks (~25 MB buckets, last layer
//! first, started during that backward as their gradients become final: `overlap`, on a
//! communication thread) and every rank takes the same AdamW step. MPI runs on its own thread
//! (`comm`), the only one that calls it. `--zero 1` shards the optimizer state by parameter
//! (`zero`).

pub mod comm;
pub mod engine;
mod overlap;
pub mod zero;

pub use comm::Comm;
pub use engine::{CommStats, MpiParallel, BUCKET_ELEMS};

/// True when this process was started by an MPI launcher (Open MPI's `mpirun`, MPICH's
/// hydra, or a PMIx launcher such as `srun`): only then is MPI initialised.
pub fn under_mpi_launcher() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"].iter().any(|v| std::env::var_os(v).is_some())
}
