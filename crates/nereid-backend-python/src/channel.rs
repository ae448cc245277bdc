//! The channel between the server and a worker: two rings of messages in
//! one shared-memory file (a memfd the worker gets as fd 4), one ring each
//! way, with the worker's stdin and stdout pipes as doorbells.
//!
//! A ring has one producer and one consumer at a time (each side takes a
//! lock around its end). The producer writes a record, `u32` length, `u32`
//! kind and the payload padded to 8 bytes, then publishes it by moving
//! `head` on. The consumer reads records up to `head` and moves `tail`
//! on. A consumer that finds the ring empty sets `sleeping`, looks once
//! more, and waits on its doorbell pipe; a producer rings the doorbell (one
//! byte, one system call) only when it sees `sleeping` set, and clears it.
//! So a side that is running gets messages with no system call at all, and
//! a side that sleeps is woken once for all the messages it then reads. A pipe, not an eventfd, because its end of file
//! tells each side that the other is gone.
//!
//! The layout (`python/README.md`, "Channel", is the reference):
//! a 4 KiB control page (the magic at 0, the down ring's head, tail and
//! sleeping at 64, 128 and 192, the up ring's at 256, 320 and 384, each on
//! its own cache line), then the down ring's data, then the up ring's.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::process::{ChildStdin, ChildStdout};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

use memmap2::MmapRaw;

/// Bytes of each ring's data; a power of two.
pub(crate) const CAPACITY: usize = 1 << 20;
/// The largest message payload, so that any message fits after a wrap.
pub(crate) const MAX_MESSAGE: usize = CAPACITY / 2 - RECORD_HEADER;
const CONTROL: usize = 4096;
const RECORD_HEADER: usize = 8;
/// A record length that means "the rest of the ring is empty: go on at
/// its start".
const WRAP: u32 = u32::MAX;
const MAGIC: u64 = u64::from_le_bytes(*b"NRDCHAN1");
/// How long a producer waits for room in a full ring before it gives the
/// other side up.
const FULL_TIMEOUT: Duration = Duration::from_secs(10);

/// The shared-memory file of one worker's channel.
#[derive(Debug)]
pub(crate) struct Channel {
    file: File,
    map: Arc<MmapRaw>,
}

impl Channel {
    pub(crate) fn create() -> io::Result<Self> {
        use rustix::fs::{MemfdFlags, memfd_create};
        let fd = memfd_create("nereid-channel", MemfdFlags::CLOEXEC)?;
        let file = File::from(fd);
        file.set_len((CONTROL + 2 * CAPACITY) as u64)?;
        let map = Arc::new(MmapRaw::map_raw(&file)?);
        let channel = Channel { file, map };
        channel.word64(0).store(MAGIC, Ordering::Relaxed);
        Ok(channel)
    }

    /// The file's descriptor, for the worker to inherit.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// The server's ends: it produces on the down ring and consumes the up
    /// ring.
    pub(crate) fn ends(&self, stdin: ChildStdin, stdout: ChildStdout) -> (Sender, Receiver) {
        let down = Ring::new(Arc::clone(&self.map), 64, CONTROL);
        let up = Ring::new(Arc::clone(&self.map), 256, CONTROL + CAPACITY);
        (
            Sender {
                ring: down,
                doorbell: stdin,
            },
            Receiver {
                ring: up,
                doorbell: stdout,
            },
        )
    }

    fn word64(&self, offset: usize) -> &AtomicU64 {
        word(&self.map, offset)
    }
}

/// An atomic word of the mapping.
fn word<T: Atom>(map: &MmapRaw, offset: usize) -> &T {
    assert!(offset + size_of::<T>() <= CONTROL && offset.is_multiple_of(8));
    // SAFETY: the offset lies in the control page, aligned, and the page
    // lives as long as `map`; both processes touch these words only
    // through atomic accesses.
    #[expect(unsafe_code, reason = "an atomic word in shared memory")]
    unsafe {
        &*map.as_ptr().add(offset).cast::<T>()
    }
}

trait Atom {}
impl Atom for AtomicU64 {}
impl Atom for AtomicU32 {}

/// One ring's words and data.
#[derive(Debug)]
struct Ring {
    map: Arc<MmapRaw>,
    header: usize,
    data: usize,
}

impl Ring {
    fn new(map: Arc<MmapRaw>, header: usize, data: usize) -> Self {
        Ring { map, header, data }
    }

    fn head(&self) -> &AtomicU64 {
        word(&self.map, self.header)
    }

    fn tail(&self) -> &AtomicU64 {
        word(&self.map, self.header + 64)
    }

    fn sleeping(&self) -> &AtomicU32 {
        word(&self.map, self.header + 128)
    }

    /// Copies `bytes` into the data at `position` (already checked to fit).
    fn write(&self, position: usize, bytes: &[u8]) {
        debug_assert!(position + bytes.len() <= CAPACITY);
        // SAFETY: the range lies in this ring's data, which only the
        // producer (us, under its lock) writes between `head` and `tail`.
        #[expect(unsafe_code, reason = "writing a record into shared memory")]
        unsafe {
            let to = self.map.as_mut_ptr().add(self.data + position);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), to, bytes.len());
        }
    }

    /// Copies `len` bytes of the data at `position` out.
    fn read(&self, position: usize, len: usize) -> Vec<u8> {
        debug_assert!(position + len <= CAPACITY);
        let mut out = vec![0u8; len];
        // SAFETY: the range lies in this ring's data, between `tail` and
        // `head`, which the producer leaves alone until `tail` moves past.
        #[expect(unsafe_code, reason = "reading a record out of shared memory")]
        unsafe {
            let from = self.map.as_ptr().add(self.data + position);
            std::ptr::copy_nonoverlapping(from, out.as_mut_ptr(), len);
        }
        out
    }
}

/// Why a message could not be sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    #[error("a message of {0} bytes is over the channel's {MAX_MESSAGE}-byte limit")]
    TooLarge(usize),
    #[error("the worker has not taken its messages for {FULL_TIMEOUT:?}")]
    Stuck,
    #[error("{0}")]
    Closed(io::Error),
}

/// The server's end of the down ring.
#[derive(Debug)]
pub(crate) struct Sender {
    ring: Ring,
    doorbell: ChildStdin,
}

impl Sender {
    /// Publishes one message and wakes the worker if it sleeps.
    pub(crate) fn send(&mut self, kind: u32, payload: &[u8]) -> Result<(), SendError> {
        if payload.len() > MAX_MESSAGE {
            return Err(SendError::TooLarge(payload.len()));
        }
        let need = (RECORD_HEADER + payload.len()).next_multiple_of(8);
        let head = self.ring.head().load(Ordering::Relaxed);
        let position = (head % CAPACITY as u64) as usize;
        let to_end = CAPACITY - position;
        let (start, total) = match need > to_end {
            true => (head + to_end as u64, to_end + need),
            false => (head, need),
        };
        self.wait_for_room(head, total)?;
        if start != head {
            self.ring.write(position, &WRAP.to_le_bytes());
        }
        let at = (start % CAPACITY as u64) as usize;
        let mut header = [0u8; RECORD_HEADER];
        header[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        header[4..].copy_from_slice(&kind.to_le_bytes());
        self.ring.write(at, &header);
        self.ring.write(at + RECORD_HEADER, payload);
        self.ring
            .head()
            .store(start + need as u64, Ordering::Release);
        fence(Ordering::SeqCst);
        // Cleared as it is rung, so that the messages after this one, which
        // the woken side reads in the same go, ring no more.
        if self.ring.sleeping().load(Ordering::Relaxed) != 0
            && self.ring.sleeping().swap(0, Ordering::SeqCst) != 0
        {
            self.doorbell.write_all(&[1]).map_err(SendError::Closed)?;
        }
        Ok(())
    }

    /// Waits until `total` bytes past `head` are free; a worker that takes
    /// nothing for [`FULL_TIMEOUT`] is given up.
    fn wait_for_room(&self, head: u64, total: usize) -> Result<(), SendError> {
        let deadline = Instant::now() + FULL_TIMEOUT;
        loop {
            let tail = self.ring.tail().load(Ordering::Acquire);
            if head + total as u64 - tail <= CAPACITY as u64 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(SendError::Stuck);
            }
            if is_closed(self.doorbell.as_fd()) {
                return Err(SendError::Closed(io::ErrorKind::BrokenPipe.into()));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

/// Whether the reading end of a pipe we write is gone.
fn is_closed(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(&fd, PollFlags::empty())];
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    poll(&mut fds, Some(&zero)).is_ok_and(|_| fds[0].revents().contains(PollFlags::ERR))
}

/// A record the worker wrote that cannot be one.
#[derive(Debug, thiserror::Error)]
#[error("the worker wrote a broken record to the channel: {0}")]
pub(crate) struct Broken(String);

/// The server's end of the up ring.
#[derive(Debug)]
pub(crate) struct Receiver {
    ring: Ring,
    doorbell: ChildStdout,
}

impl Receiver {
    /// The next message, `(kind, payload)`, if one is published.
    pub(crate) fn take(&mut self) -> Result<Option<(u32, Vec<u8>)>, Broken> {
        let mut tail = self.ring.tail().load(Ordering::Relaxed);
        loop {
            let head = self.ring.head().load(Ordering::Acquire);
            if tail == head {
                return Ok(None);
            }
            let published = head.wrapping_sub(tail);
            if published > CAPACITY as u64 {
                return Err(Broken(format!(
                    "head {head} is not within a ring of tail {tail}"
                )));
            }
            let position = (tail % CAPACITY as u64) as usize;
            let header = self
                .ring
                .read(position, RECORD_HEADER.min(CAPACITY - position));
            let len = u32::from_le_bytes(header[..4].try_into().unwrap_or_default());
            if len == WRAP {
                tail += (CAPACITY - position) as u64;
                continue;
            }
            let need = (RECORD_HEADER + len as usize).next_multiple_of(8);
            if len as usize > MAX_MESSAGE || need as u64 > published || position + need > CAPACITY {
                return Err(Broken(format!(
                    "a record of {len} bytes at {position} with {published} published"
                )));
            }
            let kind = u32::from_le_bytes(header[4..8].try_into().unwrap_or_default());
            let payload = self.ring.read(position + RECORD_HEADER, len as usize);
            self.ring
                .tail()
                .store(tail + need as u64, Ordering::Release);
            return Ok(Some((kind, payload)));
        }
    }

    /// Says the server is about to sleep on the doorbell; true when a
    /// message came meanwhile (then it must not sleep, and is awake again).
    pub(crate) fn arm(&self) -> bool {
        self.ring.sleeping().store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let waiting =
            self.ring.head().load(Ordering::Acquire) != self.ring.tail().load(Ordering::Relaxed);
        if waiting {
            self.disarm();
        }
        waiting
    }

    /// Says the server is awake.
    pub(crate) fn disarm(&self) {
        self.ring.sleeping().store(0, Ordering::Relaxed);
    }

    /// The doorbell, for `poll`.
    pub(crate) fn doorbell(&self) -> std::os::fd::BorrowedFd<'_> {
        self.doorbell.as_fd()
    }

    /// Takes the doorbell's bytes in; false at its end (the worker is gone).
    pub(crate) fn answer_doorbell(&mut self) -> io::Result<bool> {
        let mut bytes = [0u8; 64];
        loop {
            match self.doorbell.read(&mut bytes) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                read => return read.map(|n| n > 0),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use super::*;

    fn cat() -> std::process::Child {
        Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The server's ends over `cat`'s pipes (so a doorbell byte comes back
    /// on the receiver's doorbell), and the down ring as the worker reads
    /// it, over another `cat`'s stdout.
    fn pair() -> (Sender, Receiver, Receiver, Ring, [std::process::Child; 2]) {
        let channel = Channel::create().unwrap();
        let (mut a, mut b) = (cat(), cat());
        let (sender, receiver) = channel.ends(a.stdin.take().unwrap(), a.stdout.take().unwrap());
        let worker = Receiver {
            ring: Ring::new(Arc::clone(&channel.map), 64, CONTROL),
            doorbell: b.stdout.take().unwrap(),
        };
        let up = Ring::new(Arc::clone(&channel.map), 256, CONTROL + CAPACITY);
        (sender, receiver, worker, up, [a, b])
    }

    #[test]
    fn messages_come_out_in_order_across_the_wrap() {
        let (mut sender, _, mut worker, _, _children) = pair();
        let big = vec![7u8; 300_000];
        for round in 0..20u32 {
            let len = (round as usize * 40_993) % big.len();
            sender.send(round, &big[..len]).unwrap();
            sender.send(100 + round, b"small").unwrap();
            let (kind, payload) = worker.take().unwrap().unwrap();
            assert_eq!((kind, payload.len()), (round, len));
            assert_eq!(
                worker.take().unwrap().unwrap(),
                (100 + round, b"small".to_vec())
            );
            assert!(worker.take().unwrap().is_none());
        }
    }

    #[test]
    fn oversize_messages_and_broken_records_are_errors() {
        let (mut sender, mut receiver, _, up, _children) = pair();
        assert!(matches!(
            sender.send(1, &vec![0u8; MAX_MESSAGE + 1]),
            Err(SendError::TooLarge(_))
        ));
        // A record claiming more than was published.
        up.write(0, &[200, 0, 0, 0, 1, 0, 0, 0]);
        up.head().store(16, Ordering::Release);
        assert!(receiver.take().is_err());
    }

    #[test]
    fn a_sleeping_consumer_is_rung_and_an_awake_one_is_not() {
        let (mut sender, mut receiver, worker, _, _children) = pair();
        sender.send(1, b"a").unwrap();
        assert!(worker.arm(), "a message is waiting: no sleep");
        worker.disarm();
        sender.send(2, b"b").unwrap();
        worker.ring.tail().store(
            worker.ring.head().load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        assert!(!worker.arm(), "the ring is empty: the worker may sleep");
        sender.send(3, b"c").unwrap();
        // `cat` echoes the doorbell byte back: exactly one was rung.
        assert!(receiver.answer_doorbell().unwrap());
    }
}
