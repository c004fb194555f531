//! ZeRO stage 1 (`--zero 1`) by parameter, as torch's `ZeroRedundancyOptimizer` partitions:
//! each parameter is owned by one rank (largest first, to the least loaded rank). Its
//! gradient is summed into the owner only (MPI_Reduce in buckets per owner: the reduce-scatter
//! by parameter), the global norm comes from one all-reduce of the ranks' sums of squares, the
//! owner alone keeps its AdamW moments and steps it, then broadcasts the new values (the
//! all-gather). Saves the moments' memory (8 bytes per parameter, spread over the ranks).

use vkformers_tensor::optim::{AdamW, Param};
use vkformers_tensor::{Graph, Tensor};
use vkformers_train::Result;

use crate::comm::Comm;
use crate::engine::{check_f32, mpi_err, upload};

/// `owners[i]`: the rank that steps parameter `i` (the same on every rank).
pub fn owners(params: &[Param], world: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..params.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(params[i].tensor.numel()), i));
    let (mut load, mut owner) = (vec![0usize; world], vec![0usize; params.len()]);
    for i in order {
        let r = (0..world).min_by_key(|&r| (load[r], r)).unwrap_or(0);
        owner[i] = r;
        load[r] += params[i].tensor.numel();
    }
    owner
}

/// Clips this rank's summed gradients `owned` as `clip_grad_norm_` does (`norm`: ‖g‖ over
/// every rank's, in f64; coefficient `min(1, max_norm / (‖g‖ + 1e-6))`, none when `max_norm`
/// is 0) and writes them back into the gradients.
pub fn clip_owned(g: &Graph<'_>, owned: Vec<(Tensor, Vec<f32>)>, norm: f64, max_norm: f32) -> Result<()> {
    let coef = if max_norm > 0.0 { (f64::from(max_norm) / (norm + 1e-6)).min(1.0) as f32 } else { 1.0 };
    for (t, mut s) in owned {
        if coef != 1.0 {
            s.iter_mut().for_each(|x| *x *= coef);
        }
        upload(g, &t, &s)?;
    }
    Ok(())
}

/// Every rank gets the new values of every parameter: one broadcast per owner of its
/// parameters, concatenated in order (the all-gather of ZeRO-1).
pub fn gather_params(g: &Graph<'_>, comm: &Comm, params: &[Param], owners: &[usize]) -> Result<()> {
    g.sync()?;
    for root in 0..comm.world {
        let mine: Vec<&Tensor> =
            params.iter().zip(owners).filter(|(_, &o)| o == root).map(|(p, _)| &p.tensor).collect();
        let n: usize = mine.iter().map(|t| t.numel()).sum();
        let mut data = Vec::with_capacity(n);
        if comm.rank == root {
            for t in &mine {
                check_f32(t, "parameter")?;
                data.extend(g.read(t)?);
            }
        } else {
            data.resize(n, 0.0);
        }
        let data = comm.bcast_f32(root, data).map_err(mpi_err)?;
        if comm.rank != root {
            let mut at = 0;
            for t in mine {
                upload(g, t, &data[at..at + t.numel()])?;
                at += t.numel();
            }
        }
    }
    // New f32 values: any 16-bit copy of them (autocast) is stale.
    g.clear_casts();
    Ok(())
}

/// Rank 0 (the checkpoint writer) receives the moments of the parameters other ranks own, so
/// the checkpoint holds the whole optimizer state and resumes on any number of ranks.
pub fn gather_moments(g: &Graph<'_>, comm: &Comm, params: &[Param], owners: &[usize], opt: &mut AdamW) -> Result<()> {
    for (p, &root) in params.iter().zip(owners) {
        if root == 0 {
            continue;
        }
        let n = p.tensor.numel();
        let mine = if comm.rank == root { opt.moments(&p.tensor).cloned() } else { None };
        let has = comm.bcast_f32(root, vec![f32::from(u8::from(mine.is_some()))]).map_err(mpi_err)?;
        if has[0] == 0.0 {
            continue;
        }
        let mv = match &mine {
            Some((m, v)) => [g.read(m)?, g.read(v)?].concat(),
            None => vec![0.0; 2 * n],
        };
        let mv = comm.bcast_f32(root, mv).map_err(mpi_err)?;
        if comm.rank == 0 {
            opt.import_moments(g, &p.tensor, &mv[..n], &mv[n..])?;
        }
    }
    Ok(())
}
