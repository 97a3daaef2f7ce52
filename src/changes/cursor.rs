//! A cursor: a position in one collection's change feed, given to clients
//! as opaque text (base64url of a versioned, checked structure).
//!
//! The position is a transaction id, a log entry's sequence number and a
//! key's place in that entry: the feed has delivered every logged change
//! at or before `(tx, seq, at)` in that order.
//! A cursor also names its collection (the id's hash and the table's oid)
//! and the feed's epoch, so that it is refused for another collection
//! (400), and for a table made again or a feed installed again (410).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorKind};

/// The layout of this version of cursors.
const VERSION: u8 = 2;
/// Version 1 had no `at`: its entries held one key each.
const VERSION_1: u8 = 1;
/// version, collection hash, relid, epoch, tx, seq (, at).
const PAYLOAD_1: usize = 1 + 4 + 4 + 4 + 8 + 8;
const PAYLOAD: usize = PAYLOAD_1 + 4;
/// The check that follows the payload.
const CHECK: usize = 4;

/// A position in a collection's change feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The collection's id, hashed: a cursor is for one collection.
    pub collection: u32,
    /// The table's oid when the cursor was given.
    pub relid: u32,
    /// The feed's epoch then.
    pub epoch: i32,
    /// The transaction of the last change delivered (or the horizon).
    pub tx: u64,
    /// The sequence number of that change's entry (0: before any of `tx`).
    pub seq: i64,
    /// The place of the last key delivered in that entry, from 1 (0:
    /// before any of its keys).
    pub at: i32,
}

/// The hash a cursor names collection `id` by.
pub fn collection_hash(id: &str) -> u32 {
    let digest = Sha256::digest(id.as_bytes());
    u32::from_be_bytes(digest[..4].try_into().expect("4 bytes"))
}

/// The check of a payload: a corrupted or made-up cursor fails it.
fn check(payload: &[u8]) -> [u8; CHECK] {
    let mut hasher = Sha256::new();
    hasher.update(b"featurepipe change cursor");
    hasher.update(payload);
    hasher.finalize()[..CHECK].try_into().expect("4 bytes")
}

impl Cursor {
    /// The text given to clients.
    pub fn encode(&self) -> String {
        let mut bytes = Vec::with_capacity(PAYLOAD + CHECK);
        bytes.push(VERSION);
        bytes.extend(self.collection.to_be_bytes());
        bytes.extend(self.relid.to_be_bytes());
        bytes.extend(self.epoch.to_be_bytes());
        bytes.extend(self.tx.to_be_bytes());
        bytes.extend(self.seq.to_be_bytes());
        bytes.extend(self.at.to_be_bytes());
        let check = check(&bytes);
        bytes.extend(check);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The cursor `text` stands for; a 400 when it is not one.
    pub fn decode(text: &str) -> Result<Cursor, Error> {
        let not_one = |why: &str| {
            Error::new(
                ErrorKind::InvalidCursor,
                format!(
                    "'since' is not a cursor of this service ({why}); take one from GET …/changes"
                ),
            )
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|_| not_one("not base64url"))?;
        let size = match bytes.first() {
            Some(&VERSION_1) => PAYLOAD_1,
            _ => PAYLOAD,
        };
        if bytes.len() != size + CHECK {
            return Err(not_one("wrong length"));
        }
        let (payload, given) = bytes.split_at(size);
        if given != check(payload) {
            return Err(not_one("its check does not match"));
        }
        if payload[0] != VERSION && payload[0] != VERSION_1 {
            return Err(not_one("unknown version"));
        }
        let word = |at: usize| <[u8; 4]>::try_from(&payload[at..at + 4]).expect("4 bytes");
        // A place in an entry counts from 1 (0: before it); a cursor is
        // checked, not signed, so a made-up one may say anything.
        if size == PAYLOAD && i32::from_be_bytes(word(29)) < 0 {
            return Err(not_one("a negative place"));
        }
        let long = |at: usize| <[u8; 8]>::try_from(&payload[at..at + 8]).expect("8 bytes");
        Ok(Cursor {
            collection: u32::from_be_bytes(word(1)),
            relid: u32::from_be_bytes(word(5)),
            epoch: i32::from_be_bytes(word(9)),
            tx: u64::from_be_bytes(long(13)),
            seq: i64::from_be_bytes(long(21)),
            // A version 1 position is past the whole of its entry.
            at: match size {
                PAYLOAD_1 => i32::MAX,
                _ => i32::from_be_bytes(word(29)),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor() -> Cursor {
        Cursor {
            collection: collection_hash("places"),
            relid: 16_384,
            epoch: 2,
            tx: 1 << 40,
            seq: 77,
            at: 5,
        }
    }

    #[test]
    fn a_cursor_reads_back_as_it_was_given() {
        let text = cursor().encode();
        assert!(text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(Cursor::decode(&text).unwrap(), cursor());
    }

    #[test]
    fn a_version_1_cursor_is_past_its_whole_entry() {
        let mut bytes = vec![VERSION_1];
        bytes.extend(collection_hash("places").to_be_bytes());
        bytes.extend(16_384u32.to_be_bytes());
        bytes.extend(2i32.to_be_bytes());
        bytes.extend((1u64 << 40).to_be_bytes());
        bytes.extend(77i64.to_be_bytes());
        let check = check(&bytes);
        bytes.extend(check);
        let old = Cursor::decode(&URL_SAFE_NO_PAD.encode(bytes)).unwrap();
        assert_eq!(
            old,
            Cursor {
                at: i32::MAX,
                ..cursor()
            }
        );
    }

    #[test]
    fn a_negative_place_is_not_a_cursor() {
        let made_up = Cursor { at: -5, ..cursor() }.encode();
        let e = Cursor::decode(&made_up).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidCursor);
    }

    #[test]
    fn anything_else_is_not_a_cursor() {
        let text = cursor().encode();
        let mut flipped = text.clone().into_bytes();
        flipped[10] = if flipped[10] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        for wrong in [
            "",
            "abc",
            "!!!!",
            &text[1..],
            &flipped,
            &format!("{text}AA"),
        ] {
            let e = Cursor::decode(wrong).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidCursor, "{wrong}");
        }
    }
}
