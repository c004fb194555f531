//! `Tensor`: a contiguous array on the device with a shape and a storage type (f32, bf16 or
//! f16; int32 ids and masks are tagged f32, being 4-byte words), shared by cheap clones.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

pub use vkformers_kernels::dtype::DType;
use vkformers_vk::{Buffer, BufferView};

/// A contiguous row-major tensor (possibly at an offset of a shared buffer). Clones share the
/// same storage.
#[derive(Clone)]
pub struct Tensor(pub(crate) Rc<Inner>);

pub(crate) struct Inner {
    pub(crate) id: u64,
    pub(crate) buf: Buffer,
    /// Byte offset of the first element in `buf` (0 but for row blocks of a packed buffer:
    /// `Graph::view_rows`).
    pub(crate) offset: u64,
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: DType,
    /// Made from host data (`constant`, `parameter`), not by an op: autocast may keep its
    /// 16-bit copy across calls until the optimizer changes it.
    pub(crate) is_source: bool,
    pub(crate) requires_grad: bool,
    /// Only leaves (parameters) keep a gradient; it accumulates (`+=`) across backward passes.
    pub(crate) grad: RefCell<Option<Tensor>>,
    pub(crate) is_leaf: bool,
    /// Another tensor was made on this storage (`alias`, `view_prefix`, `detach`), or this one
    /// on another's: writing it in place could change a tensor someone else holds.
    pub(crate) shares_storage: Cell<bool>,
}

impl Tensor {
    /// Unique id within the process.
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// Dimensions, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.0.shape
    }

    /// Storage type.
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.0.shape.iter().product()
    }

    /// Bytes of its elements in its storage type.
    pub fn bytes(&self) -> u64 {
        self.numel() as u64 * self.0.dtype.bytes()
    }

    /// Size of the last dimension.
    pub fn last_dim(&self) -> usize {
        self.0.shape.last().copied().unwrap_or(1)
    }

    /// Number of rows when viewed as `[numel / last_dim, last_dim]`.
    pub fn rows(&self) -> usize {
        self.numel() / self.last_dim().max(1)
    }

    /// True when gradients flow to or through this tensor.
    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad
    }

    /// The device storage (the whole tensor: its bytes from its offset in the buffer).
    pub fn view(&self) -> BufferView<'_> {
        self.0.buf.slice(self.0.offset, self.numel() as u64 * self.0.dtype.bytes())
    }

    /// The accumulated gradient of a leaf, if any backward pass reached it.
    pub fn grad(&self) -> Option<Tensor> {
        self.0.grad.borrow().clone()
    }

    /// Forgets the accumulated gradient (the next backward starts from zero).
    pub fn zero_grad(&self) {
        self.0.grad.borrow_mut().take();
    }

    /// Nothing else can see this tensor's storage: no other handle (strong or weak) and no
    /// tensor sharing its buffer. Such a tensor may be taken over and written in place.
    pub(crate) fn is_sole_owner(&self) -> bool {
        Rc::strong_count(&self.0) == 1 && Rc::weak_count(&self.0) == 0 && !self.0.shares_storage.get()
    }

    pub(crate) fn is_leaf(&self) -> bool {
        self.0.is_leaf
    }

    /// A handle that does not keep the tensor alive (to observe when saved activations are
    /// released).
    pub fn downgrade(&self) -> WeakTensor {
        WeakTensor(Rc::downgrade(&self.0))
    }
}

/// A non-owning handle to a tensor.
pub struct WeakTensor(std::rc::Weak<Inner>);

impl WeakTensor {
    /// True while some owner (a user handle or a tape node) still holds the tensor.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor(#{} {:?} {:?}{})",
            self.0.id,
            self.0.shape,
            self.0.dtype,
            if self.0.requires_grad { " grad" } else { "" }
        )
    }
}
