//! The identities CSRs request, read once per CSR. A target reads every cluster's CSRs at
//! each reconcile; decoding each one's PKCS#10 request every time made a reconcile's cost
//! grow with the clusters times their CSRs. A CSR's spec (its request) cannot change once
//! created (kube-apiserver's `ValidateCertificateSigningRequestUpdate` keeps it as it was),
//! so what it requests is known by its uid for as long as it exists.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::ResourceExt;

/// The user and groups a CSR requests (`None`: its request does not decode).
pub(super) type Requested = Option<Arc<(String, Vec<String>)>>;

/// What each CSR (by uid) requests.
#[derive(Debug, Default)]
pub(super) struct CsrIdentities(Mutex<BTreeMap<String, Requested>>);

impl CsrIdentities {
    /// What `csr` requests, decoded at most once while it is remembered.
    pub(super) fn of(&self, csr: &CertificateSigningRequest) -> Requested {
        let decode = || {
            migration_api::runtime::requested_identity(&csr.spec.request.0)
                .ok()
                .map(Arc::new)
        };
        let Some(uid) = csr.uid() else {
            return decode();
        };
        let Ok(mut known) = self.0.lock() else {
            return decode();
        };
        known.entry(uid).or_insert_with(decode).clone()
    }

    /// Forgets the CSRs that are not among `live` (uids).
    pub(super) fn keep_only(&self, live: &BTreeSet<String>) {
        if let Ok(mut known) = self.0.lock() {
            known.retain(|uid, _| live.contains(uid));
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.lock().map_or(0, |k| k.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    /// A klusterlet's registration request (made with openssl for this test).
    const REQUEST: &str = "-----BEGIN CERTIFICATE REQUEST-----\nMIIBYjCCAQgCAQAwgaUxMDAuBgNVBAoMJ3N5c3RlbTpvcGVuLWNsdXN0ZXItbWFu\nYWdlbWVudDpjbHVzdGVyMTE4MDYGA1UECgwvc3lzdGVtOm9wZW4tY2x1c3Rlci1t\nYW5hZ2VtZW50Om1hbmFnZWQtY2x1c3RlcnMxNzA1BgNVBAMMLnN5c3RlbTpvcGVu\nLWNsdXN0ZXItbWFuYWdlbWVudDpjbHVzdGVyMTphZ2VudDEwWTATBgcqhkjOPQIB\nBggqhkjOPQMBBwNCAAQOnTd28dIlFZGSts1x6JLFdi0mSe9vavRZEbK5QpyQelFX\neW6RqrxxR8yVCTXul+j5+vCpiLD213T363VJGJeGoAAwCgYIKoZIzj0EAwIDSAAw\nRQIgQ/JEwwNgJZUmDvUYONLeyTsj+0/BpunEWs9/9LDMoo4CIQC0elHiHp9xlawg\ncTj63m6tq/TmTm6mh2pMW4aGJIdYnA==\n-----END CERTIFICATE REQUEST-----\n";

    fn csr(uid: &str, request: &[u8]) -> CertificateSigningRequest {
        let mut c = CertificateSigningRequest::default();
        c.metadata.uid = (!uid.is_empty()).then(|| uid.into());
        c.spec.request = ByteString(request.to_vec());
        c
    }

    #[test]
    fn a_csrs_request_is_decoded_once_and_forgotten_with_the_csr() {
        let ids = CsrIdentities::default();
        let agent = (
            "system:open-cluster-management:cluster1:agent1".to_owned(),
            vec![
                "system:open-cluster-management:cluster1".to_owned(),
                "system:open-cluster-management:managed-clusters".to_owned(),
            ],
        );
        assert_eq!(
            ids.of(&csr("u1", REQUEST.as_bytes())).as_deref(),
            Some(&agent)
        );
        assert_eq!(ids.of(&csr("u2", b"not a request")), None);
        // Known by uid: the same CSR is not decoded again (a request cannot change).
        assert_eq!(
            ids.of(&csr("u1", b"not a request")).as_deref(),
            Some(&agent)
        );
        assert_eq!(ids.len(), 2);
        ids.keep_only(&BTreeSet::from(["u2".to_owned()]));
        assert_eq!(ids.len(), 1);
        assert_eq!(
            ids.of(&csr("u1", b"not a request")),
            None,
            "forgotten, decoded anew"
        );
        // A CSR without a uid is decoded each time and not remembered.
        let remembered = ids.len();
        assert_eq!(
            ids.of(&csr("", REQUEST.as_bytes())).as_deref(),
            Some(&agent)
        );
        assert_eq!(ids.len(), remembered);
    }
}
