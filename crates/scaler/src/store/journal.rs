//! The file store's journal: the intents and outcomes written since the last snapshot, appended one
//! commit at a time, so that a commit costs the same at ten machines and at ten thousand.
//!
//! The journal (`<file>.journal`) is a header and entries, each a frame: its length (4 bytes, little
//! endian), a CRC-32 of the length and the payload (4 bytes), then the payload (JSON). The header
//! names the journal's format, the lineage of the record file it belongs to and the snapshot
//! generation it follows. A commit appends one frame and syncs it before it answers, so every
//! answered commit is in the file; a crash mid-append leaves a frame that is cut short or fails its
//! checksum, always the last one: it is dropped whole when the journal is read, and cut off before the
//! next append. A bad frame with a good one after it is damage, not a crash, and is refused.
//!
//! The journal is made (its header) with orca's atomic write, owner-only, and opened for appends
//! without following a symbolic link at its path.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::StoreError;

/// The journal's header: whose journal it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Header {
    pub format: String,
    /// The lineage of the record file it belongs to.
    pub lineage: String,
    /// The generation of the snapshot it follows.
    pub generation: u64,
}

/// The journal's path for the record file at `path`: `<path>.journal`.
pub(super) fn path_for(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".journal");
    path.with_file_name(name)
}

/// An open journal that takes appends.
#[derive(Debug)]
pub(super) struct Journal {
    path: PathBuf,
    file: File,
    /// Its length: where the next frame starts.
    len: u64,
}

/// What a journal read gave: its header, its entries' payloads in order, and the length of the
/// part that reads whole (a torn last frame is beyond it).
#[derive(Debug)]
pub(super) struct Found {
    pub header: Header,
    pub entries: Vec<Vec<u8>>,
    pub whole: u64,
    pub torn: bool,
}

/// A failed file operation `what` on `path`.
pub(super) fn io(path: &Path, what: &str, e: std::io::Error) -> StoreError {
    StoreError::Failed(format!("{} ({what}): {e}", path.display()))
}

/// Opens `path` without following a symbolic link at it.
fn open_nofollow(path: &Path, append: bool) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true);
    if append {
        o.append(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW);
    }
    o.open(path)
}

impl Journal {
    /// Makes a new journal at `path` holding only `header` (replacing any journal there, atomically),
    /// and opens it for appends.
    pub fn create(path: &Path, header: &Header) -> Result<Journal, StoreError> {
        let payload = serde_json::to_vec(header)
            .map_err(|e| StoreError::Failed(format!("{}: {e}", path.display())))?;
        let bytes = frame(&payload);
        orca::fs::write_atomic(path, &bytes).map_err(|e| StoreError::Failed(e.to_string()))?;
        let file = open_nofollow(path, true).map_err(|e| io(path, "open", e))?;
        Ok(Journal {
            path: path.to_path_buf(),
            file,
            len: bytes.len() as u64,
        })
    }

    /// Opens the journal at `path` for appends after its whole part (`whole` bytes, from
    /// [`read`]), cutting off a torn last frame first.
    pub fn reopen(path: &Path, whole: u64) -> Result<Journal, StoreError> {
        let file = open_nofollow(path, true).map_err(|e| io(path, "open", e))?;
        let len = file.metadata().map_err(|e| io(path, "stat", e))?.len();
        if len != whole {
            file.set_len(whole)
                .and_then(|()| file.sync_all())
                .map_err(|e| io(path, "cut off the torn last entry", e))?;
        }
        Ok(Journal {
            path: path.to_path_buf(),
            file,
            len: whole,
        })
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Appends one entry and syncs it to the disk. A failed append is cut off again; when even that
    /// fails, the error says so and the journal must not take another append (its last frame may be
    /// torn: the caller replaces the journal).
    pub fn append(&mut self, payload: &[u8]) -> Result<(), (StoreError, bool)> {
        let bytes = frame(payload);
        let written = self
            .file
            .write_all(&bytes)
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.len += bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                let err = io(&self.path, "append", e);
                let cut = self
                    .file
                    .set_len(self.len)
                    .and_then(|()| self.file.sync_data());
                Err((err, cut.is_ok()))
            }
        }
    }
}

/// Reads the journal at `path`, refusing one whose format is none of `formats` (this version's
/// first: the record file defines them): `None` when there is none.
pub(super) fn read(path: &Path, formats: &[&str]) -> Result<Option<Found>, StoreError> {
    let mut bytes = Vec::new();
    match open_nofollow(path, false) {
        Ok(mut f) => f.read_to_end(&mut bytes).map_err(|e| io(path, "read", e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path, "open", e)),
    };
    let not_journal = |why: &str| {
        StoreError::Failed(format!(
            "{}: not an orca-pool journal ({why}); it is kept as it is: move it away to start from the record file alone",
            path.display()
        ))
    };
    let (header, mut at) = match next_frame(&bytes, 0) {
        Frame::Whole(payload, next) => {
            let header: Header = serde_json::from_slice(payload)
                .map_err(|e| not_journal(&format!("its header: {e}")))?;
            (header, next)
        }
        _ => return Err(not_journal("no whole header")),
    };
    if !formats.contains(&header.format.as_str()) {
        return Err(StoreError::Failed(format!(
            "{}: journal format {:?} is not one this orca-pool reads ({}; written by another version of orca-pool); it is kept as it is",
            path.display(),
            header.format,
            super::file::quoted(formats)
        )));
    }
    let mut entries = Vec::new();
    let mut torn = false;
    while at < bytes.len() {
        match next_frame(&bytes, at) {
            Frame::Whole(payload, next) => {
                entries.push(payload.to_vec());
                at = next;
            }
            Frame::Bad(next) => {
                // A crash mid-append leaves its frame last. One that a whole frame follows was
                // damaged after it was written (its length too, which then points past the end or
                // into the next frame): landed entries may be lost, so it is refused.
                let follows = |n: usize| matches!(next_frame(&bytes, n), Frame::Whole(..));
                if next.is_some_and(follows) || whole_frame_after(&bytes, at) {
                    return Err(StoreError::Failed(format!(
                        "{}: the entry at byte {at} is damaged and entries follow it; the journal is kept as it is",
                        path.display()
                    )));
                }
                torn = true;
                break;
            }
        }
    }
    Ok(Some(Found {
        header,
        entries,
        whole: at as u64,
        torn,
    }))
}

/// Whether a whole frame starts anywhere after offset `at` (a frame whose length and checksum hold:
/// the bytes of a torn last frame hold one only by a chance of about one in four billion).
fn whole_frame_after(bytes: &[u8], at: usize) -> bool {
    (at + 1..bytes.len()).any(|n| matches!(next_frame(bytes, n), Frame::Whole(..)))
}

/// A frame read at some offset.
enum Frame<'a> {
    /// Its payload, and where the next frame starts.
    Whole(&'a [u8], usize),
    /// Cut short or failing its checksum; where the next frame would start, if within the file.
    Bad(Option<usize>),
}

fn next_frame(bytes: &[u8], at: usize) -> Frame<'_> {
    let Some(head) = bytes.get(at..at + 8) else {
        return Frame::Bad(None);
    };
    let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
    let sum = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
    let end = at + 8 + len;
    let Some(payload) = bytes.get(at + 8..end) else {
        return Frame::Bad(None);
    };
    if len == 0 || checksum(&head[..4], payload) != sum {
        return Frame::Bad(Some(end));
    }
    Frame::Whole(payload, end)
}

/// `payload` framed: length, checksum, payload.
fn frame(payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len())
        .expect("a journal entry is smaller than 4 GiB")
        .to_le_bytes();
    let mut out = Vec::with_capacity(payload.len() + 8);
    out.extend_from_slice(&len);
    out.extend_from_slice(&checksum(&len, payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The CRC-32 (IEEE 802.3, reflected) of `len` then `payload`: the length is covered too, so that
/// zeros left where a write did not land never read as a frame.
fn checksum(len: &[u8], payload: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in len.iter().chain(payload) {
        crc = CRC_TABLE[((crc ^ u32::from(*b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// The CRC-32 table of the reflected polynomial 0xEDB88320, made at compile time.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_is_crc32() {
        // The CRC-32 check value of "123456789".
        assert_eq!(checksum(b"1234", b"56789"), 0xCBF4_3926);
    }

    #[test]
    fn a_frame_reads_back_and_any_cut_of_it_is_bad() {
        let f = frame(b"{\"a\":1}");
        assert!(
            matches!(next_frame(&f, 0), Frame::Whole(p, n) if p == b"{\"a\":1}" && n == f.len())
        );
        for cut in 0..f.len() {
            assert!(
                matches!(next_frame(&f[..cut], 0), Frame::Bad(_)),
                "cut at {cut}"
            );
        }
        let mut flipped = f.clone();
        flipped[10] ^= 1;
        assert!(matches!(next_frame(&flipped, 0), Frame::Bad(Some(_))));
        assert!(matches!(next_frame(&[0u8; 64], 0), Frame::Bad(_)), "zeros");
    }
}
