//! A real agent framework behind the gateway: pydantic-ai's AG-UI adapter
//! with its offline FunctionModel (`e2e/python/agent.py`, installed from PyPI
//! by `scripts/e2e-setup`), driven by the official `HttpAgent`.
//!
//! Needs `AGUI_E2E_PYTHON` (the venv's python; default `e2e/.venv/bin/python`)
//! and the node client (see `e2e_node.rs`); fails with a clear message when
//! they are missing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::common::*;
use agui_server::{GatewayConfig, SessionMode, config::parse_agent_flag};
use serde_json::{Value, json};

struct Agent {
    child: Child,
    url: String,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_agent() -> Agent {
    let python = std::env::var_os("AGUI_E2E_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| e2e_dir().join(".venv/bin/python"));
    assert!(
        python.is_file(),
        "pydantic-ai's venv python is missing at {} (AGUI_E2E_PYTHON); run scripts/e2e-setup",
        python.display()
    );
    let port = free_port();
    let child = Command::new(&python)
        .arg(e2e_dir().join("python/agent.py"))
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("cannot start the pydantic-ai agent");
    let mut agent = Agent {
        child,
        url: format!("http://127.0.0.1:{port}/"),
    };
    wait_listening(&mut agent.child, port, 30, "the pydantic-ai agent");
    agent
}

/// Replaces every id-like string (message and tool call ids, which
/// pydantic-ai draws at random) by its order of first appearance.
fn normalize_ids(v: &Value) -> Value {
    fn walk(v: &Value, map: &mut HashMap<String, usize>) -> Value {
        match v {
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, x)| {
                        let x = match (k.as_str(), x) {
                            ("id" | "toolCallId" | "parentMessageId", Value::String(s)) => {
                                let n = map.len();
                                json!(format!("id{}", map.entry(s.clone()).or_insert(n)))
                            }
                            _ => walk(x, map),
                        };
                        (k.clone(), x)
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(|x| walk(x, map)).collect()),
            other => other.clone(),
        }
    }
    walk(v, &mut HashMap::new())
}

#[tokio::test]
async fn http_agent_talks_to_pydantic_ai_through_the_gateway() {
    let agent = start_agent();
    let g = start(GatewayConfig {
        agents: vec![parse_agent_flag(&format!("py={}", agent.url), SessionMode::Client).unwrap()],
        ..GatewayConfig::default()
    })
    .await;
    let turns = json!([
        {"runId": "p1", "text": "hello"},
        {"runId": "p2", "text": "please use the tool"},
        {"runId": "p3", "text": "thanks"}
    ]);
    let via = node(json!({"op":"conversation","url":format!("{}/agents/py/run", g.base),"threadId":"py-1","turns":turns})).await;
    for t in via["turns"].as_array().unwrap() {
        assert_eq!(t["ok"], true, "{via}");
    }
    let direct =
        node(json!({"op":"conversation","url":agent.url,"threadId":"py-1","turns":turns})).await;
    assert_eq!(
        normalize_ids(&via["messages"]),
        normalize_ids(&direct["messages"])
    );
    assert_eq!(via["state"], direct["state"]);
    let (_, hist) = get_json(&format!("{}/threads/py-1/messages", g.base)).await;
    assert_eq!(hist["messages"], via["messages"]);
    let text = via["messages"].to_string();
    assert!(
        text.contains("Echo: hello") && text.contains("PLEASE USE THE TOOL"),
        "{text}"
    );
    // Every stored run ended well, with its lineage and input recorded.
    let (_, thread) = get_json(&format!("{}/threads/py-1", g.base)).await;
    let runs = thread["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert!(runs.iter().all(|r| r["status"] == "finished"));
    assert_eq!(runs[2]["parentRunId"], "p2");
    g.shutdown().await;
}
