//! Lists read in protobuf, Kubernetes' own wire format, as client-go reads them.
//!
//! Restarting on 55,000 pods, the pods' list is what the first cycle waits for, and in JSON
//! the API server spends most of it encoding: measured on one kwok cluster (5,000 nodes,
//! 55,000 pods, Kubernetes 1.33), `GET /api/v1/pods` took 3.0–5.1 s in JSON (327 MB, the
//! first byte after 2.5–4.5 s) and 1.4–1.5 s in protobuf (101 MB, the first byte after
//! 0.36 s). The objects are decoded with k8s-pb's types one at a time as the list is
//! walked (the whole list is never decoded at once) and converted (`convert`, generated)
//! to the k8s-openapi types everything else reads, giving what decoding their JSON gives.
//! Watches stay JSON: their events are small, and the API server encodes each event once
//! per format for every watcher.

#[allow(clippy::all, clippy::pedantic)]
mod convert;

use std::collections::BTreeMap;

use ::kube::client::Body;
use ::kube::core::{ListMeta, ObjectList, Request, Status, TypeMeta};
use ::kube::Client;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use prost::Message;
use serde::de::DeserializeOwned;

use super::lean::Lean;

/// A protobuf message turned into its k8s-openapi twin.
pub(crate) trait Conv<T> {
    fn conv(self) -> T;
}

macro_rules! same {
    ($($t:ty),*) => { $(impl Conv<$t> for $t { fn conv(self) -> $t { self } })* };
}
same!(String, i32, i64, bool, f64);

impl<P: Conv<T>, T> Conv<Vec<T>> for Vec<P> {
    fn conv(self) -> Vec<T> {
        self.into_iter().map(Conv::conv).collect()
    }
}

impl<P: Conv<T>, T> Conv<BTreeMap<String, T>> for BTreeMap<String, P> {
    fn conv(self) -> BTreeMap<String, T> {
        self.into_iter().map(|(k, v)| (k, v.conv())).collect()
    }
}

impl Conv<Quantity> for k8s_pb::apimachinery::pkg::api::resource::Quantity {
    fn conv(self) -> Quantity {
        Quantity(self.string.unwrap_or_default())
    }
}

/// JSON carries a Time in whole seconds (RFC 3339), protobuf with its nanoseconds.
impl Conv<Time> for pb_meta::Time {
    fn conv(self) -> Time {
        Time(timestamp(self.seconds, 0))
    }
}

/// JSON carries a MicroTime in microseconds.
impl Conv<MicroTime> for pb_meta::MicroTime {
    fn conv(self) -> MicroTime {
        let nanos = self.nanos.unwrap_or(0);
        MicroTime(timestamp(self.seconds, nanos - nanos % 1000))
    }
}

fn timestamp(seconds: Option<i64>, nanos: i32) -> Timestamp {
    Timestamp::new(seconds.unwrap_or(0), nanos).unwrap_or_default()
}

/// `type` 1 is a string (intstr.String), anything else an int.
impl Conv<IntOrString> for k8s_pb::apimachinery::pkg::util::intstr::IntOrString {
    fn conv(self) -> IntOrString {
        match self.r#type {
            Some(1) => IntOrString::String(self.str_val.unwrap_or_default()),
            _ => IntOrString::Int(self.int_val.unwrap_or(0)),
        }
    }
}

/// A value Go's JSON encoding leaves out under `omitempty` (and protobuf writes).
pub(crate) trait Zero {
    fn is_zero(&self) -> bool;
}

impl Zero for String {
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}
impl Zero for i32 {
    fn is_zero(&self) -> bool {
        *self == 0
    }
}
impl Zero for i64 {
    fn is_zero(&self) -> bool {
        *self == 0
    }
}
impl Zero for bool {
    fn is_zero(&self) -> bool {
        !*self
    }
}
impl Zero for f64 {
    fn is_zero(&self) -> bool {
        *self == 0.0
    }
}
impl Zero for pb_meta::Time {
    fn is_zero(&self) -> bool {
        self.seconds.unwrap_or(0) == 0 && self.nanos.unwrap_or(0) == 0
    }
}
impl Zero for pb_meta::MicroTime {
    fn is_zero(&self) -> bool {
        self.seconds.unwrap_or(0) == 0 && self.nanos.unwrap_or(0) == 0
    }
}

/// A list or map JSON leaves out when empty (`omitempty`); protobuf has no "absent" for
/// them, so empty converts to absent.
pub(crate) fn non_empty<C: Collection + Conv<T>, T>(c: C) -> Option<T> {
    (!c.is_empty()).then(|| c.conv())
}

pub(crate) trait Collection {
    fn is_empty(&self) -> bool;
}
impl<T> Collection for Vec<T> {
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
}
impl<K, V> Collection for BTreeMap<K, V> {
    fn is_empty(&self) -> bool {
        BTreeMap::is_empty(self)
    }
}

/// A kind listed in protobuf: its k8s-pb message and how it becomes `Self`.
pub trait ProtoListed: Sized + Clone {
    type Message: Message + Default;
    fn from_message(m: Self::Message) -> Self;
}

impl ProtoListed for Lean<k8s_openapi::api::core::v1::Pod> {
    type Message = k8s_pb::api::core::v1::Pod;
    fn from_message(m: Self::Message) -> Self {
        // managedFields are not converted (see `lean`).
        Lean(m.conv())
    }
}

/// What a protobuf answer could not be read as.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("not a Kubernetes protobuf message (no k8s\\0 prefix)")]
    NoPrefix,
    #[error("malformed protobuf: a field runs past the end of its message, or is missing")]
    Truncated,
    #[error("decoding stopped: {0}")]
    Panicked(String),
    #[error("malformed protobuf: {0}")]
    Decode(#[from] prost::DecodeError),
}

const ACCEPT: &str = "application/vnd.kubernetes.protobuf, application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// Lists `K` at `url_path` (e.g. `/api/v1/pods`), in protobuf when the API server offers
/// it (JSON otherwise). Errors are the ones `Api::list` gives (`kube::Error::Api` with the
/// server's status), so callers handle both alike.
pub async fn list<K>(
    client: &Client,
    url_path: &str,
    lp: &::kube::api::ListParams,
) -> Result<ObjectList<K>, ::kube::Error>
where
    K: ProtoListed + DeserializeOwned + Clone + Send + 'static,
{
    let mut req = Request::new(url_path)
        .list(lp)
        .map_err(::kube::Error::BuildRequest)?;
    req.headers_mut()
        .insert(http::header::ACCEPT, http::HeaderValue::from_static(ACCEPT));
    let started = std::time::Instant::now();
    let res = client.send(req.map(Body::from)).await?;
    let code = res.status();
    let protobuf = res
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(PROTOBUF));
    let body = res.into_body().collect_bytes().await?;
    let invalid = |e: ProtoError| {
        ::kube::Error::Api(
            Status::failure(&format!("{url_path}: {e}"), "InvalidProtobuf")
                .with_code(code.as_u16())
                .boxed(),
        )
    };
    if !code.is_success() {
        let status = if protobuf {
            error_status(&body).map_err(invalid)?
        } else {
            serde_json::from_slice::<Status>(&body).unwrap_or_else(|_| {
                Status::failure(String::from_utf8_lossy(&body).trim(), "Unknown")
            })
        };
        return Err(::kube::Error::Api(status.with_code(code.as_u16()).boxed()));
    }
    if !protobuf {
        return serde_json::from_slice(&body).map_err(::kube::Error::SerdeError);
    }
    let received = started.elapsed();
    // Decoding 55,000 pods takes a second of CPU: off the runtime's threads.
    let bytes = body.len();
    let list = tokio::task::spawn_blocking(move || decode_list(&body))
        .await
        .map_err(|e| invalid(ProtoError::Panicked(e.to_string())))?
        .map_err(invalid)?;
    tracing::debug!(url_path, bytes, objects = list.items.len(), ?received, decoded = ?(started.elapsed() - received), "listed in protobuf");
    Ok(list)
}

/// A `k8s\0`-prefixed runtime.Unknown's `raw` bytes: the message itself.
fn unwrap_envelope(body: &[u8]) -> Result<&[u8], ProtoError> {
    let unknown = body.strip_prefix(b"k8s\0").ok_or(ProtoError::NoPrefix)?;
    let mut raw = None;
    for field in Fields(unknown) {
        if let (2, bytes) = field? {
            raw = Some(bytes);
        }
    }
    raw.ok_or(ProtoError::Truncated)
}

fn error_status(body: &[u8]) -> Result<Status, ProtoError> {
    let s = pb_meta::Status::decode(unwrap_envelope(body)?)?;
    Ok(Status::failure(
        s.message.as_deref().unwrap_or_default(),
        s.reason.as_deref().unwrap_or_default(),
    ))
}

/// A list's items decoded and converted one at a time (the whole list is never decoded at
/// once), on every core: the API server has sent it, nothing else waits for the CPU.
fn decode_list<K: ProtoListed + Send>(body: &[u8]) -> Result<ObjectList<K>, ProtoError> {
    let mut metadata = ListMeta::default();
    let mut raw_items = Vec::new();
    for field in Fields(unwrap_envelope(body)?) {
        match field? {
            (1, bytes) => {
                let m = pb_meta::ListMeta::decode(bytes)?;
                metadata = ListMeta {
                    continue_: m.r#continue.filter(|s| !s.is_empty()),
                    remaining_item_count: m.remaining_item_count,
                    resource_version: m.resource_version.filter(|s| !s.is_empty()),
                    self_link: m.self_link.filter(|s| !s.is_empty()),
                };
            }
            (2, bytes) => raw_items.push(bytes),
            _ => {}
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_thread = raw_items.len().div_ceil(threads).max(1);
    let decode = |raw: &[&[u8]]| -> Result<Vec<K>, ProtoError> {
        raw.iter()
            .map(|bytes| Ok(K::from_message(K::Message::decode(*bytes)?)))
            .collect()
    };
    let parts: Vec<Result<Vec<K>, ProtoError>> = std::thread::scope(|s| {
        let running: Vec<_> = raw_items
            .chunks(per_thread)
            .map(|chunk| s.spawn(move || decode(chunk)))
            .collect();
        running
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(ProtoError::Panicked("a decoding thread".into())))
            })
            .collect()
    });
    let mut items = Vec::with_capacity(raw_items.len());
    for part in parts {
        items.extend(part?);
    }
    Ok(ObjectList {
        types: TypeMeta::default(),
        metadata,
        items,
    })
}

/// The length-delimited fields of a message, as (tag, bytes); other wire types skipped.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, &'a [u8]), ProtoError>;

    fn next(&mut self) -> Option<Self::Item> {
        use prost::encoding::{decode_varint, WireType};
        while !self.0.is_empty() {
            let field = (|| {
                let key = decode_varint(&mut self.0)?;
                let tag = (key >> 3) as u32;
                let skip = match WireType::try_from(key & 7)? {
                    WireType::LengthDelimited => {
                        let len = decode_varint(&mut self.0)? as usize;
                        if len > self.0.len() {
                            return Err(ProtoError::Truncated);
                        }
                        let (bytes, rest) = self.0.split_at(len);
                        self.0 = rest;
                        return Ok(Some((tag, bytes)));
                    }
                    WireType::Varint => {
                        decode_varint(&mut self.0)?;
                        0
                    }
                    WireType::SixtyFourBit => 8,
                    WireType::ThirtyTwoBit => 4,
                    // Groups are not used by Kubernetes' messages.
                    _ => return Err(ProtoError::Truncated),
                };
                if skip > self.0.len() {
                    return Err(ProtoError::Truncated);
                }
                self.0 = &self.0[skip..];
                Ok(None)
            })();
            match field {
                Ok(Some(f)) => return Some(Ok(f)),
                Ok(None) => {}
                Err(e) => {
                    self.0 = &[];
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_pb::api::core::v1 as pb;

    /// `msg` as the API server sends it: `k8s\0`, then a runtime.Unknown holding it.
    fn envelope(msg: &impl Message) -> Vec<u8> {
        let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
            raw: Some(msg.encode_to_vec()),
            content_type: Some(PROTOBUF.into()),
            ..Default::default()
        };
        [b"k8s\0".as_slice(), &unknown.encode_to_vec()].concat()
    }

    /// A pod as Go's protobuf encoding writes it: every non-pointer field, zero or not.
    fn pb_pod(name: &str) -> pb::Pod {
        let ports = vec![pb::ContainerPort {
            container_port: Some(53),
            host_port: Some(0),
            protocol: Some("UDP".into()),
            name: Some(String::new()),
            host_ip: Some(String::new()),
        }];
        pb::Pod {
            metadata: Some(pb_meta::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                generate_name: Some(String::new()),
                resource_version: Some("7".into()),
                creation_timestamp: Some(pb_meta::Time {
                    seconds: Some(1_700_000_000),
                    nanos: Some(123),
                }),
                deletion_timestamp: None,
                labels: [("app".to_string(), String::new())].into(),
                ..Default::default()
            }),
            spec: Some(pb::PodSpec {
                node_name: Some(String::new()),
                priority: Some(0),
                host_network: Some(false),
                containers: vec![pb::Container {
                    name: Some("c".into()),
                    ports,
                    resources: Some(pb::ResourceRequirements {
                        requests: [(
                            "cpu".to_string(),
                            k8s_pb::apimachinery::pkg::api::resource::Quantity {
                                string: Some("1500m".into()),
                            },
                        )]
                        .into(),
                        ..Default::default()
                    }),
                    readiness_probe: Some(pb::Probe {
                        handler: Some(pb::ProbeHandler {
                            tcp_socket: Some(pb::TcpSocketAction {
                                port: Some(k8s_pb::apimachinery::pkg::util::intstr::IntOrString {
                                    r#type: Some(1),
                                    int_val: Some(0),
                                    str_val: Some("http".into()),
                                }),
                                host: Some(String::new()),
                            }),
                            ..Default::default()
                        }),
                        period_seconds: Some(0),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                volumes: vec![pb::Volume {
                    name: Some("hp".into()),
                    volume_source: Some(pb::VolumeSource {
                        host_path: Some(pb::HostPathVolumeSource {
                            path: Some("/tmp".into()),
                            r#type: Some(String::new()),
                        }),
                        ..Default::default()
                    }),
                }],
                ..Default::default()
            }),
            status: Some(pb::PodStatus {
                start_time: Some(pb_meta::Time {
                    seconds: Some(0),
                    nanos: Some(0),
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_protobuf_list_converts_to_what_the_same_pods_json_decodes_to() {
        let list = pb::PodList {
            metadata: Some(pb_meta::ListMeta {
                resource_version: Some("42".into()),
                r#continue: Some(String::new()),
                ..Default::default()
            }),
            items: vec![pb_pod("a"), pb_pod("b")],
        };
        let decoded = decode_list::<Lean<Pod>>(&envelope(&list)).expect("decodes");
        assert_eq!(decoded.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(
            decoded.metadata.continue_, None,
            "an empty token is no token"
        );
        // The JSON Go writes for the same pod: zero non-pointer fields left out
        // (`omitempty`), pointer fields kept even when zero or empty, times in seconds.
        let json: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7",
                         "creationTimestamp": "2023-11-14T22:13:20Z", "labels": {"app": ""}},
            "spec": {
                "priority": 0,
                "containers": [{
                    "name": "c",
                    "ports": [{"containerPort": 53, "protocol": "UDP"}],
                    "resources": {"requests": {"cpu": "1500m"}},
                    "readinessProbe": {"tcpSocket": {"port": "http"}}
                }],
                "volumes": [{"name": "hp", "hostPath": {"path": "/tmp", "type": ""}}]
            },
            "status": {}
        }))
        .unwrap();
        let names: Vec<_> = decoded
            .items
            .iter()
            .map(|p| p.0.metadata.name.clone())
            .collect();
        assert_eq!(names, [Some("a".to_string()), Some("b".to_string())]);
        assert_eq!(decoded.items[0].0, json);
    }

    #[test]
    fn malformed_protobuf_is_an_error_not_a_panic() {
        let good = envelope(&pb::PodList {
            metadata: None,
            items: vec![pb_pod("a")],
        });
        assert!(matches!(
            decode_list::<Lean<Pod>>(b"{\"kind\":\"PodList\"}"),
            Err(ProtoError::NoPrefix)
        ));
        // Cut anywhere it is refused, never a panic — but for a cut exactly where the
        // envelope's content type (after the list's bytes) starts: the list is whole.
        let list_end = good.len() - (2 + PROTOBUF.len());
        for cut in 4..good.len() {
            let decoded = decode_list::<Lean<Pod>>(&good[..cut]);
            assert_eq!(
                decoded.is_ok(),
                cut == list_end,
                "cut at {cut} of {}",
                good.len()
            );
        }
        let mut wrong_wire = good.clone();
        wrong_wire.extend([0x0b]); // field 1, wire type 3 (a group)
        assert!(decode_list::<Lean<Pod>>(&wrong_wire).is_err());
    }

    #[test]
    fn a_refusal_in_protobuf_reads_as_the_status_json_would() {
        let status = pb_meta::Status {
            message: Some("pods is forbidden".into()),
            reason: Some("Forbidden".into()),
            code: Some(403),
            ..Default::default()
        };
        let s = error_status(&envelope(&status)).expect("decodes");
        assert_eq!(s.message, "pods is forbidden");
        assert_eq!(s.reason, "Forbidden");
    }
}
