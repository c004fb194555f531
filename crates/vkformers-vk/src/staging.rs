//! Host <-> device transfers through two reusable host-visible buffers (one per direction),
//! in chunks, so a transfer of any size needs only `STAGING_BYTES` of host-visible memory.

use crate::device::Context;
use crate::error::{Result, VkError};
use crate::memory::{Buffer, BufferKind, BufferView};

/// Size of each staging buffer.
pub const STAGING_BYTES: u64 = 32 << 20;

pub(crate) struct Staging {
    upload: Buffer,
    download: Buffer,
}

impl Context {
    fn with_staging<R>(&self, f: impl FnOnce(&mut Staging) -> Result<R>) -> Result<R> {
        let mut guard = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            let size = STAGING_BYTES.min(self.caps().max_allocation_size.max(1 << 20));
            *guard = Some(Staging {
                upload: self.buffer_of_kind(size, BufferKind::Upload, "staging (upload)")?,
                download: self.buffer_of_kind(size, BufferKind::Download, "staging (download)")?,
            });
        }
        match guard.as_mut() {
            Some(s) => f(s),
            None => Err(VkError::Allocator("staging buffers missing".into())),
        }
    }

    /// Copies `data` into `dst` starting at byte `offset`.
    pub fn upload(&self, dst: &Buffer, offset: u64, data: &[u8]) -> Result<()> {
        assert!(offset + data.len() as u64 <= dst.size(), "upload past the end of {dst:?}");
        self.with_staging(|s| {
            let chunk = s.upload.size() as usize;
            for (i, part) in data.chunks(chunk).enumerate() {
                if !s.upload.write_mapped(part) {
                    return Err(VkError::Allocator("upload staging buffer is not mapped".into()));
                }
                let mut rec = self.recorder(false)?;
                let at = offset + (i * chunk) as u64;
                rec.copy(s.upload.slice(0, part.len() as u64), dst.slice(at, part.len() as u64))?;
                rec.submit()?;
            }
            Ok(())
        })
    }

    /// Copies `out.len()` bytes of `src`, starting at byte `offset`, into `out`.
    pub fn download(&self, src: BufferView<'_>, out: &mut [u8]) -> Result<()> {
        assert!(out.len() as u64 <= src.len, "download larger than the view");
        self.with_staging(|s| {
            let chunk = s.download.size() as usize;
            for (i, part) in out.chunks_mut(chunk).enumerate() {
                let mut rec = self.recorder(false)?;
                let at = src.offset + (i * chunk) as u64;
                rec.copy(src.buffer.slice(at, part.len() as u64), s.download.slice(0, part.len() as u64))?;
                rec.submit()?;
                if !s.download.read_mapped(part) {
                    return Err(VkError::Allocator("download staging buffer is not mapped".into()));
                }
            }
            Ok(())
        })
    }

    /// Uploads a slice of plain values into a new device buffer.
    pub fn buffer_from<T: bytemuck::Pod>(&self, data: &[T], what: &str) -> Result<Buffer> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let buf = self.buffer(bytes.len() as u64, what)?;
        self.upload(&buf, 0, bytes)?;
        Ok(buf)
    }

    /// [`Self::buffer_from`] in an exact-size buffer outside the pool ([`Self::exact_buffer`]):
    /// data that lives as long as the model.
    pub fn buffer_from_exact<T: bytemuck::Pod>(&self, data: &[T], what: &str) -> Result<Buffer> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let buf = self.exact_buffer(bytes.len() as u64, what)?;
        self.upload(&buf, 0, bytes)?;
        Ok(buf)
    }

    /// Reads a whole view back as plain values.
    pub fn read_vec<T: bytemuck::Pod>(&self, src: BufferView<'_>) -> Result<Vec<T>> {
        let n = src.len as usize / std::mem::size_of::<T>();
        let mut out = vec![T::zeroed(); n];
        self.download(src, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }
}
