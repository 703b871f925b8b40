//! The URL of an HTTP provider (and of an MCP server), parsed and checked once, when the
//! provider is made: every request goes where the parsed URL says, and every text that names
//! it (errors, `Debug`) shows it without the parts where secrets hide.
//!
//! Checked: the scheme (`http` or `https`), a host, a port in 1-65535 (ureq would send a
//! request for `:99999` to the scheme's default port), and the whole URL as ureq's own
//! parser reads it, so that a URL that passes here cannot fail later as a "connection"
//! error. A query string is kept and sent after the request's path (`?api-version=..`);
//! user info is sent as ureq sends it (HTTP basic authentication). Neither is ever shown.

use std::fmt;
use std::sync::Arc;

use super::error_text::{Secrets, clip, is_credential_header};
use crate::Error;

/// A parsed `http` or `https` URL: the base URL of a provider.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct BaseUrl {
    /// `http` or `https`, lower case.
    scheme: &'static str,
    /// Before the `@` of the authority, sent (ureq makes basic authentication of it), never
    /// shown.
    userinfo: Option<String>,
    /// As written; an IPv6 address keeps its brackets.
    host: String,
    port: u16,
    /// Whether the URL wrote the port (else the scheme's default is used and not written).
    port_written: bool,
    /// From the first `/` of the rest to the query, possibly empty.
    path: String,
    /// After the `?`, without the fragment; sent after each request's path, never shown.
    query: Option<String>,
}

impl BaseUrl {
    /// Parses `text` (surrounding whitespace ignored).
    ///
    /// # Errors
    /// [`Error::Config`] saying what is wrong: no scheme, another scheme than http and
    /// https, no host, a port that is not a number in 1-65535, or characters a URL cannot
    /// hold. The URL is named without user info, query string or fragment.
    pub(crate) fn parse(text: &str) -> Result<BaseUrl, Error> {
        let text = text.trim();
        let bad = |why: String| Error::Config(format!("the base URL `{}` {why}", shown(text)));
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(bad(
                "has no scheme: start it with http:// or https://".into()
            ));
        };
        let Some(&(scheme, default_port)) = SCHEMES
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(scheme))
        else {
            return Err(bad(format!(
                "has the unknown scheme `{}`: use http:// or https://",
                clip(scheme.to_owned(), None, 20)
            )));
        };
        let rest = rest.split('#').next().unwrap_or(rest);
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query.to_owned())),
            None => (rest, None),
        };
        let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((info, host)) => (Some(info.to_owned()), host),
            None => (None, authority),
        };
        let (host, port) = split_port(host_port).map_err(bad)?;
        if host.is_empty() {
            return Err(bad("has no host".into()));
        }
        if let Some(inner) = host.strip_prefix('[') {
            let inner = inner.strip_suffix(']').unwrap_or(inner);
            if inner.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(bad(format!(
                    "has the host `{}`, not an IPv6 address",
                    clip(host.to_owned(), None, 80)
                )));
            }
        }
        let (port, port_written) = match port {
            None | Some("") => (default_port, false),
            Some(digits) => (parse_port(digits).map_err(bad)?, true),
        };
        let url = BaseUrl {
            scheme,
            userinfo,
            host: host.to_owned(),
            port,
            port_written,
            path: path.to_owned(),
            query,
        };
        url.check_with_ureq().map_err(bad)?;
        Ok(url)
    }

    /// The URL ureq parses must be this one: same port (ureq falls back to the scheme's
    /// default for a port it cannot read) and no character it refuses.
    fn check_with_ureq(&self) -> Result<(), String> {
        let uri = ureq::http::Uri::try_from(self.request_url(""))
            .map_err(|e| format!("is not a valid URL ({e})"))?;
        match uri.port_u16().or(default_port(self.scheme)) {
            Some(port) if port != self.port => {
                return Err(format!("is read with port {port}, not {}", self.port));
            }
            _ => {}
        }
        Ok(())
    }

    /// The URL a request to `path` (appended to the base URL's path) goes to, query string
    /// and user info included: for the HTTP client only, never for a text.
    pub(crate) fn request_url(&self, path: &str) -> String {
        let mut url = format!("{}://", self.scheme);
        if let Some(info) = &self.userinfo {
            url.push_str(info);
            url.push('@');
        }
        url.push_str(&self.host);
        if self.port_written {
            url.push_str(&format!(":{}", self.port));
        }
        url.push_str(&self.path);
        url.push_str(path);
        if let Some(query) = &self.query {
            url.push('?');
            url.push_str(query);
        }
        url
    }

    /// What of this URL is a credential, for the texts to scrub it from (see
    /// [`Secrets`]): the password of the user info, the user too when it is long enough to
    /// be a token (`https://<token>@host`), and the values of the query's parameters named
    /// like a credential (`api-key`, `token`, `sig`...). A server that echoes the request's
    /// URL in its error echoes them.
    pub(crate) fn credentials(&self) -> impl Iterator<Item = &str> {
        let (user, password) = match &self.userinfo {
            Some(info) => match info.split_once(':') {
                Some((user, password)) => (Some(user), Some(password)),
                None => (Some(info.as_str()), None),
            },
            None => (None, None),
        };
        let user = user.filter(|u| u.len() >= super::error_text::KEY_RUN);
        let query = self
            .query
            .iter()
            .flat_map(|q| q.split('&'))
            .filter_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                (is_credential_header(name) || name.eq_ignore_ascii_case("sig")).then_some(value)
            });
        user.into_iter().chain(password).chain(query)
    }

    /// The host and port requests go to (for traces).
    pub(crate) fn server_address(&self) -> super::ServerAddress {
        super::ServerAddress::new(self.host.as_str(), self.port)
    }

    /// The server's root: this URL without a last `/v1` path segment (llama.cpp serves
    /// `/props` and `/tokenize` there, beside its OpenAI-compatible `/v1`).
    pub(crate) fn root(&self) -> BaseUrl {
        let path = self
            .path
            .strip_suffix("/v1")
            .unwrap_or(&self.path)
            .to_owned();
        BaseUrl {
            path,
            ..self.clone()
        }
    }

    /// Scheme, host and port (always written), as errors name a server.
    pub(crate) fn origin(&self) -> String {
        format!("{}://{}:{}", self.scheme, self.host, self.port)
    }

    /// The request to `path` as errors name it: `POST`, the origin and the path; no user
    /// info, no query string.
    pub(crate) fn target(&self, path: &str, secret: Option<&Secrets<'_>>) -> Target {
        let text = format!("POST {}{}{path}", self.origin(), self.path_or_root(path));
        Target(clip(text, secret, 500).into())
    }

    fn path_or_root(&self, path: &str) -> &str {
        if self.path.is_empty() && path.is_empty() {
            "/"
        } else {
            &self.path
        }
    }

    /// Where a redirect of a request to `path` points, as errors name it: the origin and
    /// path of `location` (resolved against this URL when it is relative), without user
    /// info, query string or fragment.
    pub(crate) fn redirect_target(&self, path: &str, location: Option<&str>) -> String {
        let Some(location) = location.map(str::trim).filter(|l| !l.is_empty()) else {
            return "nowhere (the reply has no Location)".to_owned();
        };
        let location = location.split(['?', '#']).next().unwrap_or(location);
        if location.contains("://") {
            return match BaseUrl::parse(location) {
                Ok(to) => format!("{}{}", to.origin(), to.path_or_root("")),
                Err(_) => "a location that is not an http or https URL".to_owned(),
            };
        }
        if let Some(rest) = location.strip_prefix("//") {
            return match BaseUrl::parse(&format!("{}://{rest}", self.scheme)) {
                Ok(to) => format!("{}{}", to.origin(), to.path_or_root("")),
                Err(_) => "a location that is not a URL".to_owned(),
            };
        }
        let own = format!("{}{path}", self.path);
        let resolved = if location.starts_with('/') {
            location.to_owned()
        } else {
            // Relative to the request's path: its last segment replaced.
            let dir = own.rfind('/').map_or("", |i| &own[..i]);
            format!("{dir}/{location}")
        };
        format!("{}{resolved}", self.origin())
    }
}

/// `host[:port]` split; a bracketed IPv6 host keeps its brackets.
/// The schemes a base URL may have, in lower case, each with the port a URL of it means
/// when it names none.
const SCHEMES: [(&str, u16); 2] = [("http", 80), ("https", 443)];

/// The port a URL of `scheme` (in lower case) means when it names none; `None` for a scheme
/// other than [`SCHEMES`].
pub(crate) fn default_port(scheme: &str) -> Option<u16> {
    SCHEMES
        .iter()
        .find(|(known, _)| *known == scheme)
        .map(|&(_, port)| port)
}

fn split_port(host_port: &str) -> Result<(&str, Option<&str>), String> {
    if host_port.starts_with('[') {
        let Some(end) = host_port.find(']') else {
            return Err("has an IPv6 host without its closing `]`".into());
        };
        let (host, after) = host_port.split_at(end + 1);
        return match after {
            "" => Ok((host, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(format!(
                    "has `{}` after its IPv6 host, where a `:port` may go",
                    clip(after.to_owned(), None, 20)
                )),
            },
        };
    }
    Ok(match host_port.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (host_port, None),
    })
}

fn parse_port(digits: &str) -> Result<u16, String> {
    let shown = clip(digits.to_owned(), None, 20);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("has the port `{shown}`, not a number"));
    }
    match digits.parse::<u32>() {
        Ok(port @ 1..=65535) => Ok(port as u16),
        _ => Err(format!("has the port `{shown}`, outside 1-65535")),
    }
}

/// `url` as texts may show it: without user info, query string or fragment.
fn shown(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or(url);
    let shown = match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        // No scheme: a `user:password@` may still lead it.
        None => url.rsplit_once('@').map_or(url, |(_, h)| h).to_owned(),
    };
    clip(shown, None, 200)
}

impl fmt::Debug for BaseUrl {
    /// The URL without its secrets: user info and query string show as `<redacted>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let info = if self.userinfo.is_some() {
            "<redacted>@"
        } else {
            ""
        };
        write!(f, "\"{}://{info}{}", self.scheme, self.host)?;
        if self.port_written {
            write!(f, ":{}", self.port)?;
        }
        f.write_str(&self.path)?;
        if self.query.is_some() {
            f.write_str("?<redacted>")?;
        }
        f.write_str("\"")
    }
}

/// A base URL as `Debug` shows it when it did not parse: without user info or query.
pub(crate) fn debug_unparsed(url: &str) -> String {
    shown(url)
}

/// The request as errors name it: the method and the URL without user info, query or
/// fragment (where keys may hide), with the port always shown. Shared: made once per
/// endpoint and path (`http::Prepared`), cloned into each request.
#[derive(Clone)]
pub(crate) struct Target(Arc<str>);

impl Target {
    /// The target of a POST to `url`.
    ///
    /// # Errors
    /// [`Error::Config`] for a URL [`BaseUrl::parse`] refuses.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn parse(url: &str, secret: Option<&Secrets<'_>>) -> Result<Target, Error> {
        Ok(BaseUrl::parse(url)?.target("", secret))
    }
}

impl Target {
    /// Whether the request goes over TLS.
    pub(crate) fn is_https(&self) -> bool {
        self.0
            .split_once(' ')
            .is_some_and(|(_, url)| url.starts_with("https://"))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> String {
        match BaseUrl::parse(url) {
            Err(Error::Config(m)) => m,
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn errors_name_the_url_without_user_info_query_or_key() {
        let key = Secrets::key("sk-KEY-12345678");
        let shown = |url: &str| Target::parse(url, Some(&key)).map(|t| t.to_string());
        assert_eq!(
            shown("https://api.openai.com/v1/chat/completions").unwrap(),
            "POST https://api.openai.com:443/v1/chat/completions"
        );
        assert_eq!(
            shown("http://u:sk-KEY-12345678@[::1]:8080/v1?api-key=sk-KEY-12345678#x").unwrap(),
            "POST http://[::1]:8080/v1"
        );
        assert_eq!(shown("HTTP://host").unwrap(), "POST http://host:80/");
        assert!(matches!(shown("host:80/v1"), Err(Error::Config(_))));
        let m = config("sk-KEY-12345678://h/?k=sk-KEY-12345678");
        assert!(!m.contains("k=sk"), "{m}");
    }

    #[test]
    fn the_server_address_is_the_host_without_brackets_and_the_port_in_effect() {
        let address = |url: &str| BaseUrl::parse(url).unwrap().server_address();
        assert_eq!(
            host_port(address("https://api.openai.com/v1")),
            ("api.openai.com".to_owned(), 443)
        );
        assert_eq!(
            host_port(address("http://user:pw@[::1]:8080/v1?k=v")),
            ("::1".to_owned(), 8080)
        );
        assert_eq!(
            host_port(address("http://127.0.0.1")),
            ("127.0.0.1".to_owned(), 80)
        );
    }

    fn host_port(a: crate::llm::ServerAddress) -> (String, u16) {
        (a.host, a.port)
    }

    #[test]
    fn ports_outside_the_range_or_not_numbers_are_refused() {
        assert_eq!(
            config("http://127.0.0.1:99999/v1"),
            "the base URL `http://127.0.0.1:99999/v1` has the port `99999`, outside 1-65535"
        );
        assert_eq!(
            config("http://127.0.0.1:0/v1"),
            "the base URL `http://127.0.0.1:0/v1` has the port `0`, outside 1-65535"
        );
        assert_eq!(
            config("http://h:8o8o"),
            "the base URL `http://h:8o8o` has the port `8o8o`, not a number"
        );
        assert_eq!(
            config("http:///v1"),
            "the base URL `http:///v1` has no host"
        );
        assert_eq!(
            config("http://exa mple.com/v1"),
            "the base URL `http://exa mple.com/v1` is not a valid URL (invalid uri character)"
        );
        assert!(config("http://[::1/v1").contains("closing `]`"));
        assert!(config("http://[nope]:80").contains("not an IPv6 address"));
        let ok = BaseUrl::parse(" http://[::1]:65535/v1 ").unwrap();
        assert_eq!(ok.request_url("/x"), "http://[::1]:65535/v1/x");
    }

    #[test]
    fn the_query_goes_after_the_request_path_and_never_shows() {
        let url = BaseUrl::parse("https://me:pw@azure.example/openai/d?api-version=1").unwrap();
        assert_eq!(
            url.request_url("/chat/completions"),
            "https://me:pw@azure.example/openai/d/chat/completions?api-version=1"
        );
        assert_eq!(
            url.target("/chat/completions", None).to_string(),
            "POST https://azure.example:443/openai/d/chat/completions"
        );
        assert_eq!(
            format!("{url:?}"),
            "\"https://<redacted>@azure.example/openai/d?<redacted>\""
        );
    }

    #[test]
    fn redirects_are_named_by_origin_and_path_without_query() {
        let url = BaseUrl::parse("http://127.0.0.1:8080/v1").unwrap();
        let to = |location| url.redirect_target("/chat/completions", location);
        assert_eq!(
            to(Some("https://u:p@elsewhere.example/v1/chat?token=abc#f")),
            "https://elsewhere.example:443/v1/chat"
        );
        assert_eq!(
            to(Some("/v2/chat/completions?k=1")),
            "http://127.0.0.1:8080/v2/chat/completions"
        );
        assert_eq!(
            to(Some("completions/")),
            "http://127.0.0.1:8080/v1/chat/completions/"
        );
        assert_eq!(to(Some("//other:81/x?y")), "http://other:81/x");
        assert_eq!(to(None), "nowhere (the reply has no Location)");
        assert_eq!(
            to(Some("ftp://h/")),
            "a location that is not an http or https URL"
        );
    }
}
