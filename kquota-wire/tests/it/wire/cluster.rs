//! Metadata (3) and DescribeCluster (60): this node as the only broker and the controller.

use super::*;

#[test]
fn metadata_names_this_node_as_broker_and_controller() {
    let h = handler();
    for version in 0..=12 {
        let req = if version == 0 {
            MetadataRequest::default().with_topics(Some(vec![]))
        } else {
            MetadataRequest::default().with_topics(None)
        };
        let resp: MetadataResponse = decode(&respond(&h, &frame(3, version, 4, &req)), version, 4);
        assert_eq!(resp.brokers.len(), 1, "v{version}");
        assert_eq!(*resp.brokers[0].node_id, 1);
        assert_eq!(resp.brokers[0].host.as_str(), "localhost");
        assert_eq!(resp.brokers[0].port, 9092);
        if version >= 1 {
            assert_eq!(*resp.controller_id, 1);
        }
        if version >= 2 {
            assert_eq!(resp.cluster_id.as_deref(), Some("kquota-test"));
        }
        assert!(resp.topics.is_empty());
        // A named topic is unknown.
        let named = MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(TopicName(s("t")))),
            MetadataRequestTopic::default().with_name(Some(TopicName(s("t")))),
        ]));
        let resp: MetadataResponse =
            decode(&respond(&h, &frame(3, version, 4, &named)), version, 4);
        assert_eq!(resp.topics.len(), 1);
        assert_eq!(resp.topics[0].error_code, 3);
        assert_eq!(resp.topics[0].name.as_ref().map(|n| n.as_str()), Some("t"));
    }
    // By topic id (v10+). kafka-protocol's Uuid is not nameable here, so patch the id's last byte
    // in the frame: header (13 bytes), the compact topic count (1), then the 16-byte id.
    let by_id = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(None)]));
    let by_id_frame = |version: i16| {
        let mut f = frame(3, version, 4, &by_id);
        f[13 + 1 + 15] = 1;
        f
    };
    // v12: the id is unknown.
    let resp: MetadataResponse = decode(&respond(&h, &by_id_frame(12)), 12, 4);
    assert_eq!(resp.topics.len(), 1);
    assert_eq!(resp.topics[0].error_code, 100);
    assert_eq!(resp.topics[0].name, None);
    assert!(!resp.topics[0].topic_id.is_nil());
    // v10: ids are not supported in requests: INVALID_REQUEST for every topic, nothing else.
    let resp: MetadataResponse = decode(&respond(&h, &by_id_frame(10)), 10, 4);
    assert_eq!(resp.topics[0].error_code, 42);
    assert!(resp.brokers.is_empty());
}

#[test]
fn describe_cluster_names_this_node() {
    let h = handler();
    for version in [0, 1] {
        let req =
            DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
        let resp: DescribeClusterResponse =
            decode(&respond(&h, &frame(60, version, 8, &req)), version, 8);
        assert_eq!(resp.error_code, 0);
        assert_eq!(resp.error_message, None);
        assert_eq!(resp.cluster_id.as_str(), "kquota-test");
        assert_eq!(*resp.controller_id, 1);
        assert_eq!(resp.brokers.len(), 1);
        assert_eq!(*resp.brokers[0].broker_id, 1);
        assert_eq!(resp.brokers[0].host.as_str(), "localhost");
        assert_eq!(resp.cluster_authorized_operations, 8096);
    }
    let controller = DescribeClusterRequest::default().with_endpoint_type(2);
    let resp: DescribeClusterResponse = decode(&respond(&h, &frame(60, 1, 8, &controller)), 1, 8);
    assert_eq!(resp.error_code, 114);
    let unknown = DescribeClusterRequest::default().with_endpoint_type(9);
    let resp: DescribeClusterResponse = decode(&respond(&h, &frame(60, 1, 8, &unknown)), 1, 8);
    assert_eq!(resp.error_code, 115);
    assert_eq!(
        resp.error_message.as_deref(),
        Some("Unsupported endpoint type 9")
    );
}
