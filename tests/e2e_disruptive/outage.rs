//! The API server stops answering mid-run (its process is paused with SIGSTOP, then resumed):
//! rust-batch must neither crash nor lose track, and must schedule again once it answers.
//! In the disruptive test binary, alone: pausing the API server would stall every other test.

use std::process::Command;
use std::time::Duration;

use crate::common::*;
use serde_json::json;

/// Resumes the API server however the test ends.
struct Resume(String);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0]).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_pause_mid_run_is_survived() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let pid = cluster_pid("APISERVER_PID");
    let (ns, pool, name) = ("e2e-outage", "e2e-outage", "rb-outage");
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, ns).await;
    fake_node(
        &client,
        "outage-n1",
        pool,
        json!({"cpu": "4", "memory": "8Gi"}),
    )
    .await;
    let mut scheduler = start_scheduler(name);
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    pod_group(&client, ns, "before", 1).await;
    place
        .pod("before", "before-0", "main", json!({"cpu": "1"}), None)
        .await;
    wait_for(
        Duration::from_secs(30),
        "a gang bound before the outage",
        || async { node_of(&check_invariants(&client, ns).await["before-0"]).map(|_| ()) },
    )
    .await;

    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let resume = Resume(pid);
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        scheduler.0.try_wait().unwrap().is_none(),
        "rust-batch exited while the API server was down"
    );
    drop(resume);

    pod_group(&client, ns, "after", 1).await;
    place
        .pod("after", "after-0", "main", json!({"cpu": "1"}), None)
        .await;
    wait_for(
        Duration::from_secs(60),
        "a gang bound after the outage",
        || async { node_of(&check_invariants(&client, ns).await["after-0"]).map(|_| ()) },
    )
    .await;
    assert!(
        scheduler.0.try_wait().unwrap().is_none(),
        "rust-batch still running"
    );
}
