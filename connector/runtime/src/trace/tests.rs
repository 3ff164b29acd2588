use super::*;

const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

#[test]
fn a_valid_traceparent_is_the_parent_and_others_are_ignored() {
    let cx = extract([
        ("TraceParent", PARENT),
        ("tracestate", "congo=t61rcWkgMzE"),
        ("authorization", "Bearer secret"),
    ]);
    let span = cx.span();
    let sc = span.span_context();
    assert!(sc.is_valid() && sc.is_remote());
    assert_eq!(
        sc.trace_id().to_string(),
        "0af7651916cd43dd8448eb211c80319c"
    );
    let passed = fields(&cx);
    assert_eq!(passed[TRACEPARENT], PARENT);
    assert_eq!(passed[TRACESTATE], "congo=t61rcWkgMzE");
    assert!(!passed.contains_key("authorization"));
}

#[test]
fn a_malformed_traceparent_carries_nothing() {
    for bad in [
        "",
        "00-xyz",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
    ] {
        let cx = extract([(TRACEPARENT, bad)]);
        assert!(fields(&cx).is_empty(), "{bad}");
    }
}

#[test]
fn without_a_provider_a_span_passes_its_parent_on() {
    let parent = extract([(TRACEPARENT, PARENT)]);
    let cx = start("x", Kind::Server, &parent, vec![attribute("mcp.tool", "t")]);
    assert_eq!(fields(&cx)[TRACEPARENT], PARENT);
    end(&cx, "success", false);
}

#[test]
fn the_temporal_header_round_trips_the_context() {
    let parent = extract([(TRACEPARENT, PARENT)]);
    let header = temporal_header(&parent).expect("a header");
    let back = from_temporal_header(&header.fields);
    assert_eq!(fields(&back)[TRACEPARENT], PARENT);
    assert!(temporal_header(&Context::new()).is_none());
    assert!(fields(&from_temporal_header(&HashMap::new())).is_empty());
}
