//! Unit tests of `meter::body`.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use http_body_util::{BodyExt, Channel};

use super::*;
use crate::meter::RequestBody;
use crate::meter::drain;
use crate::providers::{Operation, ProviderKind};

#[derive(Clone, Default)]
struct Sink {
    done: Arc<Mutex<Vec<Measurement>>>,
    gaps: Arc<Mutex<Vec<Duration>>>,
    overheads: Arc<Mutex<Vec<Duration>>>,
}

impl Recorder for Sink {
    fn chunk_gap(&mut self, gap: Duration) {
        self.gaps.lock().expect("lock").push(gap);
    }
    fn chunk_overhead(&mut self, overhead: Duration) {
        self.overheads.lock().expect("lock").push(overhead);
    }
    fn finish(self: Box<Self>, m: Measurement) {
        self.done.lock().expect("lock").push(m);
    }
}

impl Sink {
    fn only(&self) -> Measurement {
        let done = self.done.lock().expect("lock");
        assert_eq!(done.len(), 1, "exactly one measurement per request");
        done[0].clone()
    }
}

fn facts(stream: bool) -> RequestFacts {
    RequestFacts {
        route: Arc::from("r"),
        route_labels: Default::default(),
        provider: ProviderKind::Openai,
        operation: Some(Operation::ChatCompletions),
        request_model: Some("m".into()),
        stream,
        tenant: None,
        session: None,
        server_address: Arc::from("127.0.0.1"),
        server_port: 80,
        request_body: RequestBody::Sniffed,
        service_tier: None,
        start_wall: SystemTime::now(),
        start: Instant::now(),
    }
}

fn chunk(text: &str) -> Bytes {
    Bytes::from(format!(
        "data: {{\"id\":\"c\",\"model\":\"m-1\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n"
    ))
}

/// The finish chunk, the usage chunk and `[DONE]`, as a stream ends.
const USAGE: &str = "data: {\"id\":\"c\",\"model\":\"m-1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: {\"id\":\"c\",\"model\":\"m-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":42,\"total_tokens\":49}}\n\ndata: [DONE]\n\n";

fn metered(
    stream: bool,
    content_type: &str,
    idle: Option<Duration>,
) -> (
    Sink,
    http_body_util::channel::Sender<Bytes, BoxError>,
    MeteredBody<Channel<Bytes, BoxError>>,
) {
    let sink = Sink::default();
    let mut meter = Meter::new(facts(stream), Box::new(sink.clone()));
    let parser = chat_parser(content_type, 1 << 20);
    meter.on_head(200, content_type == "text/event-stream", parser, None);
    let (tx, rx) = Channel::new(8);
    (sink, tx, MeteredBody::new(rx, meter, idle, None))
}

/// An OpenAI chat parser for `content_type` with frames up to `max`
/// bytes, as `Meter::on_head` takes it.
fn chat_parser(content_type: &str, max: usize) -> Result<Parser, Unmetered> {
    Parser::new(
        ProviderKind::Openai,
        Some(Operation::ChatCompletions),
        content_type,
        max,
    )
    .ok_or(Unmetered::UnknownFormat(content_type.into()))
}

/// A stream the tokenizer would count: input tokens only when its head
/// was written upstream (or a response head came).
fn counted_input(sent: Option<bool>, head: bool) -> Option<u64> {
    let tokenizer = tokenize::Tokenizer::start(true);
    let sink = Sink::default();
    let mut f = facts(true);
    f.request_model = Some("gpt-4o-mini".into());
    let mut meter = Meter::new(f, Box::new(sink.clone()));
    let body = br#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Count the words in this sentence."}]}"#;
    let plan = tokenizer
        .plan(Some("gpt-4o-mini"), Some(Bytes::from_static(body)))
        .expect("gpt-4o-mini has an encoding");
    meter.count_tokens_with(plan);
    if let Some(sent) = sent {
        meter.track_sent(sent);
    }
    if head {
        meter.on_head(500, false, Err(Unmetered::UnknownFormat("x".into())), None);
        meter.finish(End::Eos);
    } else {
        meter.fail(502, "upstream_unreachable");
    }
    assert!(
        tokenizer.flush(Duration::from_secs(10)),
        "the tokenizer finished"
    );
    let m = sink.only();
    assert!(m.output_tokens.is_none(), "no output without a response");
    m.usage.input
}

#[test]
fn input_is_estimated_only_for_a_request_that_left() {
    assert_eq!(
        counted_input(Some(false), false),
        None,
        "never sent: nothing"
    );
    assert!(
        counted_input(Some(true), false).is_some_and(|n| n > 0),
        "sent, then failed"
    );
    assert!(
        counted_input(Some(false), true).is_some(),
        "a response head came"
    );
    assert!(counted_input(None, false).is_some(), "untracked: as before");
}

/// A fleet ledger that answers only when told to.
#[derive(Default)]
struct Pending {
    asked: Mutex<Vec<(LedgerKey, super::super::ledger::ClaimDone)>>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pending")
    }
}

impl SharedLedger for Pending {
    fn claim(&self, key: LedgerKey, done: super::super::ledger::ClaimDone) {
        self.asked.lock().expect("lock").push((key, done));
    }
}

impl Pending {
    fn answer(&self, answer: Option<bool>) -> LedgerKey {
        let (key, done) = self.asked.lock().expect("lock").pop().expect("a claim");
        done(answer);
        key
    }
}

/// A chat stream with usage and id `c`, counted once through `ledger`.
async fn counted_once(ledger: Arc<Ledger>) -> Sink {
    let sink = Sink::default();
    let mut meter = Meter::new(facts(true), Box::new(sink.clone()));
    meter.count_once_with(ledger, false);
    let parser = chat_parser("text/event-stream", 1 << 20);
    meter.on_head(200, true, parser, None);
    let (mut tx, rx) = Channel::<Bytes, BoxError>::new(8);
    let body = MeteredBody::new(rx, meter, None, None);
    tx.send_data(chunk("Hi")).await.expect("send");
    tx.send_data(Bytes::from_static(USAGE.as_bytes()))
        .await
        .expect("send");
    drop(tx);
    body.collect().await.expect("body");
    sink
}

#[tokio::test]
async fn the_fleets_answer_decides_before_the_measurement_is_recorded() {
    let fleet = Arc::new(Pending::default());
    let ledger = Arc::new(Ledger::new(8).with_shared(fleet.clone()));
    let sink = counted_once(ledger.clone()).await;
    assert!(
        sink.done.lock().expect("lock").is_empty(),
        "nothing is recorded before the store answers"
    );
    let key = fleet.answer(Some(false));
    assert_eq!(key, LedgerKey::new("openai", "response", "c"));
    let m = sink.only();
    assert_eq!(
        m.counted,
        Some(Counted::Repeat),
        "another replica counted it"
    );
    assert_eq!(m.shared_state, Some(SharedState::Store));
    assert_eq!(
        (m.usage.input, m.output_tokens),
        (None, None),
        "no usage twice"
    );
    assert!(
        !ledger.first(&key),
        "the answer is remembered in process too"
    );

    // The store does not answer: this replica decides alone, once.
    let ledger = Arc::new(Ledger::new(8).with_shared(fleet.clone()));
    let sink = counted_once(ledger.clone()).await;
    fleet.answer(None);
    let m = sink.only();
    assert_eq!(m.counted, Some(Counted::First), "first in this process");
    assert_eq!(m.shared_state, Some(SharedState::Local));
    assert_eq!(m.output_tokens, Some(42));
    let sink = counted_once(ledger).await;
    fleet.answer(None);
    assert_eq!(sink.only().counted, Some(Counted::Repeat));
}

#[tokio::test]
async fn stream_folds_into_one_measurement_with_exact_bytes() {
    let (sink, mut tx, body) = metered(true, "text/event-stream", None);
    let sent = [
        chunk("Hel"),
        chunk("lo"),
        chunk("!"),
        Bytes::from_static(USAGE.as_bytes()),
    ];
    let expected: Vec<u8> = sent.iter().flat_map(|b| b.to_vec()).collect();
    let producer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(60)).await;
        for b in sent {
            tx.send_data(b).await.expect("send");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let got = body.collect().await.expect("body").to_bytes();
    producer.await.expect("producer");
    assert_eq!(
        got.as_ref(),
        expected.as_slice(),
        "bytes pass through unchanged"
    );
    let m = sink.only();
    assert_eq!(m.outcome, Outcome::Complete);
    assert_eq!(m.output_tokens, Some(42), "provider usage is authoritative");
    assert_eq!(m.token_source, Some(TokenSource::Provider));
    assert_eq!(m.usage.input, Some(7));
    assert_eq!(m.content_chunks, 3);
    assert_eq!(m.response_model.as_deref(), Some("m-1"));
    let ttft = m.time_to_first_token.expect("ttft");
    assert!(
        ttft >= Duration::from_millis(60),
        "ttft {ttft:?} covers the 60 ms wait"
    );
    let last = m.time_to_last_token.expect("last token");
    assert!(
        last - ttft >= Duration::from_millis(40),
        "two 20 ms gaps between content chunks"
    );
    assert_eq!(
        sink.gaps.lock().expect("lock").len(),
        2,
        "one gap per content chunk after the first"
    );
    assert!(m.max_gap.expect("max gap") >= Duration::from_millis(20));
    assert_eq!(m.response_bytes, expected.len() as u64);
}

fn delta(field: &str, text: &str) -> Bytes {
    Bytes::from(format!(
        "data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"{field}\":\"{text}\"}}}}]}}\n\n"
    ))
}

#[tokio::test]
async fn reasoning_then_text_keeps_both_clocks() {
    let (sink, mut tx, body) = metered(true, "text/event-stream", None);
    let producer = tokio::spawn(async move {
        // A role-only frame at once: it starts no clock.
        tx.send_data(delta("content", "")).await.expect("send");
        tokio::time::sleep(Duration::from_millis(40)).await;
        tx.send_data(delta("reasoning_content", "Hmm"))
            .await
            .expect("send");
        tx.send_data(delta("reasoning_content", " so"))
            .await
            .expect("send");
        tokio::time::sleep(Duration::from_millis(60)).await;
        tx.send_data(delta("content", "Hi")).await.expect("send");
    });
    body.collect().await.expect("body");
    producer.await.expect("producer");
    let m = sink.only();
    let ttft = m.time_to_first_token.expect("ttft");
    assert!(
        ttft >= Duration::from_millis(40),
        "ttft {ttft:?}: the role-only frame started no clock"
    );
    assert_eq!(
        m.reasoning.time_to_first_reasoning,
        Some(ttft),
        "the first output was reasoning"
    );
    let visible = m.reasoning.time_to_first_visible.expect("visible ttft");
    assert!(
        visible >= ttft + Duration::from_millis(60),
        "visible {visible:?} after 60 ms of thinking (ttft {ttft:?})"
    );
    assert_eq!(m.reasoning.thinking_time(), Some(visible - ttft));
    assert_eq!(m.reasoning.tokens, Some(2), "two reasoning deltas");
    assert_eq!(m.reasoning.source, Some(TokenSource::Chunks));
    assert!(m.reasoning.estimated());
    assert_eq!(m.content_chunks, 3);
}

#[tokio::test]
async fn provider_reasoning_count_wins_and_text_only_has_no_thinking_time() {
    let (sink, mut tx, body) = metered(true, "text/event-stream", None);
    let usage = "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":9,\"completion_tokens_details\":{\"reasoning_tokens\":0}}}\n\n";
    let producer = tokio::spawn(async move {
        tx.send_data(chunk("Hi")).await.expect("send");
        tx.send_data(Bytes::from_static(usage.as_bytes()))
            .await
            .expect("send");
    });
    body.collect().await.expect("body");
    producer.await.expect("producer");
    let m = sink.only();
    assert_eq!(
        m.reasoning.time_to_first_visible, m.time_to_first_token,
        "text only: visible TTFT is TTFT"
    );
    assert_eq!(m.reasoning.time_to_first_reasoning, None);
    assert_eq!(
        m.reasoning.thinking_time(),
        None,
        "no reasoning, no thinking time"
    );
    assert_eq!(m.reasoning.tokens, Some(0), "the provider's count");
    assert_eq!(m.reasoning.source, Some(TokenSource::Provider));
}

#[tokio::test]
async fn frames_ready_together_leave_as_one_and_are_each_metered() {
    let (sink, mut tx, mut body) = metered(true, "text/event-stream", None);
    // Sent together, then the one client frame they leave as.
    async fn one_frame(
        tx: &mut http_body_util::channel::Sender<Bytes, BoxError>,
        body: &mut MeteredBody<Channel<Bytes, BoxError>>,
        sent: &[Bytes],
    ) -> Vec<u8> {
        for b in sent {
            tx.send_data(b.clone()).await.expect("send");
        }
        let frame = body.frame().await.expect("frame").expect("ok");
        frame.data_ref().map(|d| d.to_vec()).unwrap_or_default()
    }
    let sent = [chunk("a"), chunk("b"), chunk("c")];
    assert_eq!(
        one_frame(&mut tx, &mut body, &sent).await,
        sent.concat(),
        "one write for what was ready"
    );
    let again = [chunk("d"), chunk("e")];
    assert_eq!(
        one_frame(&mut tx, &mut body, &again).await,
        again.concat(),
        "the next frames ready together join anew, nothing left of the first"
    );
    assert_eq!(
        one_frame(&mut tx, &mut body, &[chunk("f")]).await,
        chunk("f").to_vec(),
        "a lone frame goes out as it is"
    );
    drop(tx);
    assert!(body.frame().await.is_none(), "then the end");
    assert_eq!(
        sink.only().content_chunks,
        6,
        "each upstream chunk metered on its own"
    );
}

#[tokio::test]
async fn dropped_body_is_client_cancelled_with_partial_counts() {
    let (sink, mut tx, mut body) = metered(true, "text/event-stream", None);
    tx.send_data(chunk("a")).await.expect("send");
    let frame = body.frame().await.expect("frame").expect("ok");
    assert!(frame.is_data());
    drop(body);
    let m = sink.only();
    assert_eq!(m.outcome, Outcome::ClientCancelled);
    assert_eq!(m.content_chunks, 1);
    assert_eq!(m.output_tokens, Some(1));
    assert_eq!(
        m.token_source,
        Some(TokenSource::Chunks),
        "no usage: estimated from chunks"
    );
}

#[tokio::test]
async fn upstream_abort_is_an_upstream_error() {
    let (sink, mut tx, body) = metered(true, "text/event-stream", None);
    tx.send_data(chunk("a")).await.expect("send");
    tx.abort(Box::new(std::io::Error::other("reset")));
    assert!(body.collect().await.is_err(), "the client sees the break");
    let m = sink.only();
    assert_eq!(m.outcome, Outcome::UpstreamError);
    assert_eq!(m.error_type.as_deref(), Some("upstream_aborted"));
    assert_eq!(m.content_chunks, 1);
}

#[test]
fn a_failure_waits_one_poll_so_the_bytes_before_it_are_written() {
    // Data and the break arrive together: the data goes out, then one
    // `Pending` (with a wake-up) lets the server flush, then the error.
    let (sink, mut tx, body) = metered(true, "text/event-stream", None);
    let mut body = std::pin::pin!(body);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    assert!(
        tx.try_send(Frame::data(chunk("a"))).is_ok(),
        "room for one chunk"
    );
    tx.abort(Box::new(std::io::Error::other("reset")));
    let first = body.as_mut().poll_frame(&mut cx);
    assert!(
        matches!(&first, Poll::Ready(Some(Ok(f))) if f.is_data()),
        "the data first: {first:?}"
    );
    assert!(
        body.as_mut().poll_frame(&mut cx).is_pending(),
        "one turn to flush"
    );
    let last = body.as_mut().poll_frame(&mut cx);
    assert!(
        matches!(last, Poll::Ready(Some(Err(_)))),
        "then the break: {last:?}"
    );
    assert_eq!(sink.only().error_type.as_deref(), Some("upstream_aborted"));
}

#[tokio::test]
async fn idle_timeout_ends_the_stream() {
    let (sink, mut tx, body) = metered(true, "text/event-stream", Some(Duration::from_millis(50)));
    tx.send_data(chunk("a")).await.expect("send");
    let err = body.collect().await.expect_err("idle timeout");
    assert!(err.to_string().contains("idle timeout"), "{err}");
    let m = sink.only();
    assert_eq!(m.outcome, Outcome::UpstreamTimeout);
    assert_eq!(m.error_type.as_deref(), Some("upstream_idle_timeout"));
    drop(tx);
}

#[test]
fn proxy_504_before_the_head_is_an_upstream_timeout() {
    for (status, outcome) in [
        (504, Outcome::UpstreamTimeout),
        (502, Outcome::UpstreamError),
    ] {
        let sink = Sink::default();
        let mut meter = Meter::new(facts(true), Box::new(sink.clone()));
        meter.fail(status, "x");
        assert_eq!(sink.only().outcome, outcome, "status {status}");
    }
}

fn draining(
    drains: &Arc<Drains>,
    max_bytes: u64,
) -> (
    Sink,
    http_body_util::channel::Sender<Bytes, BoxError>,
    MeteredBody<Channel<Bytes, BoxError>>,
) {
    let (sink, tx, body) = metered(true, "text/event-stream", None);
    let limits = DrainLimits {
        timeout: Duration::from_secs(5),
        max_bytes,
    };
    (sink, tx, body.drain_on_disconnect(drains.clone(), limits))
}

async fn idle(drains: &Drains) {
    tokio::time::timeout(Duration::from_secs(5), drains.wait_idle())
        .await
        .expect("drains finish");
}

#[tokio::test]
async fn a_body_dropped_after_the_drain_cut_is_recorded_as_cut_by_tokentap() {
    for cut in [Cut::GraceExpired, Cut::Forced] {
        // A route that drains after its client leaves: a cut is not
        // a client leaving, and nothing is left to read on for.
        let drains = Drains::new(4);
        let (sink, mut tx, mut body) = draining(&drains, 1 << 20);
        let shutdown = Shutdown::new();
        body.meter.watch_shutdown(&shutdown);
        assert_eq!(shutdown.open().streams, 1, "counted as open");
        tx.send_data(chunk("a")).await.expect("send");
        body.frame().await.expect("frame").expect("ok");
        shutdown.cut(cut);
        drop(body);
        assert_eq!(drains.active(), 0, "not handed to a drain");
        let m = sink.only();
        assert_eq!(
            m.outcome,
            Outcome::Shutdown,
            "{cut:?}: not client_cancelled"
        );
        assert_eq!(m.error_type.as_deref(), Some(cut.error_type()));
        assert_eq!(m.error_cause.as_deref(), Some(cut.cause()));
        assert_eq!(m.content_chunks, 1, "what was relayed is kept");
        assert_eq!(shutdown.open().streams, 0, "no longer open");
    }
}

#[tokio::test]
async fn a_body_dropped_before_any_cut_is_the_client_leaving() {
    let (sink, mut tx, mut body) = metered(true, "text/event-stream", None);
    let shutdown = Shutdown::new();
    body.meter.watch_shutdown(&shutdown);
    tx.send_data(chunk("a")).await.expect("send");
    body.frame().await.expect("frame").expect("ok");
    drop(body);
    assert_eq!(sink.only().outcome, Outcome::ClientCancelled);
    assert_eq!(shutdown.open().streams, 0);
}

#[tokio::test]
async fn dropped_body_drains_to_the_usage_when_asked() {
    let drains = Drains::new(4);
    let (sink, mut tx, mut body) = draining(&drains, 1 << 20);
    tx.send_data(chunk("a")).await.expect("send");
    body.frame().await.expect("frame").expect("ok");
    drop(body);
    assert_eq!(drains.active(), 1, "the drain is counted");
    assert!(
        sink.done.lock().expect("lock").is_empty(),
        "nothing recorded while draining"
    );
    tx.send_data(chunk("b")).await.expect("send");
    tx.send_data(Bytes::from_static(USAGE.as_bytes()))
        .await
        .expect("send");
    drop(tx);
    idle(&drains).await;
    let m = sink.only();
    assert_eq!(m.outcome, Outcome::ClientCancelled);
    assert_eq!(m.error_type.as_deref(), Some("client_cancelled_drained"));
    assert_eq!(
        m.output_tokens,
        Some(42),
        "usage sent after the client left"
    );
    assert_eq!(m.usage.input, Some(7));
    assert_eq!(m.content_chunks, 2);
}

#[tokio::test]
async fn drain_stops_at_its_byte_bound() {
    let drains = Drains::new(4);
    let (sink, mut tx, body) = draining(&drains, 10);
    drop(body);
    tx.send_data(chunk("a")).await.expect("send");
    idle(&drains).await;
    let m = sink.only();
    assert_eq!(
        m.error_type.as_deref(),
        Some("client_cancelled_drain_too_large")
    );
    assert_eq!(m.content_chunks, 1, "what was read is counted");
    drop(tx);
}

#[tokio::test]
async fn drains_past_the_cap_are_refused_and_stop_ends_the_rest() {
    let drains = Drains::new(1);
    let (first, _tx1, body1) = draining(&drains, 1 << 20);
    let (second, _tx2, body2) = draining(&drains, 1 << 20);
    drop(body1);
    drop(body2);
    assert_eq!(
        second.only().error_type.as_deref(),
        Some(drain::DRAIN_REFUSED),
        "a drain past upstream.max_drains cancels at once"
    );
    assert_eq!(drains.active(), 1);
    drains.stop();
    idle(&drains).await;
    assert_eq!(
        first.only().error_type.as_deref(),
        Some("client_cancelled_drain_shutdown")
    );
}

#[tokio::test]
async fn finished_body_does_not_drain() {
    let drains = Drains::new(4);
    let (sink, tx, body) = draining(&drains, 1 << 20);
    drop(tx);
    let mut body = body;
    assert!(body.frame().await.is_none(), "the end");
    drop(body);
    assert_eq!(drains.active(), 0, "nothing left to drain");
    assert_eq!(
        sink.only().outcome,
        Outcome::Incomplete,
        "an empty 200 stream has no terminal event"
    );
}

/// Send `chunks` through a metered body to its end: the client gets
/// exactly their bytes.
async fn stream_through(
    sink_body: MeteredBody<Channel<Bytes, BoxError>>,
    mut tx: http_body_util::channel::Sender<Bytes, BoxError>,
    chunks: Vec<Bytes>,
) {
    let expected: Vec<u8> = chunks.iter().flat_map(|b| b.to_vec()).collect();
    let producer = tokio::spawn(async move {
        for c in chunks {
            tx.send_data(c).await.expect("send");
        }
    });
    let got = sink_body.collect().await.expect("body").to_bytes();
    producer.await.expect("producer");
    assert_eq!(got.as_ref(), expected.as_slice(), "bytes unchanged");
}

#[tokio::test]
async fn a_malformed_event_is_skipped_and_metering_goes_on() {
    let (sink, tx, body) = metered(true, "text/event-stream", None);
    let sent = vec![
        chunk("a"),
        Bytes::from_static(b"data: {not json\n\n"),
        chunk("b"),
        Bytes::from_static(USAGE.as_bytes()),
    ];
    stream_through(body, tx, sent).await;
    let m = sink.only();
    assert_eq!(
        (m.outcome, m.error_type.as_deref()),
        (Outcome::Complete, None),
        "the terminal event arrived: complete, with the count"
    );
    assert_eq!(m.malformed_events, 1, "the bad event is counted");
    assert_eq!(m.content_chunks, 2, "content after the bad event counts");
    assert_eq!(
        m.output_tokens,
        Some(42),
        "usage after the bad event counts"
    );
}

#[tokio::test]
async fn malformed_events_without_a_terminal_event_are_malformed() {
    let (sink, tx, body) = metered(true, "text/event-stream", None);
    let sent = vec![chunk("a"), Bytes::from_static(b"data: {not json\n\n")];
    stream_through(body, tx, sent).await;
    let m = sink.only();
    assert_eq!(
        (m.outcome, m.error_type.as_deref()),
        (Outcome::Malformed, Some("malformed_events")),
        "the terminal event may have been the bad one"
    );
    assert_eq!(m.malformed_events, 1);
    assert_eq!(m.content_chunks, 1);
}

#[tokio::test]
async fn a_stream_without_its_terminal_event_is_incomplete() {
    let (sink, tx, body) = metered(true, "text/event-stream", None);
    let sent = vec![chunk("a"), chunk("b")];
    stream_through(body, tx, sent).await;
    let m = sink.only();
    assert_eq!(
        (m.outcome, m.error_type.as_deref()),
        (Outcome::Incomplete, Some(MISSING_TERMINAL))
    );
    assert!(m.outcome.is_error(), "incomplete counts as an error");
    assert_eq!(m.content_chunks, 2, "what arrived is still metered");
    assert_eq!(m.malformed_events, 0);
}

#[tokio::test]
async fn an_empty_whole_body_is_not_held_to_the_stream_rule() {
    let (sink, tx, body) = metered(false, "application/json", None);
    stream_through(body, tx, vec![]).await;
    assert_eq!(sink.only().outcome, Outcome::Complete);
}

#[tokio::test]
async fn an_oversized_frame_still_ends_metering() {
    let sink = Sink::default();
    let mut meter = Meter::new(facts(true), Box::new(sink.clone()));
    let parser = chat_parser("text/event-stream", 256);
    meter.on_head(200, true, parser, None);
    let (tx, rx) = Channel::new(8);
    let body = MeteredBody::new(rx, meter, None, None);
    let big = Bytes::from(format!("data: {}\n\n", "x".repeat(400)));
    let sent = vec![
        chunk("a"),
        big,
        chunk("b"),
        Bytes::from_static(b"data: [DONE]\n\n"),
    ];
    stream_through(body, tx, sent).await;
    let m = sink.only();
    assert_eq!(
        (m.outcome, m.error_type.as_deref()),
        (Outcome::Malformed, Some("malformed_body"))
    );
    assert_eq!(
        m.content_chunks, 1,
        "metering stopped at the oversized frame"
    );
}

#[tokio::test]
async fn one_frame_in_overhead_sample_is_timed_and_the_wait_for_upstream_is_not() {
    let (sink, mut tx, mut body) = metered(true, "text/event-stream", None);
    let frames = 2 * OVERHEAD_SAMPLE + 1;
    for i in 0..frames {
        tx.send_data(chunk(&i.to_string())).await.expect("send");
        let f = body.frame().await.expect("a frame").expect("data");
        assert!(f.is_data(), "frame {i} is data");
        // The upstream's pause is before the read, not overhead.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    drop(tx);
    assert!(body.frame().await.is_none(), "body ends");
    let overheads = sink.overheads.lock().expect("lock").clone();
    assert_eq!(
        overheads.len(),
        3,
        "frames 0, {OVERHEAD_SAMPLE} and {} of {frames} are sampled: {overheads:?}",
        2 * OVERHEAD_SAMPLE
    );
    assert!(
        overheads.iter().all(|d| *d < Duration::from_millis(500)),
        "overhead is the wrapper's own time: {overheads:?}"
    );
    assert_eq!(sink.only().content_chunks, u64::from(frames));
}

#[tokio::test]
async fn the_last_frame_is_timed_before_the_measurement_is_recorded() {
    let sink = Sink::default();
    let mut meter = Meter::new(facts(false), Box::new(sink.clone()));
    let parser = chat_parser("application/json", 1 << 20);
    meter.on_send();
    meter.on_head(200, false, parser, None);
    let json = br#"{"id":"x","model":"m-2","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
    let whole = http_body_util::Full::new(Bytes::from_static(json));
    let body = MeteredBody::new(whole, meter, None, None);
    let got = body.collect().await.expect("body").to_bytes();
    assert_eq!(got.as_ref(), json.as_slice(), "bytes unchanged");
    assert_eq!(
        sink.overheads.lock().expect("lock").len(),
        1,
        "a one-frame body has its frame timed, though it ends the body"
    );
    let m = sink.only();
    let sent = m
        .request_overhead
        .expect("request overhead once on_send ran");
    assert!(sent <= m.duration, "{sent:?} within {:?}", m.duration);
}

#[tokio::test]
async fn whole_json_body_has_ttft_at_completion() {
    let (sink, mut tx, body) = metered(false, "application/json", None);
    let json = br#"{"id":"x","model":"m-2","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
    let producer = tokio::spawn(async move {
        tx.send_data(Bytes::from_static(&json[..20]))
            .await
            .expect("send");
        tokio::time::sleep(Duration::from_millis(30)).await;
        tx.send_data(Bytes::from_static(&json[20..]))
            .await
            .expect("send");
    });
    body.collect().await.expect("body");
    producer.await.expect("producer");
    let m = sink.only();
    assert_eq!(m.outcome, Outcome::Complete);
    assert_eq!(m.output_tokens, Some(1));
    assert_eq!(m.time_to_first_token, Some(m.duration));
    assert_eq!(m.finish_reasons, ["stop"]);
    assert_eq!(m.time_per_output_token(), None, "no TPOT for whole bodies");
}

#[tokio::test]
async fn error_status_is_an_upstream_error_with_the_provider_type() {
    let sink = Sink::default();
    let mut meter = Meter::new(facts(false), Box::new(sink.clone()));
    let parser = Parser::new(ProviderKind::Openai, None, "application/json", 1 << 20)
        .ok_or(Unmetered::UnknownFormat(String::new()));
    meter.on_head(429, false, parser, None);
    let json = br#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
    let body = MeteredBody::new(
        http_body_util::Full::new(Bytes::from_static(json)),
        meter,
        None,
        None,
    );
    body.collect().await.expect("body");
    let m = sink.only();
    assert_eq!(m.outcome, Outcome::UpstreamError);
    assert_eq!(m.status, 429);
    assert!(m.error_type.is_some());
}
