//! `mpirun -n N vkformers train ...`: this process's part of a data-parallel run (feature
//! `mpi`). Started only under an MPI launcher; without the feature `Dist` has no value and
//! every run is the single-process one.

#[cfg(feature = "mpi")]
pub use imp::Dist;

/// Under a launcher with several ranks only `train` and `finetune` know their rank: any other
/// command would run N times over the same files.
pub fn only_train_runs_on_ranks(is_train: bool) -> anyhow::Result<()> {
    let ranks = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(1);
    if ranks > 1 && !is_train {
        anyhow::bail!(
            "only `vkformers train` and `finetune` run data parallel under mpirun ({ranks} ranks here): run \
             this command alone"
        );
    }
    Ok(())
}

/// Without MPI there is never a distributed run.
#[cfg(not(feature = "mpi"))]
pub enum Dist {}

#[cfg(not(feature = "mpi"))]
impl Dist {
    pub fn start() -> anyhow::Result<Option<Dist>> {
        Ok(None)
    }
    pub fn rank(&self) -> usize {
        match *self {}
    }
    pub fn barrier(&self) -> anyhow::Result<()> {
        match *self {}
    }
    pub fn device(&self, _: &vkformers_vk::DeviceSelector) -> anyhow::Result<vkformers_vk::DeviceSelector> {
        match *self {}
    }
    pub fn same_start(
        &self,
        _: &vkformers_tensor::Graph<'_>,
        _: &[vkformers_train::TrainableParam],
    ) -> anyhow::Result<()> {
        match *self {}
    }
    pub fn hooks(&mut self, _: bool) -> anyhow::Result<Box<dyn vkformers_train::DataParallel>> {
        match *self {}
    }
    pub fn fail(&self, _: &anyhow::Error) -> ! {
        match *self {}
    }
}

#[cfg(feature = "mpi")]
mod imp {
    use std::rc::Rc;

    use anyhow::Context as _;
    use vkformers_dist::{Comm, MpiParallel};
    use vkformers_tensor::Graph;
    use vkformers_train::{DataParallel, TrainableParam};
    use vkformers_vk::{list_devices, DeviceSelector, Instance, InstanceOptions};

    pub struct Dist {
        comm: Rc<Comm>,
        hooks: Option<MpiParallel>,
    }

    impl Dist {
        /// Initialises MPI when this process was started by a launcher (`None` otherwise).
        pub fn start() -> anyhow::Result<Option<Dist>> {
            if !vkformers_dist::under_mpi_launcher() {
                return Ok(None);
            }
            let comm = Rc::new(Comm::start().map_err(anyhow::Error::msg).context("starting MPI")?);
            let mut hooks = MpiParallel::new(comm.clone());
            if let Some(n) = std::env::var("VKFORMERS_DIST_BUCKET_ELEMS").ok().and_then(|v| v.parse().ok()) {
                hooks.set_bucket_elems(n);
            }
            hooks.set_overlap(std::env::var("VKFORMERS_DIST_OVERLAP").map_or(true, |v| v != "0"));
            Ok(Some(Dist { comm, hooks: Some(hooks) }))
        }

        pub fn rank(&self) -> usize {
            self.comm.rank
        }

        /// Every rank gets here before any goes on (e.g. past the output folder's checks).
        pub fn barrier(&self) -> anyhow::Result<()> {
            self.comm.sum_f64(vec![0.0]).map_err(anyhow::Error::msg)?;
            Ok(())
        }

        /// `--device` as given, or by default the local rank's GPU: local rank i takes the i-th
        /// GPU of its host (the i-th device when there is no GPU, e.g. lavapipe), wrapping
        /// around when ranks outnumber devices (they then share one).
        pub fn device(&self, asked: &DeviceSelector) -> anyhow::Result<DeviceSelector> {
            if *asked != DeviceSelector::Best {
                return Ok(asked.clone());
            }
            let instance = Instance::new(&InstanceOptions::default())?;
            let devices = list_devices(&instance)?;
            let gpus: Vec<_> = devices.iter().filter(|d| d.caps.device_type.contains("GPU")).collect();
            let pool = if gpus.is_empty() { devices.iter().collect() } else { gpus };
            anyhow::ensure!(!pool.is_empty(), "no Vulkan device");
            let (local, ranks) = (self.comm.local_rank, self.comm.local_size);
            if local == 0 && ranks > pool.len() {
                eprintln!("note: {ranks} ranks on this host share {} device(s)", pool.len());
            }
            Ok(DeviceSelector::Index(pool[local % pool.len()].index))
        }

        /// Same binary and arguments on every rank, then rank 0's parameters everywhere (the
        /// same initialisation or loaded weights), checked by checksum.
        pub fn same_start(&self, g: &Graph<'_>, params: &[TrainableParam]) -> anyhow::Result<()> {
            let hooks = self.hooks.as_ref().context("the trainer already took the MPI hooks")?;
            let args: Vec<String> = std::env::args().skip(1).collect();
            hooks.check_same_run(&args.join("\0"))?;
            let tensors: Vec<_> = params.iter().map(|p| p.tensor.clone()).collect();
            hooks.broadcast_params(g, &tensors)?;
            Ok(())
        }

        /// The trainer's data-parallel hooks (once); `zero1`: optimizer state sharded.
        pub fn hooks(&mut self, zero1: bool) -> anyhow::Result<Box<dyn DataParallel>> {
            let mut hooks = self.hooks.take().context("the MPI hooks were taken already")?;
            hooks.set_zero1(zero1);
            Ok(Box::new(hooks))
        }

        /// Reports this rank's error and ends the whole job, so no rank waits for this one.
        pub fn fail(&self, e: &anyhow::Error) -> ! {
            eprintln!("error on rank {} of {}: {e:#}", self.comm.rank, self.comm.world);
            self.comm.abort(1)
        }
    }
}
