//! `rust-batch explain`: a gang as the live scheduler sees it, from its debug endpoint.

use std::process::ExitCode;

use anyhow::Context;

/// GET a path from the scheduler's HTTP endpoint: (status, body). Plain HTTP/1.0 on the
/// loopback or cluster network; the debug API needs nothing more.
fn http_get(server: &str, path: &str) -> anyhow::Result<(u16, String)> {
    use std::io::{Read, Write};
    let hostport = server.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(hostport)
        .with_context(|| format!("cannot reach rust-batch at {server} (is `rust-batch run --http-address` serving there?)"))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("{server} did not answer HTTP"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

pub fn explain(gang: &str, server: &str) -> anyhow::Result<ExitCode> {
    let Some((ns, name)) = gang.split_once('/') else {
        anyhow::bail!("{gang:?}: write the gang as NAMESPACE/NAME");
    };
    let (status, body) = http_get(
        server,
        &format!("/apis/v1/plugins/Coscheduling/gang/{ns}/{name}"),
    )?;
    let v: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("unexpected answer: {body}"))?;
    if status != 200 {
        anyhow::bail!("{}", v["error"].as_str().unwrap_or(&body));
    }
    let list = |k: &str| v[k].as_array().map(|a| a.len()).unwrap_or(0);
    println!(
        "gang {} ({}, mode {}, queue {}, phase {}): {}/{} bound, minMember {}",
        v["name"].as_str().unwrap_or(gang),
        v["dialect"].as_str().unwrap_or("?"),
        v["mode"].as_str().unwrap_or("?"),
        v["queue"].as_str().unwrap_or("?"),
        v["phase"].as_str().unwrap_or("?"),
        list("boundChildren"),
        v["totalChildrenNum"],
        v["minRequiredNumber"]
    );
    if let Some(workload) = v["workload"].as_str() {
        println!("{workload}");
    }
    if list("gangGroup") > 1 {
        let members: Vec<&str> = v["gangGroup"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str())
            .collect();
        println!("gang group (binds only together): {}", members.join(", "));
    }
    if let Some(wait) = v["waitTime"].as_str() {
        let since = v["waitingSince"]
            .as_str()
            .map(|t| format!(", waiting since {t}"));
        let backoff = v["backoffUntil"]
            .as_str()
            .map(|t| format!(", backing off until {t}"));
        println!(
            "waiting time {wait}{}{}",
            since.unwrap_or_default(),
            backoff.unwrap_or_default()
        );
    }
    if let Some(c) = v["condition"].as_object() {
        let message = c["message"].as_str().unwrap_or("");
        println!(
            "{} ({}): {}",
            c["type"].as_str().unwrap_or(""),
            c["reason"].as_str().unwrap_or(""),
            message
        );
        // The part of the message `rust-batch run --predict-start` adds, on a line of its own.
        if let Some(at) = message.rfind("start predicted") {
            println!("{}", &message[at..]);
        }
    }
    let bound: Vec<&str> = v["boundChildren"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str())
        .collect();
    for child in v["children"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str())
    {
        let why = v["pending"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["pod"] == child)
            .and_then(|p| p["reason"].as_str());
        let placed = v["waitingForBindChildren"]
            .as_array()
            .is_some_and(|w| w.iter().any(|x| x == child));
        match (bound.contains(&child), why) {
            (true, _) => println!("  {child}: bound"),
            (false, Some(why)) => println!("  {child}: pending: {why}"),
            (false, None) if placed => {
                println!("  {child}: placed, held until the whole gang fits (or binding)")
            }
            (false, None) => println!("  {child}: not yet considered"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
