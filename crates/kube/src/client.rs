//! The API client every part of the driver shares. kube's own builder (5.0) makes two
//! choices a scheduler cannot live with:
//!
//! - Nagle's algorithm stays on (no TCP_NODELAY, kube-rs/kube#2056). The first request on
//!   every new connection follows the TLS handshake's last write, so the kernel holds it
//!   until that write is acknowledged — a delayed ACK, ~40 ms on Linux. Measured on a local
//!   API server: a POST on a fresh connection 55–110 ms, 7 ms with TCP_NODELAY (curl's
//!   default, and Go's). The scheduler opens a connection per watch and per bind in flight,
//!   so start-up and every growth of the bind limit paid it.
//! - Responses 429, 503 and 504 are retried inside the client, up to 15 times with
//!   exponential back-off or the server's Retry-After. The driver decides retries itself
//!   (`retry`): the bind limit must see a 429 to shrink, and an eviction a disruption
//!   budget refuses (429) must reach the preemptor as a refusal, not ten seconds × 15 later.
//!
//! So the client is built here with TCP_NODELAY and without that retry layer, from kube's
//! own pieces (TLS, authentication, headers, timeouts). Kubeconfigs whose client identity
//! comes from an exec plugin (whose certificate expires: kube's builder tracks that) or that
//! name a proxy keep kube's builder, still without the retry layer.

use ::kube::client::ConfigExt;
use ::kube::{Client, Config};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tower::{BoxError, ServiceBuilder};

/// A client for `config`: TCP_NODELAY, no hidden retries (see the module's doc).
pub fn build(mut config: Config) -> Result<Client, ::kube::Error> {
    config.default_retry = false;
    if config.auth_info.exec.is_some() || config.proxy_url.is_some() {
        return Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let mut connector =
        hyper_timeout::TimeoutConnector::new(config.rustls_https_connector_with_connector(http)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http_client);
    Ok(Client::new(service, config.default_namespace))
}

/// The usual inference (KUBECONFIG, ~/.kube/config, in-cluster), built by [`build`].
pub async fn infer() -> Result<Client, ::kube::Error> {
    build(Config::infer().await.map_err(::kube::Error::InferConfig)?)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An HTTP server on 127.0.0.1 that answers every request 429 and counts them.
    async fn always_busy() -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut got = Vec::new();
                    loop {
                        let n = conn.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        got.extend_from_slice(&buf[..n]);
                        if got.windows(4).any(|w| w == b"\r\n\r\n") {
                            break;
                        }
                    }
                    counter.fetch_add(1, Ordering::SeqCst);
                    let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"busy","reason":"TooManyRequests","code":429}"#;
                    let answer = format!(
                        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(answer.as_bytes()).await;
                });
            }
        });
        (url, seen)
    }

    /// kube's default client sends this request 16 times over minutes (measured: 16, 454 s).
    #[tokio::test]
    async fn a_429_reaches_the_caller_after_one_request() {
        let (url, seen) = always_busy().await;
        let client = super::build(::kube::Config::new(url.parse().unwrap())).unwrap();
        let api = ::kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client, "ns");
        let started = std::time::Instant::now();
        let answer = api.get("x").await;
        assert!(
            matches!(&answer, Err(::kube::Error::Api(s)) if s.code == 429),
            "{answer:?}"
        );
        assert_eq!(
            seen.load(Ordering::SeqCst),
            1,
            "the client must not retry behind the driver's back"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}
