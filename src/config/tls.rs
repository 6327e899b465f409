//! The `ssl.*` keys of a controller listener whose security protocol is SSL, read the way
//! Kafka reads them: `listener.name.<listener>.ssl.X` (the listener name in lower case) wins
//! over `ssl.X`. Only PEM key and trust stores are read (Kafka's `ssl.keystore.type=PEM`), as
//! files or inline. Pure: the files are read and the PEM parsed by `net::tls` at start.

use std::fmt;
use std::path::PathBuf;

use super::properties::Properties;
use super::server::ConfigError;

/// Every `ssl.*` key ringraft reads; also known under `listener.name.<listener>.`.
pub const SSL_KEYS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.truststore.password",
    "ssl.client.auth",
    "ssl.endpoint.identification.algorithm",
    "ssl.enabled.protocols",
    "ssl.protocol",
];

/// Whether `key` is one of `SSL_KEYS`, bare or behind a `listener.name.<name>.` prefix.
pub fn is_ssl_key(key: &str) -> bool {
    let bare = match key.strip_prefix("listener.name.") {
        Some(rest) => rest.split_once('.').map_or("", |(_, k)| k),
        None => key,
    };
    SSL_KEYS.contains(&bare)
}

/// Text that must not appear in logs or `Debug` output (an inline private key).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[hidden]")
    }
}

/// Where this node's private key and certificate chain come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyStore {
    /// `ssl.keystore.location`: one PEM file with the key and the chain.
    File(PathBuf),
    /// `ssl.keystore.certificate.chain` and `ssl.keystore.key`.
    Inline { chain: String, key: Secret },
}

/// Where the certificates this node trusts come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustStore {
    /// `ssl.truststore.location`: a PEM file of certificates.
    File(PathBuf),
    /// `ssl.truststore.certificates`.
    Inline(String),
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// A client without a trusted certificate is refused at the handshake (mTLS).
    Required,
    /// A client may present a certificate; one that does must present a trusted one.
    Requested,
    /// No client certificate is asked for (Kafka's default).
    None,
}

/// TLS on the controller listener and on this node's connections to its peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// Required on a listener; a client without one presents no certificate.
    pub keystore: Option<KeyStore>,
    pub truststore: TrustStore,
    pub client_auth: ClientAuth,
    /// `ssl.endpoint.identification.algorithm=https` (Kafka's default): a peer's certificate
    /// must name the host we dialled. Empty turns the check off.
    pub verify_hostname: bool,
    /// `ssl.enabled.protocols`, of TLSv1.2 and TLSv1.3.
    pub tls12: bool,
    pub tls13: bool,
}

/// Reads the TLS settings of `listener` (an upper-case listener name).
pub fn parse(props: &Properties, listener: &str) -> Result<TlsConfig, ConfigError> {
    let prefix = format!("listener.name.{}.", listener.to_ascii_lowercase());
    let tls = parse_with(props, &prefix)?;
    if tls.keystore.is_none() {
        let why = "an SSL listener needs ssl.keystore.location, or \
                   ssl.keystore.certificate.chain with ssl.keystore.key";
        return Err(ConfigError {
            key: "ssl.keystore.location".into(),
            value: String::new(),
            why: why.into(),
        });
    }
    Ok(tls)
}

/// A client's settings, as Kafka's tools read them from `--command-config`:
/// `security.protocol=SSL` and the `ssl.*` keys (a keystore only when the controllers require
/// client certificates). `None` for PLAINTEXT, the default.
pub fn parse_client(props: &Properties) -> Result<Option<TlsConfig>, ConfigError> {
    let protocol = props
        .get("security.protocol")
        .map(|p| p.trim().to_ascii_uppercase())
        .unwrap_or_else(|| "PLAINTEXT".into());
    match protocol.as_str() {
        "PLAINTEXT" => Ok(None),
        "SSL" => parse_with(props, "").map(Some),
        _ => Err(ConfigError {
            key: "security.protocol".into(),
            value: protocol,
            why: "ringraft's tools speak PLAINTEXT and SSL only".into(),
        }),
    }
}

/// The `ssl.*` keys of one listener: `listener.name.<name>.ssl.*` first, then bare. An empty
/// value reads as absent.
struct Ssl<'a> {
    props: &'a Properties,
    prefix: &'a str,
}

impl Ssl<'_> {
    /// (the key as written, its trimmed value).
    fn get(&self, key: &str) -> Option<(String, String)> {
        let prefixed = format!("{}{key}", self.prefix);
        self.props
            .get(&prefixed)
            .map(|v| (prefixed, v.trim().to_owned()))
            .or_else(|| {
                self.props
                    .get(key)
                    .map(|v| (key.to_owned(), v.trim().to_owned()))
            })
            .filter(|(_, v)| !v.is_empty())
    }
}

fn invalid(key: &str, value: &str, why: &str) -> ConfigError {
    ConfigError {
        key: key.to_owned(),
        value: value.to_owned(),
        why: why.to_owned(),
    }
}

fn parse_with(props: &Properties, prefix: &str) -> Result<TlsConfig, ConfigError> {
    let ssl = Ssl { props, prefix };
    check_stores(&ssl)?;
    let keystore = keystore(&ssl)?;
    let truststore = truststore(&ssl)?;
    let client_auth = match ssl.get("ssl.client.auth") {
        None => ClientAuth::None,
        Some((key, v)) => match v.to_ascii_lowercase().as_str() {
            "required" => ClientAuth::Required,
            "requested" => ClientAuth::Requested,
            "none" => ClientAuth::None,
            _ => return Err(invalid(&key, &v, "expected required, requested or none")),
        },
    };
    let verify_hostname = match ssl.get("ssl.endpoint.identification.algorithm") {
        None => true,
        Some((_, v)) if v.eq_ignore_ascii_case("https") => true,
        Some((key, v)) => {
            let why = "expected https, or empty to turn host name verification off";
            return Err(invalid(&key, &v, why));
        }
    };
    // An empty value is kept by `get` as absent; Kafka's empty string turns the check off.
    let verify_hostname =
        verify_hostname && !is_set_empty(props, prefix, "ssl.endpoint.identification.algorithm");
    let (tls12, tls13) = protocols(&ssl)?;
    Ok(TlsConfig {
        keystore,
        truststore,
        client_auth,
        verify_hostname,
        tls12,
        tls13,
    })
}

/// Stores must be PEM (Kafka's default is JKS, so it must be said), and keys unencrypted.
fn check_stores(ssl: &Ssl) -> Result<(), ConfigError> {
    let not_pem = |key: &str, value: &str| {
        invalid(
            key,
            value,
            "ringraft reads PEM stores only; set it to PEM and give PEM files (or the inline keys)",
        )
    };
    let has_keystore = ["location", "certificate.chain", "key"]
        .iter()
        .any(|k| ssl.get(&format!("ssl.keystore.{k}")).is_some());
    let stores: &[&str] = if has_keystore {
        &["ssl.keystore.type", "ssl.truststore.type"]
    } else {
        &["ssl.truststore.type"]
    };
    for &store in stores {
        match ssl.get(store) {
            Some((_, v)) if v.eq_ignore_ascii_case("PEM") => {}
            Some((key, v)) => return Err(not_pem(&key, &v)),
            // Kafka's default is JKS, so a PEM store must be said explicitly.
            None => return Err(not_pem(store, "")),
        }
    }
    for password in ["ssl.key.password", "ssl.keystore.password"] {
        if let Some((key, _)) = ssl.get(password) {
            let why = "encrypted PEM keys are not supported: give an unencrypted PKCS#8 key \
                       (BEGIN PRIVATE KEY) and protect the file instead";
            return Err(invalid(&key, "[hidden]", why));
        }
    }
    Ok(())
}

/// The keystore: a file, or the inline chain and key; `None` when neither is given.
fn keystore(ssl: &Ssl) -> Result<Option<KeyStore>, ConfigError> {
    Ok(
        match (
            ssl.get("ssl.keystore.location"),
            ssl.get("ssl.keystore.certificate.chain"),
            ssl.get("ssl.keystore.key"),
        ) {
            (Some((_, path)), None, None) => Some(KeyStore::File(PathBuf::from(path))),
            (None, Some((_, chain)), Some((_, key))) => Some(KeyStore::Inline {
                chain,
                key: Secret(key),
            }),
            (None, None, None) => None,
            (Some((key, path)), _, _) => {
                let why = "give either the keystore file or the inline chain and key, not both";
                return Err(invalid(&key, &path, why));
            }
            (None, chain, key) => {
                let (missing, present) = if chain.is_none() {
                    ("ssl.keystore.certificate.chain", key)
                } else {
                    ("ssl.keystore.key", chain)
                };
                let present = present.map(|(k, _)| k).unwrap_or_default();
                let why = format!("{present} is set, so {missing} is needed too");
                return Err(invalid(missing, "", &why));
            }
        },
    )
}

/// The trust store: a file or inline certificates (one is required).
fn truststore(ssl: &Ssl) -> Result<TrustStore, ConfigError> {
    Ok(
        match (
            ssl.get("ssl.truststore.location"),
            ssl.get("ssl.truststore.certificates"),
        ) {
            (Some((_, path)), None) => TrustStore::File(PathBuf::from(path)),
            (None, Some((_, certs))) => TrustStore::Inline(certs),
            (None, None) => {
                let why = "ringraft has no system trust store: give the certificates that sign \
                       your controllers' certificates in ssl.truststore.location or \
                       ssl.truststore.certificates";
                return Err(invalid("ssl.truststore.location", "", why));
            }
            (Some((key, path)), Some(_)) => {
                let why = "give either the truststore file or the inline certificates, not both";
                return Err(invalid(&key, &path, why));
            }
        },
    )
}

/// `ssl.enabled.protocols` and `ssl.protocol`: (TLS 1.2 on, TLS 1.3 on).
fn protocols(ssl: &Ssl) -> Result<(bool, bool), ConfigError> {
    let (mut tls12, mut tls13) = (true, true);
    if let Some((key, v)) = ssl.get("ssl.enabled.protocols") {
        (tls12, tls13) = (false, false);
        for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match p {
                "TLSv1.2" => tls12 = true,
                "TLSv1.3" => tls13 = true,
                _ => {
                    let why =
                        format!("{p} is not spoken here; ringraft speaks TLSv1.2 and TLSv1.3");
                    return Err(invalid(&key, &v, &why));
                }
            }
        }
        if !tls12 && !tls13 {
            return Err(invalid(&key, &v, "no protocol left to speak"));
        }
    }
    if let Some((key, v)) = ssl.get("ssl.protocol") {
        if !matches!(v.as_str(), "TLS" | "TLSv1.2" | "TLSv1.3") {
            return Err(invalid(&key, &v, "expected TLS, TLSv1.2 or TLSv1.3"));
        }
    }
    Ok((tls12, tls13))
}

/// Whether `key` is set to an empty value under the listener prefix or, when the prefixed key
/// is absent, bare.
fn is_set_empty(props: &Properties, prefix: &str, key: &str) -> bool {
    match props.get(&format!("{prefix}{key}")) {
        Some(v) => v.trim().is_empty(),
        None => props.get(key).is_some_and(|v| v.trim().is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> Result<TlsConfig, ConfigError> {
        parse(&Properties::parse(text), "CONTROLLER")
    }

    const BASE: &str = "ssl.keystore.type=PEM\nssl.truststore.type=PEM\n\
                        ssl.keystore.location=/k.pem\nssl.truststore.location=/ca.pem\n";

    #[test]
    fn files_and_kafka_defaults() {
        let tls = parse_text(BASE).unwrap();
        assert_eq!(tls.keystore, Some(KeyStore::File("/k.pem".into())));
        assert_eq!(tls.truststore, TrustStore::File("/ca.pem".into()));
        assert_eq!(tls.client_auth, ClientAuth::None);
        assert!(tls.verify_hostname && tls.tls12 && tls.tls13);
    }

    #[test]
    fn the_listener_prefix_wins() {
        let text = format!(
            "{BASE}ssl.client.auth=none\nlistener.name.controller.ssl.client.auth=required\n\
             listener.name.controller.ssl.endpoint.identification.algorithm=\n"
        );
        let tls = parse_text(&text).unwrap();
        assert_eq!(tls.client_auth, ClientAuth::Required);
        assert!(!tls.verify_hostname);
        assert!(is_ssl_key("listener.name.controller.ssl.client.auth"));
        assert!(!is_ssl_key("listener.name.controller.sasl.mechanism"));
    }

    #[test]
    fn what_cannot_be_used_is_refused_naming_the_key() {
        let cases = [
            (
                "ssl.keystore.location=/k.pem\nssl.truststore.location=/t\n",
                "ssl.keystore.type",
            ),
            (&format!("{BASE}ssl.key.password=x\n"), "ssl.key.password"),
            (
                &format!("{BASE}ssl.client.auth=sometimes\n"),
                "ssl.client.auth",
            ),
            (
                &format!("{BASE}ssl.enabled.protocols=TLSv1.1\n"),
                "ssl.enabled.protocols",
            ),
            (
                "ssl.keystore.type=PEM\nssl.truststore.type=PEM\nssl.truststore.location=/t\n",
                "ssl.keystore.location",
            ),
            (
                "ssl.keystore.type=PEM\nssl.truststore.type=PEM\nssl.keystore.location=/k\n",
                "ssl.truststore.location",
            ),
            (
                "ssl.keystore.type=PEM\nssl.truststore.type=PEM\nssl.truststore.location=/t\n\
                 ssl.keystore.certificate.chain=x\n",
                "ssl.keystore.key",
            ),
        ];
        for (text, key) in cases {
            let e = parse_text(text).unwrap_err();
            assert_eq!(e.key, key, "{text}");
        }
    }

    #[test]
    fn a_client_needs_a_truststore_and_may_go_without_a_keystore() {
        let client = |text: &str| parse_client(&Properties::parse(text));
        assert_eq!(client("").unwrap(), None);
        assert_eq!(client("security.protocol=PLAINTEXT").unwrap(), None);
        let tls =
            client("security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location=/t")
                .unwrap()
                .unwrap();
        assert_eq!(tls.keystore, None);
        assert_eq!(
            client("security.protocol=SASL_SSL").unwrap_err().key,
            "security.protocol"
        );
        let e = client("security.protocol=SSL\nssl.truststore.type=PEM\n").unwrap_err();
        assert_eq!(e.key, "ssl.truststore.location");
    }

    #[test]
    fn an_inline_key_is_never_shown() {
        let text = "ssl.keystore.type=PEM\nssl.truststore.type=PEM\nssl.truststore.location=/t\n\
                    ssl.keystore.certificate.chain=CHAIN\nssl.keystore.key=VERY-SECRET\n";
        let tls = parse_text(text).unwrap();
        assert!(!format!("{tls:?}").contains("VERY-SECRET"));
    }
}
