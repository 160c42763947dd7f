//! Tests of the TLS keys: `[server.tls]` with its `[[server.tls.certificate]]` entries, and
//! `[upstream]`'s `https://` url with `ca_file` and `server_name`.

use std::path::PathBuf;

use super::{check_problems, env};
use crate::config::{CertificateFiles, TlsConfig, TlsVersion, UpstreamConfig, parse_config};

fn parse(source: &str, env_pairs: &[(&str, &str)]) -> crate::config::Config {
    parse_config(source, &env(env_pairs)).unwrap_or_else(|errors| panic!("{errors}"))
}

fn files(cert: &str, key: &str) -> CertificateFiles {
    CertificateFiles {
        cert_file: PathBuf::from(cert),
        key_file: PathBuf::from(key),
    }
}

#[test]
fn server_tls_is_off_unless_configured() {
    assert_eq!(parse("", &[]).server.tls, None);
}

#[test]
fn server_tls_reads_the_default_pair_the_sni_pairs_and_the_version() {
    let source = r#"
[server.tls]
cert_file = "/etc/tls/fullchain.pem"
key_file = "/etc/tls/privkey.pem"
min_version = "1.3"

[[server.tls.certificate]]
cert_file = "a.pem"
key_file = "a.key"

[[server.tls.certificate]]
cert_file = "b.pem"
key_file = "b.key"
"#;
    let expected = TlsConfig {
        default: files("/etc/tls/fullchain.pem", "/etc/tls/privkey.pem"),
        certificates: vec![files("a.pem", "a.key"), files("b.pem", "b.key")],
        min_version: TlsVersion::Tls13,
    };
    assert_eq!(parse(source, &[]).server.tls, Some(expected));

    let minimal = parse(
        "[server.tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n",
        &[],
    );
    let tls = minimal.server.tls.unwrap();
    assert_eq!(tls.min_version, TlsVersion::Tls12);
    assert!(tls.certificates.is_empty());
    assert_eq!(tls.all_files().count(), 1);

    // A bare number is read as the version too.
    let number = parse(
        "[server.tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\nmin_version = 1.2\n",
        &[],
    );
    assert_eq!(number.server.tls.unwrap().min_version, TlsVersion::Tls12);
}

#[test]
fn server_tls_from_the_environment() {
    let config = parse(
        "",
        &[
            ("ANTEROOM_SERVER__TLS__CERT_FILE", "/run/tls/cert.pem"),
            ("ANTEROOM_SERVER__TLS__KEY_FILE", "/run/tls/key.pem"),
            ("ANTEROOM_SERVER__TLS__MIN_VERSION", "1.3"),
        ],
    );
    let tls = config.server.tls.unwrap();
    assert_eq!(tls.default, files("/run/tls/cert.pem", "/run/tls/key.pem"));
    assert_eq!(tls.min_version, TlsVersion::Tls13);
    check_problems(
        "",
        &[("ANTEROOM_SERVER__TLS__CERT_FILE", "/run/tls/cert.pem")],
        &[(
            None,
            "ANTEROOM_SERVER__TLS__CERT_FILE: [server.tls] needs `key_file`",
        )],
    );
}

#[test]
fn server_tls_problems_have_lines() {
    check_problems(
        "[server.tls]\ncert_file = \"c.pem\"\n",
        &[],
        &[(Some(1), "[server.tls] needs `key_file`")],
    );
    check_problems(
        "[server.tls]\ncert_file = \"\"\nkey_file = \"k.pem\"\nmin_version = \"1.1\"\nkey_fil = \"x\"\n",
        &[],
        &[
            (Some(2), "`cert_file` must not be empty"),
            (
                Some(4),
                "`min_version` must be \"1.2\" or \"1.3\", found \"1.1\"",
            ),
            (
                Some(5),
                "unknown key `key_fil` in [server.tls]; did you mean `key_file`?",
            ),
        ],
    );
    check_problems(
        "[server.tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n\n[[server.tls.certificate]]\ncert_file = \"a.pem\"\nkeyfile = \"a.key\"\n",
        &[],
        &[
            (Some(5), "[[server.tls.certificate]] needs `key_file`"),
            (
                Some(7),
                "unknown key `keyfile` in [[server.tls.certificate]]; did you mean `key_file`?",
            ),
        ],
    );
    check_problems(
        "[server.tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\ncertificate = \"a.pem\"\n",
        &[],
        &[(
            Some(4),
            "`certificate` must be written as [[server.tls.certificate]]",
        )],
    );
    check_problems(
        "[server]\ntls = true\n",
        &[],
        &[(Some(2), "`tls` must be a table")],
    );
    check_problems(
        "[server]\ntlss = true\n",
        &[],
        &[(
            Some(2),
            "unknown key `tlss` in [server]; did you mean `tls`?",
        )],
    );
}

#[test]
fn upstream_https_takes_ca_file_and_server_name() {
    let config = parse(
        "[upstream]\nurl = \"https://origin.internal/\"\nca_file = \"/etc/anteroom/origin-ca.pem\"\nserver_name = \"Origin.Example.\"\n",
        &[],
    );
    let upstream = config.upstream.unwrap();
    assert_eq!(upstream.url, "https://origin.internal");
    assert!(upstream.is_https());
    assert_eq!(upstream.host(), "origin.internal");
    assert_eq!(upstream.port(), 443);
    assert_eq!(
        upstream.ca_file,
        Some(PathBuf::from("/etc/anteroom/origin-ca.pem"))
    );
    assert_eq!(upstream.server_name.as_deref(), Some("origin.example"));

    let defaults = parse("[upstream]\nurl = \"https://[::1]:8443\"\n", &[]);
    let upstream = defaults.upstream.unwrap();
    assert_eq!((upstream.host(), upstream.port()), ("::1", 8443));
    assert_eq!((upstream.ca_file, upstream.server_name), (None, None));

    let plain = UpstreamConfig::new("http://127.0.0.1");
    assert!(!plain.is_https());
    assert_eq!((plain.host(), plain.port()), ("127.0.0.1", 80));

    let from_env = parse(
        "[upstream]\nurl = \"https://origin\"\n",
        &[("ANTEROOM_UPSTREAM__SERVER_NAME", "10.0.0.7")],
    );
    assert_eq!(
        from_env.upstream.unwrap().server_name.as_deref(),
        Some("10.0.0.7")
    );
}

#[test]
fn upstream_tls_problems_have_lines() {
    check_problems(
        "[upstream]\nurl = \"http://origin\"\nca_file = \"ca.pem\"\nserver_name = \"origin\"\n",
        &[],
        &[
            (Some(3), "`ca_file` applies only to an https:// `url`"),
            (Some(4), "`server_name` applies only to an https:// `url`"),
        ],
    );
    check_problems(
        "[upstream]\nurl = \"https://origin\"\nhttp2 = true\n",
        &[],
        &[(Some(3), "`http2 = true` is HTTP/2 without TLS (h2c)")],
    );
    check_problems(
        "[upstream]\nurl = \"https://origin\"\nca_file = \" \"\nserver_name = \"bad name\"\n",
        &[],
        &[
            (Some(3), "`ca_file` must not be empty"),
            (Some(4), "`server_name` must be a DNS name or an IP address"),
        ],
    );
    check_problems(
        "[upstream]\nurl = \"https://origin:0\"\n",
        &[],
        &[(Some(2), "a port from 1 to 65535")],
    );
}
