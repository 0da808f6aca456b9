//! End-to-end with a real producer of Kubernetes' own gangs: the Job controller of
//! kube-controller-manager v1.37 with `WorkloadWithJob` (alpha) on. For a Job with
//! `spec.scheduling.schedulingPolicy.gang.minCount` it creates a `scheduling.k8s.io/v1beta1`
//! Workload and PodGroup and pods that join the PodGroup through
//! `spec.schedulingGroup.podGroupName`; rust-batch, unchanged, schedules them. The
//! controller runs as Kubernetes' own component (admin kubeconfig), the scheduler under the
//! chart's RBAC. Both invariants are checked on every poll. Without a cluster this test
//! fails; it never skips.

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use kube::Client;
use rust_batch::kube::dialects::native::NativePodGroup;
use serde_json::json;

/// kube-controller-manager running the Job controller only, with the gates that make it
/// create Workloads and PodGroups (the API server has them on: tests/cluster/up.sh), once
/// no other test runs a Job controller. Killed when dropped.
async fn gated_job_controller() -> JobController {
    job_controller(
        "kcm-job-controller",
        "GenericWorkload=true,WorkloadWithJob=true",
    )
    .await
}

/// A Job of `pods` pods (parallelism = completions) of `cpu` each for `scheduler`, on pool
/// `ns`'s nodes, gang-scheduled with minCount `pods` the Kubernetes way.
async fn gang_job(client: &Client, ns: &str, name: &str, scheduler: &str, pods: i32, cpu: &str) {
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "scheduling": {"schedulingPolicy": {"gang": {"minCount": pods}}},
            "template": {"spec": {
                "schedulerName": scheduler,
                "restartPolicy": "Never",
                "nodeSelector": {"pool": ns},
                "containers": [{"name": "main", "image": "busybox",
                                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]
            }}
        }
    }))
    .unwrap();
    Api::<Job>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &job)
        .await
        .expect("Job created (is WorkloadWithJob on in the API server?)");
}

/// The PodGroup the Job controller made for the Job's pods, with its gang minCount, once
/// `n` pods exist and every one names it.
async fn job_pod_group(client: &Client, ns: &str, n: usize) -> (String, i32) {
    wait_for(
        Duration::from_secs(60),
        "the Job controller's PodGroup and pods joining it",
        || async {
            let pods = check_invariants(client, ns).await;
            let names: std::collections::BTreeSet<String> = pods
                .values()
                .filter_map(|p| p.spec.as_ref()?.scheduling_group.as_ref())
                .filter_map(|g| g.pod_group_name.clone())
                .collect();
            if pods.len() != n || names.len() != 1 {
                return None;
            }
            let name = names.into_iter().next()?;
            let pg = Api::<NativePodGroup>::namespaced(client.clone(), ns)
                .get(&name)
                .await
                .ok()?;
            let min = pg.spec.scheduling_policy.gang.as_ref()?.min_count;
            Some((name, min))
        },
    )
    .await
}

/// A Job that does not fit waits whole — no pod bound while the PodGroup says
/// Unschedulable, and explain names the Workload and template its PodGroup was made from —
/// and binds whole once a node comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_gang_scheduled_by_the_job_controller_bind_whole() {
    let client = client().await;
    let scheduler = "rb-job-controller";
    let (_scheduler, port) = start_ready_scheduler(scheduler, &[]).await;
    let mut controller = gated_job_controller().await;
    let ns = "e2e-job-controller";
    namespace(&client, ns).await;
    for i in 0..2 {
        let node = format!("{ns}-{i}");
        fake_node(&client, &node, ns, json!({"cpu": "2", "memory": "8Gi"})).await;
        wait_node_ready(&client, &node, Duration::from_secs(30)).await;
    }

    // Six pods of one CPU on four CPUs: the gang waits whole.
    gang_job(&client, ns, "train", scheduler, 6, "1").await;
    let (group, min) = job_pod_group(&client, ns, 6).await;
    assert_eq!(min, 6, "the Job controller's gang minCount");
    let (status, reason, _) = wait_for(
        Duration::from_secs(30),
        "PodGroupInitiallyScheduled=False on the Job's PodGroup",
        || async {
            check_invariants(&client, ns).await;
            initially_scheduled(&client, ns, &group)
                .await
                .filter(|(s, _, _)| s == "False")
        },
    )
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unschedulable")
    );
    stays_unbound(&client, ns, 4).await;
    // The PodGroup's workloadRef, read with the Workload the controller made: explain
    // names both, and what the template says.
    let text = explain(port, &format!("{ns}/{group}"));
    assert!(
        text.contains(&format!("workload {ns}/train-"))
            && text.contains("template train-pgt-0: gang minCount 6"),
        "{text}"
    );
    assert!(
        controller.process.running(),
        "kube-controller-manager exited:\n{}",
        controller.process.log_tail(40)
    );

    // A third node: now the six fit, and all bind.
    let node = format!("{ns}-2");
    fake_node(&client, &node, ns, json!({"cpu": "2", "memory": "8Gi"})).await;
    all_bound(&client, ns, 6, "the whole Job bound").await;
    let (status, _, _) = wait_for(
        Duration::from_secs(30),
        "PodGroupInitiallyScheduled=True",
        || async {
            initially_scheduled(&client, ns, &group)
                .await
                .filter(|(s, _, _)| s == "True")
        },
    )
    .await;
    assert_eq!(status, "True");
}
