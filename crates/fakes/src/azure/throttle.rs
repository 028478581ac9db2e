//! Resource Manager's throttling (learn.microsoft.com, "Understand how Azure Resource Manager throttles
//! requests", the regional token-bucket limits of 2024): per subscription and principal, one token
//! bucket for each kind of request (reads, writes, deletes), refilled continuously; every answer tells
//! what is left (`x-ms-ratelimit-remaining-subscription-reads` / `-writes` / `-deletes`, and the
//! `-global-` variant for the subscription's limit over every principal, fifteen times the
//! principal's); a request over the limit is refused with 429 `TooManyRequests` and `Retry-After`
//! (seconds).

#[allow(unused_imports)]
use super::*;
use crate::bucket::Bucket;

/// The buckets of one kind of request: (requests in a full bucket, requests regained a second).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArmLimits {
    /// `GET` (and `HEAD`).
    pub reads: (u32, f64),
    /// `PUT`, `PATCH`, `POST`.
    pub writes: (u32, f64),
    /// `DELETE`.
    pub deletes: (u32, f64),
}

impl ArmLimits {
    /// Resource Manager's published subscription limits: reads 250 refilled at 25 a second, writes
    /// and deletes 200 at 10 a second.
    pub const RESOURCE_MANAGER: ArmLimits = ArmLimits {
        reads: (250, 25.0),
        writes: (200, 10.0),
        deletes: (200, 10.0),
    };
}

/// The subscription's global limit is this many times the principal's.
const GLOBAL_FACTOR: u32 = 15;

/// The buckets of the one principal the fake serves, and of the subscription.
#[derive(Debug)]
pub(super) struct Throttle {
    /// (kind, the principal's bucket, the subscription's global bucket), by kind.
    buckets: Vec<(&'static str, Bucket, Bucket)>,
    /// Requests refused so far.
    pub(super) refused: u64,
}

impl Throttle {
    pub(super) fn new(l: ArmLimits) -> Throttle {
        let own = |(n, r): (u32, f64)| Bucket::new(n, r);
        let global =
            |(n, r): (u32, f64)| Bucket::new(n * GLOBAL_FACTOR, r * f64::from(GLOBAL_FACTOR));
        Throttle {
            buckets: vec![
                ("reads", own(l.reads), global(l.reads)),
                ("writes", own(l.writes), global(l.writes)),
                ("deletes", own(l.deletes), global(l.deletes)),
            ],
            refused: 0,
        }
    }

    /// Spends one request of `method`'s kind: the headers to answer with, and the refusal when the
    /// bucket is empty.
    pub(super) fn spend(&mut self, method: &Method) -> (Vec<(String, String)>, Option<Response>) {
        let kind = match *method {
            Method::GET | Method::HEAD => "reads",
            Method::DELETE => "deletes",
            _ => "writes",
        };
        let (_, own, global) = self
            .buckets
            .iter_mut()
            .find(|(k, _, _)| *k == kind)
            .expect("every kind has its buckets");
        own.refill();
        global.refill();
        let refused = if own.tokens < 1.0 || global.tokens < 1.0 {
            let short = |b: &Bucket| (1.0 - b.tokens).max(0.0) / b.refill;
            let wait = short(own).max(short(global)).ceil().max(1.0) as u64;
            Some(wait)
        } else {
            own.tokens -= 1.0;
            global.tokens -= 1.0;
            None
        };
        let headers = vec![
            (
                format!("x-ms-ratelimit-remaining-subscription-{kind}"),
                (own.tokens.floor() as u64).to_string(),
            ),
            (
                format!("x-ms-ratelimit-remaining-subscription-global-{kind}"),
                (global.tokens.floor() as u64).to_string(),
            ),
        ];
        let refusal = refused.map(|wait| {
            self.refused += 1;
            let mut r = err(
                429,
                "TooManyRequests",
                &format!(
                    "The request is being throttled as the limit has been reached for operation type - {}. Please try again after {wait} seconds.",
                    match kind {
                        "reads" => "Read",
                        "writes" => "Write",
                        _ => "Delete",
                    }
                ),
            );
            if let Ok(v) = wait.to_string().parse() {
                r.headers_mut().insert("retry-after", v);
            }
            r
        });
        (headers, refusal)
    }
}
