use super::*;

fn slice(yaml: &str) -> ResourceSlice {
    crate::yaml::from_str(yaml).expect("slice YAML")
}

const NODE_SLICE: &str = "
metadata: {name: n0-gpu}
spec:
  driver: gpu.example.com
  nodeName: n0
  pool: {name: n0, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    attributes:
      clique: {string: c0}
      index: {int: 0}
      nvidia.com/brand: {string: nvidia}
    capacity:
      memory: {value: 80Gi}
  - name: gpu-1
    attributes:
      clique: {string: c0}
";

#[test]
fn a_node_slice_is_the_nodes_devices_with_qualified_names() {
    let (node, devices) = slice_devices(&slice(NODE_SLICE)).unwrap();
    assert_eq!(node, "n0");
    assert_eq!(devices.len(), 2);
    let d = &devices[0];
    assert_eq!(
        (&*d.driver, &*d.pool, &*d.name),
        ("gpu.example.com", "n0", "gpu-0")
    );
    assert_eq!(
        d.attributes["gpu.example.com/clique"],
        AttrValue::String("c0".into())
    );
    assert_eq!(d.attributes["gpu.example.com/index"], AttrValue::Int(0));
    assert_eq!(
        d.attributes["nvidia.com/brand"],
        AttrValue::String("nvidia".into())
    );
    assert_eq!(
        d.capacity["gpu.example.com/memory"],
        80 * (1i64 << 30) * 1000
    );
}

#[test]
fn a_network_attached_slice_is_left_out_by_name() {
    let s = slice(
        "
metadata: {name: fabric}
spec:
  driver: net.example.com
  allNodes: true
  pool: {name: fabric, generation: 1, resourceSliceCount: 1}
  devices: [{name: nic-0}]
",
    );
    let why = slice_devices(&s).unwrap_err();
    assert!(
        why.contains(
            "ResourceSlice fabric: pool fabric of driver net.example.com is network-attached"
        ),
        "{why}"
    );
    let (inv, left_out) = node_inventories(&[s, slice(NODE_SLICE)], &[]);
    assert_eq!(inv.keys().collect::<Vec<_>>(), ["n0"]);
    assert_eq!(left_out.len(), 1);
}

fn claim(yaml: &str) -> ResourceClaim {
    crate::yaml::from_str(yaml).expect("claim YAML")
}

#[test]
fn claims_convert_requests_alternatives_and_constraints() {
    let c = claim(
        r#"
metadata: {name: c, namespace: ns}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu
        count: 2
        selectors: [{cel: {expression: 'device.attributes["gpu.example.com"].model == "h100"'}}]
    - name: nic
      firstAvailable:
      - {name: fast, deviceClassName: nic, allocationMode: All}
      - {name: slow, deviceClassName: nic}
    constraints:
    - {matchAttribute: gpu.example.com/clique, requests: [gpu]}
"#,
    );
    let spec = claim_spec("ns/c", c.spec.as_ref().unwrap()).unwrap();
    assert_eq!(spec.requests.len(), 2);
    let gpu = &spec.requests[0].choices[0];
    assert_eq!(gpu.mode, AllocationMode::ExactCount(2));
    assert_eq!(gpu.selectors.len(), 1);
    let nic = &spec.requests[1].choices;
    assert_eq!(nic[0].name, "fast");
    assert_eq!(nic[0].mode, AllocationMode::All);
    assert_eq!(nic[1].mode, AllocationMode::ExactCount(1));
    assert_eq!(
        spec.constraints,
        vec![MatchAttribute {
            requests: vec!["gpu".into()],
            attribute: "gpu.example.com/clique".into()
        }]
    );
}

#[test]
fn what_the_engine_does_not_model_is_named() {
    let c = claim(
        "
metadata: {name: c, namespace: ns}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu}}]
    constraints: [{distinctAttribute: gpu.example.com/index}]
",
    );
    assert_eq!(
        claim_spec("ns/c", c.spec.as_ref().unwrap()).unwrap_err(),
        "claim ns/c: distinctAttribute constraints are not supported by rust-batch"
    );
    let c = claim(
        "
metadata: {name: c, namespace: ns}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu, adminAccess: true}}]
",
    );
    assert_eq!(
        claim_spec("ns/c", c.spec.as_ref().unwrap()).unwrap_err(),
        "claim ns/c: request gpu: adminAccess is not supported by rust-batch"
    );
}

#[test]
fn an_allocation_round_trips_through_the_status_patch() {
    let alloc = ClaimAllocation {
        node: "n0".into(),
        devices: vec![AllocatedDevice {
            request: "gpu".into(),
            driver: "gpu.example.com".into(),
            pool: "n0".into(),
            device: "gpu-1".into(),
        }],
    };
    let patch = allocation_patch(&alloc, "p", "uid-1");
    assert_eq!(patch["status"]["reservedFor"][0]["uid"], "uid-1");
    let mut c = claim("metadata: {name: c, namespace: ns}\nspec: {}\n");
    c.status = Some(serde_json::from_value(patch["status"].clone()).unwrap());
    assert_eq!(claim_allocation(&c), Some(alloc));
    // Read back with the slices, the claim's devices are held on its node.
    let (inv, _) = node_inventories(&[slice(NODE_SLICE)], &[c]);
    assert_eq!(inv["n0"].allocated[&Arc::<str>::from("ns/c")], vec![1]);
    assert_eq!(inv["n0"].initial_holds(), vec![0, 1]);
}

#[test]
fn a_network_attached_pool_reaches_the_nodes_it_selects_and_holds_once() {
    let fabric = slice(
        "
metadata: {name: fabric}
spec:
  driver: net.example.com
  nodeSelector:
    nodeSelectorTerms:
    - matchExpressions: [{key: example.com/rack, operator: In, values: [a]}]
  pool: {name: fabric, generation: 1, resourceSliceCount: 1}
  devices: [{name: nic-0}, {name: nic-1}]
",
    );
    let reach = pool_devices(&fabric).unwrap();
    assert_eq!(reach.len(), 2);
    let rack = |r: &str| BTreeMap::from([("example.com/rack".to_string(), r.to_string())]);
    let nodes = BTreeMap::from([
        ("n0".to_string(), rack("a")),
        ("a1".to_string(), rack("a")),
        ("b0".to_string(), rack("b")),
    ]);
    // nic-1 is allocated (by anyone, with whatever node selector).
    let mut c = claim("metadata: {name: c, namespace: ns}\nspec: {}\n");
    c.status = Some(
        serde_json::from_value(serde_json::json!({"allocation": {"devices": {"results": [
            {"request": "nic", "driver": "net.example.com", "pool": "fabric", "device": "nic-1"}
        ]}}}))
        .unwrap(),
    );
    let (inv, left_out) =
        cluster_inventories(&[fabric.clone(), slice(NODE_SLICE)], &[c], Some(&nodes));
    assert!(left_out.is_empty(), "{left_out:?}");
    assert_eq!(inv.keys().collect::<Vec<_>>(), ["a1", "n0"]);
    // n0: its two GPUs, then the two NICs; a1: the NICs only. nic-1 held on both.
    assert_eq!(inv["n0"].devices.len(), 4);
    assert_eq!(inv["n0"].shared, vec![false, false, true, true]);
    assert_eq!(inv["n0"].initial_holds(), vec![0, 0, 0, 1]);
    assert_eq!(inv["a1"].initial_holds(), vec![0, 1]);
    // Without the nodes' labels the pool is left out, by name.
    let (inv, left_out) = node_inventories(&[fabric], &[]);
    assert!(inv.is_empty());
    assert!(left_out[0].contains("network-attached"), "{left_out:?}");
}

#[test]
fn per_device_node_selection_and_a_device_that_says_nowhere() {
    let s = slice(
        "
metadata: {name: mixed}
spec:
  driver: net.example.com
  perDeviceNodeSelection: true
  pool: {name: mixed, generation: 1, resourceSliceCount: 1}
  devices:
  - {name: d0, nodeName: n0}
  - {name: d1, allNodes: true}
",
    );
    let reach: Vec<DeviceReach> = pool_devices(&s)
        .unwrap()
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert_eq!(
        reach,
        vec![DeviceReach::Node("n0".into()), DeviceReach::AllNodes]
    );
    let bad = slice(
        "
metadata: {name: bad}
spec:
  driver: net.example.com
  perDeviceNodeSelection: true
  pool: {name: bad, generation: 1, resourceSliceCount: 1}
  devices: [{name: d0}]
",
    );
    let why = pool_devices(&bad).unwrap_err();
    assert!(
        why.starts_with("ResourceSlice bad: device d0 says no node"),
        "{why}"
    );
}

#[test]
fn partitions_draw_on_their_pools_counter_sets() {
    let s = slice(
        "
metadata: {name: n0-mig}
spec:
  driver: gpu.example.com
  nodeName: n0
  pool: {name: n0, generation: 1, resourceSliceCount: 1}
  sharedCounters:
  - name: gpu-0
    counters: {memory: {value: 40Gi}}
  devices:
  - name: gpu-0-mig-1g
    consumesCounters:
    - counterSet: gpu-0
      counters: {memory: {value: 5Gi}}
  - name: gpu-0-full
    consumesCounters:
    - counterSet: gpu-0
      counters: {memory: {value: 40Gi}}
",
    );
    let sets = slice_counter_sets(&s);
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0].counters["memory"], 40 * (1i64 << 30) * 1000);
    let (inv, _) = node_inventories(&[s], &[]);
    let n0 = &inv["n0"];
    assert_eq!(n0.devices[0].consumes[0].counter_set, "gpu-0");
    assert_eq!(
        n0.devices[0].consumes[0].counters["memory"],
        5 * (1i64 << 30) * 1000
    );
    let key = (
        Arc::from("gpu.example.com"),
        Arc::from("n0"),
        "gpu-0".to_string(),
    );
    assert!(n0.counters.contains_key(&key));
}
