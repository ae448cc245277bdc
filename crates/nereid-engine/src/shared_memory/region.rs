//! One registered system shared memory region: a read-only mapping of
//! `byte_size` bytes at `offset` in `/dev/shm/<key>`, and the open file,
//! through which outputs are written (`pwrite`). Writing through the file
//! rather than a mutable mapping means no `&mut [u8]` ever aliases the
//! `&[u8]` slices that requests in flight hold; on Linux the page cache
//! makes both views, and the client's mapping, the same memory.
//!
//! Mapping is `unsafe` in Rust because another process may change the
//! file while a slice of it is borrowed. That is the extension's contract:
//! the client owns the region and must not change an input while its
//! request runs, as with Triton.

use std::fs::{File, OpenOptions};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use memmap2::{Mmap, MmapOptions};

use super::SharedMemoryError;

/// Where POSIX shared memory objects live on Linux.
const SHM_DIR: &str = "/dev/shm";

/// A region as registered: what the status endpoints show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// A mapped region. Requests hold it through an `Arc`, so unregistering
/// it while one is in flight only drops the registry's reference.
#[derive(Debug)]
pub(super) struct Region {
    pub(super) status: RegionStatus,
    file: File,
    map: Mmap,
}

impl Region {
    /// Opens and maps `key` as `shm_open` names it, checking that
    /// `offset + byte_size` lies within the file.
    pub(super) fn open(status: RegionStatus) -> Result<Region, SharedMemoryError> {
        let name = &status.name;
        let path = object_path(&status.key).ok_or_else(|| SharedMemoryError::Open {
            key: status.key.clone(),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
        // As shm_open: a symbolic link in /dev/shm is not followed.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .map_err(|source| SharedMemoryError::Open {
                key: status.key.clone(),
                source,
            })?;
        let file_size = file
            .metadata()
            .map_err(|source| SharedMemoryError::Open {
                key: status.key.clone(),
                source,
            })?
            .len();
        let end = status.offset.checked_add(status.byte_size);
        if end.is_none_or(|end| end > file_size) {
            return Err(SharedMemoryError::OutsideFile { name: name.clone() });
        }
        if status.byte_size == 0 {
            return Err(SharedMemoryError::Empty { name: name.clone() });
        }
        let len = usize::try_from(status.byte_size)
            .map_err(|_| SharedMemoryError::OutsideFile { name: name.clone() })?;
        #[expect(
            unsafe_code,
            reason = "mapping a client's shared memory object is the extension's purpose; see the module comment"
        )]
        let map = unsafe { MmapOptions::new().offset(status.offset).len(len).map(&file) }.map_err(
            |source| SharedMemoryError::Map {
                name: name.clone(),
                source,
            },
        )?;
        Ok(Region { status, file, map })
    }

    pub(super) fn len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Bytes `range` of the region, sharing the mapping (no copy). The
    /// range must have been checked against [`Region::len`].
    pub(super) fn slice(self: &Arc<Self>, range: Range<usize>) -> Option<Bytes> {
        self.map.get(range.clone())?;
        Some(Bytes::from_owner(RegionSlice {
            region: Arc::clone(self),
            range,
        }))
    }

    /// Writes `data` at `offset` within the region.
    pub(super) fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let end = offset.checked_add(data.len() as u64);
        if end.is_none_or(|end| end > self.len()) {
            return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
        }
        self.file.write_all_at(data, self.status.offset + offset)
    }
}

/// A slice of a region that keeps the region mapped while it lives.
struct RegionSlice {
    region: Arc<Region>,
    range: Range<usize>,
}

impl AsRef<[u8]> for RegionSlice {
    fn as_ref(&self) -> &[u8] {
        // Checked in Region::slice; the mapping never changes size.
        self.region.map.get(self.range.clone()).unwrap_or_default()
    }
}

/// `/dev/shm/<key>` for a key as `shm_open` takes it: one optional leading
/// '/', then a name with no other '/'.
fn object_path(key: &str) -> Option<PathBuf> {
    let name = key.strip_prefix('/').unwrap_or(key);
    let bad = name.is_empty() || name.contains('/') || name == "." || name == "..";
    (!bad).then(|| Path::new(SHM_DIR).join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_objects_in_dev_shm() {
        assert_eq!(object_path("/a"), Some(PathBuf::from("/dev/shm/a")));
        assert_eq!(object_path("a"), Some(PathBuf::from("/dev/shm/a")));
        for bad in ["", "/", "/a/b", "..", "/.."] {
            assert_eq!(object_path(bad), None, "{bad}");
        }
    }
}
