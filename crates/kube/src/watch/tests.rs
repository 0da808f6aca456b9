use super::*;
use ::kube::client::Body;
use ::kube::{Client, ResourceExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_pb::api::core::v1 as pb;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;

use crate::lean::Lean;

/// A client whose API server is `answer`: (status code, content type, body) for a
/// request's query string.
fn answering(
    answer: impl Fn(&str) -> (u16, &'static str, Vec<u8>) + Send + Sync + 'static,
) -> Client {
    answering_as("v1.37.2", move |query, _| answer(query))
}

/// A client whose API server says it is `version` (`/version`) and answers every other
/// request (its query and Accept header) with `answer`.
fn answering_as(
    version: &'static str,
    answer: impl Fn(&str, &str) -> (u16, &'static str, Vec<u8>) + Send + Sync + 'static,
) -> Client {
    let answer = Arc::new(answer);
    let service = tower::service_fn(move |req: http::Request<Body>| {
        let (code, content_type, body) = if req.uri().path() == "/version" {
            let minor = version.split('.').nth(1).unwrap_or_default();
            let info = serde_json::json!({"major": "1", "minor": minor, "gitVersion": version});
            (200, "application/json", info.to_string().into_bytes())
        } else {
            let accept = req.headers().get(http::header::ACCEPT);
            let accept = accept.and_then(|v| v.to_str().ok()).unwrap_or_default();
            answer(req.uri().query().unwrap_or(""), accept)
        };
        async move {
            http::Response::builder()
                .status(code)
                .header(http::header::CONTENT_TYPE, content_type)
                .body(Body::from(body))
        }
    });
    Client::new(service, "default")
}

/// A page of bare pods as the API server sends it in protobuf.
fn page(names: &[String], continue_token: &str, version: &str) -> (u16, &'static str, Vec<u8>) {
    let list = pb::PodList {
        metadata: Some(pb_meta::ListMeta {
            resource_version: Some(version.into()),
            r#continue: Some(continue_token.into()),
            ..Default::default()
        }),
        items: names
            .iter()
            .map(|name| pb::Pod {
                metadata: Some(pb_meta::ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some("ns".into()),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
    };
    (
        200,
        "application/vnd.kubernetes.protobuf",
        proto::tests::envelope("PodList", &list),
    )
}

/// Steps a protobuf listing from scratch until its list is in or fails: the names
/// handed out, the error if any, and where it stopped.
async fn list_through(
    api: &Api<Lean<Pod>>,
) -> (Vec<String>, Option<watcher::Error>, Listing<Lean<Pod>>) {
    let mut state = Listing::Empty;
    let mut names = Vec::new();
    loop {
        let (event, next) = state.step(api, Some(5000)).await;
        state = next;
        match event {
            Ok(Event::Init) => assert!(names.is_empty(), "a list starts once"),
            Ok(Event::InitApply(pod)) => names.push(pod.name_any()),
            Ok(Event::InitDone) => return (names, None, state),
            Ok(_) => panic!("a watch event before the list was in"),
            Err(e) => return (names, Some(e), state),
        }
    }
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

#[tokio::test]
async fn a_protobuf_listing_hands_out_every_page_in_order_then_watches_from_its_version() {
    // The first page is more than one decoding batch, handed out as each is decoded.
    let first = names("a", proto::DECODE_BATCH * 2 + 7);
    let second = names("b", 3);
    let (p1, p2) = (first.clone(), second.clone());
    let api = Api::all(answering(move |query| {
        assert!(query.contains("limit=5000"), "{query}");
        if query.contains("continue=next") {
            page(&p2, "", "9")
        } else {
            page(&p1, "next", "8")
        }
    }));
    let (listed, error, state) = list_through(&api).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(listed, [first, second].concat());
    assert!(
        matches!(&state, Listing::Listed(version) if version == "9"),
        "watches from the last page's version"
    );
}

/// A server newer than the protos may send fields they lack: its pods are listed in
/// JSON, every page; one of the protos' version, in protobuf.
#[tokio::test]
async fn a_server_newer_than_the_protos_is_listed_in_json() {
    let json_page = |names: &[&str], continue_token: &str| {
        let items: Vec<_> = names
            .iter()
            .map(|n| serde_json::json!({"metadata": {"name": n, "namespace": "ns"}}))
            .collect();
        let mut list = serde_json::json!({"kind": "PodList", "apiVersion": "v1",
                "items": items, "metadata": {"resourceVersion": "8"}});
        if !continue_token.is_empty() {
            list["metadata"]["continue"] = continue_token.into();
        }
        (200, "application/json", list.to_string().into_bytes())
    };
    let api = Api::all(answering_as("v1.38.0", move |query, accept| {
        assert_eq!(accept, "application/json", "{query}");
        if query.contains("continue=next") {
            json_page(&["b"], "")
        } else {
            json_page(&["a"], "next")
        }
    }));
    let (listed, error, _) = list_through(&api).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(listed, ["a", "b"]);

    let pods = names("p", 2);
    let api = Api::all(answering_as("v1.33.13", move |query, accept| {
        assert!(
            accept.starts_with("application/vnd.kubernetes.protobuf"),
            "{query}"
        );
        page(&pods, "", "8")
    }));
    let (listed, error, _) = list_through(&api).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(listed, names("p", 2));
}

#[tokio::test]
async fn a_page_refused_mid_list_fails_the_list_and_the_next_step_lists_again() {
    let first = names("a", 10);
    let p1 = first.clone();
    let api = Api::all(answering(move |query| {
        if query.contains("continue=next") {
            let expired = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old","reason":"Expired","code":410}"#;
            (410, "application/json", expired.to_vec())
        } else {
            page(&p1, "next", "8")
        }
    }));
    let (listed, error, state) = list_through(&api).await;
    assert_eq!(listed, first, "the first page was handed out");
    assert!(
        matches!(&error, Some(watcher::Error::InitialListFailed(::kube::Error::Api(s))) if s.code == 410),
        "{error:?}"
    );
    assert!(
        matches!(state, Listing::Empty),
        "lists again from the start"
    );
}

fn feed(optional: Option<&'static str>) -> Feed<k8s_openapi::api::core::v1::Pod, ()> {
    Feed {
        kind: "K",
        optional,
        apply: |_, _| Wake::Now,
        delete: |_, _| {},
        known: |_| vec![],
    }
}

#[test]
fn a_missing_optional_kind_is_off_without_holding_cycles_and_on_once_a_list_answers() {
    let mut readiness = Readiness::default();
    let optional = feed(Some("this dialect"));
    let mut unlisted = Unlisted::default();
    readiness.expect("K");
    assert!(!unlisted.off(&optional));
    assert_eq!(unlisted.refused(&optional, 404, &mut readiness), CRD_POLL);
    assert!(readiness.complete(), "a missing CRD must not hold cycles");
    assert!(
        unlisted.off(&optional),
        "the next list attempt keeps it off"
    );
    // The CRD is installed: the first answer holds cycles until the list is in.
    unlisted.listable(&optional, &mut readiness);
    assert!(!unlisted.off(&optional));
    assert_eq!(readiness.waiting_for(), vec!["K"]);
}

#[test]
fn a_kind_scheduling_needs_holds_cycles_while_forbidden_and_backs_off() {
    let mut readiness = Readiness::default();
    let required = feed(None);
    let mut unlisted = Unlisted::default();
    readiness.expect("K");
    let first = unlisted.refused(&required, 403, &mut readiness);
    let mut later = first;
    for _ in 0..6 {
        later = unlisted.refused(&required, 403, &mut readiness);
    }
    assert!(!unlisted.off(&required));
    assert_eq!(readiness.waiting_for(), vec!["K"], "no cycle without it");
    assert!(later > first, "refusals back off: {first:?} then {later:?}");
    // Capped at a minute, plus up to as much again of jitter.
    assert!(later <= Duration::from_secs(120), "{later:?}");
}

#[test]
fn statuses_are_read_from_every_failure_that_carries_one() {
    let status = |code| ::kube::core::Status {
        code,
        ..Default::default()
    };
    let api = |code| ::kube::Error::Api(Box::new(status(code)));
    assert_eq!(
        status_of(&watcher::Error::InitialListFailed(api(429))),
        Some(429)
    );
    assert_eq!(
        status_of(&watcher::Error::WatchStartFailed(api(410))),
        Some(410)
    );
    assert_eq!(status_of(&watcher::Error::WatchFailed(api(503))), Some(503));
    assert_eq!(
        status_of(&watcher::Error::WatchError(Box::new(status(410)))),
        Some(410)
    );
    assert!(expired(&watcher::Error::WatchError(Box::new(status(410)))));
    assert!(!expired(&watcher::Error::InitialListFailed(api(429))));
    assert_eq!(status_of(&watcher::Error::NoResourceVersion), None);
}
