//! Counters of requests by verb, resource and response code.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Request counters of one instance.
#[derive(Debug, Default)]
pub struct Metrics {
    counts: Mutex<BTreeMap<(String, String, u16), u64>>,
}

impl Metrics {
    /// Counts one request.
    pub fn record(&self, verb: &str, resource: &str, code: u16) {
        if let Ok(mut c) = self.counts.lock() {
            *c.entry((verb.to_owned(), resource.to_owned(), code))
                .or_default() += 1;
        }
    }

    /// Every counter: (verb, resource, code) -> requests.
    pub fn snapshot(&self) -> BTreeMap<(String, String, u16), u64> {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Requests matching a verb and/or resource (`None` matches any).
    pub fn total(&self, verb: Option<&str>, resource: Option<&str>) -> u64 {
        self.snapshot()
            .iter()
            .filter(|((v, r, _), _)| verb.is_none_or(|x| x == v) && resource.is_none_or(|x| x == r))
            .map(|(_, n)| n)
            .sum()
    }

    /// Resets every counter.
    pub fn reset(&self) {
        if let Ok(mut c) = self.counts.lock() {
            c.clear();
        }
    }
}
