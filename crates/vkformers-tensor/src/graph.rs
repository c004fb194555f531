//! The `Graph`: device, open batch, and the tape of recorded ops.
//!
//! Each differentiable op pushes a `Node` holding its inputs and a closure that, given the
//! gradient of its output, records the kernels for the gradients of its inputs. `backward`
//! walks the tape in reverse; a node is dropped as soon as it has run, which releases the
//! activations it saved (the recorder keeps their buffers alive until the GPU is done).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use vkformers_kernels::{broadcast, elementwise};
use vkformers_vk::{Context, Recorder, Result, VkError};

use crate::tensor::{Inner, Tensor};

static NEXT_TENSOR_ID: AtomicU64 = AtomicU64::new(1);

/// Computes the gradients of a node's inputs (in order; `None` for inputs without gradient)
/// from the gradient of its output.
pub type BackwardFn = Box<dyn FnOnce(&Graph<'_>, &Tensor) -> Result<Vec<Option<Tensor>>>>;

struct Node {
    output: u64,
    inputs: Vec<Tensor>,
    backward: BackwardFn,
}

/// Device state, the batch being recorded and the tape.
pub struct Graph<'c> {
    ctx: &'c Context,
    rec: RefCell<Option<Recorder>>,
    tape: RefCell<Vec<Node>>,
    grad_enabled: Cell<bool>,
    submissions: Cell<usize>,
}

impl<'c> Graph<'c> {
    /// A graph on `ctx`.
    pub fn new(ctx: &'c Context) -> Self {
        Graph {
            ctx,
            rec: RefCell::new(None),
            tape: RefCell::new(Vec::new()),
            grad_enabled: Cell::new(true),
            submissions: Cell::new(0),
        }
    }

    /// The device context.
    pub fn ctx(&self) -> &'c Context {
        self.ctx
    }

    /// Runs `f` with the open recorder (opening one if needed).
    pub fn record<R>(&self, f: impl FnOnce(&mut Recorder) -> Result<R>) -> Result<R> {
        let mut slot = self.rec.borrow_mut();
        if slot.is_none() {
            *slot = Some(self.ctx.recorder(false)?);
        }
        match slot.as_mut() {
            Some(rec) => f(rec),
            None => Err(VkError::Kernel { kernel: "graph".into(), message: "no recorder".into() }),
        }
    }

    /// Submits everything recorded so far and waits for it.
    pub fn sync(&self) -> Result<()> {
        if let Some(rec) = self.rec.borrow_mut().take() {
            if !rec.is_empty() {
                rec.submit()?;
                self.submissions.set(self.submissions.get() + 1);
            }
        }
        Ok(())
    }

    /// Number of batches submitted so far (one per `sync` with work in it).
    pub fn submissions(&self) -> usize {
        self.submissions.get()
    }

    /// Runs `f` without recording a tape (inference).
    pub fn no_grad<R>(&self, f: impl FnOnce() -> R) -> R {
        let before = self.grad_enabled.replace(false);
        let out = f();
        self.grad_enabled.set(before);
        out
    }

    /// True while ops record backward nodes.
    pub fn grad_enabled(&self) -> bool {
        self.grad_enabled.get()
    }

    fn make(&self, buf: vkformers_vk::Buffer, shape: &[usize], requires_grad: bool, is_leaf: bool) -> Tensor {
        Tensor(Rc::new(Inner {
            id: NEXT_TENSOR_ID.fetch_add(1, Ordering::Relaxed),
            buf,
            shape: shape.to_vec(),
            requires_grad,
            grad: RefCell::new(None),
            is_leaf,
        }))
    }

    /// The same storage under another shape (same element count); gradients flow when
    /// `src` carries them and grad mode is on.
    pub(crate) fn alias(&self, src: &Tensor, shape: &[usize]) -> Tensor {
        let rg = self.grad_enabled() && src.requires_grad();
        self.make(src.0.buf.clone(), shape, rg, false)
    }

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
        Ok(self.make(src.0.buf.clone(), shape, false, false))
    }

    /// An uninitialised tensor (its contents are whatever a kernel writes next).
    pub fn empty(&self, shape: &[usize]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let buf = self.ctx.buffer((n.max(1) * 4) as u64, "tensor")?;
        Ok(self.make(buf, shape, false, false))
    }

    /// A tensor filled with `value`.
    pub fn full(&self, shape: &[usize], value: f32) -> Result<Tensor> {
        let t = self.empty(shape)?;
        self.record(|rec| elementwise::fill(rec, t.view(), value))?;
        Ok(t)
    }

    /// A constant tensor from host data.
    pub fn constant(&self, data: &[f32], shape: &[usize]) -> Result<Tensor> {
        check_len(data.len(), shape)?;
        let buf = self.ctx.buffer_from(data, "tensor")?;
        Ok(self.make(buf, shape, false, false))
    }

    /// A parameter (a leaf that receives gradients) from host data.
    pub fn parameter(&self, data: &[f32], shape: &[usize]) -> Result<Tensor> {
        check_len(data.len(), shape)?;
        let buf = self.ctx.buffer_from(data, "parameter")?;
        Ok(self.make(buf, shape, true, true))
    }

    /// int32 data (token ids, labels, positions) as a buffer with a shape.
    pub fn ints(&self, data: &[i32], shape: &[usize]) -> Result<Tensor> {
        check_len(data.len(), shape)?;
        let buf = self.ctx.buffer_from(data, "int tensor")?;
        Ok(self.make(buf, shape, false, false))
    }

    /// Reads a tensor back (submits pending work first).
    pub fn read(&self, t: &Tensor) -> Result<Vec<f32>> {
        self.sync()?;
        self.ctx.read_vec(t.view())
    }

    /// The output tensor of an op: new storage, gradient flag from its inputs.
    pub fn output(&self, shape: &[usize], inputs: &[&Tensor]) -> Result<Tensor> {
        let t = self.empty(shape)?;
        let rg = self.grad_enabled() && inputs.iter().any(|i| i.requires_grad());
        Ok(if rg { self.make(t.0.buf.clone(), shape, true, false) } else { t })
    }

    /// Records the backward of an op whose output is `out`, when gradients flow through it.
    pub fn push_node(&self, out: &Tensor, inputs: Vec<Tensor>, backward: BackwardFn) {
        if out.requires_grad() {
            self.tape.borrow_mut().push(Node { output: out.id(), inputs, backward });
        }
    }

    /// Back-propagates from a scalar `loss`: every parameter that `loss` depends on gets its
    /// gradient accumulated (`+=`) into `param.grad()`. The tape is consumed.
    pub fn backward(&self, loss: &Tensor) -> Result<()> {
        if loss.numel() != 1 {
            return Err(VkError::Kernel {
                kernel: "backward".into(),
                message: format!("loss must be a scalar, got {:?}", loss.shape()),
            });
        }
        let one = self.full(&[1], 1.0)?;
        self.backward_from(loss, &one)
    }

    /// Back-propagates an upstream gradient `grad` (shaped like `out`) from `out`, as
    /// `out.backward(gradient=grad)` does in PyTorch.
    pub fn backward_from(&self, out: &Tensor, grad: &Tensor) -> Result<()> {
        if out.shape() != grad.shape() {
            return Err(VkError::Kernel {
                kernel: "backward".into(),
                message: format!("gradient {:?} for output {:?}", grad.shape(), out.shape()),
            });
        }
        if out.is_leaf() {
            return self.accumulate_leaf(out, grad);
        }
        let mut grads: HashMap<u64, Tensor> = HashMap::new();
        grads.insert(out.id(), grad.clone());
        loop {
            let node = self.tape.borrow_mut().pop();
            let Some(node) = node else { break };
            let Some(g) = grads.remove(&node.output) else { continue };
            let inputs = node.inputs;
            let input_grads = self.no_grad(|| (node.backward)(self, &g))?;
            for (input, ig) in inputs.iter().zip(input_grads) {
                let Some(ig) = ig else { continue };
                if !input.requires_grad() {
                    continue;
                }
                if input.is_leaf() {
                    self.accumulate_leaf(input, &ig)?;
                } else if let Some(prev) = grads.remove(&input.id()) {
                    // A fresh sum: either operand may also be held elsewhere (an op may hand the
                    // same gradient to two inputs), so neither is updated in place.
                    let sum = self.empty(input.shape())?;
                    self.record(|rec| elementwise::add(rec, prev.view(), ig.view(), sum.view()))?;
                    grads.insert(input.id(), sum);
                } else {
                    grads.insert(input.id(), ig);
                }
            }
        }
        Ok(())
    }

    fn accumulate_leaf(&self, leaf: &Tensor, g: &Tensor) -> Result<()> {
        let mut slot = leaf.0.grad.borrow_mut();
        match slot.as_ref() {
            Some(acc) => {
                self.record(|rec| broadcast::axpy(rec, 1.0, g.view(), acc.view(), vkformers_kernels::dtype::DType::F32))
            }
            None => {
                let acc = self.empty(leaf.shape())?;
                self.record(|rec| elementwise::copy(rec, g.view(), acc.view()))?;
                *slot = Some(acc);
                Ok(())
            }
        }
    }

    /// Drops the recorded tape without running it (e.g. after an evaluation forward).
    pub fn clear_tape(&self) {
        self.tape.borrow_mut().clear();
    }

    /// Number of nodes on the tape (for tests of memory release).
    pub fn tape_len(&self) -> usize {
        self.tape.borrow().len()
    }
}

fn check_len(n: usize, shape: &[usize]) -> Result<()> {
    let want: usize = shape.iter().product();
    if n != want {
        return Err(VkError::Kernel { kernel: "tensor".into(), message: format!("{n} values for shape {shape:?}") });
    }
    Ok(())
}
