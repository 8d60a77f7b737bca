//! Streaming blocks: opening rules, delta coalescing, the `cumulative` cap.

mod common;

use common::*;

async fn run(script: Script) -> Vec<Event> {
    let llm = FixtureLlm::start().await;
    llm.push(script);
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "go").await;
    sse.collect_until("context.updated", WAIT).await
}

fn markdown_deltas(evs: &[Event]) -> Vec<&Event> {
    evs.iter()
        .filter(|e| e.event == "content.block.delta" && e.data["field"] == "markdown")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_chunks_without_sentence_ends_are_coalesced() {
    let chunks: Vec<String> = (0..60).map(|i| format!("word{i} ")).collect();
    let evs = run(Script::Text(chunks.clone())).await;
    let deltas = markdown_deltas(&evs);
    assert!(!deltas.is_empty());
    assert!(
        deltas.len() <= 4,
        "{} deltas for 60 fast chunks",
        deltas.len()
    );
    let joined: String = deltas
        .iter()
        .map(|d| d.data["text"].as_str().unwrap())
        .collect();
    assert_eq!(joined, chunks.concat(), "increments add up");
    assert_eq!(
        deltas.last().unwrap().data["cumulative"],
        chunks.concat().as_str()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_closed_sentence_emits_a_delta() {
    let evs = run(Script::text(&[
        "One. ", "Two! ", "Three? ", "Four\n", "five",
    ]))
    .await;
    let deltas = markdown_deltas(&evs);
    assert!(
        deltas.len() >= 4,
        "{:?}",
        deltas.iter().map(|d| &d.data["text"]).collect::<Vec<_>>()
    );
    assert_eq!(
        deltas.last().unwrap().data["cumulative"],
        "One. Two! Three? Four\nfive"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blank_stream_opens_no_block() {
    let evs = run(Script::text(&["  ", "\n"])).await;
    let tys = ev_types(&evs);
    assert!(!tys.contains(&"content.block.started"), "{tys:?}");
    assert!(!tys.contains(&"content.block.delta"), "{tys:?}");
    let done = evs.iter().find(|e| e.event == "turn.completed").unwrap();
    let md: String = done.data["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["markdown"].as_str())
        .collect();
    assert!(md.trim().is_empty(), "{:?}", done.data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cumulative_is_capped_at_16000_chars_while_the_answer_is_whole() {
    let sentence = "This is a fairly long sentence for the cap test. ";
    let chunks: Vec<String> = (0..500).map(|_| sentence.to_string()).collect();
    let full = chunks.concat();
    assert!(full.chars().count() > 20_000);
    let evs = run(Script::Text(chunks)).await;
    for d in markdown_deltas(&evs) {
        let c = d.data["cumulative"].as_str().unwrap();
        assert!(c.chars().count() <= 16_000, "{}", c.chars().count());
    }
    let done = evs.iter().find(|e| e.event == "turn.completed").unwrap();
    let md: String = done.data["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["markdown"].as_str())
        .collect();
    assert_eq!(md, full);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_tokens_stop_still_completes_with_the_text_so_far() {
    let evs = run(Script::MaxTokens(vec!["Cut off mid".into()])).await;
    let term = evs
        .iter()
        .find(|e| TERMINALS.contains(&e.event.as_str()))
        .unwrap();
    assert!(
        term.data.to_string().contains("Cut off mid"),
        "{:?}",
        term.data
    );
}
