//! DPoP (RFC 9449) for the OAuth flow: a P-256 key of the connection's own, to which the
//! authorization server binds the tokens it issues, and the proof of holding it that goes
//! with each request: to the token endpoint (no token yet) and to the MCP server (with the
//! hash of the access token it proves). A server that wants a nonce in the proofs says so
//! with `use_dpop_nonce` and a `DPoP-Nonce` header; the next proof carries it.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use serde_json::{Value, json};

use super::McpError;
use super::oauth_flow::{base64url, random_text};

/// The one algorithm proofs are signed with.
pub(crate) const ALGORITHM: &str = "ES256";

/// A DPoP key: the pair, its PKCS#8 document (kept with the tokens bound to it, a secret)
/// and its public JWK.
pub(crate) struct DpopKey {
    pair: EcdsaKeyPair,
    pkcs8: String,
    jwk: Value,
}

impl DpopKey {
    /// A new key from the system's random source.
    pub(crate) fn generate() -> Result<DpopKey, McpError> {
        let rng = ring::rand::SystemRandom::new();
        let document = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| McpError::Auth("could not make a DPoP key".into()))?;
        DpopKey::from_pkcs8(&base64url(document.as_ref()))
            .ok_or_else(|| McpError::Auth("could not read the DPoP key made".into()))
    }

    /// The key of a PKCS#8 document in base64url (as [`DpopKey::pkcs8`] gives it).
    pub(crate) fn from_pkcs8(text: &str) -> Option<DpopKey> {
        let der = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()?;
        let rng = ring::rand::SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, &rng).ok()?;
        // An uncompressed point: 0x04, then x and y, 32 bytes each.
        let point = pair.public_key().as_ref();
        if point.len() != 65 || point[0] != 4 {
            return None;
        }
        let jwk = json!({
            "kty": "EC",
            "crv": "P-256",
            "x": base64url(&point[1..33]),
            "y": base64url(&point[33..]),
        });
        Some(DpopKey {
            pair,
            pkcs8: text.to_owned(),
            jwk,
        })
    }

    /// The PKCS#8 document, base64url: what is stored with the tokens.
    pub(crate) fn pkcs8(&self) -> &str {
        &self.pkcs8
    }

    /// A fresh proof (a `dpop+jwt`) for a request of `method` to `url` (its query and
    /// fragment left out), with the hash of `access_token` when one is presented and the
    /// server's `nonce` when it gave one.
    pub(crate) fn proof(
        &self,
        method: &str,
        url: &str,
        access_token: Option<&str>,
        nonce: Option<&str>,
    ) -> Result<String, McpError> {
        let htu = url.split(['?', '#']).next().unwrap_or(url);
        let iat = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut claims = json!({"jti": random_text(16), "htm": method, "htu": htu, "iat": iat});
        if let Some(token) = access_token {
            let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
            claims["ath"] = Value::String(base64url(digest.as_ref()));
        }
        if let Some(nonce) = nonce {
            claims["nonce"] = Value::String(nonce.to_owned());
        }
        let header = json!({"typ": "dpop+jwt", "alg": ALGORITHM, "jwk": self.jwk});
        let signing_input = format!(
            "{}.{}",
            base64url(header.to_string().as_bytes()),
            base64url(claims.to_string().as_bytes())
        );
        let signature = self
            .pair
            .sign(&ring::rand::SystemRandom::new(), signing_input.as_bytes())
            .map_err(|_| McpError::Auth("signing a DPoP proof failed".into()))?;
        Ok(format!("{signing_input}.{}", base64url(signature.as_ref())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(jwt: &str, i: usize) -> Value {
        let text = jwt.split('.').nth(i).unwrap();
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(text)
                .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn a_proof_is_signed_by_the_key_its_header_names_and_says_what_it_proves() {
        let key = DpopKey::generate().unwrap();
        let again = DpopKey::from_pkcs8(key.pkcs8()).unwrap();
        assert_eq!(again.jwk, key.jwk, "the stored key is the same key");
        let proof = key
            .proof("POST", "http://h:1/mcp?x=1#f", Some("at"), Some("n-1"))
            .unwrap();
        let header = part(&proof, 0);
        assert_eq!(header["typ"], "dpop+jwt");
        assert_eq!(header["alg"], "ES256");
        assert!(header["jwk"].get("d").is_none(), "no private part");
        let claims = part(&proof, 1);
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["htu"], "http://h:1/mcp");
        assert_eq!(claims["nonce"], "n-1");
        let ath = ring::digest::digest(&ring::digest::SHA256, b"at");
        assert_eq!(claims["ath"], base64url(ath.as_ref()));
        // The signature verifies with the public key of the header.
        let jwk = &header["jwk"];
        let coordinate = |name: &str| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(jwk[name].as_str().unwrap())
                .unwrap()
        };
        let point = [vec![4], coordinate("x"), coordinate("y")].concat();
        let (input, signature) = proof.rsplit_once('.').unwrap();
        let signature = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(signature)
            .unwrap();
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point)
            .verify(input.as_bytes(), &signature)
            .unwrap();
        // A fresh one each time.
        let other = key.proof("POST", "http://h:1/mcp", None, None).unwrap();
        assert_ne!(part(&other, 1)["jti"], claims["jti"]);
        assert!(part(&other, 1).get("ath").is_none());
    }
}
