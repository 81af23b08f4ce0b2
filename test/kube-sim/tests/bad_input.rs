//! Bad input gets the Status the real server sends, and leaves the store unchanged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kube_sim::{KubeSim, Options};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn raw(
    sim: &KubeSim,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, String, Value) {
    let mut s = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    let ct = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-type: ")
                .or_else(|| l.strip_prefix("Content-Type: "))
        })
        .unwrap_or_default()
        .to_owned();
    (code, ct, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn each_bad_request_gets_its_status() {
    let sim = KubeSim::start(Options {
        insecure_http: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let cms = "/api/v1/namespaces/default/configmaps";
    let cases: Vec<(&str, String, &str, &str, u16, &str)> = vec![
        (
            "POST",
            cms.into(),
            "application/json",
            "{not json",
            400,
            "BadRequest",
        ),
        (
            "POST",
            cms.into(),
            "application/yaml",
            "a: [unclosed",
            400,
            "BadRequest",
        ),
        (
            "POST",
            cms.into(),
            "application/json",
            r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}"#,
            400,
            "BadRequest",
        ),
        (
            "POST",
            cms.into(),
            "application/json",
            r#"{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"x"}}"#,
            400,
            "BadRequest",
        ),
        (
            "POST",
            cms.into(),
            "application/json",
            r#"{"metadata":{"name":"x","namespace":"other"}}"#,
            400,
            "BadRequest",
        ),
        (
            "POST",
            cms.into(),
            "application/json",
            r#"{"metadata":{"name":"Not_Valid"}}"#,
            422,
            "Invalid",
        ),
        (
            "POST",
            cms.into(),
            "application/json",
            r#"{"metadata":{}}"#,
            422,
            "Invalid",
        ),
        (
            "PUT",
            format!("{cms}/a"),
            "application/json",
            r#"{"metadata":{"name":"b"}}"#,
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{cms}/missing"),
            "application/json",
            "",
            404,
            "NotFound",
        ),
        (
            "GET",
            "/apis/nope.io/v1/things".into(),
            "application/json",
            "",
            404,
            "NotFound",
        ),
        (
            "PATCH",
            format!("{cms}/missing"),
            "text/plain",
            "x",
            404,
            "NotFound",
        ),
    ];
    for (method, path, ct, body, code, reason) in cases {
        let (got, content_type, status) = raw(&sim, method, &path, ct, body).await;
        assert_eq!(got, code, "{method} {path} {body}: {status}");
        assert_eq!(content_type, "application/json", "{method} {path}");
        assert_eq!(status["kind"], "Status", "{status}");
        assert_eq!(status["reason"], reason, "{method} {path} {body}: {status}");
        assert_eq!(status["code"], code);
    }
    // Nothing was stored.
    let (code, _, list) = raw(&sim, "GET", cms, "application/json", "").await;
    assert_eq!(code, 200);
    assert_eq!(list["items"].as_array().unwrap().len(), 0, "{list}");
    // A PATCH with an unknown content type on an existing object: 415.
    raw(
        &sim,
        "POST",
        cms,
        "application/json",
        r#"{"metadata":{"name":"a"}}"#,
    )
    .await;
    let (code, _, status) = raw(&sim, "PATCH", &format!("{cms}/a"), "text/plain", "x").await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
    let (code, _, _) = raw(&sim, "OPTIONS", &format!("{cms}/a"), "application/json", "").await;
    assert_eq!(code, 405);
}

#[tokio::test]
async fn anonymous_requests_are_forbidden_and_bad_tokens_unauthorized() {
    let sim = KubeSim::start(Options::default()).await.unwrap();
    let client = kube_sim::client_from_kubeconfig(&sim.kubeconfig_for_token("nope"))
        .await
        .unwrap();
    let err = client.apiserver_version().await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 401),
        "{err:?}"
    );
}
