//! Flag values spelt as Go programs (Volcano's vc-scheduler, kube-scheduler) spell them, so
//! their manifests' arguments carry over: booleans as strconv.ParseBool reads them,
//! durations as time.ParseDuration does, listen addresses as net.Listen takes them.

use std::ffi::OsString;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// A boolean as Go's strconv.ParseBool reads it (what pflag's `--flag=VALUE` accepts).
pub fn parse_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("{text:?} is not a boolean (true or false)")),
    }
}

/// A duration as Go's time.ParseDuration reads it ("1s", "1.5s", "1m30s", "500ms", "0"),
/// or as humantime does ("10 min", "1h 30m": what rust-batch took before).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = go_duration(text)
        .or_else(|go_error| humantime::parse_duration(text).map_err(|_| go_error))?;
    // Go's limit (an int64 of nanoseconds, about 292 years), for either spelling.
    if duration > Duration::from_nanos(i64::MAX as u64) {
        return Err(format!("{text:?} is too long a duration"));
    }
    Ok(duration)
}

fn go_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("{text:?} is not a duration (e.g. 1s, 500ms, 1m30s)");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.starts_with('-') {
        return Err(format!("{text:?}: a duration here cannot be negative"));
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut nanos = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let number: f64 = rest[..number_len].parse().map_err(|_| invalid())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit_nanos = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(invalid()),
        };
        rest = &rest[unit_len..];
        nanos += number * unit_nanos;
    }
    if !nanos.is_finite() || nanos > u64::MAX as f64 {
        return Err(format!("{text:?} is too long a duration"));
    }
    Ok(Duration::from_nanos(nanos.round() as u64))
}

/// Where to listen, as Go's net.Listen takes it: "HOST:PORT", "[V6]:PORT", or ":PORT" for
/// every interface (`:8080` is what Volcano's and kube-scheduler's manifests write).
pub fn parse_listen_address(text: &str) -> Result<SocketAddr, String> {
    let with_host = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_string(),
    };
    if let Ok(address) = with_host.parse::<SocketAddr>() {
        return Ok(address);
    }
    // A host name ("localhost:8080"): its first address.
    let (_, port) = with_host
        .rsplit_once(':')
        .ok_or_else(|| format!("{text:?} is not HOST:PORT or :PORT"))?;
    port.parse::<u16>()
        .map_err(|_| format!("{text:?}: {port:?} is not a port"))?;
    with_host
        .to_socket_addrs()
        .ok()
        .and_then(|mut all| all.next())
        .ok_or_else(|| format!("{text:?}: cannot resolve the host"))
}

/// Where to serve rust-batch's HTTP endpoints, or nowhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpAddress {
    Off,
    At(SocketAddr),
}

impl HttpAddress {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "off" | "" => Ok(HttpAddress::Off),
            _ => parse_listen_address(text)
                .map(HttpAddress::At)
                .map_err(|e| format!("{e}, or \"off\"")),
        }
    }

    pub fn socket(self) -> Option<SocketAddr> {
        match self {
            HttpAddress::Off => None,
            HttpAddress::At(a) => Some(a),
        }
    }
}

/// Command-line arguments with Go's spellings turned into clap's: a long flag's
/// underscores become dashes (`--log_dir`: pflag's WordSepNormalizeFunc, which Volcano and
/// kube-scheduler install, does the same). Values, arguments that are not UTF-8, and
/// everything after `--` are left alone.
pub fn normalize_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut after_terminator = false;
    args.into_iter()
        .map(|arg| {
            let Some(text) = arg.to_str() else {
                return arg;
            };
            if after_terminator || text == "--" {
                after_terminator = true;
                return arg;
            }
            let Some(flag) = text.strip_prefix("--") else {
                return arg;
            };
            match flag.split_once('=') {
                Some((name, value)) => format!("--{}={value}", name.replace('_', "-")).into(),
                None => format!("--{}", flag.replace('_', "-")).into(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_as_go_reads_them() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(t), Ok(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(f), Ok(false), "{f}");
        }
        for bad in ["yes", "", "tRUE", "2"] {
            assert!(parse_bool(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_as_go_and_humantime_read_them() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("1s"), Ok(ms(1000)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("500ms"), Ok(ms(500)));
        assert_eq!(parse_duration("2h45m"), Ok(ms((2 * 3600 + 45 * 60) * 1000)));
        assert_eq!(parse_duration("10us"), Ok(Duration::from_micros(10)));
        assert_eq!(parse_duration("10µs"), Ok(Duration::from_micros(10)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("+3s"), Ok(ms(3000)));
        // humantime's spellings, which rust-batch's flags took before.
        assert_eq!(parse_duration("10min"), Ok(ms(600_000)));
        assert_eq!(parse_duration("1h 30m"), Ok(ms(5_400_000)));
        for bad in ["", "s", "1", "1x", "-1s", "1..5s", "9999999999h", "+"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_addresses_as_go_takes_them() {
        assert_eq!(
            parse_listen_address(":8080"),
            Ok("0.0.0.0:8080".parse().unwrap())
        );
        assert_eq!(
            parse_listen_address("127.0.0.1:11251"),
            Ok("127.0.0.1:11251".parse().unwrap())
        );
        assert_eq!(
            parse_listen_address("[::1]:9"),
            Ok("[::1]:9".parse().unwrap())
        );
        assert!(parse_listen_address("localhost:8080")
            .unwrap()
            .ip()
            .is_loopback());
        for bad in ["8080", ":http", "", ":", "host", ":99999"] {
            assert!(parse_listen_address(bad).is_err(), "{bad}");
        }
        assert_eq!(HttpAddress::parse("off"), Ok(HttpAddress::Off));
        assert_eq!(
            HttpAddress::parse(":9090").map(HttpAddress::socket),
            Ok(Some("0.0.0.0:9090".parse().unwrap()))
        );
        assert!(HttpAddress::parse("nowhere")
            .unwrap_err()
            .contains("\"off\""));
    }

    #[test]
    fn underscores_in_long_flag_names_become_dashes() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            normalize_args(args(&[
                "rust-batch",
                "--log_dir=/var/log/a_b",
                "--skip_headers",
                "-v=3",
                "a_b",
                "--",
                "--x_y"
            ])),
            args(&[
                "rust-batch",
                "--log-dir=/var/log/a_b",
                "--skip-headers",
                "-v=3",
                "a_b",
                "--",
                "--x_y"
            ])
        );
        // Not UTF-8: passed through for clap to report.
        use std::os::unix::ffi::OsStringExt;
        let odd = OsString::from_vec(vec![b'-', b'-', 0xff, b'_']);
        assert_eq!(normalize_args([odd.clone()]), [odd]);
    }
}
