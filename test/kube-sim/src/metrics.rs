//! Counters of requests by verb, resource and response code, and an access log: resource
//! requests counted by user, verb, group, resource and namespace (asked, whether allowed or
//! not), to measure what a component does and to derive the least privilege it needs.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// One kind of resource request by one user.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    pub user: String,
    pub verb: String,
    pub api_group: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    /// Empty for cluster-scoped requests and requests across namespaces.
    pub namespace: String,
    /// Whether authorization allowed it.
    pub allowed: bool,
}

/// Request counters of one instance.
#[derive(Debug, Default)]
pub struct Metrics {
    counts: Mutex<BTreeMap<(String, String, u16), u64>>,
    /// The same by user: (user, verb, resource, code).
    answers: Mutex<BTreeMap<(String, String, String, u16), u64>>,
    access: Mutex<BTreeMap<Access, u64>>,
    connections: Mutex<BTreeMap<String, u64>>,
}

impl Metrics {
    /// Counts one request, answered with `code`, by `user` if it was authenticated.
    pub fn record(&self, user: Option<&str>, verb: &str, resource: &str, code: u16) {
        if let Ok(mut c) = self.counts.lock() {
            *c.entry((verb.to_owned(), resource.to_owned(), code))
                .or_default() += 1;
        }
        if let Some(user) = user
            && let Ok(mut c) = self.answers.lock()
        {
            *c.entry((user.to_owned(), verb.to_owned(), resource.to_owned(), code))
                .or_default() += 1;
        }
    }

    /// `user`'s requests: (verb, resource, code) -> requests.
    pub fn answers_to(&self, user: &str) -> BTreeMap<(String, String, u16), u64> {
        self.answers
            .lock()
            .map(|c| {
                c.iter()
                    .filter(|((u, ..), _)| u == user)
                    .map(|((_, v, r, code), n)| ((v.clone(), r.clone(), *code), *n))
                    .collect()
            })
            .unwrap_or_default()
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

    /// Counts one resource request in the access log.
    pub fn record_access(&self, access: Access) {
        if let Ok(mut c) = self.access.lock() {
            *c.entry(access).or_default() += 1;
        }
    }

    /// The access log: every kind of resource request with its count.
    pub fn access_log(&self) -> BTreeMap<Access, u64> {
        self.access.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Resource requests made by `user`.
    pub fn requests_by(&self, user: &str) -> u64 {
        self.access_log()
            .iter()
            .filter(|(a, _)| a.user == user)
            .map(|(_, n)| n)
            .sum()
    }

    /// Counts one accepted connection by the protocol it negotiated (`h2`, `http/1.1`, or
    /// `none` when the client named none; `plain` without TLS).
    pub fn record_connection(&self, protocol: &str) {
        if let Ok(mut c) = self.connections.lock() {
            *c.entry(protocol.to_owned()).or_default() += 1;
        }
    }

    /// Accepted connections by negotiated protocol.
    pub fn connections(&self) -> BTreeMap<String, u64> {
        self.connections
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    /// Resets every counter and the access log.
    pub fn reset(&self) {
        if let Ok(mut c) = self.counts.lock() {
            c.clear();
        }
        if let Ok(mut c) = self.answers.lock() {
            c.clear();
        }
        if let Ok(mut c) = self.access.lock() {
            c.clear();
        }
        if let Ok(mut c) = self.connections.lock() {
            c.clear();
        }
    }
}
