//! Upstreams in real deployments: HTTPS with a private CA, forwarded and
//! configured headers (whose secrets never leak), and CORS preflights.

use std::io::Write;
use std::sync::{Arc, Mutex};

use crate::common::*;
use agui_server::config::{ServeFile, parse_agent_flag, parse_header_name};
use agui_server::{GatewayConfig, SessionMode};
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// A well-behaved AG-UI answer for the input's thread and run.
fn sse_answer(input: &Value, text: &str) -> Response {
    let t = &input["threadId"];
    let r = &input["runId"];
    let events = [
        json!({"type":"RUN_STARTED","threadId":t,"runId":r}),
        json!({"type":"TEXT_MESSAGE_START","messageId":format!("a-{}", r.as_str().unwrap()),"role":"assistant"}),
        json!({"type":"TEXT_MESSAGE_CONTENT","messageId":format!("a-{}", r.as_str().unwrap()),"delta":text}),
        json!({"type":"TEXT_MESSAGE_END","messageId":format!("a-{}", r.as_str().unwrap())}),
        json!({"type":"RUN_FINISHED","threadId":t,"runId":r}),
    ];
    let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    ([("content-type", "text/event-stream")], Body::from(body)).into_response()
}

/// A self-signed CA and a server certificate for 127.0.0.1 and localhost.
struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "agui test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    Pki {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// Serves `app` over HTTPS with the given certificate; returns the port.
async fn serve_tls(app: Router, pki: &Pki) -> u16 {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = axum_server::tls_rustls::RustlsConfig::from_pem(
        pki.cert_pem.as_bytes().to_vec(),
        pki.key_pem.as_bytes().to_vec(),
    )
    .await
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = axum_server::from_tcp_rustls(listener, config);
    tokio::spawn(async move {
        let _ = server.serve(app.into_make_service()).await;
    });
    port
}

#[tokio::test]
async fn https_upstream_with_a_private_ca() {
    let pki = pki();
    let app = Router::new().route(
        "/agent",
        post(|body: axum::Json<Value>| async move { sse_answer(&body.0, "over TLS") }),
    );
    let port = serve_tls(app, &pki).await;
    let mut ca = tempfile::NamedTempFile::new().unwrap();
    ca.write_all(pki.ca_pem.as_bytes()).unwrap();
    let mut trusted = parse_agent_flag(
        &format!("tls=https://localhost:{port}/agent"),
        SessionMode::Client,
    )
    .unwrap();
    trusted.ca_file = Some(ca.path().to_owned());
    // The same upstream without the CA: its certificate is not trusted.
    let untrusted = parse_agent_flag(
        &format!("plain=https://localhost:{port}/agent"),
        SessionMode::Client,
    )
    .unwrap();
    let g = start(GatewayConfig {
        agents: vec![trusted, untrusted],
        ..GatewayConfig::default()
    })
    .await;
    let (status, frames, _) = run(&g.base, "tls", &input("t", "r1", "hi")).await;
    assert_eq!(status, 200);
    let types: Vec<&str> = frames.iter().map(Frame::ty).collect();
    assert_eq!(
        types,
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(frames[2].data["delta"], "over TLS");
    let (_, frames, _) = run(&g.base, "plain", &input("u", "r1", "hi")).await;
    let last = frames.last().unwrap();
    assert_eq!(last.ty(), "RUN_ERROR");
    assert!(
        matches!(
            last.data["code"].as_str(),
            Some("upstream_unreachable" | "upstream_error")
        ),
        "{last:?}"
    );
    g.shutdown().await;
}

#[test]
fn a_bad_ca_file_is_a_clear_configuration_error() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(b"not a certificate").unwrap();
    let mut a = parse_agent_flag("x=https://localhost:1/", SessionMode::Client).unwrap();
    a.ca_file = Some(f.path().to_owned());
    let store: agui_store::Store = agui_store::Store::memory();
    let e = agui_server::Gateway::new(
        store,
        GatewayConfig {
            agents: vec![a],
            ..GatewayConfig::default()
        },
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("agent `x`"), "{e}");
    assert!(e.to_string().contains("CA file"), "{e}");
}

const SECRET: &str = "sk-upstream-7f3e9a1c";
const CLIENT_SECRET: &str = "client-token-5b2d";

#[tokio::test]
async fn headers_forwarded_by_allow_list_and_secrets_never_leak() {
    logged();
    // The upstream requires the agent's bearer token and records what it got.
    let seen: Arc<Mutex<Vec<HeaderMap>>> = Arc::default();
    let seen2 = seen.clone();
    let app = Router::new().route(
        "/agent",
        post(move |headers: HeaderMap, body: axum::Json<Value>| {
            let seen = seen2.clone();
            async move {
                seen.lock().unwrap().push(headers.clone());
                let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
                if auth != Some(&format!("Bearer {SECRET}")) {
                    return (StatusCode::UNAUTHORIZED, "no").into_response();
                }
                if body.0["forwardedProps"]["fail"] == true {
                    return (StatusCode::BAD_GATEWAY, format!("failing with {SECRET}"))
                        .into_response();
                }
                sse_answer(&body.0, "authorized")
            }
        }),
    );
    let url = serve_upstream(app).await;
    let file = ServeFile::parse(&format!(
        "forward_headers = [\"x-request-id\"]\n[agents.secure]\nurl = \"{url}/agent\"\nforward_headers = [\"x-tenant\"]\n[agents.secure.headers]\nauthorization = \"Bearer ${{AGUI_TEST_UPSTREAM_KEY}}\"\n"
    ))
    .unwrap();
    let env = |k: &str| (k == "AGUI_TEST_UPSTREAM_KEY").then(|| SECRET.to_owned());
    let agents = file.agents_with_env(SessionMode::Client, &env).unwrap();
    assert!(!format!("{agents:?}").contains(SECRET));
    let g = start(GatewayConfig {
        agents,
        forward_headers: file.forward_header_names().unwrap(),
        cors_origins: vec!["http://app.example".into()],
        cors_headers: vec![parse_header_name("c", "x-app-version").unwrap()],
        copilotkit_prefix: Some(agui_server::config::copilotkit_prefix("/ck").unwrap()),
        ..GatewayConfig::default()
    })
    .await;
    let post = |body: Value| {
        client()
            .post(format!("{}/agents/secure/run", g.base))
            .header("x-request-id", "req-1")
            .header("x-tenant", "acme")
            .header("x-not-listed", "nope")
            // The client's own Authorization is not on the list, and the
            // agent's configured header would win anyway.
            .header("authorization", format!("Bearer {CLIENT_SECRET}"))
            .json(&body)
            .send()
    };
    let resp = post(input("t", "r1", "hi")).await.unwrap();
    let text = resp.text().await.unwrap();
    let frames = parse_sse(&text);
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED", "{text}");
    {
        let seen = seen.lock().unwrap();
        let h = &seen[0];
        assert_eq!(h["x-request-id"], "req-1");
        assert_eq!(h["x-tenant"], "acme");
        assert!(h.get("x-not-listed").is_none());
        assert_eq!(h.get_all("authorization").iter().count(), 1);
        assert_eq!(
            h["authorization"],
            HeaderValue::from_str(&format!("Bearer {SECRET}")).unwrap()
        );
        assert_eq!(h["content-type"], "application/json");
    }
    // A failing upstream: the error says what failed, not with what.
    let mut failing = input("t", "r2", "again");
    failing["forwardedProps"] = json!({"fail": true});
    let resp = post(failing).await.unwrap();
    let text = resp.text().await.unwrap();
    assert!(text.contains("RUN_ERROR"), "{text}");
    wait_run_end(&g.base, "t").await;
    // Nothing the gateway stores, exports, answers or logs holds a secret.
    let mut seen_text = text;
    for path in [
        "/threads/t/events",
        "/threads/t/events?compact=snapshot",
        "/threads/t/messages",
        "/threads/t",
        "/threads",
        "/threads/t/runs/r1/artifact",
        "/threads/t/session",
        "/threads/t/session?format=ndjson",
        "/ck/info",
        "/metrics",
    ] {
        let resp = client()
            .get(format!("{}{path}", g.base))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
        seen_text.push_str(&resp.text().await.unwrap());
    }
    let head = g.store.thread("default", "t").await.unwrap().last_seq;
    let stored = g.store.read_range("default", "t", 1, head).await.unwrap();
    for e in &stored {
        seen_text.push_str(e.event.json());
    }
    let logged = String::from_utf8_lossy(&logged().lock().unwrap()).into_owned();
    assert!(
        logged.contains("run started"),
        "the log sink caught nothing"
    );
    for secret in [SECRET, CLIENT_SECRET] {
        assert!(!seen_text.contains(secret), "{secret} leaked: {seen_text}");
        assert!(!logged.contains(secret), "{secret} logged");
    }
    // CORS: the preflight of a browser client sending the forwarded and
    // configured headers is allowed, on every route.
    for (method, path) in [
        ("POST", "/agents/secure/run"),
        ("POST", "/agents/secure/connect"),
        ("GET", "/threads/t/events"),
        ("DELETE", "/threads/t"),
        ("POST", "/threads/t/runs/r1/stop"),
        ("POST", "/threads/import"),
        ("GET", "/threads/t/session"),
        ("GET", "/ck/info"),
        ("POST", "/ck/agent/secure/run"),
        ("POST", "/ck/agent/secure/connect"),
        ("POST", "/ck/agent/secure/stop/t"),
    ] {
        let resp = client()
            .request(reqwest::Method::OPTIONS, format!("{}{path}", g.base))
            .header("origin", "http://app.example")
            .header("access-control-request-method", method)
            .header(
                "access-control-request-headers",
                "content-type,x-request-id,x-tenant,x-app-version,last-event-id",
            )
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
        let allowed = resp.headers()["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .to_owned();
        for h in ["x-request-id", "x-tenant", "x-app-version", "last-event-id"] {
            assert!(allowed.contains(h), "{path}: {allowed}");
        }
        assert_eq!(
            resp.headers()["access-control-allow-origin"],
            "http://app.example"
        );
    }
    g.shutdown().await;
}
