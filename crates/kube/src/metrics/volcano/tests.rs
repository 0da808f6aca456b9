use super::*;
use crate::framework::Bind;
use crate::metrics::{CycleTimer, Metrics};
use crate::model::TaskStatus;
use crate::testkit::*;

/// A series' value (a histogram's sample count), if the series exists.
fn sample(m: &VolcanoMetrics, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let families: Vec<_> = m.collectors().iter().flat_map(|c| c.collect()).collect();
    let family = families.iter().find(|f| f.name() == name)?;
    let series = family.get_metric().iter().find(|s| {
        let have: BTreeMap<&str, &str> = s
            .get_label()
            .iter()
            .map(|l| (l.name(), l.value()))
            .collect();
        have == want
    })?;
    Some(match family.get_field_type() {
        MetricType::HISTOGRAM => series.get_histogram().get_sample_count() as f64,
        MetricType::COUNTER => series.get_counter().get_value(),
        _ => series.get_gauge().get_value(),
    })
}

const GIB: i64 = 1 << 30;

/// One 8-cpu, 32Gi, 4-GPU node; queue `q` (capability 3 cpu, 2 GPUs) with gang `train`
/// (2 of 3 pods running, 1 cpu and 1 GPU each) and gang `big` (one pending 4-cpu pod).
fn cluster() -> crate::cache::Cache {
    let mut cache = cache_with_default_queue();
    let mut q = queue("q", 2);
    q.capability = Some(res(&[("cpu", "3"), ("nvidia.com/gpu", "2")]));
    cache.apply_queue(q);
    add_nodes(
        &mut cache,
        "n",
        1,
        &[("cpu", "8"), ("memory", "32Gi"), ("nvidia.com/gpu", "4")],
    );
    Gang::new("train", 3)
        .queue("q")
        .created(10_000)
        .tasks("", 3, &[("cpu", "1"), ("nvidia.com/gpu", "1")])
        .running_on(&["n-00000", "n-00000"])
        .apply(&mut cache);
    Gang::new("big", 1)
        .queue("q")
        .created(20_000)
        .tasks("", 1, &[("cpu", "4")])
        .apply(&mut cache);
    cache
}

#[test]
fn buckets_are_volcanos() {
    let b = exponential_buckets_range(1.0, 5000.0, 20);
    assert_eq!(b.len(), 20);
    assert_eq!(b[0], 1.0);
    assert!((b[19] - 5000.0).abs() < 1e-9);
    assert!(b.windows(2).all(|w| w[1] > w[0]));
}

#[test]
fn queue_accounts_by_volcanos_names_and_units() {
    let cache = cluster();
    let m = VolcanoMetrics::new().unwrap();
    for plugin in ["proportion", "capacity"] {
        let conf = conf(Some(&format!(
            "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: {plugin}\n"
        )));
        m.observe_queues(cache.state(), &conf, None);
        let q = ("queue_name", "q");
        let gpu = ("resource", "nvidia.com/gpu");
        let v =
            |name: &str, labels: &[(&str, &str)]| sample(&m, &format!("volcano_{name}"), labels);
        assert_eq!(
            v("queue_allocated_milli_cpu", &[q]),
            Some(2000.0),
            "{plugin}"
        );
        assert_eq!(
            v("queue_allocated_scalar_resources", &[q, gpu]),
            Some(2000.0)
        );
        // Placed and pending pods: 3 × 1 cpu and 4 cpu.
        assert_eq!(v("queue_request_milli_cpu", &[q]), Some(7000.0), "{plugin}");
        assert_eq!(v("queue_request_scalar_resources", &[q, gpu]), Some(3000.0));
        assert_eq!(v("queue_request_memory_bytes", &[q]), Some(0.0));
        // The capability as written: memory is not named, so no limit and no series.
        assert_eq!(v("queue_capacity_milli_cpu", &[q]), Some(3000.0));
        assert_eq!(v("queue_capacity_memory_bytes", &[q]), None, "{plugin}");
        assert_eq!(
            v("queue_capacity_scalar_resources", &[q, gpu]),
            Some(2000.0)
        );
        // What it may hold: the cluster, lowered to the capability where it names one.
        assert_eq!(
            v("queue_real_capacity_milli_cpu", &[q]),
            Some(3000.0),
            "{plugin}"
        );
        assert_eq!(
            v("queue_real_capacity_memory_bytes", &[q]),
            Some((32 * GIB) as f64),
            "{plugin}"
        );
        assert_eq!(
            v("queue_real_capacity_scalar_resources", &[q, gpu]),
            Some(2000.0)
        );
        assert_eq!(v("queue_weight", &[q]), Some(2.0));
        assert!(v("queue_deserved_milli_cpu", &[q]).is_some());
        assert!(v("queue_share", &[q]).is_some());
        // The default queue has no capability: no capacity series at all.
        let d = ("queue_name", "default");
        assert_eq!(v("queue_capacity_milli_cpu", &[d]), None);
        assert_eq!(
            v("queue_real_capacity_milli_cpu", &[d]),
            Some(8000.0),
            "{plugin}"
        );
    }
    // A queue gone takes its series along.
    let mut cache = cache;
    cache.delete_job("default/train");
    cache.delete_job("default/big");
    cache.delete_queue("q");
    m.observe_queues(cache.state(), &conf(None), None);
    let q = [("queue_name", "q")];
    assert_eq!(sample(&m, "volcano_queue_allocated_milli_cpu", &q), None);
    assert_eq!(sample(&m, "volcano_queue_capacity_milli_cpu", &q), None);
    assert_eq!(sample(&m, "volcano_queue_share", &q), None);
    assert_eq!(
        sample(
            &m,
            "volcano_queue_real_capacity_scalar_resources",
            &[("queue_name", "q"), ("resource", "nvidia.com/gpu")]
        ),
        None
    );
}

#[test]
fn gangs_short_of_their_minimum_as_volcanos_gang_plugin_counts_them() {
    let mut cache = cluster();
    let m = VolcanoMetrics::new().unwrap();
    m.observe_jobs(cache.state(), &conf(None));
    let count = |job: &str| sample(&m, "volcano_unschedule_task_count", &[("job_id", job)]);
    assert_eq!(count("train"), Some(1.0), "2 of 3 placed");
    assert_eq!(count("big"), Some(1.0));
    assert_eq!(sample(&m, "volcano_unschedule_job_count", &[]), Some(2.0));
    let train = [
        ("job_name", "train"),
        ("queue", "q"),
        ("job_namespace", "default"),
    ];
    assert_eq!(
        sample(&m, "volcano_e2e_job_scheduling_start_time", &train),
        Some(10.0),
        "the PodGroup's creation, unix seconds"
    );
    // drf is configured by default: the dominant share, 2 of 4 GPUs.
    assert_eq!(
        sample(
            &m,
            "volcano_job_share",
            &[("job_ns", "default"), ("job_id", "train")]
        ),
        Some(0.5)
    );
    cache.set_pod_status(
        "default/train-2",
        TaskStatus::Running,
        Some("n-00000".into()),
    );
    cache.delete_job("default/big");
    m.observe_jobs(cache.state(), &conf(None));
    assert_eq!(count("train"), Some(0.0), "whole: 0, as Volcano sets it");
    assert_eq!(count("big"), None, "gone");
    assert_eq!(sample(&m, "volcano_unschedule_job_count", &[]), Some(0.0));
    cache.delete_job("default/train");
    m.observe_jobs(cache.state(), &conf(None));
    assert_eq!(
        sample(&m, "volcano_e2e_job_scheduling_start_time", &train),
        None
    );
}

#[test]
fn a_gang_gone_leaves_the_count_of_another_of_its_name() {
    let mut cache = cluster();
    let mut other = Gang::new("train", 2)
        .queue("q")
        .created(30_000)
        .tasks("", 2, &[("cpu", "1")]);
    other.spec.namespace = "other".into();
    other.spec.uid = "other/train".into();
    for t in &mut other.tasks {
        t.namespace = Arc::from("other");
        t.uid = Arc::from(format!("other/{}", t.name));
    }
    other.apply(&mut cache);
    let m = VolcanoMetrics::new().unwrap();
    m.observe_jobs(cache.state(), &conf(None));
    cache.delete_job("default/train");
    m.observe_jobs(cache.state(), &conf(None));
    assert_eq!(
        sample(&m, "volcano_unschedule_task_count", &[("job_id", "train")]),
        Some(2.0),
        "other/train's, both pods pending"
    );
    let gone = [
        ("job_name", "train"),
        ("queue", "q"),
        ("job_namespace", "default"),
    ];
    assert_eq!(
        sample(&m, "volcano_e2e_job_scheduling_start_time", &gone),
        None
    );
    let kept = [
        ("job_name", "train"),
        ("queue", "q"),
        ("job_namespace", "other"),
    ];
    assert_eq!(
        sample(&m, "volcano_e2e_job_scheduling_start_time", &kept),
        Some(30.0)
    );
}

#[test]
fn placing_a_gang_sets_its_scheduling_duration_once_per_cycle() {
    let cache = cluster();
    let m = VolcanoMetrics::new().unwrap();
    let bind = |task: &str| Bind {
        job: Arc::from("default/train"),
        task: Arc::from(format!("default/{task}")),
        namespace: Arc::from("default"),
        name: Arc::from(task),
        node: Arc::from("n-00000"),
        claims: Arc::from([]),
    };
    m.observe_assumed(&cache, &[bind("train-0"), bind("train-1")], 12_500);
    let train = [
        ("job_name", "train"),
        ("queue", "q"),
        ("job_namespace", "default"),
    ];
    assert_eq!(
        sample(&m, "volcano_e2e_job_scheduling_duration", &train),
        Some(2500.0)
    );
    assert_eq!(
        sample(&m, "volcano_e2e_job_scheduling_last_time", &train),
        Some(12.0)
    );
    assert_eq!(
        sample(&m, "volcano_e2e_job_scheduling_latency_milliseconds", &[]),
        Some(1.0),
        "one observation per gang"
    );
    assert_eq!(
        sample(
            &m,
            "volcano_task_scheduling_latency_milliseconds",
            &[("stage", "Assumed")]
        ),
        Some(2.0),
        "one per pod"
    );
    m.observe_pre_bound(&cache, &[bind("train-0")], &[700], 13_000);
    assert_eq!(
        sample(
            &m,
            "volcano_task_scheduling_latency_milliseconds",
            &[("stage", "PreBound")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &m,
            "volcano_scheduling_stage_duration_milliseconds",
            &[("stage", "PreBind")]
        ),
        Some(1.0)
    );
}

#[test]
fn a_cycle_times_each_plugins_session_hooks() {
    let mut cache = cluster();
    cache.delete_job("default/big");
    let metrics = Metrics::new().unwrap();
    let scheduler = scheduler(None);
    let mut timer = CycleTimer::start(&metrics, Duration::ZERO);
    scheduler.run_cycle_traced(cache.snapshot(), 0, &mut timer);
    timer.finish();
    let m = &metrics.volcano;
    let plugin = "volcano_plugin_scheduling_latency_milliseconds";
    for name in ["priority", "gang", "drf", "proportion", "gpu-affinity"] {
        for hook in ["OnSessionOpen", "OnSessionClose"] {
            assert_eq!(
                sample(m, plugin, &[("plugin", name), ("OnSession", hook)]),
                Some(1.0),
                "{name} {hook}"
            );
        }
    }
    for action in ["enqueue", "allocate", "backfill"] {
        assert_eq!(
            sample(
                m,
                "volcano_action_scheduling_latency_milliseconds",
                &[("action", action)]
            ),
            Some(1.0)
        );
    }
    assert_eq!(
        sample(m, "volcano_open_session_duration_milliseconds", &[]),
        Some(1.0)
    );
    assert_eq!(
        sample(m, "volcano_e2e_scheduling_latency_milliseconds", &[]),
        Some(1.0)
    );
}

#[test]
fn the_catalogue_lists_every_registered_metric() {
    let names: Vec<String> = VolcanoMetrics::catalogue()
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    let metrics = Metrics::new().unwrap();
    // Every family served (those with a series already) is in the catalogue.
    for line in metrics.render().lines() {
        if let Some(rest) = line.strip_prefix("# TYPE volcano_") {
            let name = format!("volcano_{}", rest.split(' ').next().unwrap());
            assert!(names.contains(&name), "{name}");
        }
    }
    let plugin = VolcanoMetrics::catalogue()
        .unwrap()
        .into_iter()
        .find(|m| m.name == "volcano_plugin_scheduling_latency_milliseconds")
        .unwrap();
    assert_eq!(plugin.kind, "histogram");
    assert_eq!(plugin.labels, ["plugin", "OnSession"]);
    assert_eq!(plugin.buckets.len(), 15);
}

#[test]
fn deserved_shares_are_weighed_by_usage_as_proportion_weighs_them() {
    // Queues a and b of equal weight, each asking more than half of an 8-cpu node; a ran
    // the whole node for a long while, b nothing.
    let mut cache = cache_with_default_queue();
    cache.apply_queue(queue("a", 1));
    cache.apply_queue(queue("b", 1));
    add_nodes(&mut cache, "n", 1, &[("cpu", "8"), ("memory", "32Gi")]);
    for q in ["a", "b"] {
        Gang::new(&format!("{q}-job"), 1)
            .queue(q)
            .tasks("", 6, &[("cpu", "1")])
            .apply(&mut cache);
    }
    let mut usage = crate::framework::UsageLedger::new(3_600_000);
    let amounts = [("cpu".to_string(), 8000.0)].into_iter().collect();
    usage.set("a", crate::model::QueueUsage { at: 0, amounts });
    let deserved = |half_life: Option<&str>, usage: Option<&crate::framework::UsageLedger>| {
        let arguments = half_life.map_or(String::new(), |h| {
            format!("    arguments: {{usageHalfLife: {h}}}\n")
        });
        let conf = conf(Some(&format!(
            "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: proportion\n{arguments}"
        )));
        let m = VolcanoMetrics::new().unwrap();
        m.observe_queues(cache.state(), &conf, usage);
        let of =
            |q: &str| sample(&m, "volcano_queue_deserved_milli_cpu", &[("queue_name", q)]).unwrap();
        (of("a"), of("b"))
    };
    // Off: the weights alone, 4 cpu each, whatever usage the scheduler kept.
    assert_eq!(deserved(None, Some(&usage)), (4000.0, 4000.0));
    // On: b, which used nothing, deserves more than a, and the two still share the node.
    let (a, b) = deserved(Some("1h"), Some(&usage));
    assert!(b > a, "a {a}, b {b}");
    assert!((a + b - 8000.0).abs() < 1.0, "a {a}, b {b}");
    // On, but no usage yet: the weights.
    assert_eq!(deserved(Some("1h"), None), (4000.0, 4000.0));
}
