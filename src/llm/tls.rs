//! The certificates an HTTP client is given for `https`: the roots it trusts in place of the
//! built-in ones (a private authority, a self-signed server) and a certificate of its own
//! for servers that ask for one (mutual TLS). Without either, every client of the process
//! shares one TLS configuration with Mozilla's roots (`http::SharedTls`).
//!
//! The PEM is read when it is given and each certificate checked the way the TLS layer will
//! read it, so that a file that is not what it should be fails the provider's `check` (the
//! agent's `build`) naming what is wrong, instead of a certificate being dropped silently
//! and every handshake failing later.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};
use ureq::unversioned::transport::RustlsConnector;

use crate::Error;

/// The TLS connectors of clients given certificates, by what they were given: clients given
/// the same ones (10,000 agents of one program, each with its provider) share one rustls
/// configuration and its cache of sessions, as clients without certificates share theirs.
/// A connector lives while a client holds it.
#[allow(clippy::type_complexity)] // OK because it is read in one place.
static CONNECTORS: Mutex<Vec<(Vec<u8>, Weak<RustlsConnector>)>> = Mutex::new(Vec::new());

/// What a client was told about TLS; the default is nothing (the shared configuration).
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    roots: Option<Arc<Vec<Certificate<'static>>>>,
    client: Option<ClientCert>,
    /// The first setting that could not be read: fails `check` and every request.
    error: Option<String>,
}

impl TlsSettings {
    /// Trusts only the certificates in `pem` as roots.
    pub(crate) fn set_roots(&mut self, pem: &[u8]) {
        match roots(pem) {
            Ok(certs) => self.roots = Some(Arc::new(certs)),
            Err(why) => self.fail(format!("the root certificates {why}")),
        }
    }

    /// Presents the chain and key in `pem` to a server that asks for a certificate.
    pub(crate) fn set_client(&mut self, pem: &[u8]) {
        match client(pem) {
            Ok(cert) => self.client = Some(cert),
            Err(why) => self.fail(format!("the client certificate {why}")),
        }
    }

    fn fail(&mut self, why: String) {
        self.error.get_or_insert(why);
    }

    /// Whether a client certificate was given.
    pub(crate) fn has_client(&self) -> bool {
        self.client.is_some()
    }

    /// Whether the client needs a TLS configuration of its own.
    pub(crate) fn is_custom(&self) -> bool {
        self.roots.is_some() || self.client.is_some()
    }

    /// The configuration error of a setting that could not be read.
    ///
    /// # Errors
    /// [`Error::Config`] naming the setting and what is wrong with it.
    pub(crate) fn check(&self) -> Result<(), Error> {
        match &self.error {
            Some(why) => Err(Error::Config(why.clone())),
            None => Ok(()),
        }
    }

    /// The connector of clients with these settings (`None` without any: the shared one).
    pub(crate) fn connector(&self) -> Option<Arc<RustlsConnector>> {
        if !self.is_custom() {
            return None;
        }
        let key = self.fingerprint();
        let mut all = CONNECTORS.lock();
        all.retain(|(_, c)| c.strong_count() > 0);
        if let Some(connector) = all
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, c)| c.upgrade())
        {
            return Some(connector);
        }
        let connector = Arc::new(RustlsConnector::default());
        all.push((key, Arc::downgrade(&connector)));
        Some(connector)
    }

    /// The settings as bytes, equal for equal settings: each root's and each client
    /// certificate's DER and the key's, each after its length.
    fn fingerprint(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut put = |bytes: &[u8]| {
            out.extend_from_slice(&bytes.len().to_le_bytes());
            out.extend_from_slice(bytes);
        };
        for cert in self.roots.iter().flat_map(|r| r.iter()) {
            put(cert.der());
        }
        put(b"client");
        if let Some(client) = &self.client {
            for cert in client.certs() {
                put(cert.der());
            }
            put(client.private_key().der());
        }
        out
    }

    /// ureq's TLS configuration for these settings.
    pub(crate) fn config(&self) -> TlsConfig {
        let roots = match &self.roots {
            Some(certs) => RootCerts::Specific(certs.clone()),
            None => RootCerts::WebPki,
        };
        TlsConfig::builder()
            .root_certs(roots)
            .client_cert(self.client.clone())
            .build()
    }
}

/// The certificates of `pem`, each one a root the TLS layer accepts.
fn roots(pem: &[u8]) -> Result<Vec<Certificate<'static>>, String> {
    let (certs, _) = read(pem)?;
    if certs.is_empty() {
        return Err("hold no PEM certificate (`-----BEGIN CERTIFICATE-----`)".into());
    }
    for (n, cert) in certs.iter().enumerate() {
        let der = rustls::pki_types::CertificateDer::from(cert.der());
        let (_, ignored) = rustls::RootCertStore::empty().add_parsable_certificates([der]);
        if ignored > 0 {
            return Err(format!(
                "are unusable: certificate {} of {} is not a valid X.509 certificate",
                n + 1,
                certs.len()
            ));
        }
    }
    Ok(certs)
}

/// The chain and the key of `pem`.
fn client(pem: &[u8]) -> Result<ClientCert, String> {
    let (certs, key) = read(pem)?;
    if certs.is_empty() {
        return Err("holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)".into());
    }
    let Some(key) = key else {
        return Err("holds no private key (`-----BEGIN PRIVATE KEY-----`)".into());
    };
    Ok(ClientCert::new_with_certs(&certs, key))
}

/// The certificates of `pem`, in order, and its (first) private key.
#[allow(clippy::type_complexity)] // OK because it is read by its one caller each.
fn read(pem: &[u8]) -> Result<(Vec<Certificate<'static>>, Option<PrivateKey<'static>>), String> {
    let mut certs = Vec::new();
    let mut key = None;
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(PemItem::Certificate(cert)) => certs.push(cert),
            Ok(PemItem::PrivateKey(k)) => {
                key.get_or_insert(k);
            }
            // Other sections (parameters, revocation lists) are no business of ours.
            Ok(_) => {}
            Err(e) => return Err(format!("cannot be read as PEM: {e}")),
        }
    }
    Ok((certs, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &[u8] = include_bytes!("../../tests/data/tls/ca.pem");
    const CLIENT: &[u8] = include_bytes!("../../tests/data/tls/client.pem");
    const CLIENT_KEY: &[u8] = include_bytes!("../../tests/data/tls/client.key");

    fn error(set: impl FnOnce(&mut TlsSettings)) -> String {
        let mut tls = TlsSettings::default();
        set(&mut tls);
        match tls.check() {
            Err(Error::Config(why)) => why,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn certificates_that_read_well_are_taken() {
        let mut tls = TlsSettings::default();
        assert!(!tls.is_custom());
        tls.set_roots(&[CA, b"\n", CA].concat());
        tls.set_client(&[CLIENT, CLIENT_KEY].concat());
        assert!(tls.check().is_ok());
        assert!(tls.is_custom());
        assert_eq!(tls.roots.as_ref().map(|r| r.len()), Some(2));
    }

    #[test]
    fn clients_given_the_same_certificates_share_a_connector_while_one_holds_it() {
        let with = |roots: &[u8], client: Option<&[u8]>| {
            let mut tls = TlsSettings::default();
            tls.set_roots(roots);
            if let Some(pem) = client {
                tls.set_client(pem);
            }
            tls
        };
        let client = [CLIENT, CLIENT_KEY].concat();
        let a = with(CA, None).connector().unwrap();
        let b = with(CA, None).connector().unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = with(CA, Some(&client)).connector().unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert!(Arc::ptr_eq(
            &c,
            &with(CA, Some(&client)).connector().unwrap()
        ));
        assert!(TlsSettings::default().connector().is_none());
        // Gone with its last client.
        let weak = Arc::downgrade(&a);
        drop((a, b));
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn what_is_not_a_certificate_fails_the_check_naming_the_setting() {
        assert_eq!(
            error(|t| t.set_roots(b"not a certificate")),
            "the root certificates hold no PEM certificate (`-----BEGIN CERTIFICATE-----`)"
        );
        assert_eq!(
            error(|t| t.set_roots(CLIENT_KEY)),
            "the root certificates hold no PEM certificate (`-----BEGIN CERTIFICATE-----`)"
        );
        // PEM framing around bytes that are no certificate.
        let bogus = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert_eq!(
            error(|t| t.set_roots(&[CA, bogus].concat())),
            "the root certificates are unusable: certificate 2 of 2 is not a valid X.509 certificate"
        );
        let broken = b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n";
        assert!(
            error(|t| t.set_roots(broken))
                .starts_with("the root certificates cannot be read as PEM: "),
        );
        assert_eq!(
            error(|t| t.set_client(CLIENT)),
            "the client certificate holds no private key (`-----BEGIN PRIVATE KEY-----`)"
        );
        assert_eq!(
            error(|t| t.set_client(CLIENT_KEY)),
            "the client certificate holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)"
        );
        // The first error is the one told.
        assert_eq!(
            error(|t| {
                t.set_client(CLIENT);
                t.set_roots(b"");
            }),
            "the client certificate holds no private key (`-----BEGIN PRIVATE KEY-----`)"
        );
    }
}
