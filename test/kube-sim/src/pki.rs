//! The server's certificate authority: serving certificate, client certificates, CSR signing,
//! and reading identities out of certificates and CSRs. Subjects carry one CN (the user) and
//! any number of O attributes (the groups), as Kubernetes reads them.

use std::str::FromStr;
use std::time::{Duration, SystemTime};

use p256::ecdsa::{DerSignature, SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePublicKey, EncodePrivateKey, LineEnding};
use x509_cert::attr::AttributeTypeAndValue;
use x509_cert::builder::{Builder, CertificateBuilder, Profile, RequestBuilder};
use x509_cert::der::asn1::{Any, Ia5String, OctetString, SetOfVec};
use x509_cert::der::{DecodePem, Encode, EncodePem, Tag};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{ExtendedKeyUsage, SubjectAltName};
use x509_cert::name::{Name, RdnSequence, RelativeDistinguishedName};
use x509_cert::request::CertReq;
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::{ObjectIdentifier, SubjectPublicKeyInfoOwned};
use x509_cert::time::{Time, Validity};

const OID_CN: &str = "2.5.4.3";
const OID_O: &str = "2.5.4.10";
const OID_SERVER_AUTH: &str = "1.3.6.1.5.5.7.3.1";
const OID_CLIENT_AUTH: &str = "1.3.6.1.5.5.7.3.2";

/// Errors of certificate work.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("certificate building failed: {0}")]
    Build(String),
    #[error("invalid certificate request: {0}")]
    BadRequest(String),
}

fn build_err(e: impl std::fmt::Display) -> PkiError {
    PkiError::Build(e.to_string())
}

fn oid(s: &str) -> Result<ObjectIdentifier, PkiError> {
    ObjectIdentifier::from_str(s).map_err(build_err)
}

/// `CN=<user>` followed by one `O=<group>` per group.
pub fn subject(user: &str, groups: &[String]) -> Result<Name, PkiError> {
    let mut rdns = Vec::new();
    let mut push = |type_oid: &str, value: &str| -> Result<(), PkiError> {
        let atv = AttributeTypeAndValue {
            oid: oid(type_oid)?,
            value: Any::new(Tag::Utf8String, value.as_bytes()).map_err(build_err)?,
        };
        let set = SetOfVec::try_from(vec![atv]).map_err(build_err)?;
        rdns.push(RelativeDistinguishedName(set));
        Ok(())
    };
    for g in groups {
        push(OID_O, g)?;
    }
    push(OID_CN, user)?;
    Ok(RdnSequence(rdns))
}

/// The CN and O values of a name.
pub fn name_identity(name: &Name) -> (String, Vec<String>) {
    let mut user = String::new();
    let mut groups = Vec::new();
    for rdn in &name.0 {
        for atv in rdn.0.iter() {
            let text = String::from_utf8_lossy(atv.value.value()).into_owned();
            match atv.oid.to_string().as_str() {
                OID_CN => user = text,
                OID_O => groups.push(text),
                _ => {}
            }
        }
    }
    (user, groups)
}

fn validity(seconds: u64) -> Result<Validity, PkiError> {
    let now = SystemTime::now();
    Ok(Validity {
        not_before: Time::try_from(now - Duration::from_secs(300)).map_err(build_err)?,
        not_after: Time::try_from(now + Duration::from_secs(seconds)).map_err(build_err)?,
    })
}

fn serial() -> Result<SerialNumber, PkiError> {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] &= 0x7f;
    SerialNumber::new(&bytes).map_err(build_err)
}

fn key_pem(key: &SigningKey) -> Result<String, PkiError> {
    Ok(key
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(build_err)?
        .to_string())
}

/// The CA and the serving certificate.
pub struct Pki {
    ca_key: SigningKey,
    ca_name: Name,
    ca_pem: String,
    /// Serving certificate (PEM).
    pub serving_cert_pem: String,
    /// Serving key (PKCS#8 PEM).
    pub serving_key_pem: String,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki")
            .field("ca", &self.ca_name.to_string())
            .finish_non_exhaustive()
    }
}

impl Pki {
    /// A fresh CA and a serving certificate for 127.0.0.1, ::1 and localhost.
    pub fn new(name: &str) -> Result<Self, PkiError> {
        let mut rng = rand_core::OsRng;
        let ca_key = SigningKey::random(&mut rng);
        let ca_name = subject(&format!("kube-sim-ca-{name}"), &[])?;
        let ca_spki =
            SubjectPublicKeyInfoOwned::from_key(*ca_key.verifying_key()).map_err(build_err)?;
        let ca = CertificateBuilder::new(
            Profile::Root,
            serial()?,
            validity(10 * 365 * 86400)?,
            ca_name.clone(),
            ca_spki,
            &ca_key,
        )
        .map_err(build_err)?
        .build::<DerSignature>()
        .map_err(build_err)?;
        let ca_pem = ca.to_pem(LineEnding::LF).map_err(build_err)?;

        let serving_key = SigningKey::random(&mut rng);
        let spki =
            SubjectPublicKeyInfoOwned::from_key(*serving_key.verifying_key()).map_err(build_err)?;
        let profile = Profile::Leaf {
            issuer: ca_name.clone(),
            enable_key_agreement: false,
            enable_key_encipherment: true,
        };
        let mut builder = CertificateBuilder::new(
            profile,
            serial()?,
            validity(365 * 86400)?,
            subject("kube-apiserver", &[])?,
            spki,
            &ca_key,
        )
        .map_err(build_err)?;
        let sans = vec![
            GeneralName::DnsName(Ia5String::new("localhost").map_err(build_err)?),
            GeneralName::IpAddress(OctetString::new(vec![127, 0, 0, 1]).map_err(build_err)?),
            GeneralName::IpAddress(
                OctetString::new(std::net::Ipv6Addr::LOCALHOST.octets().to_vec())
                    .map_err(build_err)?,
            ),
        ];
        builder
            .add_extension(&SubjectAltName(sans))
            .map_err(build_err)?;
        builder
            .add_extension(&ExtendedKeyUsage(vec![oid(OID_SERVER_AUTH)?]))
            .map_err(build_err)?;
        let serving = builder.build::<DerSignature>().map_err(build_err)?;
        Ok(Self {
            serving_cert_pem: serving.to_pem(LineEnding::LF).map_err(build_err)?,
            serving_key_pem: key_pem(&serving_key)?,
            ca_key,
            ca_name,
            ca_pem,
        })
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    fn issue(
        &self,
        subject: Name,
        spki: SubjectPublicKeyInfoOwned,
        seconds: u64,
    ) -> Result<String, PkiError> {
        let profile = Profile::Leaf {
            issuer: self.ca_name.clone(),
            enable_key_agreement: false,
            enable_key_encipherment: true,
        };
        let mut builder = CertificateBuilder::new(
            profile,
            serial()?,
            validity(seconds)?,
            subject,
            spki,
            &self.ca_key,
        )
        .map_err(build_err)?;
        builder
            .add_extension(&ExtendedKeyUsage(vec![oid(OID_CLIENT_AUTH)?]))
            .map_err(build_err)?;
        let cert = builder.build::<DerSignature>().map_err(build_err)?;
        cert.to_pem(LineEnding::LF).map_err(build_err)
    }

    /// A client certificate for `user` in `groups`, valid for `seconds`: (cert PEM, key PEM).
    pub fn client_cert(
        &self,
        user: &str,
        groups: &[String],
        seconds: u64,
    ) -> Result<(String, String), PkiError> {
        let key = SigningKey::random(&mut rand_core::OsRng);
        let spki = SubjectPublicKeyInfoOwned::from_key(*key.verifying_key()).map_err(build_err)?;
        Ok((
            self.issue(subject(user, groups)?, spki, seconds)?,
            key_pem(&key)?,
        ))
    }

    /// Signs a PEM CSR as a client certificate for the subject it names.
    pub fn sign_client_csr(&self, csr_pem: &str, seconds: u64) -> Result<String, PkiError> {
        let req = parse_csr(csr_pem)?;
        self.issue(
            req.info.subject.clone(),
            req.info.public_key.clone(),
            seconds,
        )
    }
}

/// Parses a PEM CSR and checks its signature (P-256 keys; other algorithms are taken as is).
pub fn parse_csr(csr_pem: &str) -> Result<CertReq, PkiError> {
    let req = CertReq::from_pem(csr_pem.trim().as_bytes())
        .map_err(|e| PkiError::BadRequest(e.to_string()))?;
    let spki_der = req
        .info
        .public_key
        .to_der()
        .map_err(|e| PkiError::BadRequest(e.to_string()))?;
    if let Ok(vk) = VerifyingKey::from_public_key_der(&spki_der) {
        use p256::ecdsa::signature::Verifier;
        let info = req
            .info
            .to_der()
            .map_err(|e| PkiError::BadRequest(e.to_string()))?;
        let sig = DerSignature::try_from(req.signature.raw_bytes())
            .map_err(|e| PkiError::BadRequest(format!("signature: {e}")))?;
        vk.verify(&info, &sig)
            .map_err(|_| PkiError::BadRequest("the request's signature does not verify".into()))?;
    }
    Ok(req)
}

/// Generates a key and a PEM CSR for `user` in `groups`: (CSR PEM, key PEM).
pub fn make_csr(user: &str, groups: &[String]) -> Result<(String, String), PkiError> {
    let key = SigningKey::random(&mut rand_core::OsRng);
    let req = RequestBuilder::new(subject(user, groups)?, &key)
        .map_err(build_err)?
        .build::<DerSignature>()
        .map_err(build_err)?;
    Ok((
        req.to_pem(LineEnding::LF).map_err(build_err)?,
        key_pem(&key)?,
    ))
}

/// The user (CN) and groups (O) a PEM CSR asks for.
pub fn csr_subject(csr_pem: &str) -> Result<(String, Vec<String>), PkiError> {
    Ok(name_identity(&parse_csr(csr_pem)?.info.subject))
}

/// The user (CN) and groups (O) of a DER certificate.
pub fn identity_of(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let user = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    Some((user, groups))
}

/// The DER of the first certificate in a PEM text.
pub fn first_cert_der(pem: &str) -> Option<Vec<u8>> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .ok()
        .map(|c| c.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csr_round_trip_keeps_every_group() {
        let pki = Pki::new("t").unwrap();
        let groups = vec![
            "system:open-cluster-management:c1".to_owned(),
            "team, with comma".to_owned(),
        ];
        let (csr, _key) = make_csr("system:open-cluster-management:c1:agent", &groups).unwrap();
        assert_eq!(
            csr_subject(&csr).unwrap(),
            (
                "system:open-cluster-management:c1:agent".to_owned(),
                groups.clone()
            )
        );
        let cert_pem = pki.sign_client_csr(&csr, 3600).unwrap();
        let der = first_cert_der(&cert_pem).unwrap();
        assert_eq!(
            identity_of(&der).unwrap(),
            ("system:open-cluster-management:c1:agent".to_owned(), groups)
        );
        let (cert, _) = pki
            .client_cert("admin", &["system:masters".to_owned()], 60)
            .unwrap();
        assert_eq!(
            identity_of(&first_cert_der(&cert).unwrap()).unwrap().1,
            vec!["system:masters"]
        );
    }

    #[test]
    fn tampered_csr_is_refused() {
        let (csr, _) = make_csr("u", &[]).unwrap();
        assert!(
            parse_csr(
                "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----"
            )
            .is_err()
        );
        assert!(parse_csr(&csr).is_ok());
    }
}
