//! Shared-memory files between server and worker. Tensor bytes never go
//! through the pipes: the server writes inputs into an [`Arena`] of its own
//! for the worker to map, and reads the worker's outputs through
//! [`WorkerFiles`], mappings of the files the worker writes.
//!
//! Mapping a file is `unsafe` in Rust because another process may change
//! it while a slice of it is borrowed. The protocol rules that out: the
//! server changes an input region only after the worker has answered the
//! execute that used it and every request of it that stayed open has
//! ended, and the worker changes an output region only after the server
//! said it is done with the message naming it: it has copied the region
//! out, or the views it kept of it (large outputs, [`Holds`]) are gone.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use memmap2::{Mmap, MmapMut};
use parking_lot::Mutex;
use tempfile::NamedTempFile;

/// Where a tensor's bytes are: a file, an offset and a length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Region {
    pub(crate) path: PathBuf,
    pub(crate) offset: usize,
    pub(crate) size: usize,
}

/// Regions start on this boundary, so the worker's numpy views are aligned
/// for every element type.
const ALIGN: usize = 64;

/// The folder shared-memory files go in: /dev/shm where there is one.
fn shm_dir() -> PathBuf {
    let dev_shm = Path::new("/dev/shm");
    if dev_shm.is_dir() {
        dev_shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// One mapped file of the server's.
#[derive(Debug)]
struct ArenaFile {
    file: NamedTempFile,
    map: MmapMut,
}

impl ArenaFile {
    fn create(capacity: usize) -> io::Result<Self> {
        let file = tempfile::Builder::new()
            .prefix("nereid-in-")
            .tempfile_in(shm_dir())?;
        file.as_file().set_len(capacity as u64)?;
        // SAFETY: the file is ours alone to write (created 0600 under a
        // random name, removed on drop); the worker maps it read-only and
        // the protocol keeps us from writing a region it still reads.
        #[expect(unsafe_code, reason = "mapping our own shared-memory file")]
        let map = unsafe { MmapMut::map_mut(file.as_file())? };
        Ok(ArenaFile { file, map })
    }
}

/// The server's side of the shared memory: one file written from the start
/// for each message, replaced by a larger one when a message needs more.
#[derive(Debug)]
pub(crate) struct Arena {
    current: ArenaFile,
    /// Files outgrown during this message, kept until it is answered.
    retired: Vec<ArenaFile>,
    used: usize,
}

impl Arena {
    pub(crate) fn new(capacity: usize) -> io::Result<Self> {
        Ok(Arena {
            current: ArenaFile::create(capacity.max(ALIGN))?,
            retired: Vec::new(),
            used: 0,
        })
    }

    /// Starts a new message: every earlier region may be overwritten.
    pub(crate) fn reset(&mut self) {
        self.retired.clear();
        self.used = 0;
    }

    /// Copies `data` in and says where it went.
    pub(crate) fn push(&mut self, data: &[u8]) -> io::Result<Region> {
        let offset = self.used.next_multiple_of(ALIGN);
        let end = offset
            .checked_add(data.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "tensor too large"))?;
        if end > self.current.map.len() {
            let capacity = (self.current.map.len() * 2).max(data.len().next_multiple_of(ALIGN));
            let grown = ArenaFile::create(capacity)?;
            self.retired
                .push(std::mem::replace(&mut self.current, grown));
            self.used = 0;
            return self.push(data);
        }
        self.current.map[offset..end].copy_from_slice(data);
        self.used = end;
        Ok(Region {
            path: self.current.file.path().to_path_buf(),
            offset,
            size: data.len(),
        })
    }
}

/// Outputs at least this large are not copied out of the worker's file:
/// the server's tensor is a view of it, held (see [`Holds`]) until the
/// response has gone out. Smaller ones are copied, which costs less than
/// the holding.
pub(crate) const VIEW_MIN: usize = 64 << 10;

/// The worker's output messages (by number) whose regions the server
/// still reads through views; the worker may reuse the regions of the
/// messages before the first of them.
#[derive(Debug, Default, Clone)]
pub(crate) struct Holds(Arc<Mutex<BTreeSet<u64>>>);

impl Holds {
    /// A hold on message `number`'s regions, for its views to share.
    pub(crate) fn hold(&self, number: u64) -> Arc<Hold> {
        self.0.lock().insert(number);
        Arc::new(Hold {
            number,
            holds: self.clone(),
        })
    }

    /// How many output messages the worker may reuse the regions of, of
    /// the `read` the server has read.
    pub(crate) fn releasable(&self, read: u64) -> u64 {
        self.0.lock().first().map_or(read, |&held| held.min(read))
    }
}

/// Keeps one output message's regions from being reused while it lives.
#[derive(Debug)]
pub(crate) struct Hold {
    number: u64,
    holds: Holds,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.holds.0.lock().remove(&self.number);
    }
}

/// A view of a region of a worker's file, as a tensor's bytes.
struct View {
    map: Arc<Mmap>,
    start: usize,
    end: usize,
    _hold: Arc<Hold>,
}

impl AsRef<[u8]> for View {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.start..self.end]
    }
}

/// Read-only mappings of the worker's files, by path, remapped when a
/// region reaches past what is mapped (the file grew).
#[derive(Debug, Default)]
pub(crate) struct WorkerFiles {
    maps: HashMap<PathBuf, Arc<Mmap>>,
}

impl WorkerFiles {
    /// The bytes of `region`: a view held by `hold` when the region is
    /// large and there is one, else a copy.
    pub(crate) fn bytes(&mut self, region: &Region, hold: Option<&Arc<Hold>>) -> io::Result<Bytes> {
        match hold {
            Some(hold) if region.size >= VIEW_MIN => {
                let (map, end) = self.mapped(region)?;
                Ok(Bytes::from_owner(View {
                    map,
                    start: region.offset,
                    end,
                    _hold: Arc::clone(hold),
                }))
            }
            _ => self.read(region).map(Bytes::from),
        }
    }

    /// A copy of the bytes of `region`.
    pub(crate) fn read(&mut self, region: &Region) -> io::Result<Vec<u8>> {
        if region.size == 0 {
            return Ok(Vec::new());
        }
        let (map, end) = self.mapped(region)?;
        Ok(map[region.offset..end].to_vec())
    }

    /// The mapping `region` lies in, and the region's end.
    fn mapped(&mut self, region: &Region) -> io::Result<(Arc<Mmap>, usize)> {
        let end = region
            .offset
            .checked_add(region.size)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "region out of range"))?;
        if self.maps.get(&region.path).is_none_or(|m| m.len() < end) {
            let file = File::open(&region.path)?;
            // SAFETY: the worker leaves this region alone until we say we
            // are done with its message (see the module's note): we copy it
            // out first, or hold the message until our view of it is gone.
            #[expect(unsafe_code, reason = "mapping the worker's shared-memory file")]
            let map = unsafe { Mmap::map(&file)? };
            self.maps.insert(region.path.clone(), Arc::new(map));
        }
        let map = &self.maps[&region.path];
        map.get(region.offset..end)
            .map(|_| (Arc::clone(map), end))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "region {}..{end} is past the end of '{}' ({} bytes)",
                        region.offset,
                        region.path.display(),
                        map.len()
                    ),
                )
            })
    }

    /// Forgets files that are gone, so their memory can be freed.
    pub(crate) fn prune(&mut self) {
        self.maps.retain(|path, _| path.exists());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_aligned_and_readable_by_path() {
        let mut arena = Arena::new(256).unwrap();
        let a = arena.push(b"abc").unwrap();
        let b = arena.push(&[7u8; 100]).unwrap();
        assert_eq!((a.offset, b.offset), (0, 64));
        let mut files = WorkerFiles::default();
        assert_eq!(files.read(&a).unwrap(), b"abc");
        assert_eq!(files.read(&b).unwrap(), vec![7u8; 100]);
    }

    #[test]
    fn a_full_arena_moves_to_a_larger_file_and_keeps_earlier_regions() {
        let mut arena = Arena::new(64).unwrap();
        let small = arena.push(&[1u8; 60]).unwrap();
        let big = arena.push(&[2u8; 1000]).unwrap();
        assert_ne!(small.path, big.path);
        let mut files = WorkerFiles::default();
        assert_eq!(
            files.read(&small).unwrap(),
            vec![1u8; 60],
            "the outgrown file lives until reset"
        );
        assert_eq!(files.read(&big).unwrap(), vec![2u8; 1000]);
        arena.reset();
        assert!(!small.path.exists(), "reset drops outgrown files");
        files.prune();
        let again = arena.push(b"x").unwrap();
        assert_eq!((again.path, again.offset), (big.path, 0));
    }

    #[test]
    fn large_regions_are_viewed_and_held_until_their_views_go() {
        let mut arena = Arena::new(64).unwrap();
        let small = arena.push(b"abc").unwrap();
        let large = arena.push(&vec![9u8; VIEW_MIN]).unwrap();
        let holds = Holds::default();
        let mut files = WorkerFiles::default();
        let first = holds.hold(3);
        let view = files.bytes(&large, Some(&first)).unwrap();
        let copy = files.bytes(&small, Some(&first)).unwrap();
        assert_eq!((view.len(), &copy[..]), (VIEW_MIN, &b"abc"[..]));
        let second = holds.hold(4);
        drop((first, second));
        assert_eq!(
            holds.releasable(5),
            3,
            "message 3 is viewed: 3 and after stay"
        );
        drop(copy);
        assert_eq!(holds.releasable(5), 3);
        drop(view);
        assert_eq!(holds.releasable(5), 5, "no view left");
        assert_eq!(
            files.bytes(&large, None).unwrap().len(),
            VIEW_MIN,
            "no hold: a copy"
        );
    }

    #[test]
    fn regions_past_the_file_are_errors() {
        let mut arena = Arena::new(64).unwrap();
        let r = arena.push(b"abc").unwrap();
        let mut files = WorkerFiles::default();
        let past = Region {
            offset: 60,
            size: 100,
            ..r
        };
        assert!(files.read(&past).is_err());
        let overflow = Region {
            offset: usize::MAX,
            size: 2,
            ..past
        };
        assert!(files.read(&overflow).is_err());
    }
}
