//! What the service's answer to a batch says: how many of its features were
//! written, and what went wrong with the others, told by their index in the
//! input rather than in the batch.

use serde::Deserialize;

use super::batches::Broken;
use super::http::Reply;

/// How many feature errors of one batch are kept for the summary.
const KEPT_ERRORS: usize = 3;

/// What became of one batch.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Features written by this request.
    pub written: usize,
    /// Features an earlier run had written (the service replayed its answer).
    pub replayed: usize,
    /// Features not written.
    pub failed: usize,
    /// Why features were not written, in one line.
    pub problem: Option<String>,
    /// The first problems with single features.
    pub errors: Vec<FeatureError>,
    /// How many problems the service reported in all.
    pub total_errors: usize,
    /// Every later batch would be refused the same way (no such collection,
    /// no right to write, batches too large, the service unavailable): stop.
    pub stop: bool,
    /// Bytes of the batch's GeoJSON the service answered for (0 when not sent).
    pub geojson_bytes: usize,
    /// Bytes of its body as the service received it (compressed or not).
    pub sent_bytes: usize,
}

/// A problem with one feature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureError {
    /// Its index in the input, when the service tied the problem to a feature.
    pub feature: Option<u64>,
    /// JSON pointer into the feature (`/properties/height`), or into the
    /// batch when the problem is not a feature's.
    pub pointer: String,
    /// The service's code (`invalid_type`, `check_violation`, …).
    pub code: String,
    /// The service's message, with the database's detail if any.
    pub message: String,
}

impl Outcome {
    /// A batch of `count` features not sent because of its features that are not JSON.
    pub fn broken(broken: &[Broken], count: usize) -> Self {
        Outcome {
            failed: count,
            problem: Some("not sent: features that are not JSON".into()),
            total_errors: broken.len(),
            errors: broken
                .iter()
                .take(KEPT_ERRORS)
                .map(|b| FeatureError {
                    feature: Some(b.feature),
                    pointer: format!("(byte {})", b.at),
                    code: "invalid_json".into(),
                    message: b.message.clone(),
                })
                .collect(),
            ..Outcome::default()
        }
    }
}

impl std::fmt::Display for FeatureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(feature) = self.feature {
            write!(f, "feature {feature} ")?;
        }
        write!(f, "{}: {}: {}", self.pointer, self.code, self.message)
    }
}

/// A problem as the service reports it.
#[derive(Debug, Deserialize)]
struct WireError {
    operation: Option<u64>,
    feature: Option<u64>,
    #[serde(default)]
    pointer: String,
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
    detail: Option<String>,
}

/// A problem document (RFC 9457) as featurepipe writes them.
#[derive(Debug, Deserialize)]
struct ProblemDoc {
    #[serde(default)]
    detail: String,
    #[serde(default)]
    errors: Vec<WireError>,
    total_errors: Option<usize>,
}

/// The report of `mode=batch` and `mode=skip` (an edit session's).
#[derive(Debug, Deserialize)]
struct SessionDoc {
    written: usize,
    not_written: usize,
    results: Vec<OpResult>,
    #[serde(default)]
    errors: Vec<WireError>,
    /// The operations' errors, listed in `results` or not (older services: absent, all listed).
    total_errors: Option<usize>,
}

#[derive(Debug, Deserialize)]
struct OpResult {
    error: Option<WireError>,
}

/// Read `reply` to a batch of `count` features whose first is feature `first` of the input.
pub fn read(reply: &Reply, first: u64, count: usize) -> Outcome {
    let done = |written: usize, failed: usize| {
        let (written, replayed) = if reply.replayed {
            (0, written)
        } else {
            (written, 0)
        };
        Outcome {
            written,
            replayed,
            failed,
            ..Outcome::default()
        }
    };
    match reply.status.as_u16() {
        // A 201 says the batch was written only with the ids of its features.
        201 => match serde_json::from_slice::<WrittenDoc>(&reply.body) {
            Ok(doc) if doc.ids.len() == count => done(count, 0),
            Ok(doc) => unknown(
                reply,
                count,
                &format!("{} ids for {count} features", doc.ids.len()),
            ),
            Err(e) => unknown(reply, count, &e),
        },
        200 => match serde_json::from_slice::<SessionDoc>(&reply.body) {
            Ok(report) => {
                let mut outcome = done(report.written, report.not_written);
                let errors: Vec<_> = report
                    .results
                    .into_iter()
                    .enumerate()
                    .filter_map(|(i, r)| r.error.map(|e| (Some(i as u64), e)))
                    .collect();
                // Past the first 100, the service counts the operations' errors.
                let unlisted = report
                    .total_errors
                    .unwrap_or(0)
                    .saturating_sub(errors.len());
                let other = report.errors.into_iter().map(|e| (None, e));
                let errors: Vec<_> = errors.into_iter().chain(other).collect();
                outcome.total_errors = errors.len() + unlisted;
                outcome.errors = errors
                    .into_iter()
                    .take(KEPT_ERRORS)
                    .map(|(i, e)| feature_error(e, i, first))
                    .collect();
                if report.not_written > 0 {
                    outcome.problem = Some(format!(
                        "{} of {count} features not written",
                        report.not_written
                    ));
                }
                outcome
            }
            Err(e) => unreadable(reply, count, &e),
        },
        _ => {
            let problem = serde_json::from_slice::<ProblemDoc>(&reply.body);
            let Ok(problem) = problem else {
                return unreadable(reply, count, &"not a problem document");
            };
            let status = reply.status.as_u16();
            let mut detail = format!("{}: {}", reply.status, problem.detail);
            if status == 413 {
                detail.push_str(" (send smaller batches: --batch, --batch-bytes)");
            }
            Outcome {
                failed: count,
                problem: Some(detail),
                total_errors: problem.total_errors.unwrap_or(problem.errors.len()),
                errors: problem
                    .errors
                    .into_iter()
                    .take(KEPT_ERRORS)
                    .map(|e| feature_error(e, None, first))
                    .collect(),
                stop: matches!(status, 401 | 403 | 404 | 405 | 413 | 415 | 502 | 503 | 504),
                ..Outcome::default()
            }
        }
    }
}

/// The report of a 201: the new keys, one per feature.
#[derive(Deserialize)]
struct WrittenDoc {
    ids: Vec<serde::de::IgnoredAny>,
}

/// A success that does not say what it wrote: the batch may or may not
/// have been written. Push stops; run again, its Idempotency-Keys make the
/// service write each batch at most once.
fn unknown(reply: &Reply, count: usize, why: &dyn std::fmt::Display) -> Outcome {
    let mut outcome = unreadable(reply, count, why);
    outcome.problem = outcome.problem.map(|p| {
        format!("{p}; whether these {count} features were written is unknown: run push again (the same batches go under the same Idempotency-Keys, written at most once)")
    });
    outcome
}

/// An answer that is not what featurepipe sends: nothing is known to be written.
fn unreadable(reply: &Reply, count: usize, why: &dyn std::fmt::Display) -> Outcome {
    let text = String::from_utf8_lossy(&reply.body);
    let excerpt: String = text.chars().take(200).collect();
    Outcome {
        failed: count,
        problem: Some(format!(
            "{}: an answer featurepipe push cannot read ({why}): {excerpt}",
            reply.status
        )),
        stop: true,
        ..Outcome::default()
    }
}

/// The service's problem `e` (of the batch's feature `index` when the
/// report says so), with the feature's index in the input and a pointer into it.
fn feature_error(e: WireError, index: Option<u64>, first: u64) -> FeatureError {
    let (in_batch, pointer) = match split_pointer(&e.pointer) {
        Some((i, rest)) => (Some(i), rest.to_owned()),
        None => (None, e.pointer.clone()),
    };
    let feature = e.feature.or(e.operation).or(index).or(in_batch);
    let mut message = e.message;
    if let Some(detail) = e.detail {
        message = format!("{message} ({detail})");
    }
    FeatureError {
        feature: feature.map(|i| first + i),
        pointer: if pointer.is_empty() {
            "/".into()
        } else {
            pointer
        },
        code: e.code,
        message,
    }
}

/// `/features/17/properties/x` → (17, `/properties/x`).
fn split_pointer(pointer: &str) -> Option<(u64, &str)> {
    let rest = pointer.strip_prefix("/features/")?;
    let digits = rest.find('/').unwrap_or(rest.len());
    Some((rest[..digits].parse().ok()?, &rest[digits..]))
}

#[cfg(test)]
mod tests {
    use hyper::StatusCode;
    use serde_json::json;

    use super::*;

    fn reply(status: u16, replayed: bool, body: serde_json::Value) -> Reply {
        Reply {
            status: StatusCode::from_u16(status).unwrap(),
            replayed,
            body: body.to_string().into(),
            retry_after: None,
            sent: 0,
        }
    }

    #[test]
    fn created_and_replayed_batches() {
        let o = read(&reply(201, false, json!({"ids": [1, 2]})), 0, 2);
        assert_eq!((o.written, o.replayed, o.failed, o.stop), (2, 0, 0, false));
        let o = read(&reply(201, true, json!({"ids": [1, 2]})), 0, 2);
        assert_eq!((o.written, o.replayed, o.failed), (0, 2, 0));
    }

    #[test]
    fn a_success_that_does_not_say_what_it_wrote_is_an_unknown_outcome() {
        let garbage = Reply {
            status: StatusCode::CREATED,
            replayed: false,
            body: "\u{0}\u{1}not json at all".into(),
            retry_after: None,
            sent: 0,
        };
        for reply in [garbage, reply(201, false, json!({"ids": [1]}))] {
            let o = read(&reply, 0, 2);
            assert_eq!((o.written, o.failed, o.stop), (0, 2, true), "{o:?}");
            assert!(o.problem.unwrap().contains("is unknown"));
        }
    }

    #[test]
    fn a_refused_batch_names_its_features_in_the_input() {
        let problem = json!({
            "type": "urn:featurepipe:problem:validation-failed", "status": 422,
            "detail": "2 problem(s) in 1 feature(s); nothing was written",
            "errors": [
                {"feature": 7, "pointer": "/features/7/properties/n", "code": "invalid_type", "message": "'n': expected a number"},
                {"feature": 7, "pointer": "/features/7/geometry", "code": "too_few_positions", "message": "two at least",
                 "detail": "d"},
            ],
            "total_errors": 2,
        });
        let o = read(&reply(422, false, problem), 1000, 10);
        assert_eq!(
            (o.written, o.failed, o.total_errors, o.stop),
            (0, 10, 2, false)
        );
        assert!(o
            .problem
            .unwrap()
            .starts_with("422 Unprocessable Entity: 2 problem(s)"));
        assert_eq!(
            o.errors[0].to_string(),
            "feature 1007 /properties/n: invalid_type: 'n': expected a number"
        );
        assert_eq!(o.errors[1].message, "two at least (d)");
        let o = read(
            &reply(404, false, json!({"detail": "no collection named 'x'"})),
            0,
            10,
        );
        assert!(o.stop);
        // Too large: the next batches would be too, and the summary says what to change.
        let o = read(&reply(413, false, json!({"detail": "too large"})), 0, 10);
        assert!(o.stop);
        let hint = "(send smaller batches: --batch, --batch-bytes)";
        assert!(o.problem.unwrap().ends_with(hint));
    }

    #[test]
    fn skip_and_batch_reports_count_what_was_written() {
        let report = json!({
            "mode": "skip", "written": 2, "not_written": 1,
            "results": [
                {"op": "insert", "status": "written"},
                {"op": "insert", "status": "failed", "error": {"operation": 1, "pointer": "/features/1", "code": "check_violation", "message": "no"}},
                {"op": "insert", "status": "written"},
            ],
            "batches": [],
        });
        let o = read(&reply(200, true, report), 50, 3);
        assert_eq!((o.written, o.replayed, o.failed), (0, 2, 1));
        assert_eq!(o.errors[0].to_string(), "feature 51 /: check_violation: no");
        assert_eq!(o.problem.as_deref(), Some("1 of 3 features not written"));
    }

    #[test]
    fn an_answer_that_is_not_featurepipe_s_stops_the_push() {
        let r = Reply {
            status: StatusCode::BAD_GATEWAY,
            replayed: false,
            body: "<html>bad gateway</html>".into(),
            retry_after: None,
            sent: 0,
        };
        let o = read(&r, 0, 5);
        assert!(o.stop);
        assert_eq!(o.failed, 5);
        assert!(o.problem.unwrap().contains("<html>bad gateway"));
    }
}
