//! Making tensors on a [`Graph`]: views of existing storage (prefixes, row blocks), constants,
//! parameters, integer tensors and uninitialised buffers.

use std::rc::Rc;

use vkformers_kernels::elementwise;
use vkformers_vk::{Result, VkError};

use super::{as_source, check_len, Graph};
use crate::tensor::{DType, Tensor};

impl Graph<'_> {
    /// The first `shape`-many elements of `src` as a tensor of that shape, sharing storage and
    /// carrying no gradient (e.g. the filled prefix of a KV cache).
    pub fn view_prefix(&self, src: &Tensor, shape: &[usize]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n > src.numel() {
            return Err(VkError::Kernel {
                kernel: "view_prefix".into(),
                message: format!("{shape:?} is larger than {:?}", src.shape()),
            });
        }
        Ok(self.share(src, shape, false))
    }

    /// Rows `[row0, row0 + rows)` of `src` (split along its first dim) as a tensor sharing its
    /// storage at an offset, carrying no gradient: the q, k and v weights as row blocks of one
    /// packed `[q + k + v, in]` weight, read apart or as one product. The offset must keep the
    /// view on whole 4-byte words (16-bit tensors are read as packed words).
    pub fn view_rows(&self, src: &Tensor, row0: usize, rows: usize) -> Result<Tensor> {
        let shape = src.shape();
        let bad = |message: String| VkError::Kernel { kernel: "view_rows".into(), message };
        let Some((&total, rest)) = shape.split_first() else {
            return Err(bad("a scalar has no rows".into()));
        };
        if row0 + rows > total {
            return Err(bad(format!("rows {row0}..{} of {shape:?}", row0 + rows)));
        }
        let row_bytes = rest.iter().product::<usize>() as u64 * src.dtype().bytes();
        let offset = src.0.offset + row0 as u64 * row_bytes;
        if !offset.is_multiple_of(4) {
            return Err(bad(format!("rows from {row0} of {shape:?} {:?} start inside a word", src.dtype())));
        }
        let view_shape: Vec<usize> = [&[rows][..], rest].concat();
        let mut t = self.share(src, &view_shape, false);
        let inner = Rc::get_mut(&mut t.0).expect("a new tensor has one handle");
        inner.offset = offset;
        // A block of a weight is a weight (autocast keeps its 16-bit copy across calls).
        inner.is_source = src.0.is_source;
        Ok(t)
    }

    /// Rows `[row0, row0 + rows)` of the f32 storage `pack` as a parameter (a leaf that
    /// receives gradients) sharing its storage: in training a layer's q, k and v weights are
    /// row blocks of one packed `[q + k + v, in]` buffer, stepped, saved and clipped under their
    /// own names, and read together by one product (`ops::packed_linear`).
    pub fn parameter_rows(&self, pack: &Tensor, row0: usize, rows: usize) -> Result<Tensor> {
        if pack.dtype() != DType::F32 {
            return Err(VkError::Kernel {
                kernel: "parameter_rows".into(),
                message: format!("parameters are f32, the pack {:?} is {:?}", pack.shape(), pack.dtype()),
            });
        }
        let mut t = self.view_rows(pack, row0, rows)?;
        let inner = Rc::get_mut(&mut t.0).expect("a new tensor has one handle");
        inner.requires_grad = true;
        inner.is_leaf = true;
        inner.is_source = true;
        Ok(t)
    }

    /// A tensor of `shape` over `first`'s storage from its offset on, carrying no gradient: the
    /// packed gradient `[Σ rows, in]` whose row blocks are the parts' gradients, the first at
    /// `first` (the caller checked the others follow it).
    pub(crate) fn rows_from(&self, first: &Tensor, shape: &[usize]) -> Tensor {
        self.share(first, shape, false)
    }

    /// A constant of `shape` and `dtype` whose contents the caller uploads (`upload_into`, by
    /// row blocks through `view_rows`): a packed weight filled part by part at load, with no
    /// second copy of any part on the device.
    pub fn constant_uninit(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        Ok(as_source(self.lasting(shape, dtype)?))
    }

    /// An uninitialised tensor as long-lived as the model: exact size (16-bit storage padded to
    /// whole 4-byte words), outside the pool (no size-class rounding), fresh memory.
    fn lasting(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let bytes = (n.max(1) as u64 * dtype.bytes()).next_multiple_of(4);
        let buf = self.ctx.exact_buffer(bytes, "tensor")?;
        Ok(self.make_typed(buf, shape, dtype, false, false))
    }

    /// Copies host bytes into `t`'s storage (the loader filling a packed weight's row blocks);
    /// `bytes` must be `t`'s size (16-bit data: an even count of values, or padded).
    pub fn upload_into(&self, t: &Tensor, bytes: &[u8]) -> Result<()> {
        let view = t.view();
        if bytes.len() as u64 != view.len {
            return Err(VkError::Kernel {
                kernel: "upload_into".into(),
                message: format!("{} bytes for {:?} {:?}", bytes.len(), t.shape(), t.dtype()),
            });
        }
        // Work recorded earlier may still read or write the buffer: it runs first.
        self.sync()?;
        self.ctx.upload(view.buffer, view.offset, bytes)
    }

    /// An uninitialised f32 tensor (its contents are whatever a kernel writes next).
    pub fn empty(&self, shape: &[usize]) -> Result<Tensor> {
        self.empty_as(shape, DType::F32)
    }

    /// An uninitialised f32 tensor that lives for the whole run (an optimizer's moments): exact
    /// size, outside the buffer pool (no size-class rounding), fresh memory.
    pub fn empty_lasting(&self, shape: &[usize]) -> Result<Tensor> {
        self.lasting(shape, DType::F32)
    }

    /// An uninitialised tensor of `dtype`. 16-bit storage is padded to whole 4-byte words
    /// (kernels read it as packed words).
    pub fn empty_as(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let bytes = (n.max(1) as u64 * dtype.bytes()).next_multiple_of(4);
        // Every op writes its output before reading it: it may reuse memory this batch freed.
        let start = self.profile.borrow().is_some().then(std::time::Instant::now);
        let buf = self.ctx.scratch_buffer(bytes, "tensor")?;
        if let (Some(t), Some(p)) = (start, self.profile.borrow_mut().as_mut()) {
            p.alloc_ns += t.elapsed().as_nanos() as f64;
        }
        Ok(self.make_typed(buf, shape, dtype, false, false))
    }

    /// A tensor filled with `value`.
    pub fn full(&self, shape: &[usize], value: f32) -> Result<Tensor> {
        let t = self.empty(shape)?;
        self.record(|rec| elementwise::fill(rec, t.view(), value))?;
        Ok(t)
    }

    /// A constant that lives as long as the model (a weight) from host data: exact size,
    /// outside the buffer pool, whatever its size.
    pub fn weight_constant(&self, data: &[f32], shape: &[usize]) -> Result<Tensor> {
        check_len(data.len(), shape)?;
        let buf = self.ctx.buffer_from_exact(data, "weight")?;
        Ok(as_source(self.make(buf, shape, false, false)))
    }

    /// A constant tensor from host data.
    pub fn constant(&self, data: &[f32], shape: &[usize]) -> Result<Tensor> {
        check_len(data.len(), shape)?;
        let buf = self.small_upload(bytemuck::cast_slice(data))?;
        Ok(as_source(self.make(buf, shape, false, false)))
    }

    /// A device buffer holding `bytes`: small data (≤ 64 KiB) is written by a command of the
    /// open batch into a scratch buffer (no submission of its own: decoding uploads ids,
    /// masks and positions every token), larger data through the staging path.
    fn small_upload(&self, bytes: &[u8]) -> Result<vkformers_vk::Buffer> {
        let padded = bytes.len().next_multiple_of(4).max(4);
        if padded > vkformers_vk::Recorder::UPDATE_MAX {
            self.step_outside_transfer();
            return self.ctx.buffer_from(bytes, "tensor");
        }
        let buf = self.ctx.scratch_buffer(padded as u64, "tensor")?;
        let mut words = bytes.to_vec();
        words.resize(padded, 0);
        self.record(|rec| rec.update(buf.view(), &words))?;
        Ok(buf)
    }

    /// A constant tensor of 16-bit values given as their bit patterns (bf16 or f16 weights
    /// kept in their stored type).
    pub fn constant_bits(&self, bits: &[u16], shape: &[usize], dtype: DType) -> Result<Tensor> {
        check_len(bits.len(), shape)?;
        if dtype == DType::F32 {
            return Err(VkError::Kernel { kernel: "tensor".into(), message: "16-bit data for an f32 tensor".into() });
        }
        let mut words = bits.to_vec();
        if words.len() % 2 == 1 {
            words.push(0); // pad to whole 4-byte words
        }
        // Weights: exact size, outside the pool.
        let buf = self.ctx.buffer_from_exact(&words, "tensor")?;
        Ok(as_source(self.make_typed(buf, shape, dtype, false, false)))
    }

    /// A parameter (a leaf that receives gradients) from host data.
    pub fn parameter(&self, data: &[f32], shape: &[usize]) -> Result<Tensor> {
        check_len(data.len(), shape)?;
        let buf = self.ctx.buffer_from_exact(data, "parameter")?;
        Ok(as_source(self.make(buf, shape, true, true)))
    }

    /// int32 data (token ids, labels, positions) as a buffer with a shape.
    pub fn ints(&self, data: &[i32], shape: &[usize]) -> Result<Tensor> {
        check_len(data.len(), shape)?;
        let buf = self.small_upload(bytemuck::cast_slice(data))?;
        Ok(self.make(buf, shape, false, false))
    }

    /// The step inputs of a step: as [`Graph::ints`], except that in a captured step the data
    /// goes to the device through the staging path, outside the step's batch (its first run
    /// finds it there; a replay must not write it again over what the step advanced it to),
    /// and the tensor is marked as a step input ([`Graph::mark_step_input`]).
    pub fn step_ints(&self, data: &[i32], shape: &[usize]) -> Result<Tensor> {
        check_len(data.len(), shape)?;
        let t = if self.capturing() {
            let buf = self.ctx.buffer_from(bytemuck::cast_slice::<i32, u8>(data), "step inputs")?;
            self.make(buf, shape, false, false)
        } else {
            self.ints(data, shape)?
        };
        self.mark_step_input(&t);
        Ok(t)
    }

    /// An i32 tensor `shape` over an existing buffer (ids a kernel wrote: a decode step's chosen
    /// tokens feed the next step's embedding without a trip through the host). No gradient.
    pub fn ints_over(&self, buf: vkformers_vk::Buffer, shape: &[usize]) -> Result<Tensor> {
        let need = shape.iter().product::<usize>() as u64 * 4;
        if buf.size() < need {
            return Err(VkError::Kernel {
                kernel: "graph".into(),
                message: format!("a buffer of {} bytes cannot hold ints {shape:?}", buf.size()),
            });
        }
        Ok(self.make(buf, shape, false, false))
    }
}
