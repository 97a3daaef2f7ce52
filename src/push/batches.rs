//! Gathering features into batches: FeatureCollection bodies of at most N
//! features and B bytes, each with an Idempotency-Key derived from what it
//! holds, so that a rerun on the same input sends the same keys.

use std::io::BufRead;

use sha2::{Digest, Sha256};

use super::split::{InputError, Splitter};

/// What every batch body starts with; the features follow as the input had them.
const HEAD: &[u8] = br#"{"type":"FeatureCollection","features":["#;
/// What every batch body ends with.
const TAIL: &[u8] = b"]}";

/// How large a batch may be.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most features in a batch.
    pub features: usize,
    /// Most bytes of a batch body (one feature larger than that is refused as input).
    pub bytes: usize,
}

impl Limits {
    /// The largest feature a batch body of `bytes` can hold.
    pub fn max_feature(&self) -> usize {
        self.bytes.saturating_sub(HEAD.len() + TAIL.len())
    }
}

/// One request's worth of features.
#[derive(Debug)]
pub struct Batch {
    /// Batch number, from 0.
    pub index: u64,
    /// Index in the input of its first feature.
    pub first_feature: u64,
    /// How many features it has.
    pub count: usize,
    /// The FeatureCollection to send.
    pub body: Vec<u8>,
    /// The same gzip-compressed, when push compresses (the reading thread
    /// does, after gathering).
    pub gzip: Option<Vec<u8>>,
    /// Its Idempotency-Key.
    pub key: String,
    /// Input bytes read up to its last feature.
    pub end: u64,
    /// Features that are not JSON; a batch with any is not sent.
    pub broken: Vec<Broken>,
}

/// A feature that is not valid JSON.
#[derive(Debug, Clone)]
pub struct Broken {
    /// Its index in the input.
    pub feature: u64,
    /// Where it starts in the input.
    pub at: u64,
    /// What serde_json says is wrong.
    pub message: String,
}

/// The batches of an input, in order (an iterator).
pub struct Batches<R> {
    splitter: Splitter<R>,
    limits: Limits,
    /// Mixed into every key: what the batches are written to, and how.
    scope: String,
    index: u64,
    next_feature: u64,
    /// A feature that did not fit in the last batch's bytes, and where it starts.
    carry: Option<(Vec<u8>, u64)>,
    done: bool,
}

impl<R: BufRead> Batches<R> {
    /// The batches of `input` within `limits`; `scope` (the collection and the
    /// mode) goes into every key, so that keys differ where the requests do.
    pub fn new(input: R, limits: Limits, scope: String) -> Self {
        Batches {
            splitter: Splitter::new(input, limits.max_feature()),
            limits,
            scope,
            index: 0,
            next_feature: 0,
            carry: None,
            done: false,
        }
    }

    /// Gather the next batch; `None` when the input has no more features.
    fn gather(&mut self) -> Result<Option<Batch>, InputError> {
        let first_feature = self.next_feature;
        let mut body = HEAD.to_vec();
        let mut broken = Vec::new();
        let mut count = 0;
        let mut end = None;
        if let Some((feature, at)) = self.carry.take() {
            body.extend_from_slice(&feature);
            check_json(&feature, first_feature, at, &mut broken);
            count = 1;
        }
        while count < self.limits.features {
            let mark = body.len();
            if count > 0 {
                body.push(b',');
            }
            let start = body.len();
            let Some(at) = self.splitter.next_into(&mut body)? else {
                body.truncate(mark);
                break;
            };
            if count > 0 && body.len() + TAIL.len() > self.limits.bytes {
                // It goes first in the next batch, so that this one stays within the limit.
                self.carry = Some((body[start..].to_vec(), at));
                body.truncate(mark);
                end = Some(at);
                break;
            }
            check_json(
                &body[start..],
                first_feature + count as u64,
                at,
                &mut broken,
            );
            count += 1;
        }
        if count == 0 {
            return Ok(None);
        }
        body.extend_from_slice(TAIL);
        let batch = Batch {
            index: self.index,
            first_feature,
            count,
            key: self.key(&body),
            body,
            gzip: None,
            end: end.unwrap_or_else(|| self.splitter.offset()),
            broken,
        };
        self.index += 1;
        self.next_feature += count as u64;
        Ok(Some(batch))
    }

    /// The batch's Idempotency-Key: a hash of what is sent and where, and of
    /// its position, so that a rerun on the same input repeats it exactly.
    fn key(&self, body: &[u8]) -> String {
        let mut h = Sha256::new();
        h.update(b"featurepipe push 1\0");
        h.update(self.scope.as_bytes());
        h.update(format!("\0{}\0", self.index).as_bytes());
        h.update(body);
        format!("push-{:x}", h.finalize())
    }
}

impl<R: BufRead> Iterator for Batches<R> {
    type Item = Result<Batch, InputError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let gathered = self.gather();
        // After the end or a broken input, there is nothing more to read.
        self.done = !matches!(gathered, Ok(Some(_)));
        gathered.transpose()
    }
}

/// Note `feature` in `broken` unless it is valid JSON.
fn check_json(feature: &[u8], index: u64, at: u64, broken: &mut Vec<Broken>) {
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(feature) {
        broken.push(Broken {
            feature: index,
            at,
            message: e.to_string(),
        });
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufReader, Read};

    use super::*;

    fn point(i: usize) -> String {
        format!(
            r#"{{"type":"Feature","geometry":{{"type":"Point","coordinates":[{i},1]}},"properties":{{"n":{i}}}}}"#
        )
    }

    fn batches(input: &str, limits: Limits, scope: &str) -> Vec<Batch> {
        Batches::new(input.as_bytes(), limits, scope.into())
            .collect::<Result<_, _>>()
            .unwrap()
    }

    const LIMITS: Limits = Limits {
        features: 3,
        bytes: 1 << 20,
    };

    #[test]
    fn batches_are_feature_collections_of_the_features_in_order() {
        let features: Vec<String> = (0..7).map(point).collect();
        let input = format!(
            r#"{{"type":"FeatureCollection","features":[{}]}}"#,
            features.join(",\n")
        );
        let got = batches(&input, LIMITS, "pts\0atomic");
        assert_eq!(got.len(), 3);
        assert_eq!(
            got.iter()
                .map(|b| (b.first_feature, b.count))
                .collect::<Vec<_>>(),
            [(0, 3), (3, 3), (6, 1)]
        );
        let body: serde_json::Value = serde_json::from_slice(&got[1].body).unwrap();
        assert_eq!(body["type"], "FeatureCollection");
        assert_eq!(body["features"][0]["properties"]["n"], 3);
        // Progress: the first batch ends with its third feature, the last with the input.
        let third = input.find(&features[2]).unwrap() + features[2].len();
        assert_eq!(got[0].end, third as u64);
        assert_eq!(got[2].end, input.len() as u64);
        // The same input gives the same keys; another scope or content, others.
        let again = batches(&input, LIMITS, "pts\0atomic");
        let elsewhere = batches(&input, LIMITS, "other\0atomic");
        for ((a, b), c) in got.iter().zip(&again).zip(&elsewhere) {
            assert_eq!(a.key, b.key);
            assert_ne!(a.key, c.key);
            assert!(a.key.len() <= 255 && a.key.bytes().all(|b| b.is_ascii_graphic()));
        }
        let changed = batches(&input.replace("[6,1]", "[6,2]"), LIMITS, "pts\0atomic");
        assert_eq!(changed[1].key, got[1].key);
        assert_ne!(changed[2].key, got[2].key);
    }

    #[test]
    fn a_batch_stays_within_its_bytes() {
        let input: String = (0..10).map(|i| point(i) + "\n").collect();
        let one = point(0).len();
        let limits = Limits {
            features: 100,
            bytes: HEAD.len() + TAIL.len() + 3 * one + 2,
        };
        let got = batches(&input, limits, "s");
        assert_eq!(
            got.iter().map(|b| b.count).collect::<Vec<_>>(),
            [3, 3, 3, 1]
        );
        assert!(got.iter().all(|b| b.body.len() <= limits.bytes));
        let ns: Vec<u64> = got
            .iter()
            .flat_map(|b| {
                let v: serde_json::Value = serde_json::from_slice(&b.body).unwrap();
                v["features"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| f["properties"]["n"].as_u64().unwrap())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(ns, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn features_that_are_not_json_are_named() {
        let input = format!(
            "{}\n{{\"type\":\"Feature\",\"properties\":{{\"n\":}}}}\n{}",
            point(0),
            point(2)
        );
        let got = batches(&input, LIMITS, "s");
        assert_eq!(got[0].count, 3);
        assert_eq!(got[0].broken.len(), 1);
        let broken = &got[0].broken[0];
        assert_eq!((broken.feature, broken.at), (1, point(0).len() as u64 + 1));
        assert!(broken.message.contains("column"), "{}", broken.message);
    }

    #[test]
    fn a_broken_input_ends_the_batches_without_the_partial_one() {
        let input = format!(
            "{{\"features\":[{},{},{},{}",
            point(0),
            point(1),
            point(2),
            point(3)
        );
        let mut it = Batches::new(input.as_bytes(), LIMITS, "s".into());
        assert_eq!(it.next().unwrap().unwrap().count, 3);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }

    /// A FeatureCollection of `features` points made as it is read, counting
    /// the bytes handed out: nothing is held but what the reader asks for.
    struct Generated {
        features: usize,
        made: usize,
        pending: Vec<u8>,
        handed_out: std::rc::Rc<std::cell::Cell<u64>>,
    }

    impl Read for Generated {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.pending.is_empty() {
                self.pending = match self.made {
                    0 => br#"{"type":"FeatureCollection","features":["#.to_vec(),
                    n if n <= self.features => {
                        let sep = if n > 1 { "," } else { "" };
                        format!("{sep}{}", point(n)).into_bytes()
                    }
                    n if n == self.features + 1 => b"]}".to_vec(),
                    _ => return Ok(0),
                };
                self.made += 1;
            }
            let n = buf.len().min(self.pending.len());
            buf[..n].copy_from_slice(&self.pending[..n]);
            self.pending.drain(..n);
            self.handed_out.set(self.handed_out.get() + n as u64);
            Ok(n)
        }
    }

    #[test]
    fn memory_stays_bounded_whatever_the_input_size() {
        // ~28 MB of input, never held: each batch is read only as it is gathered.
        const BUFFER: usize = 64 * 1024;
        let handed_out = std::rc::Rc::new(std::cell::Cell::new(0));
        let input = Generated {
            features: 300_000,
            made: 0,
            pending: Vec::new(),
            handed_out: handed_out.clone(),
        };
        let limits = Limits {
            features: 1000,
            bytes: 1 << 20,
        };
        let reader = BufReader::with_capacity(BUFFER, input);
        let mut total = 0;
        let mut largest = 0;
        for batch in Batches::new(reader, limits, "s".into()) {
            let batch = batch.unwrap();
            // Read so far: this batch and what the buffer holds ahead of it.
            assert!(handed_out.get() <= batch.end + BUFFER as u64 + 100);
            largest = largest.max(batch.body.capacity());
            total += batch.count;
        }
        assert_eq!(total, 300_000);
        assert!(handed_out.get() > 25_000_000, "{}", handed_out.get());
        assert!(largest < 2 * 100 * 1000, "{largest}");
    }
}
