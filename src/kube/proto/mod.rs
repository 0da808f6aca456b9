//! Lists read in protobuf, Kubernetes' own wire format, as client-go reads them: pods and
//! nodes, the two lists every (re)start waits for.
//!
//! Restarting on 55,000 pods, the pods' list is what the first cycle waits for, and in JSON
//! the API server spends most of it encoding: measured on one kwok cluster (5,000 nodes,
//! 55,000 pods, Kubernetes 1.33), `GET /api/v1/pods` took 3.0–5.1 s in JSON (327 MB, the
//! first byte after 2.5–4.5 s) and 1.4–1.5 s in protobuf (101 MB, the first byte after
//! 0.36 s). The list is cut into its items as its bytes arrive (`ListSplitter`), and
//! batches of items are decoded with k8s-pb's types on every core while the rest is on its
//! way, each converted (`convert`, generated) to the k8s-openapi types everything else
//! reads, giving what decoding their JSON gives.
//! Watches stay JSON: their events are small, and the API server encodes each event once
//! per format for every watcher.

#[allow(clippy::all, clippy::pedantic)]
mod convert;

use std::collections::BTreeMap;

use ::kube::client::Body;
use ::kube::core::{ListMeta, ObjectList, Request, Status, TypeMeta};
use ::kube::Client;
use bytes::{Bytes, BytesMut};
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

macro_rules! zero {
    // Scalars: their default ("", 0, false).
    ($($t:ty),*) => { $(impl Zero for $t { fn is_zero(&self) -> bool { *self == <$t>::default() } })* };
    // Times: 0 s (Go writes its zero time so; an unset message is no time either).
    (times: $($t:ty),*) => { $(impl Zero for $t {
        fn is_zero(&self) -> bool { self.seconds.unwrap_or(0) == 0 && self.nanos.unwrap_or(0) == 0 }
    })* };
}
zero!(String, i32, i64, bool, f64);
zero!(times: pb_meta::Time, pb_meta::MicroTime);

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

/// Nodes too: the Node list is the other list every (re)start waits for, and in JSON it is
/// the slowest on a busy API server (1,000 kwok nodes: 0.3–2.0 s while pods are being
/// created, most of a start's time to its first bind).
impl ProtoListed for Lean<k8s_openapi::api::core::v1::Node> {
    type Message = k8s_pb::api::core::v1::Node;
    fn from_message(m: Self::Message) -> Self {
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
    let mut items = Vec::new();
    let metadata = list_in_batches(client, url_path, lp, |batch| items.extend(batch)).await?;
    Ok(ObjectList {
        types: TypeMeta::default(),
        metadata,
        items,
    })
}

/// `list`, handing the objects to `batch` as they are decoded, in the list's order, while
/// the rest arrives (a JSON answer: all at once); the list's metadata once it is all in.
/// On an error some objects may have been handed out already.
pub async fn list_in_batches<K>(
    client: &Client,
    url_path: &str,
    lp: &::kube::api::ListParams,
    mut batch_out: impl FnMut(Vec<K>),
) -> Result<ListMeta, ::kube::Error>
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
    let invalid = |e: ProtoError| {
        ::kube::Error::Api(
            Status::failure(&format!("{url_path}: {e}"), "InvalidProtobuf")
                .with_code(code.as_u16())
                .boxed(),
        )
    };
    let mut body = res.into_body();
    if !code.is_success() || !protobuf {
        let body = body.collect_bytes().await?;
        if code.is_success() {
            let list: ObjectList<K> =
                serde_json::from_slice(&body).map_err(::kube::Error::SerdeError)?;
            batch_out(list.items);
            return Ok(list.metadata);
        }
        let status = if protobuf {
            error_status(&body).map_err(invalid)?
        } else {
            serde_json::from_slice::<Status>(&body).unwrap_or_else(|_| {
                Status::failure(String::from_utf8_lossy(&body).trim(), "Unknown")
            })
        };
        return Err(::kube::Error::Api(status.with_code(code.as_u16()).boxed()));
    }
    // Items are decoded in batches while the rest arrives, at most one batch per core at
    // a time (55,000 pods take a second of CPU to decode: off the runtime's threads).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut splitter = ListSplitter::default();
    let mut batch = Vec::new();
    let mut decoding = std::collections::VecDeque::new();
    let mut objects = 0;
    let mut bytes = 0;
    let mut received = true;
    loop {
        let frame = http_body_util::BodyExt::frame(&mut body)
            .await
            .transpose()?;
        if let Some(data) = frame.as_ref().and_then(|f| f.data_ref()) {
            bytes += data.len();
            splitter
                .feed(data, |item| batch.push(item))
                .map_err(invalid)?;
        } else if frame.is_none() {
            received = false;
        }
        if batch.len() >= DECODE_BATCH || (!received && !batch.is_empty()) {
            let raw = std::mem::take(&mut batch);
            decoding.push_back(tokio::task::spawn_blocking(move || decode_items::<K>(raw)));
        }
        while decoding.len() > cores || (!received && !decoding.is_empty()) {
            let Some(next) = decoding.pop_front() else {
                break;
            };
            let decoded = next
                .await
                .map_err(|e| invalid(ProtoError::Panicked(e.to_string())))?;
            let decoded = decoded.map_err(invalid)?;
            objects += decoded.len();
            batch_out(decoded);
        }
        if !received {
            break;
        }
    }
    let metadata = splitter.finish().map_err(invalid)?;
    tracing::debug!(
        url_path,
        bytes,
        objects,
        took = ?started.elapsed(),
        "listed in protobuf"
    );
    Ok(metadata)
}

/// Items per decoding task: large enough to be worth a task, small enough that the last
/// one, decoded after the list is in, is quick (2,000 pods: ~4 MB, 30–60 ms of one core).
pub(crate) const DECODE_BATCH: usize = 2000;

fn decode_items<K: ProtoListed>(raw: Vec<Bytes>) -> Result<Vec<K>, ProtoError> {
    raw.into_iter()
        .map(|bytes| Ok(K::from_message(K::Message::decode(bytes)?)))
        .collect()
}

/// A refusal's Status. Its body is small: prost decodes the envelope (runtime.Unknown)
/// and the Status in it whole.
fn error_status(body: &[u8]) -> Result<Status, ProtoError> {
    let unknown = body.strip_prefix(b"k8s\0").ok_or(ProtoError::NoPrefix)?;
    let raw = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(unknown)?
        .raw
        .ok_or(ProtoError::Truncated)?;
    let s = pb_meta::Status::decode(raw.as_slice())?;
    Ok(Status::failure(
        s.message.as_deref().unwrap_or_default(),
        s.reason.as_deref().unwrap_or_default(),
    ))
}

/// A protobuf list cut into its items as its bytes arrive: `k8s\0`, a runtime.Unknown
/// whose `raw` (field 2) is the list, whose field 1 is its ListMeta and each field 2 an
/// item. Items are handed out whole, as soon as their last byte is in, so they can be
/// decoded while the rest of the list is still on its way.
#[derive(Default)]
struct ListSplitter {
    buf: BytesMut,
    /// Where the bytes are: the prefix, the envelope's fields, or inside the list with this
    /// many of its bytes still to read.
    at: Place,
    metadata: Option<pb_meta::ListMeta>,
    saw_list: bool,
}

#[derive(Default, Clone, Copy, PartialEq, Debug)]
enum Place {
    #[default]
    Prefix,
    Envelope,
    List(usize),
}

/// A varint at the start of `b`: its value and length, or None if `b` ends inside it.
fn peek_varint(b: &[u8]) -> Result<Option<(u64, usize)>, ProtoError> {
    let mut value = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((value, i + 1)));
        }
    }
    if b.len() >= 10 {
        return Err(ProtoError::Truncated);
    }
    Ok(None)
}

/// A field's header at the start of `b`: (tag, wire type, header length, body length for
/// length-delimited fields / fixed width), or None if `b` ends inside it.
fn peek_field(b: &[u8]) -> Result<Option<(u32, usize, usize)>, ProtoError> {
    let Some((key, key_len)) = peek_varint(b)? else {
        return Ok(None);
    };
    let tag = (key >> 3) as u32;
    match key & 7 {
        0 => Ok(peek_varint(&b[key_len..])?.map(|(_, n)| (tag, key_len, n))),
        1 => Ok(Some((tag, key_len, 8))),
        5 => Ok(Some((tag, key_len, 4))),
        2 => Ok(peek_varint(&b[key_len..])?.map(|(len, n)| (tag, key_len + n, len as usize))),
        // Groups are not used by Kubernetes' messages.
        _ => Err(ProtoError::Truncated),
    }
}

impl ListSplitter {
    /// Takes the next bytes; hands every item completed by them to `item`.
    fn feed(&mut self, bytes: &[u8], mut item: impl FnMut(Bytes)) -> Result<(), ProtoError> {
        self.buf.extend_from_slice(bytes);
        loop {
            match self.at {
                Place::Prefix => {
                    if self.buf.len() < 4 {
                        return Ok(());
                    }
                    if &self.buf[..4] != b"k8s\0" {
                        return Err(ProtoError::NoPrefix);
                    }
                    let _ = self.buf.split_to(4);
                    self.at = Place::Envelope;
                }
                Place::Envelope => {
                    let Some((tag, header, len)) = peek_field(&self.buf)? else {
                        return Ok(());
                    };
                    let wire = self.buf[0] & 7;
                    if tag == 2 && wire == 2 {
                        let _ = self.buf.split_to(header);
                        self.saw_list = true;
                        self.at = Place::List(len);
                        continue;
                    }
                    // Another field of the envelope (type, content type): skipped whole.
                    let whole = header + len;
                    if self.buf.len() < whole {
                        return Ok(());
                    }
                    let _ = self.buf.split_to(whole);
                }
                Place::List(0) => self.at = Place::Envelope,
                Place::List(left) => {
                    let Some((tag, header, len)) = peek_field(&self.buf)? else {
                        return Ok(());
                    };
                    let wire = self.buf[0] & 7;
                    let whole = header + len;
                    if whole > left {
                        return Err(ProtoError::Truncated);
                    }
                    if self.buf.len() < whole {
                        return Ok(());
                    }
                    let mut field = self.buf.split_to(whole);
                    let body = field.split_off(header).freeze();
                    match (tag, wire) {
                        (1, 2) => self.metadata = Some(pb_meta::ListMeta::decode(body)?),
                        (2, 2) => item(body),
                        _ => {}
                    }
                    self.at = Place::List(left - whole);
                }
            }
        }
    }

    /// The list's metadata, once every byte is in; an error if the list ended early.
    fn finish(self) -> Result<ListMeta, ProtoError> {
        // Ended inside a field, or before the list.
        let whole = self.saw_list
            && self.buf.is_empty()
            && matches!(self.at, Place::Envelope | Place::List(0));
        if !whole {
            return Err(ProtoError::Truncated);
        }
        let m = self.metadata.unwrap_or_default();
        Ok(ListMeta {
            continue_: m.r#continue.filter(|s| !s.is_empty()),
            remaining_item_count: m.remaining_item_count,
            resource_version: m.resource_version.filter(|s| !s.is_empty()),
            self_link: m.self_link.filter(|s| !s.is_empty()),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_pb::api::core::v1 as pb;

    /// A whole list, its bytes fed `chunk` at a time (as the network hands them over).
    fn decode_chunked<K: ProtoListed>(
        body: &[u8],
        chunk: usize,
    ) -> Result<ObjectList<K>, ProtoError> {
        let mut splitter = ListSplitter::default();
        let mut raw = Vec::new();
        for part in body.chunks(chunk) {
            splitter.feed(part, |item| raw.push(item))?;
        }
        let metadata = splitter.finish()?;
        Ok(ObjectList {
            types: TypeMeta::default(),
            metadata,
            items: decode_items(raw)?,
        })
    }

    fn decode_list<K: ProtoListed>(body: &[u8]) -> Result<ObjectList<K>, ProtoError> {
        decode_chunked(body, body.len().max(1))
    }

    /// `msg` as the API server sends it: `k8s\0`, then a runtime.Unknown holding it.
    pub(crate) fn envelope(kind: &str, msg: &impl Message) -> Vec<u8> {
        let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some("v1".into()),
                kind: Some(kind.into()),
            }),
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
        let body = envelope("PodList", &list);
        let decoded = decode_list::<Lean<Pod>>(&body).expect("decodes");
        for chunk in 1..body.len() {
            let streamed = decode_chunked::<Lean<Pod>>(&body, chunk).expect("decodes");
            assert_eq!(
                (&streamed.metadata, &streamed.items),
                (&decoded.metadata, &decoded.items),
                "read {chunk} bytes at a time"
            );
        }
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
    fn a_protobuf_node_list_converts_to_what_the_same_nodes_json_decodes_to() {
        use k8s_openapi::api::core::v1::Node;
        let quantity = |s: &str| k8s_pb::apimachinery::pkg::api::resource::Quantity {
            string: Some(s.into()),
        };
        let time = |seconds| pb_meta::Time {
            seconds: Some(seconds),
            nanos: Some(0),
        };
        // As Go's protobuf encoding writes a node: every non-pointer field, zero or not.
        let node = pb::Node {
            metadata: Some(pb_meta::ObjectMeta {
                name: Some("n1".into()),
                resource_version: Some("9".into()),
                labels: [("pool".to_string(), "a".to_string())].into(),
                ..Default::default()
            }),
            spec: Some(pb::NodeSpec {
                unschedulable: Some(false),
                pod_cidr: Some(String::new()),
                taints: vec![pb::Taint {
                    key: Some("gpu".into()),
                    value: Some(String::new()),
                    effect: Some("NoSchedule".into()),
                    time_added: None,
                }],
                ..Default::default()
            }),
            status: Some(pb::NodeStatus {
                allocatable: [("cpu".to_string(), quantity("32"))].into(),
                capacity: [("pods".to_string(), quantity("110"))].into(),
                conditions: vec![pb::NodeCondition {
                    r#type: Some("Ready".into()),
                    status: Some("True".into()),
                    last_heartbeat_time: Some(time(0)),
                    last_transition_time: Some(time(1_700_000_000)),
                    reason: Some(String::new()),
                    message: Some(String::new()),
                }],
                addresses: vec![pb::NodeAddress {
                    r#type: Some("InternalIP".into()),
                    address: Some("10.0.0.1".into()),
                }],
                ..Default::default()
            }),
        };
        let body = envelope(
            "NodeList",
            &pb::NodeList {
                metadata: Some(pb_meta::ListMeta {
                    resource_version: Some("10".into()),
                    ..Default::default()
                }),
                items: vec![node],
            },
        );
        let decoded = decode_list::<Lean<Node>>(&body).expect("decodes");
        assert_eq!(decoded.metadata.resource_version.as_deref(), Some("10"));
        // The JSON Go writes for it: zero non-pointer fields left out (`omitempty`), a zero
        // time as null.
        let json: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "resourceVersion": "9", "labels": {"pool": "a"}},
            "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"cpu": "32"},
                "capacity": {"pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": null,
                                "lastTransitionTime": "2023-11-14T22:13:20Z"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]
            }
        }))
        .unwrap();
        assert_eq!(decoded.items.len(), 1);
        assert_eq!(decoded.items[0].0, json);
    }

    #[test]
    fn malformed_protobuf_is_an_error_not_a_panic() {
        let good = envelope(
            "PodList",
            &pb::PodList {
                metadata: None,
                items: vec![pb_pod("a")],
            },
        );
        assert!(matches!(
            decode_list::<Lean<Pod>>(b"{\"kind\":\"PodList\"}"),
            Err(ProtoError::NoPrefix)
        ));
        // Cut anywhere it is refused, never a panic — but for a cut exactly where the
        // envelope's content type (after the list's bytes) starts: the list is whole.
        let list_end = good.len() - (2 + PROTOBUF.len());
        for cut in 0..good.len() {
            let decoded = decode_list::<Lean<Pod>>(&good[..cut]);
            assert_eq!(
                decoded.is_ok(),
                cut == list_end,
                "cut at {cut} of {}",
                good.len()
            );
            let streamed = decode_chunked::<Lean<Pod>>(&good[..cut], 3);
            assert_eq!(
                streamed.is_ok(),
                cut == list_end,
                "cut at {cut}, 3 bytes at a time"
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
        let s = error_status(&envelope("Status", &status)).expect("decodes");
        assert_eq!(s.message, "pods is forbidden");
        assert_eq!(s.reason, "Forbidden");
    }
}
