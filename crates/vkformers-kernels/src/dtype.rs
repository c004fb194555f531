//! Storage types of tensors, and the casts between f32 and the 16-bit types.
//!
//! Kernels that support 16-bit storage have `f32`, `f16` and `bf16` variants (defines
//! `DT_F16` / `DT_BF16` with `shaders/dtype.glsl`): tensors are stored in the type, math is f32.

use vkformers_vk::{read, write, BufferView, Recorder, Result, VkError};

use crate::code::{self, CastCast4Push, CastCastPush};
use crate::launch::dispatch_elems;
pub use crate::matmul::DType;

impl DType {
    /// Variant-name suffix of kernels with storage variants.
    pub fn suffix(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// Elements in a view of `bytes` bytes.
    pub fn elements(self, bytes: u64) -> u64 {
        bytes / self.bytes()
    }
}

/// `out [n]` in `to` = `x [n]` in `from`; one side must be f32 (f32 -> f32 is a copy).
pub fn cast(rec: &mut Recorder, x: BufferView<'_>, from: DType, out: BufferView<'_>, to: DType) -> Result<()> {
    let k = match (from, to) {
        (DType::F32, DType::F16) => &code::CAST_CAST_TO_F16,
        (DType::F32, DType::BF16) => &code::CAST_CAST_TO_BF16,
        (DType::F16, DType::F32) => &code::CAST_CAST_FROM_F16,
        (DType::BF16, DType::F32) => &code::CAST_CAST_FROM_BF16,
        (DType::F32, DType::F32) => return crate::elementwise::copy(rec, x, out),
        (a, b) => {
            return Err(VkError::Kernel {
                kernel: "cast/cast".into(),
                message: format!("{a:?} -> {b:?}: one side must be f32"),
            })
        }
    };
    let n = from.elements(x.len);
    if n != to.elements(out.len) || n == 0 || n > u64::from(u32::MAX) || !x.len.is_multiple_of(from.bytes()) {
        return Err(VkError::Kernel {
            kernel: k.name.into(),
            message: format!("{} bytes of {from:?} into {} bytes of {to:?}", x.len, out.len),
        });
    }
    // Four elements a thread where the views allow 16-byte f32 and 8-byte 16-bit accesses.
    let aligned = n.is_multiple_of(4) && x.offset.is_multiple_of(16) && out.offset.is_multiple_of(16);
    if aligned && std::env::var_os("VKFORMERS_CAST_SCALAR").is_none() {
        let k4 = match (from, to) {
            (DType::F32, DType::F16) => &code::CAST_CAST4_TO_F16,
            (DType::F32, DType::BF16) => &code::CAST_CAST4_TO_BF16,
            (DType::F16, _) => &code::CAST_CAST4_FROM_F16,
            _ => &code::CAST_CAST4_FROM_BF16,
        };
        let n4 = n / 4;
        let push = CastCast4Push { n4: n4 as u32 };
        return dispatch_elems(rec, k4, &[read(x), write(out)], &push, n4);
    }
    dispatch_elems(rec, k, &[read(x), write(out)], &CastCastPush { n: n as u32 }, n)
}

/// A 16-bit twin of an f32 output: the `twin` variants of the RMSNorm forward, RoPE and the
/// GLU forward also write their f32 result into `view`, rounded to `dtype` exactly as [`cast`]
/// rounds it (the copy a 16-bit product reads under autocast, with no cast dispatch).
#[derive(Clone, Copy, Debug)]
pub struct Twin<'a> {
    pub view: BufferView<'a>,
    pub dtype: DType,
}

impl Twin<'_> {
    /// The shaders' `twin` push constant (1: f16, 2: bf16), checking that `view` holds
    /// `elems` values of the type.
    pub(crate) fn code(&self, kernel: &str, elems: u64) -> Result<u32> {
        let code = match self.dtype {
            DType::F16 => 1,
            DType::BF16 => 2,
            DType::F32 => 0,
        };
        let bytes = elems * self.dtype.bytes();
        if code == 0 || self.view.len < bytes {
            return Err(VkError::Kernel {
                kernel: kernel.into(),
                message: format!("16-bit twin: {} bytes of {:?} for {elems} values", self.view.len, self.dtype),
            });
        }
        Ok(code)
    }
}
