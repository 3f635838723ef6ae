//! The certificates a process holds and when they expire: notAfter (with the serial and subject
//! common name, for logs) read from DER, the gauge
//! `clusternet_certificate_expiration_timestamp_seconds{certificate}` (notAfter as Unix seconds)
//! and a warning when one expires within 30 days or has expired (issue #21: Karmada's users only
//! found out when their components crash-looped after 365 days).
//!
//! The DER is read with `yasna`, already in the build through rcgen (with its `time` feature),
//! rather than `x509-parser` (an optional feature of rcgen): that would add about ten crates
//! (asn1-rs and its two proc-macro crates, der-parser, nom, oid-registry, num-bigint, ...) to
//! read three fields, and yasna adds none.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tracing::{info, warn};
use yasna::tags::{TAG_GENERALIZEDTIME, TAG_UTCTIME};
use yasna::{ASN1Error, ASN1ErrorKind, BERReader, Tag};

/// A certificate that expires within this long gets a warning.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(30 * 24 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{what}: no PEM certificate found")]
    NoPem { what: String },
    #[error("{what}: not an X.509 certificate: {source}")]
    Der {
        what: String,
        #[source]
        source: ASN1Error,
    },
}

/// What the process reports about one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// The serial number, upper-case hex as openssl prints it.
    pub serial: String,
    pub subject_cn: Option<String>,
    /// notBefore / notAfter as Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
}

/// The facts of one DER certificate. BER mode, so a certificate from a lax issuer (a
/// non-minimal length) still reports its expiry; TLS libraries verify it, not this.
pub fn parse_der(der: &[u8], what: &str) -> Result<CertInfo, CertError> {
    yasna::parse_ber(der, |r| {
        r.read_sequence(|cert| {
            let info = cert.next().read_sequence(|tbs| {
                // version [0] EXPLICIT INTEGER DEFAULT v1
                tbs.read_optional(|r| r.read_tagged(Tag::context(0), |r| r.read_i64()))?;
                let (serial, _) = tbs.next().read_bigint_bytes()?;
                tbs.next().read_der()?; // signature algorithm
                tbs.next().read_der()?; // issuer
                let (not_before, not_after) = tbs
                    .next()
                    .read_sequence(|v| Ok((time(v.next())?, time(v.next())?)))?;
                let subject = tbs.next().read_der()?;
                // subjectPublicKeyInfo, unique IDs, extensions: not needed
                while tbs.read_optional(|r| r.read_der())?.is_some() {}
                Ok(CertInfo {
                    serial: hex_serial(&serial),
                    subject_cn: common_name(&subject),
                    not_before,
                    not_after,
                })
            })?;
            cert.next().read_der()?; // signatureAlgorithm
            cert.next().read_der()?; // signatureValue
            Ok(info)
        })
    })
    .map_err(|source| CertError::Der {
        what: what.to_string(),
        source,
    })
}

/// A serial as openssl prints it: upper-case hex without the sign byte DER adds before a high
/// bit.
fn hex_serial(bytes: &[u8]) -> String {
    let start = bytes
        .iter()
        .position(|b| *b != 0)
        .unwrap_or(bytes.len().saturating_sub(1));
    bytes[start..].iter().map(|b| format!("{b:02X}")).collect()
}

/// UTCTime or GeneralizedTime (RFC 5280 §4.1.2.5) as Unix seconds.
fn time(r: BERReader<'_, '_>) -> Result<i64, ASN1Error> {
    let tag = r.lookahead_tag()?;
    if tag == TAG_UTCTIME {
        Ok(r.read_utctime()?.datetime().unix_timestamp())
    } else if tag == TAG_GENERALIZEDTIME {
        Ok(r.read_generalized_time()?.datetime().unix_timestamp())
    } else {
        Err(ASN1Error::new(ASN1ErrorKind::Invalid))
    }
}

/// The first commonName (2.5.4.3) of a DER Name.
fn common_name(name: &[u8]) -> Option<String> {
    let mut cn = None;
    yasna::parse_ber(name, |r| {
        r.read_sequence_of(|rdn| {
            rdn.read_set_of(|atv| {
                atv.read_sequence(|a| {
                    let oid = a.next().read_oid()?;
                    let value = a.next().read_tagged_der()?;
                    if cn.is_none() && oid.components().as_slice() == [2, 5, 4, 3] {
                        cn = Some(String::from_utf8_lossy(value.value()).into_owned());
                    }
                    Ok(())
                })
            })
        })
    })
    .ok()?;
    cn
}

/// The facts of every certificate in a PEM bundle, in order.
/// DER certificates as one PEM bundle (`\n` line ends, as kubeconfig CA data is written).
pub fn certificates_pem(ders: &[Vec<u8>]) -> String {
    let pems: Vec<pem::Pem> = ders
        .iter()
        .map(|d| pem::Pem::new("CERTIFICATE", d.clone()))
        .collect();
    pem::encode_many_config(
        &pems,
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

pub fn parse_pem(pem: &[u8], what: &str) -> Result<Vec<CertInfo>, CertError> {
    let ders: Vec<_> = rustls_pemfile::certs(&mut &pem[..])
        .filter_map(Result::ok)
        .collect();
    if ders.is_empty() {
        return Err(CertError::NoPem {
            what: what.to_string(),
        });
    }
    ders.iter().map(|d| parse_der(d.as_ref(), what)).collect()
}

/// The certificate of a bundle that expires first: a CA bundle is reported by its earliest
/// notAfter, because a bundle that still verifies only with its newer CA during a rotation is
/// worth a look before the older one lapses.
pub fn earliest(infos: &[CertInfo]) -> Option<&CertInfo> {
    infos.iter().min_by_key(|i| i.not_after)
}

static HELD: Mutex<BTreeMap<String, CertInfo>> = Mutex::new(BTreeMap::new());

fn held() -> std::sync::MutexGuard<'static, BTreeMap<String, CertInfo>> {
    HELD.lock().unwrap_or_else(|p| p.into_inner())
}

/// The exposition text of the expiry gauge.
fn render(held: &BTreeMap<String, CertInfo>) -> String {
    if held.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "# HELP clusternet_certificate_expiration_timestamp_seconds When the certificate expires (notAfter), in Unix seconds.\n# TYPE clusternet_certificate_expiration_timestamp_seconds gauge\n",
    );
    for (name, info) in held {
        out.push_str(&format!(
            "clusternet_certificate_expiration_timestamp_seconds{{certificate=\"{}\"}} {}\n",
            crate::runtime::telemetry::label_value(name),
            info.not_after
        ));
    }
    out
}

fn now_unix() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Whether `info` expires within [`EXPIRY_WARNING`] of `now` (or already has).
pub fn expires_soon(info: &CertInfo, now: i64) -> bool {
    info.not_after - now < EXPIRY_WARNING.as_secs() as i64
}

fn warn_if_expiring(name: &str, info: &CertInfo, now: i64) {
    if !expires_soon(info, now) {
        return;
    }
    let not_after = rfc3339(info.not_after);
    if info.not_after <= now {
        warn!(certificate = name, serial = %info.serial, %not_after, "the certificate has expired: renew it");
    } else {
        let days = (info.not_after - now) / 86_400;
        warn!(certificate = name, serial = %info.serial, %not_after, days, "the certificate expires within 30 days: renew it");
    }
}

/// Unix seconds as RFC 3339, for logs.
pub fn rfc3339(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0)
        .map(|t| t.to_rfc3339())
        .unwrap_or_else(|| unix.to_string())
}

/// Records `info` as the current certificate `name` (the gauge's label), logs it when it is
/// new, and warns when it expires within 30 days. The warning is repeated once a day for every
/// certificate held, so a process that runs for a year without a reload still says so in time.
pub fn record(name: &str, info: &CertInfo) {
    let now = now_unix();
    // registered outside the lock the collector takes at every scrape
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        crate::runtime::telemetry::register_collector("certificates", || render(&held()))
    });
    let changed = held().insert(name.to_string(), info.clone()).as_ref() != Some(info);
    if changed {
        info!(certificate = name, serial = %info.serial, subject = info.subject_cn.as_deref().unwrap_or(""), not_after = %rfc3339(info.not_after), "certificate loaded");
        warn_if_expiring(name, info, now);
    }
    daily_warnings();
}

/// [`record`] for the certificate of a bundle that expires first; a bundle that cannot be
/// read is logged and not recorded.
pub fn record_pem(name: &str, pem: &[u8]) {
    match parse_pem(pem, name) {
        Ok(infos) => {
            if let Some(first) = earliest(&infos) {
                record(name, first);
            }
        }
        Err(e) => warn!(certificate = name, error = %e, "cannot read the certificate's expiry"),
    }
}

/// Starts (once, on the current tokio runtime) the daily re-check of every recorded
/// certificate.
fn daily_warnings() {
    static STARTED: OnceLock<()> = OnceLock::new();
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    STARTED.get_or_init(|| {
        handle.spawn(async {
            let mut tick = tokio::time::interval(Duration::from_secs(24 * 3600));
            tick.tick().await; // the first tick is now: record() has just warned
            loop {
                tick.tick().await;
                let now = now_unix();
                let held = held().clone();
                for (name, info) in &held {
                    warn_if_expiring(name, info, now);
                }
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with(not_after: (i32, u8, u8), cn: &str, serial: &[u8]) -> String {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2024, 1, 2);
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.serial_number = Some(rcgen::SerialNumber::from_slice(serial));
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn not_after_serial_and_subject_come_from_the_certificate() {
        // 2049 is the last year of UTCTime, 2050 the first of GeneralizedTime (RFC 5280)
        for (year, unix) in [(2049, 2_493_072_000), (2050, 2_524_608_000)] {
            let pem = cert_with((year, 1, 1), "hub.example", &[0x0A, 0xBC]);
            let infos = parse_pem(pem.as_bytes(), "test").unwrap();
            assert_eq!(infos.len(), 1);
            assert_eq!(infos[0].not_after, unix, "{year}");
            assert_eq!(infos[0].not_before, 1_704_153_600);
            assert_eq!(infos[0].serial, "0ABC");
            assert_eq!(infos[0].subject_cn.as_deref(), Some("hub.example"));
        }
    }

    #[test]
    fn serials_read_as_openssl_prints_them() {
        assert_eq!(hex_serial(&[0x00, 0xA1]), "A1");
        assert_eq!(hex_serial(&[0x0A, 0xBC]), "0ABC");
        assert_eq!(hex_serial(&[0x00]), "00");
        assert_eq!(hex_serial(&[]), "");
    }

    #[test]
    fn a_bundle_is_reported_by_the_certificate_that_expires_first() {
        let bundle = format!(
            "{}{}",
            cert_with((2040, 6, 1), "new-ca", &[1]),
            cert_with((2030, 6, 1), "old-ca", &[2])
        );
        let infos = parse_pem(bundle.as_bytes(), "test").unwrap();
        assert_eq!(
            earliest(&infos).and_then(|i| i.subject_cn.as_deref()),
            Some("old-ca")
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(
            parse_pem(b"not a certificate", "x"),
            Err(CertError::NoPem { .. })
        ));
        let junk = "-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n";
        assert!(matches!(
            parse_pem(junk.as_bytes(), "x"),
            Err(CertError::Der { .. })
        ));
        assert!(parse_der(&[0x30, 0x82, 0xff], "x").is_err());
    }

    #[test]
    fn expiring_within_thirty_days_is_flagged() {
        let info = |not_after| CertInfo {
            serial: "01".into(),
            subject_cn: None,
            not_before: 0,
            not_after,
        };
        let now = 1_800_000_000;
        assert!(expires_soon(&info(now - 1), now), "expired");
        assert!(expires_soon(&info(now + 29 * 86_400), now));
        assert!(!expires_soon(&info(now + 31 * 86_400), now));
    }

    #[test]
    fn the_gauge_has_one_series_per_certificate() {
        let info = CertInfo {
            serial: "01".into(),
            subject_cn: None,
            not_before: 0,
            not_after: 2_000_000_000,
        };
        let held = BTreeMap::from([
            ("hub-serving".to_string(), info.clone()),
            ("parent-ca".to_string(), info),
        ]);
        let text = render(&held);
        assert!(text.contains(
            "clusternet_certificate_expiration_timestamp_seconds{certificate=\"hub-serving\"} 2000000000\n"
        ));
        assert!(text.contains("certificate=\"parent-ca\"} 2000000000\n"));
        assert_eq!(render(&BTreeMap::new()), "");
    }
}
