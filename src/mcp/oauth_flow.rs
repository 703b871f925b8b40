//! The OAuth flow of one HTTP connection (see [`super::oauth`] for what it does, in order):
//! discovery, the client, the grant, scopes and step-up, refresh. One flow at a time per
//! connection (a lock held while it runs); requests read the current token without it.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::McpError;
use super::dpop::{self, DpopKey};
use super::oauth::{
    AuthorizationRequest, Authorizer, Challenge, Credentials, IssuedTo, OAuth, Tokens,
};
use crate::cancel::CancelToken;
use crate::llm::http::{HttpClient, Method, Post, Secrets, Target, scrub};

/// The most bytes of a metadata document or a token endpoint's answer read.
const MAX_DOCUMENT: u64 = 1 << 20;

/// How long each request of the flow (metadata, registration, token) may take.
const FLOW_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// An access token as a request presents it: the token, and the headers that carry it.
pub(crate) type Presented = (String, Vec<(String, String)>);

pub(crate) struct Auth {
    config: OAuth,
    /// The MCP endpoint, without query or fragment.
    endpoint: String,
    http: HttpClient,
    /// The token sent with requests; read without the flow's lock.
    current: Mutex<Option<Tokens>>,
    flow: Mutex<Flow>,
    /// The DPoP key: the one the kept tokens are bound to, else made for the first grant
    /// that uses DPoP.
    dpop: Mutex<Option<Arc<DpopKey>>>,
    /// The last `DPoP-Nonce` of the authorization server, and of the MCP server.
    as_nonce: Mutex<Option<String>>,
    rs_nonce: Mutex<Option<String>>,
}

#[derive(Default)]
struct Flow {
    found: Option<Found>,
    client: Option<IssuedTo>,
    /// The scopes asked for last.
    scopes: Vec<String>,
    /// The redirect URI of the registered client (a loopback one is bound per flow).
    redirect_uri: Option<String>,
}

/// What discovery found.
#[derive(Clone)]
struct Found {
    /// The resource indicator: the protected resource metadata's `resource`, else the
    /// endpoint.
    resource: String,
    issuer: String,
    /// The authorization server's metadata (empty for the 2025-03-26 fallback).
    meta: Value,
    authorization_endpoint: String,
    token_endpoint: String,
    registration_endpoint: Option<String>,
    resource_scopes: Option<Vec<String>>,
    /// Found without protected resource metadata (the 2025-03-26 revision).
    legacy: bool,
}

fn failed(why: impl Into<String>) -> McpError {
    McpError::Auth(why.into())
}

impl Auth {
    /// # Errors
    /// [`McpError::TokenStore`] when the store cannot read what it keeps.
    pub(crate) fn new(config: OAuth, endpoint: &str, http: HttpClient) -> Result<Auth, McpError> {
        let endpoint = endpoint
            .split(['?', '#'])
            .next()
            .unwrap_or(endpoint)
            .to_owned();
        let current = config.store.load(&endpoint).map_err(McpError::TokenStore)?;
        let dpop = current
            .as_ref()
            .and_then(|t| t.dpop_key.as_deref())
            .and_then(DpopKey::from_pkcs8)
            .map(Arc::new);
        Ok(Auth {
            config,
            endpoint,
            http,
            current: Mutex::new(current),
            flow: Mutex::new(Flow::default()),
            dpop: Mutex::new(dpop),
            as_nonce: Mutex::new(None),
            rs_nonce: Mutex::new(None),
        })
    }

    /// The access token to send now with a request of `method` to `url`, and the headers
    /// that present it: `Authorization: Bearer`, or for a DPoP-bound token `Authorization:
    /// DPoP` and a fresh proof (with the server's last nonce).
    ///
    /// # Errors
    /// [`McpError::Auth`] when the proof cannot be signed.
    pub(crate) fn credentials(
        &self,
        method: &str,
        url: &str,
    ) -> Result<Option<Presented>, McpError> {
        let Some(tokens) = self.current.lock().clone() else {
            return Ok(None);
        };
        let token = tokens.access_token;
        let key = self.dpop.lock().clone();
        let headers = match key.filter(|_| tokens.dpop_key.is_some()) {
            Some(key) => {
                let nonce = self.rs_nonce.lock().clone();
                let proof = key.proof(method, url, Some(&token), nonce.as_deref())?;
                vec![
                    ("authorization".to_owned(), format!("DPoP {token}")),
                    ("dpop".to_owned(), proof),
                ]
            }
            None => vec![("authorization".to_owned(), format!("Bearer {token}"))],
        };
        Ok(Some((token, headers)))
    }

    /// Takes up the MCP server's `DPoP-Nonce` of a reply; true when it is a new one.
    pub(crate) fn server_nonce(&self, nonce: Option<&str>) -> bool {
        let Some(nonce) = nonce else {
            return false;
        };
        let mut held = self.rs_nonce.lock();
        let new = held.as_deref() != Some(nonce);
        *held = Some(nonce.to_owned());
        new
    }

    /// The DPoP key to bind new tokens to, when the authorization server offers DPoP with
    /// ES256 and the program did not turn it off.
    fn dpop_key(&self, found: &Found) -> Result<Option<Arc<DpopKey>>, McpError> {
        let offered = found.meta["dpop_signing_alg_values_supported"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == dpop::ALGORITHM));
        if !offered || !self.config.dpop {
            return Ok(None);
        }
        let mut key = self.dpop.lock();
        if key.is_none() {
            *key = Some(Arc::new(DpopKey::generate()?));
        }
        Ok(key.clone())
    }

    /// Refreshes the token when it expired and a refresh token is held, discovering the
    /// authorization server first when this connection has not (tokens from the store). A
    /// failure leaves it: the server's refusal then starts the flow.
    ///
    /// # Errors
    /// [`McpError::TokenStore`] when the new tokens could not be saved (they are used).
    pub(crate) fn refresh_if_expired(&self, cancel: &CancelToken) -> Result<(), McpError> {
        let Some(held) = self
            .current
            .lock()
            .clone()
            .filter(|t| t.expired() && t.refresh_token.is_some())
        else {
            return Ok(());
        };
        let mut flow = self.flow.lock();
        // Another request refreshed it meanwhile.
        if self.current.lock().as_ref() != Some(&held) {
            return Ok(());
        }
        if flow.found.is_none() {
            flow.found = self.discover(&Challenge::default(), cancel).ok();
        }
        let Some(found) = flow.found.clone() else {
            return Ok(());
        };
        match self.refresh(&flow, &found, &held, cancel) {
            Ok(tokens) => self.keep(tokens),
            Err(_) => Ok(()),
        }
    }

    /// What no error text may show: the tokens and the client's secrets.
    pub(crate) fn secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(t) = &*self.current.lock() {
            out.push(t.access_token.clone());
            out.extend(t.refresh_token.clone());
            out.extend(t.dpop_key.clone());
        }
        out.extend(self.config.client_secret.clone());
        match &self.config.credentials {
            Some(Credentials::Secret { secret, .. }) => out.push(secret.clone()),
            Some(Credentials::Jwt { key_pem, .. }) => {
                out.extend(
                    key_pem
                        .lines()
                        .filter(|l| !l.starts_with("-----"))
                        .map(str::to_owned),
                );
            }
            Some(Credentials::Enterprise {
                idp_client_secret, ..
            }) => out.extend(idp_client_secret.clone()),
            Some(Credentials::Workload { .. }) | None => {}
        }
        if let Some(client) = &self.flow.try_lock().and_then(|f| f.client.clone()) {
            out.extend(client.secret.clone());
        }
        out
    }

    /// Gets a new token after a request that carried `sent` was refused with `status` and
    /// `challenge`: a refresh when the refusal is a 401 and a refresh token is held, else
    /// the grant (a new authorization, with more scopes for an `insufficient_scope`).
    ///
    /// Blocks while the flow runs (the user's authorization among it), bounded by `cancel`
    /// and each request's timeout.
    pub(crate) fn refused(
        &self,
        status: u16,
        challenge: &Challenge,
        sent: Option<&str>,
        cancel: &CancelToken,
    ) -> Result<(), McpError> {
        let mut flow = self.flow.lock();
        let held = self.current.lock().clone();
        let step_up = status == 403 && challenge.error() == Some("insufficient_scope");
        // Another request got a new token meanwhile: try that one first.
        if !step_up && held.as_ref().map(|t| t.access_token.as_str()) != sent && held.is_some() {
            return Ok(());
        }
        // Discovery: the first time; and after a 401 the resource's metadata again, which
        // may name another authorization server now (SEP-2352): then that one's metadata,
        // and none of the old one's credentials (its client, its refresh token) go to it.
        let mut moved = false;
        match flow.found.clone() {
            None => flow.found = Some(self.discover(challenge, cancel)?),
            Some(found) if status == 401 && !found.legacy => {
                if let Some(prm) = self.resource_metadata(challenge, cancel)?
                    && prm["authorization_servers"][0].as_str() != Some(found.issuer.as_str())
                {
                    flow.found = Some(self.server_of(&prm, cancel)?);
                    flow.client = None;
                    flow.redirect_uri = None;
                    moved = true;
                }
            }
            Some(_) => {}
        }
        let found = flow
            .found
            .clone()
            .unwrap_or_else(|| unreachable!("found above"));
        if !step_up
            && !moved
            && let Some(held) = held.as_ref().filter(|t| t.refresh_token.is_some())
            && let Ok(tokens) = self.refresh(&flow, &found, held, cancel)
        {
            return self.keep(tokens);
        }
        let mut scopes: Vec<String> = self.config.scopes.clone();
        let named = challenge
            .scope()
            .map(|s| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>());
        if step_up {
            scopes.extend(flow.scopes.iter().cloned());
            scopes.extend(named.unwrap_or_default());
        } else if let Some(named) = named {
            scopes.extend(named);
        } else if let Some(supported) = &found.resource_scopes {
            scopes.extend(supported.iter().cloned());
        }
        let server_scopes: Vec<&str> = found.meta["scopes_supported"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if server_scopes.contains(&"offline_access") && !scopes.is_empty() {
            scopes.push("offline_access".into());
        }
        let mut seen = std::collections::HashSet::new();
        scopes.retain(|s| seen.insert(s.clone()));
        flow.scopes.clone_from(&scopes);
        let tokens = match self.config.credentials.clone() {
            Some(credentials @ (Credentials::Workload { .. } | Credentials::Enterprise { .. })) => {
                self.assertion_grant(&found, &credentials, &scopes, cancel)?
            }
            Some(credentials) => self.client_credentials(&found, &credentials, &scopes, cancel)?,
            None => self.authorization_code(&mut flow, &found, &scopes, cancel)?,
        };
        self.keep(tokens)
    }

    /// Uses `tokens` from now on, and saves them.
    ///
    /// # Errors
    /// [`McpError::TokenStore`] when the store could not save them (they are used all
    /// the same).
    fn keep(&self, tokens: Tokens) -> Result<(), McpError> {
        *self.current.lock() = Some(tokens.clone());
        self.config
            .store
            .save(&self.endpoint, &tokens)
            .map_err(McpError::TokenStore)
    }

    /// The protected resource metadata, then the authorization server's.
    fn discover(&self, challenge: &Challenge, cancel: &CancelToken) -> Result<Found, McpError> {
        match self.resource_metadata(challenge, cancel)? {
            Some(prm) => self.server_of(&prm, cancel),
            None => self.legacy(&split(&self.endpoint).0, cancel),
        }
    }

    /// The protected resource metadata (RFC 9728): at the challenge's `resource_metadata`,
    /// else at the well-known URL with the endpoint's path, then at the root.
    fn resource_metadata(
        &self,
        challenge: &Challenge,
        cancel: &CancelToken,
    ) -> Result<Option<Value>, McpError> {
        let (origin, path) = split(&self.endpoint);
        let mut candidates = Vec::new();
        if let Some(url) = challenge.resource_metadata() {
            candidates.push(url.to_owned());
        }
        if !path.is_empty() && path != "/" {
            candidates.push(format!(
                "{origin}/.well-known/oauth-protected-resource{path}"
            ));
        }
        candidates.push(format!("{origin}/.well-known/oauth-protected-resource"));
        for url in &candidates {
            if let Some(doc) = self.get_json(url, cancel)? {
                return Ok(Some(doc));
            }
        }
        Ok(None)
    }

    /// The authorization server the protected resource metadata `prm` names, with its
    /// metadata, once the resource is checked to be this server.
    fn server_of(&self, prm: &Value, cancel: &CancelToken) -> Result<Found, McpError> {
        let resource = prm["resource"]
            .as_str()
            .unwrap_or(&self.endpoint)
            .to_owned();
        if !names(&resource, &self.endpoint) {
            return Err(failed(format!(
                "the protected resource metadata names the resource {resource}, not this server ({}): not authorizing",
                self.endpoint
            )));
        }
        let issuer = prm["authorization_servers"][0]
            .as_str()
            .ok_or_else(|| failed("the protected resource metadata names no authorization server"))?
            .to_owned();
        let resource_scopes = prm["scopes_supported"].as_array().map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        });
        let meta = self
            .server_metadata(&issuer, cancel)?
            .ok_or_else(|| failed(format!("the authorization server {issuer} has no metadata")))?;
        let said = meta["issuer"].as_str().unwrap_or("");
        if said.trim_end_matches('/') != issuer.trim_end_matches('/') {
            return Err(failed(format!(
                "the authorization server's metadata names the issuer {said}, not {issuer}"
            )));
        }
        self.found(resource, issuer, meta, resource_scopes, false)
    }

    /// Discovery without protected resource metadata (the 2025-03-26 revision): the
    /// authorization server at the endpoint's origin, with its metadata or the default
    /// endpoints there.
    fn legacy(&self, origin: &str, cancel: &CancelToken) -> Result<Found, McpError> {
        let meta = self.server_metadata(origin, cancel)?;
        let resource = self.endpoint.clone();
        match meta {
            Some(meta) => self.found(resource, origin.to_owned(), meta, None, true),
            None => Ok(Found {
                resource,
                issuer: origin.to_owned(),
                meta: json!({}),
                authorization_endpoint: format!("{origin}/authorize"),
                token_endpoint: format!("{origin}/token"),
                registration_endpoint: Some(format!("{origin}/register")),
                resource_scopes: None,
                legacy: true,
            }),
        }
    }

    fn found(
        &self,
        resource: String,
        issuer: String,
        meta: Value,
        resource_scopes: Option<Vec<String>>,
        legacy: bool,
    ) -> Result<Found, McpError> {
        let endpoint = |name: &str| meta[name].as_str().map(str::to_owned);
        let token_endpoint = endpoint("token_endpoint")
            .ok_or_else(|| failed("the authorization server's metadata has no token_endpoint"))?;
        Ok(Found {
            resource,
            authorization_endpoint: endpoint("authorization_endpoint").unwrap_or_default(),
            token_endpoint,
            registration_endpoint: endpoint("registration_endpoint"),
            issuer,
            meta,
            resource_scopes,
            legacy,
        })
    }

    /// RFC 8414's well-known URL, then OpenID Connect discovery, both with the issuer's
    /// path after the well-known part, then OIDC's with it before.
    fn server_metadata(
        &self,
        issuer: &str,
        cancel: &CancelToken,
    ) -> Result<Option<Value>, McpError> {
        let (origin, path) = split(issuer);
        let path = path.trim_end_matches('/');
        let candidates = if path.is_empty() {
            vec![
                format!("{origin}/.well-known/oauth-authorization-server"),
                format!("{origin}/.well-known/openid-configuration"),
            ]
        } else {
            vec![
                format!("{origin}/.well-known/oauth-authorization-server{path}"),
                format!("{origin}/.well-known/openid-configuration{path}"),
                format!("{origin}{path}/.well-known/openid-configuration"),
            ]
        };
        for url in candidates {
            if let Some(doc) = self.get_json(&url, cancel)? {
                return Ok(Some(doc));
            }
        }
        Ok(None)
    }

    /// The preconfigured client, a Client ID Metadata Document, or a dynamic registration.
    fn client(
        &self,
        flow: &mut Flow,
        found: &Found,
        redirect_uri: &str,
        cancel: &CancelToken,
    ) -> Result<IssuedTo, McpError> {
        if let Some(client) = &flow.client
            && flow.redirect_uri.as_deref() == Some(redirect_uri)
        {
            return Ok(client.clone());
        }
        let supported: Vec<&str> = found.meta["token_endpoint_auth_methods_supported"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let with_secret = || {
            if supported.is_empty() || supported.contains(&"client_secret_basic") {
                "client_secret_basic"
            } else {
                "client_secret_post"
            }
        };
        let client = if let Some(id) = &self.config.client_id {
            IssuedTo {
                id: id.clone(),
                secret: self.config.client_secret.clone(),
                method: if self.config.client_secret.is_some() {
                    with_secret().into()
                } else {
                    "none".into()
                },
                issuer: Some(found.issuer.clone()),
            }
        } else if let (Some(url), Some(true)) = (
            &self.config.client_metadata_url,
            found.meta["client_id_metadata_document_supported"].as_bool(),
        ) {
            IssuedTo {
                id: url.clone(),
                secret: None,
                method: "none".into(),
                issuer: Some(found.issuer.clone()),
            }
        } else if let Some(registration) = &found.registration_endpoint {
            let method = if supported.is_empty() || supported.contains(&"none") {
                "none"
            } else {
                with_secret()
            };
            let (status, answer, _) = self.post(
                registration,
                Body::Json(json!({
                    "client_name": self.config.client_name,
                    // A program on the user's machine, redirected to a loopback or
                    // custom URI (SEP-837).
                    "application_type": "native",
                    "redirect_uris": [redirect_uri],
                    "grant_types": ["authorization_code", "refresh_token"],
                    "response_types": ["code"],
                    "token_endpoint_auth_method": method,
                })),
                Vec::new(),
                cancel,
            )?;
            let id = answer["client_id"]
                .as_str()
                .filter(|_| status < 300)
                .ok_or_else(|| {
                    failed(format!(
                        "the dynamic client registration failed (status {status}): {}",
                        describe(&answer)
                    ))
                })?;
            let secret = answer["client_secret"].as_str().map(str::to_owned);
            let method = answer["token_endpoint_auth_method"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| {
                    if secret.is_some() {
                        with_secret().into()
                    } else {
                        "none".into()
                    }
                });
            IssuedTo {
                id: id.to_owned(),
                secret,
                method,
                issuer: Some(found.issuer.clone()),
            }
        } else {
            return Err(failed(
                "the authorization server offers no dynamic registration, and no client is configured (OAuth::client)",
            ));
        };
        flow.client = Some(client.clone());
        flow.redirect_uri = Some(redirect_uri.to_owned());
        Ok(client)
    }

    /// The authorization code grant with PKCE.
    fn authorization_code(
        &self,
        flow: &mut Flow,
        found: &Found,
        scopes: &[String],
        cancel: &CancelToken,
    ) -> Result<Tokens, McpError> {
        let methods = &found.meta["code_challenge_methods_supported"];
        if !found.legacy
            && !methods
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m == "S256"))
        {
            return Err(failed(
                "the authorization server does not support PKCE with S256: not authorizing",
            ));
        }
        if found.authorization_endpoint.is_empty() {
            return Err(failed(
                "the authorization server's metadata has no authorization_endpoint",
            ));
        }
        let listener = match &self.config.authorizer {
            Authorizer::None => {
                return Err(failed(
                    "the server asks for a user's authorization, and no way to get one is configured (OAuth::authorize)",
                ));
            }
            Authorizer::Hook { .. } => None,
            Authorizer::Loopback { .. } => Some(
                TcpListener::bind("127.0.0.1:0")
                    .map_err(|e| failed(format!("cannot listen for the redirect: {e}")))?,
            ),
        };
        let redirect_uri = match (&self.config.authorizer, &listener) {
            (Authorizer::Hook { redirect_uri, .. }, _) => redirect_uri.clone(),
            (_, Some(l)) => format!(
                "http://127.0.0.1:{}/callback",
                l.local_addr().map_or(0, |a| a.port())
            ),
            _ => String::new(),
        };
        let client = self.client(flow, found, &redirect_uri, cancel)?;
        let verifier = random_text(32);
        let challenge =
            base64url(ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes()).as_ref());
        let state = random_text(16);
        let scope = (!scopes.is_empty()).then(|| scopes.join(" "));
        let mut query = vec![
            ("response_type", "code".to_owned()),
            ("client_id", client.id.clone()),
            ("redirect_uri", redirect_uri.clone()),
            ("code_challenge", challenge),
            ("code_challenge_method", "S256".to_owned()),
            ("state", state.clone()),
            ("resource", found.resource.clone()),
        ];
        if let Some(scope) = &scope {
            query.push(("scope", scope.clone()));
        }
        let sep = if found.authorization_endpoint.contains('?') {
            '&'
        } else {
            '?'
        };
        let request = AuthorizationRequest {
            url: format!("{}{sep}{}", found.authorization_endpoint, form(&query)),
            redirect_uri: redirect_uri.clone(),
            scope,
        };
        let redirected = match (&self.config.authorizer, listener) {
            (Authorizer::Hook { hook, .. }, _) => hook(&request, cancel),
            (Authorizer::Loopback { open, timeout }, Some(listener)) => open(&request.url)
                .and_then(|()| wait_for_redirect(&listener, *timeout, &state, cancel)),
            _ => Err("no authorizer".into()),
        }
        .map_err(|why| failed(format!("the user's authorization was not obtained: {why}")))?;
        let params = query_of(&redirected);
        let param = |name: &str| {
            params
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        if let Some(error) = param("error") {
            return Err(failed(format!(
                "the authorization server refused: {error}{}",
                param("error_description")
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            )));
        }
        if param("state") != Some(state.as_str()) {
            return Err(failed(
                "the redirect's state is not the one sent: not authorizing",
            ));
        }
        match param("iss") {
            Some(iss) if iss != found.issuer && !found.legacy => {
                return Err(failed(format!(
                    "the redirect comes from the issuer {iss}, not {}: not authorizing",
                    found.issuer
                )));
            }
            None if found.meta["authorization_response_iss_parameter_supported"] == true => {
                return Err(failed(
                    "the redirect lacks the issuer its server promises (iss)",
                ));
            }
            _ => {}
        }
        let code = param("code").ok_or_else(|| failed("the redirect carries no code"))?;
        let form = vec![
            ("grant_type", "authorization_code".to_owned()),
            ("code", code.to_owned()),
            ("redirect_uri", redirect_uri),
            ("code_verifier", verifier),
            ("resource", found.resource.clone()),
        ];
        self.token(found, &client, form, None, cancel)
    }

    /// The `refresh_token` grant, as the client the tokens were issued to (the one
    /// registered on this connection, else the one the store kept with them, else the one
    /// configured).
    fn refresh(
        &self,
        flow: &Flow,
        found: &Found,
        held: &Tokens,
        cancel: &CancelToken,
    ) -> Result<Tokens, McpError> {
        let Some(refresh) = held.refresh_token.as_deref() else {
            return Err(failed("no refresh token"));
        };
        let configured = || match (&self.config.credentials, &self.config.client_id) {
            (Some(Credentials::Secret { id, secret }), _) => Some(IssuedTo {
                id: id.clone(),
                secret: Some(secret.clone()),
                method: "client_secret_basic".into(),
                issuer: Some(found.issuer.clone()),
            }),
            (_, Some(id)) => Some(IssuedTo {
                id: id.clone(),
                secret: self.config.client_secret.clone(),
                method: if self.config.client_secret.is_some() {
                    "client_secret_basic".into()
                } else {
                    "none".into()
                },
                issuer: Some(found.issuer.clone()),
            }),
            _ => None,
        };
        // A client of another authorization server is not this one's.
        let client = held
            .client
            .clone()
            .filter(|c| c.issuer.as_deref().is_none_or(|i| i == found.issuer))
            .or_else(|| flow.client.clone())
            .or_else(configured)
            .ok_or_else(|| failed("no client to refresh with"))?;
        let form = vec![
            ("grant_type", "refresh_token".to_owned()),
            ("refresh_token", refresh.to_owned()),
            ("resource", found.resource.clone()),
        ];
        self.token(found, &client, form, Some(refresh), cancel)
    }

    fn client_credentials(
        &self,
        found: &Found,
        credentials: &Credentials,
        scopes: &[String],
        cancel: &CancelToken,
    ) -> Result<Tokens, McpError> {
        let mut form = vec![
            ("grant_type", "client_credentials".to_owned()),
            ("resource", found.resource.clone()),
        ];
        if !scopes.is_empty() {
            form.push(("scope", scopes.join(" ")));
        }
        let client = match credentials {
            Credentials::Secret { id, secret } => {
                let supported = &found.meta["token_endpoint_auth_methods_supported"];
                let post = supported.as_array().is_some_and(|m| {
                    m.iter().any(|m| m == "client_secret_post")
                        && !m.iter().any(|m| m == "client_secret_basic")
                });
                IssuedTo {
                    id: id.clone(),
                    secret: Some(secret.clone()),
                    method: if post {
                        "client_secret_post"
                    } else {
                        "client_secret_basic"
                    }
                    .into(),
                    issuer: Some(found.issuer.clone()),
                }
            }
            Credentials::Jwt { id, key_pem } => {
                form.push((
                    "client_assertion_type",
                    "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".to_owned(),
                ));
                form.push((
                    "client_assertion",
                    signed_assertion(id, &found.issuer, key_pem)?,
                ));
                form.push(("client_id", id.clone()));
                IssuedTo {
                    id: id.clone(),
                    secret: None,
                    method: "private_key_jwt".into(),
                    issuer: Some(found.issuer.clone()),
                }
            }
            Credentials::Workload { .. } | Credentials::Enterprise { .. } => {
                return self.assertion_grant(found, credentials, scopes, cancel);
            }
        };
        self.token(found, &client, form, None, cancel)
    }

    /// The JWT bearer grant (RFC 7523): with the workload's token, or with the identity
    /// assertion grant the enterprise's identity provider gives for the user's ID token;
    /// the client is the one configured ([`OAuth::client`]), authenticated as the server
    /// supports, or none.
    fn assertion_grant(
        &self,
        found: &Found,
        credentials: &Credentials,
        scopes: &[String],
        cancel: &CancelToken,
    ) -> Result<Tokens, McpError> {
        let assertion = match credentials {
            Credentials::Workload { assertion } => assertion().map_err(|why| {
                failed(format!(
                    "the workload's identity token was not obtained: {why}"
                ))
            })?,
            Credentials::Enterprise {
                idp_token_endpoint,
                idp_client_id,
                idp_client_secret,
                id_token,
            } => {
                let id_token = id_token().map_err(|why| {
                    failed(format!("the user's ID token was not obtained: {why}"))
                })?;
                self.identity_assertion(
                    found,
                    idp_token_endpoint,
                    idp_client_id,
                    idp_client_secret.as_deref(),
                    &id_token,
                    scopes,
                    cancel,
                )?
            }
            _ => return Err(failed("not an assertion grant")),
        };
        let mut form = vec![
            (
                "grant_type",
                "urn:ietf:params:oauth:grant-type:jwt-bearer".to_owned(),
            ),
            ("assertion", assertion),
            ("resource", found.resource.clone()),
        ];
        if !scopes.is_empty() {
            form.push(("scope", scopes.join(" ")));
        }
        let supported: Vec<&str> = found.meta["token_endpoint_auth_methods_supported"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let client = IssuedTo {
            id: self.config.client_id.clone().unwrap_or_default(),
            secret: self.config.client_secret.clone(),
            method: match &self.config.client_secret {
                None => "none",
                Some(_)
                    if supported.contains(&"client_secret_post")
                        && !supported.contains(&"client_secret_basic") =>
                {
                    "client_secret_post"
                }
                Some(_) => "client_secret_basic",
            }
            .into(),
            issuer: Some(found.issuer.clone()),
        };
        self.token(found, &client, form, None, cancel)
    }

    /// The identity assertion grant (ID-JAG) for this server's authorization server and
    /// resource, from the enterprise's identity provider: an RFC 8693 token exchange of the
    /// user's ID token.
    #[allow(clippy::too_many_arguments)]
    fn identity_assertion(
        &self,
        found: &Found,
        endpoint: &str,
        client_id: &str,
        client_secret: Option<&str>,
        id_token: &str,
        scopes: &[String],
        cancel: &CancelToken,
    ) -> Result<String, McpError> {
        let mut form = vec![
            (
                "grant_type",
                "urn:ietf:params:oauth:grant-type:token-exchange".to_owned(),
            ),
            (
                "requested_token_type",
                "urn:ietf:params:oauth:token-type:id-jag".to_owned(),
            ),
            ("audience", found.issuer.clone()),
            ("resource", found.resource.clone()),
            ("subject_token", id_token.to_owned()),
            (
                "subject_token_type",
                "urn:ietf:params:oauth:token-type:id_token".to_owned(),
            ),
            ("client_id", client_id.to_owned()),
        ];
        if let Some(secret) = client_secret {
            form.push(("client_secret", secret.to_owned()));
        }
        if !scopes.is_empty() {
            form.push(("scope", scopes.join(" ")));
        }
        let (status, answer, _) = self.post(endpoint, Body::Form(form), Vec::new(), cancel)?;
        let grant = answer["access_token"].as_str().filter(|_| status < 300);
        match grant {
            Some(grant) => Ok(grant.to_owned()),
            None => {
                let sent = [Some(id_token), client_secret];
                let secrets = Secrets::new(None, &[]).and(sent.into_iter().flatten());
                Err(failed(scrub(
                    format!(
                        "the identity provider refused the token exchange (status {status}): {}",
                        describe(&answer)
                    ),
                    Some(&secrets),
                )))
            }
        }
    }

    /// A request to the token endpoint, the client authenticated as it registered.
    fn token(
        &self,
        found: &Found,
        client: &IssuedTo,
        mut form: Vec<(&'static str, String)>,
        previous_refresh: Option<&str>,
        cancel: &CancelToken,
    ) -> Result<Tokens, McpError> {
        let mut basic = None;
        match (client.method.as_str(), &client.secret) {
            ("client_secret_basic", Some(secret)) => {
                basic = Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!(
                        "{}:{}",
                        form_escape(&client.id),
                        form_escape(secret)
                    ))
                ));
            }
            ("client_secret_post", Some(secret)) => {
                form.push(("client_id", client.id.clone()));
                form.push(("client_secret", secret.clone()));
            }
            ("private_key_jwt", _) => {}
            // An assertion grant without a client of its own.
            _ if client.id.is_empty() => {}
            _ => form.push(("client_id", client.id.clone())),
        }
        // What the endpoint says back may echo what it was sent: none of the grant's
        // secrets (a code, its verifier, a refresh token, the client's secret or assertion)
        // is shown.
        let sent: Vec<String> = form
            .iter()
            .filter(|(name, _)| {
                matches!(
                    *name,
                    "code"
                        | "code_verifier"
                        | "refresh_token"
                        | "client_secret"
                        | "client_assertion"
                        | "assertion"
                )
            })
            .map(|(_, value)| value.clone())
            .chain(basic.clone())
            .chain(client.secret.clone())
            .collect();
        let key = self.dpop_key(found)?;
        let mut asked = 0;
        let (status, answer) = loop {
            let mut headers: Vec<(String, String)> = Vec::new();
            if let Some(basic) = &basic {
                headers.push(("authorization".into(), basic.clone()));
            }
            if let Some(key) = &key {
                let nonce = self.as_nonce.lock().clone();
                let proof = key.proof("POST", &found.token_endpoint, None, nonce.as_deref())?;
                headers.push(("dpop".into(), proof));
            }
            let (status, answer, nonce) = self.post(
                &found.token_endpoint,
                Body::Form(form.clone()),
                headers,
                cancel,
            )?;
            let fresh = nonce.is_some() && nonce != *self.as_nonce.lock();
            if nonce.is_some() {
                *self.as_nonce.lock() = nonce;
            }
            // The server wants its nonce in the proof: once more with it (RFC 9449 §8).
            if key.is_some() && status == 400 && answer["error"] == "use_dpop_nonce" && fresh {
                asked += 1;
                if asked < 3 {
                    continue;
                }
            }
            break (status, answer);
        };
        if status >= 300 {
            let secrets = Secrets::new(None, &[]).and(sent.iter().map(String::as_str));
            return Err(failed(scrub(
                format!(
                    "the token endpoint refused (status {status}): {}",
                    describe(&answer)
                ),
                Some(&secrets),
            )));
        }
        let mut tokens = Tokens::from_response(&answer, previous_refresh)
            .ok_or_else(|| failed("the token endpoint's answer has no access_token"))?;
        tokens.client = Some(client.clone());
        let bound = answer["token_type"]
            .as_str()
            .is_some_and(|t| t.eq_ignore_ascii_case("dpop"));
        tokens.dpop_key = key.filter(|_| bound).map(|k| k.pkcs8().to_owned());
        Ok(tokens)
    }

    /// GETs a JSON document; `None` when the server has none there (an error status, or
    /// not JSON).
    fn get_json(&self, url: &str, cancel: &CancelToken) -> Result<Option<Value>, McpError> {
        let (status, value, _) =
            self.send(Method::Get, url, Vec::new(), None, Vec::new(), cancel)?;
        Ok(value.filter(|v| (200..300).contains(&status) && v.is_object()))
    }

    /// POSTs `body` with the `extra` headers: the status, the JSON answer (`Null` when
    /// none) and the `DPoP-Nonce` the server gave.
    fn post(
        &self,
        url: &str,
        body: Body,
        extra: Vec<(String, String)>,
        cancel: &CancelToken,
    ) -> Result<(u16, Value, Option<String>), McpError> {
        let (bytes, media) = match body {
            Body::Json(v) => (v.to_string().into_bytes(), "application/json"),
            Body::Form(pairs) => (
                form(&pairs).into_bytes(),
                "application/x-www-form-urlencoded",
            ),
        };
        let (status, value, nonce) =
            self.send(Method::Post, url, bytes, Some(media), extra, cancel)?;
        Ok((status, value.unwrap_or(Value::Null), nonce))
    }

    fn send(
        &self,
        method: Method,
        url: &str,
        body: Vec<u8>,
        media: Option<&'static str>,
        extra: Vec<(String, String)>,
        cancel: &CancelToken,
    ) -> Result<(u16, Option<Value>, Option<String>), McpError> {
        let token = CancelToken::with_deadline(Instant::now() + FLOW_REQUEST_TIMEOUT);
        let hook = {
            let token = token.clone();
            cancel.on_cancel(move || token.cancel())
        };
        let mut headers = vec![("accept", "application/json".to_owned())];
        if let Some(media) = media {
            headers.push(("content-type", media.to_owned()));
        }
        let target = Target::parse(url, None).map_err(McpError::Transport)?;
        let post = Post {
            url: url.to_owned().into(),
            headers,
            built: None,
            body,
        };
        let outcome = self
            .http
            .exchange(method, &post, &extra, &target, None, &token)
            .and_then(|mut reply| {
                let nonce = reply
                    .headers
                    .get("dpop-nonce")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let bytes = reply.body.read_some(MAX_DOCUMENT)?;
                Ok((
                    reply.status,
                    serde_json::from_slice::<Value>(&bytes).ok(),
                    nonce,
                ))
            });
        if let Some(hook) = hook {
            cancel.remove_hook(hook);
        }
        outcome.map_err(|e| {
            if cancel.is_cancelled() {
                McpError::Aborted
            } else {
                McpError::Transport(e)
            }
        })
    }
}

enum Body {
    Json(Value),
    Form(Vec<(&'static str, String)>),
}

/// An error answer of an OAuth endpoint, as text.
fn describe(answer: &Value) -> String {
    match (
        answer["error"].as_str(),
        answer["error_description"].as_str(),
    ) {
        (Some(e), Some(d)) => format!("{e} ({d})"),
        (Some(e), None) => e.to_owned(),
        _ => crate::mcp::protocol::snippet(answer.to_string().as_bytes()),
    }
}

/// The origin (`scheme://authority` as written) and the path (without query or fragment).
fn split(url: &str) -> (String, String) {
    let url = url.split(['?', '#']).next().unwrap_or(url);
    let after = url.find("://").map_or(0, |i| i + 3);
    match url[after..].find('/') {
        Some(i) => (url[..after + i].to_owned(), url[after + i..].to_owned()),
        None => (url.to_owned(), String::new()),
    }
}

/// Whether the protected resource `resource` covers the endpoint: the same origin, and the
/// endpoint's path under the resource's.
fn names(resource: &str, endpoint: &str) -> bool {
    let (ro, rp) = split(resource);
    let (eo, ep) = split(endpoint);
    if !ro.eq_ignore_ascii_case(&eo) {
        return false;
    }
    let rp = rp.trim_end_matches('/');
    rp.is_empty() || ep == rp || ep.starts_with(&format!("{rp}/"))
}

pub(super) fn base64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `n` random bytes from the system, as base64url.
pub(super) fn random_text(n: usize) -> String {
    use ring::rand::SecureRandom as _;
    let mut bytes = vec![0u8; n];
    // OK to fall back: the system's random source failing is not recoverable here, and a
    // flow with a time-derived value still fails safely at the server's checks.
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = nanos.to_le_bytes().repeat(n / 16 + 1)[..n].to_vec();
    }
    base64url(&bytes)
}

/// A JWT client assertion (RFC 7523) signed with the ES256 key `key_pem` (PKCS#8 PEM).
fn signed_assertion(id: &str, audience: &str, key_pem: &str) -> Result<String, McpError> {
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
    let der: String = key_pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .map(str::trim)
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(der)
        .map_err(|_| failed("the client's signing key is not PEM"))?;
    let rng = ring::rand::SystemRandom::new();
    let key =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, &rng).map_err(|e| {
            failed(format!(
                "the client's signing key is not a P-256 PKCS#8 key: {e}"
            ))
        })?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let header = base64url(json!({"alg": "ES256", "typ": "JWT"}).to_string().as_bytes());
    let claims = base64url(
        json!({"iss": id, "sub": id, "aud": audience, "iat": now, "exp": now + 300, "jti": random_text(16)})
            .to_string()
            .as_bytes(),
    );
    let signing_input = format!("{header}.{claims}");
    let signature = key
        .sign(&rng, signing_input.as_bytes())
        .map_err(|_| failed("signing the client assertion failed"))?;
    Ok(format!("{signing_input}.{}", base64url(signature.as_ref())))
}

/// `application/x-www-form-urlencoded` of `pairs`.
fn form(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", form_escape(k), form_escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn form_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The parameters of a URL's query.
fn query_of(url: &str) -> Vec<(String, String)> {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let query = query.split('#').next().unwrap_or("");
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (unescape(k), unescape(v))
        })
        .collect()
}

/// Waits for the browser's redirect on `listener`, at most `timeout` or until `cancel`:
/// the first request to `/callback` with the flow's `state` is answered and its URL
/// returned. Any other request is refused (`404` elsewhere, `400` for a `/callback` with
/// another `state` or none, which another program on the machine may send), and the wait
/// goes on. Each connection gets at most 5 s to send its request.
fn wait_for_redirect(
    listener: &TcpListener,
    timeout: Duration,
    state: &str,
    cancel: &CancelToken,
) -> Result<String, String> {
    let until = Instant::now() + timeout;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    loop {
        if cancel.is_cancelled() {
            return Err("given up".into());
        }
        if Instant::now() >= until {
            return Err(format!("no redirect came within {timeout:?}"));
        }
        match listener.accept() {
            Ok((mut stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let target = read_target(&mut stream);
                let url = format!("http://127.0.0.1:{port}{target}");
                let path = target.split(['?', '#']).next().unwrap_or("");
                let (status, body) = if path != "/callback" {
                    ("404 Not Found", "Not found.")
                } else if !query_of(&url)
                    .iter()
                    .any(|(name, value)| name == "state" && value == state)
                {
                    (
                        "400 Bad Request",
                        "This is not the authorization this program asked for.",
                    )
                } else {
                    ("200 OK", "Authorized. You may close this window.")
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.flush();
                if status.starts_with("200") {
                    return Ok(url);
                }
            }
            Err(_) => {
                let _ = cancel.receiver().recv_timeout(Duration::from_millis(20));
            }
        }
    }
}

/// The target of the request line of an HTTP request (`/callback?code=..`), read up to the
/// end of its head (8 KB at most); empty when none came.
fn read_target(stream: &mut impl Read) -> String {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    head.lines()
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .unwrap_or("")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_covers_its_own_path_and_below_on_its_origin_only() {
        assert!(names("http://h:1/mcp", "http://h:1/mcp"));
        assert!(names("http://h:1", "http://h:1/mcp"));
        assert!(names("http://h:1/", "http://h:1/mcp"));
        assert!(!names("https://evil.example.com/mcp", "http://h:1/mcp"));
        assert!(!names("http://h:1/mc", "http://h:1/mcp"));
        assert!(!names("http://h:2/mcp", "http://h:1/mcp"));
    }

    #[test]
    fn forms_and_queries_round_trip() {
        let pairs = vec![("a", "x y&z=é".to_owned()), ("b", String::new())];
        let text = form(&pairs);
        assert_eq!(text, "a=x%20y%26z%3D%C3%A9&b=");
        assert_eq!(
            query_of(&format!("http://h/cb?{text}#f")),
            vec![("a".into(), "x y&z=é".into()), ("b".into(), String::new())]
        );
        assert_eq!(
            query_of("http://h/cb?code=c%2"),
            vec![("code".into(), "c%2".into())]
        );
    }

    #[test]
    fn urls_split_into_origin_and_path() {
        assert_eq!(
            split("http://h:1/a/b?q#f"),
            ("http://h:1".into(), "/a/b".into())
        );
        assert_eq!(split("http://h:1"), ("http://h:1".into(), String::new()));
    }
}
